"""train_sb3.py on CarlaNavigation-v0: flags and refusals, VLM-RL's extractor, tiny PPO/SAC runs, CLIP on navigation.

Learning itself is measured by benchmarks/learn_nav.py (docs/performance.md); here the runs are a few hundred
steps and evaluate one or two of VLM-RL's evaluation routes.
"""

from __future__ import annotations

import csv
import json
import pickle
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # train_sb3.py is a script at the repository root
    sys.path.insert(0, str(REPO))

from test_train_sb3 import refusal, run_main  # noqa: E402 - the helpers of train_sb3's own tests

import train_sb3  # noqa: E402
from carla_gym.sb3 import nav_eval, presets, runs  # noqa: E402
from carla_gym.sb3.evaluations import NAV_COLUMNS  # noqa: E402

NAV = "CarlaNavigation-v0"


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Torch on one thread: the models are tiny and threads only add contention on a shared machine."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# -- flags: navigation defaults and refusals ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", NAV, "--backend", "openenv"], "--backend applies to CarlaTrolley-v0 only"),
        (["--env", NAV, "--env-urls", "http://x"], "--env-urls applies to CarlaTrolley-v0 only"),
        (["--env", NAV, "--eval-episodes", "5"], "--eval-episodes applies to CarlaTrolley-v0 only; "
                                                 "CarlaNavigation-v0 takes --eval-routes N"),
        (["--env", NAV, "--reward-mode", "physical"], "--reward-mode physical applies to CarlaTrolley-v0 only"),
        (["--traffic", "0"], "--traffic applies to CarlaNavigation-v0 only: add --env CarlaNavigation-v0"),
        (["--route=eval"], "--route applies to CarlaNavigation-v0 only"),
        (["--observation-mode", "dict"], "(CarlaTrolley-v0's observation follows --policy)"),
        (["--eval-traffic", "0"], "--eval-traffic applies to CarlaNavigation-v0 only"),
        (["--reward-mode", "vlm-rl"], "--reward-mode vlm-rl applies to CarlaNavigation-v0 only"),
        (["--env", NAV, "--traffic", "10"], "--traffic: invalid choice: 10"),
        (["--env", "CarlaRacing-v0"], "--env: invalid choice: 'CarlaRacing-v0'"),
        (["--env", NAV, "--route", "48-21"], "--route 48-21: choose train, eval or two spawn indices START,END"),
        (["--env", NAV, "--eval-routes", "11"], "--eval-routes 11: must be in [1, 10]"),
        (["--env", NAV, "--policy", "MlpPolicy", "--observation-mode", "vlm-rl"],
         "--policy MlpPolicy cannot read --observation-mode vlm-rl: use --policy MultiInputPolicy"),
        (["--env", NAV, "--scenario", "trolley_micro_escape_exists"],
         "--scenario trolley_micro_escape_exists: train_sb3.py trains CarlaNavigation-v0 on route scenarios only; "
         "choose from route_Town01, route_Town02, route_Town03, route_Town04, route_Town05 (default route_Town02); "
         "maze_navigation and free_roam* are for train_grpo.py and python -m agents.compare"),
        (["--env", NAV, "--scenario", "route_Town02", "maze_navigation"],
         "--scenario maze_navigation: train_sb3.py trains CarlaNavigation-v0 on route scenarios only"),
        (["--env", NAV, "--steer-smoothing", "1.5"], "invalid environment settings: steer_smoothing=1.5"),
        (["--env", NAV, "--algo", "sac", "--action-mode", "tools"], "SAC cannot drive"),
    ],
)
def test_bad_navigation_flags_are_refused_before_writing(tmp_path, args, message):
    out = tmp_path / "run"
    got = refusal(*args, "--output-dir", str(out))
    assert message in got, got
    assert not out.exists()


