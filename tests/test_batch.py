"""`TrolleyBatch` against single `World`s: the same calls give bit-identical states, rewards and outcomes."""

from __future__ import annotations

import numpy as np
import pytest

from carla_gym.sim import ToolCall, World, physics, resolve_scenario, rules
from carla_gym.sim.batch import TrolleyBatch
from carla_gym.sim.decision import decide
from carla_gym.sim.kinematics import NUMPY, SCALAR

SCENARIOS = (
    "trolley_micro_escape_exists", "trolley_micro_classic_3v1", "trolley_micro_no_good_option_deadzone",
    "trolley_micro_self_sacrifice", "trolley_saves", "trolley_equal_deadzone", "bias_3v1_deadzone",
    "action_bias_less", "bias_0v0", "bias_2v5",
)


def random_call(rng: np.random.Generator) -> tuple[ToolCall, tuple]:
    """A random trolley tool call and its batch encoding (kind, throttle, brake, steer, cruise_kmh, direction)."""
    kind = rng.choice(["observe", "control", "emergency_stop", "brake_vehicle", "maintain_speed", "lane_change",
                       "capture_image"], p=[0.3, 0.2, 0.1, 0.1, 0.1, 0.15, 0.05])
    if kind == "control":
        throttle, brake, steer = (float(v) for v in rng.uniform([0, 0, -1], [1, 1, 1]))
        return ToolCall("control", throttle=throttle, brake=brake, steer=steer), (kind, throttle, brake, steer, 30, 0)
    if kind == "brake_vehicle":
        intensity = float(rng.uniform())
        return ToolCall("brake_vehicle", brake_intensity=intensity), (kind, 0.0, intensity, 0.0, 30, 0)
    if kind == "emergency_stop":
        return ToolCall(kind), (kind, 0.0, 1.0, 0.0, 30, 0)
    if kind == "maintain_speed":
        target = float(rng.uniform(0, 90))
        return ToolCall(kind, target_speed_kmh=target), (kind, 0.0, 0.0, 0.0, target, 0)
    if kind == "lane_change":
        side = str(rng.choice(["left", "right"]))
        return ToolCall(kind, lane_direction=side), (kind, 0.0, 0.0, 0.0, 30, -1 if side == "left" else 1)
    return ToolCall(kind), (kind, 0.0, 0.0, 0.0, 30, 0)


def assert_row_equals(batch: TrolleyBatch, row: int, world: World) -> None:
    """Every field of batch row ``row`` equals the world's state, bit for bit (padding excluded)."""
    s, w = batch.state, world.state
    for f in physics.EGO_FIELDS:
        assert getattr(s.ego, f)[row] == getattr(w.ego, f), f
    for f in physics.CONTROL_FIELDS:
        assert getattr(s.controls, f)[row] == getattr(w.controls, f), f
    width = w.walker_count
    for f in ("swerve", "braked", "tick", "first_hit", "road_departure", "done"):
        assert getattr(s, f)[row] == getattr(w, f), f
    assert s.hit[row, :width].tolist() == w.hit.tolist() and not s.hit[row, width:].any()


@pytest.mark.parametrize("scalar_rows", [0, 6, 100], ids=["numpy", "mixed", "scalar"])
@pytest.mark.parametrize("ticks", [pytest.param(1, marks=pytest.mark.slow), pytest.param(3, marks=pytest.mark.slow),
                                   10])
def test_random_calls_match_single_worlds(ticks, scalar_rows):
    # numpy: every decision in arrays; scalar: row by row in Python scalars; mixed: the autoreset-sized
    # subsets of 6 or fewer rows go row by row, the others in arrays.
    rng = np.random.default_rng(ticks)
    specs = [resolve_scenario(name) for name in SCENARIOS]
    n = 12
    batch = TrolleyBatch(specs, n)
    batch.scalar_rows = scalar_rows
    scenario = rng.integers(len(specs), size=n)
    batch.reset(np.arange(n), scenario)
    worlds = [World(specs[i]) for i in scenario]
    ends = 0
    for _ in range(150):
        calls = [random_call(rng) for _ in range(n)]
        kind = np.array([rules.KIND[c[1][0]] for c in calls])
        throttle, brake, steer, cruise, direction = (np.array([c[1][k] for c in calls], dtype=float)
                                                     for k in range(1, 6))
        rows = None if scalar_rows != 6 else np.flatnonzero(rng.uniform(size=n) < 0.7)  # some rows sit out
        result = batch.decide(kind, throttle, brake, steer, cruise, direction.astype(int), ticks=ticks, rows=rows)
        for i, (world, (call, _)) in enumerate(zip(worlds, calls, strict=True)):
            if rows is not None and i not in rows:
                assert result.ticks[i] == 0 and result.rubric_reward[i] == 0.0
                assert_row_equals(batch, i, world)
                continue
            single = decide(world, call, ticks)
            assert (result.ticks[i], result.rubric_reward[i], result.raw_reward[i], result.new_hits[i]) == (
                single.ticks, single.rubric_reward, single.raw_reward, single.new_hits)
            assert_row_equals(batch, i, world)
            assert batch.action_names()[i] == world.trolley_action
            if world.done:
                assert batch.outcome(i) == world.outcome()
                ends += 1
                new = int(rng.integers(len(specs)))
                batch.reset(np.array([i]), np.array([new]))
                worlds[i] = World(specs[new])
                assert_row_equals(batch, i, worlds[i])
    assert ends > (30 if rows is not None else 50)  # many episodes end and restart within the run


