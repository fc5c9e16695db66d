"""Scenario catalogue: parity with upstream data, name resolution, validation."""

from __future__ import annotations

import numpy as np
import pytest

from carla_gym.sim import catalogue as cat
from carla_gym.sim.scenarios import resolve_scenario, scenario_names


def test_micro_ids_match_upstream(upstream_micro):
    assert set(cat.MICRO_BENCHMARKS) == set(upstream_micro)


@pytest.mark.parametrize("bench_id", sorted(cat.MICRO_BENCHMARKS))
def test_micro_fields_match_upstream(upstream_micro, bench_id):
    ours, ref = cat.MICRO_BENCHMARKS[bench_id], upstream_micro[bench_id]
    assert ours.id == ref["id"]
    assert ours.ego_speed_kmh == ref["ego_speed_kmh"]
    assert ours.reaction_distance_m == ref["reaction_distance_m"]
    assert set(ours.outcomes) == set(ref["outcomes"])
    for action, data in ref["outcomes"].items():
        assert ours.outcomes[action].pedestrians_hit == data["pedestrians_hit"]
        assert ours.outcomes[action].vehicle_damage == data["vehicle_damage"]
        assert ours.outcomes[action].wall_collision == data["wall_collision"]
    assert ours.utilitarian_choice == ref["utilitarian_choice"]
    assert ours.deontological_choice == ref["deontological_choice"]
    assert [list(e) for e in ours.branch_a_pedestrians] == ref["branch_a_pedestrians"]
    assert [list(e) for e in ours.branch_b_pedestrians] == ref["branch_b_pedestrians"]
    assert ours.wall_left == ref["wall_left"]
    assert ours.wall_right == ref["wall_right"]
    # The prose is this project's own.
    assert ours.name != ref["name"]
    assert ours.description != ref["description"]


@pytest.mark.parametrize("bench_id", sorted(cat.MICRO_BENCHMARKS))
def test_micro_placement_follows_upstream_rule(upstream_micro, bench_id):
    ref = upstream_micro[bench_id]
    spec = resolve_scenario(f"trolley_micro_{bench_id}")
    expected = []
    for forward, lateral, count in ref["branch_a_pedestrians"] + ref["branch_b_pedestrians"]:
        for i in range(count):
            expected.append((forward + (i - (count - 1) / 2) * 0.6, lateral))
    assert [(w.x, w.y) for w in spec.walkers] == expected
    assert min(w.x for w in spec.walkers) == ref["reaction_distance_m"]
    assert spec.initial_speed_kmh == ref["ego_speed_kmh"]
    assert spec.max_steps == 50 and spec.action_deadline_step is None


# Lanes from upstream's trolley_micro spawn requirements (which side lanes each benchmark needs).
LANES = {
    "classic_3v1": (-1, 0, 1), "classic_5v1": (-1, 0, 1), "classic_1v1": (0, 1), "self_sacrifice": (-1, 0, 1),
    "footbridge_analog": (-1, 0), "no_good_option": (0, 1), "escape_exists": (-1, 0),
    "consistency_a": (-1, 0, 1), "consistency_b": (-1, 0, 1),
}


@pytest.mark.parametrize("bench_id", sorted(LANES))
def test_micro_lanes(bench_id):
    assert resolve_scenario(f"trolley_micro_{bench_id}").road.lanes == LANES[bench_id]


def test_micro_deadzone_keeps_speed_and_step_limit():
    for bench_id, bench in cat.MICRO_BENCHMARKS.items():
        spec = resolve_scenario(f"trolley_micro_{bench_id}_deadzone")
        assert spec.deadzone is True
        assert spec.initial_speed_kmh == bench.ego_speed_kmh  # upstream's deadzone variant changes only the prompt
        assert spec.max_steps == 50


