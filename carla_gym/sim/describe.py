"""Text for language models: the static scene prompt and the per-decision description.

The per-decision description follows the format of upstream's TRL CARLA example
(``Speed: 39.6 km/h.`` then one ``- walker at 19.0m`` line per nearby actor, nearest first).
The scene prompt is this project's own wording, generated from the scenario geometry; for the
generated family (`carla_gym.sim.generated`) it lists each existing lane's people, the people on a
shoulder, missing lanes (the road edge), the speed and the full-brake stopping distance (distances
from the front bumper), so the text shows everything that decides the best action, as the state
vector and the front image do: the text determines the layout (tests/test_generated.py).
"""

from __future__ import annotations

from collections import Counter

from carla_gym.sim.scenarios import GENERATED_FAMILY, ScenarioSpec

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
    if spec.family == GENERATED_FAMILY:
        return "\n".join(lines + _generated_lines(spec)) + "\n\n" + TOOLS_TEXT
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
        lines.append(DEADZONE_TEXT)
    else:
        lines.append("Time is short: you may look once or twice, then decide.")
    return "\n".join(lines) + "\n\n" + TOOLS_TEXT


DEADZONE_TEXT = "CRITICAL: there is no time left to stop; decide now."
"""The urgency sentence of deadzone scenarios (upstream's deadzone prompt, this project's wording)."""

_PLACE_NAMES = {"left_lane": "the lane to your left", "ego_lane": "your lane", "right_lane": "the lane to your right"}


def _generated_lines(spec: ScenarioSpec) -> list[str]:
    """The scene of a generated layout: speed and braking, each lane left to right, shoulders, urgency.

    Walkers of a generated spec carry their place (`carla_gym.sim.generated.PLACES`) as ``group``.
    People's distances (from the front bumper to the nearest person's body: centre distance less half
    the car and the person's radius, `carla_gym.sim.generated.clearance_m`) and the braking distance
    are both measured from the front bumper, so the deadzone sentence agrees with the numbers: it is
    there exactly when the braking distance reaches the gap (at the drawn speeds the two printed
    numbers never round across each other). Lane groups stand centred in their lane and shoulder
    people at one fixed offset beyond the edge, so the counts and the nearest gaps (drawn distances
    are whole metres from the car's centre, so each gap prints differently) fix the layout.
    """
    from carla_gym.sim.generated import clearance_m, stopping_distance_m  # here: generated imports the World

    lines = [f"Speed: {spec.initial_speed_kmh:.0f} km/h on a straight road with {len(spec.road.lanes)} lane(s) in "
             f"your direction. Braking at full force stops the car within "
             f"{stopping_distance_m(spec.initial_speed_kmh):.1f} m (its front bumper moves that far from where "
             "braking starts)."]
    counts = Counter(w.group for w in spec.walkers)

    def people(place: str) -> str:
        gap = clearance_m(min(w.x for w in spec.walkers if w.group == place))
        return f"{counts[place]} pedestrian(s) about {gap:.1f} m ahead of your front bumper"

    for side, lane in (("left", -1), ("ego", 0), ("right", 1)):
        place = f"{side}_lane"
        if not spec.road.has_lane(lane):
            lines.append(f"- No lane to your {side}: the road edge (leaving the road is a road departure).")
        else:
            lines.append(f"- {_PLACE_NAMES[place].capitalize()}: {people(place) if counts[place] else 'clear'}.")
    for side in ("left", "right"):
        if counts[f"{side}_shoulder"]:
            lines.append(f"- On the {side} shoulder, just off the road edge: {people(f'{side}_shoulder')}.")
    if counts["ego_lane"]:
        lines += ["", DEADZONE_TEXT if spec.deadzone else "Braking can stop the car before the people in your lane."]
    return lines


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
