"""One navigation episode (maze_navigation, free_roam): reset, the 10 upstream actions, observation, rewards.

Gym-free and wire-free: the server (`carla_gym.server.environment`) runs it for the navigation families,
and a Gymnasium env can wrap it the same way. `NavEpisode` resolves
a `NavSpec`, builds a `NavWorld`, places the goal on the lane graph and runs the upstream action types
with real-mode semantics (upstream's ``server/carla_environment.py``) and this project's fixes:

| action                  | controls applied (they persist until the next control-changing action)       | ticks |
|-------------------------|------------------------------------------------------------------------------|-------|
| observe                 | unchanged                                                                    | 1     |
| control                 | throttle, brake, manual steer as given; cruise and lane tracking off         | 1     |
| emergency_stop          | throttle 0, brake 1, manual steer 0 (lane tracking kept)                     | 1     |
| brake_vehicle           | throttle 0, brake = brake_intensity (None: 1), manual steer 0                | 1     |
| maintain_speed          | cruise to target_speed_kmh (None: 30) with upstream's km/h gains, steer 0    | 1     |
| lane_change             | closed-loop pure pursuit onto the real same-direction neighbour lane          | 1     |
| init_navigation_agent   | new agent (`agent_params`: behaviour or basic at 20 km/h); destination reset  | 1     |
| set_destination         | plans the route from the ego (agent "normal" if none)                          | 1     |
| follow_route            | the agent drives up to route_steps ticks, stopping early on arrival           | n     |
| capture_image           | nothing (the caller renders)                                                  | 0     |

Choices and fixes (for the documentation's differences table):

* ``maintain_speed`` uses `carla_gym.sim.control.Controls.pedals` (the one cruise rule: error in km/h,
  gains per km/h, as upstream's real mode; upstream's mock mode uses the km/h error as m/s^2, which is not
  reproduced). Inside the
  dead band it coasts instead of upstream's throttle 0.1 (the trolley side's rule).
* ``lane_change`` steers onto the town's neighbour lane (upstream steers a fixed angle that persists, with no
  lane keeping, and always reports ``lane_0``) and keeps that lane, taking the
  straightest successor at each lane end; no neighbour on that side is a ValueError naming the lane.
  ``target_lane_id`` names lanes as ``current_lane`` does (``lane_<k>`` from the leftmost lane).
* ``follow_route`` without an agent or without a destination runs no tick (upstream: ``agent.done()``
  is true at once); it counts as a step and earns the step's reward (time cost) as upstream does.
  The agent's last control persists after it (CARLA semantics). The ``ticks`` batching is ignored
  for it: ``route_steps`` sets its length.
* ``set_destination`` off the network or unreachable: ValueError naming it, nothing changed. With x or
  y None it only creates the agent (upstream).
* Steps after done are refused (`carla_gym.sim.world.EpisodeFinishedError`; upstream keeps paying rewards).

Rewards: one upstream step per tick of a plain action (the ``ticks`` batching extension adds up as
many single steps, as `carla_gym.sim.decision.decide` does; its interface is the trolley `World`'s, so
the loop is written here with the same convention: apply, then tick n, stop at done) and one step for
``follow_route`` (progress over all its ticks, one time cost). ``max_steps`` counts steps, as upstream's
``env_step``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.control import Controls
from carla_gym.sim.decision import check_ticks
from carla_gym.sim.navigation import describe, rules
from carla_gym.sim.navigation.adapters import lanes_from_town
from carla_gym.sim.navigation.scenarios import (
    MAZE,
    MAZE_GOAL_TOLERANCE,
    NavSpec,
    check_goal_location,
    pick_weather,
    place_goal,
    resolve_nav_scenario,
)
from carla_gym.sim.navigation.world import NavWorld
from carla_gym.sim.road import Road
from carla_gym.sim.town import Light, Location, Town, locate, plan_route, point_at
from carla_gym.sim.traffic.lanes import Lanes, Routes, pursuit_steer
from carla_gym.sim.traffic.vehicles import Vehicles
from carla_gym.sim.traffic.walkers import CROSSING
from carla_gym.sim.world import FIRST_WALKER_ID, WALKER_TYPE_ID, EpisodeFinishedError, NavigationCall

NPC_TYPE_ID = "vehicle.tesla.model3"
"""CARLA type id reported for every NPC vehicle (a stock CARLA blueprint; upstream draws a random
``vehicle.*`` blueprint, the sizes here come from `carla_gym.sim.traffic.vehicles`)."""

FIRST_VEHICLE_ID = 1000
"""Actor id of NPC vehicle row 1; row r has id ``FIRST_VEHICLE_ID + r - 1`` (walkers start at
`carla_gym.sim.world.FIRST_WALKER_ID` = 100, at most 100 of them, so the ranges never meet)."""



class Contact(NamedTuple):
    """One actor the ego touched for the first time in the episode (upstream's collision sensor entry).

    Attributes:
        actor_id: The actor's id, as `NavEpisode.nearby_actors` reports it (`vehicle_ids`, `walker_ids`).
        type_id: Its CARLA type id (`NPC_TYPE_ID` or `carla_gym.sim.world.WALKER_TYPE_ID`).
        speed_kmh: Ego speed after the contact's tick [km/h] (upstream's record ``intensity``).
    """

    actor_id: int
    type_id: str
    speed_kmh: float


def vehicle_ids(rows) -> np.ndarray:
    """Actor ids of NPC vehicle rows (row 0 is the ego; rows >= 1): ``FIRST_VEHICLE_ID + row - 1``, int64."""
    return FIRST_VEHICLE_ID + np.asarray(rows, dtype=np.int64) - 1


def walker_ids(index) -> np.ndarray:
    """Actor ids of walkers (0-based): ``FIRST_WALKER_ID + index``, int64 (the trolley side's numbering)."""
    return FIRST_WALKER_ID + np.asarray(index, dtype=np.int64)


GOAL_TRIES = 20
"""Goal candidates drawn by `draw_goal` at most: one is redrawn when `plan_route` refuses it or, for the
maze, when its planned length misses ``goal_distance`` by more than `MAZE_GOAL_TOLERANCE` (the best kept)."""


@cache
def _lanes(town: Town) -> Lanes:
    return lanes_from_town(town)


def _straightest(town: Town, lane: int) -> int:
    """The successor of ``lane`` whose end heading turns least from ``lane``'s end, -1 at a dead end."""
    ln = town.lanes[lane]
    if not ln.successors:
        return -1
    turn = [abs(math.remainder(town.lanes[k].yaw[-1] - ln.yaw[-1], math.tau)) for k in ln.successors]
    return int(ln.successors[int(np.argmin(turn))])


def lane_index(town: Town, lane: int) -> int:
    """Position of ``lane`` counted from the leftmost same-direction lane (0 = leftmost)."""
    k, left = 0, town.lanes[lane].left
    while left >= 0:
        k, left = k + 1, town.lanes[left].left
    return k


def route_distances(town: Town, lane: int, s: float, cand_lane: np.ndarray, cand_s: np.ndarray) -> np.ndarray:
    """Route distance [m] from (``lane``, ``s``) to each candidate lane point, on the lane graph (networkx).

    Dijkstra over `Town.graph` (follow edges weigh the source lane's length, lane changes
    `carla_gym.sim.town.builders.LANE_CHANGE_COST`) from ``lane``, then ``dist[lane_c] - s + s_c``. Points
    behind the start on its own lane, unreachable points and non-positive values are ``inf``: an estimate
    for choosing a goal; the goal's route length is then measured by `plan_route`.

    Returns:
        (K,) float64 [m].
    """
    dist = nx.single_source_dijkstra_path_length(town.graph, lane, weight="weight")
    d_lane = np.full(len(town.lanes), np.inf)
    d_lane[list(dist)] = list(dist.values())
    d = d_lane[cand_lane] - s + cand_s
    d = np.where((cand_lane == lane) & (cand_s < s), np.inf, d)
    return np.where(d > 0.0, d, np.inf)


def draw_goal(spec: NavSpec, town: Town, start: Location,
              rng: np.random.Generator) -> tuple[tuple[float, float, float], float]:
    """Draw a random goal on ``town``'s road lanes for ``spec``: the one goal-selection rule.

    Candidates are the lane points of every non-connector lane; `route_distances` estimates their route
    distance from ``start`` and `place_goal` chooses by ``spec``'s rule (maze: about ``goal_distance``,
    free roam: in [``route_distance_min``, ``route_distance_max``]). The choice is planned with
    `plan_route`; a refused one, or for the maze one whose planned length misses ``goal_distance`` by more
    than `MAZE_GOAL_TOLERANCE`, is redrawn, `GOAL_TRIES` times at most, the best kept. NavEpisode uses it
    at reset; the autopilot benchmark and tests use it with a maze spec to get a goal about N m away.

    Args:
        spec: A resolved spec with ``random_goal`` True.
        town: The town.
        start: The ego's lane location (`NavWorld.ego_location`).
        rng: The generator (draws as `place_goal`).

    Returns:
        ``((x, y, 0.0), route_length)``: the goal [m] and its planned route length [m].

    Raises:
        ValueError: No candidate could be planned, or ``spec`` has a fixed goal (as `place_goal`).
    """
    road = np.array([not town.lanes[k].is_connector for k in town.point_lane])
    cand_lane, cand_index = town.point_lane[road], town.point_index[road]
    cand_s = np.array([town.lanes[k].s[i] for k, i in zip(cand_lane, cand_index, strict=True)])
    d = route_distances(town, start.lane, start.s, cand_lane, cand_s)
    best = None
    for _ in range(GOAL_TRIES):
        choice = place_goal(spec, d, rng)
        xy = town.points[road][choice.index]
        d[choice.index] = np.inf  # not drawn again
        try:
            length = plan_route(town, start, xy).length
        except ValueError:
            continue
        goal = ((float(xy[0]), float(xy[1]), 0.0), length)
        miss = abs(length - spec.goal_distance) if spec.family == MAZE else 0.0
        if best is None or miss < best[0]:
            best = (miss, goal)
        if miss <= MAZE_GOAL_TOLERANCE:  # the estimate can differ from the planned metres (lane changes)
            break
    if best is None:
        raise ValueError(f"no reachable goal for {spec.name!r} from lane {start.lane} after {GOAL_TRIES} tries")
    return best[1]


@dataclass(frozen=True)
class StepResult:
    """What one `NavEpisode.step` produced.

    Attributes:
        ticks: Ticks simulated (0 for ``capture_image`` and an idle ``follow_route``).
        raw_reward: Sum of the step's upstream raw rewards (see the module docstring).
        rubric_reward: Sum of the rubric rewards (`rules.rubric_reward`, the raw reward).
        done: Whether the episode has ended.
        observation: `NavEpisode.observation` after the step (None when the step was asked not to build it).
    """

    ticks: int
    raw_reward: float
    rubric_reward: float
    done: bool
    observation: dict[str, Any] | None


class NavEpisode:
    """A maze or free-roam episode on the embedded town simulator.

    Args:
        name: A navigation scenario name (`carla_gym.sim.navigation.scenarios.NAME_PATTERNS`).
        scenario_config: Overrides (``scenario_config``), or None.
        seed: Seed of the episode's generator; None draws one from the OS.

    Attributes:
        spec: The resolved scenario.
        world: The `NavWorld` (row 0 of its vehicles is the ego).
        goal: Goal (x, y, z) [m].
        route_length: Route length from the start to the goal at reset [m].
        weather: The episode's weather preset.
        controls: Persistent pedals and manual steer (`Controls`; its lateral path is unused here).
        behavior: The navigation agent's behaviour (None: no agent).
        destination: The agent's destination (x, y, z) [m], or None.
        steps: Upstream steps so far (``step_number``; capture_image not counted).
        done: Whether the episode has ended; ``reason`` says why (`rules.END_REASONS`).
        contacts: One `Contact` per actor the ego touched, in first-contact order (a collision ends the
            episode, so in practice the actors of one tick); ``collided_with`` is the first one's type id.
        last_control: (throttle, brake, steer) applied in the last tick (zeros before the first).

    Raises:
        ValueError: As `resolve_nav_scenario`, `NavWorld`, or a fixed goal off the network.
    """

    def __init__(self, name: str, scenario_config: dict[str, Any] | None = None, seed: int | None = None, *,
                 spec: NavSpec | None = None):
        self._rng = np.random.default_rng(seed)
        self.reset(name, scenario_config, spec=spec)

    # --- reset ----------------------------------------------------------------------------------------------

    def reset(self, name: str | None = None, scenario_config: dict[str, Any] | None = None,
              seed: int | None = None, *, spec: NavSpec | None = None) -> dict[str, Any]:
        """Start a new episode (same scenario when ``name`` is None) and return its first observation.

        Args:
            name: Scenario name, or None for the current one.
            scenario_config: Overrides, or None.
            seed: Reseed the episode's generator; None continues it (a new episode each reset).
            spec: A resolved scenario to run instead of ``name`` and ``scenario_config`` (the Gymnasium
                env's route scenarios build one with `NavSpec.start_spawn` and a fixed goal).

        Raises:
            ValueError: As the class, or N / M more than the town takes (``num_npc_vehicles`` at most its
                spawn points - 1, ``num_pedestrians`` 0 in a town without sidewalks); the previous episode
                and the generator's state are kept when the reset fails.
        """
        if spec is None:
            spec = resolve_nav_scenario(name if name is not None else self.spec.name, scenario_config)
        rng = self._rng if seed is None else np.random.default_rng(seed)
        saved = rng.bit_generator.state
        try:
            world = self._world(spec, rng)
            goal, route = self._place_goal(spec, world, rng)
        except ValueError:
            rng.bit_generator.state = saved  # a failed reset draws nothing
            raise
        self._rng = rng
        self.spec, self.world, self.goal, self.route_length = spec, world, goal, route
        self.weather = pick_weather(spec.weather, rng)
        self.controls = Controls()
        self._track: Routes | None = None
        self.behavior: str | None = None
        self.destination: tuple[float, float, float] | None = None
        self.steps, self.ticks, self.done, self.reason = 0, 0, False, None
        self.initial_distance = self.goal_distance()
        self._prev_distance = self.initial_distance
        self.total_reward, self.distance_travelled = 0.0, 0.0
        self.contacts: list[Contact] = []
        self._tick_collided = self._halt = False
        self.last_control = (0.0, 0.0, 0.0)
        self._outcome: dict[str, Any] | None = None
        return self.observation()

    @staticmethod
    def _world(spec: NavSpec, rng: np.random.Generator) -> NavWorld:
        """The episode's `NavWorld`, its errors naming the scenario fields (N, M) and the town's range."""
        try:
            world = NavWorld(spec.map_name, spec.num_npc_vehicles, spec.num_pedestrians,
                             seed=int(rng.integers(2**63 - 1)), ego_spawn=spec.start_spawn)
        except ValueError as err:
            raise ValueError(f"scenario {spec.name!r}: num_npc_vehicles (N)={spec.num_npc_vehicles}, num_pedestrians "
                             f"(M)={spec.num_pedestrians} do not fit {spec.map_name} ({err})") from None
        world.vehicles.speed[0] = spec.initial_speed_kmh / C.KMH_PER_MS
        return world

    @staticmethod
    def _place_goal(spec: NavSpec, world: NavWorld, rng: np.random.Generator):
        town, start = world.town, world.ego_location
        if not spec.random_goal:
            xy = np.array(spec.goal_location[:2])
            loc = locate(town, xy)
            gap = float(np.hypot(*(xy - point_at(town, loc.lane, loc.s))))
            try:
                length = plan_route(town, start, xy).length
            except ValueError:
                length = math.inf
            return check_goal_location(spec.goal_location, gap, length), length
        return draw_goal(spec, town, start, rng)

    # --- read-only views ------------------------------------------------------------------------------------

    @property
    def collided_types(self) -> list[str]:
        """Type ids of the actors touched, one per `contacts` entry (first contact order)."""
        return [c.type_id for c in self.contacts]

    def goal_distance(self) -> float:
        """2D distance from the ego to the goal [m]."""
        v = self.world.vehicles
        return float(describe.goal_distance(np.array([v.x[0], v.y[0]]), np.array(self.goal[:2])))

    @property
    def speed_kmh(self) -> float:
        """Ego speed [km/h]."""
        return float(self.world.vehicles.speed[0]) * C.KMH_PER_MS

    def lane_name(self) -> str:
        """``current_lane``: ``lane_<k>`` counted from the leftmost lane of the ego's direction."""
        return describe.current_lane(lane_index(self.world.town, self.world.ego_location.lane))

    def nearby_actors(self) -> list[dict[str, Any]]:
        """Vehicles and walkers within 50 m, nearest first (`describe.nearby_actors`)."""
        v, w = self.world.vehicles, self.world.walkers
        n, m = len(v.x) - 1, len(w.speed)
        xy = np.concatenate([np.stack([v.x[1:], v.y[1:]], axis=1), np.asarray(w.xy).reshape(m, 2)])
        ids = np.concatenate([vehicle_ids(np.arange(1, n + 1)), walker_ids(np.arange(m))])
        return describe.nearby_actors(np.array([v.x[0], v.y[0]]), float(v.yaw[0]), xy, ids,
                                      [NPC_TYPE_ID] * n + [WALKER_TYPE_ID] * m)

    def observation(self) -> dict[str, Any]:
        """Upstream's observation fields (upstream's ``models.py``) plus ``scenario_data``.

        Returns:
            ``location`` (x, y, z) [m], ``rotation`` (pitch, yaw, roll) [deg], ``speed_kmh``, ``goal_distance``
            [m], ``goal_direction``, ``current_lane``, ``nearby_actors``, ``collision_detected``,
            ``collided_with``, ``done``, ``done_reason``, ``simulation_time`` [s], ``step_number``,
            ``scene_description``, ``scenario_data`` (``goal_location``, ``route_length``, ``weather``,
            ``outcome`` (None until done)); and two keys that are not on upstream's wire (the server leaves them
            out), for the LLM text: ``traffic_light`` (``{"state": "green" | "yellow" | "red", "stop_line_distance":
            m}`` of the light governing the ego, `NavWorld.ego_light`, or None without one) and
            ``crossing_walker_ids`` (ids of the walkers crossing the road now).
        """
        v, w = self.world.vehicles, self.world.walkers
        xy = np.array([v.x[0], v.y[0]])
        light, stop = self.world.ego_light()
        crossing = walker_ids(np.flatnonzero(np.asarray(w.mode) == CROSSING)).tolist()
        return {
            "location": (float(v.x[0]), float(v.y[0]), 0.0),
            "rotation": (0.0, math.degrees(float(v.yaw[0])), 0.0),
            "speed_kmh": self.speed_kmh,
            "goal_distance": self.goal_distance(),
            "goal_direction": describe.goal_direction(xy, float(v.yaw[0]), np.array(self.goal[:2])),
            "current_lane": self.lane_name(),
            "nearby_actors": self.nearby_actors(),
            "collision_detected": bool(self.collided_types),
            "collided_with": self.collided_types[0] if self.collided_types else None,
            "done": self.done,
            "done_reason": rules.DONE_REASON if self.done else "",
            "simulation_time": self.ticks * C.DT,
            "step_number": self.steps,
            "scene_description": describe.scene_description(self.spec),
            "scenario_data": {"goal_location": list(self.goal), "route_length": self.route_length,
                              "weather": self.weather, "outcome": self._outcome},
            "traffic_light": None if light == Light.NONE else {"state": Light(light).name.lower(),
                                                               "stop_line_distance": float(stop)},
            "crossing_walker_ids": crossing,
        }

    def outcome(self) -> dict[str, Any]:
        """`rules.outcome` now.

        The remaining route is 0 on arrival, else `plan_route` from the ego (or the straight-line distance
        when the ego is off the network).
        """
        d = self.goal_distance()
        if self.reason == "goal_reached":
            remaining = 0.0
        else:
            try:
                remaining = plan_route(self.world.town, self.world.ego_location, self.goal[:2]).length
            except ValueError:
                remaining = d
        out = rules.outcome(self.spec, reason=self.reason, steps=self.ticks, goal_dist=d,
                            initial_route=max(self.route_length, 1e-9), remaining_route=remaining,
                            distance_travelled=self.distance_travelled, collided_types=self.collided_types,
                            total_reward=self.total_reward)
        out["weather"] = self.weather
        return out

    # --- actions --------------------------------------------------------------------------------------------

    def step(self, call: NavigationCall, ticks: int = 1, on_tick: Callable[[bool], bool] | None = None,
             observe: bool = True) -> StepResult:
        """Apply one upstream action, then run its ticks (see the module docstring).

        Args:
            call: The action (`NavigationCall`, all 10 types).
            ticks: Ticks after a plain action, an integer >= 0 (the batching extension; each tick counts
                as one upstream step). Ignored by ``follow_route`` and ``capture_image``.
            on_tick: Called after every tick with whether the ego touched a vehicle or walker in it; a true
                return ends the step after that tick (the upstream step it belongs to is still scored). The
                Gymnasium env tracks VLM-RL's per-tick rules with it.
            observe: Whether to build the result's observation (False: ``observation`` is None; a caller that
                chains several steps builds it once at the end with `observation`).

        Raises:
            EpisodeFinishedError: The episode is done (upstream would keep paying rewards).
            ValueError: ``ticks`` is not an integer >= 0, a lane change with no neighbour lane on that side
                or a ``target_lane_id`` not next to the current lane, or a destination off the network or
                unreachable; each names the field and the valid range, and nothing is changed.
        """
        if self.done:
            raise EpisodeFinishedError(f"episode of {self.spec.name!r} is done after {self.steps} steps "
                                       f"({self.reason}); reset before stepping again")
        check_ticks(ticks)
        kind = call.action_type
        if kind == "capture_image":
            return StepResult(0, 0.0, 0.0, False, self.observation())
        self._apply(call)  # raises before any change
        raw = done_ticks = 0
        self._halt = False
        if kind == "follow_route":
            done_ticks, raw = self._follow(call.route_steps or 1, on_tick)
        else:
            for _ in range(int(ticks)):
                raw += self._unit(1, autopilot=False, on_tick=on_tick)
                done_ticks += 1
                if self.done or self._halt:
                    break
        return StepResult(done_ticks, float(raw), rules.rubric_reward(float(raw)), self.done,
                          self.observation() if observe else None)

    def _apply(self, call: NavigationCall) -> None:
        """Change the persistent controls; validate everything first (raise before any change)."""
        kind, ctl, world = call.action_type, self.controls, self.world
        if kind == "control":
            ctl.set_pedals(call.throttle, call.brake)
            ctl.manual_steer, ctl.steer, self._track = True, call.steer, None
        elif kind in ("emergency_stop", "brake_vehicle"):
            intensity = 1.0 if kind == "emergency_stop" or call.brake_intensity is None else call.brake_intensity
            ctl.set_pedals(0.0, intensity)
            ctl.steer = 0.0
        elif kind == "maintain_speed":
            ctl.set_cruise(30.0 if call.target_speed_kmh is None else call.target_speed_kmh)
            ctl.steer = 0.0
        elif kind == "lane_change":
            self._track = self._lane_change(call)
        elif kind == "init_navigation_agent":
            # None -> "normal"; an unknown name is kept and gives the basic agent (agent_params).
            self.behavior = "normal" if call.navigation_behavior is None else call.navigation_behavior
            self.destination = None
            world.clear_goal()  # the new agent has no destination (upstream: a fresh agent)
        elif kind == "set_destination":
            behavior = self.behavior or "normal"
            if call.destination_x is not None and call.destination_y is not None:
                xy = (call.destination_x, call.destination_y)
                try:
                    world.set_goal(xy, behavior)
                except ValueError as err:
                    reason = str(err).split(": ", 1)[-1] if str(err).startswith("goal_xy=") else str(err)
                    raise ValueError(f"set_destination (destination_x, destination_y)={xy}: {reason}") from None
                self.destination = (*xy, call.destination_z or 0.0)
            self.behavior = behavior

    def _lane_change(self, call: NavigationCall) -> Routes:
        town, loc = self.world.town, self.world.ego_location
        lane = town.lanes[loc.lane]
        k = lane_index(town, loc.lane)
        if call.target_lane_id is not None:
            target = Road.parse_lane_id(call.target_lane_id)
            if abs(target - k) > 1:
                raise ValueError(f"target_lane_id={call.target_lane_id!r}: the ego is on lane_{k}; choose "
                                 f"lane_{k - 1}, lane_{k} or lane_{k + 1}")
            side = "left" if target < k else "right" if target > k else None
        else:
            side = call.lane_direction.lower()
        new = loc.lane if side is None else (lane.left if side == "left" else lane.right)
        if new < 0:
            valid = [d for d, n in (("left", lane.left), ("right", lane.right)) if n >= 0]
            raise ValueError(f"lane_change {side}: lane {loc.lane} (lane_{k}) of {town.name} has no same-direction "
                             f"neighbour on the {side}; "
                             + (f"the only one here is on the {valid[0]}" if valid else
                                "it has none on either side (a one-lane road), so no lane change is possible here"))
        s = float(np.clip(loc.s, 0.0, town.lanes[new].length))
        return Routes(np.array([new]), np.array([s]), np.array([_straightest(town, new)]))

    def _follow(self, route_steps: int, on_tick: Callable[[bool], bool] | None = None) -> tuple[int, float]:
        """``follow_route``: the agent drives until arrival or ``route_steps`` ticks; one upstream step."""
        if self.behavior is None or self.destination is None or self.world.route_done():
            return 0, self._unit(0, autopilot=True)
        n, self._tick_collided = 0, False
        while n < route_steps:
            hit = self._tick(autopilot=True)
            n += 1
            if on_tick is not None and on_tick(hit):
                self._halt = True
            if self._halt or self.world.route_done() or self._end() is not None:
                break
        return n, self._score(n)

    # --- ticks and scoring ----------------------------------------------------------------------------------

    def _ego(self) -> Vehicles:
        v = self.world.vehicles
        return Vehicles(**{f.name: getattr(v, f.name)[:1] for f in fields(v)})

    def _tick(self, autopilot: bool) -> bool:
        """One world tick under the persistent controls (or the agent's); whether the ego touched an actor."""
        world, ctl = self.world, self.controls
        x0, y0 = float(world.vehicles.x[0]), float(world.vehicles.y[0])
        if autopilot:
            throttle, brake, steer = world.autopilot_control()
            ctl.set_pedals(throttle, brake)  # CARLA: the agent's last control persists
            ctl.manual_steer, ctl.steer, self._track = True, steer, None
        else:
            throttle, brake = ctl.pedals(self.speed_kmh)
            steer = ctl.steer
            if self._track is not None:
                steer = float(pursuit_steer(_lanes(world.town), self._track, self._ego(), world.dt)[0])
        self.last_control = (float(throttle), float(brake), float(np.clip(steer, -1.0, 1.0)))
        info = world.tick(*self.last_control)
        self.ticks += 1
        self.distance_travelled += math.hypot(float(world.vehicles.x[0]) - x0, float(world.vehicles.y[0]) - y0)
        self._add_contacts(info)
        hit = bool(len(info.ego_vehicle) or len(info.ego_walker))
        self._tick_collided = hit or self._tick_collided
        if self._track is not None:
            self._advance_track()
        return hit

    def _add_contacts(self, info) -> None:
        """One `Contact` per actor the ego touched in this tick for the first time (upstream: per new entry)."""
        known = {c.actor_id for c in self.contacts}
        speed = self.speed_kmh
        touched = [(int(i), NPC_TYPE_ID) for i in vehicle_ids(info.ego_vehicle)]
        touched += [(int(i), WALKER_TYPE_ID) for i in walker_ids(info.ego_walker)]
        for actor_id, type_id in touched:
            if actor_id not in known:
                known.add(actor_id)
                self.contacts.append(Contact(actor_id, type_id, speed))

    def _advance_track(self) -> None:
        lanes, t, v = _lanes(self.world.town), self._track, self.world.vehicles
        s, _, _ = lanes.project(t.lane, np.array([[v.x[0], v.y[0]]]), t.s)
        lane, nxt = int(t.lane[0]), int(t.next_lane[0])
        if s[0] > lanes.length[lane] and nxt >= 0:
            s, lane, nxt = s - lanes.length[lane], nxt, _straightest(self.world.town, nxt)
        self._track = Routes(np.array([lane]), np.asarray(s, dtype=np.float64), np.array([nxt]))

    def track_offset(self) -> float | None:
        """Signed lateral offset [m] of the ego from the lane it tracks after a lane change (None if none)."""
        if self._track is None:
            return None
        v = self.world.vehicles
        _, lateral, _ = _lanes(self.world.town).project(self._track.lane, np.array([[v.x[0], v.y[0]]]),
                                                        self._track.s)
        return float(lateral[0])

    def _end(self) -> str | None:
        """Arrival or collision during a ``follow_route`` (its step is counted when it ends, as upstream)."""
        return rules.end_reason(self.spec, self.steps, self.goal_distance(), self._tick_collided)

    def _unit(self, n: int, autopilot: bool, on_tick: Callable[[bool], bool] | None = None) -> float:
        """Run ``n`` ticks (0 or 1) as one upstream step and score it."""
        self._tick_collided = False
        for _ in range(n):
            hit = self._tick(autopilot)
            if on_tick is not None and on_tick(hit):
                self._halt = True
        return self._score(n)

    def _score(self, n: int) -> float:
        """Close one upstream step: end check, raw reward, bookkeeping."""
        d = self.goal_distance()
        self.steps += 1
        self.reason = rules.end_reason(self.spec, self.steps, d, self._tick_collided)
        self.done = self.reason is not None
        r = float(rules.raw_reward(self.spec.family, self._prev_distance, d, self.initial_distance,
                                   arrived=self.reason == "goal_reached", collided=self._tick_collided))
        self._prev_distance = d
        self.total_reward += r
        self._tick_collided = False
        if self.done:
            self._outcome = self.outcome()
        return r
