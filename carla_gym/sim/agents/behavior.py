"""CARLA's BasicAgent and BehaviorAgent as pure functions of (agent state, vehicle, route, obstacles).

Obstacles are given per agent as gaps along the route ahead (`Obstacles`): bumper to bumper for
the nearest vehicle (with its speed), to the nearest walker's body, and to the stop line of a red
light; ``inf`` where there is none. Gaps are what CARLA's agents measure after subtracting the
bounding-box extents, so no size is subtracted here.

Basic agent (CARLA's ``agents/navigation``): the local planner at `DEFAULT_TARGET_SPEED_KMH`; an
emergency stop (throttle 0, brake `EMERGENCY_BRAKE`, the planner's steer kept) while a vehicle
or a red light's stop line is closer than 5.0 m + `SPEED_RATIO` x speed [m/s]. It ignores walkers.

Behaviour agent (CARLA's BehaviorAgent: its table of behaviours and its logic), each tick in this order:

1. Emergency stop for a red light closer than 5.0 m + `SPEED_RATIO` x speed (the basic agent's
   margin; CARLA's BehaviorAgent looks only 5.0 m ahead, which no car above about 30 km/h can
   stop in, so the margin is this module's choice).
2. Walkers and vehicles count when closer than the detection range
   max(min_proximity_threshold, speed_limit / 3) (the limit read in km/h, the range in m: CARLA's
   lane-follow search); an emergency stop when one is closer than ``braking_distance``.
3. A detected vehicle otherwise sets the speed by time to collision, ttc = gap / max(1 m/s,
   closing speed): below ``safety_time`` the leader's speed minus ``speed_decrease``; between
   ``safety_time`` and twice that the leader's speed (at least `MIN_SPEED_KMH`); beyond, cruise;
   each capped at min(max_speed, speed_limit - speed_lim_dist) (CARLA BehaviorAgent's car
   following; CARLA's BehaviorAgent has the first and last bands).
4. At a junction turn (the target waypoint's ``junction_turn``): min(max_speed, speed_limit - 5).
5. Otherwise cruise at min(max_speed, speed_limit - speed_lim_dist).

The speed limit is the route's at the target waypoint. ``tailgate_counter`` is kept for the lane
changes that need a town's lanes (not used yet). All targets are clipped at 0 km/h.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from carla_gym.sim.agents.local_planner import (
    DEFAULT_TARGET_SPEED_KMH,
    PlannerState,
    Routes,
    pop_reached,
    steer_to_front,
    target_waypoint,
)
from carla_gym.sim.kinematics import EgoState

BASE_VEHICLE_THRESHOLD = 5.0
"""Vehicle detection distance at standstill of the basic agent [m] (CARLA's agents)."""

BASE_TLIGHT_THRESHOLD = 5.0
"""Red-light detection distance at standstill [m] (CARLA's BasicAgent)."""

SPEED_RATIO = 1.0
"""Extra detection distance per m/s of speed [s]: the speed-dependent margin of CARLA's BasicAgent
(``speed_ratio`` 1)."""

EMERGENCY_BRAKE = 0.6
"""Brake of an emergency stop (CARLA BasicAgent ``_max_brake`` 0.6, as upstream's vendored agents)."""

MIN_SPEED_KMH = 5.0
"""Lowest speed the behaviour agent follows a leader at [km/h]. CARLA BehaviorAgent ``_min_speed``."""

JUNCTION_SPEED_MARGIN_KMH = 5.0
"""Speed below the limit at junction turns [km/h] (CARLA's agents)."""


@dataclass(frozen=True)
class AgentParams:
    """Parameters of one navigation agent (one behaviour for a whole batch).

    Attributes:
        name: "basic", "cautious", "normal" or "aggressive".
        target_speed_kmh: Basic agent's target speed [km/h], >= 0.
        max_speed: Behaviour's top speed [km/h], >= 0.
        speed_lim_dist: Cruise margin below the speed limit [km/h].
        speed_decrease: Speed below the leader's when too close [km/h], >= 0.
        safety_time: Time to collision below which it slows [s], > 0.
        min_proximity_threshold: Smallest obstacle detection range [m], >= 0.
        braking_distance: Emergency-stop gap [m], >= 0.
        tailgate_counter: CARLA's tailgating counter start (lane changes; unused yet).

    Raises:
        ValueError: If a speed, distance or time is negative or not finite (``safety_time`` <= 0).
    """

    name: str = "basic"
    target_speed_kmh: float = DEFAULT_TARGET_SPEED_KMH
    max_speed: float = DEFAULT_TARGET_SPEED_KMH
    speed_lim_dist: float = 0.0
    speed_decrease: float = 0.0
    safety_time: float = 3.0
    min_proximity_threshold: float = 0.0
    braking_distance: float = 0.0
    tailgate_counter: int = 0

    def __post_init__(self):
        for name in ("target_speed_kmh", "max_speed", "speed_decrease", "min_proximity_threshold", "braking_distance"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0.0:
                raise ValueError(f"{name}={value!r} must be finite and >= 0")
        if not np.isfinite(self.speed_lim_dist):
            raise ValueError(f"speed_lim_dist={self.speed_lim_dist!r} must be finite [km/h]")
        if not np.isfinite(self.safety_time) or self.safety_time <= 0.0:
            raise ValueError(f"safety_time={self.safety_time!r} must be finite and > 0 [s]")

    @property
    def is_basic(self) -> bool:
        """True for the basic agent (no behaviour table)."""
        return self.name == "basic"


BEHAVIORS = {
    "cautious": AgentParams("cautious", 40.0, 40.0, 6.0, 12.0, 3.0, 12.0, 6.0, 0),
    "normal": AgentParams("normal", 50.0, 50.0, 3.0, 10.0, 3.0, 10.0, 5.0, 0),
    "aggressive": AgentParams("aggressive", 70.0, 70.0, 1.0, 8.0, 3.0, 8.0, 4.0, -1),
}
"""The three BehaviorAgent behaviours (CARLA's ``behavior_types``)."""


def agent_params(navigation_behavior: str | None) -> AgentParams:
    """Parameters for upstream's ``init_navigation_agent(navigation_behavior)``.

    "cautious", "normal" and "aggressive" give that behaviour; None gives "normal"; anything else
    gives the basic agent at 20 km/h (upstream's ``server/carla_environment.py``).

    >>> agent_params("aggressive").max_speed, agent_params(None).name, agent_params("fast").target_speed_kmh
    (70.0, 'normal', 20.0)
    """
    if navigation_behavior is None:
        return BEHAVIORS["normal"]
    return BEHAVIORS.get(navigation_behavior, AgentParams())


_OBSTACLE_FIELDS = ("vehicle_gap", "vehicle_speed", "walker_gap", "red_light_gap")


@dataclass(frozen=True)
class Obstacles:
    """What N agents see ahead along their routes; ``inf`` where there is nothing.

    Attributes:
        vehicle_gap: Bumper-to-bumper gap to the nearest vehicle ahead [m], shape (N,).
        vehicle_speed: That vehicle's speed [m/s], shape (N,), >= 0.
        walker_gap: Gap to the nearest walker ahead [m], shape (N,).
        red_light_gap: Distance to a red light's stop line [m], shape (N,) (``inf`` when green).

    Raises:
        ValueError: If a value is NaN or a speed negative.
    """

    vehicle_gap: np.ndarray
    vehicle_speed: np.ndarray
    walker_gap: np.ndarray
    red_light_gap: np.ndarray

    def __post_init__(self):
        for name in _OBSTACLE_FIELDS:
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if np.isnan(value).any():
                raise ValueError(f"Obstacles.{name} has NaN; use inf for 'none' [m]")
            object.__setattr__(self, name, value)
        if (self.vehicle_speed < 0.0).any():
            raise ValueError(f"Obstacles.vehicle_speed min {self.vehicle_speed.min()} must be >= 0 [m/s]")

    @classmethod
    def trusted(cls, vehicle_gap, vehicle_speed, walker_gap, red_light_gap) -> Obstacles:
        """Obstacles from float64 arrays of shape (N,) known to be valid (no NaN, speeds >= 0): no checks, no copies.

        For callers that build them each tick from values they computed themselves; the public constructor
        checks.
        """
        obstacles = object.__new__(cls)
        for name, value in zip(_OBSTACLE_FIELDS, (vehicle_gap, vehicle_speed, walker_gap, red_light_gap), strict=True):
            object.__setattr__(obstacles, name, value)
        return obstacles

    @classmethod
    def none(cls, n: int) -> Obstacles:
        """Nothing ahead of any of N agents."""
        inf = np.full(n, np.inf)
        return cls.trusted(inf, np.zeros(n), inf.copy(), inf.copy())


@dataclass(frozen=True)
class AgentStep:
    """Result of one agent tick for N agents.

    Attributes:
        throttle: Throttle in [0, 1], shape (N,).
        brake: Brake in [0, 1], shape (N,).
        steer: Steer in [-1, 1], positive to the right, shape (N,).
        state: Planner memory after the tick.
        target_speed_kmh: Speed the agent aimed at this tick [km/h], shape (N,).
        emergency: True where the agent made an emergency stop, shape (N,).
    """

    throttle: np.ndarray
    brake: np.ndarray
    steer: np.ndarray
    state: PlannerState
    target_speed_kmh: np.ndarray
    emergency: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))


