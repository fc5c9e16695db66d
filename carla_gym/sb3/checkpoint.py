"""Checkpoints that resume exactly where the envs live in this process, and statistically elsewhere.

A checkpoint is a folder ``checkpoints/step_<N>/`` written at the start of a rollout (after the
previous update), so nothing is half-done: ``model.zip`` (SB3, including the last observations
and the episode-info buffer), ``replay_buffer.npz`` (SAC: only the filled part of the buffer,
`carla_gym.sb3.replay`) and ``state.pkl``: the torch, numpy and Python random states, the action
space's random state and, for a ``DummyVecEnv`` of embedded-simulator envs or the batched
`carla_gym.sb3.vec_env.CarlaTrolleyVecEnv`, the pickled environments (simulators mid-episode
included; for the batched env its vector env and the ``VecMonitor``'s running episode
statistics). Resuming from it with the same settings continues exactly as the uninterrupted
run would have (same actions, same updates).

Environments that do not live in this process cannot be captured: with a ``SubprocVecEnv``
(other processes) or the ``openenv`` backend (the episode is a server-side session) the resumed
run resets every env (new sessions, seeds drawn from the run's seed and step count), so it
continues statistically equivalently, not bit-identically; `resume` says why.

Only the newest ``keep`` checkpoints are kept, and only the newest holds the replay buffer (the
older ones keep the model, for evaluation). The folder is written under a temporary name,
flushed to disk (``fsync``) and renamed, ``checkpoints/latest`` (also flushed) names the newest
complete one, and older ones are removed only after that, so neither a crash nor a power loss
leaves a half-written or missing checkpoint behind. Should the newest still not read back (a
disk fault), `latest_checkpoint` falls back to the newest older one that does.
"""

from __future__ import annotations

import pickle
import random
import shutil
import zipfile
from pathlib import Path

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper, VecMonitor

from carla_gym.backends.embedded import EmbeddedBackend
from carla_gym.io import replace_durably, write_text_atomic
from carla_gym.sb3.presets import replay_buffer_bytes
from carla_gym.sb3.replay import load_filled, save_filled
from carla_gym.sb3.vec_env import CarlaTrolleyVecEnv

REPLAY_FILE = "replay_buffer.npz"
"""The replay buffer's file in a checkpoint folder (the newest checkpoint only)."""
DEFAULT_KEEP = 2
"""Checkpoints kept by default (``train_sb3.py --keep-checkpoints``): the newest and one before it."""


def envs_reset_reason(venv: VecEnv) -> str | None:
    """Why the envs of ``venv`` cannot be checkpointed (None: they can, exactly).

    Only envs in this process (a ``DummyVecEnv`` or the batched `carla_gym.sb3.vec_env.CarlaTrolleyVecEnv`)
    whose simulator is the embedded one (`CarlaTrolley-v0` on the embedded backend, `CarlaNavigation-v0`)
    pickle with their episode state; a subprocess or a
    remote OpenEnv session cannot travel in a pickle.
    """
    from carla_gym.envs.navigation import CarlaNavigationEnv

    base = venv.unwrapped  # below every VecEnvWrapper
    if isinstance(base, CarlaTrolleyVecEnv):  # embedded worlds in this process's arrays
        return None
    if not isinstance(base, DummyVecEnv):
        return f"environments restart ({type(base).__name__} envs live in other processes)"
    if not all(isinstance(getattr(env.unwrapped, "backend", None), EmbeddedBackend)
               or isinstance(env.unwrapped, CarlaNavigationEnv) for env in base.envs):
        return "environments restart with new sessions (remote OpenEnv episodes cannot be saved)"
    return None


def _monitors(venv: VecEnv) -> list[VecMonitor]:
    """The ``VecMonitor`` wrappers of ``venv``, outermost first."""
    found = []
    while isinstance(venv, VecEnvWrapper):
        if isinstance(venv, VecMonitor):
            found.append(venv)
        venv = venv.venv
    return found


def capture_envs(venv: VecEnv) -> bytes:
    """The pickled envs of ``venv`` (`envs_reset_reason` is None), mid-episode.

    A ``DummyVecEnv``: its list of envs (each ``Monitor`` with its running episode). The batched
    `carla_gym.sb3.vec_env.CarlaTrolleyVecEnv`: its vector env (the worlds' arrays, per-env random
    generators, steer filter) and the running episode returns and lengths of its ``VecMonitor``.
    """
    base = venv.unwrapped
    if isinstance(base, CarlaTrolleyVecEnv):
        monitors = [(m.episode_returns, m.episode_lengths, m.episode_count) for m in _monitors(venv)]
        return pickle.dumps({"batched": base.vector, "monitors": monitors})
    return pickle.dumps(base.envs)


