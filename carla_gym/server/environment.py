"""`CarlaEnvironment`: the embedded simulator behind openenv-core's server, one per session.

Step semantics follow upstream OpenEnv CARLA: one ``step`` is one tool call followed by one tick;
``capture_image`` returns the current frame as a base64 JPEG and neither ticks nor counts as a step.
Differences from upstream's server
(https://github.com/meta-pytorch/OpenEnv/blob/main/envs/carla_env/server/carla_environment.py): steps after
``done`` are refused with an error (the session keeps its state; upstream keeps paying rewards after done),
``reset`` honours ``seed``, ``episode_id``, ``scenario_name`` and ``scenario_config`` (upstream drops ``seed``
and ``episode_id``), and the outcome is published in ``CarlaState.scenario_data`` (upstream never sends it to
the client). Batching extension: ``metadata={"ticks": n}`` on an action runs the tool call and then ``n``
ticks in one step (stopping when the episode ends; the embedded backend's loop,
`carla_gym.sim.decision.decide`); the reply's reward is the last tick's raw reward, its rubric reward the sum
over the ticks (the terminal reward, or 0), and ``CarlaState.total_reward`` adds every tick's raw reward, as n
single steps would. Upstream clients never send it.

Navigation scenarios (``maze_navigation``, ``free_roam``, ``free_roam_<Map>[_v<N>][_p<M>]``) run a
`carla_gym.sim.navigation.episode.NavEpisode` instead of the trolley `World` (`carla_gym.server.navigation`):
all 10 action types, one ``step`` is one `NavEpisode.step` (``follow_route`` runs up to ``route_steps``
ticks; ``metadata["ticks"]`` runs a plain action for that many ticks and the reply's reward is the sum of
their raw rewards, as `NavEpisode.step` gives it), ``scenario_data`` carries ``goal_location``,
``route_length``, ``weather``, ``outcome`` and the TRL adapter's ``scene_prompt`` and current ``description``
(`carla_gym.server.navigation.nav_scenario_data`), ``state().collisions`` holds one upstream record per actor the
ego touched (`add_collisions`, the trolley side's rule; ``actor_id`` as ``nearby_actors`` reports it), and
``capture_image`` renders the town's front camera.
Trolley scenarios keep refusing the navigation actions.

Generated scenarios (``trolley_generated_train``/``_test``, `carla_gym.sim.generated`) and the navigation
families draw their episode from the reset ``seed``; a reset without one draws a seed from the OS
(`GENERATED_SEED_BOUND`) and records it in ``scenario_data["seed"]``, so the episode can be replayed. The
seed is the backend's: the Gymnasium envs and the TRL adapters draw the backend seed of an episode from their
own ``reset(seed=s)``, so seed s there and seed s here are different episodes (the fixed trolley scenarios
aside, which take no seed).

MCP: the environment is an openenv-core ``MCPEnvironment`` with its own FastMCP server, offering the TRL
adapters' tools of the current family (`carla_gym.server.mcp`: routes, reply format, errors); `call_tool`
runs one, `frame` renders the current episode for the web page. Rubrics: ``self.rubric`` is the family's
openenv-core rubric (`carla_gym.server.rubrics`), chosen and reset at every reset; every step's
``rubric_reward`` is its output.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import dataclasses
import io
import math
import secrets
import uuid
from typing import Any

import numpy as np
from fastmcp import FastMCP
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import (
    CallToolAction,
    CallToolObservation,
    ListToolsAction,
    ListToolsObservation,
    Tool,
    ToolError,
    ToolErrorType,
)
from openenv.core.env_server.types import EnvironmentMetadata
from PIL import Image

from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState, SessionClosedError, to_tool_call
from carla_gym.server import mcp
from carla_gym.server.navigation import is_nav_name, nav_image, nav_observation, nav_prompt, nav_scenario_data
from carla_gym.server.rubrics import CarlaNavigationRubric, rubric_for
from carla_gym.sim.decision import decide
from carla_gym.sim.describe import scene_prompt
from carla_gym.sim.navigation.describe import observation_text
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.navigation.scenarios import resolve_any_scenario
from carla_gym.sim.render import render
from carla_gym.sim.rules import DONE_REASON
from carla_gym.sim.scenarios import is_generated
from carla_gym.sim.snapshot import snapshot_of
from carla_gym.sim.validate import check_number, check_seed
from carla_gym.sim.world import FIRST_WALKER_ID, WALKER_TYPE_ID, TickResult, World

GENERATED_SEED_BOUND = 2**31 - 1
"""A generated scenario reset without a seed draws one in [0, this) from the OS (the Gymnasium env's range of
backend seeds, `carla_gym.envs.trolley.CarlaTrolleyEnv.reset`)."""

MAX_TICKS_PER_STEP = 1000
"""Largest ``metadata["ticks"]`` of the batching extension (50 s of simulated time)."""

FRAME_VIEWS = ("front", "birdeye")
"""Views of `CarlaEnvironment.frame`: the ego's front camera and the bird's-eye view."""

_TOOL_ERRORS = {mcp.UNKNOWN_TOOL: ToolErrorType.TOOL_NOT_FOUND, mcp.INVALID_ARGUMENTS: ToolErrorType.INVALID_ARGS,
                mcp.EPISODE_OVER: ToolErrorType.EXECUTION_ERROR}
"""openenv-core's ``ToolError`` type of each `carla_gym.server.mcp.ToolCallError` kind (the ``/ws`` step path)."""

