"""One tick of trolley worlds: the state, the tool calls' effect on the controls, and the tick itself.

This is the one place where a trolley world moves. `TrolleyState` holds one world in Python
scalars (`carla_gym.sim.world.World`, with ``m=SCALAR``) or N worlds in numpy arrays with a
leading batch dimension (`carla_gym.sim.batch.TrolleyBatch`, with ``m=NUMPY``); `apply` and
`tick` are written once for both, out of the rules of their own modules:

* `carla_gym.sim.control`: what a tool call does to the persistent controls, and the controllers;
* `carla_gym.sim.kinematics`: the bicycle model with its friction circle;
* `carla_gym.sim.collision`: the swept test between the ego's box and the pedestrians;
* `carla_gym.sim.road`: lanes and the road surface;
* `carla_gym.sim.rules`: classification, episode end, raw and rubric rewards.

Row i of a batch computes exactly the bits world i computes alone (every operation is
elementwise, and the scalar namespace uses numpy's ufuncs for transcendental functions).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim import rules
from carla_gym.sim.collision import broad_reach, swept_contacts, swept_hits
from carla_gym.sim.control import Controls
from carla_gym.sim.kinematics import NUMPY, SCALAR, EgoState, step_ego
from carla_gym.sim.road import lane_at, nearest_lane, on_road
from carla_gym.sim.scenarios import ScenarioSpec

FAR = 1.0e6
"""Position [m] of padding pedestrians in a batch (rows with fewer pedestrians than the widest): never near."""

REACH = np.hypot(0.5 * C.EGO_LENGTH, 0.5 * C.EGO_WIDTH) + C.WALKER_RADIUS + C.MAX_SPEED * C.DT
"""Largest distance [m] from the ego centre at which a tick can touch a pedestrian (box half diagonal,
disc radius and one tick at the speed cap)."""


@dataclass
class TrolleyState:
    """The state of one trolley world (scalars) or of N worlds (arrays with leading dimension N).

    Attributes:
        ego: Ego pose and motion (`EgoState`: float64 or (N,)).
        controls: Persistent controls (`Controls`).
        swerve: Running swerve code (`carla_gym.sim.rules.NO_SWERVE`, 0 left, 1 right): int or int (N,).
        braked: Whether a braking tool was called: bool or bool (N,).
        tick: Ticks simulated (upstream ``env_step``): int or int64 (N,).
        hit: Which pedestrians have been hit: bool (W,) or (N, W).
        first_hit: Index of the first pedestrian hit, -1 before any: int or int64 (N,).
        road_departure: Whether the ego centre has left the road: bool or bool (N,).
        done: Whether the episode has ended: bool or bool (N,).
        walker_x: Pedestrian positions along the road [m]: float64 (W,) or (N, W) (padding at `FAR`).
        walker_y: Pedestrian lateral positions [m], like ``walker_x``.
        walker_count: Pedestrians of the scenario (the rest of a batch row is padding): int or (N,).
        lane_lo: Leftmost road lane (``Road.lanes[0]``): int or (N,).
        lane_hi: Rightmost road lane: int or (N,).
        lane_width: Lane width [m]: float or (N,).
        horizon: `ScenarioSpec.horizon` [ticks]: int or (N,).
        action_bias: Whether the scenario is of the action_bias family: bool or (N,).
        ends_on_hit: Whether the first collision ends the episode (`ScenarioSpec.ends_on_hit`): bool or (N,).
        raw: Upstream raw reward of each action class (`carla_gym.sim.rules.raw_rewards`): float64 (4,) or (N, 4).
        box: One world: the pedestrians' bounding box grown by `REACH` ``(x_lo, x_hi, y_lo, y_hi)`` [m]
            (no collision test while the ego centre is outside it), None without pedestrians; None in a batch.
    """

    ego: EgoState
    controls: Controls
    swerve: Any
    braked: Any
    tick: Any
    hit: np.ndarray
    first_hit: Any
    road_departure: Any
    done: Any
    walker_x: np.ndarray
    walker_y: np.ndarray
    walker_count: Any
    lane_lo: Any
    lane_hi: Any
    lane_width: Any
    horizon: Any
    action_bias: Any
    ends_on_hit: Any
    raw: np.ndarray
    box: tuple[float, float, float, float] | None = None


def initial_state(spec: ScenarioSpec, scored: bool = True) -> TrolleyState:
    """The state of one world at the start of an episode of ``spec`` (Python scalars, numpy per pedestrian).

    Args:
        spec: The scenario.
        scored: False leaves the raw rewards at 0: for the rollouts that compute a generated
            scenario's rubric (`carla_gym.sim.outcomes`), which read outcomes only.
    """
    xs, ys = [w.x for w in spec.walkers], [w.y for w in spec.walkers]
    box = (min(xs) - REACH, max(xs) + REACH, min(ys) - REACH, max(ys) + REACH) if xs else None
    return TrolleyState(
        ego=EgoState(x=0.0, y=0.0, yaw=0.0, speed=spec.initial_speed_kmh / C.KMH_PER_MS),
        controls=Controls(),
        swerve=rules.NO_SWERVE,
        braked=False,
        tick=0,
        hit=np.zeros(len(spec.walkers), dtype=bool),
        first_hit=-1,
        road_departure=False,
        done=False,
        walker_x=np.array([w.x for w in spec.walkers], dtype=np.float64),
        walker_y=np.array([w.y for w in spec.walkers], dtype=np.float64),
        walker_count=len(spec.walkers),
        lane_lo=spec.road.lanes[0],
        lane_hi=spec.road.lanes[-1],
        lane_width=spec.road.lane_width,
        horizon=spec.horizon,
        action_bias=spec.family == "action_bias",
        ends_on_hit=spec.ends_on_hit,
        raw=np.array(rules.raw_rewards(spec) if scored else (0.0,) * len(rules.ACTION_CODE), dtype=np.float64),
        box=box,
    )


STATE_FIELDS = tuple(f.name for f in fields(TrolleyState) if f.name not in ("ego", "controls", "box"))
"""`TrolleyState` fields besides the ego and the controls."""
EGO_FIELDS = tuple(f.name for f in fields(EgoState))
"""`EgoState` fields."""
CONTROL_FIELDS = tuple(f.name for f in fields(Controls))
"""`Controls` fields."""


def heading_strip(s: TrolleyState, m=SCALAR):
    """Lane strip (`carla_gym.sim.road.lane_at`) of where the car is heading.

    That is its position after a ``control`` call, else the end of the lane-change path it follows
    (int, or float (N,) of whole numbers with ``m=NUMPY``).
    """
    heading_y = m.where(s.controls.manual_steer, s.ego.y, s.controls.path_y1)
    return lane_at(heading_y, s.lane_width, m.floor)


def heading_lane(s: TrolleyState, m=SCALAR):
    """The road lane nearest where the car is heading (`carla_gym.sim.road.nearest_lane`, as ``lane`` reports it)."""
    heading_y = m.where(s.controls.manual_steer, s.ego.y, s.controls.path_y1)
    return nearest_lane(heading_y, s.lane_lo, s.lane_hi, s.lane_width, m.floor)


def lane_flags(lane, lane_lo, lane_hi):
    """Whether a road lane exists left and right of road lane ``lane`` (ints, or int arrays (N,))."""
    return lane - 1 >= lane_lo, lane + 1 <= lane_hi


def ticks_left(tick, horizon, m=SCALAR):
    """Ticks until the scenario's deadline or step limit (`ScenarioSpec.horizon`), never negative."""
    return m.maximum(horizon - tick, 0)


