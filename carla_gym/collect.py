"""``carla-gym collect``: openenv-core's rollout collection against a carla-gym server, through its MCP tools.

``openenv collect`` (openenv-core 0.3's CLI) only knows the session factories of its hard-coded
registry (``openspiel:<game>``, ``reasoning_gym:<dataset>``); anything else is refused with
``Unknown env ... Supported: openspiel:<game>, reasoning_gym:<dataset>``. This module plugs a
carla-gym server into the same machinery: `CarlaSessionFactory` is an openenv-core
``ResourceSessionFactory`` whose sessions play one episode each over the server's MCP tools, and
`collect` runs openenv-core's ``CollectRunner`` with its white-box ``MCPHarnessAdapter`` and
``RolloutSerializer``, so the output is openenv-core's: ``results.jsonl`` (one ``EpisodeRecord``
per line: ``messages``, ``reward``, ``done``, ``tool_trace``, ``metrics``, ``verify_metrics``,
``artifacts``, ``task``) and ``metadata.json``, resumable as ``openenv collect`` is (episode ids
``<prefix>-000000`` ...; ids already in ``results.jsonl`` are skipped).

One session = one WebSocket session of openenv-core's ``MCPToolClient`` (``/ws``): ``reset`` to the
task's scenario and seed, ``ListToolsAction`` for the manifest (the server's tools: the TRL
adapter's names, docstrings and schemas) and one ``CallToolAction`` per tool call, whose reply
carries the tool's text, the step's reward and rubric reward, and ``done``. The conversation the
teacher sees is the TRL adapter's: one user message, this project's instruction for the family
(`carla_gym.llm.prompts`) followed by the text ``CarlaToolEnv.reset`` or ``NavToolEnv.reset`` appends (the
scene prompt and the first per-decision description, which the server sends in its state), then the tools'
texts. Every family the server plays is collected: trolley and navigation (``maze_navigation``,
``free_roam*``; the navigation tools, no oracle).

Rewards (openenv-core's rule: ``verify`` forwards the environment's reward, never a new one): the
episode's reward is its return under the server's rubric, the sum of the rubric rewards the server
sent with this session's tool calls: 0.0 until the call that ends the episode, then its terminal rubric
reward (upstream's CarlaTrolleyRubric); this is ``CarlaToolEnv.reward`` for the same calls. A tool
result carries it as ``metadata["reward"]`` only on the call that ends the episode (None before),
with the step's ``rubric_reward`` and ``raw_reward`` (the wire reward) on every call.

An episode the teacher leaves unfinished (it stops calling tools once its decision is made, as the
instruction asks, or ``--max-turns`` runs out) is finished on the server before it is scored, as the
TRL adapter scores by default (``play_out=True``, ``--play-out``): ``verify`` calls ``observe`` until
the episode ends, so the decision is scored by its consequence, and forwards the reward the server
paid for the finished episode; those calls are counted in ``verify_metrics["play_out_calls"]`` and
are not part of the transcript. With ``play_out=False`` (``--no-play-out``) it is recorded as it is:
``done`` false, the reward the server has paid so far (trolley: 0.0, the rubric's value before the
end) and no outcome. An episode without a single tool call is not played out either: it has no reward
from the environment and is counted as failed (openenv-core's "rollout did not produce an environment
reward"), to be retried on resume.

Teachers: ``scripted`` (this project's policies, `ScriptedTeacher`: ``oracle`` plays the first
tool policy of `carla_gym.sim.outcomes.best_policies`, a policy reaching the simulated best outcome
(`oracle_tool_policy`); ``random`` draws uniformly among the tool calls the manifest allows without free
arguments, from a seeded stream; ``brake`` calls ``emergency_stop`` every turn), or an LLM through openenv-core's
``create_llm_client`` / ``OpenAIClient`` and ``build_model_step`` (hosted OpenAI or Anthropic, or any
OpenAI-compatible endpoint: vLLM, TGI, Ollama).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from carla_gym.cli_args import HelpFormatter
from carla_gym.hints import needs_extra

with needs_extra("server"):  # a missing openenv-core names the install command
    from openenv.core.client_types import StepResult
    from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation, Tool
    from openenv.core.harness import (
        HarnessRunLimits,
        MCPHarnessAdapter,
        Message,
        ModelStep,
        ModelStepResult,
        ResourceSession,
        ResourceSessionFactory,
        ToolResult,
        VerifyResult,
    )
    from openenv.core.harness.collect import CollectResult, CollectRunner, RolloutSerializer, build_model_step
    from openenv.core.llm_client import LLMResponse, ToolCall
    from openenv.core.mcp_client import MCPToolClient

from carla_gym.llm.prompts import nav_user_prompt, state_reset_text, user_prompt
from carla_gym.openenv.client import SESSION_ENDINGS, connect_explained
from carla_gym.openenv.models import CarlaObservation, CarlaState
from carla_gym.openenv.urls import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_MESSAGE_TIMEOUT_S, check_timeout, check_url
from carla_gym.sim.navigation.scenarios import is_nav_name, resolve_any_scenario
from carla_gym.sim.outcomes import POLICIES, policy_call, policy_outcomes
from carla_gym.sim.scenarios import ScenarioSpec, resolve_scenario
from carla_gym.sim.validate import check_number, check_seed

TEACHERS = ("oracle", "random", "brake")
"""Scripted teachers (``--teacher``): see `ScriptedTeacher`."""

PROVIDERS = ("scripted", "openai", "anthropic")
"""Teacher providers (``--provider``), as ``openenv collect`` names them: ``scripted`` runs ``--teacher``."""

API_KEY_ENVS = {"openai": ("OPENAI_API_KEY", "API_KEY"), "anthropic": ("ANTHROPIC_API_KEY", "API_KEY")}
"""Environment variables read for each hosted provider's API key, first set wins (``openenv collect``'s)."""

DEFAULT_SCENARIO = "trolley_micro_escape_exists"
"""Scenario of ``--scenario`` by default (the TRL adapter's default scenario)."""

DEFAULT_MAX_TURNS = 20
"""Teacher turns per episode by default (``--max-turns``): longer than any trolley episode at one decision of
10 ticks per tool call (this project's choice; ``openenv collect``'s default of 9 cuts some generated
layouts short)."""

MAX_PLAY_OUT_CALLS = 10_000
"""Most ``observe`` calls a play-out makes (5000 s of simulated time at 10 ticks per call; the server's navigation
episodes end by their ``max_steps``, 200 or 500 upstream steps by default, long before)."""

ORACLE_NAV = ("the oracle teacher has no policy for the navigation scenario {!r} (no best outcome is simulated "
              "there); use --teacher brake or random, or an LLM")
"""Why the oracle refuses navigation scenarios."""

RESUMABLE_CHANGES = ("env_base_url", "llm_endpoint", "num_episodes_requested")
"""``metadata.json`` keys a resumed run may change (where the server and the LLM endpoint are, how many episodes
in all); every other setting (the plan of which episode an id stands for, the teacher and its settings,
``max_turns``, ``play_out``) must stay, so that one ``results.jsonl`` holds episodes of one collection."""



# -- the session ------------------------------------------------------------------------------------------------
class _Client(MCPToolClient):
    """openenv-core's ``MCPToolClient`` that keeps what this project's server sends.

    openenv-core's parsers keep only ``done``/``reward`` of a reset observation and ``episode_id``/``step_count``
    of the state; the session needs the `CarlaObservation` and the whole `CarlaState` (its ``scenario_data``
    holds the snapshot, the seed and the outcome). A connection that cannot be made raises the project's
    message (`carla_gym.openenv.client`: why, and what to do).
    """

    async def connect(self) -> _Client:
        if self._ws is None:  # no embedded simulator to fall back to here
            await connect_explained(super().connect, self._ws_url, self._connect_timeout, embedded=False)
        return self

    def _parse_result(self, payload: dict[str, Any]) -> StepResult:
        data = payload.get("observation", {})
        if isinstance(data, dict) and "tool_name" not in data and "tools" not in data:
            return StepResult(observation=CarlaObservation(**data), reward=payload.get("reward"),
                              done=payload.get("done", False))
        return super()._parse_result(payload)

    def _parse_state(self, payload: dict[str, Any]) -> CarlaState:
        return CarlaState(**payload)


def _tool_reply(result: StepResult) -> tuple[str, float | None, str | None]:
    """The text, the rubric reward and the error of a ``CallToolAction`` reply (see the server's MCP docs).

    The text is the tool's first text content (what the LLM sees); the rubric reward is read from the
    result's structured content or ``_meta``.
    """
    obs = result.observation
    if isinstance(obs, CallToolObservation) and obs.error is not None:
        return "", None, obs.error.message
    res = obs.result if isinstance(obs, CallToolObservation) else None
    text, rubric = "", None
    if isinstance(res, dict):
        if res.get("is_error") or res.get("isError"):
            content = res.get("content") or []
            return "", None, " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        for block in res.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "text":
                text = str(block.get("text", ""))
                break
        else:
            if isinstance(res.get("data"), str):
                text = res["data"]
        for key in ("structured_content", "structuredContent", "meta", "_meta"):
            extra = res.get(key)
            if isinstance(extra, dict) and extra.get("rubric_reward") is not None:
                rubric = float(extra["rubric_reward"])
                break
    elif isinstance(res, str):
        text = res
    return text, rubric, None


class CarlaSession(ResourceSession):
    """One episode on a carla-gym server, played through its MCP tools (an openenv-core ``ResourceSession``).

    The constructor opens the session (one WebSocket connection), resets it and reads the tool manifest.

    Args:
        base_url: Server URL, e.g. ``"http://127.0.0.1:8000"``.
        scenario: Scenario name (any family the server plays).
        seed: Reset seed (None: the server's choice; generated scenarios then draw one and report it).
        scenario_config: The scenario's overrides, or None.
        episode_id: Episode id sent with the reset (the collection's id), or None.
        play_out: Finish an episode the teacher left unfinished in `verify` (module docstring).
        connect_timeout_s: Seconds to wait for the WebSocket handshake.
        message_timeout_s: Seconds to wait for each reply.

    Attributes:
        scenario: The episode's scenario.
        seed: The seed the server played (``scenario_data["seed"]``).
        scenario_config: Its overrides (a dict, empty for none).
        tools: The server's tool manifest (openenv-core ``Tool`` objects).
        done: Whether the episode has ended.
        episode_return: The sum of the rubric rewards the server sent for this session's tool calls.
        tool_calls: Tool calls sent (failed ones included; play-out calls not).

    Raises:
        ValueError: A malformed URL or timeout (before connecting); the server refused the reset (unknown
            scenario, bad overrides or seed: its message).
        ConnectionError: The server cannot be reached (naming the URL, why, and what to do).
        TimeoutError: No reply within ``message_timeout_s``.
    """

    def __init__(self, base_url: str, scenario: str, seed: int | None = None, scenario_config: dict | None = None,
                 episode_id: str | None = None, play_out: bool = True,
                 connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S) -> None:
        self.base_url = check_url(base_url)
        self.scenario = scenario
        self.scenario_config = dict(scenario_config or {})
        self.play_out = bool(play_out)
        self.done = False
        self.episode_return = 0.0
        self.tool_calls = 0
        self._rewarded = False  # whether any tool call got a rubric reward from the server
        self._message_timeout_s = check_timeout(message_timeout_s, "message_timeout_s")
        self._client = _Client(base_url.rstrip("/").removesuffix("/ws"),
                               connect_timeout_s=check_timeout(connect_timeout_s, "connect_timeout_s"),
                               message_timeout_s=self._message_timeout_s).sync()
        try:
            reset = {"scenario_name": scenario, "seed": seed, "episode_id": episode_id}
            if scenario_config:
                reset["scenario_config"] = dict(scenario_config)
            self._reset = self._ask("reset", self._client.reset, **reset)
            self.state = self._ask("state", self._client.state)
            self.seed = self.state.scenario_data.get("seed", seed)
            self.tools: list[Tool] = list(self._ask("list_tools", self._client.list_tools))
        except BaseException:
            self.close()
            raise

    # -- openenv-core's ResourceSession ------------------------------------------------------------------------
    def initial_messages(self) -> list[Message]:
        """The TRL adapter's prompt: one user message, the instruction followed by the reset text.

        The family's instruction (`carla_gym.llm.prompts.user_prompt`, `carla_gym.llm.prompts.nav_user_prompt`),
        then the scene prompt and the first per-decision description (``CarlaToolEnv.reset``'s or
        ``NavToolEnv.reset``'s text) from the server's state (`carla_gym.llm.prompts.state_reset_text`).
        """
        (message,) = nav_user_prompt() if is_nav_name(self.scenario) else user_prompt()
        return [{"role": "user", "content": message["content"] + state_reset_text(self.state.scenario_data)}]

    def list_tools(self) -> list[Tool]:
        """The server's tool manifest (read once, at reset)."""
        return list(self.tools)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call one tool on the server (one ``CallToolAction`` over ``/ws``).

        Returns:
            ``ToolResult(data=<the tool's text>, done=..., metadata={"reward", "rubric_reward", "raw_reward"})``:
            ``reward`` is the episode's reward (`episode_return`) on the call that ends the episode and None
            before; a call the server refused (unknown tool, bad arguments, a call after the end) returns
            ``data={"error": <the server's message>}`` and ``error`` set, as TRL shows tool errors, and changes
            nothing.

        Raises:
            ConnectionError: The connection was lost or the server ended the session.
            TimeoutError: No reply within ``message_timeout_s``.
        """
        self.tool_calls += 1
        return self._call(name, arguments)

    def _call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """`call_tool` without counting the call."""
        try:
            result = self._ask(f"call_tool {name}", self._client.step,
                               CallToolAction(tool_name=name, arguments=dict(arguments)))
        except RuntimeError as exc:  # an error envelope: a refused call, unless the server ended the session
            if any(f"(code: {code})" in str(exc) for code in SESSION_ENDINGS):
                raise ConnectionError(f"{self.base_url} ended the session: {exc}") from exc
            return self._error(str(exc))
        text, rubric, error = _tool_reply(result)
        if error is not None:
            return self._error(error)
        if rubric is None:
            raise ValueError(f"the server at {self.base_url} sent no rubric reward with the reply to {name!r}; is "
                             "it this version of carla-gym serve?")
        self.episode_return += rubric
        self._rewarded = True
        self.done = bool(result.done)
        return ToolResult(data=text, done=self.done, metadata={
            "reward": self.episode_return if self.done else None, "rubric_reward": rubric,
            "raw_reward": result.reward})

    def verify(self, transcript: list[Message], final_state: Any | None = None) -> VerifyResult:
        """Forward the episode's reward and outcome (after the play-out, with ``play_out``).

        Returns:
            ``env_reward``: `episode_return` (None when no tool call was rewarded); ``done``; ``metrics``:
            ``scenario``, ``seed``, ``finished``, ``tool_calls``, ``play_out_calls``, ``outcome`` (the
            server's ``scenario_data["outcome"]``, None unless finished) and, where the outcome has them,
            ``pedestrians_hit`` (actually hit), ``expected_pedestrians_hit``, ``outcome_success``,
            ``success`` (the rubric's) and ``trolley_action``; ``artifacts``: the final state (its
            ``scenario_data`` without the snapshot and the prompt texts).
        """
        play_out_calls = 0
        while self.play_out and self.tool_calls and not self.done:  # no tool call: failed (module docstring)
            if play_out_calls >= MAX_PLAY_OUT_CALLS:
                raise RuntimeError(f"the play-out of {self.scenario!r} did not end within {MAX_PLAY_OUT_CALLS} "
                                   "observe calls")
            result = self._call("observe", {})
            play_out_calls += 1
            if result.error is not None:
                raise RuntimeError(f"the play-out's observe call failed: {result.error}")
        self.state = self._ask("state", self._client.state)
        data = dict(self.state.scenario_data)
        for key in ("snapshot", "scene_prompt", "description"):  # in the transcript already
            data.pop(key, None)
        outcome = data.get("outcome") if self.done else None
        metrics: dict[str, Any] = {"scenario": self.scenario, "seed": self.seed, "finished": self.done,
                                   "tool_calls": self.tool_calls, "play_out_calls": play_out_calls,
                                   "outcome": outcome}
        for key, name in (("actual_pedestrians_hit", "pedestrians_hit"),
                          ("expected_pedestrians_hit", "expected_pedestrians_hit"),
                          ("outcome_success", "outcome_success"), ("success", "success"),
                          ("trolley_action", "trolley_action")):
            if isinstance(outcome, dict) and key in outcome:
                metrics[name] = outcome[key]
        state = self.state.model_dump()
        state["scenario_data"] = data
        return VerifyResult(env_reward=self.episode_return if self._rewarded else None, done=self.done,
                            metrics=metrics, artifacts={"final_state": state})

    def close(self) -> None:
        """Close the WebSocket session (the server frees its slot)."""
        client, self._client = getattr(self, "_client", None), None
        if client is not None:
            client.close()

    # -- helpers ---------------------------------------------------------------------------------------------------
    def _ask(self, what: str, call, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except TimeoutError as exc:
            raise TimeoutError(f"no reply from {self.base_url} within {self._message_timeout_s:g} s to {what} "
                               "(a busy server may need a larger --message-timeout)") from exc

    def _error(self, message: str) -> ToolResult:
        return ToolResult(data={"error": message}, done=self.done, metadata={"reward": None}, error=message)


def check_task(scenario: str, scenario_config: dict | None = None) -> None:
    """Check a scenario name and its overrides against this package's catalogue (before anything connects).

    The server's own check (`carla_gym.sim.navigation.scenarios.resolve_any_scenario`).

    Raises:
        ValueError: An unknown name or bad overrides, naming the valid choices.
    """
    resolve_any_scenario(scenario, scenario_config)


class CarlaSessionFactory(ResourceSessionFactory):
    """openenv-core's ``ResourceSessionFactory`` for a carla-gym server: one `CarlaSession` per rollout.

    Args:
        base_url: Server URL, e.g. ``"http://127.0.0.1:8000"``.
        play_out: `CarlaSession`'s ``play_out``.
        connect_timeout_s: Seconds to wait for each session's WebSocket handshake.
        message_timeout_s: Seconds to wait for each reply.

    Attributes:
        last_session: The session `create` made last (the scripted teachers read its scenario and seed;
            openenv-core's ``CollectRunner`` plays one session at a time).

    Raises:
        ValueError: A malformed URL or timeout.
    """

    def __init__(self, base_url: str, play_out: bool = True, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S) -> None:
        self.base_url = check_url(base_url)
        self.play_out = bool(play_out)
        self.connect_timeout_s = check_timeout(connect_timeout_s, "connect_timeout_s")
        self.message_timeout_s = check_timeout(message_timeout_s, "message_timeout_s")
        self.last_session: CarlaSession | None = None

    def create(self, task: Any, seed: int | None = None, episode_id: str | None = None) -> CarlaSession:
        """Open a session on the server, reset to ``task``.

        Args:
            task: A scenario name, or a dict with ``scenario`` and optionally ``seed`` and ``scenario_config``
                (`episode_tasks`' rows).
            seed: Reset seed; None: the task's ``seed`` (``CollectRunner`` passes none).
            episode_id: Sent with the reset.

        Raises:
            ValueError: A task of another shape, or one the server refuses (see `CarlaSession`).
            ConnectionError, TimeoutError: See `CarlaSession`.
        """
        if isinstance(task, str):
            task = {"scenario": task}
        if not isinstance(task, dict) or not isinstance(task.get("scenario"), str):
            raise ValueError(f"task={task!r}: give a scenario name or a dict with 'scenario' (and optionally "
                             "'seed' and 'scenario_config')")
        seed = check_seed(task.get("seed") if seed is None else seed)
        self.last_session = CarlaSession(self.base_url, task["scenario"], seed, task.get("scenario_config"),
                                         episode_id, self.play_out, self.connect_timeout_s, self.message_timeout_s)
        return self.last_session


def episode_tasks(scenarios: Sequence[str], num_episodes: int, first_seed: int = 0,
                  scenario_config: dict | None = None) -> list[dict[str, Any]]:
    """The collection's tasks: episode i plays ``scenarios[i % len(scenarios)]`` with seed ``first_seed + i``.

    The rule of `carla_gym.llm.prompts.episode_rows` (GRPO's dataset rows).

    Returns:
        ``[{"scenario": ..., "seed": ...} (plus "scenario_config" when given), ...]``, ``num_episodes`` long.

    Raises:
        ValueError: No scenarios, ``num_episodes < 1`` or a bad seed, naming the value.

    >>> episode_tasks(["a", "b"], 3, first_seed=5)
    [{'scenario': 'a', 'seed': 5}, {'scenario': 'b', 'seed': 6}, {'scenario': 'a', 'seed': 7}]
    """
    if not scenarios:
        raise ValueError("scenarios=[]: give at least one scenario name")
    num_episodes = check_number("num_episodes", num_episodes, 1, 10**9, integer=True)
    check_seed(first_seed)
    check_seed(first_seed + num_episodes - 1)
    extra = {"scenario_config": dict(scenario_config)} if scenario_config else {}
    return [{"scenario": scenarios[i % len(scenarios)], "seed": first_seed + i, **extra} for i in range(num_episodes)]


# -- teachers ---------------------------------------------------------------------------------------------------
def _choices(tools: Sequence[Tool]) -> list[tuple[str, dict[str, Any]]]:
    """The calls the random teacher draws from, in manifest order.

    Each tool without required arguments, and one call per value of a tool whose only required argument is an
    enum (``lane_change`` left and right).
    """
    out = []
    for tool in tools:
        schema = tool.input_schema or {}
        required = list(schema.get("required") or [])
        if not required:
            out.append((tool.name, {}))
        elif len(required) == 1:
            enum = (schema.get("properties") or {}).get(required[0], {}).get("enum")
            out += [(tool.name, {required[0]: value}) for value in enum or []]
    return out


def oracle_tool_policy(spec: ScenarioSpec) -> str:
    """The oracle teacher's policy on ``spec``: the first tool policy with the least outcome among the tool policies.

    A control policy (`carla_gym.sim.outcomes.CONTROL_POLICIES`) has no MCP tool, so the teacher plays
    the tool action mode's best: the first of `carla_gym.sim.outcomes.best_policies` wherever a tool
    policy reaches the simulated best outcome (every generated layout, and every catalogue scenario
    at its default settings), else the tool policy closest to it.

    Examples:
        >>> from carla_gym.sim import resolve_scenario
        >>> oracle_tool_policy(resolve_scenario("trolley_micro_escape_exists"))
        'emergency_stop'
    """
    outcomes = policy_outcomes(spec)
    return min(POLICIES, key=outcomes.__getitem__)  # the first of the least, in POLICIES order


class ScriptedTeacher:
    """This project's scripted policies as an openenv-core ``ModelStep``: one tool call per turn.

    Teachers:

    * ``oracle``: the first tool policy (`carla_gym.sim.outcomes.POLICIES`) with the least outcome among them
      for the episode's scenario and seed (`oracle_tool_policy`: the first of
      `carla_gym.sim.outcomes.best_policies` that is a tool policy, as a control policy has no MCP tool),
      decision by decision (`carla_gym.sim.outcomes.policy_call`): one tool call is one decision of
      `carla_gym.sim.outcomes.DECISION_TICKS` (10) ticks on the server, as in the outcome rollouts. Trolley
      families only (navigation has no best policy).
    * ``random``: uniform over the calls the manifest allows without free arguments (trolley: ``observe``,
      ``emergency_stop``, ``lane_change`` left and right), from a stream seeded by ``seed``, the episode's
      seed and its scenario (as the comparison harness's random agent).
    * ``brake``: ``emergency_stop`` every turn.

    Args:
        teacher: One of `TEACHERS`.
        factory: The session factory; the teacher plays its `CarlaSessionFactory.last_session`.
        seed: The random teacher's seed.

    Raises:
        ValueError: An unknown teacher (naming `TEACHERS`); from a call, the oracle on a navigation scenario.
    """

    def __init__(self, teacher: str, factory: CarlaSessionFactory, seed: int = 0) -> None:
        if teacher not in TEACHERS:
            raise ValueError(f"teacher={teacher!r}: choose one of {list(TEACHERS)}")
        self.teacher, self.factory, self.seed = teacher, factory, check_seed(seed)
        self._session: CarlaSession | None = None
        self._rng = np.random.default_rng(0)
        self._policy: str | None = None

    def __call__(self, messages: list[Message], tools: list[Tool], sampling: dict[str, Any]) -> ModelStepResult:
        """The next turn: one tool call (the decision number is the count of tool messages so far)."""
        session = self.factory.last_session
        if session is None:
            raise RuntimeError("the scripted teacher plays the factory's sessions: create one first")
        decision = sum(1 for m in messages if m.get("role") == "tool")
        if session is not self._session:
            self._start(session)
        if self.teacher == "oracle":
            call = policy_call(self._policy, decision)
            name = call.action_type
            args = {} if call.lane_direction is None else {"direction": call.lane_direction}
        elif self.teacher == "random":
            options = _choices(tools)
            name, args = options[int(self._rng.integers(len(options)))]
        else:
            name, args = "emergency_stop", {}
        return ModelStepResult(response=LLMResponse(content="", tool_calls=[
            ToolCall(id=f"call_{decision}", name=name, args=dict(args))]))

    def _start(self, session: CarlaSession) -> None:
        """Set up for a new episode: the oracle's policy, the random stream."""
        self._session = session
        if self.teacher == "oracle":
            if is_nav_name(session.scenario):
                raise ValueError(ORACLE_NAV.format(session.scenario))
            spec = resolve_scenario(session.scenario, session.scenario_config or None, session.seed)
            self._policy = oracle_tool_policy(spec)
        elif self.teacher == "random":
            key = [self.seed, int(session.seed or 0), zlib.crc32(session.scenario.encode())]
            self._rng = np.random.default_rng(key)


def _api_key(provider: str) -> str:
    for name in API_KEY_ENVS[provider]:
        if os.environ.get(name):
            return os.environ[name]
    raise ValueError(f"--provider {provider}: no API key; set one of {list(API_KEY_ENVS[provider])}")


def llm_teacher(provider: str, model: str, llm_endpoint: str | None = None, temperature: float = 0.2,
                max_tokens: int = 256) -> ModelStep:
    """An LLM teacher: openenv-core's ``build_model_step`` over its LLM clients.

    Args:
        provider: ``"openai"`` or ``"anthropic"`` (hosted; the key from `API_KEY_ENVS`); ignored with
            ``llm_endpoint``.
        model: Model id.
        llm_endpoint: An OpenAI-compatible server (vLLM, TGI, Ollama), e.g. ``"http://127.0.0.1:8001"`` (the
            client appends ``/v1``; a trailing ``/v1`` is accepted); the key is ``OPENAI_API_KEY`` if set.
        temperature: Sampling temperature.
        max_tokens: Tokens per turn at most.

    Raises:
        ValueError: An unknown provider, a missing API key or a malformed endpoint URL.
    """
    from openenv.core.llm_client import OpenAIClient, create_llm_client

    if llm_endpoint is not None:
        parts = urlsplit(llm_endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--llm-endpoint {llm_endpoint!r}: expected a URL such as http://127.0.0.1:8001")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.path.rstrip("/") not in ("", "/v1"):
            raise ValueError(f"--llm-endpoint {llm_endpoint!r}: give the server's root URL (openenv-core's client "
                             "appends /v1), e.g. http://127.0.0.1:8001")
        client = OpenAIClient(f"{parts.scheme}://{host}", port, model,
                              api_key=os.environ.get("OPENAI_API_KEY") or "not-needed",
                              temperature=temperature, max_tokens=max_tokens)
    else:
        if provider not in API_KEY_ENVS:
            raise ValueError(f"--provider {provider!r}: choose one of {list(API_KEY_ENVS)} or give --llm-endpoint")
        client = create_llm_client(provider, model, _api_key(provider), temperature=temperature,
                                   max_tokens=max_tokens)
    return build_model_step(client)


# -- the collection ---------------------------------------------------------------------------------------------
def collect(base_url: str, output_dir: str | Path, model_step: ModelStep | None = None, *,
            scenarios: Sequence[str] = (DEFAULT_SCENARIO,), num_episodes: int = 10, first_seed: int = 0,
            scenario_config: dict | None = None, max_turns: int = DEFAULT_MAX_TURNS, teacher: str = "oracle",
            teacher_seed: int = 0, play_out: bool = True, resume: bool = True, episode_id_prefix: str = "ep",
            metadata: dict[str, Any] | None = None, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
            message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S) -> CollectResult:
    """Collect episodes from a carla-gym server into ``output_dir`` with openenv-core's ``CollectRunner``.

    Args:
        base_url: Server URL.
        output_dir: Where ``results.jsonl`` and ``metadata.json`` go (created).
        model_step: The teacher (e.g. `llm_teacher`); None: the scripted ``teacher``.
        scenarios: Scenario names; episode i plays ``scenarios[i % len]`` (`episode_tasks`).
        num_episodes: Episodes to collect (ids ``<episode_id_prefix>-000000`` ...).
        first_seed: Seed of episode 0; episode i has ``first_seed + i``.
        scenario_config: Overrides for every scenario, or None.
        max_turns: Teacher turns per episode at most.
        teacher: Scripted teacher, one of `TEACHERS` (when ``model_step`` is None).
        teacher_seed: The random teacher's seed.
        play_out: Finish unfinished episodes before scoring (module docstring).
        resume: Skip the episode ids already in ``results.jsonl``; False moves an old ``results.jsonl`` aside
            (openenv-core warns with a ``RuntimeWarning``).
        episode_id_prefix: Prefix of the episode ids.
        metadata: Extra keys for ``metadata.json`` (the command line's teacher settings).
        connect_timeout_s: Seconds to wait for each session's WebSocket handshake.
        message_timeout_s: Seconds to wait for each reply.

    Returns:
        openenv-core's ``CollectResult`` (collected, skipped, failed counts, mean reward).

    Raises:
        ValueError: Bad counts, seeds, timeouts or URL, an unknown scenario or teacher, the oracle teacher on a
            navigation scenario, or a resume whose settings differ from ``metadata.json``'s (`RESUMABLE_CHANGES`
            aside).
    """
    check_url(base_url)
    for name in scenarios:
        check_task(name, scenario_config)
        if model_step is None and teacher == "oracle" and is_nav_name(name):
            raise ValueError(ORACLE_NAV.format(name))
    tasks = episode_tasks(list(scenarios), num_episodes, first_seed, scenario_config)
    max_turns = check_number("max_turns", max_turns, 1, 10**6, integer=True)
    factory = CarlaSessionFactory(base_url, play_out, connect_timeout_s, message_timeout_s)
    if model_step is None:
        model_step = ScriptedTeacher(teacher, factory, teacher_seed)
    serializer = RolloutSerializer(output_dir)
    settings = {
        "env": "carla_gym", "env_base_url": base_url, "collector": "carla-gym collect",
        "scenarios": list(scenarios), "scenario_config": scenario_config or None, "first_seed": first_seed,
        "episode_id_prefix": episode_id_prefix, "num_episodes_requested": int(num_episodes), "max_turns": max_turns,
        "play_out": bool(play_out), "teacher": model_step.teacher if isinstance(model_step, ScriptedTeacher) else None,
        "teacher_seed": model_step.seed if isinstance(model_step, ScriptedTeacher) and model_step.teacher == "random"
        else None, **(metadata or {})}
    settings = json.loads(json.dumps(settings, default=str))  # as metadata.json holds them: compared as such
    if resume and serializer.results_path.exists() and serializer.metadata_path.exists():
        old = json.loads(serializer.metadata_path.read_text(encoding="utf-8"))
        changed = {key: (old.get(key), settings.get(key)) for key in sorted(set(old) | set(settings))
                   if key not in RESUMABLE_CHANGES and old.get(key) != settings.get(key)}
        if changed:
            diff = ", ".join(f"{key}: {a!r} there, {b!r} now" for key, (a, b) in changed.items())
            raise ValueError(f"{serializer.results_path} holds episodes collected with other settings ({diff}); "
                             "resume with the same settings (or --no-resume to start again), or choose another "
                             "output directory")
    serializer.write_metadata(settings)
    runner = CollectRunner(session_factory=factory, harness_adapter=MCPHarnessAdapter(), serializer=serializer,
                           tasks=tasks, limits=HarnessRunLimits(max_turns=max_turns))
    return runner.run(model_step=model_step, num_episodes=len(tasks), episode_id_prefix=episode_id_prefix,
                      resume=resume)


def check_server(base_url: str, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """Open and close one WebSocket connection to the server, so an unreachable one fails once, up front.

    Raises:
        ConnectionError: Naming the URL, why, and what to do.
    """
    client = _Client(check_url(base_url).rstrip("/").removesuffix("/ws"),
                     connect_timeout_s=check_timeout(connect_timeout_s, "connect_timeout_s")).sync()
    try:
        client.connect()
    finally:
        client.close()


def parse_args(argv: list[str] | None = None, prog: str = "carla-gym collect") -> argparse.Namespace:
    """Parse the command line (``--help`` lists every flag)."""
    parser = argparse.ArgumentParser(
        prog=prog, formatter_class=HelpFormatter,
        description="Collect episodes from a carla-gym server with openenv-core's rollout collection (CollectRunner, "
                    "MCPHarnessAdapter, RolloutSerializer) through the server's MCP tools; writes results.jsonl and "
                    "metadata.json to --output-dir, as openenv collect does.")
    parser.add_argument("--base-url", required=True, help="carla-gym server URL, e.g. http://127.0.0.1:8000")
    parser.add_argument("-o", "--output-dir", required=True, help="directory for results.jsonl and metadata.json")
    parser.add_argument("--scenario", nargs="+", default=[DEFAULT_SCENARIO],
                        help="scenario names; episode i plays scenario i mod their number")
    parser.add_argument("--scenario-config", default=None, help="JSON object of overrides for every scenario")
    parser.add_argument("-n", "--num-episodes", type=int, default=10, help="episodes to collect")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of episode 0; episode i has first seed + i")
    parser.add_argument("--max-turns", type=int, default=DEFAULT_MAX_TURNS, help="teacher turns per episode at most")
    parser.add_argument("--provider", choices=PROVIDERS, default="scripted",
                        help="teacher: scripted (--teacher) or a hosted LLM (key from OPENAI_API_KEY or "
                             "ANTHROPIC_API_KEY)")
    parser.add_argument("--teacher", choices=TEACHERS, default="oracle", help="scripted teacher")
    parser.add_argument("--teacher-seed", type=int, default=0, help="seed of the random teacher's stream")
    parser.add_argument("--model", default=None, help="model id (LLM teachers)")
    parser.add_argument("--llm-endpoint", default=None,
                        help="OpenAI-compatible server (vLLM, TGI, Ollama), e.g. http://127.0.0.1:8001")
    parser.add_argument("--temperature", type=float, default=0.2, help="LLM sampling temperature")
    parser.add_argument("--max-tokens", type=int, default=256, help="LLM tokens per turn at most")
    parser.add_argument("--play-out", action=argparse.BooleanOptionalAction, default=True,
                        help="finish episodes the teacher leaves unfinished (observe until the end) before scoring, "
                             "as the TRL adapter scores; --no-play-out scores them as they are")
    parser.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                        help="skip episodes already in results.jsonl (--no-resume moves it aside)")
    parser.add_argument("--episode-id-prefix", default="ep", help="prefix of the episode ids")
    parser.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT_S,
                        help="seconds to wait for the server's WebSocket handshake")
    parser.add_argument("--message-timeout", type=float, default=DEFAULT_MESSAGE_TIMEOUT_S,
                        help="seconds to wait for each reply of the server")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """``carla-gym collect``: collect episodes from a carla-gym server (see the module docstring and ``--help``).

    Returns:
        0 when every planned episode is in ``results.jsonl``, 1 when some failed (run again to retry them).

    Raises:
        SystemExit: With a message for bad arguments, an unreachable server or an unknown scenario.
    """
    args = parse_args(argv)
    llm = args.provider != "scripted" or args.llm_endpoint is not None
    try:
        config = None
        if args.scenario_config is not None:
            try:
                config = json.loads(args.scenario_config)
            except json.JSONDecodeError as exc:
                raise ValueError(f"--scenario-config {args.scenario_config!r}: not JSON ({exc})") from None
            if not isinstance(config, dict):
                raise ValueError(f"--scenario-config {args.scenario_config!r}: give a JSON object")
        if llm and not args.model:
            raise ValueError("--model is required with an LLM teacher (--provider openai|anthropic or --llm-endpoint)")
        for flag, value in (("--num-episodes", args.num_episodes), ("--max-turns", args.max_turns)):
            if value < 1:
                raise ValueError(f"{flag} {value}: must be >= 1")
        check_seed(args.first_seed)
        check_seed(args.teacher_seed)
        for name in args.scenario:
            check_task(name, config)
            if not llm and args.teacher == "oracle" and is_nav_name(name):
                raise ValueError(ORACLE_NAV.format(name))  # before connecting (collect checks it too)
        model_step = llm_teacher(args.provider, args.model, args.llm_endpoint, args.temperature,
                                 args.max_tokens) if llm else None
        check_server(args.base_url, args.connect_timeout)
        result = collect(
            args.base_url, args.output_dir, model_step, scenarios=args.scenario, num_episodes=args.num_episodes,
            first_seed=args.first_seed, scenario_config=config, max_turns=args.max_turns, teacher=args.teacher,
            teacher_seed=args.teacher_seed, play_out=args.play_out, resume=args.resume,
            episode_id_prefix=args.episode_id_prefix, connect_timeout_s=args.connect_timeout,
            message_timeout_s=args.message_timeout,
            metadata={"provider": "openai-compatible" if args.llm_endpoint else args.provider, "model": args.model,
                      "llm_endpoint": args.llm_endpoint, "temperature": args.temperature if llm else None,
                      "max_tokens": args.max_tokens if llm else None})
    except (ValueError, ConnectionError, TimeoutError) as exc:
        sys.exit(f"carla-gym collect: {exc}")
    out = Path(args.output_dir)
    print(f"collected={result.num_collected} skipped={result.num_skipped} failed={result.num_failed} "
          f"avg_reward={result.avg_reward:.3f} -> {out / 'results.jsonl'}, {out / 'metadata.json'}")
    if result.num_failed:
        print(f"{result.num_failed} episode(s) failed (see above); run the same command again to retry them",
              file=sys.stderr)
        return 1
    return 0


__all__ = ["CarlaSession", "CarlaSessionFactory", "ScriptedTeacher", "TEACHERS", "PROVIDERS", "check_server",
           "check_task", "collect", "episode_tasks", "llm_teacher", "main", "oracle_tool_policy"]

if __name__ == "__main__":
    sys.exit(main())
