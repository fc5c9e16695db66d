"""Contacts between vehicles (oriented boxes) and between vehicles and walkers (discs) over a tick.

Static test: the separating-axis theorem. Two convex boxes are disjoint exactly when their
projections onto one of the four edge normals (two per box) are disjoint; `boxes_overlap`
evaluates all four for any broadcast shape of box pairs (touching counts as contact, with a
slack of `SLACK` for rounding).

Swept test (`vehicle_contacts`, `walker_contacts`): conservative sub-stepping.

* Within a tick each pose is interpolated linearly between its start and end (position and
  wrapped yaw). The bicycle model's real path is an arc; the chord departs from it by at most
  d^2 kappa / 8 (d the distance of the tick, kappa <= grip / v^2 at speed): under 3 mm for
  every speed the model allows (for example d = 2.78 m at `MAX_SPEED` gives 2.5 mm).
* Every point of box i then moves at most r_i = |dc_i| + R_i |dyaw_i| in the tick (R_i the half
  diagonal). Split the tick into K sub-steps with r_i / K <= ``tol`` for every box involved. At
  any instant of sub-step k, every point of the box lies within e_i = r_i / (2K) of the same
  point at the sub-step's midpoint, so the box lies inside the midpoint box with both
  half-extents grown by e_i. Testing the grown midpoint boxes therefore never misses a contact
  at any instant (no tunnelling at any speed: K grows with the motion), and reports one only
  when the boxes come within sqrt(2) (e_i + e_j) <= sqrt(2) ``tol`` of each other. For a
  vehicle and a walker disc of radius rho: contact at an instant implies the midpoint distance
  from the walker's centre to the box is at most rho + e_i + e_w, the test used.
* Broad phase over all pairs (vectorised, O(N^2) numbers: 4,950 pairs for N = 100): the swept
  volume of box i lies in the disc around its mid-tick centre of radius R_i + |dc_i| / 2;
  only pairs whose discs meet go to the narrow phase, which costs (pairs, K, 4 axes).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from carla_gym.sim.constants import WALKER_RADIUS  # one radius for every walker (0.3 m)
from carla_gym.sim.traffic.vehicles import Vehicles

SLACK = 1e-9
"""Contact slack [m]: boxes (or a box and a disc) closer than this count as touching (rounding only)."""

TOLERANCE = 0.02
"""Default swept-test resolution [m]: largest motion of any box point within one sub-step (own choice);
a reported contact means the actors came within sqrt(2) * 0.02 = 2.8 cm of each other."""



def boxes_overlap(ax, ay, ayaw, ahx, ahy, bx, by, byaw, bhx, bhy, slack: float = SLACK) -> np.ndarray:
    """Whether oriented boxes A and B overlap or touch (separating-axis theorem), elementwise.

    Args:
        ax: A's centre x [m]; this and every other argument broadcast together.
        ay: A's centre y [m].
        ayaw: A's heading [rad].
        ahx: A's half length [m].
        ahy: A's half width [m].
        bx: B's centre x [m].
        by: B's centre y [m].
        byaw: B's heading [rad].
        bhx: B's half length [m].
        bhy: B's half width [m].
        slack: Distance [m] under which separated boxes still count as touching.

    Returns:
        Bool array of the broadcast shape.
    """
    ax, ay, ayaw, ahx, ahy, bx, by, byaw, bhx, bhy = np.broadcast_arrays(ax, ay, ayaw, ahx, ahy, bx, by, byaw, bhx, bhy)
    yaw = np.stack([ayaw, byaw])
    sep = _separated(np.subtract(bx, ax), np.subtract(by, ay), np.cos(yaw), np.sin(yaw), np.stack([ahx, bhx]),
                     np.stack([ahy, bhy]), slack)
    return ~sep.any(axis=0)


def _separated(dx, dy, cos, sin, hx, hy, slack: float) -> np.ndarray:
    """The separating-axis tests of `boxes_overlap` on stacked boxes: row 0 for A's two axes, row 1 for B's.

    Args:
        dx: B's centre x minus A's [m].
        dy: B's centre y minus A's [m].
        cos: (2, ...) cosines of A's and B's headings.
        sin: (2, ...) sines of A's and B's headings.
        hx: (2, ...) half lengths of A and B [m].
        hy: (2, ...) half widths of A and B [m].
        slack: Distance [m] under which separated boxes still count as touching.

    Returns:
        (2, ...) bool: True where that box's own x or y axis separates the two (all arguments broadcast).
    """
    c = np.abs(cos[0] * cos[1] + sin[0] * sin[1])  # |cos(b - a)|: A's x axis on B's x axis, and A's y on B's y
    s = np.abs(sin[0] * cos[1] - cos[0] * sin[1])  # |sin(b - a)|: A's x axis on B's y axis, and A's y on B's x
    ox, oy = hx[::-1], hy[::-1]  # the other box's half extents
    sep = np.abs(dx * cos + dy * sin) > hx + ox * c + oy * s + slack
    sep |= np.abs(-dx * sin + dy * cos) > hy + ox * s + oy * c + slack
    return sep


def box_disc_distance(bx, by, byaw, bhx, bhy, px, py) -> np.ndarray:
    """Euclidean distance [m] from points to oriented boxes (0 inside), elementwise (broadcast)."""
    dx, dy = np.subtract(px, bx), np.subtract(py, by)
    c, s = np.cos(byaw), np.sin(byaw)
    ex = np.maximum(np.abs(dx * c + dy * s) - bhx, 0.0)
    ey = np.maximum(np.abs(-dx * s + dy * c) - bhy, 0.0)
    return np.hypot(ex, ey)


def _motion(before: Vehicles, after: Vehicles):
    """Broad-phase motion of each box: centre displacement (dx, dy), half diagonal R, centre step |dc|."""
    dx, dy = after.x - before.x, after.y - before.y
    return dx, dy, 0.5 * np.hypot(before.length, before.width), np.hypot(dx, dy)


def _turn(before: Vehicles, after: Vehicles) -> np.ndarray:
    """Yaw change over the tick, wrapped to [-pi, pi] [rad]."""
    dyaw = after.yaw - before.yaw
    return np.arctan2(np.sin(dyaw), np.cos(dyaw))


def _poses(before: Vehicles, rows: np.ndarray, dx, dy, dyaw, t):
    """Interpolated poses (x, y, yaw) of ``rows`` at fractions ``t``: (P, K) each, from (N,) motions and (K,) t."""
    return before.x[rows, None] + t * dx[rows, None], before.y[rows, None] + t * dy[rows, None], \
        before.yaw[rows, None] + t * dyaw[rows, None]


def _check_tol(tol: float) -> None:
    if not tol > 0:
        raise ValueError(f"tol={tol!r}: must be > 0 [m]")


def _substeps(reach: np.ndarray, tol: float) -> int:
    return max(1, math.ceil(float(reach.max(initial=0.0)) / tol))


@functools.lru_cache(maxsize=32)
def _upper_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.triu_indices(n, k=1)``, built once per n (read-only)."""
    i, j = np.triu_indices(n, k=1)
    i.flags.writeable = j.flags.writeable = False
    return i, j


