"""Learning curves of a GRPO run: the held-out evaluation every few steps and the training reward, as CSV rows.

`LearningCurve` is a transformers ``TrainerCallback`` for ``train_grpo.py`` (importing this module does not
import transformers; the class is built on first use):

- ``eval_curve.csv``: before the first step and every ``every`` optimizer steps (and after the last),
  the model plays one episode per seed of each evaluation scenario (greedy, batched:
  `carla_gym.llm.rollout.play_episodes`; ``train_grpo.py`` gives the final evaluation's env seeds
  10000, 10001, ...), and a row is appended as soon as it is measured:
  ``step``, ``env_steps`` (environment steps the training rollouts simulated so far, all processes: every
  ``env.step`` of ``ticks_per_action`` ticks, the model's tool calls and the play-out after its last call alike,
  the unit SB3 counts in its ``timesteps``), ``tool_calls`` (the model's own tool decisions among them),
  ``wall_s`` (seconds since the run's clock started: the warm start and the evaluations included),
  ``success_rate`` (``outcome_success``: the simulated best outcome reached), ``mean_reward`` (the
  training reward of the episode), ``pedestrians_hit`` (mean), ``road_departure_rate``, ``rubric_success``
  (upstream's classified-action success), ``no_tool_call_rate`` and ``eval_s``.
- ``train_curve.csv``: one row per logged step of the training rollouts: ``step``, ``env_steps``,
  ``tool_calls`` (both as above), ``wall_s``, ``reward`` (TRL's mean reward), ``outcome_success``
  (``episode/outcome_success``) and ``tool_calls_per_rollout`` (``episode/tool_calls``: every attempted call).

With several processes (``accelerate launch``) every process counts its own steps, the counts are
summed over processes (on the process group's device: CUDA for NCCL), and only the main process evaluates and
writes.
"""

from __future__ import annotations

import csv
import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

EVAL_COLUMNS = ("step", "env_steps", "tool_calls", "wall_s", "success_rate", "mean_reward", "pedestrians_hit",
                "road_departure_rate", "rubric_success", "no_tool_call_rate", "eval_s")
"""Columns of ``eval_curve.csv``."""
TRAIN_COLUMNS = ("step", "env_steps", "tool_calls", "wall_s", "reward", "outcome_success", "tool_calls_per_rollout")
"""Columns of ``train_curve.csv``."""


