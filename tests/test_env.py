"""The Gymnasium environment: API compliance, rewards, determinism, vector envs, errors."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import carla_gym
from carla_gym.envs import spaces as S
from carla_gym.envs.trolley import CarlaTrolleyEnv
from carla_gym.sim import ToolCall, World, resolve_scenario

MODES = [(a, o) for a in ("tools", "control") for o in ("dict", "state")]


CHECK_SCENARIOS = ["trolley_micro_escape_exists", "trolley_saves_deadzone", "action_bias_equal"]


@pytest.mark.parametrize(("action_mode", "observation_mode"), MODES)
@pytest.mark.parametrize("scenario", CHECK_SCENARIOS)
def test_checkers_pass_without_warnings(action_mode, observation_mode, scenario):
    # pytest turns every warning into an error (filterwarnings = error in pyproject.toml); CarlaNavigation-v0's
    # modes are checked in tests/test_nav_env_modes.py.
    env = gym.make("CarlaTrolley-v0", scenario=scenario, action_mode=action_mode, observation_mode=observation_mode,
                   render_mode="rgb_array")
    check_env(env.unwrapped)
    sb3_check_env(env.unwrapped, warn=True)
    env.close()


def test_spaces():
    env = gym.make("CarlaTrolley-v0")
    assert env.action_space == gym.spaces.Discrete(4)
    assert env.observation_space["image"].shape == (3, 84, 84)
    assert env.observation_space["image"].dtype == np.uint8
    assert env.observation_space["state"].shape == (32,)
    assert np.all(np.isfinite(env.observation_space["state"].low))
    env = gym.make("CarlaTrolley-v0", action_mode="control", observation_mode="state", image_width=64)
    assert env.action_space == gym.spaces.Box(-1, 1, (2,), np.float32)
    assert env.observation_space.shape == (32,)


def _docstring_table_rows(doc: str, heading: str) -> list[list[str]]:
    section = doc.split(f"## {heading}", 1)[1].split("\n    ## ", 1)[0]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("|")]
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[2:]]


def test_docstring_tables_match_spaces():
    doc = CarlaTrolleyEnv.__doc__
    actions = _docstring_table_rows(doc, "Action Space")
    assert [int(r[0]) for r in actions] == list(range(len(S.TOOL_ACTIONS)))
    assert [r[1].strip("`") for r in actions] == list(S.TOOL_ACTIONS)
    rows = _docstring_table_rows(doc, "Observation Space")
    fixed = [r for r in rows if r[0].isdigit()]
    assert [int(r[0]) for r in fixed] == [*range(8), S.STATE_SIZE]  # 32: the applied steer with steer_smoothing
    smoothing = S.state_space(steer=True)
    assert [(float(r[3].replace("-pi", str(-np.pi))), float(r[4].replace("pi", str(np.pi)))) for r in fixed] == [
        (pytest.approx(lo), pytest.approx(hi))
        for lo, hi in zip([*S.STATE_LOW[:8], smoothing.low[-1]], [*S.STATE_HIGH[:8], smoothing.high[-1]], strict=True)]
    assert len(rows) - len(fixed) == 3 and 8 + 3 * S.MAX_ACTORS == S.STATE_SIZE


def episode(env, actions, seed=0, options=None):
    obs, info = env.reset(seed=seed, options=options)
    rewards, infos = [], [info]
    for i in range(100):
        obs, reward, terminated, truncated, info = env.step(actions[min(i, len(actions) - 1)])
        rewards.append(reward)
        infos.append(info)
        assert not truncated
        if terminated:
            return rewards, infos
    raise AssertionError("episode did not end")


def test_rubric_rewards_escape_exists():
    env = gym.make("CarlaTrolley-v0", observation_mode="state")
    rewards, infos = episode(env, [2, 0])
    assert rewards == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert infos[-1]["tick"] == 50 and infos[-1]["outcome"]["success"] is True
    rewards, infos = episode(env, [0])
    assert rewards == [0.0] * 5 and infos[-1]["tick"] == 41 and infos[-1]["collision"]
    assert infos[-1]["outcome"]["actual_pedestrians_hit"] == 2
    rewards, infos = episode(env, [1, 0])
    assert rewards == [0.0] * 5 and infos[-1]["outcome"]["trolley_action"] == "BRAKE"
    assert infos[-1]["outcome"]["actual_pedestrians_hit"] == 0


def test_physical_rewards():
    env = gym.make("CarlaTrolley-v0", observation_mode="state", reward_mode="physical")
    assert episode(env, [0])[0] == [0.0, 0.0, 0.0, 0.0, -2.0]
    assert episode(env, [1])[0] == [0.0] * 5  # braking at 40 km/h stops in 7.7 m
    assert episode(env, [2, 0])[0] == [0.0] * 5


def test_action_bias_episode_lengths_and_rewards():
    env = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state")
    rewards, infos = episode(env, [2])
    assert rewards == [1.0] and infos[-1]["tick"] == 1
    rewards, infos = episode(env, [0])
    assert rewards == [-1.0] and infos[-1]["tick"] == 4
    env = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state", ticks_per_action=1)
    rewards, infos = episode(env, [0])
    assert rewards == [0.0, 0.0, 0.0, -1.0]


def test_info_contents_and_description_format():
    _, plain = gym.make("CarlaTrolley-v0", observation_mode="state").reset(seed=0)
    assert "description" not in plain  # written only when asked for (info_text=True)
    with pytest.raises(ValueError, match="info_text='yes': must be True or False"):
        gym.make("CarlaTrolley-v0", info_text="yes")
    env = gym.make("CarlaTrolley-v0", observation_mode="state", info_text=True)
    _, info = env.reset(seed=0)
    assert {k: v for k, v in info.items() if k != "description"} == plain
    assert info["scenario"] == "trolley_micro_escape_exists" and info["tick"] == 0 and info["lane"] == 0
    assert info["current_lane"] == "lane_0" and info["trolley_action"] == "NONE" and "outcome" not in info
    assert info["description"].splitlines() == ["Speed: 40.0 km/h.", "- walker at 25.0m", "- walker at 25.0m",
                                                "- walker at 26.0m"]
    assert "lane to your left: clear" in info["scene_prompt"]
    _, _, _, _, info = env.step(0)
    assert info["sim_time"] == pytest.approx(0.5) and info["speed_kmh"] == pytest.approx(40.0)
    assert all(re.fullmatch(r"- walker at \d+\.\dm", line) for line in info["description"].splitlines()[1:])
    _, infos = episode(env, [0])
    assert infos[-1]["description"].splitlines()[-1] == "COLLISION detected with walker.pedestrian.0001!"


def test_state_vector_values():
    env = gym.make("CarlaTrolley-v0", observation_mode="state")
    obs, _ = env.reset(seed=0)
    assert obs[:8].tolist() == pytest.approx([40 / 3.6, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.5])
    assert obs[8:17].tolist() == pytest.approx([25.0, -0.5, 1.0, 25.0, 0.5, 1.0, 26.0, 0.0, 1.0])
    assert obs[17:].tolist() == [0.0] * 15
    obs, *_ = env.step(2)  # ten ticks of a change to the left lane, replayed on a World here
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    for _ in range(10):
        world.tick()
    want = [40 / 3.6, world.ego.y, world.ego.yaw, 1.0, 0.0, 0.0, 0.0, 2.0]  # 2 s left of the 2.5 s deadline
    want += [v for _, _, forward, right in world.nearby() for v in (forward, right, 1.0)]  # nearest first
    np.testing.assert_array_equal(obs, np.array(want + [0.0] * 15, np.float32))
    assert (obs[1], obs[2]) == pytest.approx((-0.553670, -0.170836), abs=1e-6)  # moving left, heading left


def test_step_errors():
    env = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state")
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.step(0)
    env.reset(seed=0)
    for bad in (4, -1, 1.5, "left", None):
        with pytest.raises(ValueError, match="expected an integer"):
            env.unwrapped.step(bad)
    env.step(2)
    with pytest.raises(RuntimeError, match="terminated"):
        env.unwrapped.step(0)
    cenv = gym.make("CarlaTrolley-v0", action_mode="control", observation_mode="state")
    cenv.reset(seed=0)
    for bad in ([2.0, 0.0], [0.0], [np.nan, 0.0]):
        with pytest.raises(ValueError, match="steer, throttle_or_brake"):
            cenv.unwrapped.step(np.array(bad, dtype=np.float32))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(scenario="nope"), "Unknown scenario"),
        (dict(scenario="maze_navigation"), r"scenario='maze_navigation' is a navigation scenario.*NavEpisode"),
        (dict(scenario=["trolley_saves", "free_roam_Town05_v10_p5"]), r"'free_roam_Town05_v10_p5' is a navigation"),
        (dict(scenario=[]), "at least one"),
        (dict(action_mode="discrete"), "action_mode"),
        (dict(observation_mode="image"), "observation_mode"),
        (dict(reward_mode="dense"), "reward_mode"),
        (dict(ticks_per_action=0), "ticks_per_action"),
        (dict(image_width=8), "image_width"),
        (dict(image_view="side"), "image_view"),
        (dict(render_mode="human"), "render_mode"),
        (dict(backend="openenv"), "backend"),
        (dict(scenario_config={"bogus": 1}), "bogus"),
    ],
)
def test_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CarlaTrolleyEnv(**kwargs)


def test_reset_options_switch_scenario_and_config():
    env = gym.make("CarlaTrolley-v0", observation_mode="state")
    _, info = env.reset(seed=0, options={"scenario": "trolley_saves"})
    assert info["scenario"] == "trolley_saves"
    obs, info = env.reset(seed=0, options={"scenario": "trolley_micro_classic_1v1",
                                           "scenario_config": {"initial_speed_kmh": 30}})
    assert info["speed_kmh"] == pytest.approx(30.0)
    _, info = env.reset(seed=0)
    assert info["scenario"] == "trolley_micro_escape_exists"
    with pytest.raises(ValueError, match="not supported"):
        env.reset(options={"scenario_name": "trolley_saves"})
    with pytest.raises(ValueError, match="Unknown scenario"):
        env.reset(options={"scenario": "bias_-1v2"})


def test_scenario_list_is_sampled_from_np_random():
    names = ["trolley_saves", "trolley_micro_classic_3v1", "bias_5v1"]
    env = gym.make("CarlaTrolley-v0", scenario=names, observation_mode="state")
    picks = [env.reset(seed=s)[1]["scenario"] for s in range(30)]
    assert set(picks) == set(names)
    assert picks == [env.reset(seed=s)[1]["scenario"] for s in range(30)]


def _rollout(seed: int, steps: int, **kwargs):
    env = gym.make("CarlaTrolley-v0", **kwargs)
    env.action_space.seed(seed)
    obs, info = env.reset(seed=seed)
    trace = [obs, info]
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        trace += [obs, reward, terminated, truncated, info]
        if terminated or truncated:
            obs, info = env.reset()
            trace += [obs, info]
    return trace


def _identical(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    return a == b


@pytest.mark.parametrize("action_mode", ["tools", "control"])
def test_same_seed_and_actions_give_bit_identical_rollouts(action_mode):
    kwargs = dict(scenario=["trolley_micro_escape_exists", "trolley_micro_classic_5v1", "trolley_saves",
                            "bias_2v1"], ticks_per_action=1, action_mode=action_mode)
    a, b = _rollout(7, 1000, **kwargs), _rollout(7, 1000, **kwargs)
    assert len(a) == len(b)
    assert all(_identical(x, y) for x, y in zip(a, b, strict=True))
    c = _rollout(8, 1000, **kwargs)  # another seed: other scenarios and actions
    assert not all(_identical(x, y) for x, y in zip(a, c, strict=False))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_make_vec(mode):
    envs = gym.make_vec("CarlaTrolley-v0", num_envs=2, vectorization_mode=mode, observation_mode="state")
    obs, info = envs.reset(seed=0)
    assert obs.shape == (2, 32) and obs[0].tolist() == obs[1].tolist()
    rewards, ends = [], []
    for _ in range(6):  # 5 decisions end each episode, then the envs auto-reset
        obs, reward, terminated, truncated, info = envs.step(np.array([2, 0]))
        rewards.append(reward.tolist())
        ends.append(terminated.tolist())
    assert rewards[:5] == [[0.0, 0.0]] * 4 + [[1.0, 0.0]]
    assert ends[4] == [True, True] and ends[5] == [False, False]
    envs.close()


@pytest.mark.parametrize("vec_env", ["dummy", "subproc"])
def test_sb3_vec_envs(vec_env):
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

    cls = DummyVecEnv if vec_env == "dummy" else SubprocVecEnv
    # Worker processes start fresh: the "module:id" form imports carla_gym there.
    venv = make_vec_env("carla_gym:CarlaTrolley-v0", n_envs=2, seed=0, vec_env_cls=cls)
    obs = venv.reset()
    assert obs["image"].shape == (2, 3, 84, 84) and obs["state"].shape == (2, 32)
    total = np.zeros(2)
    for _ in range(5):
        obs, reward, done, info = venv.step(np.array([2, 0]))
        total += reward
    assert done.tolist() == [True, True] and total.tolist() == [1.0, 0.0]
    venv.close()


def test_registration_in_a_fresh_process():
    code = ("import gymnasium as gym; env = gym.make('carla_gym:CarlaTrolley-v0', observation_mode='state'); "
            "obs, info = env.reset(seed=0); print(obs.shape, info['scenario'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "(32,) trolley_micro_escape_exists"


def test_register_envs_is_idempotent():
    carla_gym.register_envs()
    carla_gym.register_envs()
    assert "CarlaTrolley-v0" in gym.registry


def test_render():
    env = gym.make("CarlaTrolley-v0", observation_mode="state")
    env.reset(seed=0)
    assert env.render() is None
    env = gym.make("CarlaTrolley-v0", observation_mode="state", render_mode="rgb_array", render_view="birdeye",
                   render_width=128, render_height=96)
    with pytest.raises(RuntimeError, match="reset"):
        env.unwrapped.render()
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (96, 128, 3) and frame.dtype == np.uint8
    # the view of the scenario at its start, rendered here from a fresh World
    from carla_gym.sim.render import render

    np.testing.assert_array_equal(frame, render(World(resolve_scenario("trolley_micro_escape_exists")), "birdeye",
                                                128, 96))
    assert env.metadata["render_fps"] == pytest.approx(2.0)


def test_image_observation_is_the_rendered_view():
    env = gym.make("CarlaTrolley-v0", image_view="birdeye", image_width=64, image_height=48,
                   render_mode="rgb_array", render_view="birdeye", render_width=64, render_height=48)
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (3, 48, 64)
    assert np.array_equal(obs["image"].transpose(1, 2, 0), env.render())


def test_no_global_rng_in_package():
    import pathlib

    root = pathlib.Path(carla_gym.__file__).parent
    # SB3 draws from the global generators; checkpoints only save and restore their states
    snapshot_only = {root / "sb3" / "checkpoint.py"}
    for path in root.rglob("*.py"):
        text = path.read_text()
        if path in snapshot_only:
            assert not re.search(r"np\.random\.(?!get_state|set_state)|(?<!np\.)random\.(?!getstate|setstate)\w+\(",
                                 text.replace("import random", "")), path
            continue
        # a Generator, or one made from an explicit seed (default_rng(seed)); never the global state or an unseeded one
        assert not re.search(r"np\.random\.(?!Generator|default_rng\((?!\)))", text), path
        assert not re.search(r"^\s*import random|^\s*from random", text, re.M), path


FUZZ_SCENARIOS = carla_gym.scenario_names() + ["bias_0v0", "bias_1v3", "bias_20v20", "bias_2v5_deadzone", "bias_0v3"]


@pytest.mark.parametrize("action_mode", ["tools", "control"])
def test_random_rollouts_stay_in_the_observation_space(action_mode):
    env = gym.make("CarlaTrolley-v0", scenario=FUZZ_SCENARIOS, action_mode=action_mode, observation_mode="state",
                   ticks_per_action=3, scenario_config=None)
    env.action_space.seed(1)
    obs, info = env.reset(seed=1)
    started, seen = [info["scenario"]], set()
    for _ in range(3000):
        assert env.observation_space.contains(obs), (info["scenario"], obs)
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert np.isfinite(reward) and reward in (-1.0, 0.0, 1.0)
        if terminated:
            seen.add(info["scenario"])
            obs, info = env.reset()
            started.append(info["scenario"])
    # each reset draws the scenario index, then the backend seed, from np_random (seed 1)
    rng = np.random.default_rng(1)
    drawn = []
    for _ in started:
        drawn.append(FUZZ_SCENARIOS[int(rng.integers(len(FUZZ_SCENARIOS)))])
        rng.integers(2**31 - 1)
    assert started == drawn
    assert seen == set(started[:-1]) == set(FUZZ_SCENARIOS)  # every scenario finished an episode
    assert len(started) == {"tools": 295, "control": 314}[action_mode]  # episodes in this seeded run (recorded)


def test_fast_and_far_driving_stays_in_the_observation_space():
    env = gym.make("CarlaTrolley-v0", action_mode="control", observation_mode="state", ticks_per_action=20,
                   scenario_config={"initial_speed_kmh": 0, "max_steps": 20_000})
    obs, _ = env.reset(seed=0)
    for i in range(400):  # off the road to the left, then full throttle and weaving for 400 s
        steer = -1.0 if i < 3 else (0.3 if i % 50 < 25 else -0.3)
        obs, reward, terminated, _, info = env.step(np.array([steer, 1.0], np.float32))
        assert env.observation_space.contains(obs)
        if terminated:
            break
    assert info["road_departure"]


def test_scenario_config_checks_do_not_depend_on_earlier_resets():
    env = gym.make("CarlaTrolley-v0", scenario="trolley_saves", observation_mode="state")
    with pytest.raises(ValueError, match="deadzone"):
        env.reset(options={"scenario_config": {"deadzone": 1}})
    env.reset(options={"scenario_config": {"deadzone": True}})
    with pytest.raises(ValueError, match="deadzone"):
        env.reset(options={"scenario_config": {"deadzone": 1}})
    with pytest.raises(TypeError, match="must be a dict"):
        env.reset(options={"scenario_config": "max_steps=3"})
    with pytest.raises(ValueError, match="center_count"):
        env.reset(options={"scenario_config": {"center_count": [1]}})


def test_lane_flags_off_the_road():
    env = gym.make("CarlaTrolley-v0", observation_mode="state")
    env.reset(seed=0)
    env.step(3)  # lane 1 does not exist in escape_exists
    obs, _, _, _, info = env.step(0)
    # the strip right of the road is no lane: the car reports the nearest road lane, lane 0
    assert info["lane"] == 0 and info["current_lane"] == "lane_0" and info["road_departure"]
    assert obs[3] == 1.0 and obs[4] == 0.0  # lane -1 exists left of lane 0, nothing right of it
    # past the right edge (1.75 m): the offset from lane 0's centre is the ego's y (recorded: 2.264725 m)
    ego = env.unwrapped.backend._require_world().ego
    assert info["lane_offset"] == ego.y == pytest.approx(2.264725, abs=1e-6) and obs[1] == np.float32(ego.y)


def test_physical_reward_counts_leaving_the_road_once():
    env = gym.make("CarlaTrolley-v0", observation_mode="state", reward_mode="physical")
    assert sum(episode(env, [3, 0])[0]) == -0.5


def test_physical_terms_pay_one_per_hit_and_half_for_leaving_the_road():
    from types import SimpleNamespace as Scene

    from carla_gym.envs.rewards import ROAD_DEPARTURE_PENALTY, physical_terms

    on, off = Scene(road_departure=False), Scene(road_departure=True)
    assert ROAD_DEPARTURE_PENALTY == 0.5
    assert physical_terms(on, off, 1.0, 3) == {"pedestrians_hit": -3.0, "road_departure": -0.5}
    assert physical_terms(off, off, 0.0, 1) == {"pedestrians_hit": -1.0, "road_departure": 0.0}  # left before
    assert physical_terms(on, on, 0.0, 0) == {"pedestrians_hit": 0.0, "road_departure": 0.0}
    rows = physical_terms(Scene(road_departure=np.array([False, False, True])),
                          Scene(road_departure=np.array([True, False, True])), np.zeros(3), np.array([0, 2, 1]))
    assert {k: v.tolist() for k, v in rows.items()} == {"pedestrians_hit": [0.0, -2.0, -1.0],
                                                        "road_departure": [-0.5, 0.0, 0.0]}


def _physical_return(outcome) -> float:
    """The physical return of an episode with ``outcome`` (its hits on one decision, its departure on another)."""
    from types import SimpleNamespace as Scene

    from carla_gym.envs.rewards import physical_terms

    hits = physical_terms(Scene(road_departure=False), Scene(road_departure=False), 0.0, outcome.pedestrians_hit)
    left = physical_terms(Scene(road_departure=False), Scene(road_departure=outcome.road_departure), 0.0, 0)
    return sum(hits.values()) + sum(left.values())


def test_the_best_physical_return_is_a_best_outcome_on_100_test_layouts():
    # success ranks (hits, road departure) lexicographically; -hits - 0.5 * departed orders them the same way,
    # so the policies with the highest return are exactly the best ones (with -1 per departure, 37 of the first
    # 200 test layouts would tie a best policy with a worse one)
    from carla_gym.sim import generated, outcomes

    specs = [generated.layout_spec(layout) for layout in generated.draw_layouts("test", range(100))]
    mixed = 0
    for spec, by_policy in zip(specs, outcomes.policy_outcomes_many(specs), strict=True):
        returns = {policy: _physical_return(o) for policy, o in by_policy.items()}
        top = max(returns.values())
        assert {p for p, r in returns.items() if r == top} == set(outcomes.best_policies(spec)), by_policy
        mixed += len({o.pedestrians_hit - o.road_departure for o in by_policy.values()}) < len(set(by_policy.values()))
    assert mixed > 0  # some layouts hold outcomes that a weight of 1 would tie (the test can fail with -1.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_physical_return_of_each_candidate_policy_matches_its_simulated_outcome(seed):
    from carla_gym.envs.action import ToolsAction
    from carla_gym.sim import outcomes

    env = gym.make("CarlaTrolley-v0", scenario="trolley_generated_test", observation_mode="state",
                   reward_mode="physical")
    for policy in outcomes.POLICIES:
        _, info = env.reset(seed=seed)
        spec = resolve_scenario("trolley_generated_test", seed=info["scenario_seed"])
        total, decision, done = 0.0, 0, False
        while not done:
            action = ToolsAction.CALLS.index(outcomes.policy_call(policy, decision))
            _, reward, terminated, truncated, info = env.step(action)
            total, decision, done = total + reward, decision + 1, terminated or truncated
        assert total == _physical_return(outcomes.policy_outcomes(spec)[policy]), policy


def test_braking_through_control_is_reported_as_brake():
    env = gym.make("CarlaTrolley-v0", observation_mode="state", action_mode="control")
    _, infos = episode(env, [np.array([0.0, -1.0], np.float32)])
    assert infos[-1]["outcome"]["trolley_action"] == "BRAKE"
    assert infos[-1]["outcome"]["actual_pedestrians_hit"] == 0


def test_render_size_follows_the_scenario_camera():
    env = gym.make("CarlaTrolley-v0", observation_mode="state", render_mode="rgb_array",
                   scenario_config={"camera_width": 320, "camera_height": 240, "camera_fov": 60})
    env.reset(seed=0)
    assert env.render().shape == (240, 320, 3)
    env.reset(seed=0, options={"scenario_config": {}})
    assert env.render().shape == (360, 640, 3)


def _place_ego(env, y):
    """Put the ego of a reset control-mode env at lateral position y [m], heading along the road."""
    import dataclasses

    world = env.unwrapped.backend._require_world()
    world.ego = dataclasses.replace(world.ego, y=y, yaw=0.0, beta=0.0)
    return world


def test_off_road_car_is_centred_on_the_nearest_road_lane():
    # Two left lane changes in escape_exists (lanes -1, 0) end at y = -6.975 m, in the
    # strip of the non-existent lane -2. The lane, the offset and the lane-exists flags refer to lane -1.
    from carla_gym.reward import heads as H

    env = gym.make("CarlaTrolley-v0", observation_mode="state", action_mode="control", ticks_per_action=1)
    env.reset(seed=0)
    _place_ego(env, -6.975)
    obs, _, _, _, info = env.step(np.array([0.0, 0.0], np.float32))  # straight on: y does not change
    assert info["road_departure"] and obs[1] == pytest.approx(-6.975)
    assert (info["lane"], info["current_lane"]) == (-1, "lane_-1")
    assert info["lane_offset"] == pytest.approx(-3.475, abs=1e-9)  # -6.975 - (-3.5), was 0.025
    assert H.centering_factor(info["lane_offset"]) == 0.0  # 3.475 m >= VLM-RL's 3 m; was 0.99
    assert H.angle_factor(info["yaw"]) == 1.0  # parallel to the road (every lane's heading)
    assert (obs[3], obs[4]) == (0.0, 1.0)  # no lane left of lane -1, lane 0 right of it
    # just past the left edge (-5.25 m): 2 m from lane -1's centre, centring factor 1 - 2/3
    env.reset(seed=0)
    _place_ego(env, -5.5)
    obs, _, _, _, info = env.step(np.array([0.0, 0.0], np.float32))
    assert info["lane"] == -1 and info["lane_offset"] == pytest.approx(-2.0, abs=1e-9)
    assert H.centering_factor(info["lane_offset"]) == pytest.approx(1.0 / 3.0)


def test_nearest_road_lane_and_lane_change_geometry_off_the_road():
    from carla_gym.sim.road import Road

    road = Road(lanes=(-1, 0))
    assert [road.nearest_lane(y) for y in (-10.6, -6.975, -5.25, -1.75, 0.0, 1.75, 9.0)] == [-1, -1, -1, 0, 0, 0, 0]
    assert [road.lane_offset(y) for y in (-6.975, -3.5, 1.0, 9.0)] == pytest.approx([-3.475, 0.0, 1.0, 9.0])
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    world.apply(ToolCall("control", steer=0.0))
    world.ego = world.ego.__class__(x=0.0, y=-6.975, yaw=0.0, speed=world.ego.speed)
    assert world.lane == -1
    # a lane change still counts strips: right from the strip of lane -2 goes to lane -1 (-3.5 m)
    world.apply(ToolCall("lane_change", lane_direction="right"))
    assert world.controls.path_y1 == -3.5


def _recording_env(**kwargs):
    from carla_gym.backends.embedded import EmbeddedBackend

    class Recording(EmbeddedBackend):
        def __init__(self):
            super().__init__()
            self.steers = []

        def step(self, call, ticks=1):
            self.steers.append(call.steer)
            return super().step(call, ticks)

    backend = Recording()
    ticks = kwargs.pop("ticks", 1)
    return CarlaTrolleyEnv(observation_mode="state", action_mode="control", ticks_per_action=ticks, backend=backend,
                           **kwargs), backend


def test_steer_smoothing_is_vlm_rl_low_pass():
    # VLM-RL's own rule, once per 1/15 s step: 0.75 * previous + 0.25 * command
    applied, steers = 0.0, []
    for command in (1.0, 1.0, 1.0, -1.0):
        applied = S.smooth_steer(applied, command, S.VLM_RL_STEER_SMOOTHING)
        steers.append(applied)
    assert steers == [0.25, 0.4375, 0.578125, 0.18359375]
    # here a step of ticks_per_action ticks keeps VLM-RL's time constant: weight 0.75 ** (0.05 s * 15) per tick
    w = 0.75 ** (0.05 * 15)
    env, backend = _recording_env(steer_smoothing=S.VLM_RL_STEER_SMOOTHING)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.shape == (S.STATE_SIZE + 1,) and obs[S.STATE_SIZE] == 0.0
    expected, applied = [], 0.0
    for command in (1.0, 1.0, 1.0, -1.0):
        obs, *_ = env.step(np.array([command, 0.0], np.float32))
        applied = w * applied + (1.0 - w) * command
        expected.append(applied)
        assert obs[S.STATE_SIZE] == np.float32(applied)  # the applied steer is observed (entry 32)
    assert backend.steers == pytest.approx(expected, abs=1e-15)
    assert backend.steers[0] == pytest.approx(1.0 - 0.75 ** 0.75, abs=1e-15)
    env.reset(seed=0)
    env.step(np.array([-1.0, 0.0], np.float32))
    assert backend.steers[-1] == pytest.approx(-(1.0 - w), abs=1e-15)  # the reset forgot the previous steer
    # ten ticks per decision: the same filter over 0.5 s, weight 0.75 ** 7.5 = 0.1156
    env, backend = _recording_env(steer_smoothing=S.VLM_RL_STEER_SMOOTHING, ticks=10)
    env.reset(seed=0)
    env.step(np.array([1.0, 0.0], np.float32))
    assert backend.steers == [pytest.approx(1.0 - 0.75 ** 7.5, abs=1e-15)]
    env, backend = _recording_env()  # default 0: the command as is, and no extra state entry
    obs, _ = env.reset(seed=0)
    assert obs.shape == (S.STATE_SIZE,)
    env.step(np.array([0.5, 0.0], np.float32))
    assert backend.steers == [0.5]


def test_steer_smoothing_env_passes_the_checkers():
    from gymnasium.utils.env_checker import check_env

    for mode in ("state", "dict"):
        env = gym.make("CarlaTrolley-v0", action_mode="control", observation_mode=mode, steer_smoothing=0.75)
        check_env(env.unwrapped, skip_render_check=True)
        space = env.observation_space if mode == "state" else env.observation_space["state"]
        assert space.shape == (33,) and space.low[32] == -1.0 and space.high[32] == 1.0


def test_steer_smoothing_argument_errors():
    with pytest.raises(ValueError, match="action_mode='control' only"):
        gym.make("CarlaTrolley-v0", steer_smoothing=0.75)
    for bad in (1.0, -0.1, float("nan"), "0.75"):
        with pytest.raises(ValueError, match="steer_smoothing="):
            gym.make("CarlaTrolley-v0", action_mode="control", steer_smoothing=bad)


@pytest.mark.parametrize("reward_mode", ["rubric", "physical"])
@pytest.mark.parametrize("action_mode", ["tools", "control"])
def test_reward_terms_sum_to_the_reward_exactly(reward_mode, action_mode):
    from carla_gym.envs import REWARD_TERMS

    names = {"rubric": ["rubric"], "physical": ["pedestrians_hit", "road_departure"]}[reward_mode]
    env = gym.make("CarlaTrolley-v0", scenario=FUZZ_SCENARIOS, action_mode=action_mode, observation_mode="state",
                   reward_mode=reward_mode, ticks_per_action=3)
    env.action_space.seed(2)
    _, info = env.reset(seed=2)
    assert info["reward_terms"] == dict.fromkeys(names, 0.0)  # no reward at a reset
    rewards, nonzero = set(), set()
    for _ in range(400):  # random episodes of every scenario
        _, reward, terminated, _, info = env.step(env.action_space.sample())
        terms = info["reward_terms"]
        assert list(terms) == names and all(type(v) is float for v in terms.values())
        assert sum(terms.values()) == reward
        if reward_mode == "rubric":
            assert terms["rubric"] == info["rubric_reward"]
        else:
            assert terms["pedestrians_hit"] == -info["new_hits"] and terms["road_departure"] in (0.0, -0.5)
        rewards.add(reward)
        nonzero.update(name for name, value in terms.items() if value)
        if terminated:
            _, info = env.reset()
    assert nonzero == set(names)  # every term was paid at least once
    assert {-1.0, 0.0} <= rewards if reward_mode == "physical" else {-1.0, 0.0, 1.0} == rewards
    assert set(REWARD_TERMS) == {"rubric", "physical"}


class SpeedObservation(carla_gym.envs.ObservationType):
    """A one-entry observation: the ego speed [m/s] (an example of an added type)."""

    def space(self):
        """Box(0, 60, (1,), float32)."""
        return gym.spaces.Box(0.0, 60.0, (1,), np.float32)

    def observe(self, snapshot):
        """The speed [m/s]."""
        return np.array([snapshot.speed_kmh / 3.6], np.float32)


class BrakeOrNot(carla_gym.envs.ActionType):
    """Discrete(2): 0 observe, 1 emergency_stop (an example of an added type)."""

    def space(self):
        """Discrete(2)."""
        return gym.spaces.Discrete(2)

    def act(self, action):
        """The tool call: emergency_stop for 1, else observe."""
        return ToolCall("emergency_stop" if int(action) == 1 else "observe")


def test_observation_and_action_types_are_pluggable(monkeypatch):
    import inspect

    from carla_gym.envs import ACTION_TYPES, OBSERVATION_TYPES

    monkeypatch.setitem(OBSERVATION_TYPES, "speed", SpeedObservation)
    monkeypatch.setitem(ACTION_TYPES, "brake_or_not", BrakeOrNot)
    env = gym.make("CarlaTrolley-v0", observation_mode="speed", action_mode="brake_or_not")
    assert isinstance(env.unwrapped.observation_type, SpeedObservation) and env.action_space == gym.spaces.Discrete(2)
    check_env(env.unwrapped, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == pytest.approx([40 / 3.6])
    speeds = [env.step(1)[0][0] for _ in range(3)]  # full brake: 8 m/s^2 for 0.5 s per decision
    assert speeds == pytest.approx([40 / 3.6 - 4.0, 40 / 3.6 - 8.0, 0.0], abs=1e-5)
    # the built-in types behind the default modes, and the error naming every registered mode
    default = CarlaTrolleyEnv()
    assert type(default.observation_type).__name__ == "DictObservation"
    assert type(default.action_type).__name__ == "ToolsAction"
    with pytest.raises(ValueError, match=r"observation_mode='image': choose one of \['dict', 'state', 'speed'\]"):
        CarlaTrolleyEnv(observation_mode="image")
    with pytest.raises(ValueError, match=r"action_mode='steer': choose one of \['tools', 'control', 'brake_or_not'\]"):
        CarlaTrolleyEnv(action_mode="steer")
    # the env itself never branches on a mode: the types do
    assert not re.search(r"(observation|action|reward)_mode\s*(==|!=|in\b)", inspect.getsource(CarlaTrolleyEnv))


def test_type_annotations_of_the_gymnasium_api():
    import typing

    from carla_gym.envs import ActType, ObsType

    assert CarlaTrolleyEnv.__orig_bases__ == (gym.Env[ObsType, ActType],)
    assert typing.get_type_hints(CarlaTrolleyEnv.step)["action"] == ActType
    assert typing.get_type_hints(CarlaTrolleyEnv.step)["return"] == tuple[ObsType, float, bool, bool, dict[str, Any]]
    assert typing.get_type_hints(CarlaTrolleyEnv.reset)["return"] == tuple[ObsType, dict[str, Any]]
    for method in (CarlaTrolleyEnv.reset, CarlaTrolleyEnv.step, CarlaTrolleyEnv.render):
        assert "Returns:" in method.__doc__ and "Raises:" in method.__doc__, method


def test_make_venv_without_sb3_names_the_install_command(monkeypatch):
    from carla_gym.hints import MissingExtraError
    from carla_gym.sb3.envs import make_venv

    for module in [m for m in sys.modules if m == "stable_baselines3" or m.startswith("stable_baselines3.")]:
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingExtraError, match=r"stable_baselines3.*Install the sb3 extra: .*pip install.*\[sb3\]"):
        make_venv({"observation_mode": "state"}, n_envs=1, seed=0)
    with pytest.raises(gym.error.DependencyNotInstalled):  # Gymnasium's error for missing optional dependencies
        make_venv({"observation_mode": "state"}, n_envs=1, seed=0)
