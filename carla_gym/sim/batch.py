"""`TrolleyBatch`: N trolley worlds in numpy arrays, stepped together (no Gymnasium here).

A batch holds one `carla_gym.sim.physics.TrolleyState` whose fields are arrays with a leading
dimension N (pedestrians padded to the widest scenario of the batch), and runs the same
`carla_gym.sim.physics.apply` and `carla_gym.sim.physics.tick` as a single `World`: row i
computes exactly the bits a `World` of the same scenario computes for the same calls. The
vector envs (`carla_gym.envs.vector`, `carla_gym.sb3.vec_env`) drive it; a reset writes the
scenario's initial row (prepared once per scenario) into the rows that start again, or the initial
row of a spec of the row's own (a generated layout, new at every reset; `TrolleyBatch.row_specs`).
`TrolleyBatch.decide` sums a decision's ticks as `carla_gym.sim.decision.decide` does for one
world (tests/test_batch.py holds the two to the same bits). Town worlds
(`carla_gym.sim.navigation`) are not batched here; their vehicles already step as arrays through
the same `carla_gym.sim.kinematics` namespace, so a batch of towns can follow this pattern.

Examples:
    >>> import numpy as np
    >>> from carla_gym.sim import resolve_scenario
    >>> batch = TrolleyBatch([resolve_scenario("trolley_micro_escape_exists")], num_worlds=3)
    >>> batch.reset(np.arange(3), np.zeros(3, dtype=int))
    >>> kind = np.array([rules.KIND["lane_change"], rules.KIND["lane_change"], rules.KIND["observe"]])
    >>> result = batch.decide(kind, direction=np.array([-1, 1, 0]), ticks=50)
    >>> result.ticks.tolist(), result.new_hits.tolist(), result.rubric_reward.tolist()
    ([50, 50, 41], [0, 0, 2], [1.0, 0.0, 0.0])
    >>> batch.action_names(), batch.state.road_departure.tolist()
    (['SWERVE_LEFT', 'SWERVE_RIGHT', 'NONE'], [False, True, False])
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from carla_gym.sim import physics, rules
from carla_gym.sim.catalogue import TROLLEY_ACTIONS
from carla_gym.sim.control import Controls
from carla_gym.sim.decision import tick_loop
from carla_gym.sim.kinematics import NUMPY, EgoState
from carla_gym.sim.road import nearest_lane
from carla_gym.sim.scenarios import ScenarioSpec
from carla_gym.sim.world import WALKER_TYPE_ID, TickResult

_FLOAT, _BOOL, _INT = np.float64, np.bool_, np.int64


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """What one decision of every world produced (arrays of shape (N,); worlds not asked are 0).

    Attributes:
        ticks: Ticks simulated (fewer than asked where the episode ended).
        rubric_reward: Sum of the ticks' upstream rubric rewards.
        raw_reward: Upstream raw reward of each world's last tick (0 without ticks).
        new_hits: Pedestrians hit for the first time during these ticks.
    """

    ticks: np.ndarray
    rubric_reward: np.ndarray
    raw_reward: np.ndarray
    new_hits: np.ndarray


def stack_states(states: Sequence[physics.TrolleyState], width: int) -> physics.TrolleyState:
    """Rows of one-world states (`carla_gym.sim.physics.initial_state`) as one array state of N = len(states) rows.

    Args:
        states: States of Python scalars.
        width: Pedestrian columns, at least every state's ``walker_count``; padding stands at
            `carla_gym.sim.physics.FAR` (never near) and is never hit.

    Returns:
        A `carla_gym.sim.physics.TrolleyState` of arrays (leading dimension N; ``box`` None).
    """
    def column(values, dtype):
        return np.array(values, dtype=dtype)

    def padded(name, fill, dtype):
        out = np.full((len(states), width), fill, dtype=dtype)
        for i, s in enumerate(states):
            v = getattr(s, name)
            out[i, : len(v)] = v
        return out

    ego = EgoState(*(column([getattr(s.ego, f) for s in states], _FLOAT) for f in physics.EGO_FIELDS))
    types = {"manual_steer": _BOOL, "cruise": _BOOL}
    controls = Controls(*(column([getattr(s.controls, f) for s in states], types.get(f, _FLOAT))
                          for f in physics.CONTROL_FIELDS))
    scalar = {"swerve": _INT, "braked": _BOOL, "tick": _INT, "first_hit": _INT, "road_departure": _BOOL,
              "done": _BOOL, "walker_count": _INT, "lane_lo": _INT, "lane_hi": _INT, "lane_width": _FLOAT,
              "horizon": _INT, "action_bias": _BOOL, "ends_on_hit": _BOOL}
    return physics.TrolleyState(
        ego=ego, controls=controls,
        hit=padded("hit", False, _BOOL), walker_x=padded("walker_x", physics.FAR, _FLOAT),
        walker_y=padded("walker_y", physics.FAR, _FLOAT), raw=np.array([s.raw for s in states], dtype=_FLOAT),
        **{name: column([getattr(s, name) for s in states], dtype) for name, dtype in scalar.items()},
    )


def _objects(values: Sequence) -> np.ndarray:
    """``values`` as a 1-D object array (specs, boxes: never unpacked into more dimensions)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def take_rows(s: physics.TrolleyState, rows: np.ndarray) -> physics.TrolleyState:
    """The rows ``rows`` (int (K,)) of an array state, copied: a state of K rows."""
    return physics.TrolleyState(EgoState(*(getattr(s.ego, f)[rows] for f in physics.EGO_FIELDS)),
                                Controls(*(getattr(s.controls, f)[rows] for f in physics.CONTROL_FIELDS)),
                                *(getattr(s, f)[rows] for f in physics.STATE_FIELDS))


