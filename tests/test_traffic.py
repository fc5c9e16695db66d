"""Traffic actors as arrays (carla_gym.sim.traffic): closed forms, exact geometry, long runs, determinism."""

from __future__ import annotations

import math

import numpy as np
import pytest

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import NUMPY, EgoState, step_ego
from carla_gym.sim.traffic.collision import (
    WALKER_RADIUS,
    box_disc_distance,
    boxes_overlap,
    vehicle_contacts,
    walker_contacts,
)
from carla_gym.sim.traffic.idm import equilibrium_gap, idm_acceleration, pedals_for
from carla_gym.sim.traffic.lanes import Lanes, advance_routes, drive, find_leaders, place_on_lanes, start_routes
from carla_gym.sim.traffic.vehicles import Vehicles, make_vehicles, step_vehicles
from carla_gym.sim.traffic.walkers import (
    CROSSING,
    SIDEWALK,
    WAITING,
    YIELD_MARGIN,
    Sidewalks,
    spawn_walkers,
    step_walkers,
)


def straight(x0, x1, y=0.0):
    xs = np.arange(x0, x1 + 0.5, 1.0)
    return np.stack([xs, np.full_like(xs, y)], axis=1)


def ring(radius=60.0):
    th = np.linspace(0.0, 2 * np.pi, int(2 * np.pi * radius) + 1)
    return Lanes([np.stack([radius * np.cos(th), radius * np.sin(th)], axis=1)], [[0]])


def one(x, y, yaw, speed=0.0, length=C.EGO_LENGTH, width=C.EGO_WIDTH):
    a = lambda v: np.atleast_1d(np.asarray(v, dtype=np.float64))  # noqa: E731
    n = len(a(x))
    return Vehicles(a(x), a(y) + np.zeros(n), a(yaw) + np.zeros(n), a(speed) + np.zeros(n), np.zeros(n),
                    a(length) + np.zeros(n), a(width) + np.zeros(n), np.full(n, C.EGO_WHEELBASE))


# --- IDM closed forms ---------------------------------------------------------------------------------------

def test_idm_free_road_closed_form():
    v = np.array([0.0, 5.0, 10.0, 13.0])
    a = idm_acceleration(v, 13.9, np.inf, 0.0)
    np.testing.assert_allclose(a, 1.5 * (1 - (v / 13.9) ** 4), rtol=0, atol=1e-15)
    assert a[0] == 1.5


def test_idm_equilibrium_gap_is_a_fixed_point():
    v = np.array([2.0, 7.0, 12.0])
    gap = equilibrium_gap(v, 13.9)
    np.testing.assert_allclose(idm_acceleration(v, 13.9, gap, v), 0.0, atol=1e-12)
    np.testing.assert_allclose(gap, (2.0 + 1.5 * v) / np.sqrt(1 - (v / 13.9) ** 4))
    with pytest.raises(ValueError, match="desired_speed"):
        equilibrium_gap(14.0, 13.9)