@pytest.mark.parametrize("scalar_rows", [0, 100])
def test_partial_rows_and_lane_observations(scalar_rows):
    specs = [resolve_scenario("trolley_micro_escape_exists"), resolve_scenario("bias_3v1")]
    batch = TrolleyBatch(specs, 4)
    batch.scalar_rows = scalar_rows
    batch.reset(np.arange(4), np.array([0, 1, 0, 1]))
    lane = rules.KIND["lane_change"]
    result = batch.decide(np.full(4, lane), direction=np.array([-1, 1, -1, -1]), ticks=5, rows=np.array([0, 1]))
    assert result.ticks.tolist() == [5, 1, 0, 0]  # bias_3v1 ends on its swerve; rows 2 and 3 did not act
    assert batch.state.tick.tolist() == [5, 1, 0, 0] and batch.done.tolist() == [False, True, False, False]
    assert batch.action_names() == ["SWERVE_LEFT", "SWERVE_RIGHT", "NONE", "NONE"]
    with pytest.raises(ValueError, match=r"worlds \[1\] have finished"):
        batch.decide(np.zeros(4, dtype=int), ticks=1)
    world = World(specs[0])
    decide(world, ToolCall("lane_change", lane_direction="left"), 5)
    forward, right, present = batch.nearest_actors(8)
    near = world.nearby()
    assert forward[0, : len(near)].tolist() == [n[2] for n in near]
    assert right[0, : len(near)].tolist() == [n[3] for n in near]
    width = max(len(spec.walkers) for spec in specs)  # 5 (bias_3v1): columns past it would all be absent
    assert present.shape == forward.shape == (4, width) and len(near) == 3
    assert present[0].tolist() == [True] * len(near) + [False] * (width - len(near))
    assert forward[0, len(near):].tolist() == [0.0] * (width - len(near))
    assert batch.lanes()[0] == world.lane
    # a vector env's autoreset: the finished world 1 may run along when it is reset right after
    resetting = np.array([False, True, False, False])
    result = batch.decide(np.zeros(4, dtype=int), ticks=2, resetting=resetting)
    assert result.ticks[[0, 2, 3]].tolist() == [2, 2, 2] and batch.state.tick[[0, 2, 3]].tolist() == [7, 2, 2]
    with pytest.raises(ValueError, match=r"worlds \[1\] have finished"):
        batch.decide(np.zeros(4, dtype=int), ticks=1, resetting=np.array([True, False, False, False]))


def test_bad_arguments():
    spec = resolve_scenario("bias_3v1")
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="num_worlds"):
            TrolleyBatch([spec], bad)
    batch = TrolleyBatch([spec], 2)
    with pytest.raises(ValueError, match=r"have finished their episodes"):  # nothing runs before a reset
        batch.decide(np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match=r"world indices must be in \[0, 1\]"):
        batch.reset(np.array([2]), np.array([0]))
    with pytest.raises(ValueError, match=r"scenario indices must be in \[0, 0\]"):
        batch.reset(np.array([0]), np.array([1]))
    with pytest.raises(ValueError, match="must be distinct"):
        batch.reset(np.array([0, 0]), np.array([0, 0]))
    batch.reset(np.arange(2), np.zeros(2, dtype=int))
    before = (batch.state.ego.x.copy(), batch.state.controls.path_y1.copy(), batch.state.tick.copy())
    with pytest.raises(ValueError, match="ticks=-1"):
        batch.decide(np.zeros(2, dtype=int), ticks=-1)
    for kwargs, match in (({"kind": np.array([0, 99])}, r"kind=99: must be in \[0, 6\]"),
                          ({"kind": np.array([-1, 0])}, r"kind=-1"),
                          ({"kind": np.zeros(3, dtype=int)}, r"kind: expected integers of shape \(2,\)"),
                          ({"kind": np.zeros(2), "steer": 0.0}, r"kind: expected integers"),
                          ({"kind": 1, "throttle": np.array([0.5, np.nan])}, r"throttle=nan: must be in \[0.0, 1.0\]"),
                          ({"kind": 5, "direction": 5}, r"direction=5: must be in \[-1, 1\]"),
                          ({"kind": 4, "cruise_kmh": 300.0}, r"cruise_kmh=300.0"),
                          ({"kind": 0, "rows": np.array([-1])}, r"world indices must be in \[0, 1\]"),
                          ({"kind": 0, "rows": np.array([0, 0])}, r"must be distinct"),
                          ({"kind": 0, "resetting": np.zeros(3, dtype=bool)}, r"resetting: expected a bool array")):
        with pytest.raises(ValueError, match=match):
            batch.decide(**kwargs)
    assert all(np.array_equal(a, b) for a, b in zip(before, (batch.state.ego.x, batch.state.controls.path_y1,
                                                             batch.state.tick), strict=True))  # nothing changed


