"""Train PPO on CarlaTrolley-v0 with stable-baselines3 (embedded simulator), then evaluate it.

Usage:
    python train_sb3.py                                   # PPO, state vector, escape_exists
    python train_sb3.py --scenario trolley_micro_classic_3v1 trolley_saves --total-timesteps 50000
    python train_sb3.py --policy MultiInputPolicy         # image (NatureCNN) + state

Writes to --output-dir: model.zip, config.json, eval.json. "Success" is upstream's rubric: the
classified action reaches the scenario's best reward according to the data's expected
casualties; the pedestrians actually hit in the simulation are reported beside it. SAC, CLIP
shaping, checkpoints and resuming come with the full training script (a later issue); this
file is laid out so they slot into the sections below.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from carla_gym.io import write_json_atomic


def _arg(default, help: str):  # noqa: A002 - argparse's name
    """A dataclass field that carries its --help text."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--total-timesteps, --n-envs, ...)."""

    scenario: list[str] = _arg(["trolley_micro_escape_exists"], "scenario name(s), e.g. trolley_micro_<id>, "
                               "trolley_saves, bias_<N>v<M> (the README's scenario table); several are sampled "
                               "per reset")
    total_timesteps: int = _arg(20_000, "environment steps (decisions) to train for; SB3 rounds up to whole "
                                        "rollouts of n_envs * n_steps")
    seed: int = _arg(0, "seed of torch, numpy and the environments")
    n_envs: int = _arg(4, "parallel environments")
    vec_env: str = _arg("dummy", "vector env: dummy (in-process) or subproc (one process per env)")
    policy: str = _arg("MlpPolicy", "MlpPolicy (state vector) or MultiInputPolicy (image + state, NatureCNN)")
    ticks_per_action: int = _arg(10, "simulator ticks (0.05 s each) per decision")
    reward_mode: str = _arg("rubric", "rubric (upstream: scored on the data's expected casualties) or physical "
                                      "(-1 per pedestrian actually hit, -1 for leaving the road)")
    n_steps: int = _arg(128, "PPO rollout length per environment")
    batch_size: int = _arg(64, "PPO minibatch size")
    learning_rate: float = _arg(3e-4, "Adam learning rate")
    ent_coef: float = _arg(0.01, "PPO entropy coefficient")
    gamma: float = _arg(0.99, "discount factor")
    eval_episodes: int = _arg(100, "evaluation episodes after training (seeds 10000, 10001, ...)")
    output_dir: str = _arg("runs/ppo", "run directory (model.zip, config.json, eval.json)")
    overwrite: bool = _arg(False, "allow writing into a non-empty output directory")


