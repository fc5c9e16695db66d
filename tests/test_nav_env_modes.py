"""CarlaNavigation-v0's action, observation and reward modes, scenarios and vector use.

The env runs every episode as a `NavEpisode`; these tests replay the same upstream calls on a `NavEpisode`
built from the same seed and spec and require bit-identical positions and equal rubric rewards.
"""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import carla_gym
from carla_gym.envs import nav_scenarios as S
from carla_gym.envs.navigation import NAV_TOOL_ACTIONS, CarlaNavigationEnv
from carla_gym.sim.navigation.describe import observation_text
from carla_gym.sim.navigation.episode import NavEpisode
from carla_gym.sim.navigation.scenarios import resolve_nav_scenario
from carla_gym.sim.world import NavigationCall

TOOL = {name: i for i, name in enumerate(NAV_TOOL_ACTIONS)}


def episode_seed(seed: int) -> int:
    """The NavEpisode seed the env draws at a seeded reset of a single scenario without route draws."""
    return int(np.random.default_rng(seed).integers(2**63 - 1))


def ego(world) -> tuple[float, float, float, float]:
    v = world.vehicles
    return float(v.x[0]), float(v.y[0]), float(v.yaw[0]), float(v.speed[0])


def test_navigation_id_is_registered_and_listed():
    assert "CarlaNavigation-v0" in carla_gym.ENV_IDS
    assert isinstance(gym.make("CarlaNavigation-v0").unwrapped, CarlaNavigationEnv)


def test_rubric_control_steps_equal_the_upstream_control_calls():
    env = CarlaNavigationEnv(scenario_config={"traffic": 20, "route": "eval"}, reward_mode="rubric")
    env.reset(seed=4)
    replica = NavEpisode("route_Town02", seed=episode_seed(4), spec=env.episode.spec)
    rng = np.random.default_rng(0)
    for _ in range(60):
        steer, pedal = rng.uniform([-0.2, -0.3], [0.2, 0.8])
        _, reward, terminated, truncated, info = env.step(np.array([steer, pedal], dtype=np.float32))
        expected = replica.step(NavigationCall(action_type="control", throttle=max(float(np.float32(pedal)), 0.0),
                                               brake=max(-float(np.float32(pedal)), 0.0),
                                               steer=float(np.float32(steer))))
        assert reward == expected.rubric_reward and info["reward_terms"]["rubric"] == reward
        assert ego(env.world) == ego(replica.world)
        assert terminated == expected.done
        if terminated:
            break


def test_tools_follow_route_equals_the_upstream_autopilot_calls():
    name = "free_roam_Town05_v5_p3"
    env = CarlaNavigationEnv(scenario=name, action_mode="tools", reward_mode="rubric")
    env.reset(seed=2)
    replica = NavEpisode(name, seed=episode_seed(2), spec=S.unlimited(resolve_nav_scenario(name)))
    assert replica.goal == env.episode.goal
    goal = replica.goal
    replica.step(NavigationCall(action_type="init_navigation_agent", navigation_behavior="cautious"), ticks=0)
    replica.step(NavigationCall(action_type="set_destination", destination_x=goal[0], destination_y=goal[1],
                                destination_z=goal[2]), ticks=0)
    for _ in range(5):
        _, reward, _, _, info = env.step(TOOL["follow_route_cautious"])
        expected = sum(replica.step(NavigationCall(action_type="follow_route", route_steps=1)).rubric_reward
                       for _ in range(10))
        assert reward == pytest.approx(expected, abs=1e-12) and info["ticks"] == 10
        assert ego(env.world) == ego(replica.world)
    assert env.episode.behavior == "cautious" and env.episode.speed_kmh > 5.0  # the agent drives
    _, reward, _, _, info = env.step(TOOL["emergency_stop"])
    expected = replica.step(NavigationCall(action_type="emergency_stop"), ticks=10).rubric_reward
    assert reward == pytest.approx(expected, abs=1e-12) and ego(env.world) == ego(replica.world)
    assert env.episode.last_control[:2] == (0.0, 1.0)


