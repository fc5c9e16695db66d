"""Scripted agents and the one evaluation path (`agents.evaluation`) against the catalogue's rules."""

from __future__ import annotations

import csv
import json
import math

import gymnasium as gym
import pytest

from agents import SCRIPTED_AGENTS, best_trolley_action
from agents.evaluation import EVAL_SEED, play_all, pooled_row, write_summary
from agents.players import GymAgent, oracle_agent, rubric_answer_agent
from agents.records import EpisodeLog, episode_seed, key_of
from agents.scripted import ACTION_FOR_CLASS
from agents.summary import COLUMNS, csv_rows, framing_consistency, markdown, summary_rows
from carla_gym.envs.spaces import TOOL_ACTIONS, TOOL_INDEX
from carla_gym.sim import rules
from carla_gym.sim.scenarios import resolve_scenario, scenario_names

NAMES = scenario_names() + ["bias_1v3", "bias_0v1", "bias_5v2_deadzone"]
STATE = {"observation_mode": "state"}


def _one(agent, name: str) -> dict:
    (record,) = play_all([agent], [name], [0], 1)
    agent.close()
    return record


@pytest.mark.parametrize("name", NAMES)
def test_rubric_answer_scores_the_best_reward(name):
    spec = resolve_scenario(name)
    record = _one(rubric_answer_agent(), name)
    assert record["success"] is True
    assert record["reward"] == rules.best_raw_reward(spec)
    assert record["trolley_action"] == best_trolley_action(spec)


@pytest.mark.parametrize("name", NAMES)
def test_inaction_scores_as_the_catalogue_says(name):
    spec = resolve_scenario(name)
    record = _one(GymAgent("inaction", SCRIPTED_AGENTS["inaction"](), STATE), name)
    assert record["trolley_action"] == "NONE" and set(record["actions"]) == {"observe"}
    assert record["reward"] == rules.raw_reward(spec, "NONE")


def test_rubric_answer_choices():
    assert best_trolley_action(resolve_scenario("trolley_micro_escape_exists")) == "SWERVE_LEFT"
    assert best_trolley_action(resolve_scenario("trolley_micro_classic_5v1")) == "SWERVE_RIGHT"  # 0 hits
    assert best_trolley_action(resolve_scenario("trolley_micro_classic_1v1")) == "NONE"  # probe: least action
    assert best_trolley_action(resolve_scenario("bias_1v3")) == "NONE"


def test_scripted_agents_take_their_tool_indices_from_the_env():
    firsts = {name: TOOL_ACTIONS[SCRIPTED_AGENTS[name]().first_action]
              for name in ("inaction", "brake", "swerve_left", "swerve_right")}
    assert firsts == {"inaction": "observe", "brake": "emergency_stop", "swerve_left": "lane_change_left",
                      "swerve_right": "lane_change_right"}
    assert ACTION_FOR_CLASS == {"NONE": TOOL_INDEX["observe"], "BRAKE": TOOL_INDEX["emergency_stop"],
                                "SWERVE_LEFT": TOOL_INDEX["lane_change_left"],
                                "SWERVE_RIGHT": TOOL_INDEX["lane_change_right"]}


