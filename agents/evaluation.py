"""The one evaluation path: agents play scenarios into episode records, and one summary of them.

Used by the comparison harness (`agents.compare`, stem ``summary``) and by the training scripts'
evaluations (``train_sb3.py``, ``train_grpo.py``: records in ``eval.jsonl``, summary stem ``eval``),
so every evaluation writes the same records (`agents.records.outcome_record`) and the same
summary (`agents.summary`).

An agent is any object with ``name``, ``play(scenario, seed, episode) -> record`` and ``close()``:
`agents.players.GymAgent` (a policy in `CarlaTrolley-v0`), `agents.players.ChatAgent` (a
tool-calling chat model) or `agents.players.oracle_agent` (the oracle, `agents.scripted.OracleAgent`,
for reference).
Episode ``episode`` of comparison seed ``seed`` plays the env seed
`agents.records.episode_seed` ``(seed, episode) = 1000 * seed + episode``.

One episode where more say nothing. The simulator is deterministic and a fixed scenario (every
trolley scenario but the generated family, `is_fixed_scenario`) has one layout whatever the env
seed, so a deterministic agent plays the same episode at every seed and episode there. `play_all`
plays it once, seed ``seeds[0]``, episode 0 (`episodes_to_play`), and marks its record
``played_once``; the summary counts it as that scenario's one, exact episode and says so
(`agents.summary`). An agent declares itself deterministic with an attribute ``deterministic``
(True or False), on itself or, for an `agents.players.GymAgent`, on its policy; without one,
`is_deterministic` decides by the policy's class: the scripted agents (every policy class of
`agents.scripted`: the constant policies, the rubric answer, the oracle) and SB3 models acting
with ``deterministic=True`` (`agents.sb3.ModelPolicy`, `agents.sb3.SB3Policy`) are;
`agents.players.RandomAgent`, chat agents (sampled, or served by an endpoint that does not promise
the same reply) and any other agent are not, and play every episode. The generated family draws a
layout per env seed, so every agent plays all its episodes there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from agents.records import MAX_EPISODES, key_of
from agents.sb3 import ModelPolicy
from agents.summary import COLUMNS, csv_rows, framing_consistency, markdown, summary_rows
from carla_gym.io import write_csv_atomic, write_json_atomic, write_text_atomic
from carla_gym.sim.scenarios import GENERATED_FAMILY, family_of

EVAL_SEED = 10
"""Comparison seed of the training scripts' evaluations: episode i plays env seed
``episode_seed(EVAL_SEED, i) = 10000 + i`` (the seeds those evaluations have always used)."""


SCRIPTED_MODULE = "agents.scripted"
"""The module whose policy classes all act deterministically (`is_deterministic`): fixed rules of the observation."""
DETERMINISTIC_POLICIES = (ModelPolicy,)
"""Other policy classes that act deterministically (`is_deterministic`): SB3 models acting with
``deterministic=True`` (`agents.sb3.SB3Policy` is a `agents.sb3.ModelPolicy`)."""


def is_deterministic(agent) -> bool:
    """Whether ``agent`` plays the same episode whenever it plays the same scenario and seed.

    Never on an OpenEnv server (``backend="openenv"`` in a `agents.players.GymAgent`'s ``env_kwargs``): other
    servers, real CARLA among them, need not give the same episode twice.

    Its own ``deterministic`` attribute if it has one, else its policy's (``agent.policy``, as an
    `agents.players.GymAgent` has), else whether the policy is a class of `SCRIPTED_MODULE` or one of
    `DETERMINISTIC_POLICIES`.
    """
    if getattr(agent, "env_kwargs", {}).get("backend") == "openenv":  # a server need not repeat an episode
        return False
    if hasattr(agent, "deterministic"):
        return bool(agent.deterministic)
    policy = getattr(agent, "policy", None)
    if hasattr(policy, "deterministic"):
        return bool(policy.deterministic)
    return type(policy).__module__ == SCRIPTED_MODULE or isinstance(policy, DETERMINISTIC_POLICIES)


def is_fixed_scenario(scenario: str) -> bool:
    """Whether ``scenario`` is a trolley scenario with one layout whatever the env seed: not the generated family.

    Navigation cases and names the trolley catalogue does not know are not fixed (their episodes may
    differ by seed).

    Examples:
        >>> is_fixed_scenario("trolley_micro_escape_exists"), is_fixed_scenario("trolley_generated_test")
        (True, False)
        >>> is_fixed_scenario("maze_navigation")
        False
    """
    try:
        return family_of(scenario) != GENERATED_FAMILY
    except (ValueError, TypeError):
        return False


def episodes_to_play(deterministic: bool, scenario: str, seeds: Sequence[int],
                     episodes: int) -> list[tuple[int, int]]:
    """The ``(seed, episode)`` pairs an agent plays on ``scenario``: one for a deterministic agent on a fixed one.

    Args:
        deterministic: Whether the agent is deterministic (`is_deterministic`).
        scenario: The scenario name.
        seeds: Comparison seeds, in order.
        episodes: Episodes per seed.

    Returns:
        ``[(seeds[0], 0)]`` when ``deterministic`` and `is_fixed_scenario` (the episode stands for every
        other), else every seed with episodes ``0 .. episodes - 1``.

    Examples:
        >>> episodes_to_play(True, "trolley_micro_escape_exists", [3, 4], 100)
        [(3, 0)]
        >>> episodes_to_play(False, "trolley_micro_escape_exists", [3, 4], 2)
        [(3, 0), (3, 1), (4, 0), (4, 1)]
        >>> len(episodes_to_play(True, "trolley_generated_test", [0], 100))
        100
    """
    if deterministic and is_fixed_scenario(scenario) and seeds:
        return [(seeds[0], 0)]
    return [(seed, episode) for seed in seeds for episode in range(episodes)]


def play_all(agents: Sequence, scenarios: Sequence[str], seeds: Sequence[int], episodes: int,
             on_record: Callable[[dict], Any] | None = None, skip: Collection[tuple] = (),
             every_episode: bool = False) -> list[dict]:
    """Play every agent on every scenario, seed and episode, in that nesting order, one episode at a time.

    A deterministic agent (`is_deterministic`) plays a fixed scenario once (`episodes_to_play`: seed
    ``seeds[0]``, episode 0), its record marked ``"played_once": True``, unless ``every_episode``; every
    other record gets ``"played_once": False``.

    Args:
        agents: Agents (``name``, ``play``); they are not closed here.
        scenarios: Scenario names (`carla_gym.sim.catalogue`).
        seeds: Comparison seeds, each >= 0.
        episodes: Episodes per agent, scenario and seed, in [1, `agents.records.MAX_EPISODES`].
        on_record: Called with each record as soon as its episode ends (e.g. `agents.records.EpisodeLog.append`).
        skip: Record keys (`agents.records.key_of`) not to play, e.g. those already in a log.
        every_episode: Play every seed and episode for deterministic agents too (e.g. to check that
            they are one episode).

    Returns:
        The records of the episodes played, in play order.

    Raises:
        ValueError: ``episodes`` out of range or a negative seed (names the value and the valid range).
    """
    if not 1 <= episodes <= MAX_EPISODES:
        raise ValueError(f"episodes={episodes!r}: must be in [1, {MAX_EPISODES}] (env seeds are 1000 x seed + "
                         "episode); use more seeds")
    if any(seed < 0 for seed in seeds):
        raise ValueError(f"seeds={list(seeds)!r}: must be >= 0")
    skip = set(skip)
    records = []
    for agent in agents:
        deterministic = is_deterministic(agent) and not every_episode
        for scenario in scenarios:
            once = deterministic and is_fixed_scenario(scenario)
            for seed, episode in episodes_to_play(deterministic, scenario, seeds, episodes):
                if (agent.name, scenario, seed, episode) in skip:
                    continue
                record = {**agent.play(scenario, seed, episode), "played_once": once}
                if on_record is not None:
                    on_record(record)
                records.append(record)
    return records


def _nan_to_none(value):
    """``value`` with every float NaN (also inside lists, tuples and dicts) replaced by None, for JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: _nan_to_none(v) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value


