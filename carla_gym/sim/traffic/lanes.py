"""Lanes as arrays, NPC route bookkeeping, leader search and pure-pursuit lane keeping.

A lane is a centreline polyline sampled at about 1 m in the direction of travel, with a list of
successor lanes (the lanes its end connects to) and a speed limit. NPC routes are arrays: each
vehicle's current lane, arc position s and next lane (drawn at random among the successors
from a seeded Generator when it enters a lane); a vehicle whose lane has no successor ends its
route at the lane's end and respawns at a free spawn point.

One tick of NPC driving: `find_leaders` -> `carla_gym.sim.traffic.idm.idm_acceleration` ->
`idm.pedals_for`; `pursuit_steer` for the steering; `vehicles.step_vehicles`; `advance_routes`.
`drive` bundles the first three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import NUMPY, steer_for_course
from carla_gym.sim.traffic.idm import URBAN, IDMParams, idm_acceleration, pedals_for
from carla_gym.sim.traffic.polylines import Polylines
from carla_gym.sim.traffic.vehicles import Vehicles, make_vehicles

URBAN_SPEED_LIMIT = 50.0 / C.KMH_PER_MS
"""Default lane speed limit [m/s]: 50 km/h, the urban limit (the normal CARLA BehaviorAgent's
max_speed)."""

LOOKAHEAD_BASE = 3.0
"""Pure-pursuit lookahead at standstill [m]: CARLA LocalPlanner base_min_distance (CARLA's agents)."""

LOOKAHEAD_PER_SPEED = 0.5
"""Pure-pursuit lookahead growth [s] (metres per m/s): CARLA LocalPlanner distance_ratio (CARLA's agents)."""

LEADER_HORIZON = 60.0
"""Default distance ahead [m] searched for a leader: beyond the IDM's reach at 50 km/h (s* with dv = 0 is
s0 + v T = 22.8 m, and its effect falls off as (s*/s)^2; own choice)."""

ROUTE_END_MARGIN = 0.5
"""A route ends when the front bumper is within this distance [m] of a dead end's end (own choice)."""


class Lanes(Polylines):
    """Lane centrelines with successors and speed limits.

    Attributes:
        successors: (M, S) int64, each lane's successors padded with -1.
        n_successors: (M,) int64.
        speed_limit: (M,) float64 [m/s].
    """

    def __init__(self, centrelines: Sequence[np.ndarray], successors: Sequence[Sequence[int]],
                 speed_limit=URBAN_SPEED_LIMIT):
        """Build the lanes.

        Args:
            centrelines: M polylines (K_i, 2) [m] in the direction of travel.
            successors: M lists of lane indices in [0, M).
            speed_limit: Scalar or (M,) [m/s], > 0.

        Raises:
            ValueError: On a bad polyline, a successor list count other than M, a successor
                index outside [0, M), or a speed limit <= 0.
        """
        super().__init__(centrelines)
        m = len(self)
        if len(successors) != m:
            raise ValueError(f"len(successors)={len(successors)}: must equal the number of lanes {m}")
        width = max([len(s) for s in successors] + [1])
        self.successors = np.full((m, width), -1, dtype=np.int64)
        for i, succ in enumerate(successors):
            if any(not 0 <= k < m for k in succ):
                raise ValueError(f"successors[{i}]={list(succ)!r}: indices must lie in [0, {m})")
            self.successors[i, :len(succ)] = succ
        self.n_successors = np.array([len(s) for s in successors], dtype=np.int64)
        self.speed_limit = np.broadcast_to(np.asarray(speed_limit, dtype=np.float64), (m,)).copy()
        if not (self.speed_limit > 0).all():
            raise ValueError("speed_limit must be > 0 [m/s]")

    def draw_next(self, lane: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """A random successor of each lane (uniform), -1 for a dead end; draws len(lane) uniforms."""
        lane = np.asarray(lane, dtype=np.int64)
        u = rng.random(lane.shape)
        n = self.n_successors[lane]
        pick = np.minimum((u * n).astype(np.int64), np.maximum(n - 1, 0))
        return np.where(n > 0, self.successors[lane, pick], -1)


@dataclass
class Routes:
    """Route bookkeeping of N vehicles.

    Attributes:
        lane: Current lane, (N,) int64.
        s: Arc position of the centre along it, (N,) float64 [m].
        next_lane: Lane after it, (N,) int64, -1 at a dead end.
    """

    lane: np.ndarray
    s: np.ndarray
    next_lane: np.ndarray


def start_routes(lanes: Lanes, lane, s, rng: np.random.Generator) -> Routes:
    """Routes starting at (lane, s) with a next lane drawn from ``rng``.

    Raises:
        ValueError: If a lane index is outside [0, M).
    """
    lane = np.asarray(lane, dtype=np.int64)
    if not ((lane >= 0) & (lane < len(lanes))).all():
        raise ValueError(f"lane has indices outside [0, {len(lanes)})")
    return Routes(lane, np.asarray(s, dtype=np.float64) + 0.0 * lane, lanes.draw_next(lane, rng))


def place_on_lanes(lanes: Lanes, routes: Routes, rng: np.random.Generator, speed=0.0, ego: bool = False) -> Vehicles:
    """Vehicles standing on their routes' lane points, headed along the lane (sizes from ``rng``)."""
    xy, heading = lanes.at(routes.lane, routes.s)
    return make_vehicles(xy[:, 0], xy[:, 1], heading, speed, rng=rng, ego=ego)


def _ahead(lanes: Lanes, routes: Routes, distance: np.ndarray):
    """Lane point ``distance`` ahead along the route (the next lane past the end, extrapolated at a dead end)."""
    s = routes.s + distance
    rest = lanes.length[routes.lane]
    beyond = (s > rest) & (routes.next_lane >= 0)
    return lanes.at(np.where(beyond, routes.next_lane, routes.lane), np.where(beyond, s - rest, s))


def find_leaders(lanes: Lanes, routes: Routes, v: Vehicles, horizon: float = LEADER_HORIZON,
                 p: IDMParams = URBAN):
    """Each vehicle's leader on its route: same lane ahead, or its next lane, within ``horizon``.

    Vectorised as an (N, N) matrix of centre distances along the route. A dead end acts as a
    standing leader placed so that the IDM stops the front bumper at the lane's end.
    Not handled yet: vehicles merging from other lanes into the same next lane (junction
    negotiation), and lanes beyond the next one.

    Args:
        lanes: The lanes.
        routes: Routes of the N vehicles.
        v: The N vehicles (lengths and speeds used).
        horizon: Largest centre distance ahead [m], > 0.
        p: IDM parameters (its min gap places the dead-end leader).

    Returns:
        ``(leader, gap, leader_speed)``: (N,) int64 leader rows (-1: none or a dead end),
        bumper-to-bumper gaps [m] (inf: free road) and leader speeds [m/s].

    Raises:
        ValueError: If horizon <= 0.
    """
    if not horizon > 0:
        raise ValueError(f"horizon={horizon!r}: must be > 0 [m]")
    lane, s, nxt = routes.lane, routes.s, routes.next_lane
    rest = lanes.length[lane] - s
    same = (lane[None, :] == lane[:, None]) & (s[None, :] > s[:, None])
    d = np.where(same, s[None, :] - s[:, None], np.inf)
    on_next = (lane[None, :] == nxt[:, None]) & (nxt[:, None] >= 0)
    d = np.minimum(d, np.where(on_next, rest[:, None] + s[None, :], np.inf))
    np.fill_diagonal(d, np.inf)
    d[d > horizon] = np.inf
    leader = np.argmin(d, axis=1)
    centre = d[np.arange(len(lane)), leader]
    gap = centre - 0.5 * (v.length + v.length[leader])
    speed = v.speed[leader]
    found = np.isfinite(centre)
    leader = np.where(found, leader, -1)
    gap = np.where(found, gap, np.inf)
    end_gap = rest - 0.5 * v.length + p.min_gap
    dead = (nxt < 0) & (end_gap < gap) & (rest <= horizon)
    return np.where(dead, -1, leader), np.where(dead, end_gap, gap), np.where(dead, 0.0, speed)


def pursuit_steer(lanes: Lanes, routes: Routes, v: Vehicles, dt: float = C.DT) -> np.ndarray:
    """Pure-pursuit steer in [-1, 1] towards the lane point one lookahead ahead.

    Lookahead L = `LOOKAHEAD_BASE` + `LOOKAHEAD_PER_SPEED` * speed (CARLA's LocalPlanner
    waypoint reach distance). The arc tangent to the course (yaw + beta) through the target
    has curvature kappa = 2 sin(alpha) / L (alpha: bearing of the target from the course);
    over this tick's distance v dt the course turns by kappa v dt, and
    `kinematics.steer_for_course` gives the steer that asks the bicycle model for that turn.

    Returns:
        Steer, (N,) float64.
    """
    look = LOOKAHEAD_BASE + LOOKAHEAD_PER_SPEED * v.speed
    target, _ = _ahead(lanes, routes, look)
    course = v.yaw + v.beta
    alpha = np.arctan2(target[:, 1] - v.y, target[:, 0] - v.x) - course
    kappa = 2.0 * np.sin(alpha) / look
    distance = v.speed * dt
    return steer_for_course(v.beta + kappa * distance, distance, NUMPY, v.wheelbase)


def drive(lanes: Lanes, routes: Routes, v: Vehicles, p: IDMParams = URBAN, horizon: float = LEADER_HORIZON,
          dt: float = C.DT):
    """Throttle, brake and steer of N NPCs for one tick: IDM behind each leader plus pure pursuit.

    Returns:
        ``(throttle, brake, steer)``, (N,) float64 each, ready for `vehicles.step_vehicles`.
    """
    _, gap, leader_speed = find_leaders(lanes, routes, v, horizon, p)
    accel = idm_acceleration(v.speed, lanes.speed_limit[routes.lane], gap, leader_speed, p)
    throttle, brake = pedals_for(accel)
    return throttle, brake, pursuit_steer(lanes, routes, v, dt)


def advance_routes(lanes: Lanes, routes: Routes, v: Vehicles, rng: np.random.Generator,
                   spawns: tuple[np.ndarray, np.ndarray] | None = None, clearance: float = 10.0,
                   keep_clear: np.ndarray | None = None):
    """Project the moved vehicles onto their lanes, move them on at lane ends, respawn ended routes.

    Args:
        lanes: The lanes.
        routes: Routes at the start of the tick (not modified).
        v: Vehicles at the end of the tick.
        rng: Generator for next lanes and spawn choices.
        spawns: ``(lane, s)`` arrays of spawn points; None: ended routes stay where they are.
        clearance: A spawn point is free when no vehicle centre lies within this distance [m].
        keep_clear: Centres (K, 2) [m] of other vehicles that are not routed here (the ego), which a free
            spawn point must also keep ``clearance`` from; None: none.

    Returns:
        ``(routes, v, lateral)``: the new routes, the vehicles (respawned rows moved to their
        spawn point at standstill) and each vehicle's signed lateral offset from its lane [m].
    """
    s, lateral, _ = lanes.project(routes.lane, v.xy(), routes.s)
    lane, nxt = routes.lane.copy(), routes.next_lane.copy()
    over = (s > lanes.length[lane]) & (nxt >= 0)
    if over.any():
        s = np.where(over, s - lanes.length[lane], s)
        lane = np.where(over, nxt, lane)
        nxt[over] = lanes.draw_next(lane[over], rng)
    routes = Routes(lane, s, nxt)
    ended = np.flatnonzero((nxt < 0) & (lanes.length[lane] - s - 0.5 * v.length <= ROUTE_END_MARGIN))
    if spawns is not None and ended.size:
        v = Vehicles(**{k: getattr(v, k).copy() for k in v.__dataclass_fields__})
        spawn_lane, spawn_s = (np.asarray(a) for a in spawns)
        spawn_xy, spawn_heading = lanes.at(spawn_lane, spawn_s)
        others = np.zeros((0, 2)) if keep_clear is None else np.asarray(keep_clear, dtype=np.float64).reshape(-1, 2)
        for i in ended:  # rare (a route end), so a short Python loop
            x, y = np.concatenate([v.x, others[:, 0]]), np.concatenate([v.y, others[:, 1]])
            dist = np.hypot(spawn_xy[:, None, 0] - x[None, :], spawn_xy[:, None, 1] - y[None, :]).min(axis=1)
            free = np.flatnonzero(dist > clearance)
            if free.size == 0:
                continue
            k = free[rng.integers(free.size)]
            v.x[i], v.y[i], v.yaw[i] = spawn_xy[k, 0], spawn_xy[k, 1], spawn_heading[k]
            v.speed[i] = v.beta[i] = 0.0
            routes.lane[i], routes.s[i] = spawn_lane[k], spawn_s[k]
            routes.next_lane[i] = lanes.draw_next(spawn_lane[k:k + 1], rng)[0]
            lateral[i] = 0.0
    return routes, v, lateral
