"""Train PPO or SAC on CarlaTrolley-v0 with stable-baselines3, optionally with CLIP reward shaping.

Usage:
    python train_sb3.py                                            # PPO, tools, state vector, escape_exists
    python train_sb3.py --scenario mixed --total-timesteps 100000  # a suite (carla_gym.suites) or names
    python train_sb3.py --algo sac                                 # SAC on control actions [steer, throttle]
    python train_sb3.py --policy MultiInputPolicy                  # 84x84 image (NatureCNN) + state
    python train_sb3.py --clip vit-b-32 --clip-pretrained laion2b_s34b_b79k   # CLIP-shaped rewards
    python train_sb3.py --preset vlm-rl --algo sac                 # VLM-RL's published hyperparameters
    python train_sb3.py --resume runs/ppo                          # continue an interrupted run

One run directory (--output-dir) holds: config.json (the resolved arguments, typed
hyperparameters and the environment's settings, which agents.compare sb3:<dir> plays in),
model.zip (final model), checkpoints/step_<N>/ (the newest --keep-checkpoints; resumable: model,
random states, envs, and in the newest the filled part of SAC's replay buffer),
tb/ (TensorBoard: env reward as rollout/ep_rew_mean, shaped reward as rollout/ep_shaped_rew_mean,
CLIP similarities under clip/), evaluations.csv (periodic evaluations, appended as they finish:
success, reward, pedestrians actually hit, road departures), eval.json and eval.csv (final
evaluation per scenario, with the oracle's reward) and learning_curve.png (one panel per measure).
Evaluation always scores with upstream's rubric on seeds 10000, 10001, ... ("success": the
classified action reaches the scenario's best reward). SB3 trains in whole rollouts: a
--total-timesteps that is not a multiple of one is rounded up, and the script says so first.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from carla_gym.cli_args import arg, check_minimums, check_url, parser_for
from carla_gym.hints import python_command, typed_path
from carla_gym.io import discard_set_aside, replace_durably, set_aside, write_csv_atomic, write_json_atomic

CONFIG_FORMAT = 2
"""Version of config.json: 2 stores typed hyperparameters (`carla_gym.sb3.presets.encode_hyperparameters`)."""


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--total-timesteps, --n-envs, ...)."""

    algo: str = arg("ppo", "ppo or sac (sac needs --action-mode control)")
    action_mode: str = arg("auto", "tools (Discrete(4)), control (Box: steer, throttle/brake) or auto (tools for "
                                    "ppo, control for sac)")
    scenario: list[str] = arg(["trolley_micro_escape_exists"], "scenario or suite names (suites: micro, "
                               "micro_deadzone, trainable, probes, mixed, action_bias); several are sampled per reset")
    total_timesteps: int = arg(0, "environment steps (decisions) to train, rounded up to whole rollouts; 0: "
                                  "the preset's default")
    preset: str = arg("cpu", "hyperparameters: cpu (fast here) or vlm-rl (VLM-RL's published settings)")
    seed: int = arg(0, "seed of torch, numpy and the environments")
    n_envs: int = arg(4, "parallel environments")
    vec_env: str = arg("dummy", "vector env: dummy (in-process; exact resume with the embedded backend) or "
                                "subproc (one process per env)")
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
    keep_checkpoints: int = arg(2, "checkpoints kept (the newest ones; only the newest holds SAC's replay buffer)")
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


def script_path() -> str:
    """This script's path as the user can type it (`carla_gym.hints.typed_path`)."""
    return typed_path(__file__)


def require_extras(args: Args) -> None:
    """Exit with the install command of the first missing extra the arguments need."""
    from carla_gym.hints import exit_without_extras

    exit_without_extras("sb3", *(["clip"] if args.clip != "none" else []),
                        *(["server"] if args.backend == "openenv" else []))


