"""`CarlaToolEnv`: CarlaTrolley-v0 as tools for tool-calling language models (TRL ``environment_factory``).

TRL's GRPOTrainer builds one instance per rollout from a zero-argument factory, calls
``reset(**dataset_row)`` before each episode, exposes every public method except ``reset`` as a
tool (schema from its type hints and Google docstring) and reads ``env.reward`` through a reward
function. The adapter therefore wraps the Gymnasium env by composition (subclassing
``gymnasium.Env`` would expose ``step``, ``render`` and ``close`` as tools) and keeps its helpers
private. Contract: ../shared/spec/trl_environment_factory.md sections 1 and 7.

Tool semantics (this project's choice, the same decision granularity as the Gymnasium env and
thus as the SB3 agents): every tool call is one env decision of ``ticks_per_tool`` ticks
(default 10 = 0.5 s): the tool acts on the first tick and the controls are held for the rest.
Upstream's TRL example instead sends the tool and then 10 ``observe`` ticks (11 ticks).

Scoring: with ``play_out=True`` (default) an episode the model leaves unfinished (it stops calling
tools, or hits the tool-call or length limit) is run to its end with the controls held before
the reward is read, so the decision is scored by its consequence. ``play_out=False`` scores as
upstream's TRL example: 0.0 unless the model itself called tools until the episode ended.
"""

from __future__ import annotations

import inspect
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from carla_gym.envs.spaces import TOOL_ACTIONS
from carla_gym.envs.trolley import DEFAULT_SCENARIO
from carla_gym.sim.catalogue import TROLLEY_ACTIONS
from carla_gym.sim.validate import check_number

OBSERVE, EMERGENCY_STOP, LANE_LEFT, LANE_RIGHT = (TOOL_ACTIONS.index(name) for name in (
    "observe", "emergency_stop", "lane_change_left", "lane_change_right"))  # CarlaTrolley-v0 tool actions
EPISODE_OVER = "The episode is over; tools no longer change anything. Stop calling tools."
IMAGE_ASPECT = 9 / 16
"""Height/width of tool images: the scenario camera's 640x360 (upstream trolley default)."""


class CarlaToolEnv:
    """One CarlaTrolley-v0 episode at a time, driven through three tools.

    Tools (public methods): ``observe()``, ``emergency_stop()`` and ``lane_change(direction)``.
    Each returns the per-decision description (``Speed: 40.0 km/h.`` then ``- walker at
    22.0m`` lines, upstream TRL format), or with ``vision=True`` the list
    ``[{"type": "image", "image": PIL.Image}, {"type": "text", "text": description}]`` with the
    front camera at ``image_size`` x ``image_size * 9/16`` pixels. After the episode ends, tools
    return `EPISODE_OVER` (as text or a text block) without stepping.

    Attributes:
        reward: Return of the current episode so far (rubric: upstream's terminal reward).
        done: Whether the episode has terminated.
        info: The env's latest info dict (``info["outcome"]`` once done).
        calls: Tool names called this episode, in order (calls after the end included).
        actions: The env actions the tools took this episode (`CarlaTrolley-v0` tool names such as
            ``"lane_change_left"``; calls after the end and the play-out are not included).
        scenario: Scenario of the current episode.

    Args:
        vision: Return camera images with the text (for VLMs).
        image_size: Width [px] of tool images (16-1024).
        ticks_per_tool: Simulator ticks (0.05 s) per tool call.
        base_url: OpenEnv server URL; None uses the embedded simulator.
        play_out: Finish unfinished episodes with the controls held before scoring.
        reward_mode: ``"rubric"`` (upstream) or ``"physical"`` (see CarlaTrolley-v0).

    Raises:
        ValueError: Bad ``image_size``, ``ticks_per_tool`` or ``reward_mode`` (from the env).
    """

    def __init__(self, vision: bool = False, image_size: int = 256, ticks_per_tool: int = 10,
                 base_url: str | None = None, play_out: bool = True, reward_mode: str = "rubric") -> None:
        self._vision = bool(vision)
        self._play_out = bool(play_out)
        width = check_number("image_size", image_size, 16, 1024, integer=True)
        height = max(16, round(width * IMAGE_ASPECT))
        self._env = gym.make(
            "CarlaTrolley-v0", observation_mode="state", ticks_per_action=ticks_per_tool, reward_mode=reward_mode,
            render_mode="rgb_array" if vision else None, render_width=width, render_height=height,
            backend="openenv" if base_url else "embedded", base_url=base_url,
        ).unwrapped
        self.reward = 0.0
        self.done = False
        self.info: dict[str, Any] = {}
        self.calls: list[str] = []
        self.actions: list[str] = []
        self.scenario = DEFAULT_SCENARIO

    def reset(self, scenario: str | None = None, seed: int | None = None, **row: Any) -> str | list[dict]:
        """Start an episode (TRL passes the whole dataset row; other columns are ignored).

        Args:
            scenario: Scenario name; None: ``trolley_micro_escape_exists``.
            seed: Episode seed; rows sharing it start from the same state.
            **row: Other dataset columns (``prompt``, ...), ignored.

        Returns:
            A blank line, the scene prompt and the first description (a list of an image and that
            text with ``vision=True``), to be appended to the user prompt.
        """
        self.scenario = scenario or DEFAULT_SCENARIO
        _, self.info = self._env.reset(seed=None if seed is None else int(seed), options={"scenario": self.scenario})
        self.reward, self.done, self.calls, self.actions = 0.0, False, [], []
        return self._reply(f"\n\n{self.info['scene_prompt']}\nNow:\n{self.info['description']}")

    def observe(self) -> str | list[dict]:
        """Keep the current controls for a moment, then look again.

        Returns:
            What the car senses a moment later: speed and distances to pedestrians.
        """
        return self._act("observe", OBSERVE)

    def emergency_stop(self) -> str | list[dict]:
        """Brake as hard as possible from now on.

        Returns:
            What the car senses a moment later: speed and distances to pedestrians.
        """
        return self._act("emergency_stop", EMERGENCY_STOP)

    def lane_change(self, direction: Literal["left", "right"]) -> str | list[dict]:
        """Steer into the neighbouring lane on one side.

        Args:
            direction: Side to move to: "left" or "right".

        Returns:
            What the car senses a moment later: speed and distances to pedestrians.

        Raises:
            ValueError: direction is not "left" or "right" (TRL shows the error to the model).
        """
        if direction not in ("left", "right"):
            self.calls.append("lane_change")
            raise ValueError(f"direction={direction!r} is not valid; use 'left' or 'right'")
        return self._act("lane_change", LANE_LEFT if direction == "left" else LANE_RIGHT)

    # -- helpers (private: TRL exposes every public method as a tool) -------------------------
    def _act(self, name: str, action: int) -> str | list[dict]:
        self.calls.append(name)
        if self.done:
            return self._reply(EPISODE_OVER)
        _, reward, terminated, _, self.info = self._env.step(action)
        self.actions.append(TOOL_ACTIONS[action])
        self.reward += reward
        self.done = terminated
        text = self.info["description"]
        if self.done:
            text += "\n" + EPISODE_OVER
        return self._reply(text)

    def _reply(self, text: str) -> str | list[dict]:
        if not self._vision:
            return text
        from PIL import Image

        return [{"type": "image", "image": Image.fromarray(self._env.render())}, {"type": "text", "text": text}]

    def _finish(self) -> float:
        """Play the episode out with the controls held (when ``play_out``); the episode's return."""
        while self._play_out and not self.done:
            _, reward, self.done, _, self.info = self._env.step(OBSERVE)
            self.reward += reward
        return self.reward

    def _close(self) -> None:
        self._env.close()


