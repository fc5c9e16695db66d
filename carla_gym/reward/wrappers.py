"""`CLIPShapedReward`: the Gymnasium wrapper that shapes one env's reward with CLIP (rules in `shaping`).

Its SB3 counterpart, `carla_gym.reward.vec.VecCLIPShapedReward`, scores all N frames of a
VecEnv step in one call.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from carla_gym.envs.action import ActType
from carla_gym.envs.observation import ObsType
from carla_gym.reward.model import CLIPRewardModel
from carla_gym.reward.shaping import RewardShaper, require_reward_frames

RENAMED = {
    "CLIPRewardWrapper": "use CLIPShapedReward (from carla_gym.reward import CLIPShapedReward; same arguments)",
    "clip_vec_env": "use the class VecCLIPShapedReward (from carla_gym.reward import VecCLIPShapedReward; same "
                    "arguments: VecCLIPShapedReward(venv, model, mode, weight, synthesis))",
}
"""Removed names -> what to use instead (importing one raises an ImportError naming the replacement)."""


class CLIPShapedReward(gym.Wrapper[ObsType, ActType, ObsType, ActType]):
    """Shape one `CarlaTrolley-v0` env's reward with a CLIP reward model (one frame per step).

    Named as Gymnasium names wrappers (what it does, the target last; not ``ClipReward``, which
    clips rewards to a range); see `carla_gym.reward.shaping` for the rules and the info keys.

    Args:
        env: An env created with ``reward_frame_size``.
        model: The reward model.
        mode: ``"replace"`` (VLM-RL) or ``"add"``.
        weight: Factor on the CLIP reward in ``"add"`` mode.
        synthesis: VLM-RL's hierarchical synthesis (``"clg"`` head only).

    Raises:
        ValueError: The env renders no reward frame, or invalid shaping options.

    Examples:
        >>> import gymnasium as gym
        >>> from carla_gym.reward import CLIPRewardModel, CLIPShapedReward
        >>> class Flat:  # a stand-in encoder: every frame and prompt embeds to the same unit vector
        ...     def encode_text(self, prompts): return [[1.0, 0.0]] * len(prompts)
        ...     def encode_images(self, images): return [[1.0, 0.0]] * len(images)
        >>> env = CLIPShapedReward(gym.make("CarlaTrolley-v0", observation_mode="state", reward_mode="physical",
        ...                                 reward_frame_size=32), CLIPRewardModel(Flat()), mode="add", weight=0.5)
        >>> _ = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(0)
        >>> reward, info["reward_terms"]  # sim_neg - sim_pos = 0: CLG reward 1
        (0.5, {'pedestrians_hit': 0.0, 'road_departure': 0.0, 'clip': 0.5})
    """

    def __init__(self, env: gym.Env, model: CLIPRewardModel, mode: str = "replace", weight: float = 1.0,
                 synthesis: bool = False) -> None:
        super().__init__(env)
        require_reward_frames(getattr(env.unwrapped, "reward_frame_size", None))
        self.shaper = RewardShaper(model, 1, mode, weight, synthesis)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[ObsType, dict]:
        """Reset the env and the shaping state; the reset frame is dropped from ``info``.

        Returns:
            The env's ``(observation, info)``, without ``info["reward_frame"]``.
        """
        obs, info = self.env.reset(seed=seed, options=options)
        info.pop("reward_frame", None)
        self.shaper.reset(0)
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, float, bool, bool, dict[str, Any]]:
        """Step the env and return the shaped reward.

        Returns:
            The env's step with the shaped reward (the sum of the new ``info["reward_terms"]``);
            the env's own reward is ``info["env_reward"]``.
        """
        obs, reward, terminated, truncated, info = self.env.step(action)
        shaped = self.shaper.shape([info], [reward], [terminated or truncated])
        return obs, float(shaped[0]), terminated, truncated, info


def __getattr__(name: str):
    """Names renamed in `RENAMED` raise an error saying the new name (`carla_gym.hints.missing_name`).

    Raises:
        ImportError: A renamed name (`RENAMED`); the message names the new one.
        AttributeError: Any other unknown name.
    """
    from carla_gym.hints import missing_name

    raise missing_name(__name__, name, RENAMED)
