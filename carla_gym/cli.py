"""The ``carla-gym`` console script: ``carla-gym serve [options]`` and ``carla-gym compare [options]``."""

from __future__ import annotations

import sys

USAGE = ("usage: carla-gym serve [--host HOST] [--port PORT] [--max-sessions N] [--scenario NAME] "
         "[--session-timeout S]\n"
         "       carla-gym compare [--agents SPEC ...] [--scenario NAME ...] [--seeds N ...] [--out DIR] ... "
         "(carla-gym compare --help lists every option)")


def main(argv: list[str] | None = None) -> None:
    """Dispatch ``carla-gym <command>`` (``serve`` or ``compare``)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.exit(USAGE)
    if argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    if argv[0] == "compare":
        from agents.compare import main as compare

        sys.exit(compare(argv[1:], prog="carla-gym compare"))
    if argv[0] != "serve":
        sys.exit(f"carla-gym: unknown command {argv[0]!r}; valid: serve, compare")
    from carla_gym.hints import exit_without_extras

    exit_without_extras("server")
    from carla_gym.openenv.server import main as serve

    serve(argv[1:])


if __name__ == "__main__":
    main()
