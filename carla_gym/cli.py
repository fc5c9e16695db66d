"""The ``carla-gym`` console script: ``carla-gym serve [options]`` and, git-style, ``carla-gym <command> [options]``.

``carla-gym <command>`` runs the console script ``carla-gym-<command>`` of this environment
(found through `importlib.metadata.entry_points`), so packages above the library add commands
without the library importing them: the comparison harness installs ``carla-gym-compare``
(``agents.compare:main``), which makes ``carla-gym compare``.
"""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint, entry_points

PREFIX = "carla-gym-"
"""Console scripts named ``carla-gym-<command>`` are ``carla-gym <command>``."""


def commands() -> dict[str, EntryPoint]:
    """The installed ``carla-gym-<command>`` console scripts by command, sorted by name."""
    found = {ep.name.removeprefix(PREFIX): ep for ep in entry_points(group="console_scripts")
             if ep.name.startswith(PREFIX)}
    return dict(sorted(found.items()))


def usage() -> str:
    """The usage text: ``serve`` and every installed command."""
    lines = ["usage: carla-gym serve [--host HOST] [--port PORT] [--max-sessions N] [--scenario NAME] "
             "[--session-timeout S] [--web]"]
    lines += [f"       carla-gym {name} [options] (carla-gym {name} --help lists every option)" for name in commands()]
    return "\n".join(lines)


USAGE = usage()


def main(argv: list[str] | None = None) -> None:
    """Dispatch ``carla-gym <command>``: ``serve``, or the console script ``carla-gym-<command>``.

    Raises:
        SystemExit: With the command's exit code; with the usage (no command) or a message listing
            the valid commands (an unknown one).
    """
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.exit(USAGE)
    if argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    if argv[0] == "serve":
        from carla_gym.hints import exit_without_extras

        exit_without_extras("server")
        from carla_gym.server.cli import main as serve

        serve(argv[1:])
        return
    scripts = commands()
    if argv[0] not in scripts:
        hint = ("; the comparison harness installs carla-gym-compare: if this is an install of an earlier version, "
                "install the project again (pip install -e .)" if argv[0] == "compare" else "")
        sys.exit(f"carla-gym: unknown command {argv[0]!r}; valid: {', '.join(['serve', *scripts])}{hint}")
    # run the console script in this process, as its own command line shows it (usage and hints)
    saved = sys.argv
    sys.argv = [f"carla-gym {argv[0]}", *argv[1:]]
    try:
        sys.exit(scripts[argv[0]].load()())
    finally:
        sys.argv = saved


if __name__ == "__main__":
    main()
