"""Navigation scenario names, configs, goal placement, observation fields, text, rewards and outcome."""

import html
from pathlib import Path

import numpy as np
import pytest

from carla_gym.sim import constants as C
from carla_gym.sim.navigation import describe as D
from carla_gym.sim.navigation import rules as R
from carla_gym.sim.navigation import scenarios as S
from carla_gym.sim.scenarios import IGNORED_KEYS, WEATHER_PRESETS


@pytest.mark.parametrize("name, family, map_name, n, m", [
    ("maze_navigation", "maze_navigation", "Town10HD_Opt", 0, 0),
    ("free_roam", "free_roam", "Town10HD_Opt", 0, 0),
    ("free_roam_Town05", "free_roam", "Town05", 0, 0),
    ("free_roam_Town01_v3", "free_roam", "Town01", 3, 0),
    ("free_roam_Town02_p7", "free_roam", "Town02", 0, 7),
    ("free_roam_Town10HD_Opt_v5_p3", "free_roam", "Town10HD_Opt", 5, 3),
    ("free_roam_Town10HD_v100_p100", "free_roam", "Town10HD", 100, 100),
    ("free_roam_Town07_v05", "free_roam", "Town07", 5, 0),
])
def test_valid_names(name, family, map_name, n, m):
    spec = S.resolve_nav_scenario(name)
    assert (spec.family, spec.map_name, spec.num_npc_vehicles, spec.num_pedestrians) == (family, map_name, n, m)
    assert S.is_nav_name(name)


@pytest.mark.parametrize("name, message", [
    ("free_roam_Town05_v101", "N=101 (num_npc_vehicles) must be in 0..100"),
    ("free_roam_Town05_v1_p101", "M=101 (num_pedestrians) must be in 0..100"),
    ("free_roam_Town99", "unknown map 'Town99'"),
    ("free_roam_Town05_p3_v2", "unknown map 'Town05_p3'"),  # _v must come before _p, as upstream
    ("free_roam_", "not a navigation scenario name"),
    ("free_roam_Town05_v-1", "not a navigation scenario name"),
    ("maze", "not a navigation scenario name"),
])
def test_invalid_names(name, message):
    with pytest.raises(ValueError, match="Valid names:") as err:
        S.resolve_nav_scenario(name)
    assert message in str(err.value)


def test_name_type():
    with pytest.raises(TypeError):
        S.parse_nav_name(3)


def test_defaults_as_upstream():
    maze = S.resolve_nav_scenario("maze_navigation")
    assert (maze.success_radius, maze.goal_distance, maze.max_steps) == (5.0, 150.0, 200)
    roam = S.resolve_nav_scenario("free_roam")
    assert (roam.success_radius, roam.route_distance_min, roam.route_distance_max, roam.max_steps) == (
        10.0, 100.0, 500.0, 500)
    assert roam.goal_distance is None and roam.random_goal and roam.goal_location is None
    assert S.FREE_ROAM_PRESETS == {"default": (0, 0), "traffic": (5, 3), "heavy": (15, 10)}
    assert set(S.NAV_IGNORED_KEYS) <= set(IGNORED_KEYS)


def test_overrides_win_over_name():
    spec = S.resolve_nav_scenario("free_roam_Town05_v2_p1", {
        "num_npc_vehicles": 15, "num_pedestrians": 10, "map_name": "Town03", "success_radius": 4,
        "route_distance_min": 50, "route_distance_max": 60, "max_steps": 9, "weather": "random",
        "description": "x", "vehicle_blueprint": "vehicle.lincoln.mkz"})
    assert (spec.num_npc_vehicles, spec.num_pedestrians, spec.map_name, spec.success_radius) == (15, 10, "Town03", 4.0)
    assert (spec.route_distance_min, spec.route_distance_max, spec.max_steps, spec.weather) == (50.0, 60.0, 9, "random")
    assert spec.ignored == ("description",)
    fixed = S.resolve_nav_scenario("free_roam", {"goal_location": [1, 2]})
    assert fixed.goal_location == (1.0, 2.0, 0.0) and not fixed.random_goal
    assert S.resolve_nav_scenario("free_roam", {"goal_location": [1, 2, 3], "random_goal": False}).goal_location == (
        1.0, 2.0, 3.0)
    assert S.resolve_nav_scenario("maze_navigation", {"goal_distance": 80}).goal_distance == 80.0


