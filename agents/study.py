r"""The direct comparison on generated trolley scenarios, one command: ``python -m agents.study``.

Usage:
    python -m agents.study --out results/study                        # the default budget (2 seeds per learner)
    python -m agents.study --out results/study_smoke --budget smoke   # the whole pipeline in a few minutes
    python -m agents.study --out results/study_full --budget full     # 5 seeds per learner, hours
    python -m agents.study --out results/study --resume               # continue a killed run (finished steps kept)
    python -m agents.study --out results/study --clip-pretrained laion2b_s34b_b79k  # real CLIP weights

Trains every learner of `TRAINED` on ``trolley_generated_train`` (`carla_gym.sim.generated`) with each
training seed of the budget (`Budget.seeds`: ``--seed``, ``--seed + 1``, ...), each run evaluated
periodically on the held-out ``trolley_generated_test``: PPO and SAC on the state vector, on the
84x84 camera image with the state (``MultiInputPolicy``), CLIP-shaped (``--clip vit-b-32``: random
weights offline, ``--clip-pretrained`` for real ones) with ``train_sb3.py``, and the tiny
tool-calling LLM with ``train_grpo.py`` (supervised warm start, then GRPO). Then the comparison
harness (`agents.compare`) plays every trained run (``<learner>_seed<k>``) and the scripted
baselines of `BASELINES` on the same test layouts (comparison seed 0, ``--layouts`` episodes: env
seeds 0, 1, ...), and `agents.study_plot` writes the report: the figure (``study.png``: learning
curves with a band over seeds, the IQM of every agent with its interval, performance profiles), the
table of every run (``table.md``, ``table.csv``: outcomes first, upstream's rubric beside) and the
statistics across seeds (``stats.md``, ``stats.json``: `agents.stats`).

Each step runs as a subprocess of this interpreter (the scripts' own command lines, printed and
kept in ``steps/<step>.json``) in its own process group, its output streamed to ``logs/<step>.log``;
a finished step writes ``steps/<step>.json`` atomically (command, wall time, `identity`), and
``--resume`` skips those whose identity (the script and its flags, paths relative to the checkout and
to ``--out``; not the interpreter) is unchanged. An unfinished training step is rerun from the start
(its run directory is removed first), and the comparison is then redone from the start too (it plays
the trained agents); an unfinished comparison after finished trainings continues with the harness's
own ``--resume``. Ctrl-C and SIGTERM stop the running step's whole process group, then print the
``--resume`` command; a step running past ``--step-timeout`` (default 4 h) is stopped and fails. The
output directory is locked for the whole run (`carla_gym.io.claim_output_dir`, shared with
`agents.compare`) and refused when it is not empty, unless ``--resume`` (same settings) or
``--overwrite`` (the old one kept as ``<out>.replaced`` until the new run finishes; refused while
``<out>.replaced`` holds the last complete study and ``--out`` an unfinished one).

Output (``--out``): ``study.json`` (the settings), ``runs/<learner>/seed<k>/`` (the training runs),
``compare/`` (the harness's output: episodes.jsonl, summary.md, ...), ``logs/``, ``steps/``,
``study.png``, ``table.md`` / ``table.csv`` and ``stats.md`` / ``stats.json``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from agents.scripted import CONSTANT_AGENTS, CONTROL_CONSTANT_AGENTS
from agents.stats import IQM_REPS
from carla_gym.cli_args import arg, check_minimums, command_flags, parser_for
from carla_gym.hints import exit_without_extras, python_command
from carla_gym.io import OutputDirRefused, claim_output_dir, discard_set_aside, write_json_atomic

PROG = "python -m agents.study"
REPO = Path(__file__).resolve().parents[1]
"""The checkout holding ``train_sb3.py`` and ``train_grpo.py`` (the study runs them as scripts)."""
TRAIN_SCENARIO = "trolley_generated_train"
TEST_SCENARIO = "trolley_generated_test"
COMPARISON_SEED = 0
"""Comparison seed of the final comparison: layout i is env seed ``1000 * 0 + i`` (`agents.records.episode_seed`),
apart from the training runs' periodic evaluations (comparison seed `agents.evaluation.EVAL_SEED`, env seeds 10000+)."""

