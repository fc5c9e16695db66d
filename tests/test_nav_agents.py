"""CARLA's navigation agents over arrays (carla_gym.sim.agents), driven with the bicycle model."""

from __future__ import annotations

import numpy as np
import pytest

from carla_gym.sim.agents import (
    BEHAVIORS,
    AgentParams,
    Obstacles,
    PidState,
    PlannerState,
    agent_params,
    agent_step,
    arrived,
    heading_error,
    make_routes,
    pid_step,
    route_completion,
    vehicle_control,
)
from carla_gym.sim.agents.behavior import BASE_VEHICLE_THRESHOLD, EMERGENCY_BRAKE
from carla_gym.sim.agents.pid import LATERAL_GAINS, LONGITUDINAL_GAINS, ControllerState
from carla_gym.sim.constants import DT, EGO_LENGTH, MAX_ACCELERATION
from carla_gym.sim.kinematics import NUMPY, EgoState, step_ego


def straight(length=100.0):
    x = np.arange(0.0, length + 1e-9, 1.0)
    return np.stack([x, np.zeros_like(x)], axis=1)


def turn(radius=10.0, before=20, after=30):
    """Straight, a 90 degree right turn of ``radius`` [m], straight (1 m spacing)."""
    a = np.stack([np.arange(0.0, before), np.zeros(before)], axis=1)
    th = np.arange(0.0, np.pi / 2, 1.0 / radius)
    b = np.stack([before + radius * np.sin(th), radius - radius * np.cos(th)], axis=1)
    c = np.stack([np.full(after, before + radius), radius + np.arange(0.0, after)], axis=1)
    return np.concatenate([a, b, c])


def s_bend(offset=5.0, length=60.0, before=20.0, total=140.0):
    """An S-bend (half-cosine) shifting ``offset`` [m] sideways over ``length`` [m]."""
    x = np.arange(0.0, total, 1.0)
    y = np.where(
        x <= before,
        0.0,
        np.where(x >= before + length, offset, offset * (1 - np.cos(np.pi * (x - before) / length)) / 2),
    )
    return np.stack([x, y], axis=1)


def lane_change(total=120.0):
    """One 3.5 m lane change (a shorter S-bend, 25 m long)."""
    return s_bend(offset=3.5, length=25.0, before=30.0, total=total)


def distance_to_polyline(points, route):
    """Distance [m] of each point (K, 2) to the polyline through ``route`` (M, 2)."""
    a, ab = route[:-1], np.diff(route, axis=0)
    ap = points[:, None, :] - a[None]
    t = np.clip((ap * ab).sum(-1) / (ab * ab).sum(-1), 0.0, 1.0)
    return np.linalg.norm(ap - t[..., None] * ab, axis=-1).min(axis=1)


def drive(params, routes, ticks, obstacles=None):
    """Run N agents on their routes from rest at the first waypoint; returns per-tick histories."""
    n = len(routes.count)
    car = EgoState(
        x=routes.xy[:, 0, 0].copy(),
        y=routes.xy[:, 0, 1].copy(),
        yaw=routes.yaw[:, 0].copy(),
        speed=np.zeros(n),
        beta=np.zeros(n),
    )
    state = PlannerState.start(n)
    hist = {k: [] for k in ("x", "y", "speed", "target", "done", "brake", "gap")}
    for k in range(ticks):
        seen = obstacles(k, car) if obstacles else None
        out = agent_step(params, state, car, routes, seen)
        state = out.state
        car = step_ego(car, out.throttle, out.brake, out.steer, m=NUMPY)
        for key, value in (
            ("x", car.x),
            ("y", car.y),
            ("speed", car.speed),
            ("target", out.target_speed_kmh),
            ("done", state.index >= routes.count),
            ("brake", out.brake),
        ):
            hist[key].append(np.array(value, copy=True))
        if seen is not None:
            hist["gap"].append(seen.vehicle_gap.copy())
    return car, state, {k: np.array(v) for k, v in hist.items()}


def test_pid_first_ticks_match_hand_computation():
    state = PidState.zeros((1,))
    out0, state = pid_step(state, np.array([0.2]), LONGITUDINAL_GAINS)
    assert out0[0] == pytest.approx(1.5 * 0.2, rel=1e-12)  # first tick: proportional only
    out1, state = pid_step(state, np.array([0.1]), LONGITUDINAL_GAINS)
    # 1.5 * 0.1 + 0.2 * (0.1 - 0.2) / 0.05 + 0.05 * (0.2 + 0.1) * 0.05
    assert out1[0] == pytest.approx(0.15 - 0.4 + 0.00075, rel=1e-12)
    lat0, lat = pid_step(PidState.zeros((1,)), np.array([0.1]), LATERAL_GAINS)
    lat1, _ = pid_step(lat, np.array([0.05]), LATERAL_GAINS)
    assert (lat0[0], lat1[0]) == pytest.approx((0.195, 0.0975 - 0.2 + 0.000375), rel=1e-12)
    big, _ = pid_step(PidState.zeros((1,)), np.array([-5.0]), LONGITUDINAL_GAINS)
    assert big[0] == -1.0  # clipped
    # The buffer keeps 10 errors: after 12 ticks of error 1 the integral is 10 * 1 * dt.
    s = PidState.zeros((1,))
    for _ in range(12):
        out, s = pid_step(s, np.array([0.01]), LONGITUDINAL_GAINS)
    assert out[0] == pytest.approx(1.5 * 0.01 + 0.05 * 10 * 0.01 * 0.05, rel=1e-12)


