"""`CarlaToolEnv`: CarlaTrolley-v0 as tools for tool-calling language models (TRL ``environment_factory``).

TRL's GRPOTrainer builds one instance per rollout from a zero-argument factory, calls
``reset(**dataset_row)`` before each episode, exposes every public method except ``reset`` as a
tool (schema from its type hints and Google docstring) and reads ``env.reward`` through a reward
function. The adapter therefore wraps the Gymnasium env by composition (subclassing
``gymnasium.Env`` would expose ``step``, ``render`` and ``close`` as tools) and keeps its helpers
private. Contract: TRL's ``environment_factory`` (https://huggingface.co/docs/trl/grpo_trainer).

Tool semantics (this project's choice, the same decision granularity as the Gymnasium env and
thus as the SB3 agents): every tool call is one env decision of ``ticks_per_action`` ticks
(default 10 = 0.5 s): the tool acts on the first tick and the controls are held for the rest.
Upstream's TRL example instead sends the tool and then 10 ``observe`` ticks (11 ticks).

Counting (one rule for the adapter, `carla_gym.llm.rollout`, the GRPO metrics and the comparison
harness): every tool call that reaches a tool is appended to ``calls``, whatever its arguments; a
call that raises (missing or unknown argument names, a bad value) is also appended to
``failures``. Calls of tools that do not exist never reach the adapter: whoever dispatches the
calls reports them with `CarlaToolEnv._record_failed_call` (`carla_gym.llm.rollout` as it runs
them, `rubric_reward` from TRL's conversation, where TRL answers ``Tool <name> not found.``), so
``len(calls)`` and ``len(failures)`` count what TRL counts in ``tools/call_frequency`` and
``tools/failure_frequency``. Assistant turns whose tool-call text did not parse are no calls; the
dispatcher counts them in ``parse_failures``.

Closing: ``close`` cannot be a public method (TRL would offer it to the model as a tool), so
`CarlaToolEnv` is a context manager (``with CarlaToolEnv() as env:`` closes its env and any
server session on leaving the block) and `ToolEnvFactory` closes every env it built with its
``close()`` or, as a context manager, on leaving the block (TRL never closes its environments).

Scoring: with ``play_out=True`` (default) an episode the model leaves unfinished (it stops calling
tools, or hits the tool-call or length limit) is run to its end with the controls held before
the reward is read, so the decision is scored by its consequence. ``play_out=False`` scores as
upstream's TRL example: 0.0 unless the model itself called tools until the episode ended.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from carla_gym.envs.spaces import TOOL_ACTIONS
from carla_gym.envs.trolley import DEFAULT_SCENARIO
from carla_gym.llm.prompts import reset_text
from carla_gym.openenv.urls import EXAMPLE_URL, check_url
from carla_gym.sim.catalogue import TROLLEY_ACTIONS
from carla_gym.sim.validate import check_number

OBSERVE, EMERGENCY_STOP, LANE_LEFT, LANE_RIGHT = (TOOL_ACTIONS.index(name) for name in (
    "observe", "emergency_stop", "lane_change_left", "lane_change_right"))  # CarlaTrolley-v0 tool actions
EPISODE_OVER = "The episode is over; tools no longer change anything. Stop calling tools."
TOOL_CALL_MARKERS = ("<tool_call>", "<function=")
"""Text that announces a tool call in Qwen-family output (JSON and XML styles)."""

REWARD_MODES = ("rubric", "physical", "outcome")
"""Training rewards of `CarlaToolEnv`: CarlaTrolley-v0's ``rubric`` (upstream) and ``physical`` modes, and
``outcome``: 1.0 when the episode reached the simulated best outcome (``outcome_success``), else 0.0
(this project's)."""
IMAGE_ASPECT = 9 / 16
"""Height/width of tool images: the scenario camera's 640x360 (upstream trolley default)."""


def reply_text(text: str, done: bool) -> str:
    """A tool's reply: ``text``, with the `EPISODE_OVER` line appended on the call that ended the episode.

    The one rule for the TRL adapters (`CarlaToolEnv`, `carla_gym.llm.nav_tools.NavToolEnv`) and the server's
    MCP tools (`carla_gym.server.environment.CarlaEnvironment.call_tool`).

    Examples:
        >>> reply_text("Speed: 0.0 km/h.", done=True).splitlines()[-1] == EPISODE_OVER
        True
    """
    return text + "\n" + EPISODE_OVER if done else text



def image_height(width: int) -> int:
    """Height [px] of tool images ``width`` px wide (`IMAGE_ASPECT`, at least 16).

    >>> image_height(256), image_height(16)
    (144, 16)
    """
    return max(16, round(width * IMAGE_ASPECT))


class ToolArgumentError(ValueError, TypeError):
    """A tool called with missing or unknown argument names (a TypeError for Python callers, a ValueError as a tool)."""


def _counted(method: Callable) -> Callable:
    """Make ``method`` a counted tool: every call is recorded, failed ones also as failures.

    The wrapper accepts any arguments, so that calls with wrong argument names reach the adapter
    and are counted (Python would raise before the method body runs); it binds them to the
    method's own signature and raises `ToolArgumentError` naming the valid call when they do
    not fit. ``functools.wraps`` keeps the name, docstring, annotations and ``inspect.signature``
    of ``method``, so the JSON schema TRL derives (``transformers.utils.get_json_schema``) is
    unchanged.
    """
    signature = inspect.signature(method)
    name = method.__name__
    params = list(signature.parameters)[1:]
    usage = f"{name}({', '.join(params)})"

    @functools.wraps(method)
    def tool(self: CarlaToolEnv, *args: Any, **kwargs: Any) -> Any:
        self.calls.append(name)
        try:
            signature.bind(self, *args, **kwargs)
        except TypeError as exc:
            self.failures.append(name)
            given = [*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]
            unknown = [k for k in kwargs if k not in params]
            problem = f"unknown argument(s) {unknown}" if unknown else str(exc)
            raise ToolArgumentError(f"{name}({', '.join(given)}): {problem}; call it as {usage}") from None
        try:
            return method(self, *args, **kwargs)
        except Exception:
            self.failures.append(name)
            raise

    return tool


class CarlaToolEnv:
    """One CarlaTrolley-v0 episode at a time, driven through three tools.

    Tools (public methods): ``observe()``, ``emergency_stop()`` and ``lane_change(direction)``.
    Each returns the per-decision description (``Speed: 40.0 km/h.`` then ``- walker at
    22.0m`` lines, upstream TRL format), or with ``vision=True`` the list
    ``[{"type": "image", "image": PIL.Image}, {"type": "text", "text": description}]`` with the
    front camera at ``image_size`` x ``image_size * 9/16`` pixels. After the episode ends, tools
    return `EPISODE_OVER` (as text or a text block) without stepping.

    Close it by using it as a context manager (``with CarlaToolEnv() as env:``); a public
    ``close`` method would be offered to the model as a tool.

    Attributes:
        reward: Return of the current episode so far (rubric: upstream's terminal reward).
        done: Whether the episode has terminated.
        info: The env's latest info dict (``info["outcome"]`` once done).
        calls: Tool names called this episode, in order: every attempt, failed ones and calls after the
            end included (unknown tools as reported by the dispatcher).
        failures: Tool names of the calls in ``calls`` that failed (bad argument names or values,
            unknown tools), in order.
        parse_failures: Assistant turns whose tool-call text did not parse (reported by the dispatcher).
        actions: The env actions the tools took this episode (`CarlaTrolley-v0` tool names such as
            ``"lane_change_left"``; calls after the end and the play-out are not included).
        scenario: Scenario of the current episode.
        decisions_total: Env decisions the tools took over every episode of this instance (the model's tool
            calls that stepped the env; play-outs not included).
        env_steps_total: Env steps (``env.step`` calls, one decision of ``ticks_per_action`` ticks each) over
            every episode of this instance: the tools' decisions and the play-out's, the unit SB3 counts in
            its ``timesteps``.

    Args:
        vision: Return camera images with the text (for VLMs).
        image_size: Width [px] of tool images (16-1024).
        ticks_per_action: Simulator ticks (0.05 s) per tool call.
        base_url: OpenEnv server URL, e.g. ``"http://127.0.0.1:8000"``; None uses the embedded
            simulator.
        play_out: Finish unfinished episodes with the controls held before scoring.
        reward_mode: ``"rubric"`` (upstream) or ``"physical"`` (see CarlaTrolley-v0), or ``"outcome"``
            (`REWARD_MODES`: 1.0 for reaching the best outcome, scored when the episode is finished).

    Raises:
        ValueError: Bad ``image_size``, ``ticks_per_action``, ``reward_mode`` (names `REWARD_MODES`) or ``base_url``
            (`carla_gym.openenv.urls.check_url`; checked before anything connects) (from the env).
    """

    def __init__(self, vision: bool = False, image_size: int = 256, ticks_per_action: int = 10,
                 base_url: str | None = None, play_out: bool = True, reward_mode: str = "rubric") -> None:
        self._vision = bool(vision)
        self._play_out = bool(play_out)
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode={reward_mode!r} is not valid; choose one of {list(REWARD_MODES)}")
        self._outcome = reward_mode == "outcome"
        width = check_number("image_size", image_size, 16, 1024, integer=True)
        height = image_height(width)
        self._env = gym.make(
            "CarlaTrolley-v0", observation_mode="state", ticks_per_action=ticks_per_action,
            reward_mode="rubric" if self._outcome else reward_mode,
            info_text=True,
            render_mode="rgb_array" if vision else None, render_width=width, render_height=height,
            backend="embedded" if base_url is None else "openenv", base_url=base_url,
        ).unwrapped
        self.reward = 0.0
        self.done = False
        self.info: dict[str, Any] = {}
        self.calls: list[str] = []
        self.failures: list[str] = []
        self.parse_failures = 0
        self.actions: list[str] = []
        self.scenario = DEFAULT_SCENARIO
        self.decisions_total = 0
        self.env_steps_total = 0
        self._conversation_counted = False

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
        self.reward, self.done, self.calls, self.failures, self.actions = 0.0, False, [], [], []
        self.parse_failures = 0
        self._conversation_counted = False
        return self._reply(reset_text(self.info["scene_prompt"], self.info["description"]))

    @_counted
    def observe(self) -> str | list[dict]:
        """Keep the current controls for a moment, then look again.

        Returns:
            What the car senses a moment later: speed and distances to pedestrians.
        """
        return self._act(OBSERVE)

    @_counted
    def emergency_stop(self) -> str | list[dict]:
        """Brake as hard as possible from now on.

        Returns:
            What the car senses a moment later: speed and distances to pedestrians.
        """
        return self._act(EMERGENCY_STOP)

    @_counted
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
            raise ValueError(f"direction={direction!r} is not valid; use 'left' or 'right'")
        return self._act(LANE_LEFT if direction == "left" else LANE_RIGHT)

    # -- helpers (private: TRL exposes every public method as a tool) -------------------------
    def _record_failed_call(self, name: str, error: str) -> str:
        """Count a call that failed before reaching a tool (unknown tool, arguments not a mapping).

        Args:
            name: The tool name the model called.
            error: What the dispatcher answers (TRL: ``"Tool <name> not found."`` for unknown tools).

        Returns:
            ``error``.
        """
        self.calls.append(name)
        self.failures.append(name)
        return error

    def _act(self, action: int) -> str | list[dict]:
        if self.done:
            return self._reply(EPISODE_OVER)
        _, reward, terminated, _, self.info = self._env.step(action)
        self.actions.append(TOOL_ACTIONS[action])
        self.decisions_total += 1
        self.env_steps_total += 1
        self.reward += reward
        self.done = terminated
        return self._reply(reply_text(self.info["description"], self.done))

    def _reply(self, text: str) -> str | list[dict]:
        if not self._vision:
            return text
        from PIL import Image

        return [{"type": "image", "image": Image.fromarray(self._env.render())}, {"type": "text", "text": text}]

    def _finish(self) -> float:
        """Play the episode out with the controls held (when ``play_out``); the episode's return.

        With ``reward_mode="outcome"`` the return is 1.0 when the finished episode reached the best
        outcome (``info["outcome"]["outcome_success"]``), else 0.0 (also for an unfinished episode).
        """
        while self._play_out and not self.done:
            _, reward, self.done, _, self.info = self._env.step(OBSERVE)
            self.env_steps_total += 1
            self.reward += reward
        if self._outcome:
            self.reward = float(self.done and bool(self.info["outcome"]["outcome_success"]))
        return self.reward

    def _close(self) -> None:
        self._env.close()

    def __enter__(self) -> CarlaToolEnv:
        """``with CarlaToolEnv(...) as env:`` closes the env (and its server session) on leaving the block."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the env: the public way to close it, as a ``close`` method would become a tool."""
        self._close()


def tool_functions(cls: type) -> list[Callable]:
    """The tool functions of a tool-environment class, by TRL's rule, in definition order.

    TRL offers every public method except ``reset`` and ``get_reward`` as a tool (`tool_methods` finds the
    bound methods of an instance in name order); this is the same rule on the class, in the order the
    class defines them, for servers that expose the same tools (`carla_gym.server.mcp`).

    Returns:
        ``[CarlaToolEnv.observe, CarlaToolEnv.emergency_stop, CarlaToolEnv.lane_change]`` for `CarlaToolEnv`
        (unbound functions; their first parameter is the environment).
    """
    return [fn for name, fn in vars(cls).items()
            if inspect.isfunction(fn) and name not in ("reset", "get_reward") and not name.startswith("_")]


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
    TRL never closes environments; call `close` after training, or use the factory as a context
    manager (``with ToolEnvFactory() as factory:``).

    Args:
        env_urls: OpenEnv server URLs; empty: embedded.
        **kwargs: `CarlaToolEnv` arguments (vision, image_size, ticks_per_action, play_out, reward_mode).

    Raises:
        ValueError: ``env_urls`` is a string, or one of its URLs is malformed, naming it
            (`carla_gym.openenv.urls.check_url`), here rather than at the first rollout.
    """

    def __init__(self, env_urls: Sequence[str] = (), **kwargs: Any) -> None:
        if isinstance(env_urls, str):
            raise ValueError(f"env_urls={env_urls!r}: give a list of URLs, e.g. [{EXAMPLE_URL!r}]")
        for i, url in enumerate(env_urls):
            check_url(url, f"env_urls[{i}]")
        self._urls = itertools.cycle(list(env_urls)) if env_urls else None
        self._kwargs = kwargs
        self.instances: list[CarlaToolEnv] = []

    def __call__(self) -> CarlaToolEnv:
        """Build one more `CarlaToolEnv`."""
        env = CarlaToolEnv(base_url=next(self._urls) if self._urls else None, **self._kwargs)
        self.instances.append(env)
        return env

    def close(self) -> None:
        """Close every environment built so far (each one's env and server session)."""
        while self.instances:
            self.instances.pop()._close()

    def __enter__(self) -> ToolEnvFactory:
        """``with ToolEnvFactory(...) as factory:`` closes every environment it built on leaving the block."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """`close`."""
        self.close()


def count_conversation(env: CarlaToolEnv, conversation: Sequence[dict] | None) -> None:
    """Add to ``env``'s counts what only the conversation shows: unknown-tool calls and unparsed tool calls.

    For TRL rollouts, whose dispatcher answers some calls without asking the adapter: every
    ``tool`` message whose name is not a tool of ``env`` counts as one call and one failure
    (`CarlaToolEnv._record_failed_call`); so does every ``tool`` message of a known tool beyond
    the calls the adapter saw of it (TRL failed before calling it: arguments that are not a JSON
    object, a call that is not of type "function"); and every assistant message without tool
    calls whose text holds a `TOOL_CALL_MARKERS` marker (TRL's parser fell back to plain text)
    counts as one parse failure. Counted once per episode, however often it is called. TRL drops
    the tool messages of a last turn whose results overflow ``max_completion_length`` after
    running them; failed calls of that turn that never reached the adapter are therefore not
    counted here (TRL's ``tools/call_frequency`` counts them).

    Args:
        env: The rollout's environment.
        conversation: The rollout's completion messages (TRL's ``completions[i]``); None: nothing to add.
    """
    if env._conversation_counted or not conversation:
        return
    env._conversation_counted = True
    known = {tool.__name__ for tool in tool_methods(env)}
    seen = {name: env.calls.count(name) for name in known}  # calls of each tool that reached the adapter
    for message in conversation:
        name = message.get("name")
        if message.get("role") == "tool" and (name not in known or seen[name] == 0):
            env._record_failed_call(str(name), str(message.get("content")))
        elif message.get("role") == "tool":
            seen[name] -= 1
        elif message.get("role") == "assistant" and unparsed_tool_call(message):
            env.parse_failures += 1


def unparsed_tool_call(message: dict, raw_text: str | None = None) -> bool:
    """Whether an assistant message announced a tool call that did not parse (no ``tool_calls``, a marker in the text).

    Args:
        message: The parsed assistant message.
        raw_text: The generated text with special tokens kept, when known (default: the message content).

    >>> unparsed_tool_call({"role": "assistant", "content": '<tool_call>{"name": oops}</tool_call>'})
    True
    >>> unparsed_tool_call({"role": "assistant", "content": "Done."})
    False
    """
    if message.get("tool_calls"):
        return False
    text = raw_text if raw_text is not None else message.get("content")
    if isinstance(text, list):
        text = "".join(str(b.get("text", "")) for b in text if isinstance(b, dict))
    return isinstance(text, str) and any(marker in text for marker in TOOL_CALL_MARKERS)


def call_counts(environments: Sequence[CarlaToolEnv]) -> dict[str, float]:
    """The tool-call counts of rollouts (any tool environment: trolley or navigation) for the training log.

    Returns:
        Means per rollout (finished or not) of ``"episode/tool_calls"`` (every attempted call),
        ``"episode/tool_failures"`` (calls that raised or named no tool) and
        ``"episode/parse_failures"``: with these counts ``tool_failures / tool_calls`` equals TRL's
        ``tools/failure_frequency`` and ``tool_calls`` its ``tools/call_frequency``. Empty without
        environments.
    """
    if not environments:
        return {}
    return {
        "episode/tool_calls": float(np.mean([len(e.calls) for e in environments])),
        "episode/tool_failures": float(np.mean([len(e.failures) for e in environments])),
        "episode/parse_failures": float(np.mean([e.parse_failures for e in environments])),
    }


def episode_metrics(environments: Sequence[CarlaToolEnv]) -> dict[str, float]:
    """Episode metrics of trolley rollouts for the training log.

    Returns:
        The counts of `call_counts`; means over finished episodes of the actual outcome
        (``"episode/outcome_success"``, ``"episode/best_pedestrians_hit"``, ``"episode/road_departure"``),
        of ``"episode/success"`` (the rubric's), ``"episode/pedestrians_hit"``,
        ``"episode/expected_pedestrians_hit"`` and the ``"trolley_action/<CLASS>"`` shares, when
        an episode finished. Empty without environments.
    """
    metrics = call_counts(environments)
    outcomes = [e.info["outcome"] for e in environments if e.done and "outcome" in e.info]
    if not outcomes:
        return metrics
    n = len(outcomes)
    if all("outcome_success" in o for o in outcomes):  # every trolley outcome has them
        metrics.update({
            "episode/outcome_success": float(np.mean([o["outcome_success"] for o in outcomes])),
            "episode/best_pedestrians_hit": float(np.mean([o["best_pedestrians_hit"] for o in outcomes])),
            "episode/road_departure": float(np.mean([o["road_departure"] for o in outcomes])),
        })
    metrics.update({
        "episode/success": float(np.mean([o["success"] for o in outcomes])),
        "episode/pedestrians_hit": float(np.mean([o["actual_pedestrians_hit"] for o in outcomes])),
        "episode/expected_pedestrians_hit": float(np.mean([o["expected_pedestrians_hit"] for o in outcomes])),
    })
    counts = Counter(o["trolley_action"] for o in outcomes)
    for action in TROLLEY_ACTIONS:
        metrics[f"trolley_action/{action}"] = counts.get(action, 0) / n
    return metrics


def outcome_reward(environments: Sequence[CarlaToolEnv], log_metric: Callable | None = None,
                   completions: Sequence[Sequence[dict]] | None = None, **kwargs: Any) -> list[float]:
    """GRPO reward function of ``reward_mode="outcome"`` environments: 1.0 per rollout that reached the best outcome.

    The same function as `rubric_reward` under the name TRL logs (``rewards/outcome_reward/mean``): the
    environments' return is the outcome score (`CarlaToolEnv`, ``reward_mode="outcome"``).

    Returns:
        One float per environment, 1.0 or 0.0.
    """
    return rubric_reward(environments, log_metric, completions, **kwargs)


def rubric_reward(environments: Sequence[CarlaToolEnv], log_metric: Callable | None = None,
                  completions: Sequence[Sequence[dict]] | None = None, **kwargs: Any) -> list[float]:
    """GRPO reward function: each rollout's episode return (after playing it out).

    TRL calls it with ``environments`` (one per completion, in order), ``completions`` and
    ``log_metric``; the conversation counts of `count_conversation` are added to the
    environments and the episode metrics of `episode_metrics` are logged beside
    ``rewards/rubric_reward/mean``. It finishes unfinished episodes (with ``play_out``), so list
    it before any other reward function that reads the environments: TRL calls them in order.

    Returns:
        One float per environment.
    """
    for i, env in enumerate(environments):
        count_conversation(env, completions[i] if completions is not None else None)
    rewards = [env._finish() for env in environments]
    if log_metric is not None:
        for name, value in episode_metrics(environments).items():
            log_metric(name, value)
    return rewards
