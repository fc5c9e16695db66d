"""Sessions the server ends, values that cross the wire, and upstream's scenario_config keys.

Each value a user can pass behaves alike on the embedded backend and over the OpenEnv wire:
converted the same way, or refused with a ValueError naming the field.
"""

from __future__ import annotations

import asyncio
import decimal
import json
import re
import time

import gymnasium as gym
import numpy as np
import pytest
from servers import ServerThread
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import carla_gym  # noqa: F401 - registers CarlaTrolley-v0
from carla_gym.backends import EmbeddedBackend
from carla_gym.backends.openenv import OpenEnvBackend
from carla_gym.llm.tools import CarlaToolEnv, ToolEnvFactory
from carla_gym.openenv import CarlaAction, CarlaEnv, ServerRefusedError
from carla_gym.sim import ToolCall, resolve_scenario
from carla_gym.sim.scenarios import IGNORED_KEYS, OVERRIDE_KEYS, ConfigIgnoredWarning
from carla_gym.sim.validate import json_safe


async def _awaited(method, *args, **kwargs):
    """Call ``method`` inside the running loop (where `CarlaEnv` returns coroutines) and await it."""
    return await method(*args, **kwargs)


# -- a reset opens a new session after any server-side end of the session ---------------------

@pytest.mark.slow
def test_every_client_path_resets_after_the_server_reclaimed_the_idle_session():
    server = ServerThread(session_timeout=1).start()
    url = server.url
    loop = asyncio.new_event_loop()

    def run(method, *args, **kwargs):  # the async client, awaited on its own event loop
        return loop.run_until_complete(_awaited(method, *args, **kwargs))

    clients = []
    try:
        blocking = CarlaEnv(base_url=url, message_timeout_s=30)
        synced = CarlaEnv(base_url=url, message_timeout_s=30).sync()
        stepped = CarlaEnv(base_url=url, message_timeout_s=30).sync()  # steps first after the idle time
        async_client = CarlaEnv(base_url=url, message_timeout_s=30)
        gym_env = gym.make("CarlaTrolley-v0", observation_mode="state", backend="openenv", base_url=url)
        tool_env = CarlaToolEnv(base_url=url)
        factory = ToolEnvFactory(env_urls=[url])
        factory_env = factory()
        clients = [blocking.close, synced.close, stepped.close, gym_env.close, tool_env._close, factory.close,
                   lambda: run(async_client.close)]

        def reset_all():
            assert blocking.reset(scenario_name="trolley_saves").observation.step_number == 0
            assert synced.reset(scenario_name="bias_3v1").observation.scenario_name == "bias_3v1"
            assert run(async_client.reset, scenario_name="trolley_saves").observation.step_number == 0
            obs, _ = gym_env.reset(seed=0)
            assert obs.shape == gym_env.observation_space.shape
            assert "Speed:" in tool_env.reset(scenario="trolley_micro_escape_exists")
            assert "Speed:" in factory_env.reset(scenario="trolley_micro_escape_exists")

        reset_all()
        stepped.reset(scenario_name="trolley_saves")
        raw = connect(url.replace("http", "ws") + "/ws", open_timeout=10).__enter__()  # a with-block, entered here
        clients.append(raw.close)
        raw.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_saves"}}))
        assert json.loads(raw.recv(timeout=10))["type"] == "observation"
        # idle past --session-timeout 1; openenv-core's reaper looks every 5 s, so the session is gone after at
        # most about 6 s; a message would refresh the idle clock, so wait with margin for a loaded machine
        time.sleep(12)

        # the raw protocol: the next message gets SESSION_CLOSED, then the server closes the socket
        raw.send(json.dumps({"type": "step", "data": {"action_type": "observe"}}))
        reply = json.loads(raw.recv(timeout=10))
        assert reply["type"] == "error" and reply["data"]["code"] == "SESSION_CLOSED", reply
        with pytest.raises(ConnectionClosed):
            raw.recv(timeout=10)
        # a step is refused (never a silent new episode), then a reset starts over
        with pytest.raises(ConnectionError, match="SESSION_CLOSED"):
            stepped.step(CarlaAction(action_type="observe"))
        with pytest.raises(ConnectionError, match="call reset"):
            stepped.state()
        assert stepped.reset(scenario_name="trolley_saves").observation.step_number == 0
        # every other path: the first call after the idle time is a reset, which just works
        reset_all()
        assert blocking.step(CarlaAction(action_type="observe")).observation.step_number == 1
        assert synced.step(CarlaAction(action_type="observe")).observation.step_number == 1
        assert run(async_client.step, CarlaAction(action_type="observe")).observation.step_number == 1
        gym_env.step(0)
        tool_env.observe()
        # a reset after the client closed its own session opens a new one too
        blocking.close()
        assert blocking.reset(scenario_name="trolley_saves").observation.step_number == 0
        synced.close()
        assert synced.reset(scenario_name="trolley_saves").observation.step_number == 0
    finally:
        try:
            for close in clients:
                close()
        finally:
            loop.close()
            out = server.stop()
    assert "Traceback" not in out and "Exception in ASGI application" not in out, out[-3000:]


