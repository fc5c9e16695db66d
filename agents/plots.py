"""Comparison figures (matplotlib, PNG): success per scenario, action distributions, casualties and road departures.

Outcomes first: success_by_scenario.png is the success by actual outcome (`agents.summary`'s
``outcome_success_rate``), rubric_success_by_scenario.png upstream's rubric success beside it.
Each figure has a builder that returns the matplotlib figure (``success_figure``,
``actions_figure``, ``casualties_figure``; the tests read their artists) and `plot_all` writes
them. Units: success in percent everywhere (cell labels, colour bar and title); casualties and
road departures per episode, every bar labelled with its value so that a zero is a visible
``0.00`` and not a missing bar.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.summary import ACTIONS
from carla_gym.io import replace_durably


def _short(scenario: str) -> str:
    return scenario.removeprefix("trolley_micro_")


def _pyplot():
    from carla_gym.hints import needs_extra

    with needs_extra("compare"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    return plt


TITLE_MARGIN_PX = 4.0
"""Least gap [px at the figure's dpi] between a title and the figure's left and right edges (`fit_titles`)."""


def _titles(fig) -> list:
    """The figure's title and every axes' titles (centre, left, right) that have text."""
    texts = [getattr(fig, "_suptitle", None)]
    texts += [t for ax in fig.axes for t in (ax.title, getattr(ax, "_left_title", None),
                                              getattr(ax, "_right_title", None))]
    return [t for t in texts if t is not None and t.get_visible() and t.get_text()]


def _inside(text, renderer, width: float) -> bool:
    box = text.get_window_extent(renderer)
    return box.x0 >= TITLE_MARGIN_PX and box.x1 <= width - TITLE_MARGIN_PX


def _wrapped(text, renderer, width: float) -> str:
    """``text``'s words in lines, each as long as fits inside the figure at the text's place (a longer word alone)."""
    words, lines = text.get_text().split(), []
    for word in words:
        text.set_text(f"{lines[-1]} {word}" if lines else word)
        if lines and _inside(text, renderer, width):
            lines[-1] = text.get_text()
        else:
            lines.append(word)
    return "\n".join(lines)


def fit_titles(fig):
    """Wrap every title of ``fig`` at spaces into lines that lie inside the figure; returns ``fig``.

    A title wider than the figure (a long heatmap title over few scenarios) would be cut at both
    edges of the PNG. The layout engine runs first (``draw_without_rendering``), so each title is
    measured where it is drawn; it runs again after a title was wrapped (the title grew taller)
    until every title fits, at most three rounds.
    """
    renderer = fig.canvas.get_renderer()
    for _ in range(3):
        fig.draw_without_rendering()
        width = fig.bbox.width
        wide = [t for t in _titles(fig) if not _inside(t, renderer, width)]
        if not wide:
            break
        for text in wide:
            text.set_text(_wrapped(text, renderer, width))
    return fig


def _save(fig, path: Path) -> Path:
    plt = _pyplot()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    replace_durably(tmp, path)
    return path


def _agents(rows: Sequence[dict]) -> list[str]:
    return list(dict.fromkeys(r["agent"] for r in rows))


def _pooled(rows: Sequence[dict]) -> dict[str, dict]:
    return {r["agent"]: r for r in rows if r["scenario"] == "all"}


SUCCESS_TITLES = {
    "outcome_success_rate": "Success by actual outcome [%]: pedestrians hit, then road departure, as few as the best "
                            "candidate policy's",
    "success_rate": "Rubric success [%] (upstream): the classified action reaches the scenario's best rubric reward",
}
"""Summary column -> heatmap title of `success_figure`."""


def success_figure(rows: Sequence[dict], column: str = "outcome_success_rate"):
    """Heatmap of a success rate [%] per agent (rows) and scenario (columns), 0-100 colour scale.

    Args:
        rows: `agents.summary.summary_rows` output.
        column: ``outcome_success_rate`` (success by actual outcome) or ``success_rate`` (upstream's
            rubric success): a key of `SUCCESS_TITLES`.

    Raises:
        ValueError: Another ``column`` (names the choices).
    """
    if column not in SUCCESS_TITLES:
        raise ValueError(f"column={column!r}: choose one of {list(SUCCESS_TITLES)}")
    plt = _pyplot()
    agents = _agents(rows)
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows if r["scenario"] != "all"))
    table = {(r["agent"], r["scenario"]): r for r in rows}
    grid = np.array([[100.0 * table[(a, s)][column] if (a, s) in table else np.nan for s in scenarios]
                     for a in agents])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(scenarios) + 2.5), 0.45 * len(agents) + 2.6),
                           layout="constrained")
    image = ax.imshow(grid, vmin=0.0, vmax=100.0, cmap="RdYlGn", aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7)
    ax.set_xticks(np.arange(len(scenarios)), [_short(s) for s in scenarios], rotation=60, ha="right", fontsize=8)
    ax.set_yticks(np.arange(len(agents)), agents, fontsize=8)
    ax.set_title(SUCCESS_TITLES[column], fontsize=9)
    bar = fig.colorbar(image, ax=ax, fraction=0.025, pad=0.01)
    bar.set_label("success [%]", fontsize=8)
    return fit_titles(fig)


def actions_figure(rows: Sequence[dict]):
    """Stacked bars of each agent's trolley-action shares over all scenarios; the legend sits right of the axes.

    Args:
        rows: `agents.summary.summary_rows` output (the ``all`` rows are used).
    """
    plt = _pyplot()
    agents, pooled = _agents(rows), _pooled(rows)
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(agents)) + 1.6, 4), layout="constrained")
    bottom = np.zeros(len(agents))
    for action in ACTIONS:
        values = np.array([pooled[a][f"share_{action}"] for a in agents])
        ax.bar(agents, values, bottom=bottom, label=action)
        bottom += values
    ax.set_ylabel("share of episodes")
    ax.set_ylim(0.0, 1.0)
    ax.set_title("Trolley action per agent (all scenarios)", fontsize=10)
    ax.tick_params(axis="x", rotation=30)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fit_titles(fig)


def casualties_figure(rows: Sequence[dict]):
    """Per agent and episode: pedestrians actually hit, the best outcome's hits, road departures, the rubric's hits.

    Every bar carries its value as a label (``0.00`` included).

    Args:
        rows: `agents.summary.summary_rows` output (the ``all`` rows are used).
    """
    plt = _pyplot()
    agents, pooled = _agents(rows), _pooled(rows)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(agents)) + 1.6, 4), layout="constrained")
    xa = np.arange(len(agents))
    series = (("actual_pedestrians_hit", "hit, actual (simulated)"),
              ("best_pedestrians_hit", "hit, best candidate policy (simulated)"),
              ("road_departure_rate", "road departures"),
              ("expected_pedestrians_hit", "hit, expected by the rubric (scenario data)"))
    width = 0.8 / len(series)
    top = 0.0
    for k, (key, label) in enumerate(series):
        values = [pooled[a][key] for a in agents]
        top = max(top, *values)
        bars = ax.bar(xa + (k - (len(series) - 1) / 2) * width, values, width, label=label)
        ax.bar_label(bars, fmt="%.2f", fontsize=6, padding=1, rotation=90)
    ax.set_xticks(xa, agents, rotation=30, ha="right")
    ax.set_ylim(0.0, 1.25 * max(top, 0.5))  # room for the value labels
    ax.set_ylabel("per episode")
    ax.set_title("Per episode: pedestrians hit and road departures", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    return fit_titles(fig)


def plot_all(rows: Sequence[dict], out_dir: str | Path) -> list[Path]:
    """Write success_by_scenario.png (actual outcome), rubric_success_by_scenario.png, actions.png, casualties.png.

    Args:
        rows: `agents.summary.summary_rows` output.
        out_dir: Existing directory.

    Returns:
        Their paths, in that order.
    """
    out = Path(out_dir)
    return [_save(success_figure(rows), out / "success_by_scenario.png"),
            _save(success_figure(rows, "success_rate"), out / "rubric_success_by_scenario.png"),
            _save(actions_figure(rows), out / "actions.png"),
            _save(casualties_figure(rows), out / "casualties.png")]
