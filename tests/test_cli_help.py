"""Every command line's ``--help`` is plain text: no reST markup from the docstrings it is built from.

The checks run each command in this process (``runpy``, as ``python -m`` / ``python script.py`` run
it); the slow tests run each once as a real command line and compare.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from carla_gym.cli_args import plain_text

REPO = Path(__file__).resolve().parents[1]
MARKUP = re.compile(r"`|\*\*|:[a-z]+:`")
"""reST inline markup: backticks (literals, references, roles) and **strong**."""
COLUMNS = "100"
"""Terminal width for every help run (argparse wraps to it), so in-process and real runs print the same."""

# The command each file with an argument parser is reached by; a new command line must be added here.
COMMANDS = {
    "carla-gym": (["-m", "carla_gym.cli", "--help"], "carla_gym/cli.py"),
    "carla-gym serve": (["-m", "carla_gym.cli", "serve", "--help"], "carla_gym/server/cli.py"),
    "python -m carla_gym.server": (["-m", "carla_gym.server", "--help"], "carla_gym/server/cli.py"),
    "carla-gym compare": (["-m", "carla_gym.cli", "compare", "--help"], "agents/compare.py"),
    "carla-gym package": (["-m", "carla_gym.cli", "package", "--help"], "carla_gym/server/package.py"),
    "python -m carla_gym.server.package": (["-m", "carla_gym.server.package", "--help"],
                                           "carla_gym/server/package.py"),
    "carla-gym collect": (["-m", "carla_gym.cli", "collect", "--help"], "carla_gym/collect.py"),
    "python -m carla_gym.collect": (["-m", "carla_gym.collect", "--help"], "carla_gym/collect.py"),
    "python -m agents.compare": (["-m", "agents.compare", "--help"], "agents/compare.py"),
    "python -m agents.readme_table": (["-m", "agents.readme_table", "--help"], "agents/readme_table.py"),
    "python -m agents.study": (["-m", "agents.study", "--help"], "agents/study.py"),
    "python -m carla_gym.reward.calibrate": (["-m", "carla_gym.reward.calibrate", "--help"],
                                             "carla_gym/reward/calibrate.py"),
    "python -m carla_gym.samples": (["-m", "carla_gym.samples", "--help"], "carla_gym/samples.py"),
    "python train_sb3.py": (["train_sb3.py", "--help"], "train_sb3.py"),
    "python train_grpo.py": (["train_grpo.py", "--help"], "train_grpo.py"),
    **{f"python benchmarks/{p.name}": ([f"benchmarks/{p.name}", "--help"], f"benchmarks/{p.name}")
       for p in sorted((REPO / "benchmarks").glob("*.py")) if "ArgumentParser(" in p.read_text()},
}


def _files_with_a_parser() -> set[str]:
    paths = [*REPO.glob("*.py"), *REPO.glob("benchmarks/*.py"), *REPO.glob("carla_gym/**/*.py"),
             *REPO.glob("agents/**/*.py")]
    return {str(p.relative_to(REPO)) for p in paths
            if p.name != "cli_args.py" and re.search(r"ArgumentParser\(|parser_for\(", p.read_text())}


def test_every_command_line_is_listed():
    assert _files_with_a_parser() <= {file for _, file in COMMANDS.values()}
    scripts = {str(p.relative_to(REPO)) for p in REPO.glob("benchmarks/*.py") if "__main__" in p.read_text()}
    assert scripts <= _files_with_a_parser()  # every script answers --help (none reads sys.argv by hand)


def run_help(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """Run ``python ARGV`` in this process as Python runs it (``-m`` module or script as ``__main__``).

    Returns:
        ``(exit code, stdout, stderr)``.
    """
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", COLUMNS)
    if argv[0] == "-m":
        module, args = argv[1], argv[2:]
        monkeypatch.setattr(sys, "argv", [module, *args])  # run_module puts the module's file in argv[0]
        run = lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)  # noqa: E731
    else:
        script = str(REPO / argv[0])
        monkeypatch.setattr(sys, "argv", [argv[0], *argv[1:]])
        monkeypatch.syspath_prepend(str(Path(script).parent))  # python puts a script's folder first on sys.path
        run = lambda: runpy.run_path(script, run_name="__main__")  # noqa: E731
    capsys.readouterr()
    code = 0  # a module that returns exits with 0
    with warnings.catch_warnings():  # the module was imported before (by the package or another test)
        warnings.filterwarnings("ignore", message=".* found in sys.modules", category=RuntimeWarning)
        try:
            run()
        except SystemExit as exc:  # as the interpreter maps it: None 0, a number itself, a message 1
            code = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def help_of(monkeypatch, capsys):
    """``help_of(name)``: ``(exit code, stdout, stderr)`` of the command's ``--help``, run in this process."""
    return lambda name: run_help(COMMANDS[name][0], monkeypatch, capsys)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_is_plain_text(help_of, name):
    code, out, err = help_of(name)
    assert code == 0, err[-2000:]
    assert out.startswith("usage: "), out[:200]
    assert not MARKUP.search(out), [line for line in out.splitlines() if MARKUP.search(line)]


def test_serve_help_describes_the_server_in_plain_words(help_of):
    _, serve, _ = help_of("carla-gym serve")
    text = " ".join(serve.split())
    assert "The OpenEnv CARLA server on the embedded simulator: carla-gym serve / python -m carla_gym.server." in text
    assert ("--max-sessions MAX_SESSIONS concurrent sessions, WebSocket and MCP (one simulator each) (default: 64)"
            in text)
    assert help_of("python -m carla_gym.server")[1] == serve


def test_required_flags_show_no_default(help_of):
    _, collect, _ = help_of("carla-gym collect")
    text = " ".join(collect.split())
    assert "--base-url BASE_URL carla-gym server URL, e.g. http://127.0.0.1:8000 -o OUTPUT_DIR" in text
    assert "--output-dir OUTPUT_DIR directory for results.jsonl and metadata.json --scenario" in text
    _, sb3, _ = help_of("python train_sb3.py")
    assert "also when stderr is no terminal (on one it always shows) (default: False)" in " ".join(sb3.split())


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """``--help`` of every command, run as a user runs it (all at once, each with a 300 s limit)."""
    env = {**os.environ, "COLUMNS": COLUMNS}
    procs = {name: subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=env)
             for name, (argv, _) in COMMANDS.items()}
    done = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_real_command_line_prints_the_help_checked_in_process(helps, help_of, name):
    """End to end: a fresh interpreter prints exactly what the in-process run checked above."""
    result = helps[name]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == help_of(name)[1]


@pytest.mark.parametrize(("text", "plain"), [
    ("``carla-gym serve``", "carla-gym serve"),
    ("see `carla_gym.server.app` and :func:`main`", "see carla_gym.server.app and main"),
    (":py:class:`CarlaEnv`", "CarlaEnv"),
    ("**not** *this*", "not *this*"),  # single asterisks are ordinary text in help (e.g. ``a*b``)
    ("x = 2 * y", "x = 2 * y"),
])
def test_plain_text(text, plain):
    assert plain_text(text) == plain
