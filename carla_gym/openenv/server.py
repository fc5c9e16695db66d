"""The OpenEnv CARLA server on the embedded simulator: ``carla-gym serve`` / ``python -m carla_gym.server``.

openenv-core's ``create_app`` serves `CarlaEnvironment` over HTTP and the ``/ws`` WebSocket,
with one isolated simulator per WebSocket session and up to ``max_sessions`` sessions
(upstream's CARLA server allows one: bug B21).
"""

from __future__ import annotations

import argparse
import asyncio
import functools

from carla_gym.cli_args import HelpFormatter
from carla_gym.sim.scenarios import resolve_scenario

DEFAULT_MAX_SESSIONS = 64
"""Default session limit: a GRPO batch of 64 rollouts on one server."""

DEFAULT_SESSION_TIMEOUT = 600.0
"""Idle time [s] after which a session is reclaimed, so idle clients cannot hold every slot."""


def check_options(scenario_name: str, max_sessions: int, session_timeout: float) -> None:
    """Validate the server options (fast: before openenv-core is imported).

    Raises:
        ValueError: Unknown scenario, ``max_sessions`` < 1 or ``session_timeout`` <= 0.
    """
    resolve_scenario(scenario_name)
    if max_sessions < 1:
        raise ValueError(f"max_sessions={max_sessions!r}: must be >= 1")
    if not session_timeout > 0:
        raise ValueError(f"session_timeout={session_timeout!r}: must be > 0 [s]")


def create_server_app(scenario_name: str = "trolley_saves", max_sessions: int = DEFAULT_MAX_SESSIONS,
                      session_timeout: float = DEFAULT_SESSION_TIMEOUT):
    """Build the ASGI app: openenv-core's FastAPI app behind `carla_gym.openenv.guard.Guard`.

    HTTP ``/reset`` and ``/step`` answer invalid values with status 400 and a JSON ``detail``
    (openenv-core would answer 500 in plain text).

    Args:
        scenario_name: Scenario of a session's first reset when the client names none
            (upstream's default is ``trolley_saves``).
        max_sessions: Concurrent WebSocket sessions allowed, >= 1.
        session_timeout: Idle time [s] before a session is reclaimed, > 0.

    Raises:
        ValueError: Unknown scenario, ``max_sessions`` < 1 or ``session_timeout`` <= 0.
        carla_gym.hints.MissingExtraError: Without the ``[server]`` extra (names its install command).
    """
    check_options(scenario_name, max_sessions, session_timeout)
    from carla_gym.hints import needs_extra

    with needs_extra("server"):  # heavy imports (openenv-core, gradio): after the checks
        from fastapi.responses import JSONResponse
        from openenv.core.env_server.http_server import create_app
        from openenv.core.env_server.types import ConcurrencyConfig

        from carla_gym.openenv.environment import CarlaEnvironment
        from carla_gym.openenv.guard import Guard
        from carla_gym.openenv.models import CarlaAction, CarlaObservation

    factory = functools.partial(CarlaEnvironment, scenario_name=scenario_name)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout)
    app = create_app(factory, CarlaAction, CarlaObservation, env_name="carla_env", concurrency_config=config)

    async def bad_value(request, exc):  # invalid reset or step arguments over HTTP
        return JSONResponse(status_code=400, content={"detail": f"{type(exc).__name__}: {exc}"})

    for error in (ValueError, TypeError, OverflowError):
        app.add_exception_handler(error, bad_value)
    return Guard(app)


def main(argv: list[str] | None = None) -> None:
    """Command line: parse the options and run uvicorn until interrupted."""
    parser = argparse.ArgumentParser(prog="carla-gym serve", description=__doc__.splitlines()[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind; 0.0.0.0 serves every interface")
    parser.add_argument("--port", type=int, default=8000, help="TCP port")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="concurrent WebSocket sessions (one simulator each)")
    parser.add_argument("--scenario", default="trolley_saves", help="scenario when a reset names none")
    parser.add_argument("--session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT,
                        help="idle seconds before a session is reclaimed")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: must be in 0..65535")
    try:
        check_options(args.scenario, args.max_sessions, args.session_timeout)
    except ValueError as exc:
        parser.error(str(exc))
    import uvicorn

    app = create_server_app(args.scenario, args.max_sessions, args.session_timeout)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))

    async def announce() -> None:  # once the socket is bound (--port 0 picks a free port)
        while not server.started:
            await asyncio.sleep(0.05)
        for sock in (s for srv in server.servers for s in srv.sockets):
            host, port = sock.getsockname()[:2]
            print(f"carla-gym serve: listening on http://{host}:{port} (WebSocket /ws, up to {args.max_sessions} "
                  "sessions); Ctrl-C stops", flush=True)

    async def run() -> None:
        task = asyncio.create_task(announce())
        await server.serve()
        task.cancel()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
