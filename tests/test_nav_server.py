"""The navigation families (maze_navigation, free_roam*) served over the wire (issue 14 section 6).

Every test drives the real client (`carla_gym.openenv.CarlaEnv`) against an in-process server and
compares with `NavEpisode` run in this process on the same seed: replies must be bit-identical.
"""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image
from servers import ServerThread

from carla_gym.openenv.client import CarlaEnv
from carla_gym.openenv.models import CarlaAction, from_tool_call, to_tool_call
from carla_gym.openenv.navigation import nav_image
from carla_gym.openenv.server import check_options
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


def test_upstream_autopilot_flow(server_url):
    """Upstream's autopilot example: agent, destination from the goal, follow_route(20) until done."""
    name, seed = "free_roam_Town02_v5_p3", 11  # a 102 m route: a short test
    local = NavEpisode(name, seed=seed)
    with _client(server_url) as env:
        reset = env.reset(scenario_name=name, seed=seed)
        assert reset.observation.location == local.observation()["location"]
        state = env.state()
        goal = state.scenario_data["goal_location"]
        assert goal == list(local.goal) and state.town == "Town02"
        assert state.scenario_data["route_length"] == local.route_length
        assert len(reset.observation.nearby_actors) == len(local.nearby_actors())
        calls = [CarlaAction(action_type="init_navigation_agent", navigation_behavior="normal"),
                 CarlaAction(action_type="set_destination", destination_x=goal[0], destination_y=goal[1],
                             destination_z=goal[2])]
        result = None
        for step in range(200):
            action = calls[step] if step < len(calls) else CarlaAction(action_type="follow_route", route_steps=20)
            result = env.step(action)
            mine = local.step(to_tool_call(action, navigation=True))
            assert (result.reward, result.done) == (mine.raw_reward, mine.done)
            assert result.observation.location == tuple(mine.observation["location"])
            if result.done:
                break
        outcome = env.state().scenario_data["outcome"]
        assert outcome == local.outcome() and outcome["success"] and outcome["route_completion"] == 1.0
        assert outcome["collisions"] == {"vehicle": 0, "walker": 0, "other": 0}
        assert result.observation.done_reason == "scenario_complete" and result.observation.goal_distance <= 10.0
        assert env.state().tool_call_counts == {"init_navigation_agent": 1, "set_destination": 1,
                                                "follow_route": step - 1}


def test_llm_flow_equals_the_episode_in_process(server_url):
    """Upstream's LLM flow (observe / control / emergency_stop), plus the ``ticks`` batching extension."""
    name, seed = "free_roam_Town05_v10_p5", 11
    local = NavEpisode(name, seed=seed)
    plan = ([("observe", {}, 1)] + [("control", dict(throttle=0.7, steer=0.02), 1)] * 20
            + [("control", dict(throttle=0.5), 5)] + [("emergency_stop", {}, 1)] * 10
            + [("maintain_speed", dict(target_speed_kmh=20.0), 10), ("brake_vehicle", dict(brake_intensity=0.5), 1)])
    with _client(server_url) as env:
        reset = env.reset(scenario_name=name, seed=seed)
        assert reset.observation.scene_description == local.observation()["scene_description"]
        total = 0.0
        for kind, fields, ticks in plan:
            action = CarlaAction(action_type=kind, metadata={"ticks": ticks} if ticks > 1 else {}, **fields)
            result = env.step(action)
            mine = local.step(to_tool_call(action, navigation=True), ticks)
            obs, expected = result.observation, mine.observation
            total += mine.raw_reward
            assert (result.reward, obs.rubric_reward, result.done) == (mine.raw_reward, mine.rubric_reward, mine.done)
            assert (obs.location, obs.rotation) == (tuple(expected["location"]), tuple(expected["rotation"]))
            assert (obs.speed_kmh, obs.goal_distance, obs.goal_direction, obs.current_lane) == (
                expected["speed_kmh"], expected["goal_distance"], expected["goal_direction"], expected["current_lane"])
            assert obs.nearby_actors == expected["nearby_actors"]
            assert (obs.collision_detected, obs.collided_with) == (expected["collision_detected"],
                                                                  expected["collided_with"])
            assert obs.simulation_time == expected["simulation_time"]
        assert local.speed_kmh < 20.0  # the emergency stop and the 0.5 brake slowed the car
        state = env.state()
        assert state.total_reward == pytest.approx(total, abs=1e-12) and state.step_count == len(plan)
        assert state.total_distance == pytest.approx(local.distance_travelled, abs=1e-9)
        assert local.distance_travelled > 1.0  # 1 s at throttle 0.7 from a standing start, then braking


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


def test_bad_inputs_get_errors_and_the_session_continues(server_url):
    with _client(server_url) as env:
        with pytest.raises(RuntimeError, match="Town99"):
            env.reset(scenario_name="free_roam_Town99")
        with pytest.raises(RuntimeError, match="follow_route"):  # trolley scenarios still refuse navigation
            env.reset(scenario_name="trolley_saves")
            env.step(CarlaAction(action_type="follow_route"))
        first = env.reset(scenario_name="free_roam_Town01", seed=4).observation
        with pytest.raises(RuntimeError, match="route_steps"):
            env.step(CarlaAction(action_type="follow_route", route_steps=MAX_ROUTE_STEPS + 1))
        with pytest.raises(RuntimeError, match="destination_x"):
            env.step(CarlaAction(action_type="set_destination", destination_x=5e4, destination_y=5e4))
        with pytest.raises(RuntimeError, match="free_roam_Town01"):  # the map name and its bounds
            env.reset(scenario_name="free_roam_Town01_v101")
        after = env.step(CarlaAction(action_type="observe")).observation
        assert after.step_number == 1 and after.scenario_name == "free_roam_Town01"  # the errors changed nothing
        assert after.location == first.location  # standing start, one tick
        env.reset(scenario_name="maze_navigation", scenario_config={"max_steps": 1}, seed=2)
        done = env.step(CarlaAction(action_type="observe"))
        assert done.done and env.state().scenario_data["outcome"]["end_reason"] == "max_steps"
        with pytest.raises(RuntimeError, match="done"):
            env.step(CarlaAction(action_type="observe"))
        assert env.step(CarlaAction(action_type="capture_image")).observation.camera_image  # reading is allowed
        assert env.state().step_count == 1
