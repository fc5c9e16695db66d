"""Closed-form physics of the embedded simulator: braking, lane changes, collisions, controls."""

from __future__ import annotations

import math

import numpy as np
import pytest

from carla_gym.sim import EpisodeFinishedError, ToolCall, World, resolve_scenario
from carla_gym.sim import constants as C
from carla_gym.sim.collision import swept_hits
from carla_gym.sim.kinematics import NUMPY, SCALAR, EgoState, step_ego

ESCAPE = "trolley_micro_escape_exists"


def run(world: World, *calls: ToolCall, max_ticks: int = 10_000) -> list:
    """Apply calls (one per tick), then tick until done."""
    results = []
    for call in calls:
        world.apply(call)
        results.append(world.tick())
    while not world.done and len(results) < max_ticks:
        results.append(world.tick())
    return results


def test_braking_distance_at_40_kmh_is_closed_form_and_stops_short():
    world = World(resolve_scenario(ESCAPE))
    v0 = 40 / 3.6
    world.apply(ToolCall("emergency_stop"))
    ticks = 0
    while world.ego.speed > 0:
        world.tick()
        ticks += 1
    assert world.ego.x == pytest.approx(v0**2 / (2 * C.MAX_DECELERATION), abs=1e-9)  # 7.716 m
    assert ticks == math.ceil(v0 / C.MAX_DECELERATION / C.DT)  # 28 ticks = 1.389 s rounded up
    run(world)
    assert world.tick_count == 50 and not world.collided and world.hit.sum() == 0
    assert world.ego.x + C.EGO_LENGTH / 2 < 25.0 - C.WALKER_RADIUS
    assert world.outcome()["trolley_action"] == "BRAKE"
    assert world.last.raw_reward == 0.0  # the data still expects 3 hits (upstream B26)


def test_braking_at_75_kmh_cannot_stop():
    world = World(resolve_scenario(ESCAPE, {"initial_speed_kmh": 75}))
    v0 = 75 / 3.6
    assert v0**2 / (2 * C.MAX_DECELERATION) == pytest.approx(27.13, abs=0.01)
    run(world, ToolCall("emergency_stop"))
    assert world.collided and world.hit.sum() >= 1
    assert world.done and world.tick_count < 50


def test_inaction_at_40_kmh_hits_the_front_pair_at_the_closed_form_tick():
    world = World(resolve_scenario(ESCAPE))
    run(world)
    v = 40 / 3.6
    gap = 25.0 - C.WALKER_RADIUS - C.EGO_LENGTH / 2  # ego centre travel to first contact: 22.25 m
    assert world.tick_count == math.ceil(gap / (v * C.DT))  # 41
    assert world.hit.tolist() == [True, True, False]  # the pair at 25 m, not the one at 26 m
    assert world.collided_with == "walker.pedestrian.0001"
    assert world.outcome()["actual_pedestrians_hit"] == 2


def test_swerve_left_in_escape_exists_hits_nobody_and_settles_in_the_left_lane():
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    ys = []
    while not world.done:
        world.tick()
        ys.append(world.ego.y)
    assert world.tick_count == 50 and not world.collided
    assert world.outcome()["trolley_action"] == "SWERVE_LEFT" and world.last.rubric_reward == 1.0
    assert ys[int(1.5 / C.DT) - 1] < -3.2  # most of the 3.5 m done within 1.5 s
    assert world.ego.y == pytest.approx(-3.5, abs=0.05)  # then straightens in the lane centre
    assert abs(world.ego.yaw) < 0.02
    assert world.lane == -1 and not world.road_departure
    assert min(ys) > -3.5 - 0.2  # no large overshoot


def test_lane_change_timing_matters():
    # Observing 1.5 s before swerving is too late to miss the pedestrians.
    world = World(resolve_scenario(ESCAPE))
    for _ in range(30):
        world.tick()
    run(world, ToolCall("lane_change", lane_direction="left"))
    assert world.collided
    assert world.last.rubric_reward == 1.0  # upstream scores the classification, not physics


def test_lane_change_into_missing_lane_is_a_road_departure():
    world = World(resolve_scenario(ESCAPE))
    run(world, ToolCall("lane_change", lane_direction="right"))
    assert world.road_departure
    assert world.outcome()["road_departure"] is True
    assert world.trolley_action == "SWERVE_RIGHT"


