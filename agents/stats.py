"""Interval estimates for comparing agents on plain arrays: IQM, performance profiles, improvement, paired differences.

The aggregate statistics of Agarwal et al. (2021, "Deep Reinforcement Learning at the Edge of the Statistical
Precipice") through their library `rliable`: the interquartile mean (IQM) of per-run scores with a stratified
bootstrap confidence interval (`iqm_interval`), performance profiles (`performance_profile`: the fraction of runs
whose score exceeds a threshold) and the probability of improvement of one agent over another
(`probability_of_improvement`). A run is one trained agent (one training seed), its score the success rate it
reaches on the test layouts; there is one task. Beside them, `paired_difference` compares two agents on the same
layouts (a paired bootstrap over layouts and a sign test), which the seed-level statistics do not use.

Every bootstrap draws from an explicit seed. rliable draws its bootstrap indices from NumPy's global legacy
generator (``np.random.choice``) whatever ``random_state`` it is given, so its calls run inside `_seeded`, which
seeds that generator and restores its state afterwards; each agent's interval is computed alone, so it does not
depend on the other agents of a call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
"""Coverage of every interval (this project's choice, the usual 95 %)."""
IQM_REPS = 10_000
"""Bootstrap replications of `iqm_interval` and `paired_difference` (this project's choice: rliable's default of
50,000 takes seconds per agent, and at 10,000 the Monte Carlo error of a 95 % percentile bound is a small fraction of
the interval's width)."""
PROFILE_REPS = 2_000
"""Bootstrap replications of `performance_profile` (rliable's default for profiles)."""
PROFILE_TAUS = np.linspace(0.0, 1.0, 51)
"""Thresholds of a performance profile: success rates 0, 0.02, ..., 1 (this project's choice: 2-point steps)."""


@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval.

    Attributes:
        point: The estimate (here a success rate, a fraction in [0, 1]).
        low: Lower bound of the `CONFIDENCE` interval.
        high: Upper bound.
    """

    point: float
    low: float
    high: float


@dataclass(frozen=True)
class PairedDifference:
    """Agent A minus agent B on the same layouts (`paired_difference`).

    Attributes:
        difference: Mean over layouts of A's per-layout success minus B's, in [-1, 1].
        low: Lower bound of its paired bootstrap interval.
        high: Upper bound.
        a_better: Layouts where A's per-layout success is higher than B's.
        b_better: Layouts where B's is higher.
        layouts: Layouts compared.
        p_value: Two-sided sign test of ``a_better`` against ``b_better`` (equal odds; ties left out): for two
            deterministic agents with one run each this is McNemar's exact test. 1.0 when no layout differs.
    """

    difference: float
    low: float
    high: float
    a_better: int
    b_better: int
    layouts: int
    p_value: float


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Seed NumPy's global legacy generator (which rliable's bootstrap draws from), restoring its state after."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _runs(scores, what: str = "scores") -> np.ndarray:
    """``scores`` as a float64 array of shape (runs,); refuses empty, multi-dimensional or non-finite input."""
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"{what} {scores!r}: give a non-empty 1-D sequence of finite per-run scores")
    return array


def _reps(reps: int) -> int:
    if reps < 1:
        raise ValueError(f"reps {reps}: must be >= 1")
    return reps


def iqm(scores) -> float:
    """Interquartile mean: the mean of the middle half of ``scores`` (rliable's ``aggregate_iqm``).

    SciPy's 25 % trimmed mean: ``floor(n / 4)`` values are cut from each end, so with fewer than 4 runs it is
    the mean.

    Args:
        scores: Per-run scores, shape (runs,).

    Raises:
        ValueError: ``scores`` is empty, not 1-D or not finite.

    Examples:
        >>> iqm([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 70.0])  # the mean of 2, 3, 4, 5
        3.5
    """
    from rliable import metrics

    return float(metrics.aggregate_iqm(_runs(scores)[:, None]))


def iqm_interval(scores, *, reps: int = IQM_REPS, seed: int = 0) -> Interval:
    """IQM of per-run scores with its `CONFIDENCE` stratified bootstrap interval (percentile method).

    rliable's ``get_interval_estimates`` with ``aggregate_iqm``: the runs are resampled with replacement
    ``reps`` times (one task, so the stratified bootstrap resamples the runs).

    Args:
        scores: Per-run scores, shape (runs,); one run gives the interval ``[point, point]``.
        reps: Bootstrap replications.
        seed: Seed of the bootstrap draws.

    Raises:
        ValueError: ``scores`` is empty, not 1-D or not finite, or ``reps`` < 1.
    """
    from rliable import library, metrics

    runs = _runs(scores)[:, None]
    with _seeded(seed):
        points, intervals = library.get_interval_estimates(
            {"x": runs}, lambda s: np.array([metrics.aggregate_iqm(s)]), reps=_reps(reps),
            confidence_interval_size=CONFIDENCE)
    return Interval(float(points["x"][0]), float(intervals["x"][0, 0]), float(intervals["x"][1, 0]))


def probability_of_improvement(x, y) -> float:
    """P(X > Y): the probability that a run of agent X scores higher than a run of Y (ties count a half).

    rliable's ``probability_of_improvement`` on one task: the Mann-Whitney U statistic over
    ``len(x) * len(y)``; 0.5 when both hold the same scores.

    Args:
        x: Per-run scores of X, shape (runs_x,).
        y: Per-run scores of Y, shape (runs_y,).

    Raises:
        ValueError: ``x`` or ``y`` is empty, not 1-D or not finite.

    Examples:
        >>> probability_of_improvement([0.9, 0.8], [0.1, 0.2]), probability_of_improvement([0.2, 0.6], [0.4])
        (1.0, 0.5)
    """
    from rliable import metrics

    return float(metrics.probability_of_improvement(_runs(x, "x")[:, None], _runs(y, "y")[:, None]))


def improvement_matrix(scores: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """`probability_of_improvement` of every agent over every other: ``{x: {y: P(X > Y)}}`` (no diagonal).

    Args:
        scores: Each agent's per-run scores, shape (runs,), in table order.
    """
    return {x: {y: probability_of_improvement(scores[x], scores[y]) for y in scores if y != x} for x in scores}


def performance_profile(scores, taus=PROFILE_TAUS, *, reps: int = PROFILE_REPS,
                        seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run-score distribution: the fraction of runs scoring above each threshold, with its bootstrap band.

    rliable's ``create_performance_profile`` (score distributions over runs; one task).

    Args:
        scores: Per-run scores, shape (runs,).
        taus: Thresholds, shape (n,).
        reps: Bootstrap replications of the band.
        seed: Seed of the bootstrap draws.

    Returns:
        ``(profile, low, high)``, each shape (n,), float64: the fraction of runs with score > tau (strictly) and
        the `CONFIDENCE` band's bounds.

    Raises:
        ValueError: ``scores`` is empty, not 1-D or not finite, or ``reps`` < 1.
    """
    from rliable import library

    runs = _runs(scores)[:, None]
    taus = np.asarray(taus, dtype=np.float64)
    with _seeded(seed):
        profiles, bands = library.create_performance_profile({"x": runs}, taus, reps=_reps(reps),
                                                             confidence_interval_size=CONFIDENCE)
    return (np.asarray(profiles["x"], dtype=np.float64), np.asarray(bands["x"][0], dtype=np.float64),
            np.asarray(bands["x"][1], dtype=np.float64))


def _layouts(scores, what: str) -> np.ndarray:
    """Per-layout success of an agent: the mean over its runs of a (runs, layouts) or (layouts,) array."""
    array = np.asarray(scores, dtype=np.float64)
    if array.ndim == 1:
        array = array[None, :]
    if array.ndim != 2 or array.size == 0 or not np.all(np.isfinite(array)):
        raise ValueError(f"{what}: shape {array.shape}; give finite per-layout scores of shape (layouts,) or "
                         "(runs, layouts)")
    return array.mean(axis=0)


def paired_difference(a, b, *, reps: int = IQM_REPS, seed: int = 0, chunk: int = 1000) -> PairedDifference:
    """A minus B on the same layouts: the mean per-layout difference with a paired bootstrap interval over layouts.

    Each agent's per-layout success is the mean over its runs (0 or 1 for one run); the difference of the two
    is resampled over layouts (with replacement, ``reps`` times, NumPy's ``default_rng(seed)``) and the
    `CONFIDENCE` interval is its percentile interval. The layouts are the same items for both agents, so the
    pairing removes the layout-to-layout variation that two separate intervals would carry.

    Args:
        a: A's success per layout, shape (layouts,) or (runs_a, layouts), values in [0, 1].
        b: B's, shape (layouts,) or (runs_b, layouts), the same layouts in the same order.
        reps: Bootstrap replications.
        seed: Seed of the bootstrap draws.
        chunk: Replications drawn at a time (memory: ``chunk * layouts`` indices).

    Raises:
        ValueError: An array is empty, not finite or of another shape, the two differ in layouts, or ``reps``
            < 1.

    Examples:
        >>> d = paired_difference([1, 1, 1, 0], [0, 0, 0, 0], reps=200)
        >>> d.difference, d.a_better, d.b_better, d.p_value
        (0.75, 3, 0, 0.25)
    """
    from scipy.stats import binomtest

    per_a, per_b = _layouts(a, "a"), _layouts(b, "b")
    if per_a.shape != per_b.shape:
        raise ValueError(f"a has {per_a.size} layouts and b {per_b.size}: give both on the same layouts")
    diff = per_a - per_b
    n, rng, means = diff.size, np.random.default_rng(seed), []
    for start in range(0, _reps(reps), chunk):
        means.append(diff[rng.integers(0, n, size=(min(chunk, reps - start), n))].mean(axis=1))
    tail = 100 * (1 - CONFIDENCE) / 2
    low, high = np.percentile(np.concatenate(means), [tail, 100 - tail])
    a_better, b_better = int(np.sum(diff > 0)), int(np.sum(diff < 0))
    p_value = binomtest(a_better, a_better + b_better, 0.5).pvalue if a_better + b_better else 1.0
    return PairedDifference(float(diff.mean()), float(low), float(high), a_better, b_better, n, float(p_value))
