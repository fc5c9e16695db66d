"""Navigation scenario names and configs: ``maze_navigation`` and ``free_roam[_<Map>[_v<N>][_p<M>]]``.

Accepted names (upstream's ``server/benchmark_scenarios/__init__.py``, with map names containing ``_`` accepted):

| Pattern                                  | Family          | Notes                                          |
|------------------------------------------|-----------------|------------------------------------------------|
| ``maze_navigation``                      | maze_navigation | goal ~150 m of route away, 5 m radius, 200 steps |
| ``free_roam``                            | free_roam       | upstream defaults (no traffic), map Town10HD_Opt |
| ``free_roam_<Map>[_v<N>][_p<M>]``        | free_roam       | N NPC vehicles, M walkers, ``_v`` before ``_p`` |

``<Map>`` is one of `MAP_NAMES` (``Town10HD_Opt`` included: upstream's regex forbids ``_`` in the
map name), N in 0..`MAX_NPC_VEHICLES`, M in 0..`MAX_PEDESTRIANS`. ``scenario_config`` may
override every field of upstream's ``FreeRoamConfig`` / ``MazeConfig`` and of the common
``ScenarioConfig`` (`NAV_OVERRIDE_KEYS`); a key upstream lacks is an error, not silently dropped.

Examples:
    >>> spec = resolve_nav_scenario("free_roam_Town10HD_Opt_v5_p3")
    >>> spec.map_name, spec.num_npc_vehicles, spec.num_pedestrians, spec.success_radius
    ('Town10HD_Opt', 5, 3, 10.0)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.scenarios import WEATHER_PRESETS, CameraConfig, ScenarioSpec, is_generated, resolve_scenario
from carla_gym.sim.town.towns import TOWN_NAMES
from carla_gym.sim.validate import check_config, check_number

MAZE = "maze_navigation"
FREE_ROAM = "free_roam"
NAV_FAMILIES = (MAZE, FREE_ROAM)
"""The two navigation families; each family's bare name is also a scenario name."""

MAP_NAMES = TOWN_NAMES
"""Map names accepted in ``free_roam_<Map>`` and ``map_name`` (the towns package's one list)."""

DEFAULT_MAP = "Town10HD_Opt"
"""Map when none is named: upstream's default and only shipped map (the state's ``town``)."""

MAX_NPC_VEHICLES = 100
"""Largest N in ``_v<N>`` / ``num_npc_vehicles`` (this project's bound: twice the 40-vehicle dense
traffic of VLM-RL's routes, above the 80-vehicle benchmark point)."""

MAX_PEDESTRIANS = 100
"""Largest M in ``_p<M>`` / ``num_pedestrians`` (this project's bound, as `MAX_NPC_VEHICLES`)."""

MAX_ROUTE_DISTANCE = 5000.0
"""Largest route distance [m] for ``route_distance_min/max`` and ``goal_distance`` (this project's bound,
above any route in the towns)."""

MAX_SUCCESS_RADIUS = 100.0
"""Largest ``success_radius`` [m] (this project's bound)."""

MAX_COORDINATE = 100_000.0
"""Largest |coordinate| [m] of ``goal_location`` (this project's bound; towns span a few km at most)."""

RANDOM_WEATHER = "random"
"""Weather value resolved to one of `WEATHER_PRESETS` per episode by `pick_weather` (upstream never resolves
it when given as an override)."""

FREE_ROAM_PRESETS = {"default": (0, 0), "traffic": (5, 3), "heavy": (15, 10)}
"""Upstream's example densities (``num_npc_vehicles``, ``num_pedestrians``): free-roam-default,
-traffic and -heavy (upstream's ``examples/carla_env/config.py``). They are
``scenario_config`` overrides upstream, not names."""

_FREE_ROAM_NAME = re.compile(r"free_roam_([A-Za-z0-9_]+?)(?:_v([0-9]+))?(?:_p([0-9]+))?")

NAME_PATTERNS = (
    MAZE,
    FREE_ROAM,
    f"free_roam_<Map>[_v<N>][_p<M>] with <Map> in {{{', '.join(MAP_NAMES)}}}, N in 0..{MAX_NPC_VEHICLES}, "
    f"M in 0..{MAX_PEDESTRIANS}",
)
"""Human-readable list of the accepted navigation scenario names (used in error messages)."""

_COMMON_KEYS = ("name", "description", "max_steps", "weather", "vehicle_blueprint", "initial_speed_kmh",
                "auto_observe", "idle_ticks", "camera_width", "camera_height", "camera_fov", "jpeg_quality")
