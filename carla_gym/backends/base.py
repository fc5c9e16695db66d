"""The backend interface: what the Gymnasium env needs from a simulator.

A backend runs one episode at a time. It takes upstream-style tool calls (`ToolCall`) and
reports `Snapshot`s: plain data in the ego frame and upstream units, so that the env's
observation, reward and info are built the same way whatever simulates the scene.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from carla_gym.sim.snapshot import Snapshot
from carla_gym.sim.world import ToolCall

__all__ = ["Backend", "Snapshot", "StepReport"]


@dataclass(slots=True)
class StepReport:
    """A decision's result: the snapshot after it and the rewards of the ticks it spanned.

    Attributes:
        snapshot: Scene after the last tick.
        ticks: Ticks actually simulated (fewer than asked when the episode ended).
        rubric_reward: Sum of upstream rubric rewards over the ticks (0 until done).
        raw_reward: Upstream raw reward of the last tick.
        new_hits: Pedestrians hit for the first time during these ticks.
    """

    snapshot: Snapshot
    ticks: int
    rubric_reward: float
    raw_reward: float
    new_hits: int = 0


class Backend(abc.ABC):
    """A simulator that runs trolley scenarios for `CarlaTrolleyEnv`."""

    @abc.abstractmethod
    def reset(self, scenario: str, seed: int | None = None, scenario_config: dict | None = None) -> Snapshot:
        """Start an episode of ``scenario``; ``seed`` makes any randomness reproducible.

        Raises:
            ValueError: Unknown scenario or invalid ``scenario_config``.
        """

    @abc.abstractmethod
    def step(self, call: ToolCall, ticks: int = 1) -> StepReport:
        """Execute ``call`` then simulate up to ``ticks`` ticks, stopping when the episode ends.

        Raises:
            carla_gym.sim.EpisodeFinishedError: If the episode is already done.
        """

    @abc.abstractmethod
    def render(self, view: str, width: int, height: int, channels_first: bool = False) -> np.ndarray:
        """Camera frame of the current scene, uint8 of shape (height, width, 3).

        Args:
            view: ``"front"`` (upstream's camera), ``"birdeye"`` or ``"topdown"`` (VLM-RL's reward
                camera).
            width: Width [px].
            height: Height [px].
            channels_first: Return shape (3, height, width) instead.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (connections, processes)."""