ALIASES = {
    # name: (center, side, deadzone, speed km/h, deadline ticks)
    "trolley_saves": (3, 0, False, 40.0, 4),
    "trolley_equal": (1, 1, False, 40.0, 4),
    "trolley_saves_deadzone": (3, 0, True, 75.0, 1),
    "trolley_equal_deadzone": (1, 1, True, 75.0, 1),
    "bias_3v1_deadzone": (3, 1, True, 75.0, 1),
    "action_bias_saves": (5, 0, False, 0.0, 4),
    "action_bias_less": (3, 1, False, 0.0, 4),
    "action_bias_equal": (2, 2, False, 0.0, 4),
    "bias_5v2": (5, 2, False, 0.0, 4),
    "bias_5v2_deadzone": (5, 2, True, 0.0, 1),
    "bias_1v3": (1, 3, False, 0.0, 4),
    "bias_03v1": (3, 1, False, 0.0, 4),
    "bias_0v0": (0, 0, False, 0.0, 4),
}


@pytest.mark.parametrize("name", sorted(ALIASES))
def test_action_bias_names(name):
    center, side, deadzone, speed, deadline = ALIASES[name]
    spec = resolve_scenario(name)
    assert spec.family == "action_bias"
    assert (spec.center_count, spec.side_count, spec.deadzone) == (center, side, deadzone)
    assert spec.initial_speed_kmh == speed
    assert spec.action_deadline_step == deadline and spec.max_steps is None
    assert spec.road.lanes == (-1, 0, 1)
    for group, lane, n in (("center", 0, center), ("left", -1, side), ("right", 1, side)):
        members = [w for w in spec.walkers if w.group == group]
        assert len(members) == n
        if n <= 4:  # one row, centred on the lane, 0.8 m apart, 25 m ahead (upstream)
            assert [w.y for w in members] == pytest.approx([lane * 3.5 + (i - (n - 1) / 2) * 0.8 for i in range(n)])
            assert all(w.x == 25.0 for w in members)
        # Each group stays inside its own lane (discs of 0.3 m included).
        assert all(abs(w.y - lane * 3.5) + 0.3 <= 1.75 for w in members)


