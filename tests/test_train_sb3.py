"""train_sb3.py: outputs, determinism, exact resume, interruption, errors (learning thresholds: benchmarks/).

The script runs in this process (``train_sb3.main(argv)``): one tiny PPO run and one tiny SAC run
(module fixtures) serve every test that reads a finished run; a crash is an exception raised where
the next checkpoint would be written (what a power loss leaves behind: the checkpoints before it and
the evaluation rows written since). Printed commands are followed as typed (interpreter and script
path checked, then run in-process). The command line itself runs end to end in the Ctrl-C test
(slow: a real SIGINT to a real process, whose printed resume command is run in a shell's way).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Literal

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # train_sb3.py is a script at the repository root
    sys.path.insert(0, str(REPO))

import train_sb3  # noqa: E402
from carla_gym.sb3 import checkpoint as checkpoints  # noqa: E402
from carla_gym.sb3.evaluations import (  # noqa: E402
    EVAL_COLUMNS,
    NAV_COLUMNS,
    OLD_EVAL_COLUMNS,
    append_row,
    drop_rows_after,
    has_rows,
    read_evaluations,
)

ESCAPE = "trolley_micro_escape_exists"
TINY_PPO = ["--scenario", ESCAPE, "--total-timesteps", "512", "--n-envs", "2", "--hp", "n_steps=64", "batch_size=32",
            "--eval-episodes", "5", "--eval-freq", "128", "--checkpoint-freq", "128"]
PPO = [*TINY_PPO, "--reward-mode", "physical"]
"""The shared PPO run's command (`ppo_run`): MlpPolicy on escape_exists, trained on the physical reward."""
TINY_SAC = ["--scenario", ESCAPE, "--algo", "sac", "--total-timesteps", "300", "--n-envs", "2", "--hp",
            "learning_starts=50", "batch_size=32", "--eval-episodes", "5", "--eval-freq", "100", "--checkpoint-freq",
            "100"]


class Crash(BaseException):
    """Raised where a checkpoint would be written: the process dies there (nothing after it runs)."""


def run_main(*argv: str) -> str:
    """``train_sb3.main(argv)`` in this process; returns what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        train_sb3.main(list(argv))
    return out.getvalue()


def refusal(*argv: str) -> str:
    """The message ``train_sb3.main(argv)`` exits with: its ``sys.exit`` text or argparse's error."""
    err, out = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as caught, contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        train_sb3.main(list(argv))
    code = caught.value.code
    assert code not in (0, None), "exited with success"
    return code if isinstance(code, str) else err.getvalue()


def crash_at(args: list[str], step: int) -> None:
    """Run train_sb3.py and crash when it is about to save the checkpoint at ``step`` or later."""
    save = checkpoints.save_checkpoint
    handler = signal.getsignal(signal.SIGINT)

    def crash(model, *a, **k):
        if model.num_timesteps >= step:
            raise Crash
        return save(model, *a, **k)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoints, "save_checkpoint", crash)
        with pytest.raises(Crash), contextlib.redirect_stdout(io.StringIO()):
            train_sb3.main(args)
    signal.signal(signal.SIGINT, handler)  # the crashed run never got to restore it


def follow(hint: str, cwd: Path = REPO) -> str:
    """Run a command line the script printed, as a user would paste it into a shell in ``cwd``.

    Its interpreter must be this one and its script this train_sb3.py (the path resolved from
    ``cwd``); the arguments then run in this process. Returns what it printed.
    """
    python, script, *argv = shlex.split(hint)
    assert Path(shutil.which(python) or python).absolute() == Path(sys.executable).absolute(), hint
    assert (cwd / script).resolve() == REPO / "train_sb3.py", hint
    return run_main(*argv)


def resume_hint(message: str) -> str:
    """The resume command a refusal offers."""
    return re.search(r"; or continue it with: (.+ --resume \S+); or choose", message).group(1)


def overwrite_hint(message: str, argv: list[str]) -> str:
    """The command a refusal of a non-empty --output-dir offers to replace the run: ``argv`` and ``--overwrite``."""
    hint = re.search(r" is not empty; replace the run in it with: (.+?)(; or continue it with: .+)?; or choose another "
                     r"--output-dir$", message).group(1)
    assert shlex.split(hint)[2:] == [*argv, "--overwrite"], hint  # the command given, in full
    return hint


def params(path: Path):
    from stable_baselines3 import PPO, SAC

    algo = SAC if "sac" in json.loads((path.parent / "config.json").read_text())["args"]["algo"] else PPO
    return algo.load(path, device="cpu").policy.state_dict()


def same_params(a: Path, b: Path) -> bool:
    import torch

    pa, pb = params(a), params(b)
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def curve(run: Path) -> list[tuple[str, str, str, str]]:
    with open(run / "evaluations.csv") as f:
        return [(r["timesteps"], r["outcome_success_rate"], r["mean_actual_hits"], r["mean_reward"])
                for r in csv.DictReader(f)]


def steps_of(run: Path) -> list[str]:
    return sorted((p.name for p in (run / "checkpoints").glob("step_*")), key=lambda n: int(n.removeprefix("step_")))


def without_times(evaluation: dict) -> dict:
    """eval.json less what depends on the wall clock (training time, milliseconds per episode)."""
    return {**{k: v for k, v in evaluation.items() if k not in ("train_seconds", "rows")},
            "rows": [{k: v for k, v in row.items() if k != "wall_ms"} for row in evaluation["rows"]]}


def first_episode(model_path: Path, algo: str, policy: str, scenario: str = ESCAPE) -> dict:
    """The outcome of one deterministic evaluation episode (seed 10000) of a saved model on ``scenario``."""
    import gymnasium as gym
    from stable_baselines3 import PPO, SAC

    model = (PPO if algo == "ppo" else SAC).load(model_path, device="cpu")
    env = gym.make("CarlaTrolley-v0", scenario=scenario, action_mode="tools" if algo == "ppo" else "control",
                   observation_mode="state" if policy == "MlpPolicy" else "dict")
    obs, info = env.reset(seed=10_000)
    done = False
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, _, done, _, info = env.step(int(action) if algo == "ppo" else action)
    env.close()
    return info["outcome"]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory) -> tuple[Path, str]:
    """One tiny PPO run (`PPO`): its directory and what it printed. Tests copy it before changing it."""
    out = tmp_path_factory.mktemp("ppo") / "run"
    return out, run_main(*PPO, "--output-dir", str(out))


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory) -> tuple[Path, str]:
    """One tiny SAC run (`TINY_SAC`): its directory and what it printed."""
    out = tmp_path_factory.mktemp("sac") / "run"
    return out, run_main(*TINY_SAC, "--output-dir", str(out))


# -- a finished run: every output ------------------------------------------------------------------------
def nan_for_none(row: dict) -> dict:
    """An eval.json row with its nulls (NaN in the summary) back as NaN."""
    return {key: math.nan if value is None else value for key, value in row.items()}


def assert_curve_ends_at_the_final_evaluation(out: Path, row: dict, measures: dict) -> None:
    """The last row of evaluations.csv is the final evaluation of eval.json (``row``) at the final step.

    evaluations.csv holds 4 decimals: each cell equals the value rounded so, and ``wall_s`` is the training time.
    """
    evaluation = json.loads((out / "eval.json").read_text())
    last = read_evaluations(out / "evaluations.csv")[-1]
    assert last["timesteps"] == evaluation["total_timesteps"]
    assert {column: last[column] for column in measures} == {column: float(f"{row[key]:.4f}")
                                                              for column, key in measures.items()}
    assert last["wall_s"] == evaluation["train_seconds"]