def _pair_rows(i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """(P, 2) int64 rows (i, j)."""
    out = np.empty((len(i), 2), dtype=np.int64)
    out[:, 0], out[:, 1] = i, j
    return out


def vehicle_contacts(before: Vehicles, after: Vehicles, tol: float = TOLERANCE) -> np.ndarray:
    """Pairs of vehicles whose boxes touched at any instant of the tick (module docstring).

    Args:
        before: The N vehicles at the start of the tick, shape (N,).
        after: The same vehicles at its end.
        tol: Sub-step resolution [m], > 0 (`TOLERANCE`).

    Returns:
        (P, 2) int64 array of pairs (i, j), i < j, sorted.

    Raises:
        ValueError: If tol <= 0 or the shapes differ.
    """
    if np.shape(before.x) != np.shape(after.x) or np.ndim(before.x) != 1:
        raise ValueError(f"before {np.shape(before.x)} and after {np.shape(after.x)} must be the same (N,)")
    _check_tol(tol)
    dx, dy, half_diag, step = _motion(before, after)
    mx, my = before.x + 0.5 * dx, before.y + 0.5 * dy
    rho = half_diag + 0.5 * step
    i, j = _upper_pairs(len(before))
    near = np.hypot(mx[i] - mx[j], my[i] - my[j]) <= rho[i] + rho[j] + SLACK
    i, j = i[near], j[near]
    if i.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    dyaw = _turn(before, after)
    reach = step + half_diag * np.abs(dyaw)
    rows = np.concatenate([i, j])  # the pairs' A boxes, then their B boxes: one (2, P, ...) stack
    k = _substeps(reach[rows], tol)
    t = (np.arange(k) + 0.5) / k
    grow = reach[rows] / (2 * k)
    x, y, yaw = (a.reshape(2, -1, k) for a in _poses(before, rows, dx, dy, dyaw, t))
    sep = _separated(x[1] - x[0], y[1] - y[0], np.cos(yaw), np.sin(yaw),
                     (0.5 * before.length[rows] + grow).reshape(2, -1, 1),
                     (0.5 * before.width[rows] + grow).reshape(2, -1, 1), SLACK)
    hit = (~(sep[0] | sep[1])).any(axis=1)  # boxes_overlap at some sub-step
    return _pair_rows(i[hit], j[hit])


def walker_contacts(before: Vehicles, after: Vehicles, walkers_before: np.ndarray, walkers_after: np.ndarray,
                    radius: float = WALKER_RADIUS, tol: float = TOLERANCE) -> np.ndarray:
    """Pairs (vehicle, walker) where a box and a walker disc touched at any instant of the tick.

    Args:
        before: The N vehicles at the start of the tick, shape (N,).
        after: The same vehicles at its end.
        walkers_before: Walker centres at the start, (W, 2) [m].
        walkers_after: Walker centres at the end, (W, 2) [m].
        radius: Walker disc radius [m], >= 0 (`WALKER_RADIUS`).
        tol: Sub-step resolution [m], > 0.

    Returns:
        (P, 2) int64 array of (vehicle, walker) pairs, sorted.

    Raises:
        ValueError: If radius < 0, tol <= 0 or the walker arrays are not (W, 2).
    """
    wb, wa = np.asarray(walkers_before, dtype=np.float64), np.asarray(walkers_after, dtype=np.float64)
    if wb.shape != wa.shape or wb.ndim != 2 or wb.shape[1] != 2:
        raise ValueError(f"walker arrays have shapes {wb.shape} and {wa.shape}: must both be (W, 2)")
    if not radius >= 0:
        raise ValueError(f"radius={radius!r}: must be >= 0 [m]")
    _check_tol(tol)
    dx, dy, half_diag, step = _motion(before, after)
    wd = wa - wb
    wstep = np.hypot(wd[:, 0], wd[:, 1])
    mx, my = before.x + 0.5 * dx, before.y + 0.5 * dy
    wm = wb + 0.5 * wd
    # (N, W) grid of (vehicle, walker) pairs; nonzero() lists the near ones row by row, sorted.
    rho = (half_diag + 0.5 * step)[:, None] + 0.5 * wstep + radius + SLACK
    i, j = (np.hypot(mx[:, None] - wm[:, 0], my[:, None] - wm[:, 1]) <= rho).nonzero()
    if i.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    dyaw = _turn(before, after)
    reach = step + half_diag * np.abs(dyaw)
    k = _substeps(np.maximum(reach[i], wstep[j]), tol)
    t = (np.arange(k) + 0.5) / k
    xa, ya, ya_w = _poses(before, i, dx, dy, dyaw, t)
    px, py = wb[j, 0, None] + t * wd[j, 0, None], wb[j, 1, None] + t * wd[j, 1, None]
    dist = box_disc_distance(xa, ya, ya_w, 0.5 * before.length[i, None], 0.5 * before.width[i, None], px, py)
    hit = (dist <= (radius + (reach[i] + wstep[j]) / (2 * k) + SLACK)[:, None]).any(axis=1)
    return _pair_rows(i[hit], j[hit])
