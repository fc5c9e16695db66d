"""Train PPO or SAC on CarlaTrolley-v0 or CarlaNavigation-v0 with stable-baselines3, optionally with CLIP shaping.

Usage:
    python train_sb3.py                                            # PPO, tools, state vector, generated family
    python train_sb3.py --scenario mixed --total-timesteps 100000  # a suite (carla_gym.suites) or names
    python train_sb3.py --scenario trolley_micro_escape_exists     # one of upstream's fixed scenarios
    python train_sb3.py --algo sac                                 # SAC on control actions [steer, throttle]
    python train_sb3.py --policy MultiInputPolicy                  # 84x84 image (NatureCNN) + state
    python train_sb3.py --clip vit-b-32 --clip-pretrained laion2b_s34b_b79k   # CLIP-shaped rewards
    python train_sb3.py --preset vlm-rl --algo sac                 # VLM-RL's published hyperparameters
    python train_sb3.py --resume runs/ppo                          # continue an interrupted run
    python train_sb3.py --env CarlaNavigation-v0 --traffic 0       # VLM-RL's route following (PPO, state vector)
    python train_sb3.py --env CarlaNavigation-v0 --algo sac --preset vlm-rl --clip vlm-rl   # VLM-RL itself

By default it trains on the generated family's train split (trolley_generated_train, 16 batched envs,
the outcome reward) and evaluates on its held-out test split. One run directory (--output-dir)
holds: config.json (the resolved arguments, typed hyperparameters and the environment's settings,
which agents.compare sb3:<dir> plays in), model.zip (final model), checkpoints/step_<N>/ (the
newest --keep-checkpoints; resumable: model, random states, envs, and in the newest the filled part
of SAC's replay buffer), tb/ (TensorBoard: env reward as rollout/ep_rew_mean, shaped reward as
rollout/ep_shaped_rew_mean, CLIP similarities under clip/), evaluations.csv (the periodic
evaluations, each after the update it follows, appended as they finish, and last the final
evaluation of the saved model at the final step: success by actual outcome, pedestrians actually
hit, road departures, then upstream's rubric reward and success), eval.jsonl (one record per final
evaluation episode, appended as it finishes: the model, then on the same seeds the oracle, the
constant policies of its action mode and a uniformly random agent), eval.csv, eval.md and
eval.json (their summary per agent and scenario, in the format of agents.compare's summary,
outcomes first; eval.json also records the reward mode trained with, the scenarios trained and
evaluated on and the best constant policy), learning_curve.png (one panel per measure) and
episodes.gif (the model's first 3 evaluation episodes, front camera beside the bird's-eye view).
Evaluation plays --eval-scenario (default: the training scenarios, except that
trolley_generated_train is evaluated on the held-out trolley_generated_test; the script says
which) on seeds 10000, 10001, ..., and scores both what actually happened ("success by actual
outcome": as few pedestrians hit, then road departures, as the best candidate policy in that
layout) and upstream's rubric ("rubric success": the classified action reaches the scenario's best
rubric reward), whatever the training reward; it prints a short summary (success by actual outcome
with its 95% interval, pedestrians hit, road departures, beside the oracle, the best constant
policy and random) and eval.md has every measure. --reward-mode auto trains on the rubric, except on
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
agent, periodically at the first --eval-traffic level and finally at each (the first level's final
result is the last row of evaluations.csv); evaluations.csv, eval.csv and learning_curve.png give
route completion, collision rate, success rate and the mean return (VLM-RL's reward; agents.compare
reports upstream's rubric instead); eval.jsonl holds every episode's outcome.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import gymnasium as gym
import numpy as np

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
from agents.players import GymAgent, RandomAgent, oracle_agent  # noqa: E402
from agents.records import MAX_EPISODES, EpisodeLog, episode_seed  # noqa: E402
from agents.sb3 import ModelPolicy  # noqa: E402
from agents.scripted import CONSTANT_AGENTS, CONTROL_CONSTANT_AGENTS, SCRIPTED_AGENTS, best_constant  # noqa: E402
from carla_gym.reward.encoder import FAITHFUL_MODEL  # noqa: E402
from carla_gym.reward.shaping import check_shaping  # noqa: E402
from carla_gym.sb3 import nav_eval, presets, runs  # noqa: E402
from carla_gym.sb3.callbacks import EvaluateEvery, LogShaping, WallClock  # noqa: E402
from carla_gym.sb3.checkpoint import CheckpointEvery, latest_checkpoint, replay_buffer_note, resume  # noqa: E402
from carla_gym.sb3.envs import batched_problem, make_venv  # noqa: E402
from carla_gym.sb3.evaluations import (  # noqa: E402
    EVAL_COLUMNS,
    NAV_COLUMNS,
    NAV_MEASURES,
    drop_rows_after,
    write_final_row,
)
from carla_gym.sb3.plots import NAV_PANELS, plot_learning_curve  # noqa: E402
from carla_gym.sim.outcomes import DECISION_TICKS  # noqa: E402
from carla_gym.sim.scenarios import is_generated  # noqa: E402

CLIP_FLAGS = {"pretrained": "--clip-pretrained", "device": "--clip-device", "mode": "--clip-mode",
              "weight": "--clip-weight", "cache_dir": None, "model_name": None}
"""Keywords of the CLIP reward model and shaping -> this script's flags, for their errors (`as_flags`); None: the
flag does not exist (the --clip preset sets the model; weights come from --clip-pretrained or the default cache)."""


DEFAULT_SCENARIO = "trolley_generated_train"
"""The default training scenario on CarlaTrolley-v0 (this project's choice): the generated family's train split,
evaluated on its held-out test split, with the outcome reward (``--reward-mode auto``)."""
DEFAULT_N_ENVS = 16
"""Default ``--n-envs`` of PPO on CarlaTrolley-v0 (this project's choice: the batched env steps 16 worlds in one
call, and `carla_gym.sb3.presets.GENERATED_CPU_PPO` was measured with it)."""
SAC_N_ENVS = 4
"""Default ``--n-envs`` of SAC on CarlaTrolley-v0: the ``cpu`` preset's SAC (``train_freq=4``, ``gradient_steps=2``)
was measured with 4 envs, and more envs give it fewer updates per env step."""
NAV_N_ENVS = 4
"""Default ``--n-envs`` on CarlaNavigation-v0: the CPU recipe's (this project's choice; benchmarks/learn_nav.py and
docs/performance.md measure it with this value)."""

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
    scenario: list[str] = arg([DEFAULT_SCENARIO], "scenario or suite names (suites: micro, micro_deadzone, "
                                                  "trainable, probes, mixed, action_bias); several are sampled per "
                                                  f"reset; CarlaNavigation-v0: route_<town>, default {NAV_SCENARIO}")
    total_timesteps: int = arg(0, "environment steps (decisions) to train, rounded up to whole rollouts; 0: "
                                  "the preset's default")
    preset: Literal["cpu", "vlm-rl"] = arg("cpu", "hyperparameters: cpu (fast here) or vlm-rl (VLM-RL's published "
                                                  "settings)")
    seed: int = arg(0, "seed of torch, numpy and the environments")
    n_envs: int = arg(DEFAULT_N_ENVS, f"parallel environments (default: {DEFAULT_N_ENVS} for PPO, {SAC_N_ENVS} for "
                                      f"SAC; CarlaNavigation-v0: {NAV_N_ENVS})")
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
    n_envs = args.n_envs if "--n-envs" in given else NAV_N_ENVS
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
    return dataclasses.replace(args, scenario=list(scenario), n_envs=n_envs, ticks_per_action=ticks,
                               action_mode=action_mode,
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
    clip_mode, clip_pretrained = args.clip_mode, args.clip_pretrained
    if args.clip != "none":
        clip_mode = clip_mode or ("replace" if args.clip == "vlm-rl" else "add")
        clip_pretrained = clip_pretrained or (FAITHFUL_MODEL[1] if args.clip == "vlm-rl" else "")
    try:
        scenario = list(resolve_scenarios(args.scenario)) if args.env != NAV else list(args.scenario)
    except ValueError as exc:
        sys.exit(f"--scenario: {exc}")
    defaults = {**presets.DEFAULT_TIMESTEPS, **(presets.NAV_DEFAULT_TIMESTEPS if args.env == NAV else {}),
                **(presets.GENERATED_DEFAULT_TIMESTEPS if args.env != NAV and runs.all_generated(scenario) else {})}
    total = args.total_timesteps or defaults[(args.preset, args.algo)]
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
    n_envs = args.n_envs
    if args.env != NAV and args.algo == "sac" and "--n-envs" not in given_flags(argv or []):
        n_envs = SAC_N_ENVS
    return dataclasses.replace(args, action_mode=action_mode, total_timesteps=total, scenario=scenario, n_envs=n_envs,
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


GIF_EPISODES = 3
"""Evaluation episodes of the trained model in ``episodes.gif`` (this project's choice: a few seconds to write)."""


def baseline_agents(eval_kwargs: dict) -> tuple[list[GymAgent], GymAgent]:
    """The constant policies and the uniformly random agent of the trained model's action mode.

    They observe the state vector (they ignore it; rendering a camera would only cost time). Tool
    actions: the constant tool policies (`agents.scripted.CONSTANT_AGENTS`), at 10 ticks per
    decision (`carla_gym.sim.outcomes.DECISION_TICKS`, the candidate policies' rate, at which each
    plays its candidate policy whatever the model's ticks per action), and `agents.players.RandomAgent`
    at the model's ticks per action. Control actions: the constant control policies
    (`agents.scripted.CONTROL_CONSTANT_AGENTS`: full or no steer either way with full brake, no pedal
    or full throttle) and `agents.players.RandomAgent` with control actions, in the model's env (ticks per
    action, steering smoothing).

    Args:
        eval_kwargs: The `CarlaTrolley-v0` keyword arguments the model acts in (``action_mode`` included).

    Returns:
        ``(constants, random)``: GymAgents named as `agents.compare` names them (``brake``,
        ``control_steer_left_brake``, ``random``, ...).
    """
    state = {**eval_kwargs, "observation_mode": "state"}
    if eval_kwargs["action_mode"] == "control":
        constants = [GymAgent(name, SCRIPTED_AGENTS[name](), state) for name in CONTROL_CONSTANT_AGENTS]
        return constants, GymAgent("random", RandomAgent("control"), state)
    tools = {**state, "ticks_per_action": DECISION_TICKS}
    constants = [GymAgent(name, SCRIPTED_AGENTS[name](), tools) for name in CONSTANT_AGENTS]
    return constants, GymAgent("random", RandomAgent(), state)


def success_text(row: dict) -> str:
    """Success by actual outcome of a summary row with its 95% interval, as the short summary prints it.

    ``46% [37%, 56%]``, ``100% exact`` (identical replicates), ``46%`` (no interval: a single episode)
    or ``n/a`` (action_bias scenarios only, where it does not apply).

    >>> success_text({"outcome_success_rate": 0.46, "outcome_success_ci95_low": 0.366,
    ...               "outcome_success_ci95_high": 0.557, "replicates_identical": False})
    '46% [37%, 56%]'
    >>> success_text({"outcome_success_rate": 1.0, "outcome_success_ci95_low": float("nan"),
    ...               "outcome_success_ci95_high": float("nan"), "replicates_identical": True})
    '100% exact'
    """
    rate, low = row["outcome_success_rate"], row["outcome_success_ci95_low"]
    if math.isnan(rate):
        return "n/a"
    if row["replicates_identical"]:
        return f"{rate:.0%} exact"
    return f"{rate:.0%}" + ("" if math.isnan(low) else f" [{low:.0%}, {row['outcome_success_ci95_high']:.0%}]")


def summary_lines(args: Args, out: Path, pooled: dict[str, dict], labels: dict[str, str], records: list[dict],
                  trained: str, gif: Path | None) -> list[str]:
    """The evaluation part of the final printout: where and how it played, one line per agent, the files.

    Args:
        args: The run's arguments (evaluation scenarios and episodes, training scenarios).
        out: The run directory.
        pooled: Agent name -> its pooled summary row (`agents.evaluation.pooled_row`).
        labels: Agent name -> the label printed, in print order.
        records: The final evaluation's records (the episodes ``episodes.gif`` shows).
        trained: The trained model's agent name.
        gif: ``episodes.gif``, or None when none was written.
    """
    scenarios = args.eval_scenario
    held_out = not set(scenarios) & set(args.scenario)
    where = ", ".join(scenarios) if len(scenarios) < 3 else f"{len(scenarios)} scenarios"
    each = " per scenario" if len(scenarios) > 1 else ""
    layouts = " (a layout drawn per env seed)" if all(is_generated(name) for name in scenarios) else ""
    first, last = episode_seed(EVAL_SEED, 0), episode_seed(EVAL_SEED, args.eval_episodes - 1)
    lines = [f"evaluation on {'held-out ' if held_out else ''}{where}: {args.eval_episodes} episodes{each}{layouts}, "
             f"env seeds {first}-{last}, the same for every agent:"]
    width = max(len(label) for label in labels.values())
    lines.append(f"  {'agent':<{width}}  {'episodes':>8}  {'success by actual outcome':<26}  {'hit/episode':>11}  "
                 "road departures")
    for name, label in labels.items():
        row = pooled[name]
        lines.append(f"  {label:<{width}}  {row['episodes']:>8}  {success_text(row):<26}  "
                     f"{row['actual_pedestrians_hit']:>11.2f}  {row['road_departure_rate']:.0%}")
    if any(pooled[name]["episodes"] < args.eval_episodes * len(scenarios) for name in labels):
        lines.append("  (fewer episodes: a deterministic agent plays a fixed scenario once, as every replay of it is "
                     "the same episode)")
    files = "eval.md (every measure per agent and scenario), learning_curve.png"
    if gif is not None:
        shown = len(gif_records(records, trained, scenarios))
        files += f", {gif.name} ({shown} evaluation episode{'s' if shown > 1 else ''} of {trained})"
    lines.append(f"files in {out}: {files}")
    return lines


def gif_records(records: list[dict], agent: str, scenarios: list[str], count: int = GIF_EPISODES) -> list[dict]:
    """The first ``count`` evaluation episodes of ``agent``, taking each scenario in turn (episode 0 of each first)."""
    order = {name: i for i, name in enumerate(scenarios)}
    mine = [r for r in records if r["agent"] == agent]
    return sorted(mine, key=lambda r: (r["seed"], r["episode"], order.get(r["scenario"], len(order))))[:count]


def episode_caption(record: dict) -> str:
    """The first caption line of an episode in ``episodes.gif``: who, where, and its outcome beside the best one.

    >>> episode_caption({"agent": "ppo", "scenario": "trolley_generated_test", "episode": 2, "seed": 10,
    ...                  "actual_pedestrians_hit": 1, "road_departure": False, "outcome_success": False,
    ...                  "best_pedestrians_hit": 0, "best_road_departure": True})
    'ppo | generated_test, episode 2 | 1 hit, on road | failure: the best is 0 hit, off road'
    """
    def outcome(hits: int, departed: bool) -> str:
        return f"{hits} hit, " + ("off road" if departed else "on road")

    result = outcome(record["actual_pedestrians_hit"], record["road_departure"])
    best = ("success: the best outcome" if record["outcome_success"] else
            f"failure: the best is {outcome(record['best_pedestrians_hit'], record['best_road_departure'])}")
    return (f"{record['agent']} | {record['scenario'].removeprefix('trolley_')}, episode {record['episode']} | "
            f"{result} | {best}")


def write_episodes_gif(records: list[dict], path: Path, ticks_per_action: int) -> Path:
    """Replay ``records`` (`agents.video.replay`) into one animated GIF, front camera beside the bird's-eye view.

    One frame per 0.05 s tick at real-time speed, each episode's last frame held 1.5 s; a caption band
    (`agents.video.with_caption`) gives the episode and its outcome, then tick, time, action and speed.
    Written with Pillow (a core dependency; the ``[sb3]`` install has no imageio), in one 255-colour
    palette, atomically.

    Args:
        records: Episode records of `CarlaTrolley-v0` (tool or control actions, no steering smoothing).
        path: The GIF to write.
        ticks_per_action: Ticks per decision of the recorded episodes.

    Returns:
        ``path``.

    Raises:
        ValueError: No records.
    """
    from PIL import Image

    from agents.video import caption, replay, with_caption
    from carla_gym.sim import constants as C

    if not records:
        raise ValueError("records=[]: a GIF needs at least one episode")
    frames, durations = [], []
    for record in records:
        front, states, _ = replay(record, "front", (320, 180), ticks_per_action)
        top, _, _ = replay(record, "birdeye", (180, 180), ticks_per_action)
        head = episode_caption(record)
        for a, b, state in zip(front, top, states, strict=True):
            frames.append(with_caption(np.concatenate([a, b], axis=1), (head, caption(record, state)[1])))
            durations.append(round(1000 * C.DT))
        durations[-1] = 1500
    # one palette for every frame, from a sample of them: each frame maps onto it without dithering, and the
    # frames are stored whole (Pillow's per-frame palette and difference search take seconds)
    sample = np.concatenate(frames[::max(len(frames) // 8, 1)], axis=0)
    palette = Image.fromarray(sample).quantize(colors=255, method=Image.Quantize.MEDIANCUT)
    images = [Image.fromarray(frame).quantize(palette=palette, dither=Image.Dither.NONE) for frame in frames]
    tmp = path.with_name(path.stem + ".tmp.gif")
    images[0].save(tmp, save_all=True, append_images=images[1:], duration=durations, loop=0, optimize=False)
    replace_durably(tmp, path)
    return path


def finish_trolley(args: Args, out: Path, trained: GymAgent, eval_kwargs: dict, timesteps: int,
                   train_seconds: float) -> dict:
    """CarlaTrolley-v0's final evaluation, its files and the short summary it prints.

    The model, the oracle, the constant policies of its action mode and random (`baseline_agents`) play
    the same scenarios and seeds, records appended to eval.jsonl as they finish; then the model's
    result becomes the last row of evaluations.csv (`carla_gym.sb3.evaluations.write_final_row`), the
    learning curve and episodes.gif are drawn, and eval.csv, eval.md and eval.json are written (eval.json
    last: the run is complete).

    Returns:
        eval.json's content.
    """
    log = EpisodeLog(out / "eval.jsonl")
    log.path.unlink(missing_ok=True)  # an evaluation cut short by a crash is redone
    constants, random = baseline_agents(eval_kwargs)
    players = [trained, oracle_agent(eval_kwargs), *constants, random]
    try:
        records = play_all(players, args.eval_scenario, [EVAL_SEED], args.eval_episodes, on_record=log.append)
    finally:
        for player in players:
            player.close()
    pooled = {player.name: pooled_row(records, player.name) for player in players}
    names = [c.name for c in constants]
    best = best_constant({n: pooled[n]["outcome_success_rate"] for n in names}, names)
    write_final_row(out / "evaluations.csv", timesteps, pooled[trained.name], train_seconds)
    where = args.scenario[0] if len(args.scenario) == 1 else f"{len(args.scenario)} scenarios"
    if args.eval_scenario != args.scenario:
        where += (f", evaluated on {', '.join(args.eval_scenario)}" if len(args.eval_scenario) < 3
                  else f", evaluated on {len(args.eval_scenario)} scenarios")
    plot_learning_curve(out / "evaluations.csv", out / "learning_curve.png",
                        f"{args.algo.upper()} on {where} (reward mode {args.reward_mode})")
    gif = None
    if "steer_smoothing" not in eval_kwargs:  # agents.video replays without the steer filter
        gif = write_episodes_gif(gif_records(records, trained.name, args.eval_scenario), out / "episodes.gif",
                                 args.ticks_per_action)
    write_summary(records, [player.name for player in players], args.eval_scenario, out, "eval",
                  extra={"algo": args.algo, "reward_mode": args.reward_mode, "scenario": args.scenario,
                         "eval_scenario": args.eval_scenario, "train_seconds": round(train_seconds, 1),
                         "total_timesteps": int(timesteps), "episodes_per_scenario": args.eval_episodes,
                         "eval_seed": EVAL_SEED, "best_constant": best})
    discard_set_aside(out)  # the new run is complete
    labels = {trained.name: f"{trained.name} (trained)", "oracle": "oracle (best outcome)",
              best: f"best constant: {best}", random.name: "random"}
    print(f"trained {args.algo.upper()} for {timesteps} steps in {train_seconds:.1f} s with reward mode "
          f"{args.reward_mode}; model saved to {out / 'model.zip'}")
    print("\n".join(summary_lines(args, out, pooled, labels, records, trained.name, gif)))
    return json.loads((out / "eval.json").read_text())


def finish_navigation(args: Args, out: Path, act, eval_kwargs: dict, timesteps: int, train_seconds: float) -> dict:
    """CarlaNavigation-v0's final evaluation (`carla_gym.sb3.nav_eval`), its files and the learning curve.

    One episode per evaluation route at every ``--eval-traffic`` level, appended to eval.jsonl as it
    finishes; then the first level's result as the last row of evaluations.csv
    (`carla_gym.sb3.evaluations.write_final_row`), eval.csv, eval.md and eval.json (the run is complete)
    and learning_curve.png.

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
    write_final_row(out / "evaluations.csv", timesteps,
                    nav_eval.summarise([r for r in records if r["traffic"] == args.eval_traffic[0]]), train_seconds,
                    NAV_MEASURES)
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
            hyper = {**presets.hyperparameters(args.preset, args.algo, extractor, navigation=args.env == NAV,
                                               generated=args.env != NAV and runs.all_generated(args.scenario)),
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
    # both run at rollout starts, after the update; the evaluation first (CallbackList order), so the checkpoint of
    # a step holds the policy its row scored and a resume from it does not redo that row
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

    # --- evaluate: the policy and its baselines on the same seeds; the summary and the files ---
    return finish_trolley(args, out, trained, eval_kwargs, model.num_timesteps, train_seconds)


if __name__ == "__main__":
    if main().get("interrupted"):
        sys.exit(130)  # the shell's status for Ctrl-C: an interrupted run is not a success