NAV_OVERRIDE_KEYS = {
    MAZE: (*_COMMON_KEYS, "goal_distance", "success_radius"),
    FREE_ROAM: (*_COMMON_KEYS, "map_name", "num_npc_vehicles", "num_pedestrians", "success_radius", "random_goal",
                "goal_location", "route_distance_min", "route_distance_max"),
}
"""``scenario_config`` keys per family: upstream's ``ScenarioConfig`` fields plus ``MazeConfig``
(upstream's ``maze.py``) or ``FreeRoamConfig`` (upstream's ``free_roam.py``) fields."""

NAV_IGNORED_KEYS = ("name", "description", "vehicle_blueprint", "auto_observe", "idle_ticks")
"""Common keys checked but without effect here; the reasons are `carla_gym.sim.scenarios.IGNORED_KEYS`."""

DEFAULTS = {
    MAZE: dict(success_radius=5.0, goal_distance=150.0, max_steps=200),
    FREE_ROAM: dict(success_radius=10.0, route_distance_min=100.0, route_distance_max=500.0, max_steps=500),
}
"""Upstream defaults: ``MazeConfig`` success_radius 5 m, goal_distance 150 m, alias max_steps 200
(upstream's ``maze.py``); ``FreeRoamConfig`` success_radius 10 m, route 100-500 m, max_steps 500 (``free_roam.py``)."""


@dataclass(frozen=True)
class NavSpec:
    """A navigation scenario, resolved from its name and ``scenario_config``.

    Attributes:
        name: The scenario name as given.
        family: ``"maze_navigation"`` or ``"free_roam"``.
        map_name: One of `MAP_NAMES`.
        num_npc_vehicles: NPC vehicles, 0..`MAX_NPC_VEHICLES` (0 for the maze).
        num_pedestrians: Walkers, 0..`MAX_PEDESTRIANS` (0 for the maze).
        success_radius: Arrival when the 2D goal distance is below this [m].
        random_goal: Whether the goal is drawn (False when ``goal_location`` is given).
        goal_location: Fixed goal (x, y, z) [m], or None.
        route_distance_min: Free roam: smallest route distance [m] of a drawn goal.
        route_distance_max: Free roam: largest route distance [m] of a drawn goal.
        goal_distance: Maze: route distance [m] of the goal (upstream field, unused there); None for free roam.
        max_steps: Episode length in upstream steps (upstream's ``env_step``):
            each action counts one (``follow_route`` one whatever its ticks; ``capture_image`` none; with
            the ``ticks`` batching each tick one), not ticks.
        weather: One of `WEATHER_PRESETS` or ``"random"`` (see `pick_weather`).
        initial_speed_kmh: Ego speed at reset [km/h].
        camera: Camera settings.
        ignored: ``scenario_config`` keys accepted but without effect, sorted.
        start_spawn: Index of the ego's spawn point, or None to draw it (upstream). Not a ``scenario_config``
            key: the route scenarios of `carla_gym.envs.navigation` set it (VLM-RL starts at a named spawn).
    """

    name: str
    family: str
    map_name: str = DEFAULT_MAP
    num_npc_vehicles: int = 0
    num_pedestrians: int = 0
    success_radius: float = 10.0
    random_goal: bool = True
    goal_location: tuple[float, float, float] | None = None
    route_distance_min: float = 100.0
    route_distance_max: float = 500.0
    goal_distance: float | None = None
    max_steps: int = 500
    weather: str = "ClearNoon"
    initial_speed_kmh: float = 0.0
    camera: CameraConfig = CameraConfig()
    ignored: tuple[str, ...] = ()
    start_spawn: int | None = None


def is_nav_name(name: Any) -> bool:
    """Whether ``name`` belongs to a navigation family (valid or not): ``maze_navigation`` or ``free_roam*``."""
    return isinstance(name, str) and (name == MAZE or name == FREE_ROAM or name.startswith(FREE_ROAM + "_"))


def _bad_name(name: str, why: str) -> ValueError:
    return ValueError(f"Scenario {name!r}: {why}. Valid names: " + "; ".join(NAME_PATTERNS))


