"""The OpenEnv CARLA server on the embedded simulator: ``carla-gym serve`` / ``python -m carla_gym.server``.

The command line: options, then uvicorn until interrupted. The app it serves is
`carla_gym.server.app.create_server_app`; this module sits above the library because it
uses the command-line helpers of `carla_gym.cli_args` (the library never imports them).
"""

from __future__ import annotations

import argparse
import asyncio

from carla_gym.cli_args import HelpFormatter
from carla_gym.server.app import (
    DEFAULT_MAX_SESSIONS,
    DEFAULT_SCENARIO,
    DEFAULT_SESSION_TIMEOUT,
    PAGE_SCENARIO,
    check_options,
    create_server_app,
    web_enabled,
)


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound now (address in use, an unknown host), or None if it can.

    A check before the slow imports, so a busy port gets a message that says what to do (uvicorn would log
    only ``[Errno 98]`` after seconds of start-up); the port is free again when this returns.
    """
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"the host {host!r} is not known ({exc.strerror})"
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(address)
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def main(argv: list[str] | None = None) -> None:
    """Command line: parse the options and run uvicorn until interrupted."""
    parser = argparse.ArgumentParser(prog="carla-gym serve", description=__doc__.splitlines()[0],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind; 0.0.0.0 serves every interface")
    parser.add_argument("--port", type=int, default=8000, help="TCP port")
    parser.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                        help="concurrent sessions, WebSocket and MCP (one simulator each)")
    parser.add_argument("--scenario", default=DEFAULT_SCENARIO,
                        help=f"scenario when a reset names none, and the web page's first choice unless it is this "
                             f"default, which one click ends (the page then opens on {PAGE_SCENARIO}, whose decision "
                             "takes a few clicks)")
    parser.add_argument("--session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT,
                        help="idle seconds before a session is reclaimed")
    parser.add_argument("--web", action="store_true",
                        help="also serve the web page at /web/ where a person drives the car (also on when the "
                             "environment variable ENABLE_WEB_INTERFACE is true, 1 or yes)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: must be in 0..65535")
    try:
        check_options(args.scenario, args.max_sessions, args.session_timeout)
    except ValueError as exc:
        parser.error(str(exc))
    busy = port_in_use(args.host, args.port)
    if busy:
        parser.error(f"--host {args.host} --port {args.port}: {busy}; choose another --port (--port 0 picks a free "
                     "one) or stop the server that holds it")
    import uvicorn

    web = web_enabled(args.web)
    app = create_server_app(args.scenario, args.max_sessions, args.session_timeout, web=web)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))

    async def announce() -> None:  # once the socket is bound (--port 0 picks a free port)
        while not server.started:
            await asyncio.sleep(0.05)
        for sock in (s for srv in server.servers for s in srv.sockets):
            host, port = sock.getsockname()[:2]
            page = f", web page http://{host}:{port}/web/" if web else ""
            print(f"carla-gym serve: listening on http://{host}:{port} (WebSocket /ws, MCP /mcp{page}; up to "
                  f"{args.max_sessions} sessions); Ctrl-C stops", flush=True)

    async def run() -> None:
        task = asyncio.create_task(announce())
        await server.serve()
        task.cancel()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
