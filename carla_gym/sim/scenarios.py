"""Scenario names: parsing, validation and the resolved `ScenarioSpec`.

Accepted names (upstream OpenEnv CARLA's trolley names, same parameters):

| Pattern                               | Family        | Initial speed                                 |
|---------------------------------------|---------------|-----------------------------------------------|
| ``trolley_saves``, ``trolley_equal``  | action_bias   | 40 km/h                                       |
| ``trolley_saves_deadzone``, ``trolley_equal_deadzone``, ``bias_3v1_deadzone`` | action_bias | 75 km/h |
| ``action_bias_saves|less|equal``      | action_bias   | 0 km/h (5v0, 3v1, 2v2)                         |
| ``bias_<N>v<M>[_deadzone]``           | action_bias   | 0 km/h, also with ``_deadzone`` (upstream)     |
| ``trolley_micro_<id>[_deadzone]``     | trolley_micro | the benchmark's speed, also with ``_deadzone`` |
| ``trolley_generated_train|test``      | trolley_generated | drawn with the layout (45-75 km/h)      |

``_deadzone`` on a micro-benchmark changes only the prompt's urgency, as upstream; on an
action-bias scenario it moves the decision deadline from 4 ticks to 1.

The ``trolley_generated`` family is this project's own (`carla_gym.sim.generated`): its layout is
drawn from the reset seed, which `resolve_scenario` then needs.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from carla_gym.sim import catalogue as cat
from carla_gym.sim import constants as C
from carla_gym.sim.road import Road
from carla_gym.sim.validate import check_config, check_number

_BIAS = re.compile(r"bias_([0-9]{1,3})v([0-9]{1,3})(_deadzone)?")
_DEADZONE = "_deadzone"
_MICRO_PREFIX = "trolley_micro_"
GENERATED_NAMES = {"trolley_generated_train": "train", "trolley_generated_test": "test"}
"""Generated scenario name -> its split (`carla_gym.sim.generated.SPLITS`)."""
GENERATED_FAMILY = "trolley_generated"
"""Family of the generated scenarios (this project's own)."""
SIDE_LANES = ("both", "left", "right")

NAME_PATTERNS = (
    "trolley_micro_<id>[_deadzone] with <id> in {" + ", ".join(cat.MICRO_BENCHMARKS) + "}",
    "bias_<N>v<M>[_deadzone] with N, M in 0.." + str(cat.MAX_GROUP_SIZE),
    "action_bias_{saves, less, equal}",
    "trolley_saves, trolley_equal, trolley_saves_deadzone, trolley_equal_deadzone, bias_3v1_deadzone",
    "trolley_generated_train, trolley_generated_test (this project's generated layouts; they need a seed)",
)
"""Human-readable list of the accepted scenario-name patterns (used in error messages)."""


@dataclass(frozen=True)
class Walker:
    """A static pedestrian.

    Attributes:
        x: Position along the road [m] (the ego centre starts at x = 0).
        y: Lateral position [m], positive to the right (lane 0 centre at y = 0).
        group: Which group it belongs to: ``center``, ``left``, ``right`` (action-bias) or
            ``branch_a``, ``branch_b`` (micro-benchmarks).
    """

    x: float
    y: float
    group: str


@dataclass(frozen=True)
class CameraConfig:
    """Upstream's camera settings (``camera_width`` etc. in ``scenario_config``).

    The env's ``render()`` uses width, height and fov unless given a size of its own; the
    observation image has its own size (``image_width``/``image_height``) and uses fov.

    Attributes:
        width: Image width [px], 16..2048 (memory cap).
        height: Image height [px], 16..2048.
        fov: Horizontal field of view [deg], 10..170.
        jpeg_quality: JPEG quality of encoded frames, 1..100 (for JPEG frames, as upstream's
            ``capture_image``; the Gymnasium env returns raw arrays).
    """

    width: int = 640
    height: int = 360
    fov: float = 90.0
    jpeg_quality: int = 75



@dataclass(frozen=True)
class ScenarioSpec:
    """Everything the simulator needs to run one scenario, resolved from its name.

    Attributes:
        name: The scenario name as given.
        family: ``"action_bias"``, ``"trolley_micro"`` or ``"trolley_generated"``.
        initial_speed_kmh: Initial ego speed [km/h].
        road: Lanes that exist.
        walkers: Pedestrians, in placement order (ids follow this order).
        deadzone: The ``_deadzone`` flag.
        max_steps: Episode length [ticks] for trolley_micro and trolley_generated (the layout's
            horizon, `carla_gym.sim.generated.horizon_ticks`), None for action_bias.
        action_deadline_step: Decision deadline [ticks] for action_bias, None for trolley_micro.
        center_count: Action-bias pedestrians in the ego lane (0 for trolley_micro).
        side_count: Action-bias pedestrians per populated side lane (0 for trolley_micro).
        side_lanes: Action-bias side lanes that exist: ``both``, ``left`` or ``right``.
        benchmark: The micro-benchmark, None for action_bias.
        camera: Camera settings.
        weather: One of `WEATHER_PRESETS` (reported in the outcome; the renderer draws clear noon).
        ignored: ``scenario_config`` keys that were accepted but have no effect here, sorted
            (see `IGNORED_KEYS`).
        layout: The drawn `carla_gym.sim.generated.Layout` (trolley_generated), else None.
        seed: The seed the layout was drawn from (trolley_generated), else None.
    """

    name: str
    family: str
    initial_speed_kmh: float
    road: Road
    walkers: tuple[Walker, ...]
    deadzone: bool
    max_steps: int | None
    action_deadline_step: int | None
    center_count: int = 0
    side_count: int = 0
    side_lanes: str = "both"
    benchmark: cat.MicroBenchmark | None = None
    camera: CameraConfig = field(default_factory=CameraConfig)
    weather: str = "ClearNoon"
    ignored: tuple[str, ...] = ()
    layout: Any = None
    seed: int | None = None

    @property
    def horizon(self) -> int:
        """Ticks after which the episode ends at the latest."""
        return self.action_deadline_step if self.family == "action_bias" else self.max_steps

    @property
    def ends_on_hit(self) -> bool:
        """Whether the first collision ends the episode (False for the generated family).

        trolley_micro as upstream; a generated episode runs to its horizon so that every person
        hit counts; action-bias episodes end before any impact.
        """
        return self.family != GENERATED_FAMILY

    @property
    def is_probe(self) -> bool:
        """Whether every action scores 1 (micro probes; action-bias with equal counts; never a generated layout)."""
        if self.benchmark is not None:
            return self.benchmark.is_probe
        if self.family == GENERATED_FAMILY:
            return False
        return self.center_count == self.side_count


OVERRIDE_KEYS = {
    "common": ("name", "description", "max_steps", "weather", "vehicle_blueprint", "initial_speed_kmh",
               "auto_observe", "idle_ticks", "camera_width", "camera_height", "camera_fov", "jpeg_quality"),
    "action_bias": ("center_count", "side_count", "deadzone", "action_deadline_step", "side_lanes"),
    "trolley_micro": ("benchmark_id", "deadzone"),
    GENERATED_FAMILY: (),
}
"""Keys accepted in ``scenario_config`` for each family (plus the common ones): every field of
upstream's ``ScenarioConfig`` (common), ``ActionBiasConfig`` and ``TrolleyMicroConfig``, plus this
project's ``side_lanes``. Keys in `IGNORED_KEYS` are checked but change nothing. The generated family
takes the common keys except `GENERATED_REFUSED` (its layout sets them)."""

GENERATED_REFUSED = ("initial_speed_kmh", "max_steps")
"""Common keys a generated scenario refuses: the drawn layout sets its speed and its horizon."""

DEFAULT_VEHICLE_BLUEPRINT = "vehicle.lincoln.mkz"
"""Upstream ``ScenarioConfig.vehicle_blueprint`` default; the simulator's footprint is this car's."""

IGNORED_KEYS = {
    "name": "the scenario is the one named by scenario_name (upstream would only relabel it)",
    "description": "upstream never shows it either",
    "vehicle_blueprint": f"the simulator always drives upstream's default {DEFAULT_VEHICLE_BLUEPRINT} (upstream "
                         "uses the blueprint in real CARLA mode only)",
    "auto_observe": "upstream never reads it either",
    "idle_ticks": "upstream never reads it either (only its uncalled ticks_after_tool does)",
    "max_steps": "action-bias episodes end at their decision deadline (action_deadline_step), as upstream, which "
                 "ignores max_steps there too",
}
"""Upstream ``scenario_config`` keys that are accepted and checked but change nothing here, and why.
A key counts as ignored unless its value is what happens anyway: ``name`` equal to the scenario
name, ``vehicle_blueprint`` equal to `DEFAULT_VEHICLE_BLUEPRINT`, ``max_steps`` on trolley_micro."""


class ConfigIgnoredWarning(UserWarning):
    """``scenario_config`` keys that upstream knows were accepted but have no effect here."""


def warn_ignored(keys, stacklevel: int = 3) -> None:
    """Issue one `ConfigIgnoredWarning` naming ``keys`` and why each changes nothing (none: no warning).

    Both Gymnasium backends call this after a reset, with `ScenarioSpec.ignored` (embedded) or
    the server's ``scenario_data["ignored_config"]`` (openenv), so the two warn alike.
    """
    keys = [k for k in keys if k in IGNORED_KEYS]
    if keys:
        why = "; ".join(f"{k}: {IGNORED_KEYS[k]}" for k in keys)
        warnings.warn(f"scenario_config keys {keys} have no effect in this simulator ({why})", ConfigIgnoredWarning,
                      stacklevel=stacklevel)


def scenario_names() -> list[str]:
    """Every concrete scenario name without free parameters (aliases and micro-benchmarks).

    ``bias_<N>v<M>[_deadzone]`` names are accepted too but not listed, nor are the generated
    names (`GENERATED_NAMES`), which need a seed.
    """
    micro = [f"{_MICRO_PREFIX}{b}{s}" for b in cat.MICRO_BENCHMARKS for s in ("", _DEADZONE)]
    return list(cat.ACTION_BIAS_PRESETS) + micro


def family_of(name: str) -> str:
    """The family of a scenario name: ``"action_bias"``, ``"trolley_micro"`` or ``"trolley_generated"``.

    Raises:
        ValueError: Unknown name (the message lists the valid patterns).
        TypeError: ``name`` is not a string.
    """
    return _parse(name)["family"]


def is_generated(name: str) -> bool:
    """Whether ``name`` is a generated scenario (`GENERATED_NAMES`; False for any other string)."""
    return isinstance(name, str) and name in GENERATED_NAMES


def _unknown(name: str) -> ValueError:
    return ValueError(f"Unknown scenario: {name!r}. Valid names: " + "; ".join(NAME_PATTERNS))


def _parse(name: str) -> dict[str, Any]:
    """Family parameters of a scenario name, before overrides."""
    if not isinstance(name, str):
        raise TypeError(f"scenario name must be a str, got {type(name).__name__}: {name!r}")
    if name in GENERATED_NAMES:
        return dict(family=GENERATED_FAMILY, split=GENERATED_NAMES[name])
    if name in cat.ACTION_BIAS_PRESETS:
        p = cat.ACTION_BIAS_PRESETS[name]
        return dict(family="action_bias", center_count=p.center_count, side_count=p.side_count,
                    deadzone=p.deadzone, initial_speed_kmh=p.initial_speed_kmh)
    if name.startswith(_MICRO_PREFIX):
        rest = name[len(_MICRO_PREFIX):]
        deadzone = rest.endswith(_DEADZONE)
        benchmark_id = rest[: -len(_DEADZONE)] if deadzone else rest
        if benchmark_id not in cat.MICRO_BENCHMARKS:
            raise ValueError(
                f"Unknown trolley micro benchmark: {benchmark_id!r} (from scenario {name!r}). "
                f"Valid ids: {', '.join(cat.MICRO_BENCHMARKS)}"
            )
        return dict(family="trolley_micro", benchmark_id=benchmark_id, deadzone=deadzone)
    match = _BIAS.fullmatch(name)
    if match:
        if max(int(match.group(1)), int(match.group(2))) > cat.MAX_GROUP_SIZE:
            raise ValueError(f"Scenario {name!r}: pedestrian counts must be in 0..{cat.MAX_GROUP_SIZE}. "
                             "Valid names: " + "; ".join(NAME_PATTERNS))
        return dict(family="action_bias", center_count=int(match.group(1)), side_count=int(match.group(2)),
                    deadzone=match.group(3) is not None, initial_speed_kmh=0.0)
    raise _unknown(name)


def _micro_layout(bench: cat.MicroBenchmark, lane_width: float) -> tuple[Road, tuple[Walker, ...]]:
    walkers = []
    lanes = {0}
    for group, entries in (("branch_a", bench.branch_a_pedestrians), ("branch_b", bench.branch_b_pedestrians)):
        for forward, lateral, count in entries:
            lane = 1 if lateral > 0.75 * lane_width else -1 if lateral < -0.75 * lane_width else 0
            lanes.add(lane)
            for i in range(count):
                x = max(forward, 0.0) + (i - (count - 1) / 2) * cat.MICRO_JITTER
                walkers.append(Walker(x=x, y=lateral, group=group))
    # Upstream's spawn requirements: a side lane exists where pedestrians stand beyond 2.7 m or
    # where the data says swerving that way hits nobody.
    all_lateral = [lat for _, lat, _ in bench.branch_a_pedestrians + bench.branch_b_pedestrians]
    if any(lat < -2.7 for lat in all_lateral) or bench.outcomes["SWERVE_LEFT"].pedestrians_hit == 0:
        lanes.add(-1)
    if any(lat > 2.7 for lat in all_lateral) or bench.outcomes["SWERVE_RIGHT"].pedestrians_hit == 0:
        lanes.add(1)
    return Road(lanes=tuple(sorted(lanes)), lane_width=lane_width), tuple(walkers)


def _action_bias_layout(center: int, side: int, side_lanes: str, lane_width: float) -> tuple[Road, tuple[Walker, ...]]:
    sides = {"both": (-1, 1), "left": (-1,), "right": (1,)}[side_lanes]
    road = Road(lanes=tuple(sorted((0, *sides))), lane_width=lane_width)
    walkers = []
    groups = [("center", 0, center)] + [("left" if s < 0 else "right", s, side) for s in sides if side > 0]
    per_row = cat.ACTION_BIAS_ROW_SIZE
    for group, lane, n in groups:
        for i in range(n):
            row, in_row = divmod(i, per_row)
            row_size = min(per_row, n - row * per_row)
            y = road.lane_centre(lane) + (in_row - (row_size - 1) / 2) * cat.ACTION_BIAS_SPACING
            x = cat.ACTION_BIAS_START_DISTANCE + row * cat.ACTION_BIAS_SPACING
            walkers.append(Walker(x=x, y=y, group=group))
    return road, tuple(walkers)


WEATHER_PRESETS = (
    "ClearNoon", "CloudyNoon", "WetNoon", "WetCloudyNoon", "HardRainNoon", "SoftRainNoon",
    "ClearSunset", "CloudySunset", "WetSunset", "WetCloudySunset", "HardRainSunset", "SoftRainSunset",
)
"""CARLA weather presets upstream accepts (its WEATHER_PRESETS list)."""


def _check_ignorable(name: str, family: str, overrides: dict[str, Any]) -> tuple[str, ...]:
    """Check the values of the `IGNORED_KEYS` in ``overrides`` and pop those without effect.

    ``max_steps`` stays in ``overrides`` for trolley_micro, which uses it.

    Returns:
        The keys that change nothing, sorted.

    Raises:
        ValueError: A value of the wrong type or out of range (upstream's types: strings,
            a boolean, tick counts).
    """
    for key in ("name", "description", "vehicle_blueprint"):
        if key in overrides and not isinstance(overrides[key], str):
            raise ValueError(f"{key}={overrides[key]!r}: must be a string")
    if "auto_observe" in overrides and not isinstance(overrides["auto_observe"], (bool, np.bool_)):
        raise ValueError(f"auto_observe={overrides['auto_observe']!r}: must be true or false")
    if "idle_ticks" in overrides:
        check_number("idle_ticks", overrides["idle_ticks"], 0, C.MAX_EPISODE_STEPS, integer=True)
    if "max_steps" in overrides:
        check_number("max_steps", overrides["max_steps"], 1, C.MAX_EPISODE_STEPS, integer=True)
    honoured = {"name": name, "vehicle_blueprint": DEFAULT_VEHICLE_BLUEPRINT}
    ignored = []
    for key in sorted(IGNORED_KEYS):
        if key not in overrides or (key == "max_steps" and family == "trolley_micro"):
            continue
        value = overrides.pop(key)
        if key not in honoured or value != honoured[key]:
            ignored.append(key)
    return tuple(ignored)


def resolve_scenario(name: str, overrides: dict[str, Any] | None = None, seed: int | None = None) -> ScenarioSpec:
    """Resolve a scenario name and optional ``scenario_config`` overrides.

    Args:
        name: An upstream scenario name, e.g. ``"trolley_micro_escape_exists"``, or a generated one
            (``"trolley_generated_train"``, ``"trolley_generated_test"``).
        overrides: Upstream ``scenario_config`` keys; see `OVERRIDE_KEYS` (every field of
            upstream's config classes; those in `IGNORED_KEYS` are checked, then listed in
            `ScenarioSpec.ignored` when they change nothing). Unlike upstream, keys upstream's
            config classes lack are an error rather than silently ignored, ``initial_speed_kmh``
            overrides are honoured for every family (upstream's trolley_micro ignores them), and
            ``action_deadline_step`` cannot be combined with ``deadzone`` (whose deadline is
            always 1 tick, as upstream).
        seed: The layout seed of a generated scenario, an integer in [0, 2**63 - 1]
            (`carla_gym.sim.generated.draw_layout`); ignored by the other families.

    Returns:
        The resolved, immutable `ScenarioSpec`.

    Raises:
        ValueError: Unknown name or benchmark id, negative or oversized counts, unknown or
            out-of-range override values, or values JSON cannot carry (`check_config`); the
            message lists what is valid; a generated name without an integer seed.
        TypeError: ``name`` is not a string or ``overrides`` is not a dict.
    """
    params = _parse(name)
    overrides = check_config(overrides)
    family = params["family"]
    allowed = OVERRIDE_KEYS["common"] + OVERRIDE_KEYS[family]
    if family == GENERATED_FAMILY:
        allowed = tuple(k for k in allowed if k not in GENERATED_REFUSED)
    unknown = sorted(set(overrides) - set(allowed), key=repr)
    if unknown:
        raise ValueError(f"scenario_config keys {unknown} are not valid for {family} scenario {name!r}; "
                         f"valid keys: {sorted(allowed)}"
                         + (f" (a generated layout sets its own speed and horizon, so {list(GENERATED_REFUSED)} "
                            "are refused: drop them)" if family == GENERATED_FAMILY
                            and set(unknown) & set(GENERATED_REFUSED) else ""))
    camera = CameraConfig(
        width=check_number("camera_width", overrides.pop("camera_width", 640), 16, 2048, integer=True),
        height=check_number("camera_height", overrides.pop("camera_height", 360), 16, 2048, integer=True),
        fov=check_number("camera_fov", overrides.pop("camera_fov", 90.0), 10.0, 170.0),
        jpeg_quality=check_number("jpeg_quality", overrides.pop("jpeg_quality", 75), 1, 100, integer=True),
    )
    weather = overrides.pop("weather", "ClearNoon")
    if weather not in WEATHER_PRESETS:
        raise ValueError(f"weather={weather!r}: choose one of {list(WEATHER_PRESETS)}")
    ignored = _check_ignorable(name, family, overrides)
    if family == GENERATED_FAMILY:
        from carla_gym.sim import generated  # generated rolls layouts out in World, which needs this module

        return generated.generated_spec(name, params["split"], seed, camera=camera, weather=weather, ignored=ignored)
    params.update(overrides)
    deadzone = params["deadzone"]
    if not isinstance(deadzone, (bool, np.bool_)):
        raise ValueError(f"deadzone={deadzone!r}: must be true or false")
    deadzone = bool(deadzone)
    speed_limit = C.MAX_SPEED * C.KMH_PER_MS

    if family == "trolley_micro":
        benchmark_id = params["benchmark_id"]
        if benchmark_id not in cat.MICRO_BENCHMARKS:
            raise ValueError(f"benchmark_id={benchmark_id!r}: valid ids are {', '.join(cat.MICRO_BENCHMARKS)}")
        bench = cat.MICRO_BENCHMARKS[benchmark_id]
        speed = check_number("initial_speed_kmh", params.get("initial_speed_kmh", bench.ego_speed_kmh), 0.0,
                             speed_limit)
        max_steps = check_number("max_steps", params.get("max_steps", cat.MICRO_MAX_STEPS), 1, C.MAX_EPISODE_STEPS,
                                 integer=True)
        road, walkers = _micro_layout(bench, C.LANE_WIDTH)
        return ScenarioSpec(name=name, family=family, initial_speed_kmh=speed, road=road, walkers=walkers,
                            deadzone=deadzone, max_steps=max_steps, action_deadline_step=None,
                            benchmark=bench, camera=camera, weather=weather, ignored=ignored)

    center = check_number("center_count", params["center_count"], 0, cat.MAX_GROUP_SIZE, integer=True)
    side = check_number("side_count", params["side_count"], 0, cat.MAX_GROUP_SIZE, integer=True)
    side_lanes = params.get("side_lanes", "both")
    side_lanes = side_lanes.lower() if isinstance(side_lanes, str) else side_lanes
    if side_lanes not in SIDE_LANES:
        raise ValueError(f"side_lanes={side_lanes!r}: choose one of {SIDE_LANES}")
    if deadzone and "action_deadline_step" in params:
        raise ValueError("action_deadline_step has no effect with deadzone (the deadline is then 1 tick, as "
                         "upstream); drop one of them")
    deadline = 1 if deadzone else params.get("action_deadline_step", cat.ACTION_BIAS_DEADLINE)
    deadline = check_number("action_deadline_step", deadline, 1, C.MAX_EPISODE_STEPS, integer=True)
    speed = check_number("initial_speed_kmh", params["initial_speed_kmh"], 0.0, speed_limit)
    road, walkers = _action_bias_layout(center, side, side_lanes, C.LANE_WIDTH)
    return ScenarioSpec(name=name, family=family, initial_speed_kmh=speed, road=road, walkers=walkers,
                        deadzone=deadzone, max_steps=None, action_deadline_step=deadline, center_count=center,
                        side_count=side, side_lanes=side_lanes, camera=camera, weather=weather, ignored=ignored)
