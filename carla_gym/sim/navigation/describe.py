"""Navigation observation fields and text: goal distance and direction, lane name, nearby actors, prompt.

Frame (`carla_gym.sim.constants`): x, y seen from above with y to the right of x, yaw = atan2(dy, dx)
[rad], positive turning right. Semantics follow upstream (``models.py`` and ``server/carla_environment.py``) with
the fixes in `carla_gym.sim.navigation.rules.DIFFERENCES`.

Examples:
    >>> goal_direction(np.zeros(2), 0.0, np.array([10.0, -20.0]))
    'left'
"""

from __future__ import annotations

from typing import Any

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.describe import describe
from carla_gym.sim.navigation.scenarios import MAZE, NavSpec

DIRECTIONS = ("forward", "right", "behind", "left")
"""Values of ``goal_direction``: sectors of the goal's bearing relative to the ego heading, with
upstream's boundaries: [-45, 45) deg forward, [45, 135) right, [135, 180] and
[-180, -135) behind, [-135, -45) left. Upstream used the same sectors on the world bearing and
named them east / north / west / south."""

UNKNOWN_LANE = "unknown"
"""``current_lane`` off the road network (upstream's field default)."""


def goal_distance(ego_xy, goal_xy) -> np.ndarray:
    """2D straight-line distance to the goal, z ignored (as upstream).

    Args:
        ego_xy: (..., 2) float [m].
        goal_xy: (..., 2) float [m], broadcast against ``ego_xy``.

    Returns:
        (...) float64 [m].
    """
    d = np.asarray(goal_xy, dtype=np.float64)[..., :2] - np.asarray(ego_xy, dtype=np.float64)[..., :2]
    return np.hypot(d[..., 0], d[..., 1])


def goal_direction_index(ego_xy, ego_yaw, goal_xy) -> np.ndarray:
    """Index into `DIRECTIONS` of the goal's bearing relative to the ego heading.

    The sector test compares the goal's forward and rightward offsets exactly (no angle is formed), so a
    bearing of exactly 45 deg is "right", -45 deg "forward", 135 deg "behind", -135 deg "left". A goal at
    the ego's position is "forward" (upstream's atan2(0, 0) = 0).

    Args:
        ego_xy: (..., 2) float [m].
        ego_yaw: (...) float [rad].
        goal_xy: (..., 2) float [m].

    Returns:
        (...) int64 in 0..3.
    """
    d = np.asarray(goal_xy, dtype=np.float64)[..., :2] - np.asarray(ego_xy, dtype=np.float64)[..., :2]
    yaw = np.asarray(ego_yaw, dtype=np.float64)
    cos, sin = np.cos(yaw), np.sin(yaw)
    fwd = cos * d[..., 0] + sin * d[..., 1]
    right = -sin * d[..., 0] + cos * d[..., 1]
    forward = ((-fwd <= right) & (right < fwd)) | ((fwd == 0.0) & (right == 0.0))
    is_right = (right >= fwd) & (right > -fwd)
    is_left = (right < -fwd) & (right <= fwd)
    return np.select([forward, is_right, is_left], [0, 1, 3], default=2).astype(np.int64)


def goal_direction(ego_xy, ego_yaw: float, goal_xy) -> str:
    """``goal_direction`` of one ego: one of `DIRECTIONS` (see `goal_direction_index`)."""
    return DIRECTIONS[int(goal_direction_index(ego_xy, ego_yaw, goal_xy))]


def current_lane(lane_index: int | None) -> str:
    """``current_lane``: ``"lane_<k>"``, k counted from the leftmost lane of the ego's direction of travel.

    Upstream always reports ``"lane_0"`` and reads ``target_lane_id`` as "a lower number is to the
    left"; with k counted from the left, ``lane_<k-1>`` is the left neighbour.

    Args:
        lane_index: k >= 0, or None off the road network.

    Returns:
        ``"lane_<k>"`` or `UNKNOWN_LANE`.

    Raises:
        ValueError: ``lane_index`` is negative.
    """
    if lane_index is None:
        return UNKNOWN_LANE
    if int(lane_index) < 0:
        raise ValueError(f"lane_index={lane_index}: must be >= 0 (or None off the road)")
    return f"lane_{int(lane_index)}"


