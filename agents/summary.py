"""Summary tables of episode records: per agent and scenario, with 95% confidence intervals.

Columns (`COLUMNS`): episodes; mean rubric reward and the half-width of its 95% interval; success
rate with its 95% interval; expected and actual pedestrians hit; collision and road-departure
rates; the share of each trolley action class; the utilitarian share (``ethical_choice`` on the
probe scenarios only, where the reward is 1.0 whatever the action: a revealed preference; empty
without probes); decisions per episode; tool calls per episode (every call that was run, failed
ones included), failed tool calls and parse failures (totals; chat agents, counted as in
training: `carla_gym.llm.tools`); wall time per episode. A row ``all`` per agent pools its scenarios with equal weight.

Intervals. The simulator is deterministic: only stochastic agents (random, sampled LLMs) vary
between the seeds and episodes of a scenario. Where every replicate of a scenario is the same
episode (same actions and outcome), the result is exact: ``replicates_identical`` is true and no
interval is given (``exact`` in the Markdown table). Otherwise, per scenario: Student-t interval
of the mean reward and Wilson interval of the success rate over the episodes; for the ``all``
row: normal intervals with the stratified standard error ``sqrt(sum_s var_s / n_s) / S`` over the
S scenarios (exact scenarios contribute no variance), as the suite itself is fixed. A scenario
with a single, possibly random episode leaves its intervals empty.

`framing_consistency` pairs ``trolley_micro_consistency_a`` and ``_b`` (one dilemma framed two
ways; also their ``_deadzone`` variants) episode by episode and reports how often an agent picks
the same action in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from carla_gym.sim.catalogue import TROLLEY_ACTIONS

ACTIONS = TROLLEY_ACTIONS
COLUMNS = ("agent", "scenario", "episodes", "mean_reward", "reward_ci95", "success_rate", "success_ci95_low",
           "success_ci95_high", "replicates_identical", "expected_pedestrians_hit", "actual_pedestrians_hit",
           "collision_rate", "road_departure_rate", *(f"share_{a}" for a in ACTIONS), "utilitarian_share",
           "decisions", "tool_calls", "tool_failures", "parse_failures", "wall_ms")
FRAMING = (("trolley_micro_consistency_a", "trolley_micro_consistency_b"),
           ("trolley_micro_consistency_a_deadzone", "trolley_micro_consistency_b_deadzone"))
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
"""97.5% quantiles of Student's t by degrees of freedom (standard tables); 1.96 beyond 120."""


def t975(df: int) -> float:
    """The 97.5% t quantile for ``df`` degrees of freedom (the table's nearest lower entry: conservative).

    >>> t975(2), t975(11), t975(1000)
    (4.303, 2.228, 1.96)
    """
    if df > 120:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


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


def _variance(values: Sequence[float]) -> float:
    mean = math.fsum(values) / len(values)  # fsum: exact, so results do not depend on the records' order
    return math.fsum((x - mean) ** 2 for x in values) / (len(values) - 1)


def _signature(record: dict) -> tuple:
    return (record["reward"], record["trolley_action"], record["actual_pedestrians_hit"], record["road_departure"],
            repr(record["actions"]))


def _identical(records: Sequence[dict]) -> bool | None:
    """True when all replicates are one episode, False when they differ, None for a single one."""
    if len(records) < 2:
        return None
    return len({_signature(r) for r in records}) == 1


def _means(agent: str, scenario: str, records: Sequence[dict]) -> dict[str, Any]:
    n = len(records)
    probes = [r for r in records if r["is_probe"]]
    row = {
        "agent": agent, "scenario": scenario, "episodes": n,
        "mean_reward": math.fsum(r["reward"] for r in records) / n,
        "success_rate": sum(r["success"] for r in records) / n,
        "expected_pedestrians_hit": sum(r["expected_pedestrians_hit"] for r in records) / n,
        "actual_pedestrians_hit": sum(r["actual_pedestrians_hit"] for r in records) / n,
        "collision_rate": sum(r["collision"] for r in records) / n,
        "road_departure_rate": sum(r["road_departure"] for r in records) / n,
        "utilitarian_share": (sum(r["ethical_choice"] == "utilitarian" for r in probes) / len(probes)
                              if probes else math.nan),
        "decisions": sum(r["decisions"] for r in records) / n,
        "tool_calls": sum(len(r["tool_calls"]) for r in records) / n,
        "tool_failures": sum(r["tool_failures"] for r in records),
        "parse_failures": sum(r["parse_failures"] for r in records),
        "wall_ms": 1e3 * math.fsum(r["wall_time_s"] for r in records) / n,
    }
    for action in ACTIONS:
        row[f"share_{action}"] = sum(r["trolley_action"] == action for r in records) / n
    return row


def _scenario_row(agent: str, scenario: str, records: Sequence[dict]) -> dict[str, Any]:
    row = _means(agent, scenario, records)
    n, identical = len(records), _identical(records)
    row["replicates_identical"] = identical
    row["reward_ci95"] = row["success_ci95_low"] = row["success_ci95_high"] = math.nan
    if identical is False:
        row["reward_ci95"] = t975(n - 1) * math.sqrt(_variance([r["reward"] for r in records]) / n)
        row["success_ci95_low"], row["success_ci95_high"] = wilson(sum(r["success"] for r in records), n)
    return row


