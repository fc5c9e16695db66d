"""A town's road network as arrays: lanes, markings, sidewalks, crosswalks, spawn points, lights.

A `Town` is built once (see `carla_gym.sim.town.builders`) and never changes. Every lane is a
centreline polyline sampled at uniform spacing of at most 1 m (first and last points exact), so a
lane's last point is its successors' first point. Frame as the rest of the simulator
(`carla_gym.sim.constants`): x, y seen from above with y to the right of x, yaw = atan2(dy, dx)
[rad] (positive turning right), positive lateral offsets to the right; traffic drives on the right.

The geometry is a procedural analogue, not CARLA's: only the names and the character of CARLA's
towns carry over (CARLA's town catalogue).
"""

from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import numpy as np


class RoadOption(enum.IntEnum):
    """What a route does at a waypoint. Names and values of CARLA's ``agents.navigation`` RoadOption."""

    VOID = -1
    LEFT = 1
    RIGHT = 2
    STRAIGHT = 3
    LANEFOLLOW = 4
    CHANGELANELEFT = 5
    CHANGELANERIGHT = 6


class Marking(enum.IntEnum):
    """Paint along a lane edge."""

    NONE = 0
    BROKEN = 1
    SOLID = 2


class Light(enum.IntEnum):
    """State of the traffic light at the end of a lane (`NONE` where the lane has no light)."""

    NONE = -1
    GREEN = 0
    YELLOW = 1
    RED = 2


GREEN_TIME = 10.0
"""Green time of each phase [s] (this project's choice, a short urban cycle)."""

YELLOW_TIME = 3.0
"""Yellow time after each green [s] (this project's choice)."""

ALL_RED_TIME = 2.0
"""All-red clearance after each yellow [s] (this project's choice)."""

OFF_NETWORK_DISTANCE = 10.0
"""A point farther than this from every lane centreline [m] is off the network (this project's
choice: about three lane widths, so a goal on a sidewalk or a verge still snaps to the road)."""


@dataclass(frozen=True, eq=False)
class Lane:
    """One lane: a directed centreline.

    Attributes:
        id: Lane id, its index in `Town.lanes`.
        points: Centreline (K, 2) float64 [m], uniform spacing of at most 1 m, K >= 2.
        yaw: Heading at each point (K,) float64 [rad].
        s: Arc length at each point (K,) float64 [m], ``s[0] == 0``.
        width: Lane width [m].
        speed_limit: Speed limit [m/s].
        successors: Ids of the lanes that continue this one (their first point is this one's last).
        left: Id of the same-direction neighbour on the left, -1 if none.
        right: Id of the same-direction neighbour on the right, -1 if none.
        road: Index of the road this lane belongs to, -1 for a connector lane.
        junction: Node index of the junction a connector lane crosses, -1 for a road lane.
        option: `RoadOption` of driving this lane: LANEFOLLOW on roads and through bends, LEFT /
            RIGHT / STRAIGHT through a junction.
        left_marking: `Marking` along the left edge.
        right_marking: `Marking` along the right edge.
    """

    id: int
    points: np.ndarray
    yaw: np.ndarray
    s: np.ndarray
    width: float
    speed_limit: float
    successors: tuple[int, ...]
    left: int
    right: int
    road: int
    junction: int
    option: RoadOption
    left_marking: Marking
    right_marking: Marking

    @property
    def length(self) -> float:
        """Length of the centreline [m]."""
        return float(self.s[-1])

    @property
    def is_connector(self) -> bool:
        """Whether this lane crosses a junction or a bend (connects two road lanes)."""
        return self.road < 0


@dataclass(frozen=True, eq=False)
class SpawnPoints:
    """Places where a vehicle may start: on road lanes, away from junctions.

    Attributes:
        xy: Positions (S, 2) float64 [m] (on the lane centreline).
        yaw: Headings (S,) float64 [rad] (the lane's).
        lane: Lane ids (S,) int64.
        s: Arc lengths along the lane (S,) float64 [m].
    """

    xy: np.ndarray
    yaw: np.ndarray
    lane: np.ndarray
    s: np.ndarray

    def __len__(self) -> int:
        """Number of spawn points."""
        return len(self.lane)


