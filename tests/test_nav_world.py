"""The navigation world (carla_gym.sim.navigation): adapters, junction negotiation, NavWorld, ego autopilot."""

import math

import numpy as np
import pytest

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import NUMPY, SCALAR, EgoState, steer_for_course, step_ego
from carla_gym.sim.navigation.adapters import CROSSWALK_SNAP, lanes_from_town, sidewalks_from_town
from carla_gym.sim.navigation.episode import draw_goal
from carla_gym.sim.navigation.junctions import CONFLICT_DISTANCE, conflicts, crosswalk_zones, grant
from carla_gym.sim.navigation.scenarios import MAZE, MAZE_GOAL_TOLERANCE, resolve_nav_scenario
from carla_gym.sim.navigation.world import NavWorld, route_speed_limits
from carla_gym.sim.town import Light, get_town
from carla_gym.sim.traffic.collision import boxes_overlap
from carla_gym.sim.traffic.idm import URBAN
from carla_gym.sim.traffic.lanes import Lanes
from carla_gym.sim.traffic.walkers import CROSSING, SIDEWALK, Sidewalks

# --- per-vehicle wheelbase -------------------------------------------------------------------------------------


def test_wheelbase_default_is_the_ego_constant_bit_for_bit():
    e = EgoState(1.0, 2.0, 0.3, 7.0, 0.01)
    assert step_ego(e, 0.4, 0.0, 0.5) == step_ego(e, 0.4, 0.0, 0.5, wheelbase=C.EGO_WHEELBASE)
    assert steer_for_course(0.05, 0.4) == steer_for_course(0.05, 0.4, wheelbase=C.EGO_WHEELBASE)


def test_yaw_change_scales_inversely_with_wheelbase_within_grip():
    # Slow, gentle steer: inside the friction circle, dyaw = distance sin(beta) / (L / 2) exactly.
    e = EgoState(np.zeros(2), np.zeros(2), np.zeros(2), np.full(2, 2.0), np.zeros(2))
    out = step_ego(e, np.zeros(2), np.zeros(2), np.full(2, 0.2), C.DT, NUMPY, np.array([2.0, 4.0]))
    beta = math.atan(0.5 * math.tan(0.2 * C.EGO_MAX_STEER_ANGLE))
    assert out.yaw[0] == pytest.approx(2.0 * C.DT * math.sin(beta) / 1.0, rel=1e-12)
    assert out.yaw[0] == pytest.approx(2.0 * out.yaw[1], rel=1e-12)


def test_steer_for_course_inverts_step_with_own_wheelbase():
    e = EgoState(0.0, 0.0, 0.0, 3.0, 0.0)
    distance = 3.0 * C.DT
    steer = steer_for_course(0.02, distance, SCALAR, 1.9)
    out = step_ego(e, 0.0, 0.0, steer, C.DT, SCALAR, 1.9)
    assert out.yaw + out.beta == pytest.approx(0.02, abs=1e-9)


# --- adapters and junctions ------------------------------------------------------------------------------------


def test_adapters_keep_lane_ids_and_snap_crosswalks_onto_sidewalks():
    town = get_town("Town02")
    lanes = lanes_from_town(town)
    for lane in town.lanes:
        assert lanes.length[lane.id] == pytest.approx(lane.length, abs=1e-9)
        assert list(lanes.successors[lane.id, :lanes.n_successors[lane.id]]) == list(lane.successors)
    sw = sidewalks_from_town(town)
    assert len(sw) == len(town.sidewalks) and len(sw.crosswalks) == len(town.crosswalks)
    ends = np.concatenate([sw.at(sw.crosswalks[:, k].astype(int), sw.crosswalks[:, k + 1])[0] for k in (0, 2)])
    d = np.hypot(*(ends[:, None] - town.crosswalks.reshape(-1, 2)[None]).transpose(2, 0, 1)).min(axis=1)
    assert d.max() <= CROSSWALK_SNAP
    assert (sw.opposite[sw.opposite >= 0][sw.opposite[sw.opposite >= 0]] == np.flatnonzero(sw.opposite >= 0)).all()


