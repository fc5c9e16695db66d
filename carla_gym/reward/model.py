"""`CLIPRewardModel`: frames in, VLM-RL rewards and the raw similarities out."""

from __future__ import annotations

import dataclasses

import numpy as np

from carla_gym.reward import heads as H
from carla_gym.reward.encoder import Encoder
from carla_gym.reward.prompts import Prompts, resolve_prompts

_ROLES = {
    "clg": ("pos", "neg"),
    "lord": ("neg",),
    "lord_speed": ("neg",),
    "vlm_rm": ("target", "baseline"),
    "vlm_sr": ("target",),
    "roboclip": ("target",),
}


@dataclasses.dataclass
class Scores:
    """Scores of a batch of N frames.

    Attributes:
        reward: The head's reward, float64 (N,).
        similarities: Cosine similarity to each prompt the head uses, keyed by role
            (``"pos"``, ``"neg"``, ``"target"``, ``"baseline"``), float64 (N,) each.
    """

    reward: np.ndarray
    similarities: dict[str, np.ndarray]


class CLIPRewardModel:
    """A CLIP reward model: an encoder, language goals embedded once, and a scoring head.

    Args:
        encoder: An `Encoder`, e.g. `carla_gym.reward.OpenClipEncoder`.
        head: One of `carla_gym.reward.heads.HEADS`; ``"clg"`` is VLM-RL's.
        prompts: A preset name of `carla_gym.reward.PROMPT_PRESETS` or a `Prompts`.
        clg_window: (low, high) window on sim_neg - sim_pos for ``"clg"`` (VLM-RL: (0, 0.03)).
        alpha: VLM-RM projection strength (VLM-RL config: 0.5).
        threshold: VLM-SR threshold (VLM-RL: 0.32).

    Raises:
        ValueError: Unknown head or prompt preset, a window with high <= low, or alpha outside [0, 1].
    """

    def __init__(self, encoder: Encoder, head: str = "clg", prompts: str | Prompts = "vlm_rl",
                 clg_window: tuple[float, float] = (H.CLG_LOW, H.CLG_HIGH), alpha: float = H.VLM_RM_ALPHA,
                 threshold: float = H.VLM_SR_THRESHOLD) -> None:
        if head not in H.HEADS:
            raise ValueError(f"head={head!r}: choose one of {list(H.HEADS)}")
        low, high = (float(v) for v in clg_window)
        if not high > low:
            raise ValueError(f"clg_window={clg_window!r}: high must be greater than low")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha={alpha!r}: must be in [0, 1]")
        self.encoder, self.head, self.prompts = encoder, head, resolve_prompts(prompts)
        self.clg_window, self.alpha, self.threshold = (low, high), float(alpha), float(threshold)
        self.roles = _ROLES[head]
        texts = [getattr(self.prompts, role) for role in self.roles]
        self.text_embeddings = np.asarray(encoder.encode_text(texts), dtype=np.float64)  # computed once

    def score(self, images, speed_kmh=None) -> Scores:
        """Score a batch of frames.

        Args:
            images: uint8 frames (N, H, W, 3) or (N, 3, H, W).
            speed_kmh: Ego speeds [km/h] at the frames, shape (N,); needed by ``"lord_speed"``
                only (the shaping wrappers always pass ``info["speed_kmh"]``).

        Returns:
            `Scores` with N rewards and similarities.

        Raises:
            TypeError, ValueError: Frames of the wrong dtype or shape.
            ValueError: ``"lord_speed"`` without N speeds.
        """
        if self.head == "lord_speed":
            n = len(images) if np.ndim(images) == 4 else 1
            if speed_kmh is None or np.shape(speed_kmh) != (n,):
                raise ValueError(f"head='lord_speed' needs speed_kmh with one speed [km/h] per frame ({n}), got "
                                 f"{speed_kmh!r}")
        x = np.asarray(self.encoder.encode_images(images), dtype=np.float64)
        sims = {role: x @ t for role, t in zip(self.roles, self.text_embeddings, strict=True)}
        if self.head == "clg":
            reward = H.clg(sims["pos"], sims["neg"], *self.clg_window)
        elif self.head == "lord":
            reward = H.lord(sims["neg"])
        elif self.head == "lord_speed":
            reward = H.lord_speed(sims["neg"], speed_kmh)
        elif self.head == "vlm_rm":
            reward = H.vlm_rm(x, self.text_embeddings[0], self.text_embeddings[1], self.alpha)
        elif self.head == "vlm_sr":
            reward = H.vlm_sr(sims["target"], self.threshold)
        else:
            reward = H.roboclip(sims["target"])
        return Scores(reward=reward, similarities=sims)
