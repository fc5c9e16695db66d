"""Command lines from dataclasses (CleanRL style): one field per ``--flag``, its help in the field.

Used by ``train_sb3.py``, ``train_grpo.py``, ``agents.compare`` and ``python -m
carla_gym.reward.calibrate``. A field's annotation and default set the flag's kind:

- ``Literal["a", "b"]`` (or ``list[Literal[...]]``): argparse ``choices``, so a bad value exits
  with ``invalid choice: 'c' (choose from a, b)`` (the wording differs slightly between Python
  versions) and ``--help`` lists them;
- a bool default is a switch (``store_true``);
- a list default takes one or more values (none for an empty default) of its first element's
  type (or of the Literal's values' type);
- an int or float default is parsed as such; anything else (str, None) as a string.

Annotations are resolved with `typing.get_type_hints`, so dataclasses written with ``from
__future__ import annotations`` work.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing
from typing import Literal  # noqa: F401 - resolves the annotations of the doctests' dataclasses

_REST_INLINE = re.compile(r"``(.+?)``|:[a-z]+(?::[a-z]+)?:`(.+?)`|`(.+?)`|\*\*(.+?)\*\*")
"""reST inline markup of docstrings: ``literal``, :role:`target`, `reference` and **strong**."""


def plain_text(text: str) -> str:
    """``text`` with reST inline markup replaced by its content, for terminal output such as ``--help``.

    Examples:
        >>> plain_text("The server: ``carla-gym serve`` (see `carla_gym.openenv`, :class:`CarlaEnv`), **CPU**.")
        'The server: carla-gym serve (see carla_gym.openenv, CarlaEnv), CPU.'
    """
    return _REST_INLINE.sub(lambda m: next(g for g in m.groups() if g is not None), text)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` of every command line here: defaults shown (required flags have none), plain-text descriptions.

    Descriptions come from module docstrings (reST), so `plain_text` strips their inline markup.
    """

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))

    def _get_help_string(self, action: argparse.Action) -> str | None:
        """A required flag's help without ``(default: None)``: it has no default."""
        return action.help if action.required else super()._get_help_string(action)


def arg(default, help: str):  # noqa: A002 - argparse's name
    """A dataclass field with a default (lists are copied per instance) and its ``--help`` text."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def literal_choices(annotation) -> tuple | None:
    """The values of a ``Literal[...]`` annotation, or of the one in ``list[Literal[...]]``; None for others.

    Examples:
        >>> literal_choices(Literal["ppo", "sac"]), literal_choices(list[Literal[1, 2]]), literal_choices(str)
        (('ppo', 'sac'), (1, 2), None)
    """
    if typing.get_origin(annotation) is list:
        (annotation,) = typing.get_args(annotation) or (None,)
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    return None


def parser_for(cls, prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with one ``--field-name`` flag per field of dataclass ``cls`` (rules: module docstring).

    Raises:
        NameError: An annotation of ``cls`` that does not resolve in its module (`typing.get_type_hints`).
        ValueError: A default outside its field's ``Literal`` choices (names the field and the choices).

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class A:
        ...     algo: Literal["ppo", "sac"] = arg("ppo", "algorithm")
        ...     scenarios: list[Literal["a", "b", "c"]] = arg(["a"], "scenarios")
        ...     n_envs: int = arg(4, "envs")
        >>> parser = parser_for(A)
        >>> parser.parse_args(["--algo", "sac", "--scenarios", "b", "c", "--n-envs", "2"])
        Namespace(algo='sac', scenarios=['b', 'c'], n_envs=2)
        >>> import contextlib, io
        >>> with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.suppress(SystemExit):
        ...     parser.parse_args(["--algo", "dqn"])
        >>> err.getvalue().splitlines()[-1]  # doctest: +ELLIPSIS
        "...: error: argument --algo: invalid choice: 'dqn' (choose from ...ppo..., ...sac...)"
    """
    hints = typing.get_type_hints(cls)
    parser = argparse.ArgumentParser(prog=prog, description=description, formatter_class=HelpFormatter)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kwargs = {"default": default, "help": f.metadata["help"]}
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", help=kwargs["help"])
            continue
        choices = literal_choices(hints.get(f.name))
        if choices is not None:
            outside = [v for v in (default if isinstance(default, list) else [default]) if v not in choices]
            if outside:
                raise ValueError(f"{cls.__name__}.{f.name}: default {default!r} is not among the choices "
                                 f"{list(choices)}")
            kwargs["choices"] = choices
            if not isinstance(choices[0], str):
                kwargs["type"] = type(choices[0])
        if isinstance(default, list):
            kwargs["nargs"] = "+" if default else "*"
            if choices is None and default and isinstance(default[0], int | float):
                kwargs["type"] = type(default[0])
        elif choices is None and isinstance(default, int | float):
            kwargs["type"] = type(default)
        parser.add_argument(flag, **kwargs)
    return parser


