"""Observation modes of CarlaNavigation-v0 (`carla_gym.envs.nav_observation`) and VLM-RL's raster (`bev`)."""

from __future__ import annotations

import dataclasses
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first

from carla_gym.envs import nav_observation as N
from carla_gym.sim.navigation.world import NavWorld
from carla_gym.sim.town import Light, Location, Marking, get_town
from carla_gym.sim.town import bev as B
from carla_gym.sim.town.render import EGO_COLOUR, ROUTE_COLOUR
from carla_gym.sim.traffic.walkers import CROSSING, SIDEWALK

SPAWN = 48
"""Town02 spawn 48: lane 16 (45 m long, lit), s = 15 m, heading +y (yaw pi/2), at x = 88.25, y = 22.5."""


def _world(n_vehicles=1, n_walkers=0, seed=0) -> NavWorld:
    return NavWorld("Town02", n_vehicles=n_vehicles, n_walkers=n_walkers, seed=seed, ego_spawn=SPAWN)


def _place(world: NavWorld, forward: float, right: float) -> tuple[float, float]:
    """World (x, y) of a point ``forward``/``right`` [m] of the ego."""
    v = world.vehicles
    c, s = math.cos(v.yaw[0]), math.sin(v.yaw[0])
    return v.x[0] + forward * c - right * s, v.y[0] + forward * s + right * c


def _straight_route(world: NavWorld, n=30) -> tuple[np.ndarray, np.ndarray]:
    v = world.vehicles
    wp = np.array([_place(world, float(k), 0.0) for k in range(n)])
    return wp, np.full(n, v.yaw[0])


def _observe(obs: N.NavObserver, world: NavWorld, steer=0.0, throttle=0.0):
    wp, yaw = _straight_route(world)
    return obs.observe(world, wp, yaw, 0, steer, throttle)


# --- state vector ---------------------------------------------------------------------------------------------


def test_state_layout_constants():
    assert N.STATE_SIZE == 69
    assert N.STATE_LOW.shape == N.STATE_HIGH.shape == (69,)
    assert N.STATE_LOW.dtype == np.float32
    assert (N.STATE_LOW[:3].tolist(), N.STATE_HIGH[:3].tolist()) == ([-1, 0, 0], [1, 1, 120])
    assert N.STATE_LOW[53:57].tolist() == [-50, -50, 0, 0] and N.STATE_HIGH[65:69].tolist() == [1, 1, 1, 50]


def test_npc_ten_metres_ahead():
    world = _world(n_vehicles=1)
    x, y = _place(world, 10.0, 0.0)
    v = world.vehicles
    world.vehicles = dataclasses.replace(v, x=np.array([v.x[0], x]), y=np.array([v.y[0], y]),
                                         speed=np.array([2.0, 5.0]))
    vec = N.state_vector(world, *_straight_route(world), 0, -0.25, 0.5)
    assert vec.dtype == np.float32 and vec.shape == (69,)
    np.testing.assert_allclose(vec[:3], [-0.25, 0.5, 7.2], atol=1e-6)  # 2 m/s = 7.2 km/h
    np.testing.assert_allclose(vec[3:9], [0, 0, 0, 1, 0, 2], atol=1e-5)  # waypoints 0, 1, 2 m ahead
    np.testing.assert_allclose(vec[33:37], [0.0, 10.0, 10.8, 1.0], atol=1e-5)  # (5 - 2) m/s = 10.8 km/h
    assert not vec[37:53].any()


def test_npc_beyond_range_and_order():
    world = _world(n_vehicles=3)
    v = world.vehicles
    pts = [_place(world, 0.0, 5.0), _place(world, -60.0, 0.0), _place(world, 3.0, -4.0)]  # 5 m, 60 m, 5 m
    world.vehicles = dataclasses.replace(v, x=np.array([v.x[0]] + [p[0] for p in pts]),
                                         y=np.array([v.y[0]] + [p[1] for p in pts]), speed=np.zeros(4))
    vec = N.state_vector(world, *_straight_route(world), 0, 0.0, 0.0)
    # Equal distances keep row order; the NPC 60 m away is not listed.
    np.testing.assert_allclose(vec[33:45], [5, 0, 0, 1, -4, 3, 0, 1, 0, 0, 0, 0], atol=1e-5)


