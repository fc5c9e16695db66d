"""`CarlaNavigationEnv`: VLM-RL's route following in a town with traffic, as a Gymnasium environment."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from carla_gym.envs.action import parse_control
from carla_gym.envs.spaces import smooth_steer
from carla_gym.sim import constants as C
from carla_gym.sim.navigation import route_task as R
from carla_gym.sim.navigation.world import NavWorld
from carla_gym.sim.town import Location, Route, Town, get_town, plan_route

ROUTE_TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05")
"""Towns of the ``route_<town>`` scenarios: VLM-RL trains on Town02 and its ``eval.py`` accepts Town01-05."""

SCENARIOS = tuple(f"route_{town}" for town in ROUTE_TOWNS)
"""Every scenario name `CarlaNavigationEnv` accepts."""

DEFAULT_SCENARIO = "route_Town02"

TRAFFIC_LEVELS = (0, 20, 40)
"""NPC vehicle counts of ``scenario_config["traffic"]``: VLM-RL's empty, regular and dense traffic (spec 2.4)."""

ROUTE_SETS = ("train", "eval")
"""Named ``scenario_config["route"]`` values (`carla_gym.sim.navigation.route_task.TRAIN_ROUTES`, ``EVAL_ROUTES``)."""

DEFAULT_SCENARIO_CONFIG = {"traffic": 20, "route": "train"}
"""VLM-RL's training setting: 20 vehicles (``tf_num``), training routes."""

NUM_NPCS = 5
"""NPC vehicles listed in the state vector, nearest first (this project's choice)."""

NPC_RANGE = 50.0
"""NPCs farther than this from the ego [m] are not listed (this project's choice: the waypoint range)."""

RANDOM_ROUTE_TRIES = 20
"""Random spawn pairs drawn at most for a random training route (VLM-RL redraws a route of <= 1 waypoint)."""

MAX_SPEED_OBS_KMH = 120.0
"""Upper bound of the observed speed [km/h] (VLM-RL ``vehicle_measures`` high; spec 2.2)."""

STATE_SIZE = 3 + 2 * R.NUM_WAYPOINTS + 4 * NUM_NPCS
"""Length of the state vector: 53."""

_W = R.WAYPOINT_RANGE
STATE_LOW = np.array([-1.0, 0.0, 0.0] + [-_W] * (2 * R.NUM_WAYPOINTS)
                     + [-_W, -_W, -MAX_SPEED_OBS_KMH, 0.0] * NUM_NPCS, dtype=np.float32)
STATE_HIGH = np.array([1.0, 1.0, MAX_SPEED_OBS_KMH] + [_W] * (2 * R.NUM_WAYPOINTS)
                      + [_W, _W, MAX_SPEED_OBS_KMH, 1.0] * NUM_NPCS, dtype=np.float32)


def _check_config(config: Any, num_spawns: int) -> dict[str, Any]:
    """``scenario_config`` merged over `DEFAULT_SCENARIO_CONFIG`, validated (ValueError naming the value)."""
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValueError(f"scenario_config={config!r}: must be a dict with keys 'traffic' and 'route', or None")
    unknown = sorted(set(config) - set(DEFAULT_SCENARIO_CONFIG))
    if unknown:
        raise ValueError(f"scenario_config key {unknown[0]!r}: choose from {sorted(DEFAULT_SCENARIO_CONFIG)}")
    out = DEFAULT_SCENARIO_CONFIG | config
    traffic = out["traffic"]
    if isinstance(traffic, bool) or traffic not in TRAFFIC_LEVELS:
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