def append_row(path: Path, columns: Sequence[str], row: dict[str, Any]) -> None:
    """Append ``row`` to the CSV file ``path`` (header first when the file is new), and flush it."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        if new:
            writer.writeheader()
        writer.writerow({k: row.get(k) for k in columns})


def summarise(records: Sequence[dict]) -> dict[str, float]:
    """The evaluation figures of `carla_gym.llm.rollout.play_episodes` records.

    Returns:
        ``success_rate``, ``mean_reward``, ``pedestrians_hit``, ``road_departure_rate``, ``rubric_success``
        and ``no_tool_call_rate`` (episodes whose model took no env decision), each a mean over ``records``.

    Examples:
        >>> rec = {"reward": 1.0, "actions": ["observe"], "outcome": {"outcome_success": True, "success": False,
        ...        "actual_pedestrians_hit": 0, "road_departure": False}}
        >>> summarise([rec, {**rec, "reward": 0.0, "actions": [], "outcome": {**rec["outcome"],
        ...            "outcome_success": False, "actual_pedestrians_hit": 2}}])["pedestrians_hit"]
        1.0
    """
    def mean(values):
        return float(np.mean([float(v) for v in values]))

    outcomes = [r["outcome"] for r in records]
    return {"success_rate": mean(o["outcome_success"] for o in outcomes),
            "mean_reward": mean(r["reward"] for r in records),
            "pedestrians_hit": mean(o["actual_pedestrians_hit"] for o in outcomes),
            "road_departure_rate": mean(o["road_departure"] for o in outcomes),
            "rubric_success": mean(o["success"] for o in outcomes),
            "no_tool_call_rate": mean(not r["actions"] for r in records)}


def sum_over_processes(counts: Sequence[int]) -> tuple[int, ...]:
    """``counts`` summed element-wise over the processes of a ``torch.distributed`` run (themselves when not).

    Every process must call it at the same point (one all-reduce). The tensor lives on the process group's
    device: the current CUDA device under NCCL (which reduces CUDA tensors only), the CPU otherwise (gloo).

    >>> sum_over_processes([7, 2])
    (7, 2)
    """
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return tuple(int(c) for c in counts)
    nccl = dist.get_backend() == "nccl"
    device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
    total = torch.tensor([int(c) for c in counts], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    return tuple(int(c) for c in total.tolist())


@functools.cache
def _learning_curve_class():
    from transformers import TrainerCallback

    class LearningCurve(_LearningCurve, TrainerCallback):
        __doc__ = _LearningCurve.__doc__

    return LearningCurve


def __getattr__(name: str):
    if name == "LearningCurve":  # a transformers TrainerCallback, built on first use (transformers is slow to import)
        return _learning_curve_class()
    raise AttributeError(name)


class _LearningCurve:
    """Trainer callback writing ``eval_curve.csv`` and ``train_curve.csv`` into ``out`` (see the module docstring).

    Args:
        out: Run directory.
        scenarios: Evaluation scenarios (e.g. ``["trolley_generated_test"]``).
        seeds: Episode seeds of each scenario's evaluation (at least one; ``train_grpo.py``: the final
            evaluation's, ``agents.records.episode_seed(EVAL_SEED, i)`` = 10000 + i).
        every: Optimizer steps between evaluations (>= 1).
        counts: Returns this process's ``(env_steps, tool_calls)`` of the training rollouts so far
            (``sum(env.env_steps_total ...)``, ``sum(env.decisions_total ...)`` over ``factory.instances``).
        make_chat: Builds the greedy chat policy from the model (`carla_gym.llm.rollout.TransformersChat`).
        make_env: Builds one evaluation environment (a text `carla_gym.llm.tools.CarlaToolEnv` with the run's
            ticks and reward mode).
        max_tool_calling_iterations: Turns whose tool calls run (the training's).
        clock_start: ``time.perf_counter()`` value the ``wall_s`` column counts from (default: now).
        log: Called with each evaluation row (e.g. print).

    Raises:
        ValueError: No seeds, or ``every`` below 1.
    """

    def __init__(self, out: str | Path, scenarios: Sequence[str], seeds: Sequence[int], every: int,
                 counts: Callable[[], tuple[int, int]], make_chat: Callable, make_env: Callable,
                 max_tool_calling_iterations: int, clock_start: float | None = None,
                 log: Callable[[dict], Any] | None = None) -> None:
        if not seeds:
            raise ValueError("seeds=[]: evaluate at least one episode per scenario")
        if every < 1:
            raise ValueError(f"every={every!r}: evaluate every 1 or more steps")
        self.out, self.scenarios, self.seeds, self.every = Path(out), list(scenarios), list(seeds), every
        self._counts, self._make_chat, self._make_env = counts, make_chat, make_env
        self._turns = max_tool_calling_iterations
        self.clock_start = time.perf_counter() if clock_start is None else clock_start
        self._log = log
        self._envs: list = []
        self._evaluated_step = -1
        self.rows: list[dict] = []

    def counts(self) -> dict[str, int]:
        """``env_steps`` and ``tool_calls`` of the training rollouts so far, summed over processes (a collective)."""
        env_steps, tool_calls = sum_over_processes(self._counts())
        return {"env_steps": env_steps, "tool_calls": tool_calls}

    def evaluate(self, model, step: int, counts: dict[str, int]) -> dict:
        """Play the evaluation episodes with ``model`` (greedy), append the ``eval_curve.csv`` row and return it.

        Args:
            model: The policy model (switched to eval mode for the evaluation, then restored).
            step: The optimizer step.
            counts: `counts` of this step.
        """
        from carla_gym.llm.rollout import play_episodes

        start = time.perf_counter()
        while len(self._envs) < len(self.seeds):
            self._envs.append(self._make_env())
        was_training = model.training
        model.eval()
        try:
            chat = self._make_chat(model)
            records = [r for name in self.scenarios
                       for r in play_episodes(chat, self._envs, name, self.seeds, self._turns)]
        finally:
            model.train(was_training)
        row = {"step": step, **counts, **summarise(records),
               "eval_s": round(time.perf_counter() - start, 3),
               "wall_s": round(time.perf_counter() - self.clock_start, 3)}
        append_row(self.out / "eval_curve.csv", EVAL_COLUMNS, row)
        self.rows.append(row)
        self._evaluated_step = step
        if self._log is not None:
            self._log(row)
        return row

    def _maybe_evaluate(self, state, model, force: bool = False) -> None:
        due = force or state.global_step % self.every == 0
        if not due or self._evaluated_step == state.global_step:
            return
        counts = self.counts()  # every process takes part in the sum
        if state.is_world_process_zero:
            self.evaluate(model, state.global_step, counts)
        self._evaluated_step = state.global_step

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Evaluate the model before the first step (step 0)."""
        self._maybe_evaluate(state, model, force=True)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        """Evaluate every ``every`` steps."""
        self._maybe_evaluate(state, model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        """Evaluate after the last step (unless that step was just evaluated) and close the environments."""
        self._maybe_evaluate(state, model, force=True)
        self.close()

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Append the training rollouts' figures of a logged step to ``train_curve.csv``."""
        if not logs or "reward" not in logs:
            return
        counts = self.counts()
        if not state.is_world_process_zero:
            return
        append_row(self.out / "train_curve.csv", TRAIN_COLUMNS, {
            "step": state.global_step, **counts,
            "wall_s": round(time.perf_counter() - self.clock_start, 3), "reward": logs.get("reward"),
            "outcome_success": logs.get("episode/outcome_success"),
            "tool_calls_per_rollout": logs.get("episode/tool_calls")})

    def close(self) -> None:
        """Close the evaluation environments."""
        while self._envs:
            self._envs.pop()._close()
