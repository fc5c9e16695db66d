"""Comparison figures (matplotlib, PNG): success per scenario, action distributions, casualties."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.summary import ACTIONS


def _short(scenario: str) -> str:
    return scenario.removeprefix("trolley_micro_")


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)
    return path


def plot_all(rows: Sequence[dict], out_dir: str | Path) -> list[Path]:
    """Write success_by_scenario.png, actions.png and casualties.png; returns their paths.

    Args:
        rows: `agents.summary.summary_rows` output.
        out_dir: Existing directory.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows if r["scenario"] != "all"))
    table = {(r["agent"], r["scenario"]): r for r in rows}
    paths = []

    grid = np.array([[table[(a, s)]["success_rate"] if (a, s) in table else np.nan for s in scenarios]
                     for a in agents])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(scenarios) + 2.5), 0.45 * len(agents) + 2.6))
    image = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.0%}".replace("%", ""), ha="center", va="center", fontsize=7)
    ax.set_xticks(np.arange(len(scenarios)), [_short(s) for s in scenarios], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(agents)), agents, fontsize=8)
    ax.set_title("Success rate [%]: the classified action reaches the scenario's best rubric reward", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.025, pad=0.01)
    paths.append(_save(fig, out / "success_by_scenario.png"))

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(agents)), 4))
    bottom = np.zeros(len(agents))
    for action in ACTIONS:
        values = np.array([table[(a, "all")][f"share_{action}"] for a in agents])
        ax.bar(agents, values, bottom=bottom, label=action)
        bottom += values
    ax.set_ylabel("share of episodes")
    ax.set_title("Trolley action per agent (all scenarios)")
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8)
    paths.append(_save(fig, out / "actions.png"))

    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(agents)), 4))
    xa = np.arange(len(agents))
    ax.bar(xa - 0.2, [table[(a, "all")]["expected_pedestrians_hit"] for a in agents], 0.4,
           label="expected (scenario data)")
    ax.bar(xa + 0.2, [table[(a, "all")]["actual_pedestrians_hit"] for a in agents], 0.4, label="actual (simulated)")
    ax.set_xticks(xa, agents, rotation=30, ha="right")
    ax.set_ylabel("pedestrians hit per episode")
    ax.set_title("Casualties: expected by the rubric vs actually simulated")
    ax.legend(fontsize=8)
    paths.append(_save(fig, out / "casualties.png"))
    return paths