def test_vehicle_control_caps_and_rate_limits_steer():
    state = ControllerState.zeros((2,))
    thr, brk, steer, state = vehicle_control(
        state, np.array([0.0, 40.0]), np.array([20.0, 20.0]), np.array([0.3, -0.3])
    )
    assert thr.tolist() == [0.75, 0.0] and brk.tolist() == [0.0, 0.3]  # max throttle / max brake
    assert steer == pytest.approx([0.1, -0.1])  # 0.585 wanted, 0.1 per tick allowed
    _, _, steer, _ = vehicle_control(state, np.array([0.0, 40.0]), np.array([20.0, 20.0]), np.array([0.3, -0.3]))
    assert steer == pytest.approx([0.2, -0.2])
    _, _, steer, _ = vehicle_control(
        ControllerState(state.longitudinal, state.lateral, np.array([0.75, -0.75])),
        np.zeros(2),
        np.zeros(2),
        np.array([1.0, -1.0]),
    )
    assert steer.tolist() == [0.8, -0.8]  # max steer


def test_heading_error_sign_and_range():
    x, y, yaw = np.zeros(4), np.zeros(4), np.zeros(4)
    err = heading_error(x, y, yaw, np.array([0.0, 0.0, -1.0, 1.0]), np.array([1.0, -1.0, 0.0, 1.0]))
    assert err == pytest.approx([np.pi / 2, -np.pi / 2, np.pi, np.pi / 4])  # y to the right is positive


@pytest.mark.parametrize(
    ("name", "route", "bound"),
    [
        ("straight", straight(), 0.01),
        ("turn", turn(), 1.25),
        ("s_bend", s_bend(), 0.75),
        ("lane_change", lane_change(), 0.6),
    ],
)
def test_basic_agent_follows_route_to_the_end(name, route, bound):
    routes = make_routes(route)
    car, state, hist = drive(agent_params("basic"), routes, 800)
    done_at = int(np.argmax(hist["done"][:, 0]))
    path = np.stack([hist["x"][:done_at, 0], hist["y"][:done_at, 0]], axis=1)
    assert distance_to_polyline(path, route).max() < bound, name
    assert hist["done"][-1, 0] and car.speed[0] == 0.0  # route done: brake 1 holds it
    assert arrived(car.x, car.y, route[-1, 0], route[-1, 1], 1.0)[0]
    assert route_completion(routes, state.index, car.x, car.y)[0] == 1.0
    # The published gains settle 0.9 to 1.3 km/h under the 20 km/h target on this model (a limit cycle).
    cruise = hist["speed"][done_at - 100 : done_at - 20, 0] * 3.6
    assert 18.5 < cruise.min() and cruise.max() < 20.0


def test_batch_of_routes_equals_single_runs():
    routes = [straight(), turn(), s_bend()]
    _, _, batch = drive(agent_params("basic"), make_routes(routes), 300)
    for i, route in enumerate(routes):
        _, _, single = drive(agent_params("basic"), make_routes(route), 300)
        assert np.array_equal(batch["x"][:, i], single["x"][:, 0]) and np.array_equal(
            batch["y"][:, i], single["y"][:, 0]
        )


def test_basic_agent_reaches_20_kmh_from_rest():
    _, _, hist = drive(agent_params("basic"), make_routes(straight()), 80)
    speed = hist["speed"][:, 0]
    assert speed[0] == pytest.approx(0.75 * MAX_ACCELERATION * DT)  # full PID output capped at max throttle
    # 19 km/h at 2.25 m/s^2 takes 2.35 s; the PID reaches it within 2.5 s and never overshoots 20 km/h.
    assert (np.argmax(speed * 3.6 >= 19.0) + 1) * DT <= 2.5 and speed.max() * 3.6 < 20.0


def test_basic_agent_stops_for_a_stopped_vehicle_and_resumes():
    lead_x, leaves = 60.0, 600

    def seen(k, car):
        gap = np.full(1, lead_x - car.x[0] - EGO_LENGTH if k < leaves else np.inf)
        return Obstacles(gap, np.zeros(1), np.full(1, np.inf), np.full(1, np.inf))

    _, _, hist = drive(agent_params("basic"), make_routes(straight(200.0)), 900, seen)
    assert hist["speed"][leaves - 20 : leaves, 0].max() == 0.0  # at rest before the vehicle leaves
    gap_at_rest = hist["gap"][leaves - 1, 0] - 0.0
    # It stops, then creeps up to the 5 m standstill threshold (5 m + 1 s x speed while moving).
    assert BASE_VEHICLE_THRESHOLD - 0.05 <= gap_at_rest < BASE_VEHICLE_THRESHOLD + 0.05
    assert hist["gap"][:leaves, 0].min() > 4.9
    assert hist["brake"][:leaves, 0].max() == EMERGENCY_BRAKE
    assert hist["speed"][-1, 0] * 3.6 > 18.5  # resumed


