"""Train PPO or SAC on CarlaTrolley-v0 with stable-baselines3, optionally with CLIP reward shaping.

Usage:
    python train_sb3.py                                            # PPO, tools, state vector, escape_exists
    python train_sb3.py --scenario mixed --total-timesteps 100000  # a suite (carla_gym.suites) or names
    python train_sb3.py --algo sac                                 # SAC on control actions [steer, throttle]
    python train_sb3.py --policy MultiInputPolicy                  # 84x84 image (NatureCNN) + state
    python train_sb3.py --clip vit-b-32 --clip-pretrained laion2b_s34b_b79k   # CLIP-shaped rewards
    python train_sb3.py --preset vlm-rl --algo sac                 # VLM-RL's published hyperparameters
    python train_sb3.py --resume runs/ppo                          # continue an interrupted run

One run directory (--output-dir) holds: config.json (the resolved arguments and hyperparameters),
model.zip (final model), checkpoints/step_<N>/ (resumable: model, replay buffer, random states,
envs), tb/ (TensorBoard: env reward as rollout/ep_rew_mean, shaped reward as
rollout/ep_shaped_rew_mean, CLIP similarities under clip/), evaluations.csv (periodic evaluations,
appended as they finish), eval.json and eval.csv (final evaluation per scenario, with the oracle's
reward) and learning_curve.png. Evaluation always scores with upstream's rubric on seeds 10000,
10001, ... ("success": the classified action reaches the scenario's best reward).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from carla_gym.cli_args import arg, check_minimums, parser_for
from carla_gym.io import discard_set_aside, set_aside, write_csv_atomic, write_json_atomic


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--total-timesteps, --n-envs, ...)."""

    algo: str = arg("ppo", "ppo or sac (sac needs --action-mode control)")
    action_mode: str = arg("auto", "tools (Discrete(4)), control (Box: steer, throttle/brake) or auto (tools for "
                                    "ppo, control for sac)")
    scenario: list[str] = arg(["trolley_micro_escape_exists"], "scenario or suite names (suites: micro, "
                               "micro_deadzone, trainable, probes, mixed, action_bias); several are sampled per reset")
    total_timesteps: int = arg(0, "environment steps (decisions) to train; 0: the preset's default")
    preset: str = arg("cpu", "hyperparameters: cpu (fast here) or vlm-rl (VLM-RL's published settings)")
    seed: int = arg(0, "seed of torch, numpy and the environments")
    n_envs: int = arg(4, "parallel environments")
    vec_env: str = arg("dummy", "vector env: dummy (in-process; exact resume) or subproc (one process per env)")
    policy: str = arg("MlpPolicy", "MlpPolicy (state vector) or MultiInputPolicy (image + state, NatureCNN)")
    ticks_per_action: int = arg(10, "simulator ticks (0.05 s each) per decision")
    reward_mode: str = arg("rubric", "training reward: rubric (upstream) or physical (-1 per pedestrian "
                                      "actually hit, -1 for leaving the road)")
    backend: str = arg("embedded", "embedded or openenv (remote OpenEnv CARLA servers, see --env-urls)")
    env_urls: list[str] = arg([], "OpenEnv server URLs for --backend openenv; env i uses URL i mod len")
    clip: str = arg("none", "CLIP shaping: none, vit-b-32 (CPU-sized) or vlm-rl (ViT-bigG-14, VLM-RL's prompts, "
                             "preprocessing and synthesis)")
    clip_pretrained: str = arg("", "open_clip pretrained tag or checkpoint path; empty: the preset's (vlm-rl) "
                                    "or random weights (vit-b-32: no signal, for smoke tests)")
    clip_mode: str = arg("", "replace (VLM-RL) or add; empty: the preset's (vlm-rl: replace, vit-b-32: add)")
    clip_weight: float = arg(0.1, "weight of the CLIP reward in add mode")
    clip_device: str = arg("cpu", "torch device of the CLIP model, e.g. cuda")
    hp: list[str] = arg([], "hyperparameter overrides name=value with SB3's names, e.g. n_steps=64 gamma=0.95 "
                             "(applied over the preset)")
    eval_freq: int = arg(0, "env steps between evaluations; 0: 10 per run")
    eval_episodes: int = arg(100, "final evaluation episodes per scenario (periodic ones use a fifth)")
    checkpoint_freq: int = arg(0, "env steps between checkpoints; 0: 10 per run")
    output_dir: str = arg("runs/ppo", "run directory")
    overwrite: bool = arg(False, "allow writing into a non-empty output directory")
    resume: str = arg("", "continue the run in this directory from its last checkpoint (other flags are "
                           "taken from its config.json)")
    progress_bar: bool = arg(False, "show a progress bar (on by default when stderr is a terminal)")