def parse_nav_name(name: str) -> dict[str, Any]:
    """Family parameters of a navigation scenario name, before overrides.

    Args:
        name: A scenario name, e.g. ``"free_roam_Town05_v10_p5"``.

    Returns:
        ``family`` and, for ``free_roam_<Map>...``, ``map_name`` and the counts that the name gives.

    Raises:
        ValueError: Not a navigation name, unknown map, or N or M out of range (the message names the
            valid maps and ranges).
        TypeError: ``name`` is not a string.
    """
    if not isinstance(name, str):
        raise TypeError(f"scenario name must be a str, got {type(name).__name__}: {name!r}")
    if name in NAV_FAMILIES:
        return {"family": name}
    match = _FREE_ROAM_NAME.fullmatch(name)
    if match is None:
        raise _bad_name(name, "not a navigation scenario name")
    map_name, n, m = match.groups()
    if map_name not in MAP_NAMES:
        raise _bad_name(name, f"unknown map {map_name!r}, must be one of {', '.join(MAP_NAMES)}")
    params: dict[str, Any] = {"family": FREE_ROAM, "map_name": map_name}
    for key, value, hi, letter in (("num_npc_vehicles", n, MAX_NPC_VEHICLES, "N"),
                                   ("num_pedestrians", m, MAX_PEDESTRIANS, "M")):
        if value is not None:
            if int(value) > hi:
                raise _bad_name(name, f"{letter}={int(value)} ({key}) must be in 0..{hi}")
            params[key] = int(value)
    return params