def test_basic_agent_stops_at_red_light():
    line = 40.0

    def seen(k, car):
        return Obstacles(np.full(1, np.inf), np.zeros(1), np.full(1, np.inf), np.full(1, line - car.x[0]))

    _, _, hist = drive(agent_params("basic"), make_routes(straight()), 500, seen)
    assert hist["speed"][-1, 0] == 0.0
    assert 4.9 < line - hist["x"][-1, 0] <= 5.05


@pytest.mark.parametrize("limit", [30.0, 50.0, 90.0])
@pytest.mark.parametrize("name", ["cautious", "normal", "aggressive"])
def test_behavior_cruise_speed_is_its_formula(name, limit):
    p = BEHAVIORS[name]
    expected = min(p.max_speed, limit - p.speed_lim_dist)
    _, _, hist = drive(p, make_routes(straight(400.0), speed_limit_kmh=limit), 400)
    assert np.all(hist["target"][:, 0] == expected)
    speed = hist["speed"][200:, 0] * 3.6
    assert expected - 1.5 < speed.min() and speed.max() < expected


def test_behavior_junction_turn_slows_to_limit_minus_5():
    route = straight(400.0)
    routes = make_routes(route, speed_limit_kmh=50.0, junction_turn=np.ones(len(route), dtype=bool))
    _, _, hist = drive(BEHAVIORS["normal"], routes, 5)
    assert np.all(hist["target"] == 45.0)


@pytest.mark.parametrize("name", ["cautious", "normal", "aggressive"])
def test_behavior_agent_keeps_safety_time_behind_leader(name):
    p, lead_speed, lead_start = BEHAVIORS[name], 30.0 / 3.6, 40.0

    def seen(k, car):
        gap = lead_start + lead_speed * k * DT - car.x[0] - EGO_LENGTH
        return Obstacles(np.full(1, gap), np.full(1, lead_speed), np.full(1, np.inf), np.full(1, np.inf))

    _, _, hist = drive(p, make_routes(straight(2000.0), speed_limit_kmh=90.0), 1600, seen)
    gap, speed = hist["gap"][1:, 0], hist["speed"][:-1, 0]  # gap seen at tick k+1 after speed of tick k
    assert gap.min() > 0.0  # never touches
    ttc = gap / np.maximum(1.0, speed - lead_speed)  # CARLA's time to collision
    assert ttc[-400:].min() >= p.safety_time
    assert abs(speed[-400:].mean() * 3.6 - 30.0) < 1.5


def test_behavior_emergency_stop_for_walker_within_braking_distance():
    p = BEHAVIORS["normal"]
    routes = make_routes([straight(), straight()], speed_limit_kmh=50.0)
    car = EgoState(x=np.zeros(2), y=np.zeros(2), yaw=np.zeros(2), speed=np.full(2, 10.0), beta=np.zeros(2))
    walker = np.array([p.braking_distance - 0.1, p.braking_distance + 0.1])
    out = agent_step(
        p, PlannerState.start(2), car, routes, Obstacles(np.full(2, np.inf), np.zeros(2), walker, np.full(2, np.inf))
    )
    assert out.emergency.tolist() == [True, False]
    assert out.brake[0] == EMERGENCY_BRAKE and out.throttle[0] == 0.0


def test_agent_params_names_and_bad_input():
    assert agent_params("cautious") is BEHAVIORS["cautious"] and agent_params(None) is BEHAVIORS["normal"]
    basic = agent_params("Normal ")  # anything else: the basic agent at 20 km/h
    assert basic.is_basic and basic.target_speed_kmh == 20.0
    with pytest.raises(ValueError, match="target_speed_kmh=-5"):
        AgentParams(target_speed_kmh=-5.0)
    with pytest.raises(ValueError, match="max_speed"):
        AgentParams("normal", max_speed=-1.0)
    with pytest.raises(ValueError, match="M >= 1"):
        make_routes(np.zeros((0, 2)))
    with pytest.raises(ValueError, match="non-finite"):
        make_routes(np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="speed limits"):
        make_routes(straight(), speed_limit_kmh=-30.0)
    with pytest.raises(ValueError, match="vehicle_speed"):
        Obstacles(np.ones(1), -np.ones(1), np.ones(1), np.ones(1))
    with pytest.raises(ValueError, match="radius"):
        arrived(np.zeros(1), np.zeros(1), 1.0, 1.0, -1.0)


def test_route_completion_is_the_covered_fraction():
    routes = make_routes([straight(100.0), turn()])
    assert routes.length[0] == 100.0
    done = route_completion(routes, np.array([28, 0]), np.array([25.0, 0.0]), np.array([0.3, 0.0]))
    assert done[0] == pytest.approx(0.25) and done[1] == 0.0
