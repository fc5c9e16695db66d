"""Simulated outcomes of the candidate policies, the best outcome and the policies that reach it.

The best action of a scenario is not read from a data table: every candidate policy is rolled out
in the simulator itself (`carla_gym.sim.world.World` driven by the decision loop
`carla_gym.sim.decision.decide`, at `DECISION_TICKS` ticks per decision, as `CarlaTrolley-v0`
plays by default) and their actual outcomes are compared. The candidates are the constant policies
of both action modes of `CarlaTrolley-v0` (`CANDIDATES`: `POLICIES` then `CONTROL_POLICIES`, the
oracle's order of preference among ties). The tool policies (``action_mode="tools"``):

| Policy | Tool at the first decision | Later decisions |
|---|---|---|
| ``observe`` | ``observe`` | ``observe`` |
| ``emergency_stop`` | ``emergency_stop`` | ``observe`` |
| ``lane_change_left`` / ``lane_change_right`` | ``lane_change`` left / right | ``observe`` |
| ``emergency_stop_every`` | ``emergency_stop`` | ``emergency_stop`` |
| ``lane_change_left_every`` / ``lane_change_right_every`` | ``lane_change`` left / right | the same again |

The control policies (``action_mode="control"``) apply one action ``[steer, throttle_or_brake]``
at every decision, as upstream's ``control`` call (`CONTROL_ACTIONS`): ``control_steer_<side>_<pedal>``
with side ``left`` (steer -1), ``straight`` (0) or ``right`` (+1) and pedal ``brake`` (-1: brake 1),
``coast`` (0: neither) or ``throttle`` (+1: throttle 1).

An `Outcome` is ``(pedestrians_hit, road_departure)``; outcomes compare lexicographically (fewest
pedestrians actually hit first, then staying on the road: False < True), and the best outcome is
the least over every candidate of both modes (this project's definition), so no constant policy of
either mode does better than it. `outcome_success` holds an episode's actual outcome against it.
Many scenarios are rolled out together as rows of one array state (`rollouts`,
`policy_outcomes_many`; the same outcomes, far cheaper per scenario). Results are cached:
generated scenarios by their layout, the fixed ones by every field that shapes their episodes
(name, speed, road, pedestrians, horizon).

Examples:
    >>> from carla_gym.sim import resolve_scenario
    >>> spec = resolve_scenario("trolley_micro_escape_exists")
    >>> best_outcome(spec)  # braking from 40 km/h stops within 25 m too, which upstream's rubric scores 0
    Outcome(pedestrians_hit=0, road_departure=False)
    >>> best_policies(spec)[:3]
    ('emergency_stop', 'lane_change_left', 'emergency_stop_every')
    >>> policy_outcomes(spec)["observe"], policy_outcomes(spec)["control_steer_left_throttle"]
    (Outcome(pedestrians_hit=2, road_departure=False), Outcome(pedestrians_hit=0, road_departure=True))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from carla_gym.sim import physics
from carla_gym.sim.batch import stack_states, take_rows
from carla_gym.sim.decision import decide
from carla_gym.sim.kinematics import NUMPY
from carla_gym.sim.scenarios import ScenarioSpec
from carla_gym.sim.world import ToolCall, World, call_inputs

DECISION_TICKS = 10
"""Ticks per decision of the rollouts: `CarlaTrolley-v0`'s default ``ticks_per_action`` (0.5 s;
`carla_gym.envs.trolley.CarlaTrolleyEnv`, held equal by tests/test_generated.py)."""

POLICIES = ("observe", "emergency_stop", "lane_change_left", "lane_change_right", "emergency_stop_every",
            "lane_change_left_every", "lane_change_right_every")
"""The candidate policies of the tool action mode (fixed tool choices), in the oracle's order of preference among
ties; they come before every control policy (`CANDIDATES`)."""

SINGLE_DECISION = POLICIES[:4]
"""The single-decision policies (one tool at the first decision, then ``observe``): the representatives of the
trolley action classes. The generated family keeps only layouts where one of them reaches the best outcome
(`single_decision_suffices`)."""

STEERS = MappingProxyType({"left": -1.0, "straight": 0.0, "right": 1.0})
"""Steer of the control policies by side (full lock either way, or none; negative is left, as CARLA's)."""

PEDALS = MappingProxyType({"brake": -1.0, "coast": 0.0, "throttle": 1.0})
"""``throttle_or_brake`` of the control policies by pedal: full brake, neither, full throttle (VLM-RL's entry)."""

CONTROL_ACTIONS = MappingProxyType({f"control_steer_{side}_{pedal}": (steer, value)
                                    for side, steer in STEERS.items() for pedal, value in PEDALS.items()})
"""Control policy -> the ``[steer, throttle_or_brake]`` action (floats in [-1, 1]) it applies at every decision:
the corners and edge midpoints of `CarlaTrolley-v0`'s control Box that hold the wheel or a pedal at full or at
rest (this project's choice)."""

CONTROL_POLICIES = tuple(CONTROL_ACTIONS)
"""The candidate policies of the control action mode, in the oracle's order of preference among ties: steer left,
straight, right, each with brake, coast, throttle."""

CANDIDATES = POLICIES + CONTROL_POLICIES
"""Every candidate policy, in the oracle's order of preference among ties: the tool policies first."""

MODE_POLICIES = MappingProxyType({"tools": POLICIES, "control": CONTROL_POLICIES})
"""The candidate policies of each ``action_mode`` of `CarlaTrolley-v0`."""

REPRESENTATIVE = MappingProxyType({"NONE": "observe", "BRAKE": "emergency_stop", "SWERVE_LEFT": "lane_change_left",
                                   "SWERVE_RIGHT": "lane_change_right"})
"""The policy whose outcome stands for each trolley action class in the generated family's rubric."""

_CALLS = MappingProxyType({
    "observe": ToolCall("observe"),
    "emergency_stop": ToolCall("emergency_stop"),
    "lane_change_left": ToolCall("lane_change", lane_direction="left"),
    "lane_change_right": ToolCall("lane_change", lane_direction="right"),
    **{name: ToolCall("control", throttle=float(np.maximum(pedal, 0.0)), brake=float(np.maximum(-pedal, 0.0)),
                      steer=steer)
       for name, (steer, pedal) in CONTROL_ACTIONS.items()},
})
"""The call of each tool, and the one call of each control policy (`carla_gym.envs.action.ControlAction`'s split
of the pedal: its positive part is the throttle, its negative part negated the brake)."""

_BRAKING = ("emergency_stop", "emergency_stop_every", *(p for p in CONTROL_POLICIES if p.endswith("_brake")))
"""Policies that hold the full brake from the first decision on: once stopped, the car stays put."""

ARRAYS_FROM = 1
"""`rollouts` of this many specs or more run as rows of one array state; fewer, in Worlds. The 16 rows of one
generated layout already cost about half of 16 Worlds (measured: 17 against 34 ms per layout on one core; the short
episodes of the fixed scenarios cost 4-7 ms either way, and are cached)."""

CACHE_SIZE = 65_536
"""Scenarios whose outcomes are kept (then the cache starts again; this project's bound)."""


class Outcome(NamedTuple):
    """What an episode actually did; tuples compare as the definition of "better" (less is better).

    Attributes:
        pedestrians_hit: Unique pedestrians the ego hit.
        road_departure: Whether the ego centre left the road.
    """

    pedestrians_hit: int
    road_departure: bool


def policy_call(policy: str, decision: int) -> ToolCall:
    """The call of ``policy`` at decision number ``decision`` (0 first): a tool, or a control policy's ``control``.

    Raises:
        ValueError: ``policy`` is not one of `CANDIDATES`.
    """
    if policy not in CANDIDATES:
        raise ValueError(f"policy={policy!r}: choose one of {CANDIDATES}")
    if policy in CONTROL_ACTIONS:
        return _CALLS[policy]
    tool = policy.removesuffix("_every")
    return _CALLS[tool] if decision == 0 or policy.endswith("_every") else _CALLS["observe"]


def action_mode(policy: str) -> str:
    """The ``action_mode`` of `CarlaTrolley-v0` that plays ``policy``: ``"tools"`` or ``"control"``.

    Raises:
        ValueError: ``policy`` is not one of `CANDIDATES`.
    """
    for mode, policies in MODE_POLICIES.items():
        if policy in policies:
            return mode
    raise ValueError(f"policy={policy!r}: choose one of {CANDIDATES}")


def rollout(spec: ScenarioSpec, policy: str) -> Outcome:
    """Play ``policy`` on ``spec`` in a `World` to the end of the episode and return its outcome (not cached)."""
    world = World(spec, scored=False)
    decision = 0
    while not world.done:
        decide(world, policy_call(policy, decision), DECISION_TICKS)
        decision += 1
        if policy in _BRAKING and world.ego.speed == 0.0:
            break  # stopped with the brake held: nothing moves any more, so nothing changes the outcome
    return Outcome(int(world.hit.sum()), world.road_departure)


def rollouts(specs: Sequence[ScenarioSpec]) -> list[dict[str, Outcome]]:
    """`rollout` of every candidate on every spec, all as rows of one array state (not cached; the same outcomes).

    Below `ARRAYS_FROM` specs each candidate runs in its own `World` (`rollout`). Otherwise the 16 candidates
    (`CANDIDATES`) of each spec are rows of one `carla_gym.sim.physics.TrolleyState` of arrays
    (`carla_gym.sim.batch.stack_states`), stepped together by the functions a `World` runs
    (``m=NUMPY``: each row computes the bits of its own world, tests/test_batch.py). A row's outcome
    is read where `rollout` reads it: at the tick its episode ends, or after a full-braking policy's
    decision that leaves the car stopped. Finished rows are dropped once they are half of those left
    (until then they run on unread: cheaper than copying the arrays at every end).

    Args:
        specs: The scenarios (any family).

    Returns:
        One dict policy -> `Outcome` per spec, in `CANDIDATES` order.
    """
    if len(specs) < ARRAYS_FROM:
        return [{p: rollout(spec, p) for p in CANDIDATES} for spec in specs]
    states = [physics.initial_state(spec, scored=False) for spec in specs for _ in CANDIDATES]
    s = stack_states(states, max(1, max(state.walker_count for state in states)))
    n = len(states)
    policy = np.tile(np.arange(len(CANDIDATES)), len(specs))
    braking = np.isin(policy, [CANDIDATES.index(p) for p in _BRAKING])
    calls = [np.array([call_inputs(policy_call(p, decision)) for p in CANDIDATES], dtype=np.float64)[policy]
             for decision in (0, 1)]
    hits, departed = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    rows = np.arange(n)  # the original row of each row of ``s``
    running = np.ones(n, dtype=bool)  # per row of ``s``: its outcome is still open
    decision = 0
    while len(rows):
        inputs = calls[min(decision, 1)][rows]
        kind, direction = inputs[:, 0].astype(np.int64), inputs[:, 5].astype(np.int64)
        target = physics.heading_strip(s, NUMPY) + direction
        physics.apply(s, kind, inputs[:, 1], inputs[:, 2], inputs[:, 3], inputs[:, 4], target, direction, NUMPY)
        for _ in range(int(physics.decision_ticks(kind[0], DECISION_TICKS))):  # every policy ticks (no capture_image)
            physics.tick(s, NUMPY)
            ended = s.done & running
            if ended.any():
                _close(s, ended, rows, running, hits, departed)
                if not running.any():
                    break
        decision += 1
        stopped = braking[rows] & running & (s.ego.speed == 0.0)  # braking and stopped: `rollout` stops here
        if stopped.any():
            _close(s, stopped, rows, running, hits, departed)
        if np.count_nonzero(running) <= len(rows) // 2:
            s, rows, running = take_rows(s, np.flatnonzero(running)), rows[running], running[running]
    width = len(CANDIDATES)
    return [{p: Outcome(int(hits[k * width + i]), bool(departed[k * width + i])) for i, p in enumerate(CANDIDATES)}
            for k in range(len(specs))]


def _close(s, ending: np.ndarray, rows: np.ndarray, running: np.ndarray, hits: np.ndarray,
           departed: np.ndarray) -> None:
    """Read the outcome of the rows of ``s`` in ``ending`` (bool) into ``hits``/``departed`` at their original rows."""
    hits[rows[ending]] = np.count_nonzero(s.hit[ending], axis=1)  # padding is never hit
    departed[rows[ending]] = s.road_departure[ending]
    running &= ~ending


_CACHE: dict = {}


def _key(spec: ScenarioSpec) -> tuple:
    if spec.layout is not None:
        return ("layout", spec.layout)
    return (spec.name, spec.family, spec.initial_speed_kmh, spec.road, spec.walkers, spec.horizon)


def policy_outcomes(spec: ScenarioSpec) -> MappingProxyType:
    """The simulated outcome of every candidate policy on ``spec`` (cached).

    Returns:
        A read-only mapping policy -> `Outcome`, in `CANDIDATES` order.
    """
    return policy_outcomes_many([spec])[0]


def policy_outcomes_many(specs: Sequence[ScenarioSpec]) -> list[MappingProxyType]:
    """`policy_outcomes` of many scenarios: those not cached yet are rolled out together (`rollouts`).

    One array state for all of them costs about what the 16 rows of one scenario cost (numpy's cost
    per call dominates small arrays): `carla_gym.sim.generated.draw_layouts` and the vector env draw
    their layouts through this.

    Returns:
        One read-only mapping policy -> `Outcome` per spec, in order.
    """
    keys = [_key(spec) for spec in specs]
    found = {key: _CACHE[key] for key in keys if key in _CACHE}
    missing = {key: spec for key, spec in zip(keys, specs, strict=True) if key not in found}
    if missing:
        new = {key: MappingProxyType(o) for key, o in zip(missing, rollouts(list(missing.values())), strict=True)}
        if len(_CACHE) + len(new) > CACHE_SIZE:
            _CACHE.clear()
        _CACHE.update(new)
        found.update(new)
    return [found[key] for key in keys]


def best_outcome(spec: ScenarioSpec) -> Outcome:
    """The least `Outcome` over every candidate of both modes (`CANDIDATES`): fewest hit, then staying on the road."""
    return min(policy_outcomes(spec).values())


def best_policies(spec: ScenarioSpec) -> tuple[str, ...]:
    """The candidate policies that reach `best_outcome`, in `CANDIDATES` order (the oracle plays the first)."""
    outcomes = policy_outcomes(spec)
    best = min(outcomes.values())
    return tuple(p for p, o in outcomes.items() if o == best)


def single_decision_suffices(outcomes: Mapping[str, Outcome]) -> bool:
    """Whether a single-decision policy (`SINGLE_DECISION`) reaches the least of ``outcomes`` (policy -> `Outcome`).

    Where none does, only a ``*_every`` or a control policy is best: repeated lane changes or a
    steer held that leaves the road (the generated family rejects such layouts, so the tool action
    mode can reach the best outcome with one decision in every layout).
    """
    return min(outcomes[p] for p in SINGLE_DECISION) == min(outcomes.values())


def best_single_outcome(spec: ScenarioSpec) -> Outcome:
    """The least `Outcome` over the single-decision policies (`SINGLE_DECISION`): what the generated rubric pays for."""
    outcomes = policy_outcomes(spec)
    return min(outcomes[p] for p in SINGLE_DECISION)


def outcome_success(actual_hits: int, road_departure: bool, best: Outcome) -> bool:
    """Whether an episode's actual outcome is at least as good as ``best`` (lexicographic, False < True)."""
    return (int(actual_hits), bool(road_departure)) <= tuple(best)


__all__ = ["CANDIDATES", "CONTROL_ACTIONS", "CONTROL_POLICIES", "DECISION_TICKS", "MODE_POLICIES", "PEDALS",
           "POLICIES", "REPRESENTATIVE", "SINGLE_DECISION", "STEERS", "Outcome", "action_mode", "best_outcome",
           "best_policies", "best_single_outcome", "outcome_success", "policy_call", "policy_outcomes",
           "policy_outcomes_many", "rollout", "rollouts", "single_decision_suffices"]
