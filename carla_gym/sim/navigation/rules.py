"""Navigation rules: episode end, raw reward, rubric reward and outcome (maze_navigation, free_roam).

The one definition of how a navigation episode is scored. Semantics follow upstream
(``server/benchmark_scenarios/maze.py``, ``free_roam.py`` and ``server/rubrics.py`` under `UPSTREAM_URL`)
with the fixes listed in `DIFFERENCES`.

Episode end (upstream ``is_done``, both families), checked after each tick in this order:

* ``"collision"``: a collision was registered this tick (upstream ends on collision in both families);
* ``"goal_reached"``: the 2D goal distance is below ``success_radius`` (strict, as upstream);
* ``"max_steps"``: the step count reached ``max_steps`` (a truncation, see `is_truncation`).

Raw reward per step (upstream's ``compute_outcome``):

* free roam: ``(prev_d - d) / initial_d`` + `ARRIVAL_BONUS` on the arrival step + `COLLISION_PENALTY`
  on the step a collision is registered + `TIME_COST`;
* maze: `MAZE_GOAL_REWARD` on the arrival step, `MAZE_COLLISION_REWARD` on the collision step, else 0;
* any step after the episode ended: 0.0 (upstream keeps paying the arrival bonus and the collision penalty).

Rubric reward (upstream ``CarlaNavigationRubric``): the raw reward.

Examples:
    >>> float(raw_reward("free_roam", prev_d=100.0, d=99.0, initial_d=100.0))
    0.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.navigation.scenarios import FREE_ROAM, MAZE, NavSpec

ARRIVAL_BONUS = 10.0
"""Free-roam reward on arrival (upstream ``FreeRoamScenario.compute_outcome``)."""
COLLISION_PENALTY = -5.0
"""Free-roam reward on a collision (upstream ``FreeRoamScenario.compute_outcome``)."""
TIME_COST = -0.01
"""Free-roam reward per step (upstream ``FreeRoamScenario.compute_outcome``)."""
MAZE_GOAL_REWARD = 1.0
"""Maze reward on arrival (upstream ``MazeScenario.compute_outcome``)."""
MAZE_COLLISION_REWARD = -1.0
"""Maze reward on a collision (upstream ``MazeScenario.compute_outcome``)."""

DONE_REASON = "scenario_complete"
"""The wire's ``done_reason`` when done, as upstream; the specific reason is in the outcome."""
END_REASONS = ("collision", "goal_reached", "max_steps")
"""Values of `end_reason` (and ``outcome["end_reason"]``), in the order they are checked."""

COLLISION_KINDS = ("vehicle", "walker", "other")
"""Keys of ``outcome["collisions"]``: by the type id's first component (``vehicle.*``, ``walker.*``)."""

UPSTREAM_URL = "https://github.com/meta-pytorch/OpenEnv/blob/main/envs/carla_env/"
"""Where upstream's OpenEnv CARLA environment lives; the files of `DIFFERENCES` are relative to it."""

UPSTREAM_FILES = (
    "models.py",
    "server/carla_environment.py",
    "server/rubrics.py",
    "server/benchmark_scenarios/__init__.py",
    "server/benchmark_scenarios/maze.py",
    "server/benchmark_scenarios/free_roam.py",
)
"""Upstream files that `DIFFERENCES` names, relative to `UPSTREAM_URL`."""

_ENV, _NAMES, _MAZE, _FREE_ROAM = UPSTREAM_FILES[1], UPSTREAM_FILES[3], UPSTREAM_FILES[4], UPSTREAM_FILES[5]