def decision_ticks(kind, ticks: int, m=SCALAR):
    """Ticks a decision runs after its call: ``ticks``, or 0 for ``capture_image`` (it reads the scene only)."""
    return m.where(kind == rules.KIND["capture_image"], 0, ticks)


def apply(s: TrolleyState, kind, throttle=0.0, brake=0.0, steer=0.0, cruise_kmh=0.0, target_lane=0, direction=0,
          m=SCALAR) -> None:
    """Execute tool calls: change the persistent controls and record the classification. No time passes.

    What each kind does is in `carla_gym.sim.control`'s table. Arguments are scalars for one world
    or arrays of shape (N,) (``m=NUMPY``); values a kind does not read are ignored.

    Args:
        s: The state; changed in place.
        kind: Tool kind code (index into `carla_gym.sim.rules.ACTION_TYPES`).
        throttle: Throttle in [0, 1] the call sets (``control``; 0 for the brakes).
        brake: Brake in [0, 1] the call sets (``control``; 1 for ``emergency_stop``, the intensity for
            ``brake_vehicle``).
        steer: ``control`` steer in [-1, 1].
        cruise_kmh: ``maintain_speed`` target [km/h].
        target_lane: ``lane_change`` target lane strip (e.g. `heading_strip` - 1 for "left").
        direction: ``lane_change`` side the classification records: -1 left, +1 right, 0 none.
        m: Math namespace (`carla_gym.sim.kinematics.SCALAR` or ``NUMPY``).
    """
    ctl, K = s.controls, rules.KIND
    control = kind == K["control"]
    pedals = control | (kind == K["emergency_stop"]) | (kind == K["brake_vehicle"])
    cruise = kind == K["maintain_speed"]
    release = (kind == K["emergency_stop"]) | (kind == K["brake_vehicle"]) | cruise
    ctl.throttle = m.where(pedals, throttle, ctl.throttle)
    ctl.brake = m.where(pedals, brake, ctl.brake)
    ctl.cruise = m.where(pedals, False, m.where(cruise, True, ctl.cruise))
    ctl.cruise_kmh = m.where(cruise, cruise_kmh, ctl.cruise_kmh)
    ctl.steer = m.where(control, steer, m.where(release & ctl.manual_steer, 0.0, ctl.steer))
    ctl.manual_steer = m.where(control, True, ctl.manual_steer)
    lane = kind == K["lane_change"]
    if m is SCALAR:
        if lane:
            ego = s.ego
            ctl.change_lane(ego.x, ego.y, ego.yaw, target_lane * s.lane_width, ego.speed)
    else:
        rows = np.flatnonzero(lane)
        if len(rows):
            ego = s.ego
            sub = Controls(*(getattr(ctl, f)[rows] for f in CONTROL_FIELDS))
            target = np.broadcast_to(target_lane, lane.shape)[rows] * np.broadcast_to(s.lane_width, lane.shape)[rows]
            sub.change_lane(ego.x[rows], ego.y[rows], ego.yaw[rows], target, ego.speed[rows], NUMPY)
            for f in CONTROL_FIELDS:
                getattr(ctl, f)[rows] = getattr(sub, f)
    s.swerve, s.braked = rules.record(s.swerve, s.braked, kind, direction, steer, brake, m)


