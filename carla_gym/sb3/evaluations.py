"""``evaluations.csv`` of a ``train_sb3.py`` run: the periodic evaluations, appended, trimmed on resume, read back.

One row per periodic evaluation (`EVAL_COLUMNS`), appended as soon as it finishes (a crash keeps
every finished row). A resumed run redoes the evaluations after its checkpoint, so
`drop_rows_after` removes them first; an empty file (a crash right after creating it) counts as
absent, and the next row then writes the header.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path

from carla_gym.io import write_csv_atomic

EVAL_COLUMNS = ("timesteps", "success_rate", "mean_reward", "mean_actual_hits", "road_departure_rate", "wall_s")
"""Columns of ``evaluations.csv``: rates and means over the evaluation's episodes; ``wall_s``: training time [s]."""
MEASURES = {"success_rate": "success_rate", "mean_reward": "mean_reward", "mean_actual_hits": "actual_pedestrians_hit",
            "road_departure_rate": "road_departure_rate"}
"""Measure columns of `EVAL_COLUMNS` -> their key in an evaluation summary row (`agents.summary`'s ``all`` row)."""


def has_rows(csv_path: str | os.PathLike) -> bool:
    """Whether ``csv_path`` exists and holds at least one line (a crash can leave it empty: then it is absent)."""
    path = Path(csv_path)
    return path.is_file() and path.stat().st_size > 0


def append_row(csv_path: str | os.PathLike, timesteps: int, row: Mapping[str, float], wall_s: float) -> None:
    """Append one evaluation (the header first into a new or empty file) and flush it.

    Args:
        csv_path: The run's ``evaluations.csv``.
        timesteps: Env steps trained when the evaluation ran.
        row: An evaluation summary row holding every `MEASURES` key (e.g. `agents.summary`'s ``all`` row).
        wall_s: Training wall time so far [s].

    Raises:
        KeyError: ``row`` lacks a `MEASURES` key (nothing is written).
    """
    values = [f"{row[key]:.4f}" for key in MEASURES.values()]
    new = not has_rows(csv_path)
    with open(csv_path, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(EVAL_COLUMNS)
        writer.writerow([int(timesteps), *values, f"{wall_s:.1f}"])
        f.flush()


def drop_rows_after(csv_path: str | os.PathLike, timesteps: int) -> None:
    """Remove evaluation rows later than ``timesteps`` (written before a crash; a resume redoes them).

    Rows cut short by the crash go too; an empty file is removed (the next evaluation writes the
    header). The file is rewritten atomically.
    """
    path = Path(csv_path)
    if not has_rows(path):
        path.unlink(missing_ok=True)
        return
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    write_csv_atomic(path, EVAL_COLUMNS, (r for r in rows if len(r) == len(EVAL_COLUMNS) and r[0].isdigit()
                                          and int(r[0]) <= timesteps))


def read_evaluations(csv_path: str | os.PathLike) -> list[dict[str, float]]:
    """The complete rows of ``evaluations.csv`` as numbers ([] if the file does not exist).

    Returns:
        One dict per row: ``timesteps`` (int) and every other `EVAL_COLUMNS` entry (float).
    """
    path = Path(csv_path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if None not in r.values() and (r.get("timesteps") or "").isdigit()]
    return [{k: int(v) if k == "timesteps" else float(v) for k, v in r.items() if k in EVAL_COLUMNS}
            for r in rows]
