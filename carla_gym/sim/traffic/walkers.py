"""Walkers as arrays: they walk along sidewalks, cross at crosswalks, and a seeded share jaywalk.

Each walker is one row: a mode (`SIDEWALK`, `CROSSING`), and for each mode its arrays. On a
sidewalk a walker keeps a fixed lateral offset within the sidewalk (drawn once, at most half the
width minus the disc radius) and advances its arc position at its own speed in one direction,
turning back at a sidewalk's end. When it passes a crosswalk end it starts crossing with
probability ``cross_probability``; a crossing is a straight walk from its start to its end
point, after which the walker continues on the other sidewalk in a random direction. A walker
flagged as a jaywalker (a seeded share) also leaves its sidewalk at random (``jaywalk_rate`` per
second) and walks straight to the nearest point of the opposite sidewalk. All randomness comes
from the Generator passed in.

Yielding at crosswalks: a walker who decides to cross at a crosswalk first waits at the kerb (mode
`WAITING`, standing at the crossing's start) while a vehicle is on the crosswalk or will reach it
within the walker's crossing time (crossing length / its speed) plus `YIELD_MARGIN`; the caller
passes that arrival time per crosswalk (``crosswalk_arrival`` of `step_walkers`). Jaywalkers do not
yield: one who steps out within a car's stopping distance can still be hit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.traffic.collision import WALKER_RADIUS
from carla_gym.sim.traffic.polylines import Polylines

WALK_SPEED_RANGE = (1.2, 1.5)
"""Walking speeds [m/s], drawn uniformly (mean 1.35): the pedestrian literature (1.2-1.5, mean free
walking speed 1.34 m/s)."""

SIDEWALK = 0
"""Mode: walking along a sidewalk."""

CROSSING = 1
"""Mode: crossing (at a crosswalk, or jaywalking) on a straight segment."""

WAITING = 2
"""Mode: waiting at the kerb (at the crossing's start) for a gap in traffic before crossing."""

YIELD_MARGIN = 2.0
"""Extra time [s] beyond a walker's own crossing time that the first vehicle must still be away from a
crosswalk before the walker starts crossing (own choice: about one human reaction and start-up time)."""


class Sidewalks(Polylines):
    """Sidewalk centrelines with widths, crosswalks and the sidewalk across the road.

    Attributes:
        width: (M,) [m].
        opposite: (M,) int64: the sidewalk across the road (jaywalking target), -1 for none.
        crosswalks: (X, 4) float64 rows (sidewalk a, s on a, sidewalk b, s on b): a crosswalk
            joins those two sidewalk points.
        end_sidewalk: (2X,) int64: the sidewalk of each crosswalk end (column a of every row, then b).
        end_s: (2X,) float64 [m]: the arc position of each end on it, in the same order.
    """

    def __init__(self, centrelines: Sequence[np.ndarray], width, opposite: Sequence[int],
                 crosswalks: Sequence[tuple[int, float, int, float]] = ()):
        """Build the sidewalks.

        Raises:
            ValueError: On a bad polyline, a width <= 2 * `WALKER_RADIUS`, or an index out of range.
        """
        super().__init__(centrelines)
        m = len(self)
        self.width = np.broadcast_to(np.asarray(width, dtype=np.float64), (m,)).copy()
        if not (self.width > 2 * WALKER_RADIUS).all():
            raise ValueError(f"width must be > {2 * WALKER_RADIUS} m (a walker's diameter)")
        self.opposite = np.asarray(opposite, dtype=np.int64).reshape(m)
        if not ((self.opposite >= -1) & (self.opposite < m)).all():
            raise ValueError(f"opposite has indices outside [-1, {m})")
        self.crosswalks = crosswalks

    @property
    def crosswalks(self) -> np.ndarray:
        """(X, 4) float64 rows (sidewalk a, s on a, sidewalk b, s on b), read-only.

        Assign a new array to change it: it is validated as in ``__init__`` and the crosswalk-end tables follow.
        """
        return self._crosswalks

    @crosswalks.setter
    def crosswalks(self, rows: Sequence[tuple[int, float, int, float]]) -> None:
        cw = np.asarray(rows, dtype=np.float64).reshape(-1, 4)
        ends = cw[:, [0, 2]].astype(np.int64)
        if not ((ends >= 0) & (ends < len(self))).all():
            raise ValueError(f"crosswalks name sidewalks outside [0, {len(self)})")
        cw = cw.copy()
        cw.flags.writeable = False  # the tables below derive from it: change it by assigning a new array
        self._crosswalks = cw
        # The 2X crosswalk ends (every a end, then every b end): sidewalk and arc position, and their
        # positions on the global arc axis of `Polylines`, sorted, for `ends_maybe_within`.
        self.end_sidewalk = np.concatenate([cw[:, 0], cw[:, 2]]).astype(np.int64)
        self.end_s = np.concatenate([cw[:, 1], cw[:, 3]])
        self._end_key = np.sort(self._base[self.end_sidewalk] + self.end_s)

    def ends_maybe_within(self, sidewalk: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Whether a crosswalk end may lie on ``sidewalk`` within [lo, hi]: (W,) bool, never False when one does.

        One sorted search on the global arc axis: rounding base + s is monotone in s, so an end
        within [lo, hi] on the same sidewalk always lands within [base + lo, base + hi]; an end of
        another sidewalk, or one rounded onto a bound, may give a false True (the caller tests exactly).

        Args:
            sidewalk: (W,) int64 sidewalk indices.
            lo: (W,) lower arc positions [m].
            hi: (W,) upper arc positions [m], >= lo.
        """
        base = self._base[sidewalk]
        return self._end_key.searchsorted(base + lo, side="left") < self._end_key.searchsorted(base + hi, side="right")


@dataclass
class Walkers:
    """State of W walkers; arrays of shape (W,) (points (W, 2)).

    Attributes:
        xy: Positions [m].
        heading: Headings [rad].
        speed: Walking speeds [m/s].
        mode: `SIDEWALK` or `CROSSING`, int64.
        sidewalk: Current (or target, while crossing) sidewalk, int64.
        s: Arc position on it [m] (the target's while crossing).
        direction: +1 or -1 along the sidewalk.
        offset: Lateral offset within the sidewalk [m].
        start: Crossing start points [m].
        end: Crossing end points [m].
        jaywalker: Whether the walker jaywalks.
        crosswalk: Crosswalk (row of `Sidewalks.crosswalks`) the walker waits at or crosses, int64,
            -1 otherwise (a jaywalker crossing included).
    """

    xy: np.ndarray
    heading: np.ndarray
    speed: np.ndarray
    mode: np.ndarray
    sidewalk: np.ndarray
    s: np.ndarray
    direction: np.ndarray
    offset: np.ndarray
    start: np.ndarray
    end: np.ndarray
    jaywalker: np.ndarray
    crosswalk: np.ndarray


def _sidewalk_pose(sw: Sidewalks, sidewalk, s, direction, offset):
    """Points ``offset`` to the left of the centreline at ``s`` (p + offset * (-sin h, cos h)), facing ``direction``."""
    p, h = sw.at(sidewalk, s)
    xy = np.empty_like(p)
    np.subtract(p[:, 0], offset * np.sin(h), out=xy[:, 0])
    np.add(p[:, 1], offset * np.cos(h), out=xy[:, 1])
    return xy, np.where(direction > 0, h, h + np.pi)


def spawn_walkers(sw: Sidewalks, n: int, rng: np.random.Generator, jaywalk_share: float = 0.0) -> Walkers:
    """``n`` walkers at random points of random sidewalks (uniform), walking either way.

    Raises:
        ValueError: If n < 0 or jaywalk_share is outside [0, 1].
    """
    if n < 0:
        raise ValueError(f"n={n!r}: must be >= 0")
    if not 0.0 <= jaywalk_share <= 1.0:
        raise ValueError(f"jaywalk_share={jaywalk_share!r}: must lie in [0, 1]")
    sidewalk = rng.integers(len(sw), size=n)
    s = rng.random(n) * sw.length[sidewalk]
    direction = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    offset = (rng.random(n) - 0.5) * (sw.width[sidewalk] - 2 * WALKER_RADIUS)
    speed = rng.uniform(*WALK_SPEED_RANGE, size=n)
    jay = rng.random(n) < jaywalk_share
    xy, heading = _sidewalk_pose(sw, sidewalk, s, direction, offset)
    return Walkers(xy, heading, speed, np.zeros(n, dtype=np.int64), sidewalk, s, direction, offset,
                   xy.copy(), xy.copy(), jay, np.full(n, -1, dtype=np.int64))


def step_walkers(w: Walkers, sw: Sidewalks, rng: np.random.Generator, dt: float = C.DT,
                 cross_probability: float = 0.5, jaywalk_rate: float = 0.02,
                 crosswalk_arrival: np.ndarray | None = None) -> Walkers:
    """Advance all walkers by one tick (module docstring). Draws a fixed number of numbers per tick.

    Args:
        w: Walkers at the start of the tick (not modified).
        sw: The sidewalks.
        rng: Generator for crossing decisions and new directions.
        dt: Tick length [s], > 0.
        cross_probability: Probability of crossing when passing a crosswalk end, in [0, 1].
        jaywalk_rate: Rate [1/s] at which a jaywalker on a sidewalk starts to jaywalk, >= 0.
        crosswalk_arrival: (X,) float64 [s], one per row of ``sw.crosswalks``: time until the first
            vehicle reaches each crosswalk (0 while one is on it, inf for none), >= 0. A waiting
            walker starts crossing once it exceeds its crossing time plus `YIELD_MARGIN`. None:
            no traffic (nobody waits).

    Returns:
        The walkers at the end of the tick.

    Raises:
        ValueError: If dt <= 0, cross_probability is outside [0, 1], jaywalk_rate < 0, or
            crosswalk_arrival is not (X,) or has a value < 0 (NaN included).
    """
    if not dt > 0 or not 0 <= cross_probability <= 1 or not jaywalk_rate >= 0:
        raise ValueError(f"dt={dt!r} (> 0), cross_probability={cross_probability!r} ([0, 1]) or "
                         f"jaywalk_rate={jaywalk_rate!r} (>= 0) out of range")
    cw = sw.crosswalks
    if crosswalk_arrival is not None:
        arrival = np.asarray(crosswalk_arrival, dtype=np.float64)
        if arrival.shape != (len(cw),) or np.count_nonzero(arrival >= 0) != arrival.size:  # NaN fails too
            raise ValueError(f"crosswalk_arrival has shape {arrival.shape} or a value < 0: must be ({len(cw)},) "
                             "times >= 0 [s]")
    n = len(w.speed)
    u_cross, u_jay, u_dir = rng.random((3, n))  # the same numbers as three rng.random(n) calls, in order
    mode, sidewalk, crosswalk = w.mode.copy(), w.sidewalk.copy(), w.crosswalk.copy()
    start, end = w.start.copy(), w.end.copy()
    walking = mode == SIDEWALK
    # On sidewalks: advance, turn back at the ends (rows not walking keep their s).
    s_new = w.s + w.direction * w.speed * dt
    length = sw.length[sidewalk]
    turn = walking & ((s_new < 0) | (s_new > length))
    s = np.where(walking, s_new.clip(0.0, length), w.s)
    direction = np.where(turn, -w.direction, w.direction)
    # Deciders who passed a crosswalk end this tick wait at it; the first crosswalk (lowest row) passed at
    # its a end wins, else the first passed at its b end. A cheap conservative test first, exact on its hits.
    deciding = walking & (u_cross < cross_probability)
    lo, hi = np.minimum(w.s, s), np.maximum(w.s, s)
    rows = np.flatnonzero(deciding & sw.ends_maybe_within(sidewalk, lo, hi))
    if rows.size:
        passed = (sidewalk[rows, None] == sw.end_sidewalk) & (lo[rows, None] <= sw.end_s) & (sw.end_s <= hi[rows, None])
        at_a, at_b = passed[:, :len(cw)], passed[:, len(cw):]
        from_a = at_a.any(axis=1)
        first = np.where(from_a, at_a.argmax(axis=1), at_b.argmax(axis=1))
        go = from_a | at_b.any(axis=1)
        rows, first, from_a = rows[go], first[go], from_a[go]
        a_end, b_end = first, first + len(cw)  # indices into sw.end_sidewalk and sw.end_s
        src, dst = np.where(from_a, a_end, b_end), np.where(from_a, b_end, a_end)
        start[rows], _ = sw.at(sw.end_sidewalk[src], sw.end_s[src])
        end[rows], _ = sw.at(sw.end_sidewalk[dst], sw.end_s[dst])
        mode[rows], sidewalk[rows], s[rows], crosswalk[rows] = WAITING, sw.end_sidewalk[dst], sw.end_s[dst], first
    # Jaywalkers leave towards the nearest point of the opposite sidewalk, without waiting.
    jay = w.jaywalker & (u_jay < jaywalk_rate * dt)  # rarely true: the other conditions only then
    if np.count_nonzero(jay):
        jay &= (mode == SIDEWALK) & (sw.opposite[sidewalk] >= 0)
    if np.count_nonzero(jay):
        target = sw.opposite[sidewalk[jay]]
        big = float(sw.length.max()) + 1.0
        ts, _, _ = sw.project(target, w.xy[jay], np.zeros(jay.sum()), back=big, ahead=big)
        ts = np.clip(ts, 0.0, sw.length[target])
        start[jay] = w.xy[jay]
        end[jay], _ = sw.at(target, ts)
        mode[jay], sidewalk[jay], s[jay] = CROSSING, target, ts
        crosswalk[jay] = -1
    seg = end - start
    seg_len = np.maximum(np.hypot(seg[:, 0], seg[:, 1]), 1e-9)
    # Waiting walkers go once the crosswalk stays clear for their crossing time plus the margin.
    waiting = mode == WAITING
    if np.count_nonzero(waiting):
        if crosswalk_arrival is None:
            arrival = np.full(len(cw), np.inf)
        mode[waiting & (arrival[np.maximum(crosswalk, 0)] > seg_len / w.speed + YIELD_MARGIN)] = CROSSING
    # Crossing walkers move straight; arrivals rejoin their target sidewalk in a random direction.
    was_crossing = w.mode == CROSSING
    d = w.xy - start
    progress = np.hypot(d[:, 0], d[:, 1]) + w.speed * dt  # read only on crossing rows
    arrived = was_crossing & (progress >= seg_len)
    offset = w.offset.copy()
    if np.count_nonzero(arrived):
        mode[arrived], crosswalk[arrived], offset[arrived] = SIDEWALK, -1, 0.0
        direction[arrived] = np.where(u_dir[arrived] < 0.5, -1.0, 1.0)
    on_sidewalk = mode == SIDEWALK
    xy, heading = _sidewalk_pose(sw, sidewalk, s, direction, np.where(on_sidewalk, w.offset, 0.0))
    if np.count_nonzero(~on_sidewalk):
        frac = (progress / seg_len).clip(0.0, 1.0)[:, None]
        xy = np.where(on_sidewalk[:, None], xy, np.where(was_crossing[:, None], start + frac * seg, start))
        heading = np.where(on_sidewalk, heading, np.arctan2(seg[:, 1], seg[:, 0]))
    return Walkers(xy, heading, w.speed, mode, sidewalk, s, direction, offset, start, end, w.jaywalker, crosswalk)
