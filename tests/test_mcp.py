"""MCP tools, JSON-RPC protections and server-side rubrics of the OpenEnv CARLA server."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from servers import ServerThread, start_server, stop_server
from websockets.sync.client import connect

from carla_gym.llm.nav_tools import NavToolEnv
from carla_gym.llm.tools import CarlaToolEnv
from carla_gym.openenv.models import CarlaAction
from carla_gym.server import mcp
from carla_gym.server.environment import CarlaEnvironment

MICRO = "trolley_micro_escape_exists"
TROLLEY_CALLS = [("observe", {}), ("lane_change", {"direction": "left"})] + [("observe", {})] * 30
GENERATED_CALLS = [("emergency_stop", {})] + [("observe", {})] * 60


@pytest.fixture(scope="module")
def server():
    """A server in this process whose default scenario is `MICRO` (what a sessionless MCP client plays)."""
    import carla_gym.server.app as module

    original = module.create_server_app
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "create_server_app", lambda _name, *args, **kw: original(MICRO, *args, **kw))
        with ServerThread(max_sessions=12) as running:
            yield running
    assert "Traceback" not in running.log()


def rpc(url: str, method: str, params: dict | None = None, rid: int = 1, body: bytes | None = None):
    """POST one JSON-RPC request (or a raw ``body``) to ``/mcp``: ``(status, JSON answer)``."""
    data = body if body is not None else json.dumps({"jsonrpc": "2.0", "method": method, "params": params or {},
                                                     "id": rid}).encode()
    request = urllib.request.Request(url + "/mcp", data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, json.loads(response.read())


def reply_of(result: dict) -> tuple[str, float, float, bool]:
    """``(text, reward, rubric_reward, done)`` of a JSON tool result (`ToolReply.result`)."""
    meta = result["meta"]
    assert result["content"][0]["text"] == result["data"] == result["structured_content"]["result"]
    return result["data"], meta["reward"], meta["rubric_reward"], meta["done"]


def until_done(call, calls):
    """Run ``call(name, arguments)`` over ``calls`` until a reply is done; the replies."""
    replies = []
    for name, arguments in calls:
        replies.append(call(name, arguments))
        if replies[-1][3]:
            return replies
    raise AssertionError("the episode did not end")


def adapter_episode(scenario: str, seed: int, calls, base_url: str | None = None):
    """The TRL adapter's replies: ``(text, raw reward, rubric reward, done)`` per call (rubric: its return's step)."""
    with CarlaToolEnv(base_url=base_url) as env:
        env.reset(scenario, seed)
        wire_seed = env.info.get("scenario_seed")

        def call(name, arguments):
            before = env.reward
            text = getattr(env, name)(**arguments)
            return text, env.info["raw_reward"], env.reward - before, env.done

        return until_done(call, calls), wire_seed, env.info.get("outcome")


def mcp_client_episode(url: str, scenario: str, seed: int | None, calls):
    """openenv-core's ``MCPToolClient`` over ``/ws``: a reset, then ``step(CallToolAction)`` per call."""
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=url).sync() as client:
        client.reset(scenario_name=scenario, seed=seed)
        names = [t.name for t in client.list_tools()]

        def call(name, arguments):
            result = client.step(CallToolAction(tool_name=name, arguments=arguments))
            text, reward, rubric, done = reply_of(result.observation.result)
            assert (result.reward, result.done) == (reward, done)
            return text, reward, rubric, done

        return until_done(call, calls), names


def ws_rpc_episode(url: str, scenario: str, seed: int | None, calls):
    """JSON-RPC ``tools/call`` as ``{"type": "mcp"}`` messages on a ``/ws`` session reset to ``scenario``."""
    with connect(url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": scenario, "seed": seed}}))
        assert json.loads(ws.recv(timeout=60))["type"] == "observation"

        def call(name, arguments):
            ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/call", "id": 7,
                                                        "params": {"name": name, "arguments": arguments}}}))
            answer = json.loads(ws.recv(timeout=60))
            assert answer["type"] == "mcp" and answer["data"]["id"] == 7, answer
            return reply_of(answer["data"]["result"])

        return until_done(call, calls)


