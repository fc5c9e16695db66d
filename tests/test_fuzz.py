"""Property tests: any sequence of valid tool calls keeps the world finite, consistent and replayable.

Every episode, played out, ends exactly once, at its last tick, within the scenario's horizon.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from carla_gym.sim import EpisodeFinishedError, ToolCall, World, resolve_scenario, rules, scenario_names

unit = st.floats(0.0, 1.0)
tool_calls = st.one_of(
    st.just(ToolCall("observe")),
    st.just(ToolCall("emergency_stop")),
    st.just(ToolCall("capture_image")),
    st.builds(ToolCall, st.just("brake_vehicle"), brake_intensity=st.none() | unit),
    st.builds(ToolCall, st.just("maintain_speed"), target_speed_kmh=st.none() | st.floats(0.0, 200.0)),
    st.builds(ToolCall, st.just("control"), throttle=unit, steer=st.floats(-1.0, 1.0), brake=unit),
    st.builds(ToolCall, st.just("lane_change"), lane_direction=st.sampled_from(["left", "right", "LEFT", "Right"])),
    st.builds(ToolCall, st.just("lane_change"), target_lane_id=st.sampled_from(["lane_-1", "lane_0", "lane_1"])),
)
scenarios = st.sampled_from(scenario_names() + ["bias_0v0", "bias_1v3", "bias_20v20"])
episode = st.tuples(scenarios, st.floats(0.0, 200.0), st.lists(st.tuples(tool_calls, st.integers(1, 20)),
                                                                  max_size=12))


def play(name: str, speed: float, plan) -> tuple[list, World]:
    """Apply the plan's calls, each followed by its ticks, then tick with the controls held until the end.

    The world alone says when the episode is over: a call or tick after the end raises
    `EpisodeFinishedError`, which ends the plan.
    """
    world = World(resolve_scenario(name, {"initial_speed_kmh": speed}))
    trace = []

    def tick() -> bool:
        try:
            result = world.tick()
        except EpisodeFinishedError:
            assert world.done and trace and trace[-1][-1].done
            return False
        trace.append((world.ego.x, world.ego.y, world.ego.yaw, world.ego.speed, result))
        return True

    for call, ticks in plan:
        try:
            world.apply(call)
        except EpisodeFinishedError:
            assert world.done
            break
        except ValueError as exc:  # a lane id two lanes from where the car is heading
            assert "moves one lane" in str(exc)
            continue
        for _ in range(ticks):
            if not tick():
                break
    for _ in range(world.spec.horizon):  # play out with the controls held: every episode ends by its horizon
        if not tick():
            break
    return trace, world


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(episode)
def test_any_valid_plan_keeps_the_world_finite_and_replayable(case):
    name, speed, plan = case
    trace, world = play(name, speed, plan)
    for x, y, yaw, v, result in trace:
        assert all(math.isfinite(value) for value in (x, y, yaw, v))
        assert 0.0 <= v <= 200.0 / 3.6 + 1e-9 and -math.pi <= yaw <= math.pi
        assert result.raw_reward in (-1.0, 0.0, 1.0) and result.rubric_reward in (-1.0, 0.0, 1.0)
        assert result.rubric_reward == (result.raw_reward if result.done else 0.0)
    spec = world.spec
    # Done exactly once, at the end, and never past the scenario's horizon.
    assert [r.done for *_, r in trace] == [False] * (len(trace) - 1) + [True]
    assert len(trace) == world.tick_count <= spec.horizon
    # It ended for the scenario's reason: the horizon, a collision (micro) or a swerve (action-bias).
    early = world.collided if spec.family == "trolley_micro" else rules.is_swerve(world.trolley_action)
    assert world.tick_count == spec.horizon or early
    assert trace[-1][-1].rubric_reward == rules.raw_reward(spec, world.trolley_action)
    assert play(name, speed, plan)[0] == trace  # deterministic replay
