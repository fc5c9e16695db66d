"""Towns of the embedded simulator: lane geometry, graph connectivity, routing, lights."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest

from carla_gym.sim.town import (
    TOWN_NAMES,
    Light,
    Location,
    Marking,
    RoadOption,
    build_town,
    get_town,
    light_state,
    light_steady_interval,
    locate,
    locate_many,
    plan_route,
    town_spec,
)
from carla_gym.sim.town.network import ALL_RED_TIME, GREEN_TIME, YELLOW_TIME, _nearest_points

TOWNS = ("Town01", "Town02", "Town03", "Town04", "Town05", "Town06", "Town07", "Town10HD")


def _wrap(a: np.ndarray) -> np.ndarray:
    return (a + np.pi) % (2 * np.pi) - np.pi


@pytest.mark.parametrize("name", TOWNS)
def test_town_builds_deterministically(name: str) -> None:
    a, b = build_town(town_spec(name)), build_town(town_spec(name))
    assert len(a.lanes) == len(b.lanes) > 0
    for la, lb in zip(a.lanes, b.lanes, strict=True):
        assert la.points.tobytes() == lb.points.tobytes() and la.yaw.tobytes() == lb.yaw.tobytes()
        assert (la.successors, la.left, la.right) == (lb.successors, lb.left, lb.right)
    assert a.spawn_points.xy.tobytes() == b.spawn_points.xy.tobytes()
    assert a.crosswalks.tobytes() == b.crosswalks.tobytes()
    assert sorted(a.graph.edges(data="weight")) == sorted(b.graph.edges(data="weight"))


@pytest.mark.parametrize("name", TOWNS)
def test_every_spawn_point_reaches_every_other(name: str) -> None:
    town = get_town(name)
    lanes = set(town.spawn_points.lane.tolist())
    component = next(c for c in nx.strongly_connected_components(town.graph) if next(iter(lanes)) in c)
    assert lanes <= component
    first, last = int(town.spawn_points.lane[0]), int(town.spawn_points.lane[-1])
    assert nx.has_path(town.graph, first, last) and nx.has_path(town.graph, last, first)


@pytest.mark.parametrize("name", TOWNS)
def test_lanes_join_their_successors_with_no_gap_and_the_same_heading(name: str) -> None:
    town = get_town(name)
    for lane in town.lanes:
        steps = np.hypot(*np.diff(lane.points, axis=0).T)
        assert steps.max() <= 1.0 + 1e-9 and np.ptp(steps) < 0.01  # equal arc steps of at most 1 m
        assert lane.s[-1] == pytest.approx(steps.sum())
        assert lane.successors, f"lane {lane.id} is a dead end"
        for succ in lane.successors:
            nxt = town.lanes[succ]
            assert np.hypot(*(nxt.points[0] - lane.points[-1])) < 1e-9
            assert abs(_wrap(nxt.yaw[0] - lane.yaw[-1])) < 1e-9
            first = np.arctan2(*(nxt.points[1] - nxt.points[0])[::-1])  # geometric heading of the first step
            last = np.arctan2(*(lane.points[-1] - lane.points[-2])[::-1])
            assert abs(_wrap(first - last)) < 0.25
            assert town.graph.edges[lane.id, succ] == {"weight": lane.length, "kind": "follow"}


@pytest.mark.parametrize("name", TOWNS)
def test_neighbours_are_symmetric_one_lane_width_apart_with_markings(name: str) -> None:
    town = get_town(name)
    for lane in town.lanes:
        if lane.is_connector:
            assert (lane.left, lane.right) == (-1, -1)
            assert (lane.left_marking, lane.right_marking) == (Marking.NONE, Marking.NONE)
            continue
        assert lane.left_marking == (Marking.BROKEN if lane.left >= 0 else Marking.SOLID)
        assert lane.right_marking == (Marking.BROKEN if lane.right >= 0 else Marking.SOLID)
        if lane.right >= 0:
            other = town.lanes[lane.right]
            assert other.left == lane.id and other.road == lane.road
            mid = len(lane.points) // 2
            loc = locate(town, other.points[len(other.points) // 2])
            assert loc.lane == other.id
            side = np.array([-math.sin(lane.yaw[mid]), math.cos(lane.yaw[mid])])
            gap = float(np.dot(other.points[len(other.points) // 2] - lane.points[mid], side))
            assert gap == pytest.approx(lane.width, abs=0.6)
            assert town.graph.edges[lane.id, lane.right]["kind"] == "right"
            assert town.graph.edges[lane.right, lane.id]["kind"] == "left"


def test_towns_have_their_character() -> None:
    def per_direction(town):
        return max(sum(1 for _ in _chain(town, lane)) for lane in town.lanes if lane.left < 0 and not lane.is_connector)

    def _chain(town, lane):
        while True:
            yield lane
            if lane.right < 0:
                return
            lane = town.lanes[lane.right]

    def roads_at(town, node):
        spec = town_spec(town.name)
        return sum((r.a == node) + (r.b == node) for r in spec.roads)

    t01, t02, t03, t05, t06, t07 = (get_town(n) for n in ("Town01", "Town02", "Town03", "Town05", "Town06", "Town07"))
    for town in (t01, t02):  # T-junctions only, one lane each way
        assert {roads_at(town, n) for n in town.junctions} == {3} and per_direction(town) == 1
    assert 4 in {roads_at(t05, n) for n in t05.junctions} and per_direction(t05) == 2
    assert len(t03.roundabout) == 4
    ring = [lane for lane in t03.lanes if lane.junction in t03.roundabout]
    assert sorted({lane.option.name for lane in ring}) == ["RIGHT", "STRAIGHT"]
    assert per_direction(t06) == 4 and not (t06.light_phases > 0).any()
    assert {lane.width for lane in t07.lanes} == {3.0} and len(set(t07.light_junction) - {-1}) == 1
    assert get_town("Town10HD_Opt") is get_town("Town10HD")
    one_way = [r for r in town_spec("Town10HD").roads if r.backward == 0]
    assert one_way and all(r.forward == 2 for r in one_way)


@pytest.mark.parametrize("name", TOWNS)
def test_routes_between_random_spawn_points_follow_graph_edges(name: str) -> None:
    town = get_town(name)
    spawn = town.spawn_points
    rng = np.random.default_rng(14)
    for i, j in rng.integers(len(spawn), size=(12, 2)):
        route = plan_route(town, Location(int(spawn.lane[i]), float(spawn.s[i]), 0.0), spawn.xy[j])
        lanes = [int(route.lanes[0])] + [int(b) for a, b in zip(route.lanes, route.lanes[1:], strict=False) if b != a]
        assert tuple(lanes) == route.lane_path
        assert all(town.graph.has_edge(a, b) for a, b in zip(lanes, lanes[1:], strict=False))
        np.testing.assert_allclose(route.waypoints[0], spawn.xy[i], atol=1e-9)
        np.testing.assert_allclose(route.waypoints[-1], spawn.xy[j], atol=1e-9)
        steps = np.hypot(*np.diff(route.waypoints, axis=0).T)
        if len(steps):
            assert steps.min() >= 1.0 and steps.max() <= 2.0 + 1e-9
            assert route.length == pytest.approx(steps.sum(), rel=1e-3)
        assert route.waypoints.shape == (len(route.yaw), 2) == (len(route.options), 2)


@pytest.mark.parametrize(("start", "goal", "turn"), [
    ((88.25, 30.0), (40.0, 58.25), RoadOption.RIGHT),  # southbound on x = 90, turn west
    ((88.25, 30.0), (88.25, 95.0), RoadOption.STRAIGHT),  # southbound, straight on
    ((40.0, 61.75), (91.75, 30.0), RoadOption.LEFT),  # eastbound on y = 60, turn north
    ((40.0, 61.75), (88.25, 95.0), RoadOption.RIGHT),  # eastbound, turn south
])
def test_road_options_at_a_t_junction(start, goal, turn) -> None:
    # Town02's T-junction at (90, 60): x forward, y to the right, so heading +y then -x turns right.
    route = plan_route(get_town("Town02"), start, goal, spacing=1.0)
    assert set(RoadOption(int(o)) for o in route.options) == {RoadOption.LANEFOLLOW, turn}
    assert np.hypot(*np.diff(route.waypoints, axis=0).T).max() <= 1.0 + 1e-9


def test_route_changes_lane_to_a_goal_on_the_neighbour_lane() -> None:
    town = get_town("Town05")
    lane = next(ln for ln in town.lanes if ln.right >= 0 and ln.length > 60)
    right = town.lanes[lane.right]
    route = plan_route(town, Location(lane.id, 5.0, 0.0), right.points[45])
    assert route.lane_path == (lane.id, right.id)
    options = {RoadOption(int(o)) for o in route.options}
    assert options == {RoadOption.LANEFOLLOW, RoadOption.CHANGELANERIGHT}


@pytest.mark.parametrize("name", ["Town03", "Town10HD"])
def test_locate_round_trips_points_beside_centrelines(name: str) -> None:
    town = get_town(name)
    rng = np.random.default_rng(3)
    roads = [lane for lane in town.lanes if not lane.is_connector]
    for k in rng.integers(len(roads), size=40):
        lane = roads[k]
        j = int(rng.integers(3, len(lane.points) - 4))
        seg = lane.points[j + 1] - lane.points[j]
        normal = np.array([-seg[1], seg[0]]) / np.hypot(*seg)
        for offset in (0.0, -1.0, 1.2):
            got = locate(town, (lane.points[j] + lane.points[j + 1]) / 2 + offset * normal)
            assert got.lane == lane.id
            assert got.s == pytest.approx((lane.s[j] + lane.s[j + 1]) / 2, abs=1e-9)
            assert got.lateral == pytest.approx(offset, abs=1e-9)


def test_light_cycle_values() -> None:
    town = get_town("Town05")
    phase0 = int(np.flatnonzero(town.light_phase == 0)[0])
    phase1 = int(np.flatnonzero(town.light_phase == 1)[0])
    unlit = int(np.flatnonzero(town.light_phases == 0)[0])
    assert town.light_phases[phase0] == 2
    period = 2 * (GREEN_TIME + YELLOW_TIME + ALL_RED_TIME)
    assert period == 30.0
    times = np.array([0.0, 9.99, 10.0, 12.99, 13.0, 14.99, 15.0, 24.99, 25.0, 29.99, 30.0, 10 * period + 1.0])
    states = light_state(town, times)
    assert states.shape == (len(times), len(town.lanes)) and states.dtype == np.int8
    G, Y, R = Light.GREEN, Light.YELLOW, Light.RED
    assert states[:, phase0].tolist() == [G, G, Y, Y, R, R, R, R, R, R, G, G]
    assert states[:, phase1].tolist() == [R, R, R, R, R, R, G, G, Y, R, R, R]
    assert set(states[:, unlit].tolist()) == {Light.NONE}
    # never two phases of one junction green or yellow at once
    same = town.light_junction == town.light_junction[phase0]
    for row in light_state(town, np.arange(0.0, 30.0, 0.25)):
        moving = set(town.light_phase[same & (row != Light.RED)].tolist())
        assert len(moving) <= 1


def test_sidewalks_and_crosswalks() -> None:
    town = get_town("Town02")
    assert len(town.sidewalks) == 2 * len(town_spec("Town02").roads)
    for walk in town.sidewalks:
        lane, _, lateral = locate(town, walk[len(walk) // 2])
        assert abs(lateral) == pytest.approx((town.lanes[lane].width + town.sidewalk_width) / 2, abs=0.05)
    assert town.crosswalks.shape == (3 * len(town.junctions), 2, 2)
    lengths = np.hypot(*(town.crosswalks[:, 1] - town.crosswalks[:, 0]).T)
    np.testing.assert_allclose(lengths, 2 * 3.5 + town.sidewalk_width)
    assert len(get_town("Town06").sidewalks) == 0 and len(get_town("Town06").crosswalks) == 0


def test_bad_input_raises_value_error_naming_the_value() -> None:
    with pytest.raises(ValueError, match="'Town11'.*Town10HD_Opt"):
        get_town("Town11")
    town = get_town("Town02")
    with pytest.raises(ValueError, match=r"goal_xy=\[500.0, 500.0\].*off the road network"):
        plan_route(town, town.spawn_points.xy[0], (500.0, 500.0))
    with pytest.raises(ValueError, match="start="):
        plan_route(town, (-300.0, 0.0), town.spawn_points.xy[0])
    with pytest.raises(ValueError, match="spacing=0.1"):
        plan_route(town, town.spawn_points.xy[0], town.spawn_points.xy[1], spacing=0.1)
    with pytest.raises(ValueError, match="t="):
        light_state(town, -1.0)
    with pytest.raises(ValueError, match="xy shape"):
        locate(town, np.zeros(3))
    assert set(TOWN_NAMES) == {*TOWNS, "Town10HD_Opt"}


def test_light_steady_interval_holds_the_states_and_ends_at_a_change() -> None:
    town = get_town("Town05")
    assert light_steady_interval(12.5) == pytest.approx((10.0 + 1e-6, 13.0 - 1e-6))
    assert light_steady_interval(10.0) == (10.0, 10.0)  # on a change time: empty, compute afresh
    for t in np.random.default_rng(0).uniform(1.0, 200.0, size=50):
        lo, hi = light_steady_interval(float(t))
        assert lo <= t < hi
        inside = light_state(town, np.linspace(lo, hi, 9))
        assert (inside == inside[0]).all()
        # just past either end some light differs (time starts at 0): the interval is as long as it can be
        assert lo < 1e-5 or (light_state(town, lo - 2e-6) != inside[0]).any()
        assert (light_state(town, hi + 2e-6) != inside[0]).any()


@pytest.mark.parametrize("name", ["Town02", "Town06", "Town07"])
def test_nearest_lane_point_from_the_grid_equals_brute_force(name: str) -> None:
    town = get_town(name)
    rng = np.random.default_rng(1)
    x0, y0, x1, y1 = town.extent
    points = np.concatenate([
        rng.uniform([x0 - 40, y0 - 40], [x1 + 40, y1 + 40], size=(200, 2)),  # far off roads and off the grid
        town.points[rng.integers(len(town.points), size=200)] + rng.normal(0.0, 3.0, size=(200, 2)),
        town.points[:20],  # exactly on lane points (ties between overlapping lanes)
    ])
    brute = np.array([((p - town.points) ** 2).sum(-1).argmin() for p in points])
    assert (_nearest_points(town, points) == brute).all()
    lanes, _, _ = locate_many(town, points)
    assert (lanes == town.point_lane[brute]).all()
