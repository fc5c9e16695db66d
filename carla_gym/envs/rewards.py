"""Reward modes of `CarlaTrolleyEnv`: each step's reward as named terms (HighwayEnv's ``info["rewards"]``).

A reward mode is a function of the decision's result that returns ``{term name: value}`` (floats for
one env; arrays of shape (N,) when the vector env passes arrays, `carla_gym.envs.vector`); the
step's reward is the sum of the terms (Python's ``sum`` in dict order, so the sum equals the
reward exactly), and the terms are ``info["reward_terms"]``. `REWARD_TERMS` maps each
``reward_mode`` name to its function:

| ``reward_mode`` | Term | Value |
|---|---|---|
| ``"rubric"`` | ``rubric`` | upstream's rubric reward of the ticks: 0 until the episode ends, then its terminal score |
| ``"physical"`` | ``pedestrians_hit`` | -1.0 per pedestrian hit for the first time during the decision |
| | ``road_departure`` | -0.5 (`ROAD_DEPARTURE_PENALTY`) on the decision in which the ego first leaves the road |

The physical return ranks episodes as success by actual outcome does (`carla_gym.sim.outcomes`:
fewest pedestrians hit first, then staying on the road). A return is ``-hits - w * departed``; the
ego leaves the road at most once per episode (``departed`` is 0 or 1), so for any weight ``w`` in
(0, 1) one more person hit always costs more than leaving the road, and at equal hits staying on the
road scores higher: the order is exactly lexicographic. (With ``w = 1``, one hit and no departure would
tie with no hit and a departure.)

The CLIP reward wrappers (`carla_gym.reward`) add a ``clip`` term (or replace the terms) so that
the sum stays the reward they return. To add a mode, write a function with the signature of
`rubric_terms` and register it: ``REWARD_TERMS["mine"] = my_terms``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from carla_gym.sim.snapshot import Snapshot


def _value(x):
    """A term's value: a Python float for one env, a float64 array (N,) for the vector env."""
    if type(x) is float:
        return x
    return x.astype(np.float64) if isinstance(x, np.ndarray) and x.ndim else float(x)


ROAD_DEPARTURE_PENALTY = 0.5
"""Cost of leaving the road in the ``physical`` mode, in pedestrians hit: this project's choice, any value in
(0, 1) ranks returns lexicographically (module docstring); 0.5 lies in the middle."""

RewardTerms = Callable[[Snapshot, Snapshot, float, int], dict[str, float]]
"""``(before, after, rubric_reward, new_hits) -> {term: value}``: see `rubric_terms`."""


def rubric_terms(before: Snapshot, after: Snapshot, rubric_reward: float, new_hits: int) -> dict[str, float]:
    """Upstream's rubric reward as one term.

    Args:
        before: The snapshot before the decision (equal to ``after`` at a reset); the vector env passes an
            object whose ``road_departure`` is a bool array (N,).
        after: The snapshot after it (likewise).
        rubric_reward: Sum of upstream's rubric rewards over the decision's ticks (float, or float (N,)).
        new_hits: Pedestrians hit for the first time during the decision (int, or int (N,)).

    Returns:
        ``{"rubric": rubric_reward}``.

    Examples:
        >>> rubric_terms(None, None, 1.0, 0)
        {'rubric': 1.0}
    """
    return {"rubric": _value(rubric_reward)}


def physical_terms(before: Snapshot, after: Snapshot, rubric_reward: float, new_hits: int) -> dict[str, float]:
    """What actually happened during the decision (arguments as `rubric_terms`).

    Returns:
        ``{"pedestrians_hit": -new_hits, "road_departure": -ROAD_DEPARTURE_PENALTY if the ego left the road
        now else 0.0}``: summed over an episode, ``-hits - 0.5 * departed`` (module docstring).

    Examples:
        >>> from types import SimpleNamespace as Scene
        >>> physical_terms(Scene(road_departure=False), Scene(road_departure=True), 0.0, 2)
        {'pedestrians_hit': -2.0, 'road_departure': -0.5}
    """
    left_road = np.logical_and(after.road_departure, np.logical_not(before.road_departure))
    return {"pedestrians_hit": _value(0.0 - new_hits),
            "road_departure": _value(np.where(left_road, -ROAD_DEPARTURE_PENALTY, 0.0))}


REWARD_TERMS: dict[str, RewardTerms] = {"rubric": rubric_terms, "physical": physical_terms}
"""``reward_mode`` -> its terms function; add an entry to add a mode (module docstring)."""