def nearby_actors(ego_xyz, ego_yaw: float, actor_xyz, actor_ids, type_ids,
                  radius: float = C.NEARBY_RADIUS) -> list[dict[str, Any]]:
    """``nearby_actors`` entries as upstream's real mode, nearest first (upstream: in world order).

    Args:
        ego_xyz: (3,) or (2,) float [m].
        ego_yaw: Ego heading [rad].
        actor_xyz: (K, 3) or (K, 2) float [m] (same width as ``ego_xyz``), the ego excluded.
        actor_ids: (K,) int actor ids.
        type_ids: K CARLA type ids, each starting with ``vehicle.`` or ``walker.`` (others are left
            out, as upstream).
        radius: Largest centre-to-centre distance [m] (upstream 50 m, `C.NEARBY_RADIUS`).

    Returns:
        Dicts ``{"type": str, "id": int, "distance": float [m, 3D when z is given, unrounded],
        "position": "ahead" | "behind"}``; "ahead" when the offset projected on the heading is > 0.

    Raises:
        ValueError: Array lengths disagree.
    """
    ego = np.asarray(ego_xyz, dtype=np.float64)
    pos = np.asarray(actor_xyz, dtype=np.float64).reshape(-1, ego.shape[-1])
    ids = np.asarray(actor_ids).reshape(-1)
    if not len(pos) == len(ids) == len(type_ids):
        raise ValueError(f"actor_xyz ({len(pos)}), actor_ids ({len(ids)}) and type_ids ({len(type_ids)}) "
                         "must have the same length")
    off = pos - ego
    dist = np.sqrt(np.sum(off * off, axis=1))
    ahead = off[:, 0] * np.cos(ego_yaw) + off[:, 1] * np.sin(ego_yaw) > 0.0
    kind = np.array([t.startswith(("vehicle.", "walker.")) for t in type_ids], dtype=bool)
    keep = np.flatnonzero(kind & (dist <= radius))
    keep = keep[np.argsort(dist[keep], kind="stable")]
    return [{"type": type_ids[i], "id": int(ids[i]), "distance": float(dist[i]),
             "position": "ahead" if ahead[i] else "behind"} for i in keep]


_TOOLS = {
    MAZE: ("- observe(): look again without acting\n"
           "- control_vehicle(throttle, steer): drive by hand\n"
           "- init_navigation_agent(behavior): switch on the autopilot\n"
           "- set_destination(x, y, z): give the autopilot its destination\n"
           "- follow_route(steps): let the autopilot drive for some steps\n"),
    "free_roam": ("- observe(): look again without acting\n"
                  "- control_vehicle(throttle, steer, brake): drive by hand\n"
                  "- lane_change(direction): move one lane 'left' or 'right'\n"
                  "- init_navigation_agent(behavior): switch on the autopilot\n"
                  "- set_destination(x, y, z): give the autopilot its destination\n"
                  "- follow_route(steps): let the autopilot drive for some steps\n"
                  "- emergency_stop(): brake as hard as possible\n"),
}


def scene_description(spec: NavSpec) -> str:
    """The navigation prompt, identical on every step (upstream's templates, in our words).

    As upstream, the only value in the text is the success radius, printed as a float (``5.0``), and the
    tools list the same calls in the same order (named ``control_vehicle`` as upstream, while the wire
    action is ``control``).

    Args:
        spec: The scenario.

    Returns:
        Multi-line text.
    """
    where = "in a maze of city streets" if spec.family == MAZE else "freely through a town with traffic"
    return (f"You drive a car {where}.\n\n"
            f"Goal: get within {float(spec.success_radius)}m of the destination.\n\n"
            f"Tools:\n{_TOOLS[spec.family]}")


