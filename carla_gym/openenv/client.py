"""`CarlaEnv`: an OpenEnv WebSocket client for CARLA servers, used like upstream's.

``from carla_gym.openenv import CarlaEnv, CarlaAction`` replaces upstream's
``from carla_env import CarlaEnv, CarlaAction``; nothing else changes: ``CarlaEnv(base_url=...)``,
``.sync()``, ``reset(scenario_name=...)``, ``step(CarlaAction(...))``, ``state()``.

Unlike openenv-core's default (upstream bug B20), a reply that does not arrive within
``message_timeout_s`` closes the socket, so a late reply can never be read as the answer to the
next request; the next call reconnects.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState


class CarlaEnv(EnvClient[CarlaAction, CarlaObservation, CarlaState]):
    """Async client; ``.sync()`` gives the blocking one.

    Args:
        base_url: Server URL, e.g. ``"http://127.0.0.1:8000"`` (``/ws`` is appended).
        **kwargs: openenv-core ``EnvClient`` options: ``connect_timeout_s`` (default 10),
            ``message_timeout_s`` (default 60), ``max_message_size_mb``.
    """

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
        try:
            return await super()._send_and_receive(message)
        except TimeoutError:
            await self._drop_connection()
            raise

    async def _drop_connection(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await asyncio.wait_for(ws.close(), timeout=1.0)
            except Exception:  # noqa: BLE001 - the socket is being abandoned either way
                pass