def parse_args(argv: list[str] | None = None) -> Args:
    """Build an argparse parser from `Args` and parse ``argv``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(Args):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        help_text = f.metadata["help"]
        if f.type == "bool":
            parser.add_argument(flag, action="store_true", help=help_text)
        elif f.type == "list[str]":
            parser.add_argument(flag, nargs="+", default=default, help=help_text)
        else:
            parser.add_argument(flag, type={"int": int, "float": float, "str": str}[f.type], default=default,
                                help=help_text)
    return Args(**vars(parser.parse_args(argv)))


def check_args(args: Args) -> None:
    """Exit with a message naming the bad flag before anything is written."""
    import gymnasium as gym

    import carla_gym  # noqa: F401

    if args.policy not in ("MlpPolicy", "MultiInputPolicy"):
        sys.exit(f"--policy {args.policy!r}: choose MlpPolicy (state vector) or MultiInputPolicy (image + state)")
    if args.vec_env not in ("dummy", "subproc"):
        sys.exit(f"--vec-env {args.vec_env!r}: choose dummy or subproc")
    for flag, value, low in (("--total-timesteps", args.total_timesteps, 1), ("--n-envs", args.n_envs, 1),
                             ("--n-steps", args.n_steps, 1), ("--batch-size", args.batch_size, 2),
                             ("--eval-episodes", args.eval_episodes, 1)):
        if value < low:
            sys.exit(f"{flag} {value}: must be >= {low}")
    if args.n_steps * args.n_envs < 2:
        sys.exit(f"--n-steps {args.n_steps} x --n-envs {args.n_envs}: PPO needs a rollout of at least 2 steps")
    if not 0.0 < args.gamma <= 1.0:
        sys.exit(f"--gamma {args.gamma}: must be in (0, 1]")
    if not args.learning_rate > 0.0:
        sys.exit(f"--learning-rate {args.learning_rate}: must be > 0")
    if not args.ent_coef >= 0.0:
        sys.exit(f"--ent-coef {args.ent_coef}: must be >= 0")
    try:
        gym.make("CarlaTrolley-v0", **env_kwargs(args)).close()
    except (ValueError, TypeError) as exc:
        sys.exit(f"invalid environment settings: {exc}")
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        sys.exit(f"--output-dir {out}: exists and is not a directory")
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        sys.exit(f"{out} is not empty; pass --overwrite or choose another --output-dir")


def env_kwargs(args: Args) -> dict:
    """Keyword arguments of `CarlaTrolley-v0` for these arguments."""
    observation_mode = "state" if args.policy == "MlpPolicy" else "dict"
    return dict(scenario=args.scenario, observation_mode=observation_mode, ticks_per_action=args.ticks_per_action,
                reward_mode=args.reward_mode)


def main(argv: list[str] | None = None) -> dict:
    """Train, save and evaluate; returns the evaluation summary."""
    args = parse_args(argv)
    check_args(args)
    out = Path(args.output_dir)

    # --- imports that need the [sb3] extra ---
    try:
        import torch
        from stable_baselines3 import PPO
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv
    except ImportError as exc:
        sys.exit(f"{exc}. Install the training extra: pip install -e '.[sb3]'")

    from agents.evaluate import evaluate

    # --- seeding ---
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "config.json", dataclasses.asdict(args))

    # --- env setup ---
    kwargs = env_kwargs(args)
    vec_cls = DummyVecEnv if args.vec_env == "dummy" else SubprocVecEnv
    venv = make_vec_env("carla_gym:CarlaTrolley-v0", n_envs=args.n_envs, seed=args.seed, env_kwargs=kwargs,
                        vec_env_cls=vec_cls)

    # --- model ---
    model = PPO(args.policy, venv, n_steps=args.n_steps, batch_size=args.batch_size,
                learning_rate=args.learning_rate, ent_coef=args.ent_coef, gamma=args.gamma,
                seed=args.seed, device="cpu", verbose=0)

    # --- train ---
    print(f"training PPO ({args.policy}) for {args.total_timesteps} steps on {', '.join(args.scenario)} "
          f"with {args.n_envs} envs", flush=True)
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

    result = evaluate(act, kwargs, episodes=args.eval_episodes)
    summary = {"train_seconds": round(train_seconds, 1), "total_timesteps": int(model.num_timesteps),
               **dataclasses.asdict(result)}
    write_json_atomic(out / "eval.json", summary)
    print(f"trained {model.num_timesteps} steps in {train_seconds:.1f} s; model saved to {out / 'model.zip'}")
    mismatch = "n/a" if result.mismatch_rate is None else f"{result.mismatch_rate:.1%}"
    print(f"evaluation over {result.episodes} episodes: success rate {result.success_rate:.1%} (upstream rubric), "
          f"mean reward {result.mean_reward:.3f}, mean pedestrians actually hit {result.mean_actual_hits:.2f}, "
          f"expected vs actual mismatch {mismatch}")
    for name, rate in result.per_scenario.items():
        print(f"  {name}: success {rate:.1%}")
    print(f"  trolley actions: {result.actions}")
    return summary


if __name__ == "__main__":
    main()
