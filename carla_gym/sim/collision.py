"""Swept collision test between the ego's bounding box and pedestrian discs.

At 75 km/h the ego moves about 1 m per tick, more than a pedestrian's diameter, so testing
only the end-of-tick pose could miss a contact at the box's edge. Each tick the walker's
position is expressed in the ego frame at the start and at the end of the tick; the walker
then moves along a segment relative to a fixed box, and it is hit when that segment passes
within the walker radius of the box. The test is exact for translation and linearises the
rotation within a tick (at most about 4 degrees: the grip limit caps the yaw rate at
MAX_GRIP_ACCELERATION / speed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import EgoState


def _to_ego_frame(x, y, yaw, xs: np.ndarray, ys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    dx, dy = xs - x, ys - y
    c, s = np.cos(yaw), np.sin(yaw)
    return dx * c + dy * s, -dx * s + dy * c


def _segment_hits_box(p0x, p0y, dx, dy, half_x: float, half_y: float) -> np.ndarray:
    """Whether segments p0 + t d, t in [0, 1], meet the box [-half_x, half_x] x [-half_y, half_y]."""
    t_lo = np.zeros_like(p0x)
    t_hi = np.ones_like(p0x)
    inside = np.ones(p0x.shape, dtype=bool)
    for p, d, half in ((p0x, dx, half_x), (p0y, dy, half_y)):
        moving = np.abs(d) > 1e-12
        safe = np.where(moving, d, 1.0)
        t1, t2 = (-half - p) / safe, (half - p) / safe
        t_lo = np.where(moving, np.maximum(t_lo, np.minimum(t1, t2)), t_lo)
        t_hi = np.where(moving, np.minimum(t_hi, np.maximum(t1, t2)), t_hi)
        inside &= moving | (np.abs(p) <= half)
    return inside & (t_lo <= t_hi)


def broad_reach(before_x, before_y, after_x, after_y, radius: float = C.WALKER_RADIUS, length: float = C.EGO_LENGTH,
                width: float = C.EGO_WIDTH):
    """Squared distance [m^2] from the ego's end-of-tick centre within which a disc is tested at all.

    The broad phase of `swept_contacts`: the box's half diagonal, the disc radius and the distance
    the centre moved this tick. Floats, or arrays of shape (N,).
    """
    dx, dy = after_x - before_x, after_y - before_y
    reach = math.hypot(0.5 * length, 0.5 * width) + radius + np.sqrt(dx * dx + dy * dy)
    return reach * reach


def swept_contacts(before: EgoState, after: EgoState, xs: np.ndarray, ys: np.ndarray, radius: float = C.WALKER_RADIUS,
                   length: float = C.EGO_LENGTH, width: float = C.EGO_WIDTH) -> np.ndarray:
    """Narrow phase: whether each disc touched the ego's box during one tick (see the module docstring).

    Args:
        before: Ego pose at the start of the tick: floats, or arrays of shape (P,), one per disc.
        after: Ego pose at the end of the tick, like ``before``.
        xs: Disc centres along the road [m], float64 (P,).
        ys: Disc centres across the road [m], float64 (P,).
        radius: Disc radius [m].
        length: Ego box length [m].
        width: Ego box width [m].

    Returns:
        bool (P,): element p is computed from element p of every argument alone, so a disc of one
        world gives the same answer in any batch.
    """
    hx, hy = 0.5 * length, 0.5 * width
    x0, y0 = _to_ego_frame(before.x, before.y, before.yaw, xs, ys)
    x1, y1 = _to_ego_frame(after.x, after.y, after.yaw, xs, ys)
    dx, dy = x1 - x0, y1 - y0
    touched = _segment_hits_box(x0, y0, dx, dy, hx + radius, hy) | _segment_hits_box(x0, y0, dx, dy, hx, hy + radius)
    seg2 = np.maximum(dx * dx + dy * dy, 1e-24)
    for cx, cy in ((hx, hy), (hx, -hy), (-hx, hy), (-hx, -hy)):
        t = np.clip(((cx - x0) * dx + (cy - y0) * dy) / seg2, 0.0, 1.0)
        ex, ey = x0 + t * dx - cx, y0 + t * dy - cy
        touched |= ex * ex + ey * ey <= radius * radius
    return touched


def swept_hits(
    before: EgoState,
    after: EgoState,
    xs: Sequence[float],
    ys: Sequence[float],
    radius: float = C.WALKER_RADIUS,
    length: float = C.EGO_LENGTH,
    width: float = C.EGO_WIDTH,
) -> list[int]:
    """Which static discs the ego's box touched during one tick (one world).

    Args:
        before: Ego state at the start of the tick.
        after: Ego state at the end of the tick.
        xs: Disc centres along the road, length W [m].
        ys: Disc centres across the road, length W [m].
        radius: Disc radius [m].
        length: Ego box length [m].
        width: Ego box width [m].

    Returns:
        Indices of the discs that were touched, ascending.
    """
    xs = np.asarray(xs, dtype=np.float64)
    ys = np.asarray(ys, dtype=np.float64)
    dx, dy = xs - after.x, ys - after.y
    near = np.flatnonzero(dx * dx + dy * dy <= broad_reach(before.x, before.y, after.x, after.y, radius, length, width))
    if not len(near):
        return []
    touched = swept_contacts(before, after, xs[near], ys[near], radius, length, width)
    return near[touched].tolist()
