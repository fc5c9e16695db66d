r"""Compare agents on the same scenarios, seeds and metrics: ``python -m agents.compare``, ``carla-gym-compare``.

Usage:
    python -m agents.compare                                    # scripted agents, full trolley suite
    python -m agents.compare --agents oracle random ppo=sb3:runs/ppo sac=sb3:runs/sac llm=llm:runs/grpo \\
        --scenario micro micro_deadzone action_bias --seeds 0 1 2 --episodes 2 --workers 2
    python -m agents.compare --agents gpt=openai:gpt-4.1-mini@https://api.openai.com/v1 --out results/gpt
    python -m agents.compare --out results/compare --resume     # continue a killed run
    python -m agents.compare --scenario nav --out results/nav   # navigation: follow_route* baselines and random
    python -m agents.compare --scenario nav_eval_routes_20 --agents follow_route random ppo=sb3:runs/nav_ppo

Every agent plays every scenario for every seed and episode (env seed ``1000 * seed + episode``),
except that a deterministic agent (`is_deterministic_kind`) plays a fixed scenario once, as its
episode is the same at every seed (`agents.evaluation`: the summary says so), scored by what
actually happened (success by actual outcome, pedestrians hit, road departures)
and by upstream's rubric beside it. Writes into ``--out``: config.json, episodes.jsonl (one record
per episode, appended as it finishes; ``--resume`` skips the recorded ones), summary.md,
summary.csv and summary.json (per agent and scenario, outcomes first, with 95% intervals; framing
consistency; only the ``all`` rows are printed; `agents.evaluation.write_summary`), the plots
success_by_scenario.png (actual outcome), rubric_success_by_scenario.png, actions.png and
casualties.png, and with ``--videos`` GIFs under
videos/ (captioned with agent, outcome, tick, action and speed). Agent specs are listed in `agents.specs`.

Navigation (`agents.nav`): ``--scenario`` with navigation suites or cases (``nav``, ``nav_maze``,
``nav_free_roam``, ``nav_eval_routes_0`` / ``_20`` / ``_40``, ...) plays `CarlaNavigation-v0` instead, with
the agents ``follow_route``, ``follow_route_cautious``, ``follow_route_aggressive``, ``follow_route_basic``,
``random`` (the default set), ``sb3:<run>`` of ``train_sb3.py --env CarlaNavigation-v0`` and the chat agents
``llm:``, ``vlm:`` and ``openai:`` (upstream's navigation tools on the same env episodes); the summary has
one row per agent and case group with the outcomes first (`agents.nav_summary`), the plot navigation.png
and, with ``--videos``, bird's-eye GIFs with the route (`agents.nav_video`). A run is either trolley or
navigation.
The same command is ``carla-gym compare`` (the ``carla-gym`` console script runs ``carla-gym-<command>``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path
from typing import Literal

from agents.records import MAX_EPISODES
from carla_gym.cli_args import arg, check_minimums, check_url, command_flags, parser_for
from carla_gym.hints import exit_without_extras, python_command
from carla_gym.io import OutputDirRefused, claim_output_dir, discard_set_aside, write_json_atomic

DEFAULT_AGENTS = ["inaction", "brake", "swerve_left", "swerve_right", "random", "oracle"]
PROG = "python -m agents.compare"
KIND_EXTRAS = {"sb3": "sb3", "llm": "grpo", "vlm": "grpo", "openai": "compare"}
"""Extra of pyproject.toml each agent kind needs beyond ``compare`` (scripted agents: none)."""


@dataclass
class Args:
    """Command-line arguments: each field is a flag (--agents, --scenario, ...)."""

    agents: list[str] = arg(DEFAULT_AGENTS, "agent specs [label=]kind[:argument]: inaction, brake, swerve_left, "
                                            "swerve_right, brake_every, swerve_left_every, swerve_right_every, "
                                            "random, oracle, sb3:<run dir>, llm:<model or "
                                            "train_grpo run>, vlm:<model>, openai:<model>@<base url>; navigation: "
                                            "follow_route, follow_route_cautious, follow_route_aggressive, "
                                            "follow_route_basic, random (the default), sb3:<run dir>, llm:, vlm:, "
                                            "openai:")
    scenario: list[str] = arg(["micro", "micro_deadzone", "action_bias"], "scenario or suite names (micro, "
                              "micro_deadzone, trainable, probes, mixed, action_bias); or navigation suites or "
                              "cases (nav, nav_maze, nav_free_roam, nav_eval_routes_0, nav_eval_routes_20, "
                              "nav_eval_routes_40; agents.nav)")
    seeds: list[int] = arg([0], "comparison seeds")
    episodes: int = arg(1, "episodes per agent, scenario and seed")
    backend: Literal["embedded", "openenv"] = arg("embedded", "embedded or openenv (--env-urls)")
    env_urls: list[str] = arg([], "OpenEnv server URLs for --backend openenv; agent i uses URL i mod len")
    workers: int = arg(1, "processes for the scripted and SB3 agents (chat agents run in this process)")
    max_new_tokens: int = arg(256, "token budget of one chat turn (llm, vlm, openai agents)")
    max_tool_calling_iterations: int = arg(10, "turns whose tool calls run (chat agents, as in train_grpo.py)")
    videos: list[str] = arg([], "scenarios to film: a GIF of each agent's first episode of each (videos/)")
    video_view: Literal["front", "birdeye", "topdown"] = arg(
        "front", "camera of the videos: front, birdeye or topdown (navigation: always the bird's-eye view with the "
                 "route)")
    out: str = arg("results/compare", "output directory")
    resume: bool = arg(False, "continue the run in --out: skip the episodes already in episodes.jsonl")
    overwrite: bool = arg(False, "replace the results in --out")
    progress_bar: bool = arg(False, "show a progress bar also when stderr is no terminal (on one it always shows)")


def parse_args(argv: list[str] | None = None, prog: str = PROG) -> Args:
    """Parse ``argv`` into `Args`."""
    description = __doc__.splitlines()[0].replace("``", "")
    return Args(**vars(parser_for(Args, prog=prog, description=description).parse_args(argv)))


def command(args: Args, prog: str = PROG, **changes) -> str:
    """The shell command that runs the comparison ``args`` (with ``changes``), as hints print it.

    ``carla-gym compare ...`` or ``carla-gym-compare ...`` when ``prog`` says so and that console
    script is this environment's, else ``python -m agents.compare ...`` with this interpreter
    (`carla_gym.hints.python_command`).
    """
    flags = command_flags(dataclasses.replace(args, **changes))
    words = prog.split()
    script = shutil.which(words[0])
    if words[0].startswith("carla-gym") and script and Path(script).parent == Path(sys.executable).parent:
        return shlex.join([*words, *flags])
    return python_command("-m", "agents.compare", *flags)


def invoked_as() -> str:
    """How this process was started, as a ``prog``: ``carla-gym-compare``, ``carla-gym compare`` or `PROG`.

    The ``carla-gym`` console script sets ``sys.argv[0]`` to ``carla-gym compare`` (`carla_gym.cli`).
    """
    name = Path(sys.argv[0]).name
    return name if name.startswith("carla-gym") else PROG


def saved_config(out: Path) -> dict | None:
    """The config.json of the agents.compare output ``out``, or None when ``out`` is not one."""
    try:
        saved = json.loads((out / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) and {*RESUME_SAME, "out"} <= saved.keys() else None


def _occupied(out: Path) -> bool:
    """Whether ``out`` holds anything besides the lock file of a run killed before writing config.json."""
    return out.is_dir() and any(p.name != ".lock" for p in out.iterdir())


def _resume_changes(args: Args, saved: dict) -> dict:
    """Changes that make ``args`` resume the run of ``saved`` (its `RESUME_SAME` settings, videos it played)."""
    changes = {k: saved[k] for k in RESUME_SAME if saved[k] != getattr(args, k)}
    if "scenario" in changes:
        changes["videos"] = [v for v in args.videos if v in saved["scenario"]]
    return changes


def _not_empty_hint(given: Args, args: Args, out: Path, prog: str) -> str:
    """What to do with the non-empty ``out``: only the commands that work on it, in full."""
    saved = saved_config(out)
    if saved is None:
        return "it is not an agents.compare output (no config.json of one); choose another --out"
    replace = command(given, prog, overwrite=True, resume=False)
    if (out / "summary.md").is_file():
        return f"it holds a finished comparison; replace it with: {replace}; or choose another --out"
    resume = command(dataclasses.replace(given, **_resume_changes(args, saved)), prog, resume=True, overwrite=False)
    return f"continue the unfinished run in it with: {resume}; or replace it with: {replace}; or choose another --out"


def resolve(args: Args, prog: str = PROG):
    """Check the arguments; returns ``(args, specs)``. Exits naming the bad flag.

    Every refusal that suggests a command prints it in full (``prog``: how the comparison was
    started), and only where it works.
    """
    from agents.specs import NAV_SCRIPTED_KINDS, check_spec, parse_spec
    from carla_gym.sim.render import VIEWS
    from carla_gym.suites import resolve_scenarios

    given = args
    args = dataclasses.replace(args)
    try:
        if any(_is_nav(name) for name in args.scenario):
            specs = _resolve_navigation(args)
        else:
            args.scenario = list(resolve_scenarios(args.scenario))
            args.videos = list(resolve_scenarios(args.videos)) if args.videos else []
            specs = [parse_spec(a) for a in args.agents]
            for spec in specs:
                if spec.kind in NAV_SCRIPTED_KINDS:
                    raise ValueError(f"agent {spec.label!r}: {spec.kind} plays navigation only (--scenario nav ...)")
        for spec in specs:
            check_spec(spec)
    except ValueError as exc:
        sys.exit(f"agents.compare: {exc}")
    unplayed = [v for v in args.videos if v not in args.scenario]
    if unplayed:
        sys.exit(f"--videos {unplayed}: not among the --scenario list, so there is no episode to film")
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        sys.exit(f"--agents: labels must be unique, got {labels}; name them label=spec")
    if args.backend not in ("embedded", "openenv"):
        sys.exit(f"--backend {args.backend!r}: choose embedded or openenv")
    if args.backend == "openenv" and _is_nav(args.scenario[0]):
        sys.exit("--backend openenv: navigation runs on the embedded simulator only; drop --backend and --env-urls")
    if args.backend == "openenv" and not args.env_urls:
        sys.exit("--backend openenv needs --env-urls URL [URL ...] (servers started with carla-gym serve)")
    if args.backend == "embedded" and args.env_urls:
        sys.exit("--env-urls is only used with --backend openenv")
    for url in args.env_urls:
        check_url(url)
    if args.video_view not in VIEWS:
        sys.exit(f"--video-view {args.video_view!r}: choose one of {list(VIEWS)}")
    if args.episodes > MAX_EPISODES:
        sys.exit(f"--episodes {args.episodes}: at most {MAX_EPISODES} per seed (env seeds are 1000 x seed + "
                 "episode); use more --seeds")
    check_minimums((("--episodes", args.episodes, 1), ("--workers", args.workers, 1),
                    ("--max-new-tokens", args.max_new_tokens, 1),
                    ("--max-tool-calling-iterations", args.max_tool_calling_iterations, 0)))
    if not args.seeds or len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        sys.exit(f"--seeds {args.seeds}: give distinct seeds >= 0")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        sys.exit(f"--out {out}: exists and is not a directory")
    if args.resume and args.overwrite:
        sys.exit("--resume and --overwrite exclude each other")
    if _occupied(out) and not (args.resume or args.overwrite):
        sys.exit(f"{out} is not empty; {_not_empty_hint(given, args, out, prog)}")
    saved = saved_config(out)
    if (args.overwrite or args.resume) and _occupied(out) and saved is None:
        flag = "--overwrite" if args.overwrite else "--resume"
        sys.exit(f"{flag} {out}: refusing to {'replace' if args.overwrite else 'continue'} a folder that is not an "
                 "agents.compare output (no config.json of one); choose another --out")
    if args.resume and saved is not None:
        changes = _resume_changes(args, saved)
        if changes:
            changed = {k: (saved[k], getattr(args, k)) for k in changes if k in RESUME_SAME}
            resume = command(dataclasses.replace(given, **changes), prog, resume=True, overwrite=False)
            sys.exit(f"--resume {out}: these settings differ from the run's config.json (saved, now): {changed}; "
                     f"continue the run with its own settings: {resume}; or start another --out")
    needed = {"compare"} | {KIND_EXTRAS[s.kind] for s in specs if s.kind in KIND_EXTRAS}
    needed |= {"server"} if args.backend == "openenv" else set()
    exit_without_extras(*sorted(needed), prefix="agents.compare: ")
    return args, specs


def _is_nav(name: str) -> bool:
    """Whether ``name`` is a navigation suite or case (`agents.nav.is_nav`)."""
    from agents.nav import is_nav

    return is_nav(name)


def _resolve_navigation(args: Args) -> list:
    """Resolve a navigation run in place: cases, videos and agents (`agents.nav.NAV_DEFAULT_AGENTS` by default).

    Returns:
        The agent specs.

    Raises:
        ValueError: Trolley scenarios among the names, an unknown case, or an agent that does not play navigation.
    """
    from agents.nav import NAV_DEFAULT_AGENTS, NAV_KINDS, resolve_nav
    from agents.specs import parse_spec

    trolley = [name for name in args.scenario if not _is_nav(name)]
    if trolley:
        raise ValueError(f"--scenario {trolley}: trolley scenarios and navigation suites cannot share one run; "
                         "run them as two comparisons with different --out")
    args.scenario = list(resolve_nav(args.scenario))
    args.videos = list(resolve_nav(args.videos)) if args.videos else []
    if args.agents == DEFAULT_AGENTS:
        args.agents = list(NAV_DEFAULT_AGENTS)
    specs = [parse_spec(a) for a in args.agents]
    for spec in specs:
        if spec.kind not in NAV_KINDS:
            raise ValueError(f"agent {spec.label!r}: {spec.kind} does not play navigation; navigation agents: "
                             f"{', '.join(NAV_KINDS)} (sb3:<run dir of train_sb3.py --env CarlaNavigation-v0>)")
    return specs


RESUME_SAME = ("agents", "scenario", "seeds", "episodes", "backend", "max_new_tokens", "max_tool_calling_iterations")
"""Settings a resumed run must keep (the others, such as --workers or --videos, may change)."""


# -- worker processes -----------------------------------------------------------------------------
_AGENTS: dict = {}


def _worker_init() -> None:
    """Workers leave Ctrl-C to the parent and die with it (Linux: PR_SET_PDEATHSIG), so none is orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
        except OSError:
            pass
    if os.getppid() == 1:  # the parent died before prctl took effect
        os._exit(1)