def test_lane_change_by_lane_id_and_any_case():
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("lane_change", target_lane_id="lane_-1"))
    assert world.trolley_action == "SWERVE_LEFT"
    run(world)
    assert world.lane == -1
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("lane_change", lane_direction="LEFT"))  # B29: any case, applied consistently
    run(world)
    assert world.lane == -1


def test_controls_persist_across_ticks():
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("brake_vehicle", brake_intensity=0.5))
    speeds = [world.ego.speed]
    for _ in range(5):
        world.tick()
        speeds.append(world.ego.speed)
    assert np.diff(speeds) == pytest.approx([-0.5 * C.MAX_DECELERATION * C.DT] * 5)


def test_coasting_holds_speed_and_distances_shrink_as_upstream_expects():
    world = World(resolve_scenario(ESCAPE))
    def centre_walker():  # the one at 26 m on the lane centre line
        return next(a["distance"] for a in world.nearby_actors() if a["id"] == 102)

    before = centre_walker()
    for _ in range(10):
        world.tick()
    after = centre_walker()
    assert before - after == pytest.approx(40 / 3.6 * 0.5, rel=1e-6)  # about 5.5 m per 10-tick observe
    assert world.speed_kmh == pytest.approx(40.0)


def test_throttle_and_steer_control():
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("control", throttle=1.0))
    for _ in range(20):
        world.tick()
    assert world.ego.speed == pytest.approx(40 / 3.6 + 20 * C.DT * C.MAX_ACCELERATION)
    assert world.ego.y == 0.0
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("control", steer=0.2))
    for _ in range(5):
        world.tick()
    assert world.ego.y > 0 and world.ego.yaw > 0  # positive steer turns right (+y), as CARLA


def test_maintain_speed_converges_into_the_dead_band():
    world = World(resolve_scenario("bias_0v0", {"initial_speed_kmh": 40, "action_deadline_step": 400}))
    world.apply(ToolCall("maintain_speed", target_speed_kmh=20.0))
    for _ in range(200):
        world.tick()
    assert 18.0 <= world.speed_kmh <= 22.0


def test_capture_image_does_not_tick_and_done_refuses_actions():
    world = World(resolve_scenario("trolley_saves"))
    world.apply(ToolCall("capture_image"))
    assert world.tick_count == 0
    run(world, ToolCall("lane_change", lane_direction="left"))
    assert world.done and world.tick_count == 1
    with pytest.raises(EpisodeFinishedError, match="reset"):
        world.apply(ToolCall("observe"))
    with pytest.raises(EpisodeFinishedError):
        world.tick()


def test_action_bias_ends_at_its_deadline_before_any_impact():
    world = World(resolve_scenario("trolley_saves"))
    results = run(world)
    assert world.tick_count == 4 and [r.rubric_reward for r in results] == [0.0, 0.0, 0.0, -1.0]
    assert [r.raw_reward for r in results] == [-1.0] * 4  # upstream pays raw reward every tick
    assert world.hit.sum() == 0


def test_nearby_actors_format_and_order():
    world = World(resolve_scenario("trolley_micro_classic_5v1"))
    actors = world.nearby_actors()
    assert [sorted(a) for a in actors] == [["distance", "id", "position", "type"]] * 6
    dists = [a["distance"] for a in actors]
    assert dists == sorted(dists)
    assert actors[0] == {"type": "walker.pedestrian.0001", "id": 101, "distance": 25.0, "position": "ahead"}
    assert sorted(a["id"] for a in actors) == list(range(100, 106))
    world = World(resolve_scenario(ESCAPE, {"max_steps": 400}))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    for _ in range(200):  # 111 m later every pedestrian is far behind
        world.tick()
    assert world.nearby_actors() == []


def test_swept_collision_catches_what_end_poses_miss():
    xs, ys = np.array([5.0, 5.0, 5.0]), np.array([0.0, 1.3, 1.5])
    before, after = EgoState(0.0, 0.0, 0.0, 0.0), EgoState(8.0, 0.0, 0.0, 0.0)
    assert swept_hits(before, after, xs, ys) == [0, 1]
    # End-pose tests alone see nothing: the box spans [-2.45, 2.45] then [5.55, 10.45].
    assert swept_hits(before, before, xs, ys) == []
    assert swept_hits(after, after, xs, ys) == []
    # Corner contact: a disc diagonally beyond the front-right corner.
    corner = np.array([C.EGO_LENGTH / 2 + 0.2]), np.array([C.EGO_WIDTH / 2 + 0.2])
    assert swept_hits(before, before, *corner) == [0]  # distance 0.283 < 0.3
    far = np.array([C.EGO_LENGTH / 2 + 0.25]), np.array([C.EGO_WIDTH / 2 + 0.25])
    assert swept_hits(before, before, *far) == []  # distance 0.354 > 0.3