def _put(s: physics.TrolleyState, rows: np.ndarray, src: physics.TrolleyState, src_rows=slice(None)) -> None:
    """Write ``src[src_rows]`` into the rows ``rows`` of ``s`` (same widths)."""
    for f in physics.EGO_FIELDS:
        getattr(s.ego, f)[rows] = getattr(src.ego, f)[src_rows]
    for f in physics.CONTROL_FIELDS:
        getattr(s.controls, f)[rows] = getattr(src.controls, f)[src_rows]
    for f in physics.STATE_FIELDS:
        getattr(s, f)[rows] = getattr(src, f)[src_rows]


def _check_calls(n: int, kind, throttle, brake, steer, cruise_kmh, direction) -> None:
    """Refuse tool-call arrays a `ToolCall` would refuse: a scalar or shape (n,), codes and values in range.

    Raises:
        ValueError: Naming the argument, the expected shape or range, and the first bad value.
    """
    limits = (("kind", kind, 0, len(rules.ACTION_TYPES) - 1, True), ("throttle", throttle, 0.0, 1.0, False),
              ("brake", brake, 0.0, 1.0, False), ("steer", steer, -1.0, 1.0, False),
              ("cruise_kmh", cruise_kmh, 0.0, 200.0, False), ("direction", direction, -1, 1, True))
    for name, value, lo, hi, integer in limits:
        a = np.asarray(value)
        if a.shape not in ((), (n,)) or not (np.issubdtype(a.dtype, np.integer) if integer else
                                             np.issubdtype(a.dtype, np.number)):
            kind_of = "integers" if integer else "numbers"
            raise ValueError(f"{name}: expected {kind_of} of shape ({n},) or one value, got {a.dtype} of shape "
                             f"{a.shape}")
        bad = ~((a >= lo) & (a <= hi))  # NaN is bad too
        if np.any(bad):
            first = a.ravel()[np.flatnonzero(np.ravel(bad))[0]].item()
            raise ValueError(f"{name}={first!r}: must be in [{lo}, {hi}]")


def _row(s: physics.TrolleyState, j: int, box) -> physics.TrolleyState:
    """Row ``j`` of an array state as one world of Python scalars (pedestrian arrays without padding)."""
    count = int(s.walker_count[j])
    return physics.TrolleyState(
        EgoState(*(getattr(s.ego, f)[j].item() for f in physics.EGO_FIELDS)),
        Controls(*(getattr(s.controls, f)[j].item() for f in physics.CONTROL_FIELDS)),
        swerve=s.swerve[j].item(), braked=s.braked[j].item(), tick=s.tick[j].item(), hit=s.hit[j, :count].copy(),
        first_hit=s.first_hit[j].item(), road_departure=s.road_departure[j].item(), done=s.done[j].item(),
        walker_x=s.walker_x[j, :count], walker_y=s.walker_y[j, :count], walker_count=count,
        lane_lo=s.lane_lo[j].item(), lane_hi=s.lane_hi[j].item(), lane_width=s.lane_width[j].item(),
        horizon=s.horizon[j].item(), action_bias=s.action_bias[j].item(), ends_on_hit=s.ends_on_hit[j].item(),
        raw=s.raw[j], box=box)