def following_speed(params: AgentParams, speed_kmh, leader_kmh, gap, speed_limit_kmh) -> np.ndarray:
    """Behaviour agent's car-following target [km/h] (step 3 of this module's docstring), shape (N,)."""
    cruise = np.minimum(params.max_speed, speed_limit_kmh - params.speed_lim_dist)
    ttc = gap / np.maximum(1.0, (speed_kmh - leader_kmh) / 3.6)
    slow = np.minimum(np.maximum(leader_kmh - params.speed_decrease, 0.0), cruise)
    follow = np.minimum(np.maximum(MIN_SPEED_KMH, leader_kmh), cruise)
    return np.where(
        (ttc > 0.0) & (ttc < params.safety_time), slow, np.where(ttc < 2.0 * params.safety_time, follow, cruise)
    )


def agent_step(
    params: AgentParams, state: PlannerState, vehicle: EgoState, routes: Routes, obstacles: Obstacles | None = None
) -> AgentStep:
    """One tick of N navigation agents sharing ``params`` (the rules in this module's docstring).

    Args:
        params: The agent kind and behaviour (see `agent_params`).
        state: Planner memory before the tick (not modified).
        vehicle: Vehicle states, the bicycle model's `EgoState` with float64 arrays of shape (N,).
        routes: The agents' routes.
        obstacles: What each agent sees ahead (None: nothing).

    Returns:
        The controls and the memory after the tick.
    """
    n = len(state.index)
    obstacles = Obstacles.none(n) if obstacles is None else obstacles
    speed = np.asarray(vehicle.speed, dtype=np.float64)
    speed_kmh = speed * 3.6
    margin = SPEED_RATIO * speed
    red = obstacles.red_light_gap < BASE_TLIGHT_THRESHOLD + margin
    # The local planner's pops come first: the behaviour agent reads the limit and junction flag at the new front.
    index = pop_reached(routes, state.index, vehicle.x, vehicle.y, speed)
    if params.is_basic:
        target = np.full(n, params.target_speed_kmh)
        emergency = red | (obstacles.vehicle_gap < BASE_VEHICLE_THRESHOLD + margin)
    else:
        tables = routes.tables
        at = target_waypoint(routes, index)
        limit = routes.speed_limit_kmh[tables.rows, at]
        detect = np.maximum(params.min_proximity_threshold, limit / 3.0)
        # A walker or vehicle within the detection range and the braking distance: nearer than the smaller.
        stop_gap = np.minimum(detect, params.braking_distance)
        emergency = red | (obstacles.walker_gap < stop_gap) | (obstacles.vehicle_gap < stop_gap)
        margin_kmh = np.where(routes.junction_turn[tables.rows, at], JUNCTION_SPEED_MARGIN_KMH, params.speed_lim_dist)
        target = np.minimum(params.max_speed, limit - margin_kmh)  # junction turn, else cruise
        leader = obstacles.vehicle_gap < detect
        if leader.any():
            follow = following_speed(params, speed_kmh, obstacles.vehicle_speed * 3.6, obstacles.vehicle_gap, limit)
            target = np.where(leader, follow, target)
    target = np.maximum(target, 0.0)
    throttle, brake, steer, new_state = steer_to_front(
        state, routes, index, vehicle.x, vehicle.y, vehicle.yaw, speed_kmh, target
    )
    # A done route brakes fully (the local planner) and makes no emergency stop; both are rare, so checked first.
    done = index >= routes.count
    if done.any():
        emergency = emergency & ~done
        throttle, brake, steer = np.where(done, 0.0, throttle), np.where(done, 1.0, brake), np.where(done, 0.0, steer)
    else:
        steer = steer.copy()  # not the controller memory's own array
    if emergency.any():
        throttle, brake = np.where(emergency, 0.0, throttle), np.where(emergency, EMERGENCY_BRAKE, brake)
    return AgentStep(throttle, brake, steer, new_state, target, emergency)