SB3_FLAGS: Mapping[str, tuple[str, ...]] = {
    "ppo_state": ("--algo", "ppo"),
    "sac_state": ("--algo", "sac"),
    "ppo_image": ("--algo", "ppo", "--policy", "MultiInputPolicy"),
    "sac_image": ("--algo", "sac", "--policy", "MultiInputPolicy"),
    "ppo_clip": ("--algo", "ppo", "--clip", "vit-b-32", "--n-envs", "4"),
    "sac_clip": ("--algo", "sac", "--clip", "vit-b-32"),
}
"""``train_sb3.py`` flags of each SB3 learner (SAC acts with control actions, PPO with the four tools; the CLIP
runs shape the reward from the camera and act on the state vector; PPO with CLIP on 4 envs, as SAC by default,
since every CLIP step renders and encodes a frame)."""
TrainedAgent = Literal["ppo_state", "sac_state", "ppo_image", "sac_image", "ppo_clip", "sac_clip", "grpo"]
TRAINED: tuple[str, ...] = get_args(TrainedAgent)
"""The trained agents (the SB3 learners of `SB3_FLAGS`, then the GRPO model), in table and legend order."""
BASELINES = (*CONSTANT_AGENTS, *CONTROL_CONSTANT_AGENTS, "random", "oracle")
"""The scripted agents of the comparison: the constant policies of both action modes (`agents.scripted.CONSTANT_AGENTS`,
`agents.scripted.CONTROL_CONSTANT_AGENTS`: every candidate of the best outcome), random and the oracle."""


STUDY_FLAGS = ("--scenario", "--eval-scenario", "--total-timesteps", "--eval-episodes", "--seed", "--output-dir")
"""``train_sb3.py`` flags the study sets itself (from `Budget` and the command line); a budget's extra flags may not
give them."""


@dataclass(frozen=True)
class Budget:
    """How many seeds each learner trains, how long, and how large the comparison is.

    Attributes:
        seeds: Training seeds per learner: each learner trains ``seeds`` times (``--seed``, ``--seed + 1``, ...),
            and every run plays the comparison on the same test layouts.
        sb3_steps: Environment steps (decisions) of each SB3 learner, rounded up by ``train_sb3.py`` to whole
            rollouts (this project's choice: a few minutes per run of the default budget on 2 CPU cores, the
            measured times on the documentation's Performance page; the full budget's are 3-12 times longer).
        sb3_flags: Further ``train_sb3.py`` flags of every PPO run (key ``"ppo"``) and every SAC run (``"sac"``);
            the smoke budget makes rollouts short with them, the others keep the ``cpu`` preset.
        eval_episodes: ``train_sb3.py --eval-episodes``: its final evaluation; each of its 10 periodic evaluations
            (the curve) plays a fifth of them.
        grpo_flags: ``train_grpo.py`` flags besides the model, scenario, seed and output directory (the recipe of
            the GRPO page's "Learning on CPU", scaled to the budget).
        layouts: Test layouts (episodes) every run plays in the comparison (200: a 95 % interval of about
            +-7 points at 50 % success, and a standard error of at most 5 points for the difference between two
            agents, so a 10-point difference is two of them; 500: about +-4.4 points; the layouts are the same
            for every agent).
        learner_flags: Further ``train_sb3.py`` flags of one SB3 learner (key: its name in `SB3_FLAGS`), after
            ``sb3_flags`` (argparse keeps the last value of a flag given twice): where a tuned recipe (a
            ``--preset``, ``--hp`` values) goes.
        bootstrap_reps: Bootstrap replications of the statistics (`agents.stats`: the IQM intervals and paired
            differences; the performance profiles' bands use at most `agents.stats.PROFILE_REPS`); the smoke
            budget's 200 keep its report fast.

    Raises:
        ValueError: ``seeds`` or ``layouts`` < 1, ``sb3_steps`` not one count per SB3 learner, a key of
            ``learner_flags`` or ``sb3_flags`` that names no learner or algorithm, or an extra flag that the
            study sets itself (`STUDY_FLAGS`).
    """

    seeds: int
    sb3_steps: Mapping[str, int]
    sb3_flags: Mapping[str, tuple[str, ...]]
    eval_episodes: int
    grpo_flags: tuple[str, ...]
    layouts: int
    learner_flags: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    bootstrap_reps: int = IQM_REPS

    def __post_init__(self) -> None:
        for name, value in (("seeds", self.seeds), ("layouts", self.layouts), ("eval_episodes", self.eval_episodes),
                            ("bootstrap_reps", self.bootstrap_reps)):
            if value < 1:
                raise ValueError(f"Budget {name}={value}: must be >= 1")
        if set(self.sb3_steps) != set(SB3_FLAGS):
            raise ValueError(f"Budget sb3_steps {sorted(self.sb3_steps)}: give one count per SB3 learner "
                             f"{list(SB3_FLAGS)}")
        for field, valid in (("sb3_flags", ("ppo", "sac")), ("learner_flags", tuple(SB3_FLAGS))):
            flags = getattr(self, field)
            for key, words in flags.items():
                if key not in valid:
                    raise ValueError(f"Budget {field} key {key!r}: not one of {list(valid)}")
                taken = sorted(set(words) & set(STUDY_FLAGS))
                if taken:
                    raise ValueError(f"Budget {field}[{key!r}]: {taken} set by the study itself (from the budget "
                                     "and the command line); remove them")