def test_conflicts_are_symmetric_between_connectors_and_match_the_distance():
    town = get_town("Town05")
    c = conflicts(town)
    connector = np.array([lane.is_connector for lane in town.lanes])
    assert (c == c.T).all() and not c.diagonal().any()
    assert not c[~connector].any() and not c[:, ~connector].any()
    a, b = np.argwhere(c)[0]
    pa, pb = town.lanes[a].points, town.lanes[b].points
    assert np.hypot(*(pa[:, None] - pb[None]).transpose(2, 0, 1)).min() <= CONFLICT_DISTANCE
    with pytest.raises(ValueError, match="distance"):
        conflicts(town, 0.0)


def test_grant_is_first_come_first_served_with_row_tie_break():
    conflict = np.zeros((4, 4), dtype=bool)
    conflict[1, 2] = conflict[2, 1] = True
    held = np.array([-1, -1, -1, 3])
    # Rows 0 and 1 ask for conflicting 1 and 2; row 1 is nearer its stop line: it wins.
    assert grant(conflict, held, np.array([1, 2, -1, -1]), np.array([5.0, 4.0, 0.0, 0.0])).tolist() == [-1, 2, -1, 3]
    # A tie goes to the lower row; a non-conflicting request is granted too.
    assert grant(conflict, held, np.array([1, 2, 0, -1]), np.array([4.0, 4.0, 9.0, 0.0])).tolist() == [1, -1, 0, 3]
    # Nothing is granted against a held conflicting connector.
    assert grant(conflict, np.array([2, -1]), np.array([-1, 1]), np.zeros(2)).tolist() == [2, -1]


def test_crosswalk_zones_are_the_lane_stretch_within_reach_of_the_walking_line():
    xs = np.arange(0.0, 100.5, 1.0)
    lanes = Lanes([np.stack([xs, np.zeros_like(xs)], 1), np.stack([xs, np.full_like(xs, 20.0)], 1)], [[], []])
    sw = Sidewalks([np.stack([xs, np.full_like(xs, y)], 1) for y in (-7.0, 7.0)], 2.0, [1, 0], [(0, 50.0, 1, 50.0)])
    z = crosswalk_zones(lanes, sw, 2.0)
    assert z.shape == (1, 2, 2)
    assert z[0, 0].tolist() == [48.0, 52.0]  # the points x = 48..52 lie within 2 m of x = 50
    assert z[0, 1].tolist() == [np.inf, -np.inf]  # y = 20 is beyond the crossing's end at y = 7
    with pytest.raises(ValueError, match="reach"):
        crosswalk_zones(lanes, sw, 0.0)


# --- the world ---------------------------------------------------------------------------------------------------


def test_same_seed_and_controls_give_bit_identical_worlds():
    worlds = [NavWorld("Town03", 20, 10, seed=11, jaywalk_share=0.3) for _ in range(2)]
    controls = np.random.default_rng(0).uniform([0, 0, -0.3], [1, 0.2, 0.3], size=(200, 3))
    for t, b, s in controls:
        for w in worlds:
            w.tick(t, b, s)
    a, b = worlds[0].state_arrays(), worlds[1].state_arrays()
    assert all(np.array_equal(a[k], b[k]) for k in a)
    other = NavWorld("Town03", 20, 10, seed=12)
    assert not np.array_equal(other.vehicles.x, NavWorld("Town03", 20, 10, seed=11).vehicles.x)


@pytest.mark.parametrize("town", ["Town02", "Town05"])
def test_vehicles_spawn_apart_at_spawn_points(town):
    w = NavWorld(town, 40, 0, seed=5)
    v = w.vehicles
    i, j = np.triu_indices(len(v), k=1)
    assert not boxes_overlap(v.x[i], v.y[i], v.yaw[i], v.length[i] / 2, v.width[i] / 2,
                             v.x[j], v.y[j], v.yaw[j], v.length[j] / 2, v.width[j] / 2).any()
    sp = w.town.spawn_points.xy
    assert np.hypot(*(v.xy()[:, None] - sp[None]).transpose(2, 0, 1)).min(axis=1).max() == 0.0
    with pytest.raises(ValueError, match="n_vehicles"):
        NavWorld(town, len(w.town.spawn_points), 0)


