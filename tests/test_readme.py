"""Every fenced code block of the README and of the documentation pages runs and prints what it says.

The pages are README.md and every ``docs/**/*.md``. A block's key is ``"<page> / <section> / <lang> <n>"``: the
page (``README.md``, or its path under ``docs/`` such as ``training/sb3.md``), the last ``## `` heading above the
block (``(top)`` before the first) and n counting that language in the section. Moving a block to another page or
section moves its key, so its entry in `PYTHON_BLOCKS` moves with it.

Python blocks are executed; a ``print(...)`` line's trailing comment is its exact output, and full-line
comments right below a ``print(...)`` without one are its output lines. Blocks that download weights
are run with the offline substitute listed beside them in `PYTHON_BLOCKS`; blocks that talk to a
server get the pages' own ``carla-gym serve`` command's server. Bash blocks are split into commands,
and each command is handled by the first rule of `COMMAND_RULES` whose prefix it starts with (or whose
predicate it satisfies: the benchmark scripts of the Performance page): run
verbatim, parsed by the script's own argument parser (exact argv; too slow, a GPU or a download),
or a listed exception with its reason. A new block or a command no rule covers fails the suite; ``text``
blocks are shown output (a command's printout) and are not run.

Slow blocks and commands (``slow``: run by ``pytest -m slow``) keep a check in the default run: a
block with ``fast_substitutions`` runs with those (a smaller model, shorter completions), and a
command of a slow rule is parsed by its script's parser.

The tables the pages show are checked against the code too: the scenario catalogue (docs/scenarios.md)
against `carla_gym.sim.scenarios`, the comparison table (docs/comparing.md) by re-running its command.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import re
import select
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from carla_gym.sim import rules
from carla_gym.sim.navigation.scenarios import is_nav_name
from carla_gym.sim.scenarios import resolve_scenario

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = {"README.md": (REPO / "README.md").read_text(),
         **{p.relative_to(DOCS).as_posix(): p.read_text() for p in sorted(DOCS.rglob("*.md"))}}
"""``{page: text}``: README.md and every documentation page (named by its path under docs/)."""
CI = (REPO / ".ci" / "run").read_text()
BLOCK = re.compile(r"^(?P<indent>[ ]*)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```[ ]*$", re.M | re.S)
URL = "http://127.0.0.1:8000"
"""The server address the pages' blocks use."""
SHOWN_OUTPUT = {"text"}
"""Block languages that show output rather than code: not executed."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: ``key`` is ``"<page> / <section> / <lang> <n>"`` (n counts that language in the section)."""

    key: str
    lang: str
    code: str
    line: int
    page: str


def page_blocks(page: str, text: str) -> list[Block]:
    """The fenced blocks of one page, keyed ``"<page> / <section> / <lang> <n>"``."""
    blocks, counts = [], {}
    for m in BLOCK.finditer(text):
        before = text[:m.start()]
        headings = re.findall(r"^## (.+)$", before, re.M)
        section = headings[-1] if headings else "(top)"
        counts[section, m["lang"]] = counts.get((section, m["lang"]), 0) + 1
        code = "".join(line[len(m["indent"]):] for line in m["body"].splitlines(keepends=True))
        blocks.append(Block(f"{page} / {section} / {m['lang']} {counts[section, m['lang']]}", m["lang"], code,
                            before.count("\n") + 1, page))
    return blocks


BLOCKS = [block for page, text in PAGES.items() for block in page_blocks(page, text)]


# ---------------------------------------------------------------------------------------------- Python blocks


@dataclasses.dataclass(frozen=True)
class PyRun:
    """How a Python block runs: verbatim unless ``substitutions`` (old, new) are given with their ``reason``."""

    server: bool = False  # talks to the pages' server at URL (replaced by the test server's address)
    substitutions: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    slow: bool = False  # runs in the slow part only (pytest -m slow) ...
    fast_substitutions: tuple[tuple[str, str], ...] = ()  # ... and, if given, with these in the default part


TINY_QWEN3 = (
    ("cuda = torch", 'from carla_gym.llm.tiny import tiny_model\nmodel, tok = tiny_model("tiny-random")\ncuda = torch'),
    ('model="Qwen/Qwen3-0.6B",', "model=model, processing_class=tok,"),
)
"""The GRPO block's offline model: the tiny random Qwen3 its comment names."""