@pytest.mark.parametrize("ticks", [3, 7])
def test_ticks_per_action_sums_the_ticks(ticks):
    config = {"traffic": 20, "route": "eval"}
    long, short = CarlaNavigationEnv(scenario_config=config, ticks_per_action=ticks), \
        CarlaNavigationEnv(scenario_config=config, ticks_per_action=1)
    obs_long, _ = long.reset(seed=1)
    short.reset(seed=1)
    action = np.array([0.02, 0.5], dtype=np.float32)
    for _ in range(6):
        obs_long, reward, terminated, _, info = long.step(action)
        rewards = [short.step(action)[1] for _ in range(ticks)]
        assert reward == sum(rewards, 0.0) and info["ticks"] == ticks
        assert ego(long.world) == ego(short.world)
        assert not terminated


def test_time_limit_truncates():
    env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, time_limit_s=1.0)
    env.reset(seed=0)
    n = 0
    while n < 21:
        _, _, terminated, truncated, info = env.step(np.array([0.0, 0.0], dtype=np.float32))
        n += 1
        assert not terminated
        if truncated:
            break
    assert (n, info["termination"], info["outcome"]["time"]) == (20, "time_limit", 1.0)
    assert info["outcome"]["termination"] == "time_limit" and not info["outcome"]["success"]


def test_vlm_rl_ends_do_not_end_a_rubric_episode():
    env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, reward_mode="rubric")
    env.reset(seed=0)
    far = False
    for _ in range(150):  # hard right at 60% throttle: far off the route, too fast for VLM-RL
        _, reward, terminated, truncated, info = env.step(np.array([1.0, 0.6], dtype=np.float32))
        far = far or info["distance_from_center"] > 3.0
        assert not (terminated or truncated) and reward == info["reward_terms"]["rubric"]
    assert far and info["termination"] == ""


def test_impossible_lane_change_holds_the_controls_and_says_why():
    env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, action_mode="tools")
    env.reset(seed=0)
    env.step(TOOL["follow_route"])
    x0 = ego(env.world)
    _, _, terminated, _, info = env.step(TOOL["lane_change_left"])
    assert "no same-direction neighbour on the left" in info["action_error"]
    assert info["ticks"] == 10 and not terminated and ego(env.world) != x0  # 10 ticks ran, controls held
    assert env.step(TOOL["observe"])[4]["action_error"] == ""


def test_lane_change_moves_to_the_neighbour_lane():
    env = CarlaNavigationEnv(scenario="free_roam_Town04_v0_p0", action_mode="tools", reward_mode="rubric")
    for seed in range(20):  # a start on a multi-lane road with a left neighbour
        env.reset(seed=seed)
        town, loc = env.world.town, env.world.ego_location
        if town.lanes[loc.lane].left >= 0:
            break
    env.step(TOOL["follow_route"])
    assert env.step(TOOL["lane_change_left"])[4]["action_error"] == ""
    assert abs(env.episode.track_offset()) > 2.0  # about a lane width from the new lane's centre line
    for _ in range(8):  # the lane change is tracked while the controls are held
        env.step(TOOL["observe"])
    now = env.world.ego_location  # located along the agent's old route while it has one: a lane width off it
    assert abs(env.episode.track_offset()) < 0.3 and (now.lane != loc.lane or abs(now.lateral) > 3.0)


