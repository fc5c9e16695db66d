"""Embedded CARLA-scenario simulator: pure Python/numpy, no Gymnasium, no GPU.

Where to find each rule of the simulator:

* `constants`  -- every physical constant and its source.
* `kinematics` -- the ego vehicle's motion (kinematic bicycle model), written once for
  scalars and numpy batches.
* `control`    -- what each action does to the persistent vehicle controls; lane keeping,
  lane change and cruise controllers.
* `road`       -- the straight multi-lane road: lanes, lane ids, road departure.
* `collision`  -- swept ego-versus-walker collision test.
* `catalogue`  -- the scenario data (trolley micro-benchmarks, action-bias aliases).
* `scenarios`  -- scenario-name parsing and the resolved `ScenarioSpec`.
* `generated`  -- this project's generated layouts (``trolley_generated_train``/``_test``), drawn from a seed.
* `outcomes`   -- candidate policies rolled out in the simulator: their outcomes and the best one.
* `rules`      -- trolley action classification, termination, rewards and rubric.
* `physics`    -- one tick of trolley worlds over arrays: the state, the tool calls' effect, the tick.
* `world`      -- one episode: state, `apply(action)`, `tick()` (the driver of one `physics` world).
* `batch`      -- `TrolleyBatch`: N trolley worlds in numpy arrays, stepped together.
* `decision`   -- one decision: a tool call, then n ticks, rewards summed (`decide`).
* `snapshot`   -- `Snapshot`, what a simulator reports after a reset or step, and its wire form.
* `describe`   -- text for language models.
* `render`     -- the numpy front camera and bird's-eye view.
* `validate`   -- the shared "number in a range" input check.

The navigation side (towns, traffic and the navigation episode):

* `town`       -- road networks as arrays, the eight named towns, routing and town rendering.
* `traffic`    -- NPC vehicles and walkers as arrays: IDM car following, lanes, swept collisions.
* `agents`     -- CARLA's navigation agents over arrays: PID controllers, local planner, behaviour agents.
* `navigation` -- navigation episodes (maze, free roam, VLM-RL's routes): scenarios, world, rules, text.
"""

import sys as _sys
from pathlib import Path as _Path


def _shadowed_package_message(package) -> str:
    """What to do when ``import carla_gym`` found a folder without ``__init__.py`` (a namespace package).

    An install that reaches the package through an import hook (a setuptools editable install without
    pyproject's ``package-dir``) is asked only after Python's search of `sys.path`; a folder named
    ``carla_gym`` there (a clone of this project, in the folder Python started in or the script's
    folder) wins as a namespace package.
    Its subpackages still import through the hook, but the package's ``__init__.py`` never runs, so
    ``gymnasium.make("CarlaTrolley-v0")`` would fail with "Environment CarlaTrolley doesn't exist".
    """
    folders = ", ".join(str(p) for p in getattr(package, "__path__", ())) or "a folder named carla_gym"
    installed = _Path(__file__).resolve().parents[1]
    return (f"import carla_gym found the folder {folders}, which has no __init__.py (a clone of this project "
            f"named carla_gym, in the folder Python started in or in the script's folder), instead of the "
            f"package {installed}; start Python in another folder (inside the clone works too) or rename the "
            "clone folder (e.g. git clone <url> carla_gym_repo)")


_package = _sys.modules.get("carla_gym")
if _package is not None and getattr(_package, "__file__", None) is None:  # a namespace package: see the function
    raise ImportError(_shadowed_package_message(_package))

from carla_gym.sim.scenarios import ScenarioSpec, resolve_scenario, scenario_names  # noqa: E402
from carla_gym.sim.world import EpisodeFinishedError, ToolCall, World  # noqa: E402

__all__ = [
    "EpisodeFinishedError",
    "ScenarioSpec",
    "ToolCall",
    "World",
    "resolve_scenario",
    "scenario_names",
]
