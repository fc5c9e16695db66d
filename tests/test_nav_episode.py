"""NavEpisode: reset, the 10 upstream actions, observation, rewards and bad input (issue 14)."""

import copy

import numpy as np
import pytest

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import EgoState, step_ego
from carla_gym.sim.navigation import rules
from carla_gym.sim.navigation.episode import NavEpisode, lane_index
from carla_gym.sim.navigation.scenarios import MAZE_GOAL_TOLERANCE
from carla_gym.sim.world import EpisodeFinishedError, NavigationCall, ToolCall, World

A = NavigationCall


def _state(ep: NavEpisode):
    return (copy.deepcopy(ep.world.state_arrays()), ep.steps, ep.ticks, ep.behavior, ep.destination,
            copy.deepcopy(ep.controls), ep.total_reward)


def _same(a, b):
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        np.testing.assert_array_equal(a[0][k], b[0][k])
    assert a[1:] == b[1:]


def test_reset_determinism_same_seed_same_goal_and_arrays():
    script = [A("control", throttle=0.6, steer=0.05), A("observe"), A("maintain_speed", target_speed_kmh=20),
              A("emergency_stop"), A("brake_vehicle", brake_intensity=0.3)]
    runs = []
    for _ in range(2):
        ep = NavEpisode("free_roam_Town05_v10_p5", seed=7)
        for i in range(50):
            if ep.done:
                break
            ep.step(script[i % len(script)])
        runs.append((ep.goal, ep.weather, ep.world.state_arrays(), ep.total_reward))
    assert runs[0][:2] == runs[1][:2]
    for k in runs[0][2]:
        np.testing.assert_array_equal(runs[0][2][k], runs[1][2][k])
    assert runs[0][3] == runs[1][3]
    assert NavEpisode("free_roam_Town05_v10_p5", seed=8).goal != runs[0][0]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_maze_goal_about_150_m_of_route(seed):
    ep = NavEpisode("maze_navigation", seed=seed)
    assert abs(ep.route_length - 150.0) <= MAZE_GOAL_TOLERANCE
    obs = ep.observation()
    assert obs["scenario_data"]["goal_location"] == list(ep.goal)
    assert obs["goal_distance"] <= ep.route_length + 1e-9  # straight line never exceeds the route


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_autopilot_flow_reaches_goal(seed):
    ep = NavEpisode("free_roam_Town02_v5_p3", seed=seed)
    assert ep.step(A("init_navigation_agent", navigation_behavior="normal")).ticks == 1
    g = ep.observation()["scenario_data"]["goal_location"]
    ep.step(A("set_destination", destination_x=g[0], destination_y=g[1], destination_z=g[2]))
    while not ep.done:
        result = ep.step(A("follow_route", route_steps=20))
        assert 1 <= result.ticks <= 20
    out = ep.observation()["scenario_data"]["outcome"]
    assert out["success"] and out["end_reason"] == "goal_reached" and out["route_completion"] == 1.0
    assert out["collisions"] == {"vehicle": 0, "walker": 0, "other": 0}
    assert ep.observation()["done_reason"] == rules.DONE_REASON
    with pytest.raises(EpisodeFinishedError, match="done"):
        ep.step(A("observe"))


def test_follow_route_without_agent_runs_no_tick():
    ep = NavEpisode("free_roam_Town02", seed=0)
    before = ep.world.state_arrays()
    r = ep.step(A("follow_route", route_steps=50))
    assert r.ticks == 0 and ep.steps == 1 and r.raw_reward == pytest.approx(rules.TIME_COST)
    for k, v in before.items():
        np.testing.assert_array_equal(v, ep.world.state_arrays()[k])


def test_llm_flow_control_persists_and_emergency_stop_closed_form():
    ep = NavEpisode("free_roam_Town02", seed=3)
    ego = EgoState(float(ep.world.vehicles.x[0]), float(ep.world.vehicles.y[0]), float(ep.world.vehicles.yaw[0]),
                   0.0)
    wb = float(ep.world.vehicles.wheelbase[0])
    ep.step(A("control", throttle=1.0))
    for _ in range(19):
        ep.step(A("observe"))  # the control persists
    for _ in range(20):
        ego = step_ego(ego, 1.0, 0.0, 0.0, wheelbase=wb)
    assert ep.speed_kmh == pytest.approx(ego.speed * C.KMH_PER_MS, rel=1e-9)
    assert ep.speed_kmh == pytest.approx(20 * C.DT * C.MAX_ACCELERATION * C.KMH_PER_MS, rel=1e-9)
    v0 = ep.world.vehicles.speed[0]
    ep.step(A("emergency_stop"))
    assert ep.world.vehicles.speed[0] == pytest.approx(max(v0 - C.MAX_DECELERATION * C.DT, 0.0), rel=1e-9)
    n = int(np.ceil(v0 / (C.MAX_DECELERATION * C.DT)))
    ep.step(A("observe"), ticks=n)
    assert ep.speed_kmh == 0.0 and ep.controls.brake == 1.0 and ep.controls.throttle == 0.0


