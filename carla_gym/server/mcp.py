"""The driving tools over MCP (OpenEnv RFC 003): one definition with the TRL adapters, served by `CarlaEnvironment`.

Tools. A session offers the tools of its current scenario family, named, described and typed as the TRL
adapters define them (`carla_gym.llm.tools.CarlaToolEnv`, `carla_gym.llm.nav_tools.NavToolEnv`;
`carla_gym.llm.tools.tool_functions`): trolley families ``observe``, ``emergency_stop``,
``lane_change(direction)``; navigation (``maze_navigation``, ``free_roam*``) ``observe``,
``control_vehicle(throttle, steer, brake)``, ``emergency_stop``, ``lane_change(direction)``,
``init_navigation_agent(behavior)``, ``set_destination(x, y, z)``, ``follow_route(steps)``. A reset into the
other family swaps the tools (``tools/list`` shows the current family's). The description is the adapter
method's docstring summary and the input schema its parameters with their docstring descriptions, as
``transformers.utils.get_json_schema`` (what TRL shows the model) derives them; FastMCP adds
``additionalProperties: false`` and the defaults.

A tool call runs the adapter's own method body (argument checks, error messages, the call and tick count) on
the session's simulator (`CarlaEnvironment.call_tool`): a trolley tool is one decision of
`TICKS_PER_ACTION` ticks (the wire action with ``metadata={"ticks": 10}``); a navigation driving tool
`NAV_TICKS_PER_ACTION` ticks, ``init_navigation_agent`` and ``set_destination`` one tick, ``follow_route(steps)``
one route step of ``min(steps, 200)`` ticks. The reply text is what the adapter's tool returns in text mode;
the episode's last reply ends with the adapter's ``EPISODE_OVER`` line. A session that has not been reset
plays the server's default scenario (``carla-gym serve --scenario``): MCP reserves ``reset``, ``step``,
``state`` and ``close`` as tool names, so an orchestrator resets over ``/ws`` (scenario, seed) and the agent
then calls tools.

Routes (openenv-core's, behind `carla_gym.server.guard.Guard`):

* ``POST /mcp``: JSON-RPC 2.0. ``openenv/session/create`` opens a session (one simulator, counted against
  ``--max-sessions``, reclaimed after ``--session-timeout`` idle) and answers ``{"session_id": ...}``;
  ``tools/list`` and ``tools/call`` with ``params.session_id`` use it; ``openenv/session/close`` ends it.
  Without a ``session_id``, ``tools/list`` lists the default scenario's tools; ``tools/call`` needs a session
  (the guard refuses it: each would build a simulator outside ``--max-sessions``).
* ``WebSocket /mcp``: one session per connection; each text frame is one JSON-RPC request.
* ``WebSocket /ws``: ``{"type": "mcp", "data": <JSON-RPC request>}`` on the connection's session, and
  ``{"type": "step", "data": {"type": "call_tool", "tool_name": ..., "arguments": {...}}}`` (or
  ``{"type": "list_tools"}``), as openenv-core's ``MCPToolClient`` sends: the reply's ``reward`` and ``done``
  are the tool's.

Reply format. A ``tools/call`` result (openenv-core's serialisation of FastMCP's ``CallToolResult``):
``content`` ``[{"type": "text", "text": <reply text>}]`` (what the LLM sees), ``structured_content``
``{"result": <reply text>}``, ``data`` the reply text (what ``MCPToolClient.call_tool`` returns), and ``meta``
``{"reward": <raw reward>, "rubric_reward": <rubric reward>, "done": <bool>, ...}`` (`ToolReply`). The ``/ws``
step reply carries the same result in ``observation.result`` and the reward and done as the step's.

Errors. A bad call (unknown tool: on a ``/ws`` step the valid names are listed, on ``/mcp`` FastMCP's ``Unknown
tool`` message points to ``tools/list``; bad arguments: the adapter's message; a call after the episode ended:
reset over ``/ws``, or open a new session) is a JSON-RPC error (``-32602`` invalid params; ``-32000`` for the ended
episode) on ``/mcp`` and a ``CallToolObservation.error`` (``MCPToolClient`` raises RuntimeError) on a ``/ws``
step; nothing changes in the session. Malformed JSON-RPC gets ``-32700``/``-32600``/``-32601``/``-32602`` from
the guard.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fastmcp.exceptions import ToolError as FastMCPToolError
from fastmcp.tools import Tool
from fastmcp.tools.base import ToolResult
from fastmcp.tools.function_tool import FunctionTool
from mcp.types import TextContent
from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction
from pydantic import ConfigDict, PrivateAttr

from carla_gym.envs.action import ToolsAction
from carla_gym.llm.nav_tools import NavToolEnv
from carla_gym.llm.tools import CarlaToolEnv, reply_text, tool_functions
from carla_gym.openenv.models import CarlaAction, SessionClosedError

if TYPE_CHECKING:
    from carla_gym.server.environment import CarlaEnvironment

TICKS_PER_ACTION: int = inspect.signature(CarlaToolEnv).parameters["ticks_per_action"].default
"""Ticks of one trolley tool call: `CarlaToolEnv`'s default ``ticks_per_action`` (10 = 0.5 s)."""