def tick(s: TrolleyState, m=SCALAR):
    """Advance by one tick of `DT` seconds and score it (every world of a batch).

    Args:
        s: The state; changed in place.
        m: Math namespace (`carla_gym.sim.kinematics.SCALAR` or ``NUMPY``).

    Returns:
        ``(raw_reward, rubric_reward, new_hits)``: upstream's raw and rubric rewards of the tick and
        the pedestrians hit for the first time during it (scalars, or arrays of shape (N,)).
    """
    before = s.ego
    throttle, brake, steer = s.controls.commands(before, m=m)
    s.ego = after = step_ego(before, throttle, brake, steer, m=m)
    s.tick = s.tick + 1
    new_hits = _collide(s, before, after, m)
    s.road_departure = s.road_departure | m.not_(on_road(after.y, s.lane_lo, s.lane_hi, s.lane_width))
    action = rules.action_code(s.swerve, s.braked, m)
    s.done = rules.done_code(s.action_bias, s.tick, s.horizon, action, (s.first_hit >= 0) & s.ends_on_hit)
    raw = s.raw[action] if m is SCALAR else np.take_along_axis(s.raw, action[:, None], axis=1)[:, 0]
    return raw, rules.rubric_reward(s.done, raw, m), new_hits


def _collide(s: TrolleyState, before: EgoState, after: EgoState, m) -> Any:
    """Mark pedestrians the ego touched this tick (`carla_gym.sim.collision`); return how many are new."""
    if m is SCALAR:
        box = s.box
        if box is None or not (box[0] <= after.x <= box[1] and box[2] <= after.y <= box[3]):
            return 0  # nobody within REACH: the broad phase below would be empty
        touched = [i for i in swept_hits(before, after, s.walker_x, s.walker_y) if not s.hit[i]]
        if not touched:
            return 0
        if s.first_hit < 0:
            s.first_hit = touched[0]
        s.hit[touched] = True
        return len(touched)
    dx, dy = s.walker_x - after.x[:, None], s.walker_y - after.y[:, None]
    reach = broad_reach(before.x, before.y, after.x, after.y)
    rows, cols = np.nonzero((dx * dx + dy * dy <= reach[:, None]) & ~s.hit)
    new_hits = np.zeros(len(after.x), dtype=np.int64)
    if not len(rows):
        return new_hits
    def pick(e: EgoState) -> EgoState:
        return EgoState(*(getattr(e, f)[rows] for f in EGO_FIELDS))

    touched = swept_contacts(pick(before), pick(after), s.walker_x[rows, cols], s.walker_y[rows, cols])
    rows, cols = rows[touched], cols[touched]
    if not len(rows):
        return new_hits
    s.hit[rows, cols] = True
    first_rows, first = np.unique(rows, return_index=True)  # nonzero is row-major: the lowest index first
    s.first_hit[first_rows] = np.where(s.first_hit[first_rows] < 0, cols[first], s.first_hit[first_rows])
    return np.bincount(rows, minlength=len(after.x))


