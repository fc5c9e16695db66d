"""Navigation in the comparison harness: suites of `CarlaNavigation-v0` cases, the agents that play them, records.

A *case* is one episode setting, named so that it can be a record's ``scenario``:

- ``maze_navigation``, ``free_roam[_<Map>[_v<N>][_p<M>]]``: that scenario (upstream's names; the goal is
  drawn from the env seed);
- ``route_<Town>/traffic_<T>/eval_<K>``: ``scenario="route_<Town>"``, ``scenario_config={"traffic": T,
  "route": "eval"}`` and ``reset(options={"route_index": K})``, i.e. VLM-RL's evaluation route K at T NPC
  vehicles.

Suites (`NAV_SUITES`, ``--scenario`` of ``python -m agents.compare``):

| Suite | Cases |
|---|---|
| ``nav_maze`` | ``maze_navigation`` |
| ``nav_free_roam`` | ``free_roam_Town05`` at upstream's three example densities (`FREE_ROAM_CASES`) |
| ``nav_eval_routes_0`` / ``_20`` / ``_40`` | route_Town02's 10 evaluation routes at 0 / 20 / 40 NPC vehicles |
| ``nav`` | all of the above |

Every agent plays every case with the same env seeds (`agents.records.episode_seed`) and the same end rules
(`HARNESS_SETTINGS`), whatever an SB3 run trained with: VLM-RL's evaluation ends, ``termination="vlm-rl-eval"``
(`carla_gym.sb3.nav_eval.EVAL_TERMINATION`, the rules ``train_sb3.py``'s evaluation plays by, so a trained policy
gets the same outcome on a route and seed in both: a collision, arrival, ``"success"`` past the last waypoint,
``"stopped"`` below 1 km/h for 90 s or ``"no_progress"`` with the first waypoint not passed after 10 s end an
episode, no off-track or too-fast end), the env's default ``stop_time_s`` (90 s) and ``time_limit_s`` (300 s). The
reward reported is upstream's navigation rubric (``reward_mode="rubric"``; a record's ``reward`` and the summary's
``mean_reward``), not VLM-RL's, which the outcome's ``total_reward`` keeps. Each episode is scored from
``info["outcome"]`` of its terminal step (`nav_record`), so every agent is scored by the same code. Agents
(`NAV_SCRIPTED`, ``random``, ``sb3:<run>``, ``llm:``/``vlm:``/``openai:``): the constant tool policies
``follow_route`` (the behaviour agent, ``normal``), ``follow_route_cautious``, ``follow_route_aggressive`` and
``follow_route_basic`` (CARLA's basic agent), the scripted baselines; ``random``, uniform tool actions; chat models
(`NavChatAgent`) call upstream's seven navigation tools (`carla_gym.llm.nav_tools.NavToolEnv`, the adapter
``train_grpo.py`` trains with), each tool one `CarlaNavigationEnv.step_call` of the same env, episode and seed, the
episode played out with the controls held when the model stops calling tools. A chat record's ``actions`` are its
env steps (`carla_gym.llm.nav_tools.call_record`, play-out included, ``action_mode`` ``"calls"``: what a replay
needs), ``decisions`` the tool calls that ran a step, and ``tool_calls`` every call the model made.
"""

from __future__ import annotations

import contextlib
import re
import time
import zlib
from typing import Any

import gymnasium as gym
import numpy as np

import carla_gym  # noqa: F401  (registers CarlaNavigation-v0)
from agents.records import episode_seed
from agents.specs import NAV_SCRIPTED_KINDS
from carla_gym.envs.nav_scenarios import ROUTE_SCENARIOS, TRAFFIC_LEVELS
from carla_gym.envs.navigation import NAV_TOOL_ACTIONS
from carla_gym.sb3.nav_eval import EVAL_TERMINATION
from carla_gym.sim.navigation import route_task as R
from carla_gym.sim.navigation.scenarios import is_nav_name, resolve_nav_scenario

ENV_ID = "CarlaNavigation-v0"

FREE_ROAM_CASES = ("free_roam_Town05", "free_roam_Town05_v5_p3", "free_roam_Town05_v15_p10")
"""Free roam in Town05 at upstream's example densities free-roam-default (0 vehicles, 0 walkers), -traffic
(5, 3) and -heavy (15, 10) (`carla_gym.sim.navigation.scenarios.FREE_ROAM_PRESETS`)."""