@pytest.mark.parametrize("policy", ["MlpPolicy", pytest.param("MultiInputPolicy", marks=pytest.mark.slow)])
def test_ppo_run_writes_every_output(request, tmp_path, policy):
    from PIL import Image

    from agents.scripted import CONSTANT_AGENTS
    from agents.summary import COLUMNS
    from agents.video import replay
    from carla_gym.sb3.evaluations import MEASURES
    from carla_gym.sim.rules import expected_casualties
    from carla_gym.sim.scenarios import resolve_scenario

    if policy == "MlpPolicy":
        out, stdout = request.getfixturevalue("ppo_run")
    else:
        out = tmp_path / "run"
        stdout = run_main(*PPO, "--policy", policy, "--output-dir", str(out))
    assert not stdout.startswith("note:")  # 512 is a whole number of rollouts (4 x 64 x 2)
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["policy"] == policy and config["args"]["reward_mode"] == "physical"
    assert config["args"]["action_mode"] == "tools"
    assert config["hyperparameters"] == {"n_steps": 64, "batch_size": 32, "learning_rate": 3e-4, "ent_coef": 0.01,
                                         "gamma": 0.99}  # typed, the preset's with the --hp overrides
    # the final evaluation: the policy, the oracle, the constant tool policies and random on seeds 10000.., in the
    # harness's format; a deterministic agent plays the fixed scenario once (episode 0), random its 5 episodes
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["total_timesteps"] == 512 and evaluation["episodes_per_scenario"] == 5
    assert evaluation["algo"] == "ppo" and evaluation["eval_seed"] == 10
    assert (evaluation["reward_mode"], evaluation["scenario"], evaluation["eval_scenario"]) == ("physical", [ESCAPE],
                                                                                                [ESCAPE])
    assert f"reward mode physical; evaluation on {ESCAPE}\n" in stdout  # not held out: the training scenario
    agents = ["ppo", "oracle", *CONSTANT_AGENTS, "random"]
    rows = {(r["agent"], r["scenario"]): nan_for_none(r) for r in evaluation["rows"]}
    assert list(rows) == [(agent, scenario) for agent in agents for scenario in (ESCAPE, "all")]
    records = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["seed"], r["episode"]) for r in records] == [
        (agent, 10, i) for agent in agents for i in range(5 if agent == "random" else 1)]
    assert [rows[agent, "all"]["episodes"] for agent in agents] == [1] * (len(agents) - 1) + [5]
    # A deterministic policy on a deterministic scenario: one exact episode, one action class, whose pedestrians
    # actually hit and road departure are those of the episode replayed here; the expected hits are the
    # catalogue's for that action.
    row = rows["ppo", ESCAPE]
    assert row["episodes"] == 1 and row["replicates_identical"] is True
    (action,) = [a for a in ("SWERVE_LEFT", "SWERVE_RIGHT", "BRAKE", "NONE") if row[f"share_{a}"] == 1.0]
    final = first_episode(out / "model.zip", "ppo", policy)
    assert action == final["trolley_action"] and row["actual_pedestrians_hit"] == final["actual_pedestrians_hit"]
    assert row["road_departure_rate"] == float(final["road_departure"])
    assert row["expected_pedestrians_hit"] == expected_casualties(resolve_scenario(ESCAPE), action)
    assert row["mean_reward"] == records[0]["reward"] and row["success_rate"] == float(records[0]["success"])
    assert row["outcome_success_rate"] == float(final["outcome_success"])
    assert row["best_pedestrians_hit"] == final["best_pedestrians_hit"]
    assert (out / "eval.csv").read_text().splitlines()[0] == ",".join(COLUMNS)
    assert (out / "eval.md").read_text().startswith("| agent | scenario |")
    # braking from 40 km/h stops 7.7 m short of the people 25 m ahead: the first constant that reaches the best
    # outcome (inaction hits 2)
    assert evaluation["best_constant"] == "brake"
    assert rows["brake", ESCAPE]["outcome_success_rate"] == 1.0 and rows["brake", ESCAPE]["replicates_identical"]
    assert rows["inaction", ESCAPE]["actual_pedestrians_hit"] == 2.0
    # the printout: a short summary of the pooled rows, no per-scenario table
    labels = {"ppo": "ppo (trained)", "oracle": "oracle (best outcome)", "brake": "best constant: brake",
              "random": "random"}
    lines = stdout.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("trained PPO for 512 steps in ")))
    assert lines[start].endswith(f" s with reward mode physical; model saved to {out / 'model.zip'}")
    assert lines[start + 1:] == [
        f"evaluation on {ESCAPE}: 5 episodes, env seeds 10000-10004, the same for every agent:",
        "  agent                  episodes  success by actual outcome   hit/episode  road departures",
        *(f"  {label:<21}  {rows[agent, 'all']['episodes']:>8}  {train_sb3.success_text(rows[agent, 'all']):<26}  "
          f"{rows[agent, 'all']['actual_pedestrians_hit']:>11.2f}  {rows[agent, 'all']['road_departure_rate']:.0%}"
          for agent, label in labels.items()),
        "  (fewer episodes: a deterministic agent plays a fixed scenario once, as every replay of it is the same "
        "episode)",
        f"files in {out}: eval.md (every measure per agent and scenario), learning_curve.png, episodes.gif (1 "
        "evaluation episode of ppo)"]
    assert re.search(r"^  best constant: brake +1  100% exact +0\.00  0%$", stdout, re.M)  # stops, hits nobody
    assert re.search(r"^  random +5  ", stdout, re.M)
    assert len(lines) - start <= 10
    # the periodic evaluations, each after the update it follows, and last the final evaluation
    curve_rows = read_evaluations(out / "evaluations.csv")
    assert [r["timesteps"] for r in curve_rows] == [128, 256, 384, 512]
    assert list(curve_rows[0]) == list(EVAL_COLUMNS)
    # The row at 384 is evaluated (1 episode, seed 10000) at the start of the rollout after the update at 384,
    # with the policy the checkpoint step_384 holds.
    outcome = first_episode(out / "checkpoints" / "step_384" / "model.zip", "ppo", policy)
    assert curve_rows[2]["mean_actual_hits"] == outcome["actual_pedestrians_hit"]
    assert curve_rows[2]["road_departure_rate"] == float(outcome["road_departure"])
    assert curve_rows[2]["outcome_success_rate"] == float(outcome["outcome_success"])
    assert curve_rows[2]["success_rate"] == float(outcome["success"])
    # the row at 512 is the final evaluation of model.zip: eval.json's numbers
    assert_curve_ends_at_the_final_evaluation(out, rows["ppo", "all"], MEASURES)
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    # episodes.gif: the policy's evaluation episode (its only one here), every tick, front camera (320) beside
    # bird's-eye (180)
    with Image.open(out / "episodes.gif") as gif:
        assert (gif.n_frames, gif.size) == (len(replay(records[0])[0]), (500, 180 + 30))
    assert list((out / "tb").rglob("events.out.tfevents.*")), "no TensorBoard log"
    assert steps_of(out) == ["step_384", "step_512"]  # --keep-checkpoints 2: the newest two (one at the end)


def test_same_seed_and_settings_repeat_exactly(ppo_run, tmp_path):
    out, _ = ppo_run
    again = tmp_path / "again"
    run_main(*PPO, "--output-dir", str(again))
    assert curve(again) == curve(out) and same_params(again / "model.zip", out / "model.zip")
    a, b = (json.loads((d / "eval.json").read_text()) for d in (out, again))
    assert without_times(a) == without_times(b)