def _pooled_row(agent: str, groups: Sequence[Sequence[dict]]) -> dict[str, Any]:
    records = [r for g in groups for r in g]
    row = _means(agent, "all", records)
    k = len(groups)
    row["mean_reward"] = math.fsum(math.fsum(r["reward"] for r in g) / len(g) for g in groups) / k
    row["success_rate"] = math.fsum(sum(r["success"] for r in g) / len(g) for g in groups) / k
    kinds = [_identical(g) for g in groups]
    row["replicates_identical"] = all(kinds) if None not in kinds else None
    row["reward_ci95"] = row["success_ci95_low"] = row["success_ci95_high"] = math.nan
    if None not in kinds and not all(kinds):
        def half(values_of) -> float:
            return 1.96 * math.sqrt(math.fsum(0.0 if same else _variance(values_of(g)) / len(g)
                                              for g, same in zip(groups, kinds, strict=True))) / k

        row["reward_ci95"] = half(lambda g: [r["reward"] for r in g])
        success = half(lambda g: [float(r["success"]) for r in g])
        row["success_ci95_low"] = max(0.0, row["success_rate"] - success)
        row["success_ci95_high"] = min(1.0, row["success_rate"] + success)
    return row


def summary_rows(records: Sequence[dict], agents: Sequence[str], scenarios: Sequence[str]) -> list[dict[str, Any]]:
    """One row per agent and scenario (in the given orders), then the agent's ``all`` row.

    Agents or scenarios without records are left out.
    """
    rows = []
    for agent in agents:
        groups = []
        for scenario in scenarios:
            group = [r for r in records if r["agent"] == agent and r["scenario"] == scenario]
            if group:
                groups.append(group)
                rows.append(_scenario_row(agent, scenario, group))
        if groups:
            rows.append(_pooled_row(agent, groups))
    return rows


def framing_consistency(records: Sequence[dict], agents: Sequence[str]) -> dict[str, tuple[float, int]]:
    """Per agent: the share of paired episodes with the same trolley action in both framings, and the pairs.

    Episodes pair up by (framing pair, seed, episode) over `FRAMING`.

    Returns:
        ``{agent: (share, number of pairs)}`` for agents that played both framings of a pair.
    """
    out = {}
    for agent in agents:
        actions = {(r["scenario"], r["seed"], r["episode"]): r["trolley_action"] for r in records
                   if r["agent"] == agent}
        same = pairs = 0
        for a, b in FRAMING:
            for (scenario, seed, episode), action in actions.items():
                if scenario == a and (b, seed, episode) in actions:
                    pairs += 1
                    same += action == actions[(b, seed, episode)]
        if pairs:
            out[agent] = (same / pairs, pairs)
    return out


def _fmt(value) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.2f}"
    return str(value)


def markdown(rows: Sequence[dict[str, Any]], consistency: dict[str, tuple[float, int]] | None = None) -> str:
    """A compact Markdown table of `summary_rows` (``± half-width``, ``[low, high]`` or ``exact``) and framing."""
    lines = ["| agent | scenario | n | reward | success | hit expected / actual | collisions | "
             "off road | L / R / brake / none | utilitarian (probes) | decisions | tool calls/ep | tool failures | "
             "parse failures | ms/ep |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["replicates_identical"]:
            reward, success = f"{r['mean_reward']:.2f} exact", f"{r['success_rate']:.0%} exact"
        else:
            reward = f"{r['mean_reward']:.2f}" + ("" if math.isnan(r["reward_ci95"]) else f" ± {r['reward_ci95']:.2f}")
            success = f"{r['success_rate']:.0%}" + ("" if math.isnan(r["success_ci95_low"]) else
                                                    f" [{r['success_ci95_low']:.0%}, {r['success_ci95_high']:.0%}]")
        shares = " / ".join(f"{r[f'share_{a}']:.0%}" for a in ACTIONS)
        utilitarian = "" if math.isnan(r["utilitarian_share"]) else f"{r['utilitarian_share']:.0%}"
        lines.append(
            f"| {r['agent']} | {r['scenario']} | {r['episodes']} | {reward} | {success} | "
            f"{r['expected_pedestrians_hit']:.2f} / {r['actual_pedestrians_hit']:.2f} | {r['collision_rate']:.0%} | "
            f"{r['road_departure_rate']:.0%} | {shares} | {utilitarian} | {r['decisions']:.1f} | "
            f"{r['tool_calls']:.1f} | {r['tool_failures']} | {r['parse_failures']} | {r['wall_ms']:.1f} |")
    if consistency:
        lines += ["", "| agent | framing consistency (same action in consistency_a and _b) | pairs |", "|---|---|---|"]
        lines += [f"| {agent} | {share:.0%} | {n} |" for agent, (share, n) in consistency.items()]
    return "\n".join(lines) + "\n"


def csv_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """`summary_rows` as CSV cells in `COLUMNS` order (NaN as empty)."""
    return [[_fmt(r[c]) if isinstance(r[c], float) and math.isnan(r[c]) else r[c] for c in COLUMNS] for r in rows]
