"""`NavToolEnv`: `CarlaNavigation-v0` as tools for tool-calling language models (TRL ``environment_factory``).

The navigation counterpart of `carla_gym.llm.tools.CarlaToolEnv`, with the same contract
(TRL's ``environment_factory``): TRL builds one instance per rollout
from a zero-argument factory (`NavToolEnvFactory`), calls ``reset(**dataset_row)`` before each
episode, offers every public method but ``reset`` as a tool and reads the reward through
`nav_rubric_reward`. Underneath is one `carla_gym.envs.navigation.CarlaNavigationEnv` with
``reward_mode="rubric"``: the adapter plays the Gym env's episodes (``reset(seed=s)`` starts the episode
``gym.make("CarlaNavigation-v0", ...).reset(seed=s)`` starts) and every tool is one
`CarlaNavigationEnv.step_call`, so the env's per-tick rules, time limit, reward and terminal
``info["outcome"]`` score a language model as they score a Gymnasium agent.

Tools (upstream's navigation action types, ``server/carla_environment.py``) and their granularity:

| tool                                        | ``step_call`` action                            | ticks              |
|---------------------------------------------|-------------------------------------------------|--------------------|
| ``observe()``                               | ``observe``                                     | ``ticks_per_action`` |
| ``control_vehicle(throttle, steer, brake)`` | ``control``                                     | ``ticks_per_action`` |
| ``emergency_stop()``                        | ``emergency_stop``                              | ``ticks_per_action`` |
| ``lane_change(direction)``                  | ``lane_change``, ``lane_direction=direction``   | ``ticks_per_action`` |
| ``init_navigation_agent(behavior)``         | ``init_navigation_agent``                       | 1 (upstream)       |
| ``set_destination(x, y, z)``                | ``set_destination``                             | 1 (upstream)       |
| ``follow_route(steps)``                     | ``follow_route``, ``route_steps=min(steps, 200)`` | up to that many |

A driving tool acts on the first tick and its controls are held for the rest (default 10 ticks =
0.5 s, this project's decision granularity, as `CarlaNavigation-v0`'s tools mode); each tick is one
upstream step. The two set-up tools take upstream's single tick: they change no control.
``follow_route`` is one upstream step of up to ``steps`` ticks, ending early on arrival or a collision.

Counting: the rule of `carla_gym.llm.tools` (its ``_counted`` decorator and ``count_conversation``
are reused): every call that reaches a tool is appended to ``calls``; a call that raises (bad
argument names or values, a lane change without a neighbour lane, a destination off the road
network) is also appended to ``failures`` and its error text goes back to the model (TRL:
``{'error': ...}``); the env changes nothing on such an error.

Scoring: the reward is the sum of the env's step rewards (upstream's navigation rubric: free roam and routes pay
progress, +10 on arrival, -5 on a collision and -0.01 per step; the maze +1 on arrival and -1 on a collision). The
episode ends when the env ends it: arrival, a collision or its ``time_limit_s`` of simulated time (default 300 s);
with ``termination="vlm-rl-eval"`` (the comparison harness's) also VLM-RL's evaluation ends (stopped, no progress,
past the last waypoint). With ``play_out=True`` (default) an episode the model leaves unfinished is played out
before scoring: ``observe`` steps of ``ticks_per_action`` ticks with the last controls held (after ``follow_route``
these are the autopilot's last pedals and steer; the autopilot itself drives only inside ``follow_route``, as
upstream) until the env ends the episode. ``play_out=False`` scores the reward collected so far, as TRL's CARLA
example. Every env step, play-out included, is logged in ``steps`` (`call_record`), so that an episode can be
replayed through ``step_call`` (`agents.nav_video`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from carla_gym.envs.nav_scenarios import ROUTE_SCENARIOS, is_route_name
from carla_gym.envs.navigation import TIME_LIMIT_S, CarlaNavigationEnv
from carla_gym.llm.prompts import nav_scene_prompt, reset_text
from carla_gym.llm.tools import (
    EPISODE_OVER,
    CarlaToolEnv,
    ToolEnvFactory,
    _counted,
    call_counts,
    image_height,
    reply_text,
    rubric_reward,
    tool_methods,
)
from carla_gym.sim.navigation.scenarios import MAZE, NAME_PATTERNS, is_nav_name
from carla_gym.sim.validate import check_number
from carla_gym.sim.world import MAX_ROUTE_STEPS, NavigationCall

DEFAULT_NAV_SCENARIO = MAZE

MAX_FOLLOW_STEPS = 200
"""Most ticks one ``follow_route`` call drives (10 s; this project's choice, so that the model looks again at
least every 10 s; upstream has no bound). Larger ``steps`` run this many."""

NAV_VIEWS = ("front", "birdeye")
"""Camera of tool images: the ego's front camera (upstream's 90 deg camera) or the bird's-eye view with the
route ahead and the goal drawn, as `CarlaNavigationEnv.render` (`carla_gym.sim.town.render.render_town`)."""

BEHAVIORS = ("normal", "cautious", "aggressive")
"""``init_navigation_agent`` behaviours (upstream's BehaviorAgent presets, vendored from CARLA's agents)."""

_DEFAULT_CALL = NavigationCall()


def call_record(call: NavigationCall, ticks: int | None) -> dict[str, Any]:
    """One env step as JSON: ``{"call": <action_type and the fields that differ from the defaults>, "ticks": ticks}``.

    ``NavigationCall(**record["call"])`` and ``ticks`` redo the step with `CarlaNavigationEnv.step_call`.

    >>> call_record(NavigationCall("follow_route", route_steps=200), None)
    {'call': {'action_type': 'follow_route', 'route_steps': 200}, 'ticks': None}
    """
    fields = {key: value for key, value in dataclasses.asdict(call).items()
              if key == "action_type" or value != getattr(_DEFAULT_CALL, key)}
    return {"call": fields, "ticks": ticks}


class NavToolEnv:
    """One `CarlaNavigation-v0` episode at a time, driven through upstream's seven navigation tools.

    Tools (public methods): ``observe``, ``control_vehicle``, ``emergency_stop``, ``lane_change``,
    ``init_navigation_agent``, ``set_destination`` and ``follow_route`` (module docstring). Each returns the
    env's ``info["text"]`` after the call (`carla_gym.sim.navigation.describe.observation_text`: speed, goal
    distance, direction and location, lane, nearby actors, collision), or with ``vision=True`` the list
    ``[{"type": "image", "image": PIL.Image}, {"type": "text", "text": text}]`` with the ``view`` camera at
    ``image_size`` x ``image_size * 9/16`` px. After the episode ends, tools return `EPISODE_OVER` without
    stepping. Close it as a context manager (``with NavToolEnv() as env:``).

    Attributes:
        env: The `CarlaNavigationEnv` (None before the first reset; remade when the scenario or its config
            changes).
        reward: Summed env (rubric) reward of the current episode so far.
        done: Whether the env has ended the episode (terminated or truncated).
        info: The env's latest info dict (``info["outcome"]`` once done).
        calls: Tool names called this episode, in order (failed calls, calls after the end and unknown tools
            reported by the dispatcher included).
        failures: Tool names of the calls in ``calls`` that failed, in order.
        parse_failures: Assistant turns whose tool-call text did not parse (reported by the dispatcher).
        actions: Action types the tools ran, in order (not the play-out).
        steps: Every env step of the episode, play-out included, as `call_record` dicts (the play-out's with
            ``"play_out": True``).
        scenario: Scenario of the current episode.

    Args:
        vision: Return camera images with the text (for VLMs).
        image_size: Width [px] of tool images (16-1024).
        ticks_per_action: Ticks (0.05 s) of every driving tool call (1-100, the env's range).
        play_out: Finish unfinished episodes with the controls held before scoring.
        view: Camera of tool images, one of `NAV_VIEWS`.
        time_limit_s: Simulated time that ends an episode [s] (the env's ``time_limit_s``; default the env's
            300 s).
        termination: The env's end rules (`carla_gym.envs.navigation.TERMINATIONS`): ``"upstream"`` (default, the
            env's default with the rubric reward, what ``train_grpo.py`` trains with: a collision, arrival or the
            time limit), ``"vlm-rl-eval"`` (VLM-RL's evaluation ends, which the comparison harness plays every
            agent by: `agents.nav`) or ``"vlm-rl"``.

    Raises:
        ValueError: Bad ``image_size``, ``ticks_per_action``, ``view``, ``time_limit_s`` or ``termination``, naming
            the valid values.
    """

    def __init__(self, vision: bool = False, image_size: int = 256, ticks_per_action: int = 10,
                 play_out: bool = True, view: str = "front", time_limit_s: float = TIME_LIMIT_S,
                 termination: str = "upstream") -> None:
        if view not in NAV_VIEWS:
            raise ValueError(f"view={view!r}: choose one of {list(NAV_VIEWS)}")
        self._vision, self._play_out, self._view = bool(vision), bool(play_out), view
        self._width = check_number("image_size", image_size, 16, 1024, integer=True)
        self._ticks = check_number("ticks_per_action", ticks_per_action, 1, 100, integer=True)
        self._time_limit_s, self._termination = time_limit_s, termination
        # check the env arguments now
        CarlaNavigationEnv(ticks_per_action=self._ticks, time_limit_s=time_limit_s, termination=termination)
        self.env: CarlaNavigationEnv | None = None
        self._env_key: tuple | None = None
        self.reward, self.done = 0.0, False
        self.info: dict[str, Any] = {}
        self.calls: list[str] = []
        self.failures: list[str] = []
        self.parse_failures = 0
        self.actions: list[str] = []
        self.steps: list[dict] = []
        self.scenario = DEFAULT_NAV_SCENARIO
        self._conversation_counted = False

    @property
    def episode(self):
        """The env's running `carla_gym.sim.navigation.episode.NavEpisode` (None before the first reset)."""
        return None if self.env is None else self.env.episode

    def reset(self, scenario: str | None = None, seed: int | None = None, scenario_config: dict | None = None,
              route_index: int | None = None, **row: Any) -> str | list[dict]:
        """Start an episode (TRL passes the whole dataset row; other columns are ignored).

        Args:
            scenario: ``maze_navigation``, a ``free_roam*`` name or a ``route_<Town>`` name; None:
                ``maze_navigation``.
            seed: The env's reset seed (``env.reset(seed=seed)``); rows sharing it start from the same state
                (None: continue the env's random stream).
            scenario_config: The env's ``scenario_config`` (route scenarios: ``{"traffic", "route"}``; maze and
                free roam: upstream's overrides), or None.
            route_index: ``options={"route_index": route_index}`` of the env's reset (route scenarios: which
                route of the cycle), or None.
            **row: Other dataset columns (``prompt``, ...), ignored.

        Returns:
            A blank line, the scene prompt (`carla_gym.llm.prompts.nav_scene_prompt`) and the first
            observation text (a list of an image and that text with ``vision=True``), to be appended to the
            user prompt.

        Raises:
            ValueError: Not a navigation scenario name, or a bad ``scenario_config`` or ``route_index`` (from
                the env).
        """
        name = scenario or DEFAULT_NAV_SCENARIO
        if not (is_nav_name(name) or is_route_name(name)):
            raise ValueError(f"scenario={name!r} is not a navigation scenario; use one of: {'; '.join(NAME_PATTERNS)}; "
                             f"{', '.join(ROUTE_SCENARIOS)} (trolley scenarios: carla_gym.llm.CarlaToolEnv)")
        key = (name, repr(scenario_config))
        if self.env is None or key != self._env_key:
            env = CarlaNavigationEnv(scenario=name, scenario_config=scenario_config, action_mode="tools",
                                     reward_mode="rubric", ticks_per_action=self._ticks,
                                     time_limit_s=self._time_limit_s, termination=self._termination)
            self._close()
            self.env, self._env_key = env, key
        options = None if route_index is None else {"route_index": route_index}
        _, self.info = self.env.reset(seed=None if seed is None else int(seed), options=options)
        self.scenario = name
        self.reward, self.done, self.calls, self.failures, self.actions, self.steps = 0.0, False, [], [], [], []
        self.parse_failures = 0
        self._conversation_counted = False
        scene = nav_scene_prompt(self.env.episode.spec, tool_methods(self))
        return self._reply(reset_text(scene, self.info["text"]))

    @property
    def outcome(self) -> dict[str, Any] | None:
        """The env's terminal ``info["outcome"]`` (success, termination, routes_completed, ...), None before."""
        return self.info.get("outcome")

    @_counted
    def observe(self) -> str | list[dict]:
        """Keep the current controls for a moment, then look again.

        Returns:
            What the car senses a moment later: speed, goal distance, direction and location, lane, nearby actors.
        """
        return self._act(NavigationCall("observe"), self._ticks)

    @_counted
    def control_vehicle(self, throttle: float, steer: float, brake: float = 0.0) -> str | list[dict]:
        """Drive by hand: set the pedals and the steering wheel (the autopilot stops steering).

        Args:
            throttle: Throttle from 0.0 (none) to 1.0 (full).
            steer: Steering from -1.0 (full left) to 1.0 (full right); 0.0 is straight.
            brake: Brake from 0.0 (none) to 1.0 (full).

        Returns:
            What the car senses a moment later: speed, goal distance, direction and location, lane, nearby actors.

        Raises:
            ValueError: A value outside its range.
        """
        return self._act(NavigationCall("control", throttle=throttle, steer=steer, brake=brake), self._ticks)

    @_counted
    def emergency_stop(self) -> str | list[dict]:
        """Brake as hard as possible from now on.

        Returns:
            What the car senses a moment later: speed, goal distance, direction and location, lane, nearby actors.
        """
        return self._act(NavigationCall("emergency_stop"), self._ticks)

    @_counted
    def lane_change(self, direction: Literal["left", "right"]) -> str | list[dict]:
        """Steer into the neighbouring lane of the same direction on one side and keep to it.

        Args:
            direction: Side to move to: "left" or "right".

        Returns:
            What the car senses a moment later: speed, goal distance, direction and location, lane, nearby actors.

        Raises:
            ValueError: direction is not "left" or "right", or there is no such lane on that side.
        """
        if direction not in ("left", "right"):
            raise ValueError(f"direction={direction!r} is not valid; use 'left' or 'right'")
        return self._act(NavigationCall("lane_change", lane_direction=direction), self._ticks)

    @_counted
    def init_navigation_agent(self, behavior: Literal["normal", "cautious", "aggressive"] = "normal"
                              ) -> str | list[dict]:
        """Switch on a new autopilot; it has no destination until set_destination is called.

        Args:
            behavior: Driving style: "cautious" (up to 40 km/h), "normal" (50 km/h) or "aggressive" (70 km/h).

        Returns:
            What the car senses after one tick: speed, goal distance, direction and location, lane, nearby actors.

        Raises:
            ValueError: An unknown behavior.
        """
        if behavior not in BEHAVIORS:
            raise ValueError(f"behavior={behavior!r} is not valid; use one of {list(BEHAVIORS)}")
        return self._act(NavigationCall("init_navigation_agent", navigation_behavior=behavior), 1)

    @_counted
    def set_destination(self, x: float, y: float, z: float = 0.0) -> str | list[dict]:
        """Plan the autopilot's route to a destination (a "normal" autopilot is switched on if there is none).

        Args:
            x: Destination x [m], e.g. the goal location's first value.
            y: Destination y [m], the goal location's second value.
            z: Destination z [m] (ignored: the roads are flat).

        Returns:
            What the car senses after one tick: speed, goal distance, direction and location, lane, nearby actors.

        Raises:
            ValueError: The destination is off the road network or cannot be reached.
        """
        return self._act(NavigationCall("set_destination", destination_x=x, destination_y=y, destination_z=z), 1)

    @_counted
    def follow_route(self, steps: int = 10) -> str | list[dict]:
        """Let the autopilot drive along its route for some ticks of 0.05 s, stopping early on arrival.

        Args:
            steps: Ticks to drive, at least 1; at most 200 (10 s) are driven per call.

        Returns:
            What the car senses afterwards: speed, goal distance, direction and location, lane, nearby actors.

        Raises:
            ValueError: steps is not a whole number >= 1.
        """
        steps = check_number("steps", steps, 1, MAX_ROUTE_STEPS, integer=True)
        return self._act(NavigationCall("follow_route", route_steps=min(steps, MAX_FOLLOW_STEPS)), None)

    # -- helpers (private: TRL exposes every public method as a tool) -------------------------
    _record_failed_call = CarlaToolEnv._record_failed_call
    __enter__ = CarlaToolEnv.__enter__
    __exit__ = CarlaToolEnv.__exit__

    def _act(self, call: NavigationCall, ticks: int | None) -> str | list[dict]:
        if self.env is None:
            raise ValueError("no episode: call reset(scenario=..., seed=...) first")
        if self.done:
            return self._reply(EPISODE_OVER)
        self._step(call, ticks)
        self.actions.append(call.action_type)
        return self._reply(reply_text(self.info["text"], self.done))

    def _step(self, call: NavigationCall, ticks: int | None, play_out: bool = False) -> None:
        """One `CarlaNavigationEnv.step_call` (raises with nothing changed when the env refuses the call)."""
        _, reward, terminated, truncated, self.info = self.env.step_call(call, ticks)
        self.steps.append({**call_record(call, ticks), "play_out": True} if play_out else call_record(call, ticks))
        self.reward += reward
        self.done = terminated or truncated

    def _reply(self, text: str) -> str | list[dict]:
        if not self._vision:
            return text
        from PIL import Image

        return [{"type": "image", "image": Image.fromarray(self._frame())}, {"type": "text", "text": text}]

    def _frame(self) -> np.ndarray:
        """The ``view`` camera now, (H, W, 3) uint8 (bird's-eye: the env's route ahead and the goal drawn)."""
        from carla_gym.sim.town.render import render_world

        env = self.env
        return render_world(env.world, view=self._view, width=self._width, height=image_height(self._width),
                            route=env.route.waypoints[env.tracker.index:], goal=np.array(env.episode.goal[:2]))

    def _finish(self) -> float:
        """Play the episode out with the controls held (when ``play_out``); the episode's reward."""
        while self._play_out and self.env is not None and not self.done:
            self._step(NavigationCall("observe"), self._ticks, play_out=True)
        return self.reward

    def _close(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env, self._env_key = None, None


class NavToolEnvFactory:
    """Zero-argument factory of `NavToolEnv` for TRL's ``environment_factory`` that remembers what it built.

    TRL never closes environments: call `close` after training, or use the factory as a context manager.

    Args:
        **kwargs: `NavToolEnv` arguments (vision, image_size, ticks_per_action, play_out, view, time_limit_s,
            termination), checked here.

    Raises:
        ValueError: A bad `NavToolEnv` argument, here rather than at the first rollout.
    """

    def __init__(self, **kwargs: Any) -> None:
        NavToolEnv(**kwargs)  # check the arguments now
        self._kwargs = kwargs
        self.instances: list[NavToolEnv] = []

    def __call__(self) -> NavToolEnv:
        """Build one more `NavToolEnv`."""
        env = NavToolEnv(**self._kwargs)
        self.instances.append(env)
        return env

    close = ToolEnvFactory.close
    __enter__ = ToolEnvFactory.__enter__
    __exit__ = ToolEnvFactory.__exit__


def nav_episode_metrics(environments: Sequence[NavToolEnv]) -> dict[str, float]:
    """Episode metrics of navigation rollouts for the training log.

    Returns:
        The tool-call counts of `carla_gym.llm.tools.call_counts` (``episode/tool_calls``,
        ``episode/tool_failures``, ``episode/parse_failures``: means per rollout), and means over ended
        episodes of the env's outcome: ``episode/success`` (within the success radius of the goal at the end),
        ``episode/route_completion`` (``routes_completed``), ``episode/collision`` (ended by a collision) and
        ``episode/time`` [s]. Empty without environments.
    """
    metrics = call_counts(environments)
    outcomes = [e.outcome for e in environments if e.done and e.outcome is not None]
    if outcomes:
        values = {"success": [float(o["success"]) for o in outcomes],
                  "route_completion": [o["routes_completed"] for o in outcomes],
                  "collision": [float(o["termination"] == "collision") for o in outcomes],
                  "time": [o["time"] for o in outcomes]}
        metrics.update({f"episode/{key}": float(np.mean(v)) for key, v in values.items()})
    return metrics


def nav_rubric_reward(environments: Sequence[NavToolEnv], log_metric: Callable | None = None,
                      completions: Sequence[Sequence[dict]] | None = None, **kwargs: Any) -> list[float]:
    """GRPO reward function for navigation: each rollout's summed rubric reward (after playing it out).

    `carla_gym.llm.tools.rubric_reward` (conversation counts, play-out) with `nav_episode_metrics` logged.

    Returns:
        One float per environment.
    """
    rewards = rubric_reward(environments, completions=completions)
    if log_metric is not None:
        for name, value in nav_episode_metrics(environments).items():
            log_metric(name, value)
    return rewards

