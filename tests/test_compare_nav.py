"""The comparison harness on navigation (agents.nav, agents.nav_summary, agents.nav_video, agents.compare)."""

from __future__ import annotations

import csv
import json
import math
import shlex
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agents import compare
from agents.nav import (
    NAV_OUTCOME_KEYS,
    NAV_RECORD_FIELDS,
    NAV_SUITES,
    ConstantTool,
    NavGymAgent,
    case_group,
    parse_case,
    resolve_nav,
)
from agents.records import EpisodeLog, key_of
from carla_gym.envs.navigation import NAV_TOOL_ACTIONS

REPO = Path(__file__).resolve().parents[1]
SHORT = ["route_Town02/traffic_0/eval_7", "route_Town02/traffic_20/eval_7"]
"""Two cheap cases (VLM-RL's evaluation route 7, the shortest: about 80 follow_route decisions) in two groups."""


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _stable(records: list[dict]) -> list[dict]:
    """Records without wall time and the harness's ``played_once`` mark, sorted by key: what must match across runs."""
    return sorted(({k: v for k, v in r.items() if k not in ("wall_time_s", "played_once")} for r in records),
                  key=key_of)


def _without_wall(path: Path) -> list[str]:
    return [line.rsplit(",", 1)[0] for line in path.read_text().splitlines()]  # wall_ms is the last column


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nav") / "short"
    assert compare.main(["--scenario", *SHORT, "--agents", "follow_route", "random", "--seeds", "0", "1",
                         "--out", str(out)]) == 0
    return out


def test_suites_name_every_case_and_cases_parse_to_env_settings():
    assert len(NAV_SUITES["nav_eval_routes_0"]) == len(NAV_SUITES["nav_eval_routes_40"]) == 10
    assert NAV_SUITES["nav_free_roam"] == ("free_roam_Town05", "free_roam_Town05_v5_p3", "free_roam_Town05_v15_p10")
    assert len(NAV_SUITES["nav"]) == 1 + 3 + 30 == len(set(NAV_SUITES["nav"]))
    assert parse_case("route_Town02/traffic_40/eval_9") == ("route_Town02", {"traffic": 40, "route": "eval"},
                                                            {"route_index": 9})
    assert parse_case("maze_navigation") == ("maze_navigation", None, None)
    assert resolve_nav(["nav_maze", "maze_navigation", "nav_eval_routes_20"])[:2] == (
        "maze_navigation", "route_Town02/traffic_20/eval_0")
    assert case_group("route_Town02/traffic_40/eval_9") == "route_Town02/traffic_40"
    for bad in ("route_Town02/traffic_30/eval_1", "route_Town02/traffic_0/eval_10", "route_Town09/traffic_0/eval_0",
                "free_roam_Nowhere"):
        with pytest.raises(ValueError, match="navigation case"):
            parse_case(bad)


def test_a_record_is_the_terminal_outcome_of_the_same_episode_played_directly():
    agent = NavGymAgent("follow", ConstantTool(NAV_TOOL_ACTIONS.index("follow_route")),
                        {"action_mode": "tools", "observation_mode": "state"})
    record = agent.play(SHORT[1], 2, 3)
    agent.close()
    env = gym.make("CarlaNavigation-v0", scenario="route_Town02", scenario_config={"traffic": 20, "route": "eval"},
                   action_mode="tools", reward_mode="rubric", termination="vlm-rl-eval")
    env.reset(seed=2003, options={"route_index": 7})  # episode_seed(2, 3) = 1000 * 2 + 3
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(1)
        total, steps, done = total + reward, steps + 1, terminated or truncated
    env.close()
    assert set(NAV_RECORD_FIELDS) <= set(record)
    assert {k: record[k] for k in NAV_OUTCOME_KEYS} == {k: info["outcome"][k] for k in NAV_OUTCOME_KEYS}
    assert record["reward"] == total and record["decisions"] == steps == len(record["actions"])
    assert set(record["actions"]) == {"follow_route"} and record["tool_calls"] == []
    assert (record["group"], record["action_mode"], record["ticks_per_action"]) == (
        "route_Town02/traffic_20", "tools", 10)
    assert record["time"] == pytest.approx(0.05 * record["episode_length"])


