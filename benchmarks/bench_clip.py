"""Speed of the CLIP reward: images/s of an open_clip model and the shaping cost per env step.

Usage:
    python benchmarks/bench_clip.py [--model ViT-B-32] [--device cpu] [--batches 1 8 64] [--json out.json]

Measures (weights are random: speed does not depend on them):
* images/s of ``OpenClipEncoder.encode_images`` (preprocessing included) at each batch size, on
  224x224 frames (``openclip`` preprocessing) and on VLM-RL's 517x517 frames (``vlm_rl``: right
  half, bicubic squash);
* per env step of `CarlaTrolley-v0` (state observations, 8 envs in a DummyVecEnv): the plain
  step, the step with the 224x224 and with the 517x517 (VLM-RL) top-down reward frame rendered,
  the shaping wrapper with a
  zero-cost encoder (the wrapper's own overhead), and the wrapper with the real model (one
  forward pass of 8 frames per step).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

import carla_gym  # noqa: F401  (registers the env)
from carla_gym.cli_args import HelpFormatter
from carla_gym.io import report_results
from carla_gym.reward import CLIPRewardModel, OpenClipEncoder, VecCLIPShapedReward
from carla_gym.reward.encoder import FRAME_SIZES


class ZeroEncoder:
    """An encoder that costs nothing: isolates the wrapper's overhead."""

    def encode_text(self, prompts):
        """Fixed unit vectors."""
        return np.eye(len(prompts), 4)

    def encode_images(self, images):
        """The same unit vector for every frame."""
        return np.tile(np.eye(1, 4), (len(images), 1))


def images_per_s(encoder: OpenClipEncoder, batch: int, seconds: float = 5.0, size: int = 224) -> float:
    """Frames encoded per second at one batch size (size x size uint8 input)."""
    frames = np.random.default_rng(0).integers(0, 256, size=(batch, size, size, 3), dtype=np.uint8)
    encoder.batch_size = batch
    encoder.encode_images(frames)  # warm-up
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        encoder.encode_images(frames)
        count += batch
    return count / (time.perf_counter() - start)


def step_us(make_venv, steps: int) -> float:
    """Wall time per env step [us] (one VecEnv step = n_envs env steps)."""
    venv = make_venv()
    venv.reset()
    actions = np.zeros(venv.num_envs, dtype=np.int64)
    venv.step(actions)
    start = time.perf_counter()
    for _ in range(steps):
        venv.step(actions)
    elapsed = time.perf_counter() - start
    venv.close()
    return elapsed / (steps * venv.num_envs) * 1e6


def main() -> None:
    """Run the measurements, print them and optionally write JSON."""
    from carla_gym.hints import require_extra

    require_extra("clip")  # a missing extra names its install command
    require_extra("sb3", ("stable_baselines3",))
    from stable_baselines3.common.vec_env import DummyVecEnv

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--n-envs", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}", flush=True)
    encoder = OpenClipEncoder(args.model, device=args.device)
    results = {f"images_per_s_batch_{b}": images_per_s(encoder, b) for b in args.batches}
    faithful = OpenClipEncoder(args.model, device=args.device, preprocess="vlm_rl")
    results.update({f"images_per_s_vlm_rl_517_batch_{b}": images_per_s(faithful, b, size=FRAME_SIZES["vlm_rl"])
                    for b in args.batches})

    def venv(frame: bool, size: int = FRAME_SIZES["openclip"]):
        kwargs = dict(observation_mode="state", ticks_per_action=1, scenario_config={"initial_speed_kmh": 0.0})
        if frame:
            kwargs["reward_frame_size"] = size
        return DummyVecEnv([lambda: gym.make("CarlaTrolley-v0", **kwargs)] * args.n_envs)

    encoder.batch_size = 64
    zero = CLIPRewardModel(ZeroEncoder())
    real = CLIPRewardModel(encoder)
    results["env_step_us"] = step_us(lambda: venv(False), 2000)
    results["env_step_with_reward_frame_us"] = step_us(lambda: venv(True), 300)
    results["env_step_with_517_reward_frame_us"] = step_us(lambda: venv(True, FRAME_SIZES["vlm_rl"]), 100)
    results["env_step_shaped_zero_cost_encoder_us"] = step_us(lambda: VecCLIPShapedReward(venv(True), zero), 300)
    results["env_step_shaped_real_model_us"] = step_us(lambda: VecCLIPShapedReward(venv(True), real), 10)
    report_results(results, args.json)


if __name__ == "__main__":
    main()
