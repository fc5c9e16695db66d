"""The figure and table of `agents.study`: learning curves on the test split beside the comparison's baselines.

``study.png``: success by actual outcome [%] on ``trolley_generated_test`` against environment steps
(left, logarithmic above `STEPS_LINEAR_BELOW`) and against training wall time [s] (right), one line
per trained agent from its periodic evaluations (`read_curve`), and horizontal lines for the oracle,
the best constant policy and the random agent from the comparison (`references`). ``table.md`` /
``table.csv``: one row per agent of the comparison, outcomes first (success by actual outcome with
its Wilson 95 % interval, pedestrians actually hit beside the best candidate policy's, road
departures), then upstream's rubric (reward, success); trained agents also give their training
steps and time.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.scripted import CONSTANT_AGENTS
from carla_gym.io import write_csv_atomic, write_text_atomic

CURVE_FILES = (("evaluations.csv", "timesteps", "outcome_success_rate"),
               ("eval_curve.csv", "env_steps", "success_rate"))
"""Curve file of each trainer with its env-steps and outcome-success columns: ``train_sb3.py``'s ``evaluations.csv``
(`carla_gym.sb3.evaluations`; its ``success_rate`` is the rubric's), ``train_grpo.py``'s ``eval_curve.csv``
(`carla_gym.llm.curve`; its ``success_rate`` is the outcome success). Both hold ``wall_s``: the run's wall time [s]
at the evaluation, periodic evaluations included (GRPO: its warm start too)."""
SUCCESS = "outcome_success_rate"
TABLE_COLUMNS = ("agent", "train_env_steps", "train_wall_s", "outcome_success_rate", "outcome_success_ci95_low",
                 "outcome_success_ci95_high", "actual_pedestrians_hit", "best_pedestrians_hit", "road_departure_rate",
                 "mean_reward", "success_rate")
"""Columns of ``table.csv`` (names of `agents.summary.COLUMNS`; ``mean_reward`` and ``success_rate`` are upstream's
rubric); the training columns are empty for scripted agents."""


@dataclass(frozen=True)
class Curve:
    """A learner's periodic evaluations on the test split.

    Attributes:
        env_steps: Environment steps trained at each evaluation (every env step; GRPO play-outs included),
            shape (n,), int64.
        wall_s: Training wall time [s] at each evaluation, shape (n,), float64.
        success: Success by actual outcome at each evaluation, a fraction in [0, 1], shape (n,), float64.
    """

    env_steps: np.ndarray
    wall_s: np.ndarray
    success: np.ndarray


def read_curve(run_dir: str | Path) -> Curve | None:
    """The curve of a training run directory (the first of `CURVE_FILES` it holds), or None when it has none.

    Rows without an outcome success (an empty cell: a row converted from an earlier version) are left out.

    Raises:
        ValueError: The file lacks a column the curve needs (names the file and its columns).
    """
    for name, steps_column, success_column in CURVE_FILES:
        path = Path(run_dir) / name
        if not path.is_file() or path.stat().st_size == 0:
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
            header = rows[0].keys() if rows else ()
        missing = [c for c in (steps_column, "wall_s", success_column) if rows and c not in header]
        if missing:
            raise ValueError(f"{path}: no column {missing}; its columns are {list(header)}")
        rows = [r for r in rows if r[success_column] not in ("", "nan")]
        return Curve(np.array([int(float(r[steps_column])) for r in rows], dtype=np.int64),
                     np.array([float(r["wall_s"]) for r in rows]),
                     np.array([float(r[success_column]) for r in rows]))
    return None


def references(rows: Mapping[str, dict]) -> dict[str, tuple[str, float]]:
    """The horizontal lines: ``{key: (label, success)}`` for the oracle, the best constant policy and random.

    Args:
        rows: The comparison's summary row of each agent (``outcome_success_rate`` a fraction); agents that
            did not play are left out.
    """
    lines = {}
    if "oracle" in rows:
        lines["oracle"] = ("oracle", rows["oracle"][SUCCESS])
    constants = [a for a in CONSTANT_AGENTS if a in rows]
    if constants:
        best = max(constants, key=lambda a: rows[a][SUCCESS])  # ties: the first in CONSTANT_AGENTS order
        lines["constant"] = (f"best constant ({best})", rows[best][SUCCESS])
    if "random" in rows:
        lines["random"] = ("random", rows["random"][SUCCESS])
    return lines


_REFERENCE_STYLE = {"oracle": ("black", "--"), "constant": ("dimgray", "-."), "random": ("gray", ":")}


STEPS_LINEAR_BELOW = 100
"""The steps axis is logarithmic above this many steps and linear below (curves may start at step 0: GRPO evaluates
before its first step); this project's choice."""


def study_figure(curves: Mapping[str, Curve], lines: Mapping[str, tuple[str, float]]):
    """Success by actual outcome [%] against env steps (left, symlog x) and training wall time [s] (right).

    Args:
        curves: Each trained agent's curve, in legend order.
        lines: `references` (drawn on both panels, labelled with their value).

    Returns:
        The matplotlib figure (two axes; each curve a line with markers, each reference an ``axhline``).
    """
    from agents.plots import _pyplot, fit_titles

    plt = _pyplot()
    fig, (by_steps, by_wall) = plt.subplots(1, 2, figsize=(13, 5), sharey=True, layout="constrained")
    colors = plt.get_cmap("tab10")
    for i, (agent, curve) in enumerate(curves.items()):
        for ax, x in ((by_steps, curve.env_steps), (by_wall, curve.wall_s)):
            ax.plot(x, 100 * curve.success, marker="o", markersize=3, color=colors(i % 10), label=agent)
    for key, (label, value) in lines.items():
        color, style = _REFERENCE_STYLE[key]
        for ax in (by_steps, by_wall):
            ax.axhline(100 * value, color=color, linestyle=style, linewidth=1.2, label=f"{label}: {100 * value:.0f}%")
    from matplotlib.ticker import FuncFormatter

    by_steps.set_xscale("symlog", linthresh=STEPS_LINEAR_BELOW)
    by_steps.set_xlim(left=0)
    by_steps.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}"))
    by_wall.set_xlim(left=0)
    by_steps.set_xlabel("environment steps trained (every env step, play-outs included)")
    by_wall.set_xlabel("training wall time [s]")
    by_steps.set_ylabel("success by actual outcome on trolley_generated_test [%]")
    by_steps.set_ylim(0, 105)
    for ax in (by_steps, by_wall):
        ax.grid(alpha=0.3)
    by_wall.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    fig.suptitle("Sample efficiency and wall time: trained on trolley_generated_train, evaluated on held-out layouts")
    return fit_titles(fig)


