"""``python -m carla_gym.server``: run the OpenEnv CARLA server (see `carla_gym.openenv.server`)."""

from carla_gym.openenv.server import main

if __name__ == "__main__":
    main()
