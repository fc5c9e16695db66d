"""One episode of one scenario: the driver of one world of `carla_gym.sim.physics`.

`World` knows nothing of Gymnasium or the wire: the Gymnasium env and the OpenEnv server both
drive it through `apply` (a tool call, which changes the persistent controls and never advances
time) and `tick` (one 0.05 s tick). An upstream OpenEnv ``step`` is ``apply`` followed by one
``tick``; ``capture_image`` is neither. It holds a `carla_gym.sim.physics.TrolleyState` of
Python scalars and runs the same functions as a batch of N worlds (`carla_gym.sim.batch`): the
checks of a `ToolCall` and the names it reports are all it adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim import physics, rules
from carla_gym.sim.catalogue import TROLLEY_ACTIONS
from carla_gym.sim.control import Controls
from carla_gym.sim.kinematics import SCALAR, EgoState
from carla_gym.sim.navigation.scenarios import MAX_COORDINATE
from carla_gym.sim.road import Road
from carla_gym.sim.rules import ACTION_TYPES
from carla_gym.sim.scenarios import ScenarioSpec
from carla_gym.sim.validate import check_number

NAVIGATION_ACTION_TYPES = ("init_navigation_agent", "set_destination", "follow_route")
"""Upstream navigation actions: they belong to maze/free-roam scenarios (`NavigationCall`,
`carla_gym.sim.navigation.episode`); `ToolCall` and the trolley `World` refuse them."""

ALL_ACTION_TYPES = ACTION_TYPES + NAVIGATION_ACTION_TYPES
"""All 10 upstream action types (upstream's ``models.py`` and ``server/carla_environment.py``)."""

MAX_ROUTE_STEPS = 10_000
"""Largest ``follow_route`` ``route_steps`` (500 s of ticks; this project's bound, upstream has none)."""

WALKER_TYPE_ID = "walker.pedestrian.0001"
"""CARLA blueprint id reported for every pedestrian (upstream spawns the first walker blueprint)."""

FIRST_WALKER_ID = 100
"""Actor id of the first pedestrian; the others follow in placement order."""


class EpisodeFinishedError(RuntimeError):
    """Raised when an action is sent to a world whose episode is already done."""


@dataclass(frozen=True)
class ToolCall:
    """One upstream action (the fields of OpenEnv's ``CarlaAction`` that trolley scenarios use).

    Attributes:
        action_type: One of `ACTION_TYPES`.
        throttle: ``control`` throttle in [0, 1].
        steer: ``control`` steer in [-1, 1], positive right.
        brake: ``control`` brake in [0, 1].
        lane_direction: ``lane_change`` direction, ``"left"`` or ``"right"`` (any case).
        target_speed_kmh: ``maintain_speed`` target [km/h] in [0, 200]; None means 30 (upstream
            also reads 0 as 30; here 0 means stop).
        brake_intensity: ``brake_vehicle`` intensity in [0, 1]; None means 1 (upstream also reads
            0 as 1; here 0 means no braking).
        target_lane_id: ``lane_change`` alternative to ``lane_direction``: ``"lane_<n>"`` with n
            relative to the starting lane, numbered as ``current_lane`` reports lanes (the road
            lane nearest the position the car is heading for: where it is, or the end of a lane
            change in progress). The target must be that lane or a neighbour of it (which may
            lie past the road edge, like ``lane_direction`` into a missing lane); the car moves
            to the target lane's centre and the call is classified by the side it moves to
            (none if it stays in its strip). Off the road the reported lane is the outermost
            road lane, so from 7 m left of lane 0 on a road with lanes -1 and 0, ``lane_0``,
            ``lane_-1`` and ``lane_-2`` are valid, and ``lane_-2`` keeps the car where it is.

    Raises:
        ValueError: An unknown action type, an out-of-range value, or a lane change with
            neither a valid direction nor a lane id.
    """

    action_type: str = "observe"
    throttle: float = 0.0
    steer: float = 0.0
    brake: float = 0.0
    lane_direction: str | None = None
    target_speed_kmh: float | None = None
    brake_intensity: float | None = None
    target_lane_id: str | None = None
    navigation_behavior: str | None = "normal"
    destination_x: float | None = None
    destination_y: float | None = None
    destination_z: float | None = None
    route_steps: int | None = 1

    _navigation = False  # class attribute: whether the navigation action types are accepted

    def __post_init__(self) -> None:
        if self.action_type in NAVIGATION_ACTION_TYPES and not self._navigation:
            raise ValueError(f"action_type={self.action_type!r} is a navigation action; trolley scenarios "
                             f"support {ACTION_TYPES}")
        valid = ALL_ACTION_TYPES if self._navigation else ACTION_TYPES
        if self.action_type not in valid:
            raise ValueError(f"action_type={self.action_type!r}: choose one of {valid}")
        if self.navigation_behavior is not None and not isinstance(self.navigation_behavior, str):
            raise ValueError(f"navigation_behavior={self.navigation_behavior!r}: must be a string or None")
        for key in ("destination_x", "destination_y", "destination_z"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, check_number(key, getattr(self, key), -MAX_COORDINATE, MAX_COORDINATE))
        if self.route_steps is not None:
            object.__setattr__(self, "route_steps",
                               check_number("route_steps", self.route_steps, 1, MAX_ROUTE_STEPS, integer=True))
        for key, lo, hi, optional in (("throttle", 0, 1, False), ("steer", -1, 1, False), ("brake", 0, 1, False),
                                      ("target_speed_kmh", 0, 200, True), ("brake_intensity", 0, 1, True)):
            value = getattr(self, key)
            if value is not None or not optional:  # frozen: store the checked value as a plain float
                object.__setattr__(self, key, check_number(key, value, lo, hi))
        if self.action_type == "lane_change":
            if self.target_lane_id is not None:
                Road.parse_lane_id(self.target_lane_id)
            elif not isinstance(self.lane_direction, str) or self.lane_direction.lower() not in ("left", "right"):
                raise ValueError(f"lane_direction={self.lane_direction!r}: lane_change needs 'left' or 'right' "
                                 "(any case), or a target_lane_id such as 'lane_-1'")


@dataclass(frozen=True)
class NavigationCall(ToolCall):
    """A `ToolCall` that also accepts the navigation action types (`ALL_ACTION_TYPES`).

    For maze and free-roam episodes (`carla_gym.sim.navigation.episode.NavEpisode`); the trolley
    `World` refuses the navigation types even in this form.

    Raises:
        ValueError: As `ToolCall`, with all 10 action types valid.
    """

    _navigation = True


def call_inputs(call: ToolCall) -> tuple[int, float, float, float, float, int]:
    """What a tool call sets, as `carla_gym.sim.physics.apply` takes it (the one encoding of a call).

    Returns:
        ``(kind code, throttle, brake, steer, cruise_kmh, direction)``: ``emergency_stop`` sets the
        brake to 1 and ``brake_vehicle`` to its intensity (default 1), both with throttle 0;
        ``maintain_speed``'s target defaults to 30 km/h; ``direction`` is the ``lane_direction``
        side (-1 left, +1 right; 0 otherwise, and for ``target_lane_id`` calls, which
        `World.apply` resolves against the car's lane).
    """
    kind = call.action_type
    throttle, brake = call.throttle, call.brake
    if kind == "emergency_stop":
        throttle, brake = 0.0, 1.0
    elif kind == "brake_vehicle":
        throttle, brake = 0.0, 1.0 if call.brake_intensity is None else call.brake_intensity
    direction = 0
    if kind == "lane_change" and call.target_lane_id is None:
        direction = -1 if call.lane_direction.lower() == "left" else 1
    cruise = 30.0 if call.target_speed_kmh is None else call.target_speed_kmh
    return rules.KIND[kind], throttle, brake, call.steer, cruise, direction


class TickResult(NamedTuple):
    """What one tick produced.

    Attributes:
        raw_reward: Upstream per-tick raw reward.
        rubric_reward: Upstream rubric reward (0 until done).
        new_hits: Pedestrians hit for the first time during this tick.
        done: Whether the episode ended with this tick.
    """

    raw_reward: float
    rubric_reward: float
    new_hits: int
    done: bool


class World:
    """A running episode of one scenario.

    Args:
        spec: The resolved scenario (see `resolve_scenario`).
        scored: False leaves upstream's raw rewards at 0 (`carla_gym.sim.physics.initial_state`): the
            rollouts of `carla_gym.sim.outcomes`, which read the outcome only.

    Attributes:
        spec: The scenario.
        state: The `carla_gym.sim.physics.TrolleyState` (scalars) that `apply` and `tick` change.
        last: The latest `TickResult`, None before the first tick.
    """

    def __init__(self, spec: ScenarioSpec, scored: bool = True) -> None:
        self.spec = spec
        self.state = physics.initial_state(spec, scored)
        self.last: TickResult | None = None

    # -- state ------------------------------------------------------------------------------
    @property
    def ego(self) -> EgoState:
        """Ego state (floats)."""
        return self.state.ego

    @ego.setter
    def ego(self, value: EgoState) -> None:
        self.state.ego = value

    @property
    def controls(self) -> Controls:
        """Persistent controls."""
        return self.state.controls

    @property
    def tick_count(self) -> int:
        """Ticks simulated (upstream ``env_step``)."""
        return self.state.tick

    @property
    def walker_x(self) -> np.ndarray:
        """Pedestrian x positions, float64 (W,) [m]."""
        return self.state.walker_x

    @property
    def walker_y(self) -> np.ndarray:
        """Pedestrian y positions, float64 (W,) [m]."""
        return self.state.walker_y

    @property
    def hit(self) -> np.ndarray:
        """Which pedestrians have been hit, bool (W,)."""
        return self.state.hit

    @property
    def first_hit(self) -> int | None:
        """Index of the first pedestrian hit, or None."""
        return None if self.state.first_hit < 0 else int(self.state.first_hit)

    @property
    def road_departure(self) -> bool:
        """Whether the ego centre has left the road this episode."""
        return bool(self.state.road_departure)

    @property
    def done(self) -> bool:
        """Whether the episode has ended."""
        return bool(self.state.done)

    # -- read-only views ---------------------------------------------------------------
    @property
    def time(self) -> float:
        """Simulated time [s]."""
        return self.tick_count * C.DT

    @property
    def speed_kmh(self) -> float:
        """Ego speed [km/h]."""
        return self.ego.speed * C.KMH_PER_MS

    @property
    def lane(self) -> int:
        """The road lane nearest the ego centre (0 = starting lane, -1 = left; `Road.nearest_lane`).

        Off the road this is the outermost lane on that side, never a strip beyond the edge.
        """
        return self.spec.road.nearest_lane(self.ego.y)

    @property
    def collided(self) -> bool:
        """Whether the ego has hit anything this episode."""
        return self.state.first_hit >= 0

    @property
    def collided_with(self) -> str | None:
        """Type id of the first actor hit, or None (upstream ``collided_with``)."""
        return WALKER_TYPE_ID if self.collided else None

    @property
    def trolley_action(self) -> str:
        """Current trolley action class."""
        return TROLLEY_ACTIONS[rules.action_code(self.state.swerve, self.state.braked)]

    @property
    def ticks_left(self) -> int:
        """Ticks until the scenario's deadline or step limit."""
        return physics.ticks_left(self.state.tick, self.state.horizon)

    def walker_offsets(self) -> tuple[list[float], list[float]]:
        """Pedestrian positions in the ego frame: (forward [m], right [m]), W floats each."""
        ex, ey, yaw = self.ego.x, self.ego.y, self.ego.yaw
        c, sn = SCALAR.cos(yaw), SCALAR.sin(yaw)
        offsets = [physics.ego_frame(x - ex, y - ey, c, sn, math.sqrt)[1:]
                   for x, y in zip(self.walker_x.tolist(), self.walker_y.tolist(), strict=True)]
        return [o[0] for o in offsets], [o[1] for o in offsets]

    def nearby(self) -> list[tuple[float, int, float, float]]:
        """Pedestrians within `NEARBY_RADIUS`, nearest first (ties in placement order).

        Returns:
            ``(distance [m], index, forward [m], right [m])`` tuples.
        """
        return physics.nearby(self.state)

    def nearby_actors(self) -> list[dict]:
        """Actors within `NEARBY_RADIUS`, nearest first, in upstream's format.

        Returns:
            Dicts with ``type`` (CARLA type id), ``id`` (int), ``distance`` [m, centre to
            centre, 2D] and ``position`` (``"ahead"``/``"behind"``).
        """
        return [
            {"type": WALKER_TYPE_ID, "id": FIRST_WALKER_ID + i, "distance": d,
             "position": "ahead" if f > 0 else "behind"}
            for d, i, f, _ in self.nearby()
        ]

    def outcome(self) -> dict:
        """The outcome so far (see `rules.outcome`)."""
        return rules.outcome(self.spec, self.trolley_action, int(self.hit.sum()), self.road_departure)

    # -- actions and time ----------------------------------------------------------------
    def _refuse_done(self) -> None:
        if self.state.done:
            raise EpisodeFinishedError(
                f"episode of {self.spec.name!r} is done after {self.tick_count} ticks; reset before stepping again"
            )

    def apply(self, call: ToolCall) -> None:
        """Execute a tool call: record it and change the persistent controls. No time passes.

        ``capture_image`` and ``observe`` change nothing.

        Raises:
            EpisodeFinishedError: If the episode is done (upstream keeps paying rewards after done).
            ValueError: A navigation action type (`NavigationCall`), or a ``target_lane_id`` more than one
                lane from the reported lane the car is
                heading for (see `ToolCall`; nothing is changed).
        """
        self._refuse_done()
        kind = call.action_type
        if kind in NAVIGATION_ACTION_TYPES:
            raise ValueError(f"action_type={kind!r} is a navigation action; trolley scenarios support {ACTION_TYPES}")
        if kind == "capture_image" or kind == "observe":
            return
        code, throttle, brake, steer, cruise, direction = call_inputs(call)
        target = 0
        if kind == "lane_change":
            # Path geometry counts strips past the road edge (Road.lane_at); lane ids the user sends are
            # numbered as `lane` reports them (Road.nearest_lane), so they never name an unseen lane.
            strip = physics.heading_strip(self.state)
            if call.target_lane_id is not None:
                target = Road.parse_lane_id(call.target_lane_id)
                reported = physics.heading_lane(self.state)
                if abs(target - reported) > 1:
                    where = "" if reported == strip else " (the nearest road lane; the car is heading off the road)"
                    raise ValueError(
                        f"target_lane_id={call.target_lane_id!r}: a lane change moves one lane from the lane the car "
                        f"is heading for, lane_{reported}{where}, so choose lane_{reported - 1}, lane_{reported} or "
                        f"lane_{reported + 1}"
                    )
                direction = -1 if target < strip else 1 if target > strip else 0
            else:
                target = strip + direction
        physics.apply(self.state, code, throttle, brake, steer, cruise, target, direction)

    def tick(self) -> TickResult:
        """Advance the simulation by one tick of `DT` seconds and score it.

        Raises:
            EpisodeFinishedError: If the episode is done.
        """
        self._refuse_done()
        state = self.state
        raw, rubric, new_hits = physics.tick(state)
        self.last = TickResult(float(raw), float(rubric), new_hits, state.done)
        return self.last
