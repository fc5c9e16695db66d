"""`CarlaEnv`: an OpenEnv WebSocket client for CARLA servers, used like upstream's.

``from carla_gym.openenv import CarlaEnv, CarlaAction`` replaces upstream's
``from carla_env import CarlaEnv, CarlaAction``; nothing else changes: ``CarlaEnv(base_url=...)``,
``.sync()``, ``reset(scenario_name=...)``, ``step(CarlaAction(...))``, ``state()``.

Faults (openenv-core's base client, which upstream's client uses, reads a late reply as the answer to
the next request). Here one request is in flight at a time (a lock), every reply must have the
type its request expects, and a reply timeout, a cancelled call, a dropped connection or an
unexpected reply closes the socket and marks the server-side episode as lost: ``step`` and
``state`` then raise `ConnectionError` naming the URL until a ``reset`` succeeds on a new
connection and starts a new episode (a failed reset leaves the session lost).

Connecting: the URL is checked when the client is made (`carla_gym.openenv.urls.check_url`: a
``ValueError`` naming it and showing a valid one for another scheme, no host or a bad port), and
the first call connects. A refused connection (nothing listens at that host and port) raises
`ConnectionError` at once, without retries: a server that was just started is ready when it prints
its ``listening on`` line, and callers that start servers wait for it. A host that accepts but
does not answer the WebSocket handshake gets ``connect_timeout_s``, and the error names it. Every
connection error names the URL, why it failed, and both ways forward: start a server there
(``carla-gym serve``) or use the embedded simulator, which needs none.

A ``reset`` after the server ended the session while the client was idle (it closed the socket,
restarted, or reclaimed the idle session and answers ``SESSION_CLOSED``) reconnects once by
itself: a reset starts a new episode anyway. ``step`` and ``state`` raise `ConnectionError`
instead. When the server ends a connection with an error envelope (``CAPACITY_REACHED`` when
every session slot is taken, ``SESSION_CLOSED``), the `ConnectionError` carries its message and
code. A new connection is a new server session, so silently continuing on it would step a
different episode.

Values: every outgoing message goes through `carla_gym.sim.validate.json_safe`, so numpy
numbers, 0-d arrays and Decimals are sent as JSON numbers, and values JSON cannot carry (NaN,
sets, non-string keys) raise a `ValueError` naming the field before anything is sent (the
session is untouched). Values the server refuses raise `ServerRefusedError`, both a
`RuntimeError` (as openenv-core's client raises) and a `ValueError` (as the embedded simulator
raises for the same values).
"""

from __future__ import annotations

import asyncio
import errno
import json
import socket
from typing import Any
from urllib.parse import urlsplit

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.sync_client import SyncEnvClient
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from carla_gym.hints import serve_command
from carla_gym.openenv.models import SESSION_CLOSED, CarlaAction, CarlaObservation, CarlaState, SessionClosedError
from carla_gym.openenv.urls import check_timeout, check_url
from carla_gym.sim.validate import json_safe

_REPLY_TYPES = {"reset": "observation", "step": "observation", "state": "state"}
_REFUSALS = ("VALIDATION_ERROR", "EXECUTION_ERROR")
"""openenv-core's error codes for requests whose values were refused; the session lives on."""
SESSION_ENDINGS = (SESSION_CLOSED, "CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR")
"""Error codes after which the server closes the connection (openenv-core's, and the guard's)."""


class ServerRefusedError(RuntimeError, ValueError):
    """The server refused a request's values (``VALIDATION_ERROR``, ``EXECUTION_ERROR``); the session lives on.

    A `RuntimeError`, as openenv-core's client raises for error envelopes, and a `ValueError`,
    as the embedded simulator raises for the same values.
    """


class _SessionEnded(ConnectionError):
    """The server ended the session with an error envelope (see `SESSION_ENDINGS`)."""


class _Unreachable(ConnectionError):
    """No WebSocket connection could be opened (see `unreachable_message`)."""


async def connect_explained(connect, ws_url: str, connect_timeout_s: float, embedded: bool = True) -> None:
    """Await ``connect()`` (an openenv-core client's ``connect``); a failure says why and what to do.

    Raises:
        ConnectionError: With `unreachable_message` for ``ws_url`` (the original error as its cause).
    """
    try:
        await connect()
    except ConnectionError as exc:
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        raise _Unreachable(unreachable_message(ws_url, cause, connect_timeout_s, embedded)) from cause


