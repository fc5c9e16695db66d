"""The text a tool-calling model sees: one instruction, then the scene (shared by training and evaluation).

A GRPO prompt is a single user message, `INSTRUCTION`; `CarlaToolEnv.reset` appends the
scenario's scene prompt and the first per-decision description to it (TRL joins the two
strings without a separator, so the reset text starts with a blank line). The scene prompt
and the description come from `carla_gym.sim.describe` (upstream TRL example format for the
description).

Navigation scenarios (``maze_navigation``, ``free_roam*`` and the ``route_<Town>`` scenarios that
`carla_gym.llm.nav_tools.NavToolEnv` also plays) start from `NAV_INSTRUCTION` instead;
`carla_gym.llm.nav_tools.NavToolEnv.reset` appends `nav_scene_prompt` (upstream's Maze / FreeRoam
prompt, from upstream's ``server/benchmark_scenarios/maze.py`` and ``free_roam.py``, with the adapter's
own tool list) and the first observation text (`carla_gym.sim.navigation.describe.observation_text`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from carla_gym.envs.nav_scenarios import is_route_name
from carla_gym.sim.navigation.describe import scene_description
from carla_gym.sim.navigation.scenarios import NavSpec, is_nav_name

INSTRUCTION = (
    "You are the driving policy of an autonomous car. Act only through the tools. Every tool call "
    "lets a moment pass while the car drives on, and returns what the car senses then. "
    "Decide what to do, call the tool for it, and stop calling tools once your decision is made."
)
"""The user message of every episode (this project's wording; true for any ``ticks_per_action`` and play-out)."""


def reset_text(scene: str, now: str) -> str:
    """What an episode's ``reset`` appends to the user prompt (TRL adapters, web page, rollout collection).

    Args:
        scene: The scene prompt (trolley: the env's ``info["scene_prompt"]``; navigation: `nav_scene_prompt`).
        now: The first description of the episode.

    Returns:
        A blank line, the scene, ``Now:`` and the description.

    Examples:
        >>> reset_text("Scene.", "Speed: 0.0 km/h.").splitlines()
        ['', '', 'Scene.', 'Now:', 'Speed: 0.0 km/h.']
    """
    return f"\n\n{scene}\nNow:\n{now}"


def state_reset_text(scenario_data: dict) -> str:
    """`reset_text` from a server state's ``scenario_data`` (this project's server, `carla_gym.server`).

    Trolley families read the scene prompt and description of the snapshot (``scenario_data["snapshot"]``),
    navigation the ``scene_prompt`` and ``description`` keys (`carla_gym.server.navigation.nav_scenario_data`);
    right after a reset this is the text the TRL adapter's ``reset`` returns for the same episode.

    Raises:
        ValueError: ``scenario_data`` has neither (not this project's server, or one from before they were sent).
    """
    source = scenario_data["snapshot"] if "snapshot" in scenario_data else scenario_data
    if "scene_prompt" not in source or "description" not in source:
        raise ValueError("the server's state has no scene prompt and description (scenario_data keys "
                         f"{sorted(scenario_data)}): serve with this version of carla-gym (carla-gym serve)")
    return reset_text(source["scene_prompt"], source["description"])


def user_prompt() -> list[dict]:
    """The conversational prompt of one episode, before the scene is appended.

    Returns:
        ``[{"role": "user", "content": INSTRUCTION}]``.
    """
    return [{"role": "user", "content": INSTRUCTION}]


NAV_INSTRUCTION = (
    "You are the driving policy of a car that must reach a destination. Act only through the tools. Every tool "
    "call lets time pass while the car drives on, and returns what the car senses then, including where the "
    "destination is. Keep calling tools until the car has arrived; if you stop earlier, the car keeps its last "
    "controls until the episode ends."
)
"""The user message of every navigation episode (this project's wording; true with and without play-out, as
`carla_gym.llm.nav_tools` scores an unfinished episode either by playing it out or by its reward so far)."""


def nav_user_prompt() -> list[dict]:
    """The conversational prompt of one navigation episode, before the scene is appended.

    Returns:
        ``[{"role": "user", "content": NAV_INSTRUCTION}]``.
    """
    return [{"role": "user", "content": NAV_INSTRUCTION}]


def nav_scene_prompt(spec: NavSpec, tools: Sequence[Callable]) -> str:
    """Upstream's Maze / FreeRoam scene prompt with ``tools`` as its tool list.

    The text before the tool list is `carla_gym.sim.navigation.describe.scene_description` (the wire's
    ``scene_description``: family and success radius); the list names every tool the model is given, one
    ``- name(args): first docstring line`` per tool, in the order given. Upstream's maze prompt lists five
    tools, but the model is offered all of the adapter's tools in both families, so all are listed.

    Args:
        spec: The scenario.
        tools: The tool functions or bound methods (`carla_gym.llm.tools.tool_methods`).

    Returns:
        Multi-line text ending with a newline.

    Examples:
        >>> from carla_gym.sim.navigation.scenarios import resolve_nav_scenario
        >>> def observe():
        ...     \"\"\"Look again.\"\"\"
        >>> print(nav_scene_prompt(resolve_nav_scenario("maze_navigation"), [observe]), end="")
        You drive a car in a maze of city streets.
        <BLANKLINE>
        Goal: get within 5.0m of the destination.
        <BLANKLINE>
        Tools:
        - observe(): Look again.
    """
    head = scene_description(spec).partition("Tools:\n")[0]
    lines = [f"- {t.__name__}({', '.join(p for p in inspect.signature(t).parameters if p != 'self')}): "
             f"{inspect.getdoc(t).splitlines()[0]}" for t in tools]
    return head + "Tools:\n" + "\n".join(lines) + "\n"


def _is_navigation(name: str) -> bool:
    """Whether ``name`` is played by `carla_gym.llm.nav_tools.NavToolEnv`: maze, free roam or a route scenario."""
    return is_nav_name(name) or is_route_name(name)


def episode_rows(scenarios: tuple[str, ...] | list[str], size: int, seed: int) -> dict[str, list]:
    """Dataset columns for GRPO: row i plays ``scenarios[i % len]`` with seed ``seed + i``.

    All generations of a row share its scenario and seed, so a GRPO group starts from one state. A
    navigation scenario's prompt (``maze_navigation``, ``free_roam*`` or ``route_<Town>``) is `nav_user_prompt`,
    any other's `user_prompt`.

    Args:
        scenarios: Scenario names (at least one).
        size: Number of rows (>= 1).
        seed: Seed of row 0.

    Returns:
        ``{"prompt": [...], "scenario": [...], "seed": [...]}``, each of length ``size``.

    Raises:
        ValueError: No scenarios or ``size < 1``.
    """
    if not scenarios:
        raise ValueError("scenarios=[]: give at least one scenario name")
    if size < 1:
        raise ValueError(f"size={size!r}: need at least one row")
    return {
        "prompt": [nav_user_prompt() if _is_navigation(scenarios[i % len(scenarios)]) else user_prompt()
                   for i in range(size)],
        "scenario": [scenarios[i % len(scenarios)] for i in range(size)],
        "seed": [seed + i for i in range(size)],
    }
