"""The environment of a ``train_sb3.py`` run: one rule for training, its evaluation and the comparison harness.

``train_sb3.py`` stores the `CarlaTrolley-v0` keyword arguments it trained with in the run's
``config.json`` (``"env_kwargs"``); `acting_env_kwargs` turns them into the env a trained model
acts in (the same observations and actions; the upstream rubric as reward), which the run's own
evaluation and ``agents.compare sb3:<dir>`` both use.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

SCRIPT = "train_sb3.py"
"""The ``"script"`` entry of a run's config.json."""
TRAINING_ONLY = ("scenario", "reward_frame_size")
"""Env settings that do not change what a model sees or does: the scenarios (set per episode when
acting) and the size of the CLIP reward camera's frame."""


def env_kwargs_for(settings: Mapping) -> dict:
    """`CarlaTrolley-v0` keyword arguments of a run with these ``train_sb3.py`` settings.

    Args:
        settings: ``train_sb3.Args`` fields (a dict, e.g. a config.json's ``"args"``): ``scenario``,
            ``action_mode`` (resolved), ``ticks_per_action``, ``policy``, ``reward_mode``, ``clip``
            and ``preset``.

    Returns:
        The keyword arguments (the backend is not among them: `carla_gym.sb3.envs.make_venv` sets
        it). ``--clip`` adds the reward camera's ``reward_frame_size`` (VLM-RL's 517 px for
        ``vlm-rl``, CLIP's 224 px input otherwise); the ``vlm-rl`` preset with control actions adds
        VLM-RL's steering smoothing (0.75, VLM-RL config), which adds the applied steer to the
        state vector.
    """
    kwargs = dict(scenario=list(settings["scenario"]), action_mode=settings["action_mode"],
                  ticks_per_action=settings["ticks_per_action"],
                  observation_mode="state" if settings["policy"] == "MlpPolicy" else "dict",
                  reward_mode=settings.get("reward_mode", "rubric"))
    if settings.get("clip", "none") != "none":
        from carla_gym.reward.encoder import FRAME_SIZES

        kwargs["reward_frame_size"] = FRAME_SIZES["vlm_rl" if settings["clip"] == "vlm-rl" else "openclip"]
    if settings.get("preset") == "vlm-rl" and settings["action_mode"] == "control":
        from carla_gym.envs.spaces import VLM_RL_STEER_SMOOTHING

        kwargs["steer_smoothing"] = VLM_RL_STEER_SMOOTHING
    return kwargs


def acting_env_kwargs(train_kwargs: Mapping) -> dict:
    """The keyword arguments of the env a model trained with ``train_kwargs`` acts in.

    Everything that shapes observations and actions is kept (action and observation mode, ticks
    per action, image size and view, steering smoothing, ...); `TRAINING_ONLY` settings are
    dropped and the reward is the upstream rubric.
    """
    kwargs = {key: value for key, value in train_kwargs.items() if key not in TRAINING_ONLY}
    kwargs["reward_mode"] = "rubric"
    return kwargs


def read_config(run_dir: str | os.PathLike) -> dict | None:
    """The config.json of a ``train_sb3.py`` run in ``run_dir``, or None if it is not one.

    A run is recognised by ``"script": "train_sb3.py"`` or, in runs written before that entry,
    by ``"args"`` holding ``algo`` and ``policy``.
    """
    try:
        config = json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    args = config.get("args")
    if config.get("script", SCRIPT) != SCRIPT or not isinstance(args, dict) or not {"algo", "policy"} <= set(args):
        return None
    return config


def run_env_kwargs(config: Mapping) -> dict:
    """The training env keyword arguments of a run: as stored, else rebuilt from its arguments (older runs)."""
    stored = config.get("env_kwargs")
    return dict(stored) if stored is not None else env_kwargs_for(config["args"])