def parse_args(argv: list[str] | None = None) -> Args:
    """Parse ``argv`` into `Args`."""
    return Args(**vars(parser_for(Args, description=__doc__.splitlines()[0]).parse_args(argv)))


def resolve(args: Args) -> Args:
    """Fill the automatic choices (action mode, timesteps, frequencies) and expand suites."""
    from carla_gym.sb3.presets import DEFAULT_TIMESTEPS
    from carla_gym.suites import resolve_scenarios

    args = dataclasses.replace(args)
    if args.action_mode == "auto":
        args.action_mode = "control" if args.algo == "sac" else "tools"
    if args.total_timesteps == 0 and (args.preset, args.algo) in DEFAULT_TIMESTEPS:
        args.total_timesteps = DEFAULT_TIMESTEPS[(args.preset, args.algo)]
    if args.eval_freq == 0:
        args.eval_freq = max(args.total_timesteps // 10, 1)
    if args.checkpoint_freq == 0:
        args.checkpoint_freq = max(args.total_timesteps // 10, 1)
    if args.clip != "none":
        if not args.clip_mode:
            args.clip_mode = "replace" if args.clip == "vlm-rl" else "add"
        if not args.clip_pretrained and args.clip == "vlm-rl":
            from carla_gym.reward.encoder import FAITHFUL_MODEL  # no torch import: open_clip loads lazily

            args.clip_pretrained = FAITHFUL_MODEL[1]
    try:
        args.scenario = list(resolve_scenarios(args.scenario))
    except ValueError as exc:
        sys.exit(f"--scenario: {exc}")
    return args


def check_args(args: Args, resuming: bool = False) -> dict:
    """Exit with a message naming the bad flag before anything is written; returns the ``--hp`` overrides."""
    import gymnasium as gym

    import carla_gym  # noqa: F401
    from carla_gym.sb3.presets import ALGOS, PRESETS

    for flag, value, valid in (("--algo", args.algo, ALGOS), ("--preset", args.preset, PRESETS),
                               ("--action-mode", args.action_mode, ("tools", "control")),
                               ("--policy", args.policy, ("MlpPolicy", "MultiInputPolicy")),
                               ("--vec-env", args.vec_env, ("dummy", "subproc")),
                               ("--backend", args.backend, ("embedded", "openenv")),
                               ("--clip", args.clip, ("none", "vit-b-32", "vlm-rl"))):
        if value not in valid:
            sys.exit(f"{flag} {value!r}: choose one of {list(valid)}")
    if args.algo == "sac" and args.action_mode != "control":
        sys.exit("--algo sac needs continuous actions: use --action-mode control (or auto); the tool actions are "
                 "Discrete(4), which SAC cannot drive")
    if args.clip != "none" and args.clip_mode not in ("replace", "add"):
        sys.exit(f"--clip-mode {args.clip_mode!r}: choose replace or add")
    if args.clip != "none" and args.backend == "openenv":
        sys.exit("--clip needs the top-down reward camera, which only the embedded backend renders; use "
                 "--backend embedded or --clip none")
    if args.backend == "openenv" and not args.env_urls:
        sys.exit("--backend openenv needs --env-urls URL [URL ...] (servers started with carla-gym serve)")
    check_minimums((("--total-timesteps", args.total_timesteps, 1), ("--n-envs", args.n_envs, 1),
                    ("--eval-episodes", args.eval_episodes, 1), ("--eval-freq", args.eval_freq, 1),
                    ("--checkpoint-freq", args.checkpoint_freq, 1)))
    hyper = overrides(args)
    for name, low, high in (("gamma", 0.0, 1.0), ("learning_rate", 0.0, 1.0), ("tau", 0.0, 1.0)):
        value = hyper.get(name)
        if isinstance(value, bool) or (isinstance(value, int | float) and not low < value <= high):
            sys.exit(f"--hp {name}={value}: must be in ({low}, {high}]")
    for name, low in (("batch_size", 2), ("n_steps", 1), ("buffer_size", 1), ("n_epochs", 1)):
        value = hyper.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            sys.exit(f"--hp {name}={value!r}: must be an integer >= {low}")
    n_steps = hyper.get("n_steps", 128 if args.preset == "cpu" else 1024)
    if args.algo == "ppo" and n_steps * args.n_envs < 2:
        sys.exit(f"--hp n_steps={n_steps} x --n-envs {args.n_envs}: PPO needs a rollout of at least 2 steps")
    try:
        gym.make("CarlaTrolley-v0", **env_kwargs(args, url=None if args.backend == "embedded" else "")).close()
    except (ValueError, TypeError) as exc:
        sys.exit(f"invalid environment settings: {exc}")
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        sys.exit(f"--output-dir {out}: exists and is not a directory")
    if not resuming and out.exists() and any(out.iterdir()):
        if not args.overwrite:
            hint = f", --resume {out} to continue it" if (out / "checkpoints" / "latest").exists() else ""
            sys.exit(f"{out} is not empty; pass --overwrite to replace the run in it{hint}, or choose another "
                     "--output-dir")
        if not (out / "config.json").is_file():
            sys.exit(f"--overwrite {out}: refusing to replace a folder that is not a train_sb3.py run directory "
                     "(no config.json); choose another --output-dir")
    return hyper


def overrides(args: Args) -> dict:
    """The ``--hp name=value`` overrides as a dict (values parsed as Python literals).

    Raises:
        SystemExit: A malformed override or a name the algorithm does not take.
    """
    import ast
    import inspect

    from stable_baselines3 import PPO, SAC

    params = inspect.signature((PPO if args.algo == "ppo" else SAC).__init__).parameters
    valid = sorted(set(params) - {"self", "policy", "env", "seed", "device", "verbose", "tensorboard_log",
                                  "_init_setup_model"})
    out = {}
    for item in args.hp:
        name, sep, text = item.partition("=")
        if not sep:
            sys.exit(f"--hp {item!r}: write name=value, e.g. n_steps=64")
        if name not in valid:
            sys.exit(f"--hp {name!r}: not a {args.algo.upper()} hyperparameter; valid: {valid}")
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[name] = text  # a string, e.g. ent_coef=auto
    return out


def env_kwargs(args: Args, url: str | None = None) -> dict:
    """Keyword arguments of `CarlaTrolley-v0` for these arguments (``url``: OpenEnv server, if any)."""
    kwargs = dict(scenario=args.scenario, action_mode=args.action_mode, ticks_per_action=args.ticks_per_action,
                  observation_mode="state" if args.policy == "MlpPolicy" else "dict", reward_mode=args.reward_mode)
    if args.clip != "none":
        kwargs["reward_frame_size"] = 224
    if url:  # a checked URL; "" during validation skips the connection
        kwargs.update(backend="openenv", base_url=url)
    return kwargs


def clip_model(args: Args):
    """The CLIP reward model and shaping options for ``--clip``."""
    from carla_gym.reward import DEFAULT_MODEL, FAITHFUL_MODEL, CLIPRewardModel, OpenClipEncoder

    if args.clip == "vlm-rl":
        encoder = OpenClipEncoder(FAITHFUL_MODEL[0], args.clip_pretrained, device=args.clip_device,
                                  preprocess="vlm_rl")
        return CLIPRewardModel(encoder, head="clg", prompts="vlm_rl"), True
    encoder = OpenClipEncoder(DEFAULT_MODEL, args.clip_pretrained or None, device=args.clip_device)
    if not args.clip_pretrained:
        print("note: --clip vit-b-32 without --clip-pretrained uses random weights: the CLIP reward carries no "
              "signal (a smoke test of the pipeline)", flush=True)
    return CLIPRewardModel(encoder, head="clg", prompts="trolley"), False


def main(argv: list[str] | None = None) -> dict:
    """Train, checkpoint, evaluate and plot; returns the final evaluation summary."""
    args = parse_args(argv)
    resuming = bool(args.resume)
    if resuming:  # the run's own settings; only the output folder comes from --resume
        run = Path(args.resume)
        given = [a for a in (sys.argv[1:] if argv is None else argv) if a.startswith("--")]
        extra_flags = sorted(set(given) - {"--resume", "--progress-bar"})
        if extra_flags:
            sys.exit(f"--resume takes every setting from {run / 'config.json'}; remove {extra_flags} (to change "
                     "settings, start a new run)")
        try:
            saved = json.loads((run / "config.json").read_text())["args"]
            args = Args(**{**saved, "resume": str(run), "output_dir": str(run), "progress_bar": args.progress_bar})
        except (FileNotFoundError, NotADirectoryError):
            sys.exit(f"--resume {run}: no config.json there; is it a run directory written by train_sb3.py?")
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            sys.exit(f"--resume {run}: config.json is unreadable or from another version ({exc!r})")
        if (run / "eval.json").exists():
            sys.exit(f"--resume {run}: this run is complete (eval.json exists); start a new run to train more")
    else:
        args = resolve(args)
    hp_overrides = check_args(args, resuming)
    out = Path(args.output_dir)

    # --- imports that need the [sb3] extra ---
    try:
        import numpy as np
        import torch
        from stable_baselines3 import PPO, SAC
        from stable_baselines3.common.callbacks import BaseCallback, CallbackList
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

        from carla_gym.sb3.checkpoint import CheckpointEvery, latest_checkpoint, restore_state
        from carla_gym.sb3.presets import hyperparameters, replay_buffer_bytes
    except ImportError as exc:
        sys.exit(f"{exc}. Install the training extra: pip install -e '.[sb3]'")
    from agents.evaluate import evaluate_suite

    checkpoint, wall_offset = None, 0.0
    if resuming:
        checkpoint = latest_checkpoint(out / "checkpoints")
        if checkpoint is None:
            sys.exit(f"--resume {out}: no complete checkpoint in {out / 'checkpoints'}; start a new run instead")

    # --- seeding ---
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    algo_cls = PPO if args.algo == "ppo" else SAC
    hyper = {**hyperparameters(args.preset, args.algo), **hp_overrides}

    # --- env setup ---
    vec_cls = DummyVecEnv if args.vec_env == "dummy" else SubprocVecEnv
    if args.backend == "openenv":
        import gymnasium as gym
        from stable_baselines3.common.monitor import Monitor

        urls = args.env_urls
        makers = [lambda i=i: Monitor(gym.make("CarlaTrolley-v0", **env_kwargs(args, urls[i % len(urls)])))
                  for i in range(args.n_envs)]
        venv = vec_cls(makers)
        venv.seed(args.seed)
    else:
        venv = make_vec_env("carla_gym:CarlaTrolley-v0", n_envs=args.n_envs, seed=args.seed,
                            env_kwargs=env_kwargs(args), vec_env_cls=vec_cls)
    if args.clip != "none":
        from carla_gym.reward import clip_vec_env

        try:
            model_clip, synthesis = clip_model(args)
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            sys.exit(f"--clip {args.clip}: {exc}")
        weight = args.clip_weight if args.clip_mode == "add" else 1.0
        venv = clip_vec_env(venv, model_clip, mode=args.clip_mode, weight=weight, synthesis=synthesis)

    # --- model ---
    if checkpoint is not None:
        model = algo_cls.load(checkpoint / "model.zip", env=venv, device="cpu", force_reset=False)
        model.tensorboard_log = str(out / "tb")
        if (checkpoint / "replay_buffer.pkl").is_file():
            model.load_replay_buffer(checkpoint / "replay_buffer.pkl")
        exact, extra = restore_state(model, checkpoint)
        wall_offset = extra.get("wall_s", 0.0)
        if "shaper" in extra and hasattr(venv, "shaper"):
            venv.shaper.set_state(extra["shaper"])
        drop_rows_after(out / "evaluations.csv", model.num_timesteps)  # they are redone
        notes = [] if exact else ["environments restart (subproc)"]
        if getattr(model, "use_sde", False):
            notes.append("gSDE noise is redrawn")
        print(f"resuming {out} from {checkpoint.name} ({model.num_timesteps} of {args.total_timesteps} steps"
              f"{'; not bit-identical: ' + ', '.join(notes) if notes else ''})", flush=True)
    else:
        try:
            model = algo_cls(args.policy, venv, seed=args.seed, device="cpu", verbose=0,
                             tensorboard_log=str(out / "tb"), **hyper)
        except (ValueError, TypeError, AssertionError) as exc:
            venv.close()
            sys.exit(f"invalid hyperparameters {hyper}: {exc}")
        if out.exists() and args.overwrite:  # kept aside until the new run has finished
            set_aside(out)
        out.mkdir(parents=True, exist_ok=True)
        write_json_atomic(out / "config.json", {"args": dataclasses.asdict(args),
                                                "hyperparameters": {k: repr(v) for k, v in hyper.items()}})
    if args.algo == "sac":
        obs_bytes = sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in
                        (venv.observation_space.spaces.values() if hasattr(venv.observation_space, "spaces")
                         else [venv.observation_space]))
        gib = replay_buffer_bytes(model.buffer_size, obs_bytes) / 2**30
        print(f"SAC replay buffer: {model.buffer_size} transitions, about {gib:.2f} GiB when full", flush=True)

    # --- callbacks: evaluation, logging, checkpoints ---
    eval_kwargs = {**env_kwargs(args), "reward_mode": "rubric"}
    eval_kwargs.pop("reward_frame_size", None)
    eval_kwargs.pop("scenario")
    csv_path = out / "evaluations.csv"

    def act(obs, info):
        action, _ = model.predict(obs, deterministic=True)
        return int(action) if args.action_mode == "tools" else action

    class Evaluate(BaseCallback):
        """Evaluate every eval_freq steps; append a row to evaluations.csv as soon as it is done."""

        def __init__(self) -> None:
            super().__init__()
            self._next = 0

        def _on_training_start(self) -> None:
            self._next = (self.num_timesteps // args.eval_freq + 1) * args.eval_freq

        def _on_step(self) -> bool:
            for info in self.locals.get("infos", []):
                if "shaped_episode" in info:
                    self.logger.record_mean("rollout/ep_shaped_rew_mean", info["shaped_episode"]["r"])
                for key in ("clip_sim_pos", "clip_sim_neg", "clip_reward", "env_reward"):
                    if key in info:
                        self.logger.record_mean(f"clip/{key.removeprefix('clip_')}", info[key])
            if self.num_timesteps >= self._next:
                self._next = (self.num_timesteps // args.eval_freq + 1) * args.eval_freq
                result = evaluate_suite(act, eval_kwargs, args.scenario, max(args.eval_episodes // 5, 1),
                                        oracle=False)
                self.logger.record("eval/success_rate", result["success_rate"])
                self.logger.record("eval/mean_reward", result["mean_reward"])
                new = not csv_path.exists()
                with open(csv_path, "a", newline="") as f:
                    writer = csv.writer(f)
                    if new:
                        writer.writerow(["timesteps", "success_rate", "mean_reward", "wall_s"])
                    writer.writerow([self.num_timesteps, f"{result['success_rate']:.4f}",
                                     f"{result['mean_reward']:.4f}", f"{elapsed():.1f}"])
            return True

    def elapsed() -> float:  # training wall time [s] over every process of this run
        return wall_offset + time.perf_counter() - start

    def checkpoint_extra() -> dict:
        extra = {"wall_s": elapsed()}
        if hasattr(venv, "shaper"):
            extra["shaper"] = venv.shaper.get_state()
        return extra

    saver = CheckpointEvery(out / "checkpoints", args.checkpoint_freq, checkpoint_extra)
    callbacks = CallbackList([Evaluate(), saver])

    # --- train ---
    remaining = args.total_timesteps - model.num_timesteps
    print(f"training {args.algo.upper()} ({args.policy}, {args.action_mode} actions, preset {args.preset}) for "
          f"{args.total_timesteps} steps on {len(args.scenario)} scenario(s) with {args.n_envs} envs; "
          f"run directory {out}", flush=True)
    start = time.perf_counter()
    if remaining > 0:
        model.learn(total_timesteps=remaining, callback=callbacks, reset_num_timesteps=False,
                    progress_bar=args.progress_bar or sys.stderr.isatty(), tb_log_name="run")
    train_seconds = elapsed()
    venv.close()
    if saver.interrupted:
        latest = latest_checkpoint(out / "checkpoints")
        print(f"interrupted; checkpoint {latest}; continue with: python train_sb3.py --resume {out}", flush=True)
        return {"interrupted": True, "timesteps": int(model.num_timesteps)}

    # --- save ---
    tmp = out / "model.tmp.zip"
    model.save(tmp)
    os.replace(tmp, out / "model.zip")

    # --- final evaluation, per scenario, with the oracle's reward beside ---
    result = evaluate_suite(act, eval_kwargs, args.scenario, args.eval_episodes)
    summary = {"algo": args.algo, "train_seconds": round(train_seconds, 1),
               "total_timesteps": int(model.num_timesteps), **result}
    write_json_atomic(out / "eval.json", summary)
    write_csv_atomic(out / "eval.csv", ["scenario", "success_rate", "mean_reward", "oracle_mean_reward",
                                        "mean_actual_hits", "mismatch_rate"],
                     ([name, row["success_rate"], row["mean_reward"], row["oracle_mean_reward"],
                       row["mean_actual_hits"], "" if row["mismatch_rate"] is None else row["mismatch_rate"]]
                      for name, row in result["per_scenario"].items()))
    where = args.scenario[0] if len(args.scenario) == 1 else f"{len(args.scenario)} scenarios"
    plot_learning_curve(csv_path, out / "learning_curve.png", f"{args.algo.upper()} on {where}")
    discard_set_aside(out)  # the new run is complete
    print(f"trained {model.num_timesteps} steps in {train_seconds:.1f} s; model saved to {out / 'model.zip'}")
    print(f"evaluation, {args.eval_episodes} episodes per scenario (upstream rubric): success rate "
          f"{result['success_rate']:.1%}, mean reward {result['mean_reward']:.3f} (oracle "
          f"{result['oracle_mean_reward']:.3f})")
    for name, row in result["per_scenario"].items():
        mismatch = row["mismatch_rate"]  # trolley_micro only: data's expected vs simulated casualties
        disagree = "" if mismatch is None else f"; data and simulation disagree in {mismatch:.0%}"
        print(f"  {name}: success {row['success_rate']:.1%}, reward {row['mean_reward']:.3f} "
              f"(oracle {row['oracle_mean_reward']:.3f}), actions {row['actions']}, pedestrians actually hit "
              f"{row['mean_actual_hits']:.2f} per episode{disagree}")
    return summary


def drop_rows_after(csv_path: Path, timesteps: int) -> None:
    """Remove evaluation rows later than ``timesteps`` (written before a crash; a resume redoes them)."""
    if not csv_path.exists():
        return
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    header = rows[0]
    write_csv_atomic(csv_path, header, (r for r in rows[1:] if len(r) == len(header) and r[0].isdigit()
                                        and int(r[0]) <= timesteps))


def plot_learning_curve(csv_path: Path, png_path: Path, title: str) -> None:
    """Plot success rate and mean reward against env steps from evaluations.csv (atomic PNG write)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not csv_path.exists():
        return
    with open(csv_path) as f:
        rows = [r for r in csv.DictReader(f) if None not in r.values() and (r["timesteps"] or "").isdigit()]
    steps = [int(r["timesteps"]) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(steps, [float(r["success_rate"]) for r in rows], marker="o", label="success rate")
    ax.plot(steps, [float(r["mean_reward"]) for r in rows], marker="s", label="mean rubric reward")
    ax.set_xlabel("environment steps")
    low = min([0.0] + [float(r["mean_reward"]) for r in rows])
    ax.set_ylim(min(low, 0.0) - 0.05, 1.05)  # success rates in [0, 1]; rubric rewards in [-1, 1]
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = png_path.with_name(png_path.stem + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, png_path)


if __name__ == "__main__":
    if main().get("interrupted"):
        sys.exit(130)  # the shell's status for Ctrl-C: an interrupted run is not a success
