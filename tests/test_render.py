"""The numpy camera and bird's-eye renderer draw what the scene holds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from carla_gym.samples import write_samples
from carla_gym.sim import ToolCall, World, resolve_scenario, scenario_names
from carla_gym.sim import constants as C
from carla_gym.sim import render as R


def colour_mask(img: np.ndarray, colour) -> np.ndarray:
    return np.all(img == np.asarray(colour, dtype=np.uint8), axis=-1)


def figure_mask(img: np.ndarray) -> np.ndarray:
    """Pixels of pedestrian figures (legs, shirt or skin) in a front camera frame."""
    return colour_mask(img, R.LEGS) | colour_mask(img, R.SHIRT) | colour_mask(img, R.SKIN)


def pixel_span(low: float, high: float) -> tuple[int, int]:
    """First and last pixel a span [low, high) in pixel coordinates covers (at least one pixel)."""
    first = math.floor(low)
    return first, max(math.ceil(high), first + 1) - 1


def pinhole(forward: float, right: float, width: int, height: int, fov: float = 90.0) -> tuple[float, float, float]:
    """Closed-form projection of a standing pedestrian ``forward`` [m] ahead of and ``right`` [m] of the ego centre.

    Returns:
        Column of its axis, row of its head top and row of its feet [px]: a pinhole camera with the
        horizon at mid-height, ``C.CAMERA_OFFSET_X`` ahead of the centre and ``C.CAMERA_HEIGHT`` up.
    """
    focal = 0.5 * width / math.tan(math.radians(fov) / 2)
    d = forward - C.CAMERA_OFFSET_X
    return (0.5 * width + focal * right / d, 0.5 * height + focal * (C.CAMERA_HEIGHT - C.WALKER_HEIGHT) / d,
            0.5 * height + focal * C.CAMERA_HEIGHT / d)


@pytest.mark.parametrize(("width", "height"), [(640, 360), (84, 84)])
def test_front_camera_layout(width, height):
    world = World(resolve_scenario("trolley_micro_classic_5v1"))  # 5 in lane 0, 1 at 25 m, 4 m left
    assert [(w.x, w.y) for w in world.spec.walkers][-1] == (25.0, -4.0)
    img = R.render_front(world, width, height)
    assert img.shape == (height, width, 3) and img.dtype == np.uint8
    figures = figure_mask(img)
    horizon = height // 2
    # Sky everywhere above the horizon but where a figure's head rises into it; no sky below it.
    assert (colour_mask(img[:horizon], R.PALETTE[R.SKY]) | figures[:horizon]).all()
    assert not colour_mask(img[horizon:], R.PALETTE[R.SKY]).any()
    assert tuple(img[-1, width // 2]) == tuple(R.PALETTE[3])  # asphalt straight ahead
    # The left-lane pedestrian stands alone: head to feet where the pinhole puts it, centred on its column.
    u, head, feet = pinhole(25.0, -4.0, width, height)
    split = int(pinhole(25.0, -2.0, width, height)[0])  # between the lanes' figures
    rows, cols = np.nonzero(figures[:, :split])
    assert (rows.min(), rows.max()) == pixel_span(head, feet)
    assert abs((cols.min() + cols.max() + 1) / 2 - u) <= 0.5
    # The five in the ego lane stand symmetrically about the centre column (lateral offsets -1..1 m).
    rows, cols = np.nonzero(figures[:, split:])
    assert (rows.min(), rows.max()) == pixel_span(head, feet)  # the nearest row is at 25 m too
    assert (cols.min() + split + cols.max() + split + 1) / 2 == width / 2


def test_front_camera_figures_grow_as_the_car_approaches():
    world = World(resolve_scenario("trolley_micro_escape_exists"))  # nearest pedestrians 25 m ahead
    near = World(resolve_scenario("trolley_micro_escape_exists"))
    for _ in range(30):  # 1.5 s coasting at 40 km/h: 16.67 m closer
        near.tick()
    assert near.ego.x == pytest.approx(30 * C.DT * 40 / 3.6)
    for w in (world, near):
        _, head, feet = pinhole(25.0 - w.ego.x, 0.0, 640, 360)
        rows, _ = np.nonzero(figure_mask(R.render_front(w)))
        assert (rows.min(), rows.max()) == pixel_span(head, feet)
    # 26 px tall at 22.5 m from the camera, 97 px at 5.83 m.
    assert pixel_span(*pinhole(25.0, 0.0, 640, 360)[1:]) == (169, 194)
    assert pixel_span(*pinhole(25.0 - near.ego.x, 0.0, 640, 360)[1:]) == (138, 234)


def test_birdeye_draws_ego_and_walkers_where_they_are():
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    img = R.render_birdeye(world, 84, 84)  # 32 m ahead, 8 m behind, 40 m across: 40/84 m per pixel
    mpp = 40.0 / 84

    def square(forward, right, half_x, half_y):
        row, col = (32.0 - forward) / mpp, (right + 20.0) / mpp
        return pixel_span(row - half_x / mpp, row + half_x / mpp), pixel_span(col - half_y / mpp, col + half_y / mpp)

    def mask(spans):
        out = np.zeros((84, 84), dtype=bool)
        for (r0, r1), (c0, c1) in spans:
            out[r0:r1 + 1, c0:c1 + 1] = True
        return out

    ego = mask([square(0.0, 0.0, C.EGO_LENGTH / 2, C.EGO_WIDTH / 2)])
    assert np.argwhere(ego)[[0, -1]].tolist() == [[62, 39], [72, 44]]  # 4.9 x 2.1 m box, centred laterally
    np.testing.assert_array_equal(colour_mask(img, R.EGO), ego)
    walkers = mask([square(w.x, w.y, C.WALKER_RADIUS, C.WALKER_RADIUS) for w in world.spec.walkers])
    np.testing.assert_array_equal(colour_mask(img, R.WALKER_TOP), walkers)
    assert walkers.sum() == 14  # two 2x2 squares at 25 m, a 3x2 one at 26 m
    # The road has lanes -1 and 0: asphalt 3.1 m left of the ego (column 35), and 5.0 m right (column 52)
    # beyond the lane (1.75 m), its kerb (0.3 m) and the pavement (2.5 m): the ground class 0.
    row = 67  # the ego centre: 32 m below the top
    assert tuple(img[row, 42 - 7]) == tuple(R.PALETTE[3])
    assert tuple(img[row, 42 + 10]) == tuple(R.PALETTE[0])


def test_birdeye_follows_a_lane_change():
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    for _ in range(50):
        world.tick()
    img = R.render_birdeye(world, 84, 84)
    assert world.ego.y == pytest.approx(-3.5, abs=0.01)  # the left lane's centre
    ego_rows, ego_cols = np.nonzero(colour_mask(img, R.EGO))
    assert (ego_rows.min(), ego_rows.max(), ego_cols.min(), ego_cols.max()) == (62, 72, 39, 44)  # the view follows
    # Now in the left lane: lane 0's asphalt 3.6 m to the right (column 49); 4.0 m to the left (column 33) the
    # pavement (class 1) that runs from 2.05 to 4.55 m beyond the lane centre (half lane, kerb, pavement).
    assert tuple(img[67, 42 + 7]) == tuple(R.PALETTE[3])
    assert tuple(img[67, 42 - 9]) == tuple(R.PALETTE[1])


def test_ground_classes_markings_and_edges():
    road = resolve_scenario("trolley_micro_classic_3v1").road
    y = np.array([0.0, 1.75, 5.25 - 0.02, 5.25 + 0.1, 5.25 + 1.0, 20.0])
    x = np.full_like(y, 1.0)  # inside a dash
    assert R.ground_classes(x, y, road).tolist() == [3, 4, 4, 2, 1, 0]
    x_gap = np.full_like(y, 5.0)  # between dashes
    assert R.ground_classes(x_gap, y, road)[1] == 3


def test_unknown_view():
    with pytest.raises(ValueError, match="view"):
        R.render(World(resolve_scenario("trolley_saves")), "side", 10, 10)


def test_samples_cover_every_scenario(tmp_path):
    paths = write_samples(tmp_path, ticks=2)
    names = {p.name.split("_front_")[0].split("_birdeye_")[0] for p in paths}
    expected = {n for n in scenario_names() if not (n.startswith("trolley_micro_") and n.endswith("_deadzone"))}
    assert names == expected
    assert len(paths) == 4 * len(expected)