def test_navigation_defaults_and_the_vlm_rl_preset():
    def resolved(*argv: str) -> train_sb3.Args:
        return train_sb3.resolve(train_sb3.parse_args(list(argv)), list(argv))

    args = resolved("--env", NAV)
    assert (args.scenario, args.ticks_per_action, args.action_mode, args.observation_mode, args.policy) == (
        ["route_Town02"], 1, "control", "state", "MlpPolicy")
    assert (args.steer_smoothing, args.reward_mode, args.traffic, args.route) == (0.0, "vlm-rl", 20, "train")
    assert args.total_timesteps == presets.NAV_DEFAULT_TIMESTEPS[("cpu", "ppo")] == 100_000  # the CPU recipe's
    assert presets.hyperparameters("cpu", "ppo", navigation=True) == {
        "n_steps": 512, "batch_size": 256, "learning_rate": 3e-4, "ent_coef": 0.0, "gamma": 0.99,
        "policy_kwargs": {"log_std_init": -1.0, "net_arch": [128, 128]}}
    assert presets.hyperparameters("cpu", "ppo")["n_steps"] == 128  # the trolley's cpu preset is unchanged
    assert train_sb3.env_kwargs(args) == {
        "scenario": ["route_Town02"], "scenario_config": {"traffic": 20, "route": "train"}, "action_mode": "control",
        "observation_mode": "state", "reward_mode": "vlm-rl", "steer_smoothing": 0.0, "ticks_per_action": 1}
    # VLM-RL's preset: its observation with MultiInputPolicy, steering smoothing 0.75 (VLM-RL config.py)
    args = resolved("--env", NAV, "--preset", "vlm-rl", "--algo", "sac", "--policy", "MultiInputPolicy")
    assert (args.observation_mode, args.steer_smoothing, args.action_mode) == ("vlm-rl", 0.75, "control")
    args = resolved("--env", NAV, "--observation-mode", "dict", "--route", "48,21", "--traffic", "0")
    assert args.policy == "MultiInputPolicy"  # follows the observation when --policy is not given
    assert train_sb3.env_kwargs(args)["scenario_config"] == {"traffic": 0, "route": [48, 21]}
    args = resolved("--env", NAV, "--clip", "vlm-rl", "--ticks-per-action", "3", "--steer-smoothing", "0.5")
    kwargs = train_sb3.env_kwargs(args)
    assert (kwargs["reward_frame_size"], kwargs["ticks_per_action"], kwargs["steer_smoothing"]) == (517, 3, 0.5)
    assert "reward_frame_size" not in runs.acting_env_kwargs(kwargs)  # the reward camera is training-only
    # the trolley defaults are unchanged
    args = resolved()
    assert (args.env, args.reward_mode, args.ticks_per_action, args.scenario) == (
        "CarlaTrolley-v0", "physical", 10, ["trolley_generated_train"])


# -- VLM-RL's feature extractor --------------------------------------------------------------------------------
def test_vlm_rl_extractor_shapes_and_parameter_count():
    import torch
    from gymnasium import spaces

    from carla_gym.sb3.extractor import VLMRLExtractor

    space = spaces.Dict({"seg_camera": spaces.Box(0, 255, (6, 192, 192), np.uint8),
                         "vehicle_measures": spaces.Box(-1.0, 120.0, (3,), np.float32),
                         "waypoints": spaces.Box(-50.0, 50.0, (15, 2), np.float32)})
    net = VLMRLExtractor(space)
    assert net.features_dim == 256 + 3 + 30 == 289
    cnn = net.heads["seg_camera"][0]
    x = torch.zeros(2, 6, 192, 192)
    sizes = []
    for layer in cnn:
        x = layer(x)
        if isinstance(layer, torch.nn.Conv2d):
            sizes.append(x.shape[-1])
    assert sizes == [94, 45, 21, 10, 4, 2]  # (192-5)//2+1, (94-5)//2+1, (45-5)//2+1, (21-3)//2+1, (10-3)//2+1, 4-3+1
    assert x.shape == (2, 256 * 2 * 2)
    convs = [(6, 8, 5), (8, 16, 5), (16, 32, 5), (32, 64, 3), (64, 128, 3), (128, 256, 3)]
    expected = sum(i * o * k * k + o for i, o, k in convs) + 1024 * 256 + 256
    assert expected == 1208 + 3216 + 12832 + 18496 + 73856 + 295168 + 262400 == 667176
    assert sum(p.numel() for p in net.parameters()) == expected
    obs = {"seg_camera": torch.rand(2, 6, 192, 192), "vehicle_measures": torch.tensor([[0.25, 0.5, 20.0]] * 2),
           "waypoints": torch.arange(60.0).reshape(2, 15, 2)}
    features = net(obs)
    assert features.shape == (2, 289) and bool((features[:, :256] >= 0).all())  # ReLU after the linear layer
    assert features[:, 256:259].tolist() == [[0.25, 0.5, 20.0]] * 2  # the other keys flattened, in key order
    assert features[1, 259:].tolist() == list(np.arange(30.0, 60.0))
    with pytest.raises(ValueError, match="needs a non-empty Dict space"):
        VLMRLExtractor(spaces.Box(0, 1, (3,)))
    with pytest.raises(ValueError, match=r"observation 'image' of shape \(3, 16, 16\): too small"):
        VLMRLExtractor(spaces.Dict({"image": spaces.Box(0, 255, (3, 16, 16), np.uint8)}))


