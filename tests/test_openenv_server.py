"""The OpenEnv CARLA server on the embedded simulator, driven over real sockets."""

from __future__ import annotations

import base64
import io
import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from servers import ServerThread, free_port, start_server, stop_server
from websockets.sync.client import connect

from carla_gym.openenv.client import CarlaEnv
from carla_gym.openenv.models import CarlaAction, CarlaObservation, CarlaState
from carla_gym.sim import ToolCall, World, resolve_scenario


@pytest.fixture(scope="module")
def server():
    """A server in this process for the module (48 sessions): `servers.ServerThread`."""
    with ServerThread(max_sessions=48) as running:
        yield running


@pytest.fixture(scope="module")
def server_url(server):
    return server.url


# Spec section 4.1 / 5.1 / 5.5: field names and defaults of upstream's models.
ACTION_DEFAULTS = {"metadata": {}, "action_type": "observe", "throttle": 0.0, "steer": 0.0, "brake": 0.0,
                   "lane_direction": None, "target_speed_kmh": None, "brake_intensity": None,
                   "target_lane_id": None, "navigation_behavior": "normal", "destination_x": None,
                   "destination_y": None, "destination_z": None, "route_steps": 1}
OBSERVATION_FIELDS = {"done", "reward", "metadata", "scene_description", "speed_kmh", "location", "rotation",
                      "goal_distance", "goal_direction", "current_lane", "nearby_actors", "collision_detected",
                      "collision_intensity", "collided_with", "scenario_name", "simulation_time", "step_number",
                      "done_reason", "rubric_reward", "camera_image"}
STATE_DEFAULTS = {"episode_id": None, "step_count": 0, "scenario_name": "default", "town": "Town10HD_Opt",
                  "weather": "ClearNoon", "total_distance": 0.0, "total_reward": 0.0, "simulation_time": 0.0,
                  "num_turns": 0, "total_tool_calls": 0, "tool_call_counts": {}, "is_truncated": False,
                  "average_speed": 0.0, "max_speed": 0.0, "collisions": [], "collisions_count": 0,
                  "collision_intensity_total": 0.0, "scenario_data": {}}


def test_wire_models_match_upstream_fields():
    from carla_gym.openenv.models import ACTION_TYPES

    assert set(ACTION_TYPES) == {"control", "emergency_stop", "brake_vehicle", "maintain_speed", "lane_change",
                                 "observe", "init_navigation_agent", "set_destination", "follow_route",
                                 "capture_image"}
    assert CarlaAction().model_dump() == ACTION_DEFAULTS
    assert list(CarlaAction().model_dump()) == list(ACTION_DEFAULTS)  # the client sends them in this order
    assert set(CarlaObservation.model_fields) == OBSERVATION_FIELDS
    assert CarlaState().model_dump() == STATE_DEFAULTS
    obs = CarlaObservation()
    assert (obs.current_lane, obs.location, obs.rubric_reward, obs.camera_image) == ("unknown", (0.0, 0.0, 0.0),
                                                                                     None, None)


@pytest.mark.parametrize(
    "bad",
    [dict(throttle=1.5), dict(steer=-2), dict(brake=-0.1), dict(target_speed_kmh=201), dict(brake_intensity=2),
     dict(route_steps=0), dict(action_type="fly"), dict(extra_field=1)],
)
def test_action_validation_as_upstream(bad):
    with pytest.raises(ValueError):
        CarlaAction(**bad)


def _tool(env, action: CarlaAction):
    """TRL's CARLA example: the action, then 10 observe steps (stopping at done)."""
    result = env.step(action)
    for _ in range(10):
        if result.done:
            break
        result = env.step(CarlaAction(action_type="observe"))
    return result