def check_args(args: Args, resuming: bool = False, stored: dict | None = None) -> dict:
    """Exit with a message naming the bad flag before anything is written.

    Args:
        args: The resolved arguments.
        resuming: Continuing the run in ``args.output_dir``.
        stored: The run's hyperparameters from its config.json (when resuming).

    Returns:
        The hyperparameters: the preset's with the ``--hp`` overrides over them, or ``stored``.
    """
    import gymnasium as gym

    import carla_gym  # noqa: F401
    from carla_gym.sb3.presets import ALGOS, PRESETS, encode_hyperparameters, hyperparameters

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
    if args.env_urls and args.backend != "openenv":
        sys.exit(f"--env-urls {' '.join(args.env_urls)}: only used with --backend openenv")
    check_minimums((("--total-timesteps", args.total_timesteps, 1), ("--n-envs", args.n_envs, 1),
                    ("--eval-episodes", args.eval_episodes, 1), ("--eval-freq", args.eval_freq, 1),
                    ("--checkpoint-freq", args.checkpoint_freq, 1), ("--keep-checkpoints", args.keep_checkpoints, 1)))
    require_extras(args)
    hyper = stored if stored is not None else {**hyperparameters(args.preset, args.algo), **overrides(args)}
    try:
        encode_hyperparameters(hyper)
    except ValueError as exc:
        sys.exit(f"--hp {exc}")
    for name, low, high in (("gamma", 0.0, 1.0), ("learning_rate", 0.0, 1.0), ("tau", 0.0, 1.0)):
        value = hyper.get(name)
        if isinstance(value, bool) or (isinstance(value, int | float) and not low < value <= high):
            sys.exit(f"--hp {name}={value}: must be in ({low}, {high}]")
    for name, low in (("batch_size", 2), ("n_steps", 1), ("buffer_size", 1), ("n_epochs", 1)):
        value = hyper.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            sys.exit(f"--hp {name}={value!r}: must be an integer >= {low}")
    if args.algo == "ppo" and hyper["n_steps"] * args.n_envs < 2:
        sys.exit(f"--hp n_steps={hyper['n_steps']} x --n-envs {args.n_envs}: PPO needs a rollout of at least 2 "
                 "steps")
    try:
        gym.make("CarlaTrolley-v0", **env_kwargs(args)).close()
    except (ValueError, TypeError) as exc:
        sys.exit(f"invalid environment settings: {exc}")
    for url in args.env_urls:
        check_url(url)
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        sys.exit(f"--output-dir {out}: exists and is not a directory")
    if not resuming and out.exists() and any(out.iterdir()):
        from carla_gym.sb3.runs import read_config

        config = read_config(out)
        if config is None:
            what = f"--overwrite {out}: refusing to replace a folder that" if args.overwrite else \
                f"{out} is not empty and"
            sys.exit(f"{what} is not a train_sb3.py run directory (no config.json of a train_sb3.py run); choose "
                     "another --output-dir")
        if not args.overwrite:
            hint = (f", or {python_command(script_path(), '--resume', str(out))} to continue it"
                    if resumable(out, config) else "")
            sys.exit(f"{out} is not empty; add --overwrite to this command to replace the run in it{hint}, or choose "
                     "another --output-dir")
    return hyper


def resumable(run: Path, config: dict) -> bool:
    """Whether ``--resume run`` would continue the run: unfinished, this config format, a checkpoint that reads back."""
    from carla_gym.sb3.checkpoint import latest_checkpoint

    return (not (run / "eval.json").exists() and config.get("format") == CONFIG_FORMAT
            and latest_checkpoint(run / "checkpoints") is not None)


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


def env_kwargs(args: Args) -> dict:
    """Keyword arguments of `CarlaTrolley-v0` for these arguments (`carla_gym.sb3.runs.env_kwargs_for`)."""
    from carla_gym.sb3.runs import env_kwargs_for

    return env_kwargs_for(dataclasses.asdict(args))


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


def load_run(run: Path, progress_bar: bool) -> tuple[Args, dict]:
    """The arguments and typed hyperparameters of the run in ``run`` (for ``--resume``); exits with the reason."""
    from carla_gym.sb3.presets import decode_hyperparameters

    try:
        config = json.loads((run / "config.json").read_text())
        if config.get("format") != CONFIG_FORMAT:
            raise KeyError(f"format {config.get('format')!r}, this version reads {CONFIG_FORMAT}")
        args = Args(**{**config["args"], "resume": str(run), "output_dir": str(run), "progress_bar": progress_bar})
        hyper = decode_hyperparameters(config["hyperparameters"])
    except (FileNotFoundError, NotADirectoryError):
        sys.exit(f"--resume {run}: no config.json there; is it a run directory written by train_sb3.py?")
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        sys.exit(f"--resume {run}: config.json is unreadable or from another version ({exc!r}); start a new run: "
                 f"add --overwrite to its command, or choose another --output-dir")
    if (run / "eval.json").exists():
        sys.exit(f"--resume {run}: this run is complete (eval.json exists); to train more, start a new run (another "
                 "--output-dir, or --overwrite to replace this one)")
    return args, hyper