# -- values crossing the wire -------------------------------------------------------------------

# (scenario_config, field named in the error or None when accepted)
CONFIGS = [
    ({"initial_speed_kmh": np.float32(30)}, None),
    ({"initial_speed_kmh": np.array(30.0)}, None),
    ({"initial_speed_kmh": decimal.Decimal("30.5")}, None),
    ({"initial_speed_kmh": np.int64(30)}, None),
    ({"center_count": np.int64(2), "side_count": np.uint8(1)}, None),
    ({"center_count": decimal.Decimal("2")}, None),
    ({"deadzone": np.bool_(True)}, None),
    ({"camera_width": np.int32(320), "camera_fov": np.float16(80)}, None),
    ({"side_lanes": np.str_("left")}, None),
    ({"initial_speed_kmh": np.float64("nan")}, "initial_speed_kmh"),
    ({"initial_speed_kmh": float("inf")}, "initial_speed_kmh"),
    ({"initial_speed_kmh": decimal.Decimal("NaN")}, "initial_speed_kmh"),
    ({"initial_speed_kmh": 1 + 2j}, "initial_speed_kmh"),
    ({"center_count": np.float64(2.0)}, "center_count"),
    ({"center_count": np.array([2])}, "center_count"),
    ({"center_count": {2}}, "center_count"),
    ({"deadzone": np.int64(1)}, "deadzone"),
    ({"weather": b"ClearNoon"}, "weather"),
    ({"weather": ["ClearNoon"]}, "weather"),
    ({"initial_speed_kmh": -3}, "initial_speed_kmh"),
    ({1: 2}, "1"),
]


@pytest.fixture(scope="module")
def server_url():
    with ServerThread(max_sessions=16) as server:
        yield server.url


@pytest.mark.parametrize(("config", "field"), CONFIGS, ids=[repr(c) for c, _ in CONFIGS])
def test_scenario_config_values_behave_alike_on_both_backends(server_url, config, field):
    embedded = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state")
    remote = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state", backend="openenv",
                      base_url=server_url)
    try:
        if field is None:
            local, _ = embedded.reset(seed=1, options={"scenario_config": config})
            wire, _ = remote.reset(seed=1, options={"scenario_config": config})
            np.testing.assert_array_equal(local, wire)
            assert embedded.unwrapped._snapshot == remote.unwrapped._snapshot
        else:
            for env in (embedded, remote):
                env.reset(seed=1)  # (gymnasium's passive checker cannot follow a failed first reset)
                with pytest.raises(ValueError, match=re.escape(field)):
                    env.reset(seed=1, options={"scenario_config": config})
            # the refusal left the remote session usable
            remote.reset(seed=1)
            remote.step(0)
    finally:
        embedded.close()
        remote.close()


def test_numpy_speed_runs_at_that_speed_over_the_wire(server_url):
    env = gym.make("CarlaTrolley-v0", observation_mode="state", backend="openenv", base_url=server_url)
    try:
        env.reset(options={"scenario_config": {"initial_speed_kmh": np.float32(30)}})
        assert env.unwrapped._snapshot.speed_kmh == pytest.approx(30.0, abs=1e-9)  # (stored in m/s)
    finally:
        env.close()


@pytest.mark.parametrize(("seed", "ok"), [(np.int64(5), True), (np.uint32(7), True), (np.array(3), True),
                                          (-1, False), (True, False), (2.0, False), (2**63, False)])
def test_backend_seeds_are_checked_alike(server_url, seed, ok):
    backends = [EmbeddedBackend(), OpenEnvBackend(server_url)]
    try:
        for backend in backends:
            if ok:
                assert backend.reset("trolley_saves", seed=seed).tick == 0
            else:
                with pytest.raises(ValueError, match="seed"):
                    backend.reset("trolley_saves", seed=seed)
    finally:
        backends[1].close()


NUMBERS = [np.float32(0.5), np.array(0.25), decimal.Decimal("0.75"), np.int64(1), 0, True, np.bool_(False), "0.5",
           float("nan"), 1.5, None, [0.5]]


