"""A navigation world: a town with NPC traffic, traffic lights, walkers and the ego, ticked as arrays.

Gym-free world model (HighwayEnv style): `NavWorld` holds one town, every vehicle as a row of
`carla_gym.sim.traffic.vehicles.Vehicles` (row 0 the ego, rows 1..N the NPCs), the walkers as
`carla_gym.sim.traffic.walkers.Walkers`, and steps them all with vectorised functions. Every
random number comes from one `numpy.random.Generator` seeded at construction: the same seed and
the same ego controls give bit-identical worlds.

One tick (`NavWorld.tick`), in this order:

1. Lights: `carla_gym.sim.town.light_state` at the tick's start time.
2. Junctions (`carla_gym.sim.navigation.junctions`): vehicles occupying a connector hold it,
   vehicles whose rear has cleared theirs release it, then vehicles near the end of their lane ask
   for their next connector (NPCs always; the ego only while it has a route, see
   `NavWorld.set_goal`) if they are the first vehicle on their lane and their light is green (or
   yellow and they cannot stop), and are granted first come first served (pairs with the ego use the
   wider `LOOSE_CONFLICT_DISTANCE`: the ego may be driven loosely).
3. NPC longitudinal control, the IDM (`carla_gym.sim.traffic.idm`) behind the nearest of:
   a vehicle (the ego included) on its lane ahead, its next lane, or the lane after that where
   the next lane has a single successor; a standing leader at its lane's end when the light
   there is red, or yellow and it can still stop (`STOP_DECELERATION`), unless it holds its next
   connector already (committed), or when it waits for the grant of its next connector; a
   standing leader at a walker in its corridor ahead (within `WALKER_HORIZON`, straight ahead of
   the car: approximate in curves); and a leader at the next lane's start driving that lane's
   curve speed (`CURVE_ACCELERATION`) when the car is faster; a standing leader
   `CROSSWALK_STOP_MARGIN` before the zone (`carla_gym.sim.navigation.junctions.crosswalk_zones`) of a
   crosswalk on its current, next or after-next lane while a walker crosses there, unless its front
   is already in the zone. Steering: pure pursuit (`carla_gym.sim.traffic.lanes.pursuit_steer`).
4. Walkers step (`carla_gym.sim.traffic.walkers.step_walkers`), told per crosswalk how soon the first
   vehicle (the ego included) reaches its zone at its current speed along its lanes (0 while a
   vehicle is in it): a walker who wants to cross waits at the kerb until that time exceeds its
   crossing time plus `carla_gym.sim.traffic.walkers.YIELD_MARGIN`.
5. All vehicles step at once with the shared bicycle model, each with its own wheelbase.
6. Swept contacts over the tick (`carla_gym.sim.traffic.collision`): ego-vehicle, ego-walker,
   NPC-NPC (the negotiation above keeps it at 0) and NPC-walker (walkers yield at crosswalks and NPCs
   stop for walkers on them, which keeps it at 0 without jaywalkers; a jaywalker stepping out within
   an NPC's stopping distance can still be hit; counted).
7. NPC routes advance (`carla_gym.sim.traffic.lanes.advance_routes`; a route at a dead end
   respawns at a spawn point at least 10 m from every vehicle, the ego included), the ego is located on
   the lane network, time advances.

Known limits: gridlock is possible at very high densities (a car
holding a connector waits for room on its exit lane); the ego's own lane comes from the nearest
lane point when it has no route, so in a junction it may count on an overlapping connector.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from functools import cache

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.agents import (
    AgentParams,
    Obstacles,
    PlannerState,
    agent_params,
    agent_step,
    make_routes,
)
from carla_gym.sim.agents.local_planner import Routes as PlannerRoutes
from carla_gym.sim.agents.local_planner import pop_reached
from carla_gym.sim.kinematics import EgoState
from carla_gym.sim.navigation.adapters import lanes_from_town, sidewalks_from_town
from carla_gym.sim.navigation.junctions import (
    CLEAR_DISTANCE,
    CROSSWALK_ZONE_MARGIN,
    LOOSE_CONFLICT_DISTANCE,
    conflicts,
    crosswalk_zones,
    grant,
)
from carla_gym.sim.town import (
    Light,
    Location,
    RoadOption,
    Route,
    Town,
    get_town,
    light_state,
    light_steady_interval,
    locate,
    plan_route,
)
from carla_gym.sim.traffic.collision import vehicle_contacts, walker_contacts
from carla_gym.sim.traffic.idm import URBAN, IDMParams, idm_acceleration, pedals_for
from carla_gym.sim.traffic.lanes import LEADER_HORIZON, Lanes, Routes, advance_routes, pursuit_steer, start_routes
from carla_gym.sim.traffic.vehicles import Vehicles, make_vehicles, step_vehicles
from carla_gym.sim.traffic.walkers import CROSSING, Sidewalks, Walkers, spawn_walkers, step_walkers

STOP_DECELERATION = 4.0
"""Deceleration [m/s^2] up to which an NPC stops for a yellow light; a faster one drives on (own
choice: half the brakes' `MAX_DECELERATION`, twice the IDM's comfortable 2 m/s^2)."""

STOP_LINE_MARGIN = 1.0
"""Distance [m] before a lane end's crosswalk (the town's ``crosswalk_width`` before the lane's end) at
which a stopping car's front bumper comes to rest (own choice)."""

REQUEST_TIME = 2.0
"""A vehicle asks for its next connector once its front is within ``speed * REQUEST_TIME +
REQUEST_DISTANCE`` of the stop line (own choice: about a comfortable stop plus 10 m)."""

REQUEST_DISTANCE = 10.0
"""Fixed part of the request distance [m] (see `REQUEST_TIME`)."""

