"""Shared test fixtures: the upstream reference data from ../shared, one server process, connection attempts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from servers import start_server, stop_server

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CARLA_GYM_SHARED", REPO.parent / "shared"))
UPSTREAM_MICRO = SHARED / "reference" / "openenv_carla" / "trolley_micro_benchmarks.json"


@pytest.fixture(scope="session")
def upstream_micro() -> dict:
    """Upstream's trolley micro-benchmark data (read from ../shared, never shipped)."""
    if not UPSTREAM_MICRO.is_file():
        pytest.fail(f"upstream reference data not found at {UPSTREAM_MICRO}; put ../shared beside the repo "
                    "or set CARLA_GYM_SHARED")
    return json.loads(UPSTREAM_MICRO.read_text())


@pytest.fixture(scope="session")
def openenv_server_url():
    """URL of a ``carla_gym.server`` process on a free port (16 sessions), shared by the whole test run.

    One process for every module that asks (each start costs seconds of imports); tests must close
    the sessions they open, as every client does on ``close()``.
    """
    proc, url = start_server("--max-sessions", "16")
    yield url
    stop_server(proc)


@pytest.fixture
def connects(monkeypatch) -> list[tuple[str, float]]:
    """Every WebSocket connection attempt of the OpenEnv client as ``(url, open_timeout)``; attempts go through."""
    import openenv.core.env_client as env_client

    attempts = []
    real = env_client.ws_connect

    def counting(url, **kwargs):
        attempts.append((url, kwargs["open_timeout"]))
        return real(url, **kwargs)

    monkeypatch.setattr(env_client, "ws_connect", counting)
    return attempts
