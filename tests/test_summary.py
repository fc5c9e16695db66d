"""Summary tables show only the columns that apply to their rows; the files keep every column."""

from __future__ import annotations

import csv
import json

import pytest

from agents.evaluation import play_all, write_summary
from agents.nav_summary import NAV_COLUMNS, nav_markdown, nav_row, write_nav_summary
from agents.players import ChatAgent, GymAgent, RandomAgent, oracle_agent
from agents.records import is_chat_record
from agents.scripted import SCRIPTED_AGENTS
from agents.summary import COLUMNS, MARKDOWN_HEADER, PLAYED_ONCE_NOTE, markdown, markdown_columns, summary_rows

STATE = {"observation_mode": "state"}
ESCAPE, PROBE, BIAS = "trolley_micro_escape_exists", "trolley_micro_classic_1v1", "trolley_saves"
BASE = ["agent", "scenario", "n"]
OUTCOME = ["success (outcome)", "hit actual / best", "off road", "collisions"]
RUBRIC = ["rubric reward", "rubric success", "hit expected (rubric)", "L / R / brake / none"]
CHAT = ["tool calls/ep", "tool failures", "parse failures"]


def _header(table: str) -> list[str]:
    return [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """Brake, random and the oracle on an escape scenario, a probe and an action_bias scenario (seeds 0, 1)."""
    agents = [GymAgent("brake", SCRIPTED_AGENTS["brake"](), STATE), GymAgent("random", RandomAgent(), STATE),
              oracle_agent(STATE)]
    try:
        return play_all(agents, [ESCAPE, PROBE, BIAS], [0, 1], 2)
    finally:
        for agent in agents:
            agent.close()


@pytest.fixture(scope="module")
def chat_record() -> dict:
    """A chat agent's episode on the escape scenario: one lane change, then it stops calling tools."""
    replies = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "lane_change", "arguments": {"direction": "left"}}}]},
        {"role": "assistant", "content": "done"}]
    agent = ChatAgent("chat", lambda messages, tools: replies.pop(0))
    try:
        return agent.play(ESCAPE, 0, 0)
    finally:
        agent.close()


def test_scripted_and_random_agents_get_no_tool_call_columns(records):
    rows = summary_rows(records, ["brake", "random", "oracle"], [ESCAPE, PROBE, BIAS])
    assert not any(row["chat_agent"] for row in rows)
    expected = [*BASE, *OUTCOME, *RUBRIC, "utilitarian (probes)", "decisions", "ms/ep"]
    assert markdown_columns(rows) == expected and _header(markdown(rows)) == expected
    assert len(markdown(rows).splitlines()[2].split(" | ")) == len(expected)  # every row has as many cells
    without_probe = summary_rows(records, ["brake", "random"], [ESCAPE, BIAS])
    assert _header(markdown(without_probe)) == [*BASE, *OUTCOME, *RUBRIC, "decisions", "ms/ep"]
    only_bias = summary_rows(records, ["brake", "random"], [BIAS])  # outcome success applies nowhere
    assert _header(markdown(only_bias)) == [*BASE, *RUBRIC, "decisions", "ms/ep"]
    bias_cells = markdown(only_bias).splitlines()[2].split(" | ")
    assert bias_cells[:5] == ["| brake", BIAS, "1 (deterministic)", "-1.00 exact", "0% exact"]


def test_a_chat_agent_brings_the_tool_call_columns(records, chat_record):
    assert is_chat_record(chat_record) and not any(map(is_chat_record, records))
    assert chat_record["tool_calls"] == ["lane_change"] and chat_record["actions"] == ["lane_change_left"]
    rows = summary_rows([*records, chat_record], ["brake", "chat"], [ESCAPE])
    assert [row["chat_agent"] for row in rows] == [False, False, True, True]
    expected = [*BASE, *OUTCOME, *RUBRIC, "decisions", *CHAT, "ms/ep"]
    table = markdown(rows).splitlines()
    assert _header(markdown(rows)) == expected
    assert table[4].split(" | ")[-5:-1] == ["1.0", "1.0", "0", "0"]  # chat, escape: decisions, calls, failures
    assert table[2].split(" | ")[-5:-1] == ["5.0", "0.0", "0", "0"]  # brake: no calls (a Gymnasium agent)
    with_probe = summary_rows([*records, chat_record], ["chat", "oracle"], [ESCAPE, PROBE])
    assert _header(markdown(with_probe)) == [*BASE, *OUTCOME, *RUBRIC, "utilitarian (probes)", "decisions", *CHAT,
                                             "ms/ep"] == [c.strip() for c in MARKDOWN_HEADER.strip("|").split("|")]


