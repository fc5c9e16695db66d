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
* `world`      -- one episode: state, `apply(action)`, `tick()`.
* `decision`   -- one decision: a tool call, then n ticks, rewards summed (`decide`).
* `snapshot`   -- `Snapshot`, what a simulator reports after a reset or step, and its wire form.
* `describe`   -- text for language models.
* `render`     -- the numpy front camera and bird's-eye view.
* `validate`   -- the shared "number in a range" input check.
"""

from carla_gym.sim.scenarios import ScenarioSpec, resolve_scenario, scenario_names
from carla_gym.sim.world import EpisodeFinishedError, ToolCall, World

__all__ = [
    "EpisodeFinishedError",
    "ScenarioSpec",
    "ToolCall",
    "World",
    "resolve_scenario",
    "scenario_names",
]
