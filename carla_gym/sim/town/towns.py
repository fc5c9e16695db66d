"""The eight towns: deterministic procedural analogues of CARLA's maps, built once and cached.

Only the names users type and each town's character (CARLA's town catalogue) carry over; the
geometry is this project's, not CARLA's. Layouts are written as lines through node positions
[m]: every line vertex is a node, a line is split wherever another line's vertex lies on it, and
consecutive nodes along a line become one road.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.town.builders import RoadSpec, TownSpec, build_town
from carla_gym.sim.town.network import Town

_Point = tuple[float, float]
_Line = tuple[list[_Point], dict]

HIGHWAY_SPEED = 90.0 / C.KMH_PER_MS
"""Highway speed limit [m/s]: 90 km/h (this project's choice)."""

AVENUE_SPEED = 40.0 / C.KMH_PER_MS
"""Downtown avenue and rural road speed limit [m/s]: 40 km/h (this project's choice)."""

NARROW_LANE_WIDTH = 3.0
"""Lane width of Town07's rural roads [m] (this project's choice: narrower than the 3.5 m default)."""

ROUNDABOUT_RADIUS = 40.0
"""Radius of Town03's roundabout ring [m] (this project's choice: wide enough that going round
counts as STRAIGHT at each exit)."""


def _assemble(name: str, lines: list[_Line], *, lights: list[_Point] | None = None,
              ring: tuple[_Point, float] | None = None, radius: list[tuple[_Point, float]] = (),
              spawn_spacing: float = 30.0) -> TownSpec:
    """A `TownSpec` from lines of nodes (see the module docstring) and an optional roundabout.

    ``ring = (centre, radius)``: a one-way, one-lane ring whose nodes are the line vertices on the
    circle, driven with the centre on the left (right-hand traffic).
    """
    keys: dict[_Point, int] = {}
    for points, _ in lines:
        for p in points:
            keys.setdefault((float(p[0]), float(p[1])), len(keys))
    nodes = np.array(list(keys), dtype=np.float64)
    roads = []
    for points, kwargs in lines:
        for p, q in zip(points, points[1:], strict=False):
            a, b = np.array(p, dtype=np.float64), np.array(q, dtype=np.float64)
            d = b - a
            t = (nodes - a) @ d / (d @ d)
            off = np.abs((nodes - a) @ np.array([-d[1], d[0]])) / math.sqrt(d @ d)
            inside = np.flatnonzero((t > 1e-9) & (t < 1 - 1e-9) & (off < 1e-6))
            chain = [keys[(float(p[0]), float(p[1]))], *inside[np.argsort(t[inside])].tolist(),
                     keys[(float(q[0]), float(q[1]))]]
            roads += [RoadSpec(a=i, b=j, **kwargs) for i, j in zip(chain, chain[1:], strict=False)]
    ring_nodes: list[int] = []
    if ring is not None:
        (cx, cy), r = ring
        angle = {n: math.atan2(y - cy, x - cx) for (x, y), n in keys.items()
                 if abs(math.hypot(x - cx, y - cy) - r) < 1e-6}
        ring_nodes = sorted(angle, key=lambda n: -angle[n])  # decreasing angle: centre on the left
        for i, a in enumerate(ring_nodes):
            b = ring_nodes[(i + 1) % len(ring_nodes)]
            t0, t1 = angle[a], angle[b]
            t1 = t1 if t1 < t0 else t1 - 2 * math.pi
            via = tuple((cx + r * math.cos(t), cy + r * math.sin(t)) for t in np.linspace(t0, t1, 40)[1:-1])
            roads.append(RoadSpec(a=a, b=b, forward=1, backward=0, via=via, sidewalks=False))
    return TownSpec(
        name=name, nodes=tuple(map(tuple, nodes.tolist())), roads=tuple(roads),
        lights=None if lights is None else tuple(keys[p] for p in lights), roundabout=tuple(ring_nodes),
        radius=tuple((keys[p], rad) for p, rad in radius), spawn_spacing=spawn_spacing,
    )


def _grid_lines(xs: list[float], ys: list[float], row: Callable[[int], dict],
                col: Callable[[int], dict]) -> list[_Line]:
    """Rows and columns of a grid, each line through every grid point it crosses."""
    return ([([(x, y) for x in xs], row(j)) for j, y in enumerate(ys)]
            + [([(x, y) for y in ys], col(i)) for i, x in enumerate(xs)])


def _town01() -> TownSpec:
    one = {}
    lines = [
        ([(0, 0), (400, 0), (400, 300), (0, 300), (0, 0)], one),
        ([(130, 0), (130, 300)], one), ([(270, 0), (270, 300)], one),
        ([(0, 110), (130, 110)], one), ([(0, 220), (130, 220)], one), ([(130, 160), (270, 160)], one),
        ([(270, 90), (400, 90)], one), ([(270, 230), (400, 230)], one),
    ]
    return _assemble("Town01", lines)


def _town02() -> TownSpec:
    one = {}
    lines = [
        ([(0, 0), (200, 0), (200, 170), (0, 170), (0, 0)], one),
        ([(90, 0), (90, 170)], one), ([(0, 60), (90, 60)], one), ([(90, 120), (200, 120)], one),
    ]
    return _assemble("Town02", lines, spawn_spacing=20.0)


def _town03() -> TownSpec:
    c, r = (150.0, 150.0), ROUNDABOUT_RADIUS
    two = {"forward": 2, "backward": 2}
    lines = [
        ([(0, 0), (450, 0), (450, 300), (0, 300), (0, 0)], {}),
        ([(300, 0), (300, 300)], {}),
        ([(150, 0), (150, 150 - r)], two), ([(150, 150 + r), (150, 300)], two),
        ([(0, 150), (150 - r, 150)], two), ([(150 + r, 150), (300, 150), (450, 150)], two),
    ]
    return _assemble("Town03", lines, ring=(c, r))


def _town04() -> TownSpec:
    hw = {"forward": 3, "backward": 3, "speed_limit": HIGHWAY_SPEED, "sidewalks": False}
    corners = [(0, 0), (1000, 0), (1000, 500), (0, 500)]
    lines = [([*corners, (0, 0)], hw), ([(500, 0), (500, 150)], {}), ([(500, 350), (500, 500)], {})]
    lines += _grid_lines([350, 500, 650], [150, 250, 350], lambda j: {}, lambda i: {})
    town = [(500, 150), (500, 250), (500, 350), (350, 250), (650, 250)]
    return _assemble("Town04", lines, lights=town, radius=[(p, 80.0) for p in corners])


def _town05() -> TownSpec:
    two = {"forward": 2, "backward": 2}
    xs = [0.0, 100.0, 200.0, 300.0]
    return _assemble("Town05", _grid_lines(xs, xs, lambda j: two, lambda i: two))


def _town06() -> TownSpec:
    hw = {"forward": 4, "backward": 4, "speed_limit": HIGHWAY_SPEED, "sidewalks": False}
    link = {"forward": 2, "backward": 2, "speed_limit": HIGHWAY_SPEED, "sidewalks": False}
    ramp = {"forward": 2, "backward": 0, "speed_limit": HIGHWAY_SPEED, "sidewalks": False}
    corners = [(0, 0), (1500, 0), (1500, 400), (0, 400)]
    lines = [([(0, 0), (1500, 0)], hw), ([(0, 400), (1500, 400)], hw),
             ([(0, 400), (0, 0)], link), ([(1500, 0), (1500, 400)], link),
             ([(500, 0), (500, 400)], ramp), ([(1000, 400), (1000, 0)], ramp)]
    return _assemble("Town06", lines, lights=[], radius=[(p, 60.0) for p in corners], spawn_spacing=40.0)


def _town07() -> TownSpec:
    rural = {"lane_width": NARROW_LANE_WIDTH, "speed_limit": AVENUE_SPEED}
    loop = [(0, 0), (150, -30), (300, 0), (380, 120), (300, 260), (150, 230), (0, 260), (-60, 130), (0, 0)]
    lines = [(loop, rural), ([(150, -30), (170, 100), (150, 230)], rural)]
    bends = [p for p in loop[:-1] if p not in ((150, -30), (150, 230))] + [(170, 100)]
    return _assemble("Town07", lines, lights=[(150, -30)], radius=[(p, 15.0) for p in bends])


def _town10hd() -> TownSpec:
    avenue = {"forward": 3, "backward": 3, "speed_limit": AVENUE_SPEED}
    one_way = {"forward": 2, "backward": 0}
    xs, ys = [0.0, 80.0, 160.0, 240.0, 320.0], [0.0, 70.0, 140.0, 210.0]
    return _assemble("Town10HD", _grid_lines(
        xs, ys, lambda j: avenue if j == 1 else one_way if j == 2 else {}, lambda i: avenue if i == 2 else {}))


_LAYOUTS = {
    "Town01": _town01, "Town02": _town02, "Town03": _town03, "Town04": _town04,
    "Town05": _town05, "Town06": _town06, "Town07": _town07, "Town10HD": _town10hd,
}
ALIASES = {"Town10HD_Opt": "Town10HD"}
"""Other names of towns: upstream's default map is ``Town10HD_Opt`` (CARLA's town catalogue)."""

TOWN_NAMES = (*_LAYOUTS, *ALIASES)
"""Every name `get_town` accepts."""


def town_spec(name: str) -> TownSpec:
    """The layout of town ``name`` (an alias gives its town's layout).

    Raises:
        ValueError: If ``name`` is not one of `TOWN_NAMES`.
    """
    if name not in TOWN_NAMES:
        raise ValueError(f"town {name!r}: must be one of {', '.join(TOWN_NAMES)}")
    return _LAYOUTS[ALIASES.get(name, name)]()


@cache
def _built(name: str) -> Town:
    return build_town(town_spec(name))


def get_town(name: str) -> Town:
    """The built town ``name``, built on first use and cached (towns are immutable).

    Raises:
        ValueError: If ``name`` is not one of `TOWN_NAMES`.

    Examples:
        >>> get_town("Town10HD_Opt") is get_town("Town10HD")
        True
    """
    if not isinstance(name, str) or name not in TOWN_NAMES:
        raise ValueError(f"town {name!r}: must be one of {', '.join(TOWN_NAMES)}")
    return _built(ALIASES.get(name, name))
