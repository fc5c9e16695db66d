"""Commands that messages tell the user to run, each working as printed from the directory it was printed in.

One definition of: which modules each extra of ``pyproject.toml`` provides (`EXTRA_MODULES`), the
command that installs an extra (`install_command`), the error a missing extra raises
(`MissingExtraError`, a Gymnasium ``DependencyNotInstalled`` and an ``ImportError``), and how a
command line runs this interpreter (`python_command`) or a script (`script_command`); and how
library errors name arguments, so that a command line can name its own flags instead
(`worded`, `as_flags`, `Naming`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import shlex
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gymnasium.error import DependencyNotInstalled

DISTRIBUTION = "openenv-carla-gym"
"""The distribution name in ``pyproject.toml`` ([project] name)."""

EXTRA_MODULES = {
    "sb3": ("stable_baselines3", "torch", "matplotlib", "tensorboard", "tqdm", "rich"),
    "server": ("openenv", "uvicorn"),
    "clip": ("open_clip", "torch", "torchvision"),
    "grpo": ("trl", "transformers", "peft", "datasets", "accelerate", "torch", "torchvision", "tokenizers"),
    "compare": ("matplotlib", "tqdm", "imageio", "httpx", "transformers"),
    "bench": ("highway_env",),
    "study": ("rliable", "scipy", "optuna"),
}
"""Import names this package uses from each extra of ``pyproject.toml`` ([project.optional-dependencies];
tests/test_hints.py checks that each belongs to a requirement of its extra)."""

_OWN_PACKAGES = ("carla_gym", "agents")
_E = TypeVar("_E", bound=BaseException)


class MissingExtraError(DependencyNotInstalled, ModuleNotFoundError):
    """An extra of ``pyproject.toml`` is not installed; the message ends with the command that installs it.

    Both a Gymnasium ``DependencyNotInstalled`` (as Gymnasium reports missing optional
    dependencies) and a ``ModuleNotFoundError`` (what callers of a failed import expect).
    """


def python_command(*args: str) -> str:
    """A shell command line running this interpreter with ``args`` (quoted).

    ``python`` when that name on ``PATH`` is this interpreter, else its full path, so the line
    runs in the same environment whatever is activated.

    Examples:
        >>> python_command("-m", "pip", "install", "x y").endswith("-m pip install 'x y'")
        True
    """
    found = shutil.which("python")
    python = "python" if found and Path(found).absolute() == Path(sys.executable).absolute() else sys.executable
    return shlex.join([python, *args])


def serve_command(*args: str) -> str:
    """The shell command that starts this package's OpenEnv server, ``carla-gym serve`` with ``args``.

    ``carla-gym serve ...`` when that script on ``PATH`` is this environment's, else this
    interpreter running ``-m carla_gym.cli serve ...`` (the same entry point), so the line works
    whether or not the environment is activated.

    Examples:
        >>> serve_command("--port", "9").endswith("serve --port 9")
        True
    """
    found = shutil.which("carla-gym")
    if found and Path(found).absolute().parent == Path(sys.executable).absolute().parent:
        return shlex.join(["carla-gym", "serve", *args])
    return python_command("-m", "carla_gym.cli", "serve", *args)


def typed_path(path: str | Path) -> str:
    """``path`` as the user can type it here: relative to the working directory when inside it, else absolute.

    A relative path starts with ``./``, so no tool takes it for a name (pip reads a bare
    ``name[extra]`` as a package of the index).
    """
    path = Path(path).resolve()
    try:
        relative = path.relative_to(Path.cwd().resolve())
    except ValueError:
        return str(path)
    return "." if relative == Path() else f"./{relative}"


def script_command(script: str | Path, *args: str) -> str:
    """A shell command line running the Python script ``script`` with ``args`` in this interpreter."""
    return python_command(typed_path(script), *args)


def checkout() -> Path | None:
    """The source checkout this package runs from, or None (installed from a wheel or a copy).

    The directory above the ``carla_gym`` package when it holds a ``pyproject.toml`` naming
    `DISTRIBUTION` (an editable install, or running from the clone).
    """
    root = Path(__file__).resolve().parent.parent
    project = root / "pyproject.toml"
    if project.is_file():
        import tomllib

        try:
            if tomllib.loads(project.read_text()).get("project", {}).get("name") == DISTRIBUTION:
                return root
        except (OSError, tomllib.TOMLDecodeError):
            return None
    return None


def _check_extra(extra: str) -> None:
    if extra not in EXTRA_MODULES:
        raise ValueError(f"extra {extra!r}: not an extra of {DISTRIBUTION}; valid: {sorted(EXTRA_MODULES)}")


def install_command(extra: str) -> str:
    """The command that installs ``extra`` into this interpreter's environment, runnable from here.

    From a checkout (`checkout`): ``python -m pip install -e <checkout>[<extra>]`` with the
    checkout's path as typed from the working directory. Otherwise (no clone next to the package)
    a sentence naming the extra and the command to run from the user's clone.

    Args:
        extra: An extra of `EXTRA_MODULES`, or several joined by commas (``"clip,grpo"``: one command for all).

    Raises:
        ValueError: An extra that is not one of `EXTRA_MODULES`.
    """
    for one in extra.split(","):
        _check_extra(one)
    root = checkout()
    if root is None:
        return (f"install the extra {extra} of {DISTRIBUTION} from your clone of it: "
                f"{python_command('-m', 'pip', 'install', f'<clone>[{extra}]')}")
    return python_command("-m", "pip", "install", "-e", f"{typed_path(root)}[{extra}]")


def missing_extra_message(extra: str, problem: str) -> str:
    """``"<problem>. Install the <extra> extra: <install_command>"`` (the one wording of every such message)."""
    return f"{problem}. Install the {extra} extra: {install_command(extra)}"


def require_extra(extra: str, modules: tuple[str, ...] | None = None) -> None:
    """Check that ``extra``'s modules can be imported (without importing them; fast).

    Args:
        extra: An extra of `EXTRA_MODULES`.
        modules: The modules the caller needs (top-level import names); None: all of the extra's.

    Raises:
        MissingExtraError: The first module that is not installed, with the install command.
        ValueError: An unknown ``extra``.
    """
    _check_extra(extra)
    for module in EXTRA_MODULES[extra] if modules is None else modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(missing_extra_message(extra, f"No module named {module!r}"), name=module)


def exit_without_extras(*extras: str, prefix: str = "") -> None:
    """Exit (`SystemExit`) naming every one of ``extras`` that is missing, with one command installing them all.

    For scripts, before they write anything.

    Args:
        *extras: Extras of `EXTRA_MODULES`, checked in this order.
        prefix: Start of the message (e.g. ``"agents.compare: "``).

    Raises:
        SystemExit: An extra is missing: the message is ``prefix`` + the `MissingExtraError` text; several:
            ``prefix`` + each one's missing module, then the install command of all of them.
        ValueError: An unknown extra.
    """
    missing: dict[str, MissingExtraError] = {}
    for extra in dict.fromkeys(extras):
        try:
            require_extra(extra)
        except MissingExtraError as exc:
            missing[extra] = exc
    if len(missing) == 1:
        sys.exit(f"{prefix}{next(iter(missing.values()))}")
    if missing:
        modules = "; ".join(f"{extra}: no module named {exc.name!r}" for extra, exc in missing.items())
        sys.exit(f"{prefix}missing extras ({modules}). Install them: {install_command(','.join(missing))}")


@contextlib.contextmanager
def needs_extra(extra: str) -> Iterator[None]:
    """Turn a missing third-party module imported in the block into a `MissingExtraError` for ``extra``.

    Raises:
        MissingExtraError: From the block's ``ModuleNotFoundError`` (chained), unless the missing
            module is this package's own (a bug, re-raised unchanged).
        ValueError: An unknown ``extra``.
    """
    _check_extra(extra)
    try:
        yield
    except ModuleNotFoundError as exc:
        if isinstance(exc, MissingExtraError) or (exc.name or "").split(".")[0] in _OWN_PACKAGES:
            raise
        raise MissingExtraError(missing_extra_message(extra, str(exc)), name=exc.name) from exc


_NO_VALUE = object()


@dataclass(frozen=True)
class Naming:
    """How an error message names the arguments of a call: as its Python keywords, or as a command line's flags.

    A library error built with `worded` names each argument through a `Naming`: ``Naming()`` (its
    message) writes ``device='cuda'``; a command line that catches the error re-words it with its
    own flags (`as_flags`), e.g. ``--clip-device cuda``.

    Args:
        flags: None: Python keywords. Else each keyword's flag; a keyword mapped to None (or
            absent) is one the command line does not offer (`offers` is False; it is still
            written as a keyword if a message names it).

    Examples:
        >>> Naming()("device", "cuda"), Naming({"device": "--clip-device"})("device", "cuda")
        ("device='cuda'", '--clip-device cuda')
        >>> Naming()("pretrained", metavar="FILE"), Naming({"pretrained": "--pretrained"})("pretrained", metavar="FILE")
        ('pretrained=...', '--pretrained FILE')
    """

    flags: Mapping[str, str | None] | None = None

    def offers(self, keyword: str) -> bool:
        """Whether the caller can set ``keyword`` (always for Python callers)."""
        return self.flags is None or self.flags.get(keyword) is not None

    def __call__(self, keyword: str, value: object = _NO_VALUE, metavar: str = "...") -> str:
        """``keyword=value!r`` or ``--flag value``; without ``value``: ``keyword=...`` or ``--flag METAVAR``.

        Without ``value`` and with an empty ``metavar``: the bare keyword or flag.
        """
        flag = None if self.flags is None else self.flags.get(keyword)
        if flag is None:
            if value is _NO_VALUE:
                return f"{keyword}=..." if metavar else keyword
            return f"{keyword}={value!r}"
        if value is _NO_VALUE:
            return f"{flag} {metavar}" if metavar else flag
        return shlex.join([flag, str(value)])


def worded(kind: type[_E], words: Callable[[Naming], str]) -> _E:
    """An exception of type ``kind`` whose message names arguments through a `Naming`, so `as_flags` can re-word it.

    Args:
        kind: The exception class (e.g. ValueError); it is raised as usual.
        words: The message given a `Naming`; the exception's own message is ``words(Naming())``.
    """
    exc = kind(words(Naming()))
    exc.words = words
    return exc


def as_flags(exc: BaseException, flags: Mapping[str, str | None]) -> str:
    """The message of ``exc`` naming a command line's ``flags`` instead of keywords (`worded` errors; others as is).

    Args:
        exc: The caught exception.
        flags: Python keyword -> the command line's flag, or None where it has none (`Naming`).
    """
    words = getattr(exc, "words", None)
    return words(Naming(flags)) if callable(words) else str(exc)


def missing_name(module: str, name: str, renamed: Mapping[str, str]) -> ImportError | AttributeError:
    """The error a module's ``__getattr__`` raises for a name it lacks; a renamed name's says what replaced it.

    Args:
        module: The module's ``__name__``.
        name: The name looked up.
        renamed: Old name -> what to use instead (a sentence naming the new name).

    Returns:
        For a renamed name: an ImportError saying what to use instead (Python would turn an
        AttributeError in ``from module import name`` into a bare "cannot import name"; so
        ``getattr(module, old, default)`` and ``hasattr`` raise it too, which only code written
        for the old name does). Other names: the usual AttributeError.
    """
    if name not in renamed:
        return AttributeError(f"module {module!r} has no attribute {name!r}")
    message = f"{module}.{name} was renamed: {renamed[name]}"
    return ImportError(message, name=module)
