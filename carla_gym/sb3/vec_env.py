"""`CarlaTrolleyVecEnv`: a stable-baselines3 ``VecEnv`` over the array core's vector env (no per-env Python).

SB3 drives N envs through its own ``VecEnv`` API (``step_async``/``step_wait``, ``done`` flags, a list
of info dicts, seeds set by `seed` for the next `reset`). This class speaks that API over one
`carla_gym.envs.vector.CarlaTrolleyVectorEnv` in Gymnasium's same-step autoreset mode, so a PPO or
SAC step is one call of the batched physics instead of N single-env steps. It adds no rule of its own:
observations, rewards, terminations and outcomes are the vector env's, which are those of N single
``CarlaTrolley-v0`` envs bit for bit. With the seeds `make_vec_env` gives (env i: seed + i) it gives
exactly what ``DummyVecEnv`` of single envs gives (rewards as float32, as ``DummyVecEnv`` stores them).

Episode statistics (``info["episode"]``, SB3's ``rollout/ep_rew_mean``) come from wrapping it in SB3's
``VecMonitor``, as `carla_gym.sb3.envs.make_venv` does.

Examples:
    >>> venv = CarlaTrolleyVecEnv(2, observation_mode="state")
    >>> venv.seed(0)
    [0, 1]
    >>> obs = venv.reset()
    >>> obs.shape, obs.dtype, venv.action_space
    ((2, 32), dtype('float32'), Discrete(4))
    >>> obs, rewards, dones, infos = venv.step(np.array([2, 0]))  # lane_change_left, observe
    >>> rewards.tolist(), dones.tolist(), infos[0]["ticks"], sorted(infos[0]["reward_terms"])
    ([0.0, 0.0], [False, False], 10, ['rubric'])
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs, VecEnvStepReturn

from carla_gym.envs.trolley import DEFAULT_SCENARIO
from carla_gym.envs.vector import CarlaTrolleyVectorEnv

SHARED_ATTRIBUTES = ("action_mode", "action_space", "image_size", "image_view", "info_text", "metadata",
                     "observation_mode", "observation_space", "render_mode", "reward_frame_size", "reward_mode",
                     "scenario_config", "scenarios", "spec", "steer_smoothing", "ticks_per_action")
"""Attributes of a single ``CarlaTrolley-v0`` env that are the same for every world of the batch (the constructor's
settings and the spaces): `CarlaTrolleyVecEnv.get_attr` answers them. ``np_random`` is answered per env; every
other attribute of a single env is per-world state, which lives in the batch's arrays."""


