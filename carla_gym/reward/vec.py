"""`VecCLIPShapedReward`: the SB3 `VecEnvWrapper` that shapes N envs' rewards with CLIP (rules in `shaping`).

Needs stable-baselines3 (the ``sb3`` extra); `carla_gym.reward` imports this module only when
the name is used, so the ``clip`` extra alone still gives the Gymnasium wrapper.
"""

from __future__ import annotations

import numpy as np

from carla_gym.hints import needs_extra
from carla_gym.reward.model import CLIPRewardModel
from carla_gym.reward.shaping import RewardShaper, require_reward_frames

with needs_extra("sb3"):
    from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper
    from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn


class VecCLIPShapedReward(VecEnvWrapper):
    """Shape the rewards of an SB3 VecEnv of `CarlaTrolley-v0` envs, all N frames of a step in one model call.

    Named as SB3 names VecEnv wrappers (``Vec`` + what it does, like ``VecNormalize``); the
    Gymnasium wrapper for one env is `carla_gym.reward.CLIPShapedReward`, and the rules and info
    keys are in `carla_gym.reward.shaping`. Rewards are float32 (N,), the sums of each
    ``info["reward_terms"]`` rounded to float32.

    Args:
        venv: An SB3 VecEnv of `CarlaTrolley-v0` envs created with ``reward_frame_size``.
        model: The reward model.
        mode: ``"replace"`` (VLM-RL) or ``"add"``.
        weight: Factor on the CLIP reward in ``"add"`` mode.
        synthesis: VLM-RL's hierarchical synthesis (``"clg"`` head only).

    Raises:
        TypeError: ``venv`` is not an SB3 VecEnv (e.g. a single Gymnasium env).
        ValueError: An env renders no reward frame, or invalid shaping options.
    """

    def __init__(self, venv: VecEnv, model: CLIPRewardModel, mode: str = "replace", weight: float = 1.0,
                 synthesis: bool = False) -> None:
        if not isinstance(venv, VecEnv):
            raise TypeError(f"VecCLIPShapedReward needs a stable-baselines3 VecEnv (e.g. make_vec_env(...)), got "
                            f"{type(venv).__name__}; wrap a single env with CLIPShapedReward instead")
        super().__init__(venv)
        for size in venv.get_attr("reward_frame_size"):
            require_reward_frames(size)
        self.shaper = RewardShaper(model, venv.num_envs, mode, weight, synthesis)

    def reset(self) -> VecEnvObs:
        """Reset every env and its shaping state; reset frames are dropped from ``reset_infos``."""
        obs = self.venv.reset()
        self._drop_reset_frames()
        for i in range(self.num_envs):
            self.shaper.reset(i)
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        """The step of every env with the shaped rewards, float32 (N,)."""
        obs, rewards, dones, infos = self.venv.step_wait()
        shaped = self.shaper.shape(list(infos), rewards, dones)
        self._drop_reset_frames()
        return obs, shaped.astype(np.float32), dones, infos

    def _drop_reset_frames(self) -> None:
        for info in getattr(self.venv.unwrapped, "reset_infos", []) or []:
            info.pop("reward_frame", None)
