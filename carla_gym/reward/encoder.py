"""CLIP image and text encoders for the reward model: open_clip models, with batched preprocessing.

An encoder turns prompts and uint8 frames into unit embeddings; the scoring heads
(`carla_gym.reward.heads`) only see cosine similarities. `OpenClipEncoder` wraps any open_clip
model: a pretrained tag (VLM-RL's faithful preset is ``ViT-bigG-14`` / ``laion2b_s39b_b160k``,
about 10 GB; the default ``ViT-B-32`` runs on a CPU), a local checkpoint file, or random weights
(``pretrained=None``, for tests: the real architecture and tokenizer, no signal).
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from carla_gym.sim.render import TOPDOWN_SIZE

if TYPE_CHECKING:
    import torch

PREPROCESS_MODES = ("openclip", "vlm_rl")
"""``"openclip"``: the model's own eval transform (resize the shortest side with antialiasing,
centre crop, normalise); ``"vlm_rl"``: VLM-RL's path exactly (``clip/transform.py`` with
torchvision 0.14 on tensors): keep the right half of the frame (columns W // 2 .. W - 1: 259 of
VLM-RL's 517), divide by 255, squash-resize to the model's input size with bicubic interpolation
(a = -0.75, no antialiasing, no clamping), normalise with OpenAI CLIP's mean and std."""
FRAME_SIZES = {"openclip": 224, "vlm_rl": TOPDOWN_SIZE}
"""Reward-camera size [px] each preprocessing expects: ``"vlm_rl"`` VLM-RL's 517x517 camera
(`carla_gym.sim.render.TOPDOWN_SIZE`), ``"openclip"`` CLIP's 224 input (no resampling). Other
sizes work with either mode (e.g. 224 with ``"vlm_rl"`` is cheaper to render, but stretches the
right half 2x across instead of squashing it as VLM-RL does)."""
PRECISIONS = ("auto", "fp32", "fp16", "bf16")
"""Inference precision: ``"auto"`` is fp16 autocast on CUDA and fp32 elsewhere (VLM-RL's choice)."""
FAITHFUL_MODEL = ("ViT-bigG-14", "laion2b_s39b_b160k")
"""VLM-RL's CLIP model and pretrained tag (VLM-RL config ``pretrained_model``)."""
DEFAULT_MODEL = "ViT-B-32"
"""A model a CPU can run (VLM-RL's maintainers suggest ViT-B-32 when bigG does not fit)."""


class Encoder(Protocol):
    """What the reward model needs from an image-text encoder."""

    def encode_text(self, prompts: list[str]) -> np.ndarray:
        """Unit text embeddings, float32 (len(prompts), D)."""

    def encode_images(self, images: np.ndarray) -> np.ndarray:
        """Unit image embeddings of uint8 frames (N, H, W, 3) or (N, 3, H, W), float32 (N, D)."""


def as_nchw(images) -> np.ndarray:
    """Check a frame batch and return it channel-first.

    Args:
        images: uint8 array (N, H, W, 3) or (N, 3, H, W), or one frame without the N axis.

    Returns:
        uint8 array (N, 3, H, W) (a view where possible).

    Raises:
        TypeError: Not a uint8 numpy array.
        ValueError: Wrong number of dimensions, no 3-channel axis, or an empty batch.
    """
    if not isinstance(images, np.ndarray) or images.dtype != np.uint8:
        kind = images.dtype if isinstance(images, np.ndarray) else type(images).__name__
        raise TypeError(f"images must be a uint8 numpy array (N, H, W, 3) or (N, 3, H, W), got {kind}; convert "
                        "floats in [0, 1] with (x * 255).round().astype(np.uint8)")
    given = images.shape
    if images.ndim == 3:
        images = images[None]
    if images.ndim != 4 or images.shape[0] == 0:
        raise ValueError(f"images of shape {given}: expected (N, H, W, 3) or (N, 3, H, W) with N >= 1")
    if images.shape[1] == 3 and images.shape[3] != 3:
        return images
    if images.shape[3] == 3:
        return images.transpose(0, 3, 1, 2)
    raise ValueError(f"images of shape {given}: expected RGB frames (N, H, W, 3) or (N, 3, H, W)")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set to a true value (Hugging Face's: 1, ON, YES, TRUE; any case)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def weights_unavailable(model_name: str, pretrained: str, problem: str, n) -> str:
    """The message for a pretrained tag whose weights are neither cached nor downloadable, and how to get them here.

    Args:
        model_name: The open_clip model.
        pretrained: Its pretrained tag.
        problem: What open_clip raised (``"Type: message"``).
        n: A `carla_gym.hints.Naming`: how the caller sets ``pretrained`` (a file path) and, if it
            offers one, ``cache_dir`` (a cache folder).
    """
    offline = hub_offline()
    routes = f"pass the file's path as {n('pretrained', metavar='FILE')}"
    if n.offers("cache_dir"):
        routes += f", or copy that machine's open_clip cache folder here and pass it as {n('cache_dir', metavar='DIR')}"
    return (f"could not load the {model_name!r} weights tagged {pretrained!r}: they are not in the local cache and "
            + ("HF_HUB_OFFLINE is set, so nothing is downloaded" if offline else "the download failed")
            + f" ({problem}). On a machine with internet, load them once and save them to a file: model = "
            f"open_clip.create_model({model_name!r}, pretrained={pretrained!r}); torch.save(model.state_dict(), "
            f"'{model_name}.pt'); copy the file here and {routes}"
            + ("" if offline else ". Offline, set HF_HUB_OFFLINE=1 to fail at once instead of retrying the download"))


class OpenClipEncoder:
    """An open_clip model as a reward encoder.

    Args:
        model_name: open_clip architecture, e.g. ``"ViT-B-32"`` or ``"ViT-bigG-14"``.
        pretrained: A pretrained tag of that model (downloaded once into ``cache_dir`` or the
            Hugging Face cache), a path to a checkpoint file, or None for random weights.
        device: torch device, e.g. ``"cpu"`` or ``"cuda"``.
        precision: One of `PRECISIONS`.
        preprocess: One of `PREPROCESS_MODES`.
        batch_size: Frames per forward pass, >= 1 (VLM-RL: 64).
        cache_dir: Where open_clip keeps downloaded weights; None: its default.
        preprocess_from: With a checkpoint file: the pretrained tag the weights came from, whose
            preprocessing (mean, std, interpolation, resize mode; metadata, no download) to use;
            None: open_clip's defaults for the architecture (OpenAI statistics, bicubic, shortest).
        seed: Seed of the random initialisation when ``pretrained`` is None.

    Raises:
        ValueError: Unknown model name, pretrained tag, precision or preprocess mode, or a bad
            batch size.
        FileNotFoundError: ``pretrained`` looks like a path and no such file exists.
        RuntimeError: The weights of a pretrained tag are not on this machine and cannot be
            downloaded (the message says how to get them).
        carla_gym.hints.MissingExtraError: Without the ``[clip]`` extra (names its install command).
    """

    def __init__(self, model_name: str = DEFAULT_MODEL, pretrained: str | os.PathLike | None = None,
                 device: str = "cpu", precision: str = "auto", preprocess: str = "openclip", batch_size: int = 64,
                 cache_dir: str | None = None, preprocess_from: str | None = None, seed: int = 0) -> None:
        from carla_gym.hints import needs_extra, worded

        with needs_extra("clip"):
            import open_clip
            import torch

        models = open_clip.list_models()
        if model_name not in models:
            close = difflib.get_close_matches(model_name, models, n=5)
            raise worded(ValueError, lambda n: f"{n('model_name', model_name)} is not an open_clip model; close "
                         f"matches: {close} (open_clip.list_models() lists all)")
        for key, value, valid in (("precision", precision, PRECISIONS), ("preprocess", preprocess, PREPROCESS_MODES)):
            if value not in valid:
                raise ValueError(f"{key}={value!r}: choose one of {list(valid)}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r}: must be an integer >= 1")
        try:
            self.device = torch.device(device)
        except RuntimeError as exc:  # torch: "Expected one of cpu, cuda, ... device type at start of ..."
            problem = str(exc)
            raise worded(ValueError, lambda n: f"{n('device', device)}: not a torch device ({problem})") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise worded(ValueError, lambda n: f"{n('device', device)}: torch sees no CUDA GPU here; use "
                                               f"{n('device', 'cpu')}")
        self.model_name, self.batch_size, self.preprocess = model_name, batch_size, preprocess
        self.pretrained = None if pretrained is None else str(pretrained)
        if preprocess_from is not None and preprocess_from not in open_clip.list_pretrained_tags_by_model(model_name):
            raise ValueError(f"preprocess_from={preprocess_from!r}: not a pretrained tag of {model_name!r}; valid: "
                             f"{open_clip.list_pretrained_tags_by_model(model_name)}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # random weights are reproducible and leave the caller's RNG alone
            model = self._create(open_clip, model_name, self.pretrained, cache_dir)
        self.model = model.to(self.device).eval()
        self.tokenizer = open_clip.get_tokenizer(model_name)
        cfg = dict(open_clip.get_model_preprocess_cfg(self.model))
        if preprocess_from is not None:
            tag_cfg = open_clip.get_pretrained_cfg(model_name, preprocess_from)
            cfg.update({k: tag_cfg[k] for k in ("mean", "std", "interpolation", "resize_mode") if k in tag_cfg})
        size = cfg.get("size", 224)
        self.image_size = (size, size) if isinstance(size, int) else tuple(size)
        if preprocess == "vlm_rl":  # VLM-RL normalises with OpenAI CLIP's statistics
            mean, std = open_clip.OPENAI_DATASET_MEAN, open_clip.OPENAI_DATASET_STD
        else:
            mean, std = cfg.get("mean", open_clip.OPENAI_DATASET_MEAN), cfg.get("std", open_clip.OPENAI_DATASET_STD)
        self.resize_mode = cfg.get("resize_mode", "shortest")
        self.interpolation = "bicubic" if preprocess == "vlm_rl" else cfg.get("interpolation", "bicubic")
        self._mean = torch.tensor(mean, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        self._std = torch.tensor(std, dtype=torch.float32, device=self.device).view(1, 3, 1, 1)
        if precision == "auto":
            precision = "fp16" if self.device.type == "cuda" else "fp32"
        self.precision = precision
        self._autocast_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)

    @staticmethod
    def _create(open_clip, model_name: str, pretrained: str | None, cache_dir: str | None):
        from carla_gym.hints import worded

        if pretrained is None:
            import logging

            logging.getLogger(__name__).warning(
                "OpenClipEncoder(%r, pretrained=None): random weights; CLIP rewards carry no signal (pass a "
                "pretrained tag or a checkpoint file for real ones)", model_name)
            logger = logging.getLogger()  # open_clip says the same through the root logger
            level = logger.level
            logger.setLevel(logging.ERROR)
            try:
                return open_clip.create_model(model_name, pretrained=None)
            finally:
                logger.setLevel(level)
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        looks_like_path = os.sep in pretrained or pretrained.endswith((".pt", ".pth", ".bin", ".safetensors"))
        if pretrained not in tags:
            if not Path(pretrained).is_file():
                if looks_like_path:
                    raise worded(FileNotFoundError, lambda n: f"{n('pretrained', pretrained)}: no such checkpoint file")
                raise worded(ValueError, lambda n: f"{n('pretrained', pretrained)} is neither a pretrained tag of "
                                                   f"{model_name!r} (valid: {tags}) nor an existing checkpoint file")
            try:
                return open_clip.create_model(model_name, pretrained=pretrained)
            except Exception as exc:  # noqa: BLE001 - a wrong file gets one clear message
                problem = f"{type(exc).__name__}: {str(exc)[:400]}"
                raise worded(RuntimeError, lambda n: (
                    f"could not load {pretrained!r} into open_clip {model_name!r}: {problem}. The file must hold the "
                    f"weights (state_dict) of an open_clip {model_name} model: torch.save(model.state_dict(), path), "
                    "or a checkpoint open_clip downloaded" + (
                        f"; choose the {n('model_name', metavar='')} the weights belong to (e.g. ViT-B-32-quickgelu "
                        "for OpenAI's)" if n.offers("model_name") else ""))) from exc
        try:
            return open_clip.create_model(model_name, pretrained=pretrained, cache_dir=cache_dir)
        except Exception as exc:  # noqa: BLE001 - any download failure gets the same advice
            problem = f"{type(exc).__name__}: {exc}"
            raise worded(RuntimeError, lambda n: weights_unavailable(model_name, pretrained, problem, n)) from exc

    # -- encoding -------------------------------------------------------------------------------
    def encode_text(self, prompts: list[str]) -> np.ndarray:
        """Unit text embeddings, float32 (len(prompts), D)."""
        import torch

        if not prompts or not all(isinstance(p, str) and p for p in prompts):
            raise ValueError(f"prompts must be a non-empty list of non-empty strings, got {prompts!r}")
        with torch.inference_mode():
            tokens = self.tokenizer(list(prompts)).to(self.device)
            emb = self.model.encode_text(tokens).float()
            emb = emb / emb.norm(dim=-1, keepdim=True)
        return emb.cpu().numpy()

    def preprocess_images(self, images) -> torch.Tensor:
        """uint8 frames to the model's normalised float input, float32 (N, 3, S, S) on the device.

        Raises:
            TypeError, ValueError: See `as_nchw`.
        """
        import torch
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2 import functional as F

        x = torch.from_numpy(np.ascontiguousarray(as_nchw(images))).to(self.device).float().div_(255.0)
        mode = {"bicubic": InterpolationMode.BICUBIC, "bilinear": InterpolationMode.BILINEAR}.get(
            self.interpolation, InterpolationMode.BICUBIC)
        if self.preprocess == "vlm_rl":  # VLM-RL: torchvision 0.14 resizes tensors without antialiasing
            x = x[:, :, :, x.shape[3] // 2:]  # the right half of the frame
            x = F.resize(x, list(self.image_size), interpolation=InterpolationMode.BICUBIC, antialias=False)
            return (x - self._mean) / self._std  # float input: torchvision does not clamp the overshoot
        if self.resize_mode == "squash":
            x = F.resize(x, list(self.image_size), interpolation=mode, antialias=True)
        else:  # "shortest" (CLIP's default) or "longest": scale, then centre crop or pad to the input size
            h, w = x.shape[2:]
            side = min(self.image_size)
            scale = side / min(h, w) if self.resize_mode == "shortest" else side / max(h, w)
            x = F.resize(x, [max(1, round(h * scale)), max(1, round(w * scale))], interpolation=mode,
                         antialias=True)
            x = F.center_crop(x, list(self.image_size))
        return (x.clamp_(0.0, 1.0) - self._mean) / self._std

    def encode_images(self, images) -> np.ndarray:
        """Unit image embeddings, float32 (N, D), computed `batch_size` frames at a time.

        Raises:
            TypeError, ValueError: See `as_nchw`.
        """
        import torch

        frames = as_nchw(images)
        out = []
        with torch.inference_mode():
            for start in range(0, frames.shape[0], self.batch_size):
                x = self.preprocess_images(frames[start:start + self.batch_size])
                if self._autocast_dtype is not None:
                    with torch.autocast(self.device.type, dtype=self._autocast_dtype):
                        emb = self.model.encode_image(x)
                else:
                    emb = self.model.encode_image(x)
                emb = emb.float()
                out.append(emb / emb.norm(dim=-1, keepdim=True))
        return torch.cat(out).cpu().numpy()