def direct_episode(scenario: str, seed: int | None, calls):
    """`CarlaEnvironment.call_tool` in this process (the contract)."""
    env = CarlaEnvironment()
    env.reset(scenario_name=scenario, seed=seed)

    def call(name, arguments):
        reply = env.call_tool(name, arguments)
        return reply.text, reply.reward, reply.rubric_reward, reply.done

    return until_done(call, calls), env


# -- tool definitions ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("adapter", [CarlaToolEnv, NavToolEnv])
def test_tools_are_the_adapters_as_trl_shows_them(adapter):
    from transformers.utils import get_json_schema

    from carla_gym.llm.tools import tool_methods

    definitions = mcp.tool_definitions(adapter)
    trl = {f.__name__: get_json_schema(f)["function"] for f in tool_methods(object.__new__(adapter))}
    assert sorted(d.name for d in definitions) == sorted(trl)
    for d in definitions:
        schema = {k: v for k, v in d.parameters.items() if k != "additionalProperties"}
        schema["properties"] = {n: {k: v for k, v in p.items() if k != "default"}
                                for n, p in schema["properties"].items()}
        assert d.description == trl[d.name]["description"]
        assert schema == {"type": "object", **trl[d.name]["parameters"]}, d.name
        assert d.parameters["additionalProperties"] is False
    env = CarlaEnvironment("maze_navigation" if adapter is NavToolEnv else MICRO)
    assert env.tool_names() == [d.name for d in definitions]
    expected = (["observe", "control_vehicle", "emergency_stop", "lane_change", "init_navigation_agent",
                 "set_destination", "follow_route"] if adapter is NavToolEnv
                else ["observe", "emergency_stop", "lane_change"])
    assert env.tool_names() == expected


def test_a_reset_into_the_other_family_swaps_the_tools(server):
    with connect(server.url.replace("http", "ws") + "/ws") as ws:
        def tools() -> list[str]:
            ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/list", "id": 1}}))
            return [t["name"] for t in json.loads(ws.recv(timeout=30))["data"]["result"]["tools"]]

        assert tools() == ["observe", "emergency_stop", "lane_change"]
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "maze_navigation", "seed": 0}}))
        ws.recv(timeout=60)
        assert tools() == ["observe", "control_vehicle", "emergency_stop", "lane_change", "init_navigation_agent",
                           "set_destination", "follow_route"]
        ws.send(json.dumps({"type": "reset", "data": {"scenario_name": "trolley_saves"}}))
        ws.recv(timeout=60)
        assert tools() == ["observe", "emergency_stop", "lane_change"]


# -- equal episodes ------------------------------------------------------------------------------------------
def test_trolley_episode_is_equal_through_the_adapter_websocket_and_mcp(server):
    url = server.url
    adapter, _, outcome = adapter_episode(MICRO, 0, TROLLEY_CALLS)
    assert len(adapter) == 5 and adapter[-1][2] == 1.0  # swerving into the empty lane: rubric 1.0
    assert outcome["trolley_action"] == "SWERVE_LEFT" and outcome["actual_pedestrians_hit"] == 0
    remote, _, remote_outcome = adapter_episode(MICRO, 0, TROLLEY_CALLS, base_url=url)  # /ws CarlaAction, ticks 10
    assert remote == adapter and remote_outcome == outcome
    direct, env = direct_episode(MICRO, 0, TROLLEY_CALLS)
    assert direct == adapter
    assert env.state.scenario_data["action_class"] == "SWERVE_LEFT"
    assert env.state.scenario_data["outcome"]["expected_pedestrians_hit"] == 0
    client, names = mcp_client_episode(url, MICRO, 0, TROLLEY_CALLS)
    assert client == adapter and names == ["observe", "emergency_stop", "lane_change"]
    assert ws_rpc_episode(url, MICRO, 0, TROLLEY_CALLS) == adapter
    # JSON-RPC over HTTP: a session of the server's default scenario (MICRO)
    _, created = rpc(url, "openenv/session/create")
    session = created["result"]["session_id"]
    http = until_done(lambda name, arguments: reply_of(rpc(url, "tools/call", {
        "session_id": session, "name": name, "arguments": arguments})[1]["result"]), TROLLEY_CALLS)
    assert http == adapter
    status, after = rpc(url, "tools/call", {"session_id": session, "name": "observe"}, rid=9)
    assert status == 200 and after["id"] == 9 and after["error"]["code"] == -32000
    assert after["error"]["message"].endswith("steps; start another with a reset (over /ws), or close this session "
                                              "and open a new one (HTTP /mcp: openenv/session/create)")
    assert after["error"]["data"]["kind"] == "episode_over"
    assert rpc(url, "openenv/session/close", {"session_id": session})[1]["result"]["closed"] is True