def test_a_run_is_never_overwritten_silently_and_the_hint_replaces_it(ppo_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(ppo_run[0], out)
    command = [*TINY_PPO, "--total-timesteps", "128", "--output-dir", str(out)]
    message = refusal(*command)
    assert (out / "model.zip").exists() and "--resume" not in message  # complete: the refusal offers --overwrite only
    follow(overwrite_hint(message, command))  # following the hint works
    assert json.loads((out / "config.json").read_text())["args"]["reward_mode"] == "rubric"
    assert json.loads((out / "eval.json").read_text())["total_timesteps"] == 128
    assert not (tmp_path / "run.replaced").exists()


def test_total_timesteps_are_rounded_up_to_whole_rollouts_and_said_first(tmp_path):
    out = tmp_path / "run"
    stdout = run_main("--total-timesteps", "100", "--n-envs", "2", "--hp", "n_steps=32", "batch_size=32",
                      "--eval-episodes", "1", "--output-dir", str(out))
    assert stdout.splitlines()[0] == ("note: --total-timesteps 100 rounded up to 128: PPO trains in whole "
                                      "rollouts of n_steps x n_envs = 32 x 2 = 64 steps")
    assert "for 128 steps" in stdout.splitlines()[1]
    assert json.loads((out / "config.json").read_text())["args"]["total_timesteps"] == 128
    assert json.loads((out / "eval.json").read_text())["total_timesteps"] == 128


# -- crashes, resume, refusals -----------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_resume_after_a_crash_matches_the_uninterrupted_run(request, tmp_path, algo):
    args = PPO if algo == "ppo" else TINY_SAC
    full, stdout = request.getfixturevalue(f"{algo}_run")
    total = 512 if algo == "ppo" else 304  # SAC: 300 rounded up to rollouts of train_freq x n_envs = 4 x 2
    assert json.loads((full / "eval.json").read_text())["total_timesteps"] == total
    crash_step, resumed_from = (384, 256) if algo == "ppo" else (300, 200)
    crashed = tmp_path / "crashed"
    crash_at([*args, "--output-dir", str(crashed)], crash_step)
    assert steps_of(crashed) == (["step_128", "step_256"] if algo == "ppo" else ["step_104", "step_200"])
    # PPO: the row at 384 was written at the rollout start before the crashing checkpoint; SAC crashes in the
    # checkpoint at the end of training (304), and its periodic rows fall at the rollout starts 104 and 200
    assert [row[0] for row in curve(crashed)] == (["128", "256", "384"] if algo == "ppo" else ["104", "200"])
    if algo == "sac":  # the filled part of the replay buffer, in the newest checkpoint only
        assert steps_of(full) == ["step_200", "step_304"]
        per_transition = 2 * 32 * 4 + 2 * 4 + 3 * 4  # obs and next obs (32 float32), action (2 float32), 3 flags
        for run, step in ((full, 304), (crashed, 200)):
            size = (run / "checkpoints" / f"step_{step}" / "replay_buffer.npz").stat().st_size
            assert step * per_transition < size < step * per_transition + 4096  # + the archive's headers
        assert not (full / "checkpoints" / "step_200" / "replay_buffer.npz").exists()
        assert not (crashed / "checkpoints" / "step_104" / "replay_buffer.npz").exists()
        # the disk figure printed is the peak: the new buffer is written before the old one goes
        gib = 50_000 * (2 * 32 * 4 + 2 * 4 + 3 * 4) / 2**30  # the cpu preset's 50,000 transitions of the state
        assert (f"on disk only its filled part, in the newest checkpoint only (replay_buffer.npz: up to {gib:.2f} GiB, "
                f"and up to {2 * gib:.2f} GiB while a checkpoint is written, before the previous one's is deleted; "
                "2 checkpoints kept)") in stdout
    # rerunning the command refuses and offers to resume; following that hint finishes the run
    message = refusal(*args, "--output-dir", str(crashed))
    overwrite_hint(message, [*args, "--output-dir", str(crashed)])  # or replace it (followed in the test above)
    resumed = follow(resume_hint(message))
    assert f"resuming {crashed} from step_{resumed_from} ({resumed_from} of {total} steps)" in resumed
    assert same_params(crashed / "model.zip", full / "model.zip")
    assert curve(crashed) == curve(full)  # the rows after the checkpoint were redone, not duplicated
    a, b = (json.loads((d / "eval.json").read_text()) for d in (full, crashed))
    assert without_times(a) == without_times(b)
    records = [[{k: v for k, v in json.loads(line).items() if k != "wall_time_s"}
                for line in (d / "eval.jsonl").read_text().splitlines()] for d in (full, crashed)]
    # one episode of each deterministic agent (the model, the oracle, 7 constant tool or 9 constant control
    # policies) on the fixed scenario, and random's 5
    assert records[0] == records[1] and len(records[0]) == (1 + 1 + 7 + 5 if algo == "ppo" else 1 + 1 + 9 + 5)
    message = refusal("--resume", str(crashed))
    assert "this run is complete" in message and "--overwrite" in message


def test_resume_refusals_name_a_command_that_works(tmp_path):
    run = tmp_path / "run"
    crash_at([*TINY_PPO, "--output-dir", str(run)], 0)  # before the first checkpoint
    message = refusal("--resume", str(run))
    assert "no complete checkpoint" in message and "add --overwrite" in message
    run_main(*TINY_PPO, "--total-timesteps", "128", "--output-dir", str(run), "--overwrite")
    # typed hyperparameters are what a resume reads: a bad stored value is refused like the flag
    config = json.loads((run / "config.json").read_text())
    (run / "eval.json").unlink()
    config["hyperparameters"]["gamma"] = 1.5
    (run / "config.json").write_text(json.dumps(config))
    assert "--hp gamma=1.5" in refusal("--resume", str(run))
    config.pop("format")  # a config.json of the previous version (hyperparameters as strings)
    (run / "config.json").write_text(json.dumps(config))
    assert "from another version" in refusal("--resume", str(run))


def test_resume_falls_back_past_an_unreadable_checkpoint_and_an_empty_evaluations_csv(ppo_run, tmp_path):
    full, _ = ppo_run
    run = tmp_path / "run"
    crash_at([*PPO, "--output-dir", str(run)], 384)  # leaves step_128 and step_256
    (run / "checkpoints" / "step_256" / "state.pkl").write_bytes(b"")  # the newest did not reach the disk
    (run / "evaluations.csv").write_bytes(b"")  # nor did the evaluations
    message = refusal(*PPO, "--output-dir", str(run))  # step_128 still reads back: resumable
    assert f"resuming {run} from step_128 (128 of 512 steps)" in follow(resume_hint(message))
    assert same_params(run / "model.zip", full / "model.zip")  # exact from the older checkpoint
    assert curve(run) == curve(full)[1:]  # the row at 128 was lost with the file; the rest redone, with a header
    assert [r["timesteps"] for r in read_evaluations(run / "evaluations.csv")] == [256, 384, 512]
    # without a checkpoint that reads back, or in another config format, the refusal offers no --resume
    for broken in ("checkpoint", "format"):
        again = tmp_path / broken
        crash_at([*TINY_PPO, "--output-dir", str(again)], 256)  # leaves step_128 only
        if broken == "checkpoint":
            (again / "checkpoints" / "step_128" / "state.pkl").write_bytes(b"")
        else:
            config = json.loads((again / "config.json").read_text())
            (again / "config.json").write_text(json.dumps({**config, "format": 1}))
        command = [*TINY_PPO, "--total-timesteps", "128", "--output-dir", str(again)]
        message = refusal(*command)
        assert "--resume" not in message, message
        follow(overwrite_hint(message, command))  # following the hint works
        assert json.loads((again / "eval.json").read_text())["total_timesteps"] == 128
    assert "this run is complete" in refusal("--resume", str(tmp_path / "checkpoint"))


def test_a_folder_that_is_not_a_train_sb3_run_is_never_offered_overwrite(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "precious.txt").write_text("keep me")
    grpo = tmp_path / "grpo"
    grpo.mkdir()
    (grpo / "config.json").write_text(json.dumps({"script": "train_grpo.py", "args": {"model": "tiny-random"}}))
    for folder in (notes, grpo):
        for extra in ([], ["--overwrite"]):
            message = refusal("--output-dir", str(folder), *extra)
            assert "is not a train_sb3.py run directory" in message, message
            assert "replace the run" not in message and "--resume" not in message
    assert (notes / "precious.txt").read_text() == "keep me" and sorted(p.name for p in grpo.iterdir()) == [
        "config.json"]


def test_evaluations_csv_appends_trims_and_an_empty_file_counts_as_absent(tmp_path):
    path = tmp_path / "evaluations.csv"
    path.write_bytes(b"")
    assert not has_rows(path)
    drop_rows_after(path, 100)  # a crash left it empty: resume goes on, the next evaluation writes a header
    assert not path.exists()
    drop_rows_after(path, 100)
    assert not path.exists()
    header = ",".join(EVAL_COLUMNS)
    assert header == ("timesteps,outcome_success_rate,mean_actual_hits,road_departure_rate,mean_reward,"
                      "success_rate,wall_s")  # outcomes first, then upstream's rubric (names of earlier versions)
    row = {"outcome_success_rate": 0.25, "success_rate": 0.5, "mean_reward": 0.2, "actual_pedestrians_hit": 1.0,
           "road_departure_rate": 0.0}
    append_row(path, 50, {**row, "success_rate": 1.0, "mean_reward": 1.0, "actual_pedestrians_hit": 0.0,
                          "outcome_success_rate": 0.75}, 1.5)
    for step, wall in ((100, 3.0), (150, 4.5)):
        append_row(path, step, row, wall)
    with open(path, "a") as f:
        f.write("200,0.5")  # a row cut short by a crash
    assert path.read_text().splitlines()[:3] == [header, "50,0.7500,0.0000,0.0000,1.0000,1.0000,1.5",
                                                 "100,0.2500,1.0000,0.0000,0.2000,0.5000,3.0"]
    assert [r["timesteps"] for r in read_evaluations(path)] == [50, 100, 150]
    drop_rows_after(path, 100, EVAL_COLUMNS)  # later rows, and a row cut short, go
    assert path.read_text().splitlines() == [header, "50,0.7500,0.0000,0.0000,1.0000,1.0000,1.5",
                                             "100,0.2500,1.0000,0.0000,0.2000,0.5000,3.0"]
    assert has_rows(path)
    with pytest.raises(KeyError):  # a row without a measure writes nothing
        append_row(path, 150, {"success_rate": 1.0}, 5.0)
    assert len(path.read_text().splitlines()) == 3


def test_an_evaluations_csv_of_an_earlier_version_is_converted_on_resume_and_plotted_with_gaps(tmp_path):
    """In an earlier version's CSV the rubric's columns come first, and there is no outcome success."""
    from carla_gym.sb3.plots import PANELS, plot_learning_curve

    path = tmp_path / "evaluations.csv"
    old = ["timesteps,success_rate,mean_reward,mean_actual_hits,road_departure_rate,wall_s",
           "128,1.0000,1.0000,1.0000,0.0000,2.0", "256,0.0000,-1.0000,0.0000,1.0000,4.0"]
    assert old[0] == ",".join(OLD_EVAL_COLUMNS)
    path.write_text("\n".join(old) + "\n")
    row = {"outcome_success_rate": 1.0, "success_rate": 0.0, "mean_reward": 0.0, "actual_pedestrians_hit": 0.0,
           "road_departure_rate": 0.0}
    with pytest.raises(ValueError, match=r"has the columns \['timesteps', 'success_rate', .*this run writes "
                                         r"\['timesteps', 'outcome_success_rate', .*move it away"):
        append_row(path, 384, row, 6.0)  # never a row under another header
    drop_rows_after(path, 128)  # no columns given: the file's own header is kept
    assert path.read_text().splitlines() == old[:2]
    drop_rows_after(path, 128, EVAL_COLUMNS)  # what a resume does: the current header, cells matched by name
    assert path.read_text().splitlines() == [",".join(EVAL_COLUMNS), "128,,1.0000,0.0000,1.0000,1.0000,2.0"]
    append_row(path, 256, row, 4.0)
    (first, second) = read_evaluations(path)
    assert math.isnan(first["outcome_success_rate"]) and first["success_rate"] == 1.0
    assert second == {"timesteps": 256, "outcome_success_rate": 1.0, "mean_actual_hits": 0.0,
                      "road_departure_rate": 0.0, "mean_reward": 0.0, "success_rate": 0.0, "wall_s": 4.0}
    with pytest.raises(ValueError, match=r"not those of this run .*move it away"):
        drop_rows_after(path, 128, NAV_COLUMNS)  # a trolley file in a navigation run
    # the learning curve: outcomes first, one panel per measure; the old row is a gap in the outcome panel
    import matplotlib.pyplot as plt

    figures = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plt, "close", figures.append)
        assert plot_learning_curve(path, tmp_path / "curve.png", "t")
    axes = [ax for ax in figures[0].axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [label for _, label, _ in PANELS] == [
        "success by actual outcome", "pedestrians actually hit per episode", "road departure rate",
        "rubric reward (upstream)", "rubric success (upstream)"]
    xs, ys = axes[0].lines[0].get_data()
    assert list(xs) == [128, 256] and math.isnan(ys[0]) and ys[1] == 1.0
    assert list(axes[4].lines[0].get_ydata()) == [1.0, 0.0]
    plt.close(figures[0])
    assert (tmp_path / "curve.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_scenario_defaults_to_the_held_out_split_and_auto_reward_mode_to_physical_on_the_generated_family():
    from carla_gym.suites import SUITES

    def resolved(*argv: str) -> train_sb3.Args:
        return train_sb3.resolve(train_sb3.parse_args(list(argv)), list(argv))

    generated = resolved("--scenario", "trolley_generated_train")
    assert (generated.eval_scenario, generated.reward_mode) == (["trolley_generated_test"], "physical")
    assert train_sb3.evaluation_note(generated) == ("reward mode physical; evaluation on trolley_generated_test "
                                                    "(held out from training)")
    assert train_sb3.env_kwargs(generated)["reward_mode"] == "physical"
    mixed = resolved("--scenario", "trolley_generated_train", ESCAPE)  # not every scenario generated: as before
    assert (mixed.eval_scenario, mixed.reward_mode) == (["trolley_generated_test", ESCAPE], "rubric")
    assert train_sb3.evaluation_note(mixed) == (f"reward mode rubric; evaluation on trolley_generated_test (held out "
                                                f"from training), {ESCAPE}")
    both = resolved("--scenario", "trolley_generated_train", "trolley_generated_test")  # both splits: no repeat
    assert (both.eval_scenario, both.reward_mode) == (["trolley_generated_test"], "physical")
    assert resolved("--scenario", "trolley_generated_train", "--reward-mode", "rubric").reward_mode == "rubric"
    told = resolved("--scenario", "trolley_generated_train", "--eval-scenario", "micro", "trolley_generated_train")
    assert told.eval_scenario == [*SUITES["micro"], "trolley_generated_train"]  # suites expand; as told
    default = resolved()  # the generated family on 16 batched envs, evaluated on its held-out split
    assert (default.scenario, default.eval_scenario, default.reward_mode, default.n_envs, default.vec_env) == (
        ["trolley_generated_train"], ["trolley_generated_test"], "physical", 16, "batched")
    fixed = resolved("--scenario", ESCAPE)
    assert (fixed.scenario, fixed.eval_scenario, fixed.reward_mode) == ([ESCAPE], [ESCAPE], "rubric")
    navigation = resolved("--env", "CarlaNavigation-v0")  # navigation keeps its own defaults
    assert (navigation.scenario, navigation.n_envs) == (["route_Town02"], 4)
    assert resolved("--env", "CarlaNavigation-v0", "--n-envs", "16").n_envs == 16
    assert resolved("--env", "CarlaNavigation-v0").eval_scenario == []  # navigation evaluates on routes
    message = refusal("--eval-scenario", "nowhere")
    assert message.startswith("--eval-scenario: ") and "nowhere" in message and "trolley_generated_test" in message
    assert refusal("--env", "CarlaNavigation-v0", "--eval-scenario", ESCAPE) == (
        "--eval-scenario applies to CarlaTrolley-v0 only; CarlaNavigation-v0 runs on the embedded simulator only: "
        "remove it")


def test_a_run_on_the_generated_train_split_reports_the_held_out_test_split(tmp_path):
    from agents.scripted import CONSTANT_AGENTS
    from carla_gym.sb3.evaluations import MEASURES

    out = tmp_path / "run"
    stdout = run_main("--scenario", "trolley_generated_train", "--total-timesteps", "256", "--n-envs", "2", "--hp",
                      "n_steps=64", "batch_size=32", "--eval-episodes", "5", "--eval-freq", "128",
                      "--output-dir", str(out))
    assert "reward mode physical; evaluation on trolley_generated_test (held out from training)\n" in stdout
    config = json.loads((out / "config.json").read_text())
    assert (config["args"]["reward_mode"], config["env_kwargs"]["reward_mode"]) == ("physical", "physical")
    assert config["args"]["eval_scenario"] == ["trolley_generated_test"]
    evaluation = json.loads((out / "eval.json").read_text())
    assert (evaluation["reward_mode"], evaluation["scenario"], evaluation["eval_scenario"]) == (
        "physical", ["trolley_generated_train"], ["trolley_generated_test"])
    agents = ["ppo", "oracle", *CONSTANT_AGENTS, "random"]
    rows = {(r["agent"], r["scenario"]): nan_for_none(r) for r in evaluation["rows"]}
    assert list(rows) == [(agent, scenario) for agent in agents for scenario in ("trolley_generated_test", "all")]
    records = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert {r["scenario"] for r in records} == {"trolley_generated_test"} and len(records) == 5 * len(agents)
    for agent in agents:  # every agent on the same 5 held-out layouts
        mine = [r for r in records if r["agent"] == agent]
        assert [(r["seed"], r["episode"]) for r in mine] == [(10, i) for i in range(5)]
        assert rows[agent, "all"]["outcome_success_rate"] == sum(r["outcome_success"] for r in mine) / 5
        assert rows[agent, "all"]["outcome_success_rate"] <= rows["oracle", "all"]["outcome_success_rate"]
    assert rows["oracle", "all"]["outcome_success_rate"] == 1.0  # it plays a best candidate policy
    best = evaluation["best_constant"]
    assert rows[best, "all"]["outcome_success_rate"] == max(rows[a, "all"]["outcome_success_rate"]
                                                            for a in CONSTANT_AGENTS)
    assert best == next(a for a in CONSTANT_AGENTS  # ties: the first constant in order
                        if rows[a, "all"]["outcome_success_rate"] == rows[best, "all"]["outcome_success_rate"])
    assert ("evaluation on held-out trolley_generated_test: 5 episodes (a layout drawn per env seed), env seeds "
            "10000-10004, the same for every agent:\n") in stdout
    ppo = rows["ppo", "all"]
    assert f"  ppo (trained)                 5  {train_sb3.success_text(ppo)}" in stdout
    assert f"  best constant: {best}" in stdout and "\n  random " in stdout
    # the periodic row at 128 (one episode of the test split), then the final evaluation at 256
    periodic, final = read_evaluations(out / "evaluations.csv")
    assert periodic["timesteps"] == 128 and periodic["outcome_success_rate"] in (0.0, 1.0)
    assert final["timesteps"] == 256
    assert_curve_ends_at_the_final_evaluation(out, ppo, MEASURES)


def test_the_control_baselines_are_constant_and_random_steer_and_pedal(sac_run):
    """A SAC run's baselines: the constant [steer, pedal] policies and a seeded uniform random one."""
    from PIL import Image

    from agents.scripted import CONTROL_CONSTANT_AGENTS
    from agents.video import replay
    from carla_gym.sb3.evaluations import MEASURES
    from carla_gym.sim.outcomes import CONTROL_ACTIONS

    out, stdout = sac_run
    evaluation = json.loads((out / "eval.json").read_text())
    agents = ["sac", "oracle", *CONTROL_CONSTANT_AGENTS, "random"]
    rows = {(r["agent"], r["scenario"]): nan_for_none(r) for r in evaluation["rows"]}
    assert list(rows) == [(agent, scenario) for agent in agents for scenario in (ESCAPE, "all")]
    records = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    for name in CONTROL_CONSTANT_AGENTS:  # the same action at every step
        assert {tuple(a) for r in records if r["agent"] == name for a in r["actions"]} == {CONTROL_ACTIONS[name]}
    # holding full brake straight stops short of the people 25 m ahead, on the road; coasting straight hits them
    assert rows["control_steer_straight_brake", "all"]["outcome_success_rate"] == 1.0
    assert rows["control_steer_straight_coast", "all"]["outcome_success_rate"] == 0.0
    best = evaluation["best_constant"]
    assert best == next(a for a in CONTROL_CONSTANT_AGENTS if rows[a, "all"]["outcome_success_rate"] == 1.0)
    assert re.search(rf"^  best constant: {best} +1  100% exact +0\.00  0%$", stdout, re.M)
    # random: uniform in [-1, 1]^2, a different stream per episode, the same stream for the same episode
    randoms = [r["actions"] for r in records if r["agent"] == "random"]
    steps = np.array([a for actions in randoms for a in actions])
    assert len(randoms) == 5 and steps.shape[1] == 2 and np.all(np.abs(steps) <= 1.0)
    assert len({tuple(actions[0]) for actions in randoms}) == 5
    from agents.players import RandomAgent

    policy = RandomAgent("control")
    policy.reset(10_000, ESCAPE)
    assert [list(map(float, policy.act(None, {}))) for _ in randoms[0]] == randoms[0]
    sac = [r for r in records if r["agent"] == "sac"]  # the GIF replays control actions too
    with Image.open(out / "episodes.gif") as gif:
        assert gif.n_frames == sum(len(replay(r)[0]) for r in sac[:3])
    assert_curve_ends_at_the_final_evaluation(out, rows["sac", "all"], MEASURES)


def test_a_navigation_curve_scores_each_update_and_ends_at_the_final_evaluation(tmp_path, monkeypatch):
    """CarlaNavigation-v0: the periodic row is the checkpoint's policy, the last row eval.json's first traffic level."""
    from stable_baselines3 import PPO

    from carla_gym.sb3 import nav_eval, runs
    from carla_gym.sb3.evaluations import NAV_MEASURES

    acting = runs.acting_env_kwargs  # evaluation episodes cut at 2 s: an untrained policy would stand for 90 s
    monkeypatch.setattr(runs, "acting_env_kwargs", lambda kwargs: {**acting(kwargs), "time_limit_s": 2.0})
    out = tmp_path / "nav"
    run_main("--env", "CarlaNavigation-v0", "--traffic", "0", "--total-timesteps", "128", "--n-envs", "2", "--hp",
             "n_steps=32", "batch_size=32", "--eval-freq", "64", "--eval-routes", "1", "--eval-traffic", "20", "0",
             "--checkpoint-freq", "64", "--output-dir", str(out))
    periodic, final = read_evaluations(out / "evaluations.csv")
    assert (periodic["timesteps"], final["timesteps"]) == (64, 128)
    # the row at 64: route 0 in traffic 20 (the first --eval-traffic level) with the weights of the update at 64
    model = PPO.load(out / "checkpoints" / "step_64" / "model.zip", device="cpu")
    kwargs = runs.acting_env_kwargs(json.loads((out / "config.json").read_text())["env_kwargs"])
    row = nav_eval.summarise(nav_eval.play_routes(lambda obs: model.predict(obs, deterministic=True)[0], kwargs, 20,
                                                  routes=range(1)))
    assert {column: periodic[column] for column in NAV_MEASURES} == {column: float(f"{row[key]:.4f}")
                                                                     for column, key in NAV_MEASURES.items()}
    evaluation = json.loads((out / "eval.json").read_text())
    assert set(evaluation["traffic"]) == {"0", "20"}
    assert_curve_ends_at_the_final_evaluation(out, evaluation["traffic"]["20"], NAV_MEASURES)


def test_resuming_a_run_whose_evaluations_csv_has_an_earlier_versions_header(ppo_run, tmp_path):
    full, _ = ppo_run
    run = tmp_path / "run"
    crash_at([*PPO, "--output-dir", str(run)], 384)  # leaves step_128 and step_256, and rows up to 384
    rows = read_evaluations(run / "evaluations.csv")
    old = [",".join(OLD_EVAL_COLUMNS)] + [f"{r['timesteps']},{r['success_rate']:.4f},"
                                         f"{r['mean_reward']:.4f},{r['mean_actual_hits']:.4f},"
                                         f"{r['road_departure_rate']:.4f},{r['wall_s']:.1f}" for r in rows]
    (run / "evaluations.csv").write_text("\n".join(old) + "\n")  # as the previous version wrote it
    run_main("--resume", str(run))
    again = read_evaluations(run / "evaluations.csv")
    assert list(again[0]) == list(EVAL_COLUMNS) and [r["timesteps"] for r in again] == [128, 256, 384, 512]
    assert [math.isnan(r["outcome_success_rate"]) for r in again] == [True, True, False, False]  # not recorded
    assert curve(run)[2:] == curve(full)[2:]  # redone after the checkpoint, as in the uninterrupted run
    assert [(r["mean_reward"], r["mean_actual_hits"]) for r in again] == [
        (r["mean_reward"], r["mean_actual_hits"]) for r in read_evaluations(full / "evaluations.csv")]
    assert (run / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_ctrl_c_in_process_saves_a_clean_checkpoint_and_the_printed_command_finishes(tmp_path, monkeypatch):
    """Ctrl-C at the first periodic evaluation: the rollout finishes, a checkpoint, the resume command, 130."""
    out = tmp_path / "run"
    play_all, sent = train_sb3.play_all, []

    def interrupt_once(*args, **kwargs):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends
        return play_all(*args, **kwargs)

    monkeypatch.setattr(train_sb3, "play_all", interrupt_once)
    handler = signal.getsignal(signal.SIGINT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = train_sb3.main([*TINY_PPO, "--total-timesteps", "1024", "--checkpoint-freq", "100000",
                                 "--output-dir", str(out)])
    # the signal came during the evaluation at step 128 (at the rollout start after the first update): the
    # checkpoint is taken at that rollout start, after the evaluation, and training stops at its first step (2 envs)
    assert result == {"interrupted": True, "timesteps": 130}
    assert "finishing the current rollout" in printed.getvalue()
    assert (out / "checkpoints" / "latest").read_text() == "step_128" and not (out / "model.zip").exists()
    assert signal.getsignal(signal.SIGINT) is handler  # restored
    follow(re.search(r"continue with: (.+)", printed.getvalue()).group(1))
    assert json.loads((out / "eval.json").read_text())["total_timesteps"] == 1024


def test_a_crash_in_the_final_evaluation_keeps_the_trained_model_and_resume_finishes(tmp_path, monkeypatch):
    """model.zip is saved before the final evaluation: a crash (or Ctrl-C) there loses no training."""
    out = tmp_path / "run"
    play_all = train_sb3.play_all

    def crash_in_the_final_evaluation(players, *args, **kwargs):
        if len(players) > 1:  # the policy and its baselines: the final evaluation
            raise Crash
        return play_all(players, *args, **kwargs)

    args = [*TINY_PPO, "--total-timesteps", "128", "--output-dir", str(out)]
    with monkeypatch.context() as patch:
        patch.setattr(train_sb3, "play_all", crash_in_the_final_evaluation)
        with pytest.raises(Crash), contextlib.redirect_stdout(io.StringIO()):
            train_sb3.main(args)
    assert (out / "model.zip").is_file() and not (out / "eval.json").exists()  # trained, not complete
    printed = run_main("--resume", str(out))  # evaluates without training again
    assert "(128 of 128 steps" in printed
    assert json.loads((out / "eval.json").read_text())["total_timesteps"] == 128
    # a crash after the final row was written: the resumed run replaces that row, it does not add one
    (out / "eval.json").unlink()

    def crash(*args, **kwargs):
        raise Crash

    with monkeypatch.context() as patch:
        patch.setattr(train_sb3, "write_summary", crash)
        with pytest.raises(Crash), contextlib.redirect_stdout(io.StringIO()):
            train_sb3.main(["--resume", str(out)])
    assert [r["timesteps"] for r in read_evaluations(out / "evaluations.csv")] == [128]
    run_main("--resume", str(out))
    assert [r["timesteps"] for r in read_evaluations(out / "evaluations.csv")] == [128]


@pytest.mark.slow
def test_ctrl_c_saves_a_clean_checkpoint_and_resume_finishes(tmp_path):
    """End to end: a real SIGINT to ``python train_sb3.py``; its printed resume command run in a shell's way."""
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(REPO / "train_sb3.py"), "--total-timesteps", "1024", "--n-envs",
                             "2", "--hp", "n_steps=64", "batch_size=32", "--eval-episodes", "3", "--eval-freq", "128",
                             "--checkpoint-freq", "100000", "--output-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 300
    while not (out / "evaluations.csv").exists():  # training has started
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends, at any moment of a step
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "finishing the current rollout" in stdout
    latest = (out / "checkpoints" / "latest").read_text()
    assert int(latest.removeprefix("step_")) % 128 == 0  # taken between rollouts (whenever the signal came)
    assert not (out / "model.zip").exists()
    hint = re.search(r"continue with: (.+)", stdout).group(1)  # as printed, from there
    again = subprocess.run(shlex.split(hint), capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "eval.json").read_text())["total_timesteps"] == 1024


def test_missing_extras_name_an_install_command_for_this_checkout(tmp_path, monkeypatch):
    import runpy
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    monkeypatch.chdir(tmp_path)  # the command must work from where it was printed
    for module, flags, extra, package in (("stable_baselines3", [], "sb3", "stable-baselines3"),
                                          ("open_clip", ["--clip", "vit-b-32"], "clip", "open-clip-torch")):
        with monkeypatch.context() as patch:
            patch.setitem(sys.modules, module, None)  # not installed
            patch.setattr(sys, "argv", ["train_sb3.py", *flags, "--output-dir", str(tmp_path / "run")])
            with pytest.raises(SystemExit) as caught:
                runpy.run_path(str(REPO / "train_sb3.py"), run_name="__main__")
        message = str(caught.value.code)
        assert f"Install the {extra} extra: " in message, message
        command = shlex.split(message.split(f"Install the {extra} extra: ")[1].strip())
        # the command installs this checkout's extra with this interpreter, from where it was printed
        python = sys.executable if command[0] != "python" else shutil.which("python")
        assert python == sys.executable and command[1:5] == ["-m", "pip", "install", "-e"], command
        path, _, rest = command[5].partition("[")
        assert (tmp_path / path / "pyproject.toml").resolve() == REPO / "pyproject.toml" and rest == f"{extra}]"
        assert any(req.startswith(package) for req in extras[extra])
        assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_clip_shaped_ppo_runs_offline_with_random_weights(tmp_path):
    out = tmp_path / "run"
    stdout = run_main("--clip", "vit-b-32", "--total-timesteps", "64", "--n-envs", "2", "--hp", "n_steps=32",
                      "batch_size=32", "--eval-episodes", "2", "--output-dir", str(out))
    assert "random weights: the CLIP reward carries no signal" in stdout
    config = json.loads((out / "config.json").read_text())["args"]
    assert config["clip"] == "vit-b-32" and config["clip_mode"] == "add"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((out / "tb").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"clip/sim_pos", "clip/sim_neg", "clip/env_reward", "rollout/ep_rew_mean"} <= set(tags), tags


def test_shaping_infos_are_logged_as_the_shaped_return_and_clip_similarities():
    from stable_baselines3.common.logger import Logger

    from carla_gym.sb3.callbacks import LogShaping

    class Recorder(Logger):
        def __init__(self):
            super().__init__(None, [])

    callback = LogShaping()
    callback.model = type("Model", (), {"logger": Recorder(), "num_timesteps": 2})()
    callback.locals = {"infos": [{"shaped_episode": {"r": 2.0}, "clip_sim_pos": 0.3, "env_reward": -1.0},
                                 {"shaped_episode": {"r": 4.0}, "clip_sim_pos": 0.1}, {}]}
    assert callback.on_step() is True
    logged = callback.model.logger.name_to_value
    assert logged["rollout/ep_shaped_rew_mean"] == 3.0 and logged["clip/sim_pos"] == pytest.approx(0.2)
    assert logged["clip/env_reward"] == -1.0 and "clip/sim_neg" not in logged


# -- bad arguments: refused in this process, before anything is written -------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "bias_-1v2"], "Unknown scenario"),
        (["--policy", "CnnPolicy"], "--policy: invalid choice: 'CnnPolicy'"),
        (["--vec-env", "ray"], "--vec-env: invalid choice: 'ray'"),
        (["--ticks-per-action", "0"], "ticks_per_action"),
        (["--eval-episodes", "0"], "--eval-episodes"),
        (["--eval-episodes", "1001"], "--eval-episodes 1001: must be <= 1000"),  # not a traceback after training
        (["--n-envs", "0"], "--n-envs"),
        (["--hp", "batch_size=1"], "batch_size=1"),
        (["--hp", "n_steps=1", "--n-envs", "1"], "at least 2 steps"),
        (["--hp", "gamma=1.5"], "gamma=1.5"),
        (["--hp", "gamma=True"], "gamma=True"),
        (["--hp", "nsteps=64"], "not a PPO hyperparameter"),
        (["--hp", "n_steps"], "name=value"),
        (["--reward-mode", "dense"], "--reward-mode: invalid choice: 'dense'"),
        (["--algo", "sac", "--action-mode", "tools"], "SAC cannot drive"),
        (["--algo", "dqn"], "--algo: invalid choice: 'dqn'"),
        (["--preset", "gpu"], "--preset: invalid choice: 'gpu'"),
        (["--action-mode", "steer"], "--action-mode: invalid choice: 'steer'"),
        (["--backend", "carla"], "--backend: invalid choice: 'carla'"),
        (["--clip", "vit-b-32", "--clip-mode", "multiply"], "--clip-mode: invalid choice: 'multiply'"),
        (["--clip", "vit-b-32", "--backend", "openenv", "--env-urls", "http://x"], "only the embedded backend"),
        (["--backend", "openenv"], "--env-urls"),
        (["--backend", "openenv", "--env-urls", "http://127.0.0.1:1"], "--env-urls http://127.0.0.1:1: cannot connect"),
        (["--env-urls", "http://127.0.0.1:1"], "only used with --backend openenv"),
        (["--keep-checkpoints", "0"], "--keep-checkpoints 0: must be >= 1"),
        (["--hp", "policy_kwargs={'net_arch': {1, 2}}"], "cannot be stored in config.json"),
        (["--clip", "clipper"], "--clip: invalid choice: 'clipper'"),
    ],
)
def test_bad_arguments_are_refused_before_writing(tmp_path, args, message):
    out = tmp_path / "run"
    got = refusal(*args, "--output-dir", str(out))
    assert message in got, got
    assert not out.exists()  # nothing written, so a corrected run needs no --overwrite


@pytest.mark.parametrize("hub_offline", ["", "1"])
def test_clip_errors_name_this_scripts_flags(tmp_path, monkeypatch, hub_offline):
    import open_clip
    import torch

    def offline(name, pretrained=None, cache_dir=None, **kwargs):  # open_clip without a connection
        raise RuntimeError(f"Failed to download weights for tag {pretrained!r}: no connection")

    monkeypatch.setattr(open_clip, "create_model", offline)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("HF_HUB_OFFLINE", hub_offline)
    out = str(tmp_path / "run")
    message = refusal("--clip", "vit-b-32", "--clip-pretrained", "laion2b_s34b_b79k", "--output-dir", out)
    assert message.startswith("--clip vit-b-32: could not load the 'ViT-B-32' weights tagged 'laion2b_s34b_b79k'")
    assert "copy the file here and pass the file's path as --clip-pretrained FILE" in message, message
    assert "--cache-dir" not in message and "cache_dir" not in message and "pretrained=..." not in message
    assert " --pretrained" not in message  # calibrate's flags, not this script's
    assert ("set HF_HUB_OFFLINE=1" in message) == (not hub_offline)  # suggested only where it is not set
    missing = str(tmp_path / "missing.pt")
    for argv, expected in (
            (["--clip-device", "cuda"], "--clip vit-b-32: --clip-device cuda: torch sees no CUDA GPU here; use "
                                        "--clip-device cpu"),
            (["--clip-pretrained", missing], f"--clip vit-b-32: --clip-pretrained {missing}: no such checkpoint file"),
            (["--clip-weight", "nan"], "--clip vit-b-32: --clip-weight nan: must be a finite number")):
        assert refusal("--clip", "vit-b-32", *argv, "--output-dir", out) == expected
    assert not (tmp_path / "run").exists()


def test_choices_come_from_literal_annotations_and_a_default_outside_them_is_a_bug():
    from dataclasses import dataclass

    from carla_gym.cli_args import arg, parser_for

    choices = {a.dest: a.choices for a in parser_for(train_sb3.Args)._actions if a.choices}
    assert choices["algo"] == ("ppo", "sac") and choices["clip"] == ("none", "vit-b-32", "vlm-rl")
    assert choices["policy"] == ("MlpPolicy", "MultiInputPolicy") and choices["clip_mode"] == ("", "replace", "add")

    @dataclass
    class Bad:
        mode: Literal["a", "b"] = arg("c", "mode")

    with pytest.raises(ValueError, match=r"Bad.mode: default 'c' is not among the choices \['a', 'b'\]"):
        parser_for(Bad)

    @dataclass
    class Many:
        sizes: list[Literal[1, 2, 4]] = arg([1], "sizes")

    assert parser_for(Many).parse_args(["--sizes", "2", "4"]).sizes == [2, 4]  # typed as the choices are
    err = io.StringIO()
    with pytest.raises(SystemExit), contextlib.redirect_stderr(err):
        parser_for(Many).parse_args(["--sizes", "3"])
    assert "argument --sizes: invalid choice: 3" in err.getvalue()


def test_resume_and_overwrite_errors(tmp_path):
    assert "no config.json" in refusal("--resume", str(tmp_path))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"args": {"no_such_flag": 1}}))
    assert "unreadable or from another version" in refusal("--resume", str(run))
    (run / "config.json").write_text(json.dumps({"format": 2, "args": {"no_such_flag": 1}, "hyperparameters": {}}))
    assert "'no_such_flag'] are not this version's" in refusal("--resume", str(run))
    assert "no config.json there" in refusal("--resume", str(run / "config.json"))
    assert "remove ['--total-timesteps']" in refusal("--resume", str(run), "--total-timesteps", "99")
    assert "remove ['--seed']" in refusal("--resume", str(run), "--seed=3")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "precious.txt").write_text("keep me")
    assert "not a train_sb3.py run directory" in refusal("--output-dir", str(notes), "--overwrite")
    assert (notes / "precious.txt").read_text() == "keep me"
    target = tmp_path / "file.txt"
    target.write_text("keep me")
    assert "not a directory" in refusal("--output-dir", str(target)) and target.read_text() == "keep me"