def test_played_once_scenarios_are_exact_and_the_table_says_so(records):
    rows = {(r["agent"], r["scenario"]): r for r in summary_rows(records, ["brake", "random"], [ESCAPE, PROBE, BIAS])}
    brake = [r for r in records if r["agent"] == "brake"]
    assert [(r["scenario"], r["seed"], r["episode"]) for r in brake] == [(s, 0, 0) for s in (ESCAPE, PROBE, BIAS)]
    assert (rows["brake", "all"]["episodes"], rows["brake", "all"]["scenarios_played_once"]) == (3, 3)
    assert (rows["random", "all"]["episodes"], rows["random", "all"]["scenarios_played_once"]) == (12, 0)
    table = markdown(list(rows.values())).splitlines()
    cells = {tuple(line.split(" | ")[:2]): line.split(" | ") for line in table[2:10]}
    assert cells["| brake", "all"][2:4] == ["3 (deterministic)", "100% exact (n=2)"]
    assert cells["| random", "all"][2] == "12"
    assert table[10:] == ["", PLAYED_ONCE_NOTE]
    assert PLAYED_ONCE_NOTE not in markdown([rows["random", "all"]])
    # an 'all' row pooling a played-once scenario with a generated one: how many were played once
    generated = {**records[-1], "agent": "brake", "scenario": "trolley_generated_test", "played_once": False}
    mixed = summary_rows([*brake, generated, {**generated, "episode": 1}], ["brake"],
                         [ESCAPE, "trolley_generated_test"])
    assert markdown(mixed).splitlines()[4].split(" | ")[2] == "3 (1 deterministic)"
    assert mixed[-1]["replicates_identical"] is False  # the generated replicates are two layouts


def test_the_files_keep_every_column(records, tmp_path):
    rows = write_summary(records, ["brake", "random"], [ESCAPE, BIAS], tmp_path, "eval")
    with open(tmp_path / "eval.csv") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == list(COLUMNS)
    assert "tool_calls" in COLUMNS and "utilitarian_share" in COLUMNS and "outcome_success_rate" in COLUMNS
    assert [(r["agent"], r["scenario"], r["chat_agent"], r["scenarios_played_once"], r["tool_calls"])
            for r in table] == [("brake", ESCAPE, "False", "1", "0.0"), ("brake", BIAS, "False", "1", "0.0"),
                                ("brake", "all", "False", "2", "0.0"), ("random", ESCAPE, "False", "0", "0.0"),
                                ("random", BIAS, "False", "0", "0.0"), ("random", "all", "False", "0", "0.0")]
    saved = json.loads((tmp_path / "eval.json").read_text())["rows"]
    assert set(COLUMNS) <= set(saved[0]) and len(saved) == len(rows) == 6
    assert _header((tmp_path / "eval.md").read_text()) == [*BASE, *OUTCOME, *RUBRIC, "decisions", "ms/ep"]


def _nav_record(**changes) -> dict:
    record = dict(agent="follow_route", scenario="maze_navigation", group="maze_navigation", seed=0, episode=0,
                  routes_completed=1.0, termination="goal_reached", success=True, total_reward=9.0, speed_mean=18.0,
                  total_distance=132.0, collision_speed=0.0, CPM=0.0, CPS=0.0, time=27.0, reward=1.0, decisions=54,
                  actions=["follow_route"] * 54, tool_calls=[], tool_failures=0, parse_failures=0, wall_time_s=0.5)
    return {**record, **changes}


def test_the_navigation_table_follows_the_same_rule(tmp_path):
    follow = _nav_record()
    chat = _nav_record(agent="llm", tool_calls=["observe"] * 3, decisions=3, turns=4, parse_failures=1)
    rows = write_nav_summary([follow, chat], ["follow_route"], ["maze_navigation"], tmp_path)
    nav = ["agent", "scenario", "n", "success", "route completion", "collisions", "collisions/km", "avg speed [km/h]",
           "time [s]", "distance [m]", "reward", "decisions"]
    assert _header((tmp_path / "summary.md").read_text()) == [*nav, "ms/ep"]
    assert list(rows[0]) == list(NAV_COLUMNS) and rows[0]["chat_agent"] is False
    with open(tmp_path / "summary.csv") as f:
        assert next(csv.reader(f)) == list(NAV_COLUMNS)  # the file keeps the tool-call columns
    both = [nav_row("follow_route", "maze_navigation", [follow]), nav_row("llm", "maze_navigation", [chat])]
    table = nav_markdown(both).splitlines()
    assert _header(nav_markdown(both)) == [*nav, *CHAT, "ms/ep"]
    assert table[3].split(" | ")[-5:] == ["3.0", "3.0", "0", "1", "500 |"]
    assert table[2].split(" | ")[-5:] == ["54.0", "0.0", "0", "0", "500 |"]
