"""Scenarios of `CarlaNavigation-v0`: names, ``scenario_config``, and each episode's `NavSpec` and route.

Two kinds of names:

* ``route_<Town>`` (Town01-Town05): VLM-RL's route following (``CarlaRouteEnv``, github zihaosheng/VLM-RL), a
  route between two spawn points of the town among 0, 20 or 40 NPC vehicles. ``scenario_config`` takes
  ``{"traffic": 0 | 20 | 40, "route": "train" | "eval" | [start, end]}`` (`check_route_config`).
* ``maze_navigation`` and ``free_roam[_<Map>[_v<N>][_p<M>]]``: upstream's navigation families
  (`carla_gym.sim.navigation.scenarios`); ``scenario_config`` takes upstream's overrides.

Every episode runs as a `carla_gym.sim.navigation.episode.NavEpisode`: a route scenario becomes a free-roam
spec with the ego at the start spawn (`NavSpec.start_spawn`), the goal fixed at the end spawn and a small
arrival radius (`route_spec`). The route the env tracks (VLM-RL's waypoints, 1 m apart) is the
planned route from the ego to the goal (`plan_episode_route`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.navigation import route_task as R
from carla_gym.sim.navigation.scenarios import NavSpec, is_nav_name, resolve_nav_scenario
from carla_gym.sim.town import Location, Route, Town, get_town, plan_route

ROUTE_TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05")
"""Towns of the ``route_<town>`` scenarios: VLM-RL trains on Town02 and its ``eval.py`` accepts Town01-05."""

ROUTE_SCENARIOS = tuple(f"route_{town}" for town in ROUTE_TOWNS)
"""The route-following scenario names."""

DEFAULT_SCENARIO = "route_Town02"
"""VLM-RL's training town."""

TRAFFIC_LEVELS = (0, 20, 40)
"""NPC vehicle counts of ``scenario_config["traffic"]``: VLM-RL's empty, regular and dense traffic."""

ROUTE_SETS = ("train", "eval")
"""Named ``scenario_config["route"]`` values (`carla_gym.sim.navigation.route_task.TRAIN_ROUTES`, ``EVAL_ROUTES``)."""

DEFAULT_ROUTE_CONFIG = {"traffic": 20, "route": "train"}
"""VLM-RL's training setting: 20 vehicles (``tf_num``), training routes."""

ROUTE_ARRIVAL_RADIUS = 2.0
"""Upstream arrival (``goal_reached``) radius [m] of a route episode: within this straight-line distance of the end
spawn. This project's choice: under half a lane width (3.5 m), so that driving past the goal on the other lane of
the same road is no arrival (VLM-RL ends by route progress, the last waypoint; its success radius, 5 m, is used
for ``outcome["success"]``)."""

RANDOM_ROUTE_TRIES = 20
"""Random spawn pairs drawn at most for a random training route (VLM-RL redraws a route of <= 1 waypoint)."""


def is_route_name(name: Any) -> bool:
    """Whether ``name`` is a ``route_<Town>`` scenario name."""
    return isinstance(name, str) and name in ROUTE_SCENARIOS


def check_route_config(config: Any, num_spawns: int) -> dict[str, Any]:
    """A route scenario's ``scenario_config`` merged over `DEFAULT_ROUTE_CONFIG`, validated.

    Raises:
        ValueError: Not a dict, an unknown key, a traffic level not in `TRAFFIC_LEVELS`, or a route that is
            neither a `ROUTE_SETS` name nor two different spawn indices in [0, ``num_spawns``).
    """
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValueError(f"scenario_config={config!r}: must be a dict with keys 'traffic' and 'route', or None")
    unknown = sorted(set(config) - set(DEFAULT_ROUTE_CONFIG))
    if unknown:
        raise ValueError(f"scenario_config key {unknown[0]!r}: a route_<Town> scenario takes "
                         f"{sorted(DEFAULT_ROUTE_CONFIG)}")
    out = DEFAULT_ROUTE_CONFIG | config
    traffic = out["traffic"]
    if isinstance(traffic, bool) or not isinstance(traffic, int | np.integer) or traffic not in TRAFFIC_LEVELS:
        raise ValueError(f"traffic={traffic!r}: choose one of {list(TRAFFIC_LEVELS)} (empty, regular, dense)")
    route = out["route"]
    if isinstance(route, str):
        if route not in ROUTE_SETS:
            raise ValueError(f"route={route!r}: choose one of {list(ROUTE_SETS)} or a (start, end) spawn index pair")
    else:
        ok = (isinstance(route, list | tuple) and len(route) == 2
              and all(isinstance(i, int | np.integer) and not isinstance(i, bool) and 0 <= i < num_spawns
                      for i in route) and route[0] != route[1])
        if not ok:
            raise ValueError(f"route={route!r}: choose one of {list(ROUTE_SETS)} or two different spawn indices "
                             f"in [0, {num_spawns})")
        route = (int(route[0]), int(route[1]))
    return {"traffic": int(traffic), "route": route}


