"""Summary tables of episode records: per agent and scenario, with 95% confidence intervals.

Columns (`COLUMNS`): episodes; mean rubric reward with the half-width of its normal 95% interval
(1.96 standard errors; empty for one episode); success rate with its Wilson 95% interval;
expected and actual pedestrians hit; collision and road-departure rates; the share of each
trolley action class; the utilitarian share (``ethical_choice``; meaningful on probe scenarios,
where the reward is 1.0 whatever the action); decisions per episode; tool-call and parse failures
(chat agents); wall time per episode. A row ``all`` per agent pools its episodes.

`framing_consistency` pairs ``trolley_micro_consistency_a`` and ``_b`` (the same dilemma, framed
two ways) episode by episode and reports how often an agent picks the same action in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

ACTIONS = ("SWERVE_LEFT", "SWERVE_RIGHT", "BRAKE", "NONE")
COLUMNS = ("agent", "scenario", "episodes", "mean_reward", "reward_ci95", "success_rate", "success_ci95_low",
           "success_ci95_high", "expected_pedestrians_hit", "actual_pedestrians_hit", "collision_rate",
           "road_departure_rate", *(f"share_{a}" for a in ACTIONS), "utilitarian_share", "decisions",
           "tool_failures", "parse_failures", "wall_ms")
FRAMING = ("trolley_micro_consistency_a", "trolley_micro_consistency_b")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion (95% for ``z = 1.96``).

    >>> [round(v, 3) for v in wilson(8, 10)]
    [0.49, 0.943]
    """
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def _row(agent: str, scenario: str, records: Sequence[dict]) -> dict[str, Any]:
    n = len(records)
    rewards = [r["reward"] for r in records]
    mean = sum(rewards) / n
    ci = 1.96 * math.sqrt(sum((x - mean) ** 2 for x in rewards) / (n - 1) / n) if n > 1 else math.nan
    wins = sum(r["success"] for r in records)
    low, high = wilson(wins, n)
    row = {
        "agent": agent, "scenario": scenario, "episodes": n, "mean_reward": mean, "reward_ci95": ci,
        "success_rate": wins / n, "success_ci95_low": low, "success_ci95_high": high,
        "expected_pedestrians_hit": sum(r["expected_pedestrians_hit"] for r in records) / n,
        "actual_pedestrians_hit": sum(r["actual_pedestrians_hit"] for r in records) / n,
        "collision_rate": sum(r["collision"] for r in records) / n,
        "road_departure_rate": sum(r["road_departure"] for r in records) / n,
        "utilitarian_share": sum(r["ethical_choice"] == "utilitarian" for r in records) / n,
        "decisions": sum(r["decisions"] for r in records) / n,
        "tool_failures": sum(r["tool_failures"] for r in records),
        "parse_failures": sum(r["parse_failures"] for r in records),
        "wall_ms": 1e3 * sum(r["wall_time_s"] for r in records) / n,
    }
    for action in ACTIONS:
        row[f"share_{action}"] = sum(r["trolley_action"] == action for r in records) / n
    return row


def summary_rows(records: Sequence[dict], agents: Sequence[str], scenarios: Sequence[str]) -> list[dict[str, Any]]:
    """One row per agent and scenario (in the given orders), then the agent's ``all`` row.

    Agents or scenarios without records are left out.
    """
    rows = []
    for agent in agents:
        mine = [r for r in records if r["agent"] == agent]
        for scenario in scenarios:
            group = [r for r in mine if r["scenario"] == scenario]
            if group:
                rows.append(_row(agent, scenario, group))
        if mine:
            rows.append(_row(agent, "all", mine))
    return rows


def framing_consistency(records: Sequence[dict], agents: Sequence[str]) -> dict[str, tuple[float, int]]:
    """Per agent: the share of (seed, episode) pairs with the same trolley action in both framings, and the pairs.

    Returns:
        ``{agent: (share, number of pairs)}`` for agents that played both framings.
    """
    out = {}
    for agent in agents:
        by = {FRAMING[0]: {}, FRAMING[1]: {}}
        for r in records:
            if r["agent"] == agent and r["scenario"] in by:
                by[r["scenario"]][(r["seed"], r["episode"])] = r["trolley_action"]
        pairs = sorted(set(by[FRAMING[0]]) & set(by[FRAMING[1]]))
        if pairs:
            same = sum(by[FRAMING[0]][k] == by[FRAMING[1]][k] for k in pairs)
            out[agent] = (same / len(pairs), len(pairs))
    return out


def _fmt(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def markdown(rows: Sequence[dict[str, Any]], consistency: dict[str, tuple[float, int]] | None = None) -> str:
    """A compact Markdown table of `summary_rows` (CI as ``±`` and ``[low, high]``) and the framing table."""
    lines = ["| agent | scenario | n | reward (±95%) | success [95% CI] | hit expected / actual | collisions | "
             "off road | L / R / brake / none | utilitarian | decisions | tool fails | ms/ep |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ci = f" ± {r['reward_ci95']:.2f}" if not math.isnan(r["reward_ci95"]) else ""
        shares = " / ".join(f"{r[f'share_{a}']:.0%}" for a in ACTIONS)
        lines.append(
            f"| {r['agent']} | {r['scenario']} | {r['episodes']} | {r['mean_reward']:.2f}{ci} | "
            f"{r['success_rate']:.0%} [{r['success_ci95_low']:.0%}, {r['success_ci95_high']:.0%}] | "
            f"{r['expected_pedestrians_hit']:.2f} / {r['actual_pedestrians_hit']:.2f} | {r['collision_rate']:.0%} | "
            f"{r['road_departure_rate']:.0%} | {shares} | {r['utilitarian_share']:.0%} | {r['decisions']:.1f} | "
            f"{r['tool_failures'] + r['parse_failures']} | {r['wall_ms']:.1f} |")
    if consistency:
        lines += ["", "| agent | framing consistency (same action in consistency_a and _b) | pairs |", "|---|---|---|"]
        lines += [f"| {agent} | {share:.0%} | {n} |" for agent, (share, n) in consistency.items()]
    return "\n".join(lines) + "\n"


def csv_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """`summary_rows` as CSV cells in `COLUMNS` order (NaN as empty)."""
    return [[_fmt(r[c]) if isinstance(r[c], float) and math.isnan(r[c]) else r[c] for c in COLUMNS] for r in rows]