def test_lane_change_onto_neighbour_centre_and_refusal():
    ep = NavEpisode("free_roam_Town05", seed=0)
    town = ep.world.town
    lane = town.lanes[ep.world.ego_location.lane]
    side = "left" if lane.left >= 0 else "right"
    other = "right" if side == "left" else "left"
    target = lane.left if side == "left" else lane.right
    ep.step(A("maintain_speed", target_speed_kmh=30))
    ep.step(A("observe"), ticks=40)
    ep.step(A("lane_change", lane_direction=side.upper()))
    ep.step(A("observe"), ticks=80)
    assert abs(ep.track_offset()) < 0.2
    assert ep.world.ego_location.lane in (target, *town.lanes[target].successors)
    assert ep.lane_name() == f"lane_{lane_index(town, ep.world.ego_location.lane)}"
    now = town.lanes[ep.world.ego_location.lane]
    assert getattr(now, other) >= 0  # the lane it left is the neighbour on the other side
    if getattr(now, side) < 0:  # a two-lane road: the same direction again is refused
        before = _state(ep)
        with pytest.raises(ValueError, match=f"no same-direction neighbour on the {side}"):
            ep.step(A("lane_change", lane_direction=side))
        _same(before, _state(ep))


def test_lane_change_refused_on_single_lane_road():
    ep = NavEpisode("free_roam_Town02", seed=0)
    lane = ep.world.town.lanes[ep.world.ego_location.lane]
    assert lane.left < 0 and lane.right < 0
    before = _state(ep)
    with pytest.raises(ValueError, match=rf"lane {lane.id} \(lane_0\).*no same-direction neighbour on the left"):
        ep.step(A("lane_change", lane_direction="left"))
    with pytest.raises(ValueError, match=r"target_lane_id='lane_2'.*lane_-1, lane_0 or lane_1"):
        ep.step(A("lane_change", target_lane_id="lane_2"))
    _same(before, _state(ep))


def test_rewards_of_scripted_episode_exact():
    ep = NavEpisode("free_roam_Town02", seed=1)
    d0 = ep.initial_distance
    ep.step(A("init_navigation_agent"))
    g = ep.goal
    ep.step(A("set_destination", destination_x=g[0], destination_y=g[1]))
    rewards = []
    while not ep.done:
        rewards.append(ep.step(A("follow_route", route_steps=25)).raw_reward)
    progress = (d0 - ep.goal_distance()) / d0  # progress terms telescope to (initial - final) / initial
    assert ep.total_reward == pytest.approx(progress + ep.steps * rules.TIME_COST + rules.ARRIVAL_BONUS, abs=1e-9)
    assert sum(r > 5 for r in rewards) == 1 and rewards[-1] > 5  # the arrival bonus once, on the last step


def test_section7_errors_name_field_and_leave_episode_unchanged():
    ep = NavEpisode("free_roam_Town02_v3", seed=2)
    ep.step(A("control", throttle=0.5))
    before = _state(ep)
    for kwargs, match in [(dict(action_type="follow_route", route_steps=0), r"route_steps=0.*\[1, 10000\]"),
                          (dict(action_type="follow_route", route_steps=10**6), "route_steps"),
                          (dict(action_type="set_destination", destination_x=1e9, destination_y=0.0),
                           "destination_x")]:
        with pytest.raises(ValueError, match=match):
            ep.step(A(**kwargs))
    with pytest.raises(ValueError, match=r"set_destination.*off the road network"):
        ep.step(A("set_destination", destination_x=5000.0, destination_y=5000.0))
    with pytest.raises(ValueError, match="ticks=-1"):
        ep.step(A("observe"), ticks=-1)
    _same(before, _state(ep))
    with pytest.raises(ValueError, match="navigation action"):
        ToolCall("set_destination")
    world = World(__import__("carla_gym.sim.scenarios", fromlist=["resolve_scenario"]).resolve_scenario(
        "trolley_saves"))
    with pytest.raises(ValueError, match="navigation action"):
        world.apply(A("follow_route"))
    assert world.tick_count == 0


def test_unknown_behaviour_is_basic_agent_and_capture_image_no_tick():
    ep = NavEpisode("free_roam_Town02", seed=4)
    ep.step(A("init_navigation_agent", navigation_behavior="speedy"))
    ep.step(A("set_destination", destination_x=ep.goal[0], destination_y=ep.goal[1]))
    assert ep.world.agent.name == "basic" and ep.world.agent.target_speed_kmh == 20.0
    ticks = ep.ticks
    r = ep.step(A("capture_image"))
    assert r.ticks == 0 and ep.ticks == ticks and r.raw_reward == 0.0


def test_max_steps_counts_actions_not_ticks():
    ep = NavEpisode("free_roam_Town02", {"max_steps": 3}, seed=1)
    ep.step(A("init_navigation_agent"))
    ep.step(A("capture_image"))  # not a step (upstream)
    ep.step(A("set_destination", destination_x=ep.goal[0], destination_y=ep.goal[1]))
    assert ep.steps == 2 and not ep.done and ep.world.agent.name == "normal"
    r = ep.step(A("follow_route", route_steps=40))  # 40 ticks, one step: the third
    assert r.ticks == 40 and ep.steps == 3 and ep.ticks == 42
    assert r.done and ep.reason == "max_steps"
    ep = NavEpisode("free_roam_Town02", {"max_steps": 3}, seed=1)
    ep.step(A("observe"), ticks=2)  # the ticks batching: each tick is one step
    assert ep.steps == 2 and not ep.done
    assert ep.step(A("observe"), ticks=5).ticks == 1 and ep.reason == "max_steps"


def test_init_navigation_agent_forgets_the_destination():
    ep = NavEpisode("free_roam_Town02", seed=4)
    ep.step(A("set_destination", destination_x=ep.goal[0], destination_y=ep.goal[1]))
    assert ep.world.route is not None and ep.world.agent.name == "normal"
    ep.step(A("init_navigation_agent", navigation_behavior="aggressive"))
    assert ep.destination is None and ep.world.route is None and ep.world.agent is None
    assert ep.step(A("follow_route", route_steps=10)).ticks == 0  # no destination: no tick (upstream)
