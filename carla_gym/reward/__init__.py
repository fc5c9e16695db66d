"""CLIP reward shaping (VLM-RL, arXiv 2412.15544) for `CarlaTrolley-v0` and `CarlaNavigation-v0`.

Needs the ``clip`` extra (open-clip-torch, torch).

* `heads` -- VLM-RL's CLIP scoring heads and reward synthesis, as numpy formulas.
* `prompts` -- language goals: VLM-RL's prompts and a preset for trolley scenes.
* `encoder` -- `OpenClipEncoder`: open_clip models with batched preprocessing.
* `model` -- `CLIPRewardModel`: frames to rewards and similarities.
* `shaping` -- the one rule set of CLIP reward shaping.
* `wrappers` -- `CLIPShapedReward`, the wrapper of one Gymnasium env.
* `vec` -- `VecCLIPShapedReward`, the wrapper of an SB3 VecEnv (also needs the ``sb3`` extra, imported on
  first use).
* `nav` -- `NavRewardCamera`: VLM-RL's reward camera on `CarlaNavigation-v0`.
* `calibrate` -- ``python -m carla_gym.reward.calibrate``: does a model and prompt pair separate collision
  frames from clear ones on this renderer?
"""

from carla_gym.reward.encoder import DEFAULT_MODEL, FAITHFUL_MODEL, OpenClipEncoder
from carla_gym.reward.model import CLIPRewardModel, Scores
from carla_gym.reward.prompts import PROMPT_PRESETS, Prompts
from carla_gym.reward.shaping import MODES, RewardShaper
from carla_gym.reward.wrappers import CLIPShapedReward

__all__ = ["CLIPRewardModel", "CLIPShapedReward", "DEFAULT_MODEL", "FAITHFUL_MODEL", "MODES", "OpenClipEncoder",
           "PROMPT_PRESETS", "Prompts", "RewardShaper", "Scores", "VecCLIPShapedReward"]


def __getattr__(name: str):
    """`VecCLIPShapedReward` on first use (it imports stable-baselines3); the renamed names say their new ones.

    Raises:
        carla_gym.hints.MissingExtraError: stable-baselines3 is not installed (names the install command).
        ImportError: ``CLIPRewardWrapper`` or ``clip_vec_env`` (renamed, `carla_gym.reward.wrappers.RENAMED`):
            the message names the new name.
        AttributeError: Any other unknown name.
    """
    if name == "VecCLIPShapedReward":
        from carla_gym.reward.vec import VecCLIPShapedReward

        return VecCLIPShapedReward
    from carla_gym.hints import missing_name
    from carla_gym.reward.wrappers import RENAMED

    raise missing_name(__name__, name, RENAMED)
