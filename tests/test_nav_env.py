"""CarlaNavigation-v0 (issue 15 foundation) and VLM-RL's route rules (carla_gym.sim.navigation.route_task)."""

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import carla_gym  # noqa: F401 - registers the ids
from carla_gym.envs.navigation import STATE_SIZE, CarlaNavigationEnv
from carla_gym.sim.navigation import route_task as R


@pytest.mark.parametrize(("v", "expected"), [(0, 0.0), (10, 0.5), (20, 1.0), (25, 1.0), (30, 0.5), (35, 0.0)])
def test_speed_reward_corners(v, expected):
    assert float(R.speed_reward(v)) == pytest.approx(expected)


def test_centering_is_zero_off_the_route():
    wp = np.stack([np.arange(10.0), np.zeros(10)], axis=1)
    # 1.2 m right of the route: 1 - 1.2/3 = 0.6
    assert float(R.centering_factor(R.route_distance(wp, 3, (3.5, 1.2)))) == pytest.approx(0.6)
    # 20 m off the route (say, on another road): 0, not the value of some nearby lane
    assert float(R.centering_factor(R.route_distance(wp, 3, (3.5, -20.0)))) == 0.0
    assert R.route_distance(wp, 9, (12.0, 2.0)) == pytest.approx(2.0)  # past the end: the last segment's line


def test_angle_rules():
    assert R.route_angle(0.0, math.pi / 4, 5.0) == pytest.approx(0.79)  # rounded to 0.01 rad
    assert float(R.angle_factor(R.route_angle(0.0, math.pi / 4, 5.0))) == pytest.approx(1 - 0.79 / (math.pi / 2))
    assert R.route_angle(0.0, 1.0, 0.0) == 0.0  # standing: VLM-RL's helper returns 0
    assert R.route_angle(0.0, 2.3, 5.0) == 0.0 and R.route_angle(0.0, -2.29, 5.0) == -2.29
    assert float(R.angle_factor(math.pi / 2)) == 0.0


def test_distance_std_factor_and_product():
    assert R.distance_std_factor([0.0, 0.2, 0.4, 0.2]) == pytest.approx(1 - np.std([0, 0.2, 0.4, 0.2]) / 0.4)
    assert R.distance_std_factor([0.0, 1.0]) == 0.0
    assert R.distance_std_factor([5.0] * 10 + [0.0, 0.0] * 15) == 1.0  # only the last 30 count
    theta = 0.39
    expected = 0.75 * (1 - 0.6 / 3) * (1 - theta / (math.pi / 2)) * (1 - np.std([0.2, 0.6]) / 0.4)
    assert R.base_reward(15.0, 0.6, theta, [0.2, 0.6]) == pytest.approx(expected)


def test_tracker_success_and_completion():
    wp = np.stack([np.arange(21.0), np.zeros(21)], axis=1)
    tracker = R.RouteTracker(wp, np.zeros(21), R.RouteRules(), 0.05, np.zeros(2))
    ends = [tracker.update((x, 0.0), 0.0, 6.0, False).end for x in np.arange(0.5, 21.0, 0.5)]
    assert ends[-1] == R.SUCCESS and ends[:-1] == [None] * (len(ends) - 1)
    assert tracker.routes_completed == 1.0 and tracker.total_distance == pytest.approx(20.5)
    assert R.termination(R.RouteRules(), True, 0.0, 20.0, 0, 0.05, True) == R.COLLISION  # failure first


def make(**config):
    return CarlaNavigationEnv(scenario_config=config or {"traffic": 0, "route": "eval"})


def drive(env, action, limit):
    for n in range(1, limit + 1):
        obs, reward, terminated, truncated, info = env.step(np.array(action, dtype=np.float32))
        assert env.observation_space.contains(obs) and not truncated
        if terminated:
            return n, reward, info
    raise AssertionError(f"no termination within {limit} steps")


def test_too_fast():
    env = make()
    env.reset(seed=0)
    n, reward, info = drive(env, [0.0, 1.0], 400)
    assert info["termination"] == "too_fast" and reward == R.PENALTY and info["speed"] > 35.0