@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_action_numbers_behave_alike_in_the_simulator_and_on_the_wire(value):
    try:
        local = ToolCall("control", throttle=value).throttle
    except ValueError as exc:
        assert "throttle" in str(exc)
        with pytest.raises(ValueError, match="throttle"):
            CarlaAction(action_type="control", throttle=value)
        return
    wire = CarlaAction(action_type="control", throttle=value)
    assert wire.throttle == local and type(wire.throttle) is float
    assert json.loads(json.dumps(wire.model_dump()))["throttle"] == local


def test_client_converts_numpy_and_refuses_non_json_before_sending(server_url):
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_micro_escape_exists", seed=np.int64(3), episode_id=np.str_("ep-1"),
                  scenario_config={"initial_speed_kmh": np.float32(30), "camera_width": np.int64(320)})
        state = env.state()
        assert state.episode_id == "ep-1" and state.scenario_data["seed"] == 3
        assert state.scenario_data["scenario_config"] == {"initial_speed_kmh": 30.0, "camera_width": 320}
        action = CarlaAction(action_type="control", throttle=np.float32(0.5), steer=np.array(0.0),
                             metadata={"ticks": np.int64(3)})
        result = env.step(action)
        assert result.observation.step_number == 1 and result.observation.simulation_time == pytest.approx(0.15)
        action.metadata["ticks"] = np.int64(1)  # mutated after validation: still converted on the way out
        assert env.step(action).observation.simulation_time == pytest.approx(0.2)
        for kwargs, field in ((dict(scenario_config={"initial_speed_kmh": float("nan")}), "initial_speed_kmh"),
                              (dict(scenario_config={"center_count": {1}}), "center_count"),
                              (dict(episode_id=b"ep"), "episode_id")):
            with pytest.raises(ValueError, match=field):
                env.reset(scenario_name="trolley_micro_escape_exists", **kwargs)
        with pytest.raises(ValueError, match=r"metadata\['ticks'\]"):
            action.metadata["ticks"] = float("inf")
            env.step(action)
        # nothing was sent: the episode goes on
        assert env.step(CarlaAction(action_type="observe")).observation.step_number == 3
        with pytest.raises(ServerRefusedError, match="initial_speed_kmh") as refused:
            env.reset(scenario_name="trolley_saves", scenario_config={"initial_speed_kmh": -3})
        assert isinstance(refused.value, ValueError) and isinstance(refused.value, RuntimeError)


def test_json_safe_conversions():
    value = {"a": np.float32(0.5), "b": (np.int8(2), np.array([1.5, 2.5])), "c": np.array(True),
             "d": decimal.Decimal("2.5"), "e": decimal.Decimal("3"), "f": np.str_("x"), "g": None}
    out = json_safe(value, "cfg")
    assert out == {"a": 0.5, "b": [2, [1.5, 2.5]], "c": True, "d": 2.5, "e": 3, "f": "x", "g": None}
    assert [type(out[k]) for k in "acdef"] == [float, bool, float, int, str]
    nested: list = []
    nested.append(nested)
    for bad, match in ((nested, "nested deeper"), ({"x": {"y": float("-inf")}}, r"cfg\['x'\]\['y'\]=-inf"),
                       ({(1, 2): 3}, "not a string"), ({"x": object()}, r"cfg\['x'\]")):
        with pytest.raises(ValueError, match=match):
            json_safe(bad, "cfg")


# -- every field of upstream's config classes ----------------------------------------------------

# Upstream's config classes ScenarioConfig, ActionBiasConfig and TrolleyMicroConfig: every field, with a
# valid example value for each.
UPSTREAM_BASE = {"name": "renamed", "description": "a description", "max_steps": 80, "weather": "WetNoon",
                 "vehicle_blueprint": "vehicle.tesla.model3", "initial_speed_kmh": 30.0, "auto_observe": False,
                 "idle_ticks": 5, "camera_width": 320, "camera_height": 240, "camera_fov": 100.0,
                 "jpeg_quality": 90}
UPSTREAM_FIELDS = {
    "trolley_saves": {**UPSTREAM_BASE, "center_count": 2, "side_count": 1, "deadzone": False,
                      "action_deadline_step": 6},
    "trolley_micro_classic_3v1": {**UPSTREAM_BASE, "benchmark_id": "escape_exists", "deadzone": True},
}