EVAL_TOWN = "Town02"
"""Town of the evaluation-route suites (VLM-RL evaluates on Town02, its ``eval.py``)."""


def route_case(town: str, traffic: int, route_index: int) -> str:
    """The case name of evaluation route ``route_index`` of ``route_<town>`` at ``traffic`` NPC vehicles.

    >>> route_case("Town02", 20, 3)
    'route_Town02/traffic_20/eval_3'
    """
    return f"route_{town}/traffic_{traffic}/eval_{route_index}"


NAV_SUITES: dict[str, tuple[str, ...]] = {
    "nav_maze": ("maze_navigation",),
    "nav_free_roam": FREE_ROAM_CASES,
    **{f"nav_eval_routes_{t}": tuple(route_case(EVAL_TOWN, t, k) for k in range(len(R.EVAL_ROUTES)))
       for t in TRAFFIC_LEVELS},
}
NAV_SUITES["nav"] = tuple(case for cases in list(NAV_SUITES.values()) for case in cases)
"""Suite name -> case names (module docstring)."""

_ROUTE_CASE = re.compile(r"(route_[A-Za-z0-9]+)/traffic_([0-9]+)/eval_([0-9]+)")

NAV_SCRIPTED = {name: NAV_TOOL_ACTIONS.index(name) for name in NAV_SCRIPTED_KINDS}
"""The scripted baselines: each calls one follow tool (the behaviour agent at each behaviour, or the basic
agent) on every decision. Name -> `carla_gym.envs.navigation.NAV_TOOL_ACTIONS` index."""

NAV_DEFAULT_AGENTS = [*NAV_SCRIPTED, "random"]
"""``--agents`` of a navigation comparison when none are given."""

NAV_KINDS = (*NAV_SCRIPTED, "random", "sb3", "llm", "vlm", "openai")
"""Agent kinds that play navigation cases."""

CALLS = "calls"
"""``action_mode`` of a chat agent's record: its ``actions`` are `carla_gym.llm.nav_tools.call_record` steps."""


def parse_case(case: str) -> tuple[str, dict | None, dict | None]:
    """The env settings of a case: ``(scenario, scenario_config, reset options)``.

    >>> parse_case("route_Town02/traffic_40/eval_7")
    ('route_Town02', {'traffic': 40, 'route': 'eval'}, {'route_index': 7})
    >>> parse_case("free_roam_Town05_v5_p3")
    ('free_roam_Town05_v5_p3', None, None)

    Raises:
        ValueError: Not a case name (the message gives the forms and the suites).
    """
    match = _ROUTE_CASE.fullmatch(case) if isinstance(case, str) else None
    if match:
        scenario, traffic, index = match.group(1), int(match.group(2)), int(match.group(3))
        if scenario in ROUTE_SCENARIOS and traffic in TRAFFIC_LEVELS and index < len(R.EVAL_ROUTES):
            return scenario, {"traffic": traffic, "route": "eval"}, {"route_index": index}
    elif is_nav_name(case):
        try:
            resolve_nav_scenario(case)
        except ValueError as exc:
            raise ValueError(f"navigation case {case!r}: {exc}") from None
        return case, None, None
    raise ValueError(f"navigation case {case!r}: write maze_navigation, free_roam[_<Map>[_v<N>][_p<M>]] or "
                     f"route_<Town>/traffic_<T>/eval_<K> with <Town> in {[s[6:] for s in ROUTE_SCENARIOS]}, "
                     f"T in {list(TRAFFIC_LEVELS)}, K in 0..{len(R.EVAL_ROUTES) - 1}; or a suite: "
                     f"{sorted(NAV_SUITES)}")


def is_nav(name: str) -> bool:
    """Whether ``name`` is a navigation suite or case (not a trolley scenario)."""
    return name in NAV_SUITES or is_nav_name(name) or name.startswith("route_")


