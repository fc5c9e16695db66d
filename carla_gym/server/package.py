"""``carla-gym package DIR``: write an OpenEnv environment folder that serves this package's server.

The folder is what openenv-core's ``openenv validate DIR`` accepts and ``openenv push DIR``
deploys as a Hugging Face Space (its layout is openenv-core's ``openenv init`` template's):

- ``openenv.yaml``: the manifest (spec_version 1, name, type space, runtime fastapi, app
  ``server.app:app``, port 8000, a description);
- ``pyproject.toml``: its own project, whose dependencies are this installed distribution's base and
  ``[server]`` dependencies (read from its metadata: openenv-core among them, no torch), with the
  console scripts ``server`` (``server.app:main``, what ``openenv validate`` requires) and ``carla-gym``;
- ``carla_gym/``: a copy of this installed package's source (no ``__pycache__``), so the folder builds
  without the project's checkout;
- ``uv.lock``: written by ``uv lock`` (``openenv validate`` requires it), when uv is beside this
  interpreter or on ``PATH``;
- ``README.md`` (with the Space's front matter: sdk docker, app_port 8000, base_path /web, tag openenv),
  ``__init__.py``, ``client.py`` and ``models.py`` (re-exporting `carla_gym.openenv`'s client and models);
- ``server/__init__.py``, ``server/app.py`` (the app from `carla_gym.server.app.create_server_app`
  with options from environment variables; ``main`` runs ``carla-gym serve``) and ``server/Dockerfile``
  (CPU image on python:3.11-slim: pip installs the folder, runs ``carla-gym serve`` on 0.0.0.0:8000
  inside the container as a non-root user, web page on).

The files come from the templates in ``package_files/`` next to this module. The folder is written
into a temporary directory beside ``DIR`` and renamed into place, so a failure leaves nothing behind.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from carla_gym.hints import DISTRIBUTION, python_command, typed_path
from carla_gym.server.app import DEFAULT_MAX_SESSIONS, DEFAULT_SCENARIO, DEFAULT_SESSION_TIMEOUT, check_options

DEFAULT_NAME = "carla_gym"
"""Environment name of ``openenv.yaml`` (``openenv push``'s default Space name)."""
DESCRIPTION = "CARLA trolley and navigation scenarios on carla-gym's embedded CPU simulator"
"""One line on what the environment is (openenv.yaml, pyproject.toml, README.md)."""
TEMPLATES = Path(__file__).with_name("package_files")
"""The folder's template files: ``<path in the folder>.tmpl``, with ``{{key}}`` placeholders."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}")
"""Valid ``--name`` values: what a Hugging Face repository name allows (letters, digits, ``_.-``)."""
LOCK_TIMEOUT_S = 600.0
"""How long ``uv lock`` may take [s] (about 2 s against PyPI with a warm cache)."""
USAGE_LINE = "carla-gym package DIR: write an OpenEnv environment folder that serves this package's server."
"""The first line of ``--help`` (plain text)."""
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo")
"""What the copy of the package leaves out."""


@dataclass(frozen=True)
class Written:
    """What `write_package` wrote.

    Attributes:
        path: The folder (absolute).
        locked: Whether ``uv.lock`` was written.
        lock_command: Without a lock: the shell command that writes it (``openenv validate`` needs it).
    """

    path: Path
    locked: bool
    lock_command: str | None = None


def server_dependencies(distribution: str = DISTRIBUTION) -> list[str]:
    """The installed ``distribution``'s base and ``[server]`` requirements, from its metadata, in its order.

    ``uv`` (in ``[server]`` for ``carla-gym package``'s ``uv lock``) is left out: the served folder does not need it.

    Raises:
        importlib.metadata.PackageNotFoundError: ``distribution`` is not installed.
        RuntimeError: A requirement has a marker other than ``extra == "..."``, or none names
            openenv-core (the ``[server]`` extra that ``openenv validate`` requires).
    """
    found = []
    for requirement in metadata.requires(distribution) or []:
        spec, _, marker = requirement.partition(";")
        marker = marker.strip()
        extra = re.fullmatch(r"""extra\s*==\s*["']([^"']+)["']""", marker)
        if marker and extra is None:
            raise RuntimeError(f"{distribution} requirement {requirement!r}: a marker other than extra == ...; "
                               "carla-gym package copies only unconditional and [server] requirements")
        if (not marker or extra.group(1) == "server") and not re.match(r"uv\b", spec.strip()):
            found.append(spec.strip())  # uv writes the folder's lock here; the server does not run it
    if not any(re.match(r"openenv-core\b", spec, re.IGNORECASE) for spec in found):
        raise RuntimeError(f"{distribution}'s installed metadata has no openenv-core requirement in its base or "
                           f"[server] dependencies: {found}; reinstall it (pip install -e <clone>)")
    return found


def source_dir() -> Path:
    """The directory of the installed (or editable) ``carla_gym`` package, found without importing anything."""
    spec = util.find_spec("carla_gym")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def find_uv() -> str | None:
    """The ``uv`` executable beside this interpreter (its environment's), else on ``PATH``, else None."""
    beside = Path(sys.executable).with_name("uv")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("uv")


def render(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``{{key}}`` replaced by ``values[key]``.

    Examples:
        >>> render("name: {{name}}", {"name": "carla_gym"})
        'name: carla_gym'

    Raises:
        KeyError: A placeholder with no value (naming it).
    """
    def value(match: re.Match) -> str:
        if match.group(1) not in values:
            raise KeyError(f"template placeholder {{{{{match.group(1)}}}}} has no value; known: {sorted(values)}")
        return values[match.group(1)]

    return re.sub(r"\{\{(\w+)\}\}", value, template)


def image_tag(name: str = DEFAULT_NAME) -> str:
    """The Docker image tag and Space name of environment ``name``: ``_`` as ``-``, lower case.

    Examples:
        >>> image_tag("carla_gym")
        'carla-gym'
    """
    return name.replace("_", "-").lower()


def folder_files(name: str = DEFAULT_NAME, scenario: str = DEFAULT_SCENARIO,
                 max_sessions: int = DEFAULT_MAX_SESSIONS) -> dict[str, str]:
    """The folder's files written from the templates: ``{path in the folder: text}`` (not the package copy or lock).

    Raises:
        ValueError: Invalid ``name``, unknown ``scenario`` or ``max_sessions`` < 1 (see `check_package_options`).
    """
    check_package_options(name, scenario, max_sessions)
    dist = metadata.distribution(DISTRIBUTION)
    licence = dist.metadata.get("License-Expression") or dist.metadata.get("License")
    values = {
        "name": name, "scenario": scenario, "max_sessions": str(max_sessions), "description": DESCRIPTION,
        "distribution": DISTRIBUTION, "version": dist.version, "project": f"{name.replace('_', '-')}-space",
        "image": image_tag(name), "title": f"{name} (OpenEnv CARLA)",
        "requires_python": dist.metadata.get("Requires-Python") or ">=3.11",
        "license": f'license = "{licence}"\n' if licence else "",
        "dependencies": "".join(f'    "{spec}",\n' for spec in server_dependencies()),
    }
    return {str(path.relative_to(TEMPLATES).with_suffix("")): render(path.read_text(), values)
            for path in sorted(TEMPLATES.rglob("*.tmpl"))}


def check_package_options(name: str, scenario: str, max_sessions: int) -> None:
    """Validate the options of `write_package`.

    Raises:
        ValueError: ``name`` does not match `NAME_PATTERN`, unknown ``scenario`` (the message lists
            the valid ones) or ``max_sessions`` < 1 (`carla_gym.server.app.check_options`).
    """
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"name={name!r}: must be 1 to 96 letters, digits, '_', '.' or '-', starting with a "
                         "letter or digit (a Hugging Face repository name), e.g. carla_gym")
    check_options(scenario, max_sessions, DEFAULT_SESSION_TIMEOUT)


def lock_command(directory: Path) -> str:
    """The shell command, runnable from the working directory, that writes ``directory``'s ``uv.lock``."""
    uv = find_uv()
    args = ["lock", "--directory", typed_path(directory)]
    if uv is None:
        return f"{python_command('-m', 'pip', 'install', 'uv')} && {python_command('-m', 'uv', *args)}"
    return shlex.join(["uv" if shutil.which("uv") == uv else uv, *args])


def write_package(directory: str | Path, name: str = DEFAULT_NAME, scenario: str = DEFAULT_SCENARIO,
                  max_sessions: int = DEFAULT_MAX_SESSIONS, lock: bool = True, force: bool = False) -> Written:
    """Write the OpenEnv environment folder (see the module docstring) at ``directory``.

    Everything is written into a temporary directory beside ``directory``, which is then renamed
    into place: on any error nothing is left behind and an existing ``directory`` is unchanged.

    Args:
        directory: The folder to write; created (with its parents) if missing. An existing one must
            be empty, or (with ``force``) one that ``carla-gym package`` wrote (it holds an
            ``openenv.yaml``), which is replaced as a whole.
        name: Environment name (openenv.yaml; ``openenv push``'s default Space name).
        scenario: The server's scenario for a reset that names none.
        max_sessions: The server's concurrent session limit, >= 1.
        lock: Run ``uv lock`` in the folder (`find_uv`); without it or without uv, `Written`
            names the command to run.
        force: Replace an existing folder that ``carla-gym package`` wrote.

    Returns:
        What was written.

    Raises:
        ValueError: Invalid options (`check_package_options`), or ``directory`` is a file.
        FileExistsError: ``directory`` is not empty (without ``force``), or with ``force`` holds no
            ``openenv.yaml`` (not a folder this command wrote).
        RuntimeError: ``uv lock`` failed or timed out (its output is in the message).
    """
    files = folder_files(name, scenario, max_sessions)
    target = Path(directory).absolute()
    if target.exists() and not target.is_dir():
        raise ValueError(f"{typed_path(target)}: a file, not a folder; name a new or empty folder")
    occupied = target.is_dir() and any(target.iterdir())
    if occupied and not force:
        raise FileExistsError(f"{typed_path(target)} is not empty; name a new or empty folder, or pass --force "
                              "to replace a folder that carla-gym package wrote")
    if occupied and not (target / "openenv.yaml").is_file():
        raise FileExistsError(f"{typed_path(target)} holds no openenv.yaml: not a folder that carla-gym package "
                              "wrote, so --force does not replace it; name a new or empty folder")
    created = next((p for p in reversed(target.parents) if not p.exists()), None)  # the topmost missing parent
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
    try:
        for relative, text in files.items():
            (staging / relative).parent.mkdir(parents=True, exist_ok=True)
            (staging / relative).write_text(text)
        shutil.copytree(source_dir(), staging / "carla_gym", ignore=_SKIP)
        uv = find_uv() if lock else None
        if uv is not None:
            _lock(uv, staging)
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # mkdtemp's folder is private (0o700)
        if occupied:
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
            target.rename(old / "folder")
            staging.rename(target)
            shutil.rmtree(old)
        else:
            staging.replace(target)  # onto an empty folder, or none
    except BaseException:
        shutil.rmtree(created if created is not None else staging, ignore_errors=True)
        raise
    if uv is not None:
        return Written(target, locked=True)
    return Written(target, locked=False, lock_command=lock_command(target))


def _lock(uv: str, folder: Path) -> None:
    """Run ``uv lock`` in ``folder``.

    Raises:
        RuntimeError: uv failed or took longer than `LOCK_TIMEOUT_S`.
    """
    try:
        done = subprocess.run([uv, "lock"], cwd=folder, capture_output=True, text=True, timeout=LOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"uv lock took over {LOCK_TIMEOUT_S:g} s; pass --no-lock and run it later") from exc
    if done.returncode != 0:
        raise RuntimeError(f"uv lock failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}; "
                           "pass --no-lock to write the folder without uv.lock and lock it later")


def main(argv: list[str] | None = None) -> None:
    """Command line: parse the options, write the folder, say what to run next.

    Raises:
        SystemExit: With status 2 and the reason for invalid options, a non-empty folder or a
            failed ``uv lock`` (nothing is written then).
    """
    from carla_gym.cli_args import HelpFormatter

    parser = argparse.ArgumentParser(prog="carla-gym package", description=USAGE_LINE, formatter_class=HelpFormatter)
    parser.add_argument("directory", metavar="DIR", help="the folder to write (new or empty)")
    parser.add_argument("--name", default=DEFAULT_NAME, help="environment name in openenv.yaml (the Space's name)")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO, help="the server's scenario when a reset names none")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="the server's concurrent sessions (one simulator each)")
    parser.add_argument("--no-lock", action="store_true",
                        help="do not run uv lock (openenv validate needs uv.lock: the command is printed)")
    parser.add_argument("--force", action="store_true", help="replace a folder that carla-gym package wrote before")
    args = parser.parse_args(argv)
    try:
        written = write_package(args.directory, name=args.name, scenario=args.scenario,
                                max_sessions=args.max_sessions, lock=not args.no_lock, force=args.force)
    except (ValueError, FileExistsError, RuntimeError) as exc:
        parser.error(str(exc))
    where = typed_path(written.path)
    print(f"carla-gym package: wrote the OpenEnv environment folder {where}")
    if not written.locked:
        why = "--no-lock" if args.no_lock else "uv not found beside this Python or on PATH"
        print(f"uv.lock not written ({why}); openenv validate needs it: {written.lock_command}")
    tag = image_tag(args.name)
    print(f"next: openenv validate {where}; openenv push {where} --repo-id <user>/{tag}; "
          f"docker build -t {tag} -f {where}/server/Dockerfile {where}")


if __name__ == "__main__":
    main()