QUICK_STARTS = ("README.md / Quick start / python 1", "getting-started.md / Quick start / python 1")
CLIENT_EXAMPLES = ("openenv.md / Client / python 1", "openenv.md / Remote backend / python 1")

PYTHON_BLOCKS = {
    QUICK_STARTS[0]: PyRun(),
    QUICK_STARTS[1]: PyRun(),
    "environments/vector.md / Gymnasium / python 1": PyRun(),
    "environments/vector.md / stable-baselines3 / python 1": PyRun(
        reason="2,048 PPO steps (default part: 128, which PPO rounds up to one rollout of 32 x 16 = 512)", slow=True,
        fast_substitutions=((".learn(total_timesteps=2048)", ".learn(total_timesteps=128)"),
                            ("print(model.num_timesteps)  # 2048", "print(model.num_timesteps)  # 512"))),
    "environments/trolley.md / Adding modes / python 1": PyRun(),  # registers modes: test_python_block removes them
    CLIENT_EXAMPLES[0]: PyRun(server=True),
    "environments/navigation.md / Without Gymnasium: NavEpisode / python 1": PyRun(),
    "environments/navigation.md / Two ways to drive / python 1": PyRun(
        reason="renders the dict observation's camera at every tick of a whole free-roam episode", slow=True,
        fast_substitutions=(('observation_mode="dict"', 'observation_mode="state"'),)),  # same dynamics, same output
    CLIENT_EXAMPLES[1]: PyRun(server=True),
    "openenv.md / MCP tools / python 1": PyRun(server=True),
    "training/clip.md / Usage / python 1": PyRun(
        substitutions=(('OpenClipEncoder("ViT-B-32", pretrained="laion2b_s34b_b79k")',
                        'OpenClipEncoder("ViT-B-32", pretrained=None)'),),
        reason="downloads the ViT-B-32 weights from the hub: random weights of the same architecture (default "
               "part: of the smaller ViT-S-32)", slow=True,
        fast_substitutions=(('OpenClipEncoder("ViT-B-32", pretrained="laion2b_s34b_b79k")',
                             'OpenClipEncoder("ViT-S-32", pretrained=None)'),)),
    "training/clip.md / Weights / python 1": PyRun(
        substitutions=(('create_model("ViT-B-32", pretrained="laion2b_s34b_b79k")',
                        'create_model("ViT-S-32", pretrained=None)'),),
        reason="downloads the ViT-B-32 weights from the hub: a smaller architecture with random weights"),
    "training/grpo.md / Your own TRL script / python 1": PyRun(
        substitutions=(*TINY_QWEN3, ("max_completion_length=1024,", "max_completion_length=256, max_steps=1,")),
        reason="downloads Qwen/Qwen3-0.6B: the tiny random Qwen3 its comment names, one short step on CPU (default "
               "part: completions of at most 32 tokens)", slow=True,
        fast_substitutions=(*TINY_QWEN3, ("max_completion_length=1024,", "max_completion_length=32, max_steps=1,"))),
}


def _substituted(block: Block, run: PyRun, url: str | None, fast: bool = False) -> str:
    code = block.code
    for old, new in run.fast_substitutions if fast else run.substitutions:
        assert code.count(old) == 1, f"{block.key}: substitution target {old!r} is not in the block once"
        code = code.replace(old, new)
    if run.server:
        assert URL in code, f"{block.key}: marked as needing the server but does not use {URL}"
        code = code.replace(URL, url)
    return code


def expected_prints(code: str) -> dict[int, list[str]]:
    """``{line number: expected output lines}`` of the block's ``print`` lines that show their output."""
    lines = code.splitlines()
    expected = {}
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("print("):
            continue
        match = re.match(r"^(?P<call>.*\))\s+# (?P<out>.+)$", line)
        if match:
            expected[i + 1] = [match["out"]]
            continue
        below = []
        for after in lines[i + 1:]:
            if not after.startswith("# "):
                break
            below.append(after[2:])
        if below:
            expected[i + 1] = below
    return expected


