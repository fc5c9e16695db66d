"""The navigation families (maze_navigation, free_roam*) served over the wire.

Every test drives the real client (`carla_gym.openenv.CarlaEnv`) against an in-process server and
compares with `NavEpisode` run in this process on the same seed: replies must be bit-identical.
"""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from PIL import Image
from servers import ServerThread
from test_nav_episode import aim_ego_at

from carla_gym.openenv.client import CarlaEnv
from carla_gym.openenv.models import CarlaAction, from_tool_call, to_tool_call
from carla_gym.server.app import check_options
from carla_gym.server.environment import CarlaEnvironment
from carla_gym.server.navigation import nav_image
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.navigation.scenarios import MAZE_GOAL_TOLERANCE
from carla_gym.sim.world import MAX_ROUTE_STEPS, NavigationCall, ToolCall


@pytest.fixture(scope="module")
def server_url():
    with ServerThread(max_sessions=4) as running:
        yield running.url


def _client(url: str):
    return CarlaEnv(base_url=url, message_timeout_s=60).sync()


def test_navigation_fields_travel_with_upstream_names_and_defaults():
    action = CarlaAction(action_type="set_destination", destination_x=12.5, destination_y=-3.0, destination_z=0.5)
    call = to_tool_call(action, navigation=True)
    assert isinstance(call, NavigationCall)
    assert (call.destination_x, call.destination_y, call.destination_z, call.navigation_behavior,
            call.route_steps) == (12.5, -3.0, 0.5, "normal", 1)
    assert from_tool_call(call) == action
    follow = NavigationCall("follow_route", route_steps=40, navigation_behavior="cautious")
    assert from_tool_call(follow).model_dump() == {**CarlaAction().model_dump(), "action_type": "follow_route",
                                                   "route_steps": 40, "navigation_behavior": "cautious"}
    with pytest.raises(ValueError, match="navigation action"):  # trolley sessions keep refusing them
        to_tool_call(CarlaAction(action_type="follow_route"))
    with pytest.raises(ValueError, match="route_steps"):  # the simulator's bound, below the wire model's
        to_tool_call(CarlaAction(action_type="follow_route", route_steps=MAX_ROUTE_STEPS + 1), navigation=True)
    assert type(to_tool_call(CarlaAction(action_type="observe"))) is ToolCall
    check_options("free_roam_Town10HD_Opt_v5_p3", 1, 1.0)  # `carla-gym serve --scenario` takes navigation names
    with pytest.raises(ValueError, match="Town99"):
        check_options("free_roam_Town99", 1, 1.0)


AUTOPILOT = ("free_roam_Town05_v10_p5", 1)
"""The autopilot flow's scenario and seed: the issue's acceptance scenario, a 195 m route (588 ticks)."""

LLM = ("free_roam_Town05_v10_p5", 11)
LLM_PLAN = ([("observe", {}, 1)] + [("control", dict(throttle=0.7, steer=0.02), 1)] * 20
            + [("control", dict(throttle=0.5), 5)] + [("emergency_stop", {}, 1)] * 10
            + [("maintain_speed", dict(target_speed_kmh=20.0), 10), ("brake_vehicle", dict(brake_intensity=0.5), 1)])
"""The LLM flow: (action_type, fields, metadata ticks); ticks > 1 uses the batching extension."""


def _seen(reward, rubric, done, obs) -> tuple:
    """What a client sees of one reply, from a wire observation or a `NavEpisode.observation` dict."""
    get = obs.get if isinstance(obs, dict) else lambda key: getattr(obs, key)
    return (reward, rubric, done, tuple(get("location")), tuple(get("rotation")), get("speed_kmh"),
            get("goal_distance"), get("goal_direction"), get("current_lane"), get("nearby_actors"),
            get("collision_detected"), get("collided_with"), get("simulation_time"), get("done_reason"))


def _llm_action(kind: str, fields: dict, ticks: int) -> CarlaAction:
    return CarlaAction(action_type=kind, metadata={"ticks": ticks} if ticks > 1 else {}, **fields)