def _check_bool(key: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{key}={value!r}: must be true or false")
    return bool(value)


def _check_location(value: Any) -> tuple[float, float, float]:
    if not isinstance(value, (list, tuple)) or len(value) not in (2, 3):
        raise ValueError(f"goal_location={value!r}: must be [x, y] or [x, y, z] in metres")
    xyz = [check_number(f"goal_location[{i}]", v, -MAX_COORDINATE, MAX_COORDINATE) for i, v in enumerate(value)]
    return (xyz[0], xyz[1], xyz[2] if len(xyz) == 3 else 0.0)


def check_weather(value: Any) -> str:
    """A ``weather`` value: one of `WEATHER_PRESETS` or ``"random"``.

    Raises:
        ValueError: Naming the value and the valid choices.
    """
    if value != RANDOM_WEATHER and value not in WEATHER_PRESETS:
        raise ValueError(f"weather={value!r}: choose one of {[*WEATHER_PRESETS, RANDOM_WEATHER]}")
    return value


def pick_weather(weather: str, rng: np.random.Generator) -> str:
    """The episode's weather: ``weather`` itself, or for ``"random"`` a preset drawn with ``rng``.

    Upstream resolves ``"random"`` only when given to the constructor and never as an override;
    here it is resolved at every reset, after overrides, from the episode's generator.

    Args:
        weather: A value accepted by `check_weather`.
        rng: The episode's generator (one draw is consumed for ``"random"`` only).

    Returns:
        One of `WEATHER_PRESETS`.

    Raises:
        ValueError: ``weather`` is not valid.
    """
    if check_weather(weather) == RANDOM_WEATHER:
        return WEATHER_PRESETS[int(rng.integers(len(WEATHER_PRESETS)))]
    return weather


def resolve_nav_scenario(name: str, overrides: dict[str, Any] | None = None) -> NavSpec:
    """Resolve a navigation scenario name and optional ``scenario_config`` overrides.

    Differences from upstream (see `carla_gym.sim.navigation.rules.DIFFERENCES`): unknown keys are an
    error; ``goal_location`` alone fixes the goal (upstream also needed ``random_goal: false``) and
    ``random_goal: true`` with a ``goal_location``, or ``random_goal: false`` without one, is refused
    (upstream silently draws a goal); the maze's ``goal_distance`` is honoured (upstream never places a maze goal).

    Args:
        name: A navigation scenario name (see `NAME_PATTERNS`).
        overrides: ``scenario_config``; keys in `NAV_OVERRIDE_KEYS` for the family. Override counts and
            ``map_name`` win over the name's.

    Returns:
        The immutable `NavSpec`.

    Raises:
        ValueError: Bad name (`parse_nav_name`), unknown key, or a value of the wrong type or out of
            range; the message names the field and the valid range.
        TypeError: ``name`` is not a string or ``overrides`` is not a dict.
    """
    params = parse_nav_name(name)
    family = params.pop("family")
    overrides = check_config(overrides)
    allowed = NAV_OVERRIDE_KEYS[family]
    unknown = sorted(set(overrides) - set(allowed), key=repr)
    if unknown:
        raise ValueError(f"scenario_config keys {unknown} are not valid for {family} scenario {name!r}; "
                         f"valid keys: {sorted(allowed)}")
    for key in ("name", "description", "vehicle_blueprint"):
        if key in overrides and not isinstance(overrides[key], str):
            raise ValueError(f"{key}={overrides[key]!r}: must be a string")
    if "auto_observe" in overrides:
        _check_bool("auto_observe", overrides["auto_observe"])
    if "idle_ticks" in overrides:
        check_number("idle_ticks", overrides["idle_ticks"], 0, C.MAX_EPISODE_STEPS, integer=True)
    honoured = {"name": name, "vehicle_blueprint": "vehicle.lincoln.mkz"}
    ignored = tuple(sorted(k for k in NAV_IGNORED_KEYS if k in overrides and overrides[k] != honoured.get(k, k)))
    values = {**DEFAULTS[family], **params, **{k: v for k, v in overrides.items() if k not in NAV_IGNORED_KEYS}}

    camera = CameraConfig(
        width=check_number("camera_width", values.pop("camera_width", 640), 16, 2048, integer=True),
        height=check_number("camera_height", values.pop("camera_height", 360), 16, 2048, integer=True),
        fov=check_number("camera_fov", values.pop("camera_fov", 90.0), 10.0, 170.0),
        jpeg_quality=check_number("jpeg_quality", values.pop("jpeg_quality", 75), 1, 100, integer=True),
    )
    common = dict(
        name=name, family=family, camera=camera, ignored=ignored,
        weather=check_weather(values.get("weather", "ClearNoon")),
        max_steps=check_number("max_steps", values["max_steps"], 1, C.MAX_EPISODE_STEPS, integer=True),
        success_radius=check_number("success_radius", values["success_radius"], 0.5, MAX_SUCCESS_RADIUS),
        initial_speed_kmh=check_number("initial_speed_kmh", values.get("initial_speed_kmh", 0.0), 0.0,
                                       C.MAX_SPEED * C.KMH_PER_MS),
    )
    if family == MAZE:
        return NavSpec(**common, goal_distance=check_number("goal_distance", values["goal_distance"], 10.0,
                                                            MAX_ROUTE_DISTANCE))

    map_name = values.get("map_name")
    if map_name is None:
        map_name = DEFAULT_MAP
    if map_name not in MAP_NAMES:
        raise ValueError(f"map_name={map_name!r}: must be one of {', '.join(MAP_NAMES)}")
    lo = check_number("route_distance_min", values["route_distance_min"], 10.0, MAX_ROUTE_DISTANCE)
    hi = check_number("route_distance_max", values["route_distance_max"], 10.0, MAX_ROUTE_DISTANCE)
    if lo > hi:
        raise ValueError(f"route_distance_min={lo} must not exceed route_distance_max={hi}")
    goal = values.get("goal_location")
    goal = None if goal is None else _check_location(goal)
    random_goal = values.get("random_goal")
    if random_goal is not None:
        random_goal = _check_bool("random_goal", random_goal)
        if random_goal and goal is not None:
            raise ValueError("random_goal=True contradicts goal_location: drop one of them")
        if not random_goal and goal is None:
            raise ValueError("random_goal=False needs a goal_location [x, y] or [x, y, z]")
    return NavSpec(
        **common, map_name=map_name, goal_location=goal, random_goal=goal is None,
        num_npc_vehicles=check_number("num_npc_vehicles", values.get("num_npc_vehicles", 0), 0, MAX_NPC_VEHICLES,
                                      integer=True),
        num_pedestrians=check_number("num_pedestrians", values.get("num_pedestrians", 0), 0, MAX_PEDESTRIANS,
                                     integer=True),
        route_distance_min=lo, route_distance_max=hi,
    )


MAZE_GOAL_TOLERANCE = 15.0
"""Maze: a goal counts as "about `goal_distance`" within this many metres of route (10 % of the
150 m of upstream's ``MazeConfig.goal_distance``; this project's choice)."""

MAX_GOAL_OFF_ROAD = C.LANE_WIDTH
"""Largest distance [m] from a fixed ``goal_location`` to the nearest lane centreline: one lane
width (`carla_gym.sim.constants.LANE_WIDTH`, 3.5 m), so the goal lies on the carriageway."""


@dataclass(frozen=True)
class GoalChoice:
    """A placed goal.

    Attributes:
        index: Index of the chosen candidate.
        route_distance: Its route distance from the start [m].
        in_range: False when no candidate met the family's distance rule and the fallback was used.
    """

    index: int
    route_distance: float
    in_range: bool


def place_goal(spec: NavSpec, route_distances, rng: np.random.Generator) -> GoalChoice:
    """Choose the goal among candidate points (spawn points or lane points) by route distance.

    * Maze (upstream never places one): uniform among candidates within `MAZE_GOAL_TOLERANCE`
      of ``spec.goal_distance``; else the candidate whose route distance is nearest to it.
    * Free roam: uniform among candidates with route distance in [``route_distance_min``,
      ``route_distance_max``] (upstream shuffles spawn points and takes the first in range, which is the
      same law, though it measured straight-line distance); else the farthest reachable candidate
      (upstream's fallback).

    Args:
        spec: A resolved spec with ``random_goal`` True (use `check_goal_location` for a fixed goal).
        route_distances: (K,) float [m], route distance from the start to each candidate; ``inf`` or
            ``nan`` marks an unreachable one.
        rng: The episode's generator (one draw when several candidates qualify).

    Returns:
        The `GoalChoice`.

    Raises:
        ValueError: No reachable candidate, or ``spec`` has a fixed goal.
    """
    if not spec.random_goal:
        raise ValueError("spec has a fixed goal_location: check it with check_goal_location instead")
    d = np.asarray(route_distances, dtype=np.float64).reshape(-1)
    reachable = np.isfinite(d) & (d > 0.0)
    if not reachable.any():
        raise ValueError(f"no reachable goal candidate among {d.size} (route distances must be finite and > 0)")
    if spec.family == MAZE:
        ok = reachable & (np.abs(d - spec.goal_distance) <= MAZE_GOAL_TOLERANCE)
        fallback = int(np.argmin(np.where(reachable, np.abs(d - spec.goal_distance), np.inf)))
    else:
        ok = reachable & (d >= spec.route_distance_min) & (d <= spec.route_distance_max)
        fallback = int(np.argmax(np.where(reachable, d, -np.inf)))
    candidates = np.flatnonzero(ok)
    if candidates.size:
        index = int(candidates[rng.integers(candidates.size)])
        return GoalChoice(index=index, route_distance=float(d[index]), in_range=True)
    return GoalChoice(index=fallback, route_distance=float(d[fallback]), in_range=False)


def check_goal_location(goal_location, lane_distance: float, route_distance: float) -> tuple[float, float, float]:
    """Validate a fixed ``goal_location`` against the road network.

    Args:
        goal_location: (x, y) or (x, y, z) [m].
        lane_distance: Distance [m] from the goal to the nearest lane centreline (the caller's lookup).
        route_distance: Route distance [m] from the start to the goal's nearest lane point; ``inf`` when
            unreachable.

    Returns:
        The goal as (x, y, z) floats [m].

    Raises:
        ValueError: Off the network (more than `MAX_GOAL_OFF_ROAD` from a lane) or unreachable.
    """
    x, y, z = _check_location(list(goal_location))
    if not lane_distance <= MAX_GOAL_OFF_ROAD:
        raise ValueError(f"goal_location=({x}, {y}) is {lane_distance:.1f} m from the nearest lane: it must lie "
                         f"within {MAX_GOAL_OFF_ROAD} m of the road network")
    if not math.isfinite(route_distance):
        raise ValueError(f"goal_location=({x}, {y}) cannot be reached from the start along the lanes")
    return (x, y, z)


def resolve_any_scenario(name: str, config: dict | None = None, seed: int | None = None) -> NavSpec | ScenarioSpec:
    """Resolve a scenario name of any family (trolley or navigation) with its overrides: the one name check.

    Generated trolley scenarios draw their layout from ``seed``; without one they are checked with seed 0 (the
    name and overrides are what can be wrong). Navigation specs take no seed (their episode does). The server's
    resets (WebSocket, HTTP, MCP, its web page), ``carla-gym serve`` and ``carla-gym collect`` check names with it.

    Returns:
        The navigation `NavSpec` or the trolley `carla_gym.sim.scenarios.ScenarioSpec`.

    Raises:
        ValueError: An unknown name or invalid overrides, naming the value and the valid choices (an unknown
            name lists the trolley and the navigation names).

    Examples:
        >>> resolve_any_scenario("maze_navigation").family, resolve_any_scenario("trolley_generated_test").family
        ('maze_navigation', 'trolley_generated')
    """
    if is_nav_name(name):
        return resolve_nav_scenario(name, config)
    try:
        return resolve_scenario(name, config, seed=0 if seed is None and is_generated(name) else seed)
    except ValueError as exc:
        if not str(exc).startswith("Unknown scenario:"):
            raise
        raise ValueError(f"{exc}; navigation: {'; '.join(NAME_PATTERNS)}") from None
