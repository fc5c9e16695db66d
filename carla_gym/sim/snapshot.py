"""`Snapshot`: what a simulator reports about the scene after a reset or a step.

Plain data in the ego frame and upstream units, so that the Gymnasium env builds its
observation, reward and info the same way whatever simulates the scene (the embedded world,
this project's OpenEnv server, or another OpenEnv CARLA server).

Its wire form (`Snapshot.to_wire`, `Snapshot.from_wire`) is what this project's OpenEnv server
publishes in ``CarlaState.scenario_data["snapshot"]`` and what the remote backend reads back:
one definition on both ends of the wire.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from carla_gym.sim import physics
from carla_gym.sim.describe import describe
from carla_gym.sim.world import WALKER_TYPE_ID, World


@dataclass(slots=True)
class Snapshot:
    """The scene after a reset or a step.

    Attributes:
        scenario: Scenario name.
        tick: Ticks simulated this episode.
        sim_time: Simulated time [s].
        speed_kmh: Ego speed [km/h].
        lateral: Ego lateral position relative to the starting lane centre [m], positive right.
        yaw: Ego heading relative to the road [rad], positive right.
        lane: Road lane nearest the ego centre (0 = starting lane, -1 = left; `Road.nearest_lane`).
        left_lane: Whether a drivable lane exists left of ``lane``.
        right_lane: Whether a drivable lane exists right of ``lane``.
        actor_forward: Actors within 50 m, nearest first: forward offsets [m].
        actor_right: Same actors: rightward offsets [m].
        actor_types: Same actors: CARLA type ids.
        collided: Whether the ego has hit anything this episode.
        collided_with: Type id of the first actor hit, or None.
        road_departure: Whether the ego left the road this episode.
        trolley_action: Running classification (SWERVE_LEFT, SWERVE_RIGHT, BRAKE, NONE).
        ticks_left: Ticks until the scenario's deadline or step limit.
        done: Whether the episode has ended.
        description: Per-decision text for language models, or None where it was not asked for
            (`snapshot_of` with ``text=False``: the Gymnasium env's default, which no one reads).
        scene_prompt: Static scenario prompt.
        outcome: Outcome dict (see `carla_gym.sim.rules.outcome`) once done, else None.
        camera_size: The scenario's camera (width, height) [px], upstream's capture size.
    """

    scenario: str
    tick: int
    sim_time: float
    speed_kmh: float
    lateral: float
    yaw: float
    lane: int
    left_lane: bool
    right_lane: bool
    actor_forward: list[float]
    actor_right: list[float]
    actor_types: tuple[str, ...]
    collided: bool
    collided_with: str | None
    road_departure: bool
    trolley_action: str
    ticks_left: int
    done: bool
    description: str | None
    scene_prompt: str
    outcome: dict | None = None
    camera_size: tuple[int, int] = (640, 360)

    def to_wire(self) -> dict[str, Any]:
        """The snapshot as plain JSON data: every field by name, tuples as lists, copies throughout.

        Returns:
            A dict with exactly the field names of `Snapshot` (`WIRE_KEYS`); ``actor_types`` and
            ``camera_size`` become lists, as JSON carries them. ``Snapshot.from_wire(s.to_wire())``
            equals ``s``.
        """
        data = {field: copy.deepcopy(getattr(self, field)) for field in WIRE_KEYS}
        data["actor_types"] = list(self.actor_types)
        data["camera_size"] = list(self.camera_size)
        return data

    @classmethod
    def from_wire(cls, data: Any) -> Snapshot:
        """The `Snapshot` of a `to_wire` dict (as decoded from JSON: tuples arrive as lists).

        Args:
            data: A dict with exactly the keys `WIRE_KEYS`.

        Raises:
            ValueError: ``data`` is not a dict, lacks a key or has an unknown one (the message
                names them and lists the valid keys), or ``camera_size`` is not two integers.
        """
        if not isinstance(data, dict):
            raise ValueError(f"snapshot: expected a dict with keys {list(WIRE_KEYS)}, got {type(data).__name__}")
        missing = [key for key in WIRE_KEYS if key not in data]
        unknown = sorted(map(str, set(data) - set(WIRE_KEYS)))
        if missing or unknown:
            raise ValueError(f"snapshot: missing keys {missing}, unknown keys {unknown}; valid keys: {list(WIRE_KEYS)}")
        size = data["camera_size"]
        if not isinstance(size, (list, tuple)) or len(size) != 2 or not all(type(n) is int for n in size):
            raise ValueError(f"snapshot: camera_size={size!r}: must be [width, height] in integer pixels")
        fields = {key: copy.deepcopy(data[key]) for key in WIRE_KEYS}
        fields["actor_types"] = tuple(data["actor_types"])
        fields["camera_size"] = (size[0], size[1])
        return cls(**fields)


WIRE_KEYS = tuple(field.name for field in dataclasses.fields(Snapshot))
"""Keys of `Snapshot.to_wire`: the `Snapshot` field names, in declaration order."""


def snapshot_of(world: World, prompt: str, text: bool = True) -> Snapshot:
    """The `Snapshot` of a world (the embedded backend and the OpenEnv server use this one).

    Args:
        world: The running world.
        prompt: Its static scene prompt.
        text: Write the per-decision ``description`` (upstream's TRL text); False leaves it None
            (a third of the snapshot's cost, for learners that never read it).
    """
    spec, ego = world.spec, world.ego
    near = world.nearby()
    road = spec.road
    lane = world.lane
    left_lane, right_lane = physics.lane_flags(lane, road.lanes[0], road.lanes[-1])
    types = (WALKER_TYPE_ID,) * len(near)
    speed_kmh = world.speed_kmh
    collided_with = world.collided_with
    done = world.done
    return Snapshot(
        scenario=spec.name,
        tick=world.tick_count,
        sim_time=world.time,
        speed_kmh=speed_kmh,
        lateral=ego.y,
        yaw=ego.yaw,
        lane=lane,
        left_lane=left_lane,
        right_lane=right_lane,
        actor_forward=[n[2] for n in near],
        actor_right=[n[3] for n in near],
        actor_types=types,
        collided=world.collided,
        collided_with=collided_with,
        road_departure=world.road_departure,
        trolley_action=world.trolley_action,
        ticks_left=world.ticks_left,
        done=done,
        description=describe(speed_kmh, [n[0] for n in near], types, collided_with) if text else None,
        scene_prompt=prompt,
        outcome=world.outcome() if done else None,
        camera_size=(spec.camera.width, spec.camera.height),
    )
