"""Every command line's ``--help`` is plain text: no reST markup from the docstrings it is built from."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from carla_gym.cli_args import plain_text

REPO = Path(__file__).resolve().parents[1]
MARKUP = re.compile(r"`|\*\*|:[a-z]+:`")
"""reST inline markup: backticks (literals, references, roles) and **strong**."""

# The command each file with an argument parser is reached by; a new command line must be added here.
COMMANDS = {
    "carla-gym": (["-m", "carla_gym.cli", "--help"], "carla_gym/cli.py"),
    "carla-gym serve": (["-m", "carla_gym.cli", "serve", "--help"], "carla_gym/openenv/server.py"),
    "python -m carla_gym.server": (["-m", "carla_gym.server", "--help"], "carla_gym/server.py"),
    "carla-gym compare": (["-m", "carla_gym.cli", "compare", "--help"], "agents/compare.py"),
    "python -m agents.compare": (["-m", "agents.compare", "--help"], "agents/compare.py"),
    "python -m agents.readme_table": (["-m", "agents.readme_table", "--help"], "agents/readme_table.py"),
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


@pytest.fixture(scope="module")
def helps() -> dict[str, subprocess.CompletedProcess]:
    """``--help`` of every command, run as a user runs it (all at once, each with a 300 s limit)."""
    procs = {name: subprocess.Popen([sys.executable, *argv], cwd=REPO, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
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
def test_help_is_plain_text(helps, name):
    result = helps[name]
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("usage: "), result.stdout[:200]
    assert not MARKUP.search(result.stdout), [line for line in result.stdout.splitlines() if MARKUP.search(line)]


@pytest.mark.slow
def test_serve_help_describes_the_server_in_plain_words(helps):
    text = " ".join(helps["carla-gym serve"].stdout.split())
    assert "The OpenEnv CARLA server on the embedded simulator: carla-gym serve / python -m carla_gym.server." in text
    assert "--max-sessions MAX_SESSIONS concurrent WebSocket sessions (one simulator each) (default: 64)" in text
    assert helps["python -m carla_gym.server"].stdout == helps["carla-gym serve"].stdout


@pytest.mark.parametrize(("text", "plain"), [
    ("``carla-gym serve``", "carla-gym serve"),
    ("see `carla_gym.openenv.server` and :func:`main`", "see carla_gym.openenv.server and main"),
    (":py:class:`CarlaEnv`", "CarlaEnv"),
    ("**not** *this*", "not *this*"),  # single asterisks are ordinary text in help (e.g. ``a*b``)
    ("x = 2 * y", "x = 2 * y"),
])
def test_plain_text(text, plain):
    assert plain_text(text) == plain
