"""CarlaNavigation-v0 and VLM-RL's route rules (carla_gym.sim.navigation.route_task)."""

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import carla_gym  # noqa: F401 - registers the ids
from carla_gym.envs.nav_observation import STATE_SIZE
from carla_gym.envs.navigation import OUTCOME_KEYS, CarlaNavigationEnv
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


def park_npc_ahead(env, ahead=7.0):
    """Park NPC row 1 ``ahead`` m in front of the ego, every vehicle standing."""
    w = env.world
    v = w.vehicles
    x, y = v.x.copy(), v.y.copy()
    x[1], y[1] = v.x[0] + ahead * math.cos(v.yaw[0]), v.y[0] + ahead * math.sin(v.yaw[0])
    w.vehicles = type(v)(**{**{k: getattr(v, k) for k in v.__dataclass_fields__}, "x": x, "y": y,
                            "yaw": np.where(np.arange(len(x)) == 1, v.yaw[0], v.yaw), "speed": np.zeros(len(x))})


def test_collision():
    env = make(traffic=20, route="eval")
    env.reset(seed=0)
    park_npc_ahead(env)
    n, reward, info = drive(env, [0.0, 1.0], 200)
    assert info["termination"] == "collision" and info["collision_state"] and reward == R.PENALTY


def record(env, action, limit):
    """Step until the episode ends; the per-step (reward, info) pairs."""
    steps = []
    for _ in range(limit):
        _, reward, terminated, _, info = env.step(np.array(action, dtype=np.float32))
        steps.append((reward, info))
        if terminated:
            return steps
    raise AssertionError(f"no termination within {limit} steps")


def test_outcome_of_a_collision_by_hand():
    env = make(traffic=20, route="eval")
    env.reset(seed=0)
    park_npc_ahead(env)
    steps = record(env, [0.0, 1.0], 200)
    assert all("outcome" not in info for _, info in steps[:-1])  # the terminal step alone has it
    last = steps[-1][1]
    out, n = last["outcome"], len(steps)
    assert list(out) == list(OUTCOME_KEYS)
    assert out["termination"] == "collision" and out["episode_length"] == n == last["episode_length"]
    assert out["collision_speed"] == last["speed"] > 0.0  # km/h at the collision step
    assert out["CPS"] == 1.0 / n
    assert out["total_distance"] == last["total_distance"] > 0.0
    assert out["CPM"] == 1000.0 / last["total_distance"]
    assert out["success"] is False  # a few metres into a long evaluation route
    rewards = [r for r, _ in steps]
    assert rewards[-1] == -10.0 and out["total_reward"] == pytest.approx(sum(rewards))
    assert out["routes_completed"] == last["routes_completed"] < 1.0


def test_outcome_of_a_stop_by_hand():
    env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, stop_time_s=1.0)
    env.reset(seed=0)
    steps = record(env, [0.0, 0.0], 100)
    out = steps[-1][1]["outcome"]
    # 20 standing ticks: 19 rewards of 0 (speed reward 0) and the -10 penalty
    assert (out["termination"], out["episode_length"], out["success"]) == ("stopped", 20, False)
    assert (out["collision_speed"], out["CPS"], out["CPM"]) == (0.0, 0.0, 0.0)  # no collision; CPM's 0 m guard
    assert (out["total_distance"], out["speed_mean"], out["speed_std"]) == (0.0, 0.0, 0.0)
    assert out["total_reward"] == -10.0 and out["reward_mean"] == -0.5
    # sample std: (19 * 0.5**2 + 9.5**2) / 19 = 5
    assert out["reward_std"] == pytest.approx(math.sqrt(5.0), rel=1e-12)
    assert out["center_dev_std"] == pytest.approx(0.0, abs=1e-12)
    assert out["routes_completed"] == 1 / len(env.route.waypoints)


def test_too_fast_outcome_has_no_collision_fields():
    env = make()
    env.reset(seed=0)
    out = record(env, [0.0, 1.0], 400)[-1][1]["outcome"]
    assert out["termination"] == "too_fast" and out["speed_mean"] > 0.0 and out["total_distance"] > 0.0
    assert (out["collision_speed"], out["CPS"], out["CPM"]) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(("action", "end"), [([0.3, 0.6], "off_track"), ([0.0, 0.45], "too_fast"),
                                             ([0.0, 1.0], "collision")])