class CarlaNavigationEnv(gym.Env[np.ndarray, np.ndarray]):
    """Route following through a town with traffic, VLM-RL's task (foundation of issue 15).

    ## Description
    The ego car starts standing at a spawn point of a procedural town analogue and must follow a
    planned route to another spawn point among 0, 20 or 40 NPC cars (which obey lights and junction
    rules, `carla_gym.sim.navigation.world`). The agent steers, accelerates and brakes every tick;
    it is rewarded as VLM-RL's base reward (``reward_fn5``): driving at 20-25 km/h, on the route's
    line, along its heading and steadily. Source: VLM-RL's ``CarlaRouteEnv`` (../shared/spec/vlm_rl.md
    sections 2.1-2.6, 4.2); the rules live in `carla_gym.sim.navigation.route_task`. One env step is
    one world tick of 0.05 s (VLM-RL: one CARLA tick of 1/15 s, no frame skip).

    ## Action Space
    `action_mode="control"` (the only mode so far): `Box(-1, 1, (2,), float32)` = [steer, throttle_or_brake],
    as VLM-RL: a positive second entry is throttle, a negative one brake (its magnitude). Steer is
    positive to the right. With `steer_smoothing=s` > 0 the applied steer is VLM-RL's low-pass
    (`carla_gym.envs.spaces.smooth_steer` over one 0.05 s tick: weight s ** 0.75 per tick, VLM-RL's time
    constant; VLM-RL uses s = 0.75), starting from 0 at each reset.

    ## Observation Space
    `observation_mode="state"` (the only mode so far): `Box(STATE_LOW, STATE_HIGH, (53,), float32)`,
    every entry clipped into its bounds:

    | Index | Observation | Unit | Min | Max |
    |-------|-------------|------|-----|-----|
    | 0 | applied steer (after smoothing) | | -1 | 1 |
    | 1 | applied throttle (0 while braking) | | 0 | 1 |
    | 2 | ego speed | km/h | 0 | 120 |
    | 3 + 2k | route waypoint k (k < 15, from the current one): lateral (+right) | m | -50 | 50 |
    | 4 + 2k | route waypoint k: longitudinal (+ahead) | m | -50 | 50 |
    | 33 + 4i | NPC i (i < 5, nearest first within 50 m): lateral (+right) | m | -50 | 50 |
    | 34 + 4i | NPC i: longitudinal (+ahead) | m | -50 | 50 |
    | 35 + 4i | NPC i: its speed minus the ego's | km/h | -120 | 120 |
    | 36 + 4i | NPC i: present (0 = padding, all zeros) | 0/1 | 0 | 1 |

    Entries 0-32 are VLM-RL's ``vehicle_measures`` and ``waypoints`` (spec 2.2): the route is planned
    at 1 m resolution (equal steps of at most 1 m), and near its end the list is padded by
    extrapolating the last segment. NPC ties in distance keep row order.

    ## Rewards
    `reward_mode="vlm-rl"` (the only mode so far): VLM-RL's ``reward_fn5`` on every step,
    speed_reward x centering_factor x angle_factor x distance_std_factor
    (`carla_gym.sim.navigation.route_task`), and -10 instead on a step that ends in failure
    (collision, off-track, too fast, stopped). The centre distance is to the line through the
    current and next route waypoints, so off the route the centring factor is 0. Angles are rounded
    to 0.01 rad and VLM-RL's angle quirks are kept (`route_angle`). `info["reward_terms"]` is
    `{"vlm_rl": reward}`.

    ## Starting State
    The ego stands at the route's start spawn point, headed along its lane; the NPCs stand at other
    spawn points with seeded sizes and routes (a seeded `NavWorld`, no walkers). Routes by
    `scenario_config["route"]`: `"eval"` cycles VLM-RL's 10 evaluation pairs, one per episode;
    `"train"` uses VLM-RL's 12 intersection pairs in turn on even episodes and a random pair of
    spawn points on odd ones; `(start, end)` always that pair. Spawn indices wrap modulo the town's
    spawn count (68 in the Town02 analogue, fewer than CARLA's): the routes are not CARLA's. The
    episode counter restarts at 0 whenever `reset` gets a seed; every random draw comes from `np_random`.

    ## Episode End
    Termination (`info["termination"]` names it): `"collision"` with a vehicle; `"off_track"`, more
    than 3.0 m from the route line; `"too_fast"`, above 35 km/h; `"stopped"`, below 1 km/h for
    `stop_time_s` in a row (90 s = 1800 ticks); `"success"`, past the route's last waypoint. VLM-RL's
    evaluation drops off-track and too-fast and its training ends at 3000 m with teleports to new
    routes; here every mode uses the rules above and one route per episode. No truncation (no
    `max_episode_steps`, as VLM-RL; add `TimeLimit` if needed).

    ## Info
    Every step: `scenario`, `route` (start, end spawn indices), `traffic`, `speed` [km/h],
    `routes_completed` ((current waypoint + 1) / waypoints), `total_distance` [m], `avg_center_dev` [m],
    `avg_speed` [km/h], `distance_from_center` [m], `angle` [rad], `speed_reward`, `centering_factor`,
    `angle_factor`, `distance_std_factor`, `total_reward`, `mean_reward`, `episode_length` [steps],
    `collision_state` (bool), `termination` ("" until the end) and `reward_terms`. At a reset the
    measures are those of the standing ego and the counters 0.

    The terminal step alone adds `outcome`, VLM-RL's per-episode evaluation summary
    (`carla_gym.sim.navigation.route_task.RouteTracker.outcome`; spec 4.2); the key is absent on every other
    step, as Gymnasium's `RecordEpisodeStatistics` does with `episode` (a vector env gives it with the mask
    `_outcome`). Its keys: `total_distance` [m], `total_reward` (step rewards, -10 included),
    `routes_completed` (clipped to 1), `speed_mean`/`speed_std` [km/h] and `center_dev_mean`/`center_dev_std`
    [m] over every step (standstill included), `reward_mean`/`reward_std` (sample stds, ddof 1, as pandas; 0
    for a one-step episode), `collision_speed` [km/h] at the collision step, `CPS` = 1 / steps and `CPM` =
    1000 / total_distance (all three 0 without a collision; CPM 0 at distance 0), `success` (the final
    position closer than 5 m to the last route waypoint), `termination` and `episode_length` [steps].

    ## Arguments
    ```python
    >>> import gymnasium as gym
    >>> import carla_gym
    >>> env = gym.make("CarlaNavigation-v0", scenario_config={"traffic": 0, "route": "eval"})
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, info["route"]
    ((53,), (48, 21))

    ```

    | Parameter | Type | Default | Description |
    |-----------|------|---------|-------------|
    | `scenario` | str or list | `"route_Town02"` | `route_<town>`, town in Town01-05; a list is sampled per reset |
    | `scenario_config` | dict or None | None | `{"traffic": 0, 20 or 40, "route": "train", "eval" or [start, end]}` |
    | `action_mode` | str | `"control"` | `"control"` |
    | `observation_mode` | str | `"state"` | `"state"` |
    | `reward_mode` | str | `"vlm-rl"` | `"vlm-rl"` |
    | `steer_smoothing` | float | 0.0 | previous steer's weight per 1/15 s in [0, 1) (VLM-RL: 0.75) |
    | `stop_time_s` | float | 90.0 | time below 1 km/h that ends the episode [s] |

    Bad values raise ValueError naming the value and the valid choices.

    ## Version History
    * v0: Initial release (foundation: control actions, state observations, VLM-RL base reward).
    """

    metadata = {"render_modes": [], "render_fps": round(1 / C.DT)}

    def __init__(
        self,
        scenario: str | Sequence[str] = DEFAULT_SCENARIO,
        scenario_config: dict | None = None,
        action_mode: str = "control",
        observation_mode: str = "state",
        reward_mode: str = "vlm-rl",
        steer_smoothing: float = 0.0,
        stop_time_s: float = R.STOP_TIME,
        render_mode: str | None = None,
    ) -> None:
        names = [scenario] if isinstance(scenario, str) else list(scenario) if isinstance(scenario, Sequence) else [
            scenario]
        if not names:
            raise ValueError(f"scenario={scenario!r}: give a name or a non-empty list of names from {list(SCENARIOS)}")
        for name in names:
            if name not in SCENARIOS:
                raise ValueError(f"scenario={name!r}: choose one of {list(SCENARIOS)}")
        for key, value, valid in (("action_mode", action_mode, ("control",)),
                                  ("observation_mode", observation_mode, ("state",)),
                                  ("reward_mode", reward_mode, ("vlm-rl",)),
                                  ("render_mode", render_mode, (None,))):
            if value not in valid:
                raise ValueError(f"{key}={value!r}: choose one of {list(valid)}")
        if not (isinstance(steer_smoothing, int | float) and 0.0 <= steer_smoothing < 1.0):
            raise ValueError(f"steer_smoothing={steer_smoothing!r}: must be in [0, 1) (VLM-RL uses 0.75)")
        try:
            self.rules = R.RouteRules(stop_time=stop_time_s)
        except ValueError as error:
            raise ValueError(f"stop_time_s={stop_time_s!r}: must be a finite number of seconds > 0 "
                             f"(VLM-RL: 90)") from error
        self.scenarios = tuple(names)
        self.configs = {name: _check_config(scenario_config, len(get_town(name.removeprefix("route_")).spawn_points))
                        for name in dict.fromkeys(names)}
        self.action_mode, self.observation_mode, self.reward_mode = action_mode, observation_mode, reward_mode
        self.steer_smoothing = float(steer_smoothing)
        self.render_mode = render_mode
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Box(STATE_LOW, STATE_HIGH, dtype=np.float32)
        self.world: NavWorld | None = None
        self.route: Route | None = None
        self.tracker: R.RouteTracker | None = None
        self._episode = 0
        self._steer = self._throttle = 0.0
        self._done = True

    # --- episode set-up ---------------------------------------------------------------------------------------

    def _pick_route(self, town: Town, route: str | tuple[int, int]) -> tuple[tuple[int, int], Route]:
        """The episode's spawn pair and planned route (module docstring's Starting State)."""
        n = len(town.spawn_points)
        if route == "eval":
            pairs = [R.spawn_pair(R.EVAL_ROUTES[self._episode % len(R.EVAL_ROUTES)], n)]
        elif route == "train" and self._episode % 2 == 0:
            pairs = [R.spawn_pair(R.TRAIN_ROUTES[(self._episode // 2) % len(R.TRAIN_ROUTES)], n)]
        elif route == "train":
            draws = [self.np_random.choice(n, size=2, replace=False) for _ in range(RANDOM_ROUTE_TRIES)]
            pairs = [(int(a), int(b)) for a, b in draws]
        else:
            pairs = [route]
        for start, end in pairs:
            sp = town.spawn_points
            try:
                planned = plan_route(town, Location(int(sp.lane[start]), float(sp.s[start]), 0.0), sp.xy[end],
                                     spacing=R.WAYPOINT_SPACING)
            except ValueError:
                continue
            if len(planned.waypoints) > 1:
                return (start, end), planned
        raise ValueError(f"route={route!r}: no drivable route between spawn points {pairs[-1]} of {town.name}")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        """Start an episode: a new seeded world, the ego at the route's start (class docstring).

        Args:
            seed: Seeds ``np_random`` and restarts the route cycle at episode 0.
            options: ``{"route_index": k}`` starts this episode at place k of the route cycle (evaluation route
                k % 10; training: pair k // 2 % 12 on even k, a random pair on odd k), so that seeded episodes
                can still walk through every route.

        Raises:
            ValueError: An unknown option or a bad ``route_index``.
        """
        super().reset(seed=seed)
        if seed is not None:
            self._episode = 0
        if options is not None:
            unknown = sorted(set(options) - {"route_index"})
            if unknown:
                raise ValueError(f"options key {unknown[0]!r}: the only option is 'route_index'")
            index = options.get("route_index", self._episode)
            if isinstance(index, bool) or not isinstance(index, int | np.integer) or index < 0:
                raise ValueError(f"options['route_index']={index!r}: must be an integer >= 0 (the episode's place in "
                                 "the route cycle: eval route k % 10, train pair k // 2 % 12 on even k)")
            self._episode = int(index)
        name = self.scenarios[int(self.np_random.integers(len(self.scenarios)))] if len(self.scenarios) > 1 \
            else self.scenarios[0]
        config = self.configs[name]
        town = get_town(name.removeprefix("route_"))
        self.pair, self.route = self._pick_route(town, config["route"])
        self.world = NavWorld(town, n_vehicles=config["traffic"], seed=int(self.np_random.integers(2**31 - 1)),
                              ego_spawn=self.pair[0])
        self.scenario, self.traffic = name, config["traffic"]
        ego = self.world.vehicles
        xy = np.array([ego.x[0], ego.y[0]])
        self.tracker = R.RouteTracker(self.route.waypoints, self.route.yaw, self.rules, self.world.dt, xy)
        self._episode += 1
        self._steer = self._throttle = 0.0
        self._done = False
        distance, theta = self.tracker.measure(xy, float(ego.yaw[0] + ego.beta[0]), float(ego.speed[0]))
        step = R.RouteStep(distance, theta, float(R.speed_reward(0.0)), float(R.centering_factor(distance)),
                           float(R.angle_factor(theta)), 1.0, 0.0, 0.0, None)
        return self._observe(), self._info(step, collided=False)

    # --- step -------------------------------------------------------------------------------------------------

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        """Apply ``[steer, throttle_or_brake]`` for one 0.05 s tick.

        Raises:
            RuntimeError: Before the first `reset` or after the episode ended.
            ValueError: ``action`` is not two numbers in [-1, 1].
        """
        if self._done:
            raise RuntimeError("the episode has ended (or never started): call reset()")
        steer, pedal = parse_control(action)
        if self.steer_smoothing:
            steer = smooth_steer(self._steer, steer, self.steer_smoothing, self.world.dt)
        self._steer, self._throttle = steer, max(pedal, 0.0)
        contacts = self.world.tick(throttle=self._throttle, brake=max(-pedal, 0.0), steer=steer)
        collided = bool(len(contacts.ego_vehicle) or len(contacts.ego_walker))
        ego = self.world.vehicles
        result = self.tracker.update((ego.x[0], ego.y[0]), float(ego.yaw[0] + ego.beta[0]), float(ego.speed[0]),
                                     collided)
        self._done = result.end is not None
        info = self._info(result, collided)
        if self._done:
            info["outcome"] = self.tracker.outcome()
        return self._observe(), float(result.reward), self._done, False, info

    def _observe(self) -> np.ndarray:
        """The state vector (class docstring's table), float32, clipped into the space."""
        v, t = self.world.vehicles, self.tracker
        xy, yaw = (float(v.x[0]), float(v.y[0])), float(v.yaw[0])
        speed_kmh = float(v.speed[0]) * C.KMH_PER_MS
        ahead = R.waypoints_ahead(t.waypoints, t.yaw, t.index)
        npc = np.zeros((NUM_NPCS, 4))
        if len(v.x) > 1:
            d = np.hypot(v.x[1:] - xy[0], v.y[1:] - xy[1])
            rows = np.argsort(d, kind="stable")[:NUM_NPCS]
            rows = rows[d[rows] <= NPC_RANGE]
            if rows.size:
                rel = R.to_ego_frame(np.stack([v.x[1:][rows], v.y[1:][rows]], axis=1), xy, yaw)
                npc[:rows.size, :2] = rel
                npc[:rows.size, 2] = v.speed[1:][rows] * C.KMH_PER_MS - speed_kmh
                npc[:rows.size, 3] = 1.0
        vec = np.concatenate([[self._steer, self._throttle, speed_kmh],
                              R.to_ego_frame(ahead, xy, yaw).ravel(), npc.ravel()]).astype(np.float32)
        return np.clip(vec, STATE_LOW, STATE_HIGH)

    def _info(self, step: R.RouteStep, collided: bool) -> dict[str, Any]:
        t = self.tracker
        return {
            "scenario": self.scenario,
            "route": self.pair,
            "traffic": self.traffic,
            "speed": float(self.world.vehicles.speed[0]) * C.KMH_PER_MS,
            "routes_completed": t.routes_completed,
            "total_distance": t.total_distance,
            "avg_center_dev": t.avg_center_dev,
            "avg_speed": t.avg_speed,
            "distance_from_center": step.distance,
            "angle": step.theta,
            "speed_reward": step.speed_reward,
            "centering_factor": step.centering_factor,
            "angle_factor": step.angle_factor,
            "distance_std_factor": step.distance_std_factor,
            "total_reward": t.reward_sum,
            "mean_reward": t.reward_sum / t.steps if t.steps else 0.0,
            "episode_length": t.steps,
            "collision_state": collided,
            "termination": step.end or "",
            "reward_terms": {"vlm_rl": step.reward},
        }