NAV_TICKS_PER_ACTION: int = inspect.signature(NavToolEnv).parameters["ticks_per_action"].default
"""Ticks of one navigation driving tool call: `NavToolEnv`'s default ``ticks_per_action`` (10 = 0.5 s)."""

OUTPUT_SCHEMA = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"],
                 "x-fastmcp-wrap-result": True}
"""Output schema of every tool: the reply text, wrapped as FastMCP wraps a function returning ``str``."""

UNKNOWN_TOOL, INVALID_ARGUMENTS, EPISODE_OVER = "unknown_tool", "invalid_arguments", "episode_over"
"""`ToolCallError.kind` values."""


class ServerAction(CarlaAction):
    """The server's action class: `CarlaAction`, plus openenv-core's MCP actions (see `model_validate`)."""

    model_config = ConfigDict(title="CarlaAction")

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Any:
        """openenv-core's MCP actions for ``{"type": "call_tool"|"list_tools", ...}``, else a `CarlaAction`.

        openenv-core's ``deserialize_action`` routes MCP payloads only for servers whose action class is its
        generic ``Action``; the server passes this class instead, so a ``/ws`` step of ``MCPToolClient``
        reaches the environment while every `CarlaAction` payload validates (and is refused) as before.
        """
        if isinstance(obj, dict) and obj.get("type") in _MCP_ACTIONS:
            return _MCP_ACTIONS[obj["type"]].model_validate(obj)
        return super().model_validate(obj, *args, **kwargs)


ServerAction.__doc__ = CarlaAction.__doc__  # /schema shows CarlaAction's schema, description included
_MCP_ACTIONS = {"call_tool": CallToolAction, "list_tools": ListToolsAction}


class ToolCallError(ValueError):
    """A refused tool call (nothing changed); ``kind`` is `UNKNOWN_TOOL`, `INVALID_ARGUMENTS` or `EPISODE_OVER`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class ToolReply:
    """What one tool call returned.

    Attributes:
        text: The reply text, exactly what the TRL adapter's tool returns for the same call (text mode).
        reward: The step's raw reward as the wire step reports it (trolley: the last tick's; navigation: the
            sum over the call's ticks).
        rubric_reward: The server rubric's reward of the step (`carla_gym.server.rubrics`).
        done: Whether the episode ended with this call.
    """

    text: str
    reward: float
    rubric_reward: float | None
    done: bool

    @classmethod
    def of(cls, text: str, observation: Any) -> ToolReply:
        """The reply of a step: its ``text`` and the step observation's ``reward``, ``rubric_reward`` and ``done``.

        The text ends with the adapters' episode-over line on the last call (`carla_gym.llm.tools.reply_text`).
        """
        done = bool(observation.done)
        return cls(reply_text(text, done), float(observation.reward), observation.rubric_reward, done)

    def meta(self) -> dict[str, Any]:
        """``reward``, ``rubric_reward`` and ``done`` as the tool result's ``meta``."""
        return {"reward": self.reward, "rubric_reward": self.rubric_reward, "done": self.done}

    def result(self) -> dict[str, Any]:
        """The JSON result openenv-core's ``/mcp`` returns for this reply (a ``/ws`` step's ``observation.result``)."""
        return {"content": [{"type": "text", "text": self.text, "annotations": None, "meta": None}],
                "structured_content": {"result": self.text},
                "meta": {**self.meta(), "fastmcp": {"wrap_result": True}}, "data": self.text, "is_error": False}


def adapter_class(navigation: bool) -> type:
    """The TRL adapter whose tools a family offers: `NavToolEnv` for navigation, else `CarlaToolEnv`."""
    return NavToolEnv if navigation else CarlaToolEnv


