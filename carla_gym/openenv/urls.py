"""Server URLs and client timeouts of OpenEnv connections, checked before anything connects.

One rule each, used by the client (`carla_gym.openenv.client.CarlaEnv`), the Gymnasium backend
(`carla_gym.backends.openenv.OpenEnvBackend`, ``gym.make(..., base_url=...)``), the LLM tool
environments (`carla_gym.llm.tools`) and every ``--env-urls`` flag (`carla_gym.cli_args.check_url`).
It needs only the standard library and numpy, not the ``[server]`` extra, so command lines check
their flags before the slow openenv-core import.

Examples:
    >>> check_url("http://127.0.0.1:8000")
    'http://127.0.0.1:8000'
    >>> check_url("ftp://x", "--env-urls")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --env-urls='ftp://x': the scheme 'ftp' is not one of http, https, ws, wss; expected a URL such as ...
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from carla_gym.sim.validate import check_number

SCHEMES = ("http", "https", "ws", "wss")
"""URL schemes an OpenEnv client accepts (openenv-core turns http(s) into ws(s) and appends ``/ws``)."""
EXAMPLE_URL = "http://127.0.0.1:8000"
"""A valid server URL, shown in error messages: ``carla-gym serve``'s default address."""
TIMEOUT_RANGE_S = (0.01, 86_400.0)
"""Smallest and largest client timeout [s] (this project's bounds: above zero, at most a day)."""
DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""Connection (WebSocket handshake) timeout [s]: openenv-core's ``EnvClient`` default."""
DEFAULT_MESSAGE_TIMEOUT_S = 60.0
"""Reply timeout [s]: openenv-core's ``EnvClient`` default."""


def url_problem(url: Any) -> str | None:
    """What is wrong with ``url`` as an OpenEnv server URL, or None when nothing is (see `check_url`).

    Examples:
        >>> url_problem("http://127.0.0.1:8000") is None, url_problem("localhost:8000")
        (True, 'no scheme (http://localhost:8000 ?)')
    """
    if not isinstance(url, str):
        return f"not a string ({type(url).__name__})"
    if not url:
        return "empty"
    if any(c.isspace() or not c.isprintable() for c in url):
        return "contains whitespace or control characters"
    if "://" not in url:
        return f"no scheme (http://{url} ?)"
    scheme = url.split("://", 1)[0]
    if scheme not in SCHEMES:
        return (f"the scheme {scheme!r} is not one of {', '.join(SCHEMES)}"
                + (" (write it in lower case)" if scheme.lower() in SCHEMES else ""))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a port that is not a number or out of range, a malformed IPv6 address
        return f"malformed address ({exc})"
    if not parts.hostname:
        return "no host"
    if port == 0 or (port is None and parts.netloc.endswith(":")):
        return "the port must be a number in 1-65535"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "a query or fragment cannot be part of a server URL (the client appends /ws to the path)"
    return None


def check_url(url: Any, key: str = "base_url") -> str:
    """Check that ``url`` is an OpenEnv server URL: http, https, ws or wss, a host, a valid port.

    A path is kept (a reverse proxy prefix; a trailing ``/ws`` is dropped by the client); a query
    or fragment is refused, as the client appends ``/ws`` after the path. Nothing connects.

    Args:
        url: The URL, e.g. ``"http://127.0.0.1:8000"``.
        key: The argument's name, for the error message.

    Returns:
        ``url`` unchanged.

    Raises:
        ValueError: Naming ``key``, the bad value, what is wrong and a valid example
            (`EXAMPLE_URL`): not a string, empty, whitespace, a missing or other scheme
            (``ftp://``), no host, a port that is not a number in 1-65535, a query or fragment.
    """
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(f"{key}={url!r}: {problem}; expected a URL such as {EXAMPLE_URL!r}")
    return url


def check_timeout(value: Any, key: str) -> float:
    """A client timeout [s]: a finite number in `TIMEOUT_RANGE_S`.

    Raises:
        ValueError: Naming ``key``, the bad value and the valid range.
    """
    return check_number(key, value, *TIMEOUT_RANGE_S)