def autopilot_over_the_wire(client, name: str, seed: int, route_steps: int = 20, max_calls: int = 200) -> dict:
    """Upstream's autopilot example through ``client`` (a blocking `CarlaEnv`), as upstream's code in the docs.

    init_navigation_agent "normal", set_destination from ``state().scenario_data["goal_location"]``,
    follow_route until done.
    """
    result = client.reset(scenario_name=name, seed=seed)
    seen = [_seen(result.reward, result.observation.rubric_reward, result.done, result.observation)]
    first = client.state()
    goal = first.scenario_data["goal_location"]
    calls = [CarlaAction(action_type="init_navigation_agent", navigation_behavior="normal"),
             CarlaAction(action_type="set_destination", destination_x=goal[0], destination_y=goal[1],
                         destination_z=goal[2])]
    while not result.done and len(seen) <= max_calls:
        action = calls[len(seen) - 1] if len(seen) <= len(calls) else CarlaAction(action_type="follow_route",
                                                                                   route_steps=route_steps)
        result = client.step(action)
        seen.append(_seen(result.reward, result.observation.rubric_reward, result.done, result.observation))
    return {"goal": goal, "town": first.town, "route_length": first.scenario_data["route_length"], "seen": seen,
            "state": client.state()}


def autopilot_in_process(name: str, seed: int, route_steps: int = 20, max_calls: int = 200) -> tuple[NavEpisode, dict]:
    """The same calls on a `NavEpisode` in this process (what `autopilot_over_the_wire` must reproduce)."""
    ep = NavEpisode(name, seed=seed)
    seen = [_seen(None, None, False, ep.observation())]
    goal = ep.observation()["scenario_data"]["goal_location"]
    calls = [NavigationCall("init_navigation_agent", navigation_behavior="normal"),
             NavigationCall("set_destination", destination_x=goal[0], destination_y=goal[1], destination_z=goal[2])]
    while not ep.done and len(seen) <= max_calls:
        call = calls[len(seen) - 1] if len(seen) <= len(calls) else NavigationCall("follow_route",
                                                                                 route_steps=route_steps)
        r = ep.step(call)
        seen.append(_seen(r.raw_reward, r.rubric_reward, r.done, r.observation))
    return ep, {"goal": goal, "town": ep.spec.map_name, "route_length": ep.route_length, "seen": seen}


def llm_over_the_wire(client, name: str, seed: int) -> dict:
    """Upstream's LLM flow (observe / control / emergency_stop steps, `LLM_PLAN`) through ``client``."""
    result = client.reset(scenario_name=name, seed=seed)
    seen = [_seen(result.reward, result.observation.rubric_reward, result.done, result.observation)]
    for kind, fields, ticks in LLM_PLAN:
        result = client.step(_llm_action(kind, fields, ticks))
        seen.append(_seen(result.reward, result.observation.rubric_reward, result.done, result.observation))
    return {"seen": seen, "prompt": result.observation.scene_description, "state": client.state()}


def llm_in_process(name: str, seed: int) -> tuple[NavEpisode, dict]:
    """`LLM_PLAN` on a `NavEpisode` in this process."""
    ep = NavEpisode(name, seed=seed)
    seen = [_seen(None, None, False, ep.observation())]
    for kind, fields, ticks in LLM_PLAN:
        r = ep.step(to_tool_call(_llm_action(kind, fields, ticks), navigation=True), ticks)
        seen.append(_seen(r.raw_reward, r.rubric_reward, r.done, r.observation))
    return ep, {"seen": seen, "prompt": ep.observation()["scene_description"]}


