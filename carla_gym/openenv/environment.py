"""`CarlaEnvironment`: the embedded simulator behind openenv-core's server, one per session.

Step semantics follow upstream OpenEnv CARLA: one ``step`` is one tool call followed by one
tick; ``capture_image`` returns the current frame as a base64 JPEG and neither ticks nor
counts as a step. Differences (README): steps after ``done`` are refused with an error (the
session keeps its state; upstream bug B9), ``reset`` honours ``seed``, ``episode_id``,
``scenario_name`` and ``scenario_config`` (B22), and the outcome is published in
``CarlaState.scenario_data`` (B23). Batching extension: ``metadata={"ticks": n}`` on an action
runs the tool call and then ``n`` ticks in one step (stopping when the episode ends; the
embedded backend's loop, `carla_gym.sim.decision.decide`); the
reply's reward is the last tick's raw reward, its rubric reward the sum over the ticks (the
terminal reward, or 0), and ``CarlaState.total_reward`` adds every tick's raw reward, as n
single steps would. Upstream clients never send it.

Navigation scenarios (``maze_navigation``, ``free_roam``, ``free_roam_<Map>[_v<N>][_p<M>]``) run a
`carla_gym.sim.navigation.episode.NavEpisode` instead of the trolley `World` (`carla_gym.openenv.navigation`):
all 10 action types, one ``step`` is one `NavEpisode.step` (``follow_route`` runs up to ``route_steps``
ticks; ``metadata["ticks"]`` runs a plain action for that many ticks and the reply's reward is the sum of
their raw rewards, as `NavEpisode.step` gives it), ``scenario_data`` carries ``goal_location``,
``route_length``, ``weather`` and ``outcome``, ``state().collisions`` holds one upstream record per actor the
ego touched (`add_collisions`, the trolley side's rule; ``actor_id`` as ``nearby_actors`` reports it), and
``capture_image`` renders the town's front camera.
Trolley scenarios keep refusing the navigation actions.

Generated scenarios (``trolley_generated_train``/``_test``, `carla_gym.sim.generated`) draw their layout
from the reset ``seed``; a reset without one draws a seed from the OS (`GENERATED_SEED_BOUND`) and
records it in ``scenario_data["seed"]``, so the episode can be replayed.
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
from openenv.core.env_server.interfaces import Environment
from PIL import Image

from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState, SessionClosedError, to_tool_call
from carla_gym.openenv.navigation import check_scenario, is_nav_name, nav_image, nav_observation, nav_scenario_data
from carla_gym.sim.decision import decide
from carla_gym.sim.describe import scene_prompt
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.render import render
from carla_gym.sim.rules import DONE_REASON
from carla_gym.sim.scenarios import is_generated, resolve_scenario
from carla_gym.sim.snapshot import snapshot_of
from carla_gym.sim.validate import check_number, check_seed
from carla_gym.sim.world import FIRST_WALKER_ID, WALKER_TYPE_ID, TickResult, World

GENERATED_SEED_BOUND = 2**31 - 1
"""A generated scenario reset without a seed draws one in [0, this) from the OS (the Gymnasium env's range of
backend seeds, `carla_gym.envs.trolley.CarlaTrolleyEnv.reset`)."""

MAX_TICKS_PER_STEP = 1000
"""Largest ``metadata["ticks"]`` of the batching extension (50 s of simulated time)."""

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
    ``state.collisions`` (openenv_carla.md section 4.2); ``intensity`` is the ego speed [km/h], not an
    impulse (upstream's meaning, B19). Used by the trolley side (pedestrians hit) and the navigation side
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


class CarlaEnvironment(Environment[CarlaAction, CarlaObservation, CarlaState]):
    """One isolated embedded simulator per WebSocket session.

    Args:
        scenario_name: Scenario of the first reset when the client names none.
        scenario_config: Overrides for that scenario.

    Raises:
        ValueError: Unknown default scenario or invalid overrides.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, scenario_name: str = "trolley_saves", scenario_config: dict | None = None) -> None:
        super().__init__()
        if is_generated(scenario_name):  # its layout needs a seed: check the name and overrides with seed 0
            resolve_scenario(scenario_name, scenario_config, seed=0)
        else:
            check_scenario(scenario_name, scenario_config)
        self._name = scenario_name
        self._config = dict(scenario_config or {})
        self._world: World | None = None
        self._nav: NavEpisode | None = None  # the episode of a navigation scenario (then _world is None)
        self._prompt = ""
        self._state = CarlaState(scenario_name=scenario_name)  # the episode's fixed fields
        self._tally = _Tally()
        self._closed = False

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
        if is_nav_name(name):
            return self._reset_nav(name, config, seed, episode_id)
        if seed is None and is_generated(name):  # drawn here and recorded, so the episode can be replayed
            seed = secrets.randbelow(GENERATED_SEED_BOUND)
        spec = resolve_scenario(name, config, seed)
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
        return self._observation(reward=None, rubric=None)

    def step(self, action: CarlaAction, timeout_s: float | None = None, **kwargs: Any) -> CarlaObservation:
        """Execute one tool call and one tick (or ``metadata["ticks"]`` ticks).

        Raises:
            ValueError: Invalid action values, a navigation action, a step after ``done``,
                or a bad ``ticks`` value; the session keeps its state.
            SessionClosedError: The server ended this session (see `close`).
        """
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
        ticks = batch_ticks(action)
        decision = decide(world, call, ticks, on_tick=self._record_hits)
        self._record(action.action_type, decision.raw_total, decision.distance, world.speed_kmh)
        return self._observation(reward=decision.raw_reward, rubric=decision.rubric_reward)

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
        ``extensions`` (``["ticks"]``: the batching extension is supported), ``hits`` (pedestrians
        actually hit) and ``snapshot`` (`carla_gym.sim.snapshot.Snapshot.to_wire`, which lets the
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
        and closes the connection (`carla_gym.openenv.guard`).
        """
        self._closed = True
        self._world = self._nav = None

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
        """`reset` for a navigation scenario: a new `NavEpisode` seeded with ``seed`` (None: from the OS)."""
        episode = NavEpisode(name, config, seed)  # raises before anything changes
        self._name, self._config, self._world, self._nav, self._prompt = name, config, None, episode, ""
        self._state = CarlaState(
            episode_id=episode_id, scenario_name=name, town=episode.spec.map_name, weather=episode.weather,
            scenario_data={"seed": seed, "scenario_config": config, "ignored_config": list(episode.spec.ignored)})
        self._tally = _Tally()
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
        ticks = batch_ticks(action)
        distance, hits = episode.distance_travelled, len(episode.contacts)
        result = episode.step(call, ticks)
        add_collisions(tally.collisions, tally.steps + 1, episode.contacts[hits:])
        self._record(action.action_type, result.raw_reward, episode.distance_travelled - distance,
                     episode.speed_kmh)
        return nav_observation(episode, self._name, tally.steps, result.raw_reward, result.rubric_reward)

    def _nav_state(self) -> CarlaState:
        """`state` of a navigation episode (``scenario_data``: `nav_scenario_data` plus seed and config)."""
        tally, episode = self._tally, self._nav
        data = {**copy.deepcopy(self._state.scenario_data), **nav_scenario_data(episode), "extensions": ["ticks"]}
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

