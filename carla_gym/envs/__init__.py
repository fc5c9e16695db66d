"""Gymnasium environments, their pluggable observation, action and reward types, and their registration."""

from gymnasium.envs.registration import register, registry

from carla_gym.envs.action import ACTION_TYPES, ActionType, ActType, ControlAction, ToolsAction
from carla_gym.envs.observation import OBSERVATION_TYPES, DictObservation, ObservationType, ObsType, StateObservation
from carla_gym.envs.rewards import REWARD_TERMS
from carla_gym.envs.trolley import CarlaTrolleyEnv

ENV_IDS = ("CarlaTrolley-v0",)
"""Every environment id this package registers."""


def register_envs() -> None:
    """Register every carla_gym id with Gymnasium (idempotent)."""
    if "CarlaTrolley-v0" not in registry:
        register(id="CarlaTrolley-v0", entry_point="carla_gym.envs.trolley:CarlaTrolleyEnv")
    if "CarlaNavigation-v0" not in registry:  # not in ENV_IDS yet: tests/test_env.py runs trolley scenarios on those
        register(id="CarlaNavigation-v0", entry_point="carla_gym.envs.navigation:CarlaNavigationEnv")


__all__ = ["ACTION_TYPES", "ENV_IDS", "OBSERVATION_TYPES", "REWARD_TERMS", "ActType", "ActionType", "CarlaTrolleyEnv",
           "ControlAction", "DictObservation", "ObsType", "ObservationType", "StateObservation", "ToolsAction",
           "register_envs"]