def check_autopilot_flow(client) -> None:
    """Upstream's autopilot flow over ``client`` equals the episode in process, and reaches the goal."""
    wire = autopilot_over_the_wire(client, *AUTOPILOT)
    local, mine = autopilot_in_process(*AUTOPILOT)
    assert (wire["goal"], wire["town"], wire["route_length"]) == (mine["goal"], "Town05", mine["route_length"])
    assert wire["seen"] == mine["seen"]  # every reply: rewards, done, positions, actors, collision fields
    state = wire["state"]
    outcome = state.scenario_data["outcome"]
    assert outcome == local.outcome() and outcome["success"] and outcome["route_completion"] == 1.0
    assert outcome["collisions"] == {"vehicle": 0, "walker": 0, "other": 0} and state.collisions == []
    assert wire["seen"][-1][13] == "scenario_complete" and wire["seen"][-1][6] <= 10.0
    assert state.tool_call_counts == {"init_navigation_agent": 1, "set_destination": 1,
                                      "follow_route": len(wire["seen"]) - 3}
    assert state.total_reward == pytest.approx(local.total_reward, abs=1e-12)
    assert state.total_distance == pytest.approx(local.distance_travelled, abs=1e-9)


def check_llm_flow(client) -> None:
    """Upstream's LLM flow over ``client`` equals the episode in process."""
    wire = llm_over_the_wire(client, *LLM)
    local, mine = llm_in_process(*LLM)
    assert wire["seen"] == mine["seen"] and wire["prompt"] == mine["prompt"]
    assert local.speed_kmh < 20.0  # the emergency stop and the 0.5 brake slowed the car
    state = wire["state"]
    assert state.total_reward == pytest.approx(local.total_reward, abs=1e-12) and state.step_count == len(LLM_PLAN)
    assert state.total_distance == pytest.approx(local.distance_travelled, abs=1e-9)
    assert local.distance_travelled > 1.0  # 1 s at throttle 0.7 from a standing start, then braking


def test_upstream_autopilot_flow(server_url):
    """Upstream's autopilot example (tests/test_nav_process.py runs the same over a real server process)."""
    with _client(server_url) as env:
        check_autopilot_flow(env)


def test_llm_flow_equals_the_episode_in_process(server_url):
    """Upstream's LLM flow plus the ``ticks`` batching extension (the same in tests/test_nav_process.py)."""
    with _client(server_url) as env:
        check_llm_flow(env)


def test_maze_goal_is_about_150_m_of_route_away(server_url):
    with _client(server_url) as env:
        for seed in (1, 2):
            reset = env.reset(scenario_name="maze_navigation", seed=seed)
            data = env.state().scenario_data
            assert abs(data["route_length"] - 150.0) <= MAZE_GOAL_TOLERANCE
            assert reset.observation.goal_distance <= data["route_length"] + 1e-9  # straight line <= route
            assert data["goal_location"] == list(NavEpisode("maze_navigation", seed=seed).goal)
            assert env.state().town == "Town10HD_Opt" and data["outcome"] is None


def test_capture_image_is_the_front_camera_jpeg(server_url):
    config = {"camera_width": 320, "camera_height": 200, "num_npc_vehicles": 4}
    with _client(server_url) as env:
        env.reset(scenario_name="free_roam_Town03", scenario_config=config, seed=5)
        env.step(CarlaAction(action_type="control", throttle=0.5))
        shot = env.step(CarlaAction(action_type="capture_image"))
        assert shot.reward is None and shot.observation.step_number == 1  # neither ticks nor counts
        frame = Image.open(io.BytesIO(base64.b64decode(shot.observation.camera_image)))
        assert (frame.format, frame.size) == ("JPEG", (320, 200))
        local = NavEpisode("free_roam_Town03", config, seed=5)
        local.step(NavigationCall("control", throttle=0.5))
        assert shot.observation.camera_image == nav_image(local)  # the same frame, byte for byte


