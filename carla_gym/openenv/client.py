"""`CarlaEnv`: an OpenEnv WebSocket client for CARLA servers, used like upstream's.

``from carla_gym.openenv import CarlaEnv, CarlaAction`` replaces upstream's
``from carla_env import CarlaEnv, CarlaAction``; nothing else changes: ``CarlaEnv(base_url=...)``,
``.sync()``, ``reset(scenario_name=...)``, ``step(CarlaAction(...))``, ``state()``.

Faults (openenv-core's base client reads a late reply as the answer to the next request:
upstream bug B20). Here one request is in flight at a time (a lock), every reply must have the
type its request expects, and a reply timeout, a cancelled call, a dropped connection or an
unexpected reply closes the socket and marks the server-side episode as lost: ``step`` and
``state`` then raise `ConnectionError` naming the URL until ``reset`` reconnects and starts a
new episode. A new connection is a new server session, so silently continuing on it would
step a different episode.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from websockets.exceptions import ConnectionClosed

from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState

_REPLY_TYPES = {"reset": "observation", "step": "observation", "state": "state"}


class CarlaEnv(EnvClient[CarlaAction, CarlaObservation, CarlaState]):
    """Async client; ``.sync()`` gives the blocking one.

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
        super().__init__(base_url, **kwargs)
        self._lock: asyncio.Lock | None = None
        self._lost: str | None = None

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
            if kind == "reset":
                self._lost = None
            elif self._lost is not None and kind in _REPLY_TYPES:
                raise ConnectionError(f"the session with {self._ws_url} was lost ({self._lost}); call reset()")
            try:
                response = await super()._send_and_receive(message)
            except (TimeoutError, asyncio.CancelledError) as exc:
                await self._lose(f"no reply within {self._message_timeout} s" if isinstance(exc, TimeoutError)
                                 else "a call was cancelled while waiting for its reply")
                raise
            except (ConnectionClosed, OSError) as exc:
                await self._lose(f"connection closed: {exc}")
                raise ConnectionError(f"lost the connection to {self._ws_url}: {exc}; call reset() to start a "
                                      "new session") from exc
            expected = _REPLY_TYPES.get(kind)
            if expected is not None and response.get("type") != expected:
                await self._lose(f"expected a {expected!r} reply, got {response.get('type')!r}")
                raise ConnectionError(f"unexpected reply from {self._ws_url}: {response.get('type')!r}; "
                                      "call reset()")
            return response

    async def _lose(self, why: str) -> None:
        """Abandon the socket: the server-side episode cannot be trusted any more."""
        self._lost = why
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await asyncio.wait_for(ws.close(), timeout=1.0)
            except Exception:  # noqa: BLE001 - the socket is being abandoned either way
                pass
