"""`render_batch` draws N worlds exactly as N single-world renders do."""

from __future__ import annotations

import numpy as np
import pytest

from carla_gym.sim import ToolCall, World, resolve_scenario
from carla_gym.sim import constants as C
from carla_gym.sim import render as R
from carla_gym.sim.decision import decide

LEFT, RIGHT = ToolCall("lane_change", lane_direction="left"), ToolCall("lane_change", lane_direction="right")
COAST = ToolCall("observe")


def drive(name: str, calls: list[tuple[ToolCall, int]], overrides: dict | None = None) -> World:
    """A world of scenario ``name`` after the (call, ticks) decisions ``calls``."""
    world = World(resolve_scenario(name, overrides))
    for call, ticks in calls:
        if not world.done:
            decide(world, call, ticks)
    return world


@pytest.fixture(scope="module")
def worlds() -> list[World]:
    """Worlds of several scenarios and roads at varied poses, with 0 to 6 pedestrians."""
    return [
        drive("trolley_micro_escape_exists", [(COAST, 10)]),  # straight, pedestrians ahead
        drive("trolley_micro_escape_exists", [(LEFT, 6)]),  # mid lane change: yaw != 0
        drive("trolley_micro_escape_exists", [(LEFT, 30), (LEFT, 30)]),  # past the left edge, pedestrians behind
        drive("trolley_micro_escape_exists", [(LEFT, 20), (ToolCall("control", throttle=0.5, steer=-0.5), 30)]),
        drive("trolley_micro_classic_5v1", [(RIGHT, 12)]),
        drive("trolley_micro_footbridge_analog", [(COAST, 3)]),
        drive("trolley_micro_no_good_option", [(LEFT, 9)]),
        drive("trolley_micro_classic_1v1", [(LEFT, 80)]),
        drive("bias_3v1", [(LEFT, 5)], {"side_lanes": "right"}),  # action-bias episodes end after one decision
        drive("bias_3v1", [(LEFT, 5)], {"side_lanes": "left"}),
        drive("trolley_saves_deadzone", [(RIGHT, 5)]),  # 0 < |yaw| < STRAIGHT_SIN_YAW
        drive("bias_0v0", [(COAST, 1)]),  # no pedestrians
    ]


def batch(worlds: list[World], view: str, width: int, height: int, fov=None) -> np.ndarray:
    """`render_batch` of ``worlds`` with pedestrians padded to the largest count (padding: NaN, masked out)."""
    w_max = max(len(w.walker_x) for w in worlds)
    walker_x, walker_y = np.full((len(worlds), w_max), np.nan), np.full((len(worlds), w_max), np.nan)
    mask = np.zeros((len(worlds), w_max), dtype=bool)
    for i, world in enumerate(worlds):
        k = len(world.walker_x)
        walker_x[i, :k], walker_y[i, :k], mask[i, :k] = world.walker_x, world.walker_y, True
    pose = np.array([[w.ego.x, w.ego.y, w.ego.yaw] for w in worlds]).T
    fov = np.array([w.spec.camera.fov for w in worlds]) if fov is None else fov
    return R.render_batch(view, width, height, *pose, walker_x, walker_y, mask, [w.spec.road for w in worlds], fov=fov)


def test_worlds_cover_the_cases(worlds):
    """The fixture holds what the equivalence tests need: yaw != 0, off road, pedestrians behind, padding."""
    assert any(abs(np.sin(w.ego.yaw)) > R.STRAIGHT_SIN_YAW for w in worlds)
    assert any(not w.spec.road.left_edge <= w.ego.y <= w.spec.road.right_edge for w in worlds)
    assert any(np.min(np.asarray(w.walker_x) - w.ego.x) < 0 for w in worlds if len(w.walker_x))
    assert any(0.0 < abs(w.ego.yaw) < R.STRAIGHT_SIN_YAW for w in worlds)
    assert any(abs(w.ego.yaw) > 1.0 for w in worlds)
    assert {len(w.walker_x) for w in worlds} >= {0, 2, 3, 4, 6}
    assert len({w.spec.road for w in worlds}) >= 3