@pytest.mark.parametrize("name, config, message", [
    ("free_roam", {"num_npc_vehicles": 101}, r"num_npc_vehicles=101: must be an integer in \[0, 100\]"),
    ("free_roam", {"num_pedestrians": -1}, r"num_pedestrians=-1: must be an integer in \[0, 100\]"),
    ("free_roam", {"num_pedestrians": 2.5}, "num_pedestrians=2.5"),
    ("free_roam", {"success_radius": 0}, r"success_radius=0: must be a number in \[0.5, 100.0\]"),
    ("free_roam", {"route_distance_min": 600}, "route_distance_min=600.0 must not exceed route_distance_max=500.0"),
    ("free_roam", {"route_distance_max": 1e9}, r"route_distance_max=1000000000.0: must be a number in \[10.0, 5000"),
    ("free_roam", {"max_steps": 0}, r"max_steps=0: must be an integer in \[1, 100000\]"),
    ("free_roam", {"map_name": "Town11"}, "map_name='Town11': must be one of Town01"),
    ("free_roam", {"weather": "Sunny"}, "weather='Sunny': choose one of"),
    ("free_roam", {"goal_location": [1]}, r"goal_location=\[1\]: must be \[x, y\]"),
    ("free_roam", {"goal_location": [1, float("nan")]}, "goal_location"),
    ("free_roam", {"goal_location": [1, 2], "random_goal": True}, "random_goal=True contradicts goal_location"),
    ("free_roam", {"random_goal": False}, "random_goal=False needs a goal_location"),
    ("free_roam", {"random_goal": "no"}, "random_goal='no': must be true or false"),
    ("free_roam", {"goal_distance": 100}, "not valid for free_roam"),
    ("maze_navigation", {"num_npc_vehicles": 3}, "not valid for maze_navigation"),
    ("maze_navigation", {"goal_distance": 5}, r"goal_distance=5: must be a number in \[10.0, 5000.0\]"),
    ("maze_navigation", {"auto_observe": 1}, "auto_observe=1: must be true or false"),
])
def test_override_refusals(name, config, message):
    with pytest.raises(ValueError, match=message):
        S.resolve_nav_scenario(name, config)


def test_pick_weather_random_is_seeded():
    picks = [S.pick_weather("random", np.random.default_rng(7)) for _ in range(3)]
    assert picks[0] == picks[1] == picks[2] and picks[0] in WEATHER_PRESETS
    assert {S.pick_weather("random", np.random.default_rng(s)) for s in range(60)} == set(WEATHER_PRESETS)
    assert S.pick_weather("WetNoon", np.random.default_rng(0)) == "WetNoon"


def test_place_goal_free_roam_uniform_in_range():
    spec = S.resolve_nav_scenario("free_roam")
    d = np.array([50.0, 100.0, 300.0, 500.0, 501.0, np.inf, np.nan])
    first = S.place_goal(spec, d, np.random.default_rng(3))
    assert first == S.place_goal(spec, d, np.random.default_rng(3))
    counts = np.bincount([S.place_goal(spec, d, np.random.default_rng(s)).index for s in range(600)], minlength=7)
    assert counts[[0, 4, 5, 6]].tolist() == [0, 0, 0, 0]
    assert counts[[1, 2, 3]].min() > 150  # each of the 3 in-range candidates about 200 times
    assert S.place_goal(spec, [20.0, 60.0, np.inf], np.random.default_rng(0)) == S.GoalChoice(1, 60.0, False)


def test_place_goal_maze_about_150():
    spec = S.resolve_nav_scenario("maze_navigation")
    d = np.array([100.0, 134.9, 135.0, 165.0, 165.1, 300.0])
    picks = {S.place_goal(spec, d, np.random.default_rng(s)).index for s in range(50)}
    assert picks == {2, 3}
    assert S.place_goal(spec, [40.0, 170.0, 400.0], np.random.default_rng(0)) == S.GoalChoice(1, 170.0, False)
    with pytest.raises(ValueError, match="no reachable goal candidate among 2"):
        S.place_goal(spec, [np.inf, 0.0], np.random.default_rng(0))
    with pytest.raises(ValueError, match="check_goal_location"):
        S.place_goal(S.resolve_nav_scenario("free_roam", {"goal_location": [0, 0]}), d, np.random.default_rng(0))


def test_check_goal_location():
    assert S.check_goal_location([3, 4], lane_distance=3.5, route_distance=120.0) == (3.0, 4.0, 0.0)
    with pytest.raises(ValueError, match=r"goal_location=\(3.0, 4.0\) is 3.6 m from the nearest lane: it must lie "
                                         r"within 3.5 m of the road network"):
        S.check_goal_location([3, 4], lane_distance=3.6, route_distance=120.0)
    with pytest.raises(ValueError, match="cannot be reached"):
        S.check_goal_location([3, 4], lane_distance=0.0, route_distance=np.inf)