def _cpu_grpo_flags(sft_steps: int, sft_examples: int, max_steps: int, eval_every: int) -> tuple[str, ...]:
    """``train_grpo.py`` flags of the GRPO page's "Learning on CPU" recipe at a budget's length.

    The tiny Qwen3 with the lines tokenizer (hidden size 64), ``sft_steps`` supervised warm-start steps on
    ``sft_examples`` examples, then ``max_steps`` GRPO steps (8 generations, batch 32, one tool-calling turn of 64
    tokens), its curve evaluated every ``eval_every`` steps on 64 episodes (the study's comparison plays the model).
    """
    return ("--tiny-tokenizer", "lines", "--tiny-hidden-size", "64", "--sft-steps", str(sft_steps), "--sft-examples",
            str(sft_examples), "--learning-rate", "1e-3", "--max-steps", str(max_steps), "--num-generations", "8",
            "--per-device-train-batch-size", "32", "--max-completion-length", "64",
            "--max-tool-calling-iterations", "1", "--eval-every", str(eval_every), "--eval-curve-episodes", "64",
            "--eval-episodes", "0")


BUDGETS: Mapping[str, Budget] = {
    "smoke": Budget(
        seeds=1,
        sb3_steps={"ppo_state": 64, "sac_state": 64, "ppo_image": 64, "sac_image": 64, "ppo_clip": 32,
                   "sac_clip": 32},
        sb3_flags={"ppo": ("--n-envs", "1", "--hp", "n_steps=16", "batch_size=16"),
                   "sac": ("--n-envs", "1", "--hp", "learning_starts=8", "batch_size=16")},
        eval_episodes=5,
        grpo_flags=("--sft-steps", "2", "--sft-examples", "8", "--max-steps", "2", "--num-generations", "2",
                    "--per-device-train-batch-size", "2", "--max-completion-length", "64",
                    "--max-tool-calling-iterations", "1", "--eval-every", "1", "--eval-curve-episodes", "4",
                    "--eval-episodes", "0"),
        layouts=20,
        bootstrap_reps=200),
    "default": Budget(
        seeds=2,
        sb3_steps={"ppo_state": 40960, "sac_state": 8000, "ppo_image": 10240, "sac_image": 2000, "ppo_clip": 512,
                   "sac_clip": 600},
        sb3_flags={},
        eval_episodes=150,
        grpo_flags=_cpu_grpo_flags(sft_steps=150, sft_examples=512, max_steps=40, eval_every=4),
        layouts=200),
    "full": Budget(
        seeds=5,
        sb3_steps={"ppo_state": 500_000, "sac_state": 50_000, "ppo_image": 100_000, "sac_image": 10_000,
                   "ppo_clip": 2048, "sac_clip": 2000},
        sb3_flags={},
        eval_episodes=250,
        grpo_flags=_cpu_grpo_flags(sft_steps=300, sft_examples=1024, max_steps=100, eval_every=10),
        layouts=500,
        learner_flags={}),
}
"""The budgets of ``--budget`` (this project's choice). ``smoke``: the whole pipeline in minutes (CI). ``default``:
the learners against the constants in about 35-55 min on 2 CPU cores (an estimate). ``full``: 5 seeds per learner
on 500 layouts, hours (the wall times are on the documentation's Performance and Comparing agents pages)."""


