"""`NavRewardCamera`: VLM-RL's CLIP reward camera on `CarlaNavigation-v0`, for the CLIP shaping wrappers.

`CarlaTrolley-v0` renders its reward frame itself (``reward_frame_size``); the navigation env is
wrapped instead: after every step and reset this wrapper renders VLM-RL's top-down RGB reward
camera from the env's world (`carla_gym.sim.town.render.render_town` view ``"topdown"``: 517 x 517
px, 110 deg field of view, 6.4 m up, looking straight down, centred 5.2 m ahead of and 1.6 m left of
the ego, VLM-RL's ``birdview1`` camera; the route is not drawn, as in CARLA's camera) into
``info["reward_frame"]``, and copies ``info["speed"]`` [km/h] to ``info["speed_kmh"]``, the key the
shaper reads. The shaper (`carla_gym.reward.shaping`) then scores the right half of the frame with
VLM-RL's preprocessing and, with synthesis, multiplies the env's own ``centering_factor``,
``angle_factor`` and ``distance_std_factor`` (`carla_gym.reward.shaping.ENV_FACTORS`), as VLM-RL does.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from carla_gym.sim.render import TOPDOWN_SIZE
from carla_gym.sim.town.render import render_world


def reward_frame(world, size: int = TOPDOWN_SIZE) -> np.ndarray:
    """VLM-RL's reward camera of a `carla_gym.sim.navigation.world.NavWorld` (ego = vehicle row 0).

    Returns:
        uint8 RGB (size, size, 3): vehicles, walkers and traffic lights over the town's ground.
    """
    return render_world(world, ego_index=0, view="topdown", width=size, height=size)


class NavRewardCamera(gym.Wrapper):
    """Add VLM-RL's reward frame and ``speed_kmh`` to the infos of a `CarlaNavigation-v0` env (module docstring).

    Args:
        env: A `CarlaNavigation-v0` env (its ``unwrapped.world`` is rendered).
        reward_frame_size: Frame size [px], an integer in [16, 1024] (VLM-RL: 517).

    Attributes:
        reward_frame_size: The frame size, read by `carla_gym.reward.VecCLIPShapedReward` and
            `carla_gym.reward.CLIPShapedReward` to check that frames come.

    Raises:
        ValueError: ``env`` has no navigation world, or a bad ``reward_frame_size`` (named).

    Examples:
        >>> import gymnasium as gym
        >>> env = NavRewardCamera(gym.make("CarlaNavigation-v0", scenario_config={"traffic": 0}), 64)
        >>> _, info = env.reset(seed=0)
        >>> info["reward_frame"].shape, info["speed_kmh"]
        ((64, 64, 3), 0.0)
    """

    def __init__(self, env: gym.Env, reward_frame_size: int = TOPDOWN_SIZE) -> None:
        super().__init__(env)
        if not hasattr(env.unwrapped, "world") or not hasattr(env.unwrapped, "tracker"):
            raise ValueError(f"NavRewardCamera needs a CarlaNavigation-v0 env, got {env.unwrapped!r}; CarlaTrolley-v0 "
                             "renders its own reward frame (reward_frame_size=...)")
        if isinstance(reward_frame_size, bool) or not isinstance(reward_frame_size, int | np.integer) \
                or not 16 <= reward_frame_size <= 1024:
            raise ValueError(f"reward_frame_size={reward_frame_size!r}: must be an integer in [16, 1024] px "
                             f"(VLM-RL: {TOPDOWN_SIZE})")
        self.reward_frame_size = int(reward_frame_size)

    def _add(self, info: dict) -> dict:
        info["reward_frame"] = reward_frame(self.env.unwrapped.world, self.reward_frame_size)
        info["speed_kmh"] = float(info["speed"])
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Reset the env; its info gains ``reward_frame`` and ``speed_kmh``."""
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, self._add(info)

    def step(self, action) -> tuple[Any, float, bool, bool, dict]:
        """Step the env; its info gains ``reward_frame`` (after the action, as VLM-RL) and ``speed_kmh``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._add(info)