@pytest.mark.parametrize("name", ["maze_navigation", "free_roam_Town03_v5_p3"])
def test_maze_and_free_roam_track_the_route_to_the_goal(name):
    env = CarlaNavigationEnv(scenario=name)
    _, info = env.reset(seed=3)
    wp, goal = env.route.waypoints, np.array(env.episode.goal[:2])
    assert info["route"] is None and info["goal"] == env.episode.goal
    assert np.hypot(*(wp[0] - ego(env.world)[:2])) < 1.0  # from the ego ...
    assert np.hypot(*(wp[-1] - goal)) < 4.0  # ... to the goal's lane point
    assert np.all(np.hypot(*np.diff(wp, axis=0).T) <= 1.0 + 1e-9)  # VLM-RL's 1 m resolution
    assert info["traffic"] == env.episode.spec.num_npc_vehicles


def test_text_reward_terms_and_render():
    env = CarlaNavigationEnv(scenario="free_roam_Town05_v5_p3", action_mode="tools", render_mode="rgb_array")
    _, info = env.reset(seed=0)
    assert info["text"] == observation_text(env.episode.observation()) and "Goal:" in info["text"]
    _, reward, _, _, info = env.step(TOOL["follow_route"])
    assert set(info["reward_terms"]) == {"vlm_rl", "rubric"} and reward == info["reward_terms"]["vlm_rl"]
    assert info["text"] == observation_text(env.episode.observation())
    frame = env.render()
    assert frame.shape == (256, 256, 3) and frame.dtype == np.uint8 and frame.std() > 0


MODES = [(a, o) for a in ("control", "tools") for o in ("state", "dict", "vlm-rl")]


@pytest.mark.parametrize(("action_mode", "observation_mode"), MODES)
def test_checkers_pass_without_warnings_in_every_mode(action_mode, observation_mode):
    # pytest turns every warning into an error (filterwarnings = error in pyproject.toml)
    env = gym.make("CarlaNavigation-v0", scenario=["route_Town02", "free_roam_Town05_v5_p3"],
                   action_mode=action_mode,
                   observation_mode=observation_mode, reward_mode="rubric" if action_mode == "tools" else "vlm-rl",
                   render_mode="rgb_array")
    check_env(env.unwrapped)
    if observation_mode != "vlm-rl":
        sb3_check_env(env.unwrapped, warn=True)
        return
    # VLM-RL's exact waypoints Box (15, 2) is neither an image nor a vector to SB3's checker: its one warning,
    # kept on purpose (carla_gym.envs.nav_observation); SB3's extractors flatten the key.
    with pytest.warns(UserWarning) as caught:
        sb3_check_env(env.unwrapped, warn=True)
    assert [str(w.message).split(" has ")[0] for w in caught] == ["Your observation waypoints"]


def test_seeded_tool_runs_are_bit_identical():
    def run():
        env = CarlaNavigationEnv(scenario=["route_Town02", "free_roam_Town05_v20_p10"], action_mode="tools",
                                 observation_mode="dict")
        obs, _ = env.reset(seed=11)
        rng = np.random.default_rng(0)
        out = [obs["state"], obs["image"].astype(np.float32).ravel()]
        for _ in range(40):
            obs, reward, terminated, truncated, _ = env.step(int(rng.integers(len(NAV_TOOL_ACTIONS))))
            out += [obs["state"], obs["image"].astype(np.float32).ravel(), np.float32([reward])]
            if terminated or truncated:
                out.append(env.reset()[0]["state"])
        return np.concatenate(out).tobytes()

    assert run() == run()


KWARGS = {"scenario": "free_roam_Town05_v5_p3", "action_mode": "tools"}
ACTIONS = np.array([TOOL["follow_route"], TOOL["emergency_stop"]])


def _make_env():
    return gym.make("CarlaNavigation-v0", **KWARGS)


def _sb3_run(venv) -> bytes:
    venv.seed(5)  # env i gets seed 5 + i, as gym.make_vec's reset(seed=5)
    out = [venv.reset()] + [venv.step(ACTIONS)[0] for _ in range(6)]
    venv.close()
    return np.concatenate(out).tobytes()


def _gym_run(venv) -> bytes:
    out = [venv.reset(seed=5)[0]] + [venv.step(ACTIONS)[0] for _ in range(6)]
    venv.close()
    return np.concatenate(out).tobytes()