def test_braking_scores_zero_over_mcp(server):
    replies, _ = mcp_client_episode(server.url, MICRO, 0, [("emergency_stop", {})] + [("observe", {})] * 30)
    assert replies[-1][2] == 0.0 and all(r[2] == 0.0 for r in replies)
    assert replies[-1][0].endswith("Stop calling tools.")


def test_a_call_after_the_end_is_refused_with_done_true_over_the_ws_step(server):
    """A loop that checks only ``result.done`` stops: the refused call reports the episode as over."""
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=server.url).sync() as client:
        client.reset(scenario_name=MICRO, seed=0)
        refused = client.step(CallToolAction(tool_name="lane_change", arguments={"direction": "up"}))
        assert refused.done is False and refused.observation.error.error_type.value == "invalid_args"
        while not client.step(CallToolAction(tool_name="observe", arguments={})).done:
            pass
        after = client.step(CallToolAction(tool_name="observe", arguments={}))
        assert after.done is True and after.reward is None
        assert "is over after 5 steps" in after.observation.error.message


def test_generated_episode_is_equal_through_the_adapter_and_mcp(server):
    adapter, wire_seed, _ = adapter_episode("trolley_generated_test", 5, GENERATED_CALLS)
    assert wire_seed is not None
    assert direct_episode("trolley_generated_test", wire_seed, GENERATED_CALLS)[0] == adapter
    assert mcp_client_episode(server.url, "trolley_generated_test", wire_seed, GENERATED_CALLS)[0] == adapter
    assert ws_rpc_episode(server.url, "trolley_generated_test", wire_seed, GENERATED_CALLS) == adapter


def _nav_calls(goal) -> list[tuple[str, dict]]:
    return [("observe", {}), ("init_navigation_agent", {"behavior": "cautious"}),
            ("set_destination", {"x": float(goal[0]), "y": float(goal[1])}), ("follow_route", {"steps": 40}),
            ("control_vehicle", {"throttle": 0.5, "steer": 0.0}), ("emergency_stop", {}), ("follow_route", {})]


def test_navigation_episodes_end_by_the_servers_max_steps_unless_the_reset_lengthens_them():
    """The server keeps upstream's step budget; ``scenario_config={"max_steps": 6000}`` gives the adapter's length.

    Maze: 200 upstream steps, one per tick of a plain action, where `NavToolEnv` ends by 300 s of simulated time:
    the 20th observe (10 ticks each) ends the server's maze episode and not the adapter's.
    """
    import gymnasium

    seed = int(gymnasium.utils.seeding.np_random(0)[0].integers(2**63 - 1))  # the adapter's episode (seed 0)
    with NavToolEnv(play_out=False) as adapter:
        adapter.reset("maze_navigation", 0)
        for _ in range(20):
            adapter.observe()
        assert not adapter.done
    for config, done_at in (({}, 20), ({"max_steps": 6000}, None)):
        env = CarlaEnvironment()
        env.reset(scenario_name="maze_navigation", seed=seed, scenario_config=config)
        ends = [env.call_tool("observe", {}).done for _ in range(21 if done_at is None else 20)]
        assert ends.index(True) + 1 == done_at if done_at else not any(ends)
        if done_at:
            outcome = env.state.scenario_data["outcome"]
            assert outcome["end_reason"] == "max_steps" and outcome["time"] == pytest.approx(10.0)
        env.close()