def tool_methods(env: CarlaToolEnv) -> list[Callable]:
    """The bound tool methods of ``env``, found by TRL's rule (public functions except reset/get_reward).

    Returns:
        ``[env.emergency_stop, env.lane_change, env.observe]`` for `CarlaToolEnv` (name order).
    """
    return [getattr(env, name) for name, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
            if name not in ("reset", "get_reward") and not name.startswith("_")]


class ToolEnvFactory:
    """Zero-argument factory for TRL's ``environment_factory`` that remembers what it built.

    Instance i uses ``env_urls[i % len(env_urls)]`` (several rollouts may share one server: this
    project's server runs concurrent sessions), or the embedded simulator when there are no URLs.
    TRL never closes environments; call `close` after training.

    Args:
        env_urls: OpenEnv server URLs; empty: embedded.
        **kwargs: `CarlaToolEnv` arguments (vision, image_size, ticks_per_tool, play_out, reward_mode).
    """

    def __init__(self, env_urls: Sequence[str] = (), **kwargs: Any) -> None:
        self._urls = itertools.cycle(list(env_urls)) if env_urls else None
        self._kwargs = kwargs
        self.instances: list[CarlaToolEnv] = []

    def __call__(self) -> CarlaToolEnv:
        """Build one more `CarlaToolEnv`."""
        env = CarlaToolEnv(base_url=next(self._urls) if self._urls else None, **self._kwargs)
        self.instances.append(env)
        return env

    def close(self) -> None:
        """Close every environment built so far."""
        while self.instances:
            self.instances.pop()._close()


def episode_metrics(environments: Sequence[CarlaToolEnv]) -> dict[str, float]:
    """Episode metrics for the training log.

    Returns:
        Means over finished episodes of ``"episode/success"``, ``"episode/pedestrians_hit"``,
        ``"episode/expected_pedestrians_hit"`` and the ``"trolley_action/<CLASS>"`` shares, and
        ``"episode/tool_calls"`` (tool calls per rollout, finished or not); empty when no episode
        finished.
    """
    outcomes = [e.info["outcome"] for e in environments if e.done and "outcome" in e.info]
    if not outcomes:
        return {}
    n = len(outcomes)
    metrics = {
        "episode/success": float(np.mean([o["success"] for o in outcomes])),
        "episode/pedestrians_hit": float(np.mean([o["actual_pedestrians_hit"] for o in outcomes])),
        "episode/expected_pedestrians_hit": float(np.mean([o["expected_pedestrians_hit"] for o in outcomes])),
        "episode/tool_calls": float(np.mean([len(e.calls) for e in environments])),
    }
    counts = Counter(o["trolley_action"] for o in outcomes)
    for action in TROLLEY_ACTIONS:
        metrics[f"trolley_action/{action}"] = counts.get(action, 0) / n
    return metrics


def rubric_reward(environments: Sequence[CarlaToolEnv], log_metric: Callable | None = None,
                  **kwargs: Any) -> list[float]:
    """GRPO reward function: each rollout's episode return (after playing it out).

    TRL calls it with ``environments`` (one per completion, in order) and ``log_metric``; the
    episode metrics of `episode_metrics` are logged beside ``rewards/rubric_reward/mean``.
    It finishes unfinished episodes (with ``play_out``), so list it before any other reward
    function that reads the environments: TRL calls them in order.

    Returns:
        One float per environment.
    """
    rewards = [env._finish() for env in environments]
    if log_metric is not None:
        for name, value in episode_metrics(environments).items():
            log_metric(name, value)
    return rewards