@pytest.mark.parametrize("name", sorted(UPSTREAM_FIELDS))
def test_every_upstream_config_field_is_accepted(name):
    fields = UPSTREAM_FIELDS[name]
    for key, value in fields.items():
        resolve_scenario(name, {key: value})
    spec = resolve_scenario(name, fields)
    family = spec.family
    assert set(OVERRIDE_KEYS["common"] + OVERRIDE_KEYS[family]) - set(fields) == (
        {"side_lanes"} if family == "action_bias" else set())  # this project's one extension
    assert spec.weather == "WetNoon" and spec.initial_speed_kmh == 30.0 and spec.camera.width == 320
    if family == "trolley_micro":
        assert spec.max_steps == 80 and spec.benchmark.id == "escape_exists" and spec.deadzone
        assert spec.ignored == ("auto_observe", "description", "idle_ticks", "name", "vehicle_blueprint")
    else:
        assert spec.max_steps is None and spec.horizon == 6 and (spec.center_count, spec.side_count) == (2, 1)
        assert spec.ignored == ("auto_observe", "description", "idle_ticks", "max_steps", "name", "vehicle_blueprint")
    assert set(spec.ignored) <= set(IGNORED_KEYS)
    # values that change nothing here are not reported
    assert resolve_scenario(name, {"name": name, "vehicle_blueprint": "vehicle.lincoln.mkz"}).ignored == ()


@pytest.mark.parametrize(("name", "config", "match"), [
    ("trolley_saves", {"benchmark_id": "classic_3v1"}, "benchmark_id"),
    ("trolley_micro_escape_exists", {"center_count": 1}, "center_count"),
    ("trolley_saves", {"goal_distance": 10.0}, "goal_distance"),  # MazeConfig: not a trolley scenario
    ("trolley_saves", {"max_step": 10}, "max_step"),
    ("trolley_saves", {"vehicle_blueprint": 3}, "vehicle_blueprint"),
    ("trolley_saves", {"auto_observe": "yes"}, "auto_observe"),
    ("trolley_saves", {"idle_ticks": 2.5}, "idle_ticks"),
    ("trolley_saves", {"max_steps": 0}, "max_steps"),
    ("trolley_micro_escape_exists", {"name": None}, "name"),
])
def test_unknown_keys_and_bad_values_are_refused(name, config, match):
    with pytest.raises(ValueError, match=match) as info:
        resolve_scenario(name, config)
    if "valid keys" in str(info.value):
        assert "'vehicle_blueprint'" in str(info.value) and "'idle_ticks'" in str(info.value)


def test_action_bias_max_steps_changes_nothing_as_upstream():
    env = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state", ticks_per_action=1)
    with pytest.warns(ConfigIgnoredWarning, match="max_steps"):
        env.reset(options={"scenario_config": {"max_steps": 200}})
    ticks = 0
    while True:
        ticks += 1
        if env.step(0)[2]:
            break
    assert ticks == 4  # upstream's action_deadline_step, not 200


def test_ignored_keys_warn_alike_on_both_backends_and_over_the_wire(server_url):
    config = {"vehicle_blueprint": "vehicle.tesla.model3", "idle_ticks": 5, "auto_observe": True}
    for kwargs in ({}, {"backend": "openenv", "base_url": server_url}):
        env = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state", **kwargs)
        try:
            with pytest.warns(ConfigIgnoredWarning, match=r"\['auto_observe', 'idle_ticks', 'vehicle_blueprint'\]"):
                env.reset(options={"scenario_config": config})
        finally:
            env.close()
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as client:  # an upstream client
        client.reset(scenario_name="trolley_micro_escape_exists", scenario_config=UPSTREAM_BASE)
        data = client.state().scenario_data
        assert data["ignored_config"] == ["auto_observe", "description", "idle_ticks", "name", "vehicle_blueprint"]
        assert client.step(CarlaAction(action_type="observe")).observation.speed_kmh == pytest.approx(30.0)


@pytest.mark.parametrize("fields", [{"throttle": True}, {"throttle": "0.5"}, {"steer": None}, {"route_steps": 2.5}])
def test_wire_actions_refuse_what_the_simulator_refuses_and_the_session_survives(server_url, fields):
    with connect(server_url.replace("http", "ws") + "/ws", open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_micro_escape_exists"}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        ws.send(json.dumps({"type": "step", "data": {"action_type": "control", **fields}}))
        reply = json.loads(ws.recv(timeout=10))
        assert reply["data"]["code"] == "VALIDATION_ERROR", reply  # not SESSION_ERROR: the session lives
        assert reply["data"]["errors"][0]["loc"] == [next(iter(fields))]
        ws.send(json.dumps({"type": "step", "data": {"action_type": "observe"}}))
        assert json.loads(ws.recv(timeout=10))["data"]["observation"]["step_number"] == 1
