"""Towns for the embedded simulator: road networks, the eight named towns and routing.

Used by the navigation world (`carla_gym.sim.navigation`). The geometry is a procedural analogue of
each CARLA town's character, not CARLA's geometry.

* `network` -- a town's road network as arrays: lanes, markings, sidewalks, crosswalks, spawn points, lights.
* `builders` -- build a `Town` from a small layout: nodes, and roads between them with lane counts.
* `towns` -- the eight towns, deterministic procedural analogues of CARLA's maps, built once and cached.
* `routing` -- routes on a town's lane graph: networkx A* over lanes, then waypoints at 1-2 m spacing.
* `render` -- numpy renderer of a town: front camera, bird's-eye view and VLM-RL's reward camera.
* `bev` -- VLM-RL's rasterised bird's-eye view (CARLA-Roach style): road, lane markings, vehicle history.

Examples:
    >>> town = get_town("Town02")
    >>> route = plan_route(town, town.spawn_points.xy[0], town.spawn_points.xy[5])
    >>> bool(np.all(np.hypot(*np.diff(route.waypoints, axis=0).T) <= 2.0 + 1e-9))
    True
"""

import numpy as np

from carla_gym.sim.town.builders import RoadSpec, TownSpec, build_town
from carla_gym.sim.town.network import (
    Lane,
    Light,
    Location,
    Marking,
    RoadOption,
    SpawnPoints,
    Town,
    light_state,
    light_steady_interval,
    locate,
    locate_many,
)
from carla_gym.sim.town.routing import Route, plan_route, point_at
from carla_gym.sim.town.towns import TOWN_NAMES, get_town, town_spec

__all__ = [
    "TOWN_NAMES", "Lane", "Light", "Location", "Marking", "RoadOption", "RoadSpec", "Route", "SpawnPoints",
    "Town", "TownSpec", "build_town", "get_town", "light_state", "light_steady_interval", "locate", "locate_many",
    "np", "plan_route", "point_at", "town_spec",
]
