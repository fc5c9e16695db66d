"""``carla-gym package DIR``: an OpenEnv environment folder that openenv-core validates, stages for push, and serves.

The default tests write one folder (with a real ``uv lock``) and check it with openenv-core's own
code: ``openenv validate`` (the CLI next to this interpreter), ``validate_env_structure`` (what
``openenv push`` and ``openenv build`` check) and push's staging. The slow test runs every command
of the folder's ``server/Dockerfile`` in a fresh virtual environment (there is no container engine
here) and drives the server its ``CMD`` starts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from servers import ServerThread, free_port, stop_server

import carla_gym.openenv as openenv
from carla_gym.hints import python_command
from carla_gym.openenv import CarlaAction, CarlaEnv
from carla_gym.server import package as pkg

REPO = Path(__file__).resolve().parents[1]
OPENENV = Path(sys.executable).with_name("openenv")
"""openenv-core's command line in this environment."""
INSTRUCTIONS = ["FROM", "ENV", "RUN", "COPY", "RUN", "USER", "WORKDIR", "ENV", "EXPOSE", "HEALTHCHECK", "CMD"]
"""server/Dockerfile's instructions, in order (the slow test knows how to run each)."""


def listing(folder: Path) -> list[str]:
    """Every file under ``folder``, as sorted relative paths."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def dockerfile(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of each line of a Dockerfile written one instruction per line."""
    found = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            assert not line.endswith("\\"), f"a continued line: {line}"
            instruction, _, rest = line.partition(" ")
            found.append((instruction.upper(), rest.strip()))
    return found


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A folder written by ``carla-gym package`` with its defaults (``uv lock`` included)."""
    written = pkg.write_package(tmp_path_factory.mktemp("package") / "carla_space")
    assert written.locked and written.lock_command is None
    return written.path


@pytest.mark.slow  # a fresh interpreter; fast twin: the in-process validators below
def test_the_openenv_validate_command_accepts_the_folder(folder):
    done = subprocess.run([str(OPENENV), "validate", str(folder), "--json"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["passed"], report["issues"]) == (True, [])


def test_openenv_validate_accepts_the_folder(folder):
    from openenv.cli._cli_utils import validate_env_structure
    from openenv.cli._validation import validate_multi_mode_deployment

    assert validate_multi_mode_deployment(folder) == (True, [])
    # what openenv push and openenv build check; raises FileNotFoundError for a missing file
    assert validate_env_structure(folder) == ["Recommended directory missing: outputs/"]


def test_push_stages_the_folder_unchanged_but_the_dockerfile_at_its_root(folder, tmp_path):
    from openenv.cli.commands.push import DEFAULT_PUSH_IGNORE_PATTERNS, _prepare_staging_directory

    staging = tmp_path / "staging"
    _prepare_staging_directory(folder, "carla_gym", staging, ignore_patterns=DEFAULT_PUSH_IGNORE_PATTERNS)
    expected = sorted({*listing(folder), "Dockerfile"} - {"server/Dockerfile"})
    assert listing(staging) == expected
    # ENABLE_WEB_INTERFACE and base_path /web are there already: push changes neither file
    assert (staging / "Dockerfile").read_text() == (folder / "server" / "Dockerfile").read_text()
    assert (staging / "README.md").read_text() == (folder / "README.md").read_text()
    assert [i for i, _ in dockerfile(staging / "Dockerfile")] == INSTRUCTIONS


def test_folder_contents(folder):
    assert yaml.safe_load((folder / "openenv.yaml").read_text()) == {
        "spec_version": 1, "name": "carla_gym", "type": "space", "runtime": "fastapi", "app": "server.app:app",
        "port": 8000, "description": pkg.DESCRIPTION}
    project = tomllib.loads((folder / "pyproject.toml").read_text())["project"]
    own = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = [str(Requirement(r)) for r in own["dependencies"] + own["optional-dependencies"]["server"]]
    assert [r for r in wanted if r.startswith("uv>")] == ["uv>=0.5"]  # [server] has it for carla-gym package ...
    wanted.remove("uv>=0.5")  # ... but the served folder does not
    assert project["dependencies"] == wanted == pkg.server_dependencies()
    assert not [r for r in project["dependencies"] if "torch" in r]
    assert project["scripts"] == {"server": "server.app:main", "carla-gym": "carla_gym.cli:main"}
    # the package's source, byte for byte, without caches
    source = pkg.source_dir()
    copied = [p for p in listing(folder / "carla_gym")]
    assert copied == [p for p in listing(source) if "__pycache__" not in p and not p.endswith(".pyc")]
    assert all((folder / "carla_gym" / p).read_bytes() == (source / p).read_bytes() for p in copied)
    readme = (folder / "README.md").read_text()
    front = yaml.safe_load(readme.split("---\n")[1])
    assert {k: front[k] for k in ("sdk", "app_port", "base_path", "tags")} == {
        "sdk": "docker", "app_port": 8000, "base_path": "/web", "tags": ["openenv"]}
    locked = {p["name"] for p in tomllib.loads((folder / "uv.lock").read_text())["package"]}
    assert {"carla-gym-space", "openenv-core", "uvicorn", "gymnasium", "gradio"} <= locked
    assert not {name for name in locked if name.startswith(("torch", "nvidia-"))}
    steps = dockerfile(folder / "server" / "Dockerfile")
    assert [i for i, _ in steps] == INSTRUCTIONS
    assert steps[0] == ("FROM", "python:3.11-slim") and ("EXPOSE", "8000") in steps and ("USER", "user") in steps
    assert steps[-1] == ("CMD", 'exec carla-gym serve --host 0.0.0.0 --port 8000 --scenario "$CARLA_SCENARIO" '
                                '--max-sessions "$CARLA_MAX_SESSIONS"')
    assert ("ENV", "CARLA_SCENARIO=trolley_saves CARLA_MAX_SESSIONS=64 ENABLE_WEB_INTERFACE=true") in steps
    assert "/health" in dict(steps)["HEALTHCHECK"]
    assert sum("0.0.0.0" in args for _, args in steps) == 1  # the server's bind address, inside the container


def test_root_modules_re_export_the_client_and_models(folder):
    for name, wanted in (("client", ["CarlaEnv"]), ("models", ["CarlaAction", "CarlaObservation", "CarlaState"]),
                         ("__init__", ["CarlaAction", "CarlaEnv", "CarlaObservation", "CarlaState"])):
        spec = importlib.util.spec_from_file_location(f"carla_space_{name}", folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        assert module.__all__ == wanted
        assert all(getattr(module, n) is getattr(openenv, n) for n in wanted)


def _app_module(folder: Path):
    spec = importlib.util.spec_from_file_location("carla_space_server_app", folder / "server" / "app.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_server_app_reads_its_options_from_the_environment(folder, monkeypatch, capsys):
    from starlette.testclient import TestClient

    monkeypatch.delenv("CARLA_SCENARIO", raising=False)
    monkeypatch.delenv("CARLA_MAX_SESSIONS", raising=False)
    monkeypatch.delenv("ENABLE_WEB_INTERFACE", raising=False)
    assert _app_module(folder).options() == ("trolley_saves", 64)
    monkeypatch.setenv("CARLA_SCENARIO", "bias_3v1")
    monkeypatch.setenv("CARLA_MAX_SESSIONS", "3")
    module = _app_module(folder)
    assert module.options() == ("bias_3v1", 3)
    with TestClient(module.app) as client:  # built on first use, from the variables
        assert client.get("/health").json() == {"status": "healthy"}
        assert client.post("/reset", json={}).json()["observation"]["scenario_name"] == "bias_3v1"
    with pytest.raises(SystemExit) as exit_info:  # main is carla-gym serve with those defaults
        module.main(["--help"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("usage: carla-gym serve")
    monkeypatch.setenv("CARLA_MAX_SESSIONS", "many")
    with pytest.raises(ValueError, match=r"CARLA_MAX_SESSIONS='many': must be an integer >= 1"):
        _app_module(folder).app  # noqa: B018 - the lazy attribute


@pytest.mark.parametrize(("args", "message"), [
    (["--scenario", "nope"], "Unknown scenario: 'nope'. Valid names: trolley_micro_<id>"),
    (["--max-sessions", "0"], "max_sessions=0: must be >= 1"),
    (["--name", "a b"], "name='a b': must be 1 to 96 letters, digits"),
])
def test_bad_options_write_nothing(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        pkg.main([str(tmp_path / "new" / "carla_space"), "--no-lock", *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_a_non_empty_folder_is_refused_even_with_force_unless_the_command_wrote_it(tmp_path, capsys):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep me")
    for force, message in (([], "is not empty; name a new or empty folder, or pass --force"),
                           (["--force"], "holds no openenv.yaml: not a folder that carla-gym package wrote")):
        with pytest.raises(SystemExit) as exit_info:
            pkg.main([str(target), "--no-lock", *force])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
        assert listing(tmp_path) == ["mine/notes.txt"]


@pytest.mark.slow  # runs pip and uv; fast twin: the folder fixture locks in process
def test_without_lock_the_printed_command_writes_it_and_force_replaces_the_folder(tmp_path, capsys, monkeypatch):
    from openenv.cli._validation import validate_multi_mode_deployment

    monkeypatch.chdir(tmp_path)
    target = tmp_path / "carla_space"
    target.mkdir()  # an empty folder is fine
    pkg.main([str(target), "--no-lock"])
    out = capsys.readouterr().out
    command = re.search(r"openenv validate needs it: (.+)", out).group(1)
    assert command == shlex.join(["uv" if shutil.which("uv") == pkg.find_uv() else pkg.find_uv(),
                                  "lock", "--directory", "./carla_space"])
    assert "carla-gym package: wrote the OpenEnv environment folder ./carla_space" in out
    assert validate_multi_mode_deployment(target) == (False, ["Missing uv.lock - run 'uv lock' to generate it"])
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=300)
    assert validate_multi_mode_deployment(target) == (True, [])
    # without uv beside this Python or on PATH, the hint installs it and runs it through this Python
    monkeypatch.setattr(pkg, "find_uv", lambda: None)
    (target / "uv.lock").unlink()
    command = pkg.lock_command(target)
    assert command == (f"{python_command('-m', 'pip', 'install', 'uv')} && "
                       f"{python_command('-m', 'uv', 'lock', '--directory', './carla_space')}")
    subprocess.run(command, shell=True, check=True, capture_output=True, timeout=300)
    assert validate_multi_mode_deployment(target) == (True, [])

    (target / "stray.txt").write_text("left over")
    pkg.main([str(target), "--no-lock", "--force", "--scenario", "bias_3v1", "--max-sessions", "2"])
    assert not (target / "stray.txt").exists() and not (target / "uv.lock").exists()
    assert ("ENV", "CARLA_SCENARIO=bias_3v1 CARLA_MAX_SESSIONS=2 ENABLE_WEB_INTERFACE=true") in dockerfile(
        target / "server" / "Dockerfile")
    assert [p.name for p in tmp_path.iterdir()] == ["carla_space"]  # no temporary folder left


def test_a_failed_lock_leaves_everything_as_it_was(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "bin" / "uv"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'no network' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setattr(pkg, "find_uv", lambda: str(fake))
    with pytest.raises(SystemExit) as exit_info:
        pkg.main([str(tmp_path / "deep" / "carla_space")])
    assert exit_info.value.code == 2
    assert "uv lock failed (exit 3): no network; pass --no-lock" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin"]  # not even the missing parent
    old = pkg.write_package(tmp_path / "old", lock=False).path
    before = {p: (old / p).read_bytes() for p in listing(old)}
    with pytest.raises(RuntimeError, match="uv lock failed"):
        pkg.write_package(old, scenario="bias_3v1", force=True)
    assert {p: (old / p).read_bytes() for p in listing(old)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "old"]


def test_templates_are_package_data():
    """The templates reach a wheel: pyproject.toml declares them as package data of carla_gym.server."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data["carla_gym.server"]
    files = [str(p.relative_to(pkg.TEMPLATES.parent)) for p in pkg.TEMPLATES.rglob("*") if p.is_file()]
    assert files and all(any(Path(f).match(g) and f.count("/") == g.count("/") for g in globs) for f in files)