def _refused(exc: BaseException) -> bool:
    """Whether ``exc`` is a refused TCP connection (asyncio joins one per address it tried)."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    text = str(exc)  # asyncio's "Multiple exceptions: [Errno 111] ..., [Errno 111] ..." (an OSError)
    return (isinstance(exc, OSError) and text.startswith("Multiple exceptions")
            and text.count("[Errno") == text.count(f"[Errno {errno.ECONNREFUSED}]"))


def unreachable_message(ws_url: str, cause: BaseException, connect_timeout_s: float, embedded: bool = True) -> str:
    """The message for a connection to ``ws_url`` that failed with ``cause``: why, and what to do.

    ``embedded``: whether the caller could use the embedded simulator instead (the envs and adapters can; a
    rollout collection from a server cannot), which the message then offers.
    """
    parts = urlsplit(ws_url)
    host = parts.hostname or "?"
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if _refused(cause):
        why = (f"connection refused: nothing listens on {address} (refused at once, not retried; a server just "
               "started accepts connections once it prints its 'listening on' line)")
    elif isinstance(cause, TimeoutError):
        why = (f"no WebSocket handshake within connect_timeout_s={connect_timeout_s:g} s (nothing answered at "
               f"{address}; a busy or distant server may need a larger connect_timeout_s)")
    elif isinstance(cause, socket.gaierror):
        why = f"the host name {host!r} is not known ({cause.strerror or cause})"
    elif isinstance(cause, InvalidStatus):
        why = (f"{address} answered the WebSocket handshake with HTTP {cause.response.status_code}: not an "
               "OpenEnv server, or the wrong path")
    elif isinstance(cause, InvalidHandshake):
        why = f"{address} did not complete a WebSocket handshake ({cause}): not an OpenEnv server, or the wrong path"
    else:
        why = f"{type(cause).__name__}: {cause}"
    local = host in ("127.0.0.1", "localhost", "::1")
    serve = serve_command("--port", str(port)) if local else \
        f"{serve_command('--host', '0.0.0.0', '--port', str(port))} on {host}"
    if not embedded:
        return f"could not connect to {ws_url}: {why}. Start a server there ({serve}) or pass its URL"
    return (f"could not connect to {ws_url}: {why}. Either start a server there ({serve}) or use the embedded "
            "simulator, which needs no server (backend='embedded', the default: no base_url, no --env-urls)")


class CarlaEnv(EnvClient[CarlaAction, CarlaObservation, CarlaState]):
    """OpenEnv CARLA client: async inside an event loop, blocking outside one.

    ``reset``, ``step``, ``state`` and ``close`` return coroutines when called from a running
    event loop (``async with CarlaEnv(...) as env: await env.step(...)``), as openenv-core's
    clients do, and block and return the result when called from plain synchronous code, as
    upstream's docstrings and TRL's CARLA examples call them (``client = CarlaEnv(base_url=url);
    client.reset(...)``; upstream's own client fails there). ``.sync()`` gives
    openenv-core's explicitly blocking wrapper.

    Read rewards and termination from the `StepResult` (``result.reward``, ``result.done``):
    openenv-core strips them from the nested observation.

    Args:
        base_url: Server URL, e.g. ``"http://127.0.0.1:8000"`` (``/ws`` is appended); scheme
            http, https, ws or wss.
        **kwargs: openenv-core ``EnvClient`` options: ``connect_timeout_s`` [s] (default 10,
            openenv-core's), ``message_timeout_s`` [s] (default 60, openenv-core's), both in
            `carla_gym.openenv.urls.TIMEOUT_RANGE_S`, and ``max_message_size_mb``.

    Raises:
        ValueError: From the constructor, for a malformed ``base_url`` or timeout (nothing
            connects), naming the value; from ``reset`` and ``step``, see below.
        ConnectionError: From any call, when the server cannot be reached (at once when the
            connection is refused) or the session was lost (see the module docstring); the
            message names the URL and the reason.
        ValueError: From ``reset`` and ``step``, for values JSON cannot carry (NaN, sets ...),
            naming the field; nothing is sent.
        ServerRefusedError: Values the server refused (also a RuntimeError and a ValueError).
        TimeoutError: No reply within ``message_timeout_s``, naming the URL, the request and the
            timeout; the session is lost (the next ``step`` or ``state`` raises ConnectionError).
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        check_url(base_url)
        for key in ("connect_timeout_s", "message_timeout_s"):
            if key in kwargs:
                kwargs[key] = check_timeout(kwargs[key], key)
        if base_url.rstrip("/").endswith("/ws"):
            base_url = base_url.rstrip("/")[:-3]  # the client appends /ws itself
        super().__init__(base_url, **kwargs)
        self._lock: asyncio.Lock | None = None
        self._lost: str | None = None
        self._runner: SyncEnvClient | None = None  # event loop thread for calls from synchronous code

    # -- async or blocking, depending on the caller ---------------------------------------------
    def reset(self, **kwargs: Any):
        """Start an episode (``scenario_name``, ``scenario_config``, ``seed``, ``episode_id``)."""
        return self._dispatch(EnvClient.reset(self, **kwargs))

    def step(self, action: CarlaAction, **kwargs: Any):
        """Send one action; returns a `StepResult`."""
        return self._dispatch(EnvClient.step(self, action, **kwargs))

    def state(self):
        """The server's `CarlaState` of this session."""
        return self._dispatch(EnvClient.state(self))

    def close(self):
        """Close the session (and, after blocking use, the client's event loop thread)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            runner, self._runner = self._runner, None
            return runner.close() if runner is not None else None  # nothing was opened synchronously
        return EnvClient.close(self)

    async def connect(self) -> CarlaEnv:
        """Open the WebSocket connection (openenv-core's), with an error that says why it failed.

        Raises:
            ConnectionError: Naming the URL, the reason (refused, no handshake within
                ``connect_timeout_s``, unknown host, not an OpenEnv server) and the ways forward.
        """
        if self._ws is None:
            await connect_explained(super().connect, self._ws_url, self._connect_timeout)
        return self

    def __enter__(self) -> CarlaEnv:
        """Blocking ``with CarlaEnv(...) as env:`` (openenv-core's clients refuse it)."""
        self._dispatch(self.connect())
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        self.close()

    def sync(self) -> SyncEnvClient:
        """openenv-core's blocking wrapper around this client."""
        return _Blocking(self)

    def _dispatch(self, coro):
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # plain synchronous code: run it on this client's own loop thread
            if self._runner is None:
                self._runner = _Blocking(self)
            return self._runner._run(coro)
        return coro

    def _step_payload(self, action: CarlaAction) -> dict[str, Any]:
        return action.model_dump()

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[CarlaObservation]:
        return StepResult(
            observation=CarlaObservation(**payload.get("observation", {})),
            reward=payload.get("reward"),
            done=payload.get("done", False),
        )

    def _parse_state(self, payload: dict[str, Any]) -> CarlaState:
        return CarlaState(**payload)

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        kind = message.get("type")
        data = message.get("data")
        if isinstance(data, dict):  # before the lock: a bad value never touches the session
            message = {**message, "data": {k: json_safe(v, str(k)) for k, v in data.items()}}
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if kind != "reset" and self._lost is not None and kind in _REPLY_TYPES:
                raise ConnectionError(f"the session with {self._ws_url} was lost ({self._lost}); call reset()")
            connected = self._ws is not None
            try:
                response = await self._exchange(message)
            except TimeoutError:  # an OSError, but not a closed connection: the session is lost
                raise
            except (ConnectionClosed, OSError) as exc:
                if not connected or kind != "reset":
                    if isinstance(exc, _SessionEnded):
                        raise ConnectionError(str(exc)) from exc
                    raise await self._failure(exc, connected) from exc
                # a reset on a session the server ended while we were idle (it closed the socket,
                # restarted, or reclaimed the session): a reset starts a new episode anyway, so
                # retry once on a new connection
                await self._lose(f"connection closed: {exc}")
                try:
                    response = await self._exchange(message)
                except TimeoutError:
                    raise
                except _SessionEnded as exc2:
                    raise ConnectionError(str(exc2)) from exc2
                except (ConnectionClosed, OSError) as exc2:
                    raise await self._failure(exc2, connected=False) from exc2
            if kind == "reset":
                self._lost = None  # only a reset that got its reply starts a trustworthy episode
            return response

    async def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request and its reply; timeouts, cancellation and wrong replies lose the session.

        Raises:
            ServerRefusedError: The server refused the request's values.
            _SessionEnded: The server ended the session (the socket is abandoned).
            RuntimeError: Any other error envelope.
        """
        kind = message.get("type")
        try:
            await self._send(message)
            try:
                response = await self._receive()
            except ValueError as exc:  # a reply that is not JSON
                await self._lose(f"unreadable reply: {exc}")
                raise ConnectionError(f"unreadable reply from {self._ws_url}: {exc}; call reset()") from exc
        except (TimeoutError, asyncio.CancelledError) as exc:
            await self._lose(f"no reply within {self._message_timeout} s" if isinstance(exc, TimeoutError)
                             else "a call was cancelled while waiting for its reply")
            if isinstance(exc, TimeoutError):
                raise TimeoutError(f"no reply from {self._ws_url} within message_timeout_s={self._message_timeout:g} "
                                   f"s to {kind!r}; the session is lost, call reset() (a slow server may need a "
                                   "larger message_timeout_s)") from exc
            raise
        if not isinstance(response, dict):
            await self._lose(f"a reply that is not a JSON object: {type(response).__name__}")
            raise ConnectionError(f"unexpected reply from {self._ws_url}: {response!r:.100}; call reset()")
        if response.get("type") == "error":
            raise await self._error(response.get("data"))
        expected = _REPLY_TYPES.get(kind)
        if expected is not None and response.get("type") != expected:
            await self._lose(f"expected a {expected!r} reply, got {response.get('type')!r}")
            raise ConnectionError(f"unexpected reply from {self._ws_url}: {response.get('type')!r}; call reset()")
        return response

    async def _error(self, data: Any) -> Exception:
        """The exception for an error envelope's ``data`` (see `_exchange`)."""
        data = data if isinstance(data, dict) else {}
        code, text = data.get("code", "UNKNOWN"), str(data.get("message", "Unknown error"))
        errors = data.get("errors")
        if isinstance(errors, list) and errors:  # pydantic's details name the fields
            text += ": " + "; ".join(f"{'.'.join(map(str, e.get('loc', ())))}: {e.get('msg')}" for e in errors
                                     if isinstance(e, dict))
        if code == "EXECUTION_ERROR" and text.startswith(SessionClosedError.PREFIX):
            code = SESSION_CLOSED  # a server without the guard's relabelling
        if code in SESSION_ENDINGS:
            await self._lose(f"the server ended the session: {text} (code: {code})")
            hint = "; call reset() to start a new session" if code == SESSION_CLOSED else ""
            return _SessionEnded(f"{self._ws_url} closed the session: {text} (code: {code}){hint}")
        error = ServerRefusedError if code in _REFUSALS else RuntimeError
        return error(f"Server error: {text} (code: {code})")

    async def _failure(self, exc: BaseException, connected: bool) -> ConnectionError:
        """The error for a failed exchange: could not connect, or the connection was closed."""
        if not connected and isinstance(exc, _Unreachable):  # raised by connect()
            await self._lose(f"could not connect: {exc}")
            return ConnectionError(str(exc))
        return await self._closed(exc)

    async def _closed(self, exc: BaseException) -> ConnectionError:
        """The error for a connection the server closed.

        It carries the server's last error envelope if one is buffered (e.g. ``CAPACITY_REACHED``
        when every session slot is taken).
        """
        envelope = None
        ws = self._ws
        if ws is not None:
            try:
                envelope = json.loads(await asyncio.wait_for(ws.recv(), timeout=0.5))
            except Exception:  # noqa: BLE001 - nothing buffered: report the closed connection
                envelope = None
        await self._lose(f"connection closed: {exc}")
        if isinstance(envelope, dict) and envelope.get("type") == "error":
            data = envelope.get("data") or {}
            return ConnectionError(f"{self._ws_url} closed the session: {data.get('message')} "
                                   f"(code: {data.get('code')})")
        return ConnectionError(f"lost the connection to {self._ws_url}: {exc}; call reset() to start a new session")

    async def _lose(self, why: str) -> None:
        """Abandon the socket: the server-side episode cannot be trusted any more."""
        self._lost = why
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await asyncio.wait_for(ws.close(), timeout=1.0)
            except Exception:  # noqa: BLE001 - the socket is being abandoned either way
                pass


class _Blocking(SyncEnvClient):
    """openenv-core's `SyncEnvClient` that calls the base coroutines (not `CarlaEnv`'s dispatchers)."""

    def reset(self, **kwargs: Any) -> StepResult[CarlaObservation]:
        return self._run(EnvClient.reset(self._async, **kwargs))

    def step(self, action: CarlaAction, **kwargs: Any) -> StepResult[CarlaObservation]:
        return self._run(EnvClient.step(self._async, action, **kwargs))

    def state(self) -> CarlaState:
        return self._run(EnvClient.state(self._async))

    def close(self) -> None:
        try:
            self._run(EnvClient.close(self._async))
        finally:
            self._stop_loop()
