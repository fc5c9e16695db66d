"""CLIP reward shaping (VLM-RL, arXiv 2412.15544) for `CarlaTrolley-v0`.

Needs the ``clip`` extra (open-clip-torch, torch). Parts: `heads` (VLM-RL's formulas), `prompts`
(language goals), `OpenClipEncoder` (open_clip models, batched preprocessing), `CLIPRewardModel`
(frames to rewards and similarities), `CLIPRewardWrapper` / `clip_vec_env` (shaping for one env
or an SB3 VecEnv), and ``python -m carla_gym.reward.calibrate`` (does a model and prompt pair
separate collision frames from clear ones on this renderer?).
"""

from carla_gym.reward.encoder import DEFAULT_MODEL, FAITHFUL_MODEL, OpenClipEncoder
from carla_gym.reward.model import CLIPRewardModel, Scores
from carla_gym.reward.prompts import PROMPT_PRESETS, Prompts
from carla_gym.reward.shaping import MODES, RewardShaper
from carla_gym.reward.wrappers import CLIPRewardWrapper, clip_vec_env

__all__ = ["CLIPRewardModel", "CLIPRewardWrapper", "DEFAULT_MODEL", "FAITHFUL_MODEL", "MODES", "OpenClipEncoder",
           "PROMPT_PRESETS", "Prompts", "RewardShaper", "Scores", "clip_vec_env"]
