"""Action types of `CarlaTrolleyEnv`: what an action is and which tool call it stands for (HighwayEnv style).

An action type owns the action space and turns each Gymnasium action into the `ToolCall` the
backend executes; the env never branches on ``action_mode``. `ACTION_TYPES` maps each
``action_mode`` name to its class:

| ``action_mode`` | Class | Space |
|---|---|---|
| ``"tools"`` | `ToolsAction` | ``Discrete(4)``: an index into `carla_gym.envs.spaces.TOOL_ACTIONS` |
| ``"control"`` | `ControlAction` | ``Box(-1, 1, (2,), float32)``: ``[steer, throttle (+) / brake (-)]`` |

To add one, subclass `ActionType` (``space``, ``act``; ``reset`` and ``applied_steer`` if it
keeps state) and register it: ``ACTION_TYPES["mine"] = MyAction``; then
``gym.make("CarlaTrolley-v0", action_mode="mine")`` uses it. The constructor receives the env,
whose arguments (``ticks_per_action``, ``steer_smoothing``, ...) are set by then.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np
from gymnasium import spaces

from carla_gym.envs import spaces as S
from carla_gym.sim import constants as C
from carla_gym.sim.world import ToolCall

if TYPE_CHECKING:
    from carla_gym.envs.trolley import CarlaTrolleyEnv

ActType = int | np.integer | np.ndarray
"""An action of `CarlaTrolleyEnv`: an integer index (``"tools"``) or a float32 array of shape (2,) (``"control"``)."""


def parse_control(action: ActType) -> tuple[float, float]:
    """``(steer, throttle_or_brake)`` of a continuous control action, as floats: the one check of the Box(2) actions.

    Args:
        action: Two numbers [steer, throttle_or_brake] in [-1, 1] (a positive second entry is throttle, a
            negative one brake).

    Raises:
        ValueError: ``action`` is not two numbers in [-1, 1] (NaN included); the message names it.
    """
    try:
        if np.shape(action) != (2,):
            raise ValueError
        steer, pedal = float(action[0]), float(action[1])
    except (TypeError, ValueError):
        steer = pedal = math.nan
    if not (-1.0 <= steer <= 1.0 and -1.0 <= pedal <= 1.0):  # also rejects NaN
        raise ValueError(f"action={action!r}: expected [steer, throttle_or_brake] with both entries in [-1, 1]")
    return steer, pedal

def split_pedal(pedal):
    """``(throttle, brake)`` of a ``throttle_or_brake`` entry: its positive part, and its negative part negated.

    The one split of VLM-RL's second action entry, for a float (`ControlAction`) or an array (N,)
    (the vector env, `carla_gym.envs.vector`).
    """
    return np.maximum(pedal, 0.0), np.maximum(np.negative(pedal), 0.0)


class ActionType(abc.ABC):
    """What the agent's actions are: their space and the tool call each one makes.

    Args:
        env: The env, with its constructor arguments set (types read them there).
    """

    def __init__(self, env: CarlaTrolleyEnv) -> None:
        self.env = env

    @abc.abstractmethod
    def space(self) -> spaces.Space:
        """The action space (built once by the env)."""

    @abc.abstractmethod
    def act(self, action: ActType) -> ToolCall:
        """The tool call that ``action`` stands for.

        Raises:
            ValueError: ``action`` is outside `space` (the message names the value and the valid range).
        """

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Forget the previous episode (called by ``env.reset``)."""

    @property
    def applied_steer(self) -> float | None:
        """The steer applied at the last step, observed as state-vector entry 32; None adds no entry."""
        return None


class ToolsAction(ActionType):
    """``Discrete(4)``: call `carla_gym.envs.spaces.TOOL_ACTIONS` ``[action]``.

    Raises:
        ValueError: ``env.steer_smoothing`` is not 0 (it applies to `ControlAction` only).
    """

    CALLS = tuple(ToolCall("lane_change", lane_direction=name.removeprefix("lane_change_"))
                   if name.startswith("lane_change_") else ToolCall(name) for name in S.TOOL_ACTIONS)
    """The tool call of each index, in `TOOL_ACTIONS` order."""

    def __init__(self, env: CarlaTrolleyEnv) -> None:
        super().__init__(env)
        if env.steer_smoothing:
            raise ValueError(f"steer_smoothing={env.steer_smoothing!r} applies to action_mode='control' only (got "
                             f"action_mode={env.action_mode!r}); leave it at 0.0")

    def space(self) -> spaces.Discrete:
        """``Discrete(len(TOOL_ACTIONS))`` = Discrete(4)."""
        return spaces.Discrete(len(S.TOOL_ACTIONS))

    def act(self, action: ActType) -> ToolCall:
        """The tool call of index ``action``.

        Raises:
            ValueError: ``action`` is not an integer in [0, 3].
        """
        try:
            index = int(action)
        except (TypeError, ValueError):
            index = -1
        if index != action or not 0 <= index < len(S.TOOL_ACTIONS):
            raise ValueError(f"action={action!r}: expected an integer in [0, {len(S.TOOL_ACTIONS) - 1}] "
                             f"({', '.join(f'{i}={n}' for i, n in enumerate(S.TOOL_ACTIONS))})")
        return self.CALLS[index]


class ControlAction(ActionType):
    """``Box(-1, 1, (2,), float32)`` = ``[steer, throttle_or_brake]``, as VLM-RL; upstream's ``control`` action.

    Positive second entries are throttle, negative ones brake. With ``env.steer_smoothing`` = s > 0
    the applied steer is VLM-RL's low-pass (`carla_gym.envs.spaces.smooth_steer` over a decision of
    ``ticks_per_action`` x 0.05 s), starting from 0 after each reset, and `applied_steer` is
    observed (state-vector entry 32).
    """

    def __init__(self, env: CarlaTrolleyEnv) -> None:
        super().__init__(env)
        self.smoothing = env.steer_smoothing
        self.duration = env.ticks_per_action * C.DT  # [s] per decision
        self._steer = 0.0  # applied at the previous step

    def space(self) -> spaces.Box:
        """``Box(-1, 1, (2,), float32)``."""
        return spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)

    def act(self, action: ActType) -> ToolCall:
        """Upstream's ``control`` call for ``[steer, throttle_or_brake]``, with the smoothed steer.

        Raises:
            ValueError: ``action`` is not two numbers in [-1, 1] (NaN included).
        """
        steer, pedal = parse_control(action)
        throttle, brake = split_pedal(pedal)
        call = ToolCall("control", throttle=throttle, brake=brake, steer=steer)
        if self.smoothing:
            self._steer = S.smooth_steer(self._steer, steer, self.smoothing, self.duration)
            call = dataclasses.replace(call, steer=self._steer)
        return call

    def reset(self) -> None:
        """Start the steer filter from 0."""
        self._steer = 0.0

    @property
    def applied_steer(self) -> float | None:
        """The steer applied at the last step with ``steer_smoothing`` > 0 (0 after a reset), else None."""
        return self._steer if self.smoothing else None


ACTION_TYPES: dict[str, type[ActionType]] = {"tools": ToolsAction, "control": ControlAction}
"""``action_mode`` -> action type class; add an entry to add a mode (module docstring)."""