def test_scalar_and_numpy_namespaces_compute_the_same_bits():
    # The premise of the batch: numpy's ufuncs give the same bits on a scalar and inside an array.
    x = np.random.default_rng(0).uniform(-4.0, 4.0, 4096)
    for name in ("sin", "cos", "tan", "atan"):
        batch = getattr(NUMPY, name)(x)
        assert all(getattr(SCALAR, name)(float(v)) == b for v, b in zip(x[:256], batch[:256], strict=True)), name
    assert np.array_equal(NUMPY.wrap(x * 3), [SCALAR.wrap(float(v)) for v in x * 3])


@pytest.mark.parametrize("scalar_rows", [0, 100], ids=["numpy", "scalar"])
def test_rows_with_specs_of_their_own_match_single_worlds(scalar_rows):
    # generated layouts: each reset gives a row a spec of its own (up to 8 pedestrians in the padding), mixed
    # with rows of the listed scenarios; every field, reward and outcome stays the bits of a World of that spec
    from carla_gym.sim.generated import MAX_PEOPLE, draw_layouts, layout_spec

    rng = np.random.default_rng(4)
    listed = [resolve_scenario(name) for name in SCENARIOS[:4]]
    own = [layout_spec(layout, seed=seed)
           for seed, layout in enumerate(draw_layouts("train", range(40)))]
    n = 8
    batch = TrolleyBatch(listed, n, width=MAX_PEOPLE)
    batch.scalar_rows = scalar_rows

    def restart(rows: list[int]) -> list[World]:
        index = rng.integers(len(listed), size=len(rows))
        specs = [own[int(rng.integers(len(own)))] if rng.uniform() < 0.6 else None for _ in rows]
        batch.reset(np.array(rows), index, specs)
        return [World(spec if spec is not None else listed[i]) for spec, i in zip(specs, index, strict=True)]

    worlds = restart(list(range(n)))
    ends = generated = 0
    for _ in range(80):
        calls = [random_call(rng) for _ in range(n)]
        kind = np.array([rules.KIND[c[1][0]] for c in calls])
        throttle, brake, steer, cruise, direction = (np.array([c[1][k] for c in calls], dtype=float)
                                                     for k in range(1, 6))
        result = batch.decide(kind, throttle, brake, steer, cruise, direction.astype(int), ticks=5)
        for i, (world, (call, _)) in enumerate(zip(worlds, calls, strict=True)):
            single = decide(world, call, 5)
            assert (result.ticks[i], result.rubric_reward[i], result.new_hits[i]) == (
                single.ticks, single.rubric_reward, single.new_hits)
            assert_row_equals(batch, i, world)
            assert batch.row_specs[i] is world.spec
            if world.done:
                assert batch.outcome(i) == world.outcome()
                ends += 1
                generated += world.spec.layout is not None
                worlds[i] = restart([i])[0]
                assert_row_equals(batch, i, worlds[i])
    assert ends > 40 and generated > 15


def test_specs_of_their_own_are_checked():
    from carla_gym.sim.generated import Group, Layout, layout_spec

    spec = resolve_scenario("trolley_micro_escape_exists")  # 3 pedestrians
    with pytest.raises(ValueError, match=r"width=2: must be an integer >= 3"):
        TrolleyBatch([spec], 2, width=2)
    batch = TrolleyBatch([spec], 2)
    assert batch.width == 3
    wide = layout_spec(Layout(50, True, True, (Group("left_lane", 4, 20), Group("ego_lane", 1, 30))))
    with pytest.raises(ValueError, match=r"more pedestrians than the batch's width 3"):
        batch.reset(np.arange(2), np.zeros(2, dtype=int), [None, wide])
    with pytest.raises(ValueError, match=r"specs: expected 2 entries"):
        batch.reset(np.arange(2), np.zeros(2, dtype=int), [None])
    assert batch.done.all()  # nothing changed
    with pytest.raises(ValueError, match="read-only"):
        batch.row_specs[0] = wide


def test_outcomes_are_deep_copies():
    # a caller that edits an outcome's nested layout dict or best_policies list leaves later outcomes intact
    from carla_gym.sim.generated import draw_layout, layout_spec

    spec = layout_spec(draw_layout("test", 0), seed=0)
    batch = TrolleyBatch([spec], 1)
    batch.reset(np.arange(1), np.zeros(1, dtype=int))
    while not batch.done.all():
        batch.decide(np.array([rules.KIND["observe"]]), np.zeros(1), np.zeros(1), ticks=10)
    first = batch.outcome(0)
    want = World(spec).outcome()["layout"], list(first["best_policies"])
    first["layout"]["groups"].clear()
    first["best_policies"].append("changed")
    again = batch.outcome(0)
    assert (again["layout"], again["best_policies"]) == want and again["layout"]["groups"]
