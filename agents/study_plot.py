"""The report of `agents.study`: the figure, the table of every run and the statistics across seeds.

From a finished study directory (``compare/summary.json``, ``compare/episodes.jsonl``, ``runs/``) `write_report`
writes:

- ``study.png`` (`study_figure`), four panels. Top: success by actual outcome [%] on
  ``trolley_generated_test`` against environment steps (left, logarithmic above `STEPS_LINEAR_BELOW`) and
  against training wall time [s] (right), one line per learner (the mean over its training seeds of the
  periodic evaluations, `read_curve`, `band`) with a band from the lowest to the highest seed, and horizontal
  lines for the oracle, the best constant policy and the random agent from the comparison (`references`).
  Bottom left: each agent's IQM over its runs with the 95 % stratified bootstrap interval
  (`agents.stats.iqm_interval`). Bottom right: the performance profiles of the learners and the reference
  agents (`agents.stats.performance_profile`). The title states the layouts, seeds and episodes.
- ``table.md`` / ``table.csv`` (`table`): one row per run of the comparison (a learner's runs are
  ``<learner>_seed<k>``), outcomes first (success by actual outcome with its Wilson 95 % interval over the
  layouts, pedestrians actually hit beside the best candidate policy's, road departures), then upstream's rubric
  (reward, success); trained runs also give their training steps and time. A caption line states the layouts,
  seeds and episodes.
- ``stats.json`` / ``stats.md`` (`statistics`, `stats_markdown`): per agent (a learner with all its seeds, or a
  scripted agent) the runs, seeds, layouts and episodes, the IQM of its runs' success with a 95 % stratified
  bootstrap interval, the probability of improvement of every agent over every other, the paired difference on
  the same layouts of every pair (``stats.md`` shows each agent against the best constant policy and against the
  oracle), and the performance profiles.

A run's score is its success by actual outcome over the test layouts (one task, as `agents.stats` takes it).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents import stats
from agents.scripted import best_constant
from agents.stats import Interval
from carla_gym.io import write_csv_atomic, write_json_atomic, write_text_atomic

CURVE_FILES = (("evaluations.csv", "timesteps", "outcome_success_rate"),
               ("eval_curve.csv", "env_steps", "success_rate"))
"""Curve file of each trainer with its env-steps and outcome-success columns: ``train_sb3.py``'s ``evaluations.csv``
(`carla_gym.sb3.evaluations`; its ``success_rate`` is the rubric's), ``train_grpo.py``'s ``eval_curve.csv``
(`carla_gym.llm.curve`; its ``success_rate`` is the outcome success). Both hold ``wall_s``: the run's wall time [s]
at the evaluation, periodic evaluations included (GRPO: its warm start too)."""
SUCCESS = "outcome_success_rate"


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
    best = best_constant({a: r[SUCCESS] for a, r in rows.items()})
    if best is not None:
        lines["constant"] = (f"best constant ({best})", rows[best][SUCCESS])
    if "random" in rows:
        lines["random"] = ("random", rows["random"][SUCCESS])
    return lines


_REFERENCE_STYLE = {"oracle": ("black", "--"), "constant": ("dimgray", "-."), "random": ("gray", ":")}


STEPS_LINEAR_BELOW = 100
"""The steps axis is logarithmic above this many steps and linear below (curves may start at step 0: GRPO evaluates
before its first step); this project's choice."""


@dataclass(frozen=True)
class Band:
    """A learner's curves over its training seeds, point by point.

    Attributes:
        env_steps: Environment steps at each evaluation (the mean over the seeds; equal when they share their
            settings), shape (n,), float64.
        wall_s: Training wall time [s] at each evaluation, the mean over the seeds, shape (n,), float64.
        mean: Success by actual outcome, the mean over the seeds, a fraction in [0, 1], shape (n,), float64.
        low: The lowest seed's success at each evaluation, shape (n,), float64.
        high: The highest seed's, shape (n,), float64.
        seeds: Curves it summarises.
    """

    env_steps: np.ndarray
    wall_s: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    seeds: int


def band(curves: Sequence[Curve]) -> Band:
    """The mean and the range of ``curves`` at each evaluation, over their first n points (n: the shortest curve).

    Raises:
        ValueError: ``curves`` is empty.
    """
    if not curves:
        raise ValueError("band: no curves; give a learner's curve of at least one seed")
    n = min(len(c.env_steps) for c in curves)
    success = np.stack([c.success[:n] for c in curves])
    return Band(np.mean([c.env_steps[:n] for c in curves], axis=0), np.mean([c.wall_s[:n] for c in curves], axis=0),
                success.mean(axis=0), success.min(axis=0), success.max(axis=0), len(curves))


def study_figure(bands: Mapping[str, Band], lines: Mapping[str, tuple[str, float]],
                 intervals: Mapping[str, tuple[Interval, int]],
                 profiles: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
                 title: str, curve_episodes: Mapping[str, int] | None = None):
    """The study's four panels: curves by env steps and by wall time, IQM intervals, performance profiles.

    Args:
        bands: Each learner's `band`, in legend order.
        lines: `references` (drawn on both curve panels, labelled with their value).
        intervals: Each agent's IQM over its runs with its interval, and its number of runs, in table order
            (drawn top to bottom).
        profiles: The agents whose performance profile is drawn: ``(taus, profile, low, high)``, each shape (n,),
            fractions; a band is drawn where the runs vary.
        title: The figure's title (the layouts, seeds and episodes).
        curve_episodes: Episodes of one periodic evaluation of each learner, in its legend entry; None: left out.

    Returns:
        The matplotlib figure; ``fig.axes`` is ``[by_steps, by_wall, by_iqm, by_profile]`` (a curve is a line
        with markers labelled by its learner and a band, a reference an ``axhline``, an interval an errorbar).
    """
    from agents.plots import _pyplot, fit_titles

    plt = _pyplot()
    fig, ((by_steps, by_wall), (by_iqm, by_profile)) = plt.subplots(2, 2, figsize=(14, 11), layout="constrained")
    colors = plt.get_cmap("tab10")
    for i, (agent, curve) in enumerate(bands.items()):
        episodes = (curve_episodes or {}).get(agent)
        label = f"{agent} ({curve.seeds} seed{'s' if curve.seeds > 1 else ''}" + (
            f", {episodes} episode{'s' if episodes > 1 else ''} per point)" if episodes else ")")
        for ax, x in ((by_steps, curve.env_steps), (by_wall, curve.wall_s)):
            ax.plot(x, 100 * curve.mean, marker="o", markersize=3, color=colors(i % 10), label=label)
            if curve.seeds > 1:
                ax.fill_between(x, 100 * curve.low, 100 * curve.high, color=colors(i % 10), alpha=0.15, linewidth=0)
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
    by_steps.set_title("learning curves: mean over seeds, band from the lowest to the highest seed", fontsize=10)
    by_wall.set_title("the same against training wall time (periodic evaluations included)", fontsize=10)
    for ax in (by_steps, by_wall):
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    by_wall.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    _intervals(by_iqm, intervals)
    _profiles(by_profile, profiles, colors)
    fig.suptitle(title)
    return fit_titles(fig)


def _intervals(ax, intervals: Mapping[str, tuple[Interval, int]]) -> None:
    """Each agent's IQM [%] as a point with its interval, top to bottom, its number of runs beside it."""
    names = list(intervals)
    y = np.arange(len(names))[::-1]
    points = np.array([100 * intervals[a][0].point for a in names])
    low = np.array([100 * intervals[a][0].low for a in names])
    high = np.array([100 * intervals[a][0].high for a in names])
    ax.errorbar(points, y, xerr=[points - low, high - points], fmt="o", color="tab:blue", ecolor="tab:blue",
                capsize=3, markersize=4)
    for yi, name, hi in zip(y, names, high, strict=True):
        runs = intervals[name][1]
        ax.annotate(f"{runs} run{'s' if runs > 1 else ''}", (hi, yi), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=7, color="dimgray")
    ax.set_yticks(y, names, fontsize=8)
    ax.set_xlim(-2, 112)
    ax.set_xlabel("success by actual outcome: IQM over runs [%], 95% stratified bootstrap interval")
    ax.set_title("aggregate over training seeds (one run per scripted agent)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)


def _profiles(ax, profiles, colors) -> None:
    """Each agent's share of runs [%] with success above tau [%], with its bootstrap band where the runs vary."""
    for i, (name, (taus, profile, low, high)) in enumerate(profiles.items()):
        ax.plot(100 * taus, 100 * profile, color=colors(i % 10), label=name, drawstyle="steps-post")
        if np.any(low != high):
            ax.fill_between(100 * taus, 100 * low, 100 * high, color=colors(i % 10), alpha=0.15, linewidth=0,
                            step="post")
    ax.set_xlabel("success by actual outcome tau [%]")
    ax.set_ylabel("runs with success > tau [%]")
    ax.set_xlim(0, 100)
    ax.set_ylim(-2, 102)
    ax.set_title("performance profiles (run-score distributions, 95% bootstrap bands)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)


TABLE_COLUMNS = ("agent", "episodes", "train_env_steps", "train_wall_s", "outcome_success_rate",
                 "outcome_success_ci95_low", "outcome_success_ci95_high", "actual_pedestrians_hit",
                 "best_pedestrians_hit", "road_departure_rate", "mean_reward", "success_rate")
"""Columns of ``table.csv`` (names of `agents.summary.COLUMNS`; ``mean_reward`` and ``success_rate`` are upstream's
rubric); the training columns are empty for scripted agents."""
BOOTSTRAP_SEED = 0
"""Seed of every bootstrap of the report (this project's choice; `agents.stats` draws from it per agent and pair)."""


def _percent(value: float | None) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.0f}%"


def _training(run_dir: Path, curve) -> tuple[int | None, float | None]:
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
        rows: The comparison's summary rows, one per run, in table order.
        training: ``{run: (env steps, wall time [s])}`` of the trained runs.
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


def read_success(episodes: str | Path, runs: Sequence[str], scenario: str) -> tuple[np.ndarray, np.ndarray]:
    """Success by actual outcome of each run on each layout, from a comparison's ``episodes.jsonl``.

    Args:
        episodes: The comparison's record log (`agents.records.EpisodeLog`).
        runs: The agent labels to read, in row order.
        scenario: The scenario whose records count.

    Returns:
        ``(layouts, success)``: the layouts as ``(comparison seed, episode)`` pairs, shape (layouts, 2), int64, in
        order; and success, shape (runs, layouts), float64, 1.0 where the run reached the best outcome.

    Raises:
        ValueError: A run has no records, runs differ in their layouts, or a record has no outcome success.
    """
    from agents.records import EpisodeLog

    found: dict[str, dict[tuple[int, int], float]] = {run: {} for run in runs}
    for record in EpisodeLog(episodes).read():
        if record["agent"] in found and record["scenario"] == scenario:
            if record["outcome_success"] is None:
                raise ValueError(f"{episodes}: {record['agent']} episode {record['episode']} has no outcome success")
            found[record["agent"]][(record["seed"], record["episode"])] = float(record["outcome_success"])
    layouts = sorted(found[runs[0]]) if runs else []
    for run, by_layout in found.items():
        if not by_layout:
            raise ValueError(f"{episodes}: no {scenario} episode of {run}")
        if sorted(by_layout) != layouts:
            raise ValueError(f"{episodes}: {run} played {len(by_layout)} {scenario} layouts and {runs[0]} "
                             f"{len(layouts)}, or other ones; every run must play the same layouts")
    return (np.array(layouts, dtype=np.int64).reshape(-1, 2),
            np.array([[found[run][key] for key in layouts] for run in runs], dtype=np.float64))


def statistics(success: Mapping[str, np.ndarray], runs: Mapping[str, Sequence[str]], *, reps: int = stats.IQM_REPS,
               seed: int = BOOTSTRAP_SEED) -> dict:
    """The statistics across seeds of every agent, as JSON values (``stats.json``).

    Args:
        success: Each agent's success per run and layout, shape (runs, layouts), the same layouts for all, in
            table order.
        runs: Each agent's run labels (``success``'s rows).
        reps: Bootstrap replications of the IQM intervals and paired differences (the profiles' bands use at
            most `agents.stats.PROFILE_REPS`).
        seed: Seed of every bootstrap.

    Returns:
        ``agents``: per agent ``runs``, ``seeds``, ``layouts``, ``episodes``, ``run_success`` (per run), ``iqm``
        and ``iqm_ci95``; ``best_constant``; ``probability_of_improvement`` (``{x: {y: P(X > Y)}}``);
        ``paired_differences``: one entry per pair in table order (``a``, ``b``, ``difference`` of A minus B,
        ``ci95``, ``a_better``, ``b_better``, ``layouts``, ``p_value``); ``performance_profile`` (``tau`` and per
        agent ``profile``, ``ci95_low``, ``ci95_high``); the settings (``confidence``, ``bootstrap_reps``,
        ``profile_reps``, ``bootstrap_seed``).
    """
    per_run = {a: s.mean(axis=1) for a, s in success.items()}
    agents = {}
    for agent, scores in per_run.items():
        interval = stats.iqm_interval(scores, reps=reps, seed=seed)
        agents[agent] = {"runs": list(runs[agent]), "seeds": len(scores), "layouts": success[agent].shape[1],
                         "episodes": int(success[agent].size), "run_success": scores.tolist(),
                         "iqm": interval.point, "iqm_ci95": [interval.low, interval.high]}
    names = list(success)
    pairs = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            d = stats.paired_difference(success[a], success[b], reps=reps, seed=seed)
            pairs.append({"a": a, "b": b, "difference": d.difference, "ci95": [d.low, d.high], "a_better": d.a_better,
                          "b_better": d.b_better, "layouts": d.layouts, "p_value": d.p_value})
    profile_reps = min(reps, stats.PROFILE_REPS)
    profiles = {}
    for agent, scores in per_run.items():
        profile, low, high = stats.performance_profile(scores, reps=profile_reps, seed=seed)
        profiles[agent] = {"profile": profile.tolist(), "ci95_low": low.tolist(), "ci95_high": high.tolist()}
    return {"confidence": stats.CONFIDENCE, "bootstrap_reps": reps, "profile_reps": profile_reps,
            "bootstrap_seed": seed, "agents": agents,
            "best_constant": best_constant({a: float(s.mean()) for a, s in per_run.items()}),
            "probability_of_improvement": stats.improvement_matrix(per_run),
            "paired_differences": pairs,
            "performance_profile": {"tau": stats.PROFILE_TAUS.tolist(), "agents": profiles}}


def _points(value: float) -> str:
    """A difference of rates in percentage points, signed."""
    return f"{round(100 * value):+d}"


def _p(value: float) -> str:
    return "<0.001" if value < 0.001 else f"{value:.3g}"


def paired(result: dict, a: str, b: str) -> dict | None:
    """The paired difference of ``a`` minus ``b`` from `statistics`' result (either order stored); None if absent."""
    for pair in result["paired_differences"]:
        if (pair["a"], pair["b"]) == (a, b):
            return pair
        if (pair["a"], pair["b"]) == (b, a):
            low, high = pair["ci95"]
            return {**pair, "a": a, "b": b, "difference": -pair["difference"], "ci95": [-high, -low],
                    "a_better": pair["b_better"], "b_better": pair["a_better"]}
    return None


def stats_markdown(result: dict, caption: str) -> tuple[str, str]:
    """``stats.md`` from `statistics`' result.

    Returns ``(headline, full)``: the IQM and paired-difference tables, and the whole page (those and the
    probability-of-improvement matrix).

    Args:
        result: `statistics`' result.
        caption: The sentence on layouts, seeds and episodes that heads the page.
    """
    reps, conf = result["bootstrap_reps"], f"{100 * result['confidence']:.0f}%"
    iqm = [caption, "", f"Score of a run: its success by actual outcome over the layouts. IQM: the mean of the middle "
           f"half of an agent's runs, with its {conf} stratified bootstrap interval over runs (rliable, {reps} "
           f"replications, seed {result['bootstrap_seed']}); an agent with one run has no spread over seeds (its "
           "interval is its score; its uncertainty over layouts is in table.md and in the paired differences).", "",
           f"| agent | seeds | layouts | episodes | success IQM [{conf} CI] | success per run |",
           "|---|---|---|---|---|---|"]
    for agent, row in result["agents"].items():
        low, high = row["iqm_ci95"]
        iqm.append(f"| {agent} | {row['seeds']} | {row['layouts']} | {row['episodes']} | {_percent(row['iqm'])} "
                   f"[{_percent(low)}, {_percent(high)}] | {', '.join(_percent(s) for s in row['run_success'])} |")
    against = [r for r in (result["best_constant"], "oracle") if r in result["agents"]]
    differences = ["", "## Paired differences on the same layouts", "",
                   f"An agent's success on each layout (the mean over its runs) minus the reference's, averaged over "
                   f"the layouts, in percentage points, with its {conf} paired bootstrap interval over layouts "
                   f"({reps} replications); better / worse: the layouts where the agent's success is higher / "
                   "lower; p: two-sided sign test on those layouts (McNemar's exact test when both have one run).", ""]
    if against:
        names = [f"best constant ({result['best_constant']})" if r == result["best_constant"] else r
                 for r in against]
        differences += ["| agent | " + " | ".join(f"vs {n}: difference [{conf} CI] | better / worse | p"
                                                  for n in names) + " |",
                        "|---|" + "---|---|---|" * len(against)]
        for agent in result["agents"]:
            cells = []
            for reference in against:
                pair = paired(result, agent, reference)
                cells.append("| |" if pair is None or agent == reference else
                             f"{_points(pair['difference'])} [{_points(pair['ci95'][0])}, {_points(pair['ci95'][1])}] "
                             f"| {pair['a_better']} / {pair['b_better']} | {_p(pair['p_value'])}")
            differences.append(f"| {agent} | " + " | ".join(cells) + " |")
    names = list(result["agents"])
    improvement = ["", "## Probability of improvement", "",
                   "P(row > column): the probability that a run of the row's agent reaches a higher success than a "
                   "run of the column's, ties counting a half (rliable's probability of improvement on one task; "
                   "0, 0.5 or 1 between two agents of one run each).", "",
                   "| P(row > column) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for x in names:
        cells = ["–" if y == x else f"{result['probability_of_improvement'][x][y]:.2f}" for y in names]
        improvement.append(f"| {x} | " + " | ".join(cells) + " |")
    headline = "\n".join(iqm + differences)
    return headline, "\n".join(["# Statistics across seeds", "", *iqm, *differences, *improvement])


def write_report(out: str | Path, trained: Sequence[str], seeds: Sequence[int], *,
                 curve_episodes: Mapping[str, int] | None = None, reps: int = stats.IQM_REPS) -> str:
    """Write ``study.png``, ``table.md`` / ``table.csv`` and ``stats.md`` / ``stats.json`` from the study in ``out``.

    Args:
        out: The study's output directory (``compare/summary.json``, ``compare/episodes.jsonl`` and
            ``runs/<learner>/seed<k>/`` in it).
        trained: The learners, in legend and table order.
        seeds: Their training seeds.
        curve_episodes: Episodes of one periodic evaluation of each learner (`agents.study.curve_episodes`), for
            the legend; None: left out.
        reps: Bootstrap replications of the statistics.

    Returns:
        The headline of ``stats.md`` (what the study prints): the IQM table and the paired differences.

    Raises:
        ValueError: ``compare/summary.json`` is missing or lacks a trained run's row, or the episode log lacks
            one's episodes.
    """
    from agents.plots import _save
    from agents.records import episode_seed
    from agents.study import TEST_SCENARIO, run_dir, run_label

    out = Path(out)
    summary_path = out / "compare" / "summary.json"
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{summary_path}: no comparison summary ({exc})") from exc
    rows = {r["agent"]: r for r in summary["rows"] if r["scenario"] == TEST_SCENARIO}
    runs = {learner: [run_label(learner, seed) for seed in seeds] for learner in trained}
    absent = [run for labels in runs.values() for run in labels if run not in rows]
    if absent:
        raise ValueError(f"{summary_path}: no {TEST_SCENARIO} row of {absent}")
    labelled = {run for labels in runs.values() for run in labels}
    runs |= {agent: [agent] for agent in rows if agent not in labelled}
    order = [run for labels in runs.values() for run in labels]
    layouts, success = read_success(out / "compare" / "episodes.jsonl", order, TEST_SCENARIO)
    start = 0
    by_agent = {}
    for agent, labels in runs.items():
        by_agent[agent] = success[start:start + len(labels)]
        start += len(labels)
    result = statistics(by_agent, runs, reps=reps)
    env_seeds = [episode_seed(int(s), int(e)) for s, e in layouts]
    caption = (f"{TEST_SCENARIO}: {len(layouts)} layouts (env seeds {min(env_seeds)}-{max(env_seeds)}), the same "
               f"for every run, one episode each; {len(seeds)} training seed{'s' if len(seeds) > 1 else ''} per "
               f"learner ({', '.join(map(str, seeds))}; runs <learner>_seed<k>), one run per scripted agent.")
    result = {"scenario": TEST_SCENARIO, "layouts": len(layouts), "env_seeds": env_seeds, "training_seeds": list(seeds),
              **result}
    headline, full = stats_markdown(result, caption)
    write_json_atomic(out / "stats.json", result)
    write_text_atomic(out / "stats.md", full + "\n")

    curves = {run: read_curve(run_dir(out, learner, seed))
              for learner in trained for seed, run in zip(seeds, runs[learner], strict=True)}
    training = {run: _training(run_dir(out, learner, seed), curves[run])
                for learner in trained for seed, run in zip(seeds, runs[learner], strict=True)}
    bands = {learner: band(found) for learner in trained
             if (found := [curves[run] for run in runs[learner] if curves[run] is not None])}
    intervals = {a: (Interval(r["iqm"], *r["iqm_ci95"]), r["seeds"]) for a, r in result["agents"].items()}
    lines = references(rows)
    shown = [*trained, *(a for a in ("oracle", result["best_constant"], "random") if a in result["agents"])]
    taus = np.asarray(result["performance_profile"]["tau"])
    profiles = {a: (taus, *(np.asarray(result["performance_profile"]["agents"][a][k])
                            for k in ("profile", "ci95_low", "ci95_high"))) for a in shown}
    title = (f"Trained on trolley_generated_train, evaluated on held-out layouts: {caption} Curves: periodic "
             "evaluations on other held-out layouts (env seeds 10000+).")
    _save(study_figure(bands, lines, intervals, profiles, title, curve_episodes), out / "study.png")

    ordered = [rows[run] for run in order]
    text = table(ordered, training)
    write_text_atomic(out / "table.md", f"{caption}\n\n{text}\n")
    write_csv_atomic(out / "table.csv", TABLE_COLUMNS, [
        ["" if v is None else v for v in (r["agent"], r["episodes"], *training.get(r["agent"], (None, None)),
                                          *(r[c] for c in TABLE_COLUMNS[4:]))] for r in ordered])
    return headline
