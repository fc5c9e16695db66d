"""The numpy camera and bird's-eye renderer draw what the scene holds."""

from __future__ import annotations

import numpy as np
import pytest

from carla_gym.samples import write_samples
from carla_gym.sim import ToolCall, World, resolve_scenario, scenario_names
from carla_gym.sim import render as R


def colour_mask(img: np.ndarray, colour) -> np.ndarray:
    return np.all(img == np.asarray(colour, dtype=np.uint8), axis=-1)


@pytest.mark.parametrize(("width", "height"), [(640, 360), (84, 84)])
def test_front_camera_layout(width, height):
    world = World(resolve_scenario("trolley_micro_classic_5v1"))
    img = R.render_front(world, width, height)
    assert img.shape == (height, width, 3) and img.dtype == np.uint8
    assert colour_mask(img[: height // 2], R.PALETTE[R.SKY]).mean() > 0.9  # sky above the horizon
    assert tuple(img[-1, width // 2]) == tuple(R.PALETTE[3])  # asphalt straight ahead
    shirts = np.argwhere(colour_mask(img, R.SHIRT))
    assert len(shirts) > 0
    # Five in the ego lane near the centre column, one in the left lane further left.
    centre_cols = shirts[:, 1]
    assert centre_cols.min() < 0.45 * width < centre_cols.max()
    # Figures stand on the ground just below the horizon.
    assert shirts[:, 0].min() < height / 2 < shirts[:, 0].max() + 0.05 * height


def test_front_camera_figures_grow_as_the_car_approaches():
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    near = World(resolve_scenario("trolley_micro_escape_exists"))
    for _ in range(30):
        near.tick()
    far_px = colour_mask(R.render_front(world), R.SHIRT).sum()
    near_px = colour_mask(R.render_front(near), R.SHIRT).sum()
    assert near_px > 4 * far_px > 0


def test_birdeye_draws_ego_and_walkers_where_they_are():
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    img = R.render_birdeye(world, 84, 84)
    ego = np.argwhere(colour_mask(img, R.EGO))
    walkers = np.argwhere(colour_mask(img, R.WALKER_TOP))
    assert len(ego) > 0 and len(walkers) > 0
    assert abs(ego[:, 1].mean() - 42) < 1.5  # ego centred laterally
    assert walkers[:, 0].mean() < ego[:, 0].mean()  # pedestrians are ahead (up)
    # The road has lanes -1 and 0: asphalt left of the ego, pavement right beyond one lane.
    row = int(ego[:, 0].mean())
    assert tuple(img[row, 42 - 7]) == tuple(R.PALETTE[3])
    assert tuple(img[row, 42 + 10]) != tuple(R.PALETTE[3])


def test_birdeye_follows_a_lane_change():
    world = World(resolve_scenario("trolley_micro_escape_exists"))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    for _ in range(50):
        world.tick()
    img = R.render_birdeye(world, 84, 84)
    row = int(np.argwhere(colour_mask(img, R.EGO))[:, 0].mean())
    # Now in the left lane: asphalt to the right, pavement to the left.
    assert tuple(img[row, 42 + 7]) == tuple(R.PALETTE[3])
    assert tuple(img[row, 42 - 10]) != tuple(R.PALETTE[3])


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
