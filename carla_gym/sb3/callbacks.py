"""Callbacks of ``train_sb3.py`` besides checkpoints (`carla_gym.sb3.checkpoint.CheckpointEvery`).

- `EvaluateEvery`: a periodic evaluation every ``eval_freq`` env steps, between a model update and
  the next rollout (so it scores the policy that update produced), logged under ``eval/*`` and
  appended to ``evaluations.csv`` (`carla_gym.sb3.evaluations`) as soon as it finishes. The
  evaluation itself is a callable (``train_sb3.py`` passes one that plays the policy through
  ``agents.evaluation``), so this package does not depend on the harness.
- `LogShaping`: the CLIP-shaped return (``rollout/ep_shaped_rew_mean``) and the CLIP similarities
  (``clip/*``) that `carla_gym.reward.VecCLIPShapedReward` puts in the step infos.
- `WallClock`: training wall time over every process of a run (resumes included).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from stable_baselines3.common.callbacks import BaseCallback

from carla_gym.sb3.evaluations import MEASURES, append_row

SHAPING_KEYS = ("clip_sim_pos", "clip_sim_neg", "clip_reward", "env_reward")
"""Step-info keys of `carla_gym.reward.VecCLIPShapedReward` logged as ``clip/<key without clip_>``."""


class WallClock:
    """Training wall time [s] of a run: ``offset`` (the time of earlier processes, from the checkpoint) plus this one's.

    Counts from construction.

    Args:
        offset: Wall time of the run before this process [s].
    """

    def __init__(self, offset: float = 0.0) -> None:
        self.offset = offset
        self._start = time.perf_counter()

    def __call__(self) -> float:
        """The run's training wall time so far [s]."""
        return self.offset + time.perf_counter() - self._start


class EvaluateEvery(BaseCallback):
    """Evaluate every ``eval_freq`` env steps, after the update; log ``eval/*`` and append a row to ``evaluations.csv``.

    An evaluation runs at the start of a rollout, which stable-baselines3 calls after the previous
    rollout's update (PPO and SAC alike: ``learn`` alternates ``collect_rollouts``, whose first
    callback is ``on_rollout_start``, and ``train``), so it scores the policy that update produced,
    the one a checkpoint taken at the same step holds. The evaluations fall on the first rollout
    start at or past each multiple of ``eval_freq`` (a resumed run continues the same grid). The
    end of training is not evaluated here: the caller's final evaluation of the saved model is the
    curve's last point (``train_sb3.py`` writes it with `carla_gym.sb3.evaluations.write_final_row`).

    Args:
        evaluate: Called with no argument; returns a summary row holding every ``measures`` key
            (e.g. ``agents.evaluation.pooled_row``, `carla_gym.sb3.nav_eval.summarise`).
        eval_freq: Env steps between evaluations (>= 1).
        csv_path: The run's ``evaluations.csv``.
        clock: Training wall time so far [s] (e.g. a `WallClock`), written as ``wall_s``.
        measures: Column -> key of the row: `carla_gym.sb3.evaluations.MEASURES` (trolley) or
            `carla_gym.sb3.evaluations.NAV_MEASURES` (navigation).

    Raises:
        ValueError: ``eval_freq`` < 1.
    """

    def __init__(self, evaluate: Callable[[], Mapping[str, float]], eval_freq: int, csv_path: str | os.PathLike,
                 clock: Callable[[], float], measures: Mapping[str, str] = MEASURES) -> None:
        super().__init__()
        if eval_freq < 1:
            raise ValueError(f"eval_freq={eval_freq!r}: must be >= 1")
        self.evaluate, self.eval_freq, self.csv_path, self.clock = evaluate, eval_freq, Path(csv_path), clock
        self.measures = dict(measures)
        self._next = eval_freq

    def _next_after(self, timesteps: int) -> int:
        return (timesteps // self.eval_freq + 1) * self.eval_freq

    def _on_training_start(self) -> None:
        self._next = self._next_after(self.num_timesteps)

    def _on_rollout_start(self) -> None:
        if self.num_timesteps >= self._next:
            self._next = self._next_after(self.num_timesteps)
            row = self.evaluate()
            for column, key in self.measures.items():
                self.logger.record(f"eval/{column}", row[key])
            append_row(self.csv_path, self.num_timesteps, row, self.clock(), self.measures)

    def _on_step(self) -> bool:
        return True


class LogShaping(BaseCallback):
    """Log the shaped episode return and the CLIP similarities of the step infos (nothing without CLIP shaping)."""

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", []):
            if "shaped_episode" in info:
                self.logger.record_mean("rollout/ep_shaped_rew_mean", info["shaped_episode"]["r"])
            for key in SHAPING_KEYS:
                if key in info:
                    self.logger.record_mean(f"clip/{key.removeprefix('clip_')}", info[key])
        return True
