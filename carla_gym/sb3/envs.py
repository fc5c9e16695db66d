"""The vectorised `CarlaTrolley-v0` envs of ``train_sb3.py``: embedded or OpenEnv, in-process or subprocesses."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import gymnasium as gym

from carla_gym.hints import needs_extra

VEC_ENVS = ("dummy", "subproc")
"""``dummy``: every env in this process (checkpoints capture them); ``subproc``: one process per env."""


def _monitored(kwargs: dict):
    with needs_extra("sb3"):
        from stable_baselines3.common.monitor import Monitor

    return Monitor(gym.make("CarlaTrolley-v0", **kwargs))


def make_venv(env_kwargs: dict, n_envs: int, seed: int, vec_env: str = "dummy", urls: Sequence[str] = (),
              clip=None):
    """An SB3 VecEnv of ``n_envs`` monitored `CarlaTrolley-v0` envs, seeded ``seed, seed + 1, ...`` at the first reset.

    Args:
        env_kwargs: Keyword arguments of every env.
        n_envs: Number of envs, >= 1.
        seed: Seed of env 0.
        vec_env: One of `VEC_ENVS`.
        urls: OpenEnv server URLs; when given, env i uses ``urls[i % len(urls)]`` (backend ``openenv``).
        clip: None, or ``(reward_model, mode, weight, synthesis)``: wrap with
            `carla_gym.reward.VecCLIPShapedReward`.

    Returns:
        A `stable_baselines3.common.vec_env.VecEnv` (a `VecCLIPShapedReward` with ``clip``).

    Raises:
        ValueError: Unknown ``vec_env`` or ``n_envs`` < 1.
        carla_gym.hints.MissingExtraError: stable-baselines3 is not installed (names the install command).
    """
    with needs_extra("sb3"):
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if vec_env not in VEC_ENVS:
        raise ValueError(f"vec_env={vec_env!r}: choose one of {list(VEC_ENVS)}")
    if n_envs < 1:
        raise ValueError(f"n_envs={n_envs!r}: must be >= 1")
    vec_cls = DummyVecEnv if vec_env == "dummy" else SubprocVecEnv
    if urls:
        makers = [functools.partial(_monitored, {**env_kwargs, "backend": "openenv", "base_url": urls[i % len(urls)]})
                  for i in range(n_envs)]
        venv = vec_cls(makers)
        venv.seed(seed)
    else:
        venv = make_vec_env("carla_gym:CarlaTrolley-v0", n_envs=n_envs, seed=seed, env_kwargs=env_kwargs,
                            vec_env_cls=vec_cls)
    if clip is not None:
        from carla_gym.reward.vec import VecCLIPShapedReward

        model, mode, weight, synthesis = clip
        venv = VecCLIPShapedReward(venv, model, mode=mode, weight=weight, synthesis=synthesis)
    return venv
