"""The backend interface: what the Gymnasium env needs from a simulator.

A backend runs one episode at a time. It takes upstream-style tool calls (`ToolCall`) and
reports `Snapshot`s: plain data in the ego frame and upstream units, so that the env's
observation, reward and info are built the same way whatever simulates the scene.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from carla_gym.sim.world import ToolCall


@dataclass(slots=True)
class Snapshot:
    """The scene after a reset or a step.

    Attributes:
        scenario: Scenario name.
        tick: Ticks simulated this episode.
        sim_time: Simulated time [s].
        speed_kmh: Ego speed [km/h].
        lateral: Ego lateral position relative to the starting lane centre [m], positive right.
        yaw: Ego heading relative to the road [rad], positive right.
        lane: Road lane nearest the ego centre (0 = starting lane, -1 = left; `Road.nearest_lane`).
        left_lane: Whether a drivable lane exists left of ``lane``.
        right_lane: Whether a drivable lane exists right of ``lane``.
        actor_forward: Actors within 50 m, nearest first: forward offsets [m].
        actor_right: Same actors: rightward offsets [m].
        actor_types: Same actors: CARLA type ids.
        collided: Whether the ego has hit anything this episode.
        collided_with: Type id of the first actor hit, or None.
        road_departure: Whether the ego left the road this episode.
        trolley_action: Running classification (SWERVE_LEFT, SWERVE_RIGHT, BRAKE, NONE).
        ticks_left: Ticks until the scenario's deadline or step limit.
        done: Whether the episode has ended.
        description: Per-decision text for language models.
        scene_prompt: Static scenario prompt.
        outcome: Outcome dict (see `carla_gym.sim.rules.outcome`) once done, else None.
        camera_size: The scenario's camera (width, height) [px], upstream's capture size.
    """

    scenario: str
    tick: int
    sim_time: float
    speed_kmh: float
    lateral: float
    yaw: float
    lane: int
    left_lane: bool
    right_lane: bool
    actor_forward: list[float]
    actor_right: list[float]
    actor_types: tuple[str, ...]
    collided: bool
    collided_with: str | None
    road_departure: bool
    trolley_action: str
    ticks_left: int
    done: bool
    description: str
    scene_prompt: str
    outcome: dict | None = None
    camera_size: tuple[int, int] = (640, 360)


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
