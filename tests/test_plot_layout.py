"""Every figure the comparison and the study write keeps its titles and labels inside the image.

A title wider than its figure (the success heatmap of one scenario) was cut at both edges of the PNG;
`agents.plots.fit_titles` wraps it. The checks measure the drawn text with matplotlib's renderer.
"""

from __future__ import annotations

import numpy as np
import pytest

from agents.stats import Interval

pytest.importorskip("matplotlib")

from agents import nav_summary, plots, study_plot  # noqa: E402
from agents.summary import ACTIONS  # noqa: E402


def _row(agent: str, scenario: str, success: float) -> dict:
    """A summary row with the keys the trolley figures read."""
    return {"agent": agent, "scenario": scenario, "outcome_success_rate": success, "success_rate": success,
            "actual_pedestrians_hit": 1.0, "best_pedestrians_hit": 0.0, "road_departure_rate": 0.25,
            "expected_pedestrians_hit": 1.0, **{f"share_{a}": 1.0 / len(ACTIONS) for a in ACTIONS}}


ONE_SCENARIO = [_row(agent, scenario, 0.5) for agent in ("oracle", "brake")
                for scenario in ("trolley_micro_escape_exists", "all")]
"""Two agents on one scenario: the narrowest success heatmap."""


def _inside(fig, text) -> bool:
    """Whether ``text`` as drawn lies within ``fig``'s width and height."""
    fig.draw_without_rendering()
    box = text.get_window_extent(fig.canvas.get_renderer())
    return 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0 and box.y1 <= fig.bbox.height


def _figures():
    curve = study_plot.Curve(np.array([0, 100, 20000]), np.array([0.0, 2.0, 3000.0]), np.array([0.0, 0.5, 0.9]))
    nav = [{"agent": "follow_route", "scenario": "nav_eval_routes_0", "success_rate": 1.0, "route_completion": 1.0,
            "CPM": 0.0, "speed_mean": 20.0}]
    return {
        "success_by_scenario": lambda: plots.success_figure(ONE_SCENARIO),
        "rubric_success_by_scenario": lambda: plots.success_figure(ONE_SCENARIO, "success_rate"),
        "actions": lambda: plots.actions_figure(ONE_SCENARIO),
        "casualties": lambda: plots.casualties_figure(ONE_SCENARIO),
        "navigation": lambda: nav_summary.nav_figure(nav),
        "study": lambda: study_plot.study_figure(
            {"ppo_state": study_plot.band([curve, curve]), "sac_clip": study_plot.band([curve])},
            {"oracle": ("oracle", 1.0), "constant": ("best constant (swerve_left)", 0.375), "random": ("random", 0.1)},
            {"ppo_state": (Interval(0.6, 0.55, 0.7), 2),
             "control_steer_straight_brake": (Interval(0.43, 0.43, 0.43), 1)},
            {"ppo_state": (np.array([0.0, 0.5, 1.0]), np.array([1.0, 1.0, 0.0]), np.array([1.0, 0.8, 0.0]),
                           np.array([1.0, 1.0, 0.2]))},
            "200 test layouts, 2 seeds per learner, 200 episodes per run"),
    }


@pytest.mark.parametrize("name", sorted(_figures()))
def test_titles_and_every_axes_lie_inside_the_figure(name):
    import matplotlib.pyplot as plt

    fig = _figures()[name]()
    try:
        titles = plots._titles(fig)
        assert titles
        for title in titles:
            assert _inside(fig, title), (title.get_text(), title.get_window_extent().extents, fig.bbox.extents)
        renderer = fig.canvas.get_renderer()
        for ax in fig.axes:  # its title, labels, the ticks it draws and its legend
            box = ax.get_tightbbox(renderer)
            assert 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0 and box.y1 <= fig.bbox.height, (
                ax.get_title(), box.extents, fig.bbox.extents)
    finally:
        plt.close(fig)


def test_a_long_title_over_one_scenario_is_wrapped_not_cut():
    import matplotlib.pyplot as plt

    fig = plots.success_figure(ONE_SCENARIO)
    try:
        (ax, _) = fig.axes  # the heatmap and its colour bar
        assert fig.bbox.width < 800  # narrower than the title on one line at 120 dpi: it must wrap
        assert ax.get_title() == ("Success by actual outcome [%]: pedestrians hit, then road departure, as few as "
                                  "the\nbest candidate policy's")
        assert " ".join(ax.get_title().split()) == " ".join(plots.SUCCESS_TITLES["outcome_success_rate"].split())
        assert _inside(fig, ax.title)
    finally:
        plt.close(fig)


def test_fit_titles_wraps_at_spaces_until_the_title_fits_and_keeps_a_word_too_long_alone():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3, 2), layout="constrained")
    try:
        words = "a title of many words that would run over both edges of a narrow figure by far".split()
        ax.set_title(" ".join(words), fontsize=10)
        fig.suptitle("x" * 200)  # one word wider than the figure: nothing to wrap at
        plots.fit_titles(fig)
        assert ax.get_title().split() == words and ax.get_title().count("\n") >= 2
        assert _inside(fig, ax.title)
        assert fig.get_suptitle() == "x" * 200
    finally:
        plt.close(fig)