class CarlaTrolleyVecEnv(VecEnv):
    """N ``CarlaTrolley-v0`` envs as one SB3 ``VecEnv``, stepped together on the array core.

    Args:
        num_envs: Number of envs N (>= 1).
        scenario: The single env's ``scenario`` (a name or a list, sampled per reset; the generated
            ``trolley_generated_*`` draw a new layout per reset, its seed in ``reset_infos[i]["scenario_seed"]``).
        **kwargs: The single env's other arguments (``action_mode``, ``observation_mode``, ``reward_mode``,
            ``ticks_per_action``, image size and view, ``scenario_config``, ``steer_smoothing``), as
            `carla_gym.envs.vector.CarlaTrolleyVectorEnv` takes them.

    Attributes:
        vector: The Gymnasium vector env underneath (same-step autoreset); its state is the whole
            state of this env (`carla_gym.sb3.checkpoint` pickles it).

    Raises:
        ValueError: ``num_envs`` < 1, or an argument the vector env refuses (backend other than
            embedded, ``reward_frame_size``, ``info_text``, ``render_mode``: the message names it; use
            ``make_venv(..., vec_env="dummy")`` for those).
    """

    def __init__(self, num_envs: int, scenario: str | Sequence[str] = DEFAULT_SCENARIO, **kwargs: Any) -> None:
        self.vector = CarlaTrolleyVectorEnv(num_envs, scenario=scenario, autoreset_mode=AutoresetMode.SAME_STEP,
                                            **kwargs)
        self._actions: np.ndarray | None = None
        self._started = False
        super().__init__(self.vector.num_envs, self.vector.single_observation_space,
                         self.vector.single_action_space)

    # -- SB3 VecEnv API ----------------------------------------------------------------------
    def reset(self) -> VecEnvObs:
        """Reset every env with the seeds of `seed` and the options of ``set_options`` (each used once).

        Envs whose options differ are reset in groups, each group with its options; an env's seed
        seeds it exactly as ``env.reset(seed=...)`` seeds a single env.

        Returns:
            The observations: float32 (N, 32) state vectors, or for ``observation_mode="dict"`` an
            ``OrderedDict`` of ``image`` uint8 (N, 3, H, W) and ``state`` float32 (N, 32).

        Raises:
            ValueError: An option the vector env does not take (it takes ``{"scenario": name}``).
        """
        groups: list[tuple[dict, list[int]]] = []
        for i, options in enumerate(self._options):
            for known, rows in groups:
                if known == options:
                    rows.append(i)
                    break
            else:
                groups.append((dict(options), [i]))
        obs = None
        self.reset_infos = [{} for _ in range(self.num_envs)]
        for options, rows in groups:
            mask = np.zeros(self.num_envs, dtype=bool)
            mask[rows] = True
            if not self._started or mask.all():  # the first reset starts every world (then each group again)
                obs, info = self.vector.reset(seed=list(self._seeds), options=options or None)
            else:
                obs, info = self.vector.reset(seed=list(self._seeds), options={**options, "reset_mask": mask})
            self._reset_infos_from(info)
            self._started = True
        self._reset_seeds()
        self._reset_options()
        return self._sb3_obs(obs)

    def _reset_infos_from(self, info: dict) -> None:
        """Keep the reset info of the envs that reset in SB3's ``reset_infos``: ``scenario`` (and ``scenario_seed``)."""
        for i in np.flatnonzero(info.get("_scenario", ())).tolist():
            self.reset_infos[i] = {"scenario": info["scenario"][i]}
        for i in np.flatnonzero(info.get("_scenario_seed", ())).tolist():
            self.reset_infos[i]["scenario_seed"] = int(info["scenario_seed"][i])

    def step_async(self, actions: np.ndarray) -> None:
        """Keep ``actions`` (int (N,) tool indices or float (N, 2) controls) for `step_wait`."""
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        """Step every env; an env whose episode ended is reset at once (SB3's autoreset).

        Returns:
            ``(observations, rewards float32 (N,), dones bool (N,), infos)``: ``infos[i]`` holds the
            single env's ``rubric_reward``, ``raw_reward``, ``new_hits``, ``ticks`` and
            ``reward_terms``, ``TimeLimit.truncated`` and, where ``dones[i]``, ``outcome`` and
            ``terminal_observation`` (the last observation of the episode; ``observations[i]`` is
            the next episode's first).

        Raises:
            RuntimeError: Called before `reset`, or without `step_async`.
            ValueError: Actions of the wrong shape, dtype or range (the vector env names the expected shape).
        """
        if self._actions is None:
            raise RuntimeError("call step_async(actions) (or step(actions)) before step_wait()")
        actions, self._actions = self._actions, None
        obs, rewards, terminated, truncated, info = self.vector.step(actions)
        dones = terminated | truncated
        infos = [{} for _ in range(self.num_envs)]
        self._reset_infos_from(info)
        for source in (info, info.get("final_info", {})):  # an env that ended: its step's info is final_info
            for key, value in source.items():
                if key.startswith("_") or key in ("final_obs", "final_info") or source is info and key in _RESET_KEYS:
                    continue
                for i in np.flatnonzero(source["_" + key]).tolist():
                    infos[i][key] = _item(value, i)
        for i in range(self.num_envs):
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        for i in np.flatnonzero(dones).tolist():
            infos[i]["terminal_observation"] = info["final_obs"][i]
        return self._sb3_obs(obs), rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        """Close the vector env (the worlds are arrays: nothing else to release)."""
        self.vector.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The value of a `SHARED_ATTRIBUTES` setting (or each env's ``np_random``) for the envs of ``indices``.

        Raises:
            AttributeError: Any other name: per-world state lives in the batch's arrays, not in env objects.
        """
        rows = self._rows(indices)
        if attr_name == "np_random":
            return [self.vector._rngs[i] for i in rows]
        if attr_name in SHARED_ATTRIBUTES:
            value = getattr(self.vector.single, attr_name)
            return [value for _ in rows]
        raise AttributeError(f"CarlaTrolleyVecEnv has no per-env attribute {attr_name!r}: its worlds are rows of one "
                             f"array batch; it answers {['np_random', *SHARED_ATTRIBUTES]} (the settings are shared by "
                             "every env); for other attributes of single env objects use make_venv(..., "
                             "vec_env='dummy')")

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Refused: the settings are shared by every world and fixed at construction.

        Raises:
            AttributeError: Always (the message says what to do instead).
        """
        raise AttributeError(f"CarlaTrolleyVecEnv cannot set {attr_name!r}: its settings are shared by every world and "
                             "fixed at construction; build a new one with the setting, or use make_venv(..., "
                             "vec_env='dummy') for per-env objects")

    def env_method(self, method_name: str, *method_args, indices: VecEnvIndices = None, **method_kwargs) -> list[Any]:
        """Refused: there are no per-env objects whose methods could be called.

        Raises:
            AttributeError: Always (the message says what to do instead).
        """
        raise AttributeError(f"CarlaTrolleyVecEnv has no per-env method {method_name!r}: its worlds are rows of one "
                             "array batch; use reset()/step() on the VecEnv, or single env objects in a "
                             "DummyVecEnv (train_sb3.py --vec-env dummy)")

    def get_images(self) -> list[np.ndarray]:
        """Refused: the batched env has no ``render_mode`` (frames are rendered as observations).

        Raises:
            NotImplementedError: Always, naming the ways to get frames.
        """
        raise NotImplementedError("CarlaTrolleyVecEnv renders no frames; use observation_mode='dict' for camera "
                                  "observations, or single envs with render_mode='rgb_array' (a DummyVecEnv)")

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        """False for every env of ``indices``: the worlds are not Gymnasium envs, so no gym wrapper wraps them."""
        return [False for _ in self._rows(indices)]

    # -- helpers ------------------------------------------------------------------------------
    def _rows(self, indices: VecEnvIndices) -> list[int]:
        rows = list(self._get_indices(indices))
        for i in rows:
            if not 0 <= i < self.num_envs:
                raise IndexError(f"env index {i}: this VecEnv has envs 0 to {self.num_envs - 1}")
        return rows

    def _sb3_obs(self, obs: Any) -> VecEnvObs:
        """The vector env's observations as SB3 expects them (a Dict space's in its key order)."""
        if isinstance(obs, dict):
            return OrderedDict((key, obs[key]) for key in self.observation_space.spaces)
        return obs


_RESET_KEYS = ("scenario", "scenario_seed")
"""Top-level vector info keys of the envs that reset in a step: they go to ``reset_infos``, not the step's infos."""


def _item(value: Any, i: int) -> Any:
    """Entry ``i`` of a vector-format info value (an array, or a dict of arrays), as the single env gives it."""
    if isinstance(value, dict):
        return {key: _item(v, i) for key, v in value.items()}
    entry = value[i]
    return entry.item() if isinstance(entry, np.generic) else entry
