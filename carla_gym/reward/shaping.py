"""CLIP reward shaping for `CarlaTrolley-v0`: one rule set, used by the Gymnasium and SB3 wrappers.

The env renders VLM-RL's top-down reward camera into ``info["reward_frame"]`` when created with
``reward_frame_size`` (the wrappers check this). Per step the shaper takes the frames of all
envs, scores them in one call of the reward model, and replaces the env reward with the CLIP
reward (``mode="replace"``, VLM-RL) or adds ``weight`` times it (``mode="add"``). With
``synthesis=True`` the CLIP reward is VLM-RL's hierarchical reward (`heads.synthesis`: the CLG
score sets the desired speed, times the centring, angle and stability factors; a negative env
reward is kept in replace mode; the stability factor covers the last 2 s of simulated time; the
centring and stability factors use ``info["lane_offset"]``, the distance from the nearest road
lane's centre, so they fall off the road). The ``"lord_speed"`` head gets ``info["speed_kmh"]``. The
frame is removed from ``info`` (it is large); ``info`` gains:

| Key | Meaning |
|---|---|
| ``env_reward`` | the env's own reward |
| ``reward_terms`` | replaced: named terms whose sum is the shaped reward (below) |
| ``clip_score`` | the head's score of the frame |
| ``clip_reward`` | the CLIP reward (the score, or the synthesis) |
| ``clip_sim_<role>`` | cosine similarity to each prompt the head uses (``pos``, ``neg``, ...) |
| ``shaped_episode`` | on the last step: ``{"r": shaped return, "l": length}`` |

``reward_terms``: in ``"add"`` mode the env's terms (`carla_gym.envs.rewards`) plus ``clip`` =
``weight`` x the CLIP reward; in ``"replace"`` mode ``{"clip": CLIP reward}``, or the env's terms
where synthesis keeps a negative env reward. The shaped reward is computed as the sum of the terms
(Python's ``sum``, in order), so they always add up to it exactly (the SB3 VecEnv wrapper returns
float32 rewards: the sums rounded to float32). An env whose info has no ``reward_terms``, or whose
terms do not add up to the reward the shaper receives (another reward wrapper below), counts as
one term ``env``.

An env whose infos carry VLM-RL's factors itself (`ENV_FACTORS`: `CarlaNavigation-v0`, where the route
is known) gets them multiplied exactly as VLM-RL does; the difference below concerns the others.

Difference from VLM-RL: the angle factor uses the heading relative to the road, defined at
standstill too (VLM-RL measures it against the velocity and returns 0 when stopped).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from carla_gym.reward import heads as H
from carla_gym.reward.model import CLIPRewardModel

ENV_FACTORS = ("centering_factor", "angle_factor", "distance_std_factor")
"""Info keys of an env that computes VLM-RL's factors itself (`CarlaNavigation-v0`, route_task): the synthesis
multiplies these exactly as VLM-RL does (``info`` at the same step) instead of its lane-offset stand-ins, in
`heads.synthesis` order. The first key decides."""

MODES = ("replace", "add")
"""Shaping modes: replace the env reward (VLM-RL) or add the weighted CLIP reward to it."""


def check_shaping(mode: str, weight: float, synthesis: bool, head: str) -> None:
    """Check `RewardShaper`'s options, ``head`` being the reward model's (a command line refuses them early).

    Raises:
        ValueError: Unknown mode, synthesis with another head, a non-finite weight, or a weight
            other than 1 in ``"replace"`` mode (a `carla_gym.hints.worded` error: a command line
            can name its own flags with `carla_gym.hints.as_flags`).
    """
    from carla_gym.hints import worded

    if mode not in MODES:
        raise worded(ValueError, lambda n: f"{n('mode', mode)}: choose one of {list(MODES)}")
    if synthesis and head != "clg":
        raise worded(ValueError, lambda n: f"{n('synthesis', True)} needs the 'clg' head, the model uses {head!r}")
    if isinstance(weight, bool) or not isinstance(weight, int | float | np.floating) or not np.isfinite(weight):
        raise worded(ValueError, lambda n: f"{n('weight', weight)}: must be a finite number")
    if mode == "replace" and weight != 1.0:
        raise worded(ValueError, lambda n: f"{n('weight', weight)} applies to {n('mode', 'add')} only; "
                                           f"{n('mode', 'replace')} uses the CLIP reward as is")


class RewardShaper:
    """Shaping state of N envs; see the module docstring.

    Args:
        model: The reward model.
        n_envs: Number of envs, >= 1.
        mode: One of `MODES`.
        weight: Factor on the CLIP reward in ``"add"`` mode (finite).
        synthesis: Use VLM-RL's hierarchical synthesis (needs the ``"clg"`` head).

    Raises:
        ValueError: Bad options (`check_shaping`).
    """

    def __init__(self, model: CLIPRewardModel, n_envs: int, mode: str = "replace", weight: float = 1.0,
                 synthesis: bool = False) -> None:
        check_shaping(mode, weight, synthesis, model.head)
        self.model, self.mode, self.weight, self.synthesis = model, mode, float(weight), bool(synthesis)
        self._offsets = [deque() for _ in range(n_envs)]  # (sim_time [s], |lane offset| [m])
        self._returns = np.zeros(n_envs)
        self._lengths = np.zeros(n_envs, dtype=np.int64)

    def get_state(self) -> dict:
        """The per-env episode state (for checkpoints)."""
        return {"offsets": [list(d) for d in self._offsets], "returns": self._returns.copy(),
                "lengths": self._lengths.copy()}

    def set_state(self, state: dict) -> None:
        """Restore what `get_state` returned."""
        self._offsets = [deque(d) for d in state["offsets"]]
        self._returns, self._lengths = state["returns"].copy(), state["lengths"].copy()

    def reset(self, index: int) -> None:
        """Forget the episode of env ``index``."""
        self._offsets[index].clear()
        self._returns[index], self._lengths[index] = 0.0, 0

    def shape(self, infos: list[dict], env_rewards, dones) -> np.ndarray:
        """Shaped rewards of one step of every env (updates ``infos`` in place).

        Args:
            infos: The N step infos, each with ``reward_frame``.
            env_rewards: The N env rewards.
            dones: Whether each env's episode ended at this step.

        Returns:
            float64 (N,) shaped rewards.

        Raises:
            KeyError: An info without ``reward_frame`` (create the env with ``reward_frame_size``).
        """
        try:
            frames = np.stack([info.pop("reward_frame") for info in infos])
        except KeyError:
            raise KeyError("info has no 'reward_frame': create the env with reward_frame_size=224 (or another "
                           "size) so that it renders the top-down reward camera") from None
        env_rewards = np.asarray(env_rewards, dtype=np.float64)
        scores = self.model.score(frames, speed_kmh=np.array([info["speed_kmh"] for info in infos]))
        clip_reward = scores.reward
        if self.synthesis and all(ENV_FACTORS[0] in info for info in infos):  # the env's own VLM-RL factors
            clip_reward = H.synthesis(
                scores.reward, [info["speed_kmh"] for info in infos],
                *(np.array([info[key] for info in infos], dtype=np.float64) for key in ENV_FACTORS),
                env_rewards if self.mode == "replace" else 0.0)
        elif self.synthesis:
            for offsets, info in zip(self._offsets, infos, strict=True):
                now = info["sim_time"]
                offsets.append((now, abs(info["lane_offset"])))
                while offsets and offsets[0][0] <= now - H.STABILITY_WINDOW_S:
                    offsets.popleft()
            clip_reward = H.synthesis(
                scores.reward,
                [info["speed_kmh"] for info in infos],
                H.centering_factor([info["lane_offset"] for info in infos]),
                H.angle_factor([info["yaw"] for info in infos]),
                np.array([H.stability_factor([d for _, d in offsets]) for offsets in self._offsets]),
                # in add mode the env reward is added below: do not also keep it here
                env_rewards if self.mode == "replace" else 0.0,
            )
        terms = [self._terms(info, float(env_rewards[i]), float(clip_reward[i])) for i, info in enumerate(infos)]
        shaped = np.array([sum(t.values()) for t in terms], dtype=np.float64)
        self._returns += shaped
        self._lengths += 1
        for i, info in enumerate(infos):
            info["reward_terms"] = terms[i]
            info["env_reward"] = float(env_rewards[i])
            info["clip_score"] = float(scores.reward[i])
            info["clip_reward"] = float(clip_reward[i])
            for role, sims in scores.similarities.items():
                info[f"clip_sim_{role}"] = float(sims[i])
            if dones[i]:
                info["shaped_episode"] = {"r": float(self._returns[i]), "l": int(self._lengths[i])}
                self.reset(i)
        return shaped

    def _terms(self, info: dict, env_reward: float, clip_reward: float) -> dict[str, float]:
        """The named terms of one env's shaped reward (module docstring); their sum is the shaped reward."""
        env_terms = info.get("reward_terms")
        if env_terms is None or sum(env_terms.values()) != env_reward:
            env_terms = {"env": env_reward}
        if self.mode == "add":
            return {**env_terms, "clip": self.weight * clip_reward}
        if self.synthesis and env_reward < 0.0:  # synthesis kept the env reward (VLM-RL's penalty)
            return dict(env_terms)
        return {"clip": clip_reward}


def require_reward_frames(size: int | None) -> None:
    """Raise a clear error when an env does not render the reward frame.

    Raises:
        ValueError: ``size`` is None.
    """
    if size is None:
        raise ValueError("CLIP shaping needs the top-down reward camera: create the env with "
                         "gym.make('CarlaTrolley-v0', reward_frame_size=224, ...)")
