"""Helpers for tests that run OpenEnv CARLA servers or probe ports on 127.0.0.1.

* `ServerThread`: the server app under uvicorn in a thread of the test process. It starts in
  well under a second (openenv-core is imported once per test run, not once per server), so
  module fixtures and single tests use it.
* `start_server` / `stop_server`: ``python -m carla_gym.server`` as a real process, for the few
  tests that check the command line end to end or kill the process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import select
import socket
import subprocess
import sys
import threading
import time

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


class _Records(logging.Handler):
    """Keeps every log record of WARNING or above, formatted (tracebacks included)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class ServerThread:
    """`carla_gym.server.app.create_server_app` under uvicorn in a daemon thread of this process.

    The same app and uvicorn as ``python -m carla_gym.server`` (`carla_gym.server.cli.main`), without
    the process start. Use as a context manager, or call `start` and `stop`.

    Args:
        max_sessions: ``--max-sessions``.
        session_timeout: ``--session-timeout`` [s].
        port: TCP port on 127.0.0.1; 0 picks a free one (the chosen port is kept, so a stopped
            server restarts on it).

    Attributes:
        url: ``http://127.0.0.1:<port>`` once started.
    """

    def __init__(self, max_sessions: int = 16, session_timeout: float = 600.0, port: int = 0) -> None:
        self.max_sessions, self.session_timeout, self.port = max_sessions, session_timeout, port
        self.url = ""
        self._server = None
        self._thread: threading.Thread | None = None
        self._records = _Records()

    def start(self, timeout_s: float = 60.0) -> ServerThread:
        """Start serving; returns self once the socket listens.

        Raises:
            pytest.fail: The server did not listen within ``timeout_s`` seconds.
        """
        import uvicorn

        from carla_gym.server.app import create_server_app

        app = create_server_app("trolley_saves", self.max_sessions, self.session_timeout)
        # log_config=None: uvicorn's records reach the root logger (pytest shows them, `log` keeps them)
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None,
                                                     log_level="warning", timeout_graceful_shutdown=5))
        logging.getLogger().addHandler(self._records)
        self._thread = threading.Thread(target=asyncio.run, args=(self._server.serve(),), daemon=True,
                                        name=f"carla-gym serve {self.port}")
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"the in-process server did not start within {timeout_s} s: {self.log()[-2000:]}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        return self

    def stop(self) -> str:
        """Stop serving as Ctrl-C stops the command (open connections are closed); returns `log`."""
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._server = None
        logging.getLogger().removeHandler(self._records)
        return self.log()

    def log(self) -> str:
        """Every warning and error the server logged so far, one per line (tracebacks included)."""
        return "\n".join(self._records.lines)

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()
