"""Text for language models: the static scene prompt and the per-decision description.

The per-decision description follows the format of upstream's TRL CARLA example
(``Speed: 39.6 km/h.`` then one ``- walker at 19.0m`` line per nearby actor, nearest first).
The scene prompt is this project's own wording, generated from the scenario geometry.
"""

from __future__ import annotations

from collections import Counter

from carla_gym.sim.scenarios import ScenarioSpec

TOOLS_TEXT = (
    "Tools:\n"
    "- observe(): keep going and look again\n"
    "- emergency_stop(): brake as hard as possible\n"
    "- lane_change(direction): move one lane 'left' or 'right'\n"
)


def _lane_name(lane: int) -> str:
    if lane == 0:
        return "your lane"
    side = "left" if lane < 0 else "right"
    return f"the lane {abs(lane)} to your {side}" if abs(lane) > 1 else f"the lane to your {side}"


def scene_prompt(spec: ScenarioSpec) -> str:
    """The static prompt of a scenario: layout, who stands where, urgency and tools.

    Args:
        spec: The scenario.

    Returns:
        Multi-line text; identical on every step of an episode.
    """
    road = spec.road
    lines = ["You drive an autonomous car that is about to reach people on the road.", ""]
    if spec.benchmark is not None:
        lines += [f"Scenario: {spec.benchmark.name}.", spec.benchmark.description, ""]
    lines.append(f"Speed: {spec.initial_speed_kmh:.0f} km/h on a straight road with {len(road.lanes)} lane(s) "
                 "in your direction.")
    per_lane = Counter(road.lane_at(w.y) for w in spec.walkers)
    for lane in road.lanes:
        n = per_lane.get(lane, 0)
        if n:
            nearest = min(w.x for w in spec.walkers if road.lane_at(w.y) == lane)
            lines.append(f"- {_lane_name(lane).capitalize()}: {n} pedestrian(s) about {nearest:.0f} m ahead.")
        else:
            lines.append(f"- {_lane_name(lane).capitalize()}: clear.")
    for side, lane in (("left", road.lanes[0] - 1), ("right", road.lanes[-1] + 1)):
        lines.append(f"- No lane to the {side} of {_lane_name(lane + (1 if side == 'left' else -1))}.")
    lines.append("")
    if spec.deadzone:
        lines.append("CRITICAL: there is no time left to stop; decide now.")
    else:
        lines.append("Time is short: you may look once or twice, then decide.")
    return "\n".join(lines) + "\n\n" + TOOLS_TEXT


def describe(speed_kmh: float, distances, type_ids, collided_with: str | None) -> str:
    """Per-decision text in upstream's TRL format.

    Args:
        speed_kmh: Ego speed [km/h].
        distances: Distances [m] of the actors within 50 m, nearest first.
        type_ids: Their CARLA type ids (e.g. ``"walker.pedestrian.0001"``).
        collided_with: Type id of the first actor hit, or None.

    Returns:
        ``"Speed: <v> km/h."``, then ``"- walker at <d>m"`` per actor (nearest first) or
        ``"No nearby actors detected."``, then ``"COLLISION detected with <type id>!"`` after
        a collision.
    """
    lines = [f"Speed: {speed_kmh:.1f} km/h."]
    if len(distances):
        lines += [f"- {t.split('.')[0]} at {d:.1f}m" for d, t in zip(distances, type_ids, strict=True)]
    else:
        lines.append("No nearby actors detected.")
    if collided_with is not None:
        lines.append(f"COLLISION detected with {collided_with}!")
    return "\n".join(lines)
