"""Shared test fixtures: the upstream reference data from ../shared."""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.fixture(scope="module")
def openenv_server_url():
    """URL of a ``carla_gym.server`` process on a free port (16 sessions), for one test module."""
    proc = subprocess.Popen([sys.executable, "-m", "carla_gym.server", "--port", "0", "--max-sessions", "16"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    match = re.search(r"listening on (http://\S+)", proc.stdout.readline() if ready else "")
    if match is None:
        proc.kill()
        proc.wait(timeout=10)
        proc.stdout.close()
        pytest.fail("carla_gym.server did not announce itself within 60 s")
    yield match.group(1)
    proc.terminate()
    proc.wait(timeout=10)
    proc.stdout.close()
