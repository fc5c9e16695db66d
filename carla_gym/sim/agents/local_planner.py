"""CARLA's local planner over routes held in arrays: waypoint queue, reach test, tracking.

A batch of N routes is stored padded to the longest, M waypoints (`Routes`). The planner's
queue of an agent is the suffix of its route from ``index`` on: popping reached waypoints only
advances ``index``, so N agents advance with one vectorised call.

Each tick, from the front of the queue, waypoints closer to the vehicle than
``BASE_MIN_DISTANCE + DISTANCE_RATIO * speed`` (speed in m/s) are removed, stopping at the first
that is not; the route's last waypoint is removed only within `LAST_WAYPOINT_DISTANCE`. The
target is the new front of the queue; the PIDs of `pid` steer towards it at the target speed.
An empty queue (route done) gives throttle 0, brake 1, steer 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from carla_gym.sim.agents.pid import ControllerState, heading_error, vehicle_control

BASE_MIN_DISTANCE = 3.0
"""Reach distance at standstill [m]. CARLA LocalPlanner ``base_min_distance``."""

DISTANCE_RATIO = 0.5
"""Extra reach distance per m/s of speed [s]. CARLA LocalPlanner ``distance_ratio``."""

LAST_WAYPOINT_DISTANCE = 1.0
"""Reach distance of a route's last waypoint [m]. CARLA LocalPlanner (the queue's last element)."""

SAMPLING_RADIUS = 2.0
"""Waypoint spacing CARLA's planners sample routes at [m] (CARLA's agents; routes given
to this module should have 1 to 2 m spacing)."""

DEFAULT_TARGET_SPEED_KMH = 20.0
"""Target speed of the local planner and the basic agent [km/h] (CARLA's agents)."""

_WINDOW = 64
"""Waypoints tested per pass when popping the queue (passes repeat while all are reached)."""

_PROGRESS_BACK, _PROGRESS_AHEAD = 48, 8
"""Segments behind / ahead of the queue's front searched when projecting onto the route."""


class _Tables(NamedTuple):
    """Index tables of a `Routes` batch that every tick reuses (built once per `Routes`, see `Routes.tables`).

    Attributes:
        rows: Route numbers 0..N-1, int64 of shape (N,).
        rows_column: The same as a column, shape (N, 1).
        last: Index of each route's last waypoint (``count - 1``), int64 of shape (N,).
        window: Offsets 0.._WINDOW of a pop pass's waypoints from the queue's front, int64 of shape (_WINDOW + 1,).
        xy: Waypoints [m] padded with NaN from ``count`` on (no distance to them is below a limit, so they are
            never reached), float64 of shape (N, M + _WINDOW + 1, 2): a pass's window never runs off it.
        is_last: True at each route's last waypoint, bool of shape (N, M + _WINDOW + 1).
    """

    rows: np.ndarray
    rows_column: np.ndarray
    last: np.ndarray
    window: np.ndarray
    xy: np.ndarray
    is_last: np.ndarray


@dataclass(frozen=True)
class Routes:
    """N routes padded to M waypoints (the last waypoint repeats in the padding).

    Attributes:
        xy: Waypoints [m], float64 of shape (N, M, 2).
        yaw: Lane heading at each waypoint [rad], shape (N, M).
        speed_limit_kmh: Speed limit at each waypoint [km/h], shape (N, M).
        junction_turn: True where the waypoint is a turn inside a junction, bool of shape (N, M).
        count: Real waypoints of each route, int64 of shape (N,), >= 1.
        s: Distance along the route to each waypoint [m], shape (N, M), s[:, 0] = 0.
    """

    xy: np.ndarray
    yaw: np.ndarray
    speed_limit_kmh: np.ndarray
    junction_turn: np.ndarray
    count: np.ndarray
    s: np.ndarray

    @property
    def length(self) -> np.ndarray:
        """Total length of each route [m], shape (N,)."""
        return self.s[np.arange(len(self.count)), self.count - 1]

    @cached_property
    def tables(self) -> _Tables:
        """Index tables the planner's tick reuses, built on first use (the arrays must not change after)."""
        n, m = self.xy.shape[:2]
        position = np.arange(m + _WINDOW + 1)
        xy = np.full((n, m + _WINDOW + 1, 2), np.nan)
        xy[:, :m] = np.where((position[:m] < self.count[:, None])[..., None], self.xy, np.nan)
        rows, last = np.arange(n), self.count - 1
        return _Tables(rows, rows[:, None], last, np.arange(_WINDOW + 1), xy, position == last[:, None])


def make_routes(
    waypoints: np.ndarray | Sequence[np.ndarray],
    speed_limit_kmh=None,
    junction_turn=None,
    yaw=None,
) -> Routes:
    """Stack one route or a list of routes into `Routes`.

    Args:
        waypoints: One route, an (M, 2) array [m], or a sequence of N such arrays (M may differ).
        speed_limit_kmh: None (no limit given: 90 km/h, CARLA's default town limit is far above the
            agents' targets), a number, or per route an array of shape (M,) [km/h], each > 0.
        junction_turn: None (no junction turns), or per route a bool array of shape (M,).
        yaw: None (the heading of the segment leaving each waypoint, the last repeats the one
            before), or per route an array of shape (M,) [rad].

    Returns:
        The padded routes.

    Raises:
        ValueError: If a route is empty, not of shape (M, 2), not finite, or a per-waypoint array
            does not match its route, or a speed limit is not > 0.
    """
    single = isinstance(waypoints, np.ndarray) and waypoints.ndim == 2
    routes = [waypoints] if single else list(waypoints)
    if not routes:
        raise ValueError("waypoints holds no route; give at least one (M, 2) array")

    def per_route(value):
        if value is None or np.ndim(value) == 0:
            return [value] * len(routes)
        return [value] if single else list(value)

    limits, turns, yaws = per_route(speed_limit_kmh), per_route(junction_turn), per_route(yaw)
    if not len(limits) == len(turns) == len(yaws) == len(routes):
        raise ValueError(f"per-route arrays must number {len(routes)} routes, one per route")
    n, m = len(routes), max(len(np.asarray(r)) for r in routes)
    out = {k: np.zeros((n, m)) for k in ("yaw", "limit", "s")}
    xy, turn, count = np.zeros((n, m, 2)), np.zeros((n, m), dtype=bool), np.zeros(n, dtype=np.int64)
    for i, (route, limit, jt, heading) in enumerate(zip(routes, limits, turns, yaws, strict=True)):
        pts = np.asarray(route, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) == 0:
            raise ValueError(f"route {i} has shape {pts.shape}; need (M, 2) with M >= 1 waypoints")
        if not np.all(np.isfinite(pts)):
            raise ValueError(f"route {i} has non-finite waypoints; all must be finite [m]")
        k = len(pts)
        step = np.diff(pts, axis=0)
        seg = np.hypot(step[:, 0], step[:, 1])
        if heading is None:
            heading = np.arctan2(step[:, 1], step[:, 0]) if k > 1 else np.zeros(0)
            heading = np.append(heading, heading[-1] if k > 1 else 0.0)
        values = {"yaw": heading, "limit": 90.0 if limit is None else limit, "turn": False if jt is None else jt}
        for name, value in values.items():
            arr = np.broadcast_to(np.asarray(value), (k,)) if np.ndim(value) == 0 else np.asarray(value)
            if arr.shape != (k,):
                raise ValueError(f"route {i}: {name} has shape {arr.shape}; need ({k},), one per waypoint")
            values[name] = arr
        if not np.all(np.isfinite(values["limit"])) or np.any(values["limit"] <= 0.0):
            raise ValueError(f"route {i}: speed limits must be finite and > 0 km/h, got min {values['limit'].min()}")
        count[i] = k
        xy[i, :k], xy[i, k:] = pts, pts[-1]
        out["yaw"][i, :k], out["yaw"][i, k:] = values["yaw"], values["yaw"][-1]
        out["limit"][i, :k], out["limit"][i, k:] = values["limit"], values["limit"][-1]
        turn[i, :k] = values["turn"]
        s = np.concatenate([[0.0], np.cumsum(seg)])
        out["s"][i, :k], out["s"][i, k:] = s, s[-1]
    return Routes(xy=xy, yaw=out["yaw"], speed_limit_kmh=out["limit"], junction_turn=turn, count=count, s=out["s"])


@dataclass(frozen=True)
class PlannerState:
    """Local planner memory of N agents.

    Attributes:
        index: Front of each waypoint queue (next waypoint to reach), int64 of shape (N,); equal to
            the route's ``count`` once the route is done.
        controller: The PID controllers' memory.
    """

    index: np.ndarray
    controller: ControllerState

    @classmethod
    def start(cls, n: int) -> PlannerState:
        """State of N agents at the start of their routes."""
        if n < 1:
            raise ValueError(f"agent count n={n} must be >= 1")
        return cls(index=np.zeros(n, dtype=np.int64), controller=ControllerState.zeros((n,)))


def reach_distance(speed) -> np.ndarray:
    """Distance [m] within which a waypoint counts as reached at ``speed`` [m/s] (shape (N,))."""
    return BASE_MIN_DISTANCE + DISTANCE_RATIO * np.asarray(speed, dtype=np.float64)


def pop_reached(routes: Routes, index, x, y, speed) -> np.ndarray:
    """Advance N queues past the waypoints reached (the rule in this module's docstring).

    Args:
        routes: The agents' routes.
        index: Queue fronts before the tick, int64 of shape (N,).
        x: Vehicle positions [m], shape (N,).
        y: Vehicle positions [m], shape (N,).
        speed: Vehicle speeds [m/s], shape (N,).

    Returns:
        The new queue fronts, int64 of shape (N,) (``count`` where a route is done).
    """
    tables = routes.tables
    reach = reach_distance(speed)[:, None]
    x, y = np.asarray(x, dtype=np.float64)[:, None], np.asarray(y, dtype=np.float64)[:, None]
    index = np.asarray(index, dtype=np.int64)
    while True:
        # A pass tests the _WINDOW waypoints from the front, plus one more that counts as not reached, so that
        # argmin (the first not reached) is the number popped: _WINDOW when all were, and another pass follows.
        idx = index[:, None] + tables.window
        wp = tables.xy[tables.rows_column, idx]
        reached = np.hypot(wp[..., 0] - x, wp[..., 1] - y) < np.where(
            tables.is_last[tables.rows_column, idx], LAST_WAYPOINT_DISTANCE, reach
        )
        reached[:, -1] = False
        popped = reached.argmin(axis=1)
        index = index + popped
        if popped.max(initial=0) < _WINDOW:
            return index


def target_waypoint(routes: Routes, index) -> np.ndarray:
    """Index of each agent's target waypoint (the queue's front, the last one once done), shape (N,)."""
    return np.minimum(index, routes.tables.last)


def track(state: PlannerState, routes: Routes, x, y, yaw, speed, target_speed_kmh, max_brake=None):
    """One local planner tick: pop reached waypoints, then steer towards the target at the target speed.

    Args:
        state: Planner memory before the tick (not modified).
        routes: The agents' routes.
        x: Vehicle positions [m], shape (N,).
        y: Vehicle positions [m], shape (N,).
        yaw: Vehicle headings [rad], shape (N,).
        speed: Vehicle speeds [m/s], shape (N,).
        target_speed_kmh: Target speeds [km/h], shape (N,) or a number.
        max_brake: Brake cap of the PID (None: `pid.MAX_BRAKE`).

    Returns:
        ``(throttle, brake, steer, state)``, each control of shape (N,): throttle 0, brake 1,
        steer 0 where the route is done.
    """
    index = pop_reached(routes, state.index, x, y, speed)
    target_kmh = np.broadcast_to(np.asarray(target_speed_kmh, dtype=np.float64), index.shape)
    throttle, brake, steer, new_state = steer_to_front(
        state, routes, index, x, y, yaw, np.asarray(speed) * 3.6, target_kmh, max_brake
    )
    done = index >= routes.count
    throttle, brake, steer = np.where(done, 0.0, throttle), np.where(done, 1.0, brake), np.where(done, 0.0, steer)
    return throttle, brake, steer, new_state


def steer_to_front(state: PlannerState, routes: Routes, index, x, y, yaw, speed_kmh, target_kmh, max_brake=None):
    """The PIDs' controls towards the queue's front ``index`` (popped already), done routes not yet braked.

    `track` after `pop_reached`, for callers that need the new queue fronts first (`behavior.agent_step`).

    Args:
        state: Planner memory before the tick (not modified).
        routes: The agents' routes.
        index: Queue fronts after this tick's pops, int64 of shape (N,).
        x: Vehicle positions [m], shape (N,).
        y: Vehicle positions [m], shape (N,).
        yaw: Vehicle headings [rad], shape (N,).
        speed_kmh: Vehicle speeds [km/h], shape (N,).
        target_kmh: Target speeds [km/h], float64 of shape (N,).
        max_brake: Brake cap of the PID (None: `pid.MAX_BRAKE`).

    Returns:
        ``(throttle, brake, steer, state)``: the PIDs' controls, each of shape (N,) (also where a route is
        done: `track` replaces them there), and the memory after the tick.
    """
    tables = routes.tables
    target = routes.xy[tables.rows, target_waypoint(routes, index)]
    error = heading_error(x, y, yaw, target[:, 0], target[:, 1])
    kwargs = {} if max_brake is None else {"max_brake": max_brake}
    throttle, brake, steer, controller = vehicle_control(state.controller, speed_kmh, target_kmh, error, **kwargs)
    return throttle, brake, steer, PlannerState(index=index, controller=controller)


def arrived(x, y, goal_x, goal_y, radius: float) -> np.ndarray:
    """True where a vehicle is within ``radius`` [m] of its goal (positions [m], shape (N,)).

    Raises:
        ValueError: If ``radius`` is negative or not finite.
    """
    if not np.isfinite(radius) or radius < 0.0:
        raise ValueError(f"radius={radius!r} must be finite and >= 0 [m]")
    return np.hypot(np.asarray(goal_x) - x, np.asarray(goal_y) - y) <= radius


def route_completion(routes: Routes, index, x, y) -> np.ndarray:
    """Fraction of each route's length covered, in [0, 1], shape (N,).

    The vehicle's position is projected onto the nearest route segment among those just behind
    and ahead of the queue's front ``index`` (so a route that passes near itself does not jump);
    the completion is the distance along the route to that point over the route's length. A done
    route (``index == count``) counts 1; a one-waypoint route counts 0 until done.
    """
    n, last_seg = len(routes.count), np.maximum(routes.count - 2, 0)
    rows = np.arange(n)[:, None]
    seg = np.clip(np.asarray(index)[:, None] + np.arange(-_PROGRESS_BACK, _PROGRESS_AHEAD), 0, last_seg[:, None])
    a, b = routes.xy[rows, seg], routes.xy[rows, np.minimum(seg + 1, routes.count[:, None] - 1)]
    ab = b - a
    ap = np.stack([x, y], axis=-1)[:, None, :] - a
    seg_len2 = np.einsum("nkc,nkc->nk", ab, ab)
    t = np.clip(np.einsum("nkc,nkc->nk", ap, ab) / np.maximum(seg_len2, 1e-12), 0.0, 1.0)
    gap = np.linalg.norm(ap - t[..., None] * ab, axis=-1)
    best = np.argmin(gap, axis=1)
    k = seg[np.arange(n), best]
    along = routes.s[np.arange(n), k] + t[np.arange(n), best] * np.sqrt(seg_len2[np.arange(n), best])
    length = routes.length
    completion = np.where(length > 0.0, along / np.maximum(length, 1e-12), 0.0)
    return np.where(np.asarray(index) >= routes.count, 1.0, np.clip(completion, 0.0, 1.0))