def test_help_explains_flags(capsys):
    with pytest.raises(SystemExit) as caught:
        train_sb3.main(["--help"])
    stdout = capsys.readouterr().out
    assert caught.value.code == 0 and "MultiInputPolicy (image" in stdout and "--resume" in stdout
    assert "--algo {ppo,sac}" in stdout  # the choices, from the Literal annotations


# -- checkpoint and resume for every env the script offers (in-process, tiny models) -----------------------
class BrightnessEncoder:
    """A CLIP stand-in: image embeddings turn with the frame's mean brightness (so the shaped reward varies)."""

    def encode_text(self, prompts):
        """One orthogonal unit vector per prompt (the first two axes)."""
        return np.eye(len(prompts), 2)

    def encode_images(self, images):
        """Unit vectors at an angle proportional to each frame's mean brightness."""
        angle = np.asarray(images, dtype=np.float64).reshape(len(images), -1).mean(axis=1) / 255.0 * (np.pi / 2)
        return np.stack([np.cos(angle), np.sin(angle)], axis=1)


FAST = {("embedded", "tools", "state", False, "subproc"), ("openenv", "tools", "state", False, "dummy")}
"""The one subprocess case and the one OpenEnv case of the default run (each of those code paths once)."""
MATRIX = [pytest.param(*case, marks=() if case[0] == "embedded" and case[4] == "dummy" or case in FAST else
                       pytest.mark.slow)  # the other subprocess and server cases: `pytest -m slow`
          for case in ((backend, action, obs, clip, vec) for backend in ("embedded", "openenv")
                       for action in ("tools", "control") for obs in ("state", "dict")
                       for clip in ((False, True) if backend == "embedded" else (False,))  # CLIP: top-down camera
                       for vec in ("dummy", "subproc"))]


