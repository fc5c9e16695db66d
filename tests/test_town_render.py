"""Town renderer (`carla_gym.sim.town.render`): ground classes, markers and actors at known pixels."""

import math

import numpy as np
import pytest

from carla_gym.sim import constants as C
from carla_gym.sim.town import TOWN_NAMES, Light, get_town, light_state
from carla_gym.sim.town import render as R
from carla_gym.sim.traffic.vehicles import make_vehicles

TOWN = get_town("Town05")
SP = TOWN.spawn_points


def _ego_and(ahead: float = None, right: float = 0.0, k: int = 0) -> np.ndarray:
    """Rows: the ego at spawn point k, plus one 4.6 x 2.0 m car ``ahead``/``right`` of it, same heading."""
    x, y, yaw = *SP.xy[k], SP.yaw[k]
    rows = [[x, y, yaw, C.EGO_LENGTH, C.EGO_WIDTH]]
    if ahead is not None:
        c, s = math.cos(yaw), math.sin(yaw)
        rows.append([x + ahead * c - right * s, y + ahead * s + right * c, yaw, 4.6, 2.0])
    return np.array(rows)


def _world(xy_fwd_right: tuple[float, float], k: int = 0) -> np.ndarray:
    x, y, yaw = *SP.xy[k], SP.yaw[k]
    f, r = xy_fwd_right
    return np.array([x + f * math.cos(yaw) - r * math.sin(yaw), y + f * math.sin(yaw) + r * math.cos(yaw)])


NO_WALKERS = np.zeros((0, 2))


