"""SAC's replay buffer on disk: only its filled part, restored to an identical buffer.

stable-baselines3's ``save_replay_buffer`` pickles the whole pre-allocated buffer (2 GiB for
50,000 image transitions even when 200 are filled). `save_filled` writes the filled rows of each
array (``observations``, ``next_observations``, ``actions``, ``rewards``, ``dones``,
``timeouts``; dict observations key by key) and the ``pos``/``full`` flags into one ``.npz``
file; `load_filled` writes them back into a freshly allocated buffer of the same shape. The
unfilled rows of a fresh buffer are zeros, as those of the saved one were, so the restored
buffer is identical array for array and sampling continues exactly.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
"""Array attributes of SB3's ``ReplayBuffer`` and ``DictReplayBuffer`` (``stable_baselines3.common.buffers``)."""
_SEP = "::"  # between a field and a dict observation key in the archive's names


def filled_rows(buffer) -> int:
    """Rows of ``buffer`` that hold data: all when full, else ``pos`` (+1 with ``optimize_memory_usage``).

    With ``optimize_memory_usage`` SB3 keeps a transition's next observation in the following
    row of ``observations``, so the row at ``pos`` is part of the data too.
    """
    if buffer.full:
        return buffer.buffer_size
    return min(buffer.pos + int(getattr(buffer, "optimize_memory_usage", False)), buffer.buffer_size)


def _arrays(buffer) -> dict[str, np.ndarray]:
    out = {}
    for name in FIELDS:
        value = getattr(buffer, name, None)
        if isinstance(value, dict):
            out.update({f"{name}{_SEP}{key}": array for key, array in value.items()})
        elif value is not None:
            out[name] = value
    return out


def save_filled(buffer, path: str | os.PathLike) -> Path:
    """Write the filled part of an SB3 replay buffer to ``path`` (an uncompressed ``.npz``).

    The file's size is proportional to the filled transitions (about
    `carla_gym.sb3.presets.replay_buffer_bytes` per transition), not to ``buffer_size``.

    Returns:
        The path written.
    """
    path = Path(path)
    rows = filled_rows(buffer)
    arrays = {name: array[:rows] for name, array in _arrays(buffer).items()}
    with open(path, "wb") as f:  # np.savez on a file object keeps the name as given
        np.savez(f, pos=np.int64(buffer.pos), full=np.bool_(buffer.full),
                 buffer_size=np.int64(buffer.buffer_size), **arrays)
    return path


def load_filled(buffer, path: str | os.PathLike) -> None:
    """Restore what `save_filled` wrote into ``buffer`` (same buffer size, envs and spaces).

    Raises:
        ValueError: The file's buffer size, arrays or shapes differ from ``buffer``'s (the message
            names the first difference); ``buffer`` is left unchanged.
    """
    targets = _arrays(buffer)
    with np.load(path, allow_pickle=False) as data:
        size = int(data["buffer_size"])
        if size != buffer.buffer_size:
            raise ValueError(f"{path}: a replay buffer of {size} rows (of n_envs transitions each), this model's "
                             f"holds {buffer.buffer_size}")
        names = set(data.files) - {"pos", "full", "buffer_size"}
        if names != set(targets):
            raise ValueError(f"{path}: arrays {sorted(names)}, this model's buffer has {sorted(targets)}")
        loaded = {name: data[name] for name in names}
        pos, full = int(data["pos"]), bool(data["full"])
    for name, array in loaded.items():
        target = targets[name]
        if array.shape[1:] != target.shape[1:] or array.dtype != target.dtype or len(array) > len(target):
            raise ValueError(f"{path}: {name} is {array.dtype} {array.shape}, this model's buffer holds "
                             f"{target.dtype} {target.shape}")
    for name, array in loaded.items():
        targets[name][: len(array)] = array
        targets[name][len(array):] = 0
    buffer.pos, buffer.full = pos, full