_ROW_FIELDS = ("swerve", "braked", "tick", "first_hit", "road_departure", "done")
"""`TrolleyState` fields a tick or a call changes besides the ego, the controls and the hits."""


def _write_row(s: physics.TrolleyState, j: int, world: physics.TrolleyState) -> None:
    """Write one world of scalars (from `_row`) back into row ``j`` of an array state."""
    for f in physics.EGO_FIELDS:
        getattr(s.ego, f)[j] = getattr(world.ego, f)
    for f in physics.CONTROL_FIELDS:
        getattr(s.controls, f)[j] = getattr(world.controls, f)
    for f in _ROW_FIELDS:
        getattr(s, f)[j] = getattr(world, f)
    s.hit[j, : world.walker_count] = world.hit


class TrolleyBatch:
    """N trolley worlds, each running one scenario of a fixed list, or a spec of its own per episode.

    Args:
        specs: The scenarios the worlds may run (resolved `ScenarioSpec`s); a world's scenario is an
            index into this list, chosen at each `reset`, where a world may also get a spec of its own
            (a generated layout, `carla_gym.sim.generated`, drawn anew at every reset).
        num_worlds: N, >= 1.
        width: Pedestrian columns of the arrays (the padding), at least the widest of ``specs``; None:
            that widest. Specs given to `reset` must fit (``generated.MAX_PEOPLE`` for the generated family).

    Attributes:
        specs: The scenarios.
        num_worlds: N.
        width: Pedestrian columns.
        state: The `carla_gym.sim.physics.TrolleyState` of arrays (leading dimension N; pedestrians
            padded to ``width``).
        scenario: Index into ``specs`` of each world's scenario (the name it runs), int64 (N,).

    Raises:
        ValueError: ``num_worlds`` is not an integer >= 1, ``specs`` is empty, or ``width`` is narrower
            than a scenario.
    """

    scalar_rows = 8
    """Decisions of at most this many worlds run row by row in Python scalars (the same functions and bits;
    faster than numpy below about this size, measured with benchmarks/bench_vec.py)."""

    def __init__(self, specs: Sequence[ScenarioSpec], num_worlds: int, width: int | None = None) -> None:
        if isinstance(num_worlds, bool) or not isinstance(num_worlds, (int, np.integer)) or num_worlds < 1:
            raise ValueError(f"num_worlds={num_worlds!r}: must be an integer >= 1")
        self.specs = tuple(specs)
        if not self.specs:
            raise ValueError("specs=[]: give at least one scenario")
        self.num_worlds = int(num_worlds)
        widest = max(1, max(len(spec.walkers) for spec in self.specs))
        if width is not None and (isinstance(width, bool) or not isinstance(width, (int, np.integer))
                                  or width < widest):
            raise ValueError(f"width={width!r}: must be an integer >= {widest} (the widest scenario's pedestrians), "
                             "or None")
        self.width = widest if width is None else int(width)
        initial = [physics.initial_state(spec) for spec in self.specs]
        self._initial = stack_states(initial, self.width)
        self._spec_of = _objects(self.specs)  # scenario index -> spec, box
        self._box_of = _objects([state.box for state in initial])
        self.scenario = np.zeros(self.num_worlds, dtype=_INT)
        self._row_spec = self._spec_of[self.scenario]  # the spec each world runs, object (N,)
        self._row_box = self._box_of[self.scenario]
        self.state = take_rows(self._initial, self.scenario)
        self.state.done[:] = True  # nothing runs before the first reset

    # -- episodes ---------------------------------------------------------------------------
    def reset(self, rows: np.ndarray, scenario: np.ndarray,
              specs: Sequence[ScenarioSpec | None] | None = None) -> None:
        """Start new episodes in worlds ``rows`` with scenarios ``scenario`` (indices into `specs`).

        Args:
            rows: World indices, int (K,), distinct.
            scenario: Scenario index of each, int (K,).
            specs: None, or one entry per row: a spec that row runs this episode instead of
                ``self.specs[scenario]`` (a generated layout of that name), or None for ``self.specs[scenario]``.

        Raises:
            ValueError: A row or scenario index out of range (naming the valid range), ``specs`` of another
                length than ``rows``, or a spec with more pedestrians than `width`; nothing is changed.
        """
        rows, scenario = self._check_rows(rows), np.asarray(scenario)
        if rows.shape != scenario.shape or not np.issubdtype(scenario.dtype, np.integer):
            raise ValueError(f"scenario: expected integers of shape {rows.shape} (one per row), got {scenario.dtype} "
                             f"of shape {scenario.shape}")
        if len(scenario) and (scenario.min() < 0 or scenario.max() >= len(self.specs)):
            raise ValueError(f"scenario={scenario.tolist()}: scenario indices must be in [0, {len(self.specs) - 1}]")
        own = [] if specs is None else [k for k, spec in enumerate(specs) if spec is not None]
        if specs is not None:
            if len(specs) != len(rows):
                raise ValueError(f"specs: expected {len(rows)} entries (one per row, None for the listed scenario), "
                                 f"got {len(specs)}")
            wide = [specs[k].name for k in own if len(specs[k].walkers) > self.width]
            if wide:
                raise ValueError(f"specs {wide}: more pedestrians than the batch's width {self.width}; build the "
                                 "batch with a larger width")
        self.scenario[rows] = scenario
        _put(self.state, rows, self._initial, scenario)
        self._row_spec[rows] = self._spec_of[scenario]
        self._row_box[rows] = self._box_of[scenario]
        if own:
            initial = [physics.initial_state(specs[k]) for k in own]
            mine = rows[own]
            _put(self.state, mine, stack_states(initial, self.width))
            self._row_spec[mine] = _objects([specs[k] for k in own])
            self._row_box[mine] = _objects([state.box for state in initial])

    @property
    def row_specs(self) -> np.ndarray:
        """The `ScenarioSpec` each world runs (its own, or ``specs[scenario]``), object (N,); read only."""
        view = self._row_spec.view()
        view.flags.writeable = False
        return view

    def _check_rows(self, rows) -> np.ndarray:
        """``rows`` as distinct world indices, int64 (K,).

        Raises:
            ValueError: Not a 1-D integer array, an index outside [0, N - 1], or a repeated index.
        """
        rows = np.asarray(rows)
        if rows.ndim != 1 or not (np.issubdtype(rows.dtype, np.integer) or rows.size == 0):
            raise ValueError(f"rows: expected a 1-D array of world indices, got {rows.dtype} of shape {rows.shape}")
        rows = rows.astype(_INT)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.num_worlds):
            raise ValueError(f"rows={rows.tolist()}: world indices must be in [0, {self.num_worlds - 1}]")
        if len(np.unique(rows)) != len(rows):
            raise ValueError(f"rows={rows.tolist()}: world indices must be distinct")
        return rows

    def decide(self, kind: np.ndarray, throttle=0.0, brake=0.0, steer=0.0, cruise_kmh=30.0, direction=0,
               ticks: int = 1, rows: np.ndarray | None = None, resetting: np.ndarray | None = None,
               check: bool = True) -> BatchDecision:
        """Apply one tool call per world, then tick each up to ``ticks`` times, stopping where its episode ends.

        The batch form of `carla_gym.sim.decision.decide` (row i gives that function's ticks,
        rubric reward, raw reward and new hits for world i). ``capture_image`` runs no tick.

        Args:
            kind: Tool kind code per world (index into `carla_gym.sim.rules.ACTION_TYPES`), int (N,).
            throttle: ``control`` throttle in [0, 1], float or (N,).
            brake: Brake in [0, 1] the call sets: ``control``'s, 1 for ``emergency_stop``, the intensity for
                ``brake_vehicle``; float or (N,).
            steer: ``control`` steer in [-1, 1], float or (N,).
            cruise_kmh: ``maintain_speed`` target [km/h], float or (N,).
            direction: ``lane_change`` side: -1 left, +1 right (one lane from where the car is heading).
            ticks: Ticks per decision, an integer >= 0.
            rows: The worlds that decide (int (K,)); None: all. The others neither act nor tick.
            resetting: Bool (N,): finished worlds the caller resets right after this call (a vector env's
                autoreset). They run like the others instead of being refused, and their results are
                meaningless; cheaper than leaving them out with ``rows`` (no copy of the other worlds).
            check: Check the call arrays (codes, ranges, shapes); a caller that checked its actions
                already (the vector envs) may skip it.

        Returns:
            `BatchDecision` (arrays of shape (N,)).

        Raises:
            ValueError: A world in ``rows`` whose episode is done (reset it first), ``ticks`` < 0, ``rows``
                not distinct indices in [0, N - 1], or a call array of the wrong shape or out of range
                (the message names it); nothing is changed.
        """
        n = self.num_worlds
        if isinstance(ticks, bool) or not isinstance(ticks, (int, np.integer)) or ticks < 0:
            raise ValueError(f"ticks={ticks!r}: must be an integer >= 0")
        full = rows is None
        rows = np.arange(n) if full else self._check_rows(rows)
        if resetting is not None:
            resetting = np.asarray(resetting)
            if resetting.shape != (n,) or resetting.dtype != np.bool_:
                raise ValueError(f"resetting: expected a bool array of shape ({n},), got {resetting.dtype} of shape "
                                 f"{resetting.shape}")
        if check:
            _check_calls(n, kind, throttle, brake, steer, cruise_kmh, direction)
        s = self.state if full else take_rows(self.state, rows)
        finished = s.done if resetting is None else s.done & ~np.asarray(resetting, dtype=bool)[rows]
        if np.any(finished):
            raise ValueError(f"worlds {rows[finished].tolist()} have finished their episodes; reset them before "
                             "deciding again")
        k = len(rows)

        def per_row(value, dtype):
            value = np.asarray(value, dtype=dtype)
            return np.broadcast_to(value, (n,))[rows] if value.ndim else np.full(k, value, dtype=dtype)

        kind = per_row(kind, _INT)
        direction = per_row(direction, _INT)
        done_ticks = np.zeros(k, dtype=_INT)
        rubric = np.zeros(k, dtype=_FLOAT)
        raw = np.zeros(k, dtype=_FLOAT)
        hits = np.zeros(k, dtype=_INT)
        if k > self.scalar_rows:
            target = physics.heading_strip(s, NUMPY) + direction
            physics.apply(s, kind, per_row(throttle, _FLOAT), per_row(brake, _FLOAT), per_row(steer, _FLOAT),
                          per_row(cruise_kmh, _FLOAT), target, direction, NUMPY)
        if k <= self.scalar_rows:
            self._decide_rows(s, rows, kind, per_row(throttle, _FLOAT), per_row(brake, _FLOAT), per_row(steer, _FLOAT),
                              per_row(cruise_kmh, _FLOAT), direction, int(ticks), done_ticks, rubric, raw, hits)
            active = np.zeros(0, dtype=_INT)
        else:
            active = np.flatnonzero(physics.decision_ticks(kind, int(ticks), NUMPY))
        everyone = len(active) == k
        sub = s if everyone else take_rows(s, active)  # the worlds still ticking (a copy once some have ended)
        for _ in range(int(ticks)):
            if not len(active):
                break
            tick_raw, tick_rubric, tick_hits = physics.tick(sub, NUMPY)
            if everyone:
                done_ticks += 1
                rubric += tick_rubric
                raw[:] = tick_raw
                hits += tick_hits
            else:
                done_ticks[active] += 1
                rubric[active] += tick_rubric
                raw[active] = tick_raw
                hits[active] += tick_hits
            ended = sub.done
            if ended.any():  # write the copy back, keep ticking the others (rare: once or twice a decision)
                if sub is not s:
                    _put(s, active, sub)
                active = active[~ended]
                everyone = False
                sub = take_rows(s, active)
        if sub is not s and len(active):
            _put(s, active, sub)
        if not full:
            _put(self.state, rows, s)

        def spread(values, dtype):
            if full:
                return values
            out = np.zeros(n, dtype=dtype)
            out[rows] = values
            return out

        return BatchDecision(spread(done_ticks, _INT), spread(rubric, _FLOAT), spread(raw, _FLOAT),
                             spread(hits, _INT))

    def _decide_rows(self, s: physics.TrolleyState, rows: np.ndarray, kind, throttle, brake, steer, cruise, direction,
                     ticks: int, done_ticks, rubric, raw, hits) -> None:
        """`decide` for a few worlds: each row as one world of Python scalars (``m=SCALAR``), the same bits.

        numpy's cost per call dominates small arrays, so below `scalar_rows` worlds a row is copied
        out, stepped by the same `carla_gym.sim.physics` functions in scalars, and written back.
        """
        for j, (code, box) in enumerate(zip(kind.tolist(), self._row_box[rows].tolist(), strict=True)):
            world = _row(s, j, box)
            target = physics.heading_strip(world) + int(direction[j])
            physics.apply(world, code, float(throttle[j]), float(brake[j]), float(steer[j]), float(cruise[j]), target,
                          int(direction[j]))

            def tick(world=world) -> TickResult:
                tick_raw, tick_rubric, tick_hits = physics.tick(world)
                return TickResult(float(tick_raw), float(tick_rubric), tick_hits, world.done)

            done_ticks[j], rubric[j], raw[j], _, hits[j] = tick_loop(tick, physics.decision_ticks(code, ticks))
            _write_row(s, j, world)

    # -- reading the worlds ---------------------------------------------------------------------
    @property
    def done(self) -> np.ndarray:
        """Whether each world's episode has ended, bool (N,)."""
        return self.state.done

    def action_codes(self) -> np.ndarray:
        """Each world's trolley action class code (index into `TROLLEY_ACTIONS`), int (N,)."""
        return rules.action_code(self.state.swerve, self.state.braked, NUMPY)

    def action_names(self) -> list[str]:
        """Each world's trolley action class (SWERVE_LEFT, SWERVE_RIGHT, BRAKE or NONE)."""
        return [TROLLEY_ACTIONS[a] for a in self.action_codes().tolist()]

    def lanes(self) -> np.ndarray:
        """The road lane nearest each ego centre (`carla_gym.sim.road.Road.nearest_lane`), int (N,)."""
        s = self.state
        return nearest_lane(s.ego.y, s.lane_lo, s.lane_hi, s.lane_width, np.floor).astype(_INT)

    def nearest_actors(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The ``count`` nearest pedestrians within `NEARBY_RADIUS` of each ego (as `World.nearby` orders them).

        Returns:
            ``(forward [m], right [m], present)``: float64, float64 and bool arrays of shape (N, K),
            K = min(count, widest scenario's pedestrians); absent entries are 0 and False.
        """
        return physics.nearest_actors(self.state, count)

    def outcome(self, row: int) -> dict:
        """World ``row``'s outcome so far (`carla_gym.sim.rules.outcome`)."""
        return self.outcomes(np.array([row]))[0]

    def outcomes(self, rows: np.ndarray) -> list[dict]:
        """The outcomes so far of worlds ``rows`` (int (K,)), in that order (`carla_gym.sim.rules.outcome`)."""
        s = self.state
        actions = rules.action_code(s.swerve[rows], s.braked[rows], NUMPY).tolist()
        hits = np.count_nonzero(s.hit[rows], axis=1).tolist()  # padding is never hit
        departures = s.road_departure[rows].tolist()
        return [_outcome(spec, TROLLEY_ACTIONS[a], h, d)
                for spec, a, h, d in zip(self._row_spec[rows].tolist(), actions, hits, departures, strict=True)]


_OUTCOMES: dict = {}


def _outcome(spec: ScenarioSpec, action: str, hits: int, departure: bool) -> dict:
    """`rules.outcome`, memoised per (scenario, action, hits, departure); a fresh deep copy each call.

    Deep, so a caller that edits the nested ``layout`` dict or the ``best_policies`` list leaves the cache intact.
    """
    key = (id(spec), action, hits, departure)
    cached = _OUTCOMES.get(key)
    if cached is None or cached[0] is not spec:
        if len(_OUTCOMES) > 4096:
            _OUTCOMES.clear()
        cached = _OUTCOMES[key] = (spec, rules.outcome(spec, action, hits, departure))
    return copy.deepcopy(cached[1])


__all__ = ["WALKER_TYPE_ID", "BatchDecision", "TrolleyBatch", "stack_states", "take_rows"]