@dataclass(frozen=True, eq=False)
class Town:
    """A built town. Immutable; shared through `carla_gym.sim.town.get_town`'s cache.

    Attributes:
        name: Town name (``"Town01"`` ...).
        lanes: All lanes, ``lanes[i].id == i``: road lanes first, then connector lanes.
        graph: ``networkx.DiGraph`` over lane ids. Edge ``kind`` ``"follow"`` (to a successor,
            ``weight`` the source lane's length [m]) or ``"left"`` / ``"right"`` (lane change to
            a neighbour, ``weight`` `LANE_CHANGE_COST`).
        points: All lane points stacked (P, 2) float64 [m], for nearest-lane queries.
        point_lane: Lane id of each stacked point (P,) int64.
        point_index: Index of each stacked point within its lane (P,) int64.
        sidewalks: Sidewalk centrelines, each (K, 2) float64 [m], beside the outer lanes.
        sidewalk_width: Sidewalk width [m].
        crosswalks: Crossings (C, 2, 2) float64 [m]: the two ends of each crossing's centreline,
            across a road where it meets a junction.
        crosswalk_width: Crosswalk width [m].
        spawn_points: Where vehicles may start.
        junctions: Node indices that are junctions (three roads or more).
        roundabout: Node indices on a roundabout ring.
        light_junction: Junction whose light stands at each lane's end (L,) int64, -1 for none.
        light_phase: Phase index of that light (L,) int64 (phase p is green from
            p * (GREEN + YELLOW + ALL_RED) into each cycle), -1 for none.
        light_phases: Number of phases of the cycle at each lane's light (L,) int64, 0 for none.
        extent: ``(xmin, ymin, xmax, ymax)`` of all lane points [m].
    """

    name: str
    lanes: tuple[Lane, ...]
    graph: nx.DiGraph
    points: np.ndarray
    point_lane: np.ndarray
    point_index: np.ndarray
    sidewalks: tuple[np.ndarray, ...]
    sidewalk_width: float
    crosswalks: np.ndarray
    crosswalk_width: float
    spawn_points: SpawnPoints
    junctions: tuple[int, ...]
    roundabout: tuple[int, ...]
    light_junction: np.ndarray
    light_phase: np.ndarray
    light_phases: np.ndarray
    extent: tuple[float, float, float, float]

    @property
    def size(self) -> tuple[float, float]:
        """Width and height of the town's lane extent [m]."""
        return self.extent[2] - self.extent[0], self.extent[3] - self.extent[1]


class Location(NamedTuple):
    """Where a point lies relative to the nearest lane.

    Attributes:
        lane: Lane id.
        s: Arc length of the foot point along the lane [m].
        lateral: Signed distance from the centreline [m], positive to the right of travel.
    """

    lane: int
    s: float
    lateral: float


GRID_CELL = 8.0
"""Cell size [m] of the grid that `locate_many` searches first (own choice: a few lane widths, so a
point on or beside a road finds its nearest lane point in the 3 x 3 cells around it)."""


@dataclass(frozen=True, eq=False)
class _Grid:
    """Lane points bucketed by `GRID_CELL` cells: ``order[start[c]:start[c + 1]]`` are cell c's points.

    Also each lane's point count and each point's arc length along its lane [m], for `locate_many`.
    """

    origin: np.ndarray
    shape: tuple[int, int]
    order: np.ndarray
    start: np.ndarray
    lane_count: np.ndarray
    point_s: np.ndarray


