"""Gymnasium environments, their pluggable observation, action and reward types, and their registration.

* `trolley` -- `CarlaTrolleyEnv` (``CarlaTrolley-v0``): the OpenEnv CARLA trolley scenarios.
* `vector` -- `CarlaTrolleyVectorEnv`: N trolley envs in one `gymnasium.vector.VectorEnv` on one array core.
* `action` -- action types of the trolley env: what an action is and which tool call it stands for.
* `observation` -- observation types of the trolley env.
* `rewards` -- reward modes of the trolley env, as named terms.
* `spaces` -- the trolley state vector, the tool indices and VLM-RL's steer filter.
* `navigation` -- `CarlaNavigationEnv` (``CarlaNavigation-v0``): routes, maze and free roam in a town.
* `nav_observation` -- observation modes of the navigation env.
* `nav_scenarios` -- scenarios of the navigation env: names, ``scenario_config``, each episode's route.
"""

from gymnasium.envs.registration import register, registry

from carla_gym.envs.action import ACTION_TYPES, ActionType, ActType, ControlAction, ToolsAction
from carla_gym.envs.observation import OBSERVATION_TYPES, DictObservation, ObservationType, ObsType, StateObservation
from carla_gym.envs.rewards import REWARD_TERMS
from carla_gym.envs.trolley import CarlaTrolleyEnv

ENV_IDS = ("CarlaTrolley-v0", "CarlaNavigation-v0")
"""Every environment id this package registers."""

_ENTRY_POINTS = {"CarlaTrolley-v0": "carla_gym.envs.trolley:CarlaTrolleyEnv",
                 "CarlaNavigation-v0": "carla_gym.envs.navigation:CarlaNavigationEnv"}
_VECTOR_ENTRY_POINTS = {"CarlaTrolley-v0": "carla_gym.envs.vector:CarlaTrolleyVectorEnv"}
"""Native vector envs (``gym.make_vec(id, num_envs=N)``); the others vectorise with Gymnasium's sync/async envs."""


def register_envs() -> None:
    """Register every carla_gym id with Gymnasium (idempotent)."""
    for env_id in ENV_IDS:
        if env_id not in registry:
            register(id=env_id, entry_point=_ENTRY_POINTS[env_id], vector_entry_point=_VECTOR_ENTRY_POINTS.get(env_id))


__all__ = ["ACTION_TYPES", "ENV_IDS", "OBSERVATION_TYPES", "REWARD_TERMS", "ActType", "ActionType", "CarlaTrolleyEnv",
           "ControlAction", "DictObservation", "ObsType", "ObservationType", "StateObservation", "ToolsAction",
           "register_envs"]
