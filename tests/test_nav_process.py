"""Upstream's navigation flows over a real ``carla-gym serve`` process.

The same flows as tests/test_nav_server.py (which runs them against the server in this process on
every default run), here against ``python -m carla_gym.server`` started as a subprocess, with the
client used exactly as the OpenEnv docs page shows upstream code using it (only the import changed). Starting the
process costs about 6 s (openenv-core's import), so the module is ``slow``.
"""

from __future__ import annotations

import pytest
from servers import start_server, stop_server
from test_nav_server import check_autopilot_flow, check_llm_flow

from carla_gym.openenv import CarlaEnv

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def process_url():
    proc, url = start_server("--max-sessions", "4")
    yield url
    log = stop_server(proc)
    assert "Traceback" not in log, log


def test_autopilot_flow_over_a_server_process(process_url):
    """init_navigation_agent, set_destination from goal_location, follow_route until done: equal in process."""
    with CarlaEnv(base_url=process_url, connect_timeout_s=30, message_timeout_s=120) as client:
        check_autopilot_flow(client)


def test_llm_flow_over_a_server_process(process_url):
    """Observe / control / emergency_stop steps: every reply equal to the episode in process."""
    with CarlaEnv(base_url=process_url, connect_timeout_s=30, message_timeout_s=120) as client:
        check_llm_flow(client)