def test_summary_rows_are_computed_from_the_records(short_run):
    records = _records(short_run)
    assert len(records) == 2 * 2 * 2 and len({key_of(r) for r in records}) == 8
    assert EpisodeLog(short_run / "episodes.jsonl").read() == records  # navigation records read back
    rows = {(r["agent"], r["scenario"]): r for r in csv.DictReader((short_run / "summary.csv").read_text()
                                                                   .splitlines())}
    assert sorted(rows) == [(a, g) for a in ("follow_route", "random")
                            for g in ("route_Town02/traffic_0", "route_Town02/traffic_20")]
    for (agent, group), row in rows.items():
        mine = [r for r in records if r["agent"] == agent and r["group"] == group]
        assert int(row["episodes"]) == len(mine) == 2
        n = len(mine)
        for column, value in (("success_rate", sum(r["success"] for r in mine) / n),
                              ("route_completion", sum(r["routes_completed"] for r in mine) / n),
                              ("collision_rate", sum(r["termination"] == "collision" for r in mine) / n),
                              ("CPM", sum(r["CPM"] for r in mine) / n),
                              ("speed_mean", sum(r["speed_mean"] for r in mine) / n),
                              ("time", sum(r["time"] for r in mine) / n),
                              ("total_distance", sum(r["total_distance"] for r in mine) / n),
                              ("mean_reward", sum(r["reward"] for r in mine) / n),
                              ("decisions", sum(r["decisions"] for r in mine) / n)):
            assert float(row[column]) == pytest.approx(value, rel=1e-12), (agent, group, column)
    follow = [r for r in records if r["agent"] == "follow_route"]
    assert all(set(r["actions"]) == {"follow_route"} for r in follow)
    assert len({a for r in records if r["agent"] == "random" for a in r["actions"]}) > 3  # varied tools
    table = (short_run / "summary.md").read_text()
    assert table.startswith("| agent | scenario | n | success | route completion | collisions | collisions/km |")
    assert (short_run / "navigation.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_resumed_finished_run_plays_nothing(short_run, tmp_path):
    """The fast twin of the test below: ``--resume`` of the fixture's finished run (a copy) adds no episode."""
    import shutil

    out = shutil.copytree(short_run, tmp_path / "copy")
    before = (out / "episodes.jsonl").read_text()
    assert compare.main(["--scenario", *SHORT, "--agents", "follow_route", "random", "--seeds", "0", "1",
                         "--out", str(out), "--resume"]) == 0
    assert (out / "episodes.jsonl").read_text() == before


# worker processes; fast twins: the test above and
# test_compare.py::test_results_are_identical_across_runs_and_worker_counts
@pytest.mark.slow
def test_rows_are_identical_across_runs_and_worker_counts_and_resume_plays_nothing(short_run, tmp_path):
    out = tmp_path / "again"
    argv = ["--scenario", *SHORT, "--agents", "follow_route", "random", "--seeds", "1"]  # the fixture's seed 1
    assert compare.main([*argv, "--workers", "2", "--out", str(out)]) == 0
    assert _stable(_records(out)) == _stable([r for r in _records(short_run) if r["seed"] == 1])
    before = (out / "episodes.jsonl").read_text()
    assert compare.main([*argv, "--out", str(out), "--resume"]) == 0
    assert (out / "episodes.jsonl").read_text() == before


def test_the_replay_gif_has_one_captioned_frame_per_decision_and_the_same_outcome(short_run, tmp_path):
    import imageio.v3 as iio

    from agents.nav_video import SCALE, nav_replay, write_nav_gif

    record = min((r for r in _records(short_run) if r["agent"] == "random"), key=lambda r: r["decisions"])
    frames, states, outcome = nav_replay(record)
    assert {k: outcome[k] for k in NAV_OUTCOME_KEYS} == {k: record[k] for k in NAV_OUTCOME_KEYS}
    assert len(frames) == record["decisions"] + 1 and frames[0].shape == (256, 256, 3)
    assert [s["action"] for s in states] == [None, *record["actions"]]
    assert states[-1]["tick"] == record["episode_length"]
    gif = iio.imread(write_nav_gif(record, tmp_path / "r.gif"))
    assert gif.shape == (record["decisions"] + 1, 256 * SCALE + 30, 256 * SCALE, 3)


@pytest.mark.parametrize("argv,message", [
    (["--scenario", "nav_maze", "micro"], "cannot share one run"),
    (["--scenario", "nav_maze", "--agents", "oracle"], "oracle does not play navigation"),
    (["--scenario", "micro", "--agents", "follow_route"], "follow_route plays navigation only"),
    (["--scenario", "route_Town02/traffic_5/eval_0"], "navigation case"),
    (["--scenario", "nav_maze", "--backend", "openenv", "--env-urls", "http://127.0.0.1:9"], "embedded simulator only"),
])
def test_bad_navigation_flags_exit_naming_the_problem(argv, message, tmp_path):
    with pytest.raises(SystemExit, match=message):
        compare.main([*argv, "--out", str(tmp_path / "x")])


def _save_run(run: Path, model, kwargs: dict) -> None:
    """A train_sb3.py-like run directory: model.zip and a config.json with the env settings ``kwargs``."""
    model.save(run / "model.zip")
    (run / "config.json").write_text(json.dumps({
        "script": "train_sb3.py", "args": {"algo": "ppo", "policy": "MlpPolicy", "env": "CarlaNavigation-v0"},
        "env_kwargs": kwargs}))


def test_an_sb3_navigation_run_plays_with_its_own_actions_under_the_harness_end_rules(tmp_path):
    from stable_baselines3 import PPO

    from agents.nav import build_nav_agent
    from agents.specs import parse_spec

    kwargs = {"scenario": ["route_Town02"], "scenario_config": {"traffic": 0, "route": "train"},
              "action_mode": "tools", "observation_mode": "state", "reward_mode": "vlm-rl", "time_limit_s": 5.0,
              "termination": "vlm-rl"}  # the run's end rules and reward do not reach the harness's env
    env = gym.make("CarlaNavigation-v0", **kwargs)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu")
    env.close()
    _save_run(tmp_path, model, kwargs)
    agent = build_nav_agent(parse_spec(f"ppo=sb3:{tmp_path}"))
    first, again = agent.play(SHORT[0], 0, 0), agent.play(SHORT[0], 0, 0)
    base = agent._envs["route_Town02/traffic_0"][0].unwrapped
    assert (base.termination, base.reward_mode, base.time_limit_ticks, base.action_mode) == (
        "vlm-rl-eval", "rubric", 6000, "tools")  # the env's default 300 s
    agent.close()
    assert first["agent"] == "ppo" and first["action_mode"] == "tools"
    assert all(a in NAV_TOOL_ACTIONS for a in first["actions"])
    # the untrained policy does not pass the first waypoint: VLM-RL's evaluation stops it at 10 s, not at 5 s
    assert (first["termination"], first["time"]) == ("no_progress", 10.0)
    assert _stable([first]) == _stable([again])  # deterministic actions, same episode


def test_an_sb3_policy_gets_the_same_outcome_in_train_sb3s_evaluation_and_in_the_harness(tmp_path):
    """One policy, one evaluation route and env seed: `nav_eval.play_routes` and `NavGymAgent` give one outcome.

    The policy (built in code, no training) is linear in the state vector: steer 0.15 per metre of waypoint 4's
    lateral offset, throttle 0.5 - 0.02 per km/h. On evaluation route 1 at 20 vehicles it reaches the goal under
    VLM-RL's evaluation rules, both places' rules; VLM-RL's training rules would end it off the track.
    """
    import torch
    from stable_baselines3 import PPO

    from agents.nav import build_nav_agent, route_case
    from agents.records import episode_seed
    from agents.specs import parse_spec
    from carla_gym.sb3 import nav_eval, runs

    kwargs = {"scenario": ["route_Town02"], "scenario_config": {"traffic": 20, "route": "train"},
              "action_mode": "control", "observation_mode": "state", "reward_mode": "vlm-rl", "steer_smoothing": 0.0,
              "ticks_per_action": 3}  # what train_sb3.py writes for --env CarlaNavigation-v0 --ticks-per-action 3
    env = gym.make("CarlaNavigation-v0", **kwargs)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, device="cpu", policy_kwargs={"net_arch": []})
    env.close()
    with torch.no_grad():
        weight = model.policy.action_net.weight
        weight.zero_()
        weight[0, 3 + 2 * 4], weight[1, 2] = 0.15, -0.02
        model.policy.action_net.bias.copy_(torch.tensor([0.0, 0.5]))
    _save_run(tmp_path, model, kwargs)
    seed, episode = 2, 3
    [evaluated] = nav_eval.play_routes(lambda obs: model.predict(obs, deterministic=True)[0],
                                       runs.acting_env_kwargs(kwargs), 20, seed=episode_seed(seed, episode),
                                       routes=[1])
    agent = build_nav_agent(parse_spec(f"ppo=sb3:{tmp_path}"))
    record = agent.play(route_case("Town02", 20, 1), seed, episode)
    agent.close()
    assert {k: record[k] for k in NAV_OUTCOME_KEYS} == {k: evaluated[k] for k in NAV_OUTCOME_KEYS}
    assert (record["termination"], record["success"], record["routes_completed"]) == ("goal_reached", True, 1.0)
    assert record["reward"] != evaluated["total_reward"]  # the harness reports the rubric, the outcome VLM-RL's
    train = gym.make("CarlaNavigation-v0", **{**kwargs, "scenario_config": {"traffic": 20, "route": "eval"}})
    obs, _ = train.reset(seed=episode_seed(seed, episode), options={"route_index": 1})
    done = False
    while not done:
        obs, _, terminated, truncated, info = train.step(model.predict(obs, deterministic=True)[0])
        done = terminated or truncated
    train.close()
    assert info["termination"] == "off_track"  # training's rules (termination="vlm-rl") end it early


