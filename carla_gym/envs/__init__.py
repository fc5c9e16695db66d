"""Gymnasium environments and their registration."""

from gymnasium.envs.registration import register, registry

from carla_gym.envs.trolley import CarlaTrolleyEnv

ENV_IDS = ("CarlaTrolley-v0",)
"""Every environment id this package registers."""


def register_envs() -> None:
    """Register every carla_gym id with Gymnasium (idempotent)."""
    if "CarlaTrolley-v0" not in registry:
        register(id="CarlaTrolley-v0", entry_point="carla_gym.envs.trolley:CarlaTrolleyEnv")


__all__ = ["ENV_IDS", "CarlaTrolleyEnv", "register_envs"]
