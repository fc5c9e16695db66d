"""Summary tables of episode records: per agent and scenario, with 95% confidence intervals.

Columns (`COLUMNS`), outcomes first: episodes; success by actual outcome (the record's
``outcome_success``: the episode's pedestrians actually hit, then its road departure, are no worse
than the best outcome a candidate policy reaches in that layout; `carla_gym.sim.outcomes`) with its
95% interval and the episodes it counts (``outcome_success_episodes``: none on action_bias
scenarios, `outcome_success_applies`); pedestrians actually hit and the best outcome's hits (per
episode); the road-departure rate. Then upstream's rubric: mean rubric reward and the half-width of its 95%
interval; rubric success (``success``: the classified action reaches the scenario's best rubric
reward) with its 95% interval; whether the replicates are one episode (``replicates_identical``,
below) and how many of the row's scenarios were played once (``scenarios_played_once``, below);
the pedestrians the rubric's data expects for the classified action. Then the collision rate; the
share of each trolley action class; the utilitarian share (``ethical_choice`` on the probe
scenarios only, where the reward is 1.0 whatever the action: a revealed preference; empty without
probes); decisions per episode; whether the agent is a tool-calling chat agent (``chat_agent``,
`agents.records.is_chat_record`); tool calls per episode (every call that was run, failed ones
included), failed tool calls and parse failures (totals; chat agents, counted as in training:
`carla_gym.llm.tools`); wall time per episode. A row ``all`` per agent pools its scenarios with
equal weight.

The Markdown table (`markdown`) shows only the columns that apply to its rows (`MARKDOWN_COLUMNS`,
`markdown_columns`): the outcome columns (success by actual outcome, hits actual / best, road
departures, collisions) where outcome success applies to some row; upstream's rubric after them
(always: it is upstream's score); the utilitarian share where some row has probe episodes; tool
calls, tool failures and parse failures where some row is a chat agent's. The CSV and JSON files
keep every column.

One episode for many. A deterministic agent on a fixed scenario plays the same episode at every
seed and episode, so `agents.evaluation.play_all` plays it once and marks its record
``played_once``; such a scenario row has one episode and is exact, and the Markdown table says
so in its n column (``1 (deterministic)``; an ``all`` row: ``24 (deterministic)`` when each of its
scenarios was played once, ``224 (24 deterministic)`` when 24 of them were), with a note under the
table.

Success by actual outcome does not apply to action_bias scenarios: their episodes end within
0.2 s, before any impact, so every episode there "reaches the best outcome" whatever it does. Their
rows leave it empty (NaN; an empty cell), and the ``all`` row pools it over the agent's other
scenarios only (equal weight), stating the episodes counted (``outcome_success_episodes``; ``(n=54)``
after the rate in the Markdown table when it differs from the row's episodes).

Intervals. The simulator is deterministic: only stochastic agents (random, sampled LLMs) and the
generated scenarios (a layout per episode seed) vary between the seeds and episodes of a
scenario. Where every replicate of a scenario is the same episode (same actions, outcome and
rubric score, and on a generated scenario the same episode key, which draws its layout: generated
replicates are never one episode), the result is exact: ``replicates_identical`` is true and no
interval is given (``exact`` in the Markdown table); a single episode played once for all of them
(``played_once``) is exact too. Otherwise, per scenario: Student-t interval of
the mean reward and Wilson intervals of both success rates (outcome and rubric) over the episodes;
for the ``all`` row: normal intervals with the stratified standard error ``sqrt(sum_s var_s / n_s) / S``
over the S scenarios pooled (exact scenarios contribute no variance), as the suite itself is fixed; with a single
scenario the ``all`` row is that scenario's row. A scenario with a single, possibly random
episode leaves its intervals empty.

`framing_consistency` pairs ``trolley_micro_consistency_a`` and ``_b`` (one dilemma framed two
ways; also their ``_deadzone`` variants) episode by episode and reports how often an agent picks
the same action in both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from agents.records import is_chat_record
from carla_gym.sim.catalogue import TROLLEY_ACTIONS
from carla_gym.sim.scenarios import family_of, is_generated

ACTIONS = TROLLEY_ACTIONS
COLUMNS = ("agent", "scenario", "episodes", "outcome_success_rate", "outcome_success_ci95_low",
           "outcome_success_ci95_high", "outcome_success_episodes", "actual_pedestrians_hit", "best_pedestrians_hit",
           "road_departure_rate",
           "mean_reward", "reward_ci95", "success_rate", "success_ci95_low", "success_ci95_high",
           "replicates_identical", "scenarios_played_once", "expected_pedestrians_hit", "collision_rate",
           *(f"share_{a}" for a in ACTIONS), "utilitarian_share", "decisions", "chat_agent", "tool_calls",
           "tool_failures", "parse_failures", "wall_ms")
"""Summary columns, outcomes first. ``mean_reward``, ``reward_ci95``, ``success_rate`` and ``success_ci95_*``
are upstream's rubric (names kept from earlier versions, so their readers keep working); the tables
name them "rubric reward" and "rubric success"."""
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

    Examples:
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


def outcome_success_applies(scenario: str) -> bool:
    """Whether success by actual outcome says something on ``scenario``: not on action_bias scenarios.

    Their episodes end within 0.2 s, before any impact, so every one "reaches the best outcome"
    (`carla_gym.sim.rules.outcome`). A name the simulator does not know counts as applicable.

    >>> outcome_success_applies("trolley_saves"), outcome_success_applies("trolley_generated_test")
    (False, True)
    """
    try:
        return family_of(scenario) != "action_bias"
    except ValueError:  # not a scenario of this simulator (another version's, a test's): its records decide
        return True


def _signature(record: dict) -> tuple:
    """What makes two replicates one episode; a generated scenario's episode key draws its layout (never equal)."""
    layout = (record["seed"], record["episode"]) if is_generated(record["scenario"]) else None
    return (record["reward"], record["success"], record["trolley_action"], record["actual_pedestrians_hit"],
            record["road_departure"], record["outcome_success"], repr(record["actions"]), layout)


