"""Server-side rubrics on openenv-core's rubric classes (RFC 004), as upstream's CARLA server declares them.

`CarlaEnvironment` sets ``env.rubric`` at every reset to the scenario family's rubric (`rubric_for`), resets
it, and reports its output as each step's ``CarlaObservation.rubric_reward``; OpenEnv tooling that reads
``env.rubric`` (``named_rubrics``, ``compute_step_rewards``) sees these. The values are the project's one
definition of the rubric: `carla_gym.sim.rules.rubric_reward` (trolley) and
`carla_gym.sim.navigation.rules.rubric_reward` (navigation).
"""

from __future__ import annotations

from typing import Any

from openenv.core.rubrics.base import Rubric
from openenv.core.rubrics.trajectory import ExponentialDiscountingTrajectoryRubric

from carla_gym.sim import rules
from carla_gym.sim.navigation import rules as nav_rules

TROLLEY_GAMMA = 0.99
"""Discount of `CarlaTrolleyRubric`'s per-step credit (upstream's ``CarlaTrolleyRubric(gamma=0.99)``)."""


class CarlaTrolleyRubric(ExponentialDiscountingTrajectoryRubric):
    """Trolley rubric: 0.0 until the episode is done, then the terminal raw reward (`rules.rubric_reward`).

    The raw reward of the terminal step is the observation's ``reward`` (the last tick's raw reward, the
    terminal tick's when the step ended the episode). ``compute_step_rewards()`` spreads that score back over
    the episode's steps: step t of T gets ``gamma ** (T - 1 - t)`` times it.

    Args:
        gamma: Discount in [0, 1] (default upstream's `TROLLEY_GAMMA`).

    Raises:
        ValueError: ``gamma`` outside [0, 1] (openenv-core's check).
    """

    def __init__(self, gamma: float = TROLLEY_GAMMA) -> None:
        super().__init__(gamma=gamma, intermediate_reward=0.0)

    def score_trajectory(self, trajectory: list[tuple[Any, Any]]) -> float:
        """The terminal raw reward of a finished episode (0.0 for an unfinished or empty one)."""
        if not trajectory:
            return 0.0
        _, last = trajectory[-1]
        return float(rules.rubric_reward(bool(last.done), float(last.reward or 0.0)))


class CarlaNavigationRubric(Rubric):
    """Navigation rubric: each step's raw reward, passed through (`carla_gym.sim.navigation.rules.rubric_reward`)."""

    def forward(self, action: Any, observation: Any) -> float:
        """The step's rubric reward from its observation's raw ``reward``."""
        return float(nav_rules.rubric_reward(float(observation.reward or 0.0)))


def rubric_for(navigation: bool) -> Rubric:
    """A new rubric for a family: `CarlaNavigationRubric` for navigation scenarios, else `CarlaTrolleyRubric`."""
    return CarlaNavigationRubric() if navigation else CarlaTrolleyRubric()