def run_python_block(block: Block, run: PyRun, url: str | None = None, fast: bool = False) -> dict:
    """Execute the block (with its substitutions, or its fast ones) and check its shown outputs; returns its names."""
    code = _substituted(block, run, url, fast)
    outputs: dict[int, list[str]] = {}

    def recording_print(*args, sep=" ", end="\n", file=None, flush=False):
        frame = sys._getframe(1)
        if frame.f_code.co_filename == filename:
            outputs.setdefault(frame.f_lineno, []).extend((sep.join(map(str, args)) + end).splitlines())

    filename = f"<{block.page}>"
    namespace = {"__name__": "__readme__", "print": recording_print}
    exec(compile(code, filename, "exec"), namespace)  # noqa: S102
    shown = expected_prints(code)
    for line, want in shown.items():
        assert outputs.get(line) == want, f"{block.key} ({block.page} line {block.line + line}): printed " \
                                          f"{outputs.get(line)}, the page shows {want}"
    return namespace


def test_every_python_block_is_listed():
    assert sorted(b.key for b in BLOCKS if b.lang == "python") == sorted(PYTHON_BLOCKS)
    assert {b.lang for b in BLOCKS} <= {"python", "bash", *SHOWN_OUTPUT}, "a block in another language needs a rule"
    assert {b.page for b in BLOCKS if b.lang == "python"} >= {"README.md", "getting-started.md", "openenv.md"}


def test_the_quick_start_and_client_examples_show_their_output():
    """Those blocks are checked against their comments (so a missing comment would silently check nothing)."""
    for key in (*QUICK_STARTS, *CLIENT_EXAMPLES):
        code = next(b.code for b in BLOCKS if b.key == key)
        assert "1.0 SWERVE_LEFT 0" in [o for outs in expected_prints(code).values() for o in outs], key
    assert any('prints "carla-gym serve: listening on' in c for _, argv, c in bash_commands() if argv[1] == "serve")


def _python_block_params() -> list:
    """``(key, fast)`` of the blocks without a server: slow ones in the slow part, plus their fast variant."""
    params = []
    for key, run in ((k, r) for k, r in PYTHON_BLOCKS.items() if not r.server):
        params.append(pytest.param(key, False, marks=[pytest.mark.slow] if run.slow else [], id=key))
        if run.slow and run.fast_substitutions:
            params.append(pytest.param(key, True, id=f"{key} (fast)"))
    return params


@pytest.mark.parametrize(("key", "fast"), _python_block_params())
def test_python_block(key, fast, tmp_path, monkeypatch, request):
    from carla_gym import envs

    monkeypatch.chdir(tmp_path)  # blocks write run directories and files relative to the working directory
    for registry in (envs.OBSERVATION_TYPES, envs.ACTION_TYPES, envs.REWARD_TERMS):  # modes a block adds go after it
        saved = dict(registry)
        request.addfinalizer(lambda registry=registry, saved=saved: (registry.clear(), registry.update(saved)))
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # TRL's notice that environment_factory is experimental
    block = next(b for b in BLOCKS if b.key == key)
    namespace = run_python_block(block, PYTHON_BLOCKS[key], fast=fast)
    if key == "training/clip.md / Usage / python 1":
        venv = namespace["venv"]
        assert venv.num_envs == 8 and venv.reset().shape == (8, 32)
        venv.close()
    elif key == "training/clip.md / Weights / python 1":  # and its comment: the file loads as pretrained=
        from carla_gym.reward import OpenClipEncoder

        loaded = OpenClipEncoder("ViT-S-32", pretrained="vit_b32.pt").model.state_dict()
        saved = namespace["model"].state_dict()
        assert loaded.keys() == saved.keys() and all(loaded[k].equal(saved[k]) for k in saved)
    elif key == "training/grpo.md / Your own TRL script / python 1":
        assert namespace["trainer"].state.global_step == 1
    elif key in QUICK_STARTS:
        assert namespace["info"]["outcome"]["success"] is True


# ------------------------------------------------------------------------------------------------ Bash blocks


