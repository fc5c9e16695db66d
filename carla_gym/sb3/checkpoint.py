"""Checkpoints that resume exactly: model, replay buffer, random states and (in-process) env states.

A checkpoint is a folder ``checkpoints/step_<N>/`` written at the start of a rollout (after the
previous update), so nothing is half-done: ``model.zip`` (SB3, including the last observations
and the episode-info buffer), ``replay_buffer.pkl`` (SAC), and ``state.pkl``: the torch, numpy
and Python random states, the action space's random state and, for a ``DummyVecEnv``, the
pickled environments (simulators mid-episode included). Resuming from it with the same
settings continues exactly as the uninterrupted run would have (same actions, same updates).
With a ``SubprocVecEnv`` the environments cannot be captured: the resumed run resets them, so it
continues statistically, not bit-for-bit. The folder is written under a temporary name and
renamed, and ``checkpoints/latest`` names the newest complete one, so a crash never leaves a
half-written checkpoint behind.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from carla_gym.io import write_text_atomic


def _dummy(venv: VecEnv) -> DummyVecEnv | None:
    base = venv.unwrapped  # below every VecEnvWrapper
    return base if isinstance(base, DummyVecEnv) else None


def save_checkpoint(model, folder: Path, extra: dict | None = None) -> Path:
    """Write a checkpoint of ``model`` (and its env) into ``folder/step_<N>``; returns that path.

    ``extra``: more picklable state of the caller (e.g. elapsed wall time, shaping state).
    """
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step_{model.num_timesteps}"
    tmp = folder / f".tmp_step_{model.num_timesteps}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save(tmp / "model.zip")
    if getattr(model, "replay_buffer", None) is not None:
        model.save_replay_buffer(tmp / "replay_buffer.pkl")
    dummy = _dummy(model.get_env())
    state = {
        "torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
        "action_space": model.action_space.np_random.bit_generator.state if model.action_space.np_random else None,
        "envs": pickle.dumps(dummy.envs) if dummy is not None else None,
        "num_timesteps": model.num_timesteps,
        "extra": extra or {},
    }
    with open(tmp / "state.pkl", "wb") as f:
        pickle.dump(state, f)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    write_text_atomic(folder / "latest", final.name)
    return final


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete checkpoint in ``folder``, or None."""
    try:
        name = (folder / "latest").read_text().strip()
    except FileNotFoundError:
        return None
    path = folder / name
    return path if (path / "state.pkl").is_file() else None


def restore_state(model, checkpoint: Path) -> tuple[bool, dict]:
    """Restore random states and (for a DummyVecEnv) the environments.

    Returns:
        Whether the environments were restored, and the ``extra`` state saved with the checkpoint.
    """
    with open(checkpoint / "state.pkl", "rb") as f:
        state = pickle.load(f)  # noqa: S301 - this run's own file
    restored = False
    dummy = _dummy(model.get_env())
    if dummy is not None and state["envs"] is not None:
        envs = pickle.loads(state["envs"])  # noqa: S301
        if len(envs) == len(dummy.envs):
            dummy.envs = envs
            restored = True
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if state["action_space"] is not None and model.action_space.np_random is not None:
        model.action_space.np_random.bit_generator.state = state["action_space"]
    return restored, state.get("extra", {})


class CheckpointEvery(BaseCallback):
    """Save resumable checkpoints between updates: every ``every`` env steps and at the end.

    Checkpoints are taken at rollout starts (after the previous update) and when training ends.
    Ctrl-C (SIGINT) during training only raises a flag: the current rollout finishes, a checkpoint
    is saved at the next rollout start (a clean point: no episode half-reset, no rollout half
    collected) and training stops; ``interrupted`` is then True. A second Ctrl-C aborts at once
    without saving (the last periodic checkpoint stays the latest).

    Args:
        folder: The run's ``checkpoints`` folder.
        every: Env steps between checkpoints (> 0).
        extra: Called at each save; returns more state to store (see `save_checkpoint`).
    """

    def __init__(self, folder: Path, every: int, extra=None) -> None:
        super().__init__()
        self.folder, self.every, self.extra = folder, every, extra or dict
        self._next = None
        self.stop_requested = False
        self.interrupted = False
        self._previous_handler = None

    def request_stop(self, *_args) -> None:
        """SIGINT handler: stop at the next clean point; a second Ctrl-C aborts."""
        if self.stop_requested:
            raise KeyboardInterrupt
        self.stop_requested = True
        print("\nCtrl-C: finishing the current rollout, then saving a checkpoint (Ctrl-C again aborts without "
              "saving)", flush=True)

    def _on_training_start(self) -> None:
        import signal
        import threading

        self._next = (self.num_timesteps // self.every + 1) * self.every
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self.request_stop)

    def _on_rollout_start(self) -> None:
        if self.stop_requested:
            save_checkpoint(self.model, self.folder, self.extra())
            self.interrupted = True
        elif self.num_timesteps >= self._next:
            save_checkpoint(self.model, self.folder, self.extra())
            self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return not self.interrupted

    def _on_training_end(self) -> None:
        import signal

        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None
        if not self.interrupted:
            save_checkpoint(self.model, self.folder, self.extra())
