"""Load a run directory written by ``train_sb3.py`` as a policy for the comparison harness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


class SB3Policy:
    """A trained PPO or SAC model acting deterministically.

    Args:
        run_dir: Directory with ``config.json`` and ``model.zip`` (train_sb3.py's output).

    Attributes:
        env_kwargs: `CarlaTrolley-v0` settings the model was trained with (action mode,
            observation mode, ticks per action).

    Raises:
        FileNotFoundError: No ``config.json`` or ``model.zip`` in ``run_dir``.
        carla_gym.hints.MissingExtraError: Without the ``[sb3]`` extra (names its install command).
    """

    def __init__(self, run_dir: str | Path) -> None:
        from carla_gym.hints import needs_extra

        with needs_extra("sb3"):
            from stable_baselines3 import PPO, SAC

        run = Path(run_dir)
        for name in ("config.json", "model.zip"):
            if not (run / name).is_file():
                raise FileNotFoundError(f"{run / name} not found: sb3:<dir> takes a run directory written by "
                                        "train_sb3.py (it needs config.json and the final model.zip)")
        args = json.loads((run / "config.json").read_text())["args"]
        self.model = (PPO if args["algo"] == "ppo" else SAC).load(run / "model.zip", device="cpu")
        self.env_kwargs = {
            "action_mode": args["action_mode"], "ticks_per_action": args["ticks_per_action"],
            "observation_mode": "state" if args["policy"] == "MlpPolicy" else "dict",
        }

    def act(self, observation, info: dict):
        """The model's deterministic action (an int for tool actions, a float32 array for control)."""
        action, _ = self.model.predict(observation, deterministic=True)
        return int(action) if np.ndim(action) == 0 else np.asarray(action, dtype=np.float32)
