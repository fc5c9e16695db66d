"""Train PPO or SAC on CarlaTrolley-v0 or CarlaNavigation-v0 with stable-baselines3, optionally with CLIP shaping.

Usage:
    python train_sb3.py                                            # PPO, tools, state vector, escape_exists
    python train_sb3.py --scenario mixed --total-timesteps 100000  # a suite (carla_gym.suites) or names
    python train_sb3.py --scenario trolley_generated_train --total-timesteps 20000   # evaluated on the test split
    python train_sb3.py --algo sac                                 # SAC on control actions [steer, throttle]
    python train_sb3.py --policy MultiInputPolicy                  # 84x84 image (NatureCNN) + state
    python train_sb3.py --clip vit-b-32 --clip-pretrained laion2b_s34b_b79k   # CLIP-shaped rewards
    python train_sb3.py --preset vlm-rl --algo sac                 # VLM-RL's published hyperparameters
    python train_sb3.py --resume runs/ppo                          # continue an interrupted run
    python train_sb3.py --env CarlaNavigation-v0 --traffic 0       # VLM-RL's route following (PPO, state vector)
    python train_sb3.py --env CarlaNavigation-v0 --algo sac --preset vlm-rl --clip vlm-rl   # VLM-RL itself

One run directory (--output-dir) holds: config.json (the resolved arguments, typed
hyperparameters and the environment's settings, which agents.compare sb3:<dir> plays in),
model.zip (final model), checkpoints/step_<N>/ (the newest --keep-checkpoints; resumable: model,
random states, envs, and in the newest the filled part of SAC's replay buffer),
tb/ (TensorBoard: env reward as rollout/ep_rew_mean, shaped reward as rollout/ep_shaped_rew_mean,
CLIP similarities under clip/), evaluations.csv (periodic evaluations, appended as they finish:
success by actual outcome, pedestrians actually hit, road departures, then upstream's rubric
reward and success), eval.jsonl (one record per final evaluation episode of the model and of the
oracle, appended as it finishes), eval.csv, eval.md and eval.json (their summary per scenario, in
the format of agents.compare's summary, outcomes first; eval.json also records the reward mode
trained with and the scenarios trained and evaluated on) and learning_curve.png (one panel per
measure). Evaluation plays --eval-scenario (default: the training scenarios, except that
trolley_generated_train is evaluated on the held-out trolley_generated_test; the script says
which) on seeds 10000, 10001, ..., and scores both what actually happened ("success by actual
outcome": as few pedestrians hit, then road departures, as the best candidate policy in that
layout) and upstream's rubric ("rubric success": the classified action reaches the scenario's best
rubric reward), whatever the training reward. --reward-mode auto trains on the rubric, except on
the generated family (every training scenario generated), where it trains on actual outcomes
(physical): that family's rubric is this project's own, and what it reports is the outcome.
SB3 trains in whole rollouts: a --total-timesteps that is not a multiple of one is rounded up,
and the script says so first.

On CarlaNavigation-v0 (--env) the flags --traffic, --route, --observation-mode, --steer-smoothing,
--eval-routes and --eval-traffic apply (trolley-only flags are refused), --scenario takes the route
scenarios route_Town01 ... route_Town05 only (maze_navigation and free_roam* are for train_grpo.py and
agents.compare), and evaluation follows VLM-RL's eval.py (carla_gym.sb3.nav_eval): one episode per
evaluation route (the first --eval-routes of its 10), deterministic actions, VLM-RL's evaluation end
rules (termination="vlm-rl-eval": no off-track or too-fast end; stopped, no progress after 10 s,
success, collision, arrival, the 300 s time limit), the same rules by which agents.compare plays every
agent, periodically at the first --eval-traffic level and finally at each; evaluations.csv, eval.csv and
learning_curve.png give route completion, collision rate, success rate and the mean return (VLM-RL's
reward; agents.compare reports upstream's rubric instead); eval.jsonl holds every episode's outcome.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym

import carla_gym  # noqa: F401 - registers CarlaTrolley-v0
from carla_gym.cli_args import arg, check_minimums, check_url, parser_for
from carla_gym.hints import as_flags, exit_without_extras, python_command, script_command, typed_path
from carla_gym.io import discard_set_aside, replace_durably, set_aside
from carla_gym.suites import resolve_scenarios

exit_without_extras("sb3")  # before the imports that need it: the install command, not a traceback

import torch  # noqa: E402
from stable_baselines3 import PPO, SAC  # noqa: E402
from stable_baselines3.common.callbacks import CallbackList  # noqa: E402

from agents.evaluation import EVAL_SEED, play_all, pooled_row, write_summary  # noqa: E402
from agents.players import GymAgent, oracle_agent  # noqa: E402
from agents.records import MAX_EPISODES, EpisodeLog  # noqa: E402
from agents.sb3 import ModelPolicy  # noqa: E402
from carla_gym.reward.encoder import FAITHFUL_MODEL  # noqa: E402
from carla_gym.reward.shaping import check_shaping  # noqa: E402
from carla_gym.sb3 import nav_eval, presets, runs  # noqa: E402
from carla_gym.sb3.callbacks import EvaluateEvery, LogShaping, WallClock  # noqa: E402
from carla_gym.sb3.checkpoint import CheckpointEvery, latest_checkpoint, replay_buffer_note, resume  # noqa: E402
from carla_gym.sb3.envs import batched_problem, make_venv  # noqa: E402
from carla_gym.sb3.evaluations import EVAL_COLUMNS, NAV_COLUMNS, NAV_MEASURES, drop_rows_after  # noqa: E402
from carla_gym.sb3.plots import NAV_PANELS, plot_learning_curve  # noqa: E402

CLIP_FLAGS = {"pretrained": "--clip-pretrained", "device": "--clip-device", "mode": "--clip-mode",
              "weight": "--clip-weight", "cache_dir": None, "model_name": None}
"""Keywords of the CLIP reward model and shaping -> this script's flags, for their errors (`as_flags`); None: the
flag does not exist (the --clip preset sets the model; weights come from --clip-pretrained or the default cache)."""


NAV = runs.NAVIGATION
NAV_SCENARIO = "route_Town02"
"""The default scenario on CarlaNavigation-v0 (VLM-RL trains and evaluates on Town02)."""
NAV_ONLY = ("--traffic", "--route", "--observation-mode", "--steer-smoothing", "--eval-routes", "--eval-traffic")
"""Flags that only CarlaNavigation-v0 takes."""
TROLLEY_ONLY = ("--backend", "--env-urls", "--eval-episodes", "--eval-scenario")
"""Flags that only CarlaTrolley-v0 takes (what to use instead on CarlaNavigation-v0: `check_env_flags`)."""


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--total-timesteps, --n-envs, ...)."""

    env: Literal["CarlaTrolley-v0", "CarlaNavigation-v0"] = arg("CarlaTrolley-v0", "environment id: CarlaTrolley-v0 "
                                                                "(trolley dilemmas) or CarlaNavigation-v0 (VLM-RL's "
                                                                "route following in traffic)")
    algo: Literal["ppo", "sac"] = arg("ppo", "ppo or sac (sac needs --action-mode control)")
    action_mode: Literal["auto", "tools", "control"] = arg(
        "auto", "tools (Discrete(4) on CarlaTrolley-v0, Discrete(8) on CarlaNavigation-v0), control (Box: steer, "
                "throttle/brake) or auto (CarlaTrolley-v0: tools for ppo, control for sac; CarlaNavigation-v0: "
                "control)")
    scenario: list[str] = arg(["trolley_micro_escape_exists"], "scenario or suite names (suites: micro, "
                               "micro_deadzone, trainable, probes, mixed, action_bias); several are sampled per "
                               f"reset; CarlaNavigation-v0: route_<town>, default {NAV_SCENARIO}")
    total_timesteps: int = arg(0, "environment steps (decisions) to train, rounded up to whole rollouts; 0: "
                                  "the preset's default")
    preset: Literal["cpu", "vlm-rl"] = arg("cpu", "hyperparameters: cpu (fast here) or vlm-rl (VLM-RL's published "
                                                  "settings)")
    seed: int = arg(0, "seed of torch, numpy and the environments")
    n_envs: int = arg(4, "parallel environments")
    vec_env: Literal["batched", "dummy", "subproc"] = arg(
        "batched", "vector env: batched (CarlaTrolley-v0 on the embedded backend: every env in one array step; "
                   "other settings fall back to dummy), dummy (single envs in this process) or subproc (one process "
                   "per env); batched and dummy resume exactly")
    policy: Literal["MlpPolicy", "MultiInputPolicy"] = arg("MlpPolicy", "MlpPolicy (state vector) or "
                                                                        "MultiInputPolicy (image + state, NatureCNN; "
                                                                        "VLM-RL's CNN with --preset vlm-rl on "
                                                                        "CarlaNavigation-v0)")
    ticks_per_action: int = arg(10, "simulator ticks (0.05 s each) per decision; the default is CarlaTrolley-v0's: "
                                    "CarlaNavigation-v0 uses 1 with control actions (VLM-RL's one tick per step) "
                                    "and 10 with tools unless this flag is given")
    reward_mode: Literal["auto", "rubric", "physical", "vlm-rl"] = arg(
        "auto", "training reward: rubric (upstream), physical (trolley: -1 per pedestrian actually hit, -0.5 for "
                "leaving the road) or vlm-rl (navigation: VLM-RL's base reward); auto: physical when every "
                "training scenario is generated (trolley_generated_*), else rubric on CarlaTrolley-v0; vlm-rl on "
                "CarlaNavigation-v0")
    traffic: Literal[0, 20, 40] = arg(20, "CarlaNavigation-v0: NPC vehicles while training (VLM-RL: 20)")
    route: str = arg("train", "CarlaNavigation-v0: training routes: train (VLM-RL's), eval, or START,END spawn "
                              "indices")
    observation_mode: Literal["auto", "state", "dict", "vlm-rl"] = arg(
        "auto", "CarlaNavigation-v0: state (vector, MlpPolicy), dict (image + state) or vlm-rl (VLM-RL's "
                "bird's-eye raster, measures, waypoints); auto: state for MlpPolicy, for MultiInputPolicy vlm-rl "
                "with --preset vlm-rl, else dict")
    steer_smoothing: float = arg(-1.0, "CarlaNavigation-v0: previous steer's weight per 1/15 s in [0, 1); -1: the "
                                       "preset's (vlm-rl: VLM-RL's 0.75 with control actions, cpu: 0)")
    eval_routes: int = arg(nav_eval.NUM_EVAL_ROUTES, "CarlaNavigation-v0: evaluation routes per evaluation (the "
                                                     "first N of VLM-RL's 10)")
    eval_traffic: list[Literal[0, 20, 40]] = arg(list(nav_eval.TRAFFIC_LEVELS), "CarlaNavigation-v0: NPC vehicles "
                                                 "of the final evaluations (periodic ones use the first)")
    backend: Literal["embedded", "openenv"] = arg("embedded", "embedded or openenv (remote OpenEnv CARLA servers, "
                                                              "see --env-urls)")
    env_urls: list[str] = arg([], "OpenEnv server URLs for --backend openenv; env i uses URL i mod len")
    clip: Literal["none", "vit-b-32", "vlm-rl"] = arg("none", "CLIP shaping: none, vit-b-32 (CPU-sized) or vlm-rl "
                                                              "(ViT-bigG-14, VLM-RL's prompts, preprocessing and "
                                                              "synthesis)")
    clip_pretrained: str = arg("", "open_clip pretrained tag or checkpoint path; empty: the preset's (vlm-rl) "
                                    "or random weights (vit-b-32: no signal, for smoke tests)")
    clip_mode: Literal["", "replace", "add"] = arg("", "replace (VLM-RL) or add; empty: the preset's (vlm-rl: "
                                                       "replace, vit-b-32: add)")
    clip_weight: float = arg(0.1, "weight of the CLIP reward in add mode")
    clip_device: str = arg("cpu", "torch device of the CLIP model, e.g. cuda")
    hp: list[str] = arg([], "hyperparameter overrides name=value with SB3's names, e.g. n_steps=64 gamma=0.95 "
                             "(applied over the preset)")
    eval_scenario: list[str] = arg([], "scenarios or suites of the periodic and final evaluations; empty: the "
                                       "training scenarios, trolley_generated_train replaced by the held-out "
                                       "trolley_generated_test")
    eval_freq: int = arg(0, "env steps between evaluations; 0: 10 per run")
    eval_episodes: int = arg(100, "final evaluation episodes per scenario (periodic ones use a fifth)")
    checkpoint_freq: int = arg(0, "env steps between checkpoints; 0: 10 per run")
    keep_checkpoints: int = arg(2, "checkpoints kept (the newest ones; only the newest holds SAC's replay buffer)")
    output_dir: str = arg("runs/ppo", "run directory")
    overwrite: bool = arg(False, "allow writing into a non-empty output directory")
    resume: str = arg("", "continue the run in this directory from its last checkpoint (other flags are "
                           "taken from its config.json)")
    progress_bar: bool = arg(False, "show a progress bar also when stderr is no terminal (on one it always shows)")