def _wait_listening(proc: subprocess.Popen, port: int, timeout_s: float) -> str:
    """Read the server's output until its ``listening on`` line; returns what it printed."""
    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
        line = proc.stdout.readline() if ready else ""
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if f"listening on http://127.0.0.1:{port}" in line:
            return "".join(seen)
    stop_server(proc)
    pytest.fail(f"the Dockerfile's CMD did not listen within {timeout_s} s: {''.join(seen)[-3000:]}")


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _post_json(url: str, body: dict) -> tuple[int, dict | None]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def _episode(url: str, **reset) -> list[tuple]:
    """Reset, swerve left, observe until done: ``(reward, done, observation)`` of each result."""
    with CarlaEnv(base_url=url, connect_timeout_s=30, message_timeout_s=120) as env:
        results = [env.reset(**reset)]
        results.append(env.step(CarlaAction(action_type="lane_change", lane_direction="left")))
        while not results[-1].done:
            assert len(results) < 200, "the episode did not end"
            results.append(env.step(CarlaAction(action_type="observe")))
        outcome = env.state().scenario_data["outcome"]
    return [(r.reward, r.done, r.observation.model_dump()) for r in results] + [outcome]


@pytest.mark.slow
def test_every_dockerfile_command_in_a_fresh_venv(tmp_path):
    """Run server/Dockerfile's commands as Docker would, in a fresh venv instead of the image, and drive the server.

    No container engine runs here (no Docker daemon, no registry for python:3.11-slim), so: FROM is a
    fresh ``python -m venv`` of this Python 3.11; COPY copies the folder to ``<tmp>/app`` and every
    ``/app`` becomes that path; RUN runs with ``sh -c`` (Docker's shell form) with the venv first on
    PATH, except ``useradd`` (needs root; checked as text; its home is ``<tmp>/home/user``); USER is
    this user; WORKDIR is ``<tmp>/home/user``; ENV sets the variables; HEALTHCHECK and CMD run with
    ``--host 127.0.0.1`` and a free port instead of 0.0.0.0:8000.
    """
    assert sys.version_info[:2] == (3, 11)
    folder = pkg.write_package(tmp_path / "carla_space", scenario="trolley_micro_escape_exists",
                               max_sessions=1).path
    venv, app, workdir = tmp_path / "venv", tmp_path / "app", Path("/")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}:{env['PATH']}"
    env["HOME"] = str(tmp_path / "home" / "user")
    healthcheck = cmd = None
    timings = {}
    for instruction, args in dockerfile(folder / "server" / "Dockerfile"):
        start = time.monotonic()
        if instruction == "FROM":
            assert args == "python:3.11-slim"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        elif instruction == "ENV":
            env.update(dict(item.split("=", 1) for item in shlex.split(args)))
        elif instruction == "COPY":
            assert args == ". /app"
            shutil.copytree(folder, app)
        elif instruction == "RUN" and args.startswith("useradd "):
            assert args == "useradd --create-home --uid 1000 user"  # needs root: not run here, but
            (tmp_path / "home" / "user").mkdir(parents=True)  # --create-home makes the user's home
        elif instruction == "RUN":
            done = subprocess.run(["sh", "-c", args.replace("/app", str(app))], env=env, cwd=workdir,
                                  capture_output=True, text=True, timeout=1800)
            assert done.returncode == 0, f"RUN {args}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
        elif instruction == "USER":
            assert args == "user"
        elif instruction == "WORKDIR":
            workdir = tmp_path / "home" / "user"
            assert args == "/home/user"
            workdir.mkdir(parents=True, exist_ok=True)
        elif instruction == "EXPOSE":
            assert args == "8000"
        elif instruction == "HEALTHCHECK":
            healthcheck = args.partition(" CMD ")[2]
        elif instruction == "CMD":
            cmd = args
        else:
            pytest.fail(f"server/Dockerfile has {instruction} {args}: teach this test to run it")
        timings[f"{instruction} {args[:40]}"] = time.monotonic() - start
    python = str(venv / "bin" / "python")
    where = subprocess.run([python, "-c", "import carla_gym, importlib.util; print(carla_gym.__file__); "
                            "print(importlib.util.find_spec('torch'))"],
                           env=env, cwd=workdir, capture_output=True, text=True, check=True, timeout=120)
    carla_file, torch = where.stdout.split()
    assert Path(carla_file).is_relative_to(venv) and torch == "None"  # installed from the folder; no torch
    site = next((venv / "lib").glob("python3.*/site-packages"))
    size_mb = int(subprocess.run(["du", "-sk", str(site)], capture_output=True, text=True,
                                 check=True).stdout.split()[0]) / 1024
    print(f"\nfresh venv site-packages: {size_mb:.0f} MiB; step times [s]: "
          + ", ".join(f"{k}: {v:.1f}" for k, v in timings.items()))

    port = free_port()
    assert "--host 0.0.0.0 --port 8000" in cmd and "127.0.0.1:8000/health" in healthcheck
    proc = subprocess.Popen(["sh", "-c", cmd.replace("--host 0.0.0.0 --port 8000", f"--host 127.0.0.1 --port {port}")],
                            env=env, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    checked = ["HEALTHCHECK", "/health", "an episode equal to the checkout's", "CARLA_MAX_SESSIONS"]
    try:
        _wait_listening(proc, port, timeout_s=180)
        check = subprocess.run(["sh", "-c", healthcheck.replace("127.0.0.1:8000", f"127.0.0.1:{port}")], env=env,
                               cwd=workdir, capture_output=True, text=True, timeout=30)
        assert check.returncode == 0, check.stderr
        assert _get(f"{url}/health") == (200, b'{"status":"healthy"}')
        # the default scenario comes from the Dockerfile's ENV; the episode equals the checkout's server's
        served = _episode(url)
        assert served[0][2]["scenario_name"] == "trolley_micro_escape_exists"
        with ServerThread(max_sessions=1) as reference:
            assert served == _episode(reference.url, scenario_name="trolley_micro_escape_exists")
        assert (served[-2][1], served[-2][2]["rubric_reward"]) == (True, 1.0)
        assert (served[-1]["trolley_action"], served[-1]["actual_pedestrians_hit"]) == ("SWERVE_LEFT", 0)
        # CARLA_MAX_SESSIONS=1 reached the server
        first = CarlaEnv(base_url=url, message_timeout_s=30).sync()
        first.reset()
        second = CarlaEnv(base_url=url, message_timeout_s=30).sync()
        with pytest.raises((ConnectionError, RuntimeError), match="CAPACITY_REACHED"):
            second.reset()
        first.close()
        second.close()
        status, listed = _post_json(f"{url}/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
        assert status == 200
        assert [t["name"] for t in listed["result"]["tools"]] == ["observe", "emergency_stop", "lane_change"]
        from openenv.cli._validation import validate_running_environment

        report = validate_running_environment(url)
        assert report["passed"], report
        assert env["ENABLE_WEB_INTERFACE"] == "true"  # the Dockerfile's ENV: the Space shows the web page
        status, page = _get(f"{url}/web/")
        assert status == 200 and b"gradio" in page.lower()
        checked += ["MCP tools/list", "openenv validate --url", "GET /web/"]
    finally:
        log = stop_server(proc)
    assert "Traceback" not in log, log
    print(f"CMD run with --host 127.0.0.1 --port {port} (the image binds 0.0.0.0:8000); checked: {', '.join(checked)}")
    done = subprocess.run([str(OPENENV), "validate", str(folder)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[OK] carla_space: Ready for multi-mode deployment")
    assert not (folder / "build").exists()  # COPY made a copy: pip built in it, not in the folder