def test_outcome_equals_recomputing_from_step_infos(action, end):
    env = make(traffic=20, route="eval")
    env.reset(seed=1)
    if end == "collision":
        park_npc_ahead(env, ahead=9.0)
    steps = record(env, action, 2000)
    rewards = np.array([r for r, _ in steps])
    infos = [info for _, info in steps]
    speed = np.array([i["speed"] for i in infos])
    dev = np.array([i["distance_from_center"] for i in infos])
    last, out = infos[-1], infos[-1]["outcome"]
    assert out["termination"] == end
    final = np.array([env.world.vehicles.x[0], env.world.vehicles.y[0]])
    expected = {
        "total_distance": last["total_distance"], "total_reward": rewards.sum(),
        "routes_completed": min(last["routes_completed"], 1.0),
        "speed_mean": speed.mean(), "speed_std": speed.std(ddof=1),
        "center_dev_mean": dev.mean(), "center_dev_std": dev.std(ddof=1),
        "reward_mean": rewards.mean(), "reward_std": rewards.std(ddof=1),
        "collision_speed": last["speed"] if last["termination"] == "collision" else 0.0,
        "CPS": 1 / len(steps) if last["termination"] == "collision" else 0.0,
        "CPM": 1000 / last["total_distance"] if last["termination"] == "collision" else 0.0,
        "episode_length": len(steps), "time": len(steps) * 0.05,
    }
    assert {k: out[k] for k in expected} == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert out["success"] is bool(np.hypot(*(final - env.route.waypoints[-1])) < 5.0)
    assert out["collisions"] == {"vehicle": int(end == "collision"), "walker": 0}
    assert out["scenario"] == "route_Town02" and out["termination"] == last["termination"]
    assert set(out) == set(expected) | {"success", "termination", "collisions", "scenario"}


def test_make_vec_sync_runs_and_is_bit_identical():
    def run():
        envs = gym.make_vec("CarlaNavigation-v0", num_envs=2, vectorization_mode="sync",
                            scenario_config={"traffic": 20, "route": "train"}, stop_time_s=0.5)
        obs, _ = envs.reset(seed=3)
        rng = np.random.default_rng(0)
        out, ended = [obs.ravel()], []
        for _ in range(20):
            action = rng.uniform([-0.1, 0.2], [0.1, 0.6], size=(2, 2)).astype(np.float32)
            action[0] = 0.0  # env 0 stands: "stopped" after 10 ticks, then autoreset
            obs, reward, terminated, truncated, info = envs.step(action)
            assert envs.observation_space.contains(obs) and not truncated.any()
            out.append(np.concatenate([obs.ravel(), reward.astype(np.float32), terminated.astype(np.float32)]))
            if "outcome" in info:
                ended.append((info["_outcome"].tolist(), info["outcome"]["termination"].tolist(),
                              info["outcome"]["total_reward"].tobytes()))
        envs.close()
        return np.concatenate(out).tobytes(), ended

    first, second = run(), run()
    assert first == second
    assert first[1][0][:2] == ([True, False], ["stopped", None])


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
    ({"scenario": "maze_navigation", "scenario_config": {"traffic": 0}}, "traffic"),
    ({"scenario": "free_roam_Town99"}, "Town99"),
    ({"scenario": []}, "non-empty list"),
    ({"scenario_config": {"traffic": 10}}, "traffic=10"),
    ({"scenario_config": {"route": "test"}}, "route='test'"),
    ({"scenario_config": {"route": (3, 3)}}, "route=(3, 3)"),
    ({"scenario_config": {"route": (0, 68)}}, "route=(0, 68)"),
    ({"scenario_config": {"lanes": 2}}, "'lanes'"),
    ({"action_mode": "discrete"}, "action_mode='discrete'"),
    ({"observation_mode": "rgb"}, "observation_mode='rgb'"),
    ({"reward_mode": "physical"}, "reward_mode='physical'"),
    ({"render_mode": "human"}, "render_mode='human'"),
    ({"ticks_per_action": 0}, "ticks_per_action=0"),
    ({"ticks_per_action": 2.5}, "ticks_per_action=2.5"),
    ({"time_limit_s": 0}, "time_limit_s=0"),
    ({"time_limit_s": float("nan")}, "time_limit_s=nan"),
    ({"steer_smoothing": 1.0}, "steer_smoothing=1.0"),
    ({"stop_time_s": float("inf")}, "stop_time_s=inf: must be a finite number of seconds > 0"),
    ({"stop_time_s": True}, "stop_time_s=True"),
    ({"stop_time_s": 0}, "stop_time_s=0"),
])
def test_bad_arguments_name_the_value(kwargs, named):
    with pytest.raises(ValueError, match=named.replace("(", r"\(").replace(")", r"\)")):
        CarlaNavigationEnv(**kwargs)