def check_scenarios(scenario: Any, scenario_config: Any) -> dict[str, Any]:
    """Validate ``scenario`` (a name or a non-empty list) with ``scenario_config`` for every name.

    In a list that mixes route names with maze or free-roam names, ``scenario_config``'s route keys
    (``traffic``, ``route``) go to the route names and its other keys to the others.

    Returns:
        ``{name: config}`` in first-appearance order: the checked route config (`check_route_config`) for a
        route name, the resolved `NavSpec` for a maze or free-roam name.

    Raises:
        ValueError: An empty list, an unknown name, or a config the name's family refuses (naming the value).
    """
    names = [scenario] if isinstance(scenario, str) else list(scenario) if isinstance(scenario, Sequence) else [
        scenario]
    if not names:
        raise ValueError(f"scenario={scenario!r}: give a name or a non-empty list of names: "
                         f"{list(ROUTE_SCENARIOS)}, 'maze_navigation' or 'free_roam[_<Map>[_v<N>][_p<M>]]'")
    route_config = nav_config = scenario_config
    if isinstance(scenario_config, dict) and any(map(is_route_name, names)) and not all(map(is_route_name, names)):
        route_config = {k: v for k, v in scenario_config.items() if k in DEFAULT_ROUTE_CONFIG}
        nav_config = {k: v for k, v in scenario_config.items() if k not in DEFAULT_ROUTE_CONFIG}
    out: dict[str, Any] = {}
    for name in names:
        if name in out:
            continue
        if is_route_name(name):
            out[name] = check_route_config(route_config, len(get_town(town_of(name)).spawn_points))
        elif is_nav_name(name):
            out[name] = resolve_nav_scenario(name, nav_config)
        else:
            raise ValueError(f"scenario={name!r}: choose one of {list(ROUTE_SCENARIOS)}, 'maze_navigation' or "
                             "'free_roam[_<Map>[_v<N>][_p<M>]]' (e.g. 'free_roam_Town05_v20_p10')")
    return out


def town_of(name: str) -> str:
    """The town of a ``route_<Town>`` name."""
    return name.removeprefix("route_")


def route_pairs(town: Town, route: str | tuple[int, int], episode: int, rng: np.random.Generator) -> list:
    """Spawn pairs to try, in order, for episode number ``episode`` of a route scenario (VLM-RL's ``CarlaRouteEnv``).

    ``"eval"``: evaluation pair ``episode % 10``; ``"train"``: training pair ``episode // 2 % 12`` on even
    episodes, `RANDOM_ROUTE_TRIES` random pairs (drawn from ``rng``) on odd ones; a pair: itself. Indices wrap
    modulo the town's spawn count (`carla_gym.sim.navigation.route_task.spawn_pair`).
    """
    n = len(town.spawn_points)
    if route == "eval":
        return [R.spawn_pair(R.EVAL_ROUTES[episode % len(R.EVAL_ROUTES)], n)]
    if route == "train" and episode % 2 == 0:
        return [R.spawn_pair(R.TRAIN_ROUTES[(episode // 2) % len(R.TRAIN_ROUTES)], n)]
    if route == "train":
        return [tuple(int(i) for i in rng.choice(n, size=2, replace=False)) for _ in range(RANDOM_ROUTE_TRIES)]
    return [route]


def pick_route(town: Town, pairs: list) -> tuple[tuple[int, int], Route]:
    """The first pair of ``pairs`` with a drivable route of more than one waypoint, and that route.

    Raises:
        ValueError: No pair has one (naming the last pair and the town).
    """
    sp = town.spawn_points
    for start, end in pairs:
        try:
            planned = plan_route(town, Location(int(sp.lane[start]), float(sp.s[start]), 0.0), sp.xy[end],
                                 spacing=R.WAYPOINT_SPACING)
        except ValueError:
            continue
        if len(planned.waypoints) > 1:
            return (start, end), planned
    raise ValueError(f"no drivable route between spawn points {pairs[-1]} of {town.name}")


def route_spec(name: str, town: Town, traffic: int, pair: tuple[int, int]) -> NavSpec:
    """The `NavSpec` of a route episode on ``town`` with ``traffic`` NPC vehicles between the spawns of ``pair``.

    Free roam with no walkers, the ego at spawn ``pair[0]``, the goal fixed at spawn ``pair[1]``, arrival within
    `ROUTE_ARRIVAL_RADIUS` of it, and no step limit of its own (the env's time limit applies).
    """
    end = town.spawn_points.xy[pair[1]]
    base = resolve_nav_scenario(f"free_roam_{town.name}_v{traffic}_p0",
                                {"goal_location": (float(end[0]), float(end[1]), 0.0)})
    return dataclasses.replace(base, name=name, success_radius=ROUTE_ARRIVAL_RADIUS, max_steps=C.MAX_EPISODE_STEPS,
                               start_spawn=int(pair[0]))


def unlimited(spec: NavSpec) -> NavSpec:
    """``spec`` without upstream's step limit (the Gymnasium env limits simulated time instead)."""
    return dataclasses.replace(spec, max_steps=C.MAX_EPISODE_STEPS)


def plan_episode_route(town: Town, start: Location, goal_xy) -> Route:
    """The route the env tracks from the ego's start to the goal, at VLM-RL's 1 m resolution.

    Raises:
        ValueError: The goal is unreachable (as `plan_route`).
    """
    return plan_route(town, start, np.asarray(goal_xy, dtype=np.float64)[:2], spacing=R.WAYPOINT_SPACING)
