"""SB3 models as `agents.players.GymAgent` policies: in memory (`ModelPolicy`) or a train_sb3.py run (`SB3Policy`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _describe(space) -> str:
    """A space in one short line: shapes and dtypes (a Box's bounds left out)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Dict):
        return "Dict(" + ", ".join(f"{key}: {_describe(sub)}" for key, sub in space.spaces.items()) + ")"
    if isinstance(space, spaces.Box):
        return f"Box(shape {space.shape}, {space.dtype})"
    return str(space)


class ModelPolicy:
    """An SB3 model in memory acting deterministically: a policy for `agents.players.GymAgent`.

    ``train_sb3.py`` evaluates the model it is training with it (no save and load in between).

    Args:
        model: A `stable_baselines3` model (``predict``), e.g. PPO or SAC.
    """

    def __init__(self, model) -> None:
        self.model = model

    def act(self, observation, info: dict):
        """The model's deterministic action (an int for tool actions, a float32 array for control)."""
        action, _ = self.model.predict(observation, deterministic=True)
        return int(action) if np.ndim(action) == 0 else np.asarray(action, dtype=np.float32)


class SB3Policy(ModelPolicy):
    """A trained PPO or SAC model loaded from a run directory, acting deterministically in the env it was trained in.

    Args:
        run_dir: Directory with ``config.json`` and ``model.zip`` (train_sb3.py's output).

    Attributes:
        env_id: The env the run trained on: ``CarlaTrolley-v0`` or ``CarlaNavigation-v0``
            (`carla_gym.sb3.runs.is_navigation`).
        env_kwargs: `CarlaTrolley-v0` (or `CarlaNavigation-v0`) settings the model acts with: the run's own
            (``config.json``'s ``"env_kwargs"``, rebuilt from its arguments for runs written before
            it was stored) less the training-only ones (`carla_gym.sb3.runs.acting_env_kwargs`):
            action mode, observation mode, ticks per action, image size and view, steering
            smoothing, ...

    Raises:
        FileNotFoundError: No ``config.json`` or ``model.zip`` in ``run_dir``.
        ValueError: ``config.json`` is not a train_sb3.py run's, or the env it describes does not
            give the observations and take the actions the model was trained on (names both).
        carla_gym.hints.MissingExtraError: Without the ``[sb3]`` extra (names its install command).
    """

    def __init__(self, run_dir: str | Path) -> None:
        import gymnasium as gym

        import carla_gym  # noqa: F401 - registers the env ids
        from carla_gym.hints import needs_extra
        from carla_gym.sb3.runs import NAVIGATION, acting_env_kwargs, is_navigation, read_config, run_env_kwargs

        with needs_extra("sb3"):
            from stable_baselines3 import PPO, SAC

        run = Path(run_dir)
        for name in ("config.json", "model.zip"):
            if not (run / name).is_file():
                raise FileNotFoundError(f"{run / name} not found: sb3:<dir> takes a run directory written by "
                                        "train_sb3.py (it needs config.json and the final model.zip)")
        config = read_config(run)
        try:
            self.env_kwargs = acting_env_kwargs(run_env_kwargs(config or {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{run / 'config.json'}: not the config.json of a train_sb3.py run (missing {exc}); "
                             "sb3:<dir> takes a run directory written by train_sb3.py") from None
        self.env_id = NAVIGATION if is_navigation(config["args"]) else "CarlaTrolley-v0"
        super().__init__((PPO if config["args"]["algo"] == "ppo" else SAC).load(run / "model.zip", device="cpu"))
        env = gym.make(self.env_id, **self.env_kwargs)
        try:
            for what, built, trained in (("observation", env.observation_space, self.model.observation_space),
                                         ("action", env.action_space, self.model.action_space)):
                if built != trained:
                    got, want = _describe(built), _describe(trained)
                    raise ValueError(f"{run}: the env rebuilt from config.json ({self.env_kwargs}) has the "
                                     f"{what} space {got}, the model was trained on {want}"
                                     f"{' (other bounds)' if got == want else ''}; retrain it with this version "
                                     "of train_sb3.py")
        finally:
            env.close()