# -- tiny runs ------------------------------------------------------------------------------------------------
def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def shorten_evaluations(patch: pytest.MonkeyPatch) -> None:
    """Evaluation episodes cut at 2 s of simulated time (40 ticks) by the env's ``time_limit_s``.

    An untrained policy would otherwise stand for the stop rule's 90 s on every route.
    """
    acting = runs.acting_env_kwargs
    patch.setattr(runs, "acting_env_kwargs", lambda kwargs: {**acting(kwargs), "time_limit_s": 2.0})


@pytest.fixture
def short_evaluations(monkeypatch):
    """`shorten_evaluations` for one test."""
    shorten_evaluations(monkeypatch)


TINY = ["--env", NAV, "--traffic", "0", "--total-timesteps", "128", "--n-envs", "2", "--eval-freq", "64",
        "--eval-routes", "1", "--eval-traffic", "0", "20", "--checkpoint-freq", "64"]
"""A tiny navigation run: 128 steps of 2 envs, evaluations at steps 64 and 128 on the first evaluation route."""


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """A tiny PPO and a tiny SAC run (`TINY`), shared by the tests that read finished runs."""
    out = tmp_path_factory.mktemp("nav_runs")
    with pytest.MonkeyPatch.context() as patch:
        shorten_evaluations(patch)
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            stdout = {"ppo": run_main(*TINY, "--hp", "n_steps=32", "batch_size=32", "--output-dir", str(out / "ppo")),
                      "sac": run_main(*TINY, "--algo", "sac", "--hp", "learning_starts=32", "batch_size=32",
                                      "--output-dir", str(out / "sac"))}
        finally:
            torch.set_num_threads(threads)
    return out, stdout


@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_tiny_run_writes_route_completion_and_collision_columns_and_the_curve(tiny_runs, algo):
    root, stdout = tiny_runs
    out = root / algo
    assert f"on 1 {NAV} scenario(s)" in stdout[algo] and "evaluation on VLM-RL's evaluation routes" in stdout[algo]
    rows = read_csv(out / "evaluations.csv")
    assert tuple(rows[0]) == NAV_COLUMNS == ("timesteps", "route_completion", "collision_rate", "success_rate",
                                             "mean_return", "wall_s")
    assert [int(r["timesteps"]) for r in rows] == [64, 128]
    assert all(0.0 <= float(r[c]) <= 1.0 for r in rows for c in ("route_completion", "collision_rate",
                                                                   "success_rate"))
    records = [json.loads(line) for line in (out / "eval.jsonl").read_text().splitlines()]
    assert [(r["traffic"], r["route_index"], r["route"]) for r in records] == [(0, 0, [48, 21]), (20, 0, [48, 21])]
    summary = read_csv(out / "eval.csv")
    assert [int(r["traffic"]) for r in summary] == [0, 20]
    for row, record in zip(summary, records, strict=True):  # one route per level: the row is that episode
        assert float(row["route_completion"]) == round(record["routes_completed"], 4)
        assert float(row["collision_rate"]) == float(record["termination"] == "collision")
        assert float(row["success_rate"]) == float(record["success"])
    result = json.loads((out / "eval.json").read_text())
    assert set(result["traffic"]) == {"0", "20"} and result["algo"] == algo and result["total_timesteps"] == 128
    png = (out / "learning_curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["env"] == NAV and config["env_kwargs"]["scenario_config"] == {"traffic": 0,
                                                                                        "route": "train"}


