"""The batched SB3 VecEnv (`carla_gym.sb3.vec_env`): equal to DummyVecEnv of single envs, in train_sb3.py, resumable."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from test_train_sb3 import crash_at, run_main, same_params  # noqa: E402 - train_sb3's own test helpers

import train_sb3  # noqa: E402
from carla_gym.sb3 import checkpoint as checkpoints  # noqa: E402
from carla_gym.sb3.envs import make_venv  # noqa: E402
from carla_gym.sb3.vec_env import CarlaTrolleyVecEnv  # noqa: E402

MIXED = ["trolley_micro_escape_exists", "trolley_micro_classic_3v1", "trolley_saves", "bias_3v1_deadzone",
         "action_bias_less"]
TINY = ["--total-timesteps", "192", "--n-envs", "2", "--hp", "n_steps=16", "batch_size=16", "--eval-episodes", "2",
        "--eval-freq", "96", "--checkpoint-freq", "64"]
"""A tiny PPO run of train_sb3.py: 6 rollouts of 2 x 16 steps, checkpoints every 2 rollouts."""


def assert_same(a, b) -> None:
    """Equal bits and dtype (dicts key by key)."""
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and np.array_equal(a, b), (a, b)


def random_actions(venv, rng: np.random.Generator) -> np.ndarray:
    """One random action per env: tool indices int64 (N,) or controls float32 (N, 2) in [-1, 1]."""
    if venv.action_space.shape == ():
        return rng.integers(0, venv.action_space.n, venv.num_envs)
    return rng.uniform(-1, 1, (venv.num_envs, 2)).astype(np.float32)


def assert_same_reset_infos(batched, dummy, envs) -> None:
    """The reset infos of ``envs`` name the same scenario and, for a generated one, the same layout seed."""
    for i in envs:
        got, want = batched.unwrapped.reset_infos[i], dummy.unwrapped.reset_infos[i]
        assert got["scenario"] == want["scenario"] and got.get("scenario_seed") == want.get("scenario_seed")
        assert ("scenario_seed" in got) == want["scenario"].startswith("trolley_generated")


def run_both(steps: int, n_envs: int = 3, seed: int = 7, **kwargs) -> int:
    """Random actions on the batched and the dummy VecEnv of ``make_venv``; every output must match. Returns ends."""
    batched = make_venv(kwargs, n_envs, seed, vec_env="batched")
    dummy = make_venv(kwargs, n_envs, seed, vec_env="dummy")
    assert isinstance(batched.unwrapped, CarlaTrolleyVecEnv)
    assert batched.observation_space == dummy.observation_space and batched.action_space == dummy.action_space
    assert_same(batched.reset(), dummy.reset())
    assert_same_reset_infos(batched, dummy, range(n_envs))
    rng = np.random.default_rng(seed)
    ends = 0
    for _ in range(steps):
        actions = random_actions(dummy, rng)
        obs, rewards, dones, infos = batched.step(actions)
        want_obs, want_rewards, want_dones, want_infos = dummy.step(actions)
        assert_same(obs, want_obs)
        assert_same(rewards, want_rewards)  # float32, as DummyVecEnv stores them
        assert_same(dones, want_dones)
        for got, want in zip(infos, want_infos, strict=True):
            for key in ("rubric_reward", "raw_reward", "new_hits", "reward_terms", "TimeLimit.truncated"):
                assert got[key] == want[key] and type(got[key]) is type(want[key]), key
            ended = "outcome" in want
            assert ("outcome" in got, "terminal_observation" in got, "episode" in got) == (ended, ended, ended)
            if "outcome" in want:
                ends += 1
                assert got["outcome"] == want["outcome"]
                assert_same(got["terminal_observation"], want["terminal_observation"])
                # VecMonitor (float32 sum) and Monitor (float64 sum rounded to 6 digits): the same episode
                assert got["episode"]["l"] == want["episode"]["l"]
                assert abs(got["episode"]["r"] - want["episode"]["r"]) < 1e-5
        assert_same_reset_infos(batched, dummy, np.flatnonzero(dones).tolist())
    batched.close()
    dummy.close()
    return ends


@pytest.mark.parametrize(("kwargs", "steps", "min_ends"), [
    (dict(observation_mode="state", scenario=MIXED), 300, 60),
    (dict(observation_mode="state", action_mode="control", scenario=MIXED, steer_smoothing=0.75,
          reward_mode="physical"), 200, 20),
    (dict(observation_mode="dict", scenario=MIXED[:2], image_width=32, image_height=24), 60, 10),
    (dict(observation_mode="state", scenario=["trolley_generated_train", *MIXED[:2]], reward_mode="physical"), 150,
     40),
    (dict(observation_mode="dict", scenario=["trolley_generated_test"], image_width=32, image_height=24), 40, 10),
], ids=["state-tools", "state-control-smoothing", "dict-tools", "generated-mixed-physical", "generated-dict"])
def test_batched_equals_dummy_of_single_envs(kwargs, steps, min_ends):
    assert run_both(steps, **kwargs) >= min_ends  # the comparison crossed many autoresets


def test_seed_and_per_env_options_reach_each_env_as_with_dummy():
    options = [{"scenario": "trolley_saves"}, {}, {"scenario": "bias_3v1_deadzone"}]
    venvs = [make_venv({"observation_mode": "state", "scenario": MIXED}, 3, 0, vec_env=kind)
             for kind in ("batched", "dummy")]
    for venv in venvs:
        venv.reset()  # started; the next reset takes new seeds and per-env options (partial resets by group)
        assert venv.seed(41) == [41, 42, 43]
        venv.set_options(options)
    assert_same(venvs[0].reset(), venvs[1].reset())
    generators = [venv.get_attr("np_random") for venv in venvs]
    assert [g.bit_generator.state for g in generators[0]] == [g.bit_generator.state for g in generators[1]]
    for venv in venvs:  # seeds and options are used once: the next reset continues each env's generator
        venv.set_options({"scenario": "trolley_micro_escape_exists"})
    assert_same(venvs[0].reset(), venvs[1].reset())
    assert_same(venvs[0].step(np.array([1, 2, 3]))[0], venvs[1].step(np.array([1, 2, 3]))[0])


def test_attributes_are_the_shared_settings_and_per_env_state_is_refused_clearly():
    from stable_baselines3.common.monitor import Monitor

    venv = make_venv({"observation_mode": "state", "ticks_per_action": 5}, 3, 0, vec_env="batched")
    assert venv.get_attr("ticks_per_action") == [5, 5, 5] and venv.get_attr("render_mode", indices=1) == [None]
    assert venv.has_attr("scenarios") and not venv.has_attr("speed_kmh")
    with pytest.raises(AttributeError, match=r"no per-env attribute '_snapshot'.*vec_env='dummy'"):
        venv.get_attr("_snapshot")
    with pytest.raises(AttributeError, match=r"cannot set 'ticks_per_action'.*fixed at construction"):
        venv.set_attr("ticks_per_action", 1)
    with pytest.raises(AttributeError, match=r"no per-env method 'render'"):
        venv.env_method("render")
    with pytest.raises(IndexError, match=r"env index 3: this VecEnv has envs 0 to 2"):
        venv.get_attr("scenarios", indices=[3])
    assert venv.env_is_wrapped(Monitor) == [False, False, False]
    with pytest.raises(RuntimeError, match=r"call step_async"):
        venv.unwrapped.step_wait()


@pytest.mark.parametrize(("settings", "problem"), [
    (dict(env_kwargs={}, clip=("model", "add", 0.1, False)), "CLIP shaping needs each env's reward frame"),
    (dict(env_kwargs={}, urls=["http://localhost:8000"]), "embedded simulator only"),
    (dict(env_kwargs={}, env_id="CarlaNavigation-v0"), "CarlaTrolley-v0 only"),
    (dict(env_kwargs={"info_text": True}), "info_text=True"),
])
def test_make_venv_refuses_batched_where_it_cannot_run_and_names_dummy(settings, problem):
    with pytest.raises(ValueError, match=rf"vec_env='batched' cannot run these settings: .*{problem}.*vec_env='dummy'"):
        make_venv(n_envs=2, seed=0, vec_env="batched", **settings)


def test_train_sb3_falls_back_from_the_default_and_refuses_an_explicit_batched():
    openenv = ["--backend", "openenv", "--env-urls", "http://localhost:8000"]
    args = train_sb3.resolve(train_sb3.parse_args(openenv), openenv)
    assert args.vec_env == "batched"  # the default
    resolved, note = train_sb3.resolve_vec_env(args, openenv)
    assert resolved.vec_env == "dummy"
    assert note == ("note: --vec-env dummy (the default batched env cannot run this: it runs the embedded simulator "
                    "only (not OpenEnv servers))")
    explicit = [*openenv, "--vec-env", "batched"]
    with pytest.raises(SystemExit, match=r"--vec-env batched cannot run this: .*; use --vec-env dummy \(or subproc\)"):
        train_sb3.resolve_vec_env(train_sb3.resolve(train_sb3.parse_args(explicit), explicit), explicit)
    plain = train_sb3.resolve(train_sb3.parse_args([]), [])
    assert train_sb3.resolve_vec_env(plain, []) == (plain, None)


def test_checkpoint_captures_the_batched_worlds_and_the_monitor_mid_episode(tmp_path):
    kwargs = {"observation_mode": "state", "scenario": MIXED}
    venv = make_venv(kwargs, 3, 0, vec_env="batched")
    venv.reset()
    rng = np.random.default_rng(0)
    for _ in range(7):
        venv.step(random_actions(venv, rng))
    assert checkpoints.envs_reset_reason(venv) is None
    blob = checkpoints.capture_envs(venv)
    again = make_venv(kwargs, 3, 0, vec_env="batched")
    checkpoints.restore_envs(again, blob, tmp_path)
    episodes = 0
    for _ in range(40):
        actions = random_actions(venv, rng)
        (obs, rewards, dones, infos), want = again.step(actions), venv.step(actions)
        assert_same(obs, want[0])
        assert_same(rewards, want[1])
        assert_same(dones, want[2])
        for got, expected in zip(infos, want[3], strict=True):
            if "episode" in expected:  # the restored VecMonitor continues the running returns and lengths
                episodes += 1
                assert (got["episode"]["r"], got["episode"]["l"]) == (expected["episode"]["r"],
                                                                      expected["episode"]["l"])
    assert episodes >= 10
    with pytest.raises(ValueError, match=r"its envs are batched, the run's vec env is DummyVecEnv; resume with the "
                                         r"run's own --vec-env"):
        checkpoints.restore_envs(make_venv(kwargs, 3, 0, vec_env="dummy"), blob, tmp_path)
    with pytest.raises(ValueError, match=r"3 envs saved, 2 given"):
        checkpoints.restore_envs(make_venv(kwargs, 2, 0, vec_env="batched"), blob, tmp_path)


@pytest.fixture(scope="module")
def batched_run(tmp_path_factory) -> tuple[Path, str]:
    """A tiny PPO run of train_sb3.py with the default vec env: its directory and what it printed."""
    out = tmp_path_factory.mktemp("batched") / "run"
    return out, run_main(*TINY, "--output-dir", str(out))


def test_train_sb3_runs_ppo_on_the_batched_env_by_default_and_learns_as_with_dummy(batched_run, tmp_path):
    out, stdout = batched_run
    assert not stdout.startswith("note:")
    assert json.loads((out / "config.json").read_text())["args"]["vec_env"] == "batched"
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["total_timesteps"] == 192 and evaluation["episodes_per_scenario"] == 2
    assert [row[0] for row in _csv(out / "evaluations.csv")] == ["timesteps", "96", "192"]
    assert (out / "learning_curve.png").is_file() and (out / "checkpoints" / "step_192").is_dir()
    dummy = tmp_path / "dummy"
    run_main(*TINY, "--vec-env", "dummy", "--output-dir", str(dummy))
    # the same episodes, so the same rollouts and updates: the same network, bit for bit
    assert same_params(out / "model.zip", dummy / "model.zip")


@pytest.mark.slow  # the checkpoint test above covers the batched worlds in the default part
def test_resume_of_a_batched_run_after_a_crash_matches_the_uninterrupted_run(batched_run, tmp_path):
    full, _ = batched_run
    crashed = tmp_path / "crashed"
    crash_at([*TINY, "--output-dir", str(crashed)], 128)
    state = checkpoints.latest_checkpoint(crashed / "checkpoints")
    assert state.name == "step_64"
    stdout = run_main("--resume", str(crashed))
    assert "resuming" in stdout and "statistically equivalent" not in stdout  # the worlds travelled in the checkpoint
    assert same_params(crashed / "model.zip", full / "model.zip")
    assert _csv(crashed / "evaluations.csv")[1:][0][:3] == _csv(full / "evaluations.csv")[1:][0][:3]


def _csv(path: Path) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines()]