def test_trl_example_flow_rewards(server_url):
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_micro_escape_exists")
        result = _tool(env, CarlaAction(action_type="lane_change", lane_direction="left"))
        while not result.done:
            result = _tool(env, CarlaAction(action_type="observe"))
        assert result.observation.rubric_reward == 1.0 and result.reward == 1.0
        reset = env.reset(scenario_name="trolley_micro_escape_exists")
        assert reset.observation.nearby_actors[0]["type"] == "walker.pedestrian.0001"
        result = _tool(env, CarlaAction(action_type="observe"))
        assert result.observation.rubric_reward == 0.0
        # 11 ticks at 40 km/h: the pedestrian on the lane centre at 26 m is 6.11 m closer.
        assert 26.0 - result.observation.nearby_actors[2]["distance"] == pytest.approx(40 / 3.6 * 0.55, abs=1e-6)
        while not result.done:
            result = _tool(env, CarlaAction(action_type="observe"))
        assert result.observation.rubric_reward == 0.0 and result.observation.collision_detected
        assert result.observation.done_reason == "scenario_complete"
        state = env.state()
        assert state.scenario_data["outcome"]["actual_pedestrians_hit"] == 2
        assert state.step_count == 41 and state.tool_call_counts == {"observe": 41}


def test_remote_matches_the_embedded_world(server_url):
    calls = [ToolCall("observe")] * 3 + [ToolCall("lane_change", lane_direction="right")] + [ToolCall("observe")] * 40
    world = World(resolve_scenario("trolley_micro_classic_3v1"))
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_micro_classic_3v1")
        for call in calls:
            if world.done:
                break
            world.apply(call)
            tick = world.tick()
            result = env.step(CarlaAction(action_type=call.action_type, lane_direction=call.lane_direction))
            obs = result.observation
            assert obs.location == (world.ego.x, world.ego.y, 0.0)  # bit-identical over the wire
            assert obs.speed_kmh == world.speed_kmh
            assert (result.reward, obs.rubric_reward, result.done) == (tick.raw_reward, tick.rubric_reward, tick.done)
        assert world.done and env.state().scenario_data["outcome"] == world.outcome()


def test_capture_image_batching_and_after_done(server_url):
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_saves", scenario_config={"camera_width": 320, "camera_height": 200})
        shot = env.step(CarlaAction(action_type="capture_image"))
        assert shot.reward is None and shot.observation.step_number == 0 and shot.observation.simulation_time == 0
        frame = Image.open(io.BytesIO(base64.b64decode(shot.observation.camera_image)))
        assert (frame.format, frame.size) == ("JPEG", (320, 200))
        batched = env.step(CarlaAction(action_type="observe", metadata={"ticks": 10}))
        assert batched.done and batched.observation.simulation_time == pytest.approx(0.2)  # deadline: 4 ticks
        assert batched.observation.step_number == 1 and batched.reward == -1.0
        with pytest.raises(RuntimeError, match="done after 4 ticks"):
            env.step(CarlaAction(action_type="observe"))
        assert env.reset(scenario_name="trolley_saves").observation.step_number == 0  # the session lives on