@pytest.mark.parametrize(("backend", "action", "obs", "clip", "vec"), MATRIX)
def test_checkpoint_then_resume_continues(tmp_path, request, monkeypatch, backend, action, obs, clip, vec):
    """Every backend x action x observation x CLIP x vector env: resume continues; exactly where envs pickle."""
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common import vec_env

    from carla_gym.reward import CLIPRewardModel
    from carla_gym.sb3.checkpoint import resume, save_checkpoint
    from carla_gym.sb3.envs import make_venv

    if (backend, action, obs, clip, vec) in FAST:  # forked workers start in milliseconds (the default start
        monkeypatch.setattr(vec_env, "SubprocVecEnv",  # method, forkserver, imports torch in each: the slow cases)
                            functools.partial(vec_env.SubprocVecEnv, start_method="fork"))
    urls = [request.getfixturevalue("openenv_server_url")] if backend == "openenv" else []
    kwargs = dict(scenario=["trolley_micro_escape_exists", "trolley_micro_classic_3v1"], action_mode=action,
                  observation_mode=obs, ticks_per_action=5, image_width=36, image_height=36)  # NatureCNN's least
    if clip:
        kwargs["reward_frame_size"] = 32
    shaping = (CLIPRewardModel(BrightnessEncoder(), head="clg", prompts="vlm_rl", clg_window=(-1.0, 1.0)), "add",
               0.5, False) if clip else None
    algo, hyper = ((PPO, dict(n_steps=4, batch_size=8, n_epochs=1)) if action == "tools" else
                   (SAC, dict(buffer_size=200, learning_starts=4, batch_size=8, train_freq=2, gradient_steps=1)))
    policy = "MlpPolicy" if obs == "state" else "MultiInputPolicy"
    torch.manual_seed(0)
    torch.set_num_threads(1)  # as train_sb3.py
    venv = make_venv(kwargs, 2, seed=0, vec_env=vec, urls=urls, clip=shaping)
    model = algo(policy, venv, seed=0, device="cpu", **hyper)
    model.learn(16)
    checkpoint = save_checkpoint(model, tmp_path / "checkpoints", {"shaper": venv.shaper.get_state()} if clip else {})
    model.learn(16, reset_num_timesteps=False)  # the uninterrupted run
    venv.close()

    again = make_venv(kwargs, 2, seed=0, vec_env=vec, urls=urls, clip=shaping)
    resumed, notes, _ = resume(algo, checkpoint, again)
    resumed.learn(16, reset_num_timesteps=False)
    again.close()
    assert resumed.num_timesteps == model.num_timesteps == 32
    if backend == "embedded" and vec == "dummy":  # the envs travel in the checkpoint: bit-identical
        assert notes == []
        a, b = model.policy.state_dict(), resumed.policy.state_dict()
        assert all(torch.equal(a[k], b[k]) for k in a)
    elif vec == "subproc":
        assert notes == ["environments restart (SubprocVecEnv envs live in other processes)"]
    else:
        assert notes == ["environments restart with new sessions (remote OpenEnv episodes cannot be saved)"]


