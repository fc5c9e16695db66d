"""The comparison harness: agents, records, resume, summary, plots, videos, LLM and endpoint agents."""

from __future__ import annotations

import csv
import http.server
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gymnasium as gym
import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from agents import compare  # noqa: E402
from agents.evaluation import EVAL_SEED, is_deterministic  # noqa: E402
from agents.records import RECORD_FIELDS, EpisodeLog, episode_seed, key_of, outcome_record  # noqa: E402
from agents.specs import build_agent, parse_spec  # noqa: E402
from agents.summary import (  # noqa: E402
    COLUMNS,
    PLAYED_ONCE_NOTE,
    csv_rows,
    framing_consistency,
    markdown,
    summary_rows,
    wilson,
)
from agents.video import replay_frames, write_gif  # noqa: E402
from carla_gym.envs.spaces import TOOL_ACTIONS  # noqa: E402
from carla_gym.suites import SUITES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SCRIPTED = ["inaction", "brake", "swerve_left", "swerve_right", "random", "oracle"]
"""The default agents: all deterministic (each plays a fixed scenario once) but ``random``."""


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


def _stable(records: list[dict]) -> list[dict]:
    """Records without wall time, sorted by key: what must match across runs."""
    return sorted(({k: v for k, v in r.items() if k != "wall_time_s"} for r in records), key=key_of)


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("compare") / "scripted"
    assert compare.main(["--agents", *SCRIPTED, "--scenario", "micro", "action_bias", "--seeds", "0", "1",
                         "--out", str(out)]) == 0
    return out


def test_the_oracle_reaches_the_best_outcome_and_the_rubric_answer_the_rubric_maximum(scripted_run, upstream_micro):
    from agents.evaluation import play_all

    oracle = [r for r in _records(scripted_run) if r["agent"] == "oracle" and r["scenario"] in SUITES["micro"]]
    assert sorted(r["scenario"] for r in oracle) == sorted(SUITES["micro"])  # deterministic: once, for both seeds
    assert all(r["outcome_success"] and r["actual_pedestrians_hit"] == r["best_pedestrians_hit"] for r in oracle)
    agent = build_agent(parse_spec("rubric_answer"))
    try:
        records = play_all([agent], SUITES["trainable"], [0, 1], 1)
    finally:
        agent.close()
    assert [r["scenario"] for r in records] == list(SUITES["trainable"])  # deterministic: once each
    for r in records:
        assert r["reward"] == 1.0 and r["success"], r["scenario"]
        outcomes = upstream_micro[r["scenario"].removeprefix("trolley_micro_")]["outcomes"]
        assert r["expected_pedestrians_hit"] == min(o["pedestrians_hit"] for o in outcomes.values()), r["scenario"]


def test_inaction_scores_exactly_as_the_catalogue_says(scripted_run, upstream_micro):
    inaction = [r for r in _records(scripted_run) if r["agent"] == "inaction"]
    for key, data in upstream_micro.items():
        mine = [r for r in inaction if r["scenario"] == f"trolley_micro_{key}"]
        assert [(r["seed"], r["episode"], r["played_once"]) for r in mine] == [(0, 0, True)], key
        for r in mine:
            assert r["trolley_action"] == "NONE" and set(r["actions"]) == {"observe"}
            assert r["expected_pedestrians_hit"] == data["outcomes"]["NONE"]["pedestrians_hit"]
            assert r["reward"] == (1.0 if r["is_probe"] else 0.0)  # inaction never reduces its own casualties
    saves = [r for r in inaction if r["scenario"] == "trolley_saves"]
    assert [r["reward"] for r in saves] == [-1.0]  # action_bias: doing nothing is the worse choice