def _readme_nav_args() -> list[str]:
    from agents import readme_table as rt

    return rt.compare_args(rt.PAGE.read_text(), rt.NAV_SECTION)


def _check_rows(out: Path, groups: set[str] | None = None) -> None:
    from agents import readme_table as rt

    shown = rt.nav_table_rows(rt.PAGE.read_text())
    produced = {}
    for line in (out / "summary.md").read_text().splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        produced[(cells[0], cells[1])] = cells[:-1]  # ms/ep (last) depends on the machine
    wanted = {key for key in shown if groups is None or key[1] in groups}
    assert wanted and set(produced) == wanted
    for key in wanted:
        assert [c.strip() for c in shown[key].strip("|").split("|")][:-1] == produced[key], key


def test_the_readme_navigation_table_reproduces_its_maze_rows(tmp_path):
    """Fast equivalent of the slow test below: the documented command cut to the maze (same agents and seeds)."""
    args = compare.parse_args(_readme_nav_args())
    out = tmp_path / "maze"
    argv = ["--agents", *args.agents, "--seeds", *map(str, args.seeds), "--episodes", str(args.episodes)]
    assert compare.main([*argv, "--scenario", "nav_maze", "--out", str(out)]) == 0
    _check_rows(out, {"maze_navigation"})


