"""``evaluations.csv`` of a ``train_sb3.py`` run: the periodic evaluations, appended, trimmed on resume, read back.

One row per periodic evaluation, appended as soon as it finishes (a crash keeps every finished
row), and a last row at the final step: the final evaluation of the saved model
(`write_final_row`), so the learning curve ends at the result the run reports. The columns are
`EVAL_COLUMNS` for `CarlaTrolley-v0` (outcomes first: success by actual outcome, pedestrians
actually hit, road departures; then upstream's rubric reward and success, under their earlier
names ``mean_reward`` and ``success_rate`` so that their readers keep working), `NAV_COLUMNS` for
`CarlaNavigation-v0` (route completion, collision rate, success on VLM-RL's evaluation routes;
`carla_gym.sb3.nav_eval`). A resumed run redoes the evaluations after its checkpoint, so
`drop_rows_after` removes them first; an empty file (a crash right after creating it) counts as
absent, and the next row then writes the header. A file written by an earlier version
(`OLD_EVAL_COLUMNS`: no outcome success, the rubric columns first) is rewritten under the current
header when the run resumes (`drop_rows_after`), the outcome success of its rows left empty (read
back as NaN: a gap in the learning curve); `append_row` refuses any other mismatch.
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Mapping
from pathlib import Path

from carla_gym.io import write_csv_atomic

MEASURES = {"outcome_success_rate": "outcome_success_rate", "mean_actual_hits": "actual_pedestrians_hit",
            "road_departure_rate": "road_departure_rate", "mean_reward": "mean_reward", "success_rate": "success_rate"}
"""Measure columns of `EVAL_COLUMNS` -> their key in an evaluation summary row (`agents.summary`'s ``all`` row):
outcomes first, then upstream's rubric (``mean_reward``: mean rubric reward, ``success_rate``: rubric success)."""
EVAL_COLUMNS = ("timesteps", *MEASURES, "wall_s")
"""Columns of ``evaluations.csv``: rates and means over the evaluation's episodes; ``wall_s``: training time [s]."""
OLD_EVAL_COLUMNS = ("timesteps", "success_rate", "mean_reward", "mean_actual_hits", "road_departure_rate", "wall_s")
"""The header of older runs' ``evaluations.csv`` (still read): the rubric's success and reward first, no outcome
success."""
NAV_MEASURES = {"route_completion": "route_completion", "collision_rate": "collision_rate",
                "success_rate": "success_rate", "mean_return": "mean_return"}
"""`CarlaNavigation-v0`: measure columns -> their key in a `carla_gym.sb3.nav_eval.summarise` row."""
NAV_COLUMNS = ("timesteps", *NAV_MEASURES, "wall_s")
"""Columns of a `CarlaNavigation-v0` run's ``evaluations.csv``."""


def has_rows(csv_path: str | os.PathLike) -> bool:
    """Whether ``csv_path`` exists and holds at least one line (a crash can leave it empty: then it is absent)."""
    path = Path(csv_path)
    return path.is_file() and path.stat().st_size > 0


def append_row(csv_path: str | os.PathLike, timesteps: int, row: Mapping[str, float], wall_s: float,
               measures: Mapping[str, str] = MEASURES) -> None:
    """Append one evaluation (the header first into a new or empty file) and flush it.

    Args:
        csv_path: The run's ``evaluations.csv``.
        timesteps: Env steps trained when the evaluation ran.
        row: An evaluation summary row holding every ``measures`` key (e.g. `agents.summary`'s ``all`` row).
        wall_s: Training wall time so far [s].
        measures: Column -> key in ``row``: `MEASURES` (trolley) or `NAV_MEASURES` (navigation).

    Raises:
        KeyError: ``row`` lacks a ``measures`` key (nothing is written).
        ValueError: The file has another header (written by another version or for another env; nothing
            is written): `drop_rows_after` with ``columns`` converts an earlier version's.
    """
    values = [f"{row[key]:.4f}" for key in measures.values()]
    header = ("timesteps", *measures, "wall_s")
    new = not has_rows(csv_path)
    if not new:
        with open(csv_path, newline="") as f:
            found = tuple(next(csv.reader(f), ()))
        if found != header:
            raise ValueError(f"{csv_path} has the columns {list(found)}, this run writes {list(header)}: it was "
                             "written by another version or for another env; move it away (or start a new run)")
    with open(csv_path, "a", newline="") as f:
        writer = csv.writer(f)
        if new:
            writer.writerow(header)
        writer.writerow([int(timesteps), *values, f"{wall_s:.1f}"])
        f.flush()


def drop_rows_after(csv_path: str | os.PathLike, timesteps: int, columns: tuple[str, ...] | None = None) -> None:
    """Remove evaluation rows later than ``timesteps`` (written before a crash; a resume redoes them).

    Rows cut short by the crash go too; an empty file is removed (the next evaluation writes the
    header). The file is rewritten atomically, with its own header; an earlier version's
    (`OLD_EVAL_COLUMNS`) becomes ``columns`` (`EVAL_COLUMNS`): cells are matched by name, and the
    outcome success it lacks is left empty (`read_evaluations` reads NaN).

    Args:
        csv_path: The run's ``evaluations.csv``.
        timesteps: The checkpoint's env steps; later rows go.
        columns: The header this version writes (`EVAL_COLUMNS` or `NAV_COLUMNS`); None keeps the file's.

    Raises:
        ValueError: The file has another header that is not an earlier version's of ``columns`` (another
            kind of run's; nothing is written).
    """
    path = Path(csv_path)
    if not has_rows(path):
        path.unlink(missing_ok=True)
        return
    with open(path, newline="") as f:
        header, *rows = list(csv.reader(f))
    kept = [r for r in rows if len(r) == len(header) and r[0].isdigit() and int(r[0]) <= timesteps]
    if columns is None or tuple(header) == tuple(columns):
        write_csv_atomic(path, header, kept)
        return
    if (tuple(header), tuple(columns)) != (OLD_EVAL_COLUMNS, EVAL_COLUMNS):
        raise ValueError(f"{path} has the columns {header}, not those of this run ({list(columns)}); move it away")
    write_csv_atomic(path, columns, ([dict(zip(header, r, strict=True)).get(c, "") for c in columns] for r in kept))


def write_final_row(csv_path: str | os.PathLike, timesteps: int, row: Mapping[str, float], wall_s: float,
                    measures: Mapping[str, str] = MEASURES) -> None:
    """Write the final evaluation of the saved model as the last row, at the run's final step.

    A row already at (or after) ``timesteps`` is replaced (a periodic evaluation at that step, or
    this row written before a crash and redone on resume), so the curve ends at the final result.

    Args:
        csv_path: The run's ``evaluations.csv``.
        timesteps: Env steps trained (>= 1).
        row: The final evaluation's summary row holding every ``measures`` key (trolley: the trained
            agent's `agents.summary` ``all`` row; navigation: the first evaluation traffic level's
            `carla_gym.sb3.nav_eval.summarise` row).
        wall_s: Training wall time of the run [s].
        measures: Column -> key in ``row``: `MEASURES` (trolley) or `NAV_MEASURES` (navigation).

    Raises:
        KeyError: ``row`` lacks a ``measures`` key.
        ValueError: ``timesteps`` < 1, or the file has another header (see `append_row`).
    """
    if timesteps < 1:
        raise ValueError(f"timesteps={timesteps!r}: must be >= 1 (the steps the model was trained)")
    missing = [key for key in measures.values() if key not in row]
    if missing:
        raise KeyError(f"the final evaluation's row has no {', '.join(missing)}")
    drop_rows_after(csv_path, timesteps - 1)
    append_row(csv_path, timesteps, row, wall_s, measures)


def read_evaluations(csv_path: str | os.PathLike) -> list[dict[str, float]]:
    """The complete rows of ``evaluations.csv`` as numbers ([] if the file does not exist).

    Returns:
        One dict per row: ``timesteps`` (int) and every other column of the file (float; an empty cell,
        a measure an earlier version did not record, is NaN).
    """
    path = Path(csv_path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f)
                if None not in r and None not in r.values() and (r.get("timesteps") or "").isdigit()]
    return [{k: int(v) if k == "timesteps" else float(v) if v else math.nan for k, v in r.items()} for r in rows]