@functools.cache
def _grid(town: Town) -> _Grid:
    """The town's point grid, built once per town (points of a cell in ascending index order)."""
    origin = town.points.min(axis=0)
    cells = np.floor((town.points - origin) / GRID_CELL).astype(np.int64)
    shape = (int(cells[:, 0].max()) + 1, int(cells[:, 1].max()) + 1)
    key = cells[:, 0] * shape[1] + cells[:, 1]
    order = np.argsort(key, kind="stable")
    start = np.searchsorted(key[order], np.arange(shape[0] * shape[1] + 1))
    count = np.array([len(lane.points) for lane in town.lanes], dtype=np.int64)
    return _Grid(origin, shape, order, start, count, np.concatenate([lane.s for lane in town.lanes]))


def _nearest_points(town: Town, xy: np.ndarray) -> np.ndarray:
    """Index of the nearest lane point of each point (lowest index on ties), exactly as brute force.

    A point inside the grid searches the 3 x 3 cells around its own; a nearest point found there
    closer than `GRID_CELL` is the global one (every point outside those cells is at least one cell
    away). Otherwise (far from every lane, or off the grid) it falls back to all points.
    """
    grid = _grid(town)
    out = np.empty(len(xy), dtype=np.int64)
    cell = np.floor((xy - grid.origin) / GRID_CELL).astype(np.int64)
    for n in range(len(xy)):
        cx, cy = int(cell[n, 0]), int(cell[n, 1])
        if 0 <= cx < grid.shape[0] and 0 <= cy < grid.shape[1]:
            keys = [(i * grid.shape[1] + max(cy - 1, 0), i * grid.shape[1] + min(cy + 1, grid.shape[1] - 1) + 1)
                    for i in range(max(cx - 1, 0), min(cx + 2, grid.shape[0]))]
            rows = [grid.order[grid.start[a]:grid.start[b]] for a, b in keys]
            candidates = np.sort(np.concatenate(rows))
            if candidates.size:
                d2 = ((xy[n] - town.points[candidates]) ** 2).sum(-1)
                k = int(d2.argmin())
                if d2[k] < GRID_CELL**2:
                    out[n] = candidates[k]
                    continue
        out[n] = ((xy[n] - town.points) ** 2).sum(-1).argmin()
    return out