@pytest.mark.slow
def test_the_readme_navigation_table_command_reproduces_every_row(tmp_path):
    argv = [a for a in _readme_nav_args()]
    out_at = argv.index("--out")
    argv[out_at + 1] = str(tmp_path / "nav")
    assert compare.main(argv) == 0, shlex.join(argv)
    _check_rows(tmp_path / "nav")


def test_collisions_per_km_follow_vlm_rl_per_episode_definition():
    from agents.nav_summary import nav_row

    base = dict(routes_completed=0.5, termination="collision", success=False, total_reward=-10.0, speed_mean=10.0,
                total_distance=250.0, collision_speed=12.0, CPM=4.0, CPS=0.01, time=20.0, reward=-5.0, decisions=40,
                tool_calls=["observe"] * 3, tool_failures=1, parse_failures=0, wall_time_s=0.5)
    clean = {**base, "termination": "goal_reached", "success": True, "CPM": 0.0, "routes_completed": 1.0,
             "tool_calls": [], "tool_failures": 0}
    row = nav_row("a", "g", [base, clean])
    assert row["CPM"] == 2.0 and row["collision_rate"] == 0.5 and row["route_completion"] == 0.75
    assert row["tool_calls"] == 1.5 and row["tool_failures"] == 1 and math.isclose(row["wall_ms"], 500.0)
    assert np.isclose(row["total_distance"], 250.0)


# -- chat agents (llm:, vlm:, openai:) on navigation ------------------------------------------------------------------
def _autopilot_chat(messages, tools):
    """A scripted chat policy: set the autopilot up from the goal in the first message, then follow the route."""
    import re

    from carla_gym.llm.tools import EPISODE_OVER

    def call(name, **arguments):
        return {"type": "function", "function": {"name": name, "arguments": arguments}}

    if EPISODE_OVER in str(messages[-1]["content"]):
        return {"role": "assistant", "content": "Arrived."}
    if len(messages) == 1:
        x, y = map(float, re.search(r"at \(([-\d.]+), ([-\d.]+),", messages[0]["content"]).groups())
        return {"role": "assistant", "content": "", "tool_calls": [call("init_navigation_agent"),
                                                                   call("set_destination", x=x, y=y)]}
    return {"role": "assistant", "content": "", "tool_calls": [call("follow_route", steps=200)]}