CURVE_ACCELERATION = 3.0
"""Lateral acceleration [m/s^2] an NPC accepts in a curve: a lane's curve speed is
sqrt(CURVE_ACCELERATION / max curvature) (own choice: comfortable urban cornering, below the
bicycle model's 8 m/s^2 grip so that pure pursuit keeps the lane)."""

WALKER_HORIZON = 25.0
"""Distance ahead [m] within which NPCs brake for a walker in their corridor (own choice: above the
stopping distance from 50 km/h at the IDM's comfortable braking, which is stronger near a walker)."""

WALKER_MARGIN = 0.5
"""Extra half width [m] of an NPC's corridor for walkers, beyond the car's half width and the walker's
radius (own choice). For a walker on a crossing the corridor is a lane width (`C.LANE_WIDTH`) wider
still: cars yield to a walker who is crossing towards their path."""

CROSSWALK_STOP_MARGIN = 0.5
"""Distance [m] before a crosswalk's zone at which an NPC's front bumper stops while a walker crosses there
(own choice)."""

AUTOPILOT_HORIZON = 50.0
"""Distance along the ego's route [m] searched for vehicles and walkers by `NavWorld.autopilot_control`
(own choice: the behaviour agent's detection range is at most 70 / 3 m, as CARLA's BehaviorAgent)."""

AUTOPILOT_BACK = 10
"""Waypoints behind the planner's queue front searched for the ego's centre (`NavWorld.autopilot_control`): at
most 2 m apart, they cover the queue's reach of 3 m + 0.5 s x speed up to 34 m/s (own choice)."""

AUTOPILOT_STOP_MARGIN = 3.0
"""The ego's autopilot is told the stop line is this much nearer [m] than it is (own choice: the agents
brake only within 5 m + 1 s x speed at 0.6 brake, which stops a car at 47 km/h just after the line)."""


_GREEN, _YELLOW, _RED = int(Light.GREEN), int(Light.YELLOW), int(Light.RED)
"""`Light` values as plain ints: comparing an int8 array with an IntEnum member costs about 10x more.
`Light.NONE` is -1, below green: "no light or green" is ``light <= _GREEN``."""

_LANE_CHANGES = (int(RoadOption.CHANGELANELEFT), int(RoadOption.CHANGELANERIGHT))
"""The road options of a route's lane-change waypoints, as plain ints (`NavWorld._lane_change_wait`)."""


CURVE_BRAKING = URBAN.comfortable_deceleration
"""Deceleration [m/s^2] with which the ego's route speed limits fall towards a slower curve ahead
(`route_speed_limits`): the IDM's comfortable braking b, 2 m/s^2 (Treiber, Hennecke, Helbing 2000)."""

LANE_CHANGE_GAP = 2.0
"""Free distance [m] the autopilot wants on the target lane, ahead of and behind the ego's footprint, before
it changes lanes on its route (own choice: the IDM's minimum gap s0)."""

LANE_CHANGE_LOOKAHEAD = 15.0
"""Distance ahead [m] within which a lane change on the ego's route makes the autopilot check the target lane
(own choice: about a second at 50 km/h)."""

LANE_CHANGE_COMMITTED = 2.0
"""Distance [m] into a lane change after which the autopilot completes it whatever the target lane holds
(own choice: the route's quintic blend over 12 m has moved the car about 0.1 m sideways by then)."""

LANE_CHANGE_HEADWAY = 1.0
"""Extra gap behind the ego on the target lane, per m/s of the follower there [s] (own choice: MOBIL's safe
braking needs the follower to keep a gap; 1 s is below the IDM's 1.5 s headway, a normal merge)."""


def route_speed_limits(curve_speed: np.ndarray, waypoints: np.ndarray, braking: float = CURVE_BRAKING) -> np.ndarray:
    """Speed limit [m/s] at each waypoint of a route: its lane's curve speed, lowered ahead of slower curves.

    v_i = min over waypoints j >= i of sqrt(c_j^2 + 2 b (s_j - s_i)), with c_j the curve speed of waypoint
    j's lane (the lane's speed limit, or less in a curve: `CURVE_ACCELERATION`, the rule NPCs drive by) and
    s the distance along the route: the speed from which braking at b reaches every curve at its speed.
    CARLA's agents read only the map's limits; here the bicycle model's grip (8 m/s^2) cannot hold a tight
    junction turn at a town's limit, and an autopilot that drifted onto the kerb would hit waiting walkers.

    Args:
        curve_speed: (M,) curve speed of each waypoint's lane [m/s], > 0.
        waypoints: (M, 2) route waypoints [m].
        braking: b [m/s^2], > 0.

    Returns:
        (M,) float64 [m/s], each at most ``curve_speed``.

    Examples:
        >>> xy = np.stack([np.arange(6.0), np.zeros(6)], axis=1)
        >>> route_speed_limits(np.array([10.0, 10, 10, 10, 2, 2]), xy, braking=2.0).round(3).tolist()
        [4.472, 4.0, 3.464, 2.828, 2.0, 2.0]
    """
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(waypoints, axis=0).T))])
    reach = curve_speed**2 + 2.0 * braking * s
    return np.sqrt(np.minimum.accumulate(reach[::-1])[::-1] - 2.0 * braking * s)


@dataclass(frozen=True)
class _Static:
    """What a town gives every world: traffic arrays, conflicts and lane tables.

    ``lane_zone_id`` (L, K) int64 and ``lane_zone`` (L, K, 2) float64 list, per lane, the crosswalks
    whose zone (`crosswalk_zone`, (X, L, 2)) lies on it and that zone's ``[start, end]`` [m]
    (padded with -1 and ``[inf, -inf]``; K >= 1 is the most zones on one lane).
    """

    lanes: Lanes
    sidewalks: Sidewalks | None
    conflict: np.ndarray
    loose_conflict: np.ndarray
    connector: np.ndarray
    curve_speed: np.ndarray
    single_next: np.ndarray
    crosswalk_zone: np.ndarray
    lane_zone_id: np.ndarray
    lane_zone: np.ndarray