def main(argv: list[str] | None = None) -> dict:
    """Train, checkpoint, evaluate and plot; returns the final evaluation summary."""
    args = parse_args(argv)
    resuming = bool(args.resume)
    stored = None
    if resuming:  # the run's own settings; only the output folder comes from --resume
        run = Path(args.resume)
        given = [a for a in (sys.argv[1:] if argv is None else argv) if a.startswith("--")]
        extra_flags = sorted(set(given) - {"--resume", "--progress-bar"})
        if extra_flags:
            sys.exit(f"--resume takes every setting from {run / 'config.json'}; remove {extra_flags} (to change "
                     "settings, start a new run)")
        args, stored = load_run(run, args.progress_bar)
    else:
        args = resolve(args)
    hyper = check_args(args, resuming, stored)
    out = Path(args.output_dir)

    import numpy as np
    import torch
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.callbacks import BaseCallback, CallbackList

    from agents.evaluate import evaluate_suite
    from carla_gym.sb3.checkpoint import REPLAY_FILE, CheckpointEvery, latest_checkpoint, resume
    from carla_gym.sb3.envs import make_venv
    from carla_gym.sb3.plots import EVAL_COLUMNS, plot_learning_curve
    from carla_gym.sb3.presets import encode_hyperparameters, replay_buffer_bytes, rollout_steps, trained_timesteps
    from carla_gym.sb3.runs import SCRIPT, acting_env_kwargs

    checkpoint, wall_offset = None, 0.0
    if resuming:
        checkpoint = latest_checkpoint(out / "checkpoints")
        if checkpoint is None:
            sys.exit(f"--resume {out}: no complete checkpoint in {out / 'checkpoints'}; start the run again: add "
                     f"--overwrite to its command (config.json lists its settings), or choose another --output-dir")
    else:  # SB3 trains in whole rollouts: say how many steps that makes before anything else
        unit = rollout_steps(args.algo, args.n_envs, hyper)
        steps = trained_timesteps(args.total_timesteps, unit)
        if steps != args.total_timesteps:
            per = (f"n_steps x n_envs = {hyper['n_steps']} x {args.n_envs}" if args.algo == "ppo" else
                   f"train_freq x n_envs = {unit // args.n_envs} x {args.n_envs}")
            print(f"note: --total-timesteps {args.total_timesteps} rounded up to {steps}: {args.algo.upper()} "
                  f"trains in whole rollouts of {per} = {unit} steps", flush=True)
            args = dataclasses.replace(args, total_timesteps=steps)

    # --- seeding ---
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    algo_cls = PPO if args.algo == "ppo" else SAC

    # --- env setup ---
    clip = None
    if args.clip != "none":
        try:
            model_clip, synthesis = clip_model(args)
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            sys.exit(f"--clip {args.clip}: {exc}")
        clip = (model_clip, args.clip_mode, args.clip_weight if args.clip_mode == "add" else 1.0, synthesis)
    venv = make_venv(env_kwargs(args), args.n_envs, args.seed, args.vec_env,
                     args.env_urls if args.backend == "openenv" else (), clip)

    # --- model ---
    if checkpoint is not None:
        model, notes, extra = resume(algo_cls, checkpoint, venv, str(out / "tb"))
        wall_offset = extra.get("wall_s", 0.0)
        drop_rows_after(out / "evaluations.csv", model.num_timesteps)  # they are redone
        print(f"resuming {out} from {checkpoint.name} ({model.num_timesteps} of {args.total_timesteps} steps"
              f"{'; statistically equivalent, not bit-identical: ' + ', '.join(notes) if notes else ''})",
              flush=True)
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
        write_json_atomic(out / "config.json", {"script": SCRIPT, "format": CONFIG_FORMAT,
                                                "args": dataclasses.asdict(args), "env_kwargs": env_kwargs(args),
                                                "hyperparameters": encode_hyperparameters(hyper)})
    if args.algo == "sac":
        obs_bytes = sum(int(np.prod(s.shape)) * s.dtype.itemsize for s in
                        (venv.observation_space.spaces.values() if hasattr(venv.observation_space, "spaces")
                         else [venv.observation_space]))
        gib = replay_buffer_bytes(model.buffer_size, obs_bytes) / 2**30
        print(f"SAC replay buffer: {model.buffer_size} transitions, about {gib:.2f} GiB in memory when full; on disk "
              f"only its filled part, in the newest checkpoint only ({REPLAY_FILE}: up to {gib:.2f} GiB, and up to "
              f"{2 * gib:.2f} GiB while a checkpoint is written, before the previous one's is deleted; "
              f"{args.keep_checkpoints} checkpoints kept)", flush=True)

    # --- callbacks: evaluation, logging, checkpoints ---
    eval_kwargs = acting_env_kwargs(env_kwargs(args))  # what agents.compare sb3:<dir> builds too
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
                for key in ("success_rate", "mean_reward", "mean_actual_hits", "road_departure_rate"):
                    self.logger.record(f"eval/{key}", result[key])
                new = not has_rows(csv_path)
                with open(csv_path, "a", newline="") as f:
                    writer = csv.writer(f)
                    if new:
                        writer.writerow(EVAL_COLUMNS)
                    writer.writerow([self.num_timesteps, *(f"{result[key]:.4f}" for key in EVAL_COLUMNS[1:-1]),
                                     f"{elapsed():.1f}"])
            return True

    def elapsed() -> float:  # training wall time [s] over every process of this run
        return wall_offset + time.perf_counter() - start

    def checkpoint_extra() -> dict:
        extra = {"wall_s": elapsed()}
        if hasattr(venv, "shaper"):
            extra["shaper"] = venv.shaper.get_state()
        return extra

    saver = CheckpointEvery(out / "checkpoints", args.checkpoint_freq, checkpoint_extra, args.keep_checkpoints)
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
        print(f"interrupted; checkpoint {latest}; continue with: {python_command(script_path(), '--resume', str(out))}",
              flush=True)
        return {"interrupted": True, "timesteps": int(model.num_timesteps)}

    # --- save ---
    tmp = out / "model.tmp.zip"
    model.save(tmp)
    replace_durably(tmp, out / "model.zip")

    # --- final evaluation, per scenario, with the oracle's reward beside ---
    result = evaluate_suite(act, eval_kwargs, args.scenario, args.eval_episodes)
    summary = {"algo": args.algo, "train_seconds": round(train_seconds, 1),
               "total_timesteps": int(model.num_timesteps), **result}
    write_json_atomic(out / "eval.json", summary)
    write_csv_atomic(out / "eval.csv", ["scenario", "success_rate", "mean_reward", "oracle_mean_reward",
                                        "mean_actual_hits", "road_departure_rate", "mismatch_rate"],
                     ([name, row["success_rate"], row["mean_reward"], row["oracle_mean_reward"],
                       row["mean_actual_hits"], row["road_departure_rate"],
                       "" if row["mismatch_rate"] is None else row["mismatch_rate"]]
                      for name, row in result["per_scenario"].items()))
    where = args.scenario[0] if len(args.scenario) == 1 else f"{len(args.scenario)} scenarios"
    plot_learning_curve(csv_path, out / "learning_curve.png", f"{args.algo.upper()} on {where}")
    discard_set_aside(out)  # the new run is complete
    print(f"trained {model.num_timesteps} steps in {train_seconds:.1f} s; model saved to {out / 'model.zip'}")
    print(f"evaluation, {args.eval_episodes} episodes per scenario (upstream rubric): success rate "
          f"{result['success_rate']:.1%}, mean reward {result['mean_reward']:.3f} (oracle "
          f"{result['oracle_mean_reward']:.3f}), pedestrians actually hit {result['mean_actual_hits']:.2f} per "
          f"episode, road departures {result['road_departure_rate']:.1%}")
    for name, row in result["per_scenario"].items():
        mismatch = row["mismatch_rate"]  # trolley_micro only: data's expected vs simulated casualties
        disagree = "" if mismatch is None else f"; data and simulation disagree in {mismatch:.0%}"
        print(f"  {name}: success {row['success_rate']:.1%}, reward {row['mean_reward']:.3f} "
              f"(oracle {row['oracle_mean_reward']:.3f}), actions {row['actions']}, pedestrians actually hit "
              f"{row['mean_actual_hits']:.2f} per episode, road departures {row['road_departure_rate']:.0%}"
              f"{disagree}")
    return summary


def has_rows(csv_path: Path) -> bool:
    """Whether ``csv_path`` exists and holds at least one line (a crash can leave it empty: then it is absent)."""
    return csv_path.is_file() and csv_path.stat().st_size > 0


def drop_rows_after(csv_path: Path, timesteps: int) -> None:
    """Remove evaluation rows later than ``timesteps`` (written before a crash; a resume redoes them).

    Rows cut short by the crash go too; an empty file is removed (the next evaluation writes the
    header).
    """
    from carla_gym.sb3.plots import EVAL_COLUMNS

    if not has_rows(csv_path):
        csv_path.unlink(missing_ok=True)
        return
    with open(csv_path, newline="") as f:
        rows = list(csv.reader(f))
    write_csv_atomic(csv_path, EVAL_COLUMNS, (r for r in rows if len(r) == len(EVAL_COLUMNS) and r[0].isdigit()
                                              and int(r[0]) <= timesteps))


if __name__ == "__main__":
    if main().get("interrupted"):
        sys.exit(130)  # the shell's status for Ctrl-C: an interrupted run is not a success