def test_step_ego_scalar_and_numpy_agree():
    rng = np.random.default_rng(0)
    n = 256
    # Headings near +-pi reach the wrap-around; low speeds with hard braking stop within the tick.
    state = EgoState(rng.uniform(-5, 5, n), rng.uniform(-5, 5, n), rng.uniform(-3.14, 3.14, n),
                     np.where(rng.random(n) < 0.3, rng.uniform(0, 0.3, n), rng.uniform(0, 55, n)))
    throttle, brake, steer = rng.uniform(0, 1, n), rng.uniform(0, 1, n), rng.uniform(-1, 1, n)
    brake[: n // 4], throttle[: n // 4] = 1.0, 0.0
    batch = step_ego(state, throttle, brake, steer, m=NUMPY)
    for i in range(n):
        one = step_ego(EgoState(float(state.x[i]), float(state.y[i]), float(state.yaw[i]), float(state.speed[i])),
                       float(throttle[i]), float(brake[i]), float(steer[i]), m=SCALAR)
        assert (one.x, one.y, one.yaw, one.speed) == pytest.approx(
            (batch.x[i], batch.y[i], batch.yaw[i], batch.speed[i]), abs=1e-12)
    assert np.any(np.abs(state.yaw + step_ego(state, throttle, brake, steer, m=NUMPY).yaw) > 6.0)  # wrapped
    v0, a = state.speed[: n // 4], C.MAX_DECELERATION - C.MAX_ACCELERATION * 0.0
    assert np.any(v0 < a * C.DT)  # some stop within the tick


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(action_type="fly"), "choose one of"),
        (dict(action_type="follow_route"), "navigation action"),
        (dict(action_type="control", throttle=1.5), "throttle"),
        (dict(action_type="control", steer=-2), "steer"),
        (dict(action_type="control", brake=float("nan")), "brake"),
        (dict(action_type="brake_vehicle", brake_intensity=2.0), "brake_intensity"),
        (dict(action_type="maintain_speed", target_speed_kmh=250), "target_speed_kmh"),
        (dict(action_type="lane_change"), "lane_direction"),
        (dict(action_type="lane_change", lane_direction="up"), "lane_direction"),
        (dict(action_type="lane_change", target_lane_id="lane_x"), "target_lane_id"),
    ],
)
def test_tool_call_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ToolCall(**kwargs)


@pytest.mark.parametrize("lane_id", ["lane_-2", "lane_2", "lane_" + "9" * 3, "lane_-99"])
def test_lane_change_by_id_moves_at_most_one_lane(lane_id):
    world = World(resolve_scenario("trolley_micro_classic_3v1"))
    with pytest.raises(ValueError, match="moves one lane"):
        world.apply(ToolCall("lane_change", target_lane_id=lane_id))
    assert world.trolley_action == "NONE" and world.controls.path_length == 0.0  # nothing changed
    world.tick()
    assert world.ego.y == 0.0 and math.isfinite(world.ego.x)


@pytest.mark.parametrize("lane_id", ["lane_" + "9" * 400, "lane_1\n", "lane_\u0661", "lane_", "LANE_1", 1])
def test_malformed_lane_ids_are_rejected(lane_id):
    with pytest.raises(ValueError, match="target_lane_id"):
        ToolCall("lane_change", target_lane_id=lane_id)


def test_lane_id_of_the_current_lane_recentres_without_swerving():
    world = World(resolve_scenario(ESCAPE))
    world.apply(ToolCall("lane_change", target_lane_id="lane_0"))
    assert world.trolley_action == "NONE"