@cache
def _static(town: Town) -> _Static:
    curve = np.empty(len(town.lanes))
    for lane in town.lanes:
        kappa = np.abs(np.diff(np.unwrap(lane.yaw)) / np.diff(lane.s)).max() if len(lane.s) > 1 else 0.0
        curve[lane.id] = min(lane.speed_limit, np.sqrt(CURVE_ACCELERATION / max(kappa, 1e-9)))
    single = np.array([lane.successors[0] if len(lane.successors) == 1 else -1 for lane in town.lanes])
    lanes = lanes_from_town(town)
    sidewalks = sidewalks_from_town(town) if town.sidewalks else None  # a highway town may have none
    reach = town.crosswalk_width / 2 + C.WALKER_RADIUS + CROSSWALK_ZONE_MARGIN
    zones = np.empty((0, len(lanes), 2)) if sidewalks is None else crosswalk_zones(lanes, sidewalks, reach)
    on_lane = [np.flatnonzero(zones[:, lane, 0] <= zones[:, lane, 1]) for lane in range(len(lanes))]
    k = max([len(ids) for ids in on_lane] + [1])
    zone_id = np.full((len(lanes), k), -1, dtype=np.int64)
    zone = np.tile(np.array([np.inf, -np.inf]), (len(lanes), k, 1))
    for lane, ids in enumerate(on_lane):
        zone_id[lane, :len(ids)] = ids
        zone[lane, :len(ids)] = zones[ids, lane]
    return _Static(lanes, sidewalks, conflicts(town), conflicts(town, LOOSE_CONFLICT_DISTANCE),
                   np.array([lane.is_connector for lane in town.lanes]), curve, single, zones, zone_id, zone)


def _walker_margin(walkers: Walkers) -> np.ndarray:
    """Extra half width [m] of a driver's corridor for each walker, (W,): the one rule for NPCs and the autopilot.

    `WALKER_MARGIN`, and a lane width more while the walker crosses (towards the driver's path).
    """
    return WALKER_MARGIN + np.where(walkers.mode == CROSSING, C.LANE_WIDTH, 0.0)


def _no_walkers() -> Walkers:
    """Zero walkers (a town without sidewalks): every array with a leading dimension of 0."""
    i, f, xy = np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, 2))
    return Walkers(xy, f, f.copy(), i, i.copy(), f.copy(), f.copy(), f.copy(), xy.copy(), xy.copy(),
                   np.zeros(0, dtype=bool), i.copy())


@dataclass(frozen=True)
class TickInfo:
    """What happened during one tick.

    Attributes:
        ego_vehicle: NPC rows the ego touched, (K,) int64.
        ego_walker: Walkers the ego touched, (K,) int64.
        npc_npc: NPC-NPC contacts, (K, 2) int64 vehicle rows.
        npc_walker: NPC-walker contacts, (K, 2) int64 (vehicle row, walker).
    """

    ego_vehicle: np.ndarray
    ego_walker: np.ndarray
    npc_npc: np.ndarray
    npc_walker: np.ndarray


_VEHICLE_FIELDS = tuple(f.name for f in fields(Vehicles))


_NO_ROWS = np.zeros(0, dtype=np.int64)
_NO_ROWS.flags.writeable = False
_NO_PAIRS = np.zeros((0, 2), dtype=np.int64)
_NO_PAIRS.flags.writeable = False
"""`TickInfo` arrays of a tick without contacts (shared, read-only)."""


def _rows(v: Vehicles, rows) -> Vehicles:
    return Vehicles.trusted(**{name: getattr(v, name)[rows] for name in _VEHICLE_FIELDS})


