"""Train a tool-calling LLM or VLM with GRPO (TRL) on CarlaTrolley-v0, then evaluate it on the scenarios.

Usage:
    python train_grpo.py --model tiny-random --max-steps 2        # offline smoke run, random 2-layer Qwen3
    python train_grpo.py                                          # Qwen/Qwen3-0.6B on escape_exists (GPU)
    python train_grpo.py --model /path/to/Qwen3-0.6B --lora       # a local copy, LoRA adapters
    python train_grpo.py --vision --lora                          # Qwen/Qwen3-VL-2B-Instruct, camera images
    python train_grpo.py --scenario trainable --dataset-size 256  # a suite (carla_gym.suites) or names
    python train_grpo.py --env-urls http://127.0.0.1:8000         # OpenEnv servers instead of the embedded sim

Each rollout drives its own `carla_gym.llm.CarlaToolEnv` (tools observe, emergency_stop and
lane_change; one tool call = 10 ticks = 0.5 s), built by TRL's ``environment_factory``; the
reward is the episode's rubric reward after the episode is played out
(`carla_gym.llm.tools.rubric_reward`). Dataset row i plays scenario i mod len(scenarios) with
seed ``--seed + i``, so all ``--num-generations`` rollouts of a GRPO group start from the same
state. Defaults follow TRL's CARLA example (Qwen3-0.6B, max_completion_length 1024, thinking
off); where it is silent they are this project's choices (see the README).

Before training it prints one line (`header`): model, LoRA or full fine-tune, text or image tools,
scenarios, prompts x generations, steps, where rollouts run, device and run directory. One output
directory holds: config.json (arguments, derived settings, package versions),
model/ (the trained model, or only the LoRA adapter with --lora, and the tokenizer/processor),
train_log.json (TRL's log history: rewards/rubric_reward/mean, tools/call_frequency,
episode/success, trolley_action/*, ...), tb/ with --report-to tensorboard, eval.jsonl (one line
per evaluation episode, appended as it finishes), eval.json and eval.csv (per scenario, greedy
decoding, seeds 10000, 10001, ... as train_sb3.py).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from carla_gym.cli_args import arg, check_minimums, check_url, command_flags, parser_for
from carla_gym.hints import exit_without_extras, python_command, script_command
from carla_gym.io import discard_set_aside, set_aside, write_csv_atomic, write_json_atomic

DEFAULT_TEXT_MODEL = "Qwen/Qwen3-0.6B"  # TRL's CARLA example (examples/scripts/openenv/carla.py)
DEFAULT_VISION_MODEL = "Qwen/Qwen3-VL-2B-Instruct"  # smallest Qwen3-VL; its template renders tool images
REPORT_TO = ("none", "tensorboard", "trackio")
EVAL_SEED = 10_000  # as train_sb3.py


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--model, --num-generations, ...)."""

    model: str = arg("", f"hub id, local directory, or tiny-random / tiny-random-vl (offline, random weights); "
                         f"empty (default): {DEFAULT_TEXT_MODEL}, or {DEFAULT_VISION_MODEL} with --vision")
    vision: bool = arg(False, "VLM mode: tools return a camera image with the text")
    image_size: int = arg(256, "width [px] of tool images, 16-1024 (height 9/16 of it), as the thumbnail(256) of "
                               "TRL's CARLA VLM example")
    scenario: list[str] = arg(["trolley_micro_escape_exists"], "scenario or suite names (suites: micro, "
                               "micro_deadzone, trainable, probes, mixed, action_bias)")
    dataset_size: int = arg(64, "prompts, i.e. GRPO groups of --num-generations episodes each; row i plays "
                                "scenario i mod len with seed --seed + i")
    num_generations: int = arg(8, "rollouts per prompt (GRPO group size, >= 2)")
    per_device_train_batch_size: int = arg(8, "completions (episodes) per device and micro-step; times "
                                              "--gradient-accumulation-steps it must be a multiple of "
                                              "--num-generations")
    gradient_accumulation_steps: int = arg(1, "micro-batches per optimizer step (TRL's CARLA example: 16)")
    max_steps: int = arg(-1, "optimizer steps; -1: one pass over the dataset")
    max_completion_length: int = arg(1024, "token budget of a whole rollout: all assistant turns plus tool "
                                           "results (TRL's CARLA example: 1024)")
    max_tool_calling_iterations: int = arg(10, "turns whose tool calls are run per rollout")
    learning_rate: float = arg(1e-5, "AdamW learning rate")
    temperature: float = arg(1.0, "sampling temperature of the rollouts")
    beta: float = arg(0.0, "KL coefficient (0: no reference model, TRL's default)")
    lora: bool = arg(False, "train LoRA adapters on the language model instead of all weights")
    lora_r: int = arg(16, "LoRA rank")
    lora_alpha: int = arg(32, "LoRA alpha")
    lora_exclude: str = arg("", "regex of modules without adapters; empty: the vision tower and projector "
                                "(carla_gym.llm.grpo.VISION_MODULES)")
    ticks_per_action: int = arg(10, "simulator ticks (0.05 s) per tool call")
    reward_mode: str = arg("rubric", "rubric (upstream) or physical (-1 per pedestrian actually hit, -1 for "
                                      "leaving the road)")
    no_play_out: bool = arg(False, "score as TRL's CARLA example: 0 unless the model itself ran the episode to "
                                   "its end (default: unfinished episodes are played out with the controls held)")
    env_urls: list[str] = arg([], "OpenEnv server URLs (carla-gym serve); rollout i uses URL i mod len; "
                                  "empty: the embedded simulator in this process")
    report_to: str = arg("none", "logging backend: none, tensorboard (output_dir/tb) or trackio")
    log_completions: bool = arg(False, "log sampled completions (rich table and parquet in output_dir/completions)")
    logging_steps: int = arg(1, "optimizer steps between log lines")
    eval_episodes: int = arg(4, "evaluation episodes per scenario after training (0: skip)")
    eval_max_new_tokens: int = arg(256, "token budget of one evaluation turn")
    seed: int = arg(0, "seed of torch, the tiny models and the dataset rows")
    output_dir: str = arg("runs/grpo", "output directory")
    overwrite: bool = arg(False, "replace a non-empty output directory written by train_grpo.py")


