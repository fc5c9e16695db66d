"""Routes on a town's lane graph: networkx A* over lanes, then waypoints at 1-2 m spacing.

The search runs on `Town.graph` (successor edges weighted by lane length, lane-change edges by
`carla_gym.sim.town.builders.LANE_CHANGE_COST`) with a Euclidean heuristic between lane starts,
from a temporary start node standing for the rest of the start lane. A lane change is driven as a
minimum-jerk blend over `LANE_CHANGE_LENGTH` between the two lanes; a path whose lane changes do
not fit (the lane ends first, or the goal lies behind) is replaced by the next shortest simple
path (networkx ``shortest_simple_paths``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain, islice

import networkx as nx
import numpy as np

from carla_gym.sim.town.network import OFF_NETWORK_DISTANCE, Location, RoadOption, Town, locate

LANE_CHANGE_LENGTH = 12.0
"""Distance along the road over which a route moves to the next lane [m] (this project's choice)."""

MAX_ALTERNATIVES = 50
"""Simple paths tried, shortest first, when the A* path's lane changes do not fit (this project's choice)."""

_START = -1
"""Temporary graph node: the rest of the start lane."""

_GOAL = -2
"""Temporary graph node: the goal point."""


@dataclass(frozen=True, eq=False)
class Route:
    """A planned route.

    Attributes:
        waypoints: Positions (M, 2) float64 [m] on lane centrelines (blended during lane
            changes), equally spaced along the route: at most the requested spacing apart.
        yaw: Heading of the route at each waypoint (M,) float64 [rad].
        lanes: Lane id at each waypoint (M,) int64.
        options: `RoadOption` at each waypoint (M,) int8.
        lane_path: The lanes driven, in order: a path in `Town.graph`.
        length: Route length [m].
    """

    waypoints: np.ndarray
    yaw: np.ndarray
    lanes: np.ndarray
    options: np.ndarray
    lane_path: tuple[int, ...]
    length: float


def point_at(town: Town, lane: int, s: float) -> np.ndarray:
    """Position (2,) [m] at arc length ``s`` [m] along lane ``lane`` (clamped to the lane)."""
    ln = town.lanes[lane]
    return np.array([np.interp(s, ln.s, ln.points[:, 0]), np.interp(s, ln.s, ln.points[:, 1])])


def _snap(town: Town, xy: object, what: str) -> Location:
    xy = np.asarray(xy, dtype=np.float64)
    if xy.shape != (2,) or not np.isfinite(xy).all():
        raise ValueError(f"{what}={xy.tolist()!r}: must be two finite numbers (x, y) [m]")
    loc = locate(town, xy)
    gap = float(np.hypot(*(xy - point_at(town, loc.lane, loc.s))))
    if gap > OFF_NETWORK_DISTANCE:
        raise ValueError(f"{what}={xy.tolist()!r}: {gap:.1f} m from the nearest lane of {town.name}, "
                         f"off the road network (must be within {OFF_NETWORK_DISTANCE} m)")
    return loc


def _stretch(town: Town, lane: int, s0: float, s1: float) -> np.ndarray:
    """Points of ``lane`` from arc length s0 to s1 (both ends included, interior lane points between)."""
    ln = town.lanes[lane]
    inner = ln.points[(ln.s > s0) & (ln.s < s1)]
    return np.concatenate([point_at(town, lane, s0)[None], inner, point_at(town, lane, s1)[None]])


def _trace(town: Town, path: list[int], s0: float, s_goal: float):
    """Raw polyline, lane labels and options of driving ``path``; None where a lane change does not fit.

    The label of a point is the lane of the stretch that starts there.
    """
    pts, labels, opts = [], [], []
    cur = s0
    for u, v in zip(path, path[1:], strict=False):
        kind = town.graph.edges[u, v]["kind"]
        lu, lv = town.lanes[u], town.lanes[v]
        if kind == "follow":
            part = _stretch(town, u, cur, lu.length)
            pts.append(part), labels.append(np.full(len(part), u)), opts.append(np.full(len(part), lu.option))
            cur = 0.0
            continue
        ratio = lv.length / lu.length
        end = cur + LANE_CHANGE_LENGTH
        if end > lu.length or (v == path[-1] and end * ratio > s_goal):
            return None
        s = np.linspace(cur, end, math.ceil(LANE_CHANGE_LENGTH) + 1)
        tau = (s - cur) / LANE_CHANGE_LENGTH
        w = (10 * tau**3 - 15 * tau**4 + 6 * tau**5)[:, None]
        a = np.stack([np.interp(s, lu.s, lu.points[:, k]) for k in (0, 1)], axis=1)
        b = np.stack([np.interp(s * ratio, lv.s, lv.points[:, k]) for k in (0, 1)], axis=1)
        option = RoadOption.CHANGELANELEFT if kind == "left" else RoadOption.CHANGELANERIGHT
        pts.append((1 - w) * a + w * b), labels.append(np.where(w[:, 0] < 0.5, u, v))
        opts.append(np.full(len(s), option))
        cur = end * ratio
    if s_goal < cur:
        return None
    part = _stretch(town, path[-1], cur, s_goal)
    pts.append(part), labels.append(np.full(len(part), path[-1]))
    opts.append(np.full(len(part), town.lanes[path[-1]].option))
    pts, labels, opts = np.concatenate(pts), np.concatenate(labels), np.concatenate(opts)
    keep = np.concatenate([np.hypot(*np.diff(pts, axis=0).T) > 1e-9, [True]])  # of duplicates keep the later
    return pts[keep], labels[keep], opts[keep]


def _search_graph(town: Town, l0: int, s0: float, lg: int, sg: float) -> nx.DiGraph:
    """A copy of the lane graph with temporary start and goal nodes.

    The start node stands for the rest of lane ``l0`` from ``s0``: it leads to l0's successors
    (weight: the rest of l0) and, where a lane change still fits on l0, to its neighbours. The
    goal node is reached from ``lg`` (weight ``sg``) and, instead of the lane changes into lg, from
    lg's neighbours where a lane change fits before ``sg``.
    """
    graph = town.graph.copy()
    lane0 = town.lanes[l0]
    graph.add_node(_START, start=point_at(town, l0, s0))
    graph.add_node(_GOAL, start=point_at(town, lg, sg))
    change_fits = s0 + LANE_CHANGE_LENGTH <= lane0.length
    for v, data in town.graph[l0].items():
        if data["kind"] == "follow":
            graph.add_edge(_START, v, weight=lane0.length - s0)
        elif change_fits:
            at_goal = (s0 + LANE_CHANGE_LENGTH) * town.lanes[v].length / lane0.length
            if v != lg:
                graph.add_edge(_START, v, weight=data["weight"])
            elif at_goal <= sg:
                graph.add_edge(_START, _GOAL, weight=data["weight"] + sg)
    graph.add_edge(lg, _GOAL, weight=sg)
    for nb in (town.lanes[lg].left, town.lanes[lg].right):
        if nb >= 0:
            graph.remove_edge(nb, lg)  # a change into the goal lane must end before the goal: via nb -> goal
        if nb >= 0 and LANE_CHANGE_LENGTH * town.lanes[lg].length / town.lanes[nb].length <= sg:
            graph.add_edge(nb, _GOAL, weight=town.graph.edges[nb, lg]["weight"] + sg)
    return graph


def plan_route(town: Town, start: Location | object, goal_xy: object, spacing: float = 2.0) -> Route:
    """Plan a route from ``start`` to the lane point nearest ``goal_xy``.

    Args:
        town: The town.
        start: A `Location` (lane and s are used) or a position (x, y) [m], snapped to the
            nearest lane.
        goal_xy: Goal position (x, y) [m], snapped to the nearest lane.
        spacing: Largest distance between consecutive waypoints [m], in [0.5, 5]; the route is cut
            into ceil(length / spacing) equal steps, so steps lie in (spacing / 2, spacing] once the
            route is longer than ``spacing``.

    Returns:
        The route (a single waypoint when start and goal coincide).

    Raises:
        ValueError: If ``spacing`` is out of range, the start lane or s does not exist, the start
            or the goal lies farther than `OFF_NETWORK_DISTANCE` from every lane, or the goal
            cannot be reached from the start.
    """
    if not 0.5 <= spacing <= 5.0:
        raise ValueError(f"spacing={spacing!r}: must be in [0.5, 5] [m]")
    if isinstance(start, Location):
        if not 0 <= start.lane < len(town.lanes) or not 0.0 <= start.s <= town.lanes[start.lane].length:
            raise ValueError(f"start={start!r}: lane must be in [0, {len(town.lanes)}) and s within the lane")
    else:
        start = _snap(town, start, "start")
    goal = _snap(town, goal_xy, "goal_xy")
    l0, s0, lg, sg = start.lane, float(start.s), goal.lane, float(goal.s)

    traced = _trace(town, [l0], s0, sg) if l0 == lg and sg >= s0 else None
    path = [l0]
    if traced is None:
        graph = _search_graph(town, l0, s0, lg, sg)
        target = graph.nodes[_GOAL]["start"]

        def heuristic(u: int, _: int) -> float:
            return float(np.hypot(*(graph.nodes[u]["start"] - target)))

        try:
            best = nx.astar_path(graph, _START, _GOAL, heuristic=heuristic, weight="weight")
        except nx.NetworkXNoPath:
            raise ValueError(f"goal_xy={np.asarray(goal_xy).tolist()!r}: unreachable from the start lane {l0} "
                             f"in {town.name}") from None
        alternatives = islice(nx.shortest_simple_paths(graph, _START, _GOAL, weight="weight"), MAX_ALTERNATIVES)
        for candidate in chain([best], alternatives):
            path = [l0, *candidate[1:-1]]
            if path[-1] != lg:
                path.append(lg)
            traced = _trace(town, path, s0, sg)
            if traced is not None:
                break
        else:
            raise ValueError(f"goal_xy={np.asarray(goal_xy).tolist()!r}: no drivable route from the start lane {l0} "
                             f"in {town.name} (lane changes do not fit)")
    pts, labels, opts = traced
    cum = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(pts, axis=0).T))])
    n = math.ceil(cum[-1] / spacing - 1e-9)
    s = np.linspace(0.0, cum[-1], n + 1)
    way = np.stack([np.interp(s, cum, pts[:, 0]), np.interp(s, cum, pts[:, 1])], axis=1)
    idx = np.clip(np.searchsorted(cum, s, side="right") - 1, 0, len(pts) - 1)
    if n == 0:
        yaw = np.array([float(np.interp(s0, town.lanes[l0].s, town.lanes[l0].yaw))])
    else:
        d = np.gradient(way, axis=0)
        yaw = np.arctan2(d[:, 1], d[:, 0])
    return Route(waypoints=way, yaw=yaw, lanes=labels[idx].astype(np.int64), options=opts[idx].astype(np.int8),
                 lane_path=tuple(path), length=float(cum[-1]))