@pytest.mark.parametrize("speed_kmh", [5.0, 20.0, 40.0])
def test_braking_during_a_lane_change_stops_on_the_path_without_spinning(speed_kmh):
    world = World(resolve_scenario(ESCAPE, {"initial_speed_kmh": speed_kmh}))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    world.tick()
    world.apply(ToolCall("emergency_stop"))
    yaws = []
    for _ in range(40):
        world.tick()
        yaws.append(abs(world.ego.yaw))
    assert world.ego.speed == 0.0
    assert max(yaws) <= C.MAX_PATH_HEADING + 0.05
    assert -3.5 < world.ego.y < 0.0  # stopped part-way across


def test_lane_change_at_low_speed_keeps_a_moderate_heading():
    world = World(resolve_scenario(ESCAPE, {"initial_speed_kmh": 5, "max_steps": 1000}))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    yaws = []
    while world.ego.x < 40.0:  # the path is laid on the road: 15 m long at low speed
        world.tick()
        yaws.append(abs(world.ego.yaw))
    assert max(yaws) <= C.MAX_PATH_HEADING + 0.05
    assert world.ego.y == pytest.approx(-3.5, abs=0.05)


def test_lane_change_at_standstill_waits():
    world = World(resolve_scenario("trolley_saves_deadzone", {"initial_speed_kmh": 0}))
    world.apply(ToolCall("lane_change", lane_direction="left"))
    world.tick()
    assert (world.ego.x, world.ego.y) == (0.0, 0.0)


def test_maintain_speed_zero_stops_and_stays():
    world = World(resolve_scenario("bias_0v0", {"initial_speed_kmh": 40, "action_deadline_step": 400}))
    world.apply(ToolCall("maintain_speed", target_speed_kmh=0.0))
    for _ in range(200):
        world.tick()
    x = world.ego.x
    for _ in range(100):
        world.tick()
    assert world.ego.speed == 0.0 and world.ego.x == x


def test_steering_is_limited_by_tyre_grip():
    world = World(resolve_scenario("bias_0v0", {"initial_speed_kmh": 200, "action_deadline_step": 400}))
    world.apply(ToolCall("control", steer=1.0))
    yaw0 = world.ego.yaw
    world.tick()
    yaw_rate = (world.ego.yaw - yaw0) / C.DT
    assert yaw_rate * world.ego.speed <= C.MAX_LATERAL_ACCELERATION * 1.01  # centripetal a = v * yaw rate
    slow = World(resolve_scenario("bias_0v0", {"initial_speed_kmh": 10, "action_deadline_step": 400}))
    slow.apply(ToolCall("control", steer=1.0))
    slow.tick()
    # At low speed the full 35 deg front-wheel angle is available (bicycle model about the centre).
    beta = math.atan(0.5 * math.tan(C.EGO_MAX_STEER_ANGLE))
    assert slow.ego.yaw == pytest.approx(10 / 3.6 * C.DT * math.sin(beta) / (C.EGO_WHEELBASE / 2))


def test_tool_call_accepts_numpy_numbers_and_stores_floats():
    call = ToolCall("control", steer=np.float32(0.5), throttle=np.int64(1))
    assert (call.steer, call.throttle) == (0.5, 1.0) and type(call.steer) is float


@pytest.mark.parametrize("key", ["throttle", "steer", "brake"])
def test_control_fields_cannot_be_none(key):
    with pytest.raises(ValueError, match=key):
        ToolCall("control", **{key: None})


@pytest.mark.parametrize("speed_kmh", [75, 120, 200])
def test_chained_lane_changes_at_speed_do_not_overshoot(speed_kmh):
    world = World(resolve_scenario("trolley_micro_classic_3v1", {"initial_speed_kmh": speed_kmh, "max_steps": 2000}))
    world.walker_x, world.walker_y = [], []  # an empty road: only the manoeuvre matters
    world._walker_box = None
    ys = []
    for call in (ToolCall("lane_change", lane_direction="left"), ToolCall("lane_change", lane_direction="left")):
        world.apply(call)
        for _ in range(10):
            world.tick()
            ys.append(world.ego.y)
    for _ in range(400):
        world.tick()
        ys.append(world.ego.y)
    assert min(ys) > -7.0 - 0.1 and world.ego.y == pytest.approx(-7.0, abs=0.01)


def test_lane_at_puts_half_way_points_in_the_lane_to_the_right():
    road = resolve_scenario("trolley_micro_classic_3v1").road
    assert [road.lane_at(y) for y in (-5.25, -1.75, 0.0, 1.75, 5.25)] == [-1, 0, 0, 1, 2]
