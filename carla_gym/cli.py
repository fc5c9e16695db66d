"""The ``carla-gym`` console script: ``carla-gym serve [options]``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    """Dispatch ``carla-gym <command>``; ``serve`` is the only command so far."""
    argv = sys.argv[1:] if argv is None else argv
    usage = ("usage: carla-gym serve [--host HOST] [--port PORT] [--max-sessions N] [--scenario NAME] "
             "[--session-timeout S]")
    if not argv:
        sys.exit(usage)
    if argv[0] in ("-h", "--help"):
        print(usage)
        return
    if argv[0] != "serve":
        sys.exit(f"carla-gym: unknown command {argv[0]!r}; valid: serve")
    try:
        from carla_gym.openenv.server import main as serve
    except ImportError as exc:
        sys.exit(f"{exc}. Install the server extra: pip install -e '.[server]'")
    serve(argv[1:])


if __name__ == "__main__":
    main()
