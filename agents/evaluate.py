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
        road_departure_rate: Fraction of episodes in which the ego left the road.
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
    road_departure_rate: float
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
    successes, returns, hits, departures, mismatches, actions = [], [], [], [], [], Counter()
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
            departures.append(bool(outcome["road_departure"]))
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
        road_departure_rate=sum(departures) / episodes,
        mismatch_rate=sum(mismatches) / len(mismatches) if mismatches else None,
        actions=dict(actions),
        per_scenario={k: sum(v) / len(v) for k, v in sorted(per.items())},
    )


def evaluate_suite(act: Callable, env_kwargs: dict, scenarios, episodes: int = 100, seed: int = 10_000,
                   oracle: bool = True) -> dict:
    """Evaluate per scenario: ``episodes`` episodes of each, and the catalogue oracle on the same seeds.

    Args:
        act: ``act(observation, info) -> action``.
        env_kwargs: Keyword arguments of `gym.make("CarlaTrolley-v0", ...)` (``scenario`` is set per row).
        scenarios: Scenario names.
        episodes: Episodes per scenario, >= 1.
        seed: Seed of the first episode of each scenario.
        oracle: Also run the oracle (for ``oracle_mean_reward``).

    Returns:
        ``{"per_scenario": {name: {"success_rate", "mean_reward", "oracle_mean_reward",
        "mean_actual_hits", "road_departure_rate", "mismatch_rate" (None outside trolley_micro),
        "actions"}}, "success_rate", "mean_reward", "mean_actual_hits", "road_departure_rate",
        "oracle_mean_reward", "reward_vs_oracle"}`` (means over scenarios; ``reward_vs_oracle`` is
        mean_reward / oracle_mean_reward).
    """
    from agents.scripted import OracleAgent

    rows = {}
    for name in scenarios:
        kwargs = {**env_kwargs, "scenario": name}
        result = evaluate(act, kwargs, episodes=episodes, seed=seed)
        row = {"success_rate": result.success_rate, "mean_reward": result.mean_reward,
               "mean_actual_hits": result.mean_actual_hits, "road_departure_rate": result.road_departure_rate,
               "mismatch_rate": result.mismatch_rate,
               "actions": result.actions}
        if oracle:
            oracle_kwargs = {key: value for key, value in kwargs.items() if key != "steer_smoothing"}  # control only
            best = evaluate(OracleAgent(kwargs.get("scenario_config")).act,
                            {**oracle_kwargs, "observation_mode": "state", "action_mode": "tools"}, episodes=episodes,
                            seed=seed)
            row["oracle_mean_reward"] = best.mean_reward
        rows[name] = row
    n = len(rows)
    summary = {"per_scenario": rows, "episodes_per_scenario": episodes,
               "success_rate": sum(r["success_rate"] for r in rows.values()) / n,
               "mean_reward": sum(r["mean_reward"] for r in rows.values()) / n,
               "mean_actual_hits": sum(r["mean_actual_hits"] for r in rows.values()) / n,
               "road_departure_rate": sum(r["road_departure_rate"] for r in rows.values()) / n}
    if oracle:
        summary["oracle_mean_reward"] = sum(r["oracle_mean_reward"] for r in rows.values()) / n
        summary["reward_vs_oracle"] = (summary["mean_reward"] / summary["oracle_mean_reward"]
                                       if summary["oracle_mean_reward"] else None)
    return summary