def test_walkers():
    world = _world(n_vehicles=0, n_walkers=2)
    w = world.walkers
    xy = np.array([_place(world, 4.0, 3.0), _place(world, -20.0, 0.0)])
    world.walkers = dataclasses.replace(w, xy=xy, mode=np.array([CROSSING, SIDEWALK]))
    vec = N.state_vector(world, *_straight_route(world), 0, 0.0, 0.0)
    np.testing.assert_allclose(vec[53:65], [3, 4, 1, 1, 0, -20, 0, 1, 0, 0, 0, 0], atol=1e-5)
    assert not vec[33:53].any()


@pytest.mark.parametrize("light, flags", [(Light.GREEN, [1, 0, 0]), (Light.YELLOW, [0, 1, 0]),
                                          (Light.RED, [0, 0, 1]), (Light.NONE, [0, 0, 0])])
def test_ego_light(light, flags):
    world = _world(n_vehicles=0)
    v = world.vehicles
    world.vehicles = dataclasses.replace(v, length=np.array([4.0]))
    assert world.ego_location.lane == 16 and world.ego_location.s == 15.0
    lights = world.lights.copy()
    lights[16] = light
    world.lights = lights
    vec = N.state_vector(world, *_straight_route(world), 0, 0.0, 0.0)
    assert vec[65:68].tolist() == flags
    # Stop line 45 - 3 (crosswalk) - 1 (margin) = 41 m along the lane; the bumper at 15 + 2 m.
    assert vec[68] == (50.0 if light == Light.NONE else 24.0)


def test_light_distance_clipped():
    world = _world(n_vehicles=0)
    lights = world.lights.copy()
    lights[16] = Light.RED
    world.lights = lights
    world.ego_location = Location(16, -100.0, 0.0)  # 141 m before the line
    assert N.state_vector(world, *_straight_route(world), 0, 0.0, 0.0)[68] == 50.0


# --- the raster -----------------------------------------------------------------------------------------------


def _lit(mask: np.ndarray) -> tuple[list[int], list[int]]:
    rows, cols = np.nonzero(mask)
    return sorted(set(rows.tolist())), sorted(set(cols.tolist()))


@pytest.mark.parametrize("ego_yaw", [0.0, 0.7, -2.0])
def test_vehicle_box_pixels(ego_yaw):
    """A 4 m x 2 m car 10 m ahead, aligned: rows 92-111 (f in [8, 12]), columns 91-100 (r in [-1, 1])."""
    layers = B.map_layers(get_town("Town02"))
    ego = np.array([100.0, 50.0, ego_yaw])
    c, s = math.cos(ego_yaw), math.sin(ego_yaw)
    box = np.array([[100.0 + 10 * c, 50.0 + 10 * s, ego_yaw, 2.0, 1.0]])
    img = B.render_bev(layers, ego, [np.zeros((0, 5))] * 3 + [box])
    assert img.shape == (192, 192, 6) and img.dtype == np.uint8
    assert not img[..., 2:5].any()
    mask = img[..., 5]
    assert set(np.unique(mask).tolist()) == {0, 255} and (mask == 255).sum() == 200
    assert _lit(mask) == (list(range(92, 112)), list(range(91, 101)))
    # Turned 90 degrees, 5 m to the right: 10 rows x 20 columns around row 152, column 121.
    turned = np.array([[100.0 - 5 * s, 50.0 + 5 * c, ego_yaw + math.pi / 2, 2.0, 1.0]])
    mask = B.render_bev(layers, ego, [turned])[..., 2]
    assert (mask == 255).sum() == 200 and _lit(mask) == (list(range(147, 157)), list(range(111, 131)))