def resolve_nav(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Expand navigation suites in ``names`` into cases (order kept, duplicates dropped).

    Raises:
        ValueError: A name that is neither a suite nor a case (`parse_case`), or no names.
    """
    out: list[str] = []
    for name in names:
        for case in NAV_SUITES.get(name, (name,)):
            parse_case(case)
            if case not in out:
                out.append(case)
    if not out:
        raise ValueError("no navigation cases given")
    return tuple(out)


def case_group(case: str) -> str:
    """The summary row a case counts in: route cases pool their evaluation routes, other cases stand alone.

    >>> case_group("route_Town02/traffic_20/eval_3"), case_group("maze_navigation")
    ('route_Town02/traffic_20', 'maze_navigation')
    """
    return case.rsplit("/eval_", 1)[0] if _ROUTE_CASE.fullmatch(case) else case


def action_name(action) -> str | list[float]:
    """A JSON-able name of a `CarlaNavigation-v0` action: the tool name, or ``[steer, pedal]`` for control.

    (A chat agent's actions are `carla_gym.llm.nav_tools.call_record` dicts instead.)
    """
    if np.ndim(action) == 0:
        return NAV_TOOL_ACTIONS[int(action)]
    return [float(v) for v in np.asarray(action).ravel()]


class ConstantTool:
    """A scripted baseline: the same tool action on every decision.

    Args:
        index: A `carla_gym.envs.navigation.NAV_TOOL_ACTIONS` index.
    """

    def __init__(self, index: int) -> None:
        self.index = int(index)

    def act(self, observation, info: dict) -> int:
        """The tool index."""
        return self.index


NAV_OUTCOME_KEYS = ("success", "routes_completed", "termination", "collisions", "collision_speed", "CPS", "CPM",
                    "speed_mean", "total_distance", "total_reward", "time", "episode_length")
"""Keys of the env's ``info["outcome"]`` a navigation record copies (`carla_gym.envs.navigation`)."""

NAV_RECORD_FIELDS = ("agent", "scenario", "seed", "episode", "group", "reward", *NAV_OUTCOME_KEYS, "decisions",
                     "actions", "tool_calls", "tool_failures", "parse_failures", "action_mode", "ticks_per_action",
                     "steer_smoothing", "wall_time_s")
"""Fields of every navigation record (`nav_record`)."""


def _plain(value):
    """``value`` with numpy scalars as Python ones (JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value.item() if isinstance(value, np.generic) else value


def nav_record(agent: str, case: str, seed: int, episode: int, outcome: dict, reward: float, actions: list,
               env: dict, wall_time_s: float, tool_calls: list[str] = (), tool_failures: int = 0,
               parse_failures: int = 0, decisions: int | None = None) -> dict[str, Any]:
    """A navigation episode record (`NAV_RECORD_FIELDS`) from the terminal step's ``info["outcome"]``.

    Args:
        agent: Agent label.
        case: Case name (the record's ``scenario``).
        seed: Comparison seed.
        episode: Episode index under ``seed``.
        outcome: ``info["outcome"]`` of the terminal step.
        reward: The episode's summed env reward (upstream's rubric).
        actions: Action names (`action_name`), one per env step (chat agents: `carla_gym.llm.nav_tools.call_record`
            dicts, play-out included).
        env: The env's ``action_mode`` (chat agents: `CALLS`), ``ticks_per_action`` and ``steer_smoothing`` (what
            a replay needs).
        wall_time_s: Wall time of the episode [s].
        tool_calls: Names of the tool calls run (chat agents).
        tool_failures: Tool calls that failed.
        parse_failures: Turns whose tool-call text did not parse.
        decisions: The agent's decisions; None: ``len(actions)`` (chat agents: the tool calls that ran a step).
    """
    return _plain({
        "agent": agent, "scenario": case, "seed": seed, "episode": episode, "group": case_group(case),
        "reward": float(reward), **{key: outcome[key] for key in NAV_OUTCOME_KEYS},
        "decisions": len(actions) if decisions is None else decisions,
        "actions": list(actions), "tool_calls": list(tool_calls), "tool_failures": int(tool_failures),
        "parse_failures": int(parse_failures), "action_mode": env["action_mode"],
        "ticks_per_action": int(env["ticks_per_action"]), "steer_smoothing": float(env["steer_smoothing"]),
        "wall_time_s": float(wall_time_s)})


HARNESS_SETTINGS = ("scenario", "scenario_config", "reward_mode", "termination", "stop_time_s", "time_limit_s")
"""`CarlaNavigation-v0` settings the harness decides for every agent (`make_case_env`): the case's scenario and
config, the rubric reward, `carla_gym.sb3.nav_eval.EVAL_TERMINATION` and the env's default stop time and time
limit. An agent's own values of them (an SB3 run's training settings) are dropped."""


def make_case_env(case: str, env_kwargs: dict | None = None, **extra) -> tuple[gym.Env, dict | None]:
    """A `CarlaNavigation-v0` env for ``case`` with the agent's ``env_kwargs``, and the case's reset options.

    The harness decides `HARNESS_SETTINGS` (their values in ``env_kwargs`` and ``extra`` are dropped): the case
    decides ``scenario`` and ``scenario_config``, the reward is upstream's rubric and the end rules are
    ``termination="vlm-rl-eval"`` with the env's default ``stop_time_s`` and ``time_limit_s``.
    """
    scenario, config, options = parse_case(case)
    kwargs = {k: v for k, v in {**(env_kwargs or {}), **extra}.items() if k not in HARNESS_SETTINGS}
    kwargs.update(scenario=scenario, scenario_config=config, reward_mode="rubric", termination=EVAL_TERMINATION)
    return gym.make(ENV_ID, **kwargs), options


class NavGymAgent:
    """A policy ``act(observation, info) -> action`` playing navigation cases in `CarlaNavigation-v0`.

    Args:
        name: Label in the results.
        policy: ``act(observation, info) -> action``; ``reset(seed, case)`` is called first if present.
        env_kwargs: `gym.make` keyword arguments (action and observation mode, ticks per action, ...);
            `HARNESS_SETTINGS` are the harness's (`make_case_env`).
    """

    def __init__(self, name: str, policy, env_kwargs: dict | None = None) -> None:
        self.name, self.policy = name, policy
        self.env_kwargs = {k: v for k, v in (env_kwargs or {}).items() if k not in HARNESS_SETTINGS}
        self._envs: dict[str, tuple[gym.Env, dict | None]] = {}

    def play(self, case: str, seed: int, episode: int) -> dict[str, Any]:
        """Play one episode of ``case`` with env seed ``episode_seed(seed, episode)``; returns its record."""
        group = case_group(case)
        if group not in self._envs:  # one env per group: a route group's cases differ only in the reset option
            self._envs[group] = make_case_env(case, self.env_kwargs)
        env, _ = self._envs[group]
        options = parse_case(case)[2]
        start = time.perf_counter()
        env_seed = episode_seed(seed, episode)
        obs, info = env.reset(seed=env_seed, options=options)
        if hasattr(self.policy, "reset"):
            self.policy.reset(env_seed, case)
        total, actions, done = 0.0, [], False
        while not done:
            action = self.policy.act(obs, info)
            actions.append(action_name(action))
            obs, reward, terminated, truncated, info = env.step(action)
            total += reward
            done = terminated or truncated
        base = env.unwrapped
        settings = {"action_mode": base.action_mode, "ticks_per_action": base.ticks_per_action,
                    "steer_smoothing": base.steer_smoothing}
        return nav_record(self.name, case, seed, episode, info["outcome"], total, actions, settings,
                          time.perf_counter() - start)

    def close(self) -> None:
        """Close the environments (a later `play` makes new ones)."""
        for env, _ in self._envs.values():
            env.close()
        self._envs.clear()


class NavRandom:
    """Uniformly random tool actions, seeded by the episode's env seed and the case (call `reset` first)."""

    def __init__(self) -> None:
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int, case: str) -> None:
        """Restart the random stream for an episode: independent across cases and seeds."""
        self._rng = np.random.default_rng([seed, zlib.crc32(case.encode())])

    def act(self, observation, info: dict) -> int:
        """A tool index in [0, 8)."""
        return int(self._rng.integers(len(NAV_TOOL_ACTIONS)))