@pytest.mark.slow
def test_an_openenv_env_pickles_without_its_session_and_works_after_reset(openenv_server_url):
    import pickle

    import gymnasium as gym

    env = gym.make("CarlaTrolley-v0", backend="openenv", base_url=openenv_server_url, observation_mode="state")
    env.reset(seed=0)
    env.step(0)
    copy = pickle.loads(pickle.dumps(env))
    with pytest.raises(RuntimeError, match="restored from a pickle starts without one"):
        copy.step(0)
    expected = gym.make("CarlaTrolley-v0", observation_mode="state")
    obs, _ = copy.reset(seed=1)
    np.testing.assert_allclose(obs, expected.reset(seed=1)[0])
    for _ in range(3):
        obs, reward, *_ = copy.step(1)
        exp_obs, exp_reward, *_ = expected.step(1)
        np.testing.assert_allclose(obs, exp_obs, atol=1e-5)
        assert reward == exp_reward
    for e in (env, copy, expected):
        e.close()


def test_the_gym_clip_wrapper_pickles_mid_episode_and_continues_identically():
    import pickle

    import gymnasium as gym

    from carla_gym.reward import CLIPRewardModel, CLIPShapedReward

    model = CLIPRewardModel(BrightnessEncoder(), head="clg", prompts="vlm_rl", clg_window=(-1.0, 1.0))
    env = CLIPShapedReward(gym.make("CarlaTrolley-v0", observation_mode="state", reward_frame_size=32), model,
                           mode="add", weight=0.5)
    env.reset(seed=0)
    env.step(2)
    copy = pickle.loads(pickle.dumps(env))
    for action in (0, 1, 0, 0):
        a, b = env.step(action), copy.step(action)
        np.testing.assert_array_equal(a[0], b[0])
        assert a[1:4] == b[1:4] and a[1] != 0.0  # the same shaped rewards
        if a[2]:
            break


