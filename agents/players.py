"""Agents for the comparison harness: one interface over Gymnasium policies and tool-calling chat models.

Every agent has a ``name`` and ``play(scenario, seed, episode) -> record`` (`agents.records`):
it resets its environment to ``scenario`` with the env seed ``episode_seed(seed, episode)``,
plays the episode to its end and reports the outcome and what it did.

- `GymAgent`: a policy ``act(observation, info) -> action`` (scripted, random, SB3) stepping
  `CarlaTrolley-v0` (rubric reward, 10 ticks per decision unless the SB3 run trained with another
  value), in the action mode the policy asks for if it asks (``action_mode(info)``).
- `oracle_agent`: the oracle (`agents.scripted.OracleAgent`: on every scenario a candidate policy of
  `carla_gym.sim.outcomes` that reaches the simulated best outcome, in the action mode it needs) as
  a `GymAgent`, the reference beside a trained model in the training scripts' evaluations;
  `rubric_answer_agent`: the catalogue's rubric answer (`agents.scripted.RubricAnswerAgent`), the
  reference for upstream's rubric reward.
- `ChatAgent`: a `carla_gym.llm.rollout.ChatPolicy` (local transformers model or an
  OpenAI-compatible endpoint) calling the tools of `carla_gym.llm.CarlaToolEnv`, with the same
  instruction, tools and play-out as `train_grpo.py`.
"""

from __future__ import annotations

import contextlib
import time
import zlib
from typing import Any

import gymnasium as gym
import numpy as np

import carla_gym  # noqa: F401  (registers the env ids)
from agents.records import episode_seed, outcome_record
from agents.scripted import OracleAgent, RubricAnswerAgent
from carla_gym.envs.spaces import TOOL_ACTIONS


class RandomAgent:
    """Uniformly random actions, seeded by the episode and the scenario (call `reset` first).

    Args:
        action_mode: ``"tools"`` (a tool index) or ``"control"`` (``[steer, throttle_or_brake]``).

    Raises:
        ValueError: Another ``action_mode`` (naming it and the valid ones).
    """

    def __init__(self, action_mode: str = "tools") -> None:
        if action_mode not in ("tools", "control"):
            raise ValueError(f"action_mode={action_mode!r}: choose 'tools' or 'control'")
        self._control = action_mode == "control"  # not ``action_mode``: GymAgent calls a policy's action_mode(info)
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int, scenario: str) -> None:
        """Restart the random stream for an episode: independent across scenarios and seeds."""
        self._rng = np.random.default_rng([seed, zlib.crc32(scenario.encode())])

    def act(self, observation, info: dict) -> int | np.ndarray:
        """A tool index in [0, 4), or a control action: float32 of shape (2,), both entries uniform in [-1, 1]."""
        if self._control:
            return self._rng.uniform(-1.0, 1.0, 2).astype(np.float32)
        return int(self._rng.integers(len(TOOL_ACTIONS)))


def action_name(action) -> str | list[float]:
    """A JSON-able name of a Gymnasium action: the tool name, or ``[steer, pedal]`` for control."""
    if np.ndim(action) == 0:
        return TOOL_ACTIONS[int(action)]
    return [float(v) for v in np.asarray(action).ravel()]


class GymAgent:
    """A policy acting in `CarlaTrolley-v0`.

    A policy with ``action_mode(info) -> str`` (`agents.scripted`'s control constants and oracle)
    chooses the ``action_mode`` of each episode from its reset info: the episode is reset in the
    mode of the previous one (at first ``env_kwargs``' ``action_mode``, default ``"tools"``), and
    when the policy asks for the other mode, reset again with the same seed and scenario in an env
    of that mode (the same episode: both envs draw the scenario seed from the same ``np_random``).
    The agent keeps one env per mode it played; ``steer_smoothing`` goes only to a control env.

    Args:
        name: Label in the results.
        policy: ``act(observation, info) -> action``; ``reset(seed, scenario)`` is called first if present.
        env_kwargs: `gym.make` keyword arguments (action/observation mode, ticks_per_action, ...);
            the reward is always the rubric.
    """

    def __init__(self, name: str, policy, env_kwargs: dict | None = None) -> None:
        self.name, self.policy = name, policy
        self.env_kwargs = {**(env_kwargs or {}), "reward_mode": "rubric"}
        self.env_kwargs.pop("scenario", None)  # set per episode
        self._mode = self.env_kwargs.get("action_mode", "tools")
        self._envs: dict[str, gym.Env] = {}

    def _reset(self, mode: str, scenario: str, env_seed: int):
        """Reset the env of action mode ``mode`` (made on first use) to ``scenario``; ``(env, obs, info)``."""
        if mode not in self._envs:
            kwargs = {**self.env_kwargs, "action_mode": mode}
            if mode != "control":
                kwargs.pop("steer_smoothing", None)
            self._envs[mode] = gym.make("CarlaTrolley-v0", scenario=scenario, **kwargs)
        env = self._envs[mode]
        return (env, *env.reset(seed=env_seed, options={"scenario": scenario}))

    def play(self, scenario: str, seed: int, episode: int) -> dict[str, Any]:
        """Play one episode; see the class and module docstrings. Environments are made on first use."""
        start = time.perf_counter()
        env_seed = episode_seed(seed, episode)
        env, obs, info = self._reset(self._mode, scenario, env_seed)
        if hasattr(self.policy, "action_mode"):
            wanted = self.policy.action_mode(info)
            if wanted != self._mode:
                self._mode = wanted
                env, obs, info = self._reset(wanted, scenario, env_seed)
        if hasattr(self.policy, "reset"):
            self.policy.reset(env_seed, scenario)
        total, actions, done = 0.0, [], False
        while not done:
            action = self.policy.act(obs, info)
            actions.append(action_name(action))
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            done = terminated or truncated
        return outcome_record(self.name, scenario, seed, episode, info["outcome"], total, actions,
                              time.perf_counter() - start)

    def close(self) -> None:
        """Close the environments (a later `play` makes new ones)."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()


def _reference_kwargs(env_kwargs: dict | None) -> dict:
    """The evaluated agent's env kwargs for a scripted reference: state vector, tools first, no steer smoothing."""
    kwargs = {key: value for key, value in (env_kwargs or {}).items() if key != "steer_smoothing"}
    kwargs.update(observation_mode="state", action_mode="tools")
    return kwargs


