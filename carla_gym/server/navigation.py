"""The wire side of the navigation families (``maze_navigation``, ``free_roam*``) for `CarlaEnvironment`.

`carla_gym.sim.navigation.episode.NavEpisode` runs the episode; this module turns it into upstream's
wire objects (openenv_carla.md sections 5.1, 5.3, 5.4): the observation, the state's
``scenario_data`` and the front-camera JPEG. `CarlaEnvironment` picks a `NavEpisode` instead of the
trolley `carla_gym.sim.world.World` when `is_nav_name` holds for the scenario name.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
from PIL import Image

from carla_gym.openenv.models import CarlaObservation
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.navigation.scenarios import is_nav_name, resolve_nav_scenario
from carla_gym.sim.scenarios import resolve_scenario
from carla_gym.sim.town.render import render_town

__all__ = ["is_nav_name", "check_scenario", "nav_observation", "nav_scenario_data", "nav_image"]


def check_scenario(name: str, config: dict | None = None) -> Any:
    """Resolve a scenario name of any family (trolley or navigation) with its overrides.

    Returns:
        The trolley `carla_gym.sim.scenarios.ScenarioSpec` or the navigation
        `carla_gym.sim.navigation.scenarios.NavSpec`.

    Raises:
        ValueError: An unknown name or invalid overrides, naming the value and the valid choices.
    """
    return resolve_nav_scenario(name, config) if is_nav_name(name) else resolve_scenario(name, config)


def nav_observation(episode: NavEpisode, scenario_name: str, step_number: int, reward: float | None,
                    rubric: float | None) -> CarlaObservation:
    """Upstream's navigation observation (section 5.1) from `NavEpisode.observation`.

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


def nav_scenario_data(episode: NavEpisode) -> dict[str, Any]:
    """The navigation keys of ``CarlaState.scenario_data``.

    Returns:
        ``goal_location`` [x, y, z] [m] (what an autopilot client passes to ``set_destination``),
        ``route_length`` (planned route from the start to the goal at reset [m]), ``weather`` (the
        episode's preset, ``"random"`` resolved), ``outcome`` (`NavEpisode.outcome` once done, else None).
    """
    data = episode.observation()["scenario_data"]
    return {"goal_location": list(data["goal_location"]), "route_length": float(data["route_length"]),
            "weather": data["weather"], "outcome": data["outcome"]}


def nav_image(episode: NavEpisode) -> str:
    """The ego's front camera (`render_town` ``"front"``) as a base64 JPEG at the scenario's camera settings.

    Size, field of view and JPEG quality come from ``episode.spec.camera`` (``camera_width``,
    ``camera_height``, ``camera_fov``, ``jpeg_quality``; defaults 640 x 360, 90 deg, 75 as upstream).
    """
    world, camera = episode.world, episode.spec.camera
    walkers = np.asarray(world.walkers.xy, dtype=np.float64).reshape(-1, 2)
    frame = render_town(world.town, world.vehicles, walkers, world.lights, view="front", width=camera.width,
                        height=camera.height, fov=camera.fov)
    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG", quality=camera.jpeg_quality)
    return base64.b64encode(buffer.getvalue()).decode("ascii")
