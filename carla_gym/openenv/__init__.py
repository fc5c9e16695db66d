"""OpenEnv CARLA wire compatibility: models, a server on the embedded simulator, a client.

``from carla_gym.openenv import CarlaAction, CarlaEnv`` replaces upstream's
``from carla_env import CarlaAction, CarlaEnv``. Importing this package needs the ``[server]``
extra (openenv-core, which brings pydantic, fastapi and websockets).
"""

from carla_gym.openenv.client import CarlaEnv
from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState

__all__ = ["CarlaAction", "CarlaEnv", "CarlaObservation", "CarlaState"]