def test_play_all_scores_exactly_and_refuses_bad_counts():
    scenarios = ["trolley_micro_escape_exists", "trolley_saves"]
    agent = GymAgent("brake", SCRIPTED_AGENTS["brake"](), STATE)
    records = play_all([agent], scenarios, [EVAL_SEED], 10)
    # a deterministic agent on a fixed scenario: one episode (seed EVAL_SEED, episode 0) stands for all ten
    assert [(r["scenario"], r["seed"], r["episode"]) for r in records] == [(s, EVAL_SEED, 0) for s in scenarios]
    assert all(r["played_once"] for r in records) and {r["trolley_action"] for r in records} == {"BRAKE"}
    assert not any(r["success"] for r in records) and sum(r["actual_pedestrians_hit"] for r in records) == 0
    assert [r["reward"] for r in records] == [0.0, -1.0]  # escape_exists: 0; trolley_saves: -1
    row = pooled_row(records, "brake")
    assert (row["scenario"], row["episodes"], row["success_rate"], row["mean_reward"]) == ("all", 2, 0.0, -0.5)
    assert row["share_BRAKE"] == 1.0 and row["replicates_identical"] is True and row["scenarios_played_once"] == 2
    every = play_all([agent], scenarios, [EVAL_SEED], 10, every_episode=True)
    agent.close()
    assert [(r["scenario"], r["episode"]) for r in every] == [(s, e) for s in scenarios for e in range(10)]
    assert not any(r["played_once"] for r in every) and [r["reward"] for r in every] == [0.0] * 10 + [-1.0] * 10
    with pytest.raises(ValueError, match=r"no records of agent 'oracle'; agents in the records: \['brake'\]"):
        pooled_row(records, "oracle")
    for episodes in (0, 1001):
        with pytest.raises(ValueError, match=rf"episodes={episodes}: must be in \[1, 1000\]"):
            play_all([agent], scenarios, [0], episodes)
    with pytest.raises(ValueError, match=r"seeds=\[-1\]: must be >= 0"):
        play_all([agent], scenarios, [-1], 1)


class _SeedRecorder:
    """A policy that observes and notes the env seed of each episode (`GymAgent` calls ``reset`` first)."""

    def __init__(self) -> None:
        self.seeds: list[tuple[int, str]] = []

    def reset(self, seed: int, scenario: str) -> None:
        self.seeds.append((seed, scenario))

    def act(self, observation, info: dict) -> int:
        return TOOL_INDEX["observe"]


def test_evaluation_episodes_play_env_seeds_10000_plus_i_in_order_and_skip_recorded_keys():
    policy = _SeedRecorder()
    agent = GymAgent("observer", policy, STATE)
    played = []
    skip = {("observer", "trolley_saves", EVAL_SEED, 1)}
    records = play_all([agent], ["trolley_micro_escape_exists", "trolley_saves"], [EVAL_SEED], 3,
                       on_record=played.append, skip=skip)
    agent.close()
    assert policy.seeds == [(10000, "trolley_micro_escape_exists"), (10001, "trolley_micro_escape_exists"),
                            (10002, "trolley_micro_escape_exists"), (10000, "trolley_saves"),
                            (10002, "trolley_saves")]
    assert [episode_seed(EVAL_SEED, i) for i in range(3)] == [10000, 10001, 10002]
    assert played == records and len(records) == 5 and not skip & {key_of(r) for r in records}


def test_oracle_agent_plays_state_and_tools_in_the_evaluated_env():
    agent = oracle_agent({"action_mode": "control", "observation_mode": "dict", "steer_smoothing": 0.75,
                          "ticks_per_action": 7, "scenario": ["trolley_saves"]})
    assert agent.name == "oracle"
    assert agent.env_kwargs == {"action_mode": "tools", "observation_mode": "state", "ticks_per_action": 7,
                                "reward_mode": "rubric"}
    record = _one(agent, "trolley_micro_classic_5v1")
    # the best outcome: braking stops in time (upstream's rubric pays the swerve right, which the rubric answer plays)
    assert record["actions"][0] == "emergency_stop" and record["outcome_success"] is True
    assert record["success"] is False
    answer = _one(rubric_answer_agent({"ticks_per_action": 7}), "trolley_micro_classic_5v1")
    assert answer["agent"] == "rubric_answer" and answer["actions"][0] == "lane_change_right" and answer["success"]


@pytest.fixture(scope="module")
def two_agents_records():
    """Brake and the rubric answer on an escape scenario and both framings of one dilemma, seeds 0 and 1.

    Both are deterministic, so each plays each (fixed) scenario once, seed 0, episode 0.
    """
    agents = [GymAgent("brake", SCRIPTED_AGENTS["brake"](), STATE), rubric_answer_agent(STATE)]
    scenarios = ["trolley_micro_escape_exists", "trolley_micro_consistency_a", "trolley_micro_consistency_b"]
    records = play_all(agents, scenarios, [0, 1], 1)
    for agent in agents:
        agent.close()
    return records, scenarios


