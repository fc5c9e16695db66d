"""Episode records: one flat dict per episode, the same fields for every kind of agent, kept in JSONL.

A record has ``agent``, ``scenario``, ``seed``, ``episode`` (the key), what actually happened
(``outcome_success``: the actual outcome is as good as the best a candidate policy reaches in that
layout, ``actual_pedestrians_hit``, ``collision``, ``road_departure``, and that best outcome:
``best_pedestrians_hit``, ``best_road_departure``; `carla_gym.sim.outcomes`), upstream's rubric
(``reward`` = rubric return, ``success`` = rubric success, ``trolley_action``,
``expected_pedestrians_hit``, ``ethical_choice``, ``is_probe``, ``framing``), what the agent did
(``decisions``: env steps, ``actions``: their names; for chat agents ``tool_calls``: the names of
every tool call that was run, failed ones included, ``tool_failures``: how many of them failed,
``parse_failures``: turns whose tool-call text did not parse; counted by the rule of
`carla_gym.llm.tools`, as in training; Gymnasium agents call no tools; chat agents' records also
carry ``turns``) and ``wall_time_s``. ``played_once`` (set by `agents.evaluation`, absent in
records of earlier versions: False) marks the one episode a deterministic agent plays on a fixed
scenario for every seed and episode.
Navigation records (`agents.nav.nav_record`, recognised by ``routes_completed``) have the same key
and counts with the navigation outcome in place of the trolley one.

`EpisodeLog` appends records to a JSONL file as they finish (one ``write`` and ``flush`` per line,
so a killed run keeps every finished episode) and, on resume, reads them back, dropping a torn
last line left by a kill in the middle of a write.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KEY = ("agent", "scenario", "seed", "episode")
"""Fields that identify an episode in a comparison."""


MAX_EPISODES = 1000
"""Episodes per seed: `episode_seed` is unique for ``episode < MAX_EPISODES``."""


def episode_seed(seed: int, episode: int) -> int:
    """The env seed of episode ``episode`` under comparison seed ``seed`` (``1000 * seed + episode``)."""
    return MAX_EPISODES * seed + episode


def outcome_record(agent: str, scenario: str, seed: int, episode: int, outcome: dict, reward: float,
                   actions: list[str], wall_time_s: float, tool_calls: Sequence[str] = (), tool_failures: int = 0,
                   parse_failures: int = 0) -> dict[str, Any]:
    """Build a record from an env outcome (``info["outcome"]``) and the episode's actions (and tool calls)."""
    return {
        "agent": agent, "scenario": scenario, "seed": seed, "episode": episode,
        "outcome_success": bool(outcome["outcome_success"]),
        "actual_pedestrians_hit": outcome["actual_pedestrians_hit"],
        "collision": outcome["actual_pedestrians_hit"] > 0, "road_departure": bool(outcome["road_departure"]),
        "best_pedestrians_hit": int(outcome["best_pedestrians_hit"]),
        "best_road_departure": bool(outcome["best_road_departure"]),
        "reward": float(reward), "success": bool(outcome["success"]), "trolley_action": outcome["trolley_action"],
        "expected_pedestrians_hit": outcome["expected_pedestrians_hit"],
        "ethical_choice": outcome["ethical_choice"], "is_probe": bool(outcome["is_probe"]),
        "framing": outcome["framing"], "decisions": len(actions), "actions": list(actions),
        "tool_calls": list(tool_calls), "tool_failures": int(tool_failures), "parse_failures": int(parse_failures),
        "wall_time_s": float(wall_time_s),
    }


RECORD_FIELDS = ("agent", "scenario", "seed", "episode", "outcome_success", "actual_pedestrians_hit", "collision",
                 "road_departure", "best_pedestrians_hit", "best_road_departure", "reward", "success",
                 "trolley_action", "expected_pedestrians_hit", "ethical_choice", "is_probe", "framing", "decisions",
                 "actions", "tool_calls", "tool_failures", "parse_failures", "wall_time_s")
"""Fields of every record (`outcome_record`); a log missing one was written by another version."""


def _nav_fields() -> tuple[str, ...]:
    """Fields of every navigation record (`agents.nav.NAV_RECORD_FIELDS`; imported late: it loads the env)."""
    from agents.nav import NAV_RECORD_FIELDS

    return NAV_RECORD_FIELDS


def is_chat_record(record: dict) -> bool:
    """Whether ``record`` is a tool-calling chat agent's: it has ``turns``, a tool call or a failed call or parse.

    Chat agents (`agents.players.ChatAgent`, `agents.nav.NavChatAgent`) record their ``turns``; a
    Gymnasium agent's record has no ``turns``, no tool calls and no failures.

    Examples:
        >>> is_chat_record({"tool_calls": [], "tool_failures": 0, "parse_failures": 0})
        False
        >>> is_chat_record({"tool_calls": [], "tool_failures": 0, "parse_failures": 0, "turns": 1})
        True
    """
    return ("turns" in record or bool(record["tool_calls"]) or record["tool_failures"] > 0
            or record["parse_failures"] > 0)


def key_of(record: dict) -> tuple:
    """The record's `KEY` tuple."""
    return tuple(record[k] for k in KEY)


class EpisodeLog:
    """Append-only JSONL of episode records.

    Args:
        path: The file; created on the first write.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def read(self) -> list[dict]:
        """All complete records, one per `KEY` (the first wins); a torn last line is cut off the file.

        Raises:
            ValueError: A malformed line before the last one (the file is not a record log).
        """
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # killed mid-write: drop the partial line so appends start clean
            with open(self.path, "r+b") as f:
                f.truncate(end)
        records, seen = [], set()
        for number, line in enumerate(data[:end].decode().splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = key_of(record)
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ValueError(f"{self.path}:{number} is not an episode record ({exc!r}); is this an "
                                 "episodes.jsonl written by agents.compare?") from None
            fields = RECORD_FIELDS if "routes_completed" not in record else _nav_fields()
            missing = [field for field in fields if field not in record]
            if missing:
                raise ValueError(f"{self.path}:{number} has no {', '.join(missing)}: it was written by another "
                                 "version of carla_gym, whose records this one cannot summarise; start the "
                                 "comparison again with --overwrite")
            if key not in seen:  # two runs on one file: count each episode once
                seen.add(key)
                records.append(record)
        return records

    def append(self, record: dict) -> None:
        """Write one record as a line and flush it to the OS."""
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
