"""ASGI guard in front of openenv-core's app: bad input gets an error reply, never a dead session or server.

WebSocket ``/ws``. openenv-core's handler ends a session when a frame is binary, or is JSON that is not an
object (``[1, 2]``, ``5``), has a number of more than 4,300 digits or nests too deeply (from
about 250 levels pydantic cannot even report the error). The guard answers such frames itself
with upstream's ``INVALID_JSON`` error envelope and never passes them on, so the session and its
episode live on. A ``{"type": "mcp"}`` message's JSON-RPC request is checked as below and refused with
``{"type": "mcp", "data": <JSON-RPC error>}``. The closing error openenv-core raises when a client vanishes
without a close frame is swallowed instead of logged as a server error.

MCP (``POST /mcp`` bodies, ``WebSocket /mcp`` frames; `carla_gym.server.mcp`). Requests are checked before
openenv-core sees them and refused with a JSON-RPC error object (HTTP status 200, the request's ``id`` echoed
when it can be read): not JSON, larger than `MAX_FRAME_BYTES` or nested deeper than `MAX_DEPTH`: ``-32700``
parse error; not an object (batches included), ``jsonrpc`` not ``"2.0"``, ``method`` not a string, a bad
``id`` or unknown members: ``-32600`` invalid request; a method other than `MCP_METHODS`: ``-32601``;
``params`` not an object, ``tools/call`` without a string ``name`` or with ``arguments`` not an object, a
``session_id`` that is not one of this server's HTTP MCP sessions (WebSocket sessions cannot be driven or
closed over HTTP), and ``tools/call`` over HTTP without a ``session_id`` (each would build a simulator outside
``--max-sessions``): ``-32602``. openenv-core reports a refused tool call as an internal error (``-32603``);
the guard relabels it: an unknown tool or bad arguments ``-32602``, a call after the episode ended
``-32000``, each with ``data.kind``.

openenv-core reclaims a session idle past ``--session-timeout`` by closing its environment but
leaves its connection open, so every later message would get the same error and the client
could never start over. The guard relabels that error's envelope ``SESSION_CLOSED``
(`carla_gym.openenv.models.SESSION_CLOSED`; on MCP a ``-32000`` error with ``data.code`` ``SESSION_CLOSED``),
then closes the connection: clients see the session end, and a reset opens a new one.
"""

from __future__ import annotations

import json
import time
from typing import Any

from starlette import websockets as _ws

from carla_gym.openenv.models import SESSION_CLOSED, SessionClosedError

_CLIENT_GONE = (_ws.WebSocketDisconnect, *filter(None, [getattr(_ws, "WebSocketDisconnected", None)]))
"""Errors openenv-core's handler raises when it writes to a socket whose client is gone."""

MAX_FRAME_BYTES = 1 << 20
"""Largest accepted WebSocket text frame or ``/mcp`` body [bytes] (an action is well under 1 KiB)."""
MAX_DEPTH = 64
"""Deepest accepted JSON nesting (pydantic cannot serialise errors about values nested ~250 deep)."""
_ERROR_START = '{"type":"error"'
"""How openenv-core's error envelopes begin (pydantic ``model_dump_json`` of ``WSErrorResponse``)."""
_MCP_START = '{"type":"mcp"'
"""How openenv-core's ``/ws`` MCP replies begin (``WSMCPResponse.model_dump_json``)."""

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR, SERVER_ERROR = (
    -32700, -32600, -32601, -32602, -32603, -32000)
"""JSON-RPC 2.0 error codes (jsonrpc.org/specification, section 5.1; -32000 is the server-defined range)."""

MCP_METHODS = ("tools/list", "tools/call", "openenv/session/create", "openenv/session/close")
"""The JSON-RPC methods openenv-core's ``/mcp`` serves."""

_REQUEST_KEYS = frozenset(("jsonrpc", "method", "params", "id"))
_TOOL_ERROR_CODES = {"unknown_tool": INVALID_PARAMS, "invalid_arguments": INVALID_PARAMS,
                     "episode_over": SERVER_ERROR}
"""JSON-RPC code of each refused-tool-call kind (`carla_gym.server.mcp.ToolCallError.kind`, which
`carla_gym.server.mcp.CarlaTool` puts before the message as ``"<kind>: "``)."""


def rpc_error(code: int, message: str, request_id: Any = None, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC 2.0 error response object."""
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def _readable_id(value: Any) -> Any:
    """The request's ``id`` when it is a valid one (string, integer or null), else None."""
    if isinstance(value, dict):
        rid = value.get("id")
        if rid is None or isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool)):
            return rid
    return None