def parse_args(argv: list[str] | None = None) -> Args:
    """Parse ``argv`` into `Args`."""
    return Args(**vars(parser_for(Args, description=__doc__.splitlines()[0]).parse_args(argv)))


def resolve(args: Args) -> Args:
    """Fill the automatic choices (model, LoRA exclusion) and expand suites; exit naming a bad flag.

    A refusal that suggests a command prints it in full, and only where it works.
    """
    from carla_gym.llm.grpo import VISION_MODULES, is_grpo_run
    from carla_gym.llm.tiny import TINY_MODELS
    from carla_gym.suites import resolve_scenarios

    given = args
    args = dataclasses.replace(args)
    args.model = args.model or (DEFAULT_VISION_MODEL if args.vision else DEFAULT_TEXT_MODEL)
    args.lora_exclude = args.lora_exclude or VISION_MODULES
    try:
        args.scenario = list(resolve_scenarios(args.scenario))
    except ValueError as exc:
        sys.exit(f"--scenario: {exc}")
    if args.model in TINY_MODELS and (args.model == "tiny-random-vl") != args.vision:
        sys.exit(f"--model {args.model}: use tiny-random without --vision and tiny-random-vl with --vision")
    if args.report_to not in REPORT_TO:
        sys.exit(f"--report-to {args.report_to!r}: choose one of {list(REPORT_TO)}")
    if args.reward_mode not in ("rubric", "physical"):
        sys.exit(f"--reward-mode {args.reward_mode!r}: choose rubric or physical")
    check_minimums((("--num-generations", args.num_generations, 2), ("--dataset-size", args.dataset_size, 1),
                    ("--per-device-train-batch-size", args.per_device_train_batch_size, 1),
                    ("--gradient-accumulation-steps", args.gradient_accumulation_steps, 1),
                    ("--max-completion-length", args.max_completion_length, 16),
                    ("--max-tool-calling-iterations", args.max_tool_calling_iterations, 0),
                    ("--eval-episodes", args.eval_episodes, 0),
                    ("--eval-max-new-tokens", args.eval_max_new_tokens, 1),
                    ("--image-size", args.image_size, 16), ("--ticks-per-action", args.ticks_per_action, 1),
                    ("--lora-r", args.lora_r, 1), ("--lora-alpha", args.lora_alpha, 1),
                    ("--logging-steps", args.logging_steps, 1)))
    for flag, value, high in (("--image-size", args.image_size, 1024),
                              ("--ticks-per-action", args.ticks_per_action, 1000)):
        if value > high:
            sys.exit(f"{flag} {value}: must be <= {high}")
    if args.report_to == "trackio" and importlib.util.find_spec("trackio") is None:
        sys.exit(f"--report-to trackio: the trackio package is not installed; install it with: "
                 f"{python_command('-m', 'pip', 'install', 'trackio')}")
    if args.max_steps == 0 or args.max_steps < -1:
        sys.exit(f"--max-steps {args.max_steps}: must be >= 1, or -1 for one pass over the dataset")
    generation_batch = args.per_device_train_batch_size * args.gradient_accumulation_steps
    if generation_batch % args.num_generations:
        sys.exit(f"--per-device-train-batch-size {args.per_device_train_batch_size} x --gradient-accumulation-steps "
                 f"{args.gradient_accumulation_steps} = {generation_batch} completions per step is not a multiple "
                 f"of --num-generations {args.num_generations}")
    groups_per_step = generation_batch // args.num_generations
    if args.dataset_size < groups_per_step:
        sys.exit(f"--dataset-size {args.dataset_size}: one step needs {groups_per_step} prompts "
                 f"({generation_batch} completions / --num-generations {args.num_generations})")
    if args.dataset_size % groups_per_step:
        print(f"note: TRL drops the last {args.dataset_size % groups_per_step} of --dataset-size {args.dataset_size} "
              f"prompts per pass ({groups_per_step} prompts per step)", file=sys.stderr)
    if not 0.0 < args.learning_rate < 1.0:
        sys.exit(f"--learning-rate {args.learning_rate}: must be in (0, 1)")
    if not args.temperature > 0.0:
        sys.exit(f"--temperature {args.temperature}: must be > 0")
    if args.beta < 0.0:
        sys.exit(f"--beta {args.beta}: must be >= 0")
    try:
        re.compile(args.lora_exclude)
    except re.error as exc:
        sys.exit(f"--lora-exclude {args.lora_exclude!r}: not a regular expression ({exc})")
    for url in args.env_urls:
        check_url(url, embedded="leave out --env-urls")
    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        sys.exit(f"--output-dir {out}: exists and is not a directory")
    if out.exists() and any(out.iterdir()):
        if not is_grpo_run(out):
            what = f"--overwrite {out}: refusing to replace a folder that" if args.overwrite else \
                f"{out} is not empty and"
            sys.exit(f"{what} is not a train_grpo.py run directory (its config.json does not say script: "
                     "train_grpo.py); choose another --output-dir")
        if not args.overwrite:
            again = script_command(__file__, *command_flags(dataclasses.replace(given, overwrite=True)))
            sys.exit(f"{out} is not empty; pass --overwrite to replace the run in it: {again}; or choose another "
                     "--output-dir")
    exit_without_extras("grpo", *(("server",) if args.env_urls else ()))
    return args


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


