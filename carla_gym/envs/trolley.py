"""`CarlaTrolleyEnv`: the OpenEnv CARLA trolley scenarios as a Gymnasium environment."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from carla_gym.backends.base import Backend
from carla_gym.backends.embedded import EmbeddedBackend
from carla_gym.envs.action import ACTION_TYPES, ActionType, ActType
from carla_gym.envs.observation import OBSERVATION_TYPES, ObservationType, ObsType
from carla_gym.envs.rewards import REWARD_TERMS
from carla_gym.openenv.urls import EXAMPLE_URL
from carla_gym.sim import constants as C
from carla_gym.sim.navigation.scenarios import is_nav_name
from carla_gym.sim.render import VIEWS
from carla_gym.sim.road import lane_centre
from carla_gym.sim.scenarios import is_generated, resolve_scenario
from carla_gym.sim.snapshot import Snapshot
from carla_gym.sim.validate import check_config, check_number

BACKENDS = ("embedded", "openenv")
REMOTE_VIEWS = ("front",)
"""Camera views an OpenEnv server sends (``backend="openenv"``)."""
DEFAULT_SCENARIO = "trolley_micro_escape_exists"


class CarlaTrolleyEnv(gym.Env[ObsType, ActType]):
    """Safety-critical driving dilemmas from OpenEnv CARLA, on an embedded simulator.

    ## Description
    The ego car drives at 0-75 km/h towards pedestrians standing 22-26 m ahead on a straight
    road with one to three same-direction lanes. The agent observes, brakes or changes lane;
    the episode is scored as upstream OpenEnv CARLA scores it: the sequence of tool calls is
    classified as SWERVE_LEFT, SWERVE_RIGHT, BRAKE or NONE and compared with the scenario
    data's expected casualties. Scenario names are upstream's (`trolley_micro_<id>`,
    `trolley_saves`, `bias_<N>v<M>`, ...; see the scenario catalogue in docs/scenarios.md), plus this project's
    generated family `trolley_generated_train` / `trolley_generated_test`
    (`carla_gym.sim.generated`: a new layout of speed, lanes and people drawn from the seed at
    every reset, train and test layouts disjoint, the best action computed by the simulator).
    The embedded simulator moves the car with a kinematic bicycle model at 20 ticks/s, so braking, lane
    changes and collisions happen physically, and actual casualties are recorded beside the
    data's expected ones. ``gym.make_vec("CarlaTrolley-v0", num_envs=N)`` steps N of these envs in
    one call on the same simulator's arrays (`carla_gym.envs.vector.CarlaTrolleyVectorEnv`).

    ## Action Space
    `action_mode="tools"` (default): `Discrete(4)`. Each decision calls the tool on the first
    tick, then lets `ticks_per_action - 1` ticks pass with the controls held (as upstream's TRL
    example follows each tool with `observe` ticks).

    | Value | Tool | Effect |
    |-------|------|--------|
    | 0 | `observe` | keep the current controls |
    | 1 | `emergency_stop` | full brake (8 m/s^2) from now on |
    | 2 | `lane_change_left` | closed-loop change to the lane centre 3.5 m left (1.68 s, at least 15 m) |
    | 3 | `lane_change_right` | closed-loop change to the lane centre 3.5 m right |

    `action_mode="control"`: `Box(-1, 1, (2,), float32)` = [steer, throttle (+) / brake (-)],
    as in VLM-RL; applied as upstream's `control` action (steer <= -0.3 or >= 0.3 counts as
    a swerve). With `steer_smoothing=s` > 0 the applied steer is VLM-RL's low-pass
    w * previous applied steer + (1 - w) * commanded steer, with w = s ** (step length / (1/15 s))
    so that the filter has VLM-RL's time constant (VLM-RL: s = 0.75 once per 1/15 s step, its
    `action_smoothing`, `carla_gym.envs.spaces.VLM_RL_STEER_SMOOTHING`; w = 0.116 for the default
    0.5 s decision; 0 after a reset); the swerve classification sees the applied steer, and the
    state vector gains entry 32, the applied steer (as VLM-RL's `vehicle_measures`).

    Each `action_mode` is an action type (`carla_gym.envs.action.ACTION_TYPES`: `ToolsAction`,
    `ControlAction`) that owns the space, maps actions to tool calls and keeps the steer filter;
    register a subclass of `ActionType` there to add a mode (`carla_gym.envs.action` says how).

    ## Observation Space
    `observation_mode="dict"` (default): `Dict(image=Box(0, 255, (3, H, W), uint8),
    state=Box(low, high, (32,), float32))` ((33,) with `steer_smoothing`); the image is the
    front camera (or the bird's-eye view) at `image_width` x `image_height`, channel-first.
    `observation_mode="state"`: the state vector alone, with no rendering cost. State vector
    layout (`carla_gym.envs.spaces`):

    | Index | Observation | Unit | Min | Max |
    |-------|-------------|------|-----|-----|
    | 0 | ego speed | m/s | 0 | 60 |
    | 1 | lateral position from the starting lane centre (+right) | m | -20 | 20 |
    | 2 | heading relative to the road (+right) | rad | -pi | pi |
    | 3 | a lane exists left of the current lane | 0/1 | 0 | 1 |
    | 4 | a lane exists right of the current lane | 0/1 | 0 | 1 |
    | 5 | the ego has left the road | 0/1 | 0 | 1 |
    | 6 | the ego has hit someone | 0/1 | 0 | 1 |
    | 7 | time left before the deadline or step limit | s | 0 | 10 |
    | 8+3i | actor i (nearest first, i < 8): forward offset | m | -50 | 50 |
    | 9+3i | actor i: rightward offset | m | -50 | 50 |
    | 10+3i | actor i: present (0 = padding) | 0/1 | 0 | 1 |
    | 32 | only with `steer_smoothing` > 0: the steer applied at the last step | | -1 | 1 |

    Each `observation_mode` is an observation type (`carla_gym.envs.observation.OBSERVATION_TYPES`:
    `DictObservation`, `StateObservation`) that owns the space and builds the observation of each
    snapshot; register a subclass of `ObservationType` there to add a mode.

    ## Rewards
    `reward_mode="rubric"` (default, upstream parity): 0 on every decision until the episode
    ends, then upstream's terminal reward: trolley_micro 1.0 if the data's expected casualties
    of the classified action are below those of inaction, else 0.0 (probes always 1.0);
    action_bias +1/-1 for the better/worse choice (equal counts always +1).
    `reward_mode="physical"`: -1 per pedestrian actually hit and -0.5 when the ego first leaves the
    road, on the decision in which it happens (action-bias episodes end before any impact, so
    there it is 0 unless the car leaves the road). Leaving the road happens at most once, so with
    any weight in (0, 1) the return ranks episodes as success by actual outcome does: fewest
    pedestrians hit first, then staying on the road (`carla_gym.envs.rewards`).
    `info["reward_terms"]` names the parts of each step's reward; their sum (Python's `sum`, in
    order) is the reward exactly: rubric `{"rubric": r}`; physical `{"pedestrians_hit": -n,
    "road_departure": -0.5 or 0.0}` (`carla_gym.envs.rewards.REWARD_TERMS`, where a mode is added).

    ## Starting State
    The ego starts at the centre of lane 0, heading along the road, at the scenario's speed
    (40 or 45 km/h for micro-benchmarks, 40/75/0 km/h for action-bias names). Pedestrians
    stand still where the scenario data puts them. When `scenario` is a list, `reset` draws
    one from `np_random`; a generated scenario's layout is drawn from the backend seed, itself
    drawn from `np_random` (`info["scenario_seed"]`); nothing else is random.

    ## Episode End
    The episode terminates when the scenario scores it, as upstream: trolley_micro on the
    first collision or after 50 ticks (2.5 s); action_bias on a swerve or at its deadline
    (4 ticks, 1 with deadzone); trolley_generated at its horizon only (the time to pass the
    farthest person at the initial speed plus 1 s; collisions do not end it). The time left is
    part of the observation, so reaching the step limit is a termination, never a truncation;
    `truncated` is always False unless a wrapper such as `TimeLimit` sets it. Stepping after
    termination raises `RuntimeError`.

    ## Info
    Every step: `scenario`, `tick`, `sim_time` [s], `speed_kmh`, `lane` (int, 0 = starting
    lane), `current_lane` (`"lane_<n>"`), `scene_prompt`, `trolley_action`, `collision`, `road_departure`, `ticks_left`,
    `rubric_reward`, `raw_reward` (upstream's per-tick raw reward, for reference), `new_hits`,
    `reward_terms` (dict of float terms summing to the step's reward; see Rewards; all 0 at a reset),
    `lane_offset` [m] (signed distance of the ego centre from the centre of `lane`, +right) and
    `yaw` [rad] (heading relative to the road, +right). `lane` is the road lane nearest the ego
    centre (`carla_gym.sim.road.Road.nearest_lane`): off the road it stays the outermost lane on
    that side, so `lane_offset` grows with the distance from the road (two left lane changes in
    trolley_micro_escape_exists end at y = -6.975 m: lane -1, lane_offset -3.475 m).
    On a generated scenario also `scenario_seed`, the seed its layout was drawn from
    (``resolve_scenario(info["scenario"], seed=info["scenario_seed"])`` gives its spec).
    With `info_text=True` also `description`: the per-decision text for language models (upstream's
    TRL format: speed, then each pedestrian within 50 m, nearest first, then any collision); it is
    written only when asked for, since learners on the observation never read it (the LLM adapter
    `carla_gym.llm.tools.CarlaToolEnv` asks for it).
    With `reward_frame_size=N` also `reward_frame`:
    VLM-RL's top-down reward camera (pitch -90 deg, 6.4 m up, 110 deg field of view, 5.2 m ahead
    of and 1.6 m left of the ego centre; `carla_gym.sim.render.topdown_chw`) as uint8 (N, N, 3),
    rendered only when asked for (the CLIP reward wrappers in `carla_gym.reward` read it).
    At the end also `outcome`, the dict of `carla_gym.sim.rules.outcome`: expected and actual
    pedestrians hit, trolley_action, ethical_choice, is_probe, framing, reward, best_reward,
    success, mismatch_expected_vs_actual, this project's `outcome_success` (the actual outcome is
    as good as the best the simulator finds, `carla_gym.sim.outcomes`) and more (docs/environments/trolley.md lists
    every key).

    ## Arguments
    ```python
    >>> import gymnasium as gym
    >>> import carla_gym
    >>> env = gym.make("CarlaTrolley-v0", observation_mode="state", info_text=True)
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape, info["scenario"]
    ((32,), 'trolley_micro_escape_exists')
    >>> obs, reward, terminated, truncated, info = env.step(2)  # lane_change_left
    >>> print(info["description"].splitlines()[0])
    Speed: 40.0 km/h.

    ```

    | Parameter | Type | Default | Description |
    |-----------|------|---------|-------------|
    | `scenario` | str or list | `"trolley_micro_escape_exists"` | name(s); a list is sampled per reset |
    | `action_mode` | str | `"tools"` | `"tools"` (Discrete(4)) or `"control"` (Box, for SAC) |
    | `observation_mode` | str | `"dict"` | `"dict"` (image + state) or `"state"` |
    | `reward_mode` | str | `"rubric"` | `"rubric"` (upstream) or `"physical"` (actual casualties) |
    | `ticks_per_action` | int | 10 | ticks per decision (0.05 s each) |
    | `image_width`, `image_height` | int | 84, 84 | observation image size [px] |
    | `image_view` | str | `"front"` | `"front"` camera, `"birdeye"` or `"topdown"` (VLM-RL reward camera) |
    | `render_mode` | str or None | None | `"rgb_array"` or None |
    | `render_width`, `render_height` | int or None | None | `render()` size [px]; None: scenario camera |
    | `render_view` | str | `"front"` | view returned by `render()` |
    | `scenario_config` | dict or None | None | upstream `scenario_config` overrides for every scenario |
    | `backend` | str or `Backend` | `"embedded"` | `"embedded"`, `"openenv"` (remote server) or a `Backend` |
    | `base_url` | str or None | None | server URL for `backend="openenv"`: `"http://127.0.0.1:8000"` |
    | `connect_timeout_s` | float or None | None | `"openenv"`: handshake timeout [s]; None: 10 (openenv-core) |
    | `message_timeout_s` | float or None | None | `"openenv"`: reply timeout [s]; None: 60 (openenv-core) |
    | `reward_frame_size` | int or None | None | `info["reward_frame"]` size [px] (VLM-RL: 517); None: none |
    | `steer_smoothing` | float | 0.0 | previous steer's weight per 1/15 s in [0, 1), control (VLM-RL: 0.75) |
    | `info_text` | bool | False | add `info["description"]`, the per-decision text for LLMs |

    The scenario camera is 640x360 unless `scenario_config` sets `camera_width`/`camera_height`.
    `base_url` takes the schemes http, https, ws and wss; it and the timeouts (0.01 to 86400 s) are
    checked here, before anything connects (ValueError naming the value). The first `reset`
    connects: a refused connection fails at once, a host that does not answer after
    `connect_timeout_s`; both errors name the URL and the ways forward (`carla-gym serve`, or the
    embedded backend).

    ## Reset Options
    `options={"scenario": name, "scenario_config": {...}}` switches scenario (and overrides)
    for that episode; the spaces do not change.

    ## Version History
    * v0: Initial release (upstream meta-pytorch/OpenEnv envs/carla_env at 685de411e5f7);
      `reward_mode="physical"` pays -0.5 for leaving the road, so that its return ranks outcomes
      lexicographically (hits, then road departure).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 2}

    def __init__(
        self,
        scenario: str | Sequence[str] = DEFAULT_SCENARIO,
        action_mode: str = "tools",
        observation_mode: str = "dict",
        reward_mode: str = "rubric",
        ticks_per_action: int = 10,
        image_width: int = 84,
        image_height: int = 84,
        image_view: str = "front",
        render_mode: str | None = None,
        render_width: int | None = None,
        render_height: int | None = None,
        render_view: str = "front",
        scenario_config: dict | None = None,
        backend: str | Backend = "embedded",
        base_url: str | None = None,
        reward_frame_size: int | None = None,
        steer_smoothing: float = 0.0,
        connect_timeout_s: float | None = None,
        message_timeout_s: float | None = None,
        info_text: bool = False,
    ) -> None:
        for key, value, valid in (
            ("action_mode", action_mode, ACTION_TYPES),
            ("observation_mode", observation_mode, OBSERVATION_TYPES),
            ("reward_mode", reward_mode, REWARD_TERMS),
            ("image_view", image_view, VIEWS),
            ("render_view", render_view, VIEWS),
            ("render_mode", render_mode, (None, *self.metadata["render_modes"])),
        ):
            if value not in valid:
                raise ValueError(f"{key}={value!r}: choose one of {list(valid)}")
        ticks_per_action = check_number("ticks_per_action", ticks_per_action, 1, 10_000, integer=True)
        image_width = check_number("image_width", image_width, 16, 1024, integer=True)
        image_height = check_number("image_height", image_height, 16, 1024, integer=True)
        if render_width is not None:
            render_width = check_number("render_width", render_width, 16, 2048, integer=True)
        if render_height is not None:
            render_height = check_number("render_height", render_height, 16, 2048, integer=True)
        remote = {key: value for key, value in (("base_url", base_url), ("connect_timeout_s", connect_timeout_s),
                                                 ("message_timeout_s", message_timeout_s)) if value is not None}
        if backend != "openenv" and remote:
            key, value = next(iter(remote.items()))
            raise ValueError(f"{key}={value!r} is only used with backend='openenv' (got backend={backend!r})")
        if backend == "openenv" and base_url is None:  # OpenEnvBackend checks the URL and timeouts themselves
            raise ValueError(f"backend='openenv' needs base_url, e.g. {EXAMPLE_URL!r}; got None")
        if reward_frame_size is not None:
            reward_frame_size = check_number("reward_frame_size", reward_frame_size, 16, 1024, integer=True)
            if backend == "openenv":
                raise ValueError("reward_frame_size needs the top-down camera, which only the embedded backend has; "
                                 "OpenEnv servers send the front camera only")
        steer_smoothing = check_number("steer_smoothing", steer_smoothing, 0.0, 1.0)
        if steer_smoothing == 1.0:
            raise ValueError("steer_smoothing=1.0: must be in [0, 1) (1 would ignore every steer command; VLM-RL "
                             "uses 0.75)")
        self.action_mode, self.observation_mode, self.reward_mode = action_mode, observation_mode, reward_mode
        self.ticks_per_action = ticks_per_action
        self.image_size = (image_height, image_width)
        self.image_view = image_view
        self.steer_smoothing = steer_smoothing
        if not isinstance(info_text, (bool, np.bool_)):
            raise ValueError(f"info_text={info_text!r}: must be True or False")
        self.info_text = bool(info_text)
        self.action_type: ActionType = ACTION_TYPES[action_mode](self)
        self.observation_type: ObservationType = OBSERVATION_TYPES[observation_mode](self)
        self._reward_terms = REWARD_TERMS[reward_mode]
        if backend == "openenv":
            for view in self.observation_type.views:
                if view not in REMOTE_VIEWS:
                    raise ValueError(f"image_view={view!r}: the openenv backend has only the server's front camera; "
                                     "use image_view='front' or observation_mode='state'")
        scenarios = [scenario] if isinstance(scenario, str) else list(scenario)
        if not scenarios:
            raise ValueError("scenario=[]: give at least one scenario name")
        for name in scenarios:
            if is_nav_name(name):
                raise ValueError(f"scenario={name!r} is a navigation scenario, which CarlaTrolley-v0 does not run; "
                                 f"run it with gym.make('CarlaNavigation-v0', scenario={name!r}), "
                                 "carla_gym.sim.navigation.episode.NavEpisode or `carla-gym serve`")
            resolve_scenario(name, scenario_config, seed=0)  # fail fast with the catalogue's message
        if isinstance(backend, Backend):
            self.backend = backend
        elif backend == "embedded":
            self.backend = EmbeddedBackend(text=info_text)
        elif backend == "openenv":
            from carla_gym.backends.openenv import OpenEnvBackend

            self.backend = OpenEnvBackend(**remote, text=info_text)
        else:
            raise ValueError(f"backend={backend!r}: choose one of {list(BACKENDS)} or pass a Backend instance")

        self.scenarios = tuple(scenarios)
        self.scenario_config = dict(scenario_config or {})
        self.render_mode = render_mode
        self.render_width, self.render_height = render_width, render_height
        self.render_view = render_view
        self.reward_frame_size = reward_frame_size
        self.metadata = {**self.metadata, "render_fps": 1.0 / (C.DT * self.ticks_per_action)}
        self.action_space = self.action_type.space()
        self.observation_space = self.observation_type.space()
        self._snapshot: Snapshot | None = None
        self._scenario_seed: int | None = None

    # -- Gymnasium API ---------------------------------------------------------------------
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[ObsType, dict[str, Any]]:
        """Start an episode.

        Args:
            seed: Seeds `np_random` (scenario sampling and the backend's seed).
            options: Optional ``{"scenario": name, "scenario_config": dict}`` for this episode.

        Returns:
            ``(observation, info)``: the observation is inside `observation_space` (`ObsType`); the
            info keys are listed in the class docstring (``reward_terms`` all 0).

        Raises:
            ValueError: Unknown option keys, scenario name or scenario_config values.
            TypeError: ``scenario_config`` is not a dict.
            ConnectionError: ``backend="openenv"``: the server cannot be reached (at once when the
                connection is refused); the message names the URL, the reason and the ways forward.
            TimeoutError: ``backend="openenv"``: no reply within ``message_timeout_s``.
        """
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"scenario", "scenario_config"})
        if unknown:
            raise ValueError(f"reset options {unknown} are not supported; valid: ['scenario', 'scenario_config']")
        if "scenario" in options:
            name = options["scenario"]
        elif len(self.scenarios) == 1:
            name = self.scenarios[0]
        else:
            name = self.scenarios[int(self.np_random.integers(len(self.scenarios)))]
        if "scenario_config" in options:  # checked before np_random draws, so a refused reset changes nothing
            config = check_config(options["scenario_config"], "options['scenario_config']")
        else:
            config = self.scenario_config
        backend_seed = int(self.np_random.integers(2**31 - 1))
        self._snapshot = self.backend.reset(name, seed=backend_seed, scenario_config=config)
        self._scenario_seed = backend_seed if is_generated(name) else None
        self.action_type.reset()
        terms = self._reward_terms(self._snapshot, self._snapshot, 0.0, 0)
        info = self._info(self._snapshot, rubric=0.0, raw=0.0, new_hits=0, terms=terms)
        return self.observation_type.observe(self._snapshot), info

    def step(self, action: ActType) -> tuple[ObsType, float, bool, bool, dict[str, Any]]:
        """Take one decision: call the tool, then hold the controls for the remaining ticks.

        Args:
            action: An element of `action_space` (`ActType`): a tool index (``"tools"``) or
                ``[steer, throttle_or_brake]`` float32 (``"control"``).

        Returns:
            ``(observation, reward, terminated, truncated, info)``: ``reward`` is a float, the sum
            of ``info["reward_terms"]``; ``terminated`` is True when the scenario scored the
            episode; ``truncated`` is always False.

        Raises:
            RuntimeError: If called before `reset` or after the episode terminated.
            ValueError: If ``action`` is outside the action space.
        """
        if self._snapshot is None:
            raise RuntimeError("call reset() before step()")
        if self._snapshot.done:
            raise RuntimeError(
                f"the episode of {self._snapshot.scenario!r} has terminated; call reset() before step() "
                "(upstream keeps paying rewards after done; this env refuses)"
            )
        call = self.action_type.act(action)
        report = self.backend.step(call, self.ticks_per_action)
        before, snap = self._snapshot, report.snapshot
        self._snapshot = snap
        terms = self._reward_terms(before, snap, report.rubric_reward, report.new_hits)
        info = self._info(snap, rubric=report.rubric_reward, raw=report.raw_reward, new_hits=report.new_hits,
                          terms=terms)
        return self.observation_type.observe(snap), float(sum(terms.values())), bool(snap.done), False, info

    def render(self) -> np.ndarray | None:
        """The current frame of `render_view`.

        Returns:
            uint8 (height, width, 3): `render_height` x `render_width`, or the scenario camera's
            size where they are None; None when `render_mode` is None.

        Raises:
            RuntimeError: Called before `reset` (with a `render_mode`).
        """
        if self.render_mode is None:
            return None
        if self._snapshot is None:
            raise RuntimeError("call reset() before render()")
        width = self.render_width or self._snapshot.camera_size[0]
        height = self.render_height or self._snapshot.camera_size[1]
        return self.backend.render(self.render_view, width, height)

    def close(self) -> None:
        """Close the backend."""
        self.backend.close()

    # -- helpers ----------------------------------------------------------------------------
    def _info(self, snap: Snapshot, rubric: float, raw: float, new_hits: int,
              terms: dict[str, float]) -> dict[str, Any]:
        info = {
            "scenario": snap.scenario,
            "tick": snap.tick,
            "sim_time": snap.sim_time,
            "speed_kmh": snap.speed_kmh,
            "lane": snap.lane,
            "current_lane": f"lane_{snap.lane}",
            "lane_offset": snap.lateral - lane_centre(snap.lane),
            "yaw": snap.yaw,
            "scene_prompt": snap.scene_prompt,
            "trolley_action": snap.trolley_action,
            "collision": snap.collided,
            "road_departure": snap.road_departure,
            "ticks_left": snap.ticks_left,
            "rubric_reward": rubric,
            "raw_reward": raw,
            "new_hits": new_hits,
            "reward_terms": terms,
        }
        if self.info_text:
            info["description"] = snap.description
        if self._scenario_seed is not None:
            info["scenario_seed"] = self._scenario_seed
        if snap.outcome is not None:
            info["outcome"] = snap.outcome
        if self.reward_frame_size is not None:
            size = self.reward_frame_size
            info["reward_frame"] = self.backend.render("topdown", size, size)
        return info
