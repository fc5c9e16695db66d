"""`gym.make_vec("CarlaTrolley-v0")` (the array core) against N single envs: bit-identical, with autoresets."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

import carla_gym  # noqa: F401
from carla_gym.envs.vector import CarlaTrolleyVectorEnv

MIXED = ["trolley_micro_escape_exists", "trolley_micro_classic_3v1", "trolley_micro_self_sacrifice_deadzone",
         "trolley_saves", "trolley_equal_deadzone", "bias_3v1_deadzone", "action_bias_less", "bias_0v0", "bias_2v5"]
GENERATED = ["trolley_generated_train", "trolley_generated_test"]


def make_vec(num_envs: int, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec("CarlaTrolley-v0", num_envs=num_envs, vectorization_mode="vector_entry_point", **kwargs)


def assert_same(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            assert_same(a[key], b[key])
    else:
        assert a.dtype == b.dtype and np.array_equal(a, b), (a, b)


def assert_reset_info(info: dict, i: int, single_info: dict) -> None:
    """The vector env's reset info of sub-env ``i`` names the single env's scenario (and layout seed, if generated)."""
    assert info["_scenario"][i] and info["scenario"][i] == single_info["scenario"]
    if "scenario_seed" in single_info:
        assert info["_scenario_seed"][i] and info["scenario_seed"][i] == single_info["scenario_seed"]
    else:
        assert not info.get("_scenario_seed", np.zeros(i + 1, dtype=bool))[i]


def compare(num_envs: int, steps: int, seed: int, scalar_rows: int | None = None,
            autoreset_mode: AutoresetMode = AutoresetMode.NEXT_STEP, **kwargs) -> int:
    """Random actions for ``steps`` steps on the vector env and on N single envs; every output must match.

    Args:
        num_envs: Sub-envs N.
        steps: Vector steps.
        seed: Reset seed (single env i: seed + i).
        scalar_rows: `TrolleyBatch.scalar_rows` (0: every decision in arrays; large: row by row in
            scalars); None keeps the default.
        autoreset_mode: NEXT_STEP (the step after an end resets) or SAME_STEP (the ending step resets,
            the last observation and info in ``final_obs``/``final_info``).
        **kwargs: Both envs' arguments.

    Returns:
        Episodes that ended.
    """
    envs = make_vec(num_envs, autoreset_mode=autoreset_mode, **kwargs)
    if scalar_rows is not None:
        envs.unwrapped.batch.scalar_rows = scalar_rows
    singles = [gym.make("CarlaTrolley-v0", **kwargs) for _ in range(num_envs)]
    obs, info = envs.reset(seed=seed)

    def row(obs, i):
        return {k: v[i] for k, v in obs.items()} if isinstance(obs, dict) else obs[i]

    for i, env in enumerate(singles):
        single_obs, single_info = env.reset(seed=seed + i)
        assert_same(single_obs, row(obs, i))
        assert_reset_info(info, i, single_info)
    envs.action_space.seed(seed)
    same_step = autoreset_mode == AutoresetMode.SAME_STEP
    waiting = np.zeros(num_envs, dtype=bool)  # NEXT_STEP: the step after an end resets
    ends = 0
    for _ in range(steps):
        actions = envs.action_space.sample()
        obs, rewards, terminated, truncated, info = envs.step(actions)
        assert not truncated.any()
        for i, env in enumerate(singles):
            if waiting[i]:
                (want_obs, reset_info), want_reward, want_term = env.reset(), 0.0, False
                assert_reset_info(info, i, reset_info)
            else:
                want_obs, want_reward, want_term, _, single_info = env.step(actions[i])
                step_info = info["final_info"] if same_step and want_term else info
                assert step_info["_rubric_reward"][i] and step_info["rubric_reward"][i] == single_info["rubric_reward"]
                assert step_info["new_hits"][i] == single_info["new_hits"]
                assert {k: v[i] for k, v in step_info["reward_terms"].items()} == single_info["reward_terms"]
                if want_term:
                    assert step_info["_outcome"][i] and step_info["outcome"][i] == single_info["outcome"]
                    ends += 1
                    if same_step:  # reset in this step: the final observation aside, the new episode's first
                        assert info["_final_obs"][i]
                        assert_same(want_obs if isinstance(want_obs, dict) else np.asarray(want_obs),
                                    info["final_obs"][i])
                        (want_obs, reset_info), want_term = env.reset(), True
                        assert_reset_info(info, i, reset_info)
            assert_same(want_obs if isinstance(want_obs, dict) else np.asarray(want_obs), row(obs, i))
            assert rewards[i] == want_reward and terminated[i] == want_term
        waiting = terminated.copy() if not same_step else waiting
    return ends


@pytest.mark.parametrize(("kwargs", "min_ends"), [
    ({"observation_mode": "state", "ticks_per_action": 1, "scalar_rows": 0}, 20),
    ({"observation_mode": "state", "scenario": MIXED, "ticks_per_action": 3, "reward_mode": "physical"}, 150),
    ({"observation_mode": "state", "scenario": MIXED, "ticks_per_action": 3, "scalar_rows": 0}, 150),
    ({"observation_mode": "state", "scenario": MIXED, "action_mode": "control", "steer_smoothing": 0.75,
      "scalar_rows": 0}, 150),
    ({"observation_mode": "state", "scenario": MIXED, "action_mode": "control", "ticks_per_action": 1,
      "reward_mode": "physical"}, 100),
], ids=["escape-numpy", "mixed-physical-rows", "mixed-numpy", "control-smoothing-numpy", "control-physical-rows"])
@pytest.mark.parametrize("steps", [pytest.param(1000, marks=pytest.mark.slow), 200])
def test_vector_env_equals_single_envs(kwargs, min_ends, steps):
    # 1,000 random steps (the slow part), or 200 with proportionally fewer ends (the default part)
    assert compare(num_envs=6, steps=steps, seed=11, **kwargs) >= min_ends * steps // 1000


@pytest.mark.parametrize(("kwargs", "min_ends"), [
    ({"observation_mode": "state", "scenario": "trolley_generated_train", "scalar_rows": 0}, 600),
    ({"observation_mode": "state", "scenario": [*GENERATED, *MIXED[:4]], "reward_mode": "physical",
      "autoreset_mode": AutoresetMode.SAME_STEP}, 1000),
    ({"observation_mode": "state", "scenario": GENERATED, "action_mode": "control", "steer_smoothing": 0.5,
      "autoreset_mode": AutoresetMode.SAME_STEP, "scalar_rows": 0}, 700),
], ids=["generated-numpy", "generated-mixed-physical-same-step-rows", "generated-control-same-step-numpy"])
@pytest.mark.parametrize("steps", [pytest.param(1000, marks=pytest.mark.slow), 100])
def test_generated_scenarios_equal_single_envs(kwargs, min_ends, steps):
    # a new layout at every reset, drawn from each sub-env's np_random: sub-env i seeded s + i is the
    # single env seeded s + i (observations, rewards, ends, outcomes with their layout and best outcome)
    assert compare(num_envs=6, steps=steps, seed=5, **kwargs) >= min_ends * steps // 1000


def test_generated_layouts_change_at_every_reset_and_reach_the_outcome():
    envs = make_vec(3, observation_mode="state", scenario="trolley_generated_test", ticks_per_action=10)
    obs, info = envs.reset(seed=0)
    seeds = {int(s) for s in info["scenario_seed"]}
    assert info["_scenario_seed"].all() and len(seeds) == 3
    batch = envs.unwrapped.batch
    assert batch.width == 8 and [spec.seed for spec in batch.row_specs] == info["scenario_seed"].tolist()
    outcomes = []
    for _ in range(40):
        obs, _, terminated, _, info = envs.step(np.zeros(3, dtype=int))  # observe
        if "outcome" in info:
            outcomes += [o for o in info["outcome"][info["_outcome"]]]
        if "scenario_seed" in info:
            seeds |= {int(s) for s in info["scenario_seed"][info["_scenario_seed"]]}
    assert len(outcomes) >= 6 and len(seeds) >= 9
    for o in outcomes:  # observing at every decision of 10 ticks is the observe policy: success where it is best
        assert o["family"] == "trolley_generated" and o["scenario"] == "trolley_generated_test"
        assert o["outcome_success"] == ("observe" in o["best_policies"])
        assert set(o["layout"]) == {"speed_kmh", "left_lane", "right_lane", "groups"}


def test_a_pickled_generated_vector_env_continues_as_the_original():
    # a checkpoint: the layouts drawn ahead stay in the saving process's cache, the copy draws its own again
    envs = make_vec(3, observation_mode="state", scenario=[*GENERATED, "bias_3v1"]).unwrapped
    envs.reset(seed=2)
    rng = np.random.default_rng(0)
    for _ in range(5):
        envs.step(rng.integers(0, 4, size=3))
    copy = pickle.loads(pickle.dumps(envs))
    assert (copy._ahead == 0).all() and (envs._ahead > 0).any()
    seeds = 0
    for _ in range(40):
        actions = rng.integers(0, 4, size=3)
        (obs, reward, terminated, _, info), (want_obs, want_reward, want_terminated, _, want) = (
            copy.step(actions), envs.step(actions))
        assert np.array_equal(obs, want_obs) and np.array_equal(reward, want_reward)
        assert np.array_equal(terminated, want_terminated)
        if "scenario_seed" in want:
            assert np.array_equal(info["scenario_seed"], want["scenario_seed"])
            seeds += int(want["_scenario_seed"].sum())
    assert seeds >= 5


@pytest.mark.parametrize("view", ["front", "birdeye"])
def test_image_observations_equal_single_envs(view):
    # images of every world rendered in one call (render_batch), pixel for pixel the single envs' frames
    kwargs = {"scenario": [*MIXED, *GENERATED], "image_view": view, "image_width": 48, "image_height": 32,
              "ticks_per_action": 2}  # generated: each world's road and people are its own layout's
    assert compare(num_envs=4, steps=120, seed=3, **kwargs) >= 10


def test_make_vec_returns_the_native_env_and_checks_spaces():
    envs = gym.make_vec("CarlaTrolley-v0", num_envs=4, observation_mode="state")  # the default mode is native
    assert isinstance(envs.unwrapped, CarlaTrolleyVectorEnv)
    assert envs.metadata["autoreset_mode"] == AutoresetMode.NEXT_STEP
    assert envs.observation_space.shape == (4, 32) and envs.action_space.nvec.tolist() == [4] * 4
    obs, info = envs.reset(seed=3)
    assert envs.observation_space.contains(obs) and info["scenario"].tolist() == ["trolley_micro_escape_exists"] * 4
    assert info["_scenario"].all() and set(info) == {"scenario", "_scenario"}
    control = make_vec(2, action_mode="control", steer_smoothing=0.5, observation_mode="state")
    assert control.observation_space.shape == (2, 33) and control.action_space.shape == (2, 2)


def test_same_step_autoreset_reports_the_final_observation():
    kwargs = {"observation_mode": "state", "scenario": "bias_3v1", "ticks_per_action": 1}  # deadline: 4 ticks
    envs = make_vec(2, autoreset_mode=AutoresetMode.SAME_STEP, **kwargs)
    reference = make_vec(2, **kwargs)
    obs, _ = envs.reset(seed=0)
    reference.reset(seed=0)
    final, _, terminated, _, info = reference.step(np.array([2, 0]))  # the swerve ends bias_3v1 at once
    obs, rewards, term, _, info = envs.step(np.array([2, 0]))
    assert term.tolist() == terminated.tolist() == [True, False] and rewards.tolist() == [1.0, 0.0]
    assert info["_final_obs"].tolist() == [True, False] and np.array_equal(info["final_obs"][0], final[0])
    assert info["final_info"]["outcome"][0]["trolley_action"] == "SWERVE_LEFT"
    assert obs[0][0] == 0.0 and obs[0][7] == pytest.approx(0.2)  # reset in the same step: 0 m/s, 4 ticks left
    obs, rewards, term, _, info = envs.step(np.array([2, 0]))  # no autoreset step: world 0 acts at once
    assert term.tolist() == [True, False] and rewards.tolist() == [1.0, 0.0] and info["_final_obs"].tolist() == [
        True, False]


def test_bad_input_is_refused_without_corrupting_any_world():
    envs = make_vec(3, observation_mode="state")
    with pytest.raises(RuntimeError, match="reset"):
        envs.step(np.zeros(3, dtype=int))
    obs, _ = envs.reset(seed=1)
    state = envs.unwrapped.batch.state
    before = (state.ego.x.copy(), state.tick.copy())
    for bad, match in ((np.zeros(2, dtype=int), r"shape \(3,\)"), (np.array([0, 4, 1]), r"actions\[1\]=4"),
                       (np.array([0.5, 0, 1]), r"integers of shape \(3,\)"), (np.array([-1, 0, 0]), r"in \[0, 3\]")):
        with pytest.raises(ValueError, match=match):
            envs.step(bad)
    assert np.array_equal(state.ego.x, before[0]) and np.array_equal(state.tick, before[1])
    control = make_vec(2, action_mode="control", observation_mode="state")
    control.reset(seed=0)
    for bad, match in ((np.zeros((2, 3)), r"shape \(2, 2\)"), (np.array([[0.0, 2.0], [0, 0]]), r"actions\[0\]"),
                       (np.array([[np.nan, 0.0], [0, 0]]), r"in \[-1, 1\]")):
        with pytest.raises(ValueError, match=match):
            control.step(bad)
    for kwargs, match in (({"num_envs": 0}, "num_envs=0"), ({"num_envs": 2, "backend": "openenv"}, "sync"),
                          ({"num_envs": 2, "render_mode": "rgb_array"}, "render_mode"),
                          ({"num_envs": 2, "autoreset_mode": "Disabled"}, "autoreset_mode"),
                          ({"num_envs": 2, "scenario": "nope"}, "Unknown scenario")):
        with pytest.raises(ValueError, match=match):
            CarlaTrolleyVectorEnv(**kwargs)
    with pytest.raises(ValueError, match="seed"):
        envs.reset(seed=[1, 2])
    with pytest.raises(ValueError, match="scenario"):
        envs.reset(options={"scenario": "bias_3v1"})


def test_time_limit_truncates_as_gymnasiums_time_limit_on_single_envs():
    kwargs = {"observation_mode": "state", "scenario": MIXED, "ticks_per_action": 1, "max_episode_steps": 7}
    envs, singles = make_vec(3, **kwargs), [gym.make("CarlaTrolley-v0", **kwargs) for _ in range(3)]
    envs.reset(seed=4)
    for i, env in enumerate(singles):
        env.reset(seed=4 + i)
    rng, waiting, truncations = np.random.default_rng(0), np.zeros(3, dtype=bool), 0
    for _ in range(60):
        actions = rng.integers(0, 2, size=3)  # observe or brake: episodes reach the limit
        obs, rewards, terminated, truncated, _ = envs.step(actions)
        for i, env in enumerate(singles):
            if waiting[i]:
                want = (env.reset()[0], 0.0, False, False)
            else:
                want = env.step(actions[i])[:4]
            assert np.array_equal(obs[i], want[0]) and (rewards[i], terminated[i], truncated[i]) == want[1:]
        truncations += int(truncated.sum())
        waiting = terminated | truncated
    assert truncations >= 5


def test_same_step_final_info_holds_only_the_sub_envs_that_ended():
    envs = make_vec(2, observation_mode="state", scenario="bias_3v1", ticks_per_action=1,
                    autoreset_mode=AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    _, _, terminated, _, info = envs.step(np.array([2, 0]))
    final = info["final_info"]
    assert terminated.tolist() == [True, False]
    assert final["_rubric_reward"].tolist() == [True, False] and final["_outcome"].tolist() == [True, False]
    assert info["_rubric_reward"].tolist() == [False, True] and "outcome" not in info  # the reset's info is empty


def test_inputs_single_envs_take_are_taken_alike():
    control = make_vec(2, action_mode="control", observation_mode="state")
    control.reset(seed=2**70)  # Gymnasium's seeding takes big seeds
    single = gym.make("CarlaTrolley-v0", action_mode="control", observation_mode="state")
    single.reset(seed=2**70)
    obs, *_ = control.step(np.array([[True, False], [False, True]]))  # booleans are numbers to both
    assert np.array_equal(obs[0], single.step(np.array([True, False]))[0])
    tools = make_vec(2, observation_mode="state")
    tools.reset(seed=0)
    with pytest.raises(ValueError, match=r"integers of shape \(2,\)"):
        tools.step(np.array([np.inf, 0.0]))
    with pytest.raises(ValueError, match="selects no sub-env"):
        tools.reset(options={"reset_mask": np.zeros(2, dtype=bool)})
    with pytest.raises(ValueError, match="seed=-1"):
        tools.reset(seed=[0, -1])


def test_partial_reset_with_a_mask():
    envs = make_vec(3, observation_mode="state")
    obs, _ = envs.reset(seed=5)
    obs1, *_ = envs.step(np.array([1, 1, 1]))
    obs2, _ = envs.reset(options={"reset_mask": np.array([False, True, False])})
    assert np.array_equal(obs2[[0, 2]], obs1[[0, 2]]) and np.array_equal(obs2[1], obs[1])