class NavWorld:
    """A town with an ego, N NPC vehicles and M walkers (see the module docstring).

    Attributes:
        town: The town.
        vehicles: All vehicles, row 0 the ego.
        routes: NPC route bookkeeping (rows 1..N of ``vehicles``).
        walkers: The walkers.
        held: Connector lane each vehicle holds, (N + 1,) int64, -1 for none.
        ego_location: The ego's lane, arc length [m] and lateral offset [m].
        lights: Light state at the end of each lane at the current time, (L,) int8 `Light`.
        t: Time [s].
        ticks: Ticks done.
        counts: Contacts so far: ``ego_vehicle``, ``ego_walker``, ``npc_npc``, ``npc_walker``.
    """

    def __init__(self, town: str | Town, n_vehicles: int = 0, n_walkers: int = 0, seed: int = 0,
                 jaywalk_share: float = 0.0, idm: IDMParams = URBAN, dt: float = C.DT, ego_spawn: int | None = None):
        """Place the ego and the NPCs at distinct seeded spawn points, the walkers on sidewalks.

        Args:
            town: A town name (`carla_gym.sim.town.TOWN_NAMES`) or a built town.
            n_vehicles: NPC vehicles N, in [0, spawn points - 1].
            n_walkers: Walkers M, >= 0; 0 in a town without sidewalks (Town06, a highway).
            seed: Seed of the world's only Generator.
            jaywalk_share: Share of walkers that jaywalk, in [0, 1].
            idm: NPC car-following parameters (typical urban values of the IDM literature).
            dt: Tick length [s], > 0.
            ego_spawn: Index of the ego's spawn point, in [0, spawn points); None: drawn with the NPCs' (the
                default; with an index the draws differ, so a seed's NPCs differ from the default's).

        Raises:
            ValueError: If a count or the share is out of range, dt <= 0, the town name is unknown, walkers
                are asked for in a town without sidewalks (the message names the town), or ``ego_spawn`` is
                not a spawn point index.
        """
        self.town = get_town(town) if isinstance(town, str) else town
        spawns = self.town.spawn_points
        if not 0 <= n_vehicles <= len(spawns) - 1:
            raise ValueError(f"n_vehicles={n_vehicles!r}: must lie in [0, {len(spawns) - 1}] for {self.town.name}")
        if n_walkers < 0:
            raise ValueError(f"n_walkers={n_walkers!r}: must be >= 0")
        if n_walkers and not self.town.sidewalks:
            raise ValueError(f"n_walkers={n_walkers!r}: town {self.town.name} has no sidewalks, so it takes 0 walkers")
        if not dt > 0:
            raise ValueError(f"dt={dt!r}: must be > 0 [s]")
        if ego_spawn is not None and (isinstance(ego_spawn, bool) or not isinstance(ego_spawn, int | np.integer)
                                      or not 0 <= ego_spawn < len(spawns)):
            raise ValueError(f"ego_spawn={ego_spawn!r}: must be a spawn point index in [0, {len(spawns)}) of "
                             f"{self.town.name}, or None")
        self._static = _static(self.town)
        self.idm, self.dt = idm, dt
        self.rng = np.random.default_rng(seed)
        pick = self.rng.permutation(len(spawns))[:n_vehicles + 1]
        if ego_spawn is not None:  # the ego at the given spawn point, the NPCs at the first others drawn
            pick = np.concatenate([[ego_spawn], self.rng.permutation(len(spawns))])
            pick = np.concatenate([pick[:1], pick[1:][pick[1:] != ego_spawn][:n_vehicles]])
        self.vehicles = make_vehicles(spawns.xy[pick, 0], spawns.xy[pick, 1], spawns.yaw[pick], rng=self.rng)
        self.routes = start_routes(self._static.lanes, spawns.lane[pick[1:]], spawns.s[pick[1:]], self.rng)
        if self._static.sidewalks is None:
            if not 0.0 <= jaywalk_share <= 1.0:
                raise ValueError(f"jaywalk_share={jaywalk_share!r}: must lie in [0, 1]")
            self.walkers = _no_walkers()
        else:
            self.walkers = spawn_walkers(self._static.sidewalks, n_walkers, self.rng, jaywalk_share)
        self.held = np.full(n_vehicles + 1, -1, dtype=np.int64)
        self.ego_location = Location(int(spawns.lane[pick[0]]), float(spawns.s[pick[0]]), 0.0)
        self.t, self.ticks = 0.0, 0
        self.lights = light_state(self.town, 0.0)
        self._lights_steady = light_steady_interval(0.0)
        self.counts = {"ego_vehicle": 0, "ego_walker": 0, "npc_npc": 0, "npc_walker": 0}
        self.route: Route | None = None
        self._planner_routes: PlannerRoutes | None = None
        self._planner: PlannerState | None = None
        self._agent: AgentParams | None = None

    # --- ego helpers -------------------------------------------------------------------------------------------

    def set_goal(self, goal_xy, behavior: str | None = "normal", spacing: float = 2.0) -> Route:
        """Plan the ego's route to ``goal_xy`` (x, y) [m] and reset its autopilot (`agent_params(behavior)`).

        While a route is set, the ego also asks for the connectors on it (step 2 of the module
        docstring), as an NPC would. The autopilot reads the route's speed limits from
        `route_speed_limits`: each lane's curve speed, as NPCs drive, lowered ahead of a slower curve.

        Raises:
            ValueError: As `carla_gym.sim.town.plan_route` (goal off the network or unreachable).
        """
        self.route = plan_route(self.town, self.ego_location, goal_xy, spacing)
        limits = route_speed_limits(self._static.curve_speed[self.route.lanes], self.route.waypoints) * C.KMH_PER_MS
        turns = np.isin(self.route.options, (RoadOption.LEFT, RoadOption.RIGHT))
        self._planner_routes = make_routes(self.route.waypoints, limits, turns, self.route.yaw)
        self._planner = PlannerState.start(1)
        self._agent = agent_params(behavior)
        return self.route

    def clear_goal(self) -> None:
        """Forget the ego's route and autopilot (the state before any `set_goal`).

        The ego stops asking for connectors and is located on the nearest lane point again;
        `autopilot_control` raises until the next `set_goal`. A no-op without a route.
        """
        self.route = None
        self._planner_routes = None
        self._planner = None
        self._agent = None

    @property
    def agent(self) -> AgentParams | None:
        """The ego autopilot's parameters (`carla_gym.sim.agents.agent_params` of `set_goal`), None without one."""
        return self._agent

    def ego_light(self) -> tuple[int, float]:
        """The light governing the ego and the distance from its front bumper to that light's stop line.

        Returns:
            ``(state, distance)``: a `carla_gym.sim.town.Light` value (``Light.NONE`` = -1 without one) of the
            light at the end of ``ego_location.lane``, and the distance [m] along the lane (negative past the
            line; ``inf`` without a light). The stop line lies ``town.crosswalk_width + STOP_LINE_MARGIN`` before
            the lane's end, where NPCs stop.
        """
        lane = self.ego_location.lane
        state = int(self.lights[lane])
        if state == Light.NONE:
            return state, math.inf
        stop = self.town.lanes[lane].length - self.town.crosswalk_width - STOP_LINE_MARGIN
        return state, stop - self.ego_location.s - 0.5 * float(self.vehicles.length[0])

    def route_done(self) -> bool:
        """Whether the ego's autopilot has reached the end of its route (False without a route)."""
        return self._planner is not None and bool(self._planner.index[0] >= self._planner_routes.count[0])

    def _ego_route_s(self) -> tuple[int, float]:
        """Index of the ego's next waypoint and the ego's distance along its route [m] (approximate)."""
        r = self._planner_routes
        i = int(min(self._planner.index[0], r.count[0] - 1))
        ego = self.vehicles
        return i, float(r.s[0, i] - np.hypot(r.xy[0, i, 0] - ego.x[0], r.xy[0, i, 1] - ego.y[0]))

    def _ego_next_connector(self) -> tuple[int, float]:
        """First connector on the ego's route ahead that it does not occupy, and its start's distance [m].

        ``(-1, inf)`` without a route, and while the connector leaves from another lane than the ego's (a lane
        change comes first): the ego asks for a connector only from the lane it leaves from, as NPCs do.
        """
        if self.route is None:
            return -1, np.inf
        i, s = self._ego_route_s()
        lanes = self.route.lanes[max(i - 1, 0):]
        start = np.flatnonzero(self._static.connector[lanes] & (lanes != self.ego_location.lane))
        start = start[start > 0] if start.size else start
        if start.size == 0:
            return -1, np.inf
        j = start[0] + max(i - 1, 0)
        if self.route.lanes[j - 1] != self.ego_location.lane:
            return -1, np.inf
        return int(self.route.lanes[j]), float(self._planner_routes.s[0, j] - s)

    def _lane_change_wait(self, k: np.ndarray, along: np.ndarray) -> float:
        """Distance [m] from the ego's centre to the start of a lane change it must not begin yet, else inf.

        A lane change on the route (waypoints with a CHANGELANE road option) starting within
        `LANE_CHANGE_LOOKAHEAD` waits for room on the target lane: no vehicle there whose centre lies, along
        the ego's heading, within half the two lengths plus `LANE_CHANGE_GAP` ahead, or that plus
        `LANE_CHANGE_HEADWAY` x its speed behind. Once the ego's centre is `LANE_CHANGE_COMMITTED` into the
        lane change it completes it.

        Args:
            k: Indices of the route's waypoints from the ego's centre on (`autopilot_control`), (K,) int.
            along: Their distances ahead of the ego's centre along the route [m], (K,), >= 0.
        """
        options = self.route.options
        change = np.isin(options[k], _LANE_CHANGES)
        if not change.any():
            return np.inf
        start = int(k[change][0])
        while start > 0 and options[start - 1] in _LANE_CHANGES:  # back to the lane change's first waypoint
            start -= 1
        route_s = self._planner_routes.s[0]
        start_along = float(along[change][0] - (route_s[k[change][0]] - route_s[start]))
        if not -LANE_CHANGE_COMMITTED <= start_along <= LANE_CHANGE_LOOKAHEAD:  # far ahead, or begun: finish it
            return np.inf
        lane = self.town.lanes[self.ego_location.lane]
        labels = self.route.lanes[k[change]]
        target = labels[np.isin(labels, [side for side in (lane.left, lane.right) if side >= 0])]
        rows = np.flatnonzero(self.routes.lane == target[0]) + 1 if target.size else np.zeros(0, dtype=np.int64)
        if not rows.size:
            return np.inf
        v = self.vehicles
        lon = (v.x[rows] - v.x[0]) * np.cos(v.yaw[0]) + (v.y[rows] - v.y[0]) * np.sin(v.yaw[0])
        reach = 0.5 * (v.length[0] + v.length[rows]) + LANE_CHANGE_GAP
        blocked = ((lon <= reach) & (lon >= -reach - LANE_CHANGE_HEADWAY * v.speed[rows])).any()
        return max(start_along, 0.0) if blocked else np.inf

    def autopilot_control(self) -> tuple[float, float, float]:
        """Throttle, brake and steer of the ego's navigation agent for this tick (call once per tick).

        Uses `carla_gym.sim.agents.agent_step` on the route of `set_goal`, with obstacles measured
        from the world (approximate: along the route's waypoints, within `AUTOPILOT_HORIZON`):
        the nearest NPC whose centre lies within half the two widths plus 0.3 m of a waypoint
        ahead (bumper gap, its speed); the nearest walker within half the ego's width plus the
        walker radius plus `_walker_margin` (the NPCs' corridor rule); the stop line of the next
        lane end whose light is red, or yellow and still stoppable, and the start of a connector
        not yet granted to the ego (as a red light), each `AUTOPILOT_STOP_MARGIN` nearer than it
        is; a standing vehicle at the start of a lane change on the route that must wait for room
        on the target lane (`_lane_change_wait`: CARLA's agents check the target lane before they
        change lanes). Waypoints are searched from the ego's centre, not from the planner's queue
        front, which runs a few metres ahead.

        Raises:
            RuntimeError: If no route was set (`set_goal`).
        """
        if self._planner is None:
            raise RuntimeError("autopilot_control needs a route: call set_goal(goal_xy) first")
        r, ego = self._planner_routes, self.vehicles
        i, s_ego = self._ego_route_s()
        # Waypoints from the ego's centre on: the queue front i lies up to a reach distance (3 m + 0.5 s x
        # speed) ahead, and an obstacle between the ego and it must not go unseen.
        k = np.arange(max(i - AUTOPILOT_BACK, 0), r.count[0])
        along = r.s[0, k] - s_ego
        keep = (along >= 0.0) & (along <= AUTOPILOT_HORIZON)
        k, along = k[keep], along[keep]
        wp = r.xy[0, k]
        vehicle_gap, vehicle_speed, walker_gap = np.inf, 0.0, np.inf
        if len(k) and len(ego) > 1:
            d = np.hypot(ego.x[1:, None] - wp[None, :, 0], ego.y[1:, None] - wp[None, :, 1])
            near = d <= 0.5 * (ego.width[0] + ego.width[1:, None]) + 0.3
            gaps = np.where(near, along[None, :] - 0.5 * (ego.length[0] + ego.length[1:, None]), np.inf).min(axis=1)
            j = int(np.argmin(gaps))
            vehicle_gap, vehicle_speed = float(gaps[j]), float(ego.speed[1 + j]) if np.isfinite(gaps[j]) else 0.0
        wait = self._lane_change_wait(k, along) if len(k) and len(ego) > 1 else np.inf
        if wait - 0.5 * ego.length[0] < vehicle_gap:  # stand before the lane change until the target lane has room
            vehicle_gap, vehicle_speed = max(wait - 0.5 * ego.length[0], 0.0), 0.0
        if len(k) and len(self.walkers.speed):
            w = self.walkers.xy
            d = np.hypot(w[:, 0, None] - wp[None, :, 0], w[:, 1, None] - wp[None, :, 1])
            near = d <= (0.5 * ego.width[0] + C.WALKER_RADIUS + _walker_margin(self.walkers))[:, None]
            walker_gap = float(np.where(near, along[None, :] - 0.5 * ego.length[0], np.inf).min())
        red_gap = np.inf
        lanes = self.route.lanes
        ends = np.flatnonzero(lanes[1:] != lanes[:-1]) + 1
        ends = ends[ends >= i]
        speed = float(ego.speed[0])
        for j in ends[:3]:
            gap = float(r.s[0, j] - s_ego - 0.5 * ego.length[0])
            before, after = int(lanes[j - 1]), int(lanes[j])
            committed = self.held[0] == after
            light = self.lights[before]
            stop = light == _RED or (light == _YELLOW and speed**2 / (2 * STOP_DECELERATION) <= gap)
            waits = self._static.connector[after] and not committed and after != self.ego_location.lane
            if (stop and not committed) or waits:
                red_gap = max(gap - AUTOPILOT_STOP_MARGIN, 0.0)
                break
        state = EgoState(ego.x[:1], ego.y[:1], ego.yaw[:1], ego.speed[:1], ego.beta[:1])
        step = agent_step(self._agent, self._planner, state, r,
                          Obstacles.trusted(*np.array([[vehicle_gap], [vehicle_speed], [walker_gap], [red_gap]])))
        self._planner = step.state
        return float(step.throttle[0]), float(step.brake[0]), float(step.steer[0])

    # --- the tick -----------------------------------------------------------------------------------------------

    def _junctions(self) -> None:
        """Hold occupied connectors, release cleared ones, grant requests (module docstring, step 2)."""
        st, v, r = self._static, self.vehicles, self.routes
        lane = np.concatenate([[self.ego_location.lane], r.lane])
        s = np.concatenate([[self.ego_location.s], r.s])
        on = st.connector[lane]
        held = np.where(on, lane, self.held)
        ego_next, ego_dist = self._ego_next_connector()
        nxt = np.concatenate([[ego_next], r.next_lane])
        cleared = ~on & (held >= 0) & (held != nxt) & (s - 0.5 * v.length > CLEAR_DISTANCE)
        held = np.where(cleared, -1, held)
        rest = np.concatenate([[ego_dist], self._static.lanes.length[r.lane] - r.s]) - 0.5 * v.length
        light = self.lights[lane]
        can_stop = v.speed**2 / (2 * STOP_DECELERATION) <= rest
        light_ok = (light <= _GREEN) | ((light == _YELLOW) & ~can_stop)  # NONE (-1) or GREEN (0), or yellow
        # Only the first vehicle of a lane asks: one queued behind could hold a connector it cannot reach
        # while the car in front waits for a conflicting one (a deadlock).
        first = ~((lane[:, None] == lane) & (s > s[:, None])).any(axis=1)
        asks = (nxt >= 0) & st.connector[np.maximum(nxt, 0)] & (held < 0) & light_ok & first & (
            rest <= v.speed * REQUEST_TIME + REQUEST_DISTANCE)
        loose = np.arange(len(held)) == 0  # the ego: any driver, and the PID autopilot cuts corners
        self.held = grant(st.conflict, held, np.where(asks, nxt, -1), rest, loose, st.loose_conflict)

    def _path_lanes(self) -> np.ndarray:
        """Current, next and after-next lane of every vehicle (row 0 the ego), (V, 3) int64, -1 unknown.

        NPCs: their routes; the ego: its route's lanes while it has one, else single successors.
        """
        st, r = self._static, self.routes
        out = np.empty((len(r.lane) + 1, 3), dtype=np.int64)
        out[1:, 0], out[1:, 1] = r.lane, r.next_lane
        out[1:, 2] = np.where(r.next_lane >= 0, st.single_next[np.maximum(r.next_lane, 0)], -1)
        lane = self.ego_location.lane
        ego = [lane, st.single_next[lane], -1]
        if self.route is not None:
            i, _ = self._ego_route_s()
            seq = self.route.lanes[max(i - 1, 0):]
            seq = seq[np.r_[True, seq[1:] != seq[:-1]]]
            seq = list(seq[1:] if seq[0] == lane else seq)[:2]
            ego = [lane, *seq, -1, -1][:3]
        elif ego[1] >= 0:
            ego[2] = st.single_next[ego[1]]
        out[0] = ego
        return out

    def _crosswalk_gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Each vehicle's front-bumper distance to each crosswalk zone ahead and whether it is in one.

        Returns:
            ``(gap, inside)``, (V, X) each: distance [m] along the vehicle's next three lanes from
            its front bumper to the zone's start (inf: none ahead), and whether the vehicle's
            footprint (along its lanes) overlaps the zone.
        """
        st, v = self._static, self.vehicles
        path = self._path_lanes()
        s = np.concatenate([[self.ego_location.s], self.routes.s])
        length = st.lanes.length
        base = np.empty(path.shape)
        base[:, 0] = -s
        base[:, 1] = length[path[:, 0]] - s
        base[:, 2] = base[:, 1] + length[np.maximum(path[:, 1], 0)]
        lane = np.maximum(path, 0)
        ids, zone = st.lane_zone_id[lane], st.lane_zone[lane]  # (V, 3, K), (V, 3, K, 2): the zones on each lane
        valid = (path >= 0)[..., None] & (ids >= 0)
        d = zone[..., 0] + base[..., None]
        half = 0.5 * v.length[:, None, None]
        row, slot, k = np.nonzero(valid & (d <= half) & (zone[..., 1] + base[..., None] >= -half))
        inside = np.zeros((len(path), len(st.crosswalk_zone)), dtype=bool)
        inside[row, ids[row, slot, k]] = True
        row, slot, k = np.nonzero(valid & (d >= half))
        gap = np.full(inside.shape, np.inf)
        np.minimum.at(gap, (row, ids[row, slot, k]), d[row, slot, k] - half[row, 0, 0])
        return gap, inside

    def _npc_controls(self, zone_gap: np.ndarray, zone_inside: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Throttle, brake and steer of the NPCs (module docstring, step 3); zones from `_crosswalk_gaps`."""
        st, v, r, p = self._static, self.vehicles, self.routes, self.idm
        n = len(r.lane)
        lanes = st.lanes
        lane_all = np.concatenate([[self.ego_location.lane], r.lane])
        s_all = np.concatenate([[self.ego_location.s], r.s])
        rest = lanes.length[r.lane] - r.s
        nxt = r.next_lane
        # Centre distance along the route from NPC i to vehicle j: s_j plus an offset per lane of i's
        # path (its lane: -s_i, for vehicles ahead only; its next lane: the rest of its lane; the lane
        # after: that plus the next lane's length), the smallest where lanes repeat.
        keys = np.empty((n, 3), dtype=np.int64)
        keys[:, 0], keys[:, 1] = r.lane, nxt
        keys[:, 2] = np.where(nxt >= 0, st.single_next[np.maximum(nxt, 0)], -1)
        offset = np.empty((n, 3))
        offset[:, 0], offset[:, 1] = -r.s, rest
        offset[:, 2] = rest + lanes.length[np.maximum(nxt, 0)]
        match = keys[:, :, None] == lane_all  # (n, 3, n + 1); -1 (no lane) matches nobody
        match[:, 0] &= s_all > r.s[:, None]
        d = np.where(match, offset[:, :, None], np.inf).min(axis=1) + s_all
        rows = np.arange(n)
        d[rows, rows + 1] = np.inf
        d[d > LEADER_HORIZON] = np.inf
        lead = d.argmin(axis=1) if n else np.zeros(0, dtype=np.int64)
        npc = _rows(v, slice(1, None))
        gap = d[rows, lead] - 0.5 * (npc.length + v.length[lead])
        lead_speed = np.where(np.isfinite(gap), v.speed[lead], 0.0)
        # Stop line: red, or yellow and stoppable, unless committed; or waiting for the next connector.
        end_gap = rest - 0.5 * npc.length - self.town.crosswalk_width - STOP_LINE_MARGIN + p.min_gap
        bumper = rest - 0.5 * npc.length
        light = self.lights[r.lane]
        committed = self.held[1:] == nxt
        stoppable = npc.speed**2 / (2 * STOP_DECELERATION) <= bumper
        stop = ((light == _RED) | ((light == _YELLOW) & stoppable)) & ~committed
        stop |= (nxt >= 0) & st.connector[np.maximum(nxt, 0)] & ~committed
        lead_speed = np.where(stop & (end_gap < gap), 0.0, lead_speed)
        gap = np.where(stop, np.minimum(gap, end_gap), gap)
        # Slow down for the next lane's curve: a leader at its start driving the curve speed.
        curve = st.curve_speed[np.maximum(nxt, 0)]
        slow = (nxt >= 0) & (curve < npc.speed) & (bumper + p.min_gap < gap)
        lead_speed = np.where(slow, curve, lead_speed)
        gap = np.where(slow, bumper + p.min_gap, gap)
        # Walkers in the corridor ahead: standing leaders.
        if len(self.walkers.speed) and n:
            dx = self.walkers.xy[None, :, 0] - npc.x[:, None]
            dy = self.walkers.xy[None, :, 1] - npc.y[:, None]
            c, s_ = np.cos(npc.yaw)[:, None], np.sin(npc.yaw)[:, None]
            lon, lat = dx * c + dy * s_, -dx * s_ + dy * c
            margin = _walker_margin(self.walkers)
            inside = (lon > 0) & (lon < WALKER_HORIZON) & (
                np.abs(lat) < 0.5 * npc.width[:, None] + C.WALKER_RADIUS + margin[None, :])
            wgap = np.where(inside, lon - 0.5 * npc.length[:, None] - C.WALKER_RADIUS, np.inf).min(axis=1)
            lead_speed = np.where(wgap < gap, 0.0, lead_speed)
            gap = np.minimum(gap, wgap)
        # Crosswalks with a walker on them: a standing leader before the zone.
        wk = self.walkers
        occupied = np.bincount(wk.crosswalk[(wk.mode == CROSSING) & (wk.crosswalk >= 0)],
                               minlength=len(st.crosswalk_zone)) > 0
        if occupied.any() and n:
            zgap = np.where(occupied[None] & ~zone_inside[1:], zone_gap[1:], np.inf).min(axis=1)
            zgap = zgap - CROSSWALK_STOP_MARGIN + p.min_gap
            lead_speed = np.where(zgap < gap, 0.0, lead_speed)
            gap = np.minimum(gap, zgap)
        desired = np.minimum(lanes.speed_limit[r.lane], st.curve_speed[r.lane])
        throttle, brake = pedals_for(idm_acceleration(npc.speed, desired, gap, lead_speed, p))
        return throttle, brake, pursuit_steer(lanes, r, npc, self.dt)

    def tick(self, throttle: float = 0.0, brake: float = 0.0, steer: float = 0.0) -> TickInfo:
        """Advance the world by one tick with the ego's controls (module docstring).

        Args:
            throttle: Ego throttle in [0, 1].
            brake: Ego brake in [0, 1].
            steer: Ego steer in [-1, 1], positive to the right.

        Returns:
            The tick's contacts (also added to ``counts``).

        Raises:
            ValueError: If a control is out of range.
        """
        for name, value, lo in (("throttle", throttle, 0.0), ("brake", brake, 0.0), ("steer", steer, -1.0)):
            if not lo <= value <= 1.0:
                raise ValueError(f"{name}={value!r}: must lie in [{lo:g}, 1]")
        lo, hi = self._lights_steady
        if not lo <= self.t < hi:  # states change only at a few times per cycle: reuse them in between
            self.lights = light_state(self.town, self.t)
            self._lights_steady = light_steady_interval(self.t)
        self._junctions()
        zone_gap, zone_inside = self._crosswalk_gaps()
        t_npc, b_npc, s_npc = self._npc_controls(zone_gap, zone_inside)
        speed = self.vehicles.speed[:, None]
        eta = np.divide(zone_gap, speed, out=np.full_like(zone_gap, np.inf), where=speed > 0)
        arrival = np.where(zone_inside, 0.0, eta).min(axis=0, initial=np.inf)
        walkers_before = self.walkers
        if self._static.sidewalks is not None:
            self.walkers = step_walkers(walkers_before, self._static.sidewalks, self.rng, self.dt,
                                        crosswalk_arrival=arrival)
        before = self.vehicles
        controls = np.empty((3, len(before)))
        controls[:, 0] = throttle, brake, steer
        controls[0, 1:], controls[1, 1:], controls[2, 1:] = t_npc, b_npc, s_npc
        after = step_vehicles(before, controls[0], controls[1], controls[2], self.dt)
        pairs = vehicle_contacts(before, after)
        hits = walker_contacts(before, after, walkers_before.xy, self.walkers.xy)
        if len(pairs) or len(hits):
            ego_pair = pairs[:, 0] == 0
            info = TickInfo(pairs[ego_pair, 1], hits[hits[:, 0] == 0, 1], pairs[~ego_pair], hits[hits[:, 0] > 0])
            for key, value in zip(self.counts, (len(info.ego_vehicle), len(info.ego_walker), len(info.npc_npc),
                                                len(info.npc_walker)), strict=True):
                self.counts[key] += value
        else:  # the usual tick: nobody touched anybody
            info = TickInfo(_NO_ROWS, _NO_ROWS, _NO_PAIRS, _NO_PAIRS)
        spawns = self.town.spawn_points
        npc_after = _rows(after, slice(1, None))
        self.routes, npc, _ = advance_routes(self._static.lanes, self.routes, npc_after, self.rng,
                                             (spawns.lane, spawns.s), keep_clear=(after.x[0], after.y[0]))
        if npc is npc_after:  # nobody respawned: the rows are after's own
            self.vehicles = after
        else:
            respawned = (npc.x != after.x[1:]) | (npc.y != after.y[1:])
            self.held[1:][respawned] = -1
            self.vehicles = Vehicles.trusted(**{
                name: np.concatenate([getattr(after, name)[:1], getattr(npc, name)]) for name in _VEHICLE_FIELDS})
        self._locate_ego()
        self.t = self.ticks * self.dt + self.dt
        self.ticks += 1
        return info

    def _locate_ego(self) -> None:
        """The ego's lane and s: along its route while it has one, else the nearest lane point.

        With a route, the planner's queue first drops the waypoints the ego has reached, whoever drove it
        (the autopilot pops them itself too; popping is idempotent): an ego driven by ``control`` after
        ``set_destination`` is located along its route as it goes.
        """
        xy = np.array([self.vehicles.x[0], self.vehicles.y[0]])
        if self.route is not None:
            v = self.vehicles
            index = pop_reached(self._planner_routes, self._planner.index, v.x[:1], v.y[:1], v.speed[:1])
            if index[0] != self._planner.index[0]:
                self._planner = replace(self._planner, index=index)
            i, _ = self._ego_route_s()
            lane = int(self.route.lanes[max(i - 1, 0)])
            s, lateral, _ = self._static.lanes.project(np.array([lane]), xy[None], np.array([self.ego_location.s]),
                                                       back=8.0, ahead=16.0)
            if self.ego_location.lane != lane:  # just moved on: search the new lane from its start
                s, lateral, _ = self._static.lanes.project(np.array([lane]), xy[None], np.array([0.0]),
                                                           back=8.0, ahead=16.0)
            self.ego_location = Location(lane, float(np.clip(s[0], 0.0, self._static.lanes.length[lane])),
                                         float(lateral[0]))
        else:
            self.ego_location = locate(self.town, xy)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Copies of every array of the world's state (for determinism checks and snapshots)."""
        out = {f"vehicles.{f.name}": getattr(self.vehicles, f.name).copy() for f in fields(self.vehicles)}
        out |= {f"routes.{f.name}": getattr(self.routes, f.name).copy() for f in fields(Routes)}
        out |= {f"walkers.{f.name}": np.asarray(getattr(self.walkers, f.name)).copy() for f in fields(Walkers)}
        out["held"] = self.held.copy()
        out["lights"] = self.lights.copy()
        return out