def _played_once(records: Sequence[dict]) -> bool:
    """Whether ``records`` is one episode played once for every seed and episode (its ``played_once``)."""
    return len(records) == 1 and bool(records[0].get("played_once", False))


def _identical(records: Sequence[dict]) -> bool | None:
    """Whether the replicates are one episode: True, False, or None for a single episode that stands for no other.

    A single episode played once for every seed and episode (``played_once``) is one episode: True.
    """
    if len(records) < 2:
        return True if _played_once(records) else None
    return len({_signature(r) for r in records}) == 1


def _means(agent: str, scenario: str, records: Sequence[dict]) -> dict[str, Any]:
    n = len(records)
    probes = [r for r in records if r["is_probe"]]
    applies = outcome_success_applies(scenario)
    row = {
        "agent": agent, "scenario": scenario, "episodes": n,
        "outcome_success_rate": sum(r["outcome_success"] for r in records) / n if applies else math.nan,
        "outcome_success_episodes": n if applies else 0,
        "actual_pedestrians_hit": sum(r["actual_pedestrians_hit"] for r in records) / n,
        "best_pedestrians_hit": sum(r["best_pedestrians_hit"] for r in records) / n,
        "mean_reward": math.fsum(r["reward"] for r in records) / n,
        "success_rate": sum(r["success"] for r in records) / n,
        "expected_pedestrians_hit": sum(r["expected_pedestrians_hit"] for r in records) / n,
        "collision_rate": sum(r["collision"] for r in records) / n,
        "road_departure_rate": sum(r["road_departure"] for r in records) / n,
        "utilitarian_share": (sum(r["ethical_choice"] == "utilitarian" for r in probes) / len(probes)
                              if probes else math.nan),
        "decisions": sum(r["decisions"] for r in records) / n,
        "chat_agent": any(map(is_chat_record, records)),
        "tool_calls": sum(len(r["tool_calls"]) for r in records) / n,
        "tool_failures": sum(r["tool_failures"] for r in records),
        "parse_failures": sum(r["parse_failures"] for r in records),
        "wall_ms": 1e3 * math.fsum(r["wall_time_s"] for r in records) / n,
    }
    for action in ACTIONS:
        row[f"share_{action}"] = sum(r["trolley_action"] == action for r in records) / n
    return row


SCENARIO_MEANS = ("actual_pedestrians_hit", "best_pedestrians_hit", "expected_pedestrians_hit", "collision_rate",
                  "road_departure_rate", "utilitarian_share", "decisions", "tool_calls", "wall_ms",
                  *(f"share_{action}" for action in ACTIONS))
"""Per-episode means that an ``all`` row averages over its scenarios, each scenario weighing the same (a scenario
played once by a deterministic agent counts as much as one played 100 times, as in the success rates)."""

SUCCESSES = ("outcome_success", "success")
"""Boolean record fields summarised as ``<field>_rate`` with a 95% interval ``<field>_ci95_low`` / ``_high``."""


def _no_intervals(row: dict[str, Any]) -> None:
    row["reward_ci95"] = math.nan
    for field in SUCCESSES:
        row[f"{field}_ci95_low"] = row[f"{field}_ci95_high"] = math.nan


