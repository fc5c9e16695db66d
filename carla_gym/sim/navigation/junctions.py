"""Junction negotiation: conflicting connector lanes and first-come-first-served reservations.

Two connector lanes (lanes that cross a junction or a bend, `Lane.is_connector`) conflict when
their centrelines come within `CONFLICT_DISTANCE` of each other: two vehicles on them could touch.
This covers crossings, merges (same exit) and diverges (same entry). A vehicle may enter a
connector only while no other vehicle holds a conflicting one; it holds a connector from the tick
its request is granted until its rear has left the connector by `CLEAR_DISTANCE`. Requests are
granted one at a time, nearest to its stop line first, ties to the lower row (deterministic).
Vehicles on the same connector follow each other (car following), so a connector does not
conflict with itself.
"""

from __future__ import annotations

import numpy as np

from carla_gym.sim.town import Town

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