def locate_many(town: Town, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nearest lane of each point.

    The nearest lane point is found exactly (a grid of `GRID_CELL` cells first, all points when
    the grid cannot decide), then the foot point on the two centreline segments around it refines
    ``s`` and the lateral offset. Where lanes overlap (connectors in a junction) the lowest lane id
    wins ties; road lanes come before connectors.

    Args:
        town: The town.
        xy: Points (N, 2) [m].

    Returns:
        ``(lane, s, lateral)``: lane ids (N,) int64, arc lengths (N,) float64 [m], lateral offsets
        (N,) float64 [m] (positive to the right of the lane's direction).

    Raises:
        ValueError: If ``xy`` is not (N, 2) finite.
    """
    xy = np.asarray(xy, dtype=np.float64)
    if xy.ndim != 2 or xy.shape[1] != 2 or not np.isfinite(xy).all():
        raise ValueError(f"xy shape {xy.shape}: must be (N, 2) finite [m]")
    nearest = _nearest_points(town, xy)
    grid = _grid(town)
    lanes = town.point_lane[nearest]
    out_s, out_lat = np.empty(len(xy)), np.empty(len(xy))
    points, point_s = town.points, grid.point_s
    for n, (p, i, count) in enumerate(zip(nearest.tolist(), town.point_index[nearest].tolist(),
                                          grid.lane_count[lanes].tolist(), strict=True)):
        x, y = xy[n].tolist()
        best = math.inf
        for j in (p - 1, p) if i > 0 else (p,):  # the segments before and after the point, where they exist
            if j - p + i + 1 >= count:
                continue
            (ax, ay), (bx, by) = points[j].tolist(), points[j + 1].tolist()
            sx, sy = bx - ax, by - ay
            length = math.hypot(sx, sy)
            t = min(max(((x - ax) * sx + (y - ay) * sy) / (length * length), 0.0), 1.0)
            rx, ry = x - ax - t * sx, y - ay - t * sy
            dist = math.hypot(rx, ry)
            if dist < best or best == math.inf:  # ties: the segment before the point; the first one always
                best = dist
                out_s[n] = point_s[j] + t * length
                out_lat[n] = (ry * sx - rx * sy) / length  # positive to the right of travel
    return lanes.astype(np.int64), out_s, out_lat


def locate(town: Town, xy: np.ndarray) -> Location:
    """Nearest lane of one point ``xy`` (2,) [m]: `locate_many` for a single point.

    Raises:
        ValueError: If ``xy`` is not 2 finite numbers.
    """
    xy = np.asarray(xy, dtype=np.float64)
    if xy.shape != (2,):
        raise ValueError(f"xy shape {xy.shape}: must be (2,) [m]")
    lanes, s, lateral = locate_many(town, xy[None])
    return Location(int(lanes[0]), float(s[0]), float(lateral[0]))


def light_state(town: Town, t: float | np.ndarray) -> np.ndarray:
    """State of the light at the end of every lane at time ``t``: a fixed cycle.

    Each lit junction cycles through its phases; phase p is `GREEN_TIME` green, `YELLOW_TIME`
    yellow, then red (including `ALL_RED_TIME` of all-red clearance) until its turn comes again.
    All junctions start their cycle at t = 0.

    Args:
        town: The town.
        t: Time [s], scalar or any shape (leading batch dims) with t >= 0.

    Returns:
        ``t.shape + (L,)`` int8 `Light` values; `Light.NONE` for lanes without a light.

    Raises:
        ValueError: If any ``t`` is negative or not finite.

    Examples:
        >>> from carla_gym.sim.town import get_town
        >>> town = get_town("Town05")
        >>> lit = int(np.flatnonzero(town.light_phase == 0)[0])
        >>> [Light(int(light_state(town, t)[lit])).name for t in (0.0, 11.0, 14.0, 30.0)]
        ['GREEN', 'YELLOW', 'RED', 'GREEN']
    """
    t = np.asarray(t, dtype=np.float64)
    if not np.isfinite(t).all() or (t < 0).any():
        raise ValueError(f"t={t!r}: must be finite and >= 0 [s]")
    phase_len = GREEN_TIME + YELLOW_TIME + ALL_RED_TIME
    lit = town.light_phases > 0
    cycle = np.where(lit, town.light_phases, 1) * phase_len
    u = np.mod(t[..., None] - np.where(lit, town.light_phase, 0) * phase_len, cycle)
    state = np.where(u < GREEN_TIME, Light.GREEN, np.where(u < GREEN_TIME + YELLOW_TIME, Light.YELLOW, Light.RED))
    return np.where(lit, state, Light.NONE).astype(np.int8)


def light_steady_interval(t: float, margin: float = 1e-6) -> tuple[float, float]:
    """An interval around ``t`` [s] within which `light_state` of every town returns the same states.

    Every light changes only where t modulo a phase (`GREEN_TIME` + `YELLOW_TIME` + `ALL_RED_TIME`)
    crosses 0, `GREEN_TIME` or `GREEN_TIME` + `YELLOW_TIME` (a light's phase offset and cycle are whole
    phases), so states computed once hold until the next such time. ``margin`` [s] keeps the interval
    clear of the change times, where rounding could decide either way.

    Returns:
        ``(lo, hi)`` with lo <= t < hi, or ``(t, t)`` (empty) within ``margin`` of a change time.
    """
    phase_len = GREEN_TIME + YELLOW_TIME + ALL_RED_TIME
    r = t % phase_len
    for a, b in ((0.0, GREEN_TIME), (GREEN_TIME, GREEN_TIME + YELLOW_TIME), (GREEN_TIME + YELLOW_TIME, phase_len)):
        if a + margin <= r < b - margin:
            return t - (r - a) + margin, t + (b - r) - margin
    return t, t