def restore_envs(venv: VecEnv, blob: bytes, checkpoint: Path) -> None:
    """Put the envs `capture_envs` pickled back into ``venv`` (built with the run's settings).

    Raises:
        ValueError: The checkpoint's envs do not fit ``venv`` (kind or number; the message names both).
    """
    saved = pickle.loads(blob)  # noqa: S301 - this run's own file
    base = venv.unwrapped
    batched = isinstance(saved, dict) and "batched" in saved
    if batched != isinstance(base, CarlaTrolleyVecEnv):
        raise ValueError(f"{checkpoint}: its envs are {'batched' if batched else 'single envs'}, the run's vec env is "
                         f"{type(base).__name__}; resume with the run's own --vec-env (its config.json)")
    count = saved["batched"].num_envs if batched else len(saved)
    if count != venv.num_envs:
        raise ValueError(f"{checkpoint}: {count} envs saved, {venv.num_envs} given")
    if not batched:
        base.envs = saved
        return
    base.vector = saved["batched"]
    for monitor, (returns, lengths, count) in zip(_monitors(venv), saved["monitors"], strict=True):
        monitor.episode_returns, monitor.episode_lengths, monitor.episode_count = returns, lengths, count


def save_checkpoint(model, folder: Path, extra: dict | None = None, keep: int = DEFAULT_KEEP) -> Path:
    """Write a checkpoint of ``model`` (and its envs) into ``folder/step_<N>``; returns that path.

    Args:
        model: An SB3 PPO or SAC model with its env.
        folder: The run's ``checkpoints`` folder.
        extra: More picklable state of the caller (e.g. elapsed wall time, shaping state).
        keep: Checkpoints to keep (>= 1), see `prune`.

    Raises:
        ValueError: ``keep`` < 1 (nothing is written).
    """
    if keep < 1:
        raise ValueError(f"keep={keep!r}: must be >= 1 (the newest checkpoint is needed to resume)")
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"step_{model.num_timesteps}"
    tmp = folder / f".tmp_step_{model.num_timesteps}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    model.save(tmp / "model.zip")
    if getattr(model, "replay_buffer", None) is not None:
        save_filled(model.replay_buffer, tmp / REPLAY_FILE)
    venv = model.get_env()
    reason = envs_reset_reason(venv)
    state = {
        "torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
        "action_space": model.action_space.np_random.bit_generator.state if model.action_space.np_random else None,
        "envs": capture_envs(venv) if reason is None else None,
        "envs_reset_reason": reason,
        "num_timesteps": model.num_timesteps,
        "extra": extra or {},
    }
    with open(tmp / "state.pkl", "wb") as f:
        pickle.dump(state, f)
    shutil.rmtree(final, ignore_errors=True)
    replace_durably(tmp, final)  # on disk before `latest` names it and older checkpoints go
    write_text_atomic(folder / "latest", final.name)
    prune(folder, keep, final)
    return final


def replay_buffer_note(model, keep: int) -> str | None:
    """What SAC's replay buffer takes in memory and in checkpoints on disk (None without one: PPO).

    Memory: `carla_gym.sb3.presets.replay_buffer_bytes` for ``model.buffer_size`` transitions of
    its observation space. Disk: only the filled part, in the newest checkpoint only, and twice
    that while a checkpoint is written (the new buffer is written before the previous one's goes).

    Args:
        model: An SB3 model; off-policy ones have ``buffer_size``.
        keep: Checkpoints kept (``--keep-checkpoints``).
    """
    if not hasattr(model, "buffer_size"):
        return None
    space = model.observation_space
    obs_bytes = sum(int(np.prod(s.shape)) * s.dtype.itemsize
                    for s in (space.spaces.values() if hasattr(space, "spaces") else [space]))
    gib = replay_buffer_bytes(model.buffer_size, obs_bytes) / 2**30
    return (f"SAC replay buffer: {model.buffer_size} transitions, about {gib:.2f} GiB in memory when full; on disk "
            f"only its filled part, in the newest checkpoint only ({REPLAY_FILE}: up to {gib:.2f} GiB, and up to "
            f"{2 * gib:.2f} GiB while a checkpoint is written, before the previous one's is deleted; {keep} "
            "checkpoints kept)")


def _step(path: Path) -> int | None:
    number = path.name.removeprefix("step_")
    return int(number) if path.name.startswith("step_") and number.isdigit() else None


def prune(folder: Path, keep: int, latest: Path) -> None:
    """Keep ``latest`` (just written and named in ``folder/latest``) and the ``keep - 1`` before it.

    Only ``latest`` keeps its replay buffer. Also removes leftovers of a crash: temporary folders
    and checkpoints newer than ``latest`` (written by a run that crashed before naming them, and
    replaced when the resumed run gets there).
    """
    newest = _step(latest)
    for tmp in folder.glob(".tmp_step_*"):
        shutil.rmtree(tmp, ignore_errors=True)
    older = sorted((p for p in folder.glob("step_*") if _step(p) is not None and _step(p) < newest), key=_step)
    kept = older[max(len(older) - (keep - 1), 0):]
    for path in folder.glob("step_*"):
        if path != latest and path not in kept:
            shutil.rmtree(path, ignore_errors=True)
    for path in kept:
        (path / REPLAY_FILE).unlink(missing_ok=True)


