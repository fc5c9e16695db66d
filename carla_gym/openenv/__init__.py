"""OpenEnv CARLA wire compatibility: the models and a client (the server is `carla_gym.server`).

``from carla_gym.openenv import CarlaAction, CarlaEnv`` replaces upstream's
``from carla_env import CarlaAction, CarlaEnv``. The names need the ``[server]`` extra
(openenv-core, which brings pydantic, fastapi and websockets); they are imported on first use,
so ``carla-gym serve`` can check its options before the slow openenv-core import.

* `models` -- the wire models, field for field as upstream's ``envs/carla_env/models.py``.
* `client` -- `CarlaEnv`, the WebSocket client, used like upstream's.
* `urls` -- server URLs and client timeouts, checked before anything connects.
"""

from __future__ import annotations

import importlib

_EXPORTS = {"CarlaEnv": "carla_gym.openenv.client", "CarlaAction": "carla_gym.openenv.models",
            "CarlaObservation": "carla_gym.openenv.models", "CarlaState": "carla_gym.openenv.models",
            "ServerRefusedError": "carla_gym.openenv.client"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        from carla_gym.hints import needs_extra

        with needs_extra("server"):  # a missing openenv-core names the install command
            return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'carla_gym.openenv' has no attribute {name!r}")
