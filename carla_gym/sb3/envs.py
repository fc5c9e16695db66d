"""The vectorised envs of ``train_sb3.py``: `CarlaTrolley-v0` (embedded or OpenEnv) or `CarlaNavigation-v0`.

In-process (``dummy``) or one process per env (``subproc``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import gymnasium as gym

from carla_gym.envs import ENV_IDS
from carla_gym.hints import needs_extra

VEC_ENVS = ("dummy", "subproc")
"""``dummy``: every env in this process (checkpoints capture them); ``subproc``: one process per env."""


def _monitored(kwargs: dict):
    with needs_extra("sb3"):
        from stable_baselines3.common.monitor import Monitor

    return Monitor(gym.make("CarlaTrolley-v0", **kwargs))


def _navigation(kwargs: dict, reward_frame_size: int | None):
    """A `CarlaNavigation-v0` env, with VLM-RL's reward camera (`carla_gym.reward.nav.NavRewardCamera`) if sized."""
    env = gym.make("CarlaNavigation-v0", **kwargs)
    if reward_frame_size is not None:
        from carla_gym.reward.nav import NavRewardCamera

        env = NavRewardCamera(env, reward_frame_size)
    return env


def make_venv(env_kwargs: dict, n_envs: int, seed: int, vec_env: str = "dummy", urls: Sequence[str] = (),
              clip=None, env_id: str = "CarlaTrolley-v0"):
    """An SB3 VecEnv of ``n_envs`` monitored envs, seeded ``seed, seed + 1, ...`` at the first reset.

    Args:
        env_kwargs: Keyword arguments of every env.
        n_envs: Number of envs, >= 1.
        seed: Seed of env 0.
        vec_env: One of `VEC_ENVS`.
        urls: OpenEnv server URLs; when given, env i uses ``urls[i % len(urls)]`` (backend ``openenv``).
        clip: None, or ``(reward_model, mode, weight, synthesis)``: wrap with
            `carla_gym.reward.VecCLIPShapedReward`.
        env_id: One of `ENV_IDS`. For `CarlaNavigation-v0` a ``reward_frame_size`` entry of
            ``env_kwargs`` is not the env's: it sizes the `carla_gym.reward.nav.NavRewardCamera` wrapper.

    Returns:
        A `stable_baselines3.common.vec_env.VecEnv` (a `VecCLIPShapedReward` with ``clip``).

    Raises:
        ValueError: Unknown ``vec_env`` or ``env_id``, or ``n_envs`` < 1.
        carla_gym.hints.MissingExtraError: stable-baselines3 is not installed (names the install command).
    """
    with needs_extra("sb3"):
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    if vec_env not in VEC_ENVS:
        raise ValueError(f"vec_env={vec_env!r}: choose one of {list(VEC_ENVS)}")
    if n_envs < 1:
        raise ValueError(f"n_envs={n_envs!r}: must be >= 1")
    if env_id not in ENV_IDS:
        raise ValueError(f"env_id={env_id!r}: choose one of {list(ENV_IDS)}")
    vec_cls = DummyVecEnv if vec_env == "dummy" else SubprocVecEnv
    if env_id == "CarlaNavigation-v0":
        kwargs = dict(env_kwargs)
        size = kwargs.pop("reward_frame_size", None)
        venv = make_vec_env(functools.partial(_navigation, kwargs, size), n_envs=n_envs, seed=seed,
                            vec_env_cls=vec_cls)
    elif urls:
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