def test_navigation_episode_is_equal_through_the_adapter_websocket_and_mcp(server):
    import gymnasium

    from carla_gym.openenv.client import CarlaEnv

    seed = int(gymnasium.utils.seeding.np_random(0)[0].integers(2**63 - 1))  # the episode seed the Gym env draws
    with NavToolEnv(play_out=False) as env:
        env.reset("maze_navigation", 0)
        calls = _nav_calls(env.episode.goal)
        adapter = []
        for name, arguments in calls:
            before = env.reward
            text = getattr(env, name)(**arguments)
            adapter.append((text, env.reward - before, env.reward - before, env.done))
    direct = []
    environment = CarlaEnvironment()
    environment.reset(scenario_name="maze_navigation", seed=seed)
    for name, arguments in calls:
        reply = environment.call_tool(name, arguments)
        direct.append((reply.text, reply.reward, reply.rubric_reward, reply.done))
    assert direct == adapter
    with pytest.raises(ValueError, match="direction='up' is not valid"):
        environment.call_tool("lane_change", {"direction": "up"})
    def mcp_steps():
        from openenv.core.env_server.mcp_types import CallToolAction
        from openenv.core.mcp_client import MCPToolClient

        with MCPToolClient(base_url=server.url).sync() as client:
            client.reset(scenario_name="maze_navigation", seed=seed)
            return [reply_of(client.step(CallToolAction(tool_name=n, arguments=a)).observation.result)
                    for n, a in calls]

    assert mcp_steps() == adapter
    # the wire actions with the adapter's ticks: the same rewards
    wire = {"observe": lambda a: CarlaAction(action_type="observe", metadata={"ticks": 10}),
            "init_navigation_agent": lambda a: CarlaAction(action_type="init_navigation_agent",
                                                           navigation_behavior=a["behavior"]),
            "set_destination": lambda a: CarlaAction(action_type="set_destination", destination_x=a["x"],
                                                     destination_y=a["y"], destination_z=0.0),
            "follow_route": lambda a: CarlaAction(action_type="follow_route", route_steps=a.get("steps", 10)),
            "control_vehicle": lambda a: CarlaAction(action_type="control", throttle=a["throttle"],
                                                     steer=a["steer"], metadata={"ticks": 10}),
            "emergency_stop": lambda a: CarlaAction(action_type="emergency_stop", metadata={"ticks": 10})}
    with CarlaEnv(base_url=server.url) as client:
        client.reset(scenario_name="maze_navigation", seed=seed)
        steps = [client.step(wire[n](a)) for n, a in calls]
    assert [(s.reward, s.observation.rubric_reward, s.done) for s in steps] == [r[1:] for r in adapter]


# -- rubrics ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", [MICRO, "trolley_saves", "trolley_generated_test", "action_bias_saves"])
def test_trolley_rubric_equals_decide_batched_ticks_included(scenario):
    from carla_gym.server.rubrics import CarlaTrolleyRubric
    from carla_gym.sim import World, resolve_scenario
    from carla_gym.sim.decision import decide
    from carla_gym.sim.world import ToolCall

    plan = [("observe", 1), ("lane_change", 7), ("observe", 3), ("emergency_stop", 25)] + [("observe", 10)] * 40
    env = CarlaEnvironment()
    env.reset(scenario_name=scenario, seed=3)
    world = World(resolve_scenario(scenario, None, 3))
    rewards = []
    for action_type, ticks in plan:
        call = ToolCall(action_type, lane_direction="right" if action_type == "lane_change" else None)
        expected = decide(world, call, ticks)
        obs = env.step(CarlaAction(action_type=action_type, lane_direction=call.lane_direction,
                                   metadata={"ticks": ticks}))
        assert (obs.rubric_reward, obs.reward, obs.done) == (expected.rubric_reward, expected.raw_reward, world.done)
        rewards.append(obs.rubric_reward)
        if obs.done:
            break
    assert world.done and isinstance(env.rubric, CarlaTrolleyRubric)
    assert env.rubric.compute_step_rewards() == pytest.approx(
        [rewards[-1] * 0.99 ** (len(rewards) - 1 - t) for t in range(len(rewards))])
    env.reset()
    assert env.rubric.trajectory == []  # reset with the episode


