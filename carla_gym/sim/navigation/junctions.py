"""Junction negotiation: conflicting connector lanes and first-come-first-served reservations.

Two connector lanes (lanes that cross a junction or a bend, `Lane.is_connector`) conflict when
their centrelines come within `CONFLICT_DISTANCE` of each other: two vehicles on them could touch.
This covers crossings, merges (same exit) and diverges (same entry). A vehicle may enter a
connector only while no other vehicle holds a conflicting one; it holds a connector from the tick
its request is granted until its rear has left the connector by `CLEAR_DISTANCE`. Requests are
granted one at a time, nearest to its stop line first, ties to the lower row (deterministic).
Vehicles on the same connector follow each other (car following), so a connector does not
conflict with itself.

Crosswalk zones (`crosswalk_zones`): the stretch of each lane whose centreline passes within a reach
of a crosswalk's walking line, as an arc interval per (crosswalk, lane); the navigation world uses
them to tell walkers when a vehicle is on or nearing a crosswalk and to stop NPCs before a crosswalk
with a walker on it.
"""

from __future__ import annotations

import numpy as np

from carla_gym.sim.town import Town
from carla_gym.sim.traffic.lanes import Lanes
from carla_gym.sim.traffic.walkers import Sidewalks

CONFLICT_DISTANCE = 2.2 + 0.8
"""Centreline distance [m] under which two connectors conflict: the widest NPC (2.2 m,
`carla_gym.sim.traffic.vehicles.NPC_WIDTH_RANGE`) plus 0.8 m for the swing of a car's corners
over its centreline in a turn and for pure-pursuit tracking error (own choice)."""

LOOSE_CONFLICT_DISTANCE = CONFLICT_DISTANCE + 1.5
"""Conflict distance [m] for pairs with a loosely tracking vehicle (the ego under an external driver or
the PID autopilot, which cuts corners by about 1 m in tight turns; measured on Town02), own choice."""

CLEAR_DISTANCE = 1.0 + LOOSE_CONFLICT_DISTANCE
"""How far [m] a vehicle's rear must be past a connector's end before it releases it: the conflict
zone reaches `LOOSE_CONFLICT_DISTANCE` beyond a connector's end, plus 1 m margin (own choice)."""


CROSSWALK_ZONE_MARGIN = 0.2
"""Margin [m] added to a crosswalk's half width and the walker radius for its zone on a lane (own choice:
small, so that a car at its red-light stop line, 1 m before the crosswalk, stays outside the zone)."""


def crosswalk_zones(lanes: Lanes, sidewalks: Sidewalks, reach: float) -> np.ndarray:
    """Arc interval of every lane within ``reach`` of every crosswalk's walking line.

    The walking line of crosswalk x joins its two ends on the sidewalks (`Sidewalks.crosswalks`).
    A lane's zone runs from its first to its last centreline point within ``reach`` of that line
    (lanes are sampled at about 1 m, so the bounds are that exact).

    Args:
        lanes: The lanes (L of them).
        sidewalks: The sidewalks with their X crosswalks.
        reach: Distance [m] from the walking line, > 0 (the navigation world uses half the
            crosswalk width + `carla_gym.sim.constants.WALKER_RADIUS` + `CROSSWALK_ZONE_MARGIN`).

    Returns:
        (X, L, 2) float64 ``[start, end]`` arc positions [m]; ``[inf, -inf]`` where a lane does
        not come within ``reach``.

    Raises:
        ValueError: If reach <= 0.
    """
    if not reach > 0:
        raise ValueError(f"reach={reach!r}: must be > 0 [m]")
    cw = sidewalks.crosswalks
    x, n = len(cw), len(lanes)
    start = np.full(x * n, np.inf)
    end = np.full(x * n, -np.inf)
    if x:
        a, _ = sidewalks.at(cw[:, 0].astype(np.int64), cw[:, 1])
        b, _ = sidewalks.at(cw[:, 2].astype(np.int64), cw[:, 3])
        d = b - a
        rel = lanes.points[:, None, :] - a[None]  # (P, X, 2)
        t = np.clip((rel * d[None]).sum(-1) / np.maximum((d * d).sum(-1), 1e-12)[None], 0.0, 1.0)
        gap = np.hypot(*(rel - t[..., None] * d[None]).transpose(2, 0, 1))
        point, cross = np.nonzero(gap <= reach)
        lane = np.repeat(np.arange(n), lanes.count)[point]
        key = cross * n + lane
        np.minimum.at(start, key, lanes.arc[point])
        np.maximum.at(end, key, lanes.arc[point])
    return np.stack([start, end], axis=-1).reshape(x, n, 2)


def conflicts(town: Town, distance: float = CONFLICT_DISTANCE) -> np.ndarray:
    """Which lanes conflict: (L, L) bool, True only between two different connectors.

    Brute force over connector point pairs of the same junction (a few hundred points each), run
    once per town; connectors of different junctions never conflict unless their points come
    within ``distance`` (bends next to a junction), which the pairwise test covers too.

    Raises:
        ValueError: If distance <= 0.
    """
    if not distance > 0:
        raise ValueError(f"distance={distance!r}: must be > 0 [m]")
    n = len(town.lanes)
    out = np.zeros((n, n), dtype=bool)
    ids = [lane.id for lane in town.lanes if lane.is_connector]
    if not ids:
        return out
    pts = np.concatenate([town.lanes[i].points for i in ids])
    owner = np.concatenate([np.full(len(town.lanes[i].points), i) for i in ids])
    for i in ids:
        p = town.lanes[i].points
        lo, hi = p.min(axis=0) - distance, p.max(axis=0) + distance
        box = np.flatnonzero(((pts >= lo) & (pts <= hi)).all(axis=1))
        d2 = ((p[:, None, :] - pts[None, box, :]) ** 2).sum(-1)
        near = np.unique(owner[box][(d2 <= distance**2).any(axis=0)])
        out[i, near] = True
    out |= out.T
    np.fill_diagonal(out, False)
    return out


def grant(conflict: np.ndarray, held: np.ndarray, request: np.ndarray, priority: np.ndarray,
          loose: np.ndarray | None = None, loose_conflict: np.ndarray | None = None) -> np.ndarray:
    """Grant connector requests first come first served.

    Args:
        conflict: (L, L) bool from `conflicts`.
        held: (V,) int64 connector each vehicle holds (granted or occupied), -1 for none.
        request: (V,) int64 connector each vehicle asks to enter this tick, -1 for none. A vehicle
            that already holds its request keeps it.
        priority: (V,) float64: lower asks first (the distance to the stop line [m]); ties go
            to the lower row.
        loose: (V,) bool, vehicles that track their lane loosely (None: none); a pair with one
            of them is tested with ``loose_conflict`` instead of ``conflict``.
        loose_conflict: (L, L) bool, `conflicts` at `LOOSE_CONFLICT_DISTANCE`; needed with ``loose``.

    Returns:
        (V,) int64 the connectors held after the grants: ``request`` where granted, else ``held``.
    """
    held = held.copy()
    loose = np.zeros(len(held), dtype=bool) if loose is None else loose
    asking = np.flatnonzero((request >= 0) & (request != held))
    for i in asking[np.lexsort((asking, priority[asking]))]:  # few requests a tick: a short loop
        other = (held >= 0) & (np.arange(len(held)) != i)
        wide = other & (loose | loose[i])
        if not conflict[request[i], held[other & ~wide]].any() and not (
                wide.any() and loose_conflict[request[i], held[wide]].any()):
            held[i] = request[i]
    return held