@pytest.mark.parametrize(("ticks", "seed"), [(1000, 1), pytest.param(10_000, 2, marks=pytest.mark.slow)])
@pytest.mark.parametrize("town", ["Town05", "Town03"])
def test_no_npc_contact_with_40_vehicles(town, ticks, seed):
    w = NavWorld(town, 40, 20, seed=seed)
    crossings = 0
    for _ in range(ticks):
        before = w.walkers.mode.copy()
        w.tick(0.0, 1.0, 0.0)
        crossings += int(((w.walkers.mode == CROSSING) & (before != CROSSING)).sum())
    assert w.counts["npc_npc"] == 0 and w.counts["ego_vehicle"] == 0
    assert w.counts["npc_walker"] == 0 and crossings > 0  # walkers yield at crosswalks, and still cross
    assert w.vehicles.speed[1:].max() > 3.0  # traffic moves
    assert w.ticks == ticks and w.t == pytest.approx(ticks * C.DT)


def _lone_npc_before_red_light(town_name: str):
    """A world with one NPC 50 m before the end of a lit road lane whose light is red from t = 0 to 15 s."""
    town = get_town(town_name)
    lane = next(ln for ln in town.lanes if not ln.is_connector and town.light_phase[ln.id] == 1 and ln.length > 60)
    w = NavWorld(town, 1, 0, seed=0)
    s0 = lane.length - 50.0
    xy, heading = w._static.lanes.at(np.array([lane.id]), np.array([s0]))
    w.vehicles.x[1], w.vehicles.y[1], w.vehicles.yaw[1] = xy[0, 0], xy[0, 1], heading[0]
    w.routes.lane[0], w.routes.s[0] = lane.id, s0
    w.routes.next_lane[0] = lane.successors[0]
    w.vehicles.x[0] += 1000.0  # the ego far away
    return w, lane


def test_npc_stops_before_the_stop_line_on_red_and_starts_on_green():
    w, lane = _lone_npc_before_red_light("Town05")
    assert Light(int(w.lights[lane.id])) == Light.RED
    stop_line = lane.length - w.town.crosswalk_width
    front = []
    while w.t < 14.9:
        w.tick(0.0, 1.0, 0.0)
        assert w.routes.lane[0] == lane.id
        front.append(w.routes.s[0] + 0.5 * w.vehicles.length[1])
    assert max(front) <= stop_line
    assert max(front) >= stop_line - 3.0  # it drove up to the line
    assert w.vehicles.speed[1] < 0.05
    while w.t < 25.0 and w.routes.lane[0] == lane.id:
        w.tick(0.0, 1.0, 0.0)
    assert w.routes.lane[0] == lane.successors[0] and w.t > 15.0  # left on green


def test_walkers_stay_on_sidewalks_except_when_crossing():
    w = NavWorld("Town02", 0, 30, seed=4)
    sw = w._static.sidewalks
    crossed = 0
    for _ in range(600):
        w.tick(0.0, 1.0, 0.0)
        wk = w.walkers
        on = wk.mode == SIDEWALK
        _, offset, _ = sw.project(wk.sidewalk[on], wk.xy[on], wk.s[on])
        assert (np.abs(offset) <= sw.width[wk.sidewalk[on]] / 2 + 1e-9).all()
        c = wk.mode == CROSSING
        crossed += int(c.sum())
        seg, rel = wk.end[c] - wk.start[c], wk.xy[c] - wk.start[c]
        assert np.abs(seg[:, 0] * rel[:, 1] - seg[:, 1] * rel[:, 0]).max(initial=0.0) <= 1e-6 * 100
    assert crossed > 0