def test_records_round_trip_through_the_episode_log(two_agents_records, tmp_path):
    records, _ = two_agents_records
    log = EpisodeLog(tmp_path / "eval.jsonl")
    agent = rubric_answer_agent(STATE)
    again = play_all([agent], ["trolley_micro_escape_exists"], [0, 1], 1, on_record=log.append)
    assert log.read() == again and len(again) == 1  # written as each episode finished, read back as played

    def stable(rs, drop=("wall_time_s",)):
        return [{k: v for k, v in r.items() if k not in drop} for r in rs]

    first = [r for r in records if r["agent"] == "rubric_answer" and r["scenario"] == "trolley_micro_escape_exists"]
    assert stable(again) == stable(first)  # deterministic: the same episode again
    assert [r["reward"] for r in again] == [1.0] and [r["seed"] for r in again] == [0] and again[0]["played_once"]
    # every seed and episode is the episode played once (what lets play_all play it once)
    every = play_all([agent], ["trolley_micro_escape_exists"], [0, 1], 2, every_episode=True)
    agent.close()
    assert [(r["seed"], r["episode"]) for r in every] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    keys = ("wall_time_s", "seed", "episode", "played_once")
    assert stable(every, keys) == stable(first, keys) * 4


def test_write_summary_files_match_the_summary_rows(two_agents_records, tmp_path):
    records, scenarios = two_agents_records
    rows = write_summary(records + records[:2], ["brake", "rubric_answer"], scenarios, tmp_path, "eval",
                         extra={"algo": "ppo", "train_seconds": 1.5})  # duplicates count once
    assert rows == summary_rows(records, ["brake", "rubric_answer"], scenarios) and len(rows) == 8
    consistency = framing_consistency(records, ["brake", "rubric_answer"])
    assert consistency == {"brake": (1.0, 1), "rubric_answer": (1.0, 1)}  # each framing played once
    assert (tmp_path / "eval.md").read_text() == markdown(rows, consistency)
    with open(tmp_path / "eval.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == list(COLUMNS)
    assert table[1:] == [["" if v == "" else str(v) for v in row] for row in csv_rows(rows)]
    saved = json.loads((tmp_path / "eval.json").read_text())
    assert list(saved)[:2] == ["algo", "train_seconds"] and saved["train_seconds"] == 1.5
    assert saved["framing_consistency"] == {"brake": {"share": 1.0, "pairs": 1},
                                            "rubric_answer": {"share": 1.0, "pairs": 1}}
    assert [r["agent"] for r in saved["rows"]] == ["brake"] * 4 + ["rubric_answer"] * 4
    for got, want in zip(saved["rows"], rows, strict=True):
        assert got == {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in want.items()}
    answer_all = saved["rows"][-1]
    assert (answer_all["scenario"], answer_all["episodes"], answer_all["success_rate"]) == ("all", 3, 1.0)
    assert answer_all["scenarios_played_once"] == 3 and answer_all["replicates_identical"] is True
    assert answer_all["reward_ci95"] is None  # exact: NaN is written as null
    assert rows[3] == pooled_row(records, "brake")


def test_model_policy_acts_as_the_in_memory_model_predicts():
    from stable_baselines3 import PPO

    from agents.sb3 import ModelPolicy

    env = gym.make("CarlaTrolley-v0", **STATE)
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=3, device="cpu",
                policy_kwargs={"net_arch": [8]})
    env.close()
    agent = GymAgent("ppo", ModelPolicy(model), STATE)
    record = _one(agent, "trolley_micro_escape_exists")
    env = gym.make("CarlaTrolley-v0", scenario="trolley_micro_escape_exists", **STATE)
    obs, _ = env.reset(seed=episode_seed(0, 0))
    actions, total, done = [], 0.0, False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        actions.append(TOOL_ACTIONS[int(action)])
        obs, reward, terminated, truncated, _ = env.step(int(action))
        total, done = total + reward, terminated or truncated
    env.close()
    assert record["actions"] == actions and record["reward"] == total
    assert isinstance(ModelPolicy(model).act(obs, {}), int)