def _ws_url(server_url: str) -> str:
    return server_url.replace("http://", "ws://") + "/ws"


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "INVALID_JSON"),
        (json.dumps({"type": "teleport"}), "UNKNOWN_TYPE"),
        (json.dumps({"type": "step", "data": {"action_type": "observe", "throttle": 5}}), "VALIDATION_ERROR"),
        (json.dumps({"type": "step", "data": {"action_type": "follow_route"}}), "EXECUTION_ERROR"),
        (json.dumps({"type": "step", "data": {"action_type": "lane_change", "lane_direction": "up"}}),
         "EXECUTION_ERROR"),
        (json.dumps({"type": "step", "data": {"action_type": "observe", "metadata": {"ticks": 10**9}}}),
         "EXECUTION_ERROR"),
        (json.dumps({"type": "reset", "data": {"scenario_name": "nope"}}), "EXECUTION_ERROR"),
        (json.dumps({"type": "reset", "data": {"scenario_config": {"camera_width": 10**6}}}), "EXECUTION_ERROR"),
    ],
)
def test_bad_messages_get_error_envelopes_and_the_session_survives(server_url, frame, code):
    with connect(_ws_url(server_url), open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_micro_escape_exists"}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        ws.send(frame)
        reply = json.loads(ws.recv(timeout=10))
        assert reply["type"] == "error" and reply["data"]["code"] == code
        ws.send(json.dumps({"type": "step", "data": {"action_type": "observe"}}))
        after = json.loads(ws.recv(timeout=10))
        assert after["type"] == "observation"
        assert after["data"]["observation"]["scenario_name"] == "trolley_micro_escape_exists"
        assert after["data"]["observation"]["step_number"] == 1  # the error changed nothing


@pytest.mark.parametrize(("copies", "steps"), [(2, 150), pytest.param(8, 500, marks=pytest.mark.slow, id="32x500")])
def test_concurrent_sessions_are_isolated(server_url, copies, steps):
    names = ["trolley_micro_escape_exists", "trolley_micro_classic_5v1", "trolley_saves", "bias_2v1"] * copies
    results, errors = {}, []

    def run(index: int, name: str) -> None:
        try:
            world = World(resolve_scenario(name))
            with CarlaEnv(base_url=server_url, message_timeout_s=60).sync() as env:
                env.reset(scenario_name=name)
                for step in range(steps):  # several episodes of each scenario (resets included)
                    call = ToolCall("lane_change", lane_direction="left") if step == 5 else ToolCall("observe")
                    if world.done:
                        world = World(resolve_scenario(name))
                        env.reset(scenario_name=name)
                    world.apply(call)
                    world.tick()
                    obs = env.step(CarlaAction(action_type=call.action_type,
                                               lane_direction=call.lane_direction)).observation
                    assert obs.location == (world.ego.x, world.ego.y, 0.0), (name, step)
            results[index] = True
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=run, args=(i, n)) for i, n in enumerate(names)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors and len(results) == len(names)


def test_unreachable_server_fails_fast(connects):
    port = free_port()
    env = CarlaEnv(base_url=f"http://127.0.0.1:{port}", connect_timeout_s=2).sync()
    with pytest.raises(ConnectionError, match=f"could not connect to ws://127.0.0.1:{port}/ws: connection refused"
                       ) as caught:
        env.reset()
    # fast without a clock: one attempt, bounded by the 2 s connect timeout, ended by the OS's refusal
    assert connects == [(f"ws://127.0.0.1:{port}/ws", 2)]
    assert isinstance(caught.value.__cause__.__cause__, ConnectionRefusedError)
    assert CarlaEnv(base_url=f"http://127.0.0.1:{port}/ws/")._ws_url == f"ws://127.0.0.1:{port}/ws"


