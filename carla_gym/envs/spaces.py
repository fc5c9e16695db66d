"""Observation and action spaces of `CarlaTrolleyEnv`, and the mappings into and out of them.

State vector layout (float32, ``STATE_SIZE`` = 32; bounds are finite and every value is
clipped into them):

| Index      | Feature                                                    | Unit  | Min   | Max  |
|------------|------------------------------------------------------------|-------|-------|------|
| 0          | ego speed                                                  | m/s   | 0     | 60   |
| 1          | ego lateral position from the starting lane centre (+right) | m     | -20   | 20   |
| 2          | ego heading relative to the road (+right)                  | rad   | -pi   | pi   |
| 3          | a lane exists to the left of the current lane              | 0/1   | 0     | 1    |
| 4          | a lane exists to the right of the current lane             | 0/1   | 0     | 1    |
| 5          | the ego has left the road this episode                     | 0/1   | 0     | 1    |
| 6          | the ego has hit someone this episode                       | 0/1   | 0     | 1    |
| 7          | time left before the scenario's deadline or step limit     | s     | 0     | 10   |
| 8 + 3i     | actor i (nearest first, i < 8): forward offset             | m     | -50   | 50   |
| 9 + 3i     | actor i: rightward offset                                  | m     | -50   | 50   |
| 10 + 3i    | actor i: present (0 = padding)                             | 0/1   | 0     | 1    |
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from carla_gym.backends.base import Snapshot
from carla_gym.sim import constants as C
from carla_gym.sim.world import ToolCall

MAX_ACTORS = 8
"""Actors listed in the state vector (the largest micro-benchmark has 6 pedestrians)."""

STATE_SIZE = 8 + 3 * MAX_ACTORS

_HEAD_LOW = [0.0, -20.0, -math.pi, 0.0, 0.0, 0.0, 0.0, 0.0]
_HEAD_HIGH = [60.0, 20.0, math.pi, 1.0, 1.0, 1.0, 1.0, 10.0]
STATE_LOW = np.array(_HEAD_LOW + [-50.0, -50.0, 0.0] * MAX_ACTORS, dtype=np.float32)
STATE_HIGH = np.array(_HEAD_HIGH + [50.0, 50.0, 1.0] * MAX_ACTORS, dtype=np.float32)

TOOL_ACTIONS = ("observe", "emergency_stop", "lane_change_left", "lane_change_right")
"""Discrete action index -> tool, for ``action_mode="tools"``."""

_TOOL_CALLS = (
    ToolCall("observe"),
    ToolCall("emergency_stop"),
    ToolCall("lane_change", lane_direction="left"),
    ToolCall("lane_change", lane_direction="right"),
)


def state_space() -> spaces.Box:
    """The state vector's space: Box of shape (STATE_SIZE,), float32."""
    return spaces.Box(STATE_LOW, STATE_HIGH, dtype=np.float32)


def state_vector(snap: Snapshot) -> np.ndarray:
    """Encode a snapshot as the state vector documented in this module.

    Returns:
        float32 array of shape (STATE_SIZE,), inside `state_space()`.
    """
    values = [
        snap.speed_kmh / C.KMH_PER_MS,
        snap.lateral,
        snap.yaw,
        1.0 if snap.left_lane else 0.0,
        1.0 if snap.right_lane else 0.0,
        1.0 if snap.road_departure else 0.0,
        1.0 if snap.collided else 0.0,
        snap.ticks_left * C.DT,
    ]
    for f, r in zip(snap.actor_forward[:MAX_ACTORS], snap.actor_right[:MAX_ACTORS], strict=True):
        values += (f, r, 1.0)
    vec = np.zeros(STATE_SIZE, dtype=np.float32)
    vec[: len(values)] = values
    return np.minimum(np.maximum(vec, STATE_LOW, out=vec), STATE_HIGH, out=vec)


def tool_call(action_mode: str, action) -> ToolCall:
    """Map a Gymnasium action to the tool call it stands for.

    Args:
        action_mode: ``"tools"`` or ``"control"``.
        action: For ``"tools"`` an index into `TOOL_ACTIONS`; for ``"control"``
            ``[steer, throttle_or_brake]`` in [-1, 1]^2: positive second entries are throttle,
            negative ones brake, as in VLM-RL.

    Raises:
        ValueError: If the action is outside the action space.
    """
    if action_mode == "tools":
        try:
            index = int(action)
        except (TypeError, ValueError):
            index = -1
        if index != action or not 0 <= index < len(TOOL_ACTIONS):
            raise ValueError(f"action={action!r}: expected an integer in [0, {len(TOOL_ACTIONS) - 1}] "
                             f"({', '.join(f'{i}={n}' for i, n in enumerate(TOOL_ACTIONS))})")
        return _TOOL_CALLS[index]
    try:
        if np.shape(action) != (2,):
            raise ValueError
        steer, pedal = float(action[0]), float(action[1])
    except (TypeError, ValueError):
        steer = pedal = math.nan
    if not (-1.0 <= steer <= 1.0 and -1.0 <= pedal <= 1.0):  # also rejects NaN
        raise ValueError(f"action={action!r}: expected [steer, throttle_or_brake] with both entries in [-1, 1]")
    return ToolCall("control", throttle=max(pedal, 0.0), brake=max(-pedal, 0.0), steer=steer)