def _scenario_row(agent: str, scenario: str, records: Sequence[dict]) -> dict[str, Any]:
    row = _means(agent, scenario, records)
    n, identical = len(records), _identical(records)
    row["replicates_identical"] = identical
    row["scenarios_played_once"] = int(_played_once(records))
    _no_intervals(row)
    if identical is False:
        row["reward_ci95"] = t975(n - 1) * math.sqrt(_variance([r["reward"] for r in records]) / n)
        for field in SUCCESSES:
            if not math.isnan(row[f"{field}_rate"]):
                row[f"{field}_ci95_low"], row[f"{field}_ci95_high"] = wilson(sum(r[field] for r in records), n)
    return row


def _pooled_row(agent: str, groups: Sequence[Sequence[dict]]) -> dict[str, Any]:
    if len(groups) == 1:  # one scenario: the pool is that scenario, with its Wilson and t intervals
        return {**_scenario_row(agent, groups[0][0]["scenario"], groups[0]), "scenario": "all"}
    records = [r for g in groups for r in g]
    row = _means(agent, "all", records)  # counts and sums over every episode; the means are redone per scenario
    per_scenario = [_means(agent, g[0]["scenario"], g) for g in groups]
    for key in SCENARIO_MEANS:  # each scenario weighs the same, as in the success rates below
        values = [r[key] for r in per_scenario if not math.isnan(r[key])]
        row[key] = math.fsum(values) / len(values) if values else math.nan
    kinds = [_identical(g) for g in groups]
    row["replicates_identical"] = all(kinds) if None not in kinds else None
    row["scenarios_played_once"] = sum(map(_played_once, groups))
    _no_intervals(row)
    applies = [outcome_success_applies(g[0]["scenario"]) for g in groups]
    row["outcome_success_episodes"] = sum(len(g) for g, used in zip(groups, applies, strict=True) if used)
    for field, value_of, pooled in (("reward", lambda r: r["reward"], [True] * len(groups)),
                                    ("outcome_success", lambda r: float(r["outcome_success"]), applies),
                                    ("success", lambda r: float(r["success"]), [True] * len(groups))):
        used = [(g, same) for g, same, use in zip(groups, kinds, pooled, strict=True) if use]
        mean = math.fsum(math.fsum(map(value_of, g)) / len(g) for g, _ in used) / len(used) if used else math.nan
        row["mean_reward" if field == "reward" else f"{field}_rate"] = mean
        if not used or None in kinds or all(kinds):
            continue
        half = 1.96 * math.sqrt(math.fsum(0.0 if same else _variance(list(map(value_of, g))) / len(g)
                                          for g, same in used)) / len(used)
        if field == "reward":
            row["reward_ci95"] = half
        else:
            row[f"{field}_ci95_low"], row[f"{field}_ci95_high"] = max(0.0, mean - half), min(1.0, mean + half)
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


def _success(row: dict[str, Any], field: str) -> str:
    """A success rate (`SUCCESSES`) as ``73% [61%, 83%]``, ``100% exact`` or ``73%`` (no interval).

    Empty where it does not apply (NaN); outcome success counted over fewer episodes than the row's
    (action_bias scenarios left out) ends with ``(n=54)``.
    """
    rate, low = row[f"{field}_rate"], row[f"{field}_ci95_low"]
    if math.isnan(rate):
        return ""
    used = row["outcome_success_episodes"] if field == "outcome_success" else row["episodes"]
    note = "" if used == row["episodes"] else f" (n={used})"
    if row["replicates_identical"]:
        return f"{rate:.0%} exact{note}"
    return f"{rate:.0%}" + ("" if math.isnan(low) else f" [{low:.0%}, {row[f'{field}_ci95_high']:.0%}]") + note


def _absent(value) -> bool:
    """Whether a row's cell has no value: NaN, or None (a NaN read back from JSON)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _episodes(row: dict[str, Any]) -> str:
    """The n cell: the row's episodes, with ``(deterministic)`` where scenarios were played once (`markdown`)."""
    once = row.get("scenarios_played_once", 0)
    if not once:
        return str(row["episodes"])
    return f"{row['episodes']} ({'' if once == row['episodes'] else f'{once} '}deterministic)"


def _reward(row: dict[str, Any]) -> str:
    """The rubric reward cell: ``0.75 ± 0.12``, ``1.00 exact`` or ``0.75`` (no interval)."""
    if row["replicates_identical"]:
        return f"{row['mean_reward']:.2f} exact"
    half = row["reward_ci95"]
    return f"{row['mean_reward']:.2f}" + ("" if _absent(half) else f" ± {half:.2f}")


