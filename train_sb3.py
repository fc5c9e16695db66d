"""Train PPO on CarlaTrolley-v0 with stable-baselines3 (embedded simulator), then evaluate it.

Usage:
    python train_sb3.py                                   # PPO, state vector, escape_exists
    python train_sb3.py --scenario trolley_micro_classic_3v1 trolley_saves --total-timesteps 50000
    python train_sb3.py --policy MultiInputPolicy         # image (NatureCNN) + state

Writes to --output-dir: model.zip, config.json, eval.json. SAC, CLIP shaping, checkpoints and
resuming come with the full training script (a later issue); this file is laid out so they
slot into the sections below.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Args:
    """Command-line arguments (each field is a flag: --total-timesteps, --n-envs, ...)."""

    scenario: list[str] = field(default_factory=lambda: ["trolley_micro_escape_exists"])
    """scenario name(s); several are sampled per reset"""
    total_timesteps: int = 20_000
    """environment steps (decisions) to train for"""
    seed: int = 0
    """seed of torch, numpy and the environments"""
    n_envs: int = 4
    """parallel environments"""
    vec_env: str = "dummy"
    """vector env: dummy (in-process) or subproc (one process per env)"""
    policy: str = "MlpPolicy"
    """MlpPolicy (state vector) or MultiInputPolicy (image + state)"""
    ticks_per_action: int = 10
    """simulator ticks (0.05 s) per decision"""
    n_steps: int = 128
    """PPO rollout length per environment"""
    batch_size: int = 64
    """PPO minibatch size"""
    learning_rate: float = 3e-4
    """Adam learning rate"""
    ent_coef: float = 0.01
    """PPO entropy coefficient"""
    gamma: float = 0.99
    """discount factor"""
    eval_episodes: int = 100
    """evaluation episodes after training"""
    output_dir: str = "runs/ppo"
    """run directory"""
    overwrite: bool = False
    """allow writing into a non-empty output directory"""


def parse_args(argv: list[str] | None = None) -> Args:
    """Build an argparse parser from `Args` and parse ``argv``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", help=f"(default: {default})")
        elif f.type == "list[str]":
            parser.add_argument(flag, nargs="+", default=default, help=f"(default: {default})")
        else:
            parser.add_argument(flag, type=eval(f.type), default=default, help=f"(default: {default})")  # noqa: S307
    return Args(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> dict:
    """Train, save and evaluate; returns the evaluation summary."""
    args = parse_args(argv)
    if args.policy not in ("MlpPolicy", "MultiInputPolicy"):
        sys.exit(f"--policy {args.policy!r}: choose MlpPolicy (state vector) or MultiInputPolicy (image + state)")
    if args.vec_env not in ("dummy", "subproc"):
        sys.exit(f"--vec-env {args.vec_env!r}: choose dummy or subproc")
    out = Path(args.output_dir)
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        sys.exit(f"{out} is not empty; pass --overwrite or choose another --output-dir")

    # --- imports that need the [sb3] extra ---
    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
    except ImportError as exc:
        sys.exit(f"{exc}. Install the training extra: pip install -e '.[sb3]'")

    import carla_gym  # noqa: F401
    from agents.evaluate import evaluate
    from carla_gym.sim.scenarios import resolve_scenario

    for name in args.scenario:
        try:
            resolve_scenario(name)
        except ValueError as exc:
            sys.exit(str(exc))

    # --- seeding ---
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(args), indent=2))

    # --- env setup ---
    observation_mode = "state" if args.policy == "MlpPolicy" else "dict"
    env_kwargs = dict(scenario=args.scenario, observation_mode=observation_mode, ticks_per_action=args.ticks_per_action)
    vec_cls = DummyVecEnv if args.vec_env == "dummy" else SubprocVecEnv
    venv = make_vec_env("carla_gym:CarlaTrolley-v0", n_envs=args.n_envs, seed=args.seed, env_kwargs=env_kwargs,
                        vec_env_cls=vec_cls)

    # --- model ---
    model = PPO(args.policy, venv, n_steps=args.n_steps, batch_size=args.batch_size,
                learning_rate=args.learning_rate, ent_coef=args.ent_coef, gamma=args.gamma,
                seed=args.seed, device="cpu", verbose=0)

    # --- train ---
    start = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps, progress_bar=sys.stderr.isatty())
    train_seconds = time.perf_counter() - start
    venv.close()

    # --- save ---
    tmp = out / "model.tmp.zip"
    model.save(tmp)
    os.replace(tmp, out / "model.zip")

    # --- evaluate ---
    def act(obs, info):
        action, _ = model.predict(obs, deterministic=True)
        return int(action)

    result = evaluate(act, env_kwargs, episodes=args.eval_episodes)
    summary = {"train_seconds": round(train_seconds, 1), "total_timesteps": args.total_timesteps,
               **dataclasses.asdict(result)}
    tmp = out / "eval.tmp.json"
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, out / "eval.json")
    print(f"trained {args.total_timesteps} steps in {train_seconds:.1f} s; model saved to {out / 'model.zip'}")
    print(f"evaluation over {result.episodes} episodes: success rate {result.success_rate:.1%}, "
          f"mean reward {result.mean_reward:.3f}, mean pedestrians hit {result.mean_actual_hits:.2f}")
    for name, rate in result.per_scenario.items():
        print(f"  {name}: success {rate:.1%}")
    print(f"  trolley actions: {result.actions}")
    return summary


if __name__ == "__main__":
    main()