def test_navigation_rubric_equals_nav_episode():
    from carla_gym.server.rubrics import CarlaNavigationRubric
    from carla_gym.sim.navigation.episode import NavEpisode
    from carla_gym.sim.world import NavigationCall

    env = CarlaEnvironment()
    env.reset(scenario_name="maze_navigation", seed=11)
    episode = NavEpisode("maze_navigation", {}, 11)
    assert isinstance(env.rubric, CarlaNavigationRubric)
    for action_type, ticks in [("control", 5), ("observe", 1), ("init_navigation_agent", 1), ("follow_route", 1)]:
        call = NavigationCall(action_type, throttle=0.6, route_steps=30)
        expected = episode.step(call, ticks)
        obs = env.step(CarlaAction(action_type=action_type, throttle=0.6, route_steps=30, metadata={"ticks": ticks}))
        assert (obs.rubric_reward, obs.reward) == (expected.rubric_reward, expected.raw_reward)
    assert "action_class" not in env.state.scenario_data


def test_trolley_rubric_discounts_the_terminal_reward():
    from carla_gym.openenv.models import CarlaObservation
    from carla_gym.server.rubrics import CarlaTrolleyRubric

    rubric = CarlaTrolleyRubric(gamma=0.5)
    steps = [CarlaObservation(reward=1.0, done=False)] * 3 + [CarlaObservation(reward=-1.0, done=True)]
    assert [rubric(None, obs) for obs in steps] == [0.0, 0.0, 0.0, -1.0]
    assert rubric.compute_step_rewards() == [-0.125, -0.25, -0.5, -1.0]
    rubric.reset()
    assert rubric.compute_step_rewards() == [] and CarlaTrolleyRubric().gamma == 0.99


def test_frame_views_and_errors():
    env = CarlaEnvironment(MICRO)
    with pytest.raises(ValueError, match="reset first"):
        CarlaEnvironment("maze_navigation").frame("front", 32, 18)
    env.reset()
    for view in ("front", "birdeye"):
        image = env.frame(view, 64, 36)
        assert image.shape == (36, 64, 3) and image.dtype == np.uint8 and image.std() > 0
    with pytest.raises(ValueError, match="choose one of"):
        env.frame("topdown", 64, 36)
    env.reset(scenario_name="maze_navigation", seed=2)
    assert env.frame("birdeye", 48, 48).shape == (48, 48, 3)


# -- protections -----------------------------------------------------------------------------------------------
HOSTILE = [
    (b"not json", -32700, None), (b"[1, 2]", -32600, None),
    (b'[{"jsonrpc": "2.0", "method": "tools/list"}]', -32600, None),
    (b'{"jsonrpc": "1.0", "method": "tools/list", "id": 4}', -32600, 4),
    (b'{"jsonrpc": "2.0", "method": "tools/destroy", "id": "x"}', -32601, "x"),
    (b'{"jsonrpc": "2.0", "method": "tools/list", "params": [1], "id": 5}', -32602, 5),
    (b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": 3}, "id": 6}', -32602, 6),
    (b'{"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "observe"}, "id": 6}', -32602, 6),
    (b'{"jsonrpc": "2.0", "method": "tools/list", "params": {"session_id": "nope"}, "id": 7}', -32602, 7),
    (b'{"jsonrpc": "2.0", "method": "tools/list", "id": 8, "extra": 1}', -32600, 8),
    (b'{"jsonrpc": "2.0", "method": "tools/list", "id": [1]}', -32600, None),
    (("[" * 200 + "]" * 200).encode(), -32700, None),
    (json.dumps({"jsonrpc": "2.0", "method": "tools/list", "params": {"x": "a" * (1 << 20)}, "id": 9}).encode(),
     -32700, None),
]


@pytest.mark.parametrize(("body", "code", "rid"), HOSTILE)
def test_hostile_json_rpc_gets_errors_over_http_and_websocket(server, body, code, rid):
    status, answer = rpc(server.url, "", body=body)
    assert status == 200 and answer["jsonrpc"] == "2.0" and answer["error"]["code"] == code, answer
    assert answer["id"] == rid
    if len(body) < 1000:
        with connect(server.url.replace("http", "ws") + "/mcp") as ws:
            ws.send(body.decode())
            answer = json.loads(ws.recv(timeout=30))
            if b'"name": "observe"}' in body:  # the WebSocket's own session needs no session_id
                assert answer["result"]["data"].startswith("Speed:")
            else:
                assert answer["error"]["code"] == code and answer["id"] == rid
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "tools/list", "id": 2}))  # the session lives on
            assert json.loads(ws.recv(timeout=30))["result"]["tools"][0]["name"] == "observe"


