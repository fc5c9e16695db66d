"""Command lines from dataclasses (CleanRL style): one field per ``--flag``, its help in the field.

Used by ``train_sb3.py`` and ``python -m carla_gym.reward.calibrate``. A field's default sets the
flag's kind: a bool is a switch (``store_true``), a list takes one or more values (none for an
empty default) of its first element's type, an int or float is parsed as such, anything else
(str, None) as a string.
"""

from __future__ import annotations

import argparse
import dataclasses


def arg(default, help: str):  # noqa: A002 - argparse's name
    """A dataclass field with a default (lists are copied per instance) and its ``--help`` text."""
    if isinstance(default, list):
        return dataclasses.field(default_factory=lambda: list(default), metadata={"help": help})
    return dataclasses.field(default=default, metadata={"help": help})


def parser_for(cls, prog: str | None = None, description: str | None = None) -> argparse.ArgumentParser:
    """An argparse parser with one ``--field-name`` flag per field of dataclass ``cls``."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    for f in dataclasses.fields(cls):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        kwargs = {"default": default, "help": f.metadata["help"]}
        if isinstance(default, bool):
            parser.add_argument(flag, action="store_true", help=kwargs["help"])
            continue
        if isinstance(default, list):
            kwargs["nargs"] = "+" if default else "*"
            if default and isinstance(default[0], int | float):
                kwargs["type"] = type(default[0])
        elif isinstance(default, int | float):
            kwargs["type"] = type(default)
        parser.add_argument(flag, **kwargs)
    return parser


def check_minimums(limits) -> None:
    """Exit with ``"<flag> <value>: must be >= <low>"`` for the first ``(flag, value, low)`` below its bound."""
    import sys

    for flag, value, low in limits:
        if value < low:
            sys.exit(f"{flag} {value}: must be >= {low}")


def check_url(url: str, flag: str = "--env-urls", timeout_s: float = 5.0) -> None:
    """Exit with a message naming ``flag`` unless ``url`` is an http(s)/ws(s) URL whose host accepts connections."""
    import socket
    import sys
    from urllib.parse import urlparse

    parsed = urlparse(url)
    try:
        port = parsed.port or (443 if parsed.scheme in ("https", "wss") else 80)
    except ValueError:
        port = None
    if parsed.scheme not in ("http", "https", "ws", "wss") or not parsed.hostname or port is None:
        sys.exit(f"{flag} {url!r}: expected a URL such as http://127.0.0.1:8000")
    try:
        socket.create_connection((parsed.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        sys.exit(f"{flag} {url}: cannot connect ({exc}); is a server running there (carla-gym serve --port "
                 f"{port})?")
