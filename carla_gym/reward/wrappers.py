"""CLIP reward shaping wrappers: a Gymnasium wrapper and an SB3 `VecEnvWrapper` (see `shaping`)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from carla_gym.reward.model import CLIPRewardModel
from carla_gym.reward.shaping import RewardShaper, require_reward_frames


class CLIPRewardWrapper(gym.Wrapper):
    """Shape one `CarlaTrolley-v0` env's reward with a CLIP reward model (one frame per step).

    Args:
        env: An env created with ``reward_frame_size``.
        model: The reward model.
        mode: ``"replace"`` (VLM-RL) or ``"add"``.
        weight: Factor on the CLIP reward in ``"add"`` mode.
        synthesis: VLM-RL's hierarchical synthesis (``"clg"`` head only).

    Raises:
        ValueError: The env renders no reward frame, or invalid shaping options.
    """

    def __init__(self, env: gym.Env, model: CLIPRewardModel, mode: str = "replace", weight: float = 1.0,
                 synthesis: bool = False) -> None:
        super().__init__(env)
        require_reward_frames(getattr(env.unwrapped, "reward_frame_size", None))
        self.shaper = RewardShaper(model, 1, mode, weight, synthesis)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset the env and the shaping state; the reset frame is dropped from ``info``."""
        obs, info = self.env.reset(seed=seed, options=options)
        info.pop("reward_frame", None)
        self.shaper.reset(0)
        return obs, info

    def step(self, action):
        """Step the env and return the shaped reward (the env's own is ``info["env_reward"]``)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        shaped = self.shaper.shape([info], [reward], [terminated or truncated])
        return obs, float(shaped[0]), terminated, truncated, info


def clip_vec_env(venv, model: CLIPRewardModel, mode: str = "replace", weight: float = 1.0, synthesis: bool = False):
    """Wrap an SB3 VecEnv so that all N frames of a step are scored in one call.

    Args:
        venv: An SB3 VecEnv of `CarlaTrolley-v0` envs created with ``reward_frame_size``.
        model: The reward model.
        mode: ``"replace"`` (VLM-RL) or ``"add"``.
        weight: Factor on the CLIP reward in ``"add"`` mode.
        synthesis: VLM-RL's hierarchical synthesis (``"clg"`` head only).

    Returns:
        A `stable_baselines3.common.vec_env.VecEnvWrapper`.

    Raises:
        ValueError: An env renders no reward frame, or invalid shaping options.
    """
    from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

    if not isinstance(venv, VecEnv):
        raise TypeError(f"clip_vec_env needs a stable-baselines3 VecEnv (e.g. make_vec_env(...)), got "
                        f"{type(venv).__name__}; wrap a single env with CLIPRewardWrapper instead")

    class CLIPRewardVecEnv(VecEnvWrapper):
        """See `clip_vec_env`."""

        def __init__(self) -> None:
            super().__init__(venv)
            for size in venv.get_attr("reward_frame_size"):
                require_reward_frames(size)
            self.shaper = RewardShaper(model, venv.num_envs, mode, weight, synthesis)

        def reset(self):
            obs = self.venv.reset()
            self._drop_reset_frames()
            for i in range(self.num_envs):
                self.shaper.reset(i)
            return obs

        def step_wait(self):
            obs, rewards, dones, infos = self.venv.step_wait()
            shaped = self.shaper.shape(list(infos), rewards, dones)
            self._drop_reset_frames()
            return obs, shaped.astype(np.float32), dones, infos

        def _drop_reset_frames(self) -> None:
            for info in getattr(self.venv.unwrapped, "reset_infos", []) or []:
                info.pop("reward_frame", None)

    return CLIPRewardVecEnv()
