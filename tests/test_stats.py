"""The statistics across seeds and layouts (`agents.stats`) on hand-made arrays with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from agents import stats


def test_iqm_is_the_mean_of_the_middle_half():
    assert stats.iqm([1.0, 0.0, 0.25, 0.75, 0.5]) == 0.5  # 5 runs: the lowest and the highest are cut
    assert stats.iqm([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 70.0]) == 3.5  # 8 runs: two cut at each end
    assert stats.iqm([0.25, 0.5, 1.0]) == pytest.approx(7 / 12)  # fewer than 4 runs: nothing is cut, the mean


def test_iqm_interval_brackets_the_point_and_is_deterministic():
    runs = [0.62, 0.58, 0.91, 0.60, 0.64]
    first = stats.iqm_interval(runs, reps=500, seed=3)
    assert first == stats.iqm_interval(runs, reps=500, seed=3)
    assert first.point == pytest.approx(0.62) and first.low <= first.point <= first.high
    assert first.low >= 0.58 and first.high <= 0.91 and first.high > first.point  # resampled runs stay in range
    assert stats.iqm_interval([0.5, 0.75], reps=200) == stats.Interval(0.625, 0.5, 0.75)  # both extremes are drawn
    assert stats.iqm_interval([0.4], reps=50) == stats.Interval(0.4, 0.4, 0.4)  # one run: no spread over seeds
    assert stats.iqm_interval([0.3, 0.3, 0.3], reps=50) == stats.Interval(0.3, 0.3, 0.3)


def test_the_bootstraps_leave_numpys_global_generator_as_they_found_it():
    np.random.seed(123)
    expected = np.random.random(3)
    np.random.seed(123)
    stats.iqm_interval([0.1, 0.5, 0.9], reps=100, seed=7)
    stats.performance_profile([0.1, 0.5], [0.0, 0.5], reps=20, seed=7)
    assert np.random.random(3).tolist() == expected.tolist()


def test_probability_of_improvement_of_constructed_cases():
    assert stats.probability_of_improvement([0.9, 0.8], [0.1, 0.2]) == 1.0
    assert stats.probability_of_improvement([0.1, 0.2], [0.9, 0.8]) == 0.0
    assert stats.probability_of_improvement([0.5, 0.5], [0.5, 0.5]) == 0.5
    assert stats.probability_of_improvement([0.5, 0.75], [0.5]) == 0.75  # one tie (a half) and one win
    assert stats.probability_of_improvement([0.2, 0.6], [0.4]) == 0.5
    matrix = stats.improvement_matrix({"a": [0.1, 0.2], "b": [0.3], "c": [0.2, 0.1]})
    assert matrix == {"a": {"b": 0.0, "c": 0.5}, "b": {"a": 1.0, "c": 1.0}, "c": {"a": 0.5, "b": 0.0}}


def test_performance_profile_is_the_share_of_runs_above_each_threshold():
    profile, low, high = stats.performance_profile([0.2, 0.6], [0.0, 0.5, 0.6, 1.0], reps=200, seed=0)
    assert profile.tolist() == [1.0, 0.5, 0.0, 0.0]  # strictly above: the run at 0.6 is not above 0.6
    assert low.tolist() == [1.0, 0.0, 0.0, 0.0] and high.tolist() == [1.0, 1.0, 0.0, 0.0]
    one = stats.performance_profile([0.4], [0.0, 0.4, 0.5], reps=20)
    assert [a.tolist() for a in one] == [[1.0, 0.0, 0.0]] * 3  # one run: the band is the step itself
    assert stats.PROFILE_TAUS[0] == 0.0 and stats.PROFILE_TAUS[-1] == 1.0 and len(stats.PROFILE_TAUS) == 51


def test_paired_difference_of_known_vectors():
    d = stats.paired_difference([1, 1, 1, 0], [0, 0, 0, 0], reps=1000, seed=0)
    assert (d.difference, d.a_better, d.b_better, d.layouts, d.p_value) == (0.75, 3, 0, 4, 0.25)
    assert d.low <= 0.75 <= d.high and 0.0 <= d.low and d.high == 1.0  # resampling all-ones layouts reaches 1
    assert d == stats.paired_difference([1, 1, 1, 0], [0, 0, 0, 0], reps=1000, seed=0)
    same = stats.paired_difference([1, 0, 1], [1, 0, 1], reps=100)
    assert (same.difference, same.low, same.high, same.a_better, same.b_better, same.p_value) == (0, 0, 0, 0, 0, 1.0)
    a = [1, 1, 1, 1, 1, 1, 0, 0]
    b = [0, 0, 0, 0, 0, 0, 1, 0]
    mcnemar = stats.paired_difference(a, b, reps=100)  # 6 discordant layouts for A, 1 for B: exact p = 16/128
    assert (mcnemar.difference, mcnemar.a_better, mcnemar.b_better, mcnemar.p_value) == (0.625, 6, 1, 0.125)


def test_paired_difference_averages_each_agents_runs_per_layout():
    runs = [[1, 1, 0, 0], [1, 0, 1, 0]]  # per layout: 1, 0.5, 0.5, 0
    d = stats.paired_difference(runs, [0, 0, 1, 1], reps=200)
    assert (d.difference, d.a_better, d.b_better) == (0.0, 2, 2)  # 1 + 0.5 - 0.5 - 1 over 4 layouts
    chunked = stats.paired_difference(runs, [0, 0, 1, 1], reps=200, chunk=7)
    assert (chunked.low, chunked.high) == (d.low, d.high)  # the draws do not depend on the chunk size


def test_bad_input_is_refused_with_the_value():
    with pytest.raises(ValueError, match=r"scores \[\]: give a non-empty 1-D sequence of finite per-run scores"):
        stats.iqm([])
    with pytest.raises(ValueError, match=r"scores \[0.5, nan\]: give a non-empty 1-D"):
        stats.iqm_interval([0.5, float("nan")])
    with pytest.raises(ValueError, match=r"y \[\[0.5\]\]: give a non-empty 1-D"):
        stats.probability_of_improvement([0.5], [[0.5]])
    with pytest.raises(ValueError, match=r"reps 0: must be >= 1"):
        stats.iqm_interval([0.5], reps=0)
    with pytest.raises(ValueError, match=r"a has 3 layouts and b 2: give both on the same layouts"):
        stats.paired_difference([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match=r"b: shape \(1, 1, 2\); give finite per-layout scores"):
        stats.paired_difference([1, 0], [[[1, 0]]])


def test_the_comparing_page_example():
    """The numbers the Comparing agents page quotes in "Reading the statistics"."""
    seeds = [0.62, 0.58, 0.91, 0.60, 0.64]
    iqm = stats.iqm_interval(seeds, reps=2000, seed=0)
    assert (round(iqm.point, 2), round(iqm.low, 2), round(iqm.high, 2)) == (0.62, 0.59, 0.81)
    assert stats.probability_of_improvement(seeds, [0.38]) == 1.0
    assert stats.probability_of_improvement(seeds, [0.61, 0.63]) == 0.5
    d = stats.paired_difference([1, 1, 0, 1, 0, 1, 1, 1], [0, 1, 0, 0, 0, 1, 0, 1], reps=2000, seed=0)
    assert (d.difference, d.low, d.high, d.a_better, d.b_better, d.p_value) == (0.375, 0.125, 0.75, 3, 0, 0.25)
