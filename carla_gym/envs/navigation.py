"""`CarlaNavigationEnv`: route following, maze and free roam in a town with traffic, as a Gymnasium environment."""

from __future__ import annotations

import numbers
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from carla_gym.envs import nav_scenarios as S
from carla_gym.envs.action import parse_control
from carla_gym.envs.spaces import smooth_steer
from carla_gym.sim import constants as C
from carla_gym.sim.navigation import route_task as R
from carla_gym.sim.navigation import rules
from carla_gym.sim.navigation.describe import observation_text
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.town import Route, get_town
from carla_gym.sim.town.render import render_town
from carla_gym.sim.world import NavigationCall

NAV_TOOL_ACTIONS = ("observe", "follow_route", "follow_route_cautious", "follow_route_aggressive", "follow_route_basic",
                    "lane_change_left", "lane_change_right", "emergency_stop")
"""The ``action_mode="tools"`` meta-actions, index = action (class docstring's Action Space table)."""

_FOLLOW = {"follow_route": "normal", "follow_route_cautious": "cautious", "follow_route_aggressive": "aggressive",
           "follow_route_basic": "basic"}
_CALLS = {"observe": NavigationCall(action_type="observe"),
          "lane_change_left": NavigationCall(action_type="lane_change", lane_direction="left"),
          "lane_change_right": NavigationCall(action_type="lane_change", lane_direction="right"),
          "emergency_stop": NavigationCall(action_type="emergency_stop")}
_FOLLOW_TICK = NavigationCall(action_type="follow_route", route_steps=1)

ACTION_MODES = ("control", "tools")
"""``action_mode`` values."""

REWARD_MODES = ("vlm-rl", "rubric")
"""``reward_mode`` values."""

TERMINATIONS = ("vlm-rl", "vlm-rl-eval", "upstream")
"""``termination`` values (class docstring's Episode End); None picks ``"vlm-rl"`` for ``reward_mode="vlm-rl"`` and
``"upstream"`` for ``"rubric"``."""

ARRIVALS = ("goal_reached", R.SUCCESS)
"""End reasons that mean the route is done: ``routes_completed`` is 1 at them."""

DEFAULT_TICKS = {"control": 1, "tools": 10}
"""Default ``ticks_per_action`` per action mode: one 0.05 s tick (VLM-RL: one tick per step) and 0.5 s
(the trolley tools' decision length, upstream's TRL example)."""

TIME_LIMIT_S = 300.0
"""Default ``time_limit_s`` [s] (this project's choice: VLM-RL has no time limit but its stop rule; 300 s covers
the longest evaluation route at 10 km/h and bounds the rubric mode, which has no stop rule)."""

OUTCOME_KEYS = (*R.OUTCOME_KEYS, "collisions", "scenario", "time")
"""Keys of ``info["outcome"]``: VLM-RL's summary (`carla_gym.sim.navigation.route_task.OUTCOME_KEYS`), then the
actors hit per kind, the scenario name and the simulated time [s]."""

TIME_LIMIT = "time_limit"
"""``info["termination"]`` of an episode truncated by ``time_limit_s``."""