STEP_TIMEOUT_S = 4 * 3600.0
"""Default ``--step-timeout`` [s]: 4 h, over 20 times the longest step of the default budget (the measured times
are on the documentation's Performance page) and several times the full budget's longest (an estimate from the
same step rates: its comparison, under an hour), so that only a hung step (e.g. a process group blocked in a
collective) reaches it (this project's choice)."""
STOP_GRACE_S = 10.0
"""Seconds a stopped step's process group has between SIGTERM and SIGKILL (this project's choice)."""


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--out, --budget, ...)."""

    out: str = arg("results/study", "output directory")
    budget: Literal["smoke", "default", "full"] = arg("default", "seeds, training lengths and comparison size "
                                                                 "(BUDGETS): smoke (a few minutes), default (about "
                                                                 "35-55 min on 2 CPU cores) or full (hours)")
    agents: list[TrainedAgent] = arg(list(TRAINED), "trained agents to include (the scripted baselines always "
                                                        "play)")
    layouts: int = arg(0, "test layouts each run plays in the comparison; 0: the budget's (smoke 20, default 200, "
                              "full 500)")
    clip_pretrained: str = arg("", "open_clip pretrained tag or checkpoint file of the CLIP-shaped runs; empty: "
                                   "random ViT-B-32 weights (offline; the CLIP reward then carries no signal)")
    seed: int = arg(0, "first training seed of every learner (then seed + 1, ...)")
    seeds: int = arg(0, "training seeds per learner; 0: the budget's (smoke 1, default 2, full 5)")
    workers: int = arg(2, "processes of the comparison (agents.compare --workers)")
    step_timeout: float = arg(STEP_TIMEOUT_S, "wall-clock limit of each step [s] (a step past it is stopped and "
                                              "fails); 0: none")
    resume: bool = arg(False, "continue the run in --out: skip its finished steps")
    overwrite: bool = arg(False, "replace the study in --out")


RESUME_SAME = ("budget", "agents", "layouts", "clip_pretrained", "seed", "seeds")
"""Settings a resumed study must keep (``--workers`` may change)."""
CONFIG = "study.json"


@dataclass(frozen=True)
class Step:
    """One step of the study: a command run as a subprocess, its completion marker ``steps/<name>.json``.

    ``argv`` identifies the step's result through `identity` (a marker of another identity does not count);
    ``runtime`` holds flags that do not change it (the comparison's ``--workers``).
    """

    name: str
    argv: tuple[str, ...]
    run_dir: Path
    runtime: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        """The step's command line as a shell would take it."""
        return shlex.join((*self.argv, *self.runtime))


def parse_args(argv: Sequence[str] | None = None) -> Args:
    """Parse ``argv`` into `Args` (argparse refuses values outside a flag's choices)."""
    description = __doc__.splitlines()[0].replace("``", "")
    return Args(**vars(parser_for(Args, prog=PROG, description=description).parse_args(argv)))


def command(args: Args, **changes) -> str:
    """The shell command that runs the study ``args`` (with ``changes``), as the refusals print it."""
    return python_command("-m", "agents.study", *command_flags(dataclasses.replace(args, **changes)))


def layouts_of(args: Args) -> int:
    """The number of test layouts of the comparison: ``--layouts``, or the budget's when 0."""
    return args.layouts or BUDGETS[args.budget].layouts


def seeds_of(args: Args) -> list[int]:
    """The training seeds of every learner: ``--seed`` and the next ones, ``--seeds`` or the budget's many."""
    return [args.seed + k for k in range(args.seeds or BUDGETS[args.budget].seeds)]


def run_label(learner: str, seed: int) -> str:
    """The name of one trained run in the comparison and its step: ``<learner>_seed<seed>``."""
    return f"{learner}_seed{seed}"


def run_dir(out: Path, learner: str, seed: int) -> Path:
    """The run directory of ``learner`` trained with ``seed``: ``<out>/runs/<learner>/seed<seed>``."""
    return out / "runs" / learner / f"seed{seed}"


def saved_config(out: Path) -> dict | None:
    """The settings in ``out/study.json``, or None when ``out`` is not a study output (no budget and agents in it)."""
    import json

    try:
        saved = json.loads((out / CONFIG).read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) and {"budget", "agents"} <= saved.keys() else None


def _earlier_version(saved: dict) -> str:
    """Why the saved settings come from an earlier version that this one cannot continue ('' when they do not)."""
    missing = [k for k in RESUME_SAME if k not in saved]
    if missing:
        return f"its {CONFIG} has no {missing}"
    return "" if saved["budget"] in BUDGETS else f"its budget {saved['budget']!r} is not one of {list(BUDGETS)}"


def check(args: Args) -> None:
    """Check the arguments and the output directory before anything runs; exits naming the flag and the fix."""
    check_minimums((("--layouts", args.layouts, 0), ("--workers", args.workers, 1), ("--seed", args.seed, 0),
                    ("--seeds", args.seeds, 0), ("--step-timeout", args.step_timeout, 0)))
    from agents.records import MAX_EPISODES

    if layouts_of(args) > MAX_EPISODES:
        sys.exit(f"--layouts {args.layouts}: at most {MAX_EPISODES} (one comparison seed holds that many episodes)")
    if not args.agents or len(set(args.agents)) != len(args.agents):
        sys.exit(f"--agents {args.agents}: give distinct trained agents among {list(TRAINED)}")
    if args.resume and args.overwrite:
        sys.exit("--resume and --overwrite exclude each other")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        sys.exit(f"--out {out}: exists and is not a directory")
    occupied = out.is_dir() and any(p.name != ".lock" for p in out.iterdir())
    saved = saved_config(out)
    if occupied and saved is None:
        sys.exit(f"{out} is not empty and not an agents.study output (no {CONFIG} of one); choose another --out")
    earlier = _earlier_version(saved) if occupied else ""
    if earlier and not args.overwrite:
        sys.exit(f"{out} holds a study of an earlier version of agents.study ({earlier}), which this one cannot "
                 f"continue; replace it with: {command(args, overwrite=True, resume=False)}; or choose another --out")
    if occupied and not (args.resume or args.overwrite):
        sys.exit(f"{out} is not empty; continue its study with: {command(args, **_saved(saved), resume=True)}; "
                 f"or replace it with: {command(args, overwrite=True)}; or choose another --out")
    if args.resume and saved is not None:
        differ = {k: (saved[k], getattr(args, k)) for k in RESUME_SAME if saved[k] != getattr(args, k)}
        if differ:
            sys.exit(f"--resume {out}: these settings differ from its {CONFIG} (saved, now): {differ}; continue "
                     f"it with its own: {command(args, **_saved(saved), resume=True)}; or choose another --out")
    extras = {"compare", "sb3", "study"} | ({"clip"} if {"ppo_clip", "sac_clip"} & set(args.agents) else set())
    extras |= {"grpo"} if "grpo" in args.agents else set()
    exit_without_extras(*sorted(extras), prefix="agents.study: ")


def _saved(saved: dict) -> dict:
    """The `RESUME_SAME` settings of a saved study, as `Args` changes."""
    return {k: saved[k] for k in RESUME_SAME}


def steps(args: Args, out: Path) -> list[Step]:
    """The study's subprocess steps, in run order: every ``--agents`` learner with each seed, then the comparison.

    Seed by seed (every learner with the first seed, then with the next one, ...), so that a study stopped early
    has runs of every learner.

    Args:
        args: Checked arguments.
        out: The output directory (absolute, so the steps may run from the checkout).
    """
    budget = BUDGETS[args.budget]
    result, trained = [], []
    for seed in seeds_of(args):
        for name in args.agents:
            directory = run_dir(out, name, seed)
            if name == "grpo":
                argv = (sys.executable, str(REPO / "train_grpo.py"), "--model", "tiny-random", "--scenario",
                        TRAIN_SCENARIO, "--seed", str(seed), *budget.grpo_flags, "--output-dir", str(directory))
            else:
                clip = ("--clip-pretrained", args.clip_pretrained) if args.clip_pretrained and "clip" in name else ()
                extra = (*budget.sb3_flags.get(name.split("_")[0], ()), *budget.learner_flags.get(name, ()))
                argv = (sys.executable, str(REPO / "train_sb3.py"), *SB3_FLAGS[name], *clip, *extra, "--scenario",
                        TRAIN_SCENARIO, "--eval-scenario", TEST_SCENARIO, "--total-timesteps",
                        str(budget.sb3_steps[name]), "--eval-episodes", str(budget.eval_episodes), "--seed",
                        str(seed), "--output-dir", str(directory))
            result.append(Step(run_label(name, seed), argv, directory))
            trained.append(f"{run_label(name, seed)}={'llm' if name == 'grpo' else 'sb3'}:{directory}")
    chat = ()  # the GRPO model plays with its training's turn budget and tool-call turns
    if "grpo" in args.agents:
        chat = tuple(word for flag in ("--max-completion-length", "--max-tool-calling-iterations")
                     if flag in budget.grpo_flags for word in (CHAT_FLAGS[flag], _flag_value(budget.grpo_flags, flag)))
    compare = (sys.executable, "-m", "agents.compare", "--agents", *BASELINES, *trained, "--scenario", TEST_SCENARIO,
               "--seeds", str(COMPARISON_SEED), "--episodes", str(layouts_of(args)), *chat, "--out",
               str(out / "compare"))
    result.append(Step("compare", compare, out / "compare", ("--workers", str(args.workers))))
    return result


CHAT_FLAGS = {"--max-completion-length": "--max-new-tokens",
              "--max-tool-calling-iterations": "--max-tool-calling-iterations"}
"""``train_grpo.py`` flag -> the ``agents.compare`` flag that gives the chat agent the same budget."""


def _flag_value(flags: Sequence[str], flag: str) -> str:
    """The word after ``flag`` in ``flags``."""
    return flags[list(flags).index(flag) + 1]


def identity(argv: Sequence[str], out: Path) -> list[str]:
    """What decides a step's result: ``argv`` without the interpreter, paths relative to the checkout and ``out``.

    The script is named relative to `REPO` (``train_sb3.py``) and every path under ``out`` starts with
    ``<out>/``, so ``python`` and ``python3``, another virtual environment, or a moved checkout or output
    directory keep a finished step finished.
    """
    words = []
    for word in argv[1:]:
        for root, name in ((out, "<out>"), (REPO, "")):  # out first: it may lie inside the checkout
            word = word.replace(f"{root}{os.sep}", f"{name}/" if name else "")
        words.append(word)
    return words


def marker(out: Path, step: Step) -> Path:
    """The completion marker of ``step``: ``steps/<name>.json`` (command and wall time), written when it succeeds."""
    return out / "steps" / f"{step.name}.json"


def finished(out: Path, step: Step) -> dict | None:
    """The marker of ``step`` when it finished with the same `identity` (a changed command reruns it), else None.

    A marker of an earlier version holds only its ``argv``; its identity is taken from that.
    """
    import json

    try:
        done = json.loads(marker(out, step).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(done, dict):
        return None
    saved = done.get("identity")
    if saved is None and isinstance(done.get("argv"), list):
        saved = identity(done["argv"], out)
    return done if saved == identity(step.argv, out) else None


def forget(out: Path, step: Step) -> None:
    """Remove ``step``'s marker and output directory (the comparison, before any training step runs)."""
    marker(out, step).unlink(missing_ok=True)
    if step.run_dir.exists():
        shutil.rmtree(step.run_dir)


TIMED_OUT = 124
"""Exit code of a step stopped at ``--step-timeout`` (as coreutils ``timeout`` reports it)."""


class StepFailed(RuntimeError):
    """A step's subprocess exited with a non-zero status (``returncode``; `TIMED_OUT` when stopped at its limit)."""

    def __init__(self, step: Step, returncode: int, log: Path, timeout_s: float | None = None) -> None:
        why = (f"ran past --step-timeout {timeout_s:g} s and was stopped" if timeout_s is not None
               else f"exited with status {returncode}")
        super().__init__(f"step {step.name} {why}; its output: {log}")
        self.returncode = returncode


def stop_group(child: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """End the process group that ``child`` leads (``start_new_session``): SIGTERM, then SIGKILL after ``grace_s``.

    Returns once ``child`` is reaped and no other process of the group (vector-env workers, ...) is alive, or at
    the latest ``grace_s`` after the SIGKILL.
    """
    with contextlib.suppress(ProcessLookupError):  # the whole group may be gone already
        os.killpg(child.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(grace_s)
    with contextlib.suppress(ProcessLookupError):  # what is left of the group, the leader too if it ignored SIGTERM
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + grace_s  # SIGKILL is delivered asynchronously: wait until the group is gone
    while _group_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def _group_alive(pgid: int) -> bool:
    """Whether a live process (not a zombie) of process group ``pgid`` is left (Linux ``/proc``; elsewhere False)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while being read
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def run_step(out: Path, step: Step, timeout_s: float | None = None) -> float:
    """Run ``step`` (output streamed to ``logs/<name>.log``) and write its marker; returns its wall time [s].

    The step runs in its own session (process group): when it ends early (Ctrl-C, SIGTERM, ``timeout_s``),
    `stop_group` ends it and all its processes before this returns. A training step's leftover run directory
    (an earlier, unfinished try) is removed first; the comparison continues its own (``agents.compare
    --resume``).

    Args:
        out: The study's output directory.
        step: The step.
        timeout_s: Wall-clock limit [s]; None: none.

    Raises:
        StepFailed: The subprocess failed or ran past ``timeout_s`` (the marker is not written).
        KeyboardInterrupt: Ctrl-C or SIGTERM (see `main`) while it ran; the step's processes are gone.
    """
    argv = [*step.argv, *step.runtime]
    if step.name == "compare":
        from agents.compare import saved_config as compare_config

        if compare_config(step.run_dir) is not None:
            argv.append("--resume")
        elif step.run_dir.exists():
            shutil.rmtree(step.run_dir)
    elif step.run_dir.exists():
        shutil.rmtree(step.run_dir)
    log = out / "logs" / f"{step.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    with open(log, "w") as f:
        f.write(f"$ {shlex.join(argv)}\n")
        f.flush()
        child = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        try:
            returncode = child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            stop_group(child)
            raise StepFailed(step, TIMED_OUT, log, timeout_s) from None
        except BaseException:
            stop_group(child)
            raise
    wall_s = time.monotonic() - start
    if returncode != 0:
        raise StepFailed(step, returncode, log)
    marker(out, step).parent.mkdir(exist_ok=True)
    write_json_atomic(marker(out, step), {"step": step.name, "identity": identity(step.argv, out),
                                          "argv": list(step.argv), "command": step.command,
                                          "wall_s": round(wall_s, 1)})
    return wall_s


def _tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of the text file ``path`` ('' when unreadable)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _interrupt(signum, frame) -> None:
    """SIGTERM handler of `main`: take the Ctrl-C path (stop the running step, keep finished ones)."""
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run the study; returns the exit code (a failed step's, 130 after Ctrl-C or SIGTERM; finished steps are kept).

    Holds the output directory's lock (`carla_gym.io.claim_output_dir`) from before ``--overwrite`` moves
    anything until the running step's processes are gone.
    """
    args = parse_args(argv)
    check(args)
    resume = command(args, resume=True, overwrite=False)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with claim_output_dir(Path(args.out).resolve(), program="agents.study", overwrite=args.overwrite,
                              complete="table.md", resume=resume) as out:
            return _run(args, out, resume)
    except OutputDirRefused as exc:
        sys.exit(str(exc))
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: Args, out: Path, resume: str) -> int:
    """Run the steps not finished yet, then write the report (`main` holds the lock); returns the exit code."""
    write_json_atomic(out / CONFIG, {**dataclasses.asdict(args), "budget_settings": _budget_json(BUDGETS[args.budget])})
    walls: dict[str, tuple[float, str]] = {}
    plan = steps(args, out)
    current = plan[0].name
    try:
        for step in plan:
            current = step.name
            done = finished(out, step)
            if done is not None:
                walls[step.name] = (done["wall_s"], "earlier run")
                print(f"[{step.name}] finished in an earlier run ({done['wall_s']:.0f} s); skipped", flush=True)
                continue
            print(f"[{step.name}] {step.command}\n[{step.name}] log: {out / 'logs' / (step.name + '.log')}",
                  flush=True)
            if step.name != "compare":  # the comparison plays the trained agents: it is redone after any training
                forget(out, plan[-1])
            try:
                wall_s = run_step(out, step, args.step_timeout or None)
            except StepFailed as exc:
                print(_tail(out / "logs" / f"{step.name}.log"), file=sys.stderr)
                print(f"{exc}; after fixing it, continue with: {resume}", file=sys.stderr)
                return exc.returncode
            walls[step.name] = (wall_s, "")
            print(f"[{step.name}] done in {wall_s:.0f} s", flush=True)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM; run_step has stopped the step's processes
        print(f"\ninterrupted in step {current}; finished steps are kept; continue with: {resume}", file=sys.stderr)
        return 130
    from agents.study_plot import write_report

    budget = BUDGETS[args.budget]
    summary = write_report(out, list(args.agents), seeds_of(args), curve_episodes=curve_episodes(budget),
                           reps=budget.bootstrap_reps)
    discard_set_aside(out)
    print(summary)
    print("wall time per step:")
    width = max(len(name) for name in (*walls, "compare"))
    for name, (wall_s, note) in walls.items():
        print(f"  {name:<{width}} {wall_s:8.1f} s" + (f" ({note})" if note else ""))
    print(f"  {'total':<{width}} {sum(w for w, _ in walls.values()):8.1f} s")
    print(f"results in {out}: study.png, stats.md, stats.json, table.md, table.csv, compare/ (summary.md, "
          "episodes.jsonl), runs/, logs/")
    return 0


def curve_episodes(budget: Budget) -> dict[str, int]:
    """Episodes of one periodic evaluation (a curve point) of each learner.

    SB3 learners: a fifth of ``--eval-episodes`` (at least 1, as ``train_sb3.py`` plays them); GRPO:
    ``train_grpo.py --eval-curve-episodes`` (left out when the budget does not give it).
    """
    episodes = {name: max(budget.eval_episodes // 5, 1) for name in SB3_FLAGS}
    if "--eval-curve-episodes" in budget.grpo_flags:
        episodes["grpo"] = int(_flag_value(budget.grpo_flags, "--eval-curve-episodes"))
    return episodes


def _budget_json(budget: Budget) -> dict:
    """``budget`` as JSON values (for study.json)."""
    return {"seeds": budget.seeds, "sb3_steps": dict(budget.sb3_steps),
            "sb3_flags": {k: list(v) for k, v in budget.sb3_flags.items()},
            "learner_flags": {k: list(v) for k, v in budget.learner_flags.items()},
            "eval_episodes": budget.eval_episodes, "grpo_flags": list(budget.grpo_flags), "layouts": budget.layouts,
            "bootstrap_reps": budget.bootstrap_reps}


if __name__ == "__main__":
    sys.exit(main())