def test_stopped_after_stop_time():
    env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, stop_time_s=1.0)
    env.reset(seed=0)
    n, reward, info = drive(env, [0.0, 0.0], 100)
    assert (n, info["termination"], reward) == (20, "stopped", R.PENALTY)  # 1 s of 0.05 s ticks


def test_off_track():
    env = make()
    env.reset(seed=0)
    n, reward, info = drive(env, [1.0, 0.6], 400)
    assert info["termination"] == "off_track" and reward == R.PENALTY and info["distance_from_center"] > 3.0
    assert info["centering_factor"] == 0.0


def test_collision():
    env = make(traffic=20, route="eval")
    env.reset(seed=0)
    w = env.world
    v = w.vehicles
    ahead = 7.0
    x, y = v.x.copy(), v.y.copy()  # park NPC row 1 just ahead of the ego
    x[1], y[1] = v.x[0] + ahead * math.cos(v.yaw[0]), v.y[0] + ahead * math.sin(v.yaw[0])
    w.vehicles = type(v)(**{**{k: getattr(v, k) for k in v.__dataclass_fields__}, "x": x, "y": y,
                            "yaw": np.where(np.arange(len(x)) == 1, v.yaw[0], v.yaw), "speed": np.zeros(len(x))})
    n, reward, info = drive(env, [0.0, 1.0], 200)
    assert info["termination"] == "collision" and info["collision_state"] and reward == R.PENALTY


@pytest.mark.parametrize("config", [{"traffic": 20, "route": "train"}, {"traffic": 0, "route": [3, 40]}])
def test_checkers_pass_without_warnings(config):
    env = gym.make("CarlaNavigation-v0", scenario_config=config, steer_smoothing=0.75)
    check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=True)
    assert env.observation_space.shape == (STATE_SIZE,)


def test_seeded_runs_are_bit_identical():
    def run():
        env = gym.make("CarlaNavigation-v0", scenario_config={"traffic": 20, "route": "train"})
        obs, _ = env.reset(seed=7)
        rng = np.random.default_rng(0)
        out = [obs]
        for _ in range(200):
            obs, reward, terminated, _, _ = env.step(rng.uniform([-0.1, 0.2], [0.1, 0.6]).astype(np.float32))
            out.append(np.append(obs, np.float32(reward)))
            if terminated:
                out.append(env.reset()[0])
        return np.concatenate(out)

    assert run().tobytes() == run().tobytes()


def test_eval_routes_cycle_and_seed_restarts_them():
    env = make()
    routes = [env.reset(seed=0 if k == 0 else None)[1]["route"] for k in range(3)]
    assert routes == [R.spawn_pair(p, 68) for p in R.EVAL_ROUTES[:3]]
    assert env.reset(seed=5)[1]["route"] == (48, 21)
    # seeded episodes can still walk the cycle: options={"route_index": k}
    assert [env.reset(seed=9, options={"route_index": k})[1]["route"] for k in range(3)] == routes
    with pytest.raises(ValueError, match=r"options\['route_index'\]=-1: must be an integer >= 0"):
        env.reset(options={"route_index": -1})
    with pytest.raises(ValueError, match="options key 'route': the only option is 'route_index'"):
        env.reset(options={"route": 2})


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"scenario": "route_Town99"}, "route_Town99"),
    ({"scenario": "maze_navigation"}, "maze_navigation"),
    ({"scenario_config": {"traffic": 10}}, "traffic=10"),
    ({"scenario_config": {"route": "test"}}, "route='test'"),
    ({"scenario_config": {"route": (3, 3)}}, "route=(3, 3)"),
    ({"scenario_config": {"route": (0, 68)}}, "route=(0, 68)"),
    ({"scenario_config": {"lanes": 2}}, "'lanes'"),
    ({"action_mode": "tools"}, "action_mode='tools'"),
    ({"steer_smoothing": 1.0}, "steer_smoothing=1.0"),
    ({"stop_time_s": float("inf")}, "stop_time_s=inf: must be a finite number of seconds > 0"),
    ({"stop_time_s": True}, "stop_time_s=True"),
    ({"stop_time_s": 0}, "stop_time_s=0"),
])
def test_bad_arguments_name_the_value(kwargs, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        CarlaNavigationEnv(**kwargs)