def test_pedals_invert_the_bicycle_acceleration():
    t, b = pedals_for(np.array([1.5, -2.0, 0.0, 10.0, -20.0]))
    np.testing.assert_array_equal(t, [0.5, 0.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(b, [0.0, 0.25, 0.0, 0.0, 1.0])


def test_platoon_settles_at_the_equilibrium_gap():
    lanes = Lanes([straight(0.0, 3000.0)], [[]], speed_limit=13.9)
    rng = np.random.default_rng(1)
    routes = start_routes(lanes, [0, 0], [60.0, 20.0], rng)
    v = place_on_lanes(lanes, routes, rng, speed=[8.0, 8.0])
    for _ in range(1600):  # 80 s
        t, b, s = drive(lanes, routes, v)
        t[0], b[0] = 0.0, 0.0  # the leader coasts at 8 m/s exactly
        v = step_vehicles(v, t, b, s)
        routes, v, _ = advance_routes(lanes, routes, v, rng)
    gap = v.x[0] - v.x[1] - 0.5 * (v.length[0] + v.length[1])
    assert v.speed[0] == 8.0
    assert abs(v.speed[1] - 8.0) < 1e-3
    assert abs(gap - equilibrium_gap(8.0, 13.9)) < 0.01


# --- the bicycle model batched --------------------------------------------------------------------------------

def test_n_vehicles_step_equals_n_single_steps_bit_for_bit():
    rng = np.random.default_rng(7)
    n = 37
    v = make_vehicles(rng.uniform(-50, 50, n), rng.uniform(-50, 50, n), rng.uniform(-3, 3, n),
                      rng.uniform(0, C.MAX_SPEED, n), rng=rng)
    t, b, s = rng.random(n), rng.random(n) * (rng.random(n) < 0.3), rng.uniform(-1, 1, n)
    for _ in range(5):
        out = step_vehicles(v, t, b, s)
        for i in range(n):
            e = step_ego(EgoState(v.x[i:i + 1], v.y[i:i + 1], v.yaw[i:i + 1], v.speed[i:i + 1], v.beta[i:i + 1]),
                         t[i:i + 1], b[i:i + 1], s[i:i + 1], C.DT, NUMPY, v.wheelbase[i:i + 1])
            got = [out.x[i], out.y[i], out.yaw[i], out.speed[i], out.beta[i]]
            assert got == [float(e.x[0]), float(e.y[0]), float(e.yaw[0]), float(e.speed[0]), float(e.beta[0])]
        v = out


def test_npc_sizes_are_seeded_and_in_range():
    a = make_vehicles(np.zeros(50), 0.0, 0.0, rng=np.random.default_rng(3))
    b = make_vehicles(np.zeros(50), 0.0, 0.0, rng=np.random.default_rng(3))
    assert (a.length[0], a.width[0]) == (C.EGO_LENGTH, C.EGO_WIDTH)
    assert ((a.length[1:] >= 4.2) & (a.length[1:] <= 5.0) & (a.width[1:] >= 1.8) & (a.width[1:] <= 2.2)).all()
    np.testing.assert_array_equal(a.length, b.length)
    with pytest.raises(ValueError, match="rng=None"):
        make_vehicles(np.zeros(2), 0.0, 0.0)
    with pytest.raises(ValueError, match="steer"):
        step_vehicles(a, 0.0, 0.0, 1.5)


# --- separating axes and swept contacts -------------------------------------------------------------------------

def test_separating_axis_hand_placed_boxes():
    # Axis-aligned 4 x 2 boxes: touching end to end, 1 cm apart, overlapping by 1 cm.
    assert boxes_overlap(0, 0, 0, 2, 1, 4.0, 0, 0, 2, 1)
    assert not boxes_overlap(0, 0, 0, 2, 1, 4.01, 0, 0, 2, 1)
    assert boxes_overlap(0, 0, 0, 2, 1, 3.99, 0, 0, 2, 1)
    assert not boxes_overlap(0, 0, 0, 2, 1, 0, 2.01, 0, 2, 1)
    # B turned 90 deg: its half width 1 now lies along x.
    assert boxes_overlap(0, 0, 0, 2, 1, 3.0, 0, math.pi / 2, 2, 1)
    assert not boxes_overlap(0, 0, 0, 2, 1, 3.01, 0, math.pi / 2, 2, 1)
    # B turned 45 deg, corner first: its corner reaches sqrt(2) * 1.5 from its centre for a 1.5 x 1.5 half square.
    reach = 1.5 * math.sqrt(2)
    assert boxes_overlap(0, 0, 0, 2, 1, 2 + reach - 0.01, 0, math.pi / 4, 1.5, 1.5)
    assert not boxes_overlap(0, 0, 0, 2, 1, 2 + reach + 0.01, 0, math.pi / 4, 1.5, 1.5)
    # Both unit half squares turned 45 deg, centres offset along the diagonal (their common x axis): they touch
    # at a centre distance of 2, so 1.41 * sqrt(2) = 1.994 overlaps and 1.42 * sqrt(2) = 2.008 is apart.
    assert boxes_overlap(0, 0, math.pi / 4, 1, 1, 1.41, 1.41, math.pi / 4, 1, 1)
    assert not boxes_overlap(0, 0, math.pi / 4, 1, 1, 1.42, 1.42, math.pi / 4, 1, 1)


def dense_contact(before, after, i, j, samples=4000):
    t = np.linspace(0.0, 1.0, samples)
    turn = np.arctan2(np.sin(after.yaw - before.yaw), np.cos(after.yaw - before.yaw))
    pose = lambda v, k: (v.x[k] + t * (after.x[k] - v.x[k]), v.y[k] + t * (after.y[k] - v.y[k]),  # noqa: E731
                         v.yaw[k] + t * turn[k])
    (xa, ya, wa), (xb, yb, wb) = pose(before, i), pose(before, j)
    return boxes_overlap(xa, ya, wa, before.length[i] / 2, before.width[i] / 2, xb, yb, wb,
                         before.length[j] / 2, before.width[j] / 2, slack=0.0).any()


def test_head_on_at_max_speed_is_caught_in_the_tick_they_meet():
    step = C.MAX_SPEED * C.DT  # 2.78 m per tick each
    gap0 = 20.0
    v = one([0.0, C.EGO_LENGTH + gap0], 0.0, [0.0, math.pi], C.MAX_SPEED)
    meet = math.ceil(gap0 / (2 * step))  # the tick during which the gap closes
    for tick in range(1, meet + 1):
        nxt = step_vehicles(v, 0.0, 0.0, 0.0)
        contacts = vehicle_contacts(v, nxt)
        assert (len(contacts) == 1) == (tick == meet), tick
        v = nxt


def test_corner_graze_between_tick_ends_is_caught():
    # Oncoming at max speed in the next lane, B yawed 0.3 rad so that only corners meet: the boxes are apart at
    # both ends of the tick but overlap in between (found by a dense sampling of the tick, checked below).
    a0 = one([0.0, 3.0], [0.0, 2.2], [0.0, math.pi - 0.3], C.MAX_SPEED)
    a1 = step_vehicles(a0, 0.0, 0.0, 0.0)
    assert not boxes_overlap(a0.x[0], a0.y[0], a0.yaw[0], 2.45, 1.05, a0.x[1], a0.y[1], a0.yaw[1], 2.45, 1.05)
    assert not boxes_overlap(a1.x[0], a1.y[0], a1.yaw[0], 2.45, 1.05, a1.x[1], a1.y[1], a1.yaw[1], 2.45, 1.05)
    assert dense_contact(a0, a1, 0, 1)
    np.testing.assert_array_equal(vehicle_contacts(a0, a1), [[0, 1]])


def test_swept_contacts_never_miss_random_pairs():
    rng = np.random.default_rng(11)
    missed = false_alarms = hits = 0
    for _ in range(150):
        before = one(rng.uniform(-4, 4, 2), rng.uniform(-4, 4, 2), rng.uniform(-3, 3, 2), 0.0)
        after = one(before.x + rng.uniform(-3, 3, 2), before.y + rng.uniform(-3, 3, 2),
                    before.yaw + rng.uniform(-0.1, 0.1, 2), 0.0)
        truth = dense_contact(before, after, 0, 1)
        found = len(vehicle_contacts(before, after)) == 1
        hits += truth
        missed += truth and not found
        false_alarms += found and not truth
    assert missed == 0 and hits > 30 and false_alarms <= 2


def test_walker_crossing_in_front_of_a_car_at_max_speed():
    # The walker steps out of the car's path at 1.3 m/s while the car's front corner sweeps past it: apart at both
    # ends of the tick (the car's 2.78 m would jump over the contact), touching in between.
    car0 = one(0.0, 0.0, 0.0, C.MAX_SPEED)
    car1 = step_vehicles(car0, 0.0, 0.0, 0.0)
    w0 = np.array([[2.45 + WALKER_RADIUS + 0.1, -(1.05 + WALKER_RADIUS) + 0.03]])
    w1 = w0 + [0.0, -1.3 * C.DT]
    for car, w in ((car0, w0), (car1, w1)):
        assert box_disc_distance(car.x[0], car.y[0], car.yaw[0], 2.45, 1.05, w[0, 0], w[0, 1]) > WALKER_RADIUS
    np.testing.assert_array_equal(walker_contacts(car0, car1, w0, w1), [[0, 0]])
    far = w0 + [0.0, -0.1]  # 7 cm clear of the car's side the whole tick
    assert len(walker_contacts(car0, car1, far, far + [0.0, -1.3 * C.DT])) == 0


# --- lanes, leaders, the ring road ------------------------------------------------------------------------------

def test_leader_search_on_a_t_of_three_lanes():
    # Lane 0 ends at x = 50 and continues into lane 1 (straight on) or lane 2 (turning right, +y).
    right_turn = np.stack([np.full(31, 50.0), np.arange(31.0)], 1)
    lanes = Lanes([straight(0, 50), straight(50, 100), right_turn], [[1, 2], [], []])
    routes = start_routes(lanes, [0, 0, 1, 2], [10.0, 30.0, 5.0, 5.0], np.random.default_rng(0))
    routes.next_lane[:] = [1, 1, -1, -1]  # both cars on lane 0 go straight on
    v = one([10, 30, 55, 50], [0, 0, 0, 5], 0.0, length=[4.0, 4.0, 4.0, 4.0])
    leader, gap, _ = find_leaders(lanes, routes, v)
    assert leader[0] == 1 and gap[0] == 16.0
    assert leader[1] == 2 and gap[1] == 20.0 + 5.0 - 4.0
    assert leader[2] == -1 and gap[2] == 45.0 - 2.0 + 2.0  # the dead end at x = 100
    routes.next_lane[1] = 2
    leader, gap, _ = find_leaders(lanes, routes, v)
    assert leader[1] == 3 and gap[1] == 21.0


def ring_run(ticks, n=20, seed=0):
    lanes = ring()
    rng = np.random.default_rng(seed)
    routes = start_routes(lanes, np.zeros(n, dtype=np.int64), np.arange(n) * lanes.length[0] / n, rng)
    v = place_on_lanes(lanes, routes, rng)
    worst, contacts = 0.0, 0
    for _ in range(ticks):
        nxt = step_vehicles(v, *drive(lanes, routes, v))
        contacts += len(vehicle_contacts(v, nxt))
        routes, v, lateral = advance_routes(lanes, routes, nxt, rng)
        worst = max(worst, float(np.abs(lateral).max()))
    return v, contacts, worst


def test_ring_road_1000_ticks():
    v, contacts, worst = ring_run(1000)
    assert contacts == 0 and worst < 0.05  # 5 cm lateral error bound (60 m radius, 1 m chords)
    assert (v.speed > 7.0).all()  # the platoon is moving at its equilibrium speed, not jammed


@pytest.mark.slow
def test_ring_road_10000_ticks():
    v, contacts, worst = ring_run(10000)
    assert contacts == 0 and worst < 0.05
    assert np.ptp(v.speed) < 1e-3


def test_determinism_with_a_seed():
    a, _, _ = ring_run(200, n=12, seed=5)
    b, _, _ = ring_run(200, n=12, seed=5)
    for k in ("x", "y", "yaw", "speed", "length"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))


def test_routes_respawn_at_a_dead_end():
    lanes = Lanes([straight(0, 40)], [[]])
    rng = np.random.default_rng(2)
    routes = start_routes(lanes, [0], [30.0], rng)
    v = place_on_lanes(lanes, routes, rng, speed=5.0)
    respawned = False
    for _ in range(400):
        v = step_vehicles(v, *drive(lanes, routes, v))
        routes, v, _ = advance_routes(lanes, routes, v, rng, spawns=(np.array([0]), np.array([5.0])))
        respawned |= routes.s[0] < 10.0
        assert v.x[0] + v.length[0] / 2 <= 40.0 + 1e-6  # never past the dead end
    assert respawned


# --- walkers ----------------------------------------------------------------------------------------------------

def town_block():
    top, bottom = straight(0, 100, -7.0), straight(0, 100, 7.0)
    return Sidewalks([top, bottom], 3.0, [1, 0], crosswalks=[(0, 50.0, 1, 50.0)])


def test_walkers_stay_on_sidewalks_except_when_crossing():
    sw = town_block()
    rng = np.random.default_rng(4)
    w = spawn_walkers(sw, 40, rng, jaywalk_share=0.25)
    crossings = 0
    for _ in range(4000):
        w = step_walkers(w, sw, rng, jaywalk_rate=0.05)
        on = w.mode == SIDEWALK
        _, off, _ = sw.project(w.sidewalk[on], w.xy[on], w.s[on])
        assert (np.abs(off) <= 1.5 - WALKER_RADIUS + 1e-9).all()
        crossing = w.mode == CROSSING
        crossings += crossing.sum()
        assert (np.abs(w.xy[crossing, 1]) <= 8.5).all()  # between the sidewalks' outer edges
        # Non-jaywalkers cross only on the crosswalk at x = 50.
        honest = crossing & ~w.jaywalker
        assert (np.abs(w.xy[honest, 0] - 50.0) < 1e-9).all()
    assert crossings > 0
    assert ((w.speed >= 1.2) & (w.speed <= 1.5)).all()


def test_walkers_are_deterministic_with_a_seed():
    sw = town_block()
    runs = []
    for _ in range(2):
        rng = np.random.default_rng(9)
        w = spawn_walkers(sw, 10, rng, jaywalk_share=0.5)
        for _ in range(300):
            w = step_walkers(w, sw, rng, jaywalk_rate=0.2)
        runs.append(w.xy)
    np.testing.assert_array_equal(runs[0], runs[1])


def _walker_at_crosswalk(sw):
    """One walker half a tick's walk before the crosswalk end at s = 50 of sidewalk 0, walking at 1.25 m/s."""
    w = spawn_walkers(sw, 1, np.random.default_rng(0))
    w.sidewalk[:], w.s[:], w.direction[:], w.offset[:], w.speed[:] = 0, 50.0 - 0.5 * 1.25 * C.DT, 1.0, 0.0, 1.25
    return w


def test_walkers_wait_at_the_kerb_until_traffic_leaves_their_crossing_time_plus_margin():
    sw = town_block()
    need = 14.0 / 1.25 + YIELD_MARGIN  # the crossing runs from y = -7 to y = 7
    w = step_walkers(_walker_at_crosswalk(sw), sw, np.random.default_rng(1), cross_probability=1.0,
                     crosswalk_arrival=np.array([0.0]))
    assert w.mode[0] == WAITING and w.crosswalk[0] == 0
    np.testing.assert_allclose(w.xy[0], [50.0, -7.0], atol=1e-12)  # standing at the crossing's start
    for arrival in (0.0, need - 1e-9, need):
        w = step_walkers(w, sw, np.random.default_rng(2), crosswalk_arrival=np.array([arrival]))
        assert w.mode[0] == WAITING
        np.testing.assert_allclose(w.xy[0], [50.0, -7.0], atol=1e-12)
    w = step_walkers(w, sw, np.random.default_rng(3), crosswalk_arrival=np.array([need + 1e-9]))
    assert w.mode[0] == CROSSING and w.crosswalk[0] == 0
    w = step_walkers(w, sw, np.random.default_rng(4), crosswalk_arrival=np.array([0.0]))  # once gone, it goes on
    np.testing.assert_allclose(w.xy[0], [50.0, -7.0 + 1.25 * C.DT], atol=1e-12)
    for _ in range(int(14.0 / (1.25 * C.DT)) + 1):
        w = step_walkers(w, sw, np.random.default_rng(5))
    assert w.mode[0] == SIDEWALK and w.sidewalk[0] == 1 and w.crosswalk[0] == -1


def test_no_traffic_means_no_wait_and_bad_arrivals_raise():
    sw = town_block()
    w = step_walkers(_walker_at_crosswalk(sw), sw, np.random.default_rng(1), cross_probability=1.0)
    assert w.mode[0] == CROSSING
    for bad in (np.array([-1.0]), np.array([np.nan]), np.zeros(2)):
        with pytest.raises(ValueError, match="crosswalk_arrival"):
            step_walkers(w, sw, np.random.default_rng(1), crosswalk_arrival=bad)
