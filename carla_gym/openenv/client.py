"""`CarlaEnv`: an OpenEnv WebSocket client for CARLA servers, used like upstream's.

``from carla_gym.openenv import CarlaEnv, CarlaAction`` replaces upstream's
``from carla_env import CarlaEnv, CarlaAction``; nothing else changes: ``CarlaEnv(base_url=...)``,
``.sync()``, ``reset(scenario_name=...)``, ``step(CarlaAction(...))``, ``state()``.

Faults (openenv-core's base client reads a late reply as the answer to the next request:
upstream bug B20). Here one request is in flight at a time (a lock), every reply must have the
type its request expects, and a reply timeout, a cancelled call, a dropped connection or an
unexpected reply closes the socket and marks the server-side episode as lost: ``step`` and
``state`` then raise `ConnectionError` naming the URL until a ``reset`` succeeds on a new
connection and starts a new episode (a failed reset leaves the session lost). A ``reset`` on a
socket the server closed while the client was idle reconnects once by itself. When the server
closes a new connection with an error envelope (``CAPACITY_REACHED`` when every session slot is
taken), the `ConnectionError` carries its message and code. A new connection is a new server
session, so silently continuing on it would step a different episode.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.sync_client import SyncEnvClient
from websockets.exceptions import ConnectionClosed

from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState

_REPLY_TYPES = {"reset": "observation", "step": "observation", "state": "state"}


class CarlaEnv(EnvClient[CarlaAction, CarlaObservation, CarlaState]):
    """OpenEnv CARLA client: async inside an event loop, blocking outside one.

    ``reset``, ``step``, ``state`` and ``close`` return coroutines when called from a running
    event loop (``async with CarlaEnv(...) as env: await env.step(...)``), as openenv-core's
    clients do, and block and return the result when called from plain synchronous code, as
    upstream's docstrings and TRL's CARLA examples call them (``client = CarlaEnv(base_url=url);
    client.reset(...)``; upstream's own client fails there, bug B28). ``.sync()`` gives
    openenv-core's explicitly blocking wrapper.

    Read rewards and termination from the `StepResult` (``result.reward``, ``result.done``):
    openenv-core strips them from the nested observation (upstream bug B10).

    Args:
        base_url: Server URL, e.g. ``"http://127.0.0.1:8000"`` (``/ws`` is appended).
        **kwargs: openenv-core ``EnvClient`` options: ``connect_timeout_s`` (default 10),
            ``message_timeout_s`` (default 60), ``max_message_size_mb``.

    Raises:
        ConnectionError: From any call, when the server cannot be reached or the session was
            lost (see the module docstring); the message names the URL.
    """

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        if isinstance(base_url, str) and base_url.rstrip("/").endswith("/ws"):
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
                    raise await self._failure(exc, connected) from exc
                # a reset on a socket the server closed while we were idle (e.g. it restarted):
                # a reset starts a new episode anyway, so retry once on a new connection
                await self._lose(f"connection closed: {exc}")
                try:
                    response = await self._exchange(message)
                except TimeoutError:
                    raise
                except (ConnectionClosed, OSError) as exc2:
                    raise await self._failure(exc2, connected=False) from exc2
            if kind == "reset":
                self._lost = None  # only a reset that got its reply starts a trustworthy episode
            return response

    async def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """One request and its reply; timeouts, cancellation and wrong replies lose the session."""
        kind = message.get("type")
        try:
            response = await super()._send_and_receive(message)
        except (TimeoutError, asyncio.CancelledError) as exc:
            await self._lose(f"no reply within {self._message_timeout} s" if isinstance(exc, TimeoutError)
                             else "a call was cancelled while waiting for its reply")
            raise
        except ValueError as exc:  # a reply that is not JSON
            await self._lose(f"unreadable reply: {exc}")
            raise ConnectionError(f"unreadable reply from {self._ws_url}: {exc}; call reset()") from exc
        expected = _REPLY_TYPES.get(kind)
        if expected is not None and response.get("type") != expected:
            await self._lose(f"expected a {expected!r} reply, got {response.get('type')!r}")
            raise ConnectionError(f"unexpected reply from {self._ws_url}: {response.get('type')!r}; call reset()")
        return response

    async def _failure(self, exc: BaseException, connected: bool) -> ConnectionError:
        """The error for a failed exchange: could not connect, or the connection was closed."""
        if not connected and isinstance(exc, ConnectionError):  # raised by connect()
            await self._lose(f"could not connect: {exc}")
            return ConnectionError(f"could not connect to {self._ws_url}: {exc}. Is the server running there "
                                   "(carla-gym serve --port N) and is the port right?")
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