def test_cli_errors_and_help(capsys):
    from carla_gym import cli
    from carla_gym.server.cli import main as serve

    with pytest.raises(SystemExit) as caught:
        serve(["--scenario", "nope"])
    assert caught.value.code == 2 and "Unknown scenario" in capsys.readouterr().err
    from carla_gym.server.app import check_options

    check_options("trolley_generated_test", 1, 1.0)  # `serve --scenario` takes the seeded family (a layout per reset)
    with pytest.raises(SystemExit) as caught:
        cli.main(["serve", "--help"])
    helped = capsys.readouterr().out
    assert caught.value.code == 0 and "--max-sessions" in helped and "127.0.0.1" in helped
    with pytest.raises(SystemExit, match="unknown command 'train'; valid: serve"):
        cli.main(["train"])  # sys.exit(message): exit status 1
    with pytest.raises(SystemExit) as caught:
        serve(["--port", "70000"])
    assert caught.value.code == 2 and "--port 70000: must be in 0..65535" in capsys.readouterr().err
    with socket.socket() as holder:  # a port another process listens on
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(SystemExit) as caught:
            serve(["--port", str(port)])
    assert caught.value.code == 2 and capsys.readouterr().err.endswith(
        f"--host 127.0.0.1 --port {port}: Address already in use; choose another --port (--port 0 picks a free one) "
        "or stop the server that holds it\n")
    # the real command line, end to end: status 2 and the reason, before openenv-core is imported
    bad = subprocess.run([sys.executable, "-m", "carla_gym.server", "--max-sessions", "0"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "max_sessions=0: must be >= 1" in bad.stderr


def test_reset_arguments_are_validated_and_capture_works_after_done(server_url):
    from carla_gym.sim import render

    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        for bad in (dict(seed=-5), dict(seed="abc"), dict(episode_id={"a": 1}), dict(episode_id="x" * 256),
                    dict(options=1)):
            with pytest.raises(RuntimeError, match="EXECUTION_ERROR"):
                env.reset(**bad)
        reset = env.reset(scenario_name="trolley_saves", seed=7, episode_id="ep-1")
        assert reset.observation.scenario_name == "trolley_saves"
        assert (env.state().episode_id, env.state().scenario_data["seed"]) == ("ep-1", 7)
        done = env.step(CarlaAction(action_type="observe", metadata={"ticks": 10}))
        assert done.done and env.state().total_reward == -4.0  # four ticks of -1, as four single steps
        shot = env.step(CarlaAction(action_type="capture_image"))  # reading the final frame is allowed
        assert shot.reward is None
        # the final frame itself: the same world after its four ticks, rendered and JPEG-encoded here
        world = World(resolve_scenario("trolley_saves"))
        while not world.tick().done:
            pass
        camera = world.spec.camera
        jpeg = io.BytesIO()
        Image.fromarray(render.render(world, "front", camera.width, camera.height)).save(
            jpeg, format="JPEG", quality=camera.jpeg_quality)
        assert (world.tick_count, shot.observation.camera_image) == (4, base64.b64encode(jpeg.getvalue()).decode())


def test_client_timeout_loses_the_session_until_reset(server_url):
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_micro_escape_exists",
                  scenario_config={"max_steps": 1000, "camera_width": 2048, "camera_height": 2048})
        env._async._message_timeout = 0.01  # a 2048x2048 capture takes far longer
        with pytest.raises(TimeoutError):
            env.step(CarlaAction(action_type="capture_image"))
        env._async._message_timeout = 30
        with pytest.raises(ConnectionError, match="was lost"):
            env.step(CarlaAction(action_type="observe"))  # never a silent new episode
        with pytest.raises(ConnectionError, match="call reset"):
            env.state()
        fresh = env.reset(scenario_name="trolley_micro_escape_exists")
        assert fresh.observation.step_number == 0
        assert env.step(CarlaAction(action_type="observe")).observation.step_number == 1  # not a stale reply


class _Process:
    """``python -m carla_gym.server`` on a fixed port, killed (SIGKILL) to stop."""

    def __init__(self, port: int) -> None:
        self.port, self.proc = port, None

    def start(self) -> None:
        self.proc, _ = start_server("--port", str(self.port))

    def stop(self) -> None:
        self.proc.kill()
        stop_server(self.proc)


@pytest.mark.parametrize("kind", [pytest.param(_Process, marks=pytest.mark.slow, id="killed-process"),
                                  pytest.param(ServerThread, id="stopped-in-process")])
def test_server_death_and_restart(kind):
    port = free_port()
    server = kind(port=port)
    server.start()
    try:
        env = CarlaEnv(base_url=f"http://127.0.0.1:{port}", connect_timeout_s=5, message_timeout_s=10).sync()
        env.reset(scenario_name="trolley_saves")
        server.stop()
        with pytest.raises(ConnectionError, match=str(port)):
            env.step(CarlaAction(action_type="observe"))
        with pytest.raises(ConnectionError, match=str(port)):
            env.reset()  # still down: a clear error, fast
        server.start()
        assert env.reset(scenario_name="trolley_saves").observation.scenario_name == "trolley_saves"
        assert env.step(CarlaAction(action_type="observe")).observation.step_number == 1
        server.stop()  # a restart while the client sits idle: the first reset reconnects by itself
        server.start()
        assert env.reset(scenario_name="bias_3v1").observation.scenario_name == "bias_3v1"
        env.close()
    finally:
        server.stop()


@pytest.mark.parametrize("frame", ["[1, 2]", "5", "null", '"hi"', "9" * 5000, "[" * 100_000, b"\x00binary"])
def test_hostile_frames_get_invalid_json_and_the_session_survives(server_url, frame):
    with connect(_ws_url(server_url), open_timeout=10) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_micro_escape_exists"}}))
        ws.recv(timeout=10)
        ws.send(frame)
        reply = json.loads(ws.recv(timeout=10))
        assert reply["type"] == "error" and reply["data"]["code"] == "INVALID_JSON"
        ws.send(json.dumps({"type": "step", "data": {"action_type": "observe"}}))
        assert json.loads(ws.recv(timeout=10))["data"]["observation"]["step_number"] == 1


def _nest(inner):
    return inner | st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)