def command_flags(args) -> list[str]:
    """The flags that `parser_for` parses back into dataclass instance ``args`` (fields off their defaults).

    For the commands that messages print (``--resume``, ``--overwrite`` hints).

    Raises:
        ValueError: A value no flag can express (False for a switch, an empty list for a ``+`` list).

    Examples:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class A:
        ...     seeds: list[int] = arg([0], "seeds")
        ...     out: str = arg("x", "output")
        ...     resume: bool = arg(False, "continue")
        >>> command_flags(A(seeds=[1, 2], out="-o", resume=True))
        ['--seeds', '1', '2', '--out=-o', '--resume']
        >>> parser_for(A).parse_args(command_flags(A(seeds=[1, 2], out="-o", resume=True)))
        Namespace(seeds=[1, 2], out='-o', resume=True)
    """
    out = []
    for f in dataclasses.fields(args):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        value = getattr(args, f.name)
        if value == default:
            continue
        flag = "--" + f.name.replace("_", "-")
        if isinstance(default, bool):
            if not value:
                raise ValueError(f"{f.name}={value!r}: a switch cannot be turned off on the command line")
            out.append(flag)
        elif isinstance(default, list):
            if not value:
                raise ValueError(f"{f.name}=[]: {flag} needs at least one value")
            out += [flag, *map(str, value)]
        else:  # --flag=value when the value starts with "-", so it is not read as a flag
            text = str(value)
            out += [f"{flag}={text}"] if text.startswith("-") else [flag, text]
    return out


def check_minimums(limits) -> None:
    """Exit with ``"<flag> <value>: must be >= <low>"`` for the first ``(flag, value, low)`` below its bound."""
    import sys

    for flag, value, low in limits:
        if value < low:
            sys.exit(f"{flag} {value}: must be >= {low}")


def check_url(url: str, flag: str = "--env-urls", timeout_s: float = 5.0,
              embedded: str = "leave out --env-urls and --backend openenv") -> None:
    """Exit with a message naming ``flag`` unless ``url`` is a server URL whose host accepts connections.

    The URL rule is `carla_gym.openenv.urls.url_problem` (the one the client and the env use);
    then one TCP connection, which fails at once when it is refused and waits at most
    ``timeout_s`` [s] otherwise (this project's choice). ``embedded`` says how to run on the
    embedded simulator instead with this script's flags.
    """
    import socket
    import sys
    from urllib.parse import urlsplit

    from carla_gym.hints import serve_command
    from carla_gym.openenv.urls import EXAMPLE_URL, url_problem

    problem = url_problem(url)
    if problem is not None:
        sys.exit(f"{flag} {url!r}: {problem}; expected a URL such as {EXAMPLE_URL}")
    parsed = urlsplit(url)
    port = parsed.port or (443 if parsed.scheme in ("https", "wss") else 80)
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        sys.exit(f"{flag} {url}: cannot connect ({exc}); start a server there ({serve_command('--port', str(port))}) "
                 f"or use the embedded simulator, which needs no server ({embedded})")
