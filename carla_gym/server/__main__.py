"""``python -m carla_gym.server``: the same command line as ``carla-gym serve`` (`carla_gym.server.cli.main`)."""

from carla_gym.server.cli import main

main()
