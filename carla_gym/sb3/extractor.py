"""VLM-RL's feature extractor for Dict observations (``CustomMultiInputExtractor``), as an SB3 extractor.

Source: VLM-RL ``config.py`` ``CustomCNN`` / ``CustomMultiInputExtractor``
(https://github.com/zihaosheng/VLM-RL). Every image key of the Dict (SB3's ``is_image_space``; SB3 hands it
over channel-first and scaled to [0, 1]) goes through the convolution stack for its channel count, then
``Linear(n_flat, 256) + ReLU``; every other key is flattened; the features are concatenated in the Dict's key
order. For VLM-RL's observation (``seg_camera`` 6 x 192 x 192, ``vehicle_measures`` (3,), ``waypoints`` (15,
2)) that is 256 + 3 + 30 = 289 features.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from stable_baselines3.common.preprocessing import is_image_space
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

IMAGE_FEATURES = 256
"""Features per image key after the linear layer (VLM-RL ``features_dim=256``)."""

CONVS = {
    6: ((8, 5, 2), (16, 5, 2), (32, 5, 2), (64, 3, 2), (128, 3, 2), (256, 3, 1)),
    3: ((16, 5, 2), (32, 3, 2), (64, 3, 2), (128, 3, 2), (256, 3, 1)),
}
"""(out channels, kernel, stride) of each convolution by input channel count (VLM-RL ``CustomCNN``: the
6-channel stack for the 192 x 192 BEV, the 3-channel one for the 120 x 80 segmentation camera); other
channel counts use the 3-channel stack (this project's choice)."""


def cnn(channels: int) -> nn.Sequential:
    """VLM-RL's ``CustomCNN`` for ``channels`` input channels: each convolution (no padding) + ReLU, then Flatten.

    Examples:
        >>> net = cnn(6)
        >>> net(torch.zeros(1, 6, 192, 192)).shape  # 192 -> 94 -> 45 -> 21 -> 10 -> 4 -> 2
        torch.Size([1, 1024])
    """
    layers: list[nn.Module] = []
    for out, kernel, stride in CONVS.get(channels, CONVS[3]):
        layers += [nn.Conv2d(channels, out, kernel_size=kernel, stride=stride), nn.ReLU()]
        channels = out
    return nn.Sequential(*layers, nn.Flatten())


class VLMRLExtractor(BaseFeaturesExtractor):
    """VLM-RL's ``CustomMultiInputExtractor`` (module docstring): a CNN + Linear(256) per image key, the rest flat.

    Args:
        observation_space: A Dict space with at least one key.
        features_dim: Features per image key (VLM-RL: 256).

    Raises:
        ValueError: ``observation_space`` is not a non-empty Dict, or an image is too small for the
            convolutions (names the key and its shape).

    Examples:
        >>> from gymnasium import spaces
        >>> import numpy as np
        >>> space = spaces.Dict({"seg_camera": spaces.Box(0, 255, (6, 192, 192), np.uint8),
        ...                      "vehicle_measures": spaces.Box(-1, 1, (3,)), "waypoints": spaces.Box(-1, 1, (15, 2))})
        >>> VLMRLExtractor(space).features_dim
        289
    """

    def __init__(self, observation_space: gym.spaces.Dict, features_dim: int = IMAGE_FEATURES) -> None:
        if not isinstance(observation_space, gym.spaces.Dict) or not observation_space.spaces:
            raise ValueError(f"observation space {observation_space}: VLMRLExtractor needs a non-empty Dict space "
                             "(use observation_mode='vlm-rl' or 'dict' with MultiInputPolicy)")
        heads, total = {}, 0
        for key, space in observation_space.spaces.items():
            if is_image_space(space, check_channels=False, normalized_image=False):
                net = cnn(space.shape[0])
                with torch.no_grad():
                    try:
                        n_flat = net(torch.zeros(1, *space.shape)).shape[1]
                    except RuntimeError as exc:
                        raise ValueError(f"observation {key!r} of shape {space.shape}: too small for VLM-RL's "
                                         f"convolutions {CONVS.get(space.shape[0], CONVS[3])} ({exc})") from None
                heads[key] = nn.Sequential(net, nn.Linear(n_flat, features_dim), nn.ReLU())
                total += features_dim
            else:
                heads[key] = nn.Flatten()
                total += int(torch.tensor(space.shape).prod()) if space.shape else 1
        super().__init__(observation_space, features_dim=total)
        self.heads = nn.ModuleDict(heads)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """Features (B, features_dim) float32 of a batch of observations (SB3-preprocessed: images in [0, 1])."""
        return torch.cat([head(observations[key]) for key, head in self.heads.items()], dim=1)