def test_ground_classes_on_lanes_and_sidewalks():
    mids = np.array([lane.points[len(lane.points) // 2] for lane in TOWN.lanes if not lane.is_connector])
    assert (R.ground_class_at(TOWN, mids[:, 0], mids[:, 1]) == R.ASPHALT).all()
    walks = np.array([w[len(w) // 2] for w in TOWN.sidewalks])
    assert (R.ground_class_at(TOWN, walks[:, 0], walks[:, 1]) == R.SIDEWALK).all()
    far = R.ground_class_at(TOWN, np.array([TOWN.extent[0] - 15.0, -1e6]), np.array([0.0, 0.0]))
    assert far.tolist() == [R.GRASS, R.GRASS]


def test_markings_centre_line_yellow_and_outer_edge_white():
    lane = next(lane for lane in TOWN.lanes if not lane.is_connector and lane.left < 0 and lane.right >= 0)
    p, yaw = lane.points[len(lane.points) // 2], lane.yaw[len(lane.points) // 2]
    right = np.array([-math.sin(yaw), math.cos(yaw)])
    left_edge = p - right * lane.width / 2
    assert R.ground_class_at(TOWN, *left_edge) == R.YELLOW  # Town05's roads are two-way: a centre line
    outer = TOWN.lanes[lane.right]
    q = outer.points[np.argmin(np.hypot(*(outer.points - p).T))]
    edge = q + right * outer.width / 2
    assert R.ground_class_at(TOWN, *edge) == R.WHITE


def test_shapes_dtype_and_channels_first():
    boxes = _ego_and(12.0)
    for view in R.VIEWS:
        img = R.render_town(TOWN, boxes, NO_WALKERS, light_state(TOWN, 0.0), view=view, width=64, height=48)
        assert img.shape == (48, 64, 3) and img.dtype == np.uint8
        chw = R.render_town(TOWN, boxes, NO_WALKERS, light_state(TOWN, 0.0), view=view, width=64, height=48,
                            channels_first=True)
        assert np.array_equal(chw.transpose(1, 2, 0), img)


def test_birdeye_ego_centre_vehicle_route_goal_and_walker():
    w = h = 100
    mpp = 40.0 / w
    route = np.array([_world((-15.0, -6.0)), _world((15.0, -6.0))])
    walkers = _world((-10.0, 6.0))[None]
    img = R.render_town(TOWN, _ego_and(10.0), walkers, view="birdeye", width=w, height=h, route=route,
                        goal=_world((-15.0, 0.0)), span=40.0)
    assert img[h // 2, w // 2].tolist() == R.EGO_COLOUR.tolist()
    assert img[int(h / 2 - 10.0 / mpp), w // 2].tolist() == R.NPC_COLOURS[1].tolist()
    assert img[h // 2, int(w / 2 - 6.0 / mpp)].tolist() == R.ROUTE_COLOUR.tolist()
    assert img[int(h / 2 + 15.0 / mpp), w // 2].tolist() == R.GOAL_COLOUR.tolist()
    assert img[int(h / 2 + 10.0 / mpp), int(w / 2 + 6.0 / mpp)].tolist() == R.WALKER_COLOUR.tolist()
    # The rest of a row through the ego's lane centre far behind is asphalt: nothing else was drawn there.
    assert img[int(h / 2 + 19.0 / mpp), w // 2].tolist() == R.PALETTE[R.ASPHALT].tolist()


def test_front_vehicle_at_projected_pixel():
    w, h = 640, 360
    focal = 0.5 * w  # 90 deg field of view
    d = 15.0  # rear face ahead of the camera [m]
    img = R.render_town(TOWN, _ego_and(C.CAMERA_OFFSET_X + d + 2.3), NO_WALKERS, view="front", width=w, height=h)
    bottom, top = h / 2 + focal * C.CAMERA_HEIGHT / d, h / 2 + focal * (C.CAMERA_HEIGHT - R.VEHICLE_HEIGHT) / d
    half = focal * 1.0 / d
    assert img[int(0.5 * (top + bottom)), w // 2].tolist() == R.NPC_COLOURS[1].tolist()
    assert img[int(0.5 * (top + bottom)), int(w / 2 + half - 2)].tolist() == R.NPC_COLOURS[1].tolist()
    assert img[int(bottom) + 2, w // 2].tolist() == R.PALETTE[R.ASPHALT].tolist()  # the road below the car
    assert img[int(top) - 3, w // 2].tolist() == R.PALETTE[R.SKY].tolist()  # the sky above it
    assert img[int(0.5 * (top + bottom)), int(w / 2 + half + 3)].tolist() != R.NPC_COLOURS[1].tolist()


def test_topdown_shows_ego_and_car_ahead():
    size = 128
    span = 2.0 * 6.4 * math.tan(math.radians(110.0) / 2.0)
    mpp = span / size
    img = R.render_town(TOWN, _ego_and(9.0), NO_WALKERS, view="topdown", width=size, height=size)
    row_ego, col_ego = size / 2 + 5.2 / mpp, size / 2 + 1.6 / mpp  # camera 5.2 m ahead, 1.6 m left
    assert img[int(row_ego), int(col_ego)].tolist() == R.EGO_COLOUR.tolist()
    assert img[int(row_ego - 9.0 / mpp), int(col_ego)].tolist() == R.NPC_COLOURS[1].tolist()


def test_light_bar_at_lane_end():
    lit = next(i for i in np.flatnonzero(TOWN.light_phases > 0) if not TOWN.lanes[i].is_connector)
    lane = TOWN.lanes[lit]
    k = len(lane.points) - 9
    boxes = np.array([[*lane.points[k], lane.yaw[k], C.EGO_LENGTH, C.EGO_WIDTH]])
    states = np.full(len(TOWN.lanes), Light.NONE, dtype=np.int8)
    states[lit] = Light.RED
    w = 100
    mpp = 40.0 / w
    img = R.render_town(TOWN, boxes, NO_WALKERS, states, view="birdeye", width=w, height=w)
    to_end = lane.s[-1] - lane.s[k]
    assert img[int(w / 2 - (to_end - 0.4) / mpp), w // 2].tolist() == R.LIGHT_COLOURS[Light.RED].tolist()
    no_light = R.render_town(TOWN, boxes, NO_WALKERS, None, view="birdeye", width=w, height=w)
    assert no_light[int(w / 2 - (to_end - 0.4) / mpp), w // 2].tolist() != R.LIGHT_COLOURS[Light.RED].tolist()
    front = R.render_town(TOWN, boxes, NO_WALKERS, states, view="front", width=160, height=90)
    assert (front == R.LIGHT_COLOURS[Light.RED]).all(-1).any()


def test_vehicles_object_equals_array():
    rng = np.random.default_rng(3)
    idx = rng.choice(len(SP), 10, replace=False)
    cars = make_vehicles(SP.xy[idx, 0], SP.xy[idx, 1], SP.yaw[idx], rng=rng)
    rows = np.stack([cars.x, cars.y, cars.yaw, cars.length, cars.width], axis=-1)
    for view in R.VIEWS:
        a = R.render_town(TOWN, cars, NO_WALKERS, view=view, width=48, height=32)
        assert np.array_equal(a, R.render_town(TOWN, rows, NO_WALKERS, view=view, width=48, height=32))


@pytest.mark.parametrize("name", TOWN_NAMES)
def test_every_town_renders_at_a_spawn_point(name):
    town = get_town(name)
    sp = town.spawn_points
    boxes = np.array([[*sp.xy[0], sp.yaw[0], C.EGO_LENGTH, C.EGO_WIDTH]])
    states = light_state(town, 0.0)
    for view in R.VIEWS:
        img = R.render_town(town, boxes, NO_WALKERS, states, view=view, width=32, height=32)
        assert img.shape == (32, 32, 3)
    assert R.render_town(town, boxes, NO_WALKERS, states, width=32, height=32)[16, 16].tolist() == R.EGO_COLOUR.tolist()
    assert R.ground_class_at(town, *sp.xy[0]) == R.ASPHALT


def test_bad_input_raises():
    boxes = _ego_and()
    with pytest.raises(ValueError, match=r"view='side'.*\['front', 'birdeye', 'topdown'\]"):
        R.render_town(TOWN, boxes, NO_WALKERS, view="side")
    with pytest.raises(ValueError, match="ego_index=1"):
        R.render_town(TOWN, boxes, NO_WALKERS, ego_index=1)
    with pytest.raises(ValueError, match="vehicles shape"):
        R.render_town(TOWN, boxes[:, :3], NO_WALKERS)
    with pytest.raises(ValueError, match="light_states shape"):
        R.render_town(TOWN, boxes, NO_WALKERS, light_states=np.zeros(3))
    with pytest.raises(ValueError, match="width=0"):
        R.render_town(TOWN, boxes, NO_WALKERS, width=0)


# -- pixel indexing of shapes that reach past the image (a crash of the front view) ---------------------------------
def test_front_view_of_a_car_cut_by_the_image_edge_renders():
    """The failing input: free roam Town10HD_Opt (15 cars, 10 walkers) seed 2 after 402 autopilot ticks.

    A car beside the camera projected to a sliver one pixel tall whose centre lay left of the image; its fallback
    pixel was indexed at column -5 (IndexError).
    """
    from carla_gym.sim.navigation.episode import NavEpisode
    from carla_gym.sim.world import NavigationCall

    episode = NavEpisode("free_roam_Town10HD_Opt_v15_p10", seed=2)
    episode.step(NavigationCall("init_navigation_agent"), 1)
    x, y, _ = episode.goal
    episode.step(NavigationCall("set_destination", destination_x=x, destination_y=y, destination_z=0.0), 1)
    for _ in range(2):
        episode.step(NavigationCall("follow_route", route_steps=200), 1)
    assert episode.ticks == 402 and not episode.done
    w = episode.world
    img = R.render_town(w.town, w.vehicles, np.asarray(w.walkers.xy).reshape(-1, 2), w.lights, view="front",
                        width=256, height=144)
    assert img.shape == (144, 256, 3) and img.dtype == np.uint8


@pytest.mark.parametrize("us,row_band,pixel", [
    ((-10.0, 0.4), (5.2, 5.3), (5, 0)),  # centre far left of the image: the leftmost pixel of its row
    ((62.0, 80.0), (5.2, 5.3), (5, 63)),  # centre right of the image: the rightmost pixel
    ((3.2, 3.3), (-9.0, 0.4), (0, 3)),  # centre above the image: the top row
    ((3.2, 3.3), (31.8, 50.0), (31, 3)),  # centre below: the bottom row
])
def test_a_polygon_thinner_than_a_pixel_paints_one_pixel_inside_the_image(us, row_band, pixel):
    img = np.zeros((3, 32, 64), dtype=np.uint8)
    (u0, u1), (v0, v1) = us, row_band
    colour = np.array([9, 8, 7], dtype=np.uint8)
    R._fill_polygon(img, np.array([[u0, v0], [u1, v0], [u1, v1], [u0, v1]]), colour)
    painted = np.argwhere(img.any(axis=0))
    assert painted.tolist() == [list(pixel)] and img[:, pixel[0], pixel[1]].tolist() == [9, 8, 7]


def test_a_convex_fill_past_the_grid_edge_is_clipped_not_wrapped():
    grid = np.zeros((4, 5), dtype=np.uint8)
    cell = R.RASTER_RESOLUTION
    square = np.array([[-3, -3], [1.9, -3], [1.9, 1.9], [-3, 1.9]]) * cell  # cell centres -2.5..1.5 each way
    R._fill_convex(grid, square, 0.0, 0.0, 3)
    assert grid.tolist() == [[3, 3, 0, 0, 0], [3, 3, 0, 0, 0], [0] * 5, [0] * 5]  # no row -1 / column -1 wrap-around
    grid[:] = 0
    R._fill_convex(grid, square + 3.6 * cell, 0.0, 0.0, 2)  # centres 1.5..5.5: past the far edges
    assert grid.tolist() == [[0] * 5, [0, 2, 2, 2, 2], [0, 2, 2, 2, 2], [0, 2, 2, 2, 2]]