_NAV = dict(scenario_name="free_roam_Town01", seed=4)
BAD_INPUTS = [  # (scenario the session runs, the bad call: ("reset", kwargs) or ("step", action), message)
    (_NAV, ("reset", dict(scenario_name="free_roam_Town99")),
     r"unknown map 'Town99', must be one of Town01, .*Town10HD_Opt"),
    (_NAV, ("reset", dict(scenario_name="free_roam", scenario_config={"map_name": "Town99"})),
     r"map_name='Town99': must be one of Town01, .*Town10HD_Opt"),
    (_NAV, ("reset", dict(scenario_name="free_roam_Town01_v101")), r"N=101 \(num_npc_vehicles\) must be in 0\.\.100"),
    (_NAV, ("reset", dict(scenario_name="free_roam_Town01_p101")), r"M=101 \(num_pedestrians\) must be in 0\.\.100"),
    (_NAV, ("reset", dict(scenario_name="free_roam", scenario_config={"num_npc_vehicles": -1})),
     r"num_npc_vehicles=-1: must be an integer in \[0, 100\]"),
    (_NAV, ("reset", dict(scenario_name="free_roam_Town02_v100")),
     r"num_npc_vehicles \(N\)=100.*must lie in \[0, 67\] for Town02"),
    (_NAV, ("reset", dict(scenario_name="free_roam_Town06_p3")), r"num_pedestrians \(M\)=3 .*takes 0 walkers"),
    (_NAV, ("reset", dict(scenario_name="free_roam_Town01", scenario_config={"goal_location": [5e3, 5e3, 0.0]})),
     r"goal_location=\(5000\.0, 5000\.0\) is .* m from the nearest lane: it must lie within 3\.5 m"),
    (_NAV, ("reset", dict(scenario_name="free_roam_Town01", scenario_config={"goal_location": [1e6, 0.0, 0.0]})),
     r"goal_location\[0\]=1000000\.0: must be a number in \[-100000\.0, 100000\.0\]"),
    (_NAV, ("step", CarlaAction.model_construct(action_type="follow_route", route_steps=0)),  # past the client
     r"route_steps=0: must be an integer in \[1, "),
    (_NAV, ("step", CarlaAction.model_construct(action_type="follow_route", route_steps=-5)),
     r"route_steps=-5: must be an integer in \[1, "),
    (_NAV, ("step", CarlaAction.model_construct(action_type="follow_route", route_steps=MAX_ROUTE_STEPS + 1)),
     rf"route_steps={MAX_ROUTE_STEPS + 1}: must be an integer in \[1, {MAX_ROUTE_STEPS}\]"),
    (_NAV, ("step", CarlaAction(action_type="set_destination", destination_x=5e3, destination_y=5e3)),
     r"set_destination \(destination_x, destination_y\)=\(5000\.0, 5000\.0\).*off the road network "
     r"\(must be within"),
    (_NAV, ("step", CarlaAction.model_construct(action_type="set_destination", destination_x=1e9, destination_y=0.0)),
     r"destination_x=1000000000\.0: must be a number in \[-1000000\.0, 1000000\.0\]"),
    (dict(scenario_name="trolley_saves", seed=4),
     ("step", CarlaAction(action_type="set_destination", destination_x=1.0, destination_y=2.0)),
     r"action_type='set_destination' is a navigation action; trolley scenarios support \('observe'"),
    (dict(scenario_name="trolley_saves", seed=4), ("step", CarlaAction(action_type="follow_route")),
     r"action_type='follow_route' is a navigation action"),
]
"""Each bad input, and what its message must say (the field and the valid range)."""


@pytest.mark.parametrize(("session", "bad", "message"), BAD_INPUTS, ids=[m[:28] for _, _, m in BAD_INPUTS])
def test_bad_inputs_get_errors_and_the_session_continues(server_url, session, bad, message):
    with _client(server_url) as env:
        env.reset(**session)
        env.step(CarlaAction(action_type="control", throttle=0.5))
        before = env.state().model_dump()
        with pytest.raises(RuntimeError, match=message):
            env.reset(**bad[1]) if bad[0] == "reset" else env.step(bad[1])
        assert env.state().model_dump() == before  # the session and its episode are intact
        after = env.step(CarlaAction(action_type="observe")).observation  # and the next valid step works
        assert after.step_number == 2 and after.scenario_name == session["scenario_name"]
        assert env.state().step_count == 2