def test_a_chat_record_is_the_terminal_outcome_of_the_same_gym_episode_through_step_call(tmp_path):
    import imageio.v3 as iio

    from agents.nav import CALLS, NavChatAgent
    from agents.nav_video import nav_replay, write_nav_gif
    from carla_gym.sim.world import NavigationCall

    agent = NavChatAgent("auto", _autopilot_chat)
    record, again = agent.play("maze_navigation", 2, 3), agent.play("maze_navigation", 2, 3)
    agent.close()
    assert _stable([record]) == _stable([again])
    env = gym.make("CarlaNavigation-v0", scenario="maze_navigation", reward_mode="rubric", termination="vlm-rl-eval")
    _, info = env.reset(seed=2003)  # episode_seed(2, 3): the episode the Gymnasium agents play
    total = 0.0
    for step in record["actions"]:
        _, reward, terminated, truncated, info = env.unwrapped.step_call(NavigationCall(**step["call"]), step["ticks"])
        total += reward
    env.close()
    assert terminated or truncated
    assert {k: record[k] for k in NAV_OUTCOME_KEYS} == {k: info["outcome"][k] for k in NAV_OUTCOME_KEYS}
    assert record["reward"] == total == 1.0 and record["success"] and record["termination"] == "goal_reached"
    follows = len(record["tool_calls"]) - 2
    assert record["tool_calls"] == ["init_navigation_agent", "set_destination"] + ["follow_route"] * follows
    assert record["decisions"] == len(record["tool_calls"]) == len(record["actions"])  # no play-out was needed
    assert (record["action_mode"], record["tool_failures"], record["turns"]) == (CALLS, 0, follows + 2)
    frames, states, outcome = nav_replay(record)
    assert {k: outcome[k] for k in NAV_OUTCOME_KEYS} == {k: record[k] for k in NAV_OUTCOME_KEYS}
    assert len(frames) == len(record["actions"]) + 1 and states[-1]["tick"] == record["episode_length"]
    assert iio.imread(write_nav_gif(record, tmp_path / "chat.gif")).shape[0] == len(frames)


@pytest.mark.slow
def test_a_tiny_llm_plays_navigation_in_the_harness_reproducibly(tmp_path):
    """``llm:tiny-random`` (offline, built in code) on one evaluation route: its record, then the same play again.

    The model stands still (it calls no tool), so the episode is played out until the harness's end rules stop
    it: VLM-RL's evaluation ends the episode when the first waypoint is not passed after 10 s (``no_progress``).
    Slow (5 s: two model loads and plays); the default run keeps the chat-agent path in
    `test_a_chat_record_is_the_terminal_outcome_of_the_same_gym_episode_through_step_call` and the tiny model's
    navigation rollouts in tests/test_grpo_nav.py.
    """
    from agents.llm import load_local_chat
    from agents.nav import NavChatAgent

    out = tmp_path / "tiny"
    assert compare.main(["--scenario", SHORT[0], "--agents", "tiny=llm:tiny-random", "--max-new-tokens", "8",
                         "--max-tool-calling-iterations", "2", "--out", str(out)]) == 0
    [record] = _records(out)
    assert set(NAV_RECORD_FIELDS) <= set(record) and record["agent"] == "tiny" and record["action_mode"] == "calls"
    assert record["group"] == "route_Town02/traffic_0" and record["termination"] == "no_progress"
    assert record["time"] == 10.0 and record["decisions"] == 0 and len(record["actions"]) == 20  # 10-tick steps
    assert record["actions"][0] == {"call": {"action_type": "observe"}, "ticks": 10, "play_out": True}
    row = next(csv.DictReader((out / "summary.csv").read_text().splitlines()))
    assert (row["agent"], float(row["tool_calls"]), int(row["tool_failures"])) == (
        "tiny", len(record["tool_calls"]), record["tool_failures"])
    chat, settings = load_local_chat("tiny-random", max_new_tokens=8)
    agent = NavChatAgent("tiny", chat, max_tool_calling_iterations=2, **settings)
    again = agent.play(SHORT[0], 0, 0)  # a second run: the same record
    agent.close()
    assert _stable([again]) == _stable([record])