@pytest.mark.parametrize(
    ("view", "width", "height"),
    [("front", 84, 84), ("birdeye", 84, 84), ("topdown", 84, 84), ("front", 160, 90), ("topdown", 128, 128),
     ("front", 640, 360), ("birdeye", 400, 400)],  # the last two: one chunk (`_CHUNK_PIXELS`) per world
)
def test_batch_equals_single_renders(worlds, view, width, height):
    """Bit-identical to stacking `render` (channel-first) world by world, padding included."""
    expected = np.stack([R.render(w, view, width, height, channels_first=True) for w in worlds])
    got = batch(worlds, view, width, height)
    assert got.shape == (len(worlds), 3, height, width) and got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected)
    # Figures and discs were drawn (the comparison is not between empty scenes).
    colours = got.transpose(0, 2, 3, 1).reshape(-1, 3)
    marker = R.SHIRT if view == "front" else R.WALKER_TOP
    assert np.all(colours == marker, axis=1).sum() > 0


@pytest.mark.parametrize("view", ["front", "birdeye"])
def test_worlds_sharing_one_road(view):
    """Worlds of one spec (one `Road` object): straight and turning views in one chunk, as a vector env has them."""
    spec = resolve_scenario("trolley_micro_classic_5v1")
    worlds = [World(spec) for _ in range(6)]
    for k, world in enumerate(worlds):
        decide(world, [COAST, LEFT, RIGHT][k % 3], 4 + 3 * k)
    assert len({abs(np.sin(w.ego.yaw)) < R.STRAIGHT_SIN_YAW for w in worlds}) == 2
    expected = np.stack([R.render(w, view, 84, 84, channels_first=True) for w in worlds])
    np.testing.assert_array_equal(batch(worlds, view, 84, 84), expected)
    # Equal roads in distinct objects group together too; the worlds here alternate between two scenarios.
    mixed = [w for pair in zip(worlds, [drive("trolley_micro_escape_exists", [(LEFT, k)]) for k in range(6)],
                               strict=True) for w in pair]
    expected = np.stack([R.render(w, view, 84, 84, channels_first=True) for w in mixed])
    np.testing.assert_array_equal(batch(mixed, view, 84, 84), expected)


def test_batch_of_one_and_out_buffer(worlds):
    """N = 1 is the single render; ``out`` is filled and returned."""
    for world in worlds[:3]:
        np.testing.assert_array_equal(batch([world], "front", 84, 84)[0], R.front_chw(world, 84, 84))
    out = np.zeros((len(worlds), 3, 84, 84), dtype=np.uint8)
    pose = np.array([[w.ego.x, w.ego.y, w.ego.yaw] for w in worlds]).T
    walker_x = np.stack([np.resize(np.asarray(w.walker_x, dtype=np.float64), 6) for w in worlds])
    walker_y = np.stack([np.resize(np.asarray(w.walker_y, dtype=np.float64), 6) for w in worlds])
    mask = np.arange(6) < np.array([len(w.walker_x) for w in worlds])[:, None]
    got = R.render_batch("birdeye", 84, 84, *pose, walker_x, walker_y, mask, [w.spec.road for w in worlds], out=out)
    assert got is out
    np.testing.assert_array_equal(out, np.stack([R.birdeye_chw(w) for w in worlds]))


def test_field_of_view_per_world(worlds):
    """A field of view per world: each image is `front_chw` at that world's fov."""
    fov = np.linspace(60.0, 120.0, len(worlds))
    got = batch(worlds, "front", 96, 64, fov=fov)
    for i, world in enumerate(worlds):
        np.testing.assert_array_equal(got[i], R.front_chw(world, 96, 64, fov=float(fov[i])))


