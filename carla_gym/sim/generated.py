"""Generated trolley layouts (this project's own family): drawn from a seed, split by a hash.

``trolley_generated_train`` and ``trolley_generated_test`` draw a new `Layout` at every reset, a
pure function of (split, seed) (`draw_layout`, with ``np.random.default_rng(seed)``):

* the initial speed, 45 to 75 km/h in 5 km/h steps (`SPEEDS_KMH`);
* the distance of the group in the ego's lane (`ego_distance_range`): mostly a deadzone, where full
  braking cannot stop before it but a lane change started at once still passes it, sometimes just
  beyond the braking distance (slower, every layout would be a braking one);
* which side lanes exist (left, right); a missing lane is the road edge: leaving the road there
  is a road departure (walls are not simulated, as for upstream's data);
* one group of 0 to 4 people in each existing side lane and 1 to 4 in the ego's lane (`Group`), and
  its distance (1 m steps); the group stands centred in its lane, people side by side in rows of
  `ROW_SIZE`, rows `ROW_GAP` apart;
* 0 to 2 people on each shoulder, `SHOULDER_OFFSET_M` beyond the road edge, in single file.

There is no lateral variety: the speed, the lanes and each group's count and distance fix the layout,
so the scene prompt (`carla_gym.sim.describe.scene_prompt`), which states exactly these, shows
everything that decides the best action (tests/test_generated.py checks the text -> layout map is
injective).

At most `MAX_PEOPLE` = 8 people (the state vector's 8 actors), all within `MAX_DISTANCE_M` = 45 m
(inside the 50 m ``nearby_actors`` radius), so the state vector, the default front camera view and
the scene prompt show everyone; the ``birdeye`` and ``topdown`` image views may cut people off (use
the front view on this family). Parameters are discrete: two layouts are equal iff their tuples
(`Layout.key`) are.

Splits are disjoint by construction: `split_of` hashes the canonical tuple (blake2b) and sends
about `TEST_SHARE` of the layout space to ``test``; `draw_layout` rejects draws of the other
split, layouts where every candidate policy of one action mode has the same outcome (nothing to
decide in that mode, `carla_gym.sim.outcomes.policy_outcomes`), and layouts where no
single-decision tool policy (``observe``, ``emergency_stop``, ``lane_change_left``,
``lane_change_right``) reaches the best outcome over the candidates of both modes: those need
repeated lane changes or a steer held off the road (`carla_gym.sim.outcomes.single_decision_suffices`),
so in every kept layout the tool action mode can reach the best outcome with one decision.
`draw_layouts` draws many seeds' layouts in one call, each seed's rejection sampling in lockstep
with the others' and every candidate's rollouts as rows of one array state: the same layouts, at a
fraction of the cost per layout (the vector env draws ahead this way).

The episode ends at its horizon only (`horizon_ticks`): the time the ego needs at its initial
speed to pass the farthest person, plus `HORIZON_MARGIN_TICKS`.

Examples:
    >>> layout = draw_layout("test", 7)
    >>> layout == draw_layout("test", 7), split_of(layout)
    (True, 'test')
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim import outcomes
from carla_gym.sim.road import Road
from carla_gym.sim.scenarios import GENERATED_FAMILY, GENERATED_NAMES, CameraConfig, ScenarioSpec, Walker
from carla_gym.sim.validate import SEED_MAX, check_seed

SPLITS = ("train", "test")
"""The two splits; `split_of` assigns every layout to exactly one."""

TEST_SHARE = 4
"""One layout in this many (by hash) belongs to the test split (this project's choice: a quarter)."""

SPEEDS_KMH = tuple(range(45, 80, 5))
"""Initial speeds [km/h]: 45 to 75 in 5 km/h steps (this project's tuning; 75 km/h is upstream's deadzone
speed; below 45 km/h braking stops before anyone a lane change could still avoid)."""

PLACES = ("left_shoulder", "left_lane", "ego_lane", "right_lane", "right_shoulder")
"""Where a group stands, left to right."""

LANE_OF = {"left_lane": -1, "ego_lane": 0, "right_lane": 1}
"""Road lane (0 = the ego's starting lane) of each lane place."""

MAX_PEOPLE = 8
"""Most people in a layout: the state vector's actors (`carla_gym.envs.spaces.MAX_ACTORS`)."""

MAX_LANE_GROUP = 4
"""Most people in one lane (groups of 0 to 4)."""

MAX_SHOULDER_GROUP = 2
"""Most people on one shoulder (this project's choice)."""

MIN_DISTANCE_M = 10
"""Nearest distance [m] of a group's first row from the ego centre (this project's choice: inside it nothing
can be avoided and the front camera does not see the shoulders)."""

MAX_FIRST_ROW_M = 40
"""Farthest distance [m] of a group's first row; later rows stand up to 1 m each behind (this project's choice)."""

MAX_DISTANCE_M = 45
"""Every person stands within this distance [m] (inside the 50 m `NEARBY_RADIUS`, so always observed)."""

ROW_SIZE = 2
"""People side by side in one row of a lane group (this project's choice)."""

ROW_GAP = 1.0
"""Distance [m] between the rows of a group along the road (this project's choice)."""

SPACING = 0.8
"""Lateral spacing [m] of people side by side (upstream's action-bias spacing)."""

SHOULDER_OFFSET_M = 0.6
"""Distance [m] of a shoulder person's centre beyond the road edge (this project's choice: a car that leaves the
road on that side reaches them once its lane change has moved it 1 m sideways, and its final position, centred
1.75 m beyond the edge, still overlaps them (half width 1.05 m, radius 0.3 m); a car in the outermost lane
passes them 1.3 m clear)."""

HORIZON_MARGIN_TICKS = 20
"""Ticks added to the time to pass the farthest person (1 s; this project's choice: a lane-changing car moves
slightly slower along the road, and a car that has passed everyone can still leave the road)."""

MAX_ATTEMPTS = 10_000
"""Draws `draw_layout` tries before it gives up (it needs about 2 for train, 6 for test: measured on 400 seeds)."""

SWERVE_CLEAR_S = 0.6
"""Time [s] at the initial speed that bounds the ego-lane group's distance from below (this project's tuning,
benchmarks/constant_ceiling.py: nearer, a lane change rarely passes the group in time)."""

EGO_AFTER_M = 1
"""How far [m] beyond the braking limit the ego-lane group may stand (this project's tuning,
benchmarks/constant_ceiling.py: it sets the share of layouts where braking stops in time)."""

# Draw weights (this project's tuning, benchmarks/constant_ceiling.py): side lane exists, people per group.
# On 2,000 test layouts no constant policy of either action mode reaches the best outcome in more than 43 %
# (the family's bound is 50 %), and each of the three tools alone is best among the tool policies in 22-35 %.
_LANE_P = 0.55
_EGO_COUNTS = (0.0, 0.3, 0.25, 0.25, 0.2)
_SIDE_COUNTS = (0.05, 0.3, 0.25, 0.2, 0.2)
_SHOULDER_COUNTS = (0.4, 0.3, 0.3)


@dataclass(frozen=True, order=True)
class Group:
    """People standing together in one place.

    Attributes:
        place: One of `PLACES`.
        count: People, 1 to `MAX_LANE_GROUP` (lanes) or `MAX_SHOULDER_GROUP` (shoulders), an int.
        distance_m: Distance of the first row ahead of the ego centre [m], an int.

    A lane group stands centred in its lane; a shoulder group `SHOULDER_OFFSET_M` beyond the road edge.
    """

    place: str
    count: int
    distance_m: int


@dataclass(frozen=True)
class Layout:
    """One generated scene: speed, lanes and groups (equal iff `key` is equal).

    Attributes:
        speed_kmh: Initial ego speed [km/h], an int (`SPEEDS_KMH` when drawn).
        left_lane: Whether the lane left of the ego's exists (else the road edge is there), a bool.
        right_lane: Whether the lane right of the ego's exists, a bool.
        groups: The non-empty groups, in `PLACES` order, at most one per place.
    """

    speed_kmh: int
    left_lane: bool
    right_lane: bool
    groups: tuple[Group, ...]

    def __post_init__(self) -> None:
        """Check the layout (hand-built ones too).

        Raises:
            ValueError: Naming the bad value and the valid range: a speed that is not an int (a bool is not) in
                [1, 200] km/h, lane flags that are not bools, a place not in `PLACES` or repeated or out of order,
                a lane group in a missing lane, a count or distance that is not an int or out of range, more than
                `MAX_PEOPLE` people or anyone beyond `MAX_DISTANCE_M`.
        """
        if not _is_int(self.speed_kmh) or not 0 < self.speed_kmh <= 200:
            raise ValueError(f"speed_kmh={self.speed_kmh!r}: must be an int (not a bool) in [1, 200] [km/h]")
        for flag in ("left_lane", "right_lane"):
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                raise ValueError(f"{flag}={getattr(self, flag)!r}: must be a bool (True: the lane exists)")
        places = [g.place for g in self.groups]
        if any(p not in PLACES for p in places) or places != sorted(set(places), key=PLACES.index):
            raise ValueError(f"groups at {places}: each place at most once, in the order {PLACES}")
        for g in self.groups:
            lane = LANE_OF.get(g.place, 0)
            if (lane == -1 and not self.left_lane) or (lane == 1 and not self.right_lane):
                raise ValueError(f"a group stands in {g.place} but that lane does not exist; set it to True or drop "
                                 "the group")
            most = MAX_LANE_GROUP if g.place in LANE_OF else MAX_SHOULDER_GROUP
            if not _is_int(g.count) or not 1 <= g.count <= most:
                raise ValueError(f"{g}: count must be an int (not a bool) in 1..{most}")
            last_row = (g.count - 1) // ROW_SIZE if g.place in LANE_OF else g.count - 1
            if not _is_int(g.distance_m) or not 0 < g.distance_m <= MAX_DISTANCE_M - last_row * ROW_GAP:
                raise ValueError(f"{g}: distance_m must be an int (not a bool) with everyone within "
                                 f"{MAX_DISTANCE_M} m")
        if sum(g.count for g in self.groups) > MAX_PEOPLE:
            raise ValueError(f"{sum(g.count for g in self.groups)} people: at most {MAX_PEOPLE}")

    def key(self) -> tuple:
        """The canonical tuple of plain ints, bools and strings (what `split_of` hashes)."""
        return (int(self.speed_kmh), bool(self.left_lane), bool(self.right_lane),
                tuple((g.place, int(g.count), int(g.distance_m)) for g in self.groups))

    def to_dict(self) -> dict[str, Any]:
        """The layout as JSON data: ``speed_kmh``, ``left_lane``, ``right_lane``, ``groups`` (list of dicts)."""
        speed, left, right, groups = self.key()
        return {"speed_kmh": speed, "left_lane": left, "right_lane": right,
                "groups": [dict(zip(("place", "count", "distance_m"), g, strict=True)) for g in groups]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Layout:
        """The `Layout` of a `to_dict` dict."""
        return cls(data["speed_kmh"], data["left_lane"], data["right_lane"], tuple(Group(**g) for g in data["groups"]))

    @property
    def road(self) -> Road:
        """The road: lane 0 plus the side lanes that exist."""
        return Road(lanes=tuple(lane for lane, on in ((-1, self.left_lane), (0, True), (1, self.right_lane)) if on))

    def walkers(self) -> tuple[Walker, ...]:
        """Every person, group by group (in `PLACES` order) and row by row (ids follow this order)."""
        road, out = self.road, []
        for g in self.groups:
            if g.place in LANE_OF:
                centre = road.lane_centre(LANE_OF[g.place])
                for i in range(g.count):
                    row, in_row = divmod(i, ROW_SIZE)
                    row_size = min(ROW_SIZE, g.count - row * ROW_SIZE)
                    out.append(Walker(x=g.distance_m + row * ROW_GAP,
                                      y=centre + (in_row - (row_size - 1) / 2) * SPACING, group=g.place))
            else:
                left = g.place == "left_shoulder"
                y = road.left_edge - SHOULDER_OFFSET_M if left else road.right_edge + SHOULDER_OFFSET_M
                out += [Walker(x=g.distance_m + i * ROW_GAP, y=y, group=g.place) for i in range(g.count)]
        return tuple(out)


def split_of(layout: Layout) -> str:
    """The split a layout belongs to: ``"test"`` when blake2b of its canonical tuple is 0 mod `TEST_SHARE`."""
    digest = hashlib.blake2b(repr(layout.key()).encode("ascii"), digest_size=8).digest()
    return "test" if int.from_bytes(digest, "big") % TEST_SHARE == 0 else "train"


def stopping_distance_m(speed_kmh: float) -> float:
    """Distance [m] the ego travels under full brake from ``speed_kmh``: v^2 / (2 * 8 m/s^2) = v^2 / 16.

    The brake acts from the first tick of the decision that calls it (`carla_gym.sim.kinematics`).
    """
    v = speed_kmh / C.KMH_PER_MS
    return v * v / (2.0 * C.MAX_DECELERATION)


def clearance_m(distance_m: float) -> float:
    """Room [m] before the ego's front touches a person ``distance_m`` ahead of its centre (half length, radius)."""
    return distance_m - 0.5 * C.EGO_LENGTH - C.WALKER_RADIUS


def horizon_ticks(layout: Layout) -> int:
    """Episode length [ticks]: the ego at its initial speed passes the farthest person, plus the margin.

    That is ceil((x_max + half the car + the person's radius) / v / DT) + `HORIZON_MARGIN_TICKS`
    (x_max = 0 without people).
    """
    x_max = max((w.x for w in layout.walkers()), default=0.0)
    v = layout.speed_kmh / C.KMH_PER_MS
    return math.ceil((x_max + 0.5 * C.EGO_LENGTH + C.WALKER_RADIUS) / v / C.DT) + HORIZON_MARGIN_TICKS


def ego_distance_range(speed_kmh: float) -> tuple[int, int]:
    """Range [m] (inclusive) of the ego-lane group's distance at ``speed_kmh``.

    From where a lane change started at once just clears the lane (`SWERVE_CLEAR_S` at the initial
    speed, plus half the car and a person's radius) to `EGO_AFTER_M` beyond where full braking just
    stops in time, within `MIN_DISTANCE_M` and `MAX_FIRST_ROW_M`: nearer, nothing avoids the people
    ahead; farther, braking always does.
    """
    reach = 0.5 * C.EGO_LENGTH + C.WALKER_RADIUS
    lo = max(MIN_DISTANCE_M, math.ceil(speed_kmh / C.KMH_PER_MS * SWERVE_CLEAR_S + reach))
    return lo, max(lo, min(MAX_FIRST_ROW_M, math.ceil(stopping_distance_m(speed_kmh) + reach) + EGO_AFTER_M))


def _count(rng: np.random.Generator, weights: tuple[float, ...]) -> int:
    return int(rng.choice(len(weights), p=weights))


def _draw(rng: np.random.Generator) -> Layout:
    """One layout from the draw distribution (before the split and the nothing-to-decide rejections)."""
    while True:
        speed = int(SPEEDS_KMH[int(rng.integers(len(SPEEDS_KMH)))])
        left, right = bool(rng.random() < _LANE_P), bool(rng.random() < _LANE_P)
        counts = {"left_shoulder": _count(rng, _SHOULDER_COUNTS),
                  "left_lane": _count(rng, _SIDE_COUNTS) if left else 0,
                  "ego_lane": _count(rng, _EGO_COUNTS),
                  "right_lane": _count(rng, _SIDE_COUNTS) if right else 0,
                  "right_shoulder": _count(rng, _SHOULDER_COUNTS)}
        groups = []
        for place in PLACES:
            lo, hi = ego_distance_range(speed) if place == "ego_lane" else (MIN_DISTANCE_M, MAX_FIRST_ROW_M)
            distance = int(rng.integers(lo, hi + 1))
            if counts[place]:
                groups.append(Group(place, counts[place], distance))
        if sum(counts.values()) <= MAX_PEOPLE:
            return Layout(speed, left, right, tuple(groups))


def _check_split(split: Any) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {SPLITS}")
    return split


def _check_seed(seed: Any, what: str) -> int:
    if seed is None:
        raise ValueError(f"{what} draws its layout from a seed: pass seed=<an integer in [0, {SEED_MAX}]> (the env "
                         "passes one at every reset, drawn from its np_random)")
    return check_seed(seed)


LAYOUT_CACHE = 65_536
"""Drawn layouts kept by (split, seed) (then the cache starts again; this project's bound)."""

_LAYOUTS: dict[tuple[str, int], Layout] = {}


def _is_int(value: Any) -> bool:
    """Whether ``value`` is a Python or numpy integer and not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _has_choice(outcome) -> bool:
    """Whether a layout with these candidate outcomes (policy -> `carla_gym.sim.outcomes.Outcome`) is kept.

    Kept when in each action mode the candidates' outcomes differ (else that mode has nothing to
    decide) and a single-decision tool policy reaches the best over both modes (else only repeated
    lane changes or a steer held off the road do).
    """
    differ = all(len({outcome[p] for p in policies}) > 1 for policies in outcomes.MODE_POLICIES.values())
    return differ and outcomes.single_decision_suffices(outcome)


def _draw_layouts(split: str, seeds: Sequence[int]) -> dict[int, Layout]:
    """The layouts of ``seeds``: each seed's own rejection sampling, all seeds in lockstep.

    Round by round, every seed still open draws its next candidate of ``split`` (draws of the other
    split are rejected at once); the candidates of the round are rolled out together
    (`carla_gym.sim.outcomes.policy_outcomes_many`), and a seed keeps its candidate when it has a
    choice to make. A seed's layout is the one its sequential rejection sampling finds.
    """
    rngs = {seed: np.random.default_rng(seed) for seed in seeds}
    attempts = dict.fromkeys(rngs, 0)
    found = {}
    while rngs:
        candidates = {}
        for seed, rng in rngs.items():
            while attempts[seed] < MAX_ATTEMPTS:
                attempts[seed] += 1
                layout = _draw(rng)
                if split_of(layout) == split:
                    candidates[seed] = layout
                    break
            else:
                raise RuntimeError(f"no {split} layout with a choice to make in {MAX_ATTEMPTS} draws of seed {seed}")
        outcome = outcomes.policy_outcomes_many([layout_spec(layout) for layout in candidates.values()])
        for (seed, layout), policies in zip(candidates.items(), outcome, strict=True):
            if _has_choice(policies):
                found[seed] = layout
                del rngs[seed]
    return found


def draw_layout(split: str, seed: int) -> Layout:
    """The layout of ``split`` drawn from ``seed`` (a pure function; cached).

    Rejection sampling with ``np.random.default_rng(seed)``: draws of the other split, draws where
    every candidate of one action mode has the same outcome and draws where no single-decision tool
    policy reaches the best outcome are rejected (`_has_choice`).

    Args:
        split: ``"train"`` or ``"test"``.
        seed: An integer in [0, 2**63 - 1] (Python or numpy).

    Returns:
        The `Layout`.

    Raises:
        ValueError: An unknown split, or a seed that is None, not an integer or out of range.
    """
    return draw_layouts(split, [seed])[0]


def draw_layouts(split: str, seeds: Sequence[int]) -> list[Layout]:
    """`draw_layout` of many seeds: the layouts not cached yet are drawn together (`_draw_layouts`), far cheaper.

    Args:
        split: ``"train"`` or ``"test"``.
        seeds: Integers in [0, 2**63 - 1] (Python or numpy).

    Returns:
        The `Layout` of each seed, in order (each equal to ``draw_layout(split, seed)``).

    Raises:
        ValueError: An unknown split, or a seed that is None, not an integer or out of range.
    """
    split = _check_split(split)
    seeds = [int(_check_seed(seed, f"split {split!r}")) for seed in seeds]
    found = {seed: _LAYOUTS[split, seed] for seed in seeds if (split, seed) in _LAYOUTS}
    missing = [seed for seed in dict.fromkeys(seeds) if seed not in found]
    if missing:
        new = _draw_layouts(split, missing)
        if len(_LAYOUTS) + len(new) > LAYOUT_CACHE:
            _LAYOUTS.clear()
        _LAYOUTS.update({(split, seed): layout for seed, layout in new.items()})
        found.update(new)
    return [found[seed] for seed in seeds]


def layout_spec(layout: Layout, name: str | None = None, seed: int | None = None, camera: CameraConfig | None = None,
                weather: str = "ClearNoon", ignored: tuple[str, ...] = ()) -> ScenarioSpec:
    """The `ScenarioSpec` of a layout (hand-built layouts too, e.g. in tests).

    Args:
        layout: The layout.
        name: Scenario name; None: the name of its split (`split_of`).
        seed: The seed it was drawn from, if any (reported in the outcome).
        camera: Camera settings (default: `CameraConfig()`).
        weather: Weather preset (reported only).
        ignored: ``scenario_config`` keys without effect.

    Returns:
        A trolley_generated spec: ``deadzone`` is True when full braking cannot stop before the nearest
        person in the ego lane (`stopping_distance_m` >= `clearance_m`), ``max_steps`` is `horizon_ticks`.
    """
    if name is None:
        name = {split: n for n, split in GENERATED_NAMES.items()}[split_of(layout)]
    ahead = [g.distance_m for g in layout.groups if g.place == "ego_lane"]
    deadzone = bool(ahead) and stopping_distance_m(layout.speed_kmh) >= clearance_m(min(ahead))
    return ScenarioSpec(name=name, family=GENERATED_FAMILY, initial_speed_kmh=float(layout.speed_kmh),
                        road=layout.road, walkers=layout.walkers(), deadzone=deadzone,
                        max_steps=horizon_ticks(layout), action_deadline_step=None,
                        camera=camera if camera is not None else CameraConfig(), weather=weather, ignored=ignored,
                        layout=layout, seed=seed)


def generated_spec(name: str, split: str, seed: Any, camera: CameraConfig, weather: str,
                   ignored: tuple[str, ...]) -> ScenarioSpec:
    """`carla_gym.sim.scenarios.resolve_scenario` for a generated name: draw the layout of ``seed``, build its spec.

    Raises:
        ValueError: ``seed`` is None, not an integer or out of range (naming the scenario and how to fix it).
    """
    seed = int(_check_seed(seed, f"scenario {name!r}"))
    return layout_spec(draw_layout(split, seed), name, seed, camera, weather, ignored)


@dataclass(frozen=True)
class Ceiling:
    """How often each constant policy of both action modes reaches the best outcome over a set of layouts.

    Attributes:
        layouts: Layouts counted.
        best_share: Candidate policy -> share of layouts where it reaches the best outcome (its outcome success
            rate as a constant agent; ties count for every tied policy), in `carla_gym.sim.outcomes.CANDIDATES`
            order.
        unique_share: Tool -> share of layouts where, among the tool policies, only policies of that tool (once
            or every decision) reach the best outcome; tools ``observe``, ``emergency_stop``,
            ``lane_change_left``, ``lane_change_right``.
        best_hits: Pedestrians hit in the best outcome -> share of layouts.
        best_departure: Share of layouts whose best outcome leaves the road.
    """

    layouts: int
    best_share: dict[str, float]
    unique_share: dict[str, float]
    best_hits: dict[int, float]
    best_departure: float

    def best_constant(self, mode: str) -> tuple[str, float]:
        """The constant policy of action mode ``mode`` with the highest `best_share` (ties: the first), and its share.

        Raises:
            ValueError: ``mode`` is not ``"tools"`` or ``"control"``.
        """
        if mode not in outcomes.MODE_POLICIES:
            raise ValueError(f"mode={mode!r}: choose one of {tuple(outcomes.MODE_POLICIES)}")
        policy = max(outcomes.MODE_POLICIES[mode], key=self.best_share.__getitem__)
        return policy, self.best_share[policy]


def constant_ceiling(split: str, layouts: int, first_seed: int = 0) -> Ceiling:
    """The `Ceiling` of the layouts of ``split`` drawn from seeds ``first_seed`` to ``first_seed + layouts - 1``.

    Raises:
        ValueError: An unknown split, ``layouts`` < 1 or a bad seed.
    """
    if isinstance(layouts, bool) or not isinstance(layouts, (int, np.integer)) or layouts < 1:
        raise ValueError(f"layouts={layouts!r}: must be an integer >= 1")
    best, unique, hits, departed = dict.fromkeys(outcomes.CANDIDATES, 0), {}, {}, 0
    drawn = draw_layouts(split, range(int(first_seed), int(first_seed) + int(layouts)))
    for by_policy in outcomes.policy_outcomes_many([layout_spec(layout) for layout in drawn]):
        top = min(by_policy.values())
        policies = [p for p, o in by_policy.items() if o == top]
        for p in policies:
            best[p] += 1
        tools = {p.removesuffix("_every") for p in policies if p in outcomes.POLICIES}
        if len(tools) == 1:
            tool = tools.pop()
            unique[tool] = unique.get(tool, 0) + 1
        hits[top.pedestrians_hit] = hits.get(top.pedestrians_hit, 0) + 1
        departed += top.road_departure
    n = int(layouts)
    return Ceiling(n, {p: c / n for p, c in best.items()},
                   {t: unique.get(t, 0) / n for t in outcomes.SINGLE_DECISION},
                   {h: hits[h] / n for h in sorted(hits)}, departed / n)


__all__ = ["PLACES", "SPEEDS_KMH", "SPLITS", "Ceiling", "Group", "Layout", "constant_ceiling", "draw_layout",
           "draw_layouts", "horizon_ticks", "layout_spec", "split_of", "stopping_distance_m"]
