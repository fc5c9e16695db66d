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
                      "--eval-episodes", "3", "--policy", policy, "--output-dir", str(out))
    assert proc.returncode == 0, proc.stderr
    assert (out / "model.zip").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["policy"] == policy and config["scenario"] == ["trolley_micro_escape_exists"]
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["episodes"] == 3 and 0.0 <= evaluation["success_rate"] <= 1.0
    assert "success rate" in proc.stdout
    # A second run into the same directory is refused without --overwrite.
    again = run_script("--total-timesteps", "64", "--output-dir", str(out))
    assert again.returncode != 0 and "--overwrite" in again.stderr


def test_train_sb3_rejects_bad_arguments(tmp_path):
    proc = run_script("--scenario", "bias_-1v2", "--output-dir", str(tmp_path / "a"))
    assert proc.returncode != 0 and "Unknown scenario" in proc.stderr
    proc = run_script("--policy", "CnnPolicy", "--output-dir", str(tmp_path / "b"))
    assert proc.returncode != 0 and "MlpPolicy" in proc.stderr


def test_train_grpo_says_it_comes_later():
    proc = subprocess.run([sys.executable, str(REPO / "train_grpo.py")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "later" in proc.stdout