def test_hand_checked_pixels():
    """A pedestrian 10 m ahead of the camera, its masked copy, and the ego box (84x84, 90 deg fov).

    Focal length 42 px, horizon at row 42: feet at 42 + 42 * 1.0 / 10 = 46.2, head top at
    42 + 42 * (1.0 - 1.75) / 10 = 38.85, height 7.35 px (> `FIGURE_DETAIL_PX`: legs, shirt, head);
    waist 38.85 + 0.55 * 7.35 = 42.89, neck 40.17, half-width 42 * 0.22 / 10 = 0.92 px: legs rows
    42-46, shirt rows 40-42 (over the legs' row 42), head rows 38-40 (over the shirt's row 40), columns 41-42.
    """
    road = resolve_scenario("trolley_micro_escape_exists").road
    walker_x = np.full((2, 1), C.CAMERA_OFFSET_X + 10.0)
    mask = np.array([[True], [False]])
    img = R.render_batch("front", 84, 84, np.zeros(2), np.zeros(2), np.zeros(2), walker_x, np.zeros((2, 1)), mask,
                         [road, road])
    assert tuple(img[0, :, 0, 0]) == tuple(R.PALETTE[R.SKY])
    for row, colour in ((46, R.LEGS), (43, R.LEGS), (42, R.SHIRT), (41, R.SHIRT), (40, R.SKIN), (38, R.SKIN)):
        assert tuple(img[0, :, row, 42]) == tuple(colour) == tuple(img[0, :, row, 41])
    assert tuple(img[0, :, 37, 42]) == tuple(R.PALETTE[R.SKY]) and tuple(img[0, :, 47, 42]) == tuple(R.PALETTE[3])
    assert tuple(img[0, :, 44, 43]) == tuple(R.PALETTE[3])  # asphalt beside the legs
    assert tuple(img[1, :, 45, 42]) == tuple(R.PALETTE[3])  # masked out: asphalt
    # Bird's-eye view: the ego centre sits ahead / (metres per row) = 32 / (40 / 84) = 67.2 rows down, column 42.
    top = R.render_batch("birdeye", 84, 84, np.zeros(2), np.zeros(2), np.zeros(2), walker_x, np.zeros((2, 1)), mask,
                         [road, road])
    assert tuple(top[0, :, 67, 42]) == tuple(R.EGO) == tuple(top[1, :, 67, 42])
    # The pedestrian 12.5 m ahead: row (32 - 12.5) * 84 / 40 = 40.95, a 1.26 px square: rows 40-41.
    assert tuple(top[0, :, 41, 42]) == tuple(R.WALKER_TOP) and tuple(top[1, :, 41, 42]) != tuple(R.WALKER_TOP)


def test_bad_input():
    """Unknown views, mismatched shapes, wrong roads or ``out``: ValueError naming what is expected."""
    road = resolve_scenario("trolley_micro_escape_exists").road
    z2, zw, mask = np.zeros(2), np.zeros((2, 3)), np.ones((2, 3), dtype=bool)
    with pytest.raises(ValueError, match=r"view='side'.*'front', 'birdeye', 'topdown'"):
        R.render_batch("side", 84, 84, z2, z2, z2, zw, zw, mask, [road, road])
    with pytest.raises(ValueError, match=r"ego_y has shape \(3,\): expected \(N,\)"):
        R.render_batch("front", 84, 84, z2, np.zeros(3), z2, zw, zw, mask, [road, road])
    with pytest.raises(ValueError, match=r"walker_y has shape \(2, 4\): expected \(N, W\) = \(2, W\)"):
        R.render_batch("front", 84, 84, z2, z2, z2, zw, np.zeros((2, 4)), mask, [road, road])
    with pytest.raises(ValueError, match=r"walker_mask has dtype float64: expected bool"):
        R.render_batch("front", 84, 84, z2, z2, z2, zw, zw, mask.astype(float), [road, road])
    with pytest.raises(ValueError, match=r"roads: expected 2 Road objects"):
        R.render_batch("front", 84, 84, z2, z2, z2, zw, zw, mask, [road])
    with pytest.raises(ValueError, match=r"fov has shape \(3,\): expected a float or \(2,\)"):
        R.render_batch("front", 84, 84, z2, z2, z2, zw, zw, mask, [road, road], fov=np.ones(3))
    with pytest.raises(ValueError, match=r"out has shape \(2, 3, 84, 80\).*\(2, 3, 84, 84\)"):
        R.render_batch("front", 84, 84, z2, z2, z2, zw, zw, mask, [road, road], out=np.zeros((2, 3, 84, 80), np.uint8))
    with pytest.raises(ValueError, match=r"width=0"):
        R.render_batch("front", 0, 84, z2, z2, z2, zw, zw, mask, [road, road])
    with pytest.raises(ValueError, match=r"ego_x has shape \(0,\): expected \(N,\) with N >= 1"):
        R.render_batch("front", 84, 84, np.zeros(0), np.zeros(0), np.zeros(0), zw[:0], zw[:0], mask[:0], [])
