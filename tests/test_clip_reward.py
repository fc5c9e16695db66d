"""CLIP reward shaping: VLM-RL's formulas, the open_clip encoder offline, the wrappers, calibration.

open_clip paths run on a tiny CLIP built in code (`tiny_clip`: 2 layers, width 32, CLIP's 224 px
input) in the default run; the same tests with a random ViT-B-32 are marked ``slow``.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from carla_gym.hints import MissingExtraError
from carla_gym.reward import CLIPRewardModel, CLIPShapedReward, OpenClipEncoder, VecCLIPShapedReward
from carla_gym.reward import heads as H
from carla_gym.reward.calibrate import auroc
from carla_gym.reward.calibrate import main as calibrate
from carla_gym.reward.encoder import as_nchw
from carla_gym.reward.prompts import PROMPT_PRESETS
from carla_gym.sim import ToolCall, World, resolve_scenario
from carla_gym.sim.render import (
    EGO,
    PALETTE,
    TOPDOWN_AHEAD,
    TOPDOWN_FOV,
    TOPDOWN_HEIGHT,
    TOPDOWN_RIGHT,
    WALKER_TOP,
    render,
)

REPO = Path(__file__).resolve().parents[1]

# -- heads: VLM-RL's formulas (its CLIP reward, the other VLM heads, its base reward's factors) -----


def test_clg_worked_examples():
    # pos 0.200 / neg 0.190 -> 1; pos 0.180 / neg 0.195 -> 0.5; neg - pos >= 0.03 -> 0
    got = H.clg([0.200, 0.180, 0.100, 0.100], [0.190, 0.195, 0.130, 0.500])
    np.testing.assert_allclose(got, [1.0, 0.5, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(H.clg([0.0], [0.02], low=0.01, high=0.03), [0.5])
    with pytest.raises(ValueError, match="high must be greater"):
        H.clg([0.0], [0.0], low=0.03, high=0.03)


def test_synthesis_worked_examples_and_terminal_penalty():
    np.testing.assert_allclose(H.synthesis([1.0, 0.5, 0.0], [20.0, 20.0, 20.0]), [0.8, 0.7, 0.2], atol=1e-12)
    # factors multiply; a negative env reward (VLM-RL's -10 terminal penalty) is kept
    got = H.synthesis([1.0, 1.0], [25.0, 25.0], centering=[0.5, 1.0], angle=[0.5, 1.0], stability=[1.0, 1.0],
                      env_reward=[0.0, -10.0])
    np.testing.assert_allclose(got, [0.25, -10.0])
    # above the desired speed by more than the target, r_speed goes negative (as in VLM-RL's code)
    np.testing.assert_allclose(H.synthesis([0.0], [35.0]), [1 - 35 / 25])


def test_factors():
    np.testing.assert_allclose(H.centering_factor([0.0, -1.5, 3.0, 4.0]), [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(H.angle_factor([0.0, math.pi / 4, -math.pi / 4, 2.0]), [1.0, 0.5, 0.5, 0.0])
    assert H.stability_factor([]) == 1.0
    assert H.stability_factor([0.0, 0.4] * 15) == pytest.approx(0.5)  # std 0.2 m
    assert H.stability_factor([0.3, -0.3] * 15) == pytest.approx(1.0)  # distances are unsigned: steady weaving at 0.3 m


def test_baseline_heads():
    np.testing.assert_allclose(H.lord([0.25, -0.5]), [0.75, 1.5])
    np.testing.assert_allclose(H.vlm_sr([0.33, 0.32, 0.1]), [1.0, -1.0, -1.0])  # strictly above 0.32
    np.testing.assert_allclose(H.roboclip([0.3, -0.1]), [0.3, -0.1])
    # t = e1, b = e2, x = e3: (x - t) P = (-0.75, 0.25, 0.5), squared norm 0.875 -> 1 - 0.4375
    got = H.vlm_rm(np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]), np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0]))
    np.testing.assert_allclose(got, [0.5625, 1.0])
    # alpha = 1 keeps only the component along t - b; alpha = 0 is 1 - |x - t|^2 / 2
    np.testing.assert_allclose(H.vlm_rm(np.array([[0.0, 0.0, 1.0]]), np.eye(3)[0], np.eye(3)[1], alpha=1.0), [0.75])
    np.testing.assert_allclose(H.vlm_rm(np.array([[0.0, 0.0, 1.0]]), np.eye(3)[0], np.eye(3)[1], alpha=0.0), [0.0])


def test_lord_speed_head():
    # (1 - cos_neg) + (1 - |v - 20| / 20), v in km/h (VLM-RL LORD-Speed)
    got = H.lord_speed([0.25, 0.25, 0.1, 0.0], [20.0, 30.0, 0.0, 50.0])
    np.testing.assert_allclose(got, [1.75, 1.25, 0.9, 0.5], atol=1e-12)  # 1 + (1 - 30/20) at 50 km/h
    assert "lord_speed" in H.HEADS


def test_vlm_rl_prompts_are_exact():
    p = PROMPT_PRESETS["vlm_rl"]
    assert (p.neg, p.pos) == ("Two cars have collided with each other on the road",
                              "The road is clear with no car accidents")
    assert (p.target, p.baseline) == ("A car is driving safely", "A car")


# -- a deterministic fake encoder: exact similarities ------------------------------------------


class AngleEncoder:
    """2-D embeddings: a frame's angle is its mean red value / 255 * pi/2; prompts are fixed axes.

    pos and target = (1, 0), neg and baseline = (0, 1): sim_pos = cos(angle), sim_neg = sin(angle).
    """

    AXES = {"pos": (1.0, 0.0), "target": (1.0, 0.0), "neg": (0.0, 1.0), "baseline": (0.0, 1.0)}

    def __init__(self, prompts):
        self.by_text = {getattr(prompts, role): self.AXES[role] for role in self.AXES}
        self.calls = []

    def encode_text(self, texts):
        """Fixed axes by prompt."""
        return np.array([self.by_text[t] for t in texts])

    def encode_images(self, images):
        """Unit vectors at the frames' angles."""
        frames = as_nchw(images)
        self.calls.append(frames.shape[0])
        angle = frames[:, 0].reshape(len(frames), -1).mean(axis=1) / 255.0 * (math.pi / 2)
        return np.stack([np.cos(angle), np.sin(angle)], axis=1)


