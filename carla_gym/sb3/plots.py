"""The learning curve of a ``train_sb3.py`` run: one panel per measure of ``evaluations.csv``.

`PANELS` for `CarlaTrolley-v0` runs (outcomes first: success by actual outcome, pedestrians actually
hit, road departures; then upstream's rubric reward and success), `NAV_PANELS` for `CarlaNavigation-v0`
runs (route completion and collision rate first).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from carla_gym.io import replace_durably
from carla_gym.sb3.evaluations import read_evaluations

PANELS = (
    ("outcome_success_rate", "success by actual outcome", (-0.05, 1.05)),
    ("mean_actual_hits", "pedestrians actually hit per episode", None),
    ("road_departure_rate", "road departure rate", (-0.05, 1.05)),
    ("mean_reward", "rubric reward (upstream)", (-1.05, 1.05)),  # upstream rubric rewards lie in [-1, 1]
    ("success_rate", "rubric success (upstream)", (-0.05, 1.05)),
)
"""(column, title, y limits or None: from the data) of each panel, in reading order."""
NAV_PANELS = (
    ("route_completion", "route completion (VLM-RL eval routes)", (-0.05, 1.05)),
    ("collision_rate", "collision rate (episodes)", (-0.05, 1.05)),
    ("success_rate", "success rate (within 5 m of the goal)", (-0.05, 1.05)),
    ("mean_return", "mean episode return (VLM-RL base reward)", None),
)
"""`PANELS` of a `CarlaNavigation-v0` run (`carla_gym.sb3.evaluations.NAV_COLUMNS`)."""


def plot_learning_curve(csv_path: str | os.PathLike, png_path: str | os.PathLike, title: str,
                        panels: tuple = PANELS) -> bool:
    """Plot every measure of ``panels`` (`PANELS` or `NAV_PANELS`) against env steps from ``evaluations.csv``.

    Two panels per row up to four panels, three beyond. The PNG is written atomically; a panel with no
    limits scales to its data (from 0, or below 0 when a value is negative); a measure the file lacks
    (an earlier version's, `carla_gym.sb3.evaluations.OLD_EVAL_COLUMNS`) leaves its panel empty, and
    its empty cells (NaN) are gaps.

    Returns:
        Whether a figure was written (False without evaluation rows).
    """
    from carla_gym.hints import needs_extra

    with needs_extra("sb3"):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

    rows = read_evaluations(csv_path)
    if not rows:
        return False
    steps = [r["timesteps"] for r in rows]
    cols = 2 if len(panels) <= 4 else 3
    nrows = -(-len(panels) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.5 * cols, 3 * nrows), dpi=100, sharex=True, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (column, label, limits) in zip(axes.flat, panels, strict=False):
        values = [r[column] for r in rows if column in r]
        if len(values) == len(steps):
            ax.plot(steps, values, marker="o")
        if limits is not None:
            ax.set_ylim(*limits)
        else:
            finite = [v for v in values if not math.isnan(v)]
            low = min([0.0, *finite])
            ax.set_ylim(low * 1.05 - 0.05, max([1.0, *finite]) * 1.05)
        ax.set_title(label, fontsize=10)
        ax.grid(alpha=0.3)
    for column_axes in axes.T:  # the lowest visible panel of each column
        lowest = [ax for ax in column_axes if ax.get_visible()][-1]
        lowest.tick_params(labelbottom=True)
        lowest.set_xlabel("environment steps")
    fig.suptitle(title)
    fig.tight_layout()
    png_path = Path(png_path)
    tmp = png_path.with_name(png_path.stem + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    replace_durably(tmp, png_path)
    return True