def test_vehicle_boxes_min_extent_and_range():
    rows = np.array([[0.0, 0.0, 0.0, 4.9, 2.1],  # the ego
                     [10.0, 0.0, 0.0, 1.0, 1.0],  # small: half extents 0.8 m
                     [38.9, -38.9, 0.0, 4.0, 2.0],  # inside 39 m on both axes
                     [39.0, 0.0, 0.0, 4.0, 2.0],  # 39 m: out (strictly less than 39)
                     [0.0, -40.0, 0.0, 4.0, 2.0]])
    boxes = B.vehicle_boxes(rows)
    np.testing.assert_array_equal(boxes, [[10.0, 0.0, 0.0, 0.8, 0.8], [38.9, -38.9, 0.0, 2.0, 1.0]])
    mask = B.render_bev(B.map_layers(get_town("Town02")), rows[0, :3], [boxes[:1]])[..., 2]
    # f in [9.2, 10.8] -> rows 98-105; r in [-0.8, 0.8] -> columns 92-99.
    assert _lit(mask) == (list(range(98, 106)), list(range(92, 100))) and (mask == 255).sum() == 64


def test_road_and_solid_markings_at_the_ego():
    """Town02 spawn 48: a two-lane road; the ego on the right lane's centre, lanes 3.5 m wide.

    Solid lines at 1.75 m right (right edge), 1.75 m left (centre line) and 5.25 m left (far edge): pixel centres
    within a cell of them, columns 104-105, 86-87 and 69-70; the road spans columns 69-105.
    """
    world = _world(n_vehicles=0)
    v = world.vehicles
    assert (v.x[0], v.y[0], v.yaw[0]) == (88.25, 22.5, math.pi / 2)
    lane = world.town.lanes[16]
    assert (lane.width, lane.left_marking, lane.right_marking) == (3.5, Marking.SOLID, Marking.SOLID)
    img = B.render_bev(B.map_layers(world.town), (v.x[0], v.y[0], v.yaw[0]), [])
    assert img.shape == (192, 192, 2)
    row = 140  # 2.3 m ahead, mid-block
    assert np.flatnonzero(img[row, :, 1]).tolist() == [69, 70, 86, 87, 104, 105]
    assert set(img[row, :, 1].tolist()) == {0, 255}
    assert np.flatnonzero(img[row, :, 0]).tolist() == list(range(69, 106))
    assert set(img[row, :, 0].tolist()) == {0, 255}


def test_broken_marking_value():
    """A broken lane edge is 120 on a dash (s mod 9 m in [0, 3)) and 0 in a gap."""
    town = get_town("Town05")
    lane = next(la for la in town.lanes if la.right_marking == Marking.BROKEN and la.left_marking == Marking.SOLID
                and la.length > 30 and np.ptp(np.unwrap(la.yaw)) < 1e-6)
    layers = B.map_layers(town)
    col = 96 + round(2.5 * lane.width)  # the edge's column: r = width / 2 lies between columns 95 + 2.5 w and that
    for s, expected in ((10.5, B.BROKEN_VALUE), (15.0, 0)):  # 10.5 mod 9 = 1.5 on a dash; 15 mod 9 = 6 a gap
        pose = (np.interp(s, lane.s, lane.points[:, 0]), np.interp(s, lane.s, lane.points[:, 1]), lane.yaw[0])
        img = B.render_bev(layers, pose, [])
        assert img[151, col - 1:col + 1, 1].max() == expected  # row 151: 0.1 m ahead
        assert img[151, 96 - round(2.5 * lane.width) - 1:96 - round(2.5 * lane.width) + 1, 1].max() == B.SOLID_VALUE