def header(args: Args, device: str) -> str:
    """The line printed before training: what is trained on what, on which device, and where the run goes.

    Args:
        args: Resolved arguments (`resolve`).
        device: ``"cuda (bf16)"``, ``"cuda (fp32)"`` or ``"cpu (fp32)"``.
    """
    from carla_gym.llm.tools import image_height

    how = f"LoRA r={args.lora_r} alpha={args.lora_alpha}" if args.lora else "full fine-tune"
    tools = f"camera images {args.image_size}x{image_height(args.image_size)} + text" if args.vision else "text"
    steps = "one pass" if args.max_steps == -1 else f"{args.max_steps} step(s)"
    more = len(args.scenario) > 3
    scenarios = ", ".join(args.scenario[:3]) + (f", ... ({len(args.scenario)} in all)" if more else "")
    env = f"OpenEnv servers {', '.join(args.env_urls)}" if args.env_urls else "the embedded simulator"
    return (f"training {args.model} with GRPO ({how}, {tools} tools) on {scenarios}: {args.dataset_size} prompts x "
            f"{args.num_generations} generations, {steps}, rollouts on {env}; device {device}; run directory "
            f"{args.output_dir}")


def main(argv: list[str] | None = None) -> int:
    """Train, save, evaluate. Returns the exit code (0; 130 after Ctrl-C, with what was done saved)."""
    args = resolve(parse_args(argv))
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory's "experimental" notice
    # TRL 1.16 still calls transformers' deprecated gradient-checkpointing names on every generation
    warnings.filterwarnings("ignore", message=r".*gradient_checkpointing.* is deprecated", category=FutureWarning)

    import torch
    from datasets import Dataset
    from transformers import set_seed
    from trl import GRPOConfig

    from carla_gym.llm.grpo import CarlaGRPOTrainer, chat_template_kwargs, load_model, lora_config
    from carla_gym.llm.prompts import episode_rows
    from carla_gym.llm.tools import ToolEnvFactory, rubric_reward

    cuda = torch.cuda.is_available()
    bf16 = cuda and torch.cuda.is_bf16_supported()
    out = Path(args.output_dir)
    print(header(args, f"{'cuda' if cuda else 'cpu'} ({'bf16' if bf16 else 'fp32'})"), flush=True)
    set_seed(args.seed)
    # bf16 mixed precision keeps fp32 master weights for full fine-tuning; frozen LoRA bases load in bf16
    model, processing_class = load_model(args.model, args.vision, dtype="bfloat16" if bf16 and args.lora else "float32",
                                         seed=args.seed)
    env_settings = dict(vision=args.vision, image_size=args.image_size, ticks_per_action=args.ticks_per_action,
                        play_out=not args.no_play_out, reward_mode=args.reward_mode)
    factory = ToolEnvFactory(args.env_urls, **env_settings)
    template_kwargs = chat_template_kwargs(processing_class)
    tb_dir = os.environ.get("TENSORBOARD_LOGGING_DIR")
    try:
        if out.exists() and args.overwrite:  # kept aside until this run has a trained model
            set_aside(out)
        out.mkdir(parents=True, exist_ok=True)
        if args.report_to == "tensorboard":
            os.environ["TENSORBOARD_LOGGING_DIR"] = str(out / "tb")  # transformers 5 has no logging_dir argument
        config = GRPOConfig(
            output_dir=str(out), per_device_train_batch_size=args.per_device_train_batch_size,
            gradient_accumulation_steps=args.gradient_accumulation_steps, num_generations=args.num_generations,
            max_completion_length=args.max_completion_length,
            max_tool_calling_iterations=args.max_tool_calling_iterations, learning_rate=args.learning_rate,
            temperature=args.temperature, beta=args.beta, max_steps=args.max_steps, num_train_epochs=1,
            logging_steps=args.logging_steps, save_strategy="no", seed=args.seed,
            report_to=[] if args.report_to == "none" else [args.report_to], log_completions=args.log_completions,
            bf16=bf16, use_cpu=not cuda, activation_checkpointing=cuda, chat_template_kwargs=template_kwargs or None,
        )
        write_json_atomic(out / "config.json", {
            "script": "train_grpo.py", "args": dataclasses.asdict(args), "versions": versions(),
            "device": "cuda" if cuda else "cpu", "bf16": bf16, "generation_batch_size": config.generation_batch_size,
            "chat_template_kwargs": template_kwargs, "model_dir": "model",
        })
        trainer = CarlaGRPOTrainer(
            model=model, reward_funcs=[rubric_reward], args=config,
            train_dataset=Dataset.from_dict(episode_rows(args.scenario, args.dataset_size, args.seed)),
            processing_class=processing_class, environment_factory=factory,
            peft_config=lora_config(args.lora_r, args.lora_alpha, args.lora_exclude, model) if args.lora else None,
        )
        interrupted = False
        start = time.perf_counter()
        try:
            trainer.train()
        except KeyboardInterrupt:
            interrupted = True
            print(f"\ninterrupted at step {trainer.state.global_step}; saving the model so far", file=sys.stderr)
        train_time = time.perf_counter() - start
    finally:
        factory.close()  # TRL never closes its environments
        if tb_dir is None:
            os.environ.pop("TENSORBOARD_LOGGING_DIR", None)
        else:
            os.environ["TENSORBOARD_LOGGING_DIR"] = tb_dir
    trainer.save_model(str(out / "model"))
    processing_class.save_pretrained(str(out / "model"))
    write_json_atomic(out / "train_log.json", {"train_time_s": train_time, "global_step": trainer.state.global_step,
                                               "interrupted": interrupted, "log_history": trainer.state.log_history})
    discard_set_aside(out)
    print(f"trained {trainer.state.global_step} step(s) in {train_time:.1f} s; model saved to {out / 'model'}")
    if interrupted:
        return 130
    if args.eval_episodes == 0:
        return 0
    return evaluate(args, trainer, env_settings, template_kwargs)


