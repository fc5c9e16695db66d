"""The OpenEnv backend: `CarlaTrolleyEnv` on a remote OpenEnv CARLA server.

``gym.make("CarlaTrolley-v0", backend="openenv", base_url="http://127.0.0.1:8000")`` drives a
server through the same Gymnasium interface as the embedded backend.

* This project's server (``carla-gym serve``) publishes the full `Snapshot` in
  ``CarlaState.scenario_data["snapshot"]`` (its wire form, `Snapshot.to_wire`, read back here
  with `Snapshot.from_wire`: one definition on both ends), so observations, rewards and info
  are exactly the embedded backend's (one extra ``state`` round trip per decision).
* Another OpenEnv CARLA server (upstream's, real CARLA) sends less; the snapshot is then filled
  from the wire observation: speed, lateral position and heading from ``location`` and
  ``rotation`` (taking the starting pose as lane 0's centre), the current lane from
  ``current_lane``, actors from ``nearby_actors`` (distance only: each is put straight ahead or
  behind, lateral offset 0), collisions from the flags. Lane availability, road departure, the
  classification and the time left are unknown (reported as False, False, "NONE" and 0), and
  the outcome is what the server's ``scenario_data`` says, if anything.
* ``ticks_per_action`` uses the batching extension (``metadata={"ticks": n}``, one round trip)
  when the server lists ``"ticks"`` in ``scenario_data["extensions"]``; otherwise the tool call
  is followed by ``n - 1`` ``observe`` steps, as upstream's TRL example does.
* Images come from ``capture_image`` (JPEG, decoded and resized); only the front camera exists.
* Values cross the wire as the embedded backend sees them: ``scenario_config`` goes through
  `carla_gym.sim.validate.json_safe` (numpy numbers converted, NaN and other non-JSON values
  refused with a ValueError naming the field), and the server's refusals are ValueErrors
  (`carla_gym.openenv.client.ServerRefusedError`). Keys the server lists in
  ``scenario_data["ignored_config"]`` give the embedded backend's `ConfigIgnoredWarning`.
* A reset after the server ended the session (idle timeout, restart, closed socket) opens a new
  session by itself (`carla_gym.openenv.client`).
* The URL and the timeouts are checked when the backend is made (`carla_gym.openenv.urls`),
  before anything connects; the first reset connects, and fails at once when the connection is
  refused (`carla_gym.openenv.client`).
* Determinism: the embedded backend and this project's server are exact (bit-identical replays
  of a seed). Another OpenEnv CARLA server gives at most best-effort determinism: real CARLA's
  traffic manager and physics are not seeded end to end, and upstream's server drops ``seed``
  (it draws from Python's unseeded global ``random``), so equal seeds need not give equal episodes.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np

from carla_gym.backends.base import Backend, Snapshot, StepReport
from carla_gym.hints import needs_extra
from carla_gym.openenv.urls import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_MESSAGE_TIMEOUT_S, check_timeout, check_url
from carla_gym.sim.describe import describe
from carla_gym.sim.scenarios import warn_ignored
from carla_gym.sim.validate import check_config, check_seed
from carla_gym.sim.world import ToolCall


class OpenEnvBackend(Backend):
    """A `Backend` over one OpenEnv CARLA WebSocket session.

    Args:
        base_url: Server URL, e.g. ``"http://127.0.0.1:8000"`` (http, https, ws or wss).
        connect_timeout_s: WebSocket handshake timeout [s] (default: openenv-core's, 10 s); a
            refused connection fails at once regardless.
        message_timeout_s: Reply timeout [s] of each request (default: openenv-core's, 60 s).
        text: Whether snapshots keep the per-decision ``description`` (False drops it, as the embedded
            backend leaves it out; `carla_gym.sim.snapshot.snapshot_of`).

    Raises:
        ValueError: A malformed ``base_url`` or a timeout outside
            `carla_gym.openenv.urls.TIMEOUT_RANGE_S`, naming the value; checked before anything
            else (nothing connects until the first reset).
        carla_gym.hints.MissingExtraError: Without the ``[server]`` extra (openenv-core); an
            ``ImportError`` whose message ends with the command that installs the extra.
    """

    def __init__(self, base_url: str, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
                 message_timeout_s: float = DEFAULT_MESSAGE_TIMEOUT_S, text: bool = True) -> None:
        check_url(base_url)
        self.text = text
        connect_timeout_s = check_timeout(connect_timeout_s, "connect_timeout_s")
        message_timeout_s = check_timeout(message_timeout_s, "message_timeout_s")
        with needs_extra("server"):
            from carla_gym.openenv import CarlaAction, CarlaEnv  # noqa: F401 - CarlaEnv: checks the extra
            from carla_gym.openenv.models import from_tool_call
        self._action_cls = CarlaAction
        self._to_action = from_tool_call
        self.base_url = base_url
        self._timeouts = (connect_timeout_s, message_timeout_s)
        self._client = self._new_client()
        self._sent: tuple[str, dict] | None = None  # scenario and overrides of the last reset
        self._batching = False
        self._start = (0.0, 0.0)  # lateral position [m] and heading [rad] at reset
        self._camera = (640, 360)
        self._hits = 0
        self._tick = 0

    def _new_client(self):
        from carla_gym.openenv import CarlaEnv

        connect_timeout_s, message_timeout_s = self._timeouts
        return CarlaEnv(base_url=self.base_url, connect_timeout_s=connect_timeout_s,
                        message_timeout_s=message_timeout_s).sync()

    def __getstate__(self) -> dict:
        """Pickle the settings only: a server-side session cannot travel in a pickle.

        The unpickled backend has no session; its next `reset` opens a new one (`step` and
        `render` before that raise RuntimeError), so a restored env continues statistically, not
        bit-identically.
        """
        state = self.__dict__.copy()
        state.update(_client=None, _sent=None, _action_cls=None, _to_action=None)
        return state

    def __setstate__(self, state: dict) -> None:
        """Restore what `__getstate__` kept; the session opens at the next `reset`."""
        from carla_gym.openenv import CarlaAction
        from carla_gym.openenv.models import from_tool_call

        self.__dict__.update(state)
        self._action_cls, self._to_action = CarlaAction, from_tool_call

    def _session(self):
        if self._client is None or self._sent is None:
            raise RuntimeError(f"no episode on the OpenEnv server {self.base_url} in this session (a backend "
                               "restored from a pickle starts without one); call reset() first")
        return self._client

    def reset(self, scenario: str, seed: int | None = None, scenario_config: dict | None = None) -> Snapshot:
        """See `Backend.reset`; raises ConnectionError naming the URL when the server is unreachable.

        OpenEnv servers keep a session's ``scenario_config`` overrides across resets of the same
        scenario (upstream semantics). When an override of the last reset is missing now, the
        backend opens a new session, which starts from the scenario's defaults, so every reset
        runs exactly the configuration it was given, as the embedded backend does.

        Raises:
            ValueError: Unknown scenario, invalid ``scenario_config`` or ``seed`` (refused here
                or by the server).
            TypeError: ``scenario_config`` is not a dict.
            ConnectionError: The server cannot be reached; the message names the URL.
        """
        config = check_config(scenario_config)
        seed = check_seed(seed)
        if self._client is None:  # restored from a pickle
            self._client = self._new_client()
        elif self._sent is not None and self._sent[0] == scenario and set(self._sent[1]) - set(config):
            self._client.close()
            self._client = self._new_client()
        result = self._client.reset(scenario_name=scenario, scenario_config=config, seed=seed)
        self._sent = (scenario, config)
        obs = result.observation
        self._start = (obs.location[1], math.radians(obs.rotation[1]))
        self._camera = (config.get("camera_width", 640), config.get("camera_height", 360))
        state = self._client.state()
        warn_ignored(state.scenario_data.get("ignored_config", ()))
        self._batching = "ticks" in state.scenario_data.get("extensions", [])
        self._hits = int(state.scenario_data.get("hits", 0))
        snap = self._snapshot(obs, state, result.done)
        self._tick = snap.tick
        return snap

    def step(self, call: ToolCall, ticks: int = 1) -> StepReport:
        """See `Backend.step`."""
        self._session()  # an episode exists on the server
        action = self._to_action(call)
        if self._batching and ticks > 1:
            action.metadata = {"ticks": ticks}
            results = [self._client.step(action)]
        else:
            results = [self._client.step(action)]
            observe = self._action_cls(action_type="observe")
            while len(results) < ticks and not results[-1].done:
                results.append(self._client.step(observe))
        state = self._client.state()
        last = results[-1]
        rubric = sum(r.observation.rubric_reward or 0.0 for r in results)
        snap = self._snapshot(last.observation, state, last.done)
        hits_before, tick_before = self._hits, self._tick
        self._hits, self._tick = int(state.scenario_data.get("hits", self._hits)), snap.tick
        return StepReport(snap, snap.tick - tick_before, rubric, float(last.reward or 0.0), self._hits - hits_before)

    def render(self, view: str, width: int, height: int, channels_first: bool = False) -> np.ndarray:
        """The server's ``capture_image`` frame resized to ``width`` x ``height`` (front view only).

        Raises:
            ValueError: For views other than ``"front"``.
        """
        from PIL import Image

        if view != "front":
            raise ValueError(f"view={view!r}: the openenv backend has only the server's front camera")
        result = self._session().step(self._action_cls(action_type="capture_image"))
        if result.observation.camera_image is None:
            raise RuntimeError(f"the server at {self.base_url} sent no camera image for capture_image (upstream's "
                               "mock mode has no camera); use observation_mode='state'")
        frame = Image.open(io.BytesIO(base64.b64decode(result.observation.camera_image))).convert("RGB")
        image = np.asarray(frame.resize((width, height), Image.BILINEAR), dtype=np.uint8)
        return np.ascontiguousarray(image.transpose(2, 0, 1)) if channels_first else image

    def close(self) -> None:
        """Close the WebSocket session (if any)."""
        if self._client is not None:
            self._client.close()

    # -- helpers -------------------------------------------------------------------------------
    def _snapshot(self, obs, state, done: bool) -> Snapshot:
        snap = self._read_snapshot(obs, state, done)
        if not self.text:
            snap.description = None
        return snap

    def _read_snapshot(self, obs, state, done: bool) -> Snapshot:
        data = state.scenario_data.get("snapshot")
        if data is not None:  # this project's server: the exact snapshot
            try:
                return Snapshot.from_wire(data)
            except ValueError as exc:
                raise ValueError(f"the OpenEnv server at {self.base_url} sent an unreadable scenario_data['snapshot'] "
                                 f"({exc}); is it this version of carla-gym serve?") from exc
        # Any other OpenEnv CARLA server: what the wire observation carries.
        y0, yaw0 = self._start
        actors = obs.nearby_actors
        forward = [a["distance"] if a.get("position") == "ahead" else -a["distance"] for a in actors]
        types = tuple(str(a.get("type", "unknown")) for a in actors)
        try:
            lane = int(obs.current_lane.rsplit("_", 1)[1])
        except (IndexError, ValueError):
            lane = 0
        return Snapshot(
            scenario=obs.scenario_name,
            tick=obs.step_number,
            sim_time=obs.simulation_time,
            speed_kmh=obs.speed_kmh,
            lateral=obs.location[1] - y0,
            yaw=math.radians(obs.rotation[1]) - yaw0,
            lane=lane,
            left_lane=False,
            right_lane=False,
            actor_forward=forward,
            actor_right=[0.0] * len(forward),
            actor_types=types,
            collided=obs.collision_detected,
            collided_with=obs.collided_with,
            road_departure=False,
            trolley_action="NONE",
            ticks_left=0,
            done=done,
            description=describe(obs.speed_kmh, [abs(f) for f in forward], types, obs.collided_with),
            scene_prompt=obs.scene_description,
            outcome=state.scenario_data.get("outcome") if done else None,
            camera_size=self._camera,
        )

