"""Helpers for tests that run `carla_gym.server` processes or probe ports on 127.0.0.1."""

from __future__ import annotations

import re
import select
import socket
import subprocess
import sys

import pytest


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(*args: str, timeout_s: float = 60.0) -> tuple[subprocess.Popen, str]:
    """Start ``python -m carla_gym.server --port 0 ARGS`` and wait for its "listening on" line.

    Returns:
        The process (stdout and stderr combined in ``proc.stdout``) and the URL it announced.

    Raises:
        pytest.fail: The server did not announce itself within ``timeout_s`` seconds (it is killed).
    """
    proc = subprocess.Popen([sys.executable, "-m", "carla_gym.server", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline() if ready else "")
    if match is None:
        stop_server(proc)
        pytest.fail(f"carla_gym.server did not announce itself within {timeout_s} s")
    return proc, match.group(1)


def stop_server(proc: subprocess.Popen) -> str:
    """Terminate (then kill) a server from `start_server`; returns everything it printed."""
    proc.terminate()
    try:
        out, _ = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate(timeout=10)
    return out
