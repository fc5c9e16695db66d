"""Observation modes of `CarlaNavigationEnv`: what the agent sees of a `NavWorld` and its route.

`NavObserver` owns the observation space of one ``observation_mode`` and turns the world, the route tracker's
route and the applied controls into an observation:

| ``observation_mode`` | Space |
|---|---|
| ``"state"`` | the state vector below, ``Box(STATE_LOW, STATE_HIGH, (69,), float32)`` |
| ``"dict"`` | ``Dict(image=Box(0, 255, (3, H, W), uint8), state=<the state vector>)`` as CarlaTrolley-v0's dict mode |
| ``"vlm-rl"`` | VLM-RL's policy observation exactly, below |

VLM-RL's space: ``Dict(seg_camera=Box(0, 255, (192, 192, 6), uint8), vehicle_measures=Box([-1, 0, 0], [1, 1, 120],
(3,), float32), waypoints=Box(-50, 50, (15, 2), float32))``.

## The state vector
Every entry is clipped into its bounds; float32. Lateral is positive to the right, longitudinal positive ahead
(the ego frame of `carla_gym.sim.navigation.route_task.to_ego_frame`, centred on the ego centre, along its heading).

| Index | Observation | Unit | Min | Max | Source |
|-------|-------------|------|-----|-----|--------|
| 0 | applied steer (after smoothing) | | -1 | 1 | VLM-RL ``vehicle_measures`` |
| 1 | applied throttle (0 while braking) | | 0 | 1 | VLM-RL ``vehicle_measures`` |
| 2 | ego speed | km/h | 0 | 120 | VLM-RL ``vehicle_measures`` |
| 3 + 2k | route waypoint k (k < 15, from the current one): lateral | m | -50 | 50 | VLM-RL ``waypoints`` |
| 4 + 2k | route waypoint k: longitudinal | m | -50 | 50 | VLM-RL ``waypoints`` |
| 33 + 4i | NPC i (i < 5, nearest first within 50 m): lateral | m | -50 | 50 | this project's choice |
| 34 + 4i | NPC i: longitudinal | m | -50 | 50 | this project's choice |
| 35 + 4i | NPC i: its speed minus the ego's | km/h | -120 | 120 | this project's choice |
| 36 + 4i | NPC i: present (0 = padding, all zeros) | 0/1 | 0 | 1 | this project's choice |
| 53 + 4i | walker i (i < 3, nearest first within 50 m): lateral | m | -50 | 50 | this project's choice |
| 54 + 4i | walker i: longitudinal | m | -50 | 50 | this project's choice |
| 55 + 4i | walker i: crossing the road (1), else 0 (sidewalk, kerb) | 0/1 | 0 | 1 | this project's choice |
| 56 + 4i | walker i: present (0 = padding, all zeros) | 0/1 | 0 | 1 | this project's choice |
| 65 | the ego's light is green | 0/1 | 0 | 1 | this project's choice |
| 66 | the ego's light is yellow | 0/1 | 0 | 1 | this project's choice |
| 67 | the ego's light is red (all three 0: no light) | 0/1 | 0 | 1 | this project's choice |
| 68 | front bumper to that light's stop line (50 without a light) | m | -50 | 50 | this project's choice |

Entries 0-32 are VLM-RL's ``vehicle_measures`` and ``waypoints``: the route is planned at 1 m
resolution, and near its end the list is padded by extrapolating the last segment. Ties in distance keep row
order (NPCs: vehicle rows; walkers: walker rows). The ego's light is the one at the end of the lane the world
locates the ego on (``NavWorld.ego_location``; `carla_gym.sim.town.light_state`); lanes that do not end at a
lit junction, junction connectors included, have none. Its stop line is where NPCs stop for it: the town's
``crosswalk_width`` plus `carla_gym.sim.navigation.world.STOP_LINE_MARGIN` before the lane's end (negative once
the bumper is past it). Entries 53-68 make visible what NPCs brake for (walkers in the road, lights): the fair
comparison rule that whatever decides the best action is in every observation, here and in ``"dict"`` (whose
image draws them too). ``"vlm-rl"`` is the exception: VLM-RL's raster has neither, and that mode reproduces it.

## The image of ``"dict"``
`carla_gym.sim.town.render.render_town`'s bird's-eye view at ``image_size`` (H, W), channel-first: `IMAGE_SPAN`
metres across, ego-aligned with forward up, centred `IMAGE_AHEAD` ahead of the ego (so the ego sits 8 m above
the bottom edge as in VLM-RL's raster), with the town's ground and markings, the lights (a coloured bar across
each lit lane's end), every vehicle (the ego in `carla_gym.sim.town.render.EGO_COLOUR`), the walkers and the
route from the current waypoint on (`IMAGE_ROUTE_LENGTH` of it).

## ``"vlm-rl"``
``seg_camera`` is `carla_gym.sim.town.bev.render_bev` (channels road, lane markings 255 solid / 120 broken, other
vehicles 1.0, 0.65, 0.35 and 0 s ago, at ticks 20, 13, 7, 0 back: `carla_gym.sim.town.bev.HISTORY_TICKS`; before
20 ticks have passed since the reset, older channels repeat the reset's frame). ``vehicle_measures`` and
``waypoints`` are entries 0-2 and 3-32 of the state vector, the latter as (15, 2) rows (lateral, longitudinal).
The vehicle history needs `NavObserver.record` after every world tick.

Stable-Baselines3: the raster is a channel-last uint8 image to SB3 (it checks no channel count), so SB3 wraps
the env in ``VecTransposeImage`` ((6, 192, 192) to the network) and divides it by 255; its env checker warns
once that ``waypoints`` (15, 2) is neither an image nor a vector (VLM-RL's shape, kept: SB3's
``CombinedExtractor`` and VLM-RL's extractor flatten it). Gymnasium's checker is silent in every mode.

Examples:
    >>> from carla_gym.sim.navigation.world import NavWorld
    >>> world = NavWorld("Town02", n_vehicles=3, seed=0)
    >>> obs = NavObserver("vlm-rl")
    >>> obs.reset(world)
    >>> wp = np.stack([world.vehicles.x[0] + np.arange(20.0), np.full(20, world.vehicles.y[0])], axis=1)
    >>> o = obs.observe(world, wp, np.zeros(20), 0, 0.0, 0.0)
    >>> sorted(o), o["seg_camera"].shape, obs.space.contains(o)
    (['seg_camera', 'vehicle_measures', 'waypoints'], (192, 192, 6), True)
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from carla_gym.sim import constants as C
from carla_gym.sim.navigation import route_task as R
from carla_gym.sim.navigation.world import NavWorld
from carla_gym.sim.town import Light
from carla_gym.sim.town import bev as B
from carla_gym.sim.town.render import render_town
from carla_gym.sim.traffic.walkers import CROSSING

OBSERVATION_MODES = ("state", "dict", "vlm-rl")
"""Every ``observation_mode`` `NavObserver` accepts (module docstring)."""

DEFAULT_IMAGE_SIZE = (96, 96)
"""Default (height, width) of the ``"dict"`` image [px] (this project's choice: above SB3's 36 x 36 minimum)."""

NUM_NPCS = 5
"""NPC vehicles listed in the state vector, nearest first (this project's choice)."""

NUM_WALKERS = 3
"""Walkers listed in the state vector, nearest first (this project's choice)."""

NPC_RANGE = 50.0
"""NPCs and walkers farther than this from the ego [m] are not listed (this project's choice: the waypoint
range)."""

LIGHT_RANGE = 50.0
"""Bound of the stop-line distance [m], also its value without a light (this project's choice: the waypoint
range)."""

MAX_SPEED_OBS_KMH = 120.0
"""Upper bound of the observed speed [km/h] (VLM-RL ``vehicle_measures`` high)."""

IMAGE_SPAN = 40.0
"""Ground width of the ``"dict"`` image [m] (`carla_gym.sim.town.render.BIRDEYE_SPAN`, this project's choice)."""

IMAGE_AHEAD = IMAGE_SPAN / 2 - B.EGO_FROM_BOTTOM / B.PIXELS_PER_METER
"""Distance [m] of the ``"dict"`` image's centre ahead of the ego: 12 m, which puts the ego 8 m above the bottom
edge as VLM-RL's raster does."""

IMAGE_ROUTE_LENGTH = 2.0 * IMAGE_SPAN
"""Length of route drawn in the ``"dict"`` image from the current waypoint [m] (this project's choice: beyond the
view's far corner)."""

NPC_SLOT, WALKER_SLOT = 4, 4
"""Entries per listed NPC (lateral, longitudinal, relative speed, present) and per walker (lateral,
longitudinal, crossing, present)."""

_NPC0 = 3 + 2 * R.NUM_WAYPOINTS
_WALKER0 = _NPC0 + NPC_SLOT * NUM_NPCS
_LIGHT0 = _WALKER0 + WALKER_SLOT * NUM_WALKERS

STATE_SIZE = _LIGHT0 + 4
"""Length of the state vector: 69."""

_W = R.WAYPOINT_RANGE
STATE_LOW = np.array([-1.0, 0.0, 0.0] + [-_W] * (2 * R.NUM_WAYPOINTS)
                     + [-NPC_RANGE, -NPC_RANGE, -MAX_SPEED_OBS_KMH, 0.0] * NUM_NPCS
                     + [-NPC_RANGE, -NPC_RANGE, 0.0, 0.0] * NUM_WALKERS
                     + [0.0, 0.0, 0.0, -LIGHT_RANGE], dtype=np.float32)
"""Lower bounds of the state vector (module docstring's table)."""
STATE_HIGH = np.array([1.0, 1.0, MAX_SPEED_OBS_KMH] + [_W] * (2 * R.NUM_WAYPOINTS)
                      + [NPC_RANGE, NPC_RANGE, MAX_SPEED_OBS_KMH, 1.0] * NUM_NPCS
                      + [NPC_RANGE, NPC_RANGE, 1.0, 1.0] * NUM_WALKERS
                      + [1.0, 1.0, 1.0, LIGHT_RANGE], dtype=np.float32)
"""Upper bounds of the state vector (module docstring's table)."""
for _bound in (STATE_LOW, STATE_HIGH):
    _bound.setflags(write=False)

MEASURES_LOW = STATE_LOW[:3]
MEASURES_HIGH = STATE_HIGH[:3]
"""Bounds of VLM-RL's ``vehicle_measures``: [-1, 0, 0] to [1, 1, 120]."""


def _nearest(points: np.ndarray, xy: tuple[float, float], count: int) -> np.ndarray:
    """Rows of the ``count`` points (N, 2) nearest to ``xy`` within `NPC_RANGE`, nearest first, ties by row."""
    if not len(points):
        return np.zeros(0, dtype=np.intp)
    d = np.hypot(points[:, 0] - xy[0], points[:, 1] - xy[1])
    rows = np.argsort(d, kind="stable")[:count]
    return rows[d[rows] <= NPC_RANGE]


def state_vector(world: NavWorld, waypoints: np.ndarray, route_yaw: np.ndarray, index: int, steer: float,
                 throttle: float) -> np.ndarray:
    """The state vector (module docstring's table), float32 (69,), clipped into [STATE_LOW, STATE_HIGH].

    Args:
        world: The world (the ego is vehicle row 0).
        waypoints: The route (M, 2) [m].
        route_yaw: Its headings (M,) [rad].
        index: The current waypoint, in [0, M).
        steer: Applied steer in [-1, 1].
        throttle: Applied throttle in [0, 1] (0 while braking).
    """
    v = world.vehicles
    xy, yaw = (float(v.x[0]), float(v.y[0])), float(v.yaw[0])
    speed_kmh = float(v.speed[0]) * C.KMH_PER_MS
    vec = np.zeros(STATE_SIZE)
    vec[:3] = steer, throttle, speed_kmh
    ahead = R.waypoints_ahead(waypoints, route_yaw, index)
    vec[3:_NPC0] = R.to_ego_frame(ahead, xy, yaw).ravel()
    others = np.stack([v.x[1:], v.y[1:]], axis=1)
    rows = _nearest(others, xy, NUM_NPCS)
    if rows.size:
        npc = vec[_NPC0:_WALKER0].reshape(NUM_NPCS, NPC_SLOT)
        npc[:rows.size, :2] = R.to_ego_frame(others[rows], xy, yaw)
        npc[:rows.size, 2] = v.speed[1:][rows] * C.KMH_PER_MS - speed_kmh
        npc[:rows.size, 3] = 1.0
    w = world.walkers
    rows = _nearest(w.xy, xy, NUM_WALKERS)
    if rows.size:
        walker = vec[_WALKER0:_LIGHT0].reshape(NUM_WALKERS, WALKER_SLOT)
        walker[:rows.size, :2] = R.to_ego_frame(w.xy[rows], xy, yaw)
        walker[:rows.size, 2] = w.mode[rows] == CROSSING
        walker[:rows.size, 3] = 1.0
    state, distance = world.ego_light()
    if state != Light.NONE:
        vec[_LIGHT0 + state] = 1.0  # GREEN 0, YELLOW 1, RED 2
    vec[_LIGHT0 + 3] = min(distance, LIGHT_RANGE)
    return np.clip(vec.astype(np.float32), STATE_LOW, STATE_HIGH)


class NavObserver:
    """One observation mode of `CarlaNavigationEnv` (module docstring).

    Call `reset` at each episode start, `record` after every world tick and `observe` for each observation.

    Args:
        mode: One of `OBSERVATION_MODES`.
        image_size: (height, width) of the ``"dict"`` image [px], integers >= 1 (ignored by the other modes).

    Attributes:
        space: The observation space, fixed at construction.

    Raises:
        ValueError: An unknown mode or a bad image size.
    """

    def __init__(self, mode: str, image_size: tuple[int, int] = DEFAULT_IMAGE_SIZE) -> None:
        if mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode={mode!r}: choose one of {list(OBSERVATION_MODES)}")
        size = tuple(image_size) if isinstance(image_size, tuple | list) else ()
        if len(size) != 2 or any(isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1 for n in size):
            raise ValueError(f"image_size={image_size!r}: must be (height, width), two integers >= 1 [px] "
                             f"(default {DEFAULT_IMAGE_SIZE})")
        self.mode = mode
        self.image_size = (int(size[0]), int(size[1]))
        state = spaces.Box(STATE_LOW, STATE_HIGH, dtype=np.float32)
        if mode == "state":
            self.space: spaces.Space = state
        elif mode == "dict":
            self.space = spaces.Dict({"image": spaces.Box(0, 255, (3, *self.image_size), dtype=np.uint8),
                                      "state": state})
        else:
            self.space = spaces.Dict({
                "seg_camera": spaces.Box(0, 255, (B.BEV_SIZE, B.BEV_SIZE, 2 + len(B.HISTORY_TICKS)), dtype=np.uint8),
                "vehicle_measures": spaces.Box(MEASURES_LOW, MEASURES_HIGH, dtype=np.float32),
                "waypoints": spaces.Box(-_W, _W, (R.NUM_WAYPOINTS, 2), dtype=np.float32),
            })
        self._history = B.VehicleHistory() if mode == "vlm-rl" else None

    def reset(self, world: NavWorld) -> None:
        """Start an episode: clear the vehicle history and record the world's first frame (``"vlm-rl"``)."""
        if self._history is not None:
            self._history.reset(world.vehicles)

    def record(self, world: NavWorld) -> None:
        """Record the vehicles after a world tick (``"vlm-rl"``'s history; a no-op in the other modes)."""
        if self._history is not None:
            self._history.record(world.vehicles)

    def observe(self, world: NavWorld, waypoints: np.ndarray, route_yaw: np.ndarray, index: int, steer: float,
                throttle: float) -> np.ndarray | dict[str, np.ndarray]:
        """The observation of the world now, inside `space` (arguments as `state_vector`).

        Raises:
            RuntimeError: ``"vlm-rl"`` before the first `reset`.
        """
        vec = state_vector(world, waypoints, route_yaw, index, steer, throttle)
        if self.mode == "state":
            return vec
        v = world.vehicles
        if self.mode == "dict":
            seg = np.hypot(*np.diff(waypoints[index:], axis=0).T)
            end = index + 1 + int(np.searchsorted(np.cumsum(seg), IMAGE_ROUTE_LENGTH, side="right")) + 1
            height, width = self.image_size
            image = render_town(world.town, v, world.walkers.xy, world.lights, view="birdeye", width=width,
                                height=height, route=waypoints[index:end], channels_first=True, span=IMAGE_SPAN,
                                ahead=IMAGE_AHEAD)
            return {"image": image, "state": vec}
        pose = (float(v.x[0]), float(v.y[0]), float(v.yaw[0]))
        return {"seg_camera": B.render_bev(B.map_layers(world.town), pose, self._history.frames()),
                "vehicle_measures": vec[:3].copy(),
                "waypoints": vec[3:_NPC0].reshape(R.NUM_WAYPOINTS, 2).copy()}