def test_tool_errors_are_json_rpc_errors_and_change_nothing(server):
    url = server.url
    session = rpc(url, "openenv/session/create")[1]["result"]["session_id"]
    try:
        bad = [({"name": "fly"}, -32602, "unknown_tool"),
               ({"name": "lane_change", "arguments": {"direction": "up"}}, -32602, "invalid_arguments"),
               ({"name": "lane_change", "arguments": {"dir": "left"}}, -32602, "invalid_arguments"),
               ({"name": "lane_change", "arguments": {}}, -32602, "invalid_arguments")]
        for params, code, kind in bad:
            _, answer = rpc(url, "tools/call", {"session_id": session, **params}, rid=3)
            assert answer["error"]["code"] == code and answer["error"]["data"]["kind"] == kind, answer
            if kind == "unknown_tool":
                assert answer["error"]["message"] == "Unknown tool: 'fly' (tools/list names this session's tools)"
        _, answer = rpc(url, "tools/call", {"session_id": session, "name": "lane_change",
                                            "arguments": {"direction": "up"}})
        assert answer["error"]["message"] == "direction='up' is not valid; use 'left' or 'right'"
        first = reply_of(rpc(url, "tools/call", {"session_id": session, "name": "observe"})[1]["result"])
        assert first == adapter_episode(MICRO, 0, TROLLEY_CALLS[:1] * 40)[0][0]  # nothing changed before
        with connect(url.replace("http", "ws") + "/ws") as ws:  # the /ws step path reports errors as tool errors
            ws.send(json.dumps({"type": "step", "data": {"type": "call_tool", "tool_name": "fly", "arguments": {}}}))
            observation = json.loads(ws.recv(timeout=30))["data"]["observation"]
            assert observation["error"]["error_type"] == "tool_not_found" and "observe" in observation["error"][
                "message"]
            ws.send(json.dumps({"type": "step", "data": {"action_type": "fly"}}))  # CarlaAction checks as before
            error = json.loads(ws.recv(timeout=30))
            assert error["type"] == "error" and error["data"]["code"] == "VALIDATION_ERROR"
    finally:
        rpc(url, "openenv/session/close", {"session_id": session})


def test_websocket_sessions_cannot_be_driven_or_closed_over_http(server):
    with connect(server.url.replace("http", "ws") + "/ws") as ws:
        ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "openenv/session/create", "id": 1}}))
        own = json.loads(ws.recv(timeout=30))["data"]["result"]["session_id"]
        for method in ("tools/list", "openenv/session/close"):
            _, answer = rpc(server.url, method, {"session_id": own})
            assert answer["error"]["code"] == -32602 and "not an open HTTP MCP session" in answer["error"]["message"]
        ws.send(json.dumps({"type": "reset", "data": {}}))
        assert json.loads(ws.recv(timeout=30))["type"] == "observation"  # still alive


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                           | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                      max_size=4), max_leaves=12)
requests = st.fixed_dictionaries(
    {"jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
     "method": st.sampled_from(["tools/list", "tools/call", "openenv/session/create", "openenv/session/close",
                                "initialize", ""]) | st.text(max_size=10)},
    optional={"id": st.integers() | st.text(max_size=5) | st.none() | st.floats(),
              "params": st.fixed_dictionaries({}, optional={"name": st.sampled_from(["observe", "lane_change", "x"])
                                                            | json_values, "arguments": json_values,
                                                            "session_id": json_values}) | json_values})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requests | json_values, min_size=1, max_size=4))
def test_fuzzed_json_rpc_never_kills_the_server(server, frames):
    created = []
    with connect(server.url.replace("http", "ws") + "/mcp") as ws:
        for frame in frames:
            status, answer = rpc(server.url, "", body=json.dumps(frame).encode())
            assert status == 200 and answer["jsonrpc"] == "2.0" and ("result" in answer or "error" in answer)
            if isinstance(answer.get("result"), dict) and "session_id" in answer["result"]:
                created.append(answer["result"]["session_id"])
            ws.send(json.dumps(frame))
            assert json.loads(ws.recv(timeout=30))["jsonrpc"] == "2.0"
    for session in created:
        rpc(server.url, "openenv/session/close", {"session_id": session})
    assert rpc(server.url, "tools/list")[1]["result"]["tools"][0]["name"] == "observe"


