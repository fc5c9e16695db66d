"""benchmarks/tune_sb3.py: the Optuna search runs, stores its study, continues it and shows the best trial."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import tune_sb3  # noqa: E402

TINY = ["--timesteps", "640", "--n-envs", "2", "--eval-episodes", "50", "--n-trials", "1"]


def test_a_trial_trains_validates_and_is_kept_in_the_journal(tmp_path, capsys):
    journal = tmp_path / "ppo.jsonl"
    assert tune_sb3.main([*TINY, "--storage", str(journal)]) == 0
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study = optuna.load_study(study_name="ppo_MlpPolicy", storage=JournalStorage(JournalFileBackend(str(journal))))
    (trial,) = study.trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and len(trial.intermediate_values) == 5
    assert set(trial.params) == {"net_arch", "n_steps", "batch_size", "n_epochs", "learning_rate", "ent_coef",
                                 "gamma", "gae_lambda", "clip_range"}
    first = capsys.readouterr().out
    best = [line for line in first.splitlines() if line.startswith("trial 0: validation success ")]
    assert len(best) == 1
    score = float(best[0].split("validation success ")[1].split()[0])
    assert score == trial.value == trial.intermediate_values[5]  # the last (fifth) validation is the trial's value
    assert 0.0 <= score <= 1.0 and score * 50 == round(score * 50)  # a share of the 50 validation episodes
    # rerunning continues the same study: a second trial, the preset's settings, and --show lists both
    assert tune_sb3.main([*TINY, "--n-trials", "2", "--storage", str(journal), "--enqueue-preset"]) == 0
    capsys.readouterr()
    assert tune_sb3.main(["--show", "--storage", str(journal)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert sorted(line.split(":")[0] for line in shown) == ["trial 0", "trial 1", "trial 2"]
    study = optuna.load_study(study_name="ppo_MlpPolicy", storage=JournalStorage(JournalFileBackend(str(journal))))
    assert study.trials[0].params != study.trials[2].params  # a continued study samples anew
    assert study.trials[1].params == tune_sb3.preset_params("ppo") == {
        "net_arch": "256x256", "clip_range": 0.2, "n_steps": 64, "batch_size": 256, "n_epochs": 10,
        "learning_rate": 1e-3, "ent_coef": 0.003, "gamma": 1.0, "gae_lambda": 1.0}


def test_validation_counts_whole_episodes_of_every_world():
    from stable_baselines3 import PPO

    from carla_gym.sb3.envs import make_venv

    venv = make_venv({"scenario": [tune_sb3.TRAIN], "reward_mode": "physical", "observation_mode": "state"}, 1, 0,
                     "batched")
    model = PPO("MlpPolicy", venv, n_steps=8, batch_size=8, seed=0, device="cpu")
    venv.close()
    first = tune_sb3.validate(model, "MlpPolicy", "ppo", 100)
    assert first == tune_sb3.validate(model, "MlpPolicy", "ppo", 100)  # deterministic
    assert first * 100 == round(first * 100)  # 2 episodes in each of the 50 worlds


def test_bad_sizes_are_refused_naming_the_flag(capsys):
    with pytest.raises(SystemExit):
        tune_sb3.main(["--n-trials", "0"])
    assert "--n-trials 0: must be >= 1" in capsys.readouterr().err