@pytest.mark.slow  # worker processes; fast twin: test_nav_env.py::test_make_vec_sync_runs_and_is_bit_identical
def test_subproc_vec_env_and_async_make_vec_match_in_process_runs():
    sync = _gym_run(gym.make_vec("CarlaNavigation-v0", num_envs=2, vectorization_mode="sync", **KWARGS))
    assert _gym_run(gym.make_vec("CarlaNavigation-v0", num_envs=2, vectorization_mode="async", **KWARGS)) == sync
    assert _sb3_run(SubprocVecEnv([_make_env, _make_env])) == _sb3_run(DummyVecEnv([_make_env, _make_env])) == sync


def test_passing_the_goal_on_the_other_lane_is_no_arrival():
    # Eval route 1 of the Town02 analogue, spawn 0 to 4 (VLM-RL's (0, 72)): the route passes spawn 4 on the other
    # lane of its road early on (about 3.5 m away) and comes back to it after about 117 s.
    env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, action_mode="tools",
                             reward_mode="rubric")
    _, info = env.reset(seed=0, options={"route_index": 1})
    assert info["route"] == (0, 4)
    wp = env.route.waypoints
    goal = np.array(env.episode.goal[:2])
    early = np.hypot(*(wp[: len(wp) // 4] - goal).T).min()
    assert 2.0 < early < 5.0  # within upstream's 5 m of the goal in the first quarter of the route
    while True:
        _, _, terminated, truncated, info = env.step(TOOL["follow_route"])
        if terminated or truncated:
            break
    out = info["outcome"]
    assert (out["termination"], out["success"]) == ("goal_reached", True) and out["routes_completed"] > 0.98


def test_step_call_runs_upstream_actions_as_env_steps():
    name = "free_roam_Town05_v5_p3"
    env = CarlaNavigationEnv(scenario=name, reward_mode="rubric")
    env.reset(seed=6)
    replica = NavEpisode(name, seed=episode_seed(6), spec=S.unlimited(resolve_nav_scenario(name)))
    goal = replica.goal
    calls = [(NavigationCall(action_type="init_navigation_agent", navigation_behavior="aggressive"), 1),
             (NavigationCall(action_type="set_destination", destination_x=goal[0], destination_y=goal[1]), 1),
             (NavigationCall(action_type="follow_route", route_steps=40), None),
             (NavigationCall(action_type="control", throttle=0.3, steer=0.05), 5),
             (NavigationCall(action_type="capture_image"), None)]
    for call, ticks in calls:
        _, reward, terminated, _, info = env.step_call(call, ticks)
        expected = replica.step(call, ticks if ticks is not None else 1)
        assert (reward, info["ticks"]) == (expected.rubric_reward, expected.ticks)
        assert ego(env.world) == ego(replica.world) and not terminated
    assert env.episode.steps == replica.steps == 8  # 1 + 1 + 1 (follow_route: one step) + 5; no capture
    before = ego(env.world)
    with pytest.raises(ValueError, match="destination_x, destination_y"):
        env.step_call(NavigationCall(action_type="set_destination", destination_x=1e5, destination_y=1e5))
    assert ego(env.world) == before  # refused before any change
    _, _, _, _, info = env.step_call(NavigationCall(action_type="observe"))
    assert info["ticks"] == env.ticks_per_action == 1


def _follow_to_the_end(env) -> tuple[int, dict, bool, bool]:
    n = 0
    while True:
        _, _, terminated, truncated, info = env.step(TOOL["follow_route"])
        n += 1
        if terminated or truncated:
            return n, info, terminated, truncated


@pytest.mark.parametrize("reward_mode", ["vlm-rl", "rubric"])
def test_an_end_on_the_time_limit_tick_is_that_end_and_arrival_completes_the_route(reward_mode):
    def run(limit_s):
        env = CarlaNavigationEnv(scenario_config={"traffic": 0, "route": "eval"}, action_mode="tools",
                                 reward_mode=reward_mode, time_limit_s=limit_s)
        env.reset(seed=0, options={"route_index": 7})
        _, info, terminated, truncated = _follow_to_the_end(env)
        return env.episode.ticks, info, terminated, truncated

    ticks, info, terminated, _ = run(300.0)
    assert (info["termination"], terminated, info["routes_completed"]) == ("goal_reached", True, 1.0)
    assert info["outcome"]["routes_completed"] == 1.0 and info["outcome"]["success"]
    # the limit falls on the arrival tick: the arrival wins (a termination); one tick earlier: the limit
    _, at, terminated, truncated = run(ticks * 0.05)
    assert (at["termination"], terminated, truncated) == ("goal_reached", True, False)
    _, early, terminated, truncated = run((ticks - 1) * 0.05)
    assert (early["termination"], terminated, truncated) == ("time_limit", False, True)
    assert early["outcome"]["routes_completed"] < 1.0


def test_vlm_rl_eval_termination_drops_off_track_and_too_fast_and_stops_no_progress():
    config = {"traffic": 0, "route": "eval"}
    fast = CarlaNavigationEnv(scenario_config=config, termination="vlm-rl-eval")
    fast.reset(seed=0)
    for _ in range(300):  # full throttle: too fast (and later off track) for VLM-RL's training, not its evaluation
        _, reward, terminated, _, info = fast.step(np.array([0.0, 1.0], dtype=np.float32))
        assert reward != -10.0 or terminated
        if terminated:
            break
    assert info["termination"] not in ("too_fast", "off_track") and info["speed"] > 35.0
    still = CarlaNavigationEnv(scenario_config=config, termination="vlm-rl-eval")
    still.reset(seed=0)
    n = 0
    while True:
        _, reward, terminated, _, info = still.step(np.array([0.0, 0.0], dtype=np.float32))
        n += 1
        if terminated:
            break
    assert (n, info["termination"], reward) == (200, "no_progress", 0.0)  # 10 s, VLM-RL's eval.py; no penalty


def test_a_mixed_scenario_list_splits_the_config_by_family():
    env = CarlaNavigationEnv(scenario=["route_Town02", "free_roam_Town05"],
                             scenario_config={"traffic": 0, "route": "eval", "num_npc_vehicles": 5})
    assert env.configs["route_Town02"] == {"traffic": 0, "route": "eval"}
    assert env.configs["free_roam_Town05"].num_npc_vehicles == 5
    with pytest.raises(ValueError, match="traffic=20.0"):
        CarlaNavigationEnv(scenario_config={"traffic": 20.0})
    assert CarlaNavigationEnv(steer_smoothing=np.float32(0.5)).steer_smoothing == 0.5
    with pytest.raises(ValueError, match="termination='eval'"):
        CarlaNavigationEnv(termination="eval")


def test_the_text_shows_the_light_and_crossing_walkers():
    env = CarlaNavigationEnv(scenario="free_roam_Town05_v0_p10", action_mode="tools")
    for seed in range(10):
        _, info = env.reset(seed=seed)
        state, distance = env.world.ego_light()
        if state >= 0:
            break
    light = ("green", "yellow", "red")[state]
    side = "ahead" if distance >= 0 else "behind"
    assert f"Traffic light: {light}, stop line {abs(distance):.1f} m {side}." in info["text"]
    walkers = env.world.walkers
    walkers.mode[:] = 1  # every walker crossing (walkers.CROSSING)
    obs = env.episode.observation()
    text = observation_text(obs)
    assert obs["crossing_walker_ids"] == list(range(100, 110))
    walker_lines = [line for line in text.splitlines() if line.startswith("- walker")]
    assert walker_lines and all(line.endswith("(crossing the road)") for line in walker_lines)
