"""Search SB3 hyperparameters on the generated trolley family with Optuna, as RL Zoo does.

Usage:
    python benchmarks/tune_sb3.py --algo ppo --policy MlpPolicy --n-trials 24       # PPO on the state vector
    python benchmarks/tune_sb3.py --algo ppo --policy MultiInputPolicy --n-trials 12  # PPO on image + state
    python benchmarks/tune_sb3.py --algo sac --n-trials 16                            # SAC on control actions
    python benchmarks/tune_sb3.py --algo ppo --show                                   # the stored study's best

Each trial trains on ``trolley_generated_train`` with the outcome reward (``reward_mode="physical"``)
for ``--timesteps`` steps and is scored by outcome success of the deterministic policy on
``--eval-episodes`` validation episodes: train-split layouts drawn with seeds that training never
uses (seed 1,000,000 and up), so the held-out ``trolley_generated_test`` layouts stay unseen until
the final evaluation. Intermediate scores at every fifth of training feed Optuna's median pruner
(RL Zoo's choice). The study is stored in ``benchmarks/tuning/<algo>_<policy>.jsonl`` (Optuna's
journal file, text): rerunning the command continues it; ``--show`` prints the best trials.
Needs the ``study`` extra (Optuna). A PPO minibatch larger than one rollout (``n_steps`` x ``--n-envs``) is cut
to the rollout.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TRAIN, VALIDATION_SEED = "trolley_generated_train", 1_000_000
N_EVAL_ENVS = 50
"""Batched worlds of the validation rollouts (each plays ``eval_episodes / 50`` episodes)."""


def validate(model, policy: str, algo: str, episodes: int, seed: int = VALIDATION_SEED) -> float:
    """Outcome success of ``model`` (deterministic) on ``episodes`` train-split layouts of unseen seeds.

    Every one of `N_EVAL_ENVS` batched worlds plays ``episodes // N_EVAL_ENVS`` whole episodes (a world's
    extra episodes are not counted, so short episodes are not favoured).

    Returns:
        The share of counted episodes whose actual outcome equals the best one, in [0, 1].
    """
    from carla_gym.sb3.envs import make_venv

    per_env = max(episodes // N_EVAL_ENVS, 1)
    kwargs = dict(scenario=[TRAIN], reward_mode="physical", action_mode="tools" if algo == "ppo" else "control",
                  observation_mode="state" if policy == "MlpPolicy" else "dict")
    venv = make_venv(kwargs, N_EVAL_ENVS, seed, "batched")
    try:
        obs = venv.reset()
        done_count = np.zeros(N_EVAL_ENVS, dtype=int)
        successes = 0
        while (done_count < per_env).any():
            action, _ = model.predict(obs, deterministic=True)
            obs, _, dones, infos = venv.step(action)
            for i in np.flatnonzero(dones):
                if done_count[i] < per_env:
                    successes += bool(infos[i]["outcome"]["outcome_success"])
                done_count[i] += 1
        return successes / (per_env * N_EVAL_ENVS)
    finally:
        venv.close()


def sample(trial, algo: str) -> dict:
    """Hyperparameters of one trial (SB3's names); the search space of RL Zoo's samplers, narrowed to this task."""
    if algo == "ppo":
        arch = trial.suggest_categorical("net_arch", ["64x64", "256x256", "256x256x256"])
        return dict(
            n_steps=trial.suggest_categorical("n_steps", [32, 64, 128, 256]),
            batch_size=trial.suggest_categorical("batch_size", [64, 128, 256, 512]),
            n_epochs=trial.suggest_categorical("n_epochs", [4, 10, 20]),
            learning_rate=trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
            ent_coef=trial.suggest_float("ent_coef", 1e-4, 0.1, log=True),
            gamma=trial.suggest_categorical("gamma", [0.9, 0.95, 0.99, 1.0]),
            gae_lambda=trial.suggest_categorical("gae_lambda", [0.8, 0.9, 0.95, 1.0]),
            clip_range=trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3]),
            policy_kwargs=dict(net_arch=[int(x) for x in arch.split("x")]))
    arch = trial.suggest_categorical("net_arch", ["64x64", "256x256"])
    return dict(
        learning_rate=trial.suggest_float("learning_rate", 1e-4, 3e-3, log=True),
        batch_size=trial.suggest_categorical("batch_size", [64, 256, 512]),
        buffer_size=trial.suggest_categorical("buffer_size", [50_000, 200_000]),
        learning_starts=trial.suggest_categorical("learning_starts", [500, 2000]),
        train_freq=trial.suggest_categorical("train_freq", [1, 4, 16]),
        gradient_steps=trial.suggest_categorical("gradient_steps", [1, 2, 4]),
        gamma=trial.suggest_categorical("gamma", [0.9, 0.98, 1.0]),
        tau=trial.suggest_categorical("tau", [0.005, 0.02]),
        policy_kwargs=dict(net_arch=[int(x) for x in arch.split("x")]))


def preset_params(algo: str) -> dict:
    """The ``cpu`` preset's settings on the generated family as a trial's parameters (`sample`'s names).

    ``--enqueue-preset`` runs them as the next trial, so the study scores the preset as it scores every sample.
    """
    from carla_gym.sb3 import presets

    hyper = presets.hyperparameters("cpu", algo, generated=True)
    arch = "x".join(str(n) for n in hyper.get("policy_kwargs", {}).get("net_arch", [256, 256]))  # SB3's SAC default
    names = ("n_steps", "batch_size", "n_epochs", "learning_rate", "ent_coef", "gamma", "gae_lambda", "clip_range")
    if algo == "ppo":
        return {"net_arch": arch, "clip_range": 0.2, **{k: hyper[k] for k in names if k in hyper}}
    names = ("learning_rate", "batch_size", "buffer_size", "learning_starts", "train_freq", "gradient_steps", "gamma",
             "tau")
    return {"net_arch": arch, **{k: hyper[k] for k in names}}


def objective(trial, args) -> float:
    """Train one trial, reporting validation success at every fifth of ``--timesteps`` (pruned by the median)."""
    import optuna
    import torch
    from stable_baselines3 import PPO, SAC

    from carla_gym.sb3.envs import make_venv

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    hyper = sample(trial, args.algo)
    if args.algo == "ppo":  # a minibatch is at most one rollout
        hyper["batch_size"] = min(hyper["batch_size"], hyper["n_steps"] * args.n_envs)
    kwargs = dict(scenario=[TRAIN], reward_mode="physical", action_mode="tools" if args.algo == "ppo" else "control",
                  observation_mode="state" if args.policy == "MlpPolicy" else "dict")
    venv = make_venv(kwargs, args.n_envs, args.seed, "batched")
    algo = PPO if args.algo == "ppo" else SAC
    model = algo(args.policy, venv, seed=args.seed, device="cpu", verbose=0, **hyper)
    start, score = time.perf_counter(), 0.0
    try:
        for k in range(1, 6):
            model.learn(args.timesteps // 5, reset_num_timesteps=False)
            score = validate(model, args.policy, args.algo, args.eval_episodes)
            trial.report(score, k)
            print(f"trial {trial.number} step {model.num_timesteps}: {score:.3f} ({time.perf_counter() - start:.0f} s)",
                  flush=True)
            if trial.should_prune():
                raise optuna.TrialPruned()
    finally:
        venv.close()
    return score


def main(argv: list[str] | None = None) -> int:
    """Run (or continue) the study, or ``--show`` it."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", choices=["ppo", "sac"], default="ppo")
    parser.add_argument("--policy", choices=["MlpPolicy", "MultiInputPolicy"], default="MlpPolicy")
    parser.add_argument("--n-trials", type=int, default=24, help="trials to add to the study")
    parser.add_argument("--timesteps", type=int, default=65_536, help="training steps per trial")
    parser.add_argument("--n-envs", type=int, default=16, help="batched training worlds")
    parser.add_argument("--eval-episodes", type=int, default=400, help="validation episodes per score")
    parser.add_argument("--seed", type=int, default=0, help="seed of torch and the training worlds; the sampler's is "
                        "this plus the trials already in the study")
    parser.add_argument("--storage", type=Path, default=None, help="journal file (default benchmarks/tuning/...)")
    parser.add_argument("--show", action="store_true", help="print the stored study's best trials and exit")
    parser.add_argument("--enqueue-preset", action="store_true",
                        help="run the cpu preset's settings as the next trial (a reference scored like every sample)")
    args = parser.parse_args(argv)
    for name in ("n_trials", "timesteps", "n_envs", "eval_episodes"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: must be >= 1")
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    path = args.storage or HERE / "tuning" / f"{args.algo}_{args.policy}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(path)))
    name = f"{args.algo}_{args.policy}"
    known = len(optuna.load_study(study_name=name, storage=storage).trials) if name in optuna.get_all_study_names(
        storage) else 0
    # a continued study samples anew: the sampler's seed moves on by the trials already run (else TPE's random
    # start-up would propose the first trials again)
    study = optuna.create_study(
        study_name=name, storage=storage, load_if_exists=True, direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=args.seed + known),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=2))
    if args.enqueue_preset:
        study.enqueue_trial(preset_params(args.algo))
    if not args.show:
        study.optimize(lambda trial: objective(trial, args), n_trials=args.n_trials)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        print("no complete trial yet", file=sys.stderr)
        return 1
    for t in sorted(done, key=lambda t: -t.value)[:5]:
        print(f"trial {t.number}: validation success {t.value:.3f}  {t.params}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
