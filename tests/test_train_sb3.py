"""Smoke tests of train_sb3.py (the learning threshold lives in benchmarks/learn_ppo.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "train_sb3.py"), *args], capture_output=True, text=True,
                          timeout=600, cwd=REPO)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["MlpPolicy", "MultiInputPolicy"])
def test_train_sb3_smoke(tmp_path, policy):
    out = tmp_path / "run"
    proc = run_script("--total-timesteps", "128", "--n-envs", "2", "--n-steps", "64", "--batch-size", "32",
                      "--eval-episodes", "3", "--policy", policy, "--reward-mode", "physical", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.zip").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["policy"] == policy and config["scenario"] == ["trolley_micro_escape_exists"]
    assert config["reward_mode"] == "physical"
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["episodes"] == 3 and sum(evaluation["actions"].values()) == 3
    assert evaluation["total_timesteps"] == 128  # 2 envs x 64 steps: one rollout
    assert set(evaluation["per_scenario"]) == {"trolley_micro_escape_exists"}
    assert evaluation["success_rate"] in (0.0, 1 / 3, 2 / 3, 1.0)
    assert f"success rate {evaluation['success_rate']:.1%}" in proc.stdout
    # A second run into the same directory is refused without --overwrite.
    again = run_script("--total-timesteps", "64", "--output-dir", str(out))
    assert again.returncode != 0 and "--overwrite" in again.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scenario", "bias_-1v2"], "Unknown scenario"),
        (["--policy", "CnnPolicy"], "MlpPolicy"),
        (["--vec-env", "ray"], "dummy or subproc"),
        (["--ticks-per-action", "0"], "ticks_per_action"),
        (["--eval-episodes", "0"], "--eval-episodes"),
        (["--n-envs", "0"], "--n-envs"),
        (["--batch-size", "1"], "--batch-size"),
        (["--n-steps", "1", "--n-envs", "1"], "at least 2 steps"),
        (["--gamma", "1.5"], "--gamma"),
        (["--reward-mode", "dense"], "reward_mode"),
    ],
)
def test_train_sb3_rejects_bad_arguments_before_writing(tmp_path, args, message):
    out = tmp_path / "run"
    proc = run_script(*args, "--output-dir", str(out))
    assert proc.returncode != 0 and message in proc.stderr
    assert not out.exists()  # nothing written, so a corrected run needs no --overwrite


def test_train_sb3_refuses_a_file_as_output_dir(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("keep me")
    proc = run_script("--output-dir", str(target))
    assert proc.returncode != 0 and "not a directory" in proc.stderr and target.read_text() == "keep me"


def test_train_sb3_help_explains_flags():
    proc = run_script("--help")
    assert proc.returncode == 0 and "MultiInputPolicy (image" in proc.stdout and "run directory" in proc.stdout


def test_train_grpo_says_it_comes_later_and_fails():
    proc = subprocess.run([sys.executable, str(REPO / "train_grpo.py")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "later" in proc.stderr
