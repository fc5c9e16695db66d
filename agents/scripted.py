"""Scripted agents: the constant policies of both action modes, the rubric answer and the oracle.

Each agent maps ``(observation, info)`` to an action of `CarlaTrolley-v0`: a tool index of
``action_mode="tools"`` (`carla_gym.envs.spaces.TOOL_INDEX`) or an ``[steer, throttle_or_brake]``
float32 array of ``action_mode="control"``. An agent that needs one mode, or picks it per episode,
says so with ``action_mode(info) -> str`` (from the reset info); `agents.players.GymAgent` then plays
the episode in an env of that mode.

| Agent | Plays |
|---|---|
| ``inaction``, ``brake``, ``swerve_left``, ``swerve_right`` | `ScriptedAgent`: a tool at the first step, then observe |
| ``brake_every``, ``swerve_left_every``, ``swerve_right_every`` | `RepeatingAgent`: the tool at every decision |
| ``control_steer_<side>_<pedal>`` | `ControlAgent`: one ``[steer, throttle_or_brake]`` at every step (control mode) |
| ``rubric_answer`` | `RubricAnswerAgent`: the class upstream's rubric pays most (`best_trolley_action`) |
| ``oracle`` | `OracleAgent`: a candidate policy that reaches the simulated best outcome |

The constants are the candidate policies of `carla_gym.sim.outcomes` (`CONSTANT_AGENTS` for the
tool mode, `CONTROL_CONSTANT_AGENTS` for the control mode; `CANDIDATE_POLICY` maps each to its
policy), so no constant policy of either mode does better than the oracle's outcome. A sequence of different
calls can (changing lanes, then braking at every later decision, beats it on 35 of 400 generated test layouts);
success by actual outcome counts such an episode a success too, so no agent scores above the oracle's 100 %.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from carla_gym.envs.spaces import TOOL_INDEX
from carla_gym.sim import rules
from carla_gym.sim.outcomes import (
    CONTROL_ACTIONS,
    CONTROL_POLICIES,
    DECISION_TICKS,
    POLICIES,
    action_mode,
    best_policies,
    policy_call,
)
from carla_gym.sim.scenarios import ScenarioSpec, resolve_scenario

OBSERVE = TOOL_INDEX["observe"]
"""The tool index that leaves the car to the scenario (every step after the first)."""

ACTION_FOR_CLASS = {"NONE": OBSERVE, "BRAKE": TOOL_INDEX["emergency_stop"],
                    "SWERVE_LEFT": TOOL_INDEX["lane_change_left"], "SWERVE_RIGHT": TOOL_INDEX["lane_change_right"]}
"""Tool index that produces each trolley action class."""

_PREFERENCE = ("NONE", "BRAKE", "SWERVE_LEFT", "SWERVE_RIGHT")


def best_trolley_action(spec: ScenarioSpec) -> str:
    """The catalogue's rubric answer: the action class with the highest raw reward, then fewest expected casualties.

    Remaining ties go to the least intervention (NONE, BRAKE, SWERVE_LEFT, SWERVE_RIGHT). This is what
    upstream's rubric pays most, not the simulated best outcome (`OracleAgent`): on
    ``trolley_micro_escape_exists`` it is SWERVE_LEFT, while braking also hits nobody.
    """
    return max(
        _PREFERENCE,
        key=lambda a: (rules.raw_reward(spec, a), -rules.expected_casualties(spec, a), -_PREFERENCE.index(a)),
    )


def tool_index(policy: str, decision: int) -> int:
    """The tool index of the tool policy ``policy`` (`carla_gym.sim.outcomes.POLICIES`) at decision ``decision``.

    Raises:
        ValueError: ``policy`` is not a tool policy (naming the valid ones).
    """
    if policy not in POLICIES:
        raise ValueError(f"policy={policy!r}: a tool policy has a tool index; choose one of {POLICIES}")
    call = policy_call(policy, decision)
    return TOOL_INDEX[call.action_type if call.lane_direction is None else f"lane_change_{call.lane_direction}"]


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


class RubricAnswerAgent:
    """Calls the tool of the catalogue's rubric answer (`best_trolley_action`) at the first decision, then observes.

    It scores upstream's rubric reward 1.0 wherever some class does, but not always the best outcome:
    on the micro suite it reaches `carla_gym.sim.outcomes.best_outcome` in 67 % of episodes against
    ``brake``'s 100 % (it swerves where braking in lane also stops in time, and the swerve hits).

    Args:
        scenario_config: The ``scenario_config`` the env runs with, if any.
    """

    def __init__(self, scenario_config: dict | None = None) -> None:
        self.scenario_config = scenario_config
        self._action = OBSERVE

    def act(self, observation, info: dict) -> int:
        """Action for this step (``info`` from the env's reset or last step)."""
        if int(info["tick"]) == 0:
            spec = resolve_scenario(info["scenario"], self.scenario_config, info.get("scenario_seed"))
            self._action = ACTION_FOR_CLASS[best_trolley_action(spec)]
            return self._action
        return OBSERVE


class ControlAgent:
    """Applies one ``[steer, throttle_or_brake]`` control action at every step (``action_mode="control"``).

    A constant action gives the same calls at every ``ticks_per_action``. With ``steer_smoothing``
    at 0 (`agents.players.GymAgent` runs it so unless told otherwise) it plays the control candidate
    policy of the same action (`carla_gym.sim.outcomes.CONTROL_ACTIONS`).

    Args:
        steer: Steer in [-1, 1] (negative left).
        pedal: ``throttle_or_brake`` in [-1, 1] (positive throttle, negative brake).

    Raises:
        ValueError: ``steer`` or ``pedal`` is not a number in [-1, 1] (naming it).
    """

    def __init__(self, steer: float, pedal: float) -> None:
        for name, value in (("steer", steer), ("pedal", pedal)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not (
                    -1.0 <= value <= 1.0):
                raise ValueError(f"{name}={value!r}: must be a number in [-1, 1]")
        self.action = np.array([steer, pedal], dtype=np.float32)

    def action_mode(self, info: dict) -> str:
        """``"control"``: the mode of every episode."""
        return "control"

    def act(self, observation, info: dict) -> np.ndarray:
        """The action, a float32 array of shape (2,) (a copy)."""
        return self.action.copy()


class OracleAgent:
    """Plays a candidate policy that reaches the simulated best outcome, on every trolley scenario.

    At the reset of each episode it resolves the scenario (``info["scenario"]`` with
    ``scenario_config`` and, on the generated family, ``info["scenario_seed"]``) and plays the first of
    its best policies (`carla_gym.sim.outcomes.best_policies`, over the constant policies of both
    action modes, tool policies first), so its actual outcome is the best outcome and no agent's is
    better. `action_mode` says which ``action_mode`` the episode needs: ``"tools"`` when a tool
    policy reaches the best (always on the generated family, and on every catalogue scenario at its
    own settings), ``"control"`` when only a control policy does (e.g. ``trolley_micro_classic_3v1`` at
    ``initial_speed_kmh`` 100: holding full left steer leaves the road before the people, a lane
    change hits one). `agents.players.GymAgent` plays each episode in an env of that mode.

    A tool policy's tool comes at decision number ``tick // DECISION_TICKS`` on the steps whose
    ``info["tick"]`` is a multiple of `carla_gym.sim.outcomes.DECISION_TICKS` (10); other steps
    observe. A single-decision policy therefore plays the same at any ``ticks_per_action``; a
    ``*_every`` policy needs one that divides 10 (1, 2, 5, 10) to call its tool at the rollouts'
    ticks. A control policy applies its action (`carla_gym.sim.outcomes.CONTROL_ACTIONS`) at every
    step, the same at any ``ticks_per_action``.

    Args:
        scenario_config: The ``scenario_config`` the env runs with, if any.
        ticks_per_action: The env's ticks per step, if known; None: read from the ticks of the
            first two steps.

    Raises:
        ValueError: From `act`, when the episode's policy calls a tool at every decision and
            ``ticks_per_action`` (given, or seen between two steps) does not divide `DECISION_TICKS`
            (naming the value and the valid ones).
    """

    def __init__(self, scenario_config: dict | None = None, ticks_per_action: int | None = None) -> None:
        self.scenario_config = scenario_config
        self.ticks_per_action = ticks_per_action
        self.policy: str | None = None
        """The candidate policy of the current episode (set at its first step)."""
        self._last_tick = 0

    def best_policy(self, info: dict) -> str:
        """The candidate policy the oracle plays in the episode of ``info`` (a reset or step info)."""
        spec = resolve_scenario(info["scenario"], self.scenario_config, info.get("scenario_seed"))
        return best_policies(spec)[0]

    def action_mode(self, info: dict) -> str:
        """The ``action_mode`` the episode of ``info`` needs: ``"tools"`` or ``"control"``."""
        return action_mode(self.best_policy(info))

    def act(self, observation, info: dict) -> int | np.ndarray:
        """Action for this step (``info`` from the env's reset or last step): a tool index, or a control action."""
        tick = int(info["tick"])
        if tick == 0 or self.policy is None:
            self.policy = self.best_policy(info)
            if self.ticks_per_action is not None and self.policy.endswith("_every"):
                _check_ticks(self.ticks_per_action)
        elif self.policy.endswith("_every") and self.ticks_per_action is None:
            _check_ticks(tick - self._last_tick)
        self._last_tick = tick
        if self.policy in CONTROL_ACTIONS:
            return np.array(CONTROL_ACTIONS[self.policy], dtype=np.float32)
        if tick % DECISION_TICKS:
            return OBSERVE
        return tool_index(self.policy, tick // DECISION_TICKS)


def _check_ticks(ticks_per_action: int, who: str = "the oracle's policy (a tool at every decision)") -> None:
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


CONSTANT_AGENTS = ("inaction", "brake", "swerve_left", "swerve_right", "brake_every", "swerve_left_every",
                   "swerve_right_every")
"""The scripted agents that play a fixed tool choice whatever they observe (the constant policies of the tool
mode): one per tool candidate policy of `carla_gym.sim.outcomes.POLICIES`, in its order."""

CONTROL_CONSTANT_AGENTS = CONTROL_POLICIES
"""The scripted agents that apply one control action at every step (the constant policies of the control mode),
named as their candidate policies (`carla_gym.sim.outcomes.CONTROL_POLICIES`), in its order."""

CANDIDATE_POLICY = {**dict(zip(CONSTANT_AGENTS, POLICIES, strict=True)),
                    **{name: name for name in CONTROL_CONSTANT_AGENTS}}
"""Constant agent -> the candidate policy of `carla_gym.sim.outcomes` it plays."""

SCRIPTED_AGENTS = {
    "inaction": lambda: ScriptedAgent(ACTION_FOR_CLASS["NONE"]),
    "brake": lambda: ScriptedAgent(ACTION_FOR_CLASS["BRAKE"]),
    "swerve_left": lambda: ScriptedAgent(ACTION_FOR_CLASS["SWERVE_LEFT"]),
    "swerve_right": lambda: ScriptedAgent(ACTION_FOR_CLASS["SWERVE_RIGHT"]),
    "brake_every": lambda: RepeatingAgent(ACTION_FOR_CLASS["BRAKE"]),
    "swerve_left_every": lambda: RepeatingAgent(ACTION_FOR_CLASS["SWERVE_LEFT"]),
    "swerve_right_every": lambda: RepeatingAgent(ACTION_FOR_CLASS["SWERVE_RIGHT"]),
    **{name: (lambda action=action: ControlAgent(*action)) for name, action in CONTROL_ACTIONS.items()},
    "rubric_answer": RubricAnswerAgent,
    "oracle": OracleAgent,
}
"""Factories of the scripted agents by name (no arguments)."""


def best_constant(success: Mapping[str, float], constants: Sequence[str] | None = None) -> str | None:
    """The constant policy of highest success in ``success`` (agent name -> success rate); None if none is there.

    Args:
        success: Success rates by agent name, fractions in [0, 1]; NaN (the rate does not apply: action_bias
            scenarios only) ranks last.
        constants: The constants to choose from, in tie order; None: `CONSTANT_AGENTS` then
            `CONTROL_CONSTANT_AGENTS` (both action modes).

    Examples:
        >>> best_constant({"brake": 0.25, "swerve_left": 0.5, "brake_every": 0.5, "oracle": 1.0})
        'swerve_left'
        >>> best_constant({"brake": 0.4, "inaction": 0.4, "swerve_left": float("nan")},
        ...               ["swerve_left", "inaction", "brake"])
        'inaction'
    """
    order = (*CONSTANT_AGENTS, *CONTROL_CONSTANT_AGENTS) if constants is None else constants
    present = [a for a in order if a in success]
    return max(present, key=lambda a: -1.0 if math.isnan(success[a]) else success[a]) if present else None