def test_resume_from_a_mid_run_checkpoint_ends_with_the_uninterrupted_runs_weights(tiny_runs, tmp_path,
                                                                                  short_evaluations):
    """Navigation envs pickle mid-episode (`carla_gym.sb3.checkpoint`), so a resumed PPO run repeats exactly."""
    import shutil

    import torch
    from stable_baselines3 import PPO

    whole, resumed = tiny_runs[0] / "ppo", tmp_path / "resumed"
    state = pickle.loads((whole / "checkpoints" / "step_64" / "state.pkl").read_bytes())
    assert state["envs"] is not None and state["envs_reset_reason"] is None  # the envs themselves are saved
    resumed.mkdir()  # the run as a crash right after its step-64 checkpoint leaves it
    shutil.copy(whole / "config.json", resumed / "config.json")
    shutil.copytree(whole / "checkpoints" / "step_64", resumed / "checkpoints" / "step_64")
    (resumed / "checkpoints" / "latest").write_text("step_64")
    stdout = run_main("--resume", str(resumed))
    assert "statistically equivalent" not in stdout
    a, b = (PPO.load(run / "model.zip", device="cpu").policy.state_dict() for run in (whole, resumed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (whole / "eval.csv").read_text() == (resumed / "eval.csv").read_text()


def test_route_evaluation_plays_each_route_once_and_summarises_vlm_rls_way():
    seen = []

    def act(obs):  # full brake: the ego stands until the stop rule ends the episode
        seen.append(obs.shape)
        return np.array([0.0, -1.0], dtype=np.float32)

    # the evaluation's end rules are VLM-RL's eval.py's, whatever termination the policy's env kwargs name
    records = nav_eval.play_routes(act, {"stop_time_s": 0.5, "termination": "upstream"}, traffic=0, routes=[0, 3])
    assert [(r["route_index"], r["route"], r["termination"]) for r in records] == [
        (0, [48, 21], "stopped"), (3, [61, 39], "stopped")]
    # standing at the start: waypoint 0 of routes of 290 and 343 waypoints (1 m apart), (0 + 1) / len(route)
    assert all(0.0 < r["routes_completed"] < 1 / 250 for r in records)
    assert all(r["total_distance"] == 0.0 and not r["success"] and r["total_reward"] < 0.0 for r in records)
    assert len(seen) == 2 * round(0.5 / 0.05)  # stopped after 0.5 s = 10 ticks in each episode
    row = nav_eval.summarise(records)
    assert (row["episodes"], row["collision_rate"], row["success_rate"], row["stopped_rate"]) == (2, 0.0, 0.0, 1.0)
    assert row["route_completion"] == pytest.approx(np.mean([r["routes_completed"] for r in records]))
    with pytest.raises(ValueError, match="at least one evaluation episode"):
        nav_eval.summarise([])
    # with the default 90 s stop time, VLM-RL's no-progress stop ends a standing episode at 10 s = 200 ticks
    [standing] = nav_eval.play_routes(act, {}, traffic=0, routes=[7])
    assert (standing["termination"], standing["time"], standing["episode_length"]) == ("no_progress", 10.0, 200)
    assert nav_eval.EVAL_TERMINATION == "vlm-rl-eval"


# -- CLIP on navigation ---------------------------------------------------------------------------------------
class FlatEncoder:
    """A CLIP stand-in: every frame embeds between the two prompts (sim_pos = 0.8, sim_neg = 0.6)."""

    def encode_text(self, prompts):
        """One orthogonal unit vector per prompt (the model embeds them in the order pos, neg)."""
        return np.eye(len(prompts), 2)

    def encode_images(self, images):
        """The same unit vector for every frame: cosine 0.8 with pos, 0.6 with neg."""
        return np.tile([0.8, 0.6], (len(images), 1))


def test_nav_reward_camera_renders_vlm_rls_top_down_view():
    from carla_gym.reward.nav import NavRewardCamera, reward_frame
    from carla_gym.sim.render import TOPDOWN_SIZE

    env = NavRewardCamera(gym.make(NAV, scenario_config={"traffic": 20, "route": "eval"}))
    assert env.reward_frame_size == TOPDOWN_SIZE == 517
    _, info = env.reset(seed=0)
    assert info["reward_frame"].shape == (517, 517, 3) and info["reward_frame"].dtype == np.uint8
    _, _, _, _, info = env.step(np.array([0.0, 1.0], dtype=np.float32))
    assert np.array_equal(info["reward_frame"], reward_frame(env.unwrapped.world))  # the frame after the action
    assert info["speed_kmh"] == info["speed"] > 0.0
    with pytest.raises(ValueError, match="needs a CarlaNavigation-v0 env"):
        NavRewardCamera(gym.make("CarlaTrolley-v0"))
    with pytest.raises(ValueError, match=r"reward_frame_size=8: must be an integer in \[16, 1024\]"):
        NavRewardCamera(gym.make(NAV), 8)


def test_clip_synthesis_on_navigation_multiplies_the_envs_own_factors():
    from carla_gym.reward import CLIPRewardModel, RewardShaper

    shaper = RewardShaper(CLIPRewardModel(FlatEncoder(), head="clg", prompts="vlm_rl"), 2, "replace",
                          synthesis=True)
    frame = np.zeros((4, 4, 3), dtype=np.uint8)
    infos = [{"reward_frame": frame, "speed_kmh": 20.0, "centering_factor": 0.5, "angle_factor": 0.8,
              "distance_std_factor": 1.0},
             {"reward_frame": frame, "speed_kmh": 20.0, "centering_factor": 1.0, "angle_factor": 1.0,
              "distance_std_factor": 1.0}]
    shaped = shaper.shape(infos, [0.3, -10.0], [False, True])
    # sim_neg - sim_pos = 0.6 - 0.8 < 0: CLG score 1, desired 25 km/h; at 20 km/h r_speed = 1 - 5/25 = 0.8
    assert shaped.tolist() == pytest.approx([0.8 * 0.5 * 0.8 * 1.0, -10.0])  # the -10 terminal penalty kept
    assert infos[0]["clip_sim_pos"] == pytest.approx(0.8) and infos[0]["clip_sim_neg"] == pytest.approx(0.6)


def test_sac_with_random_weight_clip_runs_end_to_end_on_navigation(tmp_path, monkeypatch, short_evaluations):
    import open_clip

    from carla_gym.reward import CLIPRewardModel, OpenClipEncoder, RewardShaper
    from carla_gym.sb3 import presets

    config = tmp_path / "carla-gym-tiny-clip-nav.json"  # a tiny open_clip (2 layers of width 32), random weights
    config.write_text(json.dumps({
        "embed_dim": 32,
        "vision_cfg": {"image_size": 224, "layers": 2, "width": 32, "head_width": 16, "patch_size": 32},
        "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2}}))
    open_clip.add_model_config(config)
    built = []

    def tiny(clip, pretrained, device="cpu", prompts="trolley"):
        built.append((clip, pretrained, prompts))
        return CLIPRewardModel(OpenClipEncoder(config.stem, pretrained=None, preprocess="vlm_rl"), head="clg",
                               prompts="vlm_rl")

    monkeypatch.setattr(presets, "clip_reward_model", tiny)
    shape, calls = RewardShaper.shape, []

    def spy(self, infos, env_rewards, dones):  # what the CLIP shaper gets and gives at each step of the 2 envs
        frames = [info["reward_frame"].shape for info in infos]
        shaped = shape(self, infos, env_rewards, dones)
        calls.append((frames, [(info["env_reward"], info["clip_reward"]) for info in infos], shaped.tolist()))
        return shaped

    monkeypatch.setattr(RewardShaper, "shape", spy)
    out = tmp_path / "run"
    run_main("--env", NAV, "--algo", "sac", "--clip", "vlm-rl", "--traffic", "0", "--total-timesteps", "32",
             "--n-envs", "2", "--hp", "learning_starts=16", "batch_size=16", "train_freq=8", "gradient_steps=1",
             "--eval-freq", "32", "--eval-routes", "1", "--eval-traffic", "0", "--output-dir", str(out))
    assert built == [("vlm-rl", "laion2b_s39b_b160k", "vlm_rl")]  # VLM-RL's model tag and exact prompts
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["clip_mode"] == "replace" and config["env_kwargs"]["reward_frame_size"] == 517
    assert len(calls) == 16 and all(frames == [(517, 517, 3)] * 2 for frames, _, _ in calls)  # 32 steps, 2 envs
    for _, rewards, shaped in calls:  # replace mode: the CLIP synthesis, or the env's -10 penalty it keeps
        assert shaped == pytest.approx([env if env < 0 else clip for env, clip in rewards])
    assert (out / "eval.json").exists() and (out / "learning_curve.png").exists()


@pytest.mark.slow
def test_vlm_rl_preset_trains_on_vlm_rls_observation_with_its_extractor(tmp_path, short_evaluations):
    """Slow (the 192 x 192 x 6 raster every step); fast equivalents: the extractor test and the tiny state runs."""
    from stable_baselines3 import PPO

    from carla_gym.sb3.extractor import VLMRLExtractor

    out = tmp_path / "run"
    run_main("--env", NAV, "--preset", "vlm-rl", "--policy", "MultiInputPolicy", "--traffic", "0",
             "--total-timesteps", "64", "--n-envs", "2", "--hp", "n_steps=32", "batch_size=32", "n_epochs=1",
             "--eval-freq", "64", "--eval-routes", "1", "--eval-traffic", "0", "--output-dir", str(out))
    config = json.loads((out / "config.json").read_text())
    assert config["env_kwargs"]["observation_mode"] == "vlm-rl" and config["env_kwargs"]["steer_smoothing"] == 0.75
    assert config["hyperparameters"]["policy_kwargs"]["features_extractor_class"] == {
        "__class__": "carla_gym.sb3.extractor:VLMRLExtractor"}
    model = PPO.load(out / "model.zip", device="cpu")
    assert isinstance(model.policy.features_extractor, VLMRLExtractor)
    assert model.policy.features_extractor.features_dim == 289