DIFFERENCES = (
    (_MAZE, "maze: no goal is ever placed; goal_distance=150 is unused; reward always 0",
     "a goal is placed about goal_distance (150 m) of route away; arrival and collision end the episode"),
    (_NAMES, "free_roam_<Map> refuses map names with '_' (free_roam_Town10HD_Opt)",
     "Town10HD_Opt is accepted"),
    (_FREE_ROAM, "weather 'random' given as an override is never resolved",
     "'random' is drawn from the presets at every reset with the episode's generator"),
    (_FREE_ROAM, "arrival bonus (+10) and collision penalty (-5) are paid on every step the condition "
     "holds, also after done", "each is paid once, on the step it happens; steps after done score 0"),
    (_ENV, "real mode: goal_distance and collision never reach is_done; reward -inf then NaN",
     "goal distance and collisions always feed the end check and the reward"),
    (_ENV, "goal_direction is the world-frame compass sector (east/north/west/south)",
     "forward/right/behind/left relative to the ego heading, same 45/135 deg boundaries"),
    (_ENV, "current_lane is always 'lane_0'",
     "lane_<k> counted from the leftmost lane of the ego's direction"),
    (_ENV, "nearby_actors in world order", "nearest first"),
    (_ENV, "is_truncated never set",
     "reaching max_steps is a truncation, arrival and collision terminations"),
    (_FREE_ROAM, "goal drawn by straight-line distance in [min, max] from shuffled spawn points",
     "goal drawn uniformly among candidates whose route distance is in [min, max]; with none in range, the "
     "farthest reachable one (the maze: the nearest to goal_distance), as upstream's fallback; "
     "scenario_data['route_length'] tells"),
    (_FREE_ROAM, "goal_location is used only with random_goal=False; otherwise silently ignored",
     "goal_location alone fixes the goal; contradicting random_goal is an error; a goal off the lanes is an error"),
    (_NAMES, "unknown scenario_config keys are silently ignored",
     "they are an error naming the valid keys"),
    (_FREE_ROAM, "upstream's prompt wording (maze.py alike)",
     "this project's wording with the same value (success radius) and tools"),
    (_ENV, "done_reason is only 'scenario_complete'",
     "the same on the wire; outcome['end_reason'] says collision, goal_reached or max_steps"),
)
"""How the navigation rules differ from upstream: (upstream file, upstream, here), for the documentation's
differences table. The file is one of `UPSTREAM_FILES`, relative to `UPSTREAM_URL`."""


def end_reason(spec: NavSpec, step: int, goal_dist: float, collided: bool) -> str | None:
    """Why the episode ends after ``step`` ticks, or None if it goes on.

    Args:
        spec: The scenario.
        step: Upstream steps so far (``env_step``: actions, ``capture_image`` not counted; >= 1 after the first).
        goal_dist: 2D goal distance now [m].
        collided: Whether a collision was registered in this tick.

    Returns:
        One of `END_REASONS` (first that holds, in that order) or None.
    """
    if collided:
        return "collision"
    if goal_dist < spec.success_radius:
        return "goal_reached"
    if step >= spec.max_steps:
        return "max_steps"
    return None


def is_truncation(reason: str | None) -> bool:
    """Whether an end reason is a time limit (Gymnasium ``truncated``) rather than a termination."""
    return reason == "max_steps"