INLINE_TICKS = 50
"""Batched steps of at most this many ticks run on the server's event loop (well under 2 ms);
longer ones and ``capture_image`` (up to ~100 ms at 2048x2048) run on a worker thread so other
sessions are not held up."""


def batch_ticks(action: CarlaAction) -> int:
    """Ticks a step runs: ``metadata["ticks"]`` of the batching extension, 1 without it (every family).

    Raises:
        ValueError: Not an integer in [1, `MAX_TICKS_PER_STEP`]; the message names ``metadata['ticks']``.
    """
    return check_number("metadata['ticks']", action.metadata.get("ticks", 1), 1, MAX_TICKS_PER_STEP, integer=True)


def _utf8(text: str) -> bool:
    """Whether ``text`` can be sent as UTF-8 (lone surrogates cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@dataclasses.dataclass
class _Tally:
    """Running bookkeeping of an episode.

    Kept in plain Python (a pydantic model validates every assignment) and copied into
    `CarlaState` when the state is read.
    """

    steps: int = 0
    tool_call_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    total_reward: float = 0.0
    total_distance: float = 0.0
    max_speed: float = 0.0
    average_speed: float = 0.0
    collisions: list[dict] = dataclasses.field(default_factory=list)


def add_collisions(collisions: list[dict], frame: int, contacts) -> None:
    """Append upstream's collision record for each actor in ``contacts`` not recorded yet: the one definition.

    Upstream's real mode copies each new entry of the collision sensor's ``{actor_id: type_id}`` dict into
    ``state.collisions`` (upstream's ``server/carla_environment.py``); ``intensity`` is the ego speed
    [km/h], not an impulse (upstream's meaning). Used by the trolley side (pedestrians hit) and the navigation side
    (`carla_gym.sim.navigation.episode.NavEpisode.contacts`).

    Args:
        collisions: The episode's records, extended in place.
        frame: ``step_count`` of the step the contact happened in (upstream's ``frame``).
        contacts: Iterable of ``(actor_id, type_id, speed_kmh)``.
    """
    known = {c["actor_id"] for c in collisions}
    for actor_id, type_id, speed_kmh in contacts:
        if int(actor_id) not in known:
            known.add(int(actor_id))
            collisions.append({"frame": int(frame), "actor_id": int(actor_id), "actor_type": str(type_id),
                               "intensity": float(speed_kmh)})


def environment_metadata() -> EnvironmentMetadata:
    """The environment's name (``carla_env``, upstream's), description and version (this package's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package_version = version("openenv-carla-gym")
    except PackageNotFoundError:  # a source tree that is not installed
        package_version = "0.0.0"
    return EnvironmentMetadata(
        name="carla_env",
        description="OpenEnv CARLA on an embedded simulator: trolley-problem scenarios and town navigation, "
                    "driven through upstream's CarlaAction or the MCP tools observe, emergency_stop, "
                    "lane_change (and the navigation tools)",
        version=package_version, author="openenv-carla-gym")


class CarlaEnvironment(MCPEnvironment):
    """One isolated embedded simulator per session (WebSocket ``/ws``, MCP ``/mcp`` or a web page visitor).

    Its MCP tools are the TRL adapters' tools of the current scenario family (`carla_gym.server.mcp`).

    Args:
        scenario_name: Scenario of the first reset when the client names none.
        scenario_config: Overrides for that scenario.

    Raises:
        ValueError: Unknown default scenario or invalid overrides.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, scenario_name: str = "trolley_saves", scenario_config: dict | None = None) -> None:
        super().__init__(FastMCP("carla_env"))
        resolve_any_scenario(scenario_name, scenario_config)
        self._name = scenario_name
        self._config = dict(scenario_config or {})
        self._world: World | None = None
        self._nav: NavEpisode | None = None  # the episode of a navigation scenario (then _world is None)
        self._prompt = ""
        self._state = CarlaState(scenario_name=scenario_name)  # the episode's fixed fields
        self._tally = _Tally()
        self._closed = False
        self._tool_family: bool | None = None  # whether the registered MCP tools are the navigation ones
        self._install_tools(is_nav_name(scenario_name))
        self.rubric = rubric_for(is_nav_name(scenario_name))
        self._call_lock: asyncio.Lock | None = None  # serialises the MCP calls of this session
        self._route: tuple | None = None  # the navigation route ahead `frame` drew last, with its key

    # -- OpenEnv API ---------------------------------------------------------------------------
    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        scenario_name: str | None = None,
        scenario_config: dict | None = None,
        **kwargs: Any,
    ) -> CarlaObservation:
        """Start an episode.

        A new ``scenario_name`` starts from that scenario's defaults plus ``scenario_config``;
        a ``scenario_config`` alone is merged into the current overrides, which persist into
        later resets (upstream semantics).

        Raises:
            ValueError: Unknown scenario, invalid overrides or unknown keyword arguments; the
                session keeps its previous scenario and episode.
            SessionClosedError: The server ended this session (see `close`).
        """
        self._check_open()
        if kwargs:
            raise ValueError(f"unknown reset arguments {sorted(kwargs)}; valid: seed, episode_id, scenario_name, "
                             "scenario_config")
        seed = check_seed(seed)
        if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255
                                       or not _utf8(episode_id)):
            raise ValueError(f"episode_id={episode_id!r}: must be a UTF-8 string of at most 255 characters")
        if scenario_config is not None and not isinstance(scenario_config, dict):
            raise ValueError(f"scenario_config must be an object, got {scenario_config!r}")
        if scenario_name is not None and scenario_name != self._name:
            name, config = scenario_name, dict(scenario_config or {})
        else:
            name, config = self._name, {**self._config, **(scenario_config or {})}
        episode_id = episode_id if episode_id is not None else str(uuid.uuid4())
        if seed is None and (is_generated(name) or is_nav_name(name)):  # drawn and recorded: replayable
            seed = secrets.randbelow(GENERATED_SEED_BOUND)
        if is_nav_name(name):
            return self._reset_nav(name, config, seed, episode_id)
        spec = resolve_any_scenario(name, config, seed)
        self._name, self._config = name, config
        self._world, self._nav = World(spec), None
        self._prompt = scene_prompt(spec)
        self._state = CarlaState(
            episode_id=episode_id,
            scenario_name=name,
            weather=spec.weather,
            scenario_data={"seed": seed, "scenario_config": config, "ignored_config": list(spec.ignored)},
        )
        self._tally = _Tally()
        self._start_family(navigation=False)
        return self._observation(reward=None, rubric=None)

    def step(self, action: CarlaAction | CallToolAction | ListToolsAction, timeout_s: float | None = None,
             **kwargs: Any) -> CarlaObservation | CallToolObservation | ListToolsObservation:
        """Execute one tool call and one tick (or ``metadata["ticks"]`` ticks), or one MCP action.

        openenv-core's ``CallToolAction`` runs `call_tool` and answers a ``CallToolObservation`` whose
        ``reward`` and ``done`` are the tool's (its ``result`` is `carla_gym.server.mcp.ToolReply.result`;
        a refused call sets ``error`` instead); ``ListToolsAction`` lists the current family's tools.

        Raises:
            ValueError: Invalid action values, a navigation action, a step after ``done``,
                or a bad ``ticks`` value; the session keeps its state.
            SessionClosedError: The server ended this session (see `close`).
        """
        self._check_open()
        if isinstance(action, ListToolsAction | CallToolAction):
            return self._mcp_step(action)
        return self._step_impl(action)

    def _step_impl(self, action: CarlaAction, timeout_s: float | None = None, **kwargs: Any) -> CarlaObservation:
        """`step` of a `CarlaAction` (openenv-core's hook for non-MCP actions)."""
        self._check_open()
        if self._world is None and self._nav is None:
            self.reset()
        if self._nav is not None:
            return self._step_nav(action)
        world = self._world
        call = to_tool_call(action)
        if call.action_type == "capture_image":  # reads the scene only: allowed after done too
            obs = self._observation(reward=None, rubric=None)
            obs.camera_image = self.capture_image()
            return obs
        if world.done:
            raise ValueError(f"the episode of {self._name!r} is done after {world.tick_count} ticks; send reset "
                             "before stepping again (no rewards after done)")
        return self._trolley_step(call, batch_ticks(action), action)

    # -- MCP -----------------------------------------------------------------------------------
    def tool_names(self) -> list[str]:
        """The MCP tools of the session's current family, in the TRL adapter's order.

        Trolley families: ``observe``, ``emergency_stop``, ``lane_change``; navigation: ``observe``,
        ``control_vehicle``, ``emergency_stop``, ``lane_change``, ``init_navigation_agent``,
        ``set_destination``, ``follow_route`` (`carla_gym.server.mcp.tool_definitions`).
        """
        return [d.name for d in mcp.tool_definitions(mcp.adapter_class(self._navigation))]

    def call_tool(self, name: str, arguments: dict | None = None) -> mcp.ToolReply:
        """Run one MCP tool on the current episode, exactly as the TRL adapter's tool call runs.

        A session with no episode yet starts the server's default scenario first (as `step` does).

        Args:
            name: One of `tool_names`.
            arguments: The tool's arguments by name (None: none).

        Returns:
            The `carla_gym.server.mcp.ToolReply`: the adapter's text, the step's raw reward, the rubric
            reward and whether the episode ended.

        Raises:
            carla_gym.server.mcp.ToolCallError: (a ValueError) an unknown tool (naming the valid ones),
                arguments the adapter refuses (its message), or a call after the episode ended; nothing
                changes.
            SessionClosedError: The server ended this session.
        """
        self._check_open()
        if self._world is None and self._nav is None:
            self.reset()
        navigation = self._navigation
        definitions = {d.name: d for d in mcp.tool_definitions(mcp.adapter_class(navigation))}
        if name not in definitions:
            raise mcp.ToolCallError(mcp.UNKNOWN_TOOL, f"unknown tool {name!r}; the tools of {self._name!r} are "
                                    f"{list(definitions)}")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
            raise mcp.ToolCallError(mcp.INVALID_ARGUMENTS, f"arguments={arguments!r}: must be an object of "
                                    "argument names to values")
        if (self._nav.done if navigation else self._world.done):
            raise mcp.ToolCallError(mcp.EPISODE_OVER, f"the episode of {self._name!r} is over after "
                                    f"{self._tally.steps} steps; start another with a reset (over /ws), or "
                                    "close this session and open a new one (HTTP /mcp: openenv/session/create)")
        return mcp.run_tool(self, definitions, navigation, name, arguments)

    async def call_tool_async(self, name: str, arguments: dict | None = None) -> mcp.ToolReply:
        """`call_tool` for the server's event loop: one call of a session at a time; slow calls on a thread.

        Calls of one session wait for each other (HTTP ``/mcp`` requests of one ``session_id`` may
        overlap). A trolley call runs inline, as `step_async` runs a step; a navigation call (a town
        with traffic, up to 200 ticks) runs on a worker thread.
        """
        if self._call_lock is None:
            self._call_lock = asyncio.Lock()
        async with self._call_lock:
            if self._navigation:
                return await asyncio.to_thread(self.call_tool, name, arguments)
            return self.call_tool(name, arguments)

    def frame(self, view: str, width: int, height: int) -> np.ndarray:
        """The current episode as an image: the front camera or the bird's-eye view.

        Trolley scenarios render with `carla_gym.sim.render.render`; navigation scenarios with
        `carla_gym.sim.town.render.render_town`, the route ahead (planned from the ego to the goal, as the
        Gym env draws its route) and the goal drawn.

        Args:
            view: One of `FRAME_VIEWS`.
            width: Image width [px], >= 1.
            height: Image height [px], >= 1.

        Returns:
            (height, width, 3) uint8.

        Raises:
            ValueError: Another view, a bad size, or no episode yet (reset first).
        """
        self._check_open()
        if view not in FRAME_VIEWS:
            raise ValueError(f"view={view!r}: choose one of {list(FRAME_VIEWS)}")
        width = check_number("width", width, 1, 4096, integer=True)
        height = check_number("height", height, 1, 4096, integer=True)
        if self._world is not None:
            return render(self._world, view, width, height)
        if self._nav is None:
            raise ValueError("no episode to render yet: reset first")
        from carla_gym.sim.town.render import render_world

        episode = self._nav
        return render_world(episode.world, view=view, width=width, height=height, route=self._route_ahead(),
                            goal=np.asarray(episode.goal[:2]))

    def get_metadata(self) -> EnvironmentMetadata:
        """``GET /metadata`` (and ``GET /web/metadata``): `environment_metadata`."""
        return environment_metadata()

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          scenario_name: str | None = None, scenario_config: dict | None = None,
                          **kwargs: Any) -> CarlaObservation:
        """`reset` run inline on the server's event loop (see `step_async`).

        A navigation reset (town, traffic and route planning) runs on a worker thread instead.
        """
        if is_nav_name(scenario_name if scenario_name is not None else self._name):
            return await asyncio.to_thread(self.reset, seed, episode_id, scenario_name, scenario_config, **kwargs)
        return self.reset(seed, episode_id, scenario_name, scenario_config, **kwargs)

    async def step_async(self, action: CarlaAction, timeout_s: float | None = None,
                         **kwargs: Any) -> CarlaObservation:
        """`step` run inline on the server's event loop.

        openenv-core runs a synchronous ``step`` on a thread pool, one hop per message; a tick
        here takes microseconds, far less than the hop, so the server calls this instead and
        stays on one thread. Slow requests (``capture_image``, batches over `INLINE_TICKS`
        ticks) still go to a worker thread; a session sends one request at a time, so its
        simulator is never used by two threads at once.
        """
        if isinstance(action, ListToolsAction | CallToolAction):
            self._check_open()
            if isinstance(action, CallToolAction) and self._navigation:
                return await asyncio.to_thread(self._mcp_step, action)
            return self._mcp_step(action)
        ticks = action.metadata.get("ticks", 1)
        slow = action.action_type == "capture_image" or (isinstance(ticks, int) and ticks > INLINE_TICKS)
        if self._nav is not None:  # a town tick with traffic costs more: only single plain ticks run inline
            slow = slow or action.action_type == "follow_route" or ticks != 1
        if slow:
            return await asyncio.to_thread(self.step, action, timeout_s, **kwargs)
        return self.step(action, timeout_s, **kwargs)

    @property
    def state(self) -> CarlaState:
        """Episode bookkeeping; ``scenario_data`` holds this project's extras.

        ``scenario_data`` keys: ``seed``, ``scenario_config``, ``ignored_config`` (keys of it that
        change nothing here: `carla_gym.sim.scenarios.IGNORED_KEYS`), ``outcome`` (None until done),
        ``extensions`` (``["ticks"]``: the batching extension is supported), ``action_class`` (trolley
        families: the running classification of the episode's actions, `carla_gym.sim.rules`' names such as
        ``"NONE"``, ``"BRAKE"``, ``"SWERVE_LEFT"``: what the rubric would score if the episode ended now),
        ``hits`` (pedestrians actually hit) and ``snapshot`` (`carla_gym.sim.snapshot.Snapshot.to_wire`, which lets the
        remote Gymnasium backend build exactly the embedded backend's observations).
        """
        self._check_open()
        if self._nav is not None:
            return self._nav_state()
        if self._world is None:
            return self._state.model_copy(deep=True)
        tally, world = self._tally, self._world
        data = copy.deepcopy(self._state.scenario_data)
        data["outcome"] = world.outcome() if world.done else None
        data["extensions"] = ["ticks"]
        data["action_class"] = world.trolley_action
        data["hits"] = int(world.hit.sum())
        data["snapshot"] = snapshot_of(world, self._prompt).to_wire()
        collisions = [dict(c) for c in tally.collisions]
        return self._state.model_copy(update={
            "step_count": tally.steps, "num_turns": tally.steps, "total_tool_calls": tally.steps,
            "tool_call_counts": dict(tally.tool_call_counts), "total_reward": tally.total_reward,
            "total_distance": tally.total_distance, "simulation_time": world.time,
            "max_speed": tally.max_speed, "average_speed": tally.average_speed, "collisions": collisions,
            "collisions_count": len(collisions),
            "collision_intensity_total": sum(c["intensity"] for c in collisions),
            "scenario_data": data})

    def close(self) -> None:
        """End the session's simulator; later calls raise `SessionClosedError`.

        openenv-core reclaims idle sessions this way while their connection stays open; the
        server's guard then answers the next message with a ``SESSION_CLOSED`` error envelope
        and closes the connection (`carla_gym.server.guard`).
        """
        self._closed = True
        self._world = self._nav = None
        if self.rubric is not None:
            self.rubric.reset()  # drop the trajectory it holds
        # not openenv-core's MCPEnvironment.close: it drops the MCP server, and openenv-core would then answer a
        # reclaimed session's next MCP call with "Environment does not support MCP" instead of reaching
        # `_check_open`'s SESSION_CLOSED (the FastMCP server holds no resources of its own)

    # -- helpers -------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SessionClosedError(f"{SessionClosedError.PREFIX} (idle longer than --session-timeout); a reset "
                                     "on a new connection starts a new session")

    def capture_image(self) -> str:
        """The current front-camera frame as a base64 JPEG at the scenario's camera settings."""
        camera = self._world.spec.camera
        frame = render(self._world, "front", camera.width, camera.height)
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG", quality=camera.jpeg_quality)
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    @property
    def _navigation(self) -> bool:
        """Whether the current (or, before any reset, the default) scenario is a navigation one."""
        if self._nav is not None or self._world is not None:
            return self._nav is not None
        return is_nav_name(self._name)

    def _install_tools(self, navigation: bool) -> None:
        """Register the family's MCP tools on this session's FastMCP server (replacing the other family's)."""
        if self._tool_family is navigation:
            return
        server = self.mcp_server
        if self._tool_family is not None:
            for definition in mcp.tool_definitions(mcp.adapter_class(self._tool_family)):
                server.local_provider.remove_tool(definition.name)
        for definition in mcp.tool_definitions(mcp.adapter_class(navigation)):
            server.add_tool(mcp.CarlaTool.bound(definition, self))
        self._tool_family = navigation

    def _start_family(self, navigation: bool) -> None:
        """After a reset: the family's tools and rubric (the rubric reset for the new episode)."""
        self._install_tools(navigation)
        if self.rubric is None or isinstance(self.rubric, CarlaNavigationRubric) is not navigation:
            self.rubric = rubric_for(navigation)
        self._reset_rubric()
        self._route = None

    def _score(self, action: Any, obs: CarlaObservation) -> CarlaObservation:
        """Set the observation's ``rubric_reward`` to the rubric's output for this step."""
        obs.rubric_reward = float(self.rubric(action, obs))
        return obs

    def _trolley_step(self, call, ticks: int, action: Any) -> CarlaObservation:
        """One decision of ``ticks`` ticks on the trolley world (``action``: what the rubric records)."""
        world = self._world
        decision = decide(world, call, ticks, on_tick=self._record_hits)
        self._record(call.action_type, decision.raw_total, decision.distance, world.speed_kmh)
        return self._score(action, self._observation(reward=decision.raw_reward, rubric=None))

    def _trolley_tool(self, call, ticks: int, name: str, arguments: dict) -> mcp.ToolReply:
        """A trolley MCP tool's decision (`carla_gym.server.mcp.TrolleyHost`): the reply the adapter gives."""
        obs = self._trolley_step(call, ticks, CallToolAction(tool_name=name, arguments=arguments))
        return mcp.ToolReply.of(snapshot_of(self._world, self._prompt).description, obs)

    def _nav_tool(self, call, ticks: int | None, name: str, arguments: dict) -> mcp.ToolReply:
        """A navigation MCP tool's step (`carla_gym.server.mcp.NavHost`): the reply the adapter gives.

        ``ticks`` None (``follow_route``): the route step's own ``route_steps`` ticks.
        """
        obs = self._nav_step(call, 1 if ticks is None else ticks, CallToolAction(tool_name=name, arguments=arguments))
        return mcp.ToolReply.of(observation_text(self._nav.observation()), obs)

    def _mcp_step(self, action: CallToolAction | ListToolsAction) -> CallToolObservation | ListToolsObservation:
        """`step` of openenv-core's MCP actions (the ``/ws`` step path of ``MCPToolClient``)."""
        if isinstance(action, ListToolsAction):
            return ListToolsObservation(tools=[
                Tool(name=d.name, description=d.description, input_schema=d.parameters)
                for d in mcp.tool_definitions(mcp.adapter_class(self._navigation))])
        try:
            reply = self.call_tool(action.tool_name, action.arguments)
        except mcp.ToolCallError as exc:
            over = exc.kind == mcp.EPISODE_OVER  # a refused call changes nothing: done says whether it is over
            return CallToolObservation(tool_name=action.tool_name, error=ToolError(
                error_type=_TOOL_ERRORS[exc.kind], message=str(exc)), done=over, reward=None)
        return CallToolObservation(tool_name=action.tool_name, result=reply.result(), done=reply.done,
                                   reward=reply.reward, metadata={"rubric_reward": reply.rubric_reward})

    def _route_ahead(self) -> np.ndarray | None:
        """Waypoints from the ego to the goal of the navigation episode ((K, 2) [m]; None if unreachable).

        Planned as the Gym env plans its episode route (`carla_gym.envs.nav_scenarios.plan_episode_route`),
        from where the ego is now; kept until the episode takes another step.
        """
        from carla_gym.envs.nav_scenarios import plan_episode_route

        episode = self._nav
        key = (id(episode), episode.ticks)
        if self._route is None or self._route[0] != key:
            try:
                waypoints = plan_episode_route(episode.world.town, episode.world.ego_location, episode.goal).waypoints
            except ValueError:
                waypoints = None
            self._route = (key, waypoints)
        return self._route[1]

    def _record(self, action_type: str, raw_total: float, distance: float, speed: float) -> None:
        """Update the bookkeeping of one step (``raw_total``, ``distance``: over all its ticks; ``speed``: after it)."""
        tally = self._tally
        tally.steps += 1
        tally.tool_call_counts[action_type] = tally.tool_call_counts.get(action_type, 0) + 1
        tally.total_reward += raw_total
        tally.total_distance += distance
        tally.max_speed = max(tally.max_speed, speed)
        tally.average_speed += (speed - tally.average_speed) / tally.steps

    def _record_hits(self, tick: TickResult) -> None:
        """One collision record per pedestrian hit for the first time in ``tick`` (upstream: per new sensor entry)."""
        if not tick.new_hits:
            return
        world = self._world
        add_collisions(self._tally.collisions, self._tally.steps + 1,
                       [(FIRST_WALKER_ID + i, WALKER_TYPE_ID, world.speed_kmh) for i in np.flatnonzero(world.hit)])

    # -- navigation scenarios -----------------------------------------------------------------
    def _reset_nav(self, name: str, config: dict, seed: int | None, episode_id: str) -> CarlaObservation:
        """`reset` for a navigation scenario: a new `NavEpisode` seeded with ``seed`` (`reset` draws one for None)."""
        episode = NavEpisode(name, config, seed)  # raises before anything changes
        self._name, self._config, self._world, self._nav = name, config, None, episode
        self._prompt = nav_prompt(episode)  # the adapter's scene prompt, sent in every state
        self._state = CarlaState(
            episode_id=episode_id, scenario_name=name, town=episode.spec.map_name, weather=episode.weather,
            scenario_data={"seed": seed, "scenario_config": config, "ignored_config": list(episode.spec.ignored)})
        self._tally = _Tally()
        self._start_family(navigation=True)
        return nav_observation(episode, name, 0, None, None)

    def _step_nav(self, action: CarlaAction) -> CarlaObservation:
        """`step` for a navigation scenario: one `NavEpisode.step` (errors change nothing)."""
        episode, tally = self._nav, self._tally
        call = to_tool_call(action, navigation=True)
        if call.action_type == "capture_image":  # reads the scene only: allowed after done too
            obs = nav_observation(episode, self._name, tally.steps, None, None)
            obs.camera_image = nav_image(episode)
            return obs
        if episode.done:
            raise ValueError(f"the episode of {self._name!r} is done after {tally.steps} steps ({episode.reason}); "
                             "send reset before stepping again (no rewards after done)")
        return self._nav_step(call, batch_ticks(action), action)

    def _nav_step(self, call, ticks: int, action: Any) -> CarlaObservation:
        """One `NavEpisode.step` (``action``: what the rubric records); errors change nothing."""
        episode, tally = self._nav, self._tally
        distance, hits = episode.distance_travelled, len(episode.contacts)
        result = episode.step(call, ticks)
        add_collisions(tally.collisions, tally.steps + 1, episode.contacts[hits:])
        self._record(call.action_type, result.raw_reward, episode.distance_travelled - distance,
                     episode.speed_kmh)
        return self._score(action, nav_observation(episode, self._name, tally.steps, result.raw_reward, None))

    def _nav_state(self) -> CarlaState:
        """`state` of a navigation episode (``scenario_data``: `nav_scenario_data` plus seed and config)."""
        tally, episode = self._tally, self._nav
        data = {**copy.deepcopy(self._state.scenario_data), **nav_scenario_data(episode, self._prompt),
                "extensions": ["ticks"]}
        collisions = [dict(c) for c in tally.collisions]
        return self._state.model_copy(update={
            "step_count": tally.steps, "num_turns": tally.steps, "total_tool_calls": tally.steps,
            "tool_call_counts": dict(tally.tool_call_counts), "total_reward": tally.total_reward,
            "total_distance": tally.total_distance, "simulation_time": episode.observation()["simulation_time"],
            "max_speed": tally.max_speed, "average_speed": tally.average_speed, "collisions": collisions,
            "collisions_count": len(collisions),
            "collision_intensity_total": sum(c["intensity"] for c in collisions), "scenario_data": data})

    def _observation(self, reward: float | None, rubric: float | None) -> CarlaObservation:
        world = self._world
        return CarlaObservation(
            scene_description=self._prompt,
            speed_kmh=world.speed_kmh,
            location=(world.ego.x, world.ego.y, 0.0),
            rotation=(0.0, math.degrees(world.ego.yaw), 0.0),
            current_lane=f"lane_{world.lane}",
            nearby_actors=world.nearby_actors(),
            collision_detected=world.collided,
            collided_with=world.collided_with,
            scenario_name=self._name,
            simulation_time=world.time,
            step_number=self._tally.steps,
            done_reason=DONE_REASON if world.done else "",
            rubric_reward=rubric,
            done=world.done,
            reward=reward,
        )

