"""A ``train_sb3.py`` run directory: its environment, its config.json, and whether and where it resumes.

``train_sb3.py`` stores the `CarlaTrolley-v0` keyword arguments it trained with in the run's
``config.json`` (``"env_kwargs"``); `acting_env_kwargs` turns them into the env a trained model
acts in (the same observations and actions; the upstream rubric as reward), which the run's own
evaluation and ``agents.compare sb3:<dir>`` both use.

Resuming (``--resume DIR``) is decided here in one place: `resume_point` reads the run's
settings, hyperparameters and newest checkpoint (or says why it cannot), `resumable` says
whether a refusal may offer ``--resume``, and `output_dir_problem` refuses to write into a
folder that holds something else or a run without ``--overwrite``. A run is complete, and
cannot be resumed, once its ``eval.json`` exists (written last, `COMPLETE`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from carla_gym.sim.scenarios import GENERATED_NAMES, is_generated

SCRIPT = "train_sb3.py"
"""The ``"script"`` entry of a run's config.json."""
CONFIG_FORMAT = 2
"""Version of config.json: 2 stores typed hyperparameters (`carla_gym.sb3.presets.encode_hyperparameters`)."""
COMPLETE = "eval.json"
"""The file a finished run has (the final evaluation's summary, written last): such a run is not resumed."""
TRAINING_ONLY = ("scenario", "reward_frame_size")
"""Env settings that do not change what a model sees or does: the scenarios (set per episode when
acting) and the size of the CLIP reward camera's frame."""


_SPLIT_NAMES = {split: name for name, split in GENERATED_NAMES.items()}
HELD_OUT = {_SPLIT_NAMES["train"]: _SPLIT_NAMES["test"]}
"""Training scenario -> the scenario a run evaluates on unless told otherwise: the generated family's train split is
evaluated on its held-out test split (the test split is what results report); other scenarios
evaluate on themselves."""


def default_eval_scenarios(scenarios: Sequence[str]) -> list[str]:
    """The evaluation scenarios of a run trained on ``scenarios``: each mapped by `HELD_OUT` (order kept, no repeats).

    >>> default_eval_scenarios(["trolley_generated_train", "trolley_micro_escape_exists"])
    ['trolley_generated_test', 'trolley_micro_escape_exists']
    """
    return list(dict.fromkeys(HELD_OUT.get(name, name) for name in scenarios))


def all_generated(scenarios: Sequence[str]) -> bool:
    """Whether every one of ``scenarios`` is generated: ``--reward-mode auto`` is then physical.

    Generated: `carla_gym.sim.scenarios.is_generated` (the family ``trolley_generated``, this project's own).

    >>> all_generated(["trolley_generated_train"]), all_generated(["trolley_generated_test", "trolley_micro_cut_in"])
    (True, False)
    """
    return bool(scenarios) and all(is_generated(name) for name in scenarios)


NAVIGATION = "CarlaNavigation-v0"
"""The navigation env id (``train_sb3.py --env``); a run without an ``env`` setting is a `CarlaTrolley-v0` run."""


def is_navigation(settings: Mapping) -> bool:
    """Whether a run with these ``train_sb3.py`` settings trains on `CarlaNavigation-v0`."""
    return settings.get("env", "CarlaTrolley-v0") == NAVIGATION


def parse_route(route: str) -> str | list[int]:
    """``--route`` as ``scenario_config["route"]``: ``"train"``, ``"eval"``, or ``"S,E"`` -> ``[S, E]``.

    Raises:
        ValueError: Anything else (names the value and the choices).

    Examples:
        >>> parse_route("train"), parse_route("48,21")
        ('train', [48, 21])
    """
    if route in ("train", "eval"):
        return route
    parts = route.split(",")
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        return [int(p) for p in parts]
    raise ValueError(f"--route {route}: choose train, eval or two spawn indices START,END (e.g. 48,21)")


def navigation_kwargs(settings: Mapping) -> dict:
    """`CarlaNavigation-v0` keyword arguments of a run with these (resolved) ``train_sb3.py`` settings.

    ``--clip`` adds ``reward_frame_size`` (VLM-RL's 517 px for ``vlm-rl``, 224 otherwise), which
    `carla_gym.sb3.envs.make_venv` gives to the `carla_gym.reward.nav.NavRewardCamera` wrapper.
    """
    kwargs = dict(scenario=list(settings["scenario"]),
                  scenario_config={"traffic": int(settings["traffic"]), "route": parse_route(settings["route"])},
                  action_mode=settings["action_mode"], observation_mode=settings["observation_mode"],
                  reward_mode=settings["reward_mode"], steer_smoothing=float(settings["steer_smoothing"]),
                  ticks_per_action=int(settings["ticks_per_action"]))
    if settings.get("clip", "none") != "none":
        from carla_gym.reward.encoder import FRAME_SIZES

        kwargs["reward_frame_size"] = FRAME_SIZES["vlm_rl" if settings["clip"] == "vlm-rl" else "openclip"]
    return kwargs


def env_kwargs_for(settings: Mapping) -> dict:
    """`CarlaTrolley-v0` keyword arguments of a run with these ``train_sb3.py`` settings.

    A `CarlaNavigation-v0` run (`is_navigation`) gets `navigation_kwargs` instead.

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
    if is_navigation(settings):
        return navigation_kwargs(settings)
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
    dropped and the reward is the upstream rubric. A `CarlaNavigation-v0` run (``scenario_config`` among its
    keyword arguments) keeps its scenario and reward (the evaluation reads ``info["outcome"]``) and drops
    only ``reward_frame_size``.
    """
    if "scenario_config" in train_kwargs:
        return {key: value for key, value in train_kwargs.items() if key != "reward_frame_size"}
    kwargs = {key: value for key, value in train_kwargs.items() if key not in TRAINING_ONLY}
    kwargs["reward_mode"] = "rubric"
    return kwargs


