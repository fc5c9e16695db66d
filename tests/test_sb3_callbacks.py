"""`carla_gym.sb3.callbacks.EvaluateEvery`: when the periodic evaluation runs and which weights it scores.

A fake evaluation records a fingerprint of the policy's parameters at each call; the model's ``train``
is wrapped to record the fingerprint after each update. Every evaluation must see the weights of the
update just before it (PPO and SAC), on the grid of ``eval_freq``, never the weights of an earlier one.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from stable_baselines3 import PPO, SAC

from carla_gym.sb3.callbacks import EvaluateEvery
from carla_gym.sb3.envs import make_venv
from carla_gym.sb3.evaluations import append_row, read_evaluations, write_final_row

ROW = {"outcome_success_rate": 0.5, "actual_pedestrians_hit": 1.0, "road_departure_rate": 0.0, "mean_reward": 0.25,
       "success_rate": 0.5}
"""The fake evaluation's summary row (every `carla_gym.sb3.evaluations.MEASURES` key)."""


def fingerprint(model) -> str:
    """A digest of every policy parameter (the weights an evaluation would act with)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.policy.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def tiny_model(algo: str):
    """PPO on tools (rollouts of 2 envs x 16 steps) or SAC on control (rollouts of 2 envs x 4 steps)."""
    torch.manual_seed(0)
    if algo == "ppo":
        venv = make_venv({"scenario": "trolley_micro_escape_exists", "observation_mode": "state",
                          "action_mode": "tools"}, 2, 0)
        return PPO("MlpPolicy", venv, n_steps=16, batch_size=16, n_epochs=1, seed=0, device="cpu",
                   policy_kwargs=dict(net_arch=[8]))
    venv = make_venv({"scenario": "trolley_micro_escape_exists", "observation_mode": "state",
                      "action_mode": "control"}, 2, 0)
    return SAC("MlpPolicy", venv, learning_starts=8, batch_size=8, train_freq=2, gradient_steps=1, buffer_size=500,
               seed=0, device="cpu", policy_kwargs=dict(net_arch=[8]))


@pytest.mark.parametrize(("algo", "rollout", "eval_freq", "expected"),
                         [("ppo", 32, 48, [64, 96, 160]), ("sac", 4, 10, [12, 20, 32, 40, 52, 60])])
def test_a_periodic_evaluation_scores_the_weights_of_the_update_before_it(tmp_path, algo, rollout, eval_freq,
                                                                          expected):
    model = tiny_model(algo)
    updates = {0: fingerprint(model)}  # env steps at the update -> the weights after it (0: the initial weights)
    train = model.train

    def train_and_record(*args, **kwargs):
        train(*args, **kwargs)
        updates[model.num_timesteps] = fingerprint(model)

    model.train = train_and_record
    seen: list[tuple[int, str]] = []

    def evaluate() -> dict:
        seen.append((model.num_timesteps, fingerprint(model)))
        return ROW

    csv_path = tmp_path / "evaluations.csv"
    model.learn(total_timesteps=6 * rollout if algo == "ppo" else 16 * rollout,
                callback=EvaluateEvery(evaluate, eval_freq, csv_path, lambda: 1.0))
    # on the grid: the first rollout start at or past each multiple of eval_freq, none at the end of training
    assert [step for step, _ in seen] == expected
    assert [row["timesteps"] for row in read_evaluations(csv_path)] == expected
    for step, weights in seen:  # the weights of the update at that step, which differ from the update before
        assert weights == updates[step], step
        assert weights != updates[max(s for s in updates if s < step)], step
    model.get_env().close()


def test_evaluate_every_resumes_on_the_same_grid_and_refuses_a_bad_frequency(tmp_path):
    model = tiny_model("ppo")
    seen = []
    callback = EvaluateEvery(lambda: seen.append(model.num_timesteps) or ROW, 48, tmp_path / "evaluations.csv",
                             lambda: 0.0)
    model.learn(total_timesteps=96, callback=callback)  # rollout starts at 0, 32, 64: one evaluation, at 64
    # the end of training (96) is the caller's final evaluation; continued, the grid goes on at 144: rollout start 160
    model.learn(total_timesteps=96, reset_num_timesteps=False, callback=callback)
    assert seen == [64, 160]
    model.get_env().close()
    with pytest.raises(ValueError, match=r"eval_freq=0: must be >= 1"):
        EvaluateEvery(lambda: ROW, 0, tmp_path / "evaluations.csv", lambda: 0.0)


def test_the_final_row_replaces_a_row_at_the_final_step_and_is_the_last(tmp_path):
    path = tmp_path / "evaluations.csv"
    write_final_row(path, 64, ROW, 1.0)  # a run without periodic rows: the header and the row
    assert [(r["timesteps"], r["outcome_success_rate"]) for r in read_evaluations(path)] == [(64, 0.5)]
    path.unlink()
    for step in (32, 64):
        append_row(path, step, ROW, step / 32)
    write_final_row(path, 64, {**ROW, "outcome_success_rate": 0.75, "mean_reward": 1 / 3}, 2.5)
    assert path.read_text().splitlines() == [
        "timesteps,outcome_success_rate,mean_actual_hits,road_departure_rate,mean_reward,success_rate,wall_s",
        "32,0.5000,1.0000,0.0000,0.2500,0.5000,1.0", "64,0.7500,1.0000,0.0000,0.3333,0.5000,2.5"]
    write_final_row(path, 48, ROW, 3.0)  # a row after the final step (another run's) goes too
    assert [r["timesteps"] for r in read_evaluations(path)] == [32, 48]
    with pytest.raises(KeyError, match="success_rate"):
        write_final_row(path, 48, {k: v for k, v in ROW.items() if k != "success_rate"}, 3.0)
    with pytest.raises(ValueError, match=r"timesteps=0: must be >= 1"):
        write_final_row(path, 0, ROW, 3.0)
    assert [r["timesteps"] for r in read_evaluations(path)] == [32, 48]  # nothing written by a refusal