# JSON values nested up to three levels (explicit nesting: st.recursive warns spuriously on some runs)
json_values = _nest(_nest(_nest(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                                | st.text(max_size=20))))
messages = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=50),
    json_values.map(json.dumps),
    st.fixed_dictionaries({"type": st.sampled_from(["reset", "step", "state", "teleport"]),
                           "data": json_values}).map(json.dumps),
    st.fixed_dictionaries({"type": st.just("step"), "data": st.dictionaries(
        st.sampled_from(["action_type", "throttle", "steer", "lane_direction", "target_lane_id", "metadata",
                         "brake_intensity", "route_steps"]), json_values, max_size=4)}).map(json.dumps),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(messages, min_size=1, max_size=5))
def test_fuzzed_messages_never_kill_the_session(server_url, frames):
    with connect(_ws_url(server_url), open_timeout=10) as ws:
        for frame in frames:
            ws.send(frame)
            reply = json.loads(ws.recv(timeout=10))
            assert reply["type"] in ("observation", "state", "error")
            if reply["type"] == "error":
                assert reply["data"]["code"] in ("INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR",
                                                 "EXECUTION_ERROR")
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_saves"}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"  # alive and usable


def test_http_bad_input_gets_json_400_and_mcp_answers_json_rpc(server_url):
    import urllib.error
    import urllib.request

    def post(path: str, body: dict) -> tuple[int, dict]:
        request = urllib.request.Request(server_url + path, data=json.dumps(body).encode(),
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    status, body = post("/reset", {"scenario_name": "nope"})
    assert status == 400 and "Unknown scenario" in body["detail"]
    status, body = post("/step", {"action": {"action_type": "lane_change", "lane_direction": "up"}})
    assert status == 400 and "lane_direction" in body["detail"]
    status, body = post("/step", {"action": {"action_type": "observe", "throttle": 3}})
    assert status == 422
    status, body = post("/reset", {"scenario_name": "trolley_saves"})
    assert status == 200 and body["observation"]["scenario_name"] == "trolley_saves"
    status, body = post("/mcp", {"jsonrpc": "2.0", "method": "tools/list", "id": 1})
    assert status == 200 and [t["name"] for t in body["result"]["tools"]] == ["observe", "emergency_stop",
                                                                              "lane_change"]


@pytest.mark.parametrize("action_mode", ["tools", "control"])
def test_remote_gym_backend_matches_the_embedded_one(server_url, action_mode):
    import gymnasium as gym
    import numpy as np

    kwargs = dict(scenario=["trolley_micro_escape_exists", "trolley_micro_classic_5v1", "trolley_saves"],
                  observation_mode="state", action_mode=action_mode, ticks_per_action=5)
    local = gym.make("CarlaTrolley-v0", **kwargs)
    remote = gym.make("CarlaTrolley-v0", backend="openenv", base_url=server_url, **kwargs)
    local.action_space.seed(3)
    a, info_a = local.reset(seed=3)
    b, info_b = remote.reset(seed=3)
    assert a.tobytes() == b.tobytes() and info_a == info_b
    for _ in range(60):
        action = local.action_space.sample()
        step_a, step_b = local.step(action), remote.step(action)
        assert step_a[0].tobytes() == step_b[0].tobytes()  # bit-identical vector observations
        assert step_a[1:] == step_b[1:]  # reward, terminated, truncated, info (outcome included)
        if step_a[2]:
            assert local.reset()[0].tobytes() == remote.reset()[0].tobytes()
    # overrides of one reset do not leak into the next (the server would merge them)
    options = {"scenario": "trolley_saves", "scenario_config": {"action_deadline_step": 2, "initial_speed_kmh": 20.0}}
    a, info_a = local.reset(options=options)
    b, info_b = remote.reset(options=options)
    assert a.tobytes() == b.tobytes() and info_a == info_b and info_a["speed_kmh"] == 20.0
    a, info_a = local.reset(options={"scenario": "trolley_saves"})
    b, info_b = remote.reset(options={"scenario": "trolley_saves"})
    assert a.tobytes() == b.tobytes() and info_a == info_b and info_b["speed_kmh"] == 40.0
    # images: the server's JPEG at the scenario camera size, resized (not the embedded square render)
    from PIL import Image

    from carla_gym.sim import render

    frame = gym.make("CarlaTrolley-v0", backend="openenv", base_url=server_url, image_width=64, image_height=48)
    obs, _ = frame.reset(seed=0)
    assert obs["image"].shape == (3, 48, 64) and obs["image"].dtype == np.uint8
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    want = np.asarray(Image.fromarray(render.render(world, "front", 640, 360)).resize((64, 48), Image.BILINEAR))
    assert np.abs(obs["image"].transpose(1, 2, 0).astype(int) - want).mean() < 4  # JPEG quality 75 noise
    remote.close()
    frame.close()


def test_remote_backend_reports_equal_the_embedded_ones(server_url):
    """Backend level: every `StepReport` (snapshot field by field, ticks, rewards, hits) is equal.

    Batched decisions (the ``ticks`` extension), a decision cut short by the episode's end,
    ``capture_image`` (no tick) and pedestrian hits all cross the wire; the server runs the
    same `carla_gym.sim.decision.decide` and publishes `Snapshot.to_wire`.
    """
    from carla_gym.backends import EmbeddedBackend
    from carla_gym.backends.openenv import OpenEnvBackend

    local, remote = EmbeddedBackend(), OpenEnvBackend(server_url)
    try:
        for scenario, calls in (
                ("trolley_micro_escape_exists", [(ToolCall("observe"), 7), (ToolCall("capture_image"), 5),
                                                 (ToolCall("observe"), 30), (ToolCall("observe"), 30)]),
                ("trolley_micro_classic_3v1", [(ToolCall("lane_change", lane_direction="right"), 1),
                                               (ToolCall("brake_vehicle", brake_intensity=0.3), 3),
                                               (ToolCall("observe"), 100)])):
            assert local.reset(scenario, seed=1) == remote.reset(scenario, seed=1)
            reports = []
            for call, ticks in calls:
                want, got = local.step(call, ticks), remote.step(call, ticks)
                assert got == want, (scenario, call, ticks)
                reports.append(want)
            assert want.snapshot.done and want.snapshot.outcome is not None
            if scenario == "trolley_micro_escape_exists":  # coasting: two pedestrians hit in tick 41
                assert [r.ticks for r in reports] == [7, 0, 30, 4] and [r.new_hits for r in reports] == [0, 0, 0, 2]
        assert reports[-1].ticks < 100 and reports[-1].rubric_reward == want.snapshot.outcome["reward"]
    finally:
        remote.close()


def test_remote_backend_needs_a_url():
    import gymnasium as gym

    with pytest.raises(ValueError, match="needs base_url"):
        gym.make("CarlaTrolley-v0", backend="openenv")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["/reset", "/step"]), st.one_of(json_values.map(json.dumps), st.text(max_size=100)))