def _play(spec, base_url, settings, scenario, seed, episode) -> dict:
    """Play one episode in a worker (agents are built once per process)."""
    from agents.specs import build_agent

    key = (spec, base_url)
    if key not in _AGENTS:
        _AGENTS[key] = build_agent(spec, base_url, **settings)
    return _AGENTS[key].play(scenario, seed, episode)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run the comparison; returns the exit code (130 after Ctrl-C: finished episodes are kept).

    Args:
        argv: The flags; None: ``sys.argv[1:]`` (the console script ``carla-gym-compare``).
        prog: The command's name in usage and hints; None: `invoked_as` for ``sys.argv``, else `PROG`.
    """
    if prog is None:
        prog = invoked_as() if argv is None else PROG
    given = parse_args(argv, prog)
    args, specs = resolve(given, prog)
    resume = command(given, prog, resume=True, overwrite=False)
    try:  # one run per output directory; an overwritten one is kept aside until the new run has its summary
        with claim_output_dir(args.out, program="agents.compare", overwrite=args.overwrite, complete="summary.md",
                              resume=resume) as out:
            return _run(args, specs, out, resume)
    except OutputDirRefused as exc:
        sys.exit(str(exc))


def is_deterministic_kind(kind: str) -> bool:
    """Whether agents of ``kind`` act deterministically: the scripted ones and ``sb3`` runs (deterministic actions).

    The scripted kinds are those of `agents.scripted.SCRIPTED_AGENTS`; `agents.evaluation.is_deterministic`
    finds the same for the agents built (`agents.specs.build_agent`). They play a fixed scenario once
    (`agents.evaluation.episodes_to_play`); ``random`` and the chat kinds play every episode.
    """
    from agents.scripted import SCRIPTED_AGENTS

    return kind in SCRIPTED_AGENTS or kind == "sb3"


class _Deferred:
    """An agent of the sequential part, built on its first episode (a model loads only if it has one to play)."""

    def __init__(self, spec, base_url: str | None, settings: dict) -> None:
        self.name, self._spec, self._base_url, self._settings = spec.label, spec, base_url, settings
        self.deterministic = is_deterministic_kind(spec.kind)  # read by agents.evaluation.play_all

    def play(self, scenario: str, seed: int, episode: int) -> dict:
        """Play one episode (`_play`: the agent is built once)."""
        return _play(self._spec, self._base_url, self._settings, scenario, seed, episode)

    def close(self) -> None:
        """Free the agent (its model, its environment)."""
        agent = _AGENTS.pop((self._spec, self._base_url), None)
        if agent is not None:
            agent.close()


def _run(args: Args, specs: list, out: Path, resume: str) -> int:
    """Play the missing episodes, then write the summary, plots and videos (``main`` holds the lock).

    ``resume`` is the command that continues the run (printed after Ctrl-C).
    """
    import multiprocessing

    from agents.evaluation import episodes_to_play, is_fixed_scenario, play_all, write_summary
    from agents.records import EpisodeLog, key_of
    from agents.specs import ticks_per_decision
    from agents.summary import framing_consistency, markdown

    log = EpisodeLog(out / "episodes.jsonl")
    try:
        done = {key_of(r) for r in log.read()}
    except ValueError as exc:
        sys.exit(f"--resume: {exc}")
    write_json_atomic(out / "config.json", dataclasses.asdict(args))
    urls = cycle(args.env_urls) if args.backend == "openenv" else cycle([None])
    agent_urls = {spec.label: next(urls) for spec in specs}
    navigation = _is_nav(args.scenario[0])
    settings = {"max_new_tokens": args.max_new_tokens, "max_tool_calling_iterations": args.max_tool_calling_iterations,
                "navigation": navigation}
    # a deterministic agent plays a fixed scenario once on the embedded simulator: that episode stands for every
    # seed and episode (an OpenEnv server, real CARLA among them, need not give the same episode twice)
    plays_once = {spec.label: is_deterministic_kind(spec.kind) and args.backend == "embedded" for spec in specs}
    plans = {(spec.label, scenario): episodes_to_play(plays_once[spec.label], scenario, args.seeds, args.episodes)
             for spec in specs for scenario in args.scenario}
    once = {(spec.label, scenario): plays_once[spec.label] and is_fixed_scenario(scenario)
            for spec in specs for scenario in args.scenario}
    wanted = {(label, scenario, seed, episode) for (label, scenario), plan in plans.items() for seed, episode in plan}
    todo = [(spec, scenario, seed, episode) for spec in specs for scenario in args.scenario
            for seed, episode in plans[(spec.label, scenario)] if (spec.label, scenario, seed, episode) not in done]
    print(f"{len(todo)} episodes to play ({len(done)} already in {log.path})", file=sys.stderr)

    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), unit="ep", disable=not (args.progress_bar or sys.stderr.isatty()))

    def finished(record: dict) -> None:
        log.append(record)
        bar.update()

    pool, sequential = None, specs
    try:
        parallel = [t for t in todo if t[0].parallel]
        if args.workers > 1 and parallel:
            pool = ProcessPoolExecutor(args.workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_worker_init)
            pending = {pool.submit(_play, spec, agent_urls[spec.label], settings, *rest) for spec, *rest in parallel}
            while pending:
                completed, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in completed:
                    record = future.result()
                    finished({**record, "played_once": once[(record["agent"], record["scenario"])]})
            sequential = [spec for spec in specs if not spec.parallel]
        for spec in sequential:  # one agent at a time, freed once its episodes are done
            agent = _Deferred(spec, agent_urls[spec.label], settings)
            try:
                play_all([agent], args.scenario, args.seeds, args.episodes, on_record=finished, skip=done)
            finally:
                agent.close()
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished episodes are in {log.path}; continue with: {resume}", file=sys.stderr)
        return 130
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        bar.close()
        for agent in _AGENTS.values():
            agent.close()
        _AGENTS.clear()

    labels = [s.label for s in specs]
    # marked again: a log of an earlier version has no played_once (and episodes a fixed scenario no longer plays)
    records = [{**r, "played_once": once[(r["agent"], r["scenario"])]} for r in log.read() if key_of(r) in wanted]
    if navigation:
        _navigation_outputs(args, labels, records, out)
        discard_set_aside(out)
        return 0
    rows = write_summary(records, labels, args.scenario, out, "summary")
    consistency = framing_consistency(records, labels)
    from agents.plots import plot_all

    plot_all(rows, out)
    if args.videos:
        from agents.video import write_gif

        (out / "videos").mkdir(exist_ok=True)
        by_key = {key_of(r): r for r in records}
        for index, spec in enumerate(specs):
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in spec.label)
            for scenario in args.videos:
                record = by_key[(spec.label, scenario, args.seeds[0], 0)]
                write_gif(record, out / "videos" / f"{index:02d}_{safe}__{scenario}.gif", args.video_view,
                          ticks_per_decision(spec))
    discard_set_aside(out)
    print(markdown([r for r in rows if r["scenario"] == "all"], consistency))
    print(f"the 'all' rows above pool each agent's {len(args.scenario)} scenario(s); the {len(rows) - len(labels)} "
          f"per-scenario rows are in {out / 'summary.md'} and summary.csv")
    print(f"results in {out}: episodes.jsonl, summary.md, summary.csv, summary.json, success_by_scenario.png "
          "(actual outcome), rubric_success_by_scenario.png, actions.png, casualties.png"
          + (", videos/" if args.videos else ""))
    return 0


def _navigation_outputs(args: Args, labels: list[str], records: list[dict], out: Path) -> None:
    """Write a navigation run's summary, plot and videos, and print its table."""
    from agents.nav import case_group
    from agents.nav_summary import nav_markdown, plot_nav, write_nav_summary
    from agents.records import key_of

    groups = list(dict.fromkeys(case_group(case) for case in args.scenario))
    rows = write_nav_summary(records, labels, groups, out)
    plot_nav(rows, out)
    if args.videos:
        from agents.nav_video import write_nav_gif

        (out / "videos").mkdir(exist_ok=True)
        by_key = {key_of(r): r for r in records}
        for index, label in enumerate(labels):
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
            for case in args.videos:
                write_nav_gif(by_key[(label, case, args.seeds[0], 0)],
                              out / "videos" / f"{index:02d}_{safe}__{case.replace('/', '_')}.gif")
    print(nav_markdown(rows))
    print(f"results in {out}: episodes.jsonl, summary.md, summary.csv, summary.json, navigation.png"
          + (", videos/" if args.videos else ""))


if __name__ == "__main__":
    sys.exit(main())