def bash_commands() -> list[tuple[str, list[str], str]]:
    """``(block key, argv, comments)`` of every command of the bash blocks (``&&`` chains split, ``&`` dropped).

    The comments are the full-line comment above the command, its own and the full-line comment below.
    """
    commands = []
    for block in (b for b in BLOCKS if b.lang == "bash"):
        lines = block.code.replace("\\\n", " ").splitlines()
        for i, line in enumerate(lines):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            comment = line.split("#", 1)[1].strip() if "#" in line else ""
            above = [c.strip()[2:] for c in lines[i - 1:i] if i and c.startswith("# ")]
            below = [c.strip()[2:] for c in lines[i + 1:i + 2] if c.startswith("# ")]
            argv = shlex.split(line, comments=True)
            comments = " ".join([*above, comment, *below]).strip()
            part: list[str] = []
            for token in [*argv, "&&"]:
                if token == "&&":
                    commands.append((block.key, [t for t in part if t != "&"], comments))
                    part = []
                else:
                    part.append(token)
    return commands


def _parse_only(module: str):
    """Parse the exact argv with the script's own ``parse_args``; each flag gets the value the command gives.

    ``parse_args`` returns a dataclass, or a tuple of them (train_grpo.py: its ``Args`` and TRL's
    GRPOConfig); a flag names a field of one of them.
    """

    def check(argv, comment):
        if str(REPO) not in sys.path:  # train_sb3.py and train_grpo.py are scripts at the repository root
            sys.path.insert(0, str(REPO))
        script = argv.index(module + ".py") if module + ".py" in argv else argv.index(module)
        args = argv[script + 1:]
        parsed = importlib.import_module(module).parse_args(args)  # Args, or (Args, GRPOConfig) for train_grpo.py
        values = {}
        for obj in reversed(parsed if isinstance(parsed, tuple) else (parsed,)):  # the first object's fields win
            values.update({field.name: getattr(obj, field.name) for field in dataclasses.fields(obj)})
        flags = [i for i, a in enumerate(args) if a.startswith("--")]
        for i, end in zip(flags, [*flags[1:], len(args)][:len(flags)], strict=True):
            name, given = args[i][2:].replace("-", "_"), args[i + 1:end]
            value = values[name]
            if isinstance(value, bool):
                assert value is True and given == [], (args[i], given)
            elif isinstance(value, list):
                assert [str(v) for v in value] == given, (args[i], value, given)
            else:
                assert len(given) == 1 and (str(value) == given[0] or value == float(given[0])), (args[i], value)

    return check


def _installs(argv, comment):
    """Installing from PyPI needs the network and minutes; CI's .ci/run runs the pages' install and tests.

    Checked here: an editable install of this clone with extras that exist.
    """
    import tomllib

    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    target = argv[-1]
    assert argv[-2:-1] == ["-e"] and re.fullmatch(r"\.(\[[a-z0-9,]+\])?", target), argv
    named = set(target[2:-1].split(",")) if "[" in target else set()
    assert named <= extras, (target, sorted(extras))


def _venv(argv, comment):
    """Creating the virtual environment is the first step of CI's .ci/run (the pages' test command)."""
    assert argv == ["python3", "-m", "venv", ".venv"]


def _pytest(argv, comment):
    """The test command itself: CI's .ci/run runs it; here it would run this very test again."""
    assert " ".join(argv) in CI


