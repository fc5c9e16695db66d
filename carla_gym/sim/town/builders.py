"""Build a `Town` from a small layout: nodes, and roads between them with lane counts.

A node where three or more roads meet is a junction; a node with two roads is a bend (or a change
of lane count). Roads are cut back from each node by the node's radius and the gap is bridged by
connector lanes: cubic Hermite curves from an incoming lane's last point and heading to an
outgoing lane's first point and heading, so successors join with no gap and the same heading.
At a junction a turn is STRAIGHT within `STRAIGHT_ANGLE` of the incoming heading, else RIGHT or
LEFT. A left turn leaves from the innermost lane, a right turn from the outermost, each into every
lane of the outgoing road; straight on joins lane k to lane k (extra outgoing lanes from the
outermost incoming lane; surplus incoming lanes merge into the outermost outgoing lane); a middle
lane with no straight on turns like its nearer edge lane. So every lane is entered at its start
and left at its end, with no lane change. No U-turns: every node needs two roads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.town.network import Lane, Marking, RoadOption, SpawnPoints, Town

STRAIGHT_ANGLE = math.radians(35.0)
"""Turns within this of straight on are STRAIGHT [rad]. CARLA local planner ``_compute_connection``
default threshold (35 deg)."""

JUNCTION_MARGIN = 4.0
"""Node radius beyond the widest road's half width [m] (this project's choice): room to turn."""

LANE_CHANGE_COST = 10.0
"""Graph weight of a lane change [m] (this project's choice). Not below the widest lane (4 m) so the
Euclidean A* heuristic stays admissible."""

MIN_ROAD_LENGTH = 20.0
"""Shortest road lane between two nodes after cutting back [m] (this project's choice): room for a
lane change (`carla_gym.sim.town.routing.LANE_CHANGE_LENGTH`) and a spawn point."""

SIDEWALK_WIDTH = 2.0
"""Sidewalk width [m] (this project's choice)."""

CROSSWALK_WIDTH = 3.0
"""Crosswalk width [m] (this project's choice)."""

SPAWN_MARGIN = 15.0
"""No spawn point nearer than this to a lane's ends [m] (this project's choice; lanes shorter than
twice this get one spawn point in the middle). Longer than a route's lane change
(`carla_gym.sim.town.routing.LANE_CHANGE_LENGTH`, 12 m), so a goal at a spawn point on a lane
entered only by a lane change is still reachable."""

URBAN_SPEED = 30.0 / C.KMH_PER_MS
"""Default speed limit [m/s]: 30 km/h (this project's choice for town streets)."""

_REF_STEP = 0.5
"""Sampling of road reference lines before offsetting [m]."""


@dataclass(frozen=True)
class RoadSpec:
    """A road between nodes ``a`` and ``b``.

    Attributes:
        a: Start node index (``forward`` lanes run from ``a`` to ``b``).
        b: End node index.
        forward: Lanes from a to b, 1 to 4.
        backward: Lanes from b to a, 0 (a one-way road) to 4.
        speed_limit: Speed limit [m/s].
        lane_width: Lane width [m].
        via: Points between a and b [m], for curved roads.
        sidewalks: Whether sidewalks run beside the outer lanes.
    """

    a: int
    b: int
    forward: int = 1
    backward: int = 1
    speed_limit: float = URBAN_SPEED
    lane_width: float = C.LANE_WIDTH
    via: tuple[tuple[float, float], ...] = ()
    sidewalks: bool = True

    @property
    def half_width(self) -> float:
        """Half the road's width about its reference line [m] (the wider side for two-way roads)."""
        if self.backward == 0:
            return self.forward * self.lane_width / 2
        return max(self.forward, self.backward) * self.lane_width


@dataclass(frozen=True)
class TownSpec:
    """A town layout.

    Attributes:
        name: Town name.
        nodes: Node positions [m].
        roads: The roads.
        lights: Junction nodes with traffic lights; None means every junction off the roundabout.
        roundabout: Nodes on a roundabout ring (never lit).
        radius: Node radius overrides [m] as ``(node, radius)`` pairs (gentle highway bends).
        spawn_spacing: Distance between spawn points along a lane [m].
    """

    name: str
    nodes: tuple[tuple[float, float], ...]
    roads: tuple[RoadSpec, ...]
    lights: tuple[int, ...] | None = None
    roundabout: tuple[int, ...] = ()
    radius: tuple[tuple[int, float], ...] = field(default=())
    spawn_spacing: float = 30.0


def resample(poly: np.ndarray, step: float) -> np.ndarray:
    """Resample a polyline (K, 2) at uniform arc-length spacing of at most ``step`` [m].

    The first and last points are kept exactly; n = ceil(length / step) segments of equal length.

    Examples:
        >>> resample(np.array([[0.0, 0.0], [2.5, 0.0]]), 1.0)[:, 0].tolist()
        [0.0, 0.8333333333333334, 1.6666666666666667, 2.5]
    """
    seg = np.hypot(*np.diff(poly, axis=0).T)
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    n = max(1, math.ceil(cum[-1] / step - 1e-9))
    s = np.linspace(0.0, cum[-1], n + 1)
    out = np.stack([np.interp(s, cum, poly[:, 0]), np.interp(s, cum, poly[:, 1])], axis=1)
    out[0], out[-1] = poly[0], poly[-1]
    return out


def _cut(poly: np.ndarray, s0: float, s1: float) -> np.ndarray:
    """The part of polyline ``poly`` between arc lengths s0 < s1, sampled at `_REF_STEP`."""
    cum = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(poly, axis=0).T))])
    inner = (cum > s0) & (cum < s1)
    s = np.concatenate([[s0], cum[inner], [s1]])
    pts = np.stack([np.interp(s, cum, poly[:, 0]), np.interp(s, cum, poly[:, 1])], axis=1)
    return resample(pts, _REF_STEP)