@pytest.mark.parametrize("bearing_deg, expected", [
    (0, "forward"), (-45, "forward"), (45, "right"), (90, "right"), (135, "behind"), (180, "behind"),
    (-135, "left"), (-90, "left"), (-44, "forward"), (44, "forward"), (134, "right"), (-136, "behind"),
])
def test_goal_direction_boundaries(bearing_deg, expected):
    exact = {0: (1, 0), -45: (1, -1), 45: (1, 1), 90: (0, 1), 135: (-1, 1), 180: (-1, 0), -135: (-1, -1),
             -90: (0, -1)}
    a = np.radians(bearing_deg)
    goal = exact.get(bearing_deg, (np.cos(a), np.sin(a)))
    assert D.goal_direction(np.zeros(2), 0.0, np.array(goal, dtype=float)) == expected


def test_goal_direction_relative_to_heading_and_batched():
    ego = np.array([[10.0, 10.0], [0.0, 0.0], [5.0, 5.0]])
    yaw = np.array([np.pi / 2, np.pi, 0.0])
    goal = np.array([[10.0, 30.0], [0.0, 5.0], [5.0, 5.0]])
    # heading +y, goal +y: forward; heading -x, goal +y: +y is on the left of -x; goal at the ego: forward
    assert D.goal_direction_index(ego, yaw, goal).tolist() == [0, 3, 0]
    assert D.goal_distance(ego, goal).tolist() == [20.0, 5.0, 0.0]


def test_current_lane():
    assert [D.current_lane(0), D.current_lane(2), D.current_lane(None)] == ["lane_0", "lane_2", "unknown"]
    with pytest.raises(ValueError, match="lane_index=-1: must be >= 0"):
        D.current_lane(-1)


def test_nearby_actors():
    xyz = np.array([[30.0, 0.0, 0.0], [-3.0, 4.0, 0.0], [0.0, 60.0, 0.0], [1.0, 0.0, 0.0], [0.0, 50.0, 0.0]])
    types = ["vehicle.tesla.model3", "walker.pedestrian.0001", "vehicle.audi.tt", "static.prop", "walker.x"]
    out = D.nearby_actors(np.zeros(3), 0.0, xyz, [11, 12, 13, 14, 15], types)
    assert out == [
        {"type": "walker.pedestrian.0001", "id": 12, "distance": 5.0, "position": "behind"},
        {"type": "vehicle.tesla.model3", "id": 11, "distance": 30.0, "position": "ahead"},
        {"type": "walker.x", "id": 15, "distance": 50.0, "position": "behind"},
    ]
    with pytest.raises(ValueError, match="same length"):
        D.nearby_actors(np.zeros(3), 0.0, xyz, [1], types)


def test_scene_description_text():
    assert D.scene_description(S.resolve_nav_scenario("maze_navigation")) == (
        "You drive a car in a maze of city streets.\n\n"
        "Goal: get within 5.0m of the destination.\n\n"
        "Tools:\n"
        "- observe(): look again without acting\n"
        "- control_vehicle(throttle, steer): drive by hand\n"
        "- init_navigation_agent(behavior): switch on the autopilot\n"
        "- set_destination(x, y, z): give the autopilot its destination\n"
        "- follow_route(steps): let the autopilot drive for some steps\n")
    roam = D.scene_description(S.resolve_nav_scenario("free_roam_Town05", {"success_radius": 7}))
    assert roam.startswith("You drive a car freely through a town with traffic.\n\nGoal: get within 7.0m of")
    assert roam.endswith("- emergency_stop(): brake as hard as possible\n") and roam.count("\n- ") == 7


def test_end_reason_order():
    spec = S.resolve_nav_scenario("free_roam", {"max_steps": 5})
    assert R.end_reason(spec, 1, 10.0, False) is None  # strict: 10 m is not within 10 m
    assert R.end_reason(spec, 1, 9.99, False) == "goal_reached"
    assert R.end_reason(spec, 1, 9.99, True) == "collision"
    assert R.end_reason(spec, 5, 50.0, False) == "max_steps"
    assert R.end_reason(spec, 5, 5.0, False) == "goal_reached"
    assert R.is_truncation("max_steps") and not R.is_truncation("goal_reached") and not R.is_truncation(None)


def _run(spec, distances, collide_at=None):
    """Rewards of a hand-made trajectory of goal distances, following the end rules."""
    rewards, done = [], False
    initial = distances[0]
    for step in range(1, len(distances)):
        collided = step == collide_at
        reason = None if done else R.end_reason(spec, step, distances[step], collided)
        rewards.append(float(R.raw_reward(spec.family, distances[step - 1], distances[step], initial,
                                          arrived=reason == "goal_reached", collided=collided and not done,
                                          was_done=done)))
        done = done or reason is not None
    return rewards