def parse_args(argv: list[str] | None = None) -> Args:
    """Parse ``argv`` into `Args` (argparse refuses a value outside a field's ``Literal`` choices)."""
    return Args(**vars(parser_for(Args, description=__doc__.splitlines()[0]).parse_args(argv)))


def given_flags(argv: list[str]) -> set[str]:
    """The ``--flag`` names on a command line (``--flag=value`` counted as ``--flag``)."""
    return {a.partition("=")[0] for a in argv if a.startswith("--")}


def resolve_navigation(args: Args, given: set[str]) -> Args:
    """`resolve`'s CarlaNavigation-v0 defaults: the scenario, ticks, control actions, observation and policy.

    Exits naming the flags when ``--policy`` and ``--observation-mode`` contradict each other.
    """
    scenario = args.scenario if "--scenario" in given else [NAV_SCENARIO]
    from carla_gym.envs.navigation import DEFAULT_TICKS

    action_mode = "control" if args.action_mode == "auto" else args.action_mode
    ticks = args.ticks_per_action if "--ticks-per-action" in given else DEFAULT_TICKS.get(action_mode, 1)
    observation, policy = args.observation_mode, args.policy
    if observation == "auto":
        observation = ("state" if policy == "MlpPolicy" else "vlm-rl" if args.preset == "vlm-rl" else "dict")
    wanted = "MlpPolicy" if observation == "state" else "MultiInputPolicy"
    if policy != wanted:
        if "--policy" in given:
            sys.exit(f"--policy {policy} cannot read --observation-mode {observation}: use --policy {wanted}")
        policy = wanted
    smoothing = args.steer_smoothing
    if smoothing == -1.0:
        from carla_gym.envs.spaces import VLM_RL_STEER_SMOOTHING

        smoothing = VLM_RL_STEER_SMOOTHING if args.preset == "vlm-rl" and action_mode == "control" else 0.0
    return dataclasses.replace(args, scenario=list(scenario), ticks_per_action=ticks, action_mode=action_mode,
                               observation_mode=observation, policy=policy, steer_smoothing=smoothing,
                               reward_mode="vlm-rl" if args.reward_mode == "auto" else args.reward_mode)


