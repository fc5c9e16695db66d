"""Shared test fixtures: the upstream reference data from ../shared."""

from __future__ import annotations

import json
import os
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