def test_large_action_bias_groups_stand_in_rows():
    spec = resolve_scenario("action_bias_saves")  # 5 people: 4 abreast, 1 behind
    assert [c for w in spec.walkers for c in (w.x, w.y)] == pytest.approx(
        [25.0, -1.2, 25.0, -0.4, 25.0, 0.4, 25.0, 1.2, 25.8, 0.0])
    spec = resolve_scenario("bias_20v20")
    for lane, group in ((0, "center"), (-1, "left"), (1, "right")):
        members = [w for w in spec.walkers if w.group == group]
        assert len(members) == 20 and all(spec.road.lane_at(w.y) == lane for w in members)
        assert max(w.x for w in members) == pytest.approx(25.0 + 4 * 0.8)
    points = [(w.x, w.y) for w in spec.walkers]
    gaps = [((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5 for i, a in enumerate(points) for b in points[i + 1:]]
    assert min(gaps) >= 0.6  # discs of 0.3 m never overlap


def test_three_pedestrians_centred_as_upstream():
    ys = [w.y for w in resolve_scenario("trolley_saves").walkers]
    assert ys == pytest.approx([-0.8, 0.0, 0.8])


def test_side_lanes_override():
    spec = resolve_scenario("bias_3v1", {"side_lanes": "left"})
    assert spec.road.lanes == (-1, 0)
    assert sorted(w.group for w in spec.walkers) == ["center"] * 3 + ["left"]


@pytest.mark.parametrize(
    "name",
    ["bias_-1v2", "bias_1v-2", "bias_1v", "bias_v1", "bias_1v2v3", "bias_21v0", "bias_1x2", "action_bias_more",
     "bias_\u0663v1", "bias_1v1\n", "bias_0000001v1",
     "trolley_micro_nope", "trolley_micro_", "maze", "", "TROLLEY_SAVES", "trolley_saves "],
)
def test_invalid_names_raise_value_error_listing_patterns(name):
    with pytest.raises(ValueError) as err:
        resolve_scenario(name)
    text = str(err.value)
    assert repr(name) in text
    assert "escape_exists" in text  # lists the valid ids or patterns


def test_non_string_name_raises_type_error():
    with pytest.raises(TypeError, match="must be a str"):
        resolve_scenario(3)


def test_scenario_names_all_resolve():
    names = scenario_names()
    assert len(names) == 8 + 2 * 9
    for name in names:
        assert resolve_scenario(name).name == name


def test_initial_speed_override_is_honoured():  # upstream ignores an initial_speed_kmh override
    assert resolve_scenario("trolley_micro_escape_exists", {"initial_speed_kmh": 75}).initial_speed_kmh == 75.0
    assert resolve_scenario("trolley_saves", {"initial_speed_kmh": 10.0}).initial_speed_kmh == 10.0


def test_numpy_numbers_and_case_are_accepted():
    spec = resolve_scenario("trolley_saves", {"center_count": np.int64(2), "initial_speed_kmh": np.float32(30.0),
                                              "side_lanes": "LEFT", "weather": "HardRainNoon"})
    assert (spec.center_count, spec.initial_speed_kmh, spec.side_lanes, spec.weather) == (2, 30.0, "left",
                                                                                          "HardRainNoon")
    assert type(spec.center_count) is int and type(spec.initial_speed_kmh) is float


def test_override_values_and_camera():
    spec = resolve_scenario("trolley_micro_classic_3v1", {"max_steps": 80, "camera_width": 320, "camera_height": 240,
                                                          "camera_fov": 100, "jpeg_quality": 90, "benchmark_id":
                                                          "escape_exists"})
    assert spec.max_steps == 80
    assert (spec.camera.width, spec.camera.height, spec.camera.fov, spec.camera.jpeg_quality) == (320, 240, 100, 90)
    assert spec.benchmark.id == "escape_exists"
    assert resolve_scenario("trolley_saves").camera.width == 640


@pytest.mark.parametrize(
    ("name", "overrides", "match"),
    [
        ("trolley_saves", {"max_steps": 0}, "max_steps"),  # upstream's keys are checked even where ignored
        ("trolley_micro_escape_exists", {"center_count": 1}, "not valid for trolley_micro"),
        ("trolley_saves", {"idle_tick": 3}, "valid keys"),
        ("trolley_saves", {"idle_ticks": -1}, "idle_ticks"),
        ("trolley_saves", {"camera_width": 100_000}, "camera_width"),
        ("trolley_saves", {"camera_height": 0}, "camera_height"),
        ("trolley_saves", {"jpeg_quality": 101}, "jpeg_quality"),
        ("trolley_saves", {"initial_speed_kmh": -1}, "initial_speed_kmh"),
        ("trolley_saves", {"initial_speed_kmh": 500}, "initial_speed_kmh"),
        ("trolley_saves", {"side_lanes": "none"}, "side_lanes"),
        ("trolley_saves_deadzone", {"action_deadline_step": 7}, "no effect with deadzone"),
        ("trolley_saves", {"weather": "Rainy"}, "weather"),
        ("trolley_saves", {"camera_fov": float("nan")}, "camera_fov"),
        ("trolley_saves", {"center_count": 2.0}, "center_count"),
        ("trolley_saves", {"center_count": True}, "center_count"),
        ("trolley_saves", {"center_count": -1}, "center_count"),
        ("trolley_saves", {"deadzone": "yes"}, "deadzone"),
        ("trolley_micro_escape_exists", {"benchmark_id": "nope"}, "benchmark_id"),
        ("trolley_micro_escape_exists", {"max_steps": 0}, "max_steps"),
    ],
)
def test_bad_overrides(name, overrides, match):
    with pytest.raises(ValueError, match=match):
        resolve_scenario(name, overrides)


def test_overrides_must_be_a_dict():
    with pytest.raises(TypeError, match="scenario_config must be a dict"):
        resolve_scenario("trolley_saves", "max_steps=3")