def _yaw_of(points: np.ndarray) -> np.ndarray:
    """Heading at each point of a polyline [rad]: central differences, one-sided at the ends."""
    d = np.gradient(points, axis=0)
    return np.arctan2(d[:, 1], d[:, 0])


def _offset(ref: np.ndarray, offset: float) -> np.ndarray:
    """Polyline ``ref`` shifted by ``offset`` [m] to the right of its direction."""
    yaw = _yaw_of(ref)
    return ref + offset * np.stack([-np.sin(yaw), np.cos(yaw)], axis=1)


def _arclength(points: np.ndarray) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(points, axis=0).T))])


def hermite(p0: np.ndarray, yaw0: float, p1: np.ndarray, yaw1: float) -> tuple[np.ndarray, np.ndarray]:
    """A connector: cubic Hermite curve from ``p0`` heading ``yaw0`` to ``p1`` heading ``yaw1``.

    Tangent magnitudes equal the chord, so a straight connection is an exact straight line.

    Returns:
        ``(points, yaw)``: (K, 2) [m] at uniform spacing of at most 1 m (ends exact) and the
        curve's analytic heading (K,) [rad] (``yaw[0] == yaw0``, ``yaw[-1] == yaw1``).
    """
    chord = float(np.hypot(*(p1 - p0)))
    m0 = chord * np.array([math.cos(yaw0), math.sin(yaw0)])
    m1 = chord * np.array([math.cos(yaw1), math.sin(yaw1)])

    def curve(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        u = u[:, None]
        pos = ((2 * u**3 - 3 * u**2 + 1) * p0 + (u**3 - 2 * u**2 + u) * m0 + (-2 * u**3 + 3 * u**2) * p1
               + (u**3 - u**2) * m1)
        vel = (6 * u**2 - 6 * u) * p0 + (3 * u**2 - 4 * u + 1) * m0 + (6 * u - 6 * u**2) * p1 + (3 * u**2 - 2 * u) * m1
        return pos, vel

    dense_u = np.linspace(0.0, 1.0, max(64, int(chord * 8)))
    cum = _arclength(curve(dense_u)[0])
    n = max(1, math.ceil(cum[-1] - 1e-9))
    u = np.interp(np.linspace(0.0, cum[-1], n + 1), cum, dense_u)
    pos, vel = curve(u)
    pos[0], pos[-1] = p0, p1
    yaw = np.arctan2(vel[:, 1], vel[:, 0])
    yaw[0], yaw[-1] = yaw0, yaw1
    return pos, yaw


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi


def build_town(spec: TownSpec) -> Town:
    """Build the lanes, graph, sidewalks, crosswalks, spawn points and lights of a layout.

    Deterministic: the same spec gives bit-identical arrays.

    Raises:
        ValueError: On a bad layout: a node index out of range, lane counts outside 1-4 (0-4
            backward), a node with fewer than two roads, or a road too short between its nodes.
    """
    nodes = np.asarray(spec.nodes, dtype=np.float64)
    ends: list[list[tuple[int, bool]]] = [[] for _ in nodes]  # (road, road starts here)
    for r, road in enumerate(spec.roads):
        if not (0 <= road.a < len(nodes) and 0 <= road.b < len(nodes)) or road.a == road.b:
            raise ValueError(f"road {r} nodes ({road.a}, {road.b}): must be two different nodes in [0, {len(nodes)})")
        if not (1 <= road.forward <= 4 and 0 <= road.backward <= 4):
            raise ValueError(f"road {r} lanes ({road.forward}, {road.backward}): forward 1-4, backward 0-4")
        ends[road.a].append((r, True))
        ends[road.b].append((r, False))
    for n, e in enumerate(ends):
        if len(e) < 2:
            raise ValueError(f"node {n} of {spec.name} has {len(e)} road(s): every node needs at least 2")
    override = dict(spec.radius)
    radius = [override.get(n, max(spec.roads[r].half_width for r, _ in e) + JUNCTION_MARGIN)
              for n, e in enumerate(ends)]

    lanes: list[dict] = []
    refs, groups = [], {}  # groups[(road, forward)] = lane ids inner -> outer
    for r, road in enumerate(spec.roads):
        full = np.array([nodes[road.a], *road.via, nodes[road.b]], dtype=np.float64)
        length = _arclength(full)[-1]
        if length - radius[road.a] - radius[road.b] < MIN_ROAD_LENGTH:
            raise ValueError(f"road {r} ({road.a}->{road.b}) of {spec.name}: {length:.1f} m leaves under "
                             f"{MIN_ROAD_LENGTH} m between its nodes' radii")
        ref = _cut(full, radius[road.a], length - radius[road.b])
        refs.append(ref)
        for forward, count in ((True, road.forward), (False, road.backward)):
            base = ref if forward else ref[::-1].copy()
            ids = []
            for k in range(count):
                off = (k + 0.5) * road.lane_width if road.backward else (k - (count - 1) / 2) * road.lane_width
                pts = resample(_offset(base, off), 1.0)
                ids.append(len(lanes))
                lanes.append(dict(points=pts, yaw=_yaw_of(pts), width=road.lane_width, speed_limit=road.speed_limit,
                                  road=r, junction=-1, option=RoadOption.LANEFOLLOW,
                                  left_marking=Marking.SOLID if k == 0 else Marking.BROKEN,
                                  right_marking=Marking.SOLID if k == count - 1 else Marking.BROKEN))
            groups[(r, forward)] = ids
    n_road_lanes = len(lanes)
    left = [-1] * n_road_lanes
    right = [-1] * n_road_lanes
    for ids in groups.values():
        for i, j in zip(ids, ids[1:], strict=False):
            right[i], left[j] = j, i

    junctions = tuple(n for n, e in enumerate(ends) if len(e) >= 3)
    successors: dict[int, list[int]] = {}
    for n, e in enumerate(ends):
        incoming = [groups[(r, not starts)] for r, starts in e if groups.get((r, not starts))]
        outgoing = [groups[(r, starts)] for r, starts in e if groups.get((r, starts))]
        in_roads = [r for r, starts in e if groups.get((r, not starts))]
        out_roads = [r for r, starts in e if groups.get((r, starts))]
        for ri, lin in zip(in_roads, incoming, strict=True):
            pairs, turns = [], {}
            for ro, lout in zip(out_roads, outgoing, strict=True):
                if ri == ro:
                    continue
                delta = _wrap(lanes[lout[0]]["yaw"][0] - lanes[lin[0]]["yaw"][-1])
                if len(e) < 3:
                    option = RoadOption.LANEFOLLOW
                elif abs(delta) < STRAIGHT_ANGLE:
                    option = RoadOption.STRAIGHT
                else:
                    option = RoadOption.RIGHT if delta > 0 else RoadOption.LEFT
                turns[option] = lout
                if option == RoadOption.LEFT:
                    pairs += [(lin[0], b, option) for b in lout]
                elif option == RoadOption.RIGHT:
                    pairs += [(lin[-1], b, option) for b in lout]
                else:
                    pairs += [(a, lout[min(k, len(lout) - 1)], option) for k, a in enumerate(lin)]
                    pairs += [(lin[-1], b, option) for b in lout[len(lin):]]
            served = {a for a, _, _ in pairs}
            for k, a in enumerate(lin):  # a middle lane with no straight on: it turns too
                if a not in served:
                    option = RoadOption.LEFT if (k < len(lin) / 2 and RoadOption.LEFT in turns) or (
                        RoadOption.RIGHT not in turns) else RoadOption.RIGHT
                    pairs.append((a, turns[option][min(k, len(turns[option]) - 1)], option))
            for a, b, option in pairs:
                la, lb = lanes[a], lanes[b]
                pts, yaw = hermite(la["points"][-1], float(la["yaw"][-1]), lb["points"][0], float(lb["yaw"][0]))
                cid = len(lanes)
                lanes.append(dict(points=pts, yaw=yaw, width=min(la["width"], lb["width"]),
                                  speed_limit=min(la["speed_limit"], lb["speed_limit"]), road=-1,
                                  junction=n if len(e) >= 3 else -1, option=option,
                                  left_marking=Marking.NONE, right_marking=Marking.NONE))
                successors.setdefault(a, []).append(cid)
                successors[cid] = [b]
    left += [-1] * (len(lanes) - n_road_lanes)
    right += [-1] * (len(lanes) - n_road_lanes)

    built = tuple(
        Lane(id=i, points=d["points"], yaw=d["yaw"], s=_arclength(d["points"]), width=d["width"],
             speed_limit=d["speed_limit"], successors=tuple(successors.get(i, ())), left=left[i], right=right[i],
             road=d["road"], junction=d["junction"], option=d["option"], left_marking=d["left_marking"],
             right_marking=d["right_marking"])
        for i, d in enumerate(lanes)
    )
    graph = nx.DiGraph()
    for lane in built:
        graph.add_node(lane.id, start=lane.points[0], length=lane.length)
    for lane in built:
        for succ in lane.successors:
            graph.add_edge(lane.id, succ, weight=lane.length, kind="follow")
        for side, other in (("left", lane.left), ("right", lane.right)):
            if other >= 0:
                graph.add_edge(lane.id, other, weight=LANE_CHANGE_COST, kind=side)

    sidewalks, crosswalks = [], []
    for r, road in enumerate(spec.roads):
        if not road.sidewalks:
            continue
        outer = [(groups[(r, True)][-1], 1.0)]
        outer.append((groups[(r, False)][-1], 1.0) if road.backward else (groups[(r, True)][0], -1.0))
        for lane_id, side in outer:
            lane = built[lane_id]
            walk = lane.points + side * (lane.width + SIDEWALK_WIDTH) / 2 * np.stack(
                [-np.sin(lane.yaw), np.cos(lane.yaw)], axis=1)
            sidewalks.append(walk)
        for node, idx, sign in ((road.a, 0, 1.0), (road.b, -1, -1.0)):
            if node not in junctions or node in spec.roundabout:
                continue
            ref = refs[r]
            direction = sign * (ref[1] - ref[0] if idx == 0 else ref[-1] - ref[-2])
            direction /= np.hypot(*direction)
            normal = np.array([-direction[1], direction[0]])
            centre = ref[idx] + direction * CROSSWALK_WIDTH / 2
            span = road.half_width + SIDEWALK_WIDTH / 2
            crosswalks.append([centre - span * normal, centre + span * normal])

    spawn = [[], [], [], []]
    for lane in built[:n_road_lanes]:
        count = max(1, int((lane.length - 2 * SPAWN_MARGIN) // spec.spawn_spacing) + 1)
        first = SPAWN_MARGIN if lane.length >= 2 * SPAWN_MARGIN else lane.length / 2
        for s in first + spec.spawn_spacing * np.arange(count):
            j = min(int(np.searchsorted(lane.s, s, side="right")) - 1, len(lane.s) - 2)
            t = (s - lane.s[j]) / (lane.s[j + 1] - lane.s[j])
            spawn[0].append(lane.points[j] + t * (lane.points[j + 1] - lane.points[j]))
            d = lane.points[j + 1] - lane.points[j]
            spawn[1].append(math.atan2(d[1], d[0]))
            spawn[2].append(lane.id)
            spawn[3].append(s)

    lit = [n for n in (junctions if spec.lights is None else spec.lights) if n not in spec.roundabout]
    light_junction = np.full(len(built), -1, dtype=np.int64)
    light_phase = np.full(len(built), -1, dtype=np.int64)
    light_phases = np.zeros(len(built), dtype=np.int64)
    for n in lit:
        if n not in junctions:
            raise ValueError(f"lights at node {n} of {spec.name}: not a junction; junctions are {junctions}")
        arms = [(groups[(r, not starts)], built[groups[(r, not starts)][0]].yaw[-1])
                for r, starts in ends[n] if groups.get((r, not starts))]
        axis = arms[0][1]
        phase = [0 if abs(math.sin(yaw - axis)) < math.sin(STRAIGHT_ANGLE) else 1 for _, yaw in arms]
        for (ids, _), p in zip(arms, phase, strict=True):
            light_junction[ids], light_phase[ids], light_phases[ids] = n, p, max(phase) + 1

    points = np.concatenate([lane.points for lane in built])
    return Town(
        name=spec.name, lanes=built, graph=graph, points=points,
        point_lane=np.concatenate([np.full(len(lane.points), lane.id, dtype=np.int64) for lane in built]),
        point_index=np.concatenate([np.arange(len(lane.points), dtype=np.int64) for lane in built]),
        sidewalks=tuple(sidewalks), sidewalk_width=SIDEWALK_WIDTH,
        crosswalks=np.asarray(crosswalks, dtype=np.float64).reshape(-1, 2, 2), crosswalk_width=CROSSWALK_WIDTH,
        spawn_points=SpawnPoints(xy=np.asarray(spawn[0], dtype=np.float64).reshape(-1, 2),
                                 yaw=np.asarray(spawn[1], dtype=np.float64),
                                 lane=np.asarray(spawn[2], dtype=np.int64), s=np.asarray(spawn[3], dtype=np.float64)),
        junctions=junctions, roundabout=tuple(spec.roundabout), light_junction=light_junction,
        light_phase=light_phase, light_phases=light_phases,
        extent=(float(points[:, 0].min()), float(points[:, 1].min()), float(points[:, 0].max()),
                float(points[:, 1].max())),
    )