def test_steps_after_done_are_refused_and_capture_image_still_works(server_url):
    with _client(server_url) as env:
        env.reset(scenario_name="maze_navigation", scenario_config={"max_steps": 1}, seed=2)
        done = env.step(CarlaAction(action_type="observe"))
        assert done.done and env.state().scenario_data["outcome"]["end_reason"] == "max_steps"
        with pytest.raises(RuntimeError, match="done"):
            env.step(CarlaAction(action_type="observe"))
        assert env.step(CarlaAction(action_type="capture_image")).observation.camera_image  # reading is allowed
        assert env.state().step_count == 1


@pytest.mark.parametrize("kind", ["vehicle", "walker"])
def test_collision_records_are_upstreams(kind):
    """A scripted collision (tests/test_nav_episode.py's `aim_ego_at`) gives upstream's record.

    One record per actor, its id the one nearby_actors reported, ``collided_with`` its type, ``intensity``
    the ego speed [km/h].
    """
    env = CarlaEnvironment()
    env.reset(scenario_name="free_roam_Town05_v1_p0" if kind == "vehicle" else "free_roam_Town05_v0_p1", seed=0)
    episode = env._nav  # the session's episode: place the ego 8 m behind the actor, heading at it
    if kind == "vehicle":
        v = episode.world.vehicles
        aim_ego_at(episode, (v.x[1], v.y[1]), float(v.yaw[1]))
    else:
        aim_ego_at(episode, np.asarray(episode.world.walkers.xy)[0], 0.3)
    [actor] = env.step(CarlaAction(action_type="observe")).nearby_actors
    frames = 1
    while True:
        obs = env.step(CarlaAction(action_type="control", throttle=1.0))
        frames += 1
        if obs.done:
            break
    state = env.state
    [contact] = episode.contacts
    assert state.collisions == [{"frame": frames, "actor_id": actor["id"], "actor_type": actor["type"],
                                 "intensity": obs.speed_kmh}]
    assert (contact.actor_id, contact.type_id, contact.speed_kmh) == (actor["id"], actor["type"], obs.speed_kmh)
    assert (state.collisions_count, state.collision_intensity_total) == (1, obs.speed_kmh)
    assert (obs.collision_detected, obs.collided_with) == (True, actor["type"])
    assert state.scenario_data["outcome"]["end_reason"] == "collision"


def test_the_client_model_refuses_route_steps_out_of_range_before_sending():
    """The wire model and the simulator share one bound (`carla_gym.sim.world.MAX_ROUTE_STEPS`)."""
    message = rf"route_steps={MAX_ROUTE_STEPS + 1}: must be an integer in \[1, {MAX_ROUTE_STEPS}\]"
    with pytest.raises(ValueError, match=message):
        CarlaAction(action_type="follow_route", route_steps=MAX_ROUTE_STEPS + 1)
    assert CarlaAction(action_type="follow_route", route_steps=MAX_ROUTE_STEPS).route_steps == MAX_ROUTE_STEPS


def test_an_unknown_name_lists_every_family_wherever_it_is_checked():
    """One check (`resolve_any_scenario`): a reset, the server's options and collect name every family.

    A failed reset leaves the episode as it was.
    """
    from carla_gym.collect import check_task

    env = CarlaEnvironment()
    env.reset(scenario_name="maze_navigation", seed=3)
    before = env.state.scenario_data["goal_location"]
    for check in (lambda: env.reset(scenario_name="maze_navigaton"), lambda: check_options("maze_navigaton", 1, 1.0),
                  lambda: check_task("maze_navigaton")):
        with pytest.raises(ValueError, match=r"^Unknown scenario: 'maze_navigaton'\. Valid names: trolley_micro_.*; "
                                             r"navigation: maze_navigation; free_roam; free_roam_<Map>"):
            check()
    assert env.state.scenario_data["goal_location"] == before
    env.close()