@dataclasses.dataclass(frozen=True)
class ToolDefinition:
    """One tool as MCP lists it, derived from an adapter method.

    Attributes:
        name: The method's name.
        description: Its docstring's summary (FastMCP's docstring parsing: the text before ``Args:``).
        parameters: JSON schema of its arguments (FastMCP's, from the type hints and ``Args:`` lines).
        function: The adapter's (counted) method, called with a host as ``self``.
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable


@functools.cache
def tool_definitions(cls: type) -> tuple[ToolDefinition, ...]:
    """The MCP tools of an adapter class, in its definition order (computed once per class).

    The schema comes from FastMCP's function parsing of a stand-in with the method's signature less ``self``
    (type hints resolved) and its docstring, so nothing is re-typed.
    """
    definitions = []
    for fn in tool_functions(cls):
        hints = typing.get_type_hints(fn)
        params = [p.replace(annotation=hints[p.name]) for p in list(inspect.signature(fn).parameters.values())[1:]]

        def stand_in(**kwargs: Any) -> str:  # never called: only its signature and docstring are read
            raise NotImplementedError

        stand_in.__name__, stand_in.__doc__ = fn.__name__, fn.__doc__
        stand_in.__signature__ = inspect.Signature(params, return_annotation=str)
        stand_in.__annotations__ = {p.name: p.annotation for p in params} | {"return": str}
        parsed = FunctionTool.from_function(stand_in, name=fn.__name__)
        definitions.append(ToolDefinition(fn.__name__, parsed.description or "", parsed.parameters, fn))
    return tuple(definitions)


class CarlaTool(Tool):
    """A FastMCP tool bound to one `CarlaEnvironment`: runs `CarlaEnvironment.call_tool_async`."""

    _env: Any = PrivateAttr(default=None)

    @classmethod
    def bound(cls, definition: ToolDefinition, env: CarlaEnvironment) -> CarlaTool:
        """The tool of ``definition`` for ``env``."""
        tool = cls(name=definition.name, description=definition.description, parameters=definition.parameters,
                   output_schema=OUTPUT_SCHEMA)
        tool._env = env
        return tool

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        """Call the tool on the session's simulator.

        Raises:
            fastmcp.exceptions.ToolError: The call was refused: ``"<kind>: <message>"`` of the `ToolCallError`
                (FastMCP answers it as a tool error; `carla_gym.server.guard.relabel_rpc` turns the kind into
                the JSON-RPC error code).
        """
        try:
            reply = await self._env.call_tool_async(self.name, arguments)
        except ToolCallError as exc:  # the kind first, for the guard's JSON-RPC error code; a client error: no log
            raise FastMCPToolError(f"{exc.kind}: {exc}", log_level=logging.DEBUG) from None
        except SessionClosedError as exc:
            raise FastMCPToolError(str(exc), log_level=logging.DEBUG) from None
        return ToolResult(content=[TextContent(type="text", text=reply.text)],
                          structured_content={"result": reply.text},
                          meta={**reply.meta(), "fastmcp": {"wrap_result": True}})


class _Host:
    """Stands in for the TRL adapter as ``self`` of its tool methods, acting on a server-side episode.

    The adapter's ``_counted`` wrapper appends to ``calls``/``failures``; the method body checks its
    arguments and calls ``_act``, which the subclasses route to the environment. ``reply`` holds the
    `ToolReply` of the call.
    """

    def __init__(self, env: CarlaEnvironment, name: str, arguments: dict[str, Any]) -> None:
        self.env, self.name, self.arguments = env, name, arguments
        self.calls: list[str] = []
        self.failures: list[str] = []
        self.reply: ToolReply | None = None


class TrolleyHost(_Host):
    """`CarlaToolEnv`'s ``_act(action)``: the Gym tool index's call, one decision of `TICKS_PER_ACTION` ticks."""

    def _act(self, action: int) -> str:
        self.reply = self.env._trolley_tool(ToolsAction.CALLS[action], TICKS_PER_ACTION, self.name, self.arguments)
        return self.reply.text


class NavHost(_Host):
    """`NavToolEnv`'s ``_act(call, ticks)`` (and its ``_ticks``) on the session's `NavEpisode`."""

    _ticks = NAV_TICKS_PER_ACTION

    def _act(self, call, ticks: int | None) -> str:
        self.reply = self.env._nav_tool(call, ticks, self.name, self.arguments)
        return self.reply.text


def run_tool(env: CarlaEnvironment, definitions: dict[str, ToolDefinition], navigation: bool, name: str,
             arguments: dict[str, Any]) -> ToolReply:
    """Run one adapter tool method on ``env`` through a host (see `CarlaEnvironment.call_tool`).

    Raises:
        ToolCallError: `INVALID_ARGUMENTS` with the adapter's message; nothing changed.
    """
    host = (NavHost if navigation else TrolleyHost)(env, name, arguments)
    try:
        definitions[name].function(host, **arguments)
    except (ValueError, TypeError) as exc:
        raise ToolCallError(INVALID_ARGUMENTS, str(exc)) from None
    return host.reply