def ego_offsets(dx, dy, cos_yaw, sin_yaw):
    """A point at road-frame offset (dx, dy) [m] from the ego centre, in the ego frame: forward [m], right [m].

    The one rule for where an actor is relative to the ego (floats or arrays that broadcast; the
    renderer uses it too, `carla_gym.sim.render`).
    """
    return dx * cos_yaw + dy * sin_yaw, dy * cos_yaw - dx * sin_yaw


def ego_frame(dx, dy, cos_yaw, sin_yaw, sqrt):
    """`ego_offsets` with the distance first: distance [m], forward [m], right [m].

    Floats (``sqrt=math.sqrt``) or arrays (``sqrt=numpy.sqrt``), with the same bits (square roots
    are correctly rounded in both).
    """
    return (sqrt(dx * dx + dy * dy), *ego_offsets(dx, dy, cos_yaw, sin_yaw))


def nearby(s: TrolleyState) -> list[tuple[float, int, float, float]]:
    """One world's pedestrians within `NEARBY_RADIUS`, nearest first (ties in placement order).

    Returns:
        ``(distance [m], index, forward [m], right [m])`` tuples (`ego_frame`).
    """
    ex, ey, yaw = s.ego.x, s.ego.y, s.ego.yaw
    c, sn = SCALAR.cos(yaw), SCALAR.sin(yaw)
    near = []
    for i, (x, y) in enumerate(zip(s.walker_x.tolist(), s.walker_y.tolist(), strict=True)):
        d, f, r = ego_frame(x - ex, y - ey, c, sn, math.sqrt)
        if d <= C.NEARBY_RADIUS:
            near.append((d, i, f, r))
    near.sort()
    return near


def nearest_actors(s: TrolleyState, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's ``count`` nearest pedestrians within `NEARBY_RADIUS` of each ego, ordered as `nearby` orders them.

    Args:
        s: A batch state (arrays; padding pedestrians sit at `FAR`, never near).
        count: Entries per world, at most.

    Returns:
        ``(forward [m], right [m], present)``: float64, float64 and bool arrays of shape (N, K) with
        K = min(count, W); entries past the pedestrians within the radius are 0 and False.
    """
    ex, ey, yaw = s.ego.x[:, None], s.ego.y[:, None], s.ego.yaw[:, None]
    distance, forward, right = ego_frame(s.walker_x - ex, s.walker_y - ey, NUMPY.cos(yaw), NUMPY.sin(yaw), np.sqrt)
    n, width = distance.shape
    near = distance <= C.NEARBY_RADIUS
    order = np.argsort(np.where(near, distance, np.inf), axis=1, kind="stable")[:, :count]
    flat = (order + (np.arange(n) * width)[:, None]).ravel()  # flat indices: one gather per quantity
    shape = order.shape
    present = near.ravel()[flat].reshape(shape)
    return (np.where(near, forward, 0.0).ravel()[flat].reshape(shape),
            np.where(near, right, 0.0).ravel()[flat].reshape(shape), present)
