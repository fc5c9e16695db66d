"""The wire side of the navigation families (``maze_navigation``, ``free_roam*``) for `CarlaEnvironment`.

`carla_gym.sim.navigation.episode.NavEpisode` runs the episode; this module turns it into upstream's
wire objects (upstream's ``models.py`` and ``server/carla_environment.py``): the observation, the state's
``scenario_data`` and the front-camera JPEG. `CarlaEnvironment` picks a `NavEpisode` instead of the
trolley `carla_gym.sim.world.World` when `is_nav_name` holds for the scenario name.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from PIL import Image

from carla_gym.llm.nav_tools import NavToolEnv
from carla_gym.llm.prompts import nav_scene_prompt
from carla_gym.llm.tools import tool_functions
from carla_gym.openenv.models import CarlaObservation
from carla_gym.sim.navigation.describe import observation_text
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.navigation.scenarios import is_nav_name
from carla_gym.sim.town.render import render_world

__all__ = ["is_nav_name", "nav_prompt", "nav_observation", "nav_scenario_data", "nav_image"]


def nav_observation(episode: NavEpisode, scenario_name: str, step_number: int, reward: float | None,
                    rubric: float | None) -> CarlaObservation:
    """Upstream's navigation observation (upstream's ``models.py``) from `NavEpisode.observation`.

    Args:
        episode: The running episode.
        scenario_name: The name the client reset with.
        step_number: Wire steps of the episode so far (``capture_image`` not counted).
        reward: The step's raw reward (None after a reset or ``capture_image``).
        rubric: The step's rubric reward (None likewise).
    """
    obs = episode.observation()
    return CarlaObservation(
        scene_description=obs["scene_description"], speed_kmh=obs["speed_kmh"], location=obs["location"],
        rotation=obs["rotation"], goal_distance=obs["goal_distance"], goal_direction=obs["goal_direction"],
        current_lane=obs["current_lane"], nearby_actors=obs["nearby_actors"],
        collision_detected=obs["collision_detected"], collided_with=obs["collided_with"],
        scenario_name=scenario_name, simulation_time=obs["simulation_time"], step_number=step_number,
        done_reason=obs["done_reason"], rubric_reward=rubric, done=obs["done"], reward=reward)


def nav_prompt(episode: NavEpisode) -> str:
    """The scene prompt `carla_gym.llm.nav_tools.NavToolEnv.reset` gives for ``episode`` (fixed for the episode).

    Its scenario and the adapter's tools, by name, as `carla_gym.llm.tools.tool_methods` lists them.
    """
    return nav_scene_prompt(episode.spec, sorted(tool_functions(NavToolEnv), key=lambda f: f.__name__))


def nav_scenario_data(episode: NavEpisode, scene_prompt: str) -> dict[str, Any]:
    """The navigation keys of ``CarlaState.scenario_data``.

    Returns:
        ``goal_location`` [x, y, z] [m] (what an autopilot client passes to ``set_destination``),
        ``route_length`` (planned route from the start to the goal at reset [m]), ``weather`` (the
        episode's preset, ``"random"`` resolved), ``outcome`` (`NavEpisode.outcome` once done, else None);
        and what a language model is shown, as the TRL adapter (`carla_gym.llm.nav_tools.NavToolEnv`) shows
        it: ``scene_prompt`` (the given `nav_prompt`, built once per episode) and ``description`` (the current
        per-decision text, `carla_gym.sim.navigation.describe.observation_text`), as the trolley families'
        snapshot carries them.
    """
    obs = episode.observation()
    data = obs["scenario_data"]
    return {"goal_location": list(data["goal_location"]), "route_length": float(data["route_length"]),
            "weather": data["weather"], "outcome": data["outcome"], "scene_prompt": scene_prompt,
            "description": observation_text(obs)}


def nav_image(episode: NavEpisode) -> str:
    """The ego's front camera (`render_town` ``"front"``) as a base64 JPEG at the scenario's camera settings.

    Size, field of view and JPEG quality come from ``episode.spec.camera`` (``camera_width``,
    ``camera_height``, ``camera_fov``, ``jpeg_quality``; defaults 640 x 360, 90 deg, 75 as upstream).
    """
    world, camera = episode.world, episode.spec.camera
    frame = render_world(world, view="front", width=camera.width, height=camera.height, fov=camera.fov)
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG", quality=camera.jpeg_quality)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
