"""carla_gym: OpenEnv CARLA trolley scenarios as Gymnasium environments.

``import carla_gym`` registers ``CarlaTrolley-v0``; ``gym.make("carla_gym:CarlaTrolley-v0")``
imports and registers it in a fresh process.
"""

from carla_gym.envs import ENV_IDS, CarlaTrolleyEnv, register_envs
from carla_gym.sim import ScenarioSpec, ToolCall, World, resolve_scenario, scenario_names

__version__ = "0.1.0"

register_envs()

__all__ = [
    "ENV_IDS",
    "CarlaTrolleyEnv",
    "ScenarioSpec",
    "ToolCall",
    "World",
    "__version__",
    "register_envs",
    "resolve_scenario",
    "scenario_names",
]