def write_config(run_dir: Path, settings: Mapping, env_kwargs: Mapping, hyperparameters: Mapping) -> None:
    """Write the run's config.json (atomically): what `read_config`, `resume_point` and ``sb3:<dir>`` read.

    Args:
        run_dir: The run directory (existing).
        settings: The resolved ``train_sb3.py`` arguments (``"args"``).
        env_kwargs: The `CarlaTrolley-v0` keyword arguments it trains with (``"env_kwargs"``).
        hyperparameters: The SB3 keyword arguments, stored typed (`carla_gym.sb3.presets.encode_hyperparameters`).
    """
    from carla_gym.io import write_json_atomic
    from carla_gym.sb3.presets import encode_hyperparameters

    write_json_atomic(run_dir / "config.json", {"script": SCRIPT, "format": CONFIG_FORMAT, "args": dict(settings),
                                                "env_kwargs": dict(env_kwargs),
                                                "hyperparameters": encode_hyperparameters(dict(hyperparameters))})


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


def resumable(run: Path, config: Mapping) -> bool:
    """Whether ``--resume run`` would continue the run: unfinished, this config format, a checkpoint that reads back."""
    from carla_gym.sb3.checkpoint import latest_checkpoint

    return (not (run / COMPLETE).exists() and config.get("format") == CONFIG_FORMAT
            and latest_checkpoint(run / "checkpoints") is not None)


def output_dir_problem(out: Path, overwrite: bool, overwrite_command: str, resume_command: str) -> str | None:
    """Why a new run may not write into ``out`` (None: it may), as the message to exit with.

    A file is refused; so is a non-empty folder that is not a ``train_sb3.py`` run (even with
    ``--overwrite``: nothing else is ever replaced); a run is replaced only with ``--overwrite``:
    the refusal prints ``overwrite_command`` (the command given, plus ``--overwrite``) and, when
    the run is `resumable`, ``resume_command``.
    """
    if out.exists() and not out.is_dir():
        return f"--output-dir {out}: exists and is not a directory"
    if not out.exists() or not any(out.iterdir()):
        return None
    config = read_config(out)
    if config is None:
        what = f"--overwrite {out}: refusing to replace a folder that" if overwrite else f"{out} is not empty and"
        return (f"{what} is not a train_sb3.py run directory (no config.json of a train_sb3.py run); choose another "
                "--output-dir")
    if overwrite:
        return None
    hint = f"; or continue it with: {resume_command}" if resumable(out, config) else ""
    return f"{out} is not empty; replace the run in it with: {overwrite_command}{hint}; or choose another --output-dir"


@dataclass(frozen=True)
class ResumePoint:
    """Where ``--resume`` continues a run.

    Attributes:
        settings: The run's ``train_sb3.py`` arguments (config.json's ``"args"``).
        hyperparameters: Its typed hyperparameters (decoded, `carla_gym.sb3.presets.decode_hyperparameters`).
        checkpoint: The newest checkpoint that reads back (`carla_gym.sb3.checkpoint.latest_checkpoint`);
            `carla_gym.sb3.checkpoint.resume` loads it.
    """

    settings: dict
    hyperparameters: dict
    checkpoint: Path


def resume_point(run: Path, flags: Sequence[str], fields: Collection[str]) -> ResumePoint:
    """Read what ``train_sb3.py --resume run`` needs, or refuse with the reason and the command that works.

    Args:
        run: The run directory given to ``--resume``.
        flags: The other flags given (``--name`` tokens); only ``--progress-bar`` may come with ``--resume``.
        fields: The names of ``train_sb3.py``'s arguments; a stored argument outside them means
            another version wrote the run.

    Raises:
        ValueError: Other flags; no config.json; one of another version or unreadable; a
            complete run; no checkpoint that reads back (each message names the fix).
    """
    from carla_gym.sb3.checkpoint import latest_checkpoint
    from carla_gym.sb3.presets import decode_hyperparameters

    extra_flags = sorted({flag.partition("=")[0] for flag in flags} - {"--resume", "--progress-bar"})
    if extra_flags:
        raise ValueError(f"--resume takes every setting from {run / 'config.json'}; remove {extra_flags} (to change "
                         "settings, start a new run)")
    try:
        config = json.loads((run / "config.json").read_text())
        if config.get("format") != CONFIG_FORMAT:
            raise KeyError(f"format {config.get('format')!r}, this version reads {CONFIG_FORMAT}")
        settings = dict(config["args"])
        unknown = sorted(set(settings) - set(fields))
        if unknown:
            raise TypeError(f"arguments {unknown} are not this version's")
        hyper = decode_hyperparameters(config["hyperparameters"])
    except (FileNotFoundError, NotADirectoryError):
        raise ValueError(f"--resume {run}: no config.json there; is it a run directory written by train_sb3.py?"
                         ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(f"--resume {run}: config.json is unreadable or from another version ({exc!r}); start a new "
                         "run: add --overwrite to its command, or choose another --output-dir") from None
    if (run / COMPLETE).exists():
        raise ValueError(f"--resume {run}: this run is complete ({COMPLETE} exists); to train more, start a new run "
                         "(another --output-dir, or --overwrite to replace this one)")
    checkpoint = latest_checkpoint(run / "checkpoints")
    if checkpoint is None:
        raise ValueError(f"--resume {run}: no complete checkpoint in {run / 'checkpoints'}; start the run again: add "
                         "--overwrite to its command (config.json lists its settings), or choose another --output-dir")
    return ResumePoint(settings, hyper, checkpoint)