def raw_reward(family: str, prev_d, d, initial_d, arrived=False, collided=False, was_done=False) -> np.ndarray:
    """Upstream's navigation raw reward, paid once per event and 0 after done; vectorised over any batch shape.

    Args:
        family: ``"free_roam"`` or ``"maze_navigation"``.
        prev_d: Goal distance before the step [m].
        d: Goal distance after the step [m].
        initial_d: Goal distance at reset [m] (values <= 0 count as 1 m, as upstream's ``or 1.0``).
        arrived: Whether the episode ended by arrival on this step.
        collided: Whether a collision was registered on this step.
        was_done: Whether the episode had already ended before this step.

    Returns:
        float64 array of the broadcast shape.

    Raises:
        ValueError: Unknown family.
    """
    arrived, collided, was_done = (np.asarray(v, dtype=bool) for v in (arrived, collided, was_done))
    if family == FREE_ROAM:
        initial = np.asarray(initial_d, dtype=np.float64)
        initial = np.where(initial > 0.0, initial, 1.0)
        r = ((np.asarray(prev_d, dtype=np.float64) - np.asarray(d, dtype=np.float64)) / initial + TIME_COST
             + np.where(arrived, ARRIVAL_BONUS, 0.0) + np.where(collided, COLLISION_PENALTY, 0.0))
    elif family == MAZE:
        shape = np.broadcast_shapes(np.shape(prev_d), np.shape(d), np.shape(initial_d))
        r = np.broadcast_to(np.where(arrived, MAZE_GOAL_REWARD, 0.0) + np.where(collided, MAZE_COLLISION_REWARD, 0.0),
                            np.broadcast_shapes(shape, arrived.shape, collided.shape))
    else:
        raise ValueError(f"family={family!r}: must be {FREE_ROAM!r} or {MAZE!r}")
    return np.where(was_done, 0.0, r).astype(np.float64)


def rubric_reward(raw: float) -> float:
    """Upstream ``CarlaNavigationRubric``: the raw reward, passed through (upstream's ``server/rubrics.py``)."""
    return raw


def collision_kind(type_id: str) -> str:
    """``"vehicle"``, ``"walker"`` or ``"other"`` for a collided actor's CARLA type id."""
    head = type_id.split(".", 1)[0]
    return head if head in ("vehicle", "walker") else "other"


def outcome(spec: NavSpec, *, reason: str | None, steps: int, goal_dist: float, initial_route: float,
            remaining_route: float, distance_travelled: float, collided_types, total_reward: float) -> dict[str, Any]:
    """The episode outcome for ``info["outcome"]`` and ``CarlaState.scenario_data``.

    Args:
        spec: The scenario.
        reason: `end_reason` of the last step (None while the episode goes on).
        steps: Ticks so far.
        goal_dist: 2D goal distance now [m].
        initial_route: Route length from the start to the goal at reset [m] (> 0).
        remaining_route: Route length still to drive [m] (the caller's lane-graph measure).
        distance_travelled: Path length driven [m].
        collided_types: Type ids of the actors hit, one per collision event.
        total_reward: Sum of the raw rewards [-].

    Returns:
        A JSON-safe dict: ``scenario``, ``family``, ``success`` (ended by arrival), ``end_reason``,
        ``goal_reached``, ``collision``, ``collisions`` (counts per `COLLISION_KINDS`), ``goal_distance`` [m],
        ``route_distance_total`` [m], ``route_distance_remaining`` [m], ``route_completion`` (1 - remaining
        / total, clipped to [0, 1]), ``distance_travelled`` [m], ``time`` [s] (steps x 0.05 s), ``steps``,
        ``reward`` (total raw reward), ``map_name``, ``weather``.

    Raises:
        ValueError: ``initial_route`` is not > 0.
    """
    if not initial_route > 0.0:
        raise ValueError(f"initial_route={initial_route}: must be > 0 m")
    counts = dict.fromkeys(COLLISION_KINDS, 0)
    for t in collided_types:
        counts[collision_kind(t)] += 1
    completion = min(max(1.0 - float(remaining_route) / float(initial_route), 0.0), 1.0)
    return {
        "scenario": spec.name,
        "family": spec.family,
        "success": reason == "goal_reached",
        "end_reason": reason,
        "goal_reached": bool(goal_dist < spec.success_radius),
        "collision": sum(counts.values()) > 0,
        "collisions": counts,
        "goal_distance": float(goal_dist),
        "route_distance_total": float(initial_route),
        "route_distance_remaining": float(remaining_route),
        "route_completion": completion,
        "distance_travelled": float(distance_travelled),
        "time": steps * C.DT,
        "steps": int(steps),
        "reward": float(total_reward),
        "map_name": spec.map_name,
        "weather": spec.weather,
    }