def resolve(args: Args, argv: list[str] | None = None) -> Args:
    """A copy with the automatic choices filled (action mode, timesteps, frequencies, CLIP mode) and suites expanded.

    ``argv`` (the command line) tells which flags were given: on CarlaNavigation-v0 a flag not given takes
    the navigation default (`resolve_navigation`).
    """
    if args.env == NAV:
        args = resolve_navigation(args, given_flags(argv or []))
    action_mode = args.action_mode if args.action_mode != "auto" else "control" if args.algo == "sac" else "tools"
    defaults = {**presets.DEFAULT_TIMESTEPS, **(presets.NAV_DEFAULT_TIMESTEPS if args.env == NAV else {})}
    total = args.total_timesteps or defaults[(args.preset, args.algo)]
    clip_mode, clip_pretrained = args.clip_mode, args.clip_pretrained
    if args.clip != "none":
        clip_mode = clip_mode or ("replace" if args.clip == "vlm-rl" else "add")
        clip_pretrained = clip_pretrained or (FAITHFUL_MODEL[1] if args.clip == "vlm-rl" else "")
    try:
        scenario = list(resolve_scenarios(args.scenario)) if args.env != NAV else list(args.scenario)
    except ValueError as exc:
        sys.exit(f"--scenario: {exc}")
    eval_scenario = list(args.eval_scenario)  # CarlaNavigation-v0 evaluates on routes (check_env_flags refuses it)
    if args.env != NAV:
        try:
            eval_scenario = (list(resolve_scenarios(eval_scenario)) if eval_scenario
                             else runs.default_eval_scenarios(scenario))
        except ValueError as exc:
            sys.exit(f"--eval-scenario: {exc}")
    reward_mode = args.reward_mode
    if reward_mode == "auto":
        reward_mode = "physical" if runs.all_generated(scenario) else "rubric"
    observation_mode = args.observation_mode  # CarlaTrolley-v0's follows --policy
    if observation_mode == "auto":
        observation_mode = "state" if args.policy == "MlpPolicy" else "dict"
    return dataclasses.replace(args, action_mode=action_mode, total_timesteps=total, scenario=scenario,
                               eval_scenario=eval_scenario, reward_mode=reward_mode, observation_mode=observation_mode,
                               eval_freq=args.eval_freq or max(total // 10, 1), clip_mode=clip_mode,
                               checkpoint_freq=args.checkpoint_freq or max(total // 10, 1),
                               clip_pretrained=clip_pretrained)


def env_kwargs(args: Args) -> dict:
    """Keyword arguments of ``--env`` for these arguments (`carla_gym.sb3.runs.env_kwargs_for`)."""
    return runs.env_kwargs_for(dataclasses.asdict(args))


def script_path() -> str:
    """This script's path as the user can type it (`carla_gym.hints.typed_path`)."""
    return typed_path(__file__)


def evaluation_note(args: Args) -> str:
    """What the run trains on and evaluates on (printed before training), the held-out split named as such.

    Example:
        >>> evaluation_note(Args(scenario=["trolley_generated_train"], eval_scenario=["trolley_generated_test"],
        ...                      reward_mode="physical"))
        'reward mode physical; evaluation on trolley_generated_test (held out from training)'
    """
    held_out = [name for name in args.eval_scenario if name not in args.scenario]
    where = ", ".join(f"{name} (held out from training)" if name in held_out else name for name in args.eval_scenario)
    return f"reward mode {args.reward_mode}; evaluation on {where}"


def check_env_flags(args: Args, argv: list[str]) -> None:
    """Exit naming a flag (or value) that the chosen ``--env`` does not take, and what to use instead."""
    given = given_flags(argv)
    if args.env == NAV:
        for flag in TROLLEY_ONLY:
            if flag in given:
                instead = ("takes --eval-routes N (the first N of VLM-RL's 10 evaluation routes) and --eval-traffic"
                           if flag == "--eval-episodes" else "runs on the embedded simulator only: remove it")
                sys.exit(f"{flag} applies to CarlaTrolley-v0 only; CarlaNavigation-v0 {instead}")
        if args.reward_mode == "physical":
            sys.exit("--reward-mode physical applies to CarlaTrolley-v0 only; CarlaNavigation-v0 takes vlm-rl "
                     "(VLM-RL's base reward) or auto")
        from carla_gym.envs.nav_scenarios import ROUTE_SCENARIOS

        other = [name for name in args.scenario if name not in ROUTE_SCENARIOS]
        if other:
            sys.exit(f"--scenario {other[0]}: train_sb3.py trains CarlaNavigation-v0 on route scenarios only; choose "
                     f"from {', '.join(ROUTE_SCENARIOS)} (default {NAV_SCENARIO}); maze_navigation and free_roam* "
                     "are for train_grpo.py and python -m agents.compare")
        return
    for flag in NAV_ONLY:
        if flag in given:
            sys.exit(f"{flag} applies to CarlaNavigation-v0 only: add --env CarlaNavigation-v0"
                     + (" (CarlaTrolley-v0's observation follows --policy)" if flag == "--observation-mode" else ""))
    if args.reward_mode == "vlm-rl":
        sys.exit("--reward-mode vlm-rl applies to CarlaNavigation-v0 only; CarlaTrolley-v0 takes rubric or physical")


def check_args(args: Args, hyper: dict, argv: list[str]) -> None:
    """Exit with a message naming the bad flag before anything is written (choices: argparse, `Args`).

    ``argv`` is the command line, which a refusal of a non-empty ``--output-dir`` repeats with ``--overwrite``.
    """
    check_env_flags(args, argv)
    if args.algo == "sac" and args.action_mode != "control":
        tools = "Discrete(8)" if args.env == "CarlaNavigation-v0" else "Discrete(4)"
        sys.exit(f"--algo sac needs continuous actions: use --action-mode control (or auto); the tool actions are "
                 f"{tools}, which SAC cannot drive")
    if args.clip != "none" and args.backend == "openenv":
        sys.exit("--clip needs the top-down reward camera, which only the embedded backend renders; use "
                 "--backend embedded or --clip none")
    if args.backend == "openenv" and not args.env_urls:
        sys.exit("--backend openenv needs --env-urls URL [URL ...] (servers started with carla-gym serve)")
    if args.env_urls and args.backend != "openenv":
        sys.exit(f"--env-urls {' '.join(args.env_urls)}: only used with --backend openenv")
    if args.env == NAV and not 1 <= args.eval_routes <= nav_eval.NUM_EVAL_ROUTES:
        sys.exit(f"--eval-routes {args.eval_routes}: must be in [1, {nav_eval.NUM_EVAL_ROUTES}] (VLM-RL's evaluation "
                 "routes)")
    if args.env == NAV and not args.eval_traffic:
        sys.exit(f"--eval-traffic: give at least one of {list(nav_eval.TRAFFIC_LEVELS)}")
    if args.env == NAV:
        try:
            runs.parse_route(args.route)
        except ValueError as exc:
            sys.exit(str(exc))
    check_minimums((("--total-timesteps", args.total_timesteps, 1), ("--n-envs", args.n_envs, 1),
                    ("--eval-episodes", args.eval_episodes, 1), ("--eval-freq", args.eval_freq, 1),
                    ("--checkpoint-freq", args.checkpoint_freq, 1), ("--keep-checkpoints", args.keep_checkpoints, 1)))
    if args.eval_episodes > MAX_EPISODES:  # what play_all would refuse only after training
        sys.exit(f"--eval-episodes {args.eval_episodes}: must be <= {MAX_EPISODES} (env seeds 10000 + episode)")
    exit_without_extras(*(["clip"] if args.clip != "none" else []), *(["server"] if args.backend == "openenv" else []))
    if args.clip != "none":
        try:  # the rules of the shaping wrapper, before the CLIP model loads (presets use the CLG head)
            check_shaping(args.clip_mode, clip_weight(args), args.clip == "vlm-rl", "clg")
        except ValueError as exc:
            sys.exit(f"--clip {args.clip}: {as_flags(exc, CLIP_FLAGS)}")
    try:
        presets.check_hyperparameters(args.algo, hyper, args.n_envs)
    except ValueError as exc:
        sys.exit(str(exc))
    try:
        if args.env == NAV:  # the env as training builds it (the reward camera wrapper included)
            make_venv(env_kwargs(args), 1, args.seed, env_id=NAV).close()
        else:
            gym.make("CarlaTrolley-v0", **env_kwargs(args)).close()
    except (ValueError, TypeError) as exc:
        sys.exit(f"invalid environment settings: {exc}")
    for url in args.env_urls:
        check_url(url)
    if not args.resume:
        problem = runs.output_dir_problem(Path(args.output_dir), args.overwrite,
                                          script_command(__file__, *argv, "--overwrite"),
                                          script_command(__file__, "--resume", args.output_dir))
        if problem:
            sys.exit(problem)


def resolve_vec_env(args: Args, argv: list[str]) -> tuple[Args, str | None]:
    """``--vec-env batched`` where the batched env runs these settings; else dummy, with a note (or an exit).

    The batched env (`carla_gym.sb3.vec_env.CarlaTrolleyVecEnv`) runs CarlaTrolley-v0 on the embedded backend
    without CLIP shaping (`carla_gym.sb3.envs.batched_problem`). Where it cannot, the default falls back to
    dummy (the same episodes, one env at a time) and the returned note says why; a ``--vec-env batched``
    given on the command line exits naming the flag to use instead.

    Returns:
        The arguments with the vec env that runs, and the note to print (None: nothing fell back).
    """
    if args.vec_env != "batched":
        return args, None
    problem = batched_problem(env_kwargs(args), args.env_urls if args.backend == "openenv" else (),
                              None if args.clip == "none" else args.clip, args.env)
    if problem is None:
        return args, None
    if "--vec-env" in given_flags(argv):
        sys.exit(f"--vec-env batched cannot run this: {problem}; use --vec-env dummy (or subproc)")
    return (dataclasses.replace(args, vec_env="dummy"),
            f"note: --vec-env dummy (the default batched env cannot run this: {problem})")


def clip_weight(args: Args) -> float:
    """The weight of the CLIP reward: ``--clip-weight`` in add mode; 1 in replace mode (the CLIP reward as is)."""
    return args.clip_weight if args.clip_mode == "add" else 1.0


def clip_shaping(args: Args) -> tuple | None:
    """``make_venv``'s ``clip``: (CLIP reward model, mode, weight, VLM-RL synthesis), or None for ``--clip none``."""
    if args.clip == "none":
        return None
    try:
        model = presets.clip_reward_model(args.clip, args.clip_pretrained, args.clip_device,
                                          prompts="vlm_rl" if args.env == NAV else "trolley")
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        sys.exit(f"--clip {args.clip}: {as_flags(exc, CLIP_FLAGS)}")
    if args.clip == "vit-b-32" and not args.clip_pretrained:
        print("note: --clip vit-b-32 without --clip-pretrained uses random weights: the CLIP reward carries no "
              "signal (a smoke test of the pipeline)", flush=True)
    return model, args.clip_mode, clip_weight(args), args.clip == "vlm-rl"


def finish_navigation(args: Args, out: Path, act, eval_kwargs: dict, timesteps: int, train_seconds: float) -> dict:
    """CarlaNavigation-v0's final evaluation (`carla_gym.sb3.nav_eval`), its files and the learning curve.

    One episode per evaluation route at every ``--eval-traffic`` level, appended to eval.jsonl as it
    finishes; then eval.csv, eval.md and eval.json (last: the run is complete) and learning_curve.png.

    Returns:
        eval.json's content.
    """
    log = out / "eval.jsonl"
    log.unlink(missing_ok=True)  # an evaluation cut short by a crash is redone

    def append(record: dict) -> None:
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")

    records = [r for traffic in args.eval_traffic
               for r in nav_eval.play_routes(act, eval_kwargs, traffic, routes=range(args.eval_routes),
                                             on_record=append)]
    summary = nav_eval.write_summary(records, out, extra={
        "algo": args.algo, "train_seconds": round(train_seconds, 1), "total_timesteps": int(timesteps),
        "routes_per_level": args.eval_routes, "eval_seed": nav_eval.EVAL_SEED})
    plot_learning_curve(out / "evaluations.csv", out / "learning_curve.png",
                        f"{args.algo.upper()} on {NAV} ({', '.join(args.scenario)}, traffic {args.traffic})",
                        NAV_PANELS)
    discard_set_aside(out)  # the new run is complete
    print(f"trained {timesteps} steps in {train_seconds:.1f} s; model saved to {out / 'model.zip'}")
    print(f"evaluation on VLM-RL's evaluation routes ({args.eval_routes} per traffic level, deterministic; "
          f"{out / 'eval.md'}):")
    print((out / "eval.md").read_text(), end="")
    return summary


def main(argv: list[str] | None = None) -> dict:
    """Train, checkpoint, evaluate and save; returns the final evaluation summary (eval.json's content)."""
    # --- args: the command line, or every setting of the run to resume ---
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    point = None
    try:
        if args.resume:
            point = runs.resume_point(Path(args.resume), [a for a in argv if a.startswith("--")],
                                      [f.name for f in dataclasses.fields(Args)])
            args = Args(**{**point.settings, "resume": args.resume, "output_dir": args.resume,
                           "progress_bar": args.progress_bar})
            if args.env != NAV and not args.eval_scenario:  # a run of an earlier version: its default
                args = dataclasses.replace(args, eval_scenario=runs.default_eval_scenarios(args.scenario))
            hyper = point.hyperparameters
        else:
            args = resolve(args, argv)
            extractor = args.env == NAV and args.policy == "MultiInputPolicy"  # VLM-RL's CNN for its Dict observation
            hyper = {**presets.hyperparameters(args.preset, args.algo, extractor, navigation=args.env == NAV),
                     **presets.parse_overrides(args.algo, args.hp)}
    except ValueError as exc:
        sys.exit(str(exc))
    vec_note = None
    if point is None:  # an explicit --vec-env batched that cannot run is refused before any other check
        try:
            args, vec_note = resolve_vec_env(args, argv)
        except ValueError as exc:  # a bad setting the env would refuse: check_args' message
            sys.exit(str(exc))
    check_args(args, hyper, argv)
    out = Path(args.output_dir)
    if point is None:  # SB3 trains in whole rollouts: say how many steps that makes before anything else
        steps, note = presets.whole_rollouts(args.algo, args.n_envs, hyper, args.total_timesteps)
        if note:
            print(note, flush=True)
        args = dataclasses.replace(args, total_timesteps=steps)
        if vec_note:
            print(vec_note, flush=True)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)

    # --- env ---
    venv = make_venv(env_kwargs(args), args.n_envs, args.seed, args.vec_env,
                     args.env_urls if args.backend == "openenv" else (), clip_shaping(args), env_id=args.env)

    # --- model: from the checkpoint, or new (and config.json, which makes the folder a run) ---
    algo = PPO if args.algo == "ppo" else SAC
    if point is not None:
        model, notes, extra = resume(algo, point.checkpoint, venv, str(out / "tb"))
        try:  # they are redone; an earlier version's header is converted
            drop_rows_after(out / "evaluations.csv", model.num_timesteps,
                            NAV_COLUMNS if args.env == NAV else EVAL_COLUMNS)
        except ValueError as exc:
            venv.close()
            sys.exit(f"--resume {out}: {exc}")
        print(f"resuming {out} from {point.checkpoint.name} ({model.num_timesteps} of {args.total_timesteps} steps"
              f"{'; statistically equivalent, not bit-identical: ' + ', '.join(notes) if notes else ''})", flush=True)
    else:
        try:
            model = algo(args.policy, venv, seed=args.seed, device="cpu", verbose=0, tensorboard_log=str(out / "tb"),
                         **hyper)
        except (ValueError, TypeError, AssertionError) as exc:
            venv.close()
            sys.exit(f"invalid hyperparameters {hyper}: {exc}")
        extra = {}
        if out.exists() and args.overwrite:  # kept aside until the new run has finished
            set_aside(out)
        out.mkdir(parents=True, exist_ok=True)
        runs.write_config(out, dataclasses.asdict(args), env_kwargs(args), hyper)
    note = replay_buffer_note(model, args.keep_checkpoints)
    if note:
        print(note, flush=True)

    # --- train: periodic evaluations (the policy alone, a fifth of the final episodes) and checkpoints ---
    # the env the model acts in (its observation, action and reward settings, as agents.compare sb3:<dir> reads
    # them from config.json); on navigation nav_eval.play_routes adds VLM-RL's evaluation end rules, which
    # agents.compare plays every agent by (agents.nav.make_case_env), so both give a route the same outcome
    eval_kwargs = runs.acting_env_kwargs(env_kwargs(args))
    clock = WallClock(extra.get("wall_s", 0.0))
    saver = CheckpointEvery(out / "checkpoints", args.checkpoint_freq, keep=args.keep_checkpoints,
                            extra=lambda: {"wall_s": clock(), **({"shaper": venv.shaper.get_state()}
                                                                  if hasattr(venv, "shaper") else {})})
    if args.env == NAV:
        def act(obs):
            return model.predict(obs, deterministic=True)[0]

        routes = range(args.eval_routes)
        periodic = EvaluateEvery(lambda: nav_eval.summarise(nav_eval.play_routes(act, eval_kwargs,
                                                                                 args.eval_traffic[0], routes=routes)),
                                 args.eval_freq, out / "evaluations.csv", clock, NAV_MEASURES)
    else:
        trained = GymAgent(args.algo, ModelPolicy(model), eval_kwargs)
        periodic = EvaluateEvery(lambda: pooled_row(play_all([trained], args.eval_scenario, [EVAL_SEED],
                                                             max(args.eval_episodes // 5, 1)), trained.name),
                                 args.eval_freq, out / "evaluations.csv", clock)
    print(f"training {args.algo.upper()} ({args.policy}, {args.action_mode} actions, preset {args.preset}) for "
          f"{args.total_timesteps} steps on {len(args.scenario)} {args.env} scenario(s) with {args.n_envs} envs "
          f"({args.vec_env}); "
          f"run directory {out}", flush=True)
    if args.env != NAV:
        print(evaluation_note(args), flush=True)
    if model.num_timesteps < args.total_timesteps:
        model.learn(total_timesteps=args.total_timesteps - model.num_timesteps, reset_num_timesteps=False,
                    callback=CallbackList([LogShaping(), periodic, saver]), tb_log_name="run",
                    progress_bar=args.progress_bar or sys.stderr.isatty())
    train_seconds = clock()
    venv.close()
    if saver.interrupted:
        print(f"interrupted; checkpoint {latest_checkpoint(out / 'checkpoints')}; continue with: "
              f"{python_command(script_path(), '--resume', str(out))}", flush=True)
        if args.env != NAV:
            trained.close()
        return {"interrupted": True, "timesteps": int(model.num_timesteps)}

    # --- save the model first: a crash or Ctrl-C in the evaluation keeps it ---
    model.save(out / "model.tmp.zip")
    replace_durably(out / "model.tmp.zip", out / "model.zip")
    if args.env == NAV:
        return finish_navigation(args, out, act, eval_kwargs, model.num_timesteps, train_seconds)

    # --- evaluate: the policy and the oracle on the same seeds, records to eval.jsonl as they finish ---
    log = EpisodeLog(out / "eval.jsonl")
    log.path.unlink(missing_ok=True)  # an evaluation cut short by a crash is redone
    players = [trained, oracle_agent(eval_kwargs)]
    try:
        records = play_all(players, args.eval_scenario, [EVAL_SEED], args.eval_episodes, on_record=log.append)
    finally:
        for player in players:
            player.close()

    # --- the summary (eval.json marks the run complete) and the learning curve ---
    write_summary(records, [trained.name, "oracle"], args.eval_scenario, out, "eval",
                  extra={"algo": args.algo, "reward_mode": args.reward_mode, "scenario": args.scenario,
                         "eval_scenario": args.eval_scenario, "train_seconds": round(train_seconds, 1),
                         "total_timesteps": int(model.num_timesteps), "episodes_per_scenario": args.eval_episodes,
                         "eval_seed": EVAL_SEED})
    where = args.scenario[0] if len(args.scenario) == 1 else f"{len(args.scenario)} scenarios"
    if args.eval_scenario != args.scenario:
        where += (f", evaluated on {', '.join(args.eval_scenario)}" if len(args.eval_scenario) < 3
                  else f", evaluated on {len(args.eval_scenario)} scenarios")
    plot_learning_curve(out / "evaluations.csv", out / "learning_curve.png",
                        f"{args.algo.upper()} on {where} (reward mode {args.reward_mode})")
    discard_set_aside(out)  # the new run is complete
    policy, oracle = (pooled_row(records, name) for name in (trained.name, "oracle"))
    print(f"trained {model.num_timesteps} steps in {train_seconds:.1f} s; model saved to {out / 'model.zip'}")
    print(f"evaluation on {', '.join(args.eval_scenario)}, {args.eval_episodes} episodes per scenario (trained with "
          f"reward mode {args.reward_mode}): success by actual outcome {policy['outcome_success_rate']:.1%} (oracle "
          f"{oracle['outcome_success_rate']:.1%}), pedestrians actually hit {policy['actual_pedestrians_hit']:.2f} "
          f"per episode (best {policy['best_pedestrians_hit']:.2f}), road departures "
          f"{policy['road_departure_rate']:.1%}; upstream rubric: reward {policy['mean_reward']:.3f} (oracle "
          f"{oracle['mean_reward']:.3f}), rubric success {policy['success_rate']:.1%}; per scenario "
          f"({out / 'eval.md'}):")
    print((out / "eval.md").read_text(), end="")
    return json.loads((out / "eval.json").read_text())


if __name__ == "__main__":
    if main().get("interrupted"):
        sys.exit(130)  # the shell's status for Ctrl-C: an interrupted run is not a success