def test_history_channels_of_a_moving_car():
    """An NPC driving 1 m per tick straight ahead of a standing ego: each channel shows it where it was."""
    layers = B.map_layers(get_town("Town02"))
    ego = [0.0, 0.0, 0.0, 4.0, 2.0]
    history = B.VehicleHistory()
    assert B.HISTORY_TICKS == (20, 13, 7, 0)

    def rows_of(img, ch):  # a 4 m car centred F m ahead covers rows 142 - 5 F .. 161 - 5 F
        lit = _lit(img[..., ch])[0]
        return (lit[0], lit[-1]) if lit else None

    history.reset(np.array([ego, [10.0, 0.0, 0.0, 4.0, 2.0]]))
    for tick in range(1, 4):
        history.record(np.array([ego, [10.0 + tick, 0.0, 0.0, 4.0, 2.0]]))
    img = B.render_bev(layers, ego[:3], history.frames())
    # 3 ticks in: channels 2-4 repeat the reset's frame (F = 10), channel 5 shows F = 13.
    assert [rows_of(img, ch) for ch in range(2, 6)] == [(92, 111)] * 3 + [(77, 96)]
    for tick in range(4, 26):
        history.record(np.array([ego, [10.0 + tick, 0.0, 0.0, 4.0, 2.0]]))
    img = B.render_bev(layers, ego[:3], history.frames())
    # 25 ticks: F = 10 + 25 - t for t = 20, 13, 7, 0 ticks back: 15, 22, 28, 35 m (the last beyond the top edge,
    # rows -33 to -14, though within the 39 m range).
    assert [rows_of(img, ch) for ch in range(2, 6)] == [(67, 86), (32, 51), (2, 21), None]
    assert len(history.frames()[3]) == 1


def test_history_before_reset_raises():
    with pytest.raises(RuntimeError, match="reset"):
        B.VehicleHistory().frames()


# --- the observer ---------------------------------------------------------------------------------------------


def test_modes_and_spaces():
    assert N.OBSERVATION_MODES == ("state", "dict", "vlm-rl")
    space = N.NavObserver("vlm-rl").space
    assert list(space) == ["seg_camera", "vehicle_measures", "waypoints"]
    assert (space["seg_camera"].shape, space["seg_camera"].dtype) == ((192, 192, 6), np.uint8)
    assert space["vehicle_measures"].low.tolist() == [-1, 0, 0] and space["vehicle_measures"].high.tolist() == [
        1, 1, 120]
    assert (space["waypoints"].shape, space["waypoints"].low.min(), space["waypoints"].high.max()) == (
        (15, 2), -50, 50)
    dict_space = N.NavObserver("dict", image_size=(48, 64)).space
    assert dict_space["image"].shape == (3, 48, 64) and dict_space["state"].shape == (69,)
    with pytest.raises(ValueError, match="choose one of"):
        N.NavObserver("pixels")
    with pytest.raises(ValueError, match="image_size"):
        N.NavObserver("dict", image_size=(0, 64))


def test_sb3_treats_the_raster_as_an_image():
    """SB3 sees a channel-last uint8 image (6 channels are allowed): it wraps VecTransposeImage and divides by 255."""
    space = N.NavObserver("vlm-rl").space["seg_camera"]
    assert is_image_space(space) and not is_image_space_channels_first(space)
    image = N.NavObserver("dict").space["image"]
    assert is_image_space(image) and is_image_space_channels_first(image)


