"""The OpenEnv CARLA server on the embedded simulator: ``carla-gym serve`` / ``python -m carla_gym.server``.

openenv-core's ``create_app`` serves `CarlaEnvironment` over HTTP and the ``/ws`` WebSocket,
with one isolated simulator per WebSocket session and up to ``max_sessions`` sessions
(upstream's CARLA server allows one: bug B21).
"""

from __future__ import annotations

import argparse
import functools

from carla_gym.openenv.environment import CarlaEnvironment
from carla_gym.openenv.models import CarlaAction, CarlaObservation
from carla_gym.sim.scenarios import resolve_scenario

DEFAULT_MAX_SESSIONS = 64
"""Default session limit: a GRPO batch of 64 rollouts on one server."""


def create_server_app(scenario_name: str = "trolley_saves", max_sessions: int = DEFAULT_MAX_SESSIONS):
    """Build the FastAPI app.

    Args:
        scenario_name: Scenario of a session's first reset when the client names none
            (upstream's default is ``trolley_saves``).
        max_sessions: Concurrent WebSocket sessions allowed, >= 1.

    Raises:
        ValueError: Unknown scenario or ``max_sessions`` < 1.
    """
    from openenv.core.env_server.http_server import create_app

    resolve_scenario(scenario_name)
    if max_sessions < 1:
        raise ValueError(f"max_sessions={max_sessions!r}: must be >= 1")
    factory = functools.partial(CarlaEnvironment, scenario_name=scenario_name)
    return create_app(factory, CarlaAction, CarlaObservation, env_name="carla_env", max_concurrent_envs=max_sessions)


def main(argv: list[str] | None = None) -> None:
    """Command line: parse the options and run uvicorn until interrupted."""
    parser = argparse.ArgumentParser(prog="carla-gym serve", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind; 0.0.0.0 serves every interface")
    parser.add_argument("--port", type=int, default=8000, help="TCP port")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="concurrent WebSocket sessions (one simulator each)")
    parser.add_argument("--scenario", default="trolley_saves", help="scenario when a reset names none")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: must be in 0..65535")
    try:
        app = create_server_app(args.scenario, args.max_sessions)
    except ValueError as exc:
        parser.error(str(exc))
    import uvicorn

    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
