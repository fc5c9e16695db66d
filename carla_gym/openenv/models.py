"""OpenEnv CARLA wire models, field for field as upstream's ``envs/carla_env/models.py``.

Upstream's client package is not on PyPI, so the project defines the same pydantic models on
openenv-core's bases. Field names, types, defaults and validation follow upstream's ``models.py``;
docstrings are this project's. Nothing may be added to
`CarlaObservation`: the unmodified upstream client rejects unknown observation keys, so extra
information travels in ``CarlaState.scenario_data`` (``CarlaState`` allows extra keys).
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal, get_args

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from carla_gym.sim.validate import check_number, json_safe
from carla_gym.sim.world import MAX_ROUTE_STEPS, NavigationCall, ToolCall

ActionType = Literal[
    "control",
    "emergency_stop",
    "brake_vehicle",
    "maintain_speed",
    "lane_change",
    "observe",
    "init_navigation_agent",
    "set_destination",
    "follow_route",
    "capture_image",
]
"""Every ``action_type`` upstream accepts."""

ACTION_TYPES: tuple[str, ...] = get_args(ActionType)


SESSION_CLOSED = "SESSION_CLOSED"
"""Error code of a reply to a message on a session the server has already ended (idle longer
than ``--session-timeout``); the server then closes the connection. This project's code: an
upstream server answers such messages with ``EXECUTION_ERROR``."""


class SessionClosedError(RuntimeError):
    """Raised by a server-side session after the server ended it; its message starts with `PREFIX`."""

    PREFIX = "this session was closed by the server"


_NUMBER_RANGES = {"throttle": (0.0, 1.0), "steer": (-1.0, 1.0), "brake": (0.0, 1.0), "target_speed_kmh": (0.0, 200.0),
                  "brake_intensity": (0.0, 1.0), "destination_x": (-1e6, 1e6), "destination_y": (-1e6, 1e6),
                  "destination_z": (-1e6, 1e6), "route_steps": (1, MAX_ROUTE_STEPS)}
"""Valid range of each number field: upstream's bounds; destinations within 1,000 km
[m] and at most `carla_gym.sim.world.MAX_ROUTE_STEPS` route steps (upstream: unbounded; CARLA maps span a
few km)."""


@contextlib.contextmanager
def _refusal():
    """Re-raise a ValueError as pydantic's own error type.

    A plain ValueError would put the exception object into ``ValidationError.errors()``, which
    openenv-core's server cannot serialise into its ``VALIDATION_ERROR`` envelope: it would end
    the session instead.
    """
    try:
        yield
    except ValueError as exc:
        raise PydanticCustomError("invalid_value", "{reason}", {"reason": str(exc)}) from None


class CarlaAction(Action):
    """One tool call (upstream ``CarlaAction``); the client always sends every field.

    Number fields take the numbers the simulator's `ToolCall` takes (Python or numpy numbers,
    0-d arrays, `decimal.Decimal`) and, like it, refuse booleans and strings (upstream's
    pydantic model would read ``True`` as 1.0 and ``"0.5"`` as 0.5). ``metadata`` is stored as
    plain JSON data (`carla_gym.sim.validate.json_safe`), so numpy values in it can be sent.

    Raises:
        pydantic.ValidationError: A ValueError naming the field, for values out of range or
            of the wrong type.
    """

    action_type: ActionType = Field(default="observe", description="Which tool to call")
    throttle: float = Field(default=0.0, ge=0.0, le=1.0, description="control: throttle in [0, 1]")
    steer: float = Field(default=0.0, ge=-1.0, le=1.0, description="control: steer in [-1, 1], positive right")
    brake: float = Field(default=0.0, ge=0.0, le=1.0, description="control: brake in [0, 1]")
    lane_direction: str | None = Field(default=None, description="lane_change: 'left' or 'right'")
    target_speed_kmh: float | None = Field(default=None, ge=0.0, le=200.0,
                                           description="maintain_speed: target [km/h]")
    brake_intensity: float | None = Field(default=None, ge=0.0, le=1.0, description="brake_vehicle: in [0, 1]")
    target_lane_id: str | None = Field(default=None, description="lane_change: target lane such as 'lane_-1'")
    navigation_behavior: str | None = Field(default="normal", description="init_navigation_agent: behaviour")
    destination_x: float | None = Field(default=None, description="set_destination: x [m]")
    destination_y: float | None = Field(default=None, description="set_destination: y [m]")
    destination_z: float | None = Field(default=None, description="set_destination: z [m]")
    route_steps: int | None = Field(default=1, ge=1, description="follow_route: ticks to follow the route")

    @field_validator(*_NUMBER_RANGES, mode="before")
    @classmethod
    def _plain_number(cls, value: Any, info) -> Any:
        """A number field checked by `ToolCall`'s rule, as a Python float (int for route_steps)."""
        if value is None:
            return None
        lo, hi = _NUMBER_RANGES[info.field_name]
        with _refusal():
            return check_number(info.field_name, value, lo, hi, integer=info.field_name == "route_steps")

    @field_validator("metadata", mode="before")
    @classmethod
    def _plain_metadata(cls, value: Any) -> Any:
        with _refusal():
            return json_safe(value, "metadata") if isinstance(value, dict) else value