def test_free_roam_rewards_arrival_paid_once():
    spec = S.resolve_nav_scenario("free_roam")
    rewards = _run(spec, [200.0, 150.0, 100.0, 9.0, 9.0, 0.0])
    assert rewards == [0.25 - 0.01, 0.25 - 0.01, 91.0 / 200.0 - 0.01 + 10.0, 0.0, 0.0]


def test_free_roam_collision_penalty_once():
    spec = S.resolve_nav_scenario("free_roam")
    assert _run(spec, [100.0, 100.0, 90.0, 90.0], collide_at=2) == [-0.01, 0.1 - 0.01 - 5.0, 0.0]


def test_maze_rewards():
    spec = S.resolve_nav_scenario("maze_navigation")
    assert _run(spec, [150.0, 100.0, 4.0, 4.0]) == [0.0, 1.0, 0.0]
    assert _run(spec, [150.0, 100.0, 90.0], collide_at=1) == [-1.0, 0.0]


def test_raw_reward_batched_and_errors():
    r = R.raw_reward("free_roam", np.array([10.0, 10.0]), np.array([5.0, 5.0]), np.array([0.0, 10.0]),
                     arrived=[True, False], collided=[False, True], was_done=[False, False])
    assert r.tolist() == [5.0 - 0.01 + 10.0, 0.5 - 0.01 - 5.0]
    assert R.raw_reward("maze_navigation", np.zeros((2, 3)), 0.0, 1.0).shape == (2, 3)
    assert R.rubric_reward(-0.01) == -0.01
    with pytest.raises(ValueError, match="family='trolley'"):
        R.raw_reward("trolley", 1.0, 1.0, 1.0)


def test_outcome():
    spec = S.resolve_nav_scenario("free_roam_Town05_v1", {"weather": "WetNoon"})
    out = R.outcome(spec, reason="collision", steps=3, goal_dist=42.0, initial_route=200.0, remaining_route=50.0,
                    distance_travelled=151.5, collided_types=["vehicle.audi.tt", "walker.pedestrian.0002",
                                                              "static.pole", "vehicle.bmw"], total_reward=-4.2)
    assert out == {
        "scenario": "free_roam_Town05_v1", "family": "free_roam", "success": False, "end_reason": "collision",
        "goal_reached": False, "collision": True, "collisions": {"vehicle": 2, "walker": 1, "other": 1},
        "goal_distance": 42.0, "route_distance_total": 200.0, "route_distance_remaining": 50.0,
        "route_completion": 0.75, "distance_travelled": 151.5, "time": 3 * C.DT, "steps": 3, "reward": -4.2,
        "map_name": "Town05", "weather": "WetNoon"}
    done = R.outcome(spec, reason="goal_reached", steps=1, goal_dist=1.0, initial_route=100.0, remaining_route=-2.0,
                     distance_travelled=0.0, collided_types=[], total_reward=0.0)
    assert (done["success"], done["route_completion"], done["collision"]) == (True, 1.0, False)
    with pytest.raises(ValueError, match="initial_route=0.0: must be > 0 m"):
        R.outcome(spec, reason=None, steps=0, goal_dist=1.0, initial_route=0.0, remaining_route=0.0,
                  distance_travelled=0.0, collided_types=[], total_reward=0.0)


def test_differences_name_upstream_files():
    assert len(R.DIFFERENCES) >= 10
    for ref, upstream, here in R.DIFFERENCES:
        assert ref in R.UPSTREAM_FILES, ref
        assert upstream and here and upstream != here
    files = {ref for ref, _, _ in R.DIFFERENCES}
    # the maze goal, the free-roam map names, weather and rewards, the observation fields: each names its file
    assert {"server/benchmark_scenarios/maze.py", "server/benchmark_scenarios/__init__.py",
            "server/benchmark_scenarios/free_roam.py", "server/carla_environment.py"} <= files
    assert files <= set(R.UPSTREAM_FILES) and R.UPSTREAM_URL.startswith("https://github.com/meta-pytorch/OpenEnv/")
    assert not {"README", "B" "4", "maze.py"} & set(R.UPSTREAM_FILES)


def test_design_page_differences_table_is_the_constant():
    page = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    section = page[page.index("\n## Navigation\n"):]
    table = section[section.index("| Upstream | Here | Upstream file |"):].split("\n\n")[0].splitlines()[2:]
    rows = []
    for line in table:
        upstream, here, link = (html.unescape(cell.strip()) for cell in line.strip("|").split(" | "))
        rows.append((link.split("](")[1].rstrip(")").removeprefix(R.UPSTREAM_URL), upstream, here))
    assert rows == [tuple(row) for row in R.DIFFERENCES] and len(rows) > 0