def test_mcp_sessions_obey_max_sessions():
    with ServerThread(max_sessions=2) as running:
        url = running.url
        first, second = (rpc(url, "openenv/session/create")[1]["result"]["session_id"] for _ in range(2))
        status, refused = rpc(url, "openenv/session/create", rid=3)
        assert status == 200 and refused["id"] == 3 and refused["error"]["code"] == -32000
        assert refused["error"]["data"] == {"active_sessions": 2, "max_sessions": 2}
        with connect(url.replace("http", "ws") + "/mcp") as ws:  # a WebSocket MCP session is refused at once
            refused = json.loads(ws.recv(timeout=30))
            assert refused["error"]["code"] == -32000 and refused["error"]["data"]["max_sessions"] == 2
        assert rpc(url, "openenv/session/close", {"session_id": first})[1]["result"]["closed"] is True
        third = rpc(url, "openenv/session/create")[1]["result"]["session_id"]
        assert reply_of(rpc(url, "tools/call", {"session_id": third, "name": "observe"})[1]["result"])[0].startswith(
            "Speed:")
        for session in (second, third):
            rpc(url, "openenv/session/close", {"session_id": session})
        assert "Traceback" not in running.log()


@pytest.mark.slow
def test_reclaimed_mcp_sessions_get_session_closed_errors():
    from websockets.exceptions import ConnectionClosed

    with ServerThread(max_sessions=3, session_timeout=0.5) as running:
        url = running.url
        session = rpc(url, "openenv/session/create")[1]["result"]["session_id"]
        with connect(url.replace("http", "ws") + "/mcp") as ws, connect(url.replace("http", "ws") + "/ws") as env_ws:
            import time

            time.sleep(7)  # openenv-core's reaper looks every max(timeout / 4, 5 s)
            _, answer = rpc(url, "tools/call", {"session_id": session, "name": "observe"})
            assert answer["error"]["code"] == -32602  # reclaimed: its id is gone
            ws.send(json.dumps({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "observe"}, "id": 4}))
            answer = json.loads(ws.recv(timeout=30))
            assert answer["error"]["code"] == -32000 and answer["error"]["data"] == {"code": "SESSION_CLOSED"}
            env_ws.send(json.dumps({"type": "mcp", "data": {"jsonrpc": "2.0", "method": "tools/call", "id": 5,
                                                            "params": {"name": "observe"}}}))
            answer = json.loads(env_ws.recv(timeout=30))
            assert answer["type"] == "mcp" and answer["data"]["error"]["data"] == {"code": "SESSION_CLOSED"}
            for socket in (ws, env_ws):  # the server closed both connections after the error
                with pytest.raises(ConnectionClosed):
                    socket.recv(timeout=30)
        fresh = [rpc(url, "openenv/session/create")[1]["result"]["session_id"] for _ in range(3)]  # slots free
        assert len(set(fresh)) == 3


@pytest.mark.slow
def test_openenv_validator_passes_against_a_server_process():
    from openenv.cli._validation import validate_running_environment

    proc, url = start_server()
    try:
        report = validate_running_environment(url)
        assert report["passed"], report
        assert {c["id"] for c in report["criteria"] if c["passed"]} >= {
            "openapi_version_available", "health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint",
            "mode_endpoint_consistency"}
        assert all(c["passed"] for c in report["criteria"]), report["criteria"]
        cli = subprocess.run([str(Path(sys.executable).with_name("openenv")), "validate", "--url", url],
                             capture_output=True, text=True, timeout=120)
        assert cli.returncode == 0, cli.stdout + cli.stderr
        with urllib.request.urlopen(url + "/metadata", timeout=30) as response:
            metadata = json.loads(response.read())
        assert metadata["name"] == "carla_env" and "MCP" in metadata["description"]
    finally:
        out = stop_server(proc)
    assert "Traceback" not in out