class NavChatAgent:
    """A tool-calling chat model playing navigation cases through `carla_gym.llm.nav_tools.NavToolEnv`.

    The episode of a case and seed is the Gymnasium agents' (the adapter resets the same `CarlaNavigation-v0`
    with the same seed, ``scenario_config`` and ``route_index``, rubric reward, the harness's end rules:
    ``termination=EVAL_TERMINATION``, default stop time and time limit), played by
    `carla_gym.llm.rollout.play_episode` (the same prompt, tools and play-out as ``train_grpo.py``) and scored
    from the env's terminal ``info["outcome"]`` by `nav_record`.

    Args:
        name: Label in the results.
        chat: The chat policy (`carla_gym.llm.rollout.TransformersChat`, `agents.llm.OpenAIChat`).
        vision: Tools return camera images (VLMs).
        max_tool_calling_iterations: Turns whose tool calls run (as in training).
        ticks_per_action: Ticks per driving tool call (a train_grpo.py run's own setting).
        image_size: Width [px] of tool images.
        view: Camera of tool images (`carla_gym.llm.nav_tools.NAV_VIEWS`).
    """

    def __init__(self, name: str, chat, vision: bool = False, max_tool_calling_iterations: int = 10,
                 ticks_per_action: int = 10, image_size: int = 256, view: str = "front") -> None:
        from carla_gym.llm.nav_tools import NavToolEnv

        self.name, self.chat, self.max_tool_calling_iterations = name, chat, max_tool_calling_iterations
        # play_out=True always: every agent's episode runs to the env's end, as a Gymnasium episode does
        self._resources = contextlib.ExitStack()  # NavToolEnv closes as a context manager (no close tool)
        self._env = self._resources.enter_context(NavToolEnv(
            vision=vision, ticks_per_action=ticks_per_action, image_size=image_size, view=view,
            termination=EVAL_TERMINATION))

    def play(self, case: str, seed: int, episode: int) -> dict[str, Any]:
        """Play one episode of ``case`` with env seed ``episode_seed(seed, episode)``; returns its record."""
        from carla_gym.llm.rollout import play_episode

        scenario, config, options = parse_case(case)
        row = {"scenario_config": config, "route_index": (options or {}).get("route_index")}
        result = play_episode(self.chat, self._env, scenario, episode_seed(seed, episode),
                              self.max_tool_calling_iterations, row=row)
        env = self._env
        settings = {"action_mode": CALLS, "ticks_per_action": env.env.ticks_per_action, "steer_smoothing": 0.0}
        record = nav_record(self.name, case, seed, episode, env.outcome, result["reward"], env.steps, settings,
                            result["wall_time_s"], result["tool_calls"], result["tool_failures"],
                            result["parse_failures"], decisions=len(env.actions))
        record["turns"] = result["turns"]
        return record

    def close(self) -> None:
        """Close the environment."""
        self._resources.close()