MARKDOWN_COLUMNS = (
    ("agent", None, lambda r: str(r["agent"])),
    ("scenario", None, lambda r: str(r["scenario"])),
    ("n", None, _episodes),
    ("success (outcome)", "outcome", lambda r: _success(r, "outcome_success")),
    ("hit actual / best", "outcome", lambda r: f"{r['actual_pedestrians_hit']:.2f} / {r['best_pedestrians_hit']:.2f}"),
    ("off road", "outcome", lambda r: f"{r['road_departure_rate']:.0%}"),
    ("collisions", "outcome", lambda r: f"{r['collision_rate']:.0%}"),
    ("rubric reward", None, _reward),
    ("rubric success", None, lambda r: _success(r, "success")),
    ("hit expected (rubric)", None, lambda r: f"{r['expected_pedestrians_hit']:.2f}"),
    ("L / R / brake / none", None, lambda r: " / ".join(f"{r[f'share_{a}']:.0%}" for a in ACTIONS)),
    ("utilitarian (probes)", "probes",
     lambda r: "" if _absent(r["utilitarian_share"]) else f"{r['utilitarian_share']:.0%}"),
    ("decisions", None, lambda r: f"{r['decisions']:.1f}"),
    ("tool calls/ep", "chat", lambda r: f"{r['tool_calls']:.1f}"),
    ("tool failures", "chat", lambda r: str(r["tool_failures"])),
    ("parse failures", "chat", lambda r: str(r["parse_failures"])),
    ("ms/ep", None, lambda r: f"{r['wall_ms']:.1f}"),
)
"""Every column of `markdown`'s table: ``(header, condition, cell)``, outcomes first, then upstream's rubric
(its reward, success and the pedestrians its data expects for the classified action). The condition
says when a table shows the column (`markdown_columns`): None always; ``"outcome"`` where outcome
success applies to some row (``outcome_success_episodes`` > 0: not on action_bias scenarios alone);
``"probes"`` where some row has probe episodes (a utilitarian share); ``"chat"`` where some row is a
tool-calling chat agent's (``chat_agent``)."""
MARKDOWN_HEADER = "| " + " | ".join(header for header, _, _ in MARKDOWN_COLUMNS) + " |"
"""The header of a `markdown` table that shows every column (`MARKDOWN_COLUMNS`)."""
PLAYED_ONCE_NOTE = ("n (deterministic): a deterministic agent plays the same episode at every seed and episode of "
                    "a fixed scenario, so that episode was played once and stands for all of them (exact).")
"""The line under a `markdown` table with a scenario played once (``scenarios_played_once`` > 0)."""


def markdown_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The headers of the `MARKDOWN_COLUMNS` that apply to ``rows`` (their conditions), in table order.

    Examples:
        >>> rows = [{"outcome_success_episodes": 0, "utilitarian_share": float("nan"), "chat_agent": False}]
        >>> markdown_columns(rows)[2:]  # action_bias only, no probe, no chat agent
        ['n', 'rubric reward', 'rubric success', 'hit expected (rubric)', 'L / R / brake / none', 'decisions', 'ms/ep']
    """
    applies = {None: True,
               "outcome": any(r.get("outcome_success_episodes", 0) > 0 for r in rows),
               "probes": any(not _absent(r.get("utilitarian_share")) for r in rows),
               "chat": any(r.get("chat_agent", False) for r in rows)}
    return [header for header, condition, _ in MARKDOWN_COLUMNS if applies[condition]]


def markdown(rows: Sequence[dict[str, Any]], consistency: dict[str, tuple[float, int]] | None = None) -> str:
    """A compact Markdown table of `summary_rows` (``± half-width``, ``[low, high]`` or ``exact``) and framing.

    Columns: those of `MARKDOWN_COLUMNS` that apply to ``rows`` (`markdown_columns`): success by
    actual outcome, actual and best hits per episode, road departures and collisions first (where
    outcome success applies); then upstream's rubric; the utilitarian share with probe scenarios;
    the tool-call columns with a chat agent. Under the table, `PLAYED_ONCE_NOTE` where a scenario
    was played once, then the framing consistency table (``consistency``, if any).
    """
    shown = markdown_columns(rows)
    cells = [cell for header, _, cell in MARKDOWN_COLUMNS if header in shown]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(r) for cell in cells) + " |" for r in rows]
    if any(r.get("scenarios_played_once", 0) for r in rows):
        lines += ["", PLAYED_ONCE_NOTE]
    if consistency:
        lines += ["", "| agent | framing consistency (same action in consistency_a and _b) | pairs |", "|---|---|---|"]
        lines += [f"| {agent} | {share:.0%} | {n} |" for agent, (share, n) in consistency.items()]
    return "\n".join(lines) + "\n"


def csv_rows(rows: Sequence[dict[str, Any]]) -> list[list[str]]:
    """`summary_rows` as CSV cells in `COLUMNS` order (NaN as empty)."""
    return [[_fmt(r[c]) if isinstance(r[c], float) and math.isnan(r[c]) else r[c] for c in COLUMNS] for r in rows]