def write_summary(records: Sequence[dict], agent_names: Sequence[str], scenarios: Sequence[str],
                  out_dir: str | Path, stem: str, extra: dict | None = None) -> list[dict[str, Any]]:
    """Summarise ``records`` (`agents.summary.summary_rows`) and write ``<stem>.csv``, ``.md`` and ``.json``.

    Each file is written atomically (`carla_gym.io`): ``<stem>.csv`` has the columns
    `agents.summary.COLUMNS` (NaN as empty), ``<stem>.md`` the Markdown table of
    `agents.summary.markdown` with framing consistency, ``<stem>.json`` is
    ``{**extra, "rows": rows, "framing_consistency": {agent: {"share", "pairs"}}}`` with NaN as null.

    Args:
        records: Episode records (`agents.records.outcome_record`); records of other agents or
            scenarios are ignored, and each key counts once.
        agent_names: Agents in row order.
        scenarios: Scenarios in row order (each agent's ``all`` row pools them with equal weight).
        out_dir: Existing directory to write into.
        stem: File name without suffix (``summary`` for the harness, ``eval`` for the training scripts).
        extra: Entries put first in the JSON file (e.g. the run's algorithm and training time).

    Returns:
        The summary rows (`agents.summary.summary_rows`).
    """
    unique, seen = [], set()
    for record in records:  # the first record of a key wins, as in `agents.records.EpisodeLog.read`
        if key_of(record) not in seen:
            seen.add(key_of(record))
            unique.append(record)
    rows = summary_rows(unique, agent_names, scenarios)
    consistency = framing_consistency(unique, agent_names)
    out = Path(out_dir)
    write_csv_atomic(out / f"{stem}.csv", COLUMNS, csv_rows(rows))
    write_text_atomic(out / f"{stem}.md", markdown(rows, consistency))
    pairs = {agent: {"share": share, "pairs": n} for agent, (share, n) in consistency.items()}
    write_json_atomic(out / f"{stem}.json",
                      _nan_to_none({**(extra or {}), "rows": rows, "framing_consistency": pairs}))
    return rows


def pooled_row(records: Sequence[dict], agent_name: str) -> dict[str, Any]:
    """The ``all`` row of `agents.summary.summary_rows` for one agent: its scenarios pooled with equal weight.

    Args:
        records: Episode records; only ``agent_name``'s are used, scenarios in order of first appearance.
        agent_name: The agent.

    Raises:
        ValueError: No record of ``agent_name``.
    """
    scenarios = list(dict.fromkeys(r["scenario"] for r in records if r["agent"] == agent_name))
    if not scenarios:
        raise ValueError(f"no records of agent {agent_name!r}; agents in the records: "
                         f"{sorted({r['agent'] for r in records})}")
    return summary_rows(records, [agent_name], scenarios)[-1]
