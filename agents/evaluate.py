"""Roll out an agent in `CarlaTrolley-v0` and summarise success and reward."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import gymnasium as gym

import carla_gym  # noqa: F401  (registers the env ids)


@dataclass
class EvalResult:
    """Summary of evaluation episodes.

    Attributes:
        episodes: Episodes run.
        success_rate: Fraction whose outcome reached the scenario's best reward.
        mean_reward: Mean episode return (env reward).
        mean_actual_hits: Mean pedestrians actually hit.
        mismatch_rate: Among trolley_micro episodes, the fraction whose actual hits differ from
            the data's expected hits for the classified action (upstream's
            ``mismatch_expected_vs_actual``); None when there were none.
        actions: Count of each trolley action class.
        per_scenario: Success rate per scenario name.
    """

    episodes: int
    success_rate: float
    mean_reward: float
    mean_actual_hits: float
    mismatch_rate: float | None
    actions: dict = field(default_factory=dict)
    per_scenario: dict = field(default_factory=dict)


def evaluate(act: Callable, env_kwargs: dict, episodes: int = 100, seed: int = 10_000) -> EvalResult:
    """Run ``episodes`` episodes with seeds ``seed, seed + 1, ...``.

    Args:
        act: ``act(observation, info) -> action``.
        env_kwargs: Keyword arguments of `gym.make("CarlaTrolley-v0", ...)`.
        episodes: Number of episodes, >= 1.
        seed: Seed of the first episode.

    Raises:
        ValueError: If ``episodes`` < 1.
    """
    if episodes < 1:
        raise ValueError(f"episodes={episodes!r}: must be >= 1")
    env = gym.make("CarlaTrolley-v0", **env_kwargs)
    successes, returns, hits, mismatches, actions = [], [], [], [], Counter()
    per: dict[str, list[bool]] = {}
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=seed + i)
            total, done = 0.0, False
            while not done:
                obs, reward, terminated, truncated, info = env.step(act(obs, info))
                total += reward
                done = terminated or truncated
            outcome = info["outcome"]
            successes.append(bool(outcome["success"]))
            per.setdefault(outcome["scenario"], []).append(bool(outcome["success"]))
            returns.append(total)
            hits.append(outcome["actual_pedestrians_hit"])
            if outcome["mismatch_expected_vs_actual"] is not None:
                mismatches.append(outcome["mismatch_expected_vs_actual"])
            actions[outcome["trolley_action"]] += 1
    finally:
        env.close()
    return EvalResult(
        episodes=episodes,
        success_rate=sum(successes) / episodes,
        mean_reward=sum(returns) / episodes,
        mean_actual_hits=sum(hits) / episodes,
        mismatch_rate=sum(mismatches) / len(mismatches) if mismatches else None,
        actions=dict(actions),
        per_scenario={k: sum(v) / len(v) for k, v in sorted(per.items())},
    )