class CarlaObservation(Observation):
    """What the ego sees after a reset or step (upstream ``CarlaObservation``).

    ``done``, ``reward`` and ``metadata`` (from the base) are removed from the nested wire
    observation by openenv-core; clients read ``StepResult.reward`` and ``StepResult.done``.
    """

    scene_description: str = Field(default="", description="Static scenario prompt")
    speed_kmh: float = Field(default=0.0, description="Ego speed [km/h]")
    location: tuple[float, float, float] = Field(default=(0.0, 0.0, 0.0), description="Ego x, y, z [m]")
    rotation: tuple[float, float, float] = Field(default=(0.0, 0.0, 0.0), description="Pitch, yaw, roll [deg]")
    goal_distance: float | None = Field(default=None, description="Straight-line distance to the goal [m]")
    goal_direction: str | None = Field(default=None, description="Compass sector of the goal")
    current_lane: str = Field(default="unknown", description="Lane of the ego, e.g. 'lane_0'")
    nearby_actors: list[dict[str, Any]] = Field(default_factory=list,
                                                description="Actors within 50 m: type, id, distance, position")
    collision_detected: bool = Field(default=False, description="Whether any collision happened this episode")
    collision_intensity: float = Field(default=0.0, description="Collision intensity")
    collided_with: str | None = Field(default=None, description="Type id of the first actor hit")
    scenario_name: str = Field(default="", description="Scenario name")
    simulation_time: float = Field(default=0.0, description="Simulated time [s]")
    step_number: int = Field(default=0, description="Steps taken this episode")
    done_reason: str = Field(default="", description="'scenario_complete' when done, else ''")
    rubric_reward: float | None = Field(default=None, description="Rubric reward of this step")
    camera_image: str | None = Field(default=None, description="Base64 JPEG, only from capture_image")


class CarlaState(State):
    """Episode bookkeeping (upstream ``CarlaState``); extra keys are allowed."""

    scenario_name: str = Field(default="default", description="Scenario name")
    town: str = Field(default="Town10HD_Opt", description="CARLA map")
    weather: str = Field(default="ClearNoon", description="Weather preset")
    total_distance: float = Field(default=0.0, description="Distance driven [m]")
    total_reward: float = Field(default=0.0, description="Sum of raw rewards")
    simulation_time: float = Field(default=0.0, description="Simulated time [s]")
    num_turns: int = Field(default=0, description="Steps taken (capture_image excluded)")
    total_tool_calls: int = Field(default=0, description="Tool calls made (capture_image excluded)")
    tool_call_counts: dict[str, int] = Field(default_factory=dict, description="Calls per action_type")
    is_truncated: bool = Field(default=False, description="Whether the episode was truncated")
    average_speed: float = Field(default=0.0, description="Mean post-step speed [km/h]")
    max_speed: float = Field(default=0.0, description="Highest post-step speed [km/h]")
    collisions: list[dict[str, Any]] = Field(default_factory=list, description="Collision records")
    collisions_count: int = Field(default=0, description="Number of collision records")
    collision_intensity_total: float = Field(default=0.0, description="Sum of collision intensities")
    scenario_data: dict[str, Any] = Field(default_factory=dict,
                                          description="This project's extras: outcome, goal, seed")


TOOL_CALL_FIELDS = ("throttle", "steer", "brake", "lane_direction", "target_speed_kmh", "brake_intensity",
                    "target_lane_id")
"""`CarlaAction` fields the trolley scenarios read (`ToolCall`)."""

NAVIGATION_FIELDS = ("navigation_behavior", "destination_x", "destination_y", "destination_z", "route_steps")
"""`CarlaAction` fields only the navigation actions read (`NavigationCall`), upstream's names and defaults
(upstream's ``models.py``: ``navigation_behavior`` "normal", ``route_steps`` 1, destinations None)."""


def to_tool_call(action: CarlaAction, navigation: bool = False) -> ToolCall:
    """The simulator's tool call for a wire action.

    Args:
        action: The wire action.
        navigation: Whether the session runs a navigation scenario (maze, free roam): then the result is
            a `NavigationCall` carrying `NAVIGATION_FIELDS` too, and all 10 action types are valid.

    Raises:
        ValueError: For navigation actions in a trolley scenario and for values the simulator rejects
            (e.g. a ``lane_direction`` other than left or right on a ``lane_change``, ``route_steps``
            above `carla_gym.sim.world.MAX_ROUTE_STEPS`).
    """
    if navigation:
        keys = TOOL_CALL_FIELDS + NAVIGATION_FIELDS
        return NavigationCall(action.action_type, **{k: getattr(action, k) for k in keys})
    return ToolCall(action.action_type, **{k: getattr(action, k) for k in TOOL_CALL_FIELDS})


def from_tool_call(call: ToolCall) -> CarlaAction:
    """The wire action for a simulator tool call (a `NavigationCall` keeps its navigation fields)."""
    keys = TOOL_CALL_FIELDS + NAVIGATION_FIELDS
    return CarlaAction(action_type=call.action_type, **{k: getattr(call, k) for k in keys})
