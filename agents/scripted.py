"""Scripted agents: fixed tool policies and the oracle.

Each agent maps ``(observation, info)`` to an action of `CarlaTrolley-v0` in ``tools`` mode
(tool indices from `carla_gym.envs.spaces.TOOL_INDEX`). The decision is
taken on the first step; later steps observe, so the classification is the decision.
On the generated family the oracle plays a policy that reaches the simulated best outcome
(`carla_gym.sim.outcomes.best_policies`, the first in `carla_gym.sim.outcomes.POLICIES` order),
which may call its tool at every decision (every 10 ticks).
"""

from __future__ import annotations

from carla_gym.envs.spaces import TOOL_INDEX
from carla_gym.sim import rules
from carla_gym.sim.outcomes import DECISION_TICKS, best_policies, policy_call
from carla_gym.sim.scenarios import GENERATED_FAMILY, ScenarioSpec, resolve_scenario

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
    """Takes the best action: the catalogue's, or on a generated scenario a simulated best policy.

    On fixed scenarios: `best_trolley_action` on the first step. On a generated scenario: the first
    of its best policies (`carla_gym.sim.outcomes.best_policies`, computed at
    `carla_gym.sim.outcomes.DECISION_TICKS` = 10 ticks per decision), from the spec of
    ``info["scenario_seed"]``. It plays that policy's decision number ``tick // DECISION_TICKS``
    on the steps whose ``info["tick"]`` is a multiple of `DECISION_TICKS`, and observes on the others,
    so at any ``ticks_per_action`` that divides `DECISION_TICKS` (1, 2, 5, 10) the car gets the same
    calls at the same ticks as in the rollouts.

    Args:
        scenario_config: The ``scenario_config`` the env runs with, if any.
        ticks_per_action: The env's ticks per step, if known; None: read from the ticks of the
            first two steps.

    Raises:
        ValueError: From `act` on a generated scenario, when ``ticks_per_action`` (given, or seen
            between two steps) does not divide `DECISION_TICKS` (naming the value and the valid ones).
    """

    def __init__(self, scenario_config: dict | None = None, ticks_per_action: int | None = None) -> None:
        self.scenario_config = scenario_config
        self.ticks_per_action = ticks_per_action
        self._policy: str | None = None
        self._last_tick = 0

    def act(self, observation, info: dict) -> int:
        """Action for this step (``info`` from the env's reset or last step)."""
        tick = int(info["tick"])
        if tick == 0:
            spec = resolve_scenario(info["scenario"], self.scenario_config, info.get("scenario_seed"))
            self._policy = best_policies(spec)[0] if spec.family == GENERATED_FAMILY else None
            if self._policy is None:
                return ACTION_FOR_CLASS[best_trolley_action(spec)]
            if self.ticks_per_action is not None:
                _check_ticks(self.ticks_per_action)
        elif self._policy is not None and self.ticks_per_action is None:
            _check_ticks(tick - self._last_tick)
        self._last_tick = tick
        if self._policy is None or tick % DECISION_TICKS:
            return OBSERVE
        call = policy_call(self._policy, tick // DECISION_TICKS)
        tool = call.action_type if call.lane_direction is None else f"lane_change_{call.lane_direction}"
        return TOOL_INDEX[tool]


def _check_ticks(ticks_per_action: int, who: str = "the oracle of the generated family") -> None:
    """Refuse a step length ``who`` cannot align with the rollouts' decisions (every `DECISION_TICKS` ticks)."""
    valid = [t for t in range(1, DECISION_TICKS + 1) if DECISION_TICKS % t == 0]
    if ticks_per_action not in valid:
        raise ValueError(f"ticks_per_action={ticks_per_action!r}: {who} needs one that divides {DECISION_TICKS} "
                         f"(the rollouts' ticks per decision), one of {valid}; run the env with one of those")


class RepeatingAgent:
    """Calls one tool at every decision: the ``*_every`` candidate policies of `carla_gym.sim.outcomes`.

    ``brake_every`` is ``emergency_stop_every``, ``swerve_left_every`` is ``lane_change_left_every`` and
    ``swerve_right_every`` is ``lane_change_right_every`` (`carla_gym.sim.outcomes.policy_call`): the tool on the
    steps whose ``info["tick"]`` is a multiple of `carla_gym.sim.outcomes.DECISION_TICKS` (10), ``observe`` on the
    others, as `OracleAgent`, so at any ``ticks_per_action`` that divides 10 (1, 2, 5, 10) the car gets the
    candidate policy's calls at its ticks.

    Args:
        action: Tool index called at every decision.
        ticks_per_action: The env's ticks per step, if known; None: read from the ticks of the first two steps.

    Raises:
        ValueError: From `act`, when ``ticks_per_action`` (given, or seen between two steps) does not divide
            `DECISION_TICKS` (naming the value and the valid ones).
    """

    def __init__(self, action: int, ticks_per_action: int | None = None) -> None:
        self.action = action
        self.ticks_per_action = ticks_per_action
        self._last_tick = 0

    def act(self, observation, info: dict) -> int:
        """Action for this step (``info`` from the env's reset or last step): the tool on a decision tick."""
        tick = int(info["tick"])
        if tick == 0 and self.ticks_per_action is not None:
            _check_ticks(self.ticks_per_action, "a *_every agent")
        elif tick and self.ticks_per_action is None:
            _check_ticks(tick - self._last_tick, "a *_every agent")
        self._last_tick = tick
        return OBSERVE if tick % DECISION_TICKS else self.action


SCRIPTED_AGENTS = {
    "inaction": lambda: ScriptedAgent(ACTION_FOR_CLASS["NONE"]),
    "brake": lambda: ScriptedAgent(ACTION_FOR_CLASS["BRAKE"]),
    "swerve_left": lambda: ScriptedAgent(ACTION_FOR_CLASS["SWERVE_LEFT"]),
    "swerve_right": lambda: ScriptedAgent(ACTION_FOR_CLASS["SWERVE_RIGHT"]),
    "brake_every": lambda: RepeatingAgent(ACTION_FOR_CLASS["BRAKE"]),
    "swerve_left_every": lambda: RepeatingAgent(ACTION_FOR_CLASS["SWERVE_LEFT"]),
    "swerve_right_every": lambda: RepeatingAgent(ACTION_FOR_CLASS["SWERVE_RIGHT"]),
    "oracle": OracleAgent,
}
"""Factories of the scripted agents by name."""

CONSTANT_AGENTS = ("inaction", "brake", "swerve_left", "swerve_right", "brake_every", "swerve_left_every",
                   "swerve_right_every")
"""The scripted agents that play a fixed tool choice whatever they observe (the constant policies): one
per candidate policy of `carla_gym.sim.outcomes.POLICIES`, in its order."""
