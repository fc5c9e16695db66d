"""train_sb3.py: outputs, determinism, exact resume, interruption, errors (learning thresholds: benchmarks/)."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TINY_PPO = ["--total-timesteps", "512", "--n-envs", "2", "--hp", "n_steps=64", "batch_size=32",
            "--eval-episodes", "5", "--eval-freq", "128", "--checkpoint-freq", "128"]
TINY_SAC = ["--algo", "sac", "--total-timesteps", "300", "--n-envs", "2", "--hp", "learning_starts=50",
            "batch_size=32", "--eval-episodes", "5", "--eval-freq", "100", "--checkpoint-freq", "100"]


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "train_sb3.py"), *args], capture_output=True, text=True,
                          timeout=900, cwd=REPO)


def params(path: Path):
    from stable_baselines3 import PPO, SAC

    algo = SAC if "sac" in json.loads((path.parent / "config.json").read_text())["args"]["algo"] else PPO
    return algo.load(path, device="cpu").policy.state_dict()


def same_params(a: Path, b: Path) -> bool:
    import torch

    pa, pb = params(a), params(b)
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def curve(run: Path) -> list[tuple[str, str, str]]:
    with open(run / "evaluations.csv") as f:
        return [(r["timesteps"], r["success_rate"], r["mean_reward"]) for r in csv.DictReader(f)]


def crash_after(run: Path, copy: Path, step: int) -> Path:
    """A copy of a finished run as a crash right after checkpoint ``step`` would have left it."""
    shutil.copytree(run, copy)
    for path in (copy / "checkpoints").glob("step_*"):
        if int(path.name.removeprefix("step_")) > step:
            shutil.rmtree(path)
    (copy / "checkpoints" / "latest").write_text(f"step_{step}")
    for name in ("model.zip", "eval.json", "eval.csv", "learning_curve.png"):
        (copy / name).unlink()
    return copy


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["MlpPolicy", "MultiInputPolicy"])
def test_ppo_run_writes_every_output_and_repeats_exactly(tmp_path, policy):
    out = tmp_path / "run"
    proc = run_script(*TINY_PPO, "--policy", policy, "--reward-mode", "physical", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["policy"] == policy and config["args"]["reward_mode"] == "physical"
    assert config["args"]["action_mode"] == "tools" and config["hyperparameters"]["n_steps"] == "64"
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["total_timesteps"] == 512 and evaluation["episodes_per_scenario"] == 5
    row = evaluation["per_scenario"]["trolley_micro_escape_exists"]
    assert row["oracle_mean_reward"] == 1.0 and sum(row["actions"].values()) == 5
    assert f"success rate {evaluation['success_rate']:.1%}" in proc.stdout
    mismatch = row["mismatch_rate"]  # escape_exists is a micro-benchmark: the data's hits vs the simulated ones
    assert 0.0 <= mismatch <= 1.0
    assert (f"pedestrians actually hit {row['mean_actual_hits']:.2f} per episode; data and simulation disagree in "
            f"{mismatch:.0%}") in proc.stdout
    assert [r[0] for r in curve(out)] == ["128", "256", "384", "512"]
    assert (out / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    assert list((out / "tb").rglob("events.out.tfevents.*")), "no TensorBoard log"
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == ["step_128", "step_256", "step_384",
                                                                          "step_512"]  # and one at the end
    assert (out / "eval.csv").read_text().splitlines()[0] == ("scenario,success_rate,mean_reward,oracle_mean_reward,"
                                                              "mean_actual_hits,mismatch_rate")
    if policy == "MlpPolicy":  # same seed and settings: the same learning curve and weights
        again = tmp_path / "again"
        assert run_script(*TINY_PPO, "--policy", policy, "--reward-mode", "physical",
                          "--output-dir", str(again)).returncode == 0
        assert curve(again) == curve(out) and same_params(again / "model.zip", out / "model.zip")
    refused = run_script(*TINY_PPO, "--output-dir", str(out))  # never overwrite silently
    assert refused.returncode != 0 and "--overwrite" in refused.stderr and (out / "model.zip").exists()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_resume_from_a_checkpoint_matches_the_uninterrupted_run(tmp_path, algo):
    args = TINY_PPO if algo == "ppo" else TINY_SAC
    full = tmp_path / "full"
    assert run_script(*args, "--output-dir", str(full)).returncode == 0
    if algo == "sac":
        assert (full / "checkpoints" / "step_200" / "replay_buffer.pkl").is_file()
    step = 256 if algo == "ppo" else 200
    crashed = crash_after(full, tmp_path / "crashed", step)
    proc = run_script("--resume", str(crashed))
    assert proc.returncode == 0, proc.stderr
    assert f"resuming {crashed} from step_{step}" in proc.stdout
    assert same_params(crashed / "model.zip", full / "model.zip")
    assert curve(crashed) == curve(full)  # the rows after the checkpoint were redone, not duplicated
    a, b = (json.loads((d / "eval.json").read_text()) for d in (full, crashed))
    a.pop("train_seconds"), b.pop("train_seconds")
    assert a == b


@pytest.mark.slow
def test_ctrl_c_saves_a_clean_checkpoint_and_resume_finishes(tmp_path):
    import signal
    import time

    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, str(REPO / "train_sb3.py"), "--total-timesteps", "8192", "--n-envs",
                             "2", "--hp", "n_steps=64", "batch_size=32", "--eval-episodes", "3", "--eval-freq", "128",
                             "--checkpoint-freq", "100000", "--output-dir", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + 300
    while not (out / "evaluations.csv").exists():  # training has started
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends, at any moment of a step
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert "finishing the current rollout" in stdout and f"--resume {out}" in stdout
    latest = (out / "checkpoints" / "latest").read_text()
    assert int(latest.removeprefix("step_")) % 128 == 0  # taken between rollouts
    assert not (out / "model.zip").exists()
    again = run_script("--resume", str(out))
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "eval.json").read_text())["total_timesteps"] == 8192
    done = run_script("--resume", str(out))
    assert done.returncode != 0 and "this run is complete" in done.stderr


@pytest.mark.slow
def test_clip_shaped_ppo_runs_offline_with_random_weights(tmp_path):
    out = tmp_path / "run"
    proc = run_script("--clip", "vit-b-32", "--total-timesteps", "64", "--n-envs", "2", "--hp", "n_steps=32",
                      "batch_size=32", "--eval-episodes", "2", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "random weights: the CLIP reward carries no signal" in proc.stdout
    config = json.loads((out / "config.json").read_text())["args"]
    assert config["clip"] == "vit-b-32" and config["clip_mode"] == "add"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((out / "tb").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"clip/sim_pos", "clip/sim_neg", "clip/env_reward", "rollout/ep_rew_mean"} <= set(tags), tags


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "bias_-1v2"], "Unknown scenario"),
        (["--policy", "CnnPolicy"], "MlpPolicy"),
        (["--vec-env", "ray"], "--vec-env 'ray'"),
        (["--ticks-per-action", "0"], "ticks_per_action"),
        (["--eval-episodes", "0"], "--eval-episodes"),
        (["--n-envs", "0"], "--n-envs"),
        (["--hp", "batch_size=1"], "batch_size=1"),
        (["--hp", "n_steps=1", "--n-envs", "1"], "at least 2 steps"),
        (["--hp", "gamma=1.5"], "gamma=1.5"),
        (["--hp", "gamma=True"], "gamma=True"),
        (["--hp", "nsteps=64"], "not a PPO hyperparameter"),
        (["--hp", "n_steps"], "name=value"),
        (["--reward-mode", "dense"], "reward_mode"),
        (["--algo", "sac", "--action-mode", "tools"], "SAC cannot drive"),
        (["--algo", "dqn"], "--algo 'dqn'"),
        (["--clip", "vit-b-32", "--backend", "openenv", "--env-urls", "http://x"], "only the embedded backend"),
        (["--backend", "openenv"], "--env-urls"),
        (["--clip", "clipper"], "--clip 'clipper'"),
    ],
)
def test_bad_arguments_are_refused_before_writing(tmp_path, args, message):
    out = tmp_path / "run"
    proc = run_script(*args, "--output-dir", str(out))
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
    assert not out.exists()  # nothing written, so a corrected run needs no --overwrite


def test_resume_and_overwrite_errors(tmp_path):
    proc = run_script("--resume", str(tmp_path))
    assert proc.returncode != 0 and "no config.json" in proc.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"args": {"no_such_flag": 1}}))
    proc = run_script("--resume", str(run))
    assert proc.returncode != 0 and "unreadable or from another version" in proc.stderr
    proc = run_script("--resume", str(run / "config.json"))
    assert proc.returncode != 0 and "no config.json there" in proc.stderr
    proc = run_script("--resume", str(run), "--total-timesteps", "99")
    assert proc.returncode != 0 and "remove ['--total-timesteps']" in proc.stderr
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "precious.txt").write_text("keep me")
    proc = run_script("--output-dir", str(notes), "--overwrite")
    assert proc.returncode != 0 and "not a train_sb3.py run directory" in proc.stderr
    assert (notes / "precious.txt").read_text() == "keep me"
    target = tmp_path / "file.txt"
    target.write_text("keep me")
    proc = run_script("--output-dir", str(target))
    assert proc.returncode != 0 and "not a directory" in proc.stderr and target.read_text() == "keep me"


def test_help_explains_flags():
    proc = run_script("--help")
    assert proc.returncode == 0 and "MultiInputPolicy (image" in proc.stdout and "--resume" in proc.stdout