def observation_text(observation: dict[str, Any]) -> str:
    """The per-decision text of a navigation observation, in upstream's TRL format extended with the goal.

    Lines, in order: ``Speed: <v> km/h.``; ``Goal: <d> m away, <direction>, at (x, y, z).`` (the goal
    location that ``set_destination`` takes, from ``scenario_data``); ``Lane: <current_lane>.``; when a light
    governs the ego, ``Traffic light: <state>, stop line <d> m ahead.`` (``<d> m behind`` once past it); then
    the nearby actors and the collision line as the trolley description (`carla_gym.sim.describe.describe`:
    one ``- <kind> at <d>m`` line per actor within 50 m, nearest first as upstream's real mode, or ``No nearby
    actors detected.``; ``COLLISION detected with <type id>!`` once a collision happened), a walker's line
    ending ``(crossing the road)`` while it crosses. The light and the crossing walkers are not in upstream's
    text; they are here because they decide what a driver should do (the state vector has them too). Speed and
    distances have one decimal, coordinates one decimal (this project's choice: the goal is a lane point and
    the success radius is 5 m or more, so 0.05 m of rounding does not matter).

    Args:
        observation: `carla_gym.sim.navigation.episode.NavEpisode.observation` (keys ``speed_kmh``,
            ``goal_distance``, ``goal_direction``, ``current_lane``, ``nearby_actors``, ``collided_with``,
            ``scenario_data["goal_location"]``; optional ``traffic_light`` and ``crossing_walker_ids``).

    Returns:
        Multi-line text, no trailing newline.

    Raises:
        KeyError: A key above is missing.

    Examples:
        >>> obs = {"speed_kmh": 36.04, "goal_distance": 120.26, "goal_direction": "left", "current_lane": "lane_1",
        ...        "nearby_actors": [{"type": "vehicle.tesla.model3", "id": 1003, "distance": 12.34,
        ...                           "position": "ahead"}],
        ...        "collided_with": None, "scenario_data": {"goal_location": [33.5, -168.25, 0.0]}}
        >>> print(observation_text(obs))
        Speed: 36.0 km/h.
        Goal: 120.3 m away, left, at (33.5, -168.2, 0.0).
        Lane: lane_1.
        - vehicle at 12.3m
        >>> obs["traffic_light"] = {"state": "red", "stop_line_distance": 8.04}
        >>> obs["nearby_actors"].insert(0, {"type": "walker.pedestrian.0001", "id": 100, "distance": 6.0,
        ...                                 "position": "ahead"})
        >>> obs["crossing_walker_ids"] = [100]
        >>> print(observation_text(obs))
        Speed: 36.0 km/h.
        Goal: 120.3 m away, left, at (33.5, -168.2, 0.0).
        Lane: lane_1.
        Traffic light: red, stop line 8.0 m ahead.
        - walker at 6.0m (crossing the road)
        - vehicle at 12.3m
    """
    actors = observation["nearby_actors"]
    speed, _, rest = describe(observation["speed_kmh"], [a["distance"] for a in actors], [a["type"] for a in actors],
                              observation["collided_with"]).partition("\n")
    crossing = set(observation.get("crossing_walker_ids") or ())
    if crossing and actors:
        lines = rest.split("\n")
        for k, actor in enumerate(actors):  # the actor lines come first, in the order of ``actors``
            if actor["id"] in crossing and actor["type"].startswith("walker."):
                lines[k] += " (crossing the road)"
        rest = "\n".join(lines)
    x, y, z = (float(c) for c in observation["scenario_data"]["goal_location"])
    goal = (f"Goal: {observation['goal_distance']:.1f} m away, {observation['goal_direction']}, "
            f"at ({x:.1f}, {y:.1f}, {z:.1f}).")
    lines = [speed, goal, f"Lane: {observation['current_lane']}."]
    light = observation.get("traffic_light")
    if light is not None:
        d = light["stop_line_distance"]
        lines.append(f"Traffic light: {light['state']}, stop line {abs(d):.1f} m {'ahead' if d >= 0 else 'behind'}.")
    return "\n".join([*lines, rest])