def test_fuzzed_http_bodies_get_json_answers(server_url, path, body):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(server_url + path, data=body.encode(),
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    assert status in (200, 400, 422), (status, payload[:200])
    json.loads(payload)  # always JSON, never a plain-text 500


def test_vanishing_clients_leave_no_server_errors(server):
    url = server.url
    ws_url = url.replace("http", "ws") + "/ws"
    for _ in range(3):  # drop the TCP connection mid-session without a WebSocket close frame
        with connect(ws_url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            assert json.loads(ws.recv(timeout=10))["type"] == "observation"
            ws.socket.shutdown(socket.SHUT_RDWR)
            ws.socket.close()
    with CarlaEnv(base_url=url).sync() as env:  # the server still serves
        assert env.reset(scenario_name="trolley_saves").observation.scenario_name == "trolley_saves"
    time.sleep(0.5)
    text = server.log()
    assert "Traceback" not in text and "Exception in ASGI application" not in text, text[-3000:]


def test_a_failed_reset_keeps_a_lost_session_lost(server_url):
    with CarlaEnv(base_url=server_url, message_timeout_s=30).sync() as env:
        env.reset(scenario_name="trolley_micro_escape_exists", scenario_config={"camera_width": 2048,
                                                                                "camera_height": 2048})
        env._async._message_timeout = 0.01
        with pytest.raises(TimeoutError):
            env.step(CarlaAction(action_type="capture_image"))
        env._async._message_timeout = 30
        with pytest.raises(RuntimeError, match="Unknown scenario"):
            env.reset(scenario_name="typo")
        with pytest.raises(ConnectionError, match="was lost"):  # not a silent default episode
            env.step(CarlaAction(action_type="observe"))


def test_trl_example_style_blocking_calls_without_sync(server_url):
    # TRL's carla.py: client = CarlaEnv(base_url=url, ...); client.reset(...); client.step(...)
    client = CarlaEnv(base_url=server_url, connect_timeout_s=30, message_timeout_s=120)
    result = client.reset(scenario_name="trolley_micro_escape_exists")
    assert result.observation.speed_kmh == 40.0
    client.step(CarlaAction(action_type="lane_change", lane_direction="left"))
    for _ in range(60):
        result = client.step(CarlaAction(action_type="observe"))
        if result.done:
            break
    assert result.done and result.observation.rubric_reward == 1.0
    assert client.state().scenario_data["outcome"]["trolley_action"] == "SWERVE_LEFT"
    client.close()
    with CarlaEnv(base_url=server_url) as env:  # a blocking with-block works too
        assert env.reset(scenario_name="bias_3v1").observation.scenario_name == "bias_3v1"


def test_every_pedestrian_hit_gets_a_collision_record(server_url):
    with CarlaEnv(base_url=server_url).sync() as env:
        env.reset(scenario_name="trolley_micro_escape_exists")
        while not env.step(CarlaAction(action_type="observe", metadata={"ticks": 10})).done:
            pass
        state = env.state()
    hits = state.scenario_data["hits"]
    assert hits == 2 and state.collisions_count == 2 == len(state.collisions)
    # The ego coasts at its initial 40 km/h (observe: no pedals, no drag in this model) and sweeps the
    # first two pedestrians (ids 100, 101 in placement order) in tick 41, which lies in the fifth
    # 10-tick step; the intensity is the speed at the hit [km/h] (cross-checked on a World below).
    hit = {"frame": 5, "actor_type": "walker.pedestrian.0001", "intensity": 40.0}
    assert state.collisions == [{**hit, "actor_id": 100}, {**hit, "actor_id": 101}]
    assert state.collision_intensity_total == 80.0
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    while not world.tick().new_hits:
        pass
    assert (world.tick_count, world.hit.tolist(), world.speed_kmh) == (41, [True, True, False], 40.0)


@pytest.mark.parametrize(("frame", "code", "message"), [
    # pydantic cannot serialise the error
    ('{"type": "reset", "x": ' + "[" * 254 + "]" * 254 + "}", "INVALID_JSON", "JSON nested deeper than 64 levels"),
    ('{"type": "step", "data": {"action_type": "observe", "metadata": {"ticks": ' + "9" * 400 + "}}}",
     "EXECUTION_ERROR", f"metadata['ticks']={'9' * 400}: must be an integer in [1, 1000]"),
    ('{"type": "reset", "data": {"seed": ' + "9" * 400 + "}}", "EXECUTION_ERROR",
     f"seed={'9' * 400}: must be an integer in [0, {2**63 - 1}]"),
])
def test_deep_and_huge_values_get_errors_and_the_session_survives(server_url, frame, code, message):
    with connect(server_url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_saves"}}))
        assert json.loads(ws.recv(timeout=10))["type"] == "observation"
        ws.send(frame)
        reply = json.loads(ws.recv(timeout=10))
        assert (reply["type"], reply["data"]["code"], reply["data"]["message"]) == ("error", code, message)
        ws.send(json.dumps({"type": "step", "data": {"action_type": "observe"}}))
        assert json.loads(ws.recv(timeout=10))["data"]["observation"]["step_number"] == 1


def test_the_web_page_when_off_says_how_to_turn_it_on(server_url):
    from carla_gym.server.app import WEB_OFF

    for path in ("/web", "/web/", "/web/reset"):
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(server_url + path, timeout=30)
        assert missing.value.code == 404 and json.loads(missing.value.read()) == {"detail": WEB_OFF}
        missing.value.close()
    assert "carla-gym serve --web" in WEB_OFF


def test_http_huge_integers_get_json_400(server_url):
    import urllib.error
    import urllib.request

    huge = int("9" * 400)
    for path, body, detail in (
            ("/reset", {"seed": huge}, f"ValueError: seed={huge}: must be an integer in [0, {2**63 - 1}]"),
            ("/reset", {"scenario_config": {"camera_fov": huge}},
             f"ValueError: camera_fov={huge}: must be a number in [10.0, 170.0]")):
        request = urllib.request.Request(server_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=30)
        assert (info.value.code, json.loads(info.value.read())) == (400, {"detail": detail})


def test_check_number_fast_path_matches_the_rules():
    import numpy as np

    from carla_gym.sim.validate import check_number

    assert check_number("k", 2, 0, 10) == 2.0 and type(check_number("k", 2, 0, 10)) is float
    assert type(check_number("k", 2, 0, 10, integer=True)) is int
    assert type(check_number("k", np.int64(3), 0, 10, integer=True)) is int
    assert check_number("k", np.float32(0.5), 0, 1) == 0.5
    for bad in (True, float("nan"), float("inf"), -float("inf"), int("9" * 400), "1", None, 11, -1):
        with pytest.raises(ValueError, match="k="):
            check_number("k", bad, 0, 10)
    with pytest.raises(ValueError, match="an integer"):
        check_number("k", 2.0, 0, 10, integer=True)


def test_capacity_and_reclaimed_sessions_are_reported():
    with ServerThread(max_sessions=1, session_timeout=1) as server:
        first = CarlaEnv(base_url=server.url, message_timeout_s=30).sync()
        first.reset(scenario_name="trolley_saves")
        second = CarlaEnv(base_url=server.url, message_timeout_s=30).sync()
        with pytest.raises((ConnectionError, RuntimeError), match="CAPACITY_REACHED"):
            second.reset()
        # idle past --session-timeout; openenv-core's reaper looks every 5 s, so the slot frees within about
        # 6 s (the second client's refused resets do not touch the first session)
        deadline = time.monotonic() + 30
        while True:
            try:
                assert second.reset(scenario_name="bias_3v1").observation.scenario_name == "bias_3v1"
                break
            except (ConnectionError, RuntimeError) as exc:
                assert "CAPACITY_REACHED" in str(exc)
                assert time.monotonic() < deadline, "the idle session was not reclaimed within 30 s"
                time.sleep(0.25)
        with pytest.raises((RuntimeError, ConnectionError), match="closed by the server"):
            first.step(CarlaAction(action_type="observe"))  # no zombie session on a freed slot
        assert second.step(CarlaAction(action_type="observe")).observation.step_number == 1
        first.close()
        second.close()
    assert "Traceback" not in server.log()