def build_nav_agent(spec, max_new_tokens: int = 256, max_tool_calling_iterations: int = 10):
    """The navigation agent of an `agents.specs.AgentSpec` (scripted, random, sb3, llm, vlm or openai).

    Args:
        spec: The parsed spec.
        max_new_tokens: Token budget of one chat turn (chat agents).
        max_tool_calling_iterations: Turns whose tool calls run (chat agents).

    Raises:
        ValueError: A kind that does not play navigation (names the kinds that do), or an SB3 run of another env.
    """
    tools = {"action_mode": "tools", "observation_mode": "state"}
    if spec.kind in NAV_SCRIPTED:
        return NavGymAgent(spec.label, ConstantTool(NAV_SCRIPTED[spec.kind]), tools)
    if spec.kind == "random":
        return NavGymAgent(spec.label, NavRandom(), tools)
    if spec.kind == "sb3":
        from agents.sb3 import SB3Policy

        policy = SB3Policy(spec.argument)
        if policy.env_id != ENV_ID:
            raise ValueError(f"agent {spec.label!r}: {spec.argument} was trained on {policy.env_id}; navigation "
                             f"cases need a train_sb3.py --env {ENV_ID} run")
        return NavGymAgent(spec.label, policy, policy.env_kwargs)
    if spec.kind == "openai":
        from agents.llm import OpenAIChat

        model, _, url = spec.argument.partition("@")
        chat, settings = OpenAIChat(model, url, max_tokens=max_new_tokens), {"vision": False}
    elif spec.kind in ("llm", "vlm"):
        from agents.llm import load_local_chat

        chat, settings = load_local_chat(spec.argument, vision=True if spec.kind == "vlm" else None,
                                         max_new_tokens=max_new_tokens)
        settings = {**settings, **_nav_run_view(spec.argument)}
    else:
        raise ValueError(f"agent {spec.label!r}: {spec.kind} does not play navigation; navigation agents: "
                         f"{', '.join(NAV_KINDS)} (sb3:<run dir of train_sb3.py --env {ENV_ID}>)")
    return NavChatAgent(spec.label, chat, max_tool_calling_iterations=max_tool_calling_iterations, **settings)


def _nav_run_view(model: str) -> dict[str, str]:
    """``{"view": ...}`` of a navigation ``train_grpo.py`` run (its ``--nav-view``), else nothing."""
    import json
    from pathlib import Path

    config = Path(model) / "config.json"
    if not config.is_file():
        return {}
    view = json.loads(config.read_text()).get("args", {}).get("nav_view")
    return {"view": view} if view else {}