def _hf_download(argv, comment):
    """Downloads a model from the hub (no network here): the CLI it names exists and accepts the arguments."""
    hf = Path(sys.executable).with_name("hf")
    result = subprocess.run([str(hf), "download", "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "--local-dir" in result.stdout


def _serve(argv, comment, servers):
    """Run verbatim on a free port (--port 8000 -> 0); the announcement is the one the comment quotes.

    ``servers`` (the `readme_servers` fixture) holds every ``carla-gym serve`` command, started at once.
    """
    url, announcement = servers[tuple(argv)]
    assert url.startswith("http://127.0.0.1:")
    shown = re.search(r'prints "(.+?)"', comment)
    if shown:
        quoted = shown.group(1).replace(URL, url).removesuffix(" ...")
        assert announcement.startswith(quoted), (announcement, quoted)


def _grpo_smoke(argv, comment):
    """The command the page calls the offline smoke run, verbatim (in a temporary directory); others parse."""
    import tempfile

    if "smoke run" not in comment:
        return _parse_only("train_grpo")(argv, comment)
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run([sys.executable, str(REPO / argv[1]), *argv[2:]], cwd=tmp, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        steps, out = argv[argv.index("--max-steps") + 1], argv[argv.index("--output-dir") + 1]
        scenario = argv[argv.index("--scenario") + 1] if "--scenario" in argv else ""
        row = f"| grpo | {scenario} | 1 |" if is_nav_name(scenario) else "| all | 1 |"  # its evaluation's table
        assert f"trained {steps} step(s)" in result.stdout and row in result.stdout, result.stdout[-2000:]
        assert (Path(tmp) / out / "model").is_dir()


def _validate_url(argv, comment, servers):
    """openenv-core's validator against the pages' server: every criterion passes.

    In process (``openenv validate --url`` runs ``validate_running_environment``): the ``openenv`` command line
    takes 8 s to start; tests/test_mcp.py's slow test runs it verbatim against a server process.
    """
    from openenv.cli._validation import validate_running_environment

    assert argv[1:] == ["validate", "--url", URL]
    report = validate_running_environment(next(iter(servers.values()))[0])
    assert report["passed"] and report["summary"]["failed_criteria"] == [], report


def _collect(argv, comment, servers):
    """``carla-gym collect`` verbatim against the pages' server (in a temporary directory); prints what it says."""
    import tempfile

    from carla_gym.collect import main as collect

    url = next(iter(servers.values()))[0]
    shown = re.findall(r'prints "(.+?)"', comment)  # the one below the command (the comment above may quote one too)
    assert shown, f"{argv}: the page quotes no output"
    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp), \
            contextlib.redirect_stdout(io.StringIO()) as out:
        assert collect([a.replace(URL, url) for a in argv[2:]]) == 0
    assert out.getvalue().strip().splitlines()[-1] == shown[-1]


def _package(argv, comment, folder):
    """``carla-gym package DIR`` verbatim in the module's working directory (``readme_package``)."""
    assert folder.is_dir() and (folder / "openenv.yaml").is_file() and (folder / "uv.lock").is_file()
    assert argv[2:] == [folder.name]


def _validate_folder(argv, comment, folder):
    """``openenv validate DIR`` on the folder the pages' package command wrote; its verdict as shown.

    In process (what the command runs: ``validate_multi_mode_deployment`` and ``format_validation_report``);
    tests/test_package.py's slow test runs the command line verbatim.
    """
    from openenv.cli._validation import format_validation_report, validate_multi_mode_deployment

    assert argv[1:] == ["validate", folder.name]
    valid, issues = validate_multi_mode_deployment(folder)
    assert format_validation_report(folder.name, valid, issues) == comment.split("#")[0].strip()


def _push(argv, comment, folder):
    """Needs a Hugging Face login and the network: the folder exists and ``openenv push`` takes the arguments."""
    import inspect

    from openenv.cli.commands.push import push

    assert argv[2] == folder.name and argv[3] == "--repo-id" and folder.is_dir()
    assert {"directory", "repo_id"} <= set(inspect.signature(push).parameters)


def _docker(argv, comment, folder):
    """No container engine runs here: the build names the package's Dockerfile and folder, the run the image built.

    tests/test_package.py's slow test runs every command of the Dockerfile in a fresh venv instead.
    """
    from carla_gym.server.package import image_tag

    if argv[1] == "build":
        assert argv[2:] == ["-t", "carla-gym", "-f", f"{folder.name}/server/Dockerfile", folder.name]
        assert (folder / "server" / "Dockerfile").is_file()
    else:
        assert argv[1:] == ["run", "--rm", "-p", "8000:8000", "carla-gym"]
    assert image_tag() == "carla-gym"  # the tag carla-gym package prints


def _mkdocs(argv, comment):
    """Serving the site blocks until Ctrl-C: the command exists and the site's config is the repository's.

    The strict build of the site is tests/test_prose.py's `test_the_documentation_site_builds_strictly` (slow).
    """
    from mkdocs.__main__ import cli

    argv = ["mkdocs", *argv[1:]] if argv[0] == ".venv/bin/mkdocs" else argv
    assert argv[1] in cli.commands and argv in (["mkdocs", "serve"], ["mkdocs", "build", "--strict"]), argv
    assert (REPO / "mkdocs.yml").is_file() and Path(sys.executable).with_name("mkdocs").is_file()


def _is_benchmark(argv) -> bool:
    """``[taskset -c CPUS] python benchmarks/<script>.py ...``."""
    rest = argv[3:] if argv[:2] == ["taskset", "-c"] else argv
    return len(rest) > 1 and rest[0] == "python" and re.fullmatch(r"benchmarks/\w+\.py", rest[1]) is not None


def _benchmark(argv, comment):
    """A measurement (minutes on a quiet machine; results on the Performance page): script and flags exist."""
    rest = argv[3:] if argv[0] == "taskset" else argv
    source = (REPO / rest[1]).read_text()
    assert all(f'"{flag}"' in source for flag in rest[2:] if flag.startswith("--")), (rest, "a flag the script lacks")


COMMAND_RULES = [  # (argv prefix, handler, slow)
    (["python3", "-m", "venv"], _venv, False),
    ([".venv/bin/pip", "install"], _installs, False),
    (["pip", "install"], _installs, False),
    ([".venv/bin/python", "-m", "pytest"], _pytest, False),
    ([".venv/bin/python", "train_sb3.py"], _parse_only("train_sb3"), False),
    (["python", "train_sb3.py"], _parse_only("train_sb3"), False),  # minutes of training each, or a GPU
    (["python", "train_grpo.py", "--model", "tiny-random"], _grpo_smoke, True),
    (["python", "train_grpo.py"], _parse_only("train_grpo"), False),  # downloads a model, needs a GPU
    (["python", "-m", "agents.compare"], _parse_only("agents.compare"), False),  # needs the runs trained above
    (["python", "-m", "agents.study"], _parse_only("agents.study"), False),  # 30 min (test_study runs tiny)
    (["python", "-m", "carla_gym.reward.calibrate"], _parse_only("carla_gym.reward.calibrate"), False),  # weights
    (["carla-gym", "serve"], _serve, False),
    (["carla-gym", "collect"], _collect, False),
    (["carla-gym", "package"], _package, False),
    (["openenv", "validate", "--url"], _validate_url, False),
    (["openenv", "validate"], _validate_folder, False),
    (["openenv", "push"], _push, False),
    (["docker"], _docker, False),
    (["hf", "download"], _hf_download, False),
    (["mkdocs"], _mkdocs, False),
    ([".venv/bin/mkdocs"], _mkdocs, False),
    (_is_benchmark, _benchmark, False),  # a predicate instead of a prefix
]
HANDLER_FIXTURES = {_serve: "readme_servers", _collect: "readme_servers", _validate_url: "readme_servers",
                    _package: "readme_package", _validate_folder: "readme_package", _push: "readme_package",
                    _docker: "readme_package"}
"""The fixture each handler that needs one gets as its third argument."""


def _rule(argv):
    return next(((h, slow) for prefix, h, slow in COMMAND_RULES
                 if (prefix(argv) if callable(prefix) else argv[:len(prefix)] == prefix)), (None, False))


def test_every_bash_command_has_a_rule():
    assert [argv for _, argv, _ in bash_commands() if _rule(argv)[0] is None] == []
    assert len(bash_commands()) >= 20


@pytest.mark.parametrize(("key", "argv", "comment"), [
    pytest.param(*c, marks=pytest.mark.slow, id=" ".join(c[1])[:80]) if _rule(c[1])[1] else
    pytest.param(*c, id=" ".join(c[1])[:80]) for c in bash_commands() if _rule(c[1])[0] is not None])
def test_bash_command(key, argv, comment, request):
    handler = _rule(argv)[0]
    if handler in HANDLER_FIXTURES:  # the servers run once for the module (readme_servers), shared with the blocks
        handler(argv, comment, request.getfixturevalue(HANDLER_FIXTURES[handler]))
    else:
        handler(argv, comment)


@pytest.mark.parametrize(("key", "argv", "comment"), [
    pytest.param(*c, id=" ".join(c[1])[:80]) for c in bash_commands() if _rule(c[1])[1]])
def test_bash_command_of_the_slow_part_parses(key, argv, comment):
    """The default run's check of the commands that run only in the slow part: the script's own parser takes them."""
    script = next(a for a in argv if a.endswith(".py"))
    _parse_only(script.removesuffix(".py"))(argv, comment)


def test_ci_runs_the_readme_test_command():
    for key in ("README.md / Two commands / bash 2", "getting-started.md / Install and run / bash 2"):
        block = next(b for b in BLOCKS if b.key == key)
        assert block.code.splitlines()[1] in CI


# ------------------------------------------------------------------------------------------- the pages' server


@contextlib.contextmanager
def serve(argvs):
    """Start the pages' ``carla-gym serve ...`` commands at once, each on a free port.

    Yields:
        A function that waits for their announcements and returns ``[(url, announcement)]`` in the
        order of ``argvs`` (the servers boot meanwhile).
    """
    procs = []

    def announced() -> list[tuple[str, str]]:
        started = []
        for argv, proc in zip(argvs, procs, strict=True):
            ready, _, _ = select.select([proc.stdout], [], [], 120)
            line = proc.stdout.readline() if ready else ""
            match = re.search(r"listening on (http://\S+)", line)
            assert match, f"{' '.join(argv)} did not announce itself within 120 s: {line!r}"
            started.append((match.group(1), line.strip()))
        return started

    try:
        for argv in argvs:
            args = [a if a != "8000" else "0" for a in argv[2:]]
            assert "--port" in argv and "0" in args, argv
            procs.append(subprocess.Popen([str(Path(sys.executable).with_name("carla-gym")), "serve", *args],
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        yield announced
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=20)
            proc.stdout.close()


@pytest.fixture(scope="module", autouse=True)
def readme_server_processes():
    """Every ``carla-gym serve`` command of the pages, started with the module: they boot while its first tests run."""
    argvs = list(dict.fromkeys(tuple(argv) for _, argv, _ in bash_commands() if argv[:2] == ["carla-gym", "serve"]))
    with serve(argvs) as announced:
        yield argvs, announced


@pytest.fixture(scope="module")
def readme_servers(readme_server_processes) -> dict[tuple[str, ...], tuple[str, str]]:
    """``{argv: (url, announcement)}`` of every ``carla-gym serve`` command (port 8000 -> a free one)."""
    argvs, announced = readme_server_processes
    return dict(zip(argvs, announced(), strict=True))


@pytest.fixture(scope="module")
def readme_package(tmp_path_factory) -> Path:
    """The folder of the pages' ``carla-gym package DIR`` command, run verbatim in a temporary directory."""
    from carla_gym.server.package import main as package

    (argv,) = {tuple(argv) for _, argv, _ in bash_commands() if argv[:2] == ["carla-gym", "package"]}
    where = tmp_path_factory.mktemp("readme_package")
    with contextlib.chdir(where), contextlib.redirect_stdout(io.StringIO()):
        package(list(argv[2:]))
    return where / argv[2]


@pytest.fixture(scope="module")
def readme_server(readme_servers):
    """URL of the server of the pages' first ``carla-gym serve`` command."""
    return next(iter(readme_servers.values()))[0]


@pytest.mark.parametrize("key", [k for k, r in PYTHON_BLOCKS.items() if r.server])
def test_python_block_on_the_server(key, readme_server):
    block = next(b for b in BLOCKS if b.key == key)
    run_python_block(block, PYTHON_BLOCKS[key], readme_server)


# ------------------------------------------------------------------------------------------------------ Tables


def _table_rows():
    section = PAGES["scenarios.md"].split("## Trolley catalogue", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


@pytest.mark.parametrize("row", _table_rows(), ids=lambda r: r[0])
def test_scenario_table_matches_catalogue(row):
    name, family, speed, lanes, _, _, rewards = row
    name = name.strip("`")
    if name.startswith("bias_<"):
        cases = {"bias_3v1": "-1, -1, 1, 1", "bias_1v3": "1, 1, -1, -1", "bias_2v2": "1, 1, 1, 1"}
        for concrete, expected in cases.items():
            spec = resolve_scenario(concrete)
            assert ", ".join(f"{rules.raw_reward(spec, a):g}" for a in ("NONE", "BRAKE", "SWERVE_LEFT",
                                                                           "SWERVE_RIGHT")) == expected
            assert expected in rewards
        return
    spec = resolve_scenario(name)
    assert spec.family == family
    assert spec.initial_speed_kmh == float(speed)
    assert ", ".join(map(str, spec.road.lanes)) == lanes
    got = ", ".join(f"{rules.raw_reward(spec, a):g}" for a in ("NONE", "BRAKE", "SWERVE_LEFT", "SWERVE_RIGHT"))
    assert rewards.startswith(got)
    assert ("(probe)" in rewards) == (spec.is_probe and spec.family == "trolley_micro")


def test_comparison_table_has_every_reproducible_row_exactly_and_checks_the_machine_dependent_ones(tmp_path,
                                                                                                    monkeypatch):
    """The comparison table of docs/comparing.md is real (see agents.readme_table, which also regenerates it).

    Scripted agents and random are re-run from the page's own command and must match exactly
    (wall time aside). Trained agents vary with the machine: they must be named in the page's
    hardware note and are checked for what does not vary (episodes, exactness, shares). The
    figures are not drawn (three quarters of the run's time; tests/test_compare.py checks them):
    the rows they would be drawn from are.
    """
    from agents import compare, plots
    from agents import readme_table as rt
    from agents.specs import parse_spec
    from carla_gym.suites import resolve_scenarios

    page = PAGES[rt.PAGE.relative_to(DOCS).as_posix()]
    argv = rt.compare_args(page)
    args, kinds, shown = compare.parse_args(argv), rt.agent_kinds(argv), rt.table_rows(page)
    assert list(shown) == list(kinds)  # one row per agent of the command, in its order
    fixed = [a for a in args.agents if parse_spec(a).kind not in rt.HARDWARE_DEPENDENT_KINDS]
    plotted = []
    monkeypatch.setattr(plots, "plot_all", lambda rows, out: plotted.append(rows))
    assert compare.main(["--agents", *fixed, "--scenario", *args.scenario, "--seeds", *map(str, args.seeds),
                         "--episodes", str(args.episodes), "--out", str(tmp_path / "c")]) == 0
    assert len(plotted) == 1 and {r["agent"] for r in plotted[0]} == {parse_spec(a).label for a in fixed}
    from agents.summary import MARKDOWN_HEADER

    def by_column(lines: list[str]) -> dict[str, dict[str, str]]:
        """``{agent: {column: cell}}`` of the ``all`` rows of the first Markdown table in ``lines``."""
        lines = lines[next(i for i, line in enumerate(lines) if line.startswith("|")):]
        header = [name.strip() for name in lines[0].strip("|").split("|")]
        table = {}
        for line in lines[2:]:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[1] == "all":
                table[cells[0]] = dict(zip(header, cells, strict=True))
        return table

    rows = by_column((tmp_path / "c" / "summary.md").read_text().splitlines())
    section = rt.section(page)
    assert MARKDOWN_HEADER in section  # every column of this version (outcomes first): a chat agent is in it
    cells = by_column(section[section.find(rt.TABLE_INTRO):].splitlines())  # the page's table, not a later one
    reproducible = [parse_spec(a).label for a in fixed]
    for agent in reproducible:  # the scripted-only table's columns (no chat agent: no tool-call columns), no wall time
        assert {k: v for k, v in rows[agent].items() if k != "ms/ep"} == {
            k: cells[agent][k] for k in rows[agent] if k != "ms/ep"}, agent
    assert set(cells["oracle"]) - set(rows["oracle"]) == {"tool calls/ep", "tool failures", "parse failures"}
    scenarios = len(resolve_scenarios(args.scenario))
    scripted_exact = "exact" in cells["oracle"]["success (outcome)"]
    note = rt.hardware_note(page)
    for agent in (a for a in kinds if a not in reproducible):
        assert f"`{agent}`" in note, f"{agent}: a machine-dependent row the page's hardware note does not name"
        once = compare.is_deterministic_kind(kinds[agent])  # sb3: each fixed scenario once; chat: every episode
        n = f"{scenarios} (deterministic)" if once else str(scenarios * len(args.seeds) * args.episodes)
        assert cells[agent]["n"] == n and ("exact" in cells[agent]["success (outcome)"]) == scripted_exact, agent
        shares = cells[agent]["L / R / brake / none"].split("/")
        assert abs(sum(int(share.strip(" %")) for share in shares) - 100) <= 2, agent
    for name in rt.figures(page):
        assert (REPO / "docs" / "compare" / name).is_file()