def fake_model(head="clg", **kwargs):
    if head == "clg":  # a wide window: the fake similarities give rewards strictly between 0 and 1
        kwargs.setdefault("clg_window", (-1.0, 1.0))
    prompts = PROMPT_PRESETS["vlm_rl"]
    return CLIPRewardModel(AngleEncoder(prompts), head=head, prompts=prompts, **kwargs)


def test_model_heads_with_exact_similarities():
    frames = np.zeros((2, 8, 8, 3), np.uint8)
    frames[1, :, :, 0] = 255  # angle pi/2: sim_pos = 0, sim_neg = 1
    scores = fake_model(clg_window=(0.0, 0.03)).score(frames)
    np.testing.assert_allclose(scores.similarities["pos"], [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(scores.similarities["neg"], [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(scores.reward, [1.0, 0.0])
    np.testing.assert_allclose(fake_model().score(frames).reward, [1.0, 0.0])  # z = -1 and +1 in [-1, 1]
    np.testing.assert_allclose(fake_model("lord").score(frames).reward, [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(fake_model("vlm_sr").score(frames).reward, [1.0, -1.0])
    np.testing.assert_allclose(fake_model("roboclip").score(frames).reward, [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(fake_model("vlm_rm").score(frames).reward, [1.0, 0.0], atol=1e-12)
    with pytest.raises(ValueError, match="head='nope'"):
        fake_model("nope")
    with pytest.raises(ValueError, match="clg_window"):
        fake_model(clg_window=(0.1, 0.0))
    with pytest.raises(ValueError, match="prompts='nope'"):
        CLIPRewardModel(AngleEncoder(PROMPT_PRESETS["vlm_rl"]), prompts="nope")


def test_lord_speed_model_needs_speeds_and_the_wrapper_passes_them():
    frames = np.zeros((2, 8, 8, 3), np.uint8)
    frames[1, :, :, 0] = 255  # sim_neg = 0 and 1
    model = fake_model("lord_speed")
    np.testing.assert_allclose(model.score(frames, speed_kmh=[20.0, 10.0]).reward, [2.0, 0.5], atol=1e-12)
    with pytest.raises(ValueError, match="needs speed_kmh with one speed"):
        model.score(frames)
    with pytest.raises(ValueError, match="needs speed_kmh with one speed"):
        model.score(frames, speed_kmh=[20.0])
    env = CLIPShapedReward(gym.make("CarlaTrolley-v0", observation_mode="state", reward_frame_size=32),
                            fake_model("lord_speed"))
    plain = gym.make("CarlaTrolley-v0", observation_mode="state", reward_frame_size=32)
    env.reset(seed=0)
    plain.reset(seed=0)
    for action in (1, 1):  # braking: the speed term changes from step to step
        _, r, _, _, info = env.step(action)
        _, _, _, _, info_p = plain.step(action)
        angle = info_p["reward_frame"][:, :, 0].mean() / 255.0 * (math.pi / 2)
        want = (1 - math.sin(angle)) + (1 - abs(info_p["speed_kmh"] - 20.0) / 20.0)
        assert r == pytest.approx(want) and info["clip_reward"] == pytest.approx(want)


def test_frame_checks():
    assert as_nchw(np.zeros((2, 5, 7, 3), np.uint8)).shape == (2, 3, 5, 7)
    assert as_nchw(np.zeros((2, 3, 5, 7), np.uint8)).shape == (2, 3, 5, 7)
    assert as_nchw(np.zeros((5, 7, 3), np.uint8)).shape == (1, 3, 5, 7)
    with pytest.raises(TypeError, match="uint8"):
        as_nchw(np.zeros((1, 5, 7, 3), np.float32))
    with pytest.raises(ValueError, match=r"images of shape \(1, 5, 7, 4\): expected RGB"):
        as_nchw(np.zeros((1, 5, 7, 4), np.uint8))
    with pytest.raises(ValueError, match=r"images of shape \(2, 5, 7\)"):  # the shape as given
        as_nchw(np.zeros((2, 5, 7), np.uint8))
    with pytest.raises(ValueError, match="N >= 1"):
        as_nchw(np.zeros((0, 5, 7, 3), np.uint8))


# -- the top-down reward camera -------------------------------------------------------------------


def test_topdown_camera_geometry():
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    span = 2 * TOPDOWN_HEIGHT * math.tan(math.radians(TOPDOWN_FOV) / 2)  # 18.28 m footprint
    assert span == pytest.approx(18.28, abs=0.01)
    mpp = span / 224
    frame = render(world, "topdown", 224, 224)
    row = (TOPDOWN_AHEAD + span / 2) / mpp  # the ego centre: 5.2 m behind the image centre
    col = (-TOPDOWN_RIGHT + span / 2) / mpp  # ... and 1.6 m right of it
    assert tuple(frame[int(row), int(col)]) == tuple(EGO)
    while min(world.walker_offsets()[0]) > 10.0:  # drive on until the pedestrians are in view
        world.tick()
    frame = render(world, "topdown", 224, 224)
    for forward, right in zip(*world.walker_offsets(), strict=True):
        r = (TOPDOWN_AHEAD + span / 2 - forward) / mpp
        c = (right - TOPDOWN_RIGHT + span / 2) / mpp
        assert tuple(frame[int(r), int(c)]) == tuple(WALKER_TOP)
    # the left road edge (3.5 m lanes, one lane left of the ego's) is left of the image centre
    road = world.spec.road
    edge_col = (road.left_edge - world.ego.y - TOPDOWN_RIGHT + span / 2) / mpp
    assert (road.left_edge, world.ego.y) == (-5.25, 0.0)  # lanes -1 and 0, the ego still on its lane centre
    half = 6.4 * math.tan(math.radians(55))  # half the footprint [m]: 9.14
    assert edge_col == pytest.approx((-5.25 + 1.6 + half) / (2 * half / 224))  # 67.27 px from the left
    assert round(edge_col, 2) == 67.27
    # across the centre row: pavement, the 0.3 m (3.7 px) kerb left of the edge, the edge marking, asphalt
    pavement, kerb, asphalt, marking = (tuple(PALETTE[k]) for k in (1, 2, 3, 4))  # ground classes
    assert [tuple(frame[112, c]) for c in (63, 64, 66, 67, 69)] == [pavement, kerb, kerb, marking, asphalt]


def test_env_reward_frame_only_when_asked():
    env = gym.make("CarlaTrolley-v0", observation_mode="state")
    _, info = env.reset(seed=0)
    assert "reward_frame" not in info
    env = gym.make("CarlaTrolley-v0", observation_mode="state", reward_frame_size=64)
    _, info = env.reset(seed=0)
    frame = info["reward_frame"]
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8
    np.testing.assert_array_equal(frame, render(env.unwrapped.backend._require_world(), "topdown", 64, 64))
    _, _, _, _, info = env.step(2)  # half a second into a change to the left lane
    # the same ten ticks on a fresh world of the same scenario; left is negative
    world = World(env.unwrapped.backend._require_world().spec)
    world.apply(ToolCall("lane_change", lane_direction="left"))
    for _ in range(10):
        world.tick()
    assert (info["lane"], info["lane_offset"], info["yaw"], info["sim_time"]) == (0, world.ego.y, world.ego.yaw, 0.5)
    assert (info["lane_offset"], info["yaw"]) == pytest.approx((-0.553670, -0.170836), abs=1e-6)  # recorded
    with pytest.raises(ValueError, match="only the embedded backend"):
        gym.make("CarlaTrolley-v0", backend="openenv", base_url="http://127.0.0.1:1", reward_frame_size=64)
    with pytest.raises(ValueError, match="reward_frame_size=8"):
        gym.make("CarlaTrolley-v0", reward_frame_size=8)


# -- wrappers ---------------------------------------------------------------------------------------


def _expected_clg(frame):
    angle = frame[:, :, 0].mean() / 255.0 * (math.pi / 2)
    return H.clg([math.cos(angle)], [math.sin(angle)], -1.0, 1.0)[0]


def test_gym_wrapper_replace_add_and_synthesis():
    make = lambda: gym.make("CarlaTrolley-v0", observation_mode="state", reward_frame_size=32)  # noqa: E731
    plain = gym.make("CarlaTrolley-v0", observation_mode="state", reward_frame_size=32)
    replace = CLIPShapedReward(make(), fake_model())
    add = CLIPShapedReward(make(), fake_model(), mode="add", weight=0.5)
    synth = CLIPShapedReward(make(), fake_model(), synthesis=True)
    for env in (plain, replace, add, synth):
        env.reset(seed=0)
    history, total, clgs = [], 0.0, []
    for action in (2, 0, 0, 0, 0):
        _, r_env, term, _, info_p = plain.step(action)
        frame = info_p["reward_frame"]
        clg = _expected_clg(frame)
        clgs.append(clg)
        _, r, _, _, info = replace.step(action)
        assert "reward_frame" not in info and info["env_reward"] == r_env
        assert r == pytest.approx(clg) and info["clip_reward"] == info["clip_score"] == r
        assert info["clip_sim_pos"] ** 2 + info["clip_sim_neg"] ** 2 == pytest.approx(1.0)
        _, r_add, _, _, _ = add.step(action)
        assert r_add == pytest.approx(r_env + 0.5 * clg)
        _, r_syn, _, _, info_s = synth.step(action)
        history.append((info_p["sim_time"], abs(info_p["lane_offset"])))
        recent = [d for t, d in history if t > info_p["sim_time"] - 2.0]  # the last 2 s
        want = H.synthesis([clg], [info_p["speed_kmh"]], H.centering_factor(info_p["lane_offset"]),
                           H.angle_factor(info_p["yaw"]), H.stability_factor(recent), r_env)[0]
        assert r_syn == pytest.approx(want)
        total += r
        if term:
            assert info["shaped_episode"] == {"r": pytest.approx(total), "l": len(history)}
            break
    # the rewards follow the frames: the fake encoder's clg on [-1, 1] is (1 + cos a - sin a) / 2 with
    # a = mean red / 255 * pi / 2; the red sums of the five 32x32 frames are recorded from the renderer
    angles = [red / 1024 / 255 * (math.pi / 2) for red in (106960, 102160, 101895, 105195, 105355)]
    assert clgs == pytest.approx([(1 + math.cos(a) - math.sin(a)) / 2 for a in angles], abs=1e-12)
    with pytest.raises(ValueError, match="reward_frame_size=224"):
        CLIPShapedReward(gym.make("CarlaTrolley-v0", observation_mode="state"), fake_model())
    with pytest.raises(ValueError, match="needs the 'clg' head"):
        CLIPShapedReward(make(), fake_model("lord"), synthesis=True)
    with pytest.raises(ValueError, match="mode='sum'"):
        CLIPShapedReward(make(), fake_model(), mode="sum")
    with pytest.raises(ValueError, match="applies to mode='add' only"):
        CLIPShapedReward(make(), fake_model(), mode="replace", weight=0.5)
    with pytest.raises(ValueError, match="weight='0.1'"):
        CLIPShapedReward(make(), fake_model(), mode="add", weight="0.1")
    with pytest.raises(TypeError, match="needs a stable-baselines3 VecEnv"):
        VecCLIPShapedReward(make(), fake_model())


@pytest.mark.parametrize("synthesis", [False, True])
def test_vec_wrapper_scores_all_envs_in_one_call_and_matches_one_by_one(synthesis):
    from stable_baselines3.common.vec_env import DummyVecEnv

    kwargs = dict(observation_mode="state", reward_frame_size=32, ticks_per_action=3)
    scenarios = ["trolley_micro_escape_exists", "trolley_saves", "bias_3v1"]
    model = fake_model()
    venv = VecCLIPShapedReward(DummyVecEnv([lambda s=s: gym.make("CarlaTrolley-v0", scenario=s, **kwargs)
                                     for s in scenarios]), model, synthesis=synthesis)
    singles = [CLIPShapedReward(gym.make("CarlaTrolley-v0", scenario=s, **kwargs), fake_model(),
                                 synthesis=synthesis) for s in scenarios]
    venv.seed(0)
    venv.reset()
    for i, env in enumerate(singles):
        env.reset(seed=i)
    model.encoder.calls.clear()
    actions = [np.array([2, 0, 3]), np.array([0, 1, 0])] * 8
    for step, action in enumerate(actions):
        _, rewards, dones, infos = venv.step(action)
        assert model.encoder.calls[-1] == 3 and len(model.encoder.calls) == step + 1  # one call, all envs
        for i, env in enumerate(singles):
            _, r, term, trunc, info = env.step(int(action[i]))
            assert rewards[i] == pytest.approx(r, abs=1e-6) and infos[i]["env_reward"] == info["env_reward"]
            assert bool(dones[i]) == (term or trunc)
            if term or trunc:
                assert infos[i]["shaped_episode"] == info["shaped_episode"]
                env.reset()
            assert "reward_frame" not in infos[i]
        assert all("reward_frame" not in info for info in venv.venv.reset_infos)


SHAPINGS = [dict(mode="replace"), dict(mode="add", weight=0.3), dict(mode="replace", synthesis=True),
            dict(mode="add", weight=0.3, synthesis=True)]


@pytest.mark.parametrize("reward_mode", ["rubric", "physical"])
@pytest.mark.parametrize("shaping", SHAPINGS, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
def test_reward_terms_sum_to_the_shaped_reward_exactly(reward_mode, shaping):
    kwargs = dict(scenario=["trolley_micro_escape_exists", "trolley_micro_classic_3v1", "trolley_saves"],
                  observation_mode="state", reward_mode=reward_mode, reward_frame_size=16, ticks_per_action=4)
    env = CLIPShapedReward(gym.make("CarlaTrolley-v0", **kwargs), fake_model(), **shaping)
    rng = np.random.default_rng(1)
    env.reset(seed=1)
    kinds = set()
    for _ in range(60):  # random episodes of three scenarios, mostly observing (so some end badly)
        _, reward, terminated, _, info = env.step(int(rng.choice(4, p=[0.85, 0.05, 0.05, 0.05])))
        terms = info["reward_terms"]
        assert sum(terms.values()) == reward and all(type(v) is float for v in terms.values())
        env_terms = [k for k in terms if k != "clip"]
        assert sum(terms[k] for k in env_terms) == (info["env_reward"] if env_terms else 0.0)
        if shaping["mode"] == "add":  # the env's terms, then the weighted CLIP reward
            assert env_terms == {"rubric": ["rubric"], "physical": ["pedestrians_hit", "road_departure"]}[reward_mode]
            assert terms["clip"] == 0.3 * info["clip_reward"]
        elif "clip" in terms:
            assert terms == {"clip": info["clip_reward"]} == {"clip": reward}
        else:  # synthesis kept a negative env reward (VLM-RL's penalty): the env's own terms
            assert shaping.get("synthesis") and info["env_reward"] < 0 and reward == info["env_reward"]
        kinds.add((tuple(terms), info["env_reward"] < 0))
        if terminated:
            env.reset()
    assert any(negative for _, negative in kinds)  # each run has negative env rewards (hits or a -1 score)
    if shaping.get("synthesis") and shaping["mode"] == "replace":
        assert any("clip" not in terms for terms, _ in kinds)


def test_vec_wrapper_reward_terms_and_a_missing_sb3(monkeypatch):
    from stable_baselines3.common.vec_env import DummyVecEnv, VecEnvWrapper

    import carla_gym.reward

    make = lambda: gym.make("CarlaTrolley-v0", observation_mode="state", reward_mode="physical",  # noqa: E731
                            reward_frame_size=16)
    venv = VecCLIPShapedReward(DummyVecEnv([make, make]), fake_model(), mode="add", weight=0.25)
    assert isinstance(venv, VecEnvWrapper) and isinstance(CLIPShapedReward(make(), fake_model()), gym.Wrapper)
    venv.reset()
    for _ in range(5):
        _, rewards, _, infos = venv.step(np.array([0, 3]))  # observe: hits two; right: leaves the road
        assert rewards.dtype == np.float32
        assert rewards.tolist() == [float(np.float32(sum(i["reward_terms"].values()))) for i in infos]
    assert infos[0]["reward_terms"]["pedestrians_hit"] == -2.0  # the last decision (recorded)
    # without stable-baselines3 the Vec wrapper names the command that installs it; the Gym wrapper still works
    for module in [m for m in sys.modules if m == "stable_baselines3" or m.startswith("stable_baselines3.")]:
        monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.delitem(sys.modules, "carla_gym.reward.vec")
    with pytest.raises(MissingExtraError, match=r"stable_baselines3.*Install the sb3 extra: .*\[sb3\]") as err:
        carla_gym.reward.VecCLIPShapedReward  # noqa: B018 - the lazy import is what is tested
    assert "pip install" in str(err.value)
    with pytest.raises(AttributeError, match="no attribute 'VecClipReward'"):
        carla_gym.reward.VecClipReward  # noqa: B018
    assert CLIPShapedReward(make(), fake_model()).reset(seed=0)[0].shape == (32,)


# -- open_clip, offline: random weights, local checkpoints, clear errors ---------------------------


TINY_CLIP = "carla-gym-tiny-clip"
"""An open_clip architecture registered by `tiny_clip`: 2 layers of width 32 per tower, CLIP's 224 px input
(VLM-RL's preprocessing resizes to it) in 7x7 patches of 32 px, CLIP's tokenizer."""
TINY_CLIP_CONFIG = {
    "embed_dim": 32,
    "vision_cfg": {"image_size": 224, "layers": 2, "width": 32, "head_width": 16, "patch_size": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 2},
}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Torch on one thread in this module: its models are tiny (or few frames), and threads only add contention."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory):
    """`TINY_CLIP` with random weights (seed 0), built in code through open_clip's public config registry."""
    import open_clip

    path = tmp_path_factory.mktemp("open_clip_configs") / f"{TINY_CLIP}.json"
    path.write_text(json.dumps(TINY_CLIP_CONFIG))
    open_clip.add_model_config(path)
    return OpenClipEncoder(TINY_CLIP, pretrained=None, batch_size=4)


@pytest.fixture(scope="module")
def vit_b32():
    return OpenClipEncoder("ViT-B-32", pretrained=None, batch_size=4)


ENCODERS = ["tiny_clip", pytest.param("vit_b32", marks=pytest.mark.slow)]
"""The same test on the tiny CLIP (default run) and on a random ViT-B-32 (slow)."""


@pytest.mark.parametrize("encoder_name", ENCODERS)
def test_open_clip_encoder_batches_agree_and_layouts_match(encoder_name, request):
    encoder = request.getfixturevalue(encoder_name)
    width = {"tiny_clip": 32, "vit_b32": 512}[encoder_name]  # embed_dim of the architecture
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(6, 96, 128, 3), dtype=np.uint8)
    batched = encoder.encode_images(frames)  # batch_size 4: two forward passes
    single = np.concatenate([encoder.encode_images(f) for f in frames])
    assert batched.shape == (6, width) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, single, atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(encoder.encode_images(frames.transpose(0, 3, 1, 2)), batched, atol=2e-5)
    text = encoder.encode_text(["a", "b"])
    assert text.shape == (2, width)
    np.testing.assert_allclose(np.linalg.norm(text, axis=1), 1.0, atol=1e-5)
    # openclip mode: shortest side to 224, centre crop (a 96x128 frame: the middle 96x96)
    x = encoder.preprocess_images(frames[:1])
    assert tuple(x.shape) == (1, 3, 224, 224)
    shifted = frames[:1].copy()
    shifted[:, :, :12] = 0  # outside the centre crop (columns 16..111) and its bicubic support
    np.testing.assert_allclose(encoder.preprocess_images(shifted).numpy(), x.numpy(), atol=1e-6)
    with pytest.raises(TypeError, match="uint8"):
        encoder.encode_images(frames.astype(np.float32))


def test_vlm_rl_preprocess_scores_the_right_half(tiny_clip):
    import copy

    enc = copy.copy(tiny_clip)
    enc.preprocess = "vlm_rl"
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, size=(1, 64, 64, 3), dtype=np.uint8)
    b = a.copy()
    b[:, :, :32] = 255 - b[:, :, :32]  # change only the left half
    np.testing.assert_allclose(enc.preprocess_images(a).numpy(), enc.preprocess_images(b).numpy())
    c = a.copy()
    c[:, :, 32:] = 0
    assert not np.allclose(enc.preprocess_images(a).numpy(), enc.preprocess_images(c).numpy())


def _bicubic_weights(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) weights of PyTorch's bicubic resize (a = -0.75, half-pixel centres, edge clamp)."""
    def kernel(t):
        t = abs(t)
        return 1.25 * t**3 - 2.25 * t**2 + 1 if t <= 1 else -0.75 * t**3 + 3.75 * t**2 - 6 * t + 3 if t < 2 else 0.0

    w = np.zeros((n_out, n_in))
    for j in range(n_out):
        src = (j + 0.5) * n_in / n_out - 0.5
        i0 = math.floor(src)
        for k in range(-1, 3):
            w[j, min(max(i0 + k, 0), n_in - 1)] += kernel(src - i0 - k)
    return w


def test_vlm_rl_preprocess_is_vlm_rls_exactly(tiny_clip):
    # VLM-RL: 517x517 frame -> columns 258..516 (517 x 259) -> /255 -> bicubic resize to 224x224 with
    # torchvision 0.14 on tensors (no antialiasing, no clamping) -> OpenAI mean/std.
    import copy

    import open_clip

    enc = copy.copy(tiny_clip)
    enc.preprocess = "vlm_rl"
    mean = np.array(open_clip.OPENAI_DATASET_MEAN)[:, None, None]
    std = np.array(open_clip.OPENAI_DATASET_STD)[:, None, None]
    # hand-computed: only column 258 (the first one kept) is white. Output column 0 samples source
    # x = (0 + 0.5) * 259/224 - 0.5 = 0.078125, so it gets the kernel weights of t = 0.078125 (at column
    # 258) and t = 1.078125 (its left neighbour, clamped to column 258 too):
    # (1.25 t^3 - 2.25 t^2 + 1) + (-0.75 s^3 + 3.75 s^2 - 6 s + 3) = 0.986863136... - 0.049796104...
    frame = np.zeros((1, 517, 517, 3), np.uint8)
    frame[:, :, 258] = 255
    x = enc.preprocess_images(frame).numpy()[0]
    assert x.shape == (3, 224, 224)
    np.testing.assert_allclose(x[:, :, 0] * std[:, :, 0] + mean[:, :, 0], 0.9370670318603516, atol=1e-6)
    np.testing.assert_allclose(x[:, :, 2:] * std + mean, 0.0, atol=1e-6)  # beyond the kernel's reach
    frame[:, :, 258] = 0
    frame[:, :, 257] = 255  # the last column of the left half: not seen
    np.testing.assert_allclose(enc.preprocess_images(frame).numpy()[0], np.broadcast_to(-mean / std, x.shape),
                               atol=1e-6)
    # a whole random frame against the separable kernel above (float64 reference)
    frame = np.random.default_rng(3).integers(0, 256, size=(1, 517, 517, 3), dtype=np.uint8)
    half = frame[0, :, 258:].astype(np.float64).transpose(2, 0, 1) / 255.0  # (3, 517, 259)
    want = _bicubic_weights(517, 224) @ half @ _bicubic_weights(259, 224).T  # rows, then columns
    assert want.min() < 0.0 and want.max() > 1.0  # bicubic overshoot, kept as VLM-RL keeps it
    got = enc.preprocess_images(frame).numpy()[0] * std + mean
    np.testing.assert_allclose(got, want, atol=5e-5)


def test_vlm_rl_settings_render_517_and_smooth_steering(monkeypatch):
    import importlib.util

    from carla_gym.reward.encoder import FRAME_SIZES
    from carla_gym.sim.render import TOPDOWN_SIZE

    spec = importlib.util.spec_from_file_location("train_sb3", REPO / "train_sb3.py")
    train_sb3 = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "train_sb3", train_sb3)  # its dataclasses look their module up
    spec.loader.exec_module(train_sb3)
    args = train_sb3.resolve(train_sb3.parse_args(["--preset", "vlm-rl", "--algo", "sac", "--clip", "vlm-rl"]))
    kwargs = train_sb3.env_kwargs(args)
    assert kwargs["reward_frame_size"] == TOPDOWN_SIZE == FRAME_SIZES["vlm_rl"] == 517
    assert kwargs["steer_smoothing"] == 0.75
    env = gym.make("CarlaTrolley-v0", **kwargs)
    _, info = env.reset(seed=0)
    assert info["reward_frame"].shape == (517, 517, 3)
    args = train_sb3.resolve(train_sb3.parse_args(["--clip", "vit-b-32"]))  # cpu preset, PPO on tools
    kwargs = train_sb3.env_kwargs(args)
    assert kwargs["reward_frame_size"] == FRAME_SIZES["openclip"] == 224 and "steer_smoothing" not in kwargs
    from carla_gym.reward.calibrate import parse_args as calibrate_args  # the calibration follows the same rule

    assert calibrate_args(["--preprocess", "vlm_rl"]).frame_size == 517
    assert calibrate_args([]).frame_size == 224 and calibrate_args(["--frame-size", "64"]).frame_size == 64


def test_local_checkpoint_route_and_errors(tmp_path, tiny_clip, monkeypatch):
    import open_clip
    import torch

    enc = OpenClipEncoder(TINY_CLIP, pretrained=None)
    frames0 = np.zeros((1, 32, 32, 3), np.uint8)
    np.testing.assert_array_equal(OpenClipEncoder(TINY_CLIP).encode_images(frames0), enc.encode_images(frames0))
    assert not np.allclose(OpenClipEncoder(TINY_CLIP, seed=1).encode_images(frames0), enc.encode_images(frames0))
    path = tmp_path / "tiny_clip.pt"
    torch.save(enc.model.state_dict(), path)
    loaded = OpenClipEncoder(TINY_CLIP, pretrained=path)
    with pytest.raises(ValueError, match="preprocess_from='nope'"):
        OpenClipEncoder(TINY_CLIP, preprocess_from="nope")
    frames = np.random.default_rng(2).integers(0, 256, size=(2, 64, 64, 3), dtype=np.uint8)
    np.testing.assert_allclose(loaded.encode_images(frames), enc.encode_images(frames), atol=1e-6)
    np.testing.assert_allclose(loaded.encode_text(["a car"]), enc.encode_text(["a car"]), atol=1e-6)
    with pytest.raises(FileNotFoundError, match="no such checkpoint file"):
        OpenClipEncoder(TINY_CLIP, pretrained=tmp_path / "missing.pt")
    with pytest.raises(ValueError, match="close matches: .*ViT-B-32"):
        OpenClipEncoder("ViT-B-33")
    with pytest.raises(ValueError, match="neither a pretrained tag"):
        OpenClipEncoder("ViT-S-32", pretrained="laion9000")
    with pytest.raises(ValueError, match="precision='fp8'"):
        OpenClipEncoder(TINY_CLIP, precision="fp8")
    whole = tmp_path / "whole_model.pt"
    torch.save(enc.model, whole)  # the model object, not its state_dict
    with pytest.raises(RuntimeError, match=r"must hold the weights \(state_dict\)"):
        OpenClipEncoder(TINY_CLIP, pretrained=whole)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            OpenClipEncoder(TINY_CLIP, device="cuda")
    # preprocess_from: a tag's metadata (here a made-up tag of the tiny model) sets the preprocessing
    tags, cfgs = open_clip.list_pretrained_tags_by_model, open_clip.get_pretrained_cfg
    tag_cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25), "interpolation": "bilinear", "resize_mode": "squash"}
    monkeypatch.setattr(open_clip, "list_pretrained_tags_by_model",
                        lambda m: ["made_up"] if m == TINY_CLIP else tags(m))
    monkeypatch.setattr(open_clip, "get_pretrained_cfg", lambda m, t: tag_cfg if m == TINY_CLIP else cfgs(m, t))
    tagged = OpenClipEncoder(TINY_CLIP, preprocess_from="made_up")
    assert (tagged.interpolation, tagged.resize_mode) == ("bilinear", "squash")
    assert tagged._mean.flatten().tolist() == [0.5] * 3 and tagged._std.flatten().tolist() == [0.25] * 3
    assert (enc.interpolation, enc.resize_mode) == ("bicubic", "shortest")  # open_clip's defaults without a tag
    white = np.full((1, 48, 64, 3), 255, np.uint8)  # squash: the whole frame, (1 - 0.5) / 0.25 everywhere
    np.testing.assert_allclose(tagged.preprocess_images(white).numpy(), 2.0, atol=1e-6)


@pytest.mark.slow
def test_preprocess_from_a_real_tag_of_vit_b32():
    enc = OpenClipEncoder("ViT-B-32", pretrained=None, preprocess_from="laion2b_s34b_b79k")
    assert enc.interpolation == "bicubic" and enc.resize_mode == "shortest"
    assert enc._mean.flatten().tolist() == pytest.approx([0.48145466, 0.4578275, 0.40821073])  # OpenAI's statistics


OFFLINE_ADVICE = ("model = open_clip.create_model('ViT-B-32', pretrained='laion2b_s34b_b79k'); "
                  "torch.save(model.state_dict(), 'ViT-B-32.pt'); copy the file here and pass the file's path as "
                  "pretrained=..., or copy that machine's open_clip cache folder here and pass it as cache_dir=...")
"""The library's advice for a pretrained tag whose weights are neither cached nor downloadable (keywords, no flags)."""
SET_OFFLINE = "Offline, set HF_HUB_OFFLINE=1 to fail at once instead of retrying the download"


def offline_open_clip(monkeypatch) -> list:
    """Make open_clip.create_model fail as a download does without a connection; returns its calls."""
    import open_clip

    calls = []

    def offline(name, pretrained=None, cache_dir=None, **kwargs):
        calls.append((name, pretrained, cache_dir))  # open_clip's own message when a download fails
        raise RuntimeError(f"Failed to download weights for tag {pretrained!r}: no connection")

    monkeypatch.setattr(open_clip, "create_model", offline)
    return calls


@pytest.mark.parametrize("hub_offline", ["", "1", "true"])
def test_pretrained_tag_that_cannot_be_downloaded_says_what_to_do(tmp_path, monkeypatch, hub_offline):
    calls = offline_open_clip(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", hub_offline)
    with pytest.raises(RuntimeError) as err:
        OpenClipEncoder("ViT-B-32", pretrained="laion2b_s34b_b79k", cache_dir=str(tmp_path))
    assert calls == [("ViT-B-32", "laion2b_s34b_b79k", str(tmp_path))]
    why = "HF_HUB_OFFLINE is set, so nothing is downloaded" if hub_offline else "the download failed"
    message = str(err.value)
    assert message.startswith(f"could not load the 'ViT-B-32' weights tagged 'laion2b_s34b_b79k': they are not in "
                              f"the local cache and {why} (RuntimeError: Failed to download weights for tag "
                              "'laion2b_s34b_b79k': no connection). On a machine with internet, load them once and "
                              "save them to a file: "), message
    assert OFFLINE_ADVICE in message
    assert message.endswith(SET_OFFLINE) != bool(hub_offline)  # suggested only where it is not set yet
    assert "--" not in message  # the library names no command line's flags; each command line names its own
    assert isinstance(err.value.__cause__, RuntimeError)


@pytest.mark.slow
def test_pretrained_tag_offline_says_what_to_do(tmp_path):
    import os
    import subprocess

    code = ("from carla_gym.reward import OpenClipEncoder\n"
            "try:\n"
            f"    OpenClipEncoder('ViT-B-32', pretrained='laion2b_s34b_b79k', cache_dir={str(tmp_path)!r})\n"
            "except RuntimeError as exc:\n"
            "    print('ERR', exc)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert ("ERR could not load the 'ViT-B-32' weights tagged 'laion2b_s34b_b79k': they are not in the local cache "
            "and HF_HUB_OFFLINE is set, so nothing is downloaded") in out.stdout, out.stderr[-2000:]
    assert OFFLINE_ADVICE in out.stdout and "HF_HUB_OFFLINE=1" not in out.stdout  # it is set already


def test_calibration_errors_name_its_flags(tmp_path, tiny_clip, monkeypatch):
    import torch

    never = str(tmp_path / "never")
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")

    def refusal(*argv: str) -> str:
        with pytest.raises(SystemExit) as caught:
            calibrate(["--out", never, *argv])
        return str(caught.value.code)

    with monkeypatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: False)
        assert refusal("--model", TINY_CLIP, "--device", "cuda") == (
            "error: --device cuda: torch sees no CUDA GPU here; use --device cpu")
    assert refusal("--model", TINY_CLIP, "--device", "gpu").startswith("error: --device gpu: not a torch device (")
    assert refusal("--model", "ViT-B-33").startswith("error: --model ViT-B-33 is not an open_clip model; close matches")
    missing = str(tmp_path / "missing.pt")
    assert refusal("--model", TINY_CLIP, "--pretrained", missing) == (
        f"error: --pretrained {missing}: no such checkpoint file")
    wrong = refusal("--model", TINY_CLIP, "--pretrained", str(garbage))
    assert "must hold the weights (state_dict)" in wrong and "; choose the --model the weights belong to" in wrong
    with monkeypatch.context() as patch:
        offline_open_clip(patch)
        patch.delenv("HF_HUB_OFFLINE", raising=False)
        offline = refusal("--pretrained", "laion2b_s34b_b79k")
    assert offline.startswith("error: could not load the 'ViT-B-32' weights tagged 'laion2b_s34b_b79k'")
    assert offline.endswith("copy the file here and pass the file's path as --pretrained FILE, or copy that "
                            "machine's open_clip cache folder here and pass it as --cache-dir DIR. " + SET_OFFLINE)
    for message in (wrong, offline):  # the flags, not the Python keywords of OpenClipEncoder
        assert "pretrained=..." not in message and "cache_dir" not in message and "model_name" not in message
    assert not Path(never).exists()


def test_renamed_wrappers_say_their_new_names():
    import carla_gym.reward
    import carla_gym.reward.wrappers

    with pytest.raises(ImportError, match=r"^carla_gym\.reward\.CLIPRewardWrapper was renamed: use CLIPShapedReward"):
        from carla_gym.reward import CLIPRewardWrapper  # noqa: F401
    renamed = (("CLIPRewardWrapper", "use CLIPShapedReward"), ("clip_vec_env", "use the class VecCLIPShapedReward"))
    for module in ("carla_gym.reward", "carla_gym.reward.wrappers"):
        for old, new in renamed:
            with pytest.raises(ImportError, match=rf"^{module}\.{old} was renamed: {new} \(from carla_gym\.reward "):
                exec(f"from {module} import {old}", {})
            with pytest.raises(ImportError, match=rf"^{module}\.{old} was renamed: {new} "):
                getattr(sys.modules[module], old)  # only code written for the old name looks it up
    assert getattr(carla_gym.reward, "nothing", None) is None
    with pytest.raises(ImportError, match="cannot import name 'nothing'"):
        exec("from carla_gym.reward import nothing", {})
    from carla_gym.reward import VecCLIPShapedReward, vec  # the lazy name and submodules still import

    assert vec.VecCLIPShapedReward is VecCLIPShapedReward


PPO_EPISODES = ([1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0],
                [10, 10, 9] + [10] * 10 + [9] + [10] * 4 + [9] + [10] * 6)
"""Env returns and lengths of the episodes of the seeded PPO run below (recorded; the same with either encoder)."""


@pytest.mark.parametrize("encoder_name", ENCODERS)
def test_ppo_trains_through_the_vec_wrapper(encoder_name, request):
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    encoder = request.getfixturevalue(encoder_name)
    model = CLIPRewardModel(encoder, prompts="trolley")
    frames, embeddings = [], []  # every batch of frames the reward model scored, in order, and its embeddings

    class Spy:
        def encode_images(self, images):
            frames.append(np.array(images))
            embeddings.append(encoder.encode_images(images))
            return embeddings[-1]

    model.encoder = Spy()
    venv = make_vec_env("CarlaTrolley-v0", n_envs=2, seed=0,
                        env_kwargs=dict(observation_mode="state", reward_frame_size=64, ticks_per_action=5))
    venv = VecCLIPShapedReward(venv, model, mode="add", weight=0.1)
    seen, dones, rewards = [], [], []

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            seen.extend(self.locals["infos"])
            dones.extend(bool(d) for d in self.locals["dones"])
            rewards.extend(self.locals["rewards"].tolist())
            return True

    ppo = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, device="cpu")
    ppo.learn(total_timesteps=256, callback=Record())
    assert ppo.num_timesteps == 256 and len(seen) == len(dones) == 256 and len(frames) == 128
    # the similarities are those of the frames scored (the first and last steps' frames re-encoded
    # one at a time, another batching, to check the embeddings too)
    scored = np.concatenate(embeddings).astype(np.float64)
    for batch, got in ((frames[0], embeddings[0]), (frames[-1], embeddings[-1])):
        np.testing.assert_allclose(np.concatenate([encoder.encode_images(f) for f in batch]), got, atol=2e-5)
    for role, text in zip(model.roles, model.text_embeddings, strict=True):  # up to BLAS summation order
        np.testing.assert_allclose([i[f"clip_sim_{role}"] for i in seen], scored @ text, rtol=0, atol=1e-12)
    assert all(i["clip_reward"] == pytest.approx(H.clg([i["clip_sim_pos"]], [i["clip_sim_neg"]])[0]) for i in seen)
    # the rewards PPO saw are the sums of the terms (rounded to float32): the env's rubric term + 0.1 x CLIP
    assert all(list(i["reward_terms"]) == ["rubric", "clip"] for i in seen)
    assert all(i["reward_terms"]["clip"] == 0.1 * i["clip_reward"] for i in seen)
    assert rewards == [float(np.float32(sum(i["reward_terms"].values()))) for i in seen]
    # Monitor under the wrapper logs the env's own returns: recompute them from the steps (env k of
    # each step is seen[2 t + k]); the counts are those of this seeded run
    episodes, running, shaped = [], {0: [], 1: []}, {0: [], 1: []}
    for n, (info, done) in enumerate(zip(seen, dones, strict=True)):
        running[n % 2].append(info["env_reward"])
        shaped[n % 2].append(info["env_reward"] + 0.1 * info["clip_reward"])  # mode="add", weight=0.1
        if done:
            episodes.append((sum(running[n % 2]), len(running[n % 2])))
            assert info["shaped_episode"] == {"r": pytest.approx(sum(shaped[n % 2])), "l": len(shaped[n % 2])}
            running[n % 2], shaped[n % 2] = [], []
    assert [(e["r"], e["l"]) for e in ppo.ep_info_buffer] == episodes
    assert ([r for r, _ in episodes], [n for _, n in episodes]) == PPO_EPISODES


def test_calibration_writes_its_report(tmp_path, tiny_clip, monkeypatch):
    import carla_gym.reward.encoder as enc_mod

    monkeypatch.setattr(enc_mod, "OpenClipEncoder", lambda *a, **k: tiny_clip)
    out = tmp_path / "calib"
    result = calibrate(["--out", str(out), "--scenarios", "trolley_micro_escape_exists", "--policies", "observe",
                        "lane_change_left", "--speeds", "45", "--ticks-per-action", "10"])
    saved = json.loads((out / "report.json").read_text())
    rows = (out / "frames.csv").read_text().splitlines()
    assert saved["auroc"] == result["auroc"] and saved["random_weights"] is True
    n = saved["clear"]["count"] + saved["collision"]["count"]
    assert len(rows) == n + 1 and rows[0] == "scenario,policy,speed_kmh,step,label,sim_pos,sim_neg,z"
    assert saved["collision"]["count"] == 1  # observing at 45 km/h hits; the swerve escapes
    with open(out / "frames.csv") as f:
        frames = list(csv.DictReader(f))
    z_hit = [float(r["z"]) for r in frames if r["label"] == "collision"]
    z_clear = [float(r["z"]) for r in frames if r["label"] == "clear"]
    assert saved["auroc"] == pytest.approx(auroc(z_hit, z_clear), abs=1e-5)
    assert auroc([0.3, 0.4], [0.1, 0.3]) == 0.875 and auroc([], [1.0]) is None
    for bad in (["--policies", "fly"], ["--prompts", "trolly"], ["--frame-size", "8"], ["--scenarios", "nope"]):
        with pytest.raises(SystemExit):
            calibrate(["--out", str(tmp_path / "never"), *bad])
    assert not (tmp_path / "never").exists()
