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


_ALL_PRESENT = (True,) * MAX_ACTORS
"""Presence flags of a snapshot's actors (all listed actors are present)."""


def pack_state(speed_kmh, lateral, yaw, left_lane, right_lane, road_departure, collided, ticks_left,
               actor_forward, actor_right, actor_present, steer=None) -> np.ndarray:
    """The state vector of one world or of N worlds: the layout in this module's docstring, clipped to its bounds.

    The one definition of the state vector: `state_vector` (a snapshot) and the vector envs (a
    batch of worlds, `carla_gym.envs.vector`) both call it, so a world gives the same bits either way.

    Args:
        speed_kmh: Ego speed [km/h]: a float, or an array of shape (N,) (likewise below).
        lateral: Lateral position from the starting lane centre [m], +right.
        yaw: Heading relative to the road [rad], +right.
        left_lane: Whether a lane exists left of the current lane.
        right_lane: Whether a lane exists right of the current lane.
        road_departure: Whether the ego left the road.
        collided: Whether the ego hit someone.
        ticks_left: Ticks until the deadline or step limit.
        actor_forward: Forward offsets [m] of the nearest actors, nearest first: up to MAX_ACTORS floats for
            one world, or (N, K) with K <= MAX_ACTORS (the remaining entries are absent).
        actor_right: Rightward offsets [m], like ``actor_forward``.
        actor_present: Whether each entry is an actor (False: padding, written as zeros), like ``actor_forward``;
            the actors come first.
        steer: The steer applied at the last step, appended as entry 32 when given.

    Returns:
        float32 of shape (STATE_SIZE,) or (N, STATE_SIZE) (one more entry with ``steer``).
    """
    if not isinstance(speed_kmh, np.ndarray):  # one world: a list beats array operations on 8-element arrays
        values = [speed_kmh / C.KMH_PER_MS, lateral, yaw, left_lane, right_lane, road_departure, collided,
                  ticks_left * C.DT]
        for forward, right, present in zip(actor_forward, actor_right, actor_present, strict=True):
            if present:
                values += (forward, right, 1.0)
        vec = np.zeros(STATE_SIZE, dtype=np.float32)  # absent actors: zeros
        vec[: len(values)] = values
    else:  # N worlds: the same values, a row per feature, then one transposing copy (float64 -> float32 as above)
        present = np.asarray(actor_present, dtype=bool)
        head = np.empty((8, len(present)))
        for row, value in enumerate((np.divide(speed_kmh, C.KMH_PER_MS), lateral, yaw, left_lane, right_lane,
                                     road_departure, collided, np.multiply(ticks_left, C.DT))):
            head[row] = value
        vec = np.empty((len(present), STATE_SIZE), dtype=np.float32)
        vec[:, :8] = head.T
        actors = vec[:, 8:].reshape(len(present), MAX_ACTORS, 3)
        listed = present.shape[1]  # columns given (fewer than MAX_ACTORS: the rest are absent)
        actors[:, listed:] = 0.0
        actors[:, :listed, 0] = np.where(present, actor_forward, 0.0)
        actors[:, :listed, 1] = np.where(present, actor_right, 0.0)
        actors[:, :listed, 2] = present
    vec = np.minimum(np.maximum(vec, STATE_LOW, out=vec), STATE_HIGH, out=vec)
    if steer is None:
        return vec
    steer = np.clip(np.asarray(steer, dtype=np.float64), -1.0, 1.0).astype(np.float32)
    return np.concatenate((vec, steer[..., None]), axis=-1)


def state_vector(snap: Snapshot, steer: float | None = None) -> np.ndarray:
    """Encode a snapshot as the state vector documented in this module (`pack_state`).

    Args:
        snap: The simulator snapshot.
        steer: The steer applied at the last step, in [-1, 1], appended as entry 32 when given
            (steering smoothing); None leaves it out.

    Returns:
        float32 array of shape (STATE_SIZE,), or (STATE_SIZE + 1,) with ``steer``, inside
        `state_space(steer is not None)`.
    """
    count = min(len(snap.actor_forward), MAX_ACTORS)
    return pack_state(snap.speed_kmh, snap.lateral, snap.yaw, snap.left_lane, snap.right_lane, snap.road_departure,
                      snap.collided, snap.ticks_left, snap.actor_forward[:count], snap.actor_right[:count],
                      _ALL_PRESENT[:count], steer)


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

    Examples:
        >>> smooth_steer(0.0, 1.0, VLM_RL_STEER_SMOOTHING), smooth_steer(0.25, 1.0, VLM_RL_STEER_SMOOTHING)
        (0.25, 0.4375)
        >>> round(smooth_steer(0.0, 1.0, VLM_RL_STEER_SMOOTHING, duration=0.5), 4)  # 0.75 ** 7.5 = 0.1156 kept
        0.8844
    """
    weight = smoothing ** (duration / VLM_RL_STEP) if smoothing else 0.0
    return weight * previous + (1.0 - weight) * command
