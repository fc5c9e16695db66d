"""The vectorised envs of ``train_sb3.py``: `CarlaTrolley-v0` (embedded or OpenEnv) or `CarlaNavigation-v0`.

Batched on the array core (``batched``: `carla_gym.sb3.vec_env.CarlaTrolleyVecEnv`, embedded `CarlaTrolley-v0`
only, see `batched_problem`), single envs in this process (``dummy``) or one process per env (``subproc``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import gymnasium as gym

from carla_gym.envs import ENV_IDS
from carla_gym.hints import needs_extra

VEC_ENVS = ("batched", "dummy", "subproc")
"""``batched``: N embedded `CarlaTrolley-v0` worlds stepped as arrays in one call (checkpoints capture them);
``dummy``: single envs in this process (checkpoints capture them); ``subproc``: one process per env."""


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


def batched_problem(env_kwargs: dict, urls: Sequence[str] = (), clip=None,
                    env_id: str = "CarlaTrolley-v0") -> str | None:
    """Why ``vec_env="batched"`` cannot run these settings (None: it can); `make_venv` takes the same arguments.

    The batched env runs `CarlaTrolley-v0` on the embedded simulator with the settings of
    `carla_gym.envs.vector.SUPPORTED`; CLIP shaping (it needs each env's reward frame), OpenEnv servers,
    `CarlaNavigation-v0` and the other single-env extras need single envs (``dummy`` or ``subproc``).

    Examples:
        >>> batched_problem({"observation_mode": "state"}) is None
        True
        >>> batched_problem({"scenario": ["trolley_generated_train"]}) is None  # a new layout per reset, per row
        True
        >>> batched_problem({}, env_id="CarlaNavigation-v0")
        'it runs CarlaTrolley-v0 only (not CarlaNavigation-v0)'
    """
    from carla_gym.envs.vector import SUPPORTED

    if env_id != "CarlaTrolley-v0":
        return f"it runs CarlaTrolley-v0 only (not {env_id})"
    if urls:
        return "it runs the embedded simulator only (not OpenEnv servers)"
    if clip is not None or env_kwargs.get("reward_frame_size") is not None:
        return "CLIP shaping needs each env's reward frame, which only single envs render"
    for key in ("render_mode", "info_text"):
        if env_kwargs.get(key) not in (None, False):
            return f"it does not take {key}={env_kwargs[key]!r}"
    for key, valid in SUPPORTED.items():
        if env_kwargs.get(key, valid[0]) not in valid:
            return f"it takes {key} {' or '.join(map(repr, valid))} only (not {env_kwargs[key]!r})"
    return None


def make_venv(env_kwargs: dict, n_envs: int, seed: int, vec_env: str = "dummy", urls: Sequence[str] = (),
              clip=None, env_id: str = "CarlaTrolley-v0"):
    """An SB3 VecEnv of ``n_envs`` monitored envs, seeded ``seed, seed + 1, ...`` at the first reset.

    Every kind gives the same episodes for the same seed and actions: ``batched`` equals ``dummy``
    bit for bit (rewards, observations, ends); it is monitored by SB3's ``VecMonitor`` (episode
    statistics in ``info["episode"]``), the others by a ``Monitor`` per env.

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
        ValueError: Unknown ``vec_env`` or ``env_id``, ``n_envs`` < 1, or ``vec_env="batched"`` with settings
            it cannot run (`batched_problem`; the message says to use ``vec_env="dummy"``).
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
    if vec_env == "batched":
        problem = batched_problem(env_kwargs, urls, clip, env_id)
        if problem:
            raise ValueError(f"vec_env='batched' cannot run these settings: {problem}; use vec_env='dummy' "
                             "(train_sb3.py --vec-env dummy) or 'subproc'")
        from stable_baselines3.common.vec_env import VecMonitor

        from carla_gym.sb3.vec_env import CarlaTrolleyVecEnv

        venv = VecMonitor(CarlaTrolleyVecEnv(n_envs, **env_kwargs))
        venv.seed(seed)
        return venv
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