def load_json(text: str) -> tuple[Any, str | None]:
    """Parse one incoming text frame or request body, with the size and depth limits every route keeps.

    Returns:
        ``(value, None)``, or ``(value or None, why)`` for a text larger than `MAX_FRAME_BYTES`, invalid JSON
        or JSON nested deeper than `MAX_DEPTH` (``why`` starts ``"Parse error"`` for invalid JSON).
    """
    if len(text) > MAX_FRAME_BYTES:
        return None, f"{len(text)} characters is larger than {MAX_FRAME_BYTES}"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"Parse error: {type(exc).__name__}: {str(exc)[:200]}"
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:  # cheap bracket count first
        return value, f"JSON nested deeper than {MAX_DEPTH} levels"
    return value, None


def parse_jsonrpc(text: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Parse and check one JSON-RPC request for openenv-core's ``/mcp``.

    Returns:
        ``(request, None)`` for a request openenv-core can take, or ``(None, error)`` with the JSON-RPC
        error response to send instead (module docstring: the codes).
    """
    value, why = load_json(text)
    if why is not None:
        why = why if value is not None or why.startswith("Parse error") else f"request of {why}"
        return None, rpc_error(PARSE_ERROR, why, _readable_id(value))
    return check_jsonrpc(value)


def check_jsonrpc(value: Any) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Check a parsed JSON-RPC request (see `parse_jsonrpc`)."""
    if not isinstance(value, dict):
        kind = "batches are not supported" if isinstance(value, list) else f"got {type(value).__name__}"
        return None, rpc_error(INVALID_REQUEST, f"Invalid Request: a request must be a JSON object ({kind})")
    rid = value.get("id")
    if not (rid is None or isinstance(rid, str) or (isinstance(rid, int) and not isinstance(rid, bool))):
        return None, rpc_error(INVALID_REQUEST, f"Invalid Request: id must be a string, an integer or null, got "
                                                f"{type(rid).__name__}")
    if value.get("jsonrpc") != "2.0":
        return None, rpc_error(INVALID_REQUEST, f"Invalid Request: jsonrpc must be '2.0', got "
                                                f"{str(value.get('jsonrpc'))[:50]!r}", rid)
    extra = sorted(str(k)[:50] for k in value if k not in _REQUEST_KEYS)
    if extra:
        return None, rpc_error(INVALID_REQUEST, f"Invalid Request: unknown members {extra[:5]}; valid: "
                                                f"{sorted(_REQUEST_KEYS)}", rid)
    method = value.get("method")
    if not isinstance(method, str):
        return None, rpc_error(INVALID_REQUEST, "Invalid Request: method must be a string", rid)
    if method not in MCP_METHODS:
        return None, rpc_error(METHOD_NOT_FOUND, f"Method not found: {method[:100]!r}; valid: {list(MCP_METHODS)}",
                               rid)
    params = value.get("params", {})
    if not isinstance(params, dict):
        return None, rpc_error(INVALID_PARAMS, f"Invalid params: params must be an object, got "
                                               f"{type(params).__name__}", rid)
    if method == "tools/call":
        if not isinstance(params.get("name"), str):
            return None, rpc_error(INVALID_PARAMS, "Invalid params: tools/call needs the tool's name as a string "
                                                   "in params.name", rid)
        if not isinstance(params.get("arguments", {}), dict):
            return None, rpc_error(INVALID_PARAMS, "Invalid params: params.arguments must be an object", rid)
    if "session_id" in params and not isinstance(params["session_id"], str):
        return None, rpc_error(INVALID_PARAMS, "Invalid params: session_id must be a string", rid)
    return value, None


def relabel_rpc(response: Any) -> tuple[Any, bool]:
    """openenv-core's JSON-RPC response with a refused tool call's error code fixed (module docstring).

    Returns:
        ``(response, closed)``: ``closed`` when the error reports a session the server has reclaimed.
    """
    if not isinstance(response, dict) or not isinstance(response.get("error"), dict):
        return response, False
    error = response["error"]
    message = str(error.get("message", ""))
    if SessionClosedError.PREFIX in message:
        error.update(code=SERVER_ERROR, data={"code": SESSION_CLOSED})
        return response, True
    if error.get("code") != INTERNAL_ERROR:
        return response, False
    kind, _, rest = message.partition(": ")
    if kind in _TOOL_ERROR_CODES:
        error.update(code=_TOOL_ERROR_CODES[kind], message=rest, data={"kind": kind})
    elif message.lower().startswith("unknown tool"):  # FastMCP's own answer for a name it does not serve
        error.update(code=INVALID_PARAMS, message=f"{message} (tools/list names this session's tools)",
                     data={"kind": "unknown_tool"})
    return response, False


def closed_session_reply(text: str) -> str | None:
    """The ``SESSION_CLOSED`` envelope for an outgoing frame reporting a reclaimed session, else None."""
    if not text.startswith(_ERROR_START) or SessionClosedError.PREFIX not in text:
        return None
    reply = json.loads(text)
    data = reply.get("data")
    if not isinstance(data, dict) or not str(data.get("message", "")).startswith(SessionClosedError.PREFIX):
        return None
    data["code"] = SESSION_CLOSED
    return json.dumps(reply)


def _depth(value: Any) -> int:
    """Nesting depth of a parsed JSON value (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def frame_problem(message: dict[str, Any]) -> str | None:
    """Why a ``websocket.receive`` ASGI message cannot go to the app, or None if it can."""
    text = message.get("text")
    if text is None:
        return "binary frames are not supported; send JSON text"
    value, why = load_json(text)
    if why is not None and why.startswith("Parse error: "):
        return f"invalid JSON: {why.removeprefix('Parse error: ')}"
    if why is not None and value is None:
        return f"frame of {why}"
    if not isinstance(value, dict):
        return f"a message must be a JSON object with a 'type', got {type(value).__name__}"
    return why


class Guard:
    """ASGI middleware; see the module docstring.

    Args:
        app: The openenv-core FastAPI app.
        session_timeout: The server's ``--session-timeout`` [s]: HTTP MCP session ids unused for longer are
            forgotten (openenv-core has reclaimed them by then); None keeps them until closed.
    """

    def __init__(self, app, session_timeout: float | None = None) -> None:
        self.app = app
        self._timeout = session_timeout
        self._http_sessions: dict[str, float] = {}  # HTTP MCP session id -> last use (time.monotonic)

    async def __call__(self, scope, receive, send) -> None:
        """Serve one ASGI connection, filtering its WebSocket frames and ``/mcp`` requests."""
        path = scope.get("path", "")
        if scope["type"] == "http" and path == "/mcp" and scope.get("method") == "POST":
            await self._http_mcp(scope, receive, send)
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        mcp_socket = path == "/mcp"
        ended = False  # the guard closed the connection after a SESSION_CLOSED reply

        async def guarded_send(message) -> None:
            nonlocal ended
            if ended:  # openenv-core's own close after ours goes nowhere
                return
            text = message.get("text") if message["type"] == "websocket.send" else None
            closed, reply = False, None
            if text is not None and mcp_socket:
                response, closed = relabel_rpc(json.loads(text))
                reply = json.dumps(response)
            elif text is not None and text.startswith(_MCP_START):
                envelope = json.loads(text)
                envelope["data"], closed = relabel_rpc(envelope.get("data"))
                reply = json.dumps(envelope)
            elif text is not None:
                reply = closed_session_reply(text)
                closed = reply is not None
            if reply is None:
                await send(message)
                return
            await send({"type": "websocket.send", "text": reply})
            if closed:
                ended = True
                await send({"type": "websocket.close", "code": 1000, "reason": "session closed by the server"})

        async def guarded_receive():
            while True:
                if ended:  # ends openenv-core's message loop as if the client had left
                    return {"type": "websocket.disconnect", "code": 1000}
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                reply = self._mcp_frame_reply(message) if mcp_socket else self._ws_frame_reply(message)
                if reply is None:
                    return message
                await send({"type": "websocket.send", "text": json.dumps(reply)})

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except _CLIENT_GONE:
            # openenv-core answers or closes a socket whose client vanished without a close
            # frame and trips over the dead connection; its session is cleaned up by then.
            pass

    # -- WebSocket frames -----------------------------------------------------------------------
    def _ws_frame_reply(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The guard's answer to a ``/ws`` frame openenv-core must not see, or None to pass it on."""
        problem = frame_problem(message)
        if problem is not None:
            return {"type": "error", "data": {"message": problem, "code": "INVALID_JSON"}}
        text = message["text"]
        if '"mcp"' not in text:  # cheap test first: only MCP messages are parsed again
            return None
        value = json.loads(text)
        if value.get("type") != "mcp":
            return None
        if not isinstance(value.get("data"), dict):
            return None  # openenv-core's validation error envelope names it
        _, error = check_jsonrpc(value["data"])
        if error is None:
            error = self._session_problem(value["data"], websocket=True)
        return None if error is None else {"type": "mcp", "data": error}

    def _mcp_frame_reply(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The JSON-RPC error for a ``WebSocket /mcp`` frame openenv-core must not see, or None."""
        text = message.get("text")
        if text is None:
            return rpc_error(PARSE_ERROR, "binary frames are not supported; send JSON text")
        request, error = parse_jsonrpc(text)
        return error if error is not None else self._session_problem(request, websocket=True)

    # -- HTTP /mcp --------------------------------------------------------------------------------
    def _session_problem(self, request: dict[str, Any], websocket: bool = False) -> dict[str, Any] | None:
        """The JSON-RPC error for a request naming a session it may not use, else None."""
        method, params, rid = request["method"], request.get("params", {}), request.get("id")
        session_id = params.get("session_id")
        if method == "openenv/session/close" and session_id is None:
            return None  # openenv-core names the missing session_id
        if session_id is None:
            if method == "tools/call" and not websocket:
                return rpc_error(INVALID_PARAMS, "Invalid params: tools/call over HTTP needs a session: call "
                                                 "openenv/session/create and pass its session_id (or use the "
                                                 "WebSocket /mcp)", rid)
            return None
        self._forget_stale()
        if session_id not in self._http_sessions:
            return rpc_error(INVALID_PARAMS, f"Invalid params: unknown session_id {session_id[:100]!r}: not an open "
                                             "HTTP MCP session of this server (openenv/session/create opens one; "
                                             "WebSocket sessions need no session_id)", rid)
        self._http_sessions[session_id] = time.monotonic()
        return None

    def _forget_stale(self) -> None:
        """Drop HTTP session ids unused for longer than the session timeout (openenv-core reclaimed them)."""
        if self._timeout is None:
            return
        limit = time.monotonic() - self._timeout
        for session_id in [s for s, used in self._http_sessions.items() if used < limit]:
            del self._http_sessions[session_id]

    def _track(self, request: dict[str, Any], response: Any) -> None:
        """Record the HTTP sessions openenv-core opened and closed."""
        method, params = request["method"], request.get("params", {})
        result = response.get("result") if isinstance(response, dict) else None
        if method == "openenv/session/create" and isinstance(result, dict) and isinstance(
                result.get("session_id"), str):
            self._forget_stale()
            self._http_sessions[result["session_id"]] = time.monotonic()
        elif method == "openenv/session/close" and isinstance(result, dict) and result.get("closed"):
            self._http_sessions.pop(params.get("session_id"), None)
        elif isinstance(response, dict) and isinstance(response.get("error"), dict) and str(
                response["error"].get("message", "")).startswith("Unknown session_id"):
            self._http_sessions.pop(params.get("session_id"), None)

    async def _http_mcp(self, scope, receive, send) -> None:
        """``POST /mcp``: check the JSON-RPC request, pass it on, fix the answer's error code."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left
            chunk = message.get("body", b"")
            size += len(chunk)
            more = message.get("more_body", False)
            if size > MAX_FRAME_BYTES:
                await _send_json(send, rpc_error(PARSE_ERROR, f"request body larger than {MAX_FRAME_BYTES} bytes"))
                return
            chunks.append(chunk)
        body = b"".join(chunks)
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            await _send_json(send, rpc_error(PARSE_ERROR, "Parse error: the body is not UTF-8"))
            return
        request, error = parse_jsonrpc(text)
        if error is None:
            error = self._session_problem(request)
        if error is not None:
            await _send_json(send, error)
            return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        start, parts = None, []

        async def capture(message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                parts.append(message.get("body", b""))
                if not message.get("more_body", False):
                    await self._answer(send, start, b"".join(parts), request)

        await self.app(scope, replay, capture)

    async def _answer(self, send, start, body: bytes, request: dict[str, Any]) -> None:
        """Send openenv-core's ``/mcp`` answer, its refused-tool-call code fixed and its sessions tracked."""
        try:
            response = json.loads(body)
        except ValueError:
            response = None
        if start is None:
            await _send_json(send, rpc_error(INTERNAL_ERROR, "Internal error: no answer", request.get("id")))
            return
        if start.get("status") != 200 or not isinstance(response, dict):
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        response, _ = relabel_rpc(response)
        self._track(request, response)
        await _send_json(send, response)


async def _send_json(send, value: Any) -> None:
    """Send ``value`` as an HTTP 200 JSON response."""
    body = json.dumps(value).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