def test_replay_buffer_on_disk_is_its_filled_part_and_restores_identically(tmp_path):
    from gymnasium import spaces
    from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer

    from carla_gym.sb3.replay import load_filled, save_filled

    rng = np.random.default_rng(0)
    image = spaces.Dict({"image": spaces.Box(0, 255, (3, 8, 8), np.uint8), "state": spaces.Box(-1, 1, (4,))})
    action = spaces.Box(-1, 1, (2,))
    per_transition = 2 * (3 * 8 * 8 + 4 * 4) + 2 * 4 + 3 * 4  # obs and next obs, action, reward/done/timeout
    for cls, space in ((DictReplayBuffer, image), (ReplayBuffer, spaces.Box(-1, 1, (4,)))):
        sizes = []
        for filled in (10, 20, 80):  # SB3 keeps 100 // n_envs = 50 rows: 80 wraps around (full, pos 30)
            buffer = cls(100, space, action, device="cpu", n_envs=2)
            for _ in range(filled):
                obs = {k: s.sample()[None].repeat(2, 0) for k, s in space.spaces.items()} if cls is DictReplayBuffer \
                    else rng.random((2, 4)).astype(np.float32)
                buffer.add(obs, obs, rng.random((2, 2)), rng.random(2), rng.random(2) < 0.1,
                           [{"TimeLimit.truncated": True}, {}])
            path = save_filled(buffer, tmp_path / f"{cls.__name__}_{filled}.npz")
            sizes.append(path.stat().st_size)
            fresh = cls(100, space, action, device="cpu", n_envs=2)
            load_filled(fresh, path)
            assert (fresh.pos, fresh.full) == ((30, True) if filled == 80 else (filled, False))
            for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
                a, b = getattr(buffer, name), getattr(fresh, name)
                for key in (a if isinstance(a, dict) else [None]):
                    np.testing.assert_array_equal(a[key] if key else a, b[key] if key else b)
        if cls is DictReplayBuffer:  # proportional to the filled transitions (2 envs per row), capped at the size
            for filled, size in zip((10, 20, 50), sizes, strict=True):
                assert 2 * filled * per_transition < size < 2 * filled * per_transition + 4096
    with pytest.raises(ValueError, match="a replay buffer of 50 rows .*, this model's holds 25"):
        load_filled(ReplayBuffer(50, spaces.Box(-1, 1, (4,)), action, device="cpu", n_envs=2), path)