def test_summary_files_agree_with_the_records(scripted_run):
    records = _records(scripted_run)
    scenarios = len(SUITES["micro"]) + len(SUITES["action_bias"])  # fixed: the deterministic agents play each once
    assert len(records) == (len(SCRIPTED) - 1) * scenarios + scenarios * 2  # random plays both seeds
    assert len({key_of(r) for r in records}) == len(records)
    rows = {(r["agent"], r["scenario"]): r for r in csv.DictReader(
        (scripted_run / "summary.csv").read_text().splitlines())}
    swerve = [r for r in records if r["agent"] == "swerve_left"]
    row = rows[("swerve_left", "all")]
    assert int(row["episodes"]) == len(swerve)
    assert float(row["mean_reward"]) == pytest.approx(sum(r["reward"] for r in swerve) / len(swerve))
    assert float(row["share_SWERVE_LEFT"]) == 1.0
    table = (scripted_run / "summary.md").read_text()
    oracle = [r for r in records if r["agent"] == "oracle"]
    oracle_all = next(line for line in table.splitlines() if line.startswith("| oracle | all | 15 (deterministic) |"))
    cells = oracle_all.split(" | ")  # deterministic: no interval; outcomes first, then the rubric
    assert len(oracle) == 15  # deterministic: each scenario once, one episode for both seeds
    mean = lambda key: sum(r[key] for r in oracle) / 15  # noqa: E731 - one episode per scenario: equal weights
    micro = [r for r in oracle if r["scenario"] not in SUITES["action_bias"]]  # outcome success: micro only
    assert len(micro) == 9 and int(rows[("oracle", "all")]["outcome_success_episodes"]) == 9
    assert cells[3:10] == [f"{sum(r['outcome_success'] for r in micro) / 9:.0%} exact (n=9)",
                           f"{mean('actual_pedestrians_hit'):.2f} / {mean('best_pedestrians_hit'):.2f}",
                           f"{mean('road_departure'):.0%}", f"{mean('collision'):.0%}", f"{mean('reward'):.2f} exact",
                           f"{mean('success'):.0%} exact", f"{mean('expected_pedestrians_hit'):.2f}"]
    assert table.splitlines()[0] == (  # no chat agent: no tool-call columns; probes: the utilitarian share
        "| agent | scenario | n | success (outcome) | hit actual / best | off road | collisions | rubric reward | "
        "rubric success | hit expected (rubric) | L / R / brake / none | utilitarian (probes) | decisions | ms/ep |")
    assert PLAYED_ONCE_NOTE in table.splitlines()
    for name in SUITES["action_bias"]:  # episodes end before any impact: outcome success does not apply
        row = rows[("oracle", name)]
        assert (row["outcome_success_rate"], row["outcome_success_episodes"], row["episodes"]) == ("", "0", "1")
        assert (row["replicates_identical"], row["scenarios_played_once"]) == ("True", "1")
    random_all = next(line for line in table.splitlines() if line.startswith("| random | all |"))
    assert " ± " in random_all and "%, " in random_all  # the random agent varies: intervals
    assert rows[("oracle", "trolley_micro_escape_exists")]["utilitarian_share"] == ""  # probes only
    assert float(rows[("oracle", "trolley_micro_classic_1v1")]["utilitarian_share"]) == 0.0
    for png in ("success_by_scenario.png", "rubric_success_by_scenario.png", "actions.png", "casualties.png"):
        assert (scripted_run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((scripted_run / "config.json").read_text())
    assert config["seeds"] == [0, 1] and config["scenario"][0] == "trolley_micro_classic_3v1"


def test_results_are_identical_across_runs_and_worker_counts(scripted_run, tmp_path):
    out = tmp_path / "again"
    assert compare.main(["--agents", *SCRIPTED, "--scenario", "micro", "action_bias", "--seeds", "0", "1",
                         "--workers", "2", "--out", str(out)]) == 0
    assert _stable(_records(out)) == _stable(_records(scripted_run))
    strip = lambda p: [line.rsplit(",", 1)[0] for line in p.read_text().splitlines()]  # noqa: E731 - wall_ms last
    assert strip(out / "summary.csv") == strip(scripted_run / "summary.csv")


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: spawns worker interpreters
def test_a_killed_run_resumes_without_duplicating_or_losing_episodes(tmp_path, workers):
    import psutil

    out = tmp_path / "killed"
    argv = ["--agents", "random", "swerve_right", "--scenario", "micro", "--seeds", "0", "1", "2", "--episodes", "6"]
    proc = subprocess.Popen([sys.executable, "-m", "agents.compare", *argv, "--workers", str(workers), "--out",
                             str(out)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        log = out / "episodes.jsonl"
        if log.exists() and log.read_text().count("\n") >= 20:
            break
        time.sleep(0.05)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    gone, alive = psutil.wait_procs(children, timeout=20)
    assert alive == [], "worker processes outlived the killed parent"
    before = _records(out)
    total = len(SUITES["micro"]) * (3 * 6 + 1)  # random: 3 seeds x 6 episodes; swerve_right: one per scenario
    assert 20 <= len(before) < total
    with open(out / "episodes.jsonl", "a") as f:
        f.write('{"agent": "random", "scenario": "trolley_mi')  # a kill in the middle of a write
    with pytest.raises(SystemExit, match=r"differ from the run's config.json .*'episodes': \(6, 5\)"):
        compare.main([*argv[:-1], "5", "--out", str(out), "--resume"])
    assert compare.main([*argv, "--out", str(out), "--resume"]) == 0
    after = _records(out)
    assert len(after) == total and len({key_of(r) for r in after}) == total
    assert after[:len(before)] == before  # finished episodes are kept as they were
    clean = tmp_path / "clean"
    assert compare.main([*argv, "--out", str(clean)]) == 0
    assert _stable(after) == _stable(_records(clean))


@pytest.mark.parametrize("argv,message", [
    (["--agents", "nobody"], "unknown kind 'nobody'"),
    (["--agents", "oracle", "oracle"], "labels must be unique"),
    (["--agents", "sb3"], "sb3 needs an argument"),
    (["--agents", "openai:gpt"], "write openai:<model>@<base url>"),
    (["--scenario", "nope"], "agents.compare: "),
    (["--seeds", "1", "1"], "give distinct seeds"),
    (["--backend", "openenv"], "needs --env-urls"),
    (["--episodes", "0"], "--episodes 0: must be >= 1"),
    (["--episodes", "1001"], "at most 1000 per seed"),
    (["--env-urls", "http://127.0.0.1:9"], "only used with --backend openenv"),
    (["--backend", "openenv", "--env-urls", "http://127.0.0.1:9"], "cannot connect"),
    (["--scenario", "trolley_saves", "--videos", "bias_3v1"], "not among the --scenario list"),
    (["--agents", "sb3:/no/such/run"], "has no config.json or model.zip"),
    (["--agents", "llm:/no/such/model"], "no such model directory"),
    (["--agents", "openai:gpt@"], "write openai:<model>@<base url>"),
    (["--agents", "oracle:"], "oracle takes no argument"),
])
def test_bad_arguments_are_refused_before_anything_runs(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        compare.main([*argv, "--out", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


def test_the_harness_plays_once_exactly_the_agents_that_declare_themselves_deterministic():
    from agents.scripted import SCRIPTED_AGENTS

    for kind in (*SCRIPTED_AGENTS, "random"):  # sb3: test_an_sb3_run_plays_in_the_env_it_trained_in_...
        agent = build_agent(parse_spec(kind))
        assert is_deterministic(agent) == compare.is_deterministic_kind(kind) == (kind != "random"), kind
    assert not any(map(compare.is_deterministic_kind, ("llm", "vlm", "openai")))


def test_a_resumed_log_of_an_earlier_version_counts_one_episode_of_a_deterministic_agent(tmp_path):
    """Records without ``played_once`` and with the seeds a fixed scenario no longer plays: one episode, exact."""
    out = tmp_path / "old"
    argv = ["--agents", "brake", "--scenario", "trolley_micro_classic_3v1", "--seeds", "0", "1", "--out", str(out)]
    assert compare.main(argv) == 0
    (record,) = _records(out)
    assert (record["seed"], record["episode"], record["played_once"]) == (0, 0, True)
    old = {k: v for k, v in record.items() if k != "played_once"}  # as an earlier version wrote them
    (out / "episodes.jsonl").write_text(json.dumps(old) + "\n" + json.dumps({**old, "seed": 1}) + "\n")
    (out / "summary.md").unlink()
    assert compare.main([*argv, "--resume"]) == 0
    assert len(_records(out)) == 2  # nothing played, nothing dropped from the log
    table = (out / "summary.md").read_text()
    assert "| brake | trolley_micro_classic_3v1 | 1 (deterministic) | 100% exact |" in table


def test_a_non_empty_output_needs_resume_or_overwrite(scripted_run):
    with pytest.raises(SystemExit, match="holds a finished comparison; replace it with: "):
        compare.main(["--agents", "oracle", "--out", str(scripted_run)])


def test_wilson_interval_and_framing_consistency():
    assert wilson(0, 5)[0] == 0.0 and wilson(5, 5)[1] == 1.0
    low, high = wilson(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    base = {"success": True, "reward": 1.0, "expected_pedestrians_hit": 0, "actual_pedestrians_hit": 0,
            "collision": False, "road_departure": False, "outcome_success": True, "best_pedestrians_hit": 0,
            "best_road_departure": False, "ethical_choice": "utilitarian", "decisions": 1,
            "tool_calls": [], "tool_failures": 0, "parse_failures": 0, "wall_time_s": 0.0, "seed": 0, "agent": "a",
            "is_probe": False,
            "actions": ["lane_change_left"]}
    records = [{**base, "scenario": "trolley_micro_consistency_a", "episode": e, "trolley_action": "SWERVE_LEFT"}
               for e in range(4)]
    records += [{**base, "scenario": "trolley_micro_consistency_b", "episode": e,
                 "trolley_action": "SWERVE_LEFT" if e < 3 else "BRAKE", "reward": 0.0 if e == 3 else 1.0,
                 "success": e < 3}
                for e in range(4)]
    assert framing_consistency(records, ["a"]) == {"a": (0.75, 4)}
    rows = summary_rows(records, ["a"], ["trolley_micro_consistency_a", "trolley_micro_consistency_b"])
    assert rows[0]["replicates_identical"] is True and math.isnan(rows[0]["reward_ci95"])
    b = rows[1]
    assert b["mean_reward"] == 0.75 and b["reward_ci95"] == pytest.approx(3.182 * 0.5 / 2)  # t(3) x sd / sqrt(n)
    assert (b["success_ci95_low"], b["success_ci95_high"]) == wilson(3, 4)
    pooled = rows[2]
    assert pooled["scenario"] == "all" and pooled["episodes"] == 8 and pooled["mean_reward"] == 0.875
    assert pooled["reward_ci95"] == pytest.approx(1.96 * math.sqrt(0.25 / 4) / 2)  # only b varies
    records[7]["episode"] = 9  # the differing b episode now pairs with nothing
    assert framing_consistency(records, ["a"]) == {"a": (1.0, 3)}


def _hand_record(scenario: str, episode: int, outcome_success: bool, hits: int, best: int, departed: bool,
                 **rubric) -> dict:
    """A record built by hand: an actual outcome against the best one; the rubric's fields from ``rubric``."""
    outcome = {"success": True, "trolley_action": "SWERVE_LEFT", "expected_pedestrians_hit": 0,
               "actual_pedestrians_hit": hits, "road_departure": departed, "outcome_success": outcome_success,
               "best_pedestrians_hit": best, "best_road_departure": False, "ethical_choice": "utilitarian",
               "is_probe": False, "framing": None, **rubric}
    return outcome_record("a", scenario, 0, episode, outcome, 1.0, ["lane_change_left"], 0.001)


def test_outcome_success_leads_the_summary_with_wilson_and_stratified_intervals(tmp_path):
    """Success by actual outcome, hits (actual / best) and road departures first; the rubric after them."""
    varied = [_hand_record("s1", 0, True, 0, 0, False), _hand_record("s1", 1, False, 0, 0, True),  # left the road
              _hand_record("s1", 2, True, 1, 1, False), _hand_record("s1", 3, False, 2, 1, False),  # one avoidable
              _hand_record("s1", 4, True, 0, 0, False)]
    same = [_hand_record("s2", e, False, 1, 0, False) for e in range(2)]  # one episode twice: exact
    one, two, pooled = summary_rows(varied + same, ["a"], ["s1", "s2"])
    assert (one["outcome_success_rate"], one["actual_pedestrians_hit"], one["best_pedestrians_hit"],
            one["road_departure_rate"]) == (0.6, 0.6, 0.4, 0.2)
    assert (one["success_rate"], one["mean_reward"]) == (1.0, 1.0)  # the rubric sees none of it
    assert (one["outcome_success_ci95_low"], one["outcome_success_ci95_high"]) == wilson(3, 5)
    assert [round(v, 4) for v in wilson(3, 5)] == [0.2307, 0.8824]  # (p + z^2/2n -+ z sqrt(...)) / (1 + z^2/n)
    assert (one["success_ci95_low"], one["success_ci95_high"]) == wilson(5, 5)
    assert two["replicates_identical"] is True and two["outcome_success_rate"] == 0.0
    assert math.isnan(two["outcome_success_ci95_low"]) and math.isnan(two["outcome_success_ci95_high"])
    # the 'all' row: scenarios weighted equally; normal interval, stratified: only s1 varies (sample variance 0.3)
    half = 1.96 * math.sqrt(0.3 / 5) / 2
    assert pooled["outcome_success_rate"] == 0.3 and pooled["best_pedestrians_hit"] == pytest.approx((0.4 + 0.0) / 2)
    assert (pooled["actual_pedestrians_hit"], pooled["road_departure_rate"]) == (pytest.approx((0.6 + 1.0) / 2), 0.1)
    assert pooled["episodes"] == 7  # the means weigh each scenario the same; the counts add up
    assert pooled["outcome_success_ci95_low"] == pytest.approx(0.3 - half)
    assert pooled["outcome_success_ci95_high"] == pytest.approx(0.3 + half)
    assert round(half, 3) == 0.240  # 1.96 x sqrt(0.06) / 2
    assert summary_rows(varied, ["a"], ["s1"])[1] == {**one, "scenario": "all"}  # one scenario: its own intervals
    assert COLUMNS[:11] == ("agent", "scenario", "episodes", "outcome_success_rate", "outcome_success_ci95_low",
                            "outcome_success_ci95_high", "outcome_success_episodes", "actual_pedestrians_hit",
                            "best_pedestrians_hit", "road_departure_rate", "mean_reward")
    assert COLUMNS[11:15] == ("reward_ci95", "success_rate", "success_ci95_low", "success_ci95_high")
    assert csv_rows([two])[0][3:10] == [0.0, "", "", 2, 1.0, 0.0, 0.0]
    table = markdown([one, two]).splitlines()
    assert table[0].split(" | ")[3:10] == ["success (outcome)", "hit actual / best", "off road", "collisions",
                                           "rubric reward", "rubric success", "hit expected (rubric)"]
    assert table[2].split(" | ")[3:9] == ["60% [23%, 88%]", "0.60 / 0.40", "20%", "40%", "1.00 ± 0.00",
                                          "100% [57%, 100%]"]
    assert table[3].split(" | ")[3:9] == ["0% exact", "1.00 / 0.00", "0%", "100%", "1.00 exact", "100% exact"]


def test_outcome_success_leaves_out_action_bias_scenarios_and_says_how_many_episodes_it_counts():
    """action_bias episodes end before any impact: outcome success is empty there, and the 'all' row pools the rest."""
    varied = [_hand_record("trolley_micro_classic_3v1", e, e < 3, 0, 0, False) for e in range(4)]  # 3 of 4
    same = [_hand_record("trolley_micro_escape_exists", e, False, 2, 0, False) for e in range(2)]  # exact: 0 of 2
    bias = [_hand_record("trolley_saves", e, True, 0, 0, False, success=e == 0) for e in range(2)]  # varies (rubric)
    one, two, three, pooled = summary_rows(varied + same + bias, ["a"], ["trolley_micro_classic_3v1",
                                                                        "trolley_micro_escape_exists", "trolley_saves"])
    assert (one["outcome_success_rate"], one["outcome_success_episodes"], two["outcome_success_episodes"]) == (
        0.75, 4, 2)
    assert (one["outcome_success_ci95_low"], one["outcome_success_ci95_high"]) == wilson(3, 4)
    assert three["replicates_identical"] is False and three["outcome_success_episodes"] == 0
    assert all(math.isnan(three[f"outcome_success{k}"]) for k in ("_rate", "_ci95_low", "_ci95_high"))
    assert (three["success_rate"], three["success_ci95_low"], three["success_ci95_high"]) == (0.5, *wilson(1, 2))
    # 'all': outcome success over the two micro scenarios (equal weight; variance of [1, 1, 1, 0] is 0.25), the
    # rubric's success over all three (variances 0 and 0.5 over 4 and 2 episodes: micro's rubric success is 1.0)
    assert (pooled["episodes"], pooled["outcome_success_episodes"], pooled["outcome_success_rate"]) == (8, 6, 0.375)
    half = 1.96 * math.sqrt(0.25 / 4) / 2
    assert (pooled["outcome_success_ci95_low"], pooled["outcome_success_ci95_high"]) == pytest.approx(
        (0.375 - half, 0.375 + half))
    assert pooled["success_rate"] == pytest.approx(2.5 / 3) and pooled["success_ci95_high"] == 1.0
    assert pooled["success_rate"] - pooled["success_ci95_low"] == pytest.approx(1.96 * math.sqrt(0.5 / 2) / 3)
    table = markdown([three, pooled]).splitlines()
    assert table[2].split(" | ")[3] == "" and table[2].split(" | ")[8] == "50% [9%, 91%]"  # rubric success
    assert table[3].split(" | ")[3] == f"38% [{0.375 - half:.0%}, {0.375 + half:.0%}] (n=6)"
    assert csv_rows([three])[0][3:7] == ["", "", "", 0]
    only_bias = summary_rows(bias, ["a"], ["trolley_saves"])[1]  # nothing to count: empty, as its scenario row
    assert math.isnan(only_bias["outcome_success_rate"]) and only_bias["outcome_success_episodes"] == 0


def test_generated_replicates_are_never_exact_and_rubric_success_tells_replicates_apart():
    """Equal actions and outcomes on different layouts are not one episode."""
    from agents.summary import _identical

    env = gym.make("CarlaTrolley-v0", scenario="trolley_generated_test", observation_mode="state")
    played = {}
    for seed in range(16):  # inaction on the first test layouts; the review's were env seeds 0, 12 and 15
        env.reset(seed=seed)
        actions, total, done = [], 0.0, False
        while not done:
            _, reward, done, _, info = env.step(0)
            actions.append("observe")
            total += reward
        record = outcome_record("inaction", "trolley_generated_test", seed, 0, info["outcome"], total, actions, 0.0)
        same = ("reward", "success", "trolley_action", "actual_pedestrians_hit", "road_departure", "outcome_success",
                "actions")
        played.setdefault(repr([record[k] for k in same]), []).append(record)
    alike = max(played.values(), key=len)[:3]  # three layouts on which inaction did and scored the same
    assert len(alike) == 3 and len({r["seed"] for r in alike}) == 3
    row = summary_rows(alike, ["inaction"], ["trolley_generated_test"])[0]
    assert row["replicates_identical"] is False and row["reward_ci95"] == 0.0
    rate = row["outcome_success_rate"]
    assert (row["outcome_success_ci95_low"], row["outcome_success_ci95_high"]) == wilson(round(3 * rate), 3)
    cell = markdown([row]).splitlines()[2].split(" | ")[3]
    assert "exact" not in cell and cell.endswith("%]")
    # a fixed scenario's replicates are one episode when everything agrees, the rubric's success included
    fixed = [_hand_record("trolley_micro_classic_3v1", e, False, 1, 0, False) for e in range(2)]
    assert _identical(fixed) is True
    assert _identical([fixed[0], {**fixed[1], "success": False}]) is False


def test_episode_log_drops_a_torn_line_and_rejects_foreign_files(tmp_path):
    log = EpisodeLog(tmp_path / "e.jsonl")
    record = outcome_record("a", "s", 0, 0, {"success": True, "trolley_action": "NONE",
                                             "expected_pedestrians_hit": 0, "actual_pedestrians_hit": 0,
                                             "road_departure": False, "outcome_success": True,
                                             "best_pedestrians_hit": 0, "best_road_departure": False,
                                             "ethical_choice": "deontological", "is_probe": True, "framing": None},
                            1.0, ["observe"], 0.0)
    assert sorted(record) == sorted(RECORD_FIELDS)
    log.append(record)
    line = json.dumps(record) + "\n"
    (tmp_path / "e.jsonl").write_text(line + '{"agent": ')
    assert log.read() == [record] and (tmp_path / "e.jsonl").read_text() == line
    log.append(record)
    assert log.read() == [record]  # a duplicate key counts once
    (tmp_path / "e.jsonl").write_text("not json\n{}\n")
    with pytest.raises(ValueError, match="e.jsonl:1 is not an episode record"):
        log.read()
    (tmp_path / "e.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(ValueError, match="e.jsonl:1 is not an episode record"):
        log.read()
    old = {k: v for k, v in record.items() if k not in ("tool_calls", "tool_failures")}  # an older version's record
    (tmp_path / "e.jsonl").write_text(json.dumps(old) + "\n")
    with pytest.raises(ValueError, match="e.jsonl:1 has no tool_calls, tool_failures: it was written by another "
                                         "version of carla_gym.*--overwrite"):
        log.read()
    before_outcomes = {k: v for k, v in record.items() if not k.startswith(("outcome_", "best_"))}  # an older record
    (tmp_path / "e.jsonl").write_text(json.dumps(before_outcomes) + "\n")
    with pytest.raises(ValueError, match="e.jsonl:1 has no outcome_success, best_pedestrians_hit, "
                                         "best_road_departure: it was written by another version"):
        log.read()


# -- replays and videos -----------------------------------------------------------------------------
def test_replays_reproduce_recorded_episodes_and_write_gifs(scripted_run, tmp_path):
    records = [r for r in _records(scripted_run) if (r["agent"], r["seed"]) in (("random", 1), ("oracle", 0))]
    for record in records:
        _, outcome = replay_frames(record, size=(64, 36))
        assert outcome["trolley_action"] == record["trolley_action"], record
        assert outcome["actual_pedestrians_hit"] == record["actual_pedestrians_hit"], record
        assert outcome["road_departure"] == record["road_departure"], record
    control = {"agent": "c", "scenario": "trolley_micro_escape_exists", "seed": 0, "episode": 0,
               "actions": [[-0.6, 0.2], [0.0, -1.0], [0.0, -1.0]]}
    agent = build_agent(parse_spec("inaction"))
    env = agent._env = __import__("gymnasium").make("CarlaTrolley-v0", action_mode="control",
                                                    observation_mode="state")
    env.reset(seed=episode_seed(0, 0), options={"scenario": control["scenario"]})
    for action in control["actions"]:
        _, _, done, _, info = env.step(action)
    while not done:
        _, _, done, _, info = env.step([0.0, -1.0])
    frames, outcome = replay_frames({**control, "actions": control["actions"] + [[0.0, -1.0]] * 10}, size=(64, 36))
    assert outcome == info["outcome"] and len(frames) == info["tick"] + 1
    path = write_gif(records[0], tmp_path / "x.gif", view="birdeye")
    assert path.read_bytes()[:6] in (b"GIF87a", b"GIF89a")


# -- trained agents: SB3 runs, a train_grpo.py LoRA run, an OpenAI-compatible endpoint ----------------
@pytest.fixture(scope="module")
def sb3_runs(tmp_path_factory):
    """Tiny train_sb3.py runs trained in this process: PPO (tools) and a vlm-rl SAC (control, steer smoothing 0.75)."""
    import train_sb3

    root = tmp_path_factory.mktemp("sb3")
    common = ["--scenario", "trolley_micro_escape_exists", "--reward-mode", "rubric", "--n-envs", "2",
              "--eval-episodes", "1", "--eval-freq", "100000", "--checkpoint-freq", "100000"]
    for name, extra in (("ppo", ["--total-timesteps", "128", "--hp", "n_steps=64", "batch_size=32"]),
                        ("sac", ["--preset", "vlm-rl", "--algo", "sac", "--total-timesteps", "64", "--hp",
                                 "buffer_size=500", "learning_starts=32", "batch_size=16", "train_freq=4",
                                 "gradient_steps=1", "policy_kwargs={'log_std_init': -3, 'net_arch': [16]}"])):
        result = train_sb3.main([*common, *extra, "--output-dir", str(root / name)])
        assert not result.get("interrupted") and (root / name / "model.zip").is_file(), result
    return root


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    import train_grpo

    out = tmp_path_factory.mktemp("grpo") / "run"
    assert train_grpo.main(["--model", "tiny-random", "--lora", "--lora-r", "4", "--dataset-size", "2",
                            "--num-generations", "2", "--per-device-train-batch-size", "2", "--max-completion-length",
                            "64", "--max-steps", "1", "--learning-rate", "0.01", "--eval-episodes", "1",
                            "--eval-max-new-tokens", "8", "--output-dir", str(out)]) == 0
    return out


def test_compare_runs_ppo_sac_and_a_grpo_lora_run_on_the_same_episodes(sb3_runs, grpo_run, tmp_path):
    out = tmp_path / "all"
    agents = ["oracle", f"ppo=sb3:{sb3_runs / 'ppo'}", f"sac=sb3:{sb3_runs / 'sac'}", f"llm=llm:{grpo_run}"]
    assert compare.main(["--agents", *agents, "--scenario", "trolley_micro_escape_exists", "trolley_saves",
                         "--seeds", str(EVAL_SEED), "--max-new-tokens", "8", "--videos", "trolley_saves",
                         "--out", str(out)]) == 0
    records = _records(out)
    assert sorted((r["agent"], r["scenario"]) for r in records) == sorted(
        (a, s) for a in ("oracle", "ppo", "sac", "llm") for s in ("trolley_micro_escape_exists", "trolley_saves"))
    sac = [r for r in records if r["agent"] == "sac"]
    assert all(isinstance(a, list) and len(a) == 2 for r in sac for a in r["actions"])  # control actions
    llm = [r for r in records if r["agent"] == "llm"]
    assert all("turns" in r and r["decisions"] == len(r["actions"]) for r in llm)
    # the harness and train_grpo.py's own evaluation (agents.evaluation, comparison seed EVAL_SEED) play the
    # adapter the same way: greedy, same env seeds, the same record
    (trained,) = [r for r in map(json.loads, (grpo_run / "eval.jsonl").read_text().splitlines())
                  if r["agent"] not in ("oracle", "rubric_answer") and r["scenario"] == "trolley_micro_escape_exists"]
    (played,) = [r for r in llm if r["scenario"] == "trolley_micro_escape_exists"]
    assert (trained["seed"], trained["episode"]) == (played["seed"], played["episode"]) == (EVAL_SEED, 0)
    same = [k for k in RECORD_FIELDS if k not in ("agent", "wall_time_s")]
    assert {k: trained[k] for k in same} == {k: played[k] for k in same}
    gifs = sorted(p.name for p in (out / "videos").iterdir())
    assert gifs == [f"{i:02d}_{a}__trolley_saves.gif" for i, a in enumerate(("oracle", "ppo", "sac", "llm"))]


def test_an_sb3_run_plays_in_the_env_it_trained_in_steer_smoothing_included(sb3_runs, tmp_path):
    """A vlm-rl-preset SAC run (control, steering smoothing 0.75: a 33-entry state) plays in the harness."""
    import shutil

    import gymnasium as gym

    from agents.sb3 import SB3Policy

    run = tmp_path / "vlmrl"
    shutil.copytree(sb3_runs / "sac", run)  # its config.json is changed below
    acting = {"action_mode": "control", "ticks_per_action": 10, "observation_mode": "state", "steer_smoothing": 0.75,
              "reward_mode": "rubric"}
    config = json.loads((run / "config.json").read_text())
    assert config["env_kwargs"] == {**acting, "scenario": ["trolley_micro_escape_exists"]}  # as trained
    agent = build_agent(parse_spec(f"vlmrl=sb3:{run}"))
    assert agent.env_kwargs == acting
    assert is_deterministic(agent) and compare.is_deterministic_kind("sb3")  # deterministic=True actions
    record = agent.play("trolley_micro_escape_exists", 0, 0)
    env = agent._envs["control"].unwrapped  # the GymAgent's env of its action mode
    assert env.steer_smoothing == 0.75 and env.observation_space.shape == (33,)
    agent.close()
    # the same episode played by hand in a smoothing env: the record holds the model's actions and reward
    model = agent.policy.model
    env = gym.make("CarlaTrolley-v0", scenario="trolley_micro_escape_exists", **acting)
    obs, _ = env.reset(seed=episode_seed(0, 0))
    actions, total, done = [], 0.0, False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        actions.append([float(v) for v in action])
        obs, reward, terminated, truncated, _ = env.step(action)
        total, done = total + reward, terminated or truncated
    env.close()
    assert record["actions"] == actions and record["reward"] == total
    out = tmp_path / "compare"
    assert compare.main(["--agents", f"vlmrl=sb3:{run}", "--scenario", "trolley_micro_escape_exists",
                         "--out", str(out)]) == 0
    assert [r["actions"] for r in _records(out) if r["episode"] == 0] == [actions]
    # a run written before config.json kept env_kwargs: rebuilt from its arguments, the same env
    del config["env_kwargs"]
    (run / "config.json").write_text(json.dumps(config))
    assert SB3Policy(run).env_kwargs == acting
    # an env that does not fit the model is refused, naming both observation spaces
    config["env_kwargs"] = {"scenario": ["trolley_micro_escape_exists"], **acting, "steer_smoothing": 0.0}
    (run / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"observation space Box\(shape \(32,\), float32\), the model was trained on "
                       r"Box\(shape \(33,\), float32\)"):
        SB3Policy(run)
    (run / "config.json").write_text(json.dumps({"args": {"no": 1}}))
    with pytest.raises(ValueError, match="not the config.json of a train_sb3.py run"):
        SB3Policy(run)


class _StubEndpoint(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible /chat/completions stub: swerve left, then a malformed call, then stop."""

    requests: list[dict] = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append(body)
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        if turn == 0:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_a", "type": "function",
                 "function": {"name": "lane_change", "arguments": '{"direction": "left"}'}}]}
        elif turn == 1:
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_b", "type": "function", "function": {"name": "observe", "arguments": "{oops"}}]}
        else:
            message = {"role": "assistant", "content": "Swerved left."}
        data = json.dumps({"choices": [{"index": 0, "message": message}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_openai_compatible_endpoint_agent_with_tool_call_ids_and_parse_failures(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StubEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        out = tmp_path / "endpoint"
        assert compare.main(["--agents", f"stub=openai:tiny@{url}", "--scenario", "trolley_micro_escape_exists",
                             "--out", str(out)]) == 0
    finally:
        server.shutdown()
        server.server_close()
    (record,) = _records(out)
    assert record["reward"] == 1.0 and record["actions"] == ["lane_change_left"] and record["parse_failures"] == 1
    first, second = _StubEndpoint.requests[:2]
    assert first["model"] == "tiny" and first["temperature"] == 0.0
    assert sorted(t["function"]["name"] for t in first["tools"]) == ["emergency_stop", "lane_change", "observe"]
    assert first["messages"][0]["content"].startswith("You are the driving policy")
    call, result = second["messages"][1], second["messages"][2]
    assert call["tool_calls"][0]["id"] == "call_a" and call["tool_calls"][0]["function"]["arguments"] == \
        '{"direction": "left"}'
    assert result["role"] == "tool" and result["tool_call_id"] == "call_a" and result["content"].startswith("Speed:")


def test_unreachable_endpoint_names_the_url(tmp_path):
    from agents.llm import OpenAIChat

    chat = OpenAIChat("m", "http://127.0.0.1:9/v1", timeout_s=5)
    with pytest.raises(RuntimeError, match=r"chat endpoint http://127.0.0.1:9/v1/chat/completions failed"):
        chat([{"role": "user", "content": "hi"}], [])


def test_carla_gym_compare_command_dispatches(tmp_path, capsys, monkeypatch):
    from carla_gym import cli

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    with pytest.raises(SystemExit) as info:
        cli.main(["compare", "--agents", "oracle", "--scenario", "trolley_saves", "--out", str(tmp_path / "c")])
    assert info.value.code == 0
    # one episode, exact (deterministic); outcome success does not apply to action_bias (the episode ends before
    # any impact): no outcome columns, the rubric's first
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("| agent | scenario | n | rubric reward | rubric success | hit expected (rubric) |")
    assert printed[2].startswith("| oracle | all | 1 (deterministic) | ") and printed[2].count(" exact |") == 2
    with pytest.raises(SystemExit, match=r"holds a finished comparison; replace it with: carla-gym compare "
                                         r"--agents oracle --out \S+ --overwrite;"):
        cli.main(["compare", "--agents", "oracle", "--out", str(tmp_path / "c")])  # hints as it was started
    assert sys.argv[0] != "carla-gym compare"  # restored after the dispatch
    with pytest.raises(SystemExit,
                       match=r"carla-gym: unknown command 'train'; valid: serve, collect, compare, package"):
        cli.main(["train"])
    assert "carla-gym compare [options] (carla-gym compare --help lists every option)" in cli.usage()
    monkeypatch.setattr(cli, "commands", dict)  # an install from before carla-gym-compare existed
    with pytest.raises(SystemExit, match=r"unknown command 'compare'; valid: serve; .* \(pip install -e \.\)$"):
        cli.main(["compare"])


def test_carla_gym_compare_is_a_console_script_of_its_own(tmp_path, monkeypatch, capsys):
    from importlib.metadata import entry_points

    (script,) = entry_points(group="console_scripts").select(name="carla-gym-compare")
    assert script.value == "agents.compare:main"
    out = tmp_path / "c"
    monkeypatch.setattr(sys, "argv", ["/venv/bin/carla-gym-compare", "--agents", "brake", "--scenario",
                                      "trolley_saves", "--out", str(out)])
    assert script.load()() == 0  # no required arguments; returns the exit code
    # the rubric counts braking as inaction (-1); outcome success does not apply: the episode ends before any impact
    assert "| brake | all | 1 (deterministic) | -1.00 exact | 0% exact |" in capsys.readouterr().out
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(sys, "argv", ["/venv/bin/carla-gym-compare", "--agents", "brake", "--out", str(out)])
    with pytest.raises(SystemExit, match=r"holds a finished comparison; replace it with: carla-gym-compare "
                                         r"--agents brake --out \S+ --overwrite;"):
        script.load()()  # hints name the command as it was started


def test_the_library_never_imports_the_harness_or_the_scripts():
    import ast

    offenders = []
    for path in sorted((REPO / "carla_gym").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(REPO)}: {name}" for name in names
                          if name.split(".")[0] in ("agents", "train_sb3", "train_grpo", "benchmarks")]
    assert offenders == []


@pytest.mark.slow
def test_carla_gym_compare_command_runs_end_to_end(tmp_path):
    """The installed ``carla-gym`` console script finds ``carla-gym-compare`` and runs it (a real command line)."""
    script = Path(sys.executable).parent / "carla-gym"
    proc = subprocess.run([str(script), "compare", "--agents", "oracle", "--scenario", "trolley_saves", "--out",
                           str(tmp_path / "c")], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    # outcome success does not apply to action_bias: no outcome columns, the rubric's first
    assert "| agent | scenario | n | rubric reward | rubric success |" in proc.stdout
    assert "| oracle | all | 1 (deterministic) | " in proc.stdout


def test_openenv_backend_gives_the_same_records_as_the_embedded_one(scripted_run, openenv_server_url,
                                                                   tmp_path):
    out = tmp_path / "remote"
    argv = ["--agents", "oracle", "random", "--scenario", "trolley_micro_classic_5v1", "bias_3v1", "--seeds", "0", "1"]
    assert compare.main([*argv, "--backend", "openenv", "--env-urls", openenv_server_url, "--out", str(out)]) == 0
    local = [r for r in _records(scripted_run) if r["agent"] in ("oracle", "random")
             and r["scenario"] in ("trolley_micro_classic_5v1", "bias_3v1")]
    assert _stable(_records(out)) == _stable(local) and len(local) == 2 + 4  # the oracle plays each scenario once


def test_random_agent_draws_independently_per_scenario_and_seed(scripted_run):
    import zlib

    import numpy as np

    random = [r for r in _records(scripted_run) if r["agent"] == "random"]
    assert len(random) == 2 * (len(SUITES["micro"]) + len(SUITES["action_bias"]))  # seeds 0 and 1, episode 0
    for r in random:  # each episode's own stream: seeded by its env seed and the scenario's CRC-32
        rng = np.random.default_rng([episode_seed(r["seed"], r["episode"]), zlib.crc32(r["scenario"].encode())])
        want = [TOOL_ACTIONS[int(rng.integers(len(TOOL_ACTIONS)))] for _ in r["actions"]]
        assert r["actions"] == want, (r["scenario"], r["seed"])
    firsts = {(r["scenario"], r["seed"]): tuple(r["actions"][:3]) for r in random}
    assert len(set(firsts.values())) == 17  # recorded: 17 distinct openings in 30 episodes, not one replayed


def test_a_second_run_on_the_same_output_is_refused_and_duplicates_count_once(tmp_path):
    import fcntl

    out = tmp_path / "locked"
    assert compare.main(["--agents", "oracle", "--scenario", "trolley_saves", "--out", str(out)]) == 0
    with open(out / ".lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SystemExit, match="in use by another agents.compare run"):
            compare.main(["--agents", "oracle", "--scenario", "trolley_saves", "--out", str(out), "--resume"])
    log = out / "episodes.jsonl"
    log.write_text(log.read_text() * 2)  # e.g. two runs that appended to one file
    assert compare.main(["--agents", "oracle", "--scenario", "trolley_saves", "--out", str(out), "--resume"]) == 0
    assert "| oracle | trolley_saves | 1 (deterministic) |" in (out / "summary.md").read_text()


def test_overwrite_takes_the_lock_first_and_keeps_the_last_complete_comparison(tmp_path):
    out, old = tmp_path / "c", tmp_path / "c.replaced"
    argv = ["--agents", "oracle", "--scenario", "trolley_saves", "--out", str(out)]
    assert compare.main(argv) == 0
    hold = ("import sys\nfrom carla_gym.io import claim_output_dir\nwith claim_output_dir(sys.argv[1], "
            "program='agents.compare', overwrite=False, complete='summary.md', resume='r'):\n"
            "    print('held', flush=True)\n    sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=REPO)
    try:  # another process runs in out: --overwrite must not move it aside
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(SystemExit, match=rf"in use by another agents.compare run \(pid {holder.pid}: "):
            compare.main([*argv, "--overwrite"])
    finally:
        holder.communicate("")
    assert (out / "summary.md").is_file() and not old.exists()
    (out / "summary.md").rename(old.with_name("summary.md.keep"))  # out: an unfinished run after a failed overwrite
    old.mkdir()
    (old / "summary.md").write_text("the last complete comparison")
    with pytest.raises(SystemExit) as exc:
        compare.main([*argv, "--overwrite"])
    assert str(exc.value.code).startswith(f"--overwrite {out}: refused, since {old} holds the last complete run")
    assert f"--agents oracle --scenario trolley_saves --out {out} --resume; or delete {old}" in str(exc.value.code)
    assert (old / "summary.md").read_text() == "the last complete comparison"
    assert (out / "episodes.jsonl").is_file()


def test_openai_replies_with_malformed_calls_are_counted_not_fatal(monkeypatch):
    import httpx

    from agents.llm import OpenAIChat

    calls = [{"function": {"arguments": "{}"}},  # no name
             {"id": "x", "function": {"name": "lane_change", "arguments": {"direction": "left"}}},  # dict arguments
             {"function": {"name": "observe", "arguments": "[1]"}}]  # not an object

    def post(url, json, headers, timeout):
        assert "return" not in json["tools"][0]["function"]  # transformers' extra key is not sent
        return httpx.Response(200, json={"choices": [{"message": {"content": None, "tool_calls": calls}}]},
                              request=httpx.Request("POST", url))

    monkeypatch.setattr(httpx, "post", post)
    reply = OpenAIChat("m", "http://127.0.0.1:1/v1")([{"role": "user", "content": "hi"}],
                                                     tool_methods_of_an_env())
    assert reply["parse_failed"] is True
    assert reply["tool_calls"] == [{"type": "function", "id": "x",
                                    "function": {"name": "lane_change", "arguments": {"direction": "left"}}}]


def tool_methods_of_an_env():
    from carla_gym.llm.tools import CarlaToolEnv, tool_methods

    return tool_methods(CarlaToolEnv())


def test_replays_follow_each_runs_ticks_per_decision(tmp_path):
    import gymnasium as gym

    for ticks in (3, 7):
        env = gym.make("CarlaTrolley-v0", observation_mode="state", ticks_per_action=ticks)
        env.reset(seed=episode_seed(0, 0), options={"scenario": "trolley_micro_classic_3v1"})
        actions, done = ["lane_change_right", "observe", "emergency_stop"], False
        taken = []
        while not done:
            action = actions.pop(0) if actions else "observe"
            taken.append(action)
            _, _, done, _, info = env.step(TOOL_ACTIONS.index(action))
        record = {"scenario": "trolley_micro_classic_3v1", "seed": 0, "episode": 0, "actions": taken}
        frames, outcome = replay_frames(record, size=(32, 18), ticks_per_action=ticks)
        assert outcome == info["outcome"] and len(frames) == info["tick"] + 1, ticks


# -- what is printed and drawn ----------------------------------------------------------------------
def test_compare_prints_the_all_rows_and_leaves_per_scenario_rows_to_the_files(tmp_path, capsys):
    out = tmp_path / "printed"
    assert compare.main(["--agents", "oracle", "random", "--scenario", "micro", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    table = (out / "summary.md").read_text().splitlines()
    all_rows = [line for line in table if " | all | " in line]
    assert len(all_rows) == 2
    assert [line for line in printed if line.startswith("| ") and " | all | " in line] == all_rows
    scenario_rows = [line for line in table if line.startswith("| oracle | trolley_") or
                     line.startswith("| random | trolley_")]
    assert len(scenario_rows) == 2 * len(SUITES["micro"]) and not set(scenario_rows) & set(printed)
    assert f"the {len(scenario_rows)} per-scenario rows are in {out / 'summary.md'} and summary.csv" in printed[-2]
    # the table head and 2 'all' rows, a blank, the note on the oracle's scenarios played once, a blank, the 4-line
    # framing table, a blank, the hint, the files
    assert printed[4:6] == ["", PLAYED_ONCE_NOTE]
    assert len(printed) == 14 and printed[7:11] == [
        "| agent | framing consistency (same action in consistency_a and _b) | pairs |", "|---|---|---|",
        "| oracle | 100% | 1 |", "| random | 0% | 1 |"]
    assert printed[-1] == (f"results in {out}: episodes.jsonl, summary.md, summary.csv, summary.json, "
                           "success_by_scenario.png (actual outcome), rubric_success_by_scenario.png, actions.png, "
                           "casualties.png")
    assert sorted(p.name for p in out.glob("*.png")) == ["actions.png", "casualties.png",
                                                          "rubric_success_by_scenario.png", "success_by_scenario.png"]
    saved = json.loads((out / "summary.json").read_text())  # agents.evaluation.write_summary, as train_*.py
    assert [(r["agent"], r["scenario"]) for r in saved["rows"] if r["scenario"] == "all"] == [
        ("oracle", "all"), ("random", "all")]
    assert saved["framing_consistency"] == {"oracle": {"share": 1.0, "pairs": 1}, "random": {"share": 0.0, "pairs": 1}}


def _rows():
    base = {"expected_pedestrians_hit": 1.5, "actual_pedestrians_hit": 0.0, "best_pedestrians_hit": 0.25,
            "road_departure_rate": 0.0, "success_rate": 0.5, "outcome_success_rate": 0.25,
            **{f"share_{a}": 0.25 for a in ("SWERVE_LEFT", "SWERVE_RIGHT", "BRAKE", "NONE")}}
    rows = []
    for agent, departures in (("a", 0.0), ("b", 0.5)):
        rows += [{**base, "agent": agent, "scenario": "trolley_micro_classic_3v1", "success_rate": 1.0,
                  "outcome_success_rate": 0.4},
                 {**base, "agent": agent, "scenario": "all", "road_departure_rate": departures}]
    return rows


def test_success_heatmap_is_in_percent_on_its_colour_bar_title_and_cells():
    from agents.plots import success_figure

    fig = success_figure(_rows())  # success by actual outcome first
    ax, bar = fig.axes
    assert ax.images[0].get_clim() == (0.0, 100.0) and bar.get_ylim() == (0.0, 100.0)
    assert ax.get_title().startswith("Success by actual outcome [%]") and bar.get_ylabel() == "success [%]"
    assert [t.get_text() for t in ax.texts] == ["40", "40"]
    rubric = success_figure(_rows(), "success_rate").axes[0]
    assert rubric.get_title().startswith("Rubric success [%] (upstream)")
    assert [t.get_text() for t in rubric.texts] == ["100", "100"]
    with pytest.raises(ValueError, match=r"column='mean_reward': choose one of \['outcome_success_rate', "
                                         r"'success_rate'\]"):
        success_figure(_rows(), "mean_reward")


def test_actions_legend_sits_beside_the_bars():
    from agents.plots import actions_figure

    fig = actions_figure(_rows())
    fig.canvas.draw()
    ax = fig.axes[0]
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert legend.x0 >= axes.x1  # right of the axes: covers no bar
    assert fig.bbox.contains(legend.x1 - 1, legend.y0 + 1)  # and inside the figure


def test_casualties_plot_labels_zero_bars_and_shows_road_departures():
    from agents.plots import casualties_figure

    fig = casualties_figure(_rows())
    ax = fig.axes[0]
    heights = [[bar.get_height() for bar in container] for container in ax.containers]
    assert heights == [[0.0, 0.0], [0.25, 0.25], [0.0, 0.5], [1.5, 1.5]]  # actual, best, off road, then the rubric's
    assert [t.get_text() for t in ax.texts] == ["0.00", "0.00", "0.25", "0.25", "0.00", "0.50", "1.50", "1.50"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "hit, actual (simulated)", "hit, best candidate policy (simulated)", "road departures",
        "hit, expected by the rubric (scenario data)"]


def test_gif_frames_carry_a_caption_band_with_agent_tick_action_speed_and_outcome(scripted_run, tmp_path):
    import imageio.v3 as iio

    from agents.video import CAPTION_HEIGHT, caption, replay, write_gif

    record = next(r for r in _records(scripted_run) if r["agent"] == "swerve_left" and r["seed"] == 0
                  and r["scenario"] == "trolley_micro_escape_exists")
    frames, states, outcome = replay(record)
    lines = [caption(record, state) for state in states]
    assert lines[0] == ("swerve_left | escape_exists | outcome SWERVE_LEFT, 0 hit, reward 1",
                        "tick 0 (0.00 s) | start | 40.0 km/h")
    assert lines[1][1].startswith("tick 1 (0.05 s) | lane_change_left | ")
    assert lines[-1][1].startswith(f"tick {len(frames) - 1} (")
    gif = iio.imread(write_gif(record, tmp_path / "c.gif"))
    assert gif.shape == (len(frames), 180 + CAPTION_HEIGHT, 320, 3)
    band = gif[:, 180:].astype(int).sum(axis=-1)
    assert (band > 600).any(axis=(1, 2)).all()  # white text on every frame
    assert (band < 60).mean() > 0.5  # on a dark band


def test_chat_agent_records_count_every_tool_call_like_training():
    from agents.players import ChatAgent
    from agents.summary import markdown

    def turn(name, **arguments):
        return {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": arguments}}]}

    replies = [turn("lane_change", dir="left"), turn("fly"), turn("lane_change", direction="up"),
               turn("lane_change", direction="left"),
               {"role": "assistant", "content": "<tool_call>{", "parse_failed": True}]
    agent = ChatAgent("scripted", lambda messages, tools: replies.pop(0))
    record = agent.play("trolley_micro_escape_exists", 0, 0)
    agent.close()
    assert record["tool_calls"] == ["lane_change", "fly", "lane_change", "lane_change"]
    assert (record["tool_failures"], record["parse_failures"], record["decisions"]) == (3, 1, 1)
    assert record["actions"] == ["lane_change_left"] and record["reward"] == 1.0
    (row, pooled) = summary_rows([record], ["scripted"], ["trolley_micro_escape_exists"])
    assert (row["tool_calls"], row["tool_failures"], row["parse_failures"]) == (4.0, 3, 1)
    assert markdown([pooled]).splitlines()[2].split(" | ")[-5:-1] == ["1.0", "4.0", "3", "1"]


def test_readme_table_tool_reads_the_command_and_replaces_only_the_table_rows():
    from agents import readme_table as rt

    readme = rt.PAGE.read_text()
    commands = rt.commands(readme)
    assert commands[-1].startswith("python -m agents.compare ") and "\\" not in "".join(commands)
    assert rt.compare_args(readme) == commands[-1].split()[3:]
    shown = rt.table_rows(readme)
    lines = rt.section(readme).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| agent | scenario | n |"))
    summary = "\n".join([*lines[header:header + 2], "| x | trolley_saves | 3 | per-scenario row, not copied |",
                         *shown.values()]) + "\n"
    assert rt.replace_table(readme, summary) == readme  # the same rows: nothing else moves
    changed = summary.replace("| oracle | all | 24 (deterministic) |", "| oracle | all | 7 |")
    new = rt.replace_table(readme, changed)
    diff = [(a, b) for a, b in zip(readme.splitlines(), new.splitlines(), strict=True) if a != b]
    assert len(diff) == 1 and diff[0][1].startswith("| oracle | all | 7 |")
    assert "trolley_saves" not in rt.table_rows(new).get("x", "")
    with pytest.raises(ValueError, match="summary.md has no 'all' row"):
        rt.replace_table(readme, "| agent |\n|---|\n| x | s | 1 |\n")
    with pytest.raises(ValueError, match=f"has no {rt.SECTION!r} section"):
        rt.table_rows("# nothing here\n")