def evaluate(args: Args, trainer, env_settings: dict, template_kwargs: dict) -> int:
    """Greedy episodes of every scenario; eval.jsonl as they finish, then eval.json/eval.csv and the table."""
    from carla_gym.llm.rollout import UNFINISHED, TransformersChat, evaluate_chat, markdown_table, summarize
    from carla_gym.llm.tools import CarlaToolEnv
    from carla_gym.sim.catalogue import TROLLEY_ACTIONS

    out = Path(args.output_dir)
    trainer.model.eval()
    chat = TransformersChat(trainer.model, trainer.processing_class, max_new_tokens=args.eval_max_new_tokens,
                            chat_template_kwargs=template_kwargs)
    env = CarlaToolEnv(base_url=args.env_urls[0] if args.env_urls else None, **env_settings)
    seeds = range(EVAL_SEED, EVAL_SEED + args.eval_episodes)
    records: list[dict] = []
    (out / "eval.jsonl").unlink(missing_ok=True)
    code = 0
    with open(out / "eval.jsonl", "a") as log:
        def write(record: dict) -> None:
            records.append(record)
            log.write(json.dumps(record) + "\n")
            log.flush()

        try:
            evaluate_chat(chat, env, args.scenario, seeds, args.max_tool_calling_iterations, write)
        except KeyboardInterrupt:
            print(f"\nevaluation interrupted after {len(records)} episodes; summarising those", file=sys.stderr)
            code = 130
        finally:
            env._close()
    summary = summarize(records)
    write_json_atomic(out / "eval.json", summary)
    header = ["scenario", "episodes", "success_rate", "mean_reward", "pedestrians_hit", "tool_calls",
              "tool_failures", "parse_failures", *TROLLEY_ACTIONS, UNFINISHED]
    write_csv_atomic(out / "eval.csv", header, [[name, *(s[k] for k in header[1:8]),
                                                 *(s["actions"].get(a, 0) for a in header[8:])]
                                                for name, s in summary.items()])
    print(f"\nevaluation ({args.eval_episodes} episodes per scenario, greedy):\n{markdown_table(summary)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
