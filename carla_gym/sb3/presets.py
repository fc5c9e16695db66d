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


SB3_DEFAULTS = {("ppo", "n_steps"): 2048, ("sac", "train_freq"): 1}
"""stable-baselines3's defaults of the settings that set the rollout length (``PPO``/``SAC`` signatures)."""


def rollout_steps(algo: str, n_envs: int, hyper: dict) -> int | None:
    """Env steps per rollout: SB3 trains in whole rollouts, so a run's length is a multiple of this.

    PPO collects ``n_steps`` steps of every env per update; SAC ``train_freq`` steps of every env
    (None when ``train_freq`` counts episodes, whose length varies).

    Example:
        >>> rollout_steps("ppo", 4, {"n_steps": 128}), rollout_steps("sac", 2, {"train_freq": 4})
        (512, 8)
        >>> rollout_steps("sac", 2, {"train_freq": (1, "episode")}) is None
        True
    """
    if algo == "ppo":
        return hyper.get("n_steps", SB3_DEFAULTS[("ppo", "n_steps")]) * n_envs
    freq = hyper.get("train_freq", SB3_DEFAULTS[("sac", "train_freq")])
    if isinstance(freq, tuple | list):
        count, unit = freq
        return count * n_envs if unit == "step" else None
    return freq * n_envs


def trained_timesteps(total: int, unit: int | None) -> int:
    """The env steps SB3 trains when asked for ``total``: ``total`` rounded up to whole rollouts of ``unit``.

    Example:
        >>> trained_timesteps(256, 512), trained_timesteps(1024, 512), trained_timesteps(300, None)
        (512, 1024, 300)
    """
    return total if unit is None else -(-total // unit) * unit


def encode_hyperparameters(hyper: dict) -> dict:
    """JSON-ready hyperparameters with their types kept (config.json); `decode_hyperparameters` inverts it.

    int, float, bool, None, str, lists and dicts stay as they are; a tuple becomes
    ``{"__tuple__": [...]}`` and a `QuadraticSchedule` ``{"__quadratic_schedule__": [init, end]}``.

    Raises:
        ValueError: A value of another type (named, with its hyperparameter), e.g. a set.

    Example:
        >>> encode_hyperparameters({"n_steps": 128, "train_freq": (1, "episode")})
        {'n_steps': 128, 'train_freq': {'__tuple__': [1, 'episode']}}
        >>> encode_hyperparameters({"learning_rate": QuadraticSchedule(1e-4, 1e-6)})
        {'learning_rate': {'__quadratic_schedule__': [0.0001, 1e-06]}}
    """
    def encode(name: str, value):
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, QuadraticSchedule):
            return {"__quadratic_schedule__": [value.init, value.end]}
        if isinstance(value, tuple):
            return {"__tuple__": [encode(name, v) for v in value]}
        if isinstance(value, list):
            return [encode(name, v) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: encode(name, v) for k, v in value.items()}
        raise ValueError(f"{name}={value!r}: cannot be stored in config.json (valid: numbers, strings, booleans, "
                         "None, and lists, tuples or string-keyed dicts of them)")

    return {name: encode(name, value) for name, value in hyper.items()}


def decode_hyperparameters(data: dict) -> dict:
    """The hyperparameters `encode_hyperparameters` stored.

    Example:
        >>> hyper = hyperparameters("vlm-rl", "sac")
        >>> decode_hyperparameters(encode_hyperparameters(hyper)) == hyper
        True
    """
    def decode(value):
        if isinstance(value, list):
            return [decode(v) for v in value]
        if isinstance(value, dict):
            if set(value) == {"__tuple__"}:
                return tuple(decode(v) for v in value["__tuple__"])
            if set(value) == {"__quadratic_schedule__"}:
                return QuadraticSchedule(*value["__quadratic_schedule__"])
            return {k: decode(v) for k, v in value.items()}
        return value

    return {name: decode(value) for name, value in data.items()}
