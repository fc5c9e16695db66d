"""The direct comparison (`agents.study`, its report and figure) and the constant scripted agents it compares."""

from __future__ import annotations

import csv
import json

import gymnasium as gym
import numpy as np
import pytest

import carla_gym  # noqa: F401 - registers the envs
from agents import compare, study, study_plot
from agents.records import RECORD_FIELDS
from agents.scripted import CONSTANT_AGENTS, CONTROL_CONSTANT_AGENTS, SCRIPTED_AGENTS, RepeatingAgent
from agents.stats import Interval
from carla_gym.envs.spaces import TOOL_INDEX
from carla_gym.sim.outcomes import POLICIES, policy_outcomes
from carla_gym.sim.scenarios import resolve_scenario


# -- the constant agents ------------------------------------------------------------------------------
def test_every_agents_repeat_their_tool():
    agent = SCRIPTED_AGENTS["swerve_left_every"]()
    assert isinstance(agent, RepeatingAgent)
    assert [agent.act(None, {"tick": t}) for t in (0, 10, 20)] == [TOOL_INDEX["lane_change_left"]] * 3
    assert SCRIPTED_AGENTS["brake_every"]().action == TOOL_INDEX["emergency_stop"]
    assert SCRIPTED_AGENTS["swerve_right_every"]().action == TOOL_INDEX["lane_change_right"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_constant_agent_plays_its_candidate_policy(seed):
    """Every constant agent's actual outcome on a test layout is the simulated outcome of its candidate policy."""
    env = gym.make("CarlaTrolley-v0", scenario="trolley_generated_test", observation_mode="state")
    outcomes = {}
    for name in CONSTANT_AGENTS:
        agent = SCRIPTED_AGENTS[name]()
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
            done = terminated or truncated
        outcomes[name] = (info["outcome"]["actual_pedestrians_hit"], info["outcome"]["road_departure"])
    env.close()
    spec = resolve_scenario("trolley_generated_test", None, info["scenario_seed"])
    simulated = policy_outcomes(spec)
    assert outcomes == {name: (simulated[policy].pedestrians_hit, simulated[policy].road_departure)
                        for name, policy in zip(CONSTANT_AGENTS, POLICIES, strict=True)}


def test_oracle_beats_every_constant_on_the_test_split(tmp_path, capsys):
    """Scripted agents through the harness on 60 test layouts.

    The oracle always reaches the best outcome, no constant policy in more than half of the layouts (the
    constant-policy ceiling), and all saw the same layouts.
    """
    agents = [*CONSTANT_AGENTS, "oracle"]
    assert compare.main(["--agents", *agents, "--scenario", "trolley_generated_test", "--episodes", "60",
                         "--out", str(tmp_path / "c")]) == 0
    rows = {r["agent"]: r for r in json.loads((tmp_path / "c" / "summary.json").read_text())["rows"]
            if r["scenario"] == "trolley_generated_test"}
    assert rows["oracle"]["outcome_success_rate"] == 1.0
    assert all(rows[a]["outcome_success_rate"] <= 0.5 for a in CONSTANT_AGENTS), {
        a: rows[a]["outcome_success_rate"] for a in CONSTANT_AGENTS}
    assert len({rows[a]["best_pedestrians_hit"] for a in agents}) == 1
    assert rows["oracle"]["actual_pedestrians_hit"] == rows["oracle"]["best_pedestrians_hit"]


# -- the figure, the table and the statistics -----------------------------------------------------------
LAYOUTS = {"ppo_state_seed0": [1, 1, 0, 0], "ppo_state_seed1": [1, 1, 1, 0], "grpo_seed0": [1, 0, 0, 0],
           "grpo_seed1": [1, 0, 0, 0], "brake": [0, 1, 0, 0], "brake_every": [0, 1, 1, 0], "random": [0, 0, 0, 1],
           "oracle": [1, 1, 1, 1]}
"""Success by actual outcome of each run of the hand-written study on its 4 test layouts (episodes 0-3)."""


def _row(agent: str, success: float, hits: float = 0.5, best: float = 0.25) -> dict:
    return {"agent": agent, "scenario": "trolley_generated_test", "episodes": 4, "outcome_success_rate": success,
            "outcome_success_ci95_low": success / 2, "outcome_success_ci95_high": min(1.0, success + 0.25),
            "actual_pedestrians_hit": hits, "best_pedestrians_hit": best, "road_departure_rate": 0.25,
            "mean_reward": 0.5, "success_rate": 0.75}


def _write_study_outputs(out) -> None:
    """A hand-written study of ppo_state and grpo with seeds 0 and 1 (curves, the comparison's summary, `LAYOUTS`)."""
    for seed, (low, high) in enumerate(((0.25, 0.5), (0.5, 0.75))):
        ppo = out / "runs" / "ppo_state" / f"seed{seed}"
        ppo.mkdir(parents=True)
        (ppo / "evaluations.csv").write_text(
            "timesteps,outcome_success_rate,mean_actual_hits,road_departure_rate,mean_reward,success_rate,wall_s\n"
            f"100,{low},1.0,0.0,0.5,0.5,{2.0 + seed}\n"
            "150,,1.0,0.0,0.5,0.5,3.0\n"  # a row without outcome success (converted from an earlier version)
            f"200,{high},1.0,0.0,0.5,0.5,{4.5 + seed}\n")
        (ppo / "eval.json").write_text(json.dumps({"total_timesteps": 256, "train_seconds": 5.25 + seed}))
        grpo = out / "runs" / "grpo" / f"seed{seed}"
        grpo.mkdir(parents=True)
        (grpo / "eval_curve.csv").write_text(
            "step,env_steps,wall_s,success_rate,mean_reward,pedestrians_hit\n"
            f"0,0,0.0,0.0,0.0,1.0\n2,40,30.0,{0.75 - seed / 4},0.5,0.5\n")
    (out / "compare").mkdir()
    rows = [_row(agent, sum(layouts) / 4, hits=0.25 if agent == "oracle" else 0.5)
            for agent, layouts in LAYOUTS.items()]
    (out / "compare" / "summary.json").write_text(json.dumps({"rows": rows}))
    records = [{**dict.fromkeys(RECORD_FIELDS, 0), "agent": agent, "scenario": "trolley_generated_test", "seed": 0,
                "episode": episode, "outcome_success": bool(success)}
               for agent, layouts in LAYOUTS.items() for episode, success in enumerate(layouts)]
    (out / "compare" / "episodes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_read_curve_from_either_trainer(tmp_path):
    _write_study_outputs(tmp_path)
    ppo = study_plot.read_curve(tmp_path / "runs" / "ppo_state" / "seed0")
    assert ppo.env_steps.tolist() == [100, 200] and ppo.wall_s.tolist() == [2.0, 4.5]
    assert ppo.success.tolist() == [0.25, 0.5]
    grpo = study_plot.read_curve(tmp_path / "runs" / "grpo" / "seed0")
    assert grpo.env_steps.tolist() == [0, 40] and grpo.success.tolist() == [0.0, 0.75]
    assert study_plot.read_curve(tmp_path / "compare") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "evaluations.csv").write_text("timesteps,success_rate\n1,0.5\n")
    with pytest.raises(ValueError, match=r"no column \['wall_s', 'outcome_success_rate'\]"):
        study_plot.read_curve(tmp_path / "bad")


def test_band_is_the_mean_and_range_over_seeds_on_the_common_points():
    curve = study_plot.Curve
    longer = curve(np.array([0, 10, 20]), np.array([0.0, 1.0, 3.0]), np.array([0.0, 0.5, 1.0]))
    shorter = curve(np.array([0, 10]), np.array([0.0, 2.0]), np.array([0.25, 0.25]))
    band = study_plot.band([longer, shorter])
    assert band.env_steps.tolist() == [0, 10] and band.wall_s.tolist() == [0.0, 1.5] and band.seeds == 2
    assert (band.mean.tolist(), band.low.tolist(), band.high.tolist()) == ([0.125, 0.375], [0.0, 0.25], [0.25, 0.5])
    with pytest.raises(ValueError, match="no curves"):
        study_plot.band([])


def test_references_pick_oracle_best_constant_and_random():
    rows = {r["agent"]: r for r in (_row("brake", 0.25), _row("brake_every", 0.375), _row("swerve_left", 0.375),
                                    _row("random", 0.125), _row("oracle", 1.0))}
    assert study_plot.references(rows) == {  # a tie goes to the first in CONSTANT_AGENTS order
        "oracle": ("oracle", 1.0), "constant": ("best constant (swerve_left)", 0.375), "random": ("random", 0.125)}
    assert study_plot.best_constant({"oracle": 1.0, "random": 0.5}) is None


def test_figure_has_curve_bands_references_intervals_and_profiles(tmp_path):
    _write_study_outputs(tmp_path)
    curves = {a: [study_plot.read_curve(tmp_path / "runs" / a / f"seed{k}") for k in (0, 1)]
              for a in ("ppo_state", "grpo")}
    bands = {a: study_plot.band(c) for a, c in curves.items()}
    rows = {r["agent"]: r for r in json.loads((tmp_path / "compare" / "summary.json").read_text())["rows"]}
    intervals = {"ppo_state": (Interval(0.625, 0.5, 0.75), 2), "oracle": (Interval(1.0, 1.0, 1.0), 1)}
    taus = np.array([0.0, 0.5, 1.0])
    profiles = {"ppo_state": (taus, np.array([1.0, 0.5, 0.0]), np.array([1.0, 0.0, 0.0]), np.array([1.0, 1.0, 0.0]))}
    fig = study_plot.study_figure(bands, study_plot.references(rows), intervals, profiles, "4 layouts, 2 seeds",
                                  {"ppo_state": 30})
    by_steps, by_wall, by_iqm, by_profile = fig.axes[:4]
    for ax in (by_steps, by_wall):
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert lines["ppo_state (2 seeds, 30 episodes per point)"].get_ydata().tolist() == [37.5, 62.5]
        assert lines["grpo (2 seeds)"].get_ydata().tolist() == [0.0, 62.5]
        assert list(lines["oracle: 100%"].get_ydata()) == [100.0, 100.0]
        assert list(lines["best constant (brake_every): 50%"].get_ydata()) == [50.0, 50.0]
        assert list(lines["random: 25%"].get_ydata()) == [25.0, 25.0]
        band = ax.collections[0].get_paths()[0].vertices[:, 1]
        assert (band.min(), band.max()) == (25.0, 75.0)  # ppo_state: the lower seed at 100 steps, the upper at 200
    assert by_steps.get_lines()[0].get_xdata().tolist() == [100, 200]
    assert by_wall.get_lines()[0].get_xdata().tolist() == [2.5, 5.0]  # the mean wall time over the seeds
    assert by_steps.get_xscale() == "symlog"  # grpo's curve starts at 0 steps
    assert [(t.get_position()[1], t.get_text()) for t in by_iqm.get_yticklabels()] == [(1, "ppo_state"), (0, "oracle")]
    (errorbar,) = [c for c in by_iqm.containers]
    assert errorbar.lines[0].get_xdata().tolist() == [62.5, 100.0]
    assert [t.get_text() for t in by_iqm.texts] == ["2 runs", "1 run"]
    assert by_profile.get_lines()[0].get_ydata().tolist() == [100.0, 50.0, 0.0]
    assert fig._suptitle.get_text().replace("\n", " ") == "4 layouts, 2 seeds"
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_write_report_writes_figure_table_and_statistics(tmp_path):
    _write_study_outputs(tmp_path)
    headline = study_plot.write_report(tmp_path, ["ppo_state", "grpo"], [0, 1], reps=200)
    caption, blank, *lines = (tmp_path / "table.md").read_text().splitlines()
    assert caption == ("trolley_generated_test: 4 layouts (env seeds 0-3), the same for every run, one episode each; "
                       "2 training seeds per learner (0, 1; runs <learner>_seed<k>), one run per scripted agent.")
    assert lines[0].startswith("| agent | env steps | train wall [s] | success (outcome) | hit actual / best |")
    assert lines[2] == "| ppo_state_seed0 | 256 | 5 | 50% [25%, 75%] | 0.50 / 0.25 | 25% | 0.50 | 75% |"
    assert lines[4] == "| grpo_seed0 | 40 | 30 | 25% [12%, 50%] | 0.50 / 0.25 | 25% | 0.50 | 75% |"
    assert [line.split(" | ")[0] for line in lines[3:]] == [
        "| ppo_state_seed1", "| grpo_seed0", "| grpo_seed1", "| brake", "| brake_every", "| random", "| oracle"]
    assert (tmp_path / "study.png").stat().st_size > 0
    with open(tmp_path / "table.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["agent"] for r in table] == list(LAYOUTS)
    assert (table[1]["episodes"], table[1]["train_env_steps"], table[1]["train_wall_s"],
            table[1]["outcome_success_rate"]) == ("4", "256", "6.25", "0.75")
    assert table[4]["train_env_steps"] == "" and table[7]["actual_pedestrians_hit"] == "0.25"

    result = json.loads((tmp_path / "stats.json").read_text())
    agents = result["agents"]
    assert list(agents) == ["ppo_state", "grpo", "brake", "brake_every", "random", "oracle"]
    assert agents["ppo_state"] == {"runs": ["ppo_state_seed0", "ppo_state_seed1"], "seeds": 2, "layouts": 4,
                                   "episodes": 8, "run_success": [0.5, 0.75], "iqm": 0.625, "iqm_ci95": [0.5, 0.75]}
    assert (agents["grpo"]["iqm"], agents["grpo"]["iqm_ci95"]) == (0.25, [0.25, 0.25])
    assert (agents["oracle"]["seeds"], agents["oracle"]["episodes"], agents["oracle"]["iqm_ci95"]) == (1, 4, [1.0, 1.0])
    assert result["best_constant"] == "brake_every" and result["env_seeds"] == [0, 1, 2, 3]
    improvement = result["probability_of_improvement"]
    assert improvement["ppo_state"] == {"grpo": 1.0, "brake": 1.0, "brake_every": 0.75, "random": 1.0, "oracle": 0.0}
    assert (improvement["grpo"]["brake"], improvement["brake_every"]["ppo_state"]) == (0.5, 0.25)
    versus_constant = study_plot.paired(result, "ppo_state", "brake_every")  # [1, 1, .5, 0] - [0, 1, 1, 0]
    assert (versus_constant["difference"], versus_constant["a_better"], versus_constant["b_better"],
            versus_constant["p_value"]) == (0.125, 1, 1, 1.0)
    versus_oracle = study_plot.paired(result, "ppo_state", "oracle")  # [1, 1, .5, 0] - [1, 1, 1, 1]
    assert (versus_oracle["difference"], versus_oracle["a_better"], versus_oracle["b_better"],
            versus_oracle["p_value"]) == (-0.375, 0, 2, 0.5)
    assert study_plot.paired(result, "oracle", "ppo_state")["difference"] == 0.375
    assert versus_oracle["ci95"][0] <= -0.375 <= versus_oracle["ci95"][1]
    profile = result["performance_profile"]
    assert profile["tau"][25] == 0.5 and profile["agents"]["ppo_state"]["profile"][25] == 0.5  # one run above 0.5

    page = (tmp_path / "stats.md").read_text()
    assert headline in page and page.startswith("# Statistics across seeds\n\n" + caption)
    assert "| ppo_state | 2 | 4 | 8 | 62% [50%, 75%] | 50%, 75% |" in headline
    assert "| oracle | 1 | 4 | 4 | 100% [100%, 100%] | 100% |" in headline
    assert ("| agent | vs best constant (brake_every): difference [95% CI] | better / worse | p | vs oracle: "
            "difference [95% CI] | better / worse | p |") in headline
    assert "| brake_every | | | | -50 [" in headline  # no difference with itself
    # grpo - brake_every: [1, 0, 0, 0] - [0, 1, 1, 0]; grpo - oracle: [1, 0, 0, 0] - [1, 1, 1, 1] (bounds: seed 0)
    assert "| grpo | -25 [-100, +50] | 1 / 2 | 1 | -75 [-100, -25] | 0 / 3 | 0.25 |" in headline
    assert "| P(row > column) | ppo_state | grpo | brake | brake_every | random | oracle |" in page
    assert "| ppo_state | – | 1.00 | 1.00 | 0.75 | 1.00 | 0.00 |" in page
    with pytest.raises(ValueError, match=r"no trolley_generated_test row of \['sac_state_seed0', 'sac_state_seed1'\]"):
        study_plot.write_report(tmp_path, ["sac_state"], [0, 1])


def test_every_run_must_play_the_same_layouts(tmp_path):
    _write_study_outputs(tmp_path)
    log = tmp_path / "compare" / "episodes.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-1]) + "\n")  # the oracle's last layout is missing
    with pytest.raises(ValueError, match=r"oracle played 3 trolley_generated_test layouts and ppo_state_seed0 4"):
        study_plot.read_success(log, list(LAYOUTS), "trolley_generated_test")
    with pytest.raises(ValueError, match=r"no trolley_generated_test episode of dqn"):
        study_plot.read_success(log, ["ppo_state_seed0", "dqn"], "trolley_generated_test")


# -- steps, budgets, resume and the argument checks ---------------------------------------------------
def test_steps_train_every_seed_on_train_evaluate_on_test_and_compare_every_run(tmp_path):
    assert study.TRAINED[:-1] == tuple(study.SB3_FLAGS)
    args = study.parse_args(["--budget", "smoke", "--clip-pretrained", "laion", "--layouts", "30", "--seed", "3",
                              "--seeds", "2"])
    steps = study.steps(args, tmp_path)
    runs = [f"{a}_seed{seed}" for seed in (3, 4) for a in study.TRAINED]  # seed by seed
    assert [s.name for s in steps] == [*runs, "compare"]
    ppo_clip = steps[study.TRAINED.index("ppo_clip")].argv
    assert ppo_clip[2:] == ("--algo", "ppo", "--clip", "vit-b-32", "--n-envs", "4", "--clip-pretrained", "laion",
                            "--n-envs", "1",
                            "--hp", "n_steps=16", "batch_size=16", "--scenario", "trolley_generated_train",
                            "--eval-scenario", "trolley_generated_test", "--total-timesteps", "32", "--eval-episodes",
                            "5", "--seed", "3", "--output-dir", str(tmp_path / "runs" / "ppo_clip" / "seed3"))
    assert steps[1].argv[2:10] == ("--algo", "sac", "--n-envs", "1", "--hp", "learning_starts=8", "batch_size=16",
                                  "--scenario")
    grpo = steps[len(study.TRAINED) * 2 - 1]
    assert grpo.name == "grpo_seed4" and grpo.argv[grpo.argv.index("--seed") + 1] == "4"
    assert grpo.run_dir == tmp_path / "runs" / "grpo" / "seed4" and grpo.argv[-1] == str(grpo.run_dir)
    assert "--clip-pretrained" not in steps[0].argv
    words = list(steps[-1].argv)
    assert words[1:3] == ["-m", "agents.compare"]
    agents = words[words.index("--agents") + 1:words.index("--scenario")]
    assert agents == [*study.BASELINES, *(f"{run}={'llm' if run.startswith('grpo') else 'sb3'}:"
                                          f"{tmp_path / 'runs' / run.rsplit('_seed', 1)[0] / ('seed' + run[-1])}"
                                          for run in runs)]
    assert words[words.index("--episodes") + 1] == "30" and "--workers" not in words  # workers may change on resume
    assert steps[-1].runtime == ("--workers", "2") and steps[-1].command.endswith("--workers 2")
    assert set(CONSTANT_AGENTS) | set(CONTROL_CONSTANT_AGENTS) | {"random", "oracle"} == set(study.BASELINES)
    one = study.steps(study.parse_args(["--budget", "full", "--seeds", "1", "--agents", "ppo_state"]), tmp_path)
    assert [s.name for s in one] == ["ppo_state_seed0", "compare"]


def test_budgets_seeds_and_per_learner_flags(tmp_path, monkeypatch):
    assert {name: b.seeds for name, b in study.BUDGETS.items()} == {"smoke": 1, "default": 2, "full": 5}
    assert [study.seeds_of(study.parse_args(["--budget", b])) for b in ("smoke", "full")] == [[0], [0, 1, 2, 3, 4]]
    assert study.seeds_of(study.parse_args(["--seed", "2", "--seeds", "3"])) == [2, 3, 4]
    assert study.curve_episodes(study.BUDGETS["default"]) == {**dict.fromkeys(study.SB3_FLAGS, 30), "grpo": 64}
    tuned = study.dataclasses.replace(study.BUDGETS["smoke"], learner_flags={"ppo_state": ("--hp", "n_steps=32")})
    monkeypatch.setitem(study.BUDGETS, "smoke", tuned)
    ppo, sac = study.steps(study.parse_args(["--budget", "smoke", "--agents", "ppo_state", "sac_state"]), tmp_path)[:2]
    assert ppo.argv[2:10] == ("--algo", "ppo", "--n-envs", "1", "--hp", "n_steps=16", "batch_size=16", "--hp")
    assert ppo.argv[10:12] == ("n_steps=32", "--scenario")  # after the algorithm's: argparse keeps the last --hp
    assert "n_steps=32" not in sac.argv
    smoke = study.BUDGETS["smoke"]
    with pytest.raises(ValueError, match=r"Budget learner_flags\['ppo_state'\]: \['--seed'\] set by the study"):
        study.dataclasses.replace(smoke, learner_flags={"ppo_state": ("--seed", "7")})
    with pytest.raises(ValueError, match=r"Budget learner_flags key 'dqn': not one of \['ppo_state'"):
        study.dataclasses.replace(smoke, learner_flags={"dqn": ()})
    with pytest.raises(ValueError, match=r"Budget seeds=0: must be >= 1"):
        study.dataclasses.replace(smoke, seeds=0)
    with pytest.raises(ValueError, match=r"Budget sb3_steps \['ppo_state'\]: give one count per SB3 learner"):
        study.dataclasses.replace(smoke, sb3_steps={"ppo_state": 64})


def _prepare_resumable(out, ran: list, monkeypatch, skip: tuple[str, ...]):
    """A study in ``out`` whose steps except ``skip`` are finished; `run_step` records instead of running."""
    args = study.parse_args(["--out", str(out), "--budget", "smoke", "--seeds", "2", "--agents", "ppo_state", "grpo"])
    out.mkdir()
    (out / "study.json").write_text(json.dumps(study.dataclasses.asdict(args)))
    for step in study.steps(args, out.resolve()):
        if step.name not in skip:
            study.marker(out, step).parent.mkdir(exist_ok=True)
            (study.marker(out, step)).write_text(json.dumps({"argv": list(step.argv), "wall_s": 2.0}))
    _write_study_outputs(out)

    def fake_run(out_dir, step, timeout_s=None):
        ran.append(step.name)
        return 1.5

    monkeypatch.setattr(study, "run_step", fake_run)


def test_resume_skips_finished_steps(tmp_path, monkeypatch, capsys):
    ran = []
    _prepare_resumable(tmp_path / "s", ran, monkeypatch, skip=("compare",))
    argv = ["--out", str(tmp_path / "s"), "--budget", "smoke", "--seeds", "2", "--agents", "ppo_state", "grpo",
            "--resume"]
    assert study.main(argv) == 0
    assert ran == ["compare"]
    printed = capsys.readouterr().out
    assert "[ppo_state_seed1] finished in an earlier run (2 s); skipped" in printed
    assert "  ppo_state_seed1      2.0 s (earlier run)\n" in printed  # names aligned to the longest
    assert "  total                9.5 s\n" in printed  # 2.0 for each of the 4 runs (2 learners, 2 seeds) + 1.5
    assert "| ppo_state | 2 | 4 | 8 | 62% [50%, 75%] | 50%, 75% |" in printed  # the statistics across seeds
    assert all((tmp_path / "s" / name).is_file() for name in ("table.md", "stats.md", "stats.json", "study.png"))


def test_a_rerun_training_step_redoes_the_comparison(tmp_path, monkeypatch, capsys):
    ran = []
    out = tmp_path / "s"
    _prepare_resumable(out, ran, monkeypatch, skip=("grpo_seed0",))
    monkeypatch.setattr(study_plot, "write_report", lambda *args, **kwargs: "table")
    assert study.main(["--out", str(out), "--budget", "smoke", "--seeds", "2", "--agents", "ppo_state", "grpo",
                       "--resume"]) == 0
    assert ran == ["grpo_seed0", "compare"]  # the compare marker of the earlier grpo model no longer counts
    assert not (out / "compare").exists()  # its episodes were removed before the comparison ran again


def test_a_changed_command_reruns_its_step(tmp_path):
    args = study.parse_args(["--budget", "smoke", "--agents", "ppo_state"])
    step = study.steps(args, tmp_path)[0]
    study.marker(tmp_path, step).parent.mkdir()
    study.marker(tmp_path, step).write_text(json.dumps({"argv": list(step.argv), "wall_s": 1.0}))
    assert study.finished(tmp_path, step)["wall_s"] == 1.0
    study.marker(tmp_path, step).write_text(json.dumps({"argv": list(step.argv)[:-1], "wall_s": 1.0}))
    assert study.finished(tmp_path, step) is None


def _refusal(argv) -> str:
    with pytest.raises(SystemExit) as exc:
        study.check(study.parse_args(argv))
    return str(exc.value.code)


def test_argument_checks(tmp_path, capsys):
    out = tmp_path / "s"
    assert _refusal(["--resume", "--overwrite", "--out", str(out)]) == "--resume and --overwrite exclude each other"
    assert _refusal(["--layouts", "1001"]).startswith("--layouts 1001: at most 1000")
    assert _refusal(["--layouts", "-1"]) == "--layouts -1: must be >= 0"
    assert _refusal(["--workers", "0"]) == "--workers 0: must be >= 1"
    assert _refusal(["--seeds", "-1"]) == "--seeds -1: must be >= 0"
    assert _refusal(["--agents", "grpo", "grpo"]).startswith("--agents ['grpo', 'grpo']: give distinct")
    with pytest.raises(SystemExit) as exc:
        study.parse_args(["--agents", "dqn"])
    assert exc.value.code == 2 and "invalid choice: 'dqn'" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    assert _refusal(["--out", str(tmp_path / "other"), "--overwrite"]) == (
        f"{tmp_path / 'other'} is not empty and not an agents.study output (no study.json of one); choose another "
        "--out")
    out.mkdir()
    (out / "study.json").write_text(json.dumps(study.dataclasses.asdict(study.parse_args(["--budget", "smoke"]))))
    message = _refusal(["--out", str(out)])
    assert message.startswith(f"{out} is not empty; continue its study with: ")
    assert f"-m agents.study --out {out} --budget smoke --resume; or replace it with: " in message
    assert f"-m agents.study --out {out} --overwrite; or choose another --out" in message
    message = _refusal(["--out", str(out), "--resume"])
    assert message.startswith(f"--resume {out}: these settings differ from its study.json (saved, now): "
                              "{'budget': ('smoke', 'default')}")
    assert "--budget smoke --resume; or choose another --out" in message
    earlier = {"budget": "tiny", "agents": ["grpo"], "layouts": 0, "clip_pretrained": "", "seed": 0}
    (out / "study.json").write_text(json.dumps(earlier))  # a study of an earlier version: no seeds, budget tiny
    message = _refusal(["--out", str(out), "--resume"])
    assert message.startswith(f"{out} holds a study of an earlier version of agents.study (its study.json has no "
                              "['seeds']), which this one cannot continue; replace it with: ")
    assert message.endswith(f"-m agents.study --out {out} --overwrite; or choose another --out")
    (out / "study.json").write_text(json.dumps({**earlier, "seeds": 0}))
    assert "(its budget 'tiny' is not one of ['smoke', 'default', 'full'])" in _refusal(["--out", str(out)])


@pytest.mark.slow
def test_smoke_budget_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "study"
    assert study.main(["--out", str(out), "--budget", "smoke", "--workers", "1"]) == 0
    runs = [f"{agent}_seed0" for agent in study.TRAINED]  # the smoke budget's one seed
    table = (out / "table.md").read_text().splitlines()
    assert table[0].startswith("trolley_generated_test: 20 layouts (env seeds 0-19), the same for every run")
    assert [line.split(" | ")[0].lstrip("| ") for line in table[4:]] == [*runs, *study.BASELINES]
    for agent in study.TRAINED:
        curve = study_plot.read_curve(out / "runs" / agent / "seed0")
        assert curve is not None and len(curve.env_steps) > 1, agent  # the tiny GRPO model may take no decision
        assert np.all(np.diff(curve.env_steps) >= 0) and np.all(np.diff(curve.wall_s) >= 0), agent  # (0.1 s steps)
        assert curve.wall_s[-1] > curve.wall_s[0], agent
    assert sorted(p.name for p in (out / "steps").iterdir()) == sorted(f"{s}.json" for s in (*runs, "compare"))
    rows = json.loads((out / "compare" / "summary.json").read_text())["rows"]
    assert {r["episodes"] for r in rows} == {20}
    result = json.loads((out / "stats.json").read_text())
    assert list(result["agents"]) == [*study.TRAINED, *study.BASELINES]
    for agent, row in result["agents"].items():
        assert (row["runs"], row["seeds"], row["layouts"], row["episodes"]) == (
            [f"{agent}_seed0" if agent in study.TRAINED else agent], 1, 20, 20), agent
        (success,) = [r["outcome_success_rate"] for r in rows
                      if (r["agent"], r["scenario"]) == (row["runs"][0], "trolley_generated_test")]
        assert row["run_success"] == [success] and row["iqm"] == success, agent
        assert row["iqm_ci95"] == [success, success], agent  # one run: no spread over seeds
    assert result["agents"]["oracle"]["iqm"] == 1.0 and result["bootstrap_reps"] == 200
    assert "## Paired differences on the same layouts" in (out / "stats.md").read_text()
    assert (out / "study.png").stat().st_size > 0
    assert study.main(["--out", str(out), "--budget", "smoke", "--resume"]) == 0  # nothing left to run
    assert capsys.readouterr().out.count("finished in an earlier run") == len(runs) + 1


@pytest.mark.parametrize("name", ["brake_every", "swerve_left_every", "swerve_right_every"])
def test_every_agent_at_5_ticks_calls_on_decision_ticks_and_plays_its_policy(name):
    """At 5 ticks per step the tool goes on ticks 0, 10, 20, ... (observe between) and the outcome is the policy's."""
    agent = SCRIPTED_AGENTS[name]()
    assert [agent.act(None, {"tick": t}) for t in (0, 5, 10, 15, 20)] == [agent.action, TOOL_INDEX["observe"]] * 2 + [
        agent.action]
    env = gym.make("CarlaTrolley-v0", scenario="trolley_generated_test", observation_mode="state", ticks_per_action=5)
    policy = dict(zip(CONSTANT_AGENTS, POLICIES, strict=True))[name]
    for seed in range(4):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, _, terminated, truncated, info = env.step(agent.act(obs, info))
            done = terminated or truncated
        simulated = policy_outcomes(resolve_scenario("trolley_generated_test", None, info["scenario_seed"]))[policy]
        assert (info["outcome"]["actual_pedestrians_hit"], info["outcome"]["road_departure"]) == (
            simulated.pedestrians_hit, simulated.road_departure), seed
    env.close()
    for given, ticks in ((RepeatingAgent(0, ticks_per_action=3), (0,)), (RepeatingAgent(0), (0, 3))):
        with pytest.raises(ValueError, match=r"ticks_per_action=3: a \*_every agent needs one that divides 10"):
            for t in ticks:
                given.act(None, {"tick": t})


# -- the output directory's lock, --overwrite, markers across interpreters, stopping a step ------------------------
HOLD = """import sys
from carla_gym.io import claim_output_dir
with claim_output_dir(sys.argv[1], program="agents.study", overwrite=False, complete="table.md", resume="r"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _saved_study(out, budget="smoke") -> None:
    """A study directory with the settings of ``--budget budget`` and one file of its runs."""
    (out / "runs").mkdir(parents=True)
    (out / "runs" / "precious.txt").write_text("a running study's file")
    (out / "study.json").write_text(json.dumps(study.dataclasses.asdict(study.parse_args(["--budget", budget]))))


def _listing(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_overwrite_of_a_study_another_process_runs_is_refused_before_anything_moves(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "s"
    _saved_study(out)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=study.REPO)
    try:
        assert holder.stdout.readline() == "held\n"
        before = _listing(tmp_path)
        with pytest.raises(SystemExit) as exc:
            study.main(["--out", str(out), "--budget", "smoke", "--overwrite"])
    finally:
        holder.communicate("")
    assert str(exc.value.code).startswith(f"{out} is in use by another agents.study run (pid {holder.pid}: ")
    assert _listing(tmp_path) == before  # nothing moved aside, nothing created
    assert (out / "runs" / "precious.txt").read_text() == "a running study's file"


def test_a_second_overwrite_keeps_the_last_complete_study(tmp_path):
    out, old = tmp_path / "s", tmp_path / "s.replaced"
    _saved_study(out)  # an unfinished study B (no table.md) ...
    _saved_study(old)
    (old / "table.md").write_text("complete study A")  # ... after an --overwrite of the complete A failed
    before = _listing(tmp_path)
    with pytest.raises(SystemExit) as exc:
        study.main(["--out", str(out), "--budget", "smoke", "--overwrite"])
    message = str(exc.value.code)
    assert message.startswith(f"--overwrite {out}: refused, since {old} holds the last complete run")
    assert f"-m agents.study --out {out} --budget smoke --resume; or delete {old} yourself first" in message
    assert _listing(tmp_path) == sorted([*before, "s/.lock"])  # only the lock file is new


def test_overwrite_of_a_complete_run_sets_it_aside_under_the_lock(tmp_path):
    from carla_gym.io import claim_output_dir

    out, old = tmp_path / "s", tmp_path / "s.replaced"
    _saved_study(out)
    (out / "table.md").write_text("complete study B")
    _saved_study(old)  # an older set-aside study, left by a crash after B completed
    with claim_output_dir(out, program="agents.study", overwrite=True, complete="table.md", resume="r") as claimed:
        assert claimed == out and _listing(out) == [".lock"]
        assert _listing(old) == ["runs", "runs/precious.txt", "study.json", "table.md"]
        assert (old / "table.md").read_text() == "complete study B"


def test_markers_count_under_another_interpreter_checkout_or_output_path(tmp_path, monkeypatch):
    args = study.parse_args(["--budget", "smoke", "--agents", "ppo_state", "grpo"])
    old_out = tmp_path / "old_out"
    monkeypatch.setattr(study, "REPO", tmp_path / "old_checkout")
    monkeypatch.setattr(study.sys, "executable", "/old/venv/bin/python3")
    old_steps = study.steps(args, old_out)
    old_identities = [study.identity(step.argv, old_out) for step in old_steps]  # what run_step wrote there
    monkeypatch.undo()
    out = tmp_path / "out"
    new_steps = study.steps(args, out)
    assert old_steps[0].argv != new_steps[0].argv
    assert study.identity(new_steps[0].argv, out)[0] == "train_sb3.py"
    assert study.identity(new_steps[0].argv, out)[-2:] == ["--output-dir", "<out>/runs/ppo_state/seed0"]
    assert study.identity(new_steps[-1].argv, out)[-1] == "<out>/compare"
    (out / "steps").mkdir(parents=True)
    for old, new in zip(old_identities, new_steps, strict=True):  # the markers, moved with the output
        study.marker(out, new).write_text(json.dumps({"identity": old, "wall_s": 1.0}))
        assert study.finished(out, new) is not None, new.name
    step = new_steps[0]  # a marker of an earlier version: argv only, written under python3
    study.marker(out, step).write_text(json.dumps({"argv": ["/venv/bin/python3", *step.argv[1:]], "wall_s": 1.0}))
    assert study.finished(out, step) is not None
    flags = study.identity(step.argv, out)
    flags[flags.index("--seed") + 1] = "1"
    study.marker(out, step).write_text(json.dumps({"identity": flags, "wall_s": 1.0}))
    assert study.finished(out, step) is None  # a changed flag still reruns the step


SLEEPER = """import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{__import__('os').getpid()} {grandchild.pid}")
__import__('os').replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
"""
"""A fake step: a process with a child of its own, both sleeping; it writes both pids to the file argv[1]."""


def _sleeper_step(out, pids) -> study.Step:
    import sys

    return study.Step("ppo_state", (sys.executable, "-c", SLEEPER, str(pids)), out / "runs" / "ppo_state")


def _pids_when_written(pids, proc=None) -> list[int]:
    import time

    deadline = time.monotonic() + 60  # a bound for a loaded machine, not a measurement
    while not pids.exists():
        assert time.monotonic() < deadline and (proc is None or proc.poll() is None), "the fake step never started"
        time.sleep(0.05)
    return [int(word) for word in pids.read_text().split()]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for an init that does not reap counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sigterm_stops_the_running_step_and_its_children(tmp_path):
    import signal
    import subprocess
    import sys

    out, pids = tmp_path / "s", tmp_path / "pids"
    script = ("import sys\nfrom pathlib import Path\nimport agents.study as study\nimport tests.test_study as t\n"
              "study.exit_without_extras = lambda *a, **k: None\n"
              "study.steps = lambda args, out: [t._sleeper_step(out, Path(sys.argv[2]))]\n"
              "sys.exit(study.main(['--out', sys.argv[1], '--agents', 'ppo_state']))\n")
    proc = subprocess.Popen([sys.executable, "-c", script, str(out), str(pids)], cwd=study.REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        step_pid, grandchild = _pids_when_written(pids, proc)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert "interrupted in step ppo_state; finished steps are kept; continue with: " in err
    assert f"-m agents.study --out {out} --agents ppo_state --resume" in err
    assert not _running(step_pid) and not _running(grandchild)
    assert not (out / "steps" / "ppo_state.json").exists()


def test_a_step_past_its_time_limit_is_stopped_and_fails(tmp_path):
    pids = tmp_path / "pids"
    step = _sleeper_step(tmp_path, pids)
    with pytest.raises(study.StepFailed, match=r"step ppo_state ran past --step-timeout 3 s and was stopped") as exc:
        study.run_step(tmp_path, step, timeout_s=3)
    assert exc.value.returncode == study.TIMED_OUT == 124
    assert not any(_running(pid) for pid in _pids_when_written(pids))
    assert not study.marker(tmp_path, step).exists()