def _percent(value: float) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.0f}%"


def _training(run_dir: Path, curve: Curve | None) -> tuple[int | None, float | None]:
    """Env steps and wall time [s] a run trained: its eval.json's (train_sb3.py), else its curve's last row."""
    try:
        done = json.loads((run_dir / "eval.json").read_text())
        return int(done["total_timesteps"]), float(done["train_seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if curve is not None and len(curve.env_steps):
        return int(curve.env_steps[-1]), float(curve.wall_s[-1])
    return None, None


def table(rows: Sequence[dict], training: Mapping[str, tuple[int | None, float | None]]) -> str:
    """The Markdown table of the comparison rows (outcomes first, then upstream's rubric).

    Args:
        rows: The comparison's summary rows, one per agent, in table order.
        training: ``{agent: (env steps, wall time [s])}`` of the trained agents.
    """
    lines = ["| agent | env steps | train wall [s] | success (outcome) | hit actual / best | off road | "
             "rubric reward | rubric success |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        steps, wall = training.get(row["agent"], (None, None))
        low, high = row.get("outcome_success_ci95_low"), row.get("outcome_success_ci95_high")
        interval = f" [{_percent(low)}, {_percent(high)}]" if low is not None and high is not None else ""
        lines.append(f"| {row['agent']} | {'' if steps is None else steps} | {'' if wall is None else f'{wall:.0f}'} "
                     f"| {_percent(row[SUCCESS])}{interval} | {row['actual_pedestrians_hit']:.2f} / "
                     f"{row['best_pedestrians_hit']:.2f} | {_percent(row['road_departure_rate'])} | "
                     f"{row['mean_reward']:.2f} | {_percent(row['success_rate'])} |")
    return "\n".join(lines)


def write_report(out: str | Path, trained: Sequence[str]) -> str:
    """Write ``study.png``, ``table.md`` and ``table.csv`` from the study in ``out``; returns the Markdown table.

    Args:
        out: The study's output directory (``compare/summary.json`` and ``runs/<agent>/`` in it).
        trained: The trained agents, in legend order (those without a curve are left out of the figure).

    Raises:
        ValueError: ``compare/summary.json`` is missing or lacks a trained agent's row.
    """
    from agents.plots import _save
    from agents.study import TEST_SCENARIO

    out = Path(out)
    try:
        summary = json.loads((out / "compare" / "summary.json").read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{out / 'compare' / 'summary.json'}: no comparison summary ({exc})") from exc
    rows = {r["agent"]: r for r in summary["rows"] if r["scenario"] == TEST_SCENARIO}
    absent = [a for a in trained if a not in rows]
    if absent:
        raise ValueError(f"{out / 'compare' / 'summary.json'}: no {TEST_SCENARIO} row of {absent}")
    curves = {a: c for a in trained if (c := read_curve(out / "runs" / a)) is not None}
    training = {a: _training(out / "runs" / a, curves.get(a)) for a in trained}
    _save(study_figure(curves, references(rows)), out / "study.png")
    ordered = [rows[a] for a in trained] + [r for a, r in rows.items() if a not in trained]
    text = table(ordered, training)
    write_text_atomic(out / "table.md", text + "\n")
    write_csv_atomic(out / "table.csv", TABLE_COLUMNS, [
        ["" if v is None else v for v in (r["agent"], *training.get(r["agent"], (None, None)),
                                          *(r[c] for c in TABLE_COLUMNS[3:]))] for r in ordered])
    return text
