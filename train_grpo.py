"""Train a tool-calling LLM or VLM with GRPO (TRL) on CarlaTrolley-v0, then evaluate it on the scenarios.

Usage:
    python train_grpo.py --model tiny-random --max-steps 2        # offline smoke run, random 2-layer Qwen3
    python train_grpo.py                                          # Qwen/Qwen3-0.6B on escape_exists (GPU)
    python train_grpo.py --model /path/to/Qwen3-0.6B --lora       # a local copy, LoRA adapters
    python train_grpo.py --vision --lora                          # Qwen/Qwen3-VL-2B-Instruct, camera images
    python train_grpo.py --scenario trainable --dataset-size 256  # a suite (carla_gym.suites) or names
    python train_grpo.py --scenario maze_navigation free_roam_Town02_v20  # navigation: multi-turn, 7 tools
    python train_grpo.py --env-urls http://127.0.0.1:8000         # OpenEnv servers instead of the embedded sim
    python train_grpo.py --config grpo.yaml                       # any flag from a YAML file (TRL's --config)
    python train_grpo.py --model tiny-random --scenario trolley_generated_train --sft-steps 150 --eval-every 25
                                                                  # warm start, GRPO, held-out eval_curve.csv
    accelerate launch --multi_gpu --num_processes 2 train_grpo.py ...   # 2 processes (on CPU too: gloo)

The command line is TRL's own (`trl.TrlParser` over `Args` and `trl.GRPOConfig`): this project's
options are the fields of `Args`; every GRPOConfig option (--per-device-train-batch-size,
--max-completion-length, --learning-rate, --report-to, --beta, ...) is available with TRL's name and
TRL's default, except where `PROJECT_DEFAULTS` sets this project's documented default, and
`device_defaults` chooses the precision and device from the machine (bf16 and activation
checkpointing on CUDA, fp32 on the CPU) unless the flags are given. GRPOConfig checks its own
values (batch divisibility, at least 2 generations); its refusal names the flags.

``--sft-steps N`` first trains N steps of a supervised warm start (TRL's SFTTrainer, `carla_gym.llm.sft`) on
synthetic transcripts whose tool call is drawn uniformly at random (the format, not the answer);
``--eval-every K`` evaluates the model greedily on ``--eval-scenario`` (default: the training scenarios,
trolley_generated_train replaced by the held-out trolley_generated_test) before the first step and every K
steps, appending rows to eval_curve.csv (`carla_gym.llm.curve`); ``--reward-mode outcome`` (the default
``auto`` on generated scenarios) pays 1 for reaching the simulated best outcome.

Each rollout drives its own `carla_gym.llm.CarlaToolEnv` (tools observe, emergency_stop and
lane_change; one tool call = 10 ticks = 0.5 s), built by TRL's ``environment_factory``; the
reward is the episode's rubric reward after the episode is played out
(`carla_gym.llm.tools.rubric_reward`; --no-play-out scores as TRL's CARLA example), or with --reward-mode
outcome (the default on generated scenarios) 1 for reaching the simulated best outcome. Dataset row i
plays scenario i mod len(scenarios) with seed ``--seed + i``, so all ``--num-generations``
rollouts of a GRPO group start from the same state.

Navigation scenarios (``maze_navigation``, ``free_roam[_<Map>[_v<N>][_p<M>]]``; not mixed with trolley ones in one
run; route_<Town> scenarios are refused: they are for train_sb3.py and agents.compare) train multi-turn episodes on
`carla_gym.llm.nav_tools.NavToolEnv` instead: upstream's seven navigation tools (observe, control_vehicle,
emergency_stop, lane_change, init_navigation_agent, set_destination, follow_route) on `CarlaNavigation-v0` episodes
(row seed = the env's reset seed, so a Gymnasium agent reset with that seed plays the same episode), the reward the
summed env rubric reward after the episode is played out to the env's end (arrival, a collision or its 300 s time
limit; `carla_gym.llm.nav_tools.nav_rubric_reward`), on the embedded simulator only; with --vision the tool results
carry the front camera or, with --nav-view birdeye, the bird's-eye view with the route and the goal. Their
evaluation plays the trained model on --eval-episodes episodes of each scenario
(`carla_gym.llm.rollout.play_episode`, env seeds 10000, 10001, ..., the training's env rules) and writes eval.json
(records and per-scenario rows of the harness's summary, `agents.nav_summary.nav_row`); there is no oracle for
navigation.

Before training it prints one line (`header`): model, LoRA or full fine-tune, text or image tools,
scenarios, prompts x generations, steps, where rollouts run, device and run directory. One output
directory holds: config.json (this project's arguments, TRL's GRPOConfig, package versions),
model/ (the trained model, or only the LoRA adapter with --lora, and the tokenizer/processor),
train_log.json (TRL's log history: rewards/rubric_reward/mean, tools/call_frequency,
episode/success, trolley_action/*, ...), tb/ with --report-to tensorboard, and the evaluation.

The evaluation is the comparison harness's (`agents.evaluation`): the trained model (agent
``grpo``, greedy decoding), and for reference the oracle (``oracle``: the simulated best outcome,
the reference for success by actual outcome) and the catalogue's rubric answer (``rubric_answer``:
the reference for upstream's rubric reward), play --eval-episodes episodes of every scenario on env
seeds 10000, 10001, ... (comparison seed `agents.evaluation.EVAL_SEED`, as train_sb3.py); the two
references are deterministic, so they play each fixed scenario once (`agents.evaluation.play_all`).
eval.jsonl holds the records (`agents.records`), appended as each episode finishes, and eval.csv /
eval.md / eval.json the summary (`agents.summary`). Evaluation episodes are always played out to
their end and scored with the rubric, like the harness's: --no-play-out and --reward-mode change the
training reward only.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agents.evaluation import EVAL_SEED, play_all, write_summary
from agents.players import ChatAgent, oracle_agent, rubric_answer_agent
from agents.records import MAX_EPISODES, EpisodeLog, episode_seed
from carla_gym.cli_args import HelpFormatter, arg, check_minimums, check_url
from carla_gym.envs.navigation import TIME_LIMIT_S
from carla_gym.hints import exit_without_extras, python_command, script_command
from carla_gym.io import discard_set_aside, set_aside, write_json_atomic

DEFAULT_TEXT_MODEL = "Qwen/Qwen3-0.6B"  # TRL's CARLA example (examples/scripts/openenv/carla.py)
DEFAULT_VISION_MODEL = "Qwen/Qwen3-VL-2B-Instruct"  # smallest Qwen3-VL; its template renders tool images
AGENT = "grpo"  # the trained model's name in the evaluation records and summary

PROJECT_DEFAULTS = {
    "output_dir": "runs/grpo",  # beside train_sb3.py's runs (TRL's default trainer_output)
    "learning_rate": 1e-5,  # this project's choice (TRL's default 1e-6, its CARLA Gemma example 5e-6)
    "max_completion_length": 1024,  # TRL's CARLA example (TRL's default 512)
    "max_tool_calling_iterations": 10,  # TRL's CARLA Gemma example (TRL's default: no limit)
    "logging_steps": 1,  # a line per optimizer step: runs are short (TRL's default 10)
    "num_train_epochs": 1,  # --max-steps -1 means one pass over --dataset-size prompts (TRL's default 3)
    "save_strategy": "no",  # the model is saved once, at the end or on Ctrl-C (TRL's default "steps")
    "seed": 0,  # also seeds the tiny models and the dataset rows (TRL's default 42)
    # thinking off, as TRL's CARLA example; templates without that switch (Qwen3-VL) ignore it (TRL's default None)
    "chat_template_kwargs": {"enable_thinking": False},
}
"""GRPOConfig defaults this script changes (the Defaults table of docs/training/grpo.md); every other TRL default
stands."""


@dataclass
class Args:
    """This project's options; TRL's GRPOConfig adds its own (``--help`` lists both)."""

    model: str = arg("", f"hub id, local directory, or tiny-random / tiny-random-vl (offline, random weights); "
                         f"empty (default): {DEFAULT_TEXT_MODEL}, or {DEFAULT_VISION_MODEL} with --vision")
    vision: bool = arg(False, "VLM mode: tools return a camera image with the text")
    image_size: int = arg(256, "width [px] of tool images, 16-1024 (height 9/16 of it), as the thumbnail(256) of "
                               "TRL's CARLA VLM example")
    scenario: list[str] = arg(["trolley_micro_escape_exists"], "scenario or suite names (suites: micro, "
                               "micro_deadzone, trainable, probes, mixed, action_bias), or navigation scenarios "
                               "(maze_navigation, free_roam[_<Map>[_v<N>][_p<M>]]), not both kinds")
    nav_view: Literal["front", "birdeye"] = arg("front", "camera of navigation tool images with --vision: front "
                                                         "(upstream's camera) or birdeye (route and goal drawn)")
    nav_time_limit_s: float = arg(TIME_LIMIT_S, "simulated time [s] that ends a navigation episode "
                                                "(CarlaNavigation-v0's time_limit_s)")
    dataset_size: int = arg(64, "prompts, i.e. GRPO groups of --num-generations episodes each; row i plays "
                                "scenario i mod len with seed --seed + i")
    lora: bool = arg(False, "train LoRA adapters on the language model instead of all weights")
    lora_r: int = arg(16, "LoRA rank")
    lora_alpha: int = arg(32, "LoRA alpha")
    lora_exclude: str = arg("", "regex of modules without adapters; empty: the vision tower and projector "
                                "(carla_gym.llm.grpo.VISION_MODULES)")
    ticks_per_action: int = dataclasses.field(default=10, metadata={
        "help": "simulator ticks (0.05 s) per tool call (alias: --ticks-per-tool)",
        "aliases": ["--ticks-per-tool", "--ticks_per_tool"]})
    reward_mode: Literal["auto", "rubric", "physical", "outcome"] = arg(
        "auto", "training reward: rubric (upstream), physical (-1 per pedestrian actually hit, -0.5 for leaving "
                "the road) or outcome (1 when the episode reaches the simulated best outcome, else 0); auto: outcome "
                "when every scenario is generated (trolley_generated_*), else rubric")
    no_play_out: bool = arg(False, "score training rollouts as TRL's CARLA example: 0 unless the model itself ran the "
                                   "episode to its end (default: unfinished episodes are played out with the "
                                   "controls held); evaluation episodes are always played out")
    env_urls: list[str] = arg([], "OpenEnv server URLs (carla-gym serve); rollout i uses URL i mod len; "
                                  "empty: the embedded simulator in this process")
    eval_scenario: list[str] = arg([], "scenarios of the evaluations; empty: the training scenarios, "
                                       "trolley_generated_train replaced by the held-out trolley_generated_test")
    eval_episodes: int = arg(4, "evaluation episodes per scenario after training (0: skip)")
    eval_every: int = arg(0, "evaluate the model on --eval-scenario every N optimizer steps and before the first "
                             "(eval_curve.csv; 0: only after training)")
    eval_curve_episodes: int = arg(64, "episodes per scenario of each --eval-every evaluation (greedy, batched; "
                                       "at most agents.records.MAX_EPISODES); this project's choice: the final "
                                       "evaluation's first 64 seeds (docs/performance.md \"GRPO learning on CPU\")")
    sft_steps: int = arg(0, "supervised warm start before GRPO (TRL's SFTTrainer): optimizer steps on synthetic "
                            "transcripts with a uniformly random tool (format only; 0: none)")
    sft_examples: int = arg(256, "synthetic transcripts of the warm start (scenario i mod len, seed --seed + 1000000 "
                                 "+ i); this project's choice, tuned on the tiny models (docs/performance.md \"GRPO "
                                 "learning on CPU\")")
    sft_learning_rate: float = arg(1e-2, "peak learning rate of the warm start (linear decay); this project's choice "
                                         "for the tiny models (docs/performance.md \"GRPO learning on CPU\"; a real "
                                         "model wants about 1e-5)")
    sft_batch_size: int = arg(8, "transcripts per warm-start step; this project's choice (docs/performance.md \"GRPO "
                                 "learning on CPU\")")
    tiny_hidden_size: int = arg(32, "hidden size of --model tiny-random (4 attention heads)")
    tiny_layers: int = arg(2, "decoder layers of --model tiny-random")
    tiny_tokenizer: Literal["words", "lines"] = arg(
        "words", "tokenizer of --model tiny-random: words (BPE within words, on this project's prompts) or lines (BPE "
                 "merges up to line ends, trained on rendered episodes of the training scenarios: recurring lines "
                 "such as the tool schema and a tool call become single tokens)")
    eval_max_new_tokens: int = arg(256, "token budget of one evaluation turn")
    overwrite: bool = arg(False, "replace a non-empty output directory written by train_grpo.py")


def device_defaults() -> dict:
    """The machine's precision and device: bf16 and activation checkpointing on CUDA (bf16 where supported), else CPU.

    Set as parser defaults, so a flag given on the command line still wins (``--bf16 false``,
    ``--use-cpu true``, ``--activation-checkpointing true``). TRL's own defaults (bf16 on,
    checkpointing on) fail on a CPU (bf16) or only slow it down (checkpointing). Checkpointing is set
    through TRL's ``gradient_checkpointing`` (transformers' deprecated alias, which TRL overrides),
    so that either flag still sets it.

    On a GPU with bf16 the default stays TRL's (None: bf16 unless ``--fp16 true`` is given), so
    ``--fp16 true`` alone switches to fp16 there.

    Returns:
        ``{"use_cpu": bool, "bf16": bool or None, "gradient_checkpointing": bool}``.
    """
    import torch

    cuda = torch.cuda.is_available()
    bf16 = None if cuda and torch.cuda.is_bf16_supported() else False  # None: TRL's rule, bf16 unless --fp16
    return {"use_cpu": not cuda, "bf16": bf16, "gradient_checkpointing": cuda}


def make_parser():
    """TRL's parser over `Args` and GRPOConfig, with `PROJECT_DEFAULTS` and `device_defaults`.

    Raises:
        SystemExit: Without the ``[grpo]`` extra (names its install command).
    """
    exit_without_extras("grpo")
    from trl import GRPOConfig, TrlParser

    # TRL 1.16 still uses transformers' deprecated gradient-checkpointing names (its default, every generation)
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)

    parser = TrlParser((Args, GRPOConfig), description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.set_defaults(**PROJECT_DEFAULTS, **device_defaults())
    return parser


def flags_named(message: str) -> str:
    """``message`` with every option name that holds an underscore written as its flag.

    Single words (``seed``, ``beta``) are left alone: in a message they may be plain English.

    >>> flags_named("generation_batch_size (8) must be divisible by num_generations (3).")
    '--generation-batch-size (8) must be divisible by --num-generations (3).'
    """
    return re.sub(r"(?<![\w-])([a-z]+(?:_[a-z0-9]+)+)\b", lambda m: "--" + m.group(1).replace("_", "-"), message)


def parse_args(argv: Sequence[str] | None = None):
    """Parse ``argv`` (default: the command line) into ``(Args, GRPOConfig)``; exit naming the flags GRPOConfig refuses.

    Raises:
        SystemExit: A bad value (argparse's message, or GRPOConfig's with its option names as flags).
    """
    parser = make_parser()
    try:
        args, config, unknown = parser.parse_args_and_config(argv, return_remaining_strings=True)
    except ValueError as exc:
        note = ""
        if "generation_batch_size" in str(exc):
            note = (" (unless given, --generation-batch-size is --per-device-train-batch-size x "
                    "--gradient-accumulation-steps x processes)")
        sys.exit(f"train_grpo.py: {flags_named(str(exc))}{note}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args, config


def resolve(args: Args, config, argv: Sequence[str] | None = None) -> Args:
    """Fill the automatic choices (model, LoRA exclusion), expand suites, check what TRL does not; exit naming a flag.

    Args:
        args: This project's options.
        config: The GRPOConfig (read, not changed).
        argv: The command line, repeated with ``--overwrite`` in the hint for a non-empty
            output directory (default: ``sys.argv[1:]``).

    Raises:
        SystemExit: A bad flag; a refusal that suggests a command prints it in full, and only where it works.
    """
    from transformers.integrations import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

    from carla_gym.llm.grpo import VISION_MODULES, is_grpo_run
    from carla_gym.llm.tiny import TINY_MODELS
    from carla_gym.sb3.runs import all_generated, default_eval_scenarios
    from carla_gym.sim.navigation.scenarios import is_nav_name
    from carla_gym.suites import resolve_scenarios

    args = dataclasses.replace(args)
    args.model = args.model or (DEFAULT_VISION_MODEL if args.vision else DEFAULT_TEXT_MODEL)
    args.lora_exclude = args.lora_exclude or VISION_MODULES
    refuse_routes(args.scenario)
    if any(is_nav_name(name) for name in args.scenario):
        args.reward_mode = "rubric" if args.reward_mode == "auto" else args.reward_mode
        check_nav(args)
        if args.eval_scenario and args.eval_scenario != args.scenario:
            sys.exit("--eval-scenario: navigation runs evaluate on their training scenarios; leave it out")
        if args.eval_every or args.sft_steps:
            flag = "--eval-every" if args.eval_every else "--sft-steps"
            sys.exit(f"{flag}: trolley scenarios only (the warm start and the learning curve play trolley tools); "
                     "leave it out for navigation")
        args.eval_scenario = list(args.scenario)
    else:
        for flag, names in (("--scenario", args.scenario), ("--eval-scenario", args.eval_scenario)):
            try:
                resolve_scenarios(names or args.scenario)
            except ValueError as exc:
                sys.exit(f"{flag}: {exc}")
        args.scenario = list(resolve_scenarios(args.scenario))
        args.eval_scenario = list(resolve_scenarios(args.eval_scenario)) if args.eval_scenario else \
            default_eval_scenarios(args.scenario)
        if any(is_nav_name(name) for name in args.eval_scenario):
            sys.exit("--eval-scenario: a trolley run evaluates on trolley scenarios; name trolley scenarios or suites")
        if args.reward_mode == "auto":
            args.reward_mode = "outcome" if all_generated(args.scenario) else "rubric"
        refuse_outcome_on_action_bias(args.reward_mode, args.scenario)
    if args.model != "tiny-random" and (args.tiny_hidden_size, args.tiny_layers, args.tiny_tokenizer) != (32, 2,
                                                                                                         "words"):
        sys.exit(f"--tiny-hidden-size, --tiny-layers and --tiny-tokenizer shape --model tiny-random only, not "
                 f"{args.model}; leave them out")
    if args.model in TINY_MODELS and (args.model == "tiny-random-vl") != args.vision:
        sys.exit(f"--model {args.model}: use tiny-random without --vision and tiny-random-vl with --vision")
    available = get_available_reporting_integrations()
    for name in config.report_to:
        if name not in INTEGRATION_TO_CALLBACK:
            sys.exit(f"--report-to {name}: not a logging integration of transformers; choose none, all or one of "
                     f"{sorted(INTEGRATION_TO_CALLBACK)}")
        if name not in available:
            sys.exit(f"--report-to {name}: the {name} package is not installed; install it with: "
                     f"{python_command('-m', 'pip', 'install', name)}")
    check_minimums((("--dataset-size", args.dataset_size, 1), ("--image-size", args.image_size, 16),
                    ("--ticks-per-action", args.ticks_per_action, 1), ("--lora-r", args.lora_r, 1),
                    ("--lora-alpha", args.lora_alpha, 1), ("--eval-episodes", args.eval_episodes, 0),
                    ("--eval-max-new-tokens", args.eval_max_new_tokens, 1), ("--eval-every", args.eval_every, 0),
                    ("--eval-curve-episodes", args.eval_curve_episodes, 1), ("--sft-steps", args.sft_steps, 0),
                    ("--sft-examples", args.sft_examples, 1), ("--sft-batch-size", args.sft_batch_size, 1),
                    ("--tiny-hidden-size", args.tiny_hidden_size, 8), ("--tiny-layers", args.tiny_layers, 1),
                    # GRPOConfig values TRL does not check, each of which would fail only after the model loads
                    ("--per-device-train-batch-size", config.per_device_train_batch_size, 1),
                    ("--gradient-accumulation-steps", config.gradient_accumulation_steps, 1),
                    ("--max-completion-length", config.max_completion_length, 16),
                    ("--max-tool-calling-iterations", config.max_tool_calling_iterations or 0, 0)))
    for flag, value, high in (("--image-size", args.image_size, 1024),
                              ("--ticks-per-action", args.ticks_per_action, 1000),
                              ("--eval-episodes", args.eval_episodes, MAX_EPISODES),  # play_all's bound
                              ("--eval-curve-episodes", args.eval_curve_episodes, MAX_EPISODES)):  # the same seeds
        if value > high:
            sys.exit(f"{flag} {value}: must be <= {high}")
    if config.max_steps == 0 or config.max_steps < -1:
        sys.exit(f"--max-steps {config.max_steps}: must be >= 1, or -1 for one pass over the dataset")
    if args.tiny_hidden_size % 4:
        sys.exit(f"--tiny-hidden-size {args.tiny_hidden_size}: must be a multiple of 4 (four attention heads)")
    if not 0.0 < args.sft_learning_rate < 1.0:
        sys.exit(f"--sft-learning-rate {args.sft_learning_rate}: must be in (0, 1)")
    if args.sft_steps and (args.vision or args.env_urls):
        sys.exit("--sft-steps: the warm start renders text transcripts on the embedded simulator; leave out "
                 + ("--vision" if args.vision else "--env-urls"))
    if args.eval_every and args.vision:
        sys.exit("--eval-every: the learning curve's batched evaluation plays text models; leave out --vision")
    if not 0.0 < config.learning_rate < 1.0:
        sys.exit(f"--learning-rate {config.learning_rate}: must be in (0, 1)")
    if not config.temperature > 0.0:
        sys.exit(f"--temperature {config.temperature}: must be > 0")
    if config.beta < 0.0:
        sys.exit(f"--beta {config.beta}: must be >= 0")
    groups_per_step = config.generation_batch_size // config.num_generations  # GRPOConfig checked divisibility
    if args.dataset_size < groups_per_step:
        sys.exit(f"--dataset-size {args.dataset_size}: one step needs {groups_per_step} prompts "
                 f"({config.generation_batch_size} completions / --num-generations {config.num_generations})")
    if args.dataset_size % groups_per_step:
        print(f"note: TRL drops the last {args.dataset_size % groups_per_step} of --dataset-size {args.dataset_size} "
              f"prompts per pass ({groups_per_step} prompts per step)", file=sys.stderr)
    try:
        re.compile(args.lora_exclude)
    except re.error as exc:
        sys.exit(f"--lora-exclude {args.lora_exclude!r}: not a regular expression ({exc})")
    for url in args.env_urls:
        check_url(url, embedded="leave out --env-urls")
    out = Path(config.output_dir)
    if out.exists() and not out.is_dir():
        sys.exit(f"--output-dir {out}: exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not is_grpo_run(out):
            what = f"--overwrite {out}: refusing to replace a folder that" if args.overwrite else \
                f"{out} is not empty and"
            sys.exit(f"{what} is not a train_grpo.py run directory (its config.json does not say script: "
                     "train_grpo.py); choose another --output-dir")
        if not args.overwrite:
            again = script_command(__file__, *(sys.argv[1:] if argv is None else argv), "--overwrite")
            sys.exit(f"{out} is not empty; pass --overwrite to replace the run in it: {again}; or choose another "
                     "--output-dir")
    exit_without_extras(*(("server",) if args.env_urls else ()))
    return args


def refuse_routes(scenarios: Sequence[str]) -> None:
    """Exit naming a ``route_<Town>`` scenario among ``scenarios``: GRPO trains on maze and free roam only.

    Raises:
        SystemExit: A route scenario, with the valid navigation choices and where route scenarios are used.
    """
    from carla_gym.envs.nav_scenarios import ROUTE_SCENARIOS, is_route_name
    from carla_gym.sim.navigation.scenarios import NAME_PATTERNS

    routes = [name for name in scenarios if is_route_name(name)]
    if routes:
        sys.exit(f"--scenario {routes[0]}: route scenarios ({', '.join(ROUTE_SCENARIOS)}) are not trained with GRPO; "
                 f"train_grpo.py's navigation scenarios are {'; '.join(NAME_PATTERNS)}. Route scenarios are for "
                 "train_sb3.py --env CarlaNavigation-v0 and python -m agents.compare (suites nav_eval_routes_0/20/40)")


def refuse_outcome_on_action_bias(reward_mode: str, scenarios: Sequence[str]) -> None:
    """Exit when ``reward_mode`` is ``outcome`` and a training scenario is of the action_bias family.

    On action_bias scenarios ``outcome_success`` holds for every choice (`carla_gym.sim.outcomes`), so the outcome
    reward pays 1.0 for every tool: GRPO's groups get no advantage and the rollouts' success is 1 whatever the model
    does.

    Raises:
        SystemExit: Naming the action_bias scenarios and the reward modes that score them.
    """
    from carla_gym.sim.scenarios import family_of

    bias = [name for name in scenarios if family_of(name) == "action_bias"]
    if reward_mode == "outcome" and bias:
        sys.exit(f"--reward-mode outcome: pays 1.0 for every choice on the action_bias scenario(s) {', '.join(bias)} "
                 "(each choice reaches their best outcome), so GRPO would learn nothing from them; use --reward-mode "
                 "rubric (or physical) with them, or train the outcome reward on other scenarios")


NAV_MAX_TICKS = 100
"""Most --ticks-per-action of a navigation run (`carla_gym.llm.nav_tools.NavToolEnv`: the env's range)."""


def check_nav(args: Args) -> None:
    """Check the navigation scenarios and the flags they cannot take; exit naming the flag.

    Raises:
        SystemExit: Trolley and navigation scenarios mixed, a bad navigation name, --env-urls,
            --reward-mode physical, --ticks-per-action above `NAV_MAX_TICKS`, or a bad --nav-time-limit-s.
    """
    from carla_gym.sim.navigation.scenarios import is_nav_name, resolve_nav_scenario

    trolley = [name for name in args.scenario if not is_nav_name(name)]
    if trolley:
        sys.exit(f"--scenario: {trolley[0]} is a trolley scenario and the others are navigation scenarios; one run "
                 "trains one tool set, so train them in separate runs")
    for name in args.scenario:
        try:
            resolve_nav_scenario(name)
        except ValueError as exc:
            sys.exit(f"--scenario: {exc}")
    if args.env_urls:
        sys.exit("--env-urls: navigation scenarios run on the embedded simulator only; leave out --env-urls")
    if args.reward_mode != "rubric":
        sys.exit(f"--reward-mode {args.reward_mode}: navigation scenarios train on the rubric reward; leave it out")
    from carla_gym.envs.navigation import CarlaNavigationEnv

    try:
        CarlaNavigationEnv(time_limit_s=args.nav_time_limit_s)
    except ValueError as exc:
        sys.exit(f"--nav-time-limit-s: {exc}")
    if args.ticks_per_action > NAV_MAX_TICKS:
        sys.exit(f"--ticks-per-action {args.ticks_per_action}: navigation tools hold a call for at most "
                 f"{NAV_MAX_TICKS} ticks (CarlaNavigation-v0's ticks_per_action range)")


def versions() -> dict[str, str]:
    """Versions of the packages that decide the run's behaviour."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("openenv-carla-gym", "trl", "transformers", "peft", "torch", "gymnasium"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "not installed"
    return out


def header(args: Args, config) -> str:
    """The line printed before training: what is trained on what, on which device, and where the run goes.

    Args:
        args: Resolved arguments (`resolve`).
        config: The GRPOConfig: generations, steps, device (``cuda``/``cpu``), bf16 and output directory.
    """
    from carla_gym.llm.tools import image_height

    how = f"LoRA r={args.lora_r} alpha={args.lora_alpha}" if args.lora else "full fine-tune"
    from carla_gym.sim.navigation.scenarios import is_nav_name

    nav = is_nav_name(args.scenario[0])
    view = f"{args.nav_view} " if nav else ""
    tools = f"{view}camera images {args.image_size}x{image_height(args.image_size)} + text" if args.vision else "text"
    tools = f"navigation {tools}" if nav else tools
    steps = "one pass" if config.max_steps == -1 else f"{config.max_steps} step(s)"
    more = len(args.scenario) > 3
    scenarios = ", ".join(args.scenario[:3]) + (f", ... ({len(args.scenario)} in all)" if more else "")
    env = f"OpenEnv servers {', '.join(args.env_urls)}" if args.env_urls else "the embedded simulator"
    device = f"{config.device.type} ({'bf16' if config.bf16 else 'fp32'})"
    return (f"training {args.model} with GRPO ({how}, {tools} tools) on {scenarios}: {args.dataset_size} prompts x "
            f"{config.num_generations} generations, {steps}, rollouts on {env}; device {device}; run directory "
            f"{config.output_dir}")


def main(argv: Sequence[str] | None = None) -> int:
    """Train, save, evaluate. Returns the exit code (0; 130 after Ctrl-C, with what was done saved)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory's "experimental" notice
    args, config = parse_args(argv)
    args = resolve(args, config, argv)

    from accelerate import PartialState
    from datasets import Dataset
    from torch.utils.tensorboard import SummaryWriter
    from transformers import set_seed
    from transformers.integrations import TensorBoardCallback

    from carla_gym.llm.grpo import CarlaGRPOTrainer, load_model, lora_config
    from carla_gym.llm.nav_tools import NavToolEnvFactory, nav_rubric_reward
    from carla_gym.llm.prompts import episode_rows
    from carla_gym.llm.tools import ToolEnvFactory, outcome_reward, rubric_reward
    from carla_gym.sim.navigation.scenarios import is_nav_name

    clock = time.perf_counter()  # the learning curve's wall_s counts from here: warm start and evaluations included
    config.device  # noqa: B018 - sets up the process group as TrainingArguments does (gloo on the CPU), before:
    state = PartialState()  # one process, or one of `accelerate launch --multi_gpu --num_processes N`
    main_process = state.is_main_process
    ################ model and environments
    out = Path(config.output_dir)
    if main_process:
        print(header(args, config), flush=True)
    state.wait_for_everyone()  # every process has checked the output directory before the main one writes to it
    set_seed(config.seed)
    # bf16 mixed precision keeps fp32 master weights for full fine-tuning; frozen LoRA bases load in bf16
    model, processing_class = load_model(args.model, args.vision, seed=config.seed,
                                         dtype="bfloat16" if config.bf16 and args.lora else "float32",
                                         tiny_options=tiny_options(args, config.seed))
    nav = is_nav_name(args.scenario[0])
    common = {"vision": args.vision, "image_size": args.image_size, "ticks_per_action": args.ticks_per_action,
              "play_out": not args.no_play_out}
    if nav:
        factory = NavToolEnvFactory(**common, view=args.nav_view, time_limit_s=args.nav_time_limit_s)
        reward = nav_rubric_reward
    else:
        factory = ToolEnvFactory(args.env_urls, **common, reward_mode=args.reward_mode)
        reward = outcome_reward if args.reward_mode == "outcome" else rubric_reward
    with factory:  # closes the environments: TRL never does
        if main_process:
            if out.exists() and args.overwrite:  # kept aside until this run has a trained model
                set_aside(out)
            out.mkdir(parents=True, exist_ok=True)
            write_json_atomic(out / "config.json", {
                "script": "train_grpo.py", "args": dataclasses.asdict(args), "grpo_config": config.to_dict(),
                "versions": versions(), "device": config.device.type, "bf16": config.bf16,
                "generation_batch_size": config.generation_batch_size, "model_dir": "model",
                "processes": state.num_processes,
            })
        state.wait_for_everyone()
        ################ supervised warm start (format only)
        if args.sft_steps:
            try:
                warm_start_run(args, config, model, processing_class, main_process)
            except KeyboardInterrupt:
                again = script_command(__file__, *argv, *(() if args.overwrite else ("--overwrite",)))
                print(f"\ninterrupted during the warm start; no model saved (nothing of GRPO ran). Start again with: "
                      f"{again}", file=sys.stderr)
                return 130
        if config.beta > 0 and (args.sft_steps or args.model in ("tiny-random", "tiny-random-vl")):
            save_reference(model, processing_class, out / "reference", state)
        ################ train
        trainer = CarlaGRPOTrainer(
            model=model, reward_funcs=[reward], args=config,
            train_dataset=Dataset.from_dict(episode_rows(args.scenario, args.dataset_size, config.seed)),
            processing_class=processing_class, environment_factory=factory,
            peft_config=lora_config(args.lora_r, args.lora_alpha, args.lora_exclude, model) if args.lora else None,
        )
        if "tensorboard" in config.report_to:  # transformers 5 logs to output_dir/runs/<date>; this run's tb/ instead
            trainer.remove_callback(TensorBoardCallback)
            trainer.add_callback(TensorBoardCallback(SummaryWriter(log_dir=str(out / "tb"))))
        if args.eval_every:
            trainer.add_callback(learning_curve(args, config, trainer, factory, clock))
        interrupted = False
        start = time.perf_counter()
        try:
            trainer.train()
        except KeyboardInterrupt:
            interrupted = True
            print(f"\ninterrupted at step {trainer.state.global_step}; saving the model so far", file=sys.stderr)
        train_time = time.perf_counter() - start
    ################ save
    trainer.save_model(str(out / "model"))  # the main process writes; every process takes part
    if not main_process:
        return 130 if interrupted else 0
    processing_class.save_pretrained(str(out / "model"))
    write_json_atomic(out / "train_log.json", {"train_time_s": train_time, "global_step": trainer.state.global_step,
                                               "interrupted": interrupted, "log_history": trainer.state.log_history})
    discard_set_aside(out)
    print(f"trained {trainer.state.global_step} step(s) in {train_time:.1f} s; model saved to {out / 'model'}")
    if interrupted:
        return 130
    if args.eval_episodes == 0:
        return 0
    return (evaluate_nav if nav else evaluate)(args, config, trainer)


def tiny_options(args: Args, seed: int) -> dict | None:
    """Keyword arguments of `carla_gym.llm.tiny.tiny_text_model` for ``--model tiny-random``, else None.

    ``--tiny-tokenizer lines`` trains the tokenizer on rendered episodes of the training scenarios
    (`carla_gym.llm.tiny.lines_tokenizer`; seeds from ``--seed``, so the test split's text is never seen).
    """
    from carla_gym.llm.tiny import lines_tokenizer

    if args.model != "tiny-random":
        return None
    tokenizer = lines_tokenizer(args.scenario, seed=seed) if args.tiny_tokenizer == "lines" else None
    return {"hidden_size": args.tiny_hidden_size, "num_layers": args.tiny_layers, "tokenizer": tokenizer}


def save_reference(model, processing_class, path: Path, state) -> None:
    """Save ``model`` as GRPO's KL reference (``--beta`` > 0) and point its config at the copy.

    TRL builds the reference model from ``model.config._name_or_path``; a model built in code (the tiny models)
    has none, and after the warm start the reference must be the warm-started model, not the hub's. The main
    process writes ``<output-dir>/reference``; every process then reads the same path.
    """
    if state.is_main_process:
        model.save_pretrained(str(path))
        processing_class.save_pretrained(str(path))
    state.wait_for_everyone()
    model.config._name_or_path = str(path)


def warm_start_run(args: Args, config, model, processing_class, main_process: bool) -> None:
    """The supervised warm start (`carla_gym.llm.sft`) on the training scenarios; sft_config.json and sft_log.json.

    Transcript i plays training scenario i mod len with seed ``--seed + 10**6 + i`` (not the GRPO rows' seeds)
    and a uniformly random tool; the model is trained in place.
    """
    from carla_gym.llm.sft import sft_dataset, warm_start

    out = Path(config.output_dir)
    seed = config.seed + 10**6
    rows = sft_dataset(processing_class, args.scenario, args.sft_examples, seed, args.ticks_per_action,
                       config.chat_template_kwargs)
    settings = {"steps": args.sft_steps, "examples": args.sft_examples, "learning_rate": args.sft_learning_rate,
                "batch_size": args.sft_batch_size, "first_seed": seed, "scenarios": args.scenario,
                "tools": {name: rows["tool"].count(name) for name in sorted(set(rows["tool"]))}}
    if main_process:
        write_json_atomic(out / "sft_config.json", settings)
    start = time.perf_counter()
    history = warm_start(model, processing_class, rows, str(out / "sft"), args.sft_steps,
                         learning_rate=args.sft_learning_rate, batch_size=args.sft_batch_size, seed=config.seed,
                         use_cpu=config.use_cpu, bf16=bool(config.bf16))
    if main_process:
        write_json_atomic(out / "sft_log.json", {"train_time_s": time.perf_counter() - start,
                                                 "log_history": history})
        print(f"warm start: {args.sft_steps} step(s) on {args.sft_examples} random-tool transcripts in "
              f"{time.perf_counter() - start:.1f} s", flush=True)


def learning_curve(args: Args, config, trainer, factory, clock: float):
    """The `carla_gym.llm.curve.LearningCurve` callback of ``--eval-every``: eval_curve.csv and train_curve.csv."""
    from carla_gym.llm.curve import LearningCurve
    from carla_gym.llm.rollout import TransformersChat
    from carla_gym.llm.tools import CarlaToolEnv

    turns = sys.maxsize if config.max_tool_calling_iterations is None else config.max_tool_calling_iterations

    def make_chat(model):
        return TransformersChat(model, trainer.processing_class, max_new_tokens=args.eval_max_new_tokens,
                                chat_template_kwargs=config.chat_template_kwargs or {})

    def make_env():
        return CarlaToolEnv(ticks_per_action=args.ticks_per_action, reward_mode=args.reward_mode)

    def show(row):
        print(f"eval step {row['step']}: success {row['success_rate']:.3f}, env steps {row['env_steps']} "
              f"({row['tool_calls']} tool calls), "
              f"wall {row['wall_s']:.0f} s", flush=True)

    seeds = [episode_seed(EVAL_SEED, i) for i in range(args.eval_curve_episodes)]  # the final evaluation's
    def counts():  # env steps (SB3's unit: play-outs included) and the model's tool decisions, this process's
        return (sum(env.env_steps_total for env in factory.instances),
                sum(env.decisions_total for env in factory.instances))

    return LearningCurve(config.output_dir, args.eval_scenario, seeds, args.eval_every, counts, make_chat, make_env,
                         turns, clock_start=clock, log=show)


def eval_chat(args: Args, config, trainer):
    """The trained model in eval mode as a greedy chat policy, and the tool-calling turns TRL allowed it.

    Returns:
        ``(chat, turns)``: a `carla_gym.llm.rollout.TransformersChat` with ``--eval-max-new-tokens`` and the run's
        chat template arguments; ``max_tool_calling_iterations`` (``sys.maxsize`` where TRL sets no limit).
    """
    from carla_gym.llm.rollout import TransformersChat

    trainer.model.eval()
    chat = TransformersChat(trainer.model, trainer.processing_class, max_new_tokens=args.eval_max_new_tokens,
                            chat_template_kwargs=config.chat_template_kwargs or {})
    turns = sys.maxsize if config.max_tool_calling_iterations is None else config.max_tool_calling_iterations
    return chat, turns


def evaluate(args: Args, config, trainer) -> int:
    """The trained model and, for reference, the oracle and the rubric answer on every scenario (`agents.evaluation`).

    Writes eval.jsonl (the records) and eval.csv / eval.md / eval.json (the summary) and prints eval.md.

    Returns:
        0, or 130 after Ctrl-C (the episodes played so far are summarised).
    """
    out = Path(config.output_dir)
    chat, turns = eval_chat(args, config, trainer)
    url = args.env_urls[0] if args.env_urls else None
    reference = {"ticks_per_action": args.ticks_per_action, **({"backend": "openenv", "base_url": url} if url else {})}
    agents = [ChatAgent(AGENT, chat, vision=args.vision, max_tool_calling_iterations=turns, base_url=url,
                        ticks_per_action=args.ticks_per_action, image_size=args.image_size),
              oracle_agent(reference), rubric_answer_agent(reference)]
    log = EpisodeLog(out / "eval.jsonl")
    log.path.unlink(missing_ok=True)
    records: list[dict] = []

    def keep(record: dict) -> None:
        log.append(record)
        records.append(record)

    code = 0
    try:
        play_all(agents, args.eval_scenario, [EVAL_SEED], args.eval_episodes, on_record=keep)
    except KeyboardInterrupt:
        print(f"\nevaluation interrupted after {len(records)} episodes; summarising those", file=sys.stderr)
        code = 130
    finally:
        for agent in agents:
            agent.close()
    write_summary(records, [agent.name for agent in agents], args.eval_scenario, out, "eval",
                  extra={"script": "train_grpo.py", "model": args.model, "global_step": trainer.state.global_step})
    print(f"\nevaluation ({args.eval_episodes} episodes per scenario, greedy; the oracle and the rubric answer for "
          f"reference):\n{(out / 'eval.md').read_text()}")
    return code


def evaluate_nav(args: Args, config, trainer) -> int:
    """The trained model on every navigation scenario (`carla_gym.llm.rollout.play_episode`, greedy); eval.json.

    Episode i of a scenario plays env seed ``agents.records.episode_seed(EVAL_SEED, i)`` (10000 + i), played out,
    under the run's own env rules (the training's: upstream's ends and --nav-time-limit-s; ``python -m
    agents.compare --agents llm:<run>/model`` plays it by the harness's rules instead). eval.json holds
    ``records`` (play_episode's records without the conversation, plus ``agent``, ``episode`` and
    ``decisions``, the tool calls that ran an env step) and ``summary``: per scenario the harness's summary row
    (`agents.nav_summary.nav_row`: success_rate, route_completion, collision_rate, CPM, speed_mean, time,
    total_distance, mean_reward, decisions, tool_calls, ...), the one definition that ``agents.compare``
    and ``train_sb3.py`` summarise by.

    Returns:
        0, or 130 after Ctrl-C (the episodes played so far are summarised).
    """
    from agents.nav_summary import nav_markdown, nav_row
    from carla_gym.llm.nav_tools import NavToolEnv
    from carla_gym.llm.rollout import play_episode

    out = Path(config.output_dir)
    chat, turns = eval_chat(args, config, trainer)
    records: list[dict] = []
    code = 0
    with NavToolEnv(vision=args.vision, image_size=args.image_size, ticks_per_action=args.ticks_per_action,
                    view=args.nav_view, time_limit_s=args.nav_time_limit_s) as env:
        try:
            for scenario in args.scenario:
                for episode in range(args.eval_episodes):
                    record = play_episode(chat, env, scenario, episode_seed(EVAL_SEED, episode), turns)
                    record.pop("messages")
                    records.append({"agent": AGENT, "episode": episode, **record, "decisions": len(env.actions)})
        except KeyboardInterrupt:
            print(f"\nevaluation interrupted after {len(records)} episodes; summarising those", file=sys.stderr)
            code = 130
    rows = [nav_row(AGENT, scenario, mine) for scenario in args.scenario
            if (mine := [r for r in records if r["scenario"] == scenario])]
    write_json_atomic(out / "eval.json", {"script": "train_grpo.py", "model": args.model,
                                          "global_step": trainer.state.global_step, "records": records,
                                          "summary": {row["scenario"]: row for row in rows}})
    print(f"\nevaluation ({args.eval_episodes} episodes per scenario, greedy; eval.json):")
    print(nav_markdown(rows), end="")
    return code


if __name__ == "__main__":
    sys.exit(main())
