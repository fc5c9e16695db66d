"""Hyperparameter presets, with stable-baselines3's keyword names verbatim.

``cpu``: settings that learn the trolley scenarios quickly on a small CPU (this project's
measurements, BENCHMARKS.md). ``vlm-rl``: VLM-RL's published settings (``config.py``
``algorithm_params``; ../shared/spec/vlm_rl.md section 3.1), including its quadratic
learning-rate decay.
"""

from __future__ import annotations

import dataclasses

PRESETS = ("cpu", "vlm-rl")
"""Preset names."""
ALGOS = ("ppo", "sac")
"""Algorithms."""


@dataclasses.dataclass(frozen=True)
class QuadraticSchedule:
    """VLM-RL's learning-rate schedule: end + (init - end) * progress_remaining**2.

    A class rather than a closure so that saved models can be loaded again (SB3 pickles it).
    """

    init: float
    end: float

    def __call__(self, progress_remaining: float) -> float:
        """Learning rate at ``progress_remaining`` (1 at the start, 0 at the end)."""
        return self.end + (self.init - self.end) * progress_remaining**2


def hyperparameters(preset: str, algo: str) -> dict:
    """Keyword arguments of the SB3 algorithm for a preset.

    Raises:
        ValueError: Unknown preset or algorithm.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r}: choose one of {list(PRESETS)}")
    if algo not in ALGOS:
        raise ValueError(f"algo={algo!r}: choose one of {list(ALGOS)}")
    if preset == "cpu":
        if algo == "ppo":
            return dict(n_steps=128, batch_size=64, learning_rate=3e-4, ent_coef=0.01, gamma=0.99)
        return dict(buffer_size=50_000, learning_starts=500, batch_size=256, train_freq=4, gradient_steps=2,
                    learning_rate=1e-3, gamma=0.98, tau=0.005)
    if algo == "ppo":  # VLM-RL "PPO"
        return dict(learning_rate=QuadraticSchedule(1e-4, 1e-6), n_steps=1024, batch_size=64, n_epochs=10,
                    gamma=0.98, gae_lambda=0.95, clip_range=0.2, ent_coef=0.05,
                    policy_kwargs=dict(net_arch=dict(pi=[500, 300], vf=[500, 300])))
    return dict(learning_rate=QuadraticSchedule(1e-4, 5e-7), buffer_size=100_000, batch_size=256,  # "SAC_CLIP"
                gamma=0.98, tau=0.02, train_freq=64, gradient_steps=64, learning_starts=10_000, ent_coef="auto",
                use_sde=True, policy_kwargs=dict(log_std_init=-3, net_arch=[500, 300]))


DEFAULT_TIMESTEPS = {("cpu", "ppo"): 20_480, ("cpu", "sac"): 10_000, ("vlm-rl", "ppo"): 1_000_000,
                     ("vlm-rl", "sac"): 1_000_000}
"""Default training length per (preset, algorithm) [env steps]; VLM-RL trains 1M steps."""


def replay_buffer_bytes(buffer_size: int, observation_nbytes: int, action_nbytes: int = 8) -> int:
    """Memory of an SB3 (Dict)ReplayBuffer: observations and next observations, plus actions etc.

    Example:
        >>> round(replay_buffer_bytes(50_000, 3 * 84 * 84 + 32 * 4) / 2**30, 2)  # 84x84 image + state [GiB]
        1.98
    """
    return buffer_size * (2 * observation_nbytes + action_nbytes + 4 * 3)
