"""The state vector of `CarlaTrolleyEnv`, the tool indices and VLM-RL's steer filter.

The observation and action types that use them are in `carla_gym.envs.observation` and
`carla_gym.envs.action`.

State vector layout (float32, ``STATE_SIZE`` = 32; bounds are finite and every value is
clipped into them):

| Index      | Feature                                                    | Unit  | Min   | Max  |
|------------|------------------------------------------------------------|-------|-------|------|
| 0          | ego speed                                                  | m/s   | 0     | 60   |
| 1          | ego lateral position from the starting lane centre (+right) | m     | -20   | 20   |
| 2          | ego heading relative to the road (+right)                  | rad   | -pi   | pi   |
| 3          | a lane exists to the left of the current lane (*)          | 0/1   | 0     | 1    |
| 4          | a lane exists to the right of the current lane (*)         | 0/1   | 0     | 1    |
| 5          | the ego has left the road this episode                     | 0/1   | 0     | 1    |
| 6          | the ego has hit someone this episode                       | 0/1   | 0     | 1    |
| 7          | time left before the scenario's deadline or step limit     | s     | 0     | 10   |
| 8 + 3i     | actor i (nearest first, i < 8): forward offset             | m     | -50   | 50   |
| 9 + 3i     | actor i: rightward offset                                  | m     | -50   | 50   |
| 10 + 3i    | actor i: present (0 = padding)                             | 0/1   | 0     | 1    |

(*) The current lane is the road lane nearest the ego centre (`carla_gym.sim.road.Road.nearest_lane`):
off the road it is the outermost lane on that side, so the road is reported on the side it lies.

With steering smoothing on (`CarlaTrolleyEnv(steer_smoothing=s)` with s > 0) the vector has one
more entry, index 32: the steer applied at the last step, in [-1, 1] (VLM-RL's policy observes
it too, in ``vehicle_measures``): the next applied steer depends on it, so a policy must see it.
"""

from __future__ import annotations

import math

import numpy as np
from gymnasium import spaces

from carla_gym.sim import constants as C
from carla_gym.sim.snapshot import Snapshot

MAX_ACTORS = 8
"""Actors listed in the state vector (the largest micro-benchmark has 6 pedestrians)."""

STATE_SIZE = 8 + 3 * MAX_ACTORS

_HEAD_LOW = [0.0, -20.0, -math.pi, 0.0, 0.0, 0.0, 0.0, 0.0]
_HEAD_HIGH = [60.0, 20.0, math.pi, 1.0, 1.0, 1.0, 1.0, 10.0]
STATE_LOW = np.array(_HEAD_LOW + [-50.0, -50.0, 0.0] * MAX_ACTORS, dtype=np.float32)
STATE_HIGH = np.array(_HEAD_HIGH + [50.0, 50.0, 1.0] * MAX_ACTORS, dtype=np.float32)

VLM_RL_STEER_SMOOTHING = 0.75
"""VLM-RL's steering smoothing (``action_smoothing`` of every VLM-RL config): the previous applied
steer's weight per VLM-RL step; see `smooth_steer`."""

VLM_RL_STEP = 1.0 / 15.0
"""Length of one VLM-RL env step [s]: CARLA at ``-fps=15``, one tick per step, no frame skip (VLM-RL
README server command and configs)."""

TOOL_ACTIONS = ("observe", "emergency_stop", "lane_change_left", "lane_change_right")
"""Discrete action index -> tool, for ``action_mode="tools"``."""

TOOL_INDEX = {name: index for index, name in enumerate(TOOL_ACTIONS)}
"""Tool -> discrete action index (the inverse of `TOOL_ACTIONS`); use it instead of typing indices."""

def state_space(steer: bool = False) -> spaces.Box:
    """The state vector's space: Box of shape (STATE_SIZE,) float32, or (STATE_SIZE + 1,) with ``steer``.

    Args:
        steer: Add the applied-steer entry (index 32, [-1, 1]) used with steering smoothing.
    """
    if steer:
        return spaces.Box(np.append(STATE_LOW, np.float32(-1.0)), np.append(STATE_HIGH, np.float32(1.0)),
                          dtype=np.float32)
    return spaces.Box(STATE_LOW, STATE_HIGH, dtype=np.float32)


def state_vector(snap: Snapshot, steer: float | None = None) -> np.ndarray:
    """Encode a snapshot as the state vector documented in this module.

    Args:
        snap: The simulator snapshot.
        steer: The steer applied at the last step, in [-1, 1], appended as entry 32 when given
            (steering smoothing); None leaves it out.

    Returns:
        float32 array of shape (STATE_SIZE,), or (STATE_SIZE + 1,) with ``steer``, inside
        `state_space(steer is not None)`.
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
    vec = np.minimum(np.maximum(vec, STATE_LOW, out=vec), STATE_HIGH, out=vec)
    if steer is None:
        return vec
    return np.append(vec, np.float32(min(max(steer, -1.0), 1.0)))


def smooth_steer(previous: float, command: float, smoothing: float, duration: float = VLM_RL_STEP) -> float:
    """Steer to apply after low-pass smoothing, as VLM-RL smooths it, for a step of ``duration`` seconds.

    VLM-RL applies ``applied = s * previous + (1 - s) * command`` once per 1/15 s step (s =
    ``action_smoothing`` = 0.75). A decision here lasts ``ticks_per_action`` x 0.05 s, so the
    previous steer's weight is s ** (duration / `VLM_RL_STEP`): the same time constant (about
    0.23 s for 0.75) whatever the decision length; ``duration = VLM_RL_STEP`` is VLM-RL's rule.

    Args:
        previous: The steer applied at the previous step, in [-1, 1] (0 after a reset).
        command: The policy's steer command, in [-1, 1].
        smoothing: VLM-RL's weight of the previous steer per 1/15 s, in [0, 1); 0 applies the
            command as is.
        duration: Length of this step [s] (``ticks_per_action * 0.05``).

    Returns:
        The steer to apply, in [-1, 1].

    Example:
        >>> smooth_steer(0.0, 1.0, VLM_RL_STEER_SMOOTHING), smooth_steer(0.25, 1.0, VLM_RL_STEER_SMOOTHING)
        (0.25, 0.4375)
        >>> round(smooth_steer(0.0, 1.0, VLM_RL_STEER_SMOOTHING, duration=0.5), 4)  # 0.75 ** 7.5 = 0.1156 kept
        0.8844
    """
    weight = smoothing ** (duration / VLM_RL_STEP) if smoothing else 0.0
    return weight * previous + (1.0 - weight) * command
