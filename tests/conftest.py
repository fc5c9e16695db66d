"""Shared test fixtures (reference data, one in-process server, connection attempts); the parallel layout.

The suite runs on pytest-xdist workers, one per core (pyproject's addopts: ``-n auto --dist loadfile``):
each test file runs on one worker, so a module-scoped fixture (a comparison run, a trained model, a
server) is built once per run. Tests therefore keep to their own ``tmp_path`` and free ports. Torch runs
one thread per process (``OMP_NUM_THREADS=1``, inherited by the commands the tests start): the workers
already use every core.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported (workers and their subprocesses)

import pytest  # noqa: E402
from servers import ServerThread  # noqa: E402


def pytest_configure(config):
    """Import openenv-core without Gradio before collection, in each process that collects.

    That is an xdist worker, or a run without workers (seconds per process); tests/test_web.py imports Gradio
    when it needs it.
    """
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        from carla_gym.server.app import import_openenv_core

        import_openenv_core(web=False)

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CARLA_GYM_SHARED", REPO.parent / "shared"))
UPSTREAM_MICRO = SHARED / "reference" / "openenv_carla" / "trolley_micro_benchmarks.json"


@pytest.fixture(scope="session")
def upstream_micro() -> dict:
    """Upstream's trolley micro-benchmark data (upstream's public trolley_micro_benchmarks.json, never shipped)."""
    if not UPSTREAM_MICRO.is_file():
        pytest.fail(f"upstream reference data not found at {UPSTREAM_MICRO}; download upstream's public "
                    "trolley_micro_benchmarks.json (https://github.com/meta-pytorch/OpenEnv/blob/main/envs/carla_env/"
                    "server/data/trolley_micro_benchmarks.json), save it unchanged as "
                    "<folder>/reference/openenv_carla/trolley_micro_benchmarks.json and set CARLA_GYM_SHARED=<folder> "
                    "(or name the folder shared and put it beside the clone)")
    return json.loads(UPSTREAM_MICRO.read_text())


@pytest.fixture(scope="session")
def openenv_server_url():
    """URL of an OpenEnv CARLA server on a free port (16 sessions), shared by every test of a worker.

    `servers.ServerThread`: the app of ``python -m carla_gym.server`` under uvicorn in this process (the
    command line itself is tested by the ``slow`` tests); tests must close the sessions they open, as
    every client does on ``close()``.
    """
    with ServerThread(max_sessions=16) as server:
        yield server.url


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
