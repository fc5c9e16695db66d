"""ASGI guard in front of openenv-core's app: bad input gets an error envelope, never a dead session.

openenv-core's ``/ws`` handler ends a session when a frame is binary, or is JSON that is not an
object (``[1, 2]``, ``5``), has a number of more than 4,300 digits or nests too deeply (from
about 250 levels pydantic cannot even report the error). The guard answers such frames itself
with upstream's ``INVALID_JSON`` error envelope and never passes them on, so the session and its
episode live on. CARLA is not an MCP environment, so ``/mcp`` (HTTP and WebSocket), which could
otherwise open sessions that hold server slots, is refused. The closing error openenv-core
raises when a client vanishes without a close frame is swallowed instead of logged as a server
error.

openenv-core reclaims a session idle past ``--session-timeout`` by closing its environment but
leaves its connection open, so every later message would get the same error and the client
could never start over. The guard relabels that error's envelope ``SESSION_CLOSED``
(`carla_gym.openenv.models.SESSION_CLOSED`), then closes the connection: clients see the session
end, and a reset opens a new one.
"""

from __future__ import annotations

import json
from typing import Any

from starlette import websockets as _ws

from carla_gym.openenv.models import SESSION_CLOSED, SessionClosedError

_CLIENT_GONE = (_ws.WebSocketDisconnect, *filter(None, [getattr(_ws, "WebSocketDisconnected", None)]))
"""Errors openenv-core's handler raises when it writes to a socket whose client is gone."""

MAX_FRAME_BYTES = 1 << 20
"""Largest accepted WebSocket text frame [bytes] (an action is well under 1 KiB)."""
MAX_DEPTH = 64
"""Deepest accepted JSON nesting (pydantic cannot serialise errors about values nested ~250 deep)."""
_ERROR_START = '{"type":"error"'
"""How openenv-core's error envelopes begin (pydantic ``model_dump_json`` of ``WSErrorResponse``)."""


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
    if len(text) > MAX_FRAME_BYTES:
        return f"frame of {len(text)} characters is larger than {MAX_FRAME_BYTES}"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"invalid JSON: {type(exc).__name__}: {str(exc)[:200]}"
    if not isinstance(value, dict):
        return f"a message must be a JSON object with a 'type', got {type(value).__name__}"
    if text.count("[") + text.count("{") > MAX_DEPTH and _depth(value) > MAX_DEPTH:  # cheap test first
        return f"JSON nested deeper than {MAX_DEPTH} levels"
    return None


class Guard:
    """ASGI middleware; see the module docstring.

    Args:
        app: The openenv-core FastAPI app.
    """

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        """Serve one ASGI connection, filtering its WebSocket frames."""
        path = scope.get("path", "")
        if scope["type"] in ("http", "websocket") and (path == "/mcp" or path.startswith("/mcp/")):
            await self._refuse_mcp(scope, send)
            return
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return

        ended = False  # the guard closed the connection after a SESSION_CLOSED reply

        async def guarded_send(message) -> None:
            nonlocal ended
            if ended:  # openenv-core's own close after ours goes nowhere
                return
            text = message.get("text") if message["type"] == "websocket.send" else None
            reply = closed_session_reply(text) if text is not None else None
            if reply is None:
                await send(message)
                return
            ended = True
            await send({"type": "websocket.send", "text": reply})
            await send({"type": "websocket.close", "code": 1000, "reason": "session closed by the server"})

        async def guarded_receive():
            while True:
                if ended:  # ends openenv-core's message loop as if the client had left
                    return {"type": "websocket.disconnect", "code": 1000}
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                problem = frame_problem(message)
                if problem is None:
                    return message
                reply = {"type": "error", "data": {"message": problem, "code": "INVALID_JSON"}}
                await send({"type": "websocket.send", "text": json.dumps(reply)})

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except _CLIENT_GONE:
            # openenv-core answers or closes a socket whose client vanished without a close
            # frame and trips over the dead connection; its session is cleaned up by then.
            pass

    @staticmethod
    async def _refuse_mcp(scope, send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "CARLA is not an MCP environment"})
            return
        body = json.dumps({"detail": "CARLA is not an MCP environment"}).encode()
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