def _goal_about(w: NavWorld, length: float, seed: int):
    spec = resolve_nav_scenario(MAZE, {"goal_distance": length})
    goal, route = draw_goal(spec, w.town, w.ego_location, np.random.default_rng(seed))
    return goal[:2], route


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normal_autopilot_reaches_a_goal_150_m_away_without_contact(seed):
    w = NavWorld("Town02", 10, 5, seed=seed)
    goal, length = _goal_about(w, 150.0, seed)
    assert abs(length - 150.0) <= MAZE_GOAL_TOLERANCE
    route = w.set_goal(goal, "normal")
    for _ in range(2400):
        w.tick(*w.autopilot_control())
        if w.route_done():
            break
    assert w.route_done()
    assert np.hypot(w.vehicles.x[0] - route.waypoints[-1, 0], w.vehicles.y[0] - route.waypoints[-1, 1]) <= 3.5
    assert w.counts["ego_vehicle"] == 0 and w.counts["ego_walker"] == 0 and w.counts["npc_npc"] == 0


def test_bad_input_raises():
    with pytest.raises(ValueError, match="n_walkers"):
        NavWorld("Town02", 0, -1)
    w = NavWorld("Town02", 0, 0)
    with pytest.raises(ValueError, match="throttle"):
        w.tick(1.5, 0.0, 0.0)
    with pytest.raises(RuntimeError, match="set_goal"):
        w.autopilot_control()


def test_town_without_sidewalks_takes_no_walkers_and_ticks():
    w = NavWorld("Town06", 5, 0, seed=0)
    assert w._static.sidewalks is None and w.walkers.xy.shape == (0, 2)
    for _ in range(20):
        w.tick(0.5, 0.0, 0.0)
    assert w.ticks == 20 and w.counts["npc_walker"] == 0 and (w.vehicles.speed[1:] > 0).any()
    with pytest.raises(ValueError, match=r"n_walkers=3: town Town06 has no sidewalks, so it takes 0 walkers"):
        NavWorld("Town06", 0, 3)


def test_clear_goal_forgets_route_and_agent():
    w = NavWorld("Town02", 0, 0, seed=1)
    assert w.agent is None and not w.route_done()
    goal, _ = _goal_about(w, 100.0, 1)
    w.set_goal(goal, "cautious")
    assert w.agent.name == "cautious" and w.route is not None
    w.clear_goal()
    assert w.agent is None and w.route is None and not w.route_done()
    with pytest.raises(RuntimeError, match="set_goal"):
        w.autopilot_control()


def test_route_speed_limits_brake_towards_slower_curves_at_b():
    xy = np.stack([np.arange(0.0, 40.0, 2.0), np.zeros(20)], axis=1)
    curve = np.full(20, 12.0)
    curve[15:] = 4.0  # a curve driven at 4 m/s from waypoint 15 (30 m) on
    limits = route_speed_limits(curve, xy)
    b = URBAN.comfortable_deceleration
    expected = np.minimum(12.0, np.sqrt(4.0**2 + 2 * b * np.maximum(30.0 - xy[:, 0], 0.0)))
    assert np.allclose(limits, expected, rtol=0, atol=1e-12)
    assert limits[15:].tolist() == [4.0] * 5 and (limits <= curve).all() and limits[0] < 12.0


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_autopilot_keeps_its_lane_through_tight_junction_turns(seed):
    """The autopilot keeps within 1.25 m of its lane through Town02's junction turns.

    At the town's speed limit it drifted 1.6-1.75 m off its lane onto the kerb, where walkers wait; the
    curve-speed limits of `route_speed_limits` keep it on the road.
    """
    w = NavWorld("Town02", 0, 0, seed=seed)
    goal, _ = _goal_about(w, 150.0, seed)
    w.set_goal(goal, "normal")
    worst = 0.0
    for _ in range(2400):
        w.tick(*w.autopilot_control())
        if w._static.connector[w.ego_location.lane]:
            worst = max(worst, abs(w.ego_location.lateral))
        if w.route_done():
            break
    assert w.route_done() and 0.5 < worst <= 1.25


