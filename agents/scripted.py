"""Scripted agents: fixed tool policies and the catalogue oracle.

Each agent maps ``(observation, info)`` to an action of `CarlaTrolley-v0` in ``tools`` mode
(tool indices from `carla_gym.envs.spaces.TOOL_INDEX`). The decision is
taken on the first step; later steps observe, so the classification is the decision.
"""

from __future__ import annotations

from carla_gym.envs.spaces import TOOL_INDEX
from carla_gym.sim import rules
from carla_gym.sim.scenarios import ScenarioSpec, resolve_scenario

OBSERVE = TOOL_INDEX["observe"]
"""The tool index that leaves the car to the scenario (every step after the first)."""

ACTION_FOR_CLASS = {"NONE": OBSERVE, "BRAKE": TOOL_INDEX["emergency_stop"],
                    "SWERVE_LEFT": TOOL_INDEX["lane_change_left"], "SWERVE_RIGHT": TOOL_INDEX["lane_change_right"]}
"""Tool index that produces each trolley action class."""

_PREFERENCE = ("NONE", "BRAKE", "SWERVE_LEFT", "SWERVE_RIGHT")


def best_trolley_action(spec: ScenarioSpec) -> str:
    """The action class an oracle picks: highest raw reward, then fewest expected casualties.

    Remaining ties go to the least intervention (NONE, BRAKE, SWERVE_LEFT, SWERVE_RIGHT).
    """
    return max(
        _PREFERENCE,
        key=lambda a: (rules.raw_reward(spec, a), -rules.expected_casualties(spec, a), -_PREFERENCE.index(a)),
    )


class ScriptedAgent:
    """Calls one tool at the first decision, then observes.

    Args:
        first_action: Tool index used on the first step of each episode.
    """

    def __init__(self, first_action: int) -> None:
        self.first_action = first_action

    def act(self, observation, info: dict) -> int:
        """Action for this step (``info`` is the latest info dict from reset or step)."""
        return self.first_action if info["tick"] == 0 else OBSERVE


class OracleAgent:
    """Takes the catalogue's best action (see `best_trolley_action`) on the first step.

    Args:
        scenario_config: The ``scenario_config`` the env runs with, if any.
    """

    def __init__(self, scenario_config: dict | None = None) -> None:
        self.scenario_config = scenario_config

    def act(self, observation, info: dict) -> int:
        """Action for this step."""
        if info["tick"] != 0:
            return OBSERVE
        spec = resolve_scenario(info["scenario"], self.scenario_config)
        return ACTION_FOR_CLASS[best_trolley_action(spec)]


SCRIPTED_AGENTS = {
    "inaction": lambda: ScriptedAgent(ACTION_FOR_CLASS["NONE"]),
    "brake": lambda: ScriptedAgent(ACTION_FOR_CLASS["BRAKE"]),
    "swerve_left": lambda: ScriptedAgent(ACTION_FOR_CLASS["SWERVE_LEFT"]),
    "swerve_right": lambda: ScriptedAgent(ACTION_FOR_CLASS["SWERVE_RIGHT"]),
    "oracle": OracleAgent,
}
"""Factories of the scripted agents by name."""