def oracle_agent(env_kwargs: dict | None = None, name: str = "oracle") -> GymAgent:
    """The oracle (`agents.scripted.OracleAgent`) in the env of ``env_kwargs``, for reference.

    It reaches the simulated best outcome (the best constant policy of either mode) on every trolley
    scenario, so no agent scores above its 100 % success by actual outcome. It acts on the state vector
    whatever the evaluated agent observes, with tool actions, or with control actions in the episodes
    whose best outcome only a control policy reaches (the
    `GymAgent` switches envs per episode), with the same ticks per action, backend and
    ``scenario_config``; ``steer_smoothing`` is dropped (the candidate policies apply their steer
    as it is).

    Args:
        env_kwargs: The evaluated agent's `gym.make` keyword arguments.
        name: Label in the results.
    """
    kwargs = _reference_kwargs(env_kwargs)
    return GymAgent(name, OracleAgent(kwargs.get("scenario_config")), kwargs)


def rubric_answer_agent(env_kwargs: dict | None = None, name: str = "rubric_answer") -> GymAgent:
    """The catalogue's rubric answer (`agents.scripted.RubricAnswerAgent`) in the env of ``env_kwargs``.

    The reference for upstream's rubric reward (it scores 1.0 wherever some action class does); it
    acts on the state vector with tool actions, with the same ticks per action, backend and
    ``scenario_config`` as the evaluated agent.

    Args:
        env_kwargs: The evaluated agent's `gym.make` keyword arguments.
        name: Label in the results.
    """
    kwargs = _reference_kwargs(env_kwargs)
    return GymAgent(name, RubricAnswerAgent(kwargs.get("scenario_config")), kwargs)


class ChatAgent:
    """A tool-calling chat model driving `carla_gym.llm.CarlaToolEnv`.

    Args:
        name: Label in the results.
        chat: The chat policy (`carla_gym.llm.rollout.TransformersChat`, `agents.llm.OpenAIChat`).
        vision: Tools return camera images (VLMs).
        max_tool_calling_iterations: Turns whose tool calls run (as in training).
        base_url: OpenEnv server URL; None: embedded simulator.
        ticks_per_action: Ticks per tool call (a train_grpo.py run's own setting).
        image_size: Width [px] of tool images.
    """

    def __init__(self, name: str, chat, vision: bool = False, max_tool_calling_iterations: int = 10,
                 base_url: str | None = None, ticks_per_action: int = 10, image_size: int = 256) -> None:
        from carla_gym.llm.tools import CarlaToolEnv

        self.name, self.chat, self.max_tool_calling_iterations = name, chat, max_tool_calling_iterations
        # play_out=True always: every agent's episode runs to its end, as a Gymnasium episode does
        self._resources = contextlib.ExitStack()  # CarlaToolEnv closes as a context manager (no close tool)
        self._env = self._resources.enter_context(CarlaToolEnv(
            vision=vision, base_url=base_url, ticks_per_action=ticks_per_action, image_size=image_size))

    def play(self, scenario: str, seed: int, episode: int) -> dict[str, Any]:
        """Play one episode; see the module docstring."""
        from carla_gym.llm.rollout import play_episode

        result = play_episode(self.chat, self._env, scenario, episode_seed(seed, episode),
                              self.max_tool_calling_iterations)
        record = outcome_record(self.name, scenario, seed, episode, self._env.info["outcome"], result["reward"],
                                self._env.actions, result["wall_time_s"], result["tool_calls"],
                                result["tool_failures"], result["parse_failures"])
        record["turns"] = result["turns"]
        return record

    def close(self) -> None:
        """Close the environment."""
        self._resources.close()