def loads(checkpoint: Path) -> bool:
    """Whether ``checkpoint`` reads back: ``state.pkl`` unpickles, ``model.zip`` and any replay buffer open.

    A file cut short (a crash or a full disk while it was written, a power loss before it reached
    the disk) fails here; the archives' members are not decompressed.
    """
    try:
        with open(checkpoint / "state.pkl", "rb") as f:
            state = pickle.load(f)  # noqa: S301 - this run's own file
        for name in ("model.zip", *((REPLAY_FILE,) if (checkpoint / REPLAY_FILE).exists() else ())):
            with zipfile.ZipFile(checkpoint / name):
                pass
    except (OSError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile, ValueError, TypeError, AttributeError,
            ImportError, IndexError):
        return False
    return isinstance(state, dict) and "num_timesteps" in state


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest checkpoint in ``folder`` that reads back (`loads`), or None.

    That is the one ``latest`` names; if it does not read back, the newest older one that does
    (SAC: without a replay buffer, which only the newest keeps; `resume` says so). Without a
    readable ``latest``, every ``step_<N>`` folder is a candidate: each was complete when renamed.
    """
    try:
        name = (folder / "latest").read_text().strip()
    except OSError:
        name = ""
    named = folder / name if _step(folder / name) is not None else None
    newest = _step(named) if named is not None else None
    candidates = sorted((p for p in folder.glob("step_*") if p.is_dir() and _step(p) is not None
                         and (newest is None or _step(p) < newest)), key=_step, reverse=True)
    for path in ([named] if named is not None else []) + candidates:
        if path.is_dir() and loads(path):
            return path
    return None


def restore_state(model, checkpoint: Path) -> tuple[str | None, dict]:
    """Restore the random states and the envs: exactly where they were saved, else by resetting them.

    Returns:
        Why the envs were reset (None: restored exactly), and the ``extra`` state saved with the
        checkpoint.
    """
    with open(checkpoint / "state.pkl", "rb") as f:
        state = pickle.load(f)  # noqa: S301 - this run's own file
    venv = model.get_env()
    reason = envs_reset_reason(venv) or state.get("envs_reset_reason")
    if reason is None:
        restore_envs(venv, state["envs"], checkpoint)
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if state["action_space"] is not None and model.action_space.np_random is not None:
        model.action_space.np_random.bit_generator.state = state["action_space"]
    if reason is not None:  # new episodes, with seeds this run has not used at its start
        venv.seed((model.seed or 0) + model.num_timesteps)
        model._last_obs = venv.reset()
        model._last_episode_starts = np.ones(venv.num_envs, dtype=bool)
    return reason, state.get("extra", {})


def resume(algo_cls, checkpoint: Path, venv: VecEnv, tensorboard_log: str | None = None):
    """Load a checkpoint into a model on ``venv`` (built with the run's settings) ready to continue.

    Restores the model, the replay buffer (SAC), the random states, the envs (see
    `restore_state`) and, when they were restored exactly, the CLIP shaping state (``extra["shaper"]``
    on a ``venv`` with a ``shaper``).

    Returns:
        ``(model, notes, extra)``: the model, why the resumed run is not bit-identical (empty:
        it is), and the ``extra`` state saved with the checkpoint.

    Raises:
        ValueError: The checkpoint does not fit ``venv`` (number of envs, replay buffer shapes).
    """
    model = algo_cls.load(checkpoint / "model.zip", env=venv, device="cpu", force_reset=False)
    model.tensorboard_log = tensorboard_log
    if getattr(model, "replay_buffer", None) is not None and (checkpoint / REPLAY_FILE).is_file():
        load_filled(model.replay_buffer, checkpoint / REPLAY_FILE)
    reason, extra = restore_state(model, checkpoint)
    notes = [] if reason is None else [reason]
    if reason is None and "shaper" in extra and hasattr(venv, "shaper"):
        venv.shaper.set_state(extra["shaper"])
    if getattr(model, "replay_buffer", None) is not None and not (checkpoint / REPLAY_FILE).is_file():
        notes.append(f"the replay buffer starts empty ({checkpoint.name} has none: only the newest checkpoint keeps "
                     "it, and the newest did not read back)")
    if getattr(model, "use_sde", False):
        notes.append("gSDE noise is redrawn")
    return model, notes, extra


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
        keep: Checkpoints kept (>= 1, see `prune`).
    """

    def __init__(self, folder: Path, every: int, extra=None, keep: int = DEFAULT_KEEP) -> None:
        super().__init__()
        self.folder, self.every, self.extra, self.keep = folder, every, extra or dict, keep
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

    def _save(self) -> None:
        save_checkpoint(self.model, self.folder, self.extra(), self.keep)

    def _on_training_start(self) -> None:
        import signal
        import threading

        self._next = (self.num_timesteps // self.every + 1) * self.every
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGINT, self.request_stop)

    def _on_rollout_start(self) -> None:
        if self.stop_requested:
            self._save()
            self.interrupted = True
        elif self.num_timesteps >= self._next:
            self._save()
            self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        return not self.interrupted

    def _on_training_end(self) -> None:
        import signal

        if self._previous_handler is not None:
            signal.signal(signal.SIGINT, self._previous_handler)
            self._previous_handler = None
        if not self.interrupted:
            self._save()