def test_only_the_newest_checkpoints_stay_and_only_the_newest_keeps_the_replay_buffer(tmp_path):
    from stable_baselines3 import SAC

    from carla_gym.sb3.checkpoint import REPLAY_FILE, latest_checkpoint, save_checkpoint
    from carla_gym.sb3.envs import make_venv

    venv = make_venv(dict(action_mode="control", observation_mode="state"), 1, seed=0)
    model = SAC("MlpPolicy", venv, seed=0, device="cpu", buffer_size=100, learning_starts=1000)
    folder = tmp_path / "checkpoints"
    (folder / ".tmp_step_7").mkdir(parents=True)  # a crash's leftovers
    for _ in range(4):
        model.learn(5, reset_num_timesteps=False)
        save_checkpoint(model, folder, keep=3)
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step_10", "step_15", "step_20"]
    assert [p.parent.name for p in folder.glob(f"*/{REPLAY_FILE}")] == ["step_20"]
    assert latest_checkpoint(folder) == folder / "step_20"
    (folder / "latest").write_text("step_15")  # a crash after writing step_20, before naming it
    save_checkpoint(model, folder, keep=1)
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step_20"]
    with pytest.raises(ValueError, match="keep=0: must be >= 1"):
        save_checkpoint(model, folder, keep=0)
    venv.close()


def test_an_unreadable_newest_checkpoint_falls_back_to_the_newest_that_reads_back(tmp_path):
    from stable_baselines3 import SAC

    from carla_gym.sb3.checkpoint import REPLAY_FILE, latest_checkpoint, resume, save_checkpoint
    from carla_gym.sb3.envs import make_venv

    venv = make_venv(dict(action_mode="control", observation_mode="state"), 1, seed=0)
    model = SAC("MlpPolicy", venv, seed=0, device="cpu", buffer_size=100, learning_starts=1000)
    folder = tmp_path / "checkpoints"
    for _ in range(3):
        model.learn(5, reset_num_timesteps=False)
        save_checkpoint(model, folder, keep=3)
    assert latest_checkpoint(folder) == folder / "step_15"
    (folder / "step_15" / REPLAY_FILE).write_bytes(b"PK")  # an archive cut short
    assert latest_checkpoint(folder) == folder / "step_10"
    (folder / "step_10" / "state.pkl").write_bytes(b"")  # a state file cut short
    assert latest_checkpoint(folder) == folder / "step_5"
    resumed, notes, _ = resume(SAC, folder / "step_5", venv)
    assert resumed.num_timesteps == 5 and resumed.replay_buffer.pos == 0
    assert notes == ["the replay buffer starts empty (step_5 has none: only the newest checkpoint keeps it, and the "
                     "newest did not read back)"]
    with open(folder / "step_5" / "model.zip", "r+b") as f:
        f.truncate(100)
    assert latest_checkpoint(folder) is None  # nothing reads back: train_sb3.py --resume refuses
    (folder / "latest").unlink()  # without `latest`, any folder that reads back (none here)
    assert latest_checkpoint(folder) is None
    venv.close()


def test_checkpoints_and_result_files_reach_the_disk_before_they_are_named(tmp_path, monkeypatch):
    import os

    from stable_baselines3 import PPO

    import carla_gym.io
    from carla_gym.sb3.checkpoint import save_checkpoint
    from carla_gym.sb3.envs import make_venv

    events, opened = [], {}
    fsync, replace, open_ = os.fsync, os.replace, os.open

    def record_open(path, *args, **kwargs):
        fd = open_(path, *args, **kwargs)
        opened[fd] = str(path)
        return fd

    def record_fsync(fd):
        events.append(("fsync", opened[fd]))
        fsync(fd)

    def record_replace(src, dst):
        events.append(("replace", str(src), str(dst)))
        replace(src, dst)

    monkeypatch.setattr(os, "open", record_open)
    monkeypatch.setattr(os, "fsync", record_fsync)
    monkeypatch.setattr(os, "replace", record_replace)
    carla_gym.io.write_text_atomic(tmp_path / "a.txt", "x")
    assert events == [("fsync", str(tmp_path / "a.txt.tmp")), ("replace", str(tmp_path / "a.txt.tmp"),
                                                                 str(tmp_path / "a.txt")), ("fsync", str(tmp_path))]
    venv = make_venv(dict(observation_mode="state"), 1, seed=0)
    model = PPO("MlpPolicy", venv, seed=0, device="cpu", n_steps=4, batch_size=4, n_epochs=1)
    folder = tmp_path / "checkpoints"
    for _ in range(2):
        model.learn(4, reset_num_timesteps=False)
        events.clear()
        save_checkpoint(model, folder, keep=1)
    venv.close()
    tmp, final = str(folder / ".tmp_step_8"), str(folder / "step_8")
    named = events.index(("replace", tmp, final))
    assert {("fsync", f"{tmp}/{name}") for name in ("model.zip", "state.pkl")} | {("fsync", tmp)} <= set(
        events[:named])  # every file and the folder, before the rename
    assert events[named + 1:] == [("fsync", str(folder)), ("fsync", str(folder / "latest.tmp")),
                                  ("replace", str(folder / "latest.tmp"), str(folder / "latest")),
                                  ("fsync", str(folder))]  # then `latest`; only then is step_4 deleted
    assert sorted(p.name for p in folder.iterdir()) == ["latest", "step_8"]