def test_autopilot_waits_for_room_before_a_lane_change():
    """The autopilot waits for room on the target lane before a lane change on its route.

    Failing input: Town04, 20 NPCs, 10 walkers, seed 4. The route starts with a lane change while an NPC
    drives beside the ego on the target lane; the ego used to cut in and touch it at tick 39.
    """
    w = NavWorld("Town04", 20, 10, seed=4)
    goal, _ = _goal_about(w, 150.0, 4)
    w.set_goal(goal, "normal")
    waited = 0
    for _ in range(600):
        i, s_ego = w._ego_route_s()
        k = np.arange(max(i - 10, 0), w._planner_routes.count[0])
        along = w._planner_routes.s[0, k] - s_ego
        waited += np.isfinite(w._lane_change_wait(k[along >= 0], along[along >= 0]))
        w.tick(*w.autopilot_control())
    assert waited > 0 and w.counts["ego_vehicle"] == 0 and w.counts["ego_walker"] == 0


def test_only_the_first_vehicle_of_a_lane_is_granted_a_connector():
    """Only the first vehicle of a lane asks for its next connector.

    A car queued behind another must not book one: it cannot reach it, and the car in front may wait for a
    conflicting one (the deadlock of free_roam_Town05_v10_p5 seed 26).
    """
    w = NavWorld("Town02", 25, 0, seed=2)
    grants = 0
    for _ in range(1500):
        before = w.held.copy()
        lane = np.concatenate([[w.ego_location.lane], w.routes.lane])
        s = np.concatenate([[w.ego_location.s], w.routes.s])
        w.tick(0.0, 1.0, 0.0)
        for row in np.flatnonzero((before < 0) & (w.held >= 0) & (w.held != lane)):
            grants += 1
            assert not ((lane == lane[row]) & (s > s[row])).any()
    assert grants > 50 and w.counts["npc_npc"] == 0


def test_route_bookkeeping_is_the_same_whoever_drives():
    """An ego with a route driven by replayed controls is located along it as the autopilot's own ego is.

    The planner's queue used to advance only inside `autopilot_control`, so an ego driven by ``control`` after
    ``set_destination`` stayed on the route's first lane (wrong junction requests and crosswalk gaps).
    """
    worlds = [NavWorld("Town05", 10, 5, seed=7) for _ in range(2)]
    goal, _ = _goal_about(worlds[0], 150.0, 7)
    for w in worlds:
        w.set_goal(goal, "normal")
    lanes = set()
    for _ in range(400):
        controls = worlds[0].autopilot_control()
        for w in worlds:
            w.tick(*controls)  # world 1 never runs its autopilot: only the controls replayed
        assert worlds[1].ego_location == worlds[0].ego_location
        assert worlds[1]._planner.index[0] == worlds[0]._planner.index[0]
        lanes.add(worlds[1].ego_location.lane)
    a, b = worlds[0].state_arrays(), worlds[1].state_arrays()
    assert all(np.array_equal(a[k], b[k]) for k in a) and len(lanes) >= 3


def test_ego_spawn_places_the_ego_and_keeps_npcs_off_its_spawn_point():
    town = get_town("Town02")
    sp = town.spawn_points
    for spawn in (0, 17, len(sp) - 1):
        w = NavWorld(town, 20, 0, seed=3, ego_spawn=spawn)
        ego = (w.vehicles.x[0], w.vehicles.y[0], w.vehicles.yaw[0])
        assert ego == (sp.xy[spawn, 0], sp.xy[spawn, 1], sp.yaw[spawn])
        assert w.ego_location.lane == sp.lane[spawn] and len(w.vehicles) == 21
        assert np.hypot(w.vehicles.x[1:] - sp.xy[spawn, 0], w.vehicles.y[1:] - sp.xy[spawn, 1]).min() > 0.0
    same = NavWorld(town, 20, 0, seed=3, ego_spawn=17), NavWorld(town, 20, 0, seed=3, ego_spawn=17)
    assert np.array_equal(same[0].vehicles.x, same[1].vehicles.x)
    for bad in (-1, len(sp), 2.0, True):
        with pytest.raises(ValueError, match=rf"ego_spawn={bad!r}: must be a spawn point index in \[0, {len(sp)}\)"):
            NavWorld(town, 0, 0, ego_spawn=bad)