def _run(mode: str, seed: int, ticks: int = 25):
    world = NavWorld("Town02", n_vehicles=20, n_walkers=10, seed=seed, ego_spawn=SPAWN)
    observer = N.NavObserver(mode, image_size=(40, 40))
    observer.reset(world)
    wp, yaw = _straight_route(world, 60)
    out = []
    for tick in range(ticks):
        world.tick(throttle=0.4)
        observer.record(world)
        if tick % 6 == 0:
            out.append(observer.observe(world, wp, yaw, min(tick // 4, 59), 0.1, 0.4))
    return observer, out


@pytest.mark.parametrize("mode", N.OBSERVATION_MODES)
def test_observations_in_space_and_deterministic(mode):
    observer, first = _run(mode, seed=3)
    _, second = _run(mode, seed=3)
    for a, b in zip(first, second, strict=True):
        assert observer.space.contains(a)
        flat_a, flat_b = (list(x.values()) if isinstance(x, dict) else [x] for x in (a, b))
        for u, w in zip(flat_a, flat_b, strict=True):
            assert u.dtype == w.dtype and u.tobytes() == w.tobytes()


def test_vlm_rl_channels_follow_the_world():
    """seg_camera's vehicle channels are the world's cars now and 7, 13, 20 ticks ago, drawn in today's pose."""
    world = NavWorld("Town02", n_vehicles=20, seed=5, ego_spawn=SPAWN)
    observer = N.NavObserver("vlm-rl")
    observer.reset(world)
    boxes = [B.vehicle_boxes(world.vehicles)]
    for _ in range(24):
        world.tick(throttle=0.5)
        observer.record(world)
        boxes.append(B.vehicle_boxes(world.vehicles))
    v = world.vehicles
    obs = _observe(observer, world, 0.2, 0.5)
    expected = B.render_bev(B.map_layers(world.town), (v.x[0], v.y[0], v.yaw[0]),
                            [boxes[-1 - t] for t in B.HISTORY_TICKS])
    assert obs["seg_camera"].tobytes() == expected.tobytes()
    assert obs["seg_camera"][..., 2:].any()  # some NPC is in view
    np.testing.assert_allclose(obs["vehicle_measures"], [0.2, 0.5, v.speed[0] * 3.6], rtol=1e-6)
    np.testing.assert_allclose(obs["waypoints"][:3], [[0, 0], [0, 1], [0, 2]], atol=1e-5)


def test_dict_image_shows_the_route_ahead():
    world = _world(n_vehicles=0)
    observer = N.NavObserver("dict", image_size=(96, 96))
    observer.reset(world)
    obs = _observe(observer, world)
    image = obs["image"]
    assert image.shape == (3, 96, 96) and image.dtype == np.uint8
    # 40 m across at 96 px, centred 12 m ahead: the ego centre is at row 48 + 12 / (40 / 96) = 76.8.
    assert image[:, 76, 48].tolist() == EGO_COLOUR.tolist()
    # The route on the ego's centreline 6.9, 11 and 19 m ahead (rows 60, 50, 30).
    assert all(image[:, r, 48].tolist() == ROUTE_COLOUR.tolist() for r in (30, 50, 60))


# --- checkers -------------------------------------------------------------------------------------------------


class _DummyNavEnv(gym.Env):
    """A minimal env whose observations are `NavObserver`'s of a small seeded world."""

    def __init__(self, mode: str):
        self.observer = N.NavObserver(mode, image_size=(40, 40))
        self.observation_space = self.observer.space
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.world = NavWorld("Town02", n_vehicles=2, seed=int(self.np_random.integers(1000)), ego_spawn=SPAWN)
        self.observer.reset(self.world)
        self.route = _straight_route(self.world, 40)
        return self.observer.observe(self.world, *self.route, 0, 0.0, 0.0), {}

    def step(self, action):
        throttle = float(max(action[1], 0.0))
        self.world.tick(throttle=throttle, brake=float(max(-action[1], 0.0)), steer=float(action[0]))
        self.observer.record(self.world)
        return self.observer.observe(self.world, *self.route, 0, float(action[0]), throttle), 0.0, False, False, {}


@pytest.mark.parametrize("mode", N.OBSERVATION_MODES)
def test_env_checkers(mode):
    """Gymnasium's checker is silent in every mode, SB3's in "state" and "dict".

    For "vlm-rl", SB3 warns once, about VLM-RL's (15, 2) waypoints (neither an image nor a vector): the shape is
    VLM-RL's and is kept; SB3's CombinedExtractor and VLM-RL's extractor flatten it. The 6-channel raster itself
    draws no warning (SB3 checks no channel count).
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gym_check_env(_DummyNavEnv(mode), skip_render_check=True)
    assert [str(w.message) for w in caught] == []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sb3_check_env(_DummyNavEnv(mode), warn=True)
    messages = [str(w.message) for w in caught]
    if mode == "vlm-rl":
        assert len(messages) == 1 and messages[0].startswith("Your observation waypoints has an unconventional shape")
    else:
        assert messages == []