class CarlaNavigationEnv(gym.Env):
    """Route following, maze and free roam through a town with traffic (VLM-RL's task and upstream's navigation).

    ## Description
    The ego car starts at a spawn point of a procedural town analogue and must drive to a goal among NPC
    vehicles (which obey lights and junction rules) and, in free roam, walkers
    (`carla_gym.sim.navigation.world`). Scenarios (`carla_gym.envs.nav_scenarios`):

    * ``route_<Town>`` (Town01-05): VLM-RL's route following (``CarlaRouteEnv`` of
      https://github.com/zihaosheng/VLM-RL): a route between two spawn points among 0, 20 or 40 NPCs.
    * ``maze_navigation`` and ``free_roam[_<Map>[_v<N>][_p<M>]]``: upstream's navigation families
      (``server/benchmark_scenarios/maze.py`` and ``free_roam.py``), goal drawn as upstream does.

    Every episode runs as a `carla_gym.sim.navigation.episode.NavEpisode` (the one implementation of the
    actions, upstream's rubric and episode end, shared with the OpenEnv server and the LLM tools), and a
    `carla_gym.sim.navigation.route_task.RouteTracker` follows the planned route from the start to the goal
    (VLM-RL's reward, terminations and metrics). The rules live in those modules; this class only maps them
    to Gymnasium.

    ## Action Space
    `action_mode="control"` (default): `Box(-1, 1, (2,), float32)` = [steer, throttle_or_brake] as VLM-RL
    does: a positive second entry is throttle, a negative one brake (its magnitude); steer is positive
    to the right. It is upstream's ``control`` action, held for ``ticks_per_action`` ticks (default 1). With
    `steer_smoothing=s` > 0 the applied steer is VLM-RL's low-pass (`carla_gym.envs.spaces.smooth_steer`
    over the step's duration; VLM-RL uses s = 0.75), starting from 0 at each reset.

    `action_mode="tools"`: `Discrete(8)`, meta-actions built on upstream's tools, each lasting
    ``ticks_per_action`` ticks (default 10 = 0.5 s, the trolley tools' decision length):

    | Action | Name | Upstream tool calls |
    |--------|------|---------------------|
    | 0 | observe | ``observe``: the controls of the last action are held |
    | 1 | follow_route | the ``normal`` behaviour agent drives the planned route to the goal (``follow_route``) |
    | 2 | follow_route_cautious | the same with the ``cautious`` agent (slower, larger gaps) |
    | 3 | follow_route_aggressive | the same with the ``aggressive`` agent (faster, smaller gaps) |
    | 4 | follow_route_basic | the same with CARLA's basic agent (20 km/h, stops for obstacles and red lights) |
    | 5 | lane_change_left | ``lane_change`` onto the left same-direction lane, tracked until the next action |
    | 6 | lane_change_right | the same to the right |
    | 7 | emergency_stop | ``emergency_stop``: throttle 0, brake 1 |

    Tool-calling language models use upstream's tools themselves through `step_call`, which runs any upstream
    navigation action as one env step under the same rules (`carla_gym.llm.nav_tools`).

    A follow action after any other action, or with another behaviour, first starts that agent with the goal
    as its destination (``init_navigation_agent`` and ``set_destination``, planned from where the ego is, no
    tick); it then runs one ``follow_route`` tick per tick (so every tick is one upstream step in both action
    modes). A lane change with no same-direction lane on that side holds the controls instead (as ``observe``)
    and says why in ``info["action_error"]``.

    ## Observation Space
    `observation_mode` (`carla_gym.envs.nav_observation`, whose docstring has the tables): ``"state"`` (default),
    a float32 vector: VLM-RL's ``vehicle_measures`` and next 15 route waypoints in the ego frame, the nearest
    vehicles and walkers and the ego's traffic light; ``"dict"``: ``{"image": uint8 (3, H, W) bird's-eye view
    with the route, "state": the vector}``; ``"vlm-rl"``: VLM-RL's policy observation exactly,
    ``{"seg_camera": uint8 (192, 192, 6), "vehicle_measures": float32 (3,), "waypoints": float32 (15, 2)}``.
    The route to the goal is in every mode, so the goal's direction is always visible; the lights and walkers
    are in ``"state"``, ``"dict"`` and the text, not in ``"vlm-rl"``, which is VLM-RL's observation exactly (its
    raster has neither: that mode is for reproducing VLM-RL, not for comparing learners on equal inputs).

    ## Rewards
    `reward_mode="vlm-rl"` (default): VLM-RL's ``reward_fn5`` summed over the step's ticks (speed_reward x
    centering_factor x angle_factor x distance_std_factor; `carla_gym.sim.navigation.route_task`), and -10
    instead on a tick that ends in failure. The centre distance is to the line through the current and next
    route waypoints, so off the route the centring factor is 0.
    `reward_mode="rubric"`: upstream's navigation rubric (`carla_gym.sim.navigation.rules`), summed over the
    step's upstream steps (one per tick): free roam and routes (progress to the goal / initial distance - 0.01
    per step, +10 on arrival, -5 on a collision); maze (+1 on arrival, -1 on a collision).
    `info["reward_terms"]` has both: ``{"vlm_rl": ..., "rubric": ...}``.

    ## Starting State
    Route scenarios: the ego stands at the route's start spawn point; `scenario_config["route"]`: ``"eval"``
    cycles VLM-RL's 10 evaluation pairs, one per episode; ``"train"`` uses VLM-RL's 12 intersection pairs on
    even episodes and a random pair on odd ones; ``[start, end]`` always that pair (indices of this town's spawn
    points). VLM-RL's indices wrap modulo the town's spawn count (68 in the Town02 analogue, fewer than CARLA's):
    the routes are not CARLA's. The
    episode counter restarts at 0 whenever `reset` gets a seed. Maze and free roam: as upstream (a drawn spawn
    point and goal). Every random draw comes from `np_random`.

    ## Episode End
    Upstream's ends hold in every mode (`info["termination"]` names the end): ``"collision"`` with a vehicle or
    walker and ``"goal_reached"``, within the arrival radius of the goal (2 m for routes,
    `nav_scenarios.ROUTE_ARRIVAL_RADIUS`, so that passing the goal on the other lane is no arrival; upstream's
    5 m in the maze and 10 m in free roam). `termination` adds VLM-RL's per-tick ends
    (`carla_gym.sim.navigation.route_task`):

    * ``"vlm-rl"`` (the default with `reward_mode="vlm-rl"`): VLM-RL's training ends, ``"off_track"`` (more than
      3.0 m from the route line), ``"too_fast"`` (above 35 km/h), ``"stopped"`` (below 1 km/h for `stop_time_s` in
      a row) and ``"success"`` (past the route's last waypoint);
    * ``"vlm-rl-eval"``: VLM-RL's evaluation ends: no off-track or too-fast, ``"stopped"``, ``"no_progress"``
      (the first waypoint not passed after 10 s, ``eval.py``) and ``"success"``: the rules that
      ``train_sb3.py``'s evaluation and ``agents.compare`` play every agent by;
    * ``"upstream"`` (the default with `reward_mode="rubric"`): none.

    Every mode truncates at `time_limit_s` of simulated time (``"time_limit"``; upstream counts steps instead,
    which depend on the tool granularity) unless the tick also ended the episode otherwise. VLM-RL's training
    chains routes for 3000 m; here one route per episode. An episode that ends at the goal has
    ``routes_completed`` 1.

    ## Info
    Every step: ``scenario``, ``route`` (start, end spawn indices for route scenarios, else None), ``traffic``
    (NPC vehicles), ``goal`` (x, y, z) [m], ``speed`` [km/h], VLM-RL's step keys (``routes_completed``,
    ``total_distance`` [m], ``avg_center_dev`` [m], ``avg_speed`` [km/h], ``distance_from_center`` [m],
    ``angle`` [rad], ``speed_reward``, ``centering_factor``, ``angle_factor``, ``distance_std_factor``,
    ``total_reward``, ``mean_reward``, ``episode_length`` [ticks], ``collision_state``), ``goal_distance`` [m],
    ``termination`` ("" until the end), ``reward_terms``, ``ticks`` (this step's), ``action_error`` ("" unless a
    tool could not act) and ``text``: upstream's navigation observation as text for language models
    (`carla_gym.sim.navigation.describe.observation_text`).

    The terminal step alone adds ``outcome``: VLM-RL's per-episode summary
    (`carla_gym.sim.navigation.route_task.RouteTracker.outcome`: ``routes_completed``, ``success``,
    ``collision_speed``, ``CPS``, ``CPM``, ``speed_mean``, ``total_distance``, ...) with ``success``: the final
    position within 5 m of the last route waypoint (VLM-RL's rule) for routes, within the arrival radius for maze
    and free roam; and ``termination`` the env's end reason, plus ``collisions`` (actors hit per kind:
    vehicle, walker), ``scenario`` and ``time`` [s]. A vector env gives it with the mask ``_outcome``.

    ## Arguments
    ```python
    >>> import gymnasium as gym
    >>> import carla_gym
    >>> env = gym.make("CarlaNavigation-v0", scenario_config={"traffic": 0, "route": "eval"})
    >>> obs, info = env.reset(seed=0)
    >>> info["route"], env.action_space.shape
    ((48, 21), (2,))

    ```

    | Parameter | Type | Default | Description |
    |-----------|------|---------|-------------|
    | `scenario` | str or list | `"route_Town02"` | `route_<town>`, `maze_navigation`, `free_roam*`; one per reset |
    | `scenario_config` | dict or None | None | route: `{"traffic": 0/20/40, "route": "train"/"eval"/[start, end]}` |
    | `action_mode` | str | `"control"` | `"control"` or `"tools"` |
    | `observation_mode` | str | `"state"` | `"state"`, `"dict"` or `"vlm-rl"` |
    | `reward_mode` | str | `"vlm-rl"` | `"vlm-rl"` or `"rubric"` |
    | `ticks_per_action` | int or None | None | ticks (0.05 s) per step; None: 1 for control, 10 for tools |
    | `steer_smoothing` | float | 0.0 | previous steer's weight per 1/15 s in [0, 1) (VLM-RL: 0.75) |
    | `stop_time_s` | float | 90.0 | time below 1 km/h that ends a vlm-rl episode [s] |
    | `time_limit_s` | float | 300.0 | simulated time that truncates an episode [s] |
    | `termination` | str or None | None | `"vlm-rl"`, `"vlm-rl-eval"` or `"upstream"`; None: by `reward_mode` |
    | `image_size` | (int, int) | (96, 96) | (height, width) of the dict mode's image [px] |
    | `render_mode` | str or None | None | `"rgb_array"`: the bird's-eye view with the route, 256 x 256 |

    For maze and free roam, `scenario_config` takes upstream's overrides (`carla_gym.sim.navigation.scenarios`).
    Bad values raise ValueError naming the value and the valid choices.

    ## Version History
    * v0: Initial release.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": round(1 / C.DT)}

    def __init__(
        self,
        scenario: str | list[str] = S.DEFAULT_SCENARIO,
        scenario_config: dict | None = None,
        action_mode: str = "control",
        observation_mode: str = "state",
        reward_mode: str = "vlm-rl",
        ticks_per_action: int | None = None,
        steer_smoothing: float = 0.0,
        stop_time_s: float = R.STOP_TIME,
        time_limit_s: float = TIME_LIMIT_S,
        termination: str | None = None,
        image_size: tuple[int, int] = (96, 96),
        render_mode: str | None = None,
    ) -> None:
        from carla_gym.envs.nav_observation import OBSERVATION_MODES, NavObserver

        for key, value, valid in (("action_mode", action_mode, ACTION_MODES),
                                  ("observation_mode", observation_mode, OBSERVATION_MODES),
                                  ("reward_mode", reward_mode, REWARD_MODES),
                                  ("termination", termination, (None, *TERMINATIONS)),
                                  ("render_mode", render_mode, (None, *self.metadata["render_modes"]))):
            if value not in valid:
                raise ValueError(f"{key}={value!r}: choose one of {list(valid)}")
        self.configs = S.check_scenarios(scenario, scenario_config)
        self.scenarios = tuple(self.configs)
        if ticks_per_action is None:
            ticks_per_action = DEFAULT_TICKS[action_mode]
        if isinstance(ticks_per_action, bool) or not isinstance(ticks_per_action, int | np.integer) \
                or not 1 <= ticks_per_action <= 100:
            raise ValueError(f"ticks_per_action={ticks_per_action!r}: must be an integer in [1, 100] (ticks of "
                             f"0.05 s per step; None: {DEFAULT_TICKS})")
        if isinstance(steer_smoothing, bool) or not (isinstance(steer_smoothing, numbers.Real)
                                                     and 0.0 <= steer_smoothing < 1.0):
            raise ValueError(f"steer_smoothing={steer_smoothing!r}: must be in [0, 1) (VLM-RL uses 0.75)")
        self.termination = termination or ("vlm-rl" if reward_mode == "vlm-rl" else "upstream")
        stop = float(stop_time_s) if isinstance(stop_time_s, numbers.Real) and not isinstance(stop_time_s, bool) \
            else stop_time_s
        try:
            self.rules = R.evaluation_rules(stop) if self.termination == "vlm-rl-eval" else R.RouteRules(stop_time=stop)
        except ValueError as error:
            raise ValueError(f"stop_time_s={stop_time_s!r}: must be a finite number of seconds > 0 "
                             f"(VLM-RL: 90)") from error
        if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, numbers.Real) \
                or not 0.0 < time_limit_s <= C.MAX_EPISODE_STEPS * C.DT:
            raise ValueError(f"time_limit_s={time_limit_s!r}: must be a number of seconds in "
                             f"(0, {C.MAX_EPISODE_STEPS * C.DT:g}]")
        self.action_mode, self.observation_mode, self.reward_mode = action_mode, observation_mode, reward_mode
        self.ticks_per_action = int(ticks_per_action)
        self.steer_smoothing = float(steer_smoothing)
        self.time_limit_ticks = int(round(time_limit_s / C.DT))
        self.render_mode = render_mode
        self.observer = NavObserver(observation_mode, image_size)
        self.observation_space = self.observer.space
        self.action_space = (spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32) if action_mode == "control"
                             else spaces.Discrete(len(NAV_TOOL_ACTIONS)))
        self.episode: NavEpisode | None = None
        self.route: Route | None = None
        self.tracker: R.RouteTracker | None = None
        self._episode_index = 0
        self._steer = 0.0
        self._done = True

    # --- episode set-up ---------------------------------------------------------------------------------------

    @property
    def world(self):
        """The running episode's `NavWorld` (None before the first reset)."""
        return None if self.episode is None else self.episode.world

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Start an episode (class docstring's Starting State).

        Args:
            seed: Seeds ``np_random`` and restarts the route cycle at episode 0.
            options: ``{"route_index": k}`` starts this episode at place k of the route cycle (evaluation route
                k % 10; training: pair k // 2 % 12 on even k, a random pair on odd k), so that seeded episodes
                can still walk through every route; ignored by maze and free roam.

        Raises:
            ValueError: An unknown option or a bad ``route_index``.
        """
        super().reset(seed=seed)
        if seed is not None:
            self._episode_index = 0
        if options is not None:
            unknown = sorted(set(options) - {"route_index"})
            if unknown:
                raise ValueError(f"options key {unknown[0]!r}: the only option is 'route_index'")
            index = options.get("route_index", self._episode_index)
            if isinstance(index, bool) or not isinstance(index, int | np.integer) or index < 0:
                raise ValueError(f"options['route_index']={index!r}: must be an integer >= 0 (the episode's place in "
                                 "the route cycle: eval route k % 10, train pair k // 2 % 12 on even k)")
            self._episode_index = int(index)
        name = self.scenarios[int(self.np_random.integers(len(self.scenarios)))] if len(self.scenarios) > 1 \
            else self.scenarios[0]
        config = self.configs[name]
        if S.is_route_name(name):
            town = get_town(S.town_of(name))
            self.pair, route = S.pick_route(town, S.route_pairs(town, config["route"], self._episode_index,
                                                                 self.np_random))
            spec = S.route_spec(name, town, config["traffic"], self.pair)
        else:
            self.pair, route, spec = None, None, S.unlimited(config)
        seed_ = int(self.np_random.integers(2**63 - 1))
        if self.episode is None:
            self.episode = NavEpisode(name, seed=seed_, spec=spec)
        else:
            self.episode.reset(seed=seed_, spec=spec)
        ep = self.episode
        self.route = route if route is not None else S.plan_episode_route(ep.world.town, ep.world.ego_location,
                                                                            ep.goal)
        self.scenario = name
        ego = ep.world.vehicles
        xy = np.array([ego.x[0], ego.y[0]])
        self.tracker = R.RouteTracker(self.route.waypoints, self.route.yaw, self.rules, ep.world.dt, xy)
        self._episode_index += 1
        self._steer = 0.0
        self._done = False
        self._agent: str | None = None
        self.observer.reset(ep.world)
        self._last_obs = ep.observation()
        return self._observe(), self._info(None, collided=False, terms={"vlm_rl": 0.0, "rubric": 0.0}, ticks=0)

    # --- step -------------------------------------------------------------------------------------------------

    def step(self, action) -> tuple[Any, float, bool, bool, dict]:
        """Run one decision of ``ticks_per_action`` ticks.

        Raises:
            RuntimeError: Before the first `reset` or after the episode ended.
            ValueError: ``action`` is not in the action space (the message names it and the valid range).
        """
        self._start_step()
        rubric = 0.0
        if self.action_mode == "control":
            steer, pedal = parse_control(action)
            if self.steer_smoothing:
                steer = smooth_steer(self._steer, steer, self.steer_smoothing, self.ticks_per_action * C.DT)
            self._steer = steer
            call = NavigationCall(action_type="control", throttle=max(pedal, 0.0), brake=max(-pedal, 0.0),
                                  steer=steer)
            rubric = self._run(call, self.ticks_per_action).rubric_reward
            self._agent = None
        else:
            name = NAV_TOOL_ACTIONS[self._check_tool(action)]
            if name in _FOLLOW:
                rubric = self._follow(_FOLLOW[name])
            else:
                self._agent = None
                try:
                    result = self._run(_CALLS[name], self.ticks_per_action)
                except ValueError as err:  # a lane change with no lane on that side: hold the controls
                    self._error = str(err)
                    result = self._run(_CALLS["observe"], self.ticks_per_action)
                rubric = result.rubric_reward
        return self._finish(rubric)

    def step_call(self, call: NavigationCall, ticks: int | None = None) -> tuple[Any, float, bool, bool, dict]:
        """Run one upstream navigation action (any of the 10 types) as an env step: the tool-calling LLM's path.

        The same per-tick rules, reward mode, time limit, observation, info and outcome as `step`, so an LLM's
        tool calls and a Gymnasium agent's actions are scored by one code path. Use ``reward_mode="rubric"``
        for upstream's rubric.

        Args:
            call: The action (`carla_gym.sim.world.NavigationCall`). ``follow_route`` drives up to
                ``call.route_steps`` ticks (one upstream step); ``capture_image`` runs none.
            ticks: Ticks of any other action (the action, then its controls held), an integer >= 0; None:
                ``ticks_per_action``.

        Raises:
            RuntimeError: Before the first `reset` or after the episode ended.
            ValueError: As `carla_gym.sim.navigation.episode.NavEpisode.step` (a lane change with no lane on
                that side, a destination off the network, bad ``ticks``): nothing has changed.
        """
        self._start_step()
        result = self._run(call, self.ticks_per_action if ticks is None else ticks)
        self._agent = None
        return self._finish(result.rubric_reward)

    def _start_step(self) -> None:
        """Refuse a step after the end; clear the per-step tick record."""
        if self._done:
            raise RuntimeError("the episode has ended (or never started): call reset()")
        self._tick_state = {"vlm_rl": 0.0, "step": None, "collided": False, "end": None, "ticks": 0,
                            "time_up": False}
        self._error = ""

    def _finish(self, rubric: float) -> tuple[Any, float, bool, bool, dict]:
        """The step's end reason, reward, observation and info after its ticks ran."""
        ep, state = self.episode, self._tick_state
        end = state["end"]  # VLM-RL's end of the tick, else upstream's, else the time limit
        if end is None and ep.done:
            end = ep.reason
        if end is None and state["time_up"]:
            end = TIME_LIMIT
        if end in ARRIVALS:
            self.tracker.arrive()
        truncated = end in (TIME_LIMIT, "max_steps")
        self._done = end is not None
        reward = state["vlm_rl"] if self.reward_mode == "vlm-rl" else rubric
        self._last_obs = ep.observation()
        step = state["step"]
        info = self._info(step, state["collided"], {"vlm_rl": state["vlm_rl"], "rubric": float(rubric)},
                          state["ticks"], end=end, error=self._error)
        if self._done:
            info["outcome"] = self._outcome(end)
        return self._observe(), float(reward), self._done and not truncated, truncated, info

    def _check_tool(self, action) -> int:
        """The tool index of ``action`` (an int or a 0-d/1-element integer array), or ValueError naming it."""
        value = np.asarray(action)
        if value.size == 1 and np.issubdtype(value.dtype, np.integer):
            index = int(value.reshape(()))
            if 0 <= index < len(NAV_TOOL_ACTIONS):
                return index
        raise ValueError(f"action={action!r}: choose an integer in [0, {len(NAV_TOOL_ACTIONS) - 1}] "
                         f"({', '.join(f'{i} {n}' for i, n in enumerate(NAV_TOOL_ACTIONS))})")

    def _follow(self, behavior: str) -> float:
        """A follow meta-action: (re)start the agent if needed, then one ``follow_route`` tick per tick."""
        ep = self.episode
        if self._agent != behavior or ep.destination is None:
            ep.step(NavigationCall(action_type="init_navigation_agent", navigation_behavior=behavior), ticks=0,
                    observe=False)
            goal = ep.goal
            try:
                ep.step(NavigationCall(action_type="set_destination", destination_x=goal[0], destination_y=goal[1],
                                       destination_z=goal[2]), ticks=0, observe=False)
            except ValueError as err:  # no route from here (off the lanes): hold the controls
                self._agent = None
                self._error = str(err)
                return self._run(_CALLS["observe"], self.ticks_per_action).rubric_reward
            self._agent = behavior
        rubric = 0.0
        state = self._tick_state
        while state["ticks"] < self.ticks_per_action and not (ep.done or state["end"] or state["time_up"]):
            result = self._run(_FOLLOW_TICK, 1)
            rubric += result.rubric_reward
            if result.ticks == 0:  # the agent has no route left: hold its last controls for the rest
                rest = self.ticks_per_action - state["ticks"]
                rubric += self._run(_CALLS["observe"], rest).rubric_reward
                break
        return rubric

    def _run(self, call: NavigationCall, ticks: int):
        """One `NavEpisode.step` with the per-tick hook, its observation left to the end of the env step."""
        return self.episode.step(call, ticks=ticks, on_tick=self._on_tick, observe=False)

    def _on_tick(self, collided: bool) -> bool:
        """After every tick: VLM-RL's per-tick rules, the observer's history, the time limit; True ends the step."""
        ep, state = self.episode, self._tick_state
        v = ep.world.vehicles
        step = self.tracker.update((v.x[0], v.y[0]), float(v.yaw[0] + v.beta[0]), float(v.speed[0]), collided)
        self.observer.record(ep.world)
        state["vlm_rl"] += step.reward
        state["step"], state["ticks"] = step, state["ticks"] + 1
        state["collided"] = state["collided"] or collided
        if self.termination != "upstream" and step.end is not None:
            state["end"] = step.end
        state["time_up"] = ep.ticks >= self.time_limit_ticks
        return state["end"] is not None or state["time_up"]

    # --- observation, info, render ----------------------------------------------------------------------------

    def _observe(self):
        throttle, _, steer = self.episode.last_control
        t = self.tracker
        return self.observer.observe(self.episode.world, t.waypoints, t.yaw, t.index, steer, throttle)

    def _standing_step(self) -> R.RouteStep:
        """VLM-RL's measures of the ego where it is, without a tick (at a reset, or a step of no tick)."""
        v = self.episode.world.vehicles
        distance, theta = self.tracker.measure((float(v.x[0]), float(v.y[0])), float(v.yaw[0] + v.beta[0]),
                                               float(v.speed[0]))
        std = R.distance_std_factor(self.tracker.history) if self.tracker.history else 1.0
        return R.RouteStep(distance, theta, float(R.speed_reward(v.speed[0] * C.KMH_PER_MS)),
                           float(R.centering_factor(distance)), float(R.angle_factor(theta)), std, 0.0, 0.0, None)

    def _info(self, step: R.RouteStep | None, collided: bool, terms: dict[str, float], ticks: int,
              end: str | None = None, error: str = "") -> dict[str, Any]:
        t, ep = self.tracker, self.episode
        if step is None:  # a step that ran no tick (``capture_image``, or ``ticks=0``)
            step = self._standing_step()
        return {
            "scenario": self.scenario,
            "route": self.pair,
            "traffic": ep.spec.num_npc_vehicles,
            "goal": tuple(float(g) for g in ep.goal),
            "speed": ep.speed_kmh,
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
            "goal_distance": ep.goal_distance(),
            "termination": end or "",
            "reward_terms": terms,
            "ticks": ticks,
            "action_error": error,
            "text": observation_text(self._last_obs),
        }

    def _outcome(self, end: str) -> dict[str, Any]:
        """``info["outcome"]``: VLM-RL's summary with this env's end reason and success rule, plus who was hit."""
        ep = self.episode
        radius = R.SUCCESS_RADIUS if S.is_route_name(self.scenario) else ep.spec.success_radius
        out = self.tracker.outcome(success_radius=radius)
        kinds = [rules.collision_kind(t) for t in ep.collided_types]
        out.update(termination=end, collisions={k: kinds.count(k) for k in ("vehicle", "walker")},
                   scenario=self.scenario, time=ep.ticks / round(1 / C.DT))
        return out

    def render(self) -> np.ndarray | None:
        """The bird's-eye view (256 x 256 x 3 uint8, 40 m across) with the route and goal, for ``"rgb_array"``."""
        if self.render_mode is None or self.episode is None:
            return None
        w = self.episode.world
        return render_town(w.town, w.vehicles, w.walkers.xy, w.lights, view="birdeye", width=256,
                           height=256, route=self.route.waypoints[self.tracker.index:], goal=self.episode.goal[:2])
