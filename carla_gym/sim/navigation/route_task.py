"""VLM-RL's route-following task: reward factors, terminations and route bookkeeping, gym-free.

Pure functions over arrays plus one small tracker (`RouteTracker`) that carries an episode's
counters, so that `carla_gym.envs.navigation.CarlaNavigationEnv` stays a thin adapter (HighwayEnv's
world model vs env split). Every rule and constant comes from VLM-RL's ``CarlaRouteEnv``
(``carla_env/envs/carla_route_env.py``, ``carla_env/rewards.py`` ``reward_fn5`` and
``reward_fn_5_default``, ``config.py``, ``eval.py``; https://github.com/zihaosheng/VLM-RL); where this
module differs, the docstring says so.

Units: speeds in km/h wherever VLM-RL uses km/h (the names end in ``_kmh``), distances in m, angles
in rad, time in s. Positions are in the simulator's frame (x forward, y to the right of +x, yaw
positive turning right), as CARLA's left-handed frame: "lateral" is positive to the right.

Examples:
    >>> float(speed_reward(10.0)), float(centering_factor(1.5)), float(angle_factor(0.0))
    (0.5, 0.5, 1.0)
    >>> float(base_reward(22.0, 0.0, 0.0, np.zeros(30)))
    1.0
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from carla_gym.sim import constants as C

MIN_SPEED_KMH = 20.0
"""Below this speed [km/h] the speed reward ramps linearly from 0 (VLM-RL config ``min_speed``)."""

TARGET_SPEED_KMH = 25.0
"""Up to this speed [km/h] the speed reward is 1 (VLM-RL config ``target_speed``)."""

MAX_SPEED_KMH = 35.0
"""The speed reward reaches 0 here [km/h], and a faster ego ends the episode: "Too fast" (VLM-RL config
``max_speed``)."""

MAX_DISTANCE = 3.0
"""Distance from the route [m] at which the centring factor reaches 0, and beyond which the episode ends:
"Off-track" (VLM-RL config ``max_distance``)."""

ANGLE_LIMIT = 2.3
"""VLM-RL's ``angle_diff`` helper returns 0 for angles of at least this magnitude [rad]."""

ANGLE_DECIMALS = 2
"""VLM-RL's ``angle_diff`` rounds the angle to 0.01 rad (``round(angle, 2)``); so does `route_angle`."""

STD_WINDOW = 30
"""Number of most recent centre distances whose standard deviation `distance_std_factor` takes (VLM-RL
``reward_fn5``)."""

STD_SCALE = 0.4
"""Standard deviation [m] at which the distance-std factor reaches 0 (VLM-RL ``reward_fn5``)."""

PENALTY = -10.0
"""Reward of a terminal failure step (VLM-RL ``create_reward_fn`` ``penalty_reward`` for
``reward_fn5``)."""

STOP_SPEED_KMH = 1.0
"""Below this speed [km/h] the ego counts as stopped (VLM-RL ``create_reward_fn`` early stop)."""

STOP_TIME = 90.0
"""Time [s] stopped in a row that ends the episode: "Vehicle stopped" (VLM-RL: 90 x fps steps)."""

WAYPOINT_SPACING = 1.0
"""Route resolution [m] (VLM-RL plans with ``GlobalRoutePlanner`` at 1.0 m)."""

NUM_WAYPOINTS = 15
"""Route waypoints the policy observes (VLM-RL ``waypoints`` Box(15, 2))."""

WAYPOINT_RANGE = 50.0
"""Bound [m] of each observed waypoint coordinate (VLM-RL's Box range [-50, 50])."""

EVAL_ROUTES: tuple[tuple[int, int], ...] = (
    (48, 21), (0, 72), (28, 83), (61, 39), (27, 14), (6, 67), (61, 49), (37, 64), (33, 80), (12, 30))
"""VLM-RL's 10 evaluation routes, (start, end) spawn indices of Town02, one per evaluation episode in this
order (``CarlaRouteEnv`` with ``eval=True``). Applied to another town's spawn list by index."""

TRAIN_ROUTES: tuple[tuple[int, int], ...] = (
    (57, 81), (70, 11), (70, 12), (78, 68), (74, 41), (42, 73), (71, 62), (74, 40), (71, 77), (6, 12), (65, 52),
    (63, 80))
"""VLM-RL's 12 training "intersection" routes, (start, end) spawn indices of Town02, cycled on even training
episodes (``CarlaRouteEnv`` training mode)."""

COLLISION, OFF_TRACK, TOO_FAST, STOPPED, SUCCESS = "collision", "off_track", "too_fast", "stopped", "success"
"""Episode end reasons (`termination`): the first four are failures (reward `PENALTY`), the last a success."""

NO_PROGRESS = "no_progress"
"""End reason of VLM-RL's evaluation loop: the ego has not passed the route's first waypoint after
`EVAL_NO_PROGRESS_TIME` (no penalty: ``eval.py`` stops the episode, the env's reward is not involved)."""

EVAL_NO_PROGRESS_TIME = 10.0
"""VLM-RL's ``eval.py`` ends an episode at ``step_count >= 150`` (10 s at 15 Hz) if the ego has not passed the
first waypoint [s]."""

FAILURES = (COLLISION, OFF_TRACK, TOO_FAST, STOPPED)
"""End reasons that are failures, in the order `termination` checks them."""

SUCCESS_RADIUS = 5.0
"""An episode counts as a success in VLM-RL's evaluation summary when the final ego position lies closer than this
[m] to the last route waypoint (strictly, ``eucldist(...) < 5`` in ``eval_plots.summary_eval``)."""

CPM_PER_M = 1000.0
"""Metres per kilometre: VLM-RL's collisions per kilometre ``CPM = 1000 / distance_traveled``."""

OUTCOME_KEYS = ("total_distance", "total_reward", "routes_completed", "speed_mean", "speed_std", "center_dev_mean",
                "center_dev_std", "reward_mean", "reward_std", "collision_speed", "CPS", "CPM", "success",
                "termination", "episode_length")
"""Keys of `RouteTracker.outcome`, VLM-RL's per-episode evaluation summary columns plus the end reason
and the length; ``collision_interval`` is left out (VLM-RL counts it across episodes, not per episode)."""


def spawn_pair(pair: tuple[int, int], num_spawns: int) -> tuple[int, int]:
    """A route's spawn indices on a town with ``num_spawns`` spawn points: each index modulo ``num_spawns``.

    CARLA's Town02 has more spawn points (VLM-RL's indices go up to 83) than this simulator's Town02
    analogue (68), so the indices wrap around: a documented difference, the routes are not CARLA's.

    Examples:
        >>> spawn_pair((0, 72), 68)
        (0, 4)
    """
    return pair[0] % num_spawns, pair[1] % num_spawns


def speed_reward(speed_kmh):
    """VLM-RL's speed reward: v/20 below 20 km/h, 1 up to 25 km/h, 1 - (v - 25)/10 above (negative past 35).

    Args:
        speed_kmh: Ego speed [km/h], a float or an array.

    Returns:
        The reward, float64 of the same shape (``reward_fn5``).

    Examples:
        >>> speed_reward(np.array([0.0, 10, 20, 25, 30, 35])).tolist()
        [0.0, 0.5, 1.0, 1.0, 0.5, 0.0]
    """
    v = np.asarray(speed_kmh, dtype=np.float64)
    return np.where(v < MIN_SPEED_KMH, v / MIN_SPEED_KMH,
                    np.where(v > TARGET_SPEED_KMH, 1.0 - (v - TARGET_SPEED_KMH) / (MAX_SPEED_KMH - TARGET_SPEED_KMH),
                             1.0))


def distance_to_line(a, b, p) -> float:
    """Distance [m] from point ``p`` to the infinite line through ``a`` and ``b`` (to ``a`` when they coincide).

    VLM-RL's ``distance_to_line`` (its ``utils.py``), in 2-D.

    Examples:
        >>> distance_to_line((0.0, 0.0), (1.0, 0.0), (5.0, -2.0))
        2.0
    """
    a, b, p = (np.asarray(x, dtype=np.float64) for x in (a, b, p))
    ab = b - a
    norm = math.hypot(ab[0], ab[1])
    if norm < 1e-9:
        return float(math.hypot(*(p - a)))
    return float(abs(ab[0] * (a[1] - p[1]) - ab[1] * (a[0] - p[0])) / norm)


def centering_factor(distance):
    """VLM-RL's centring factor ``max(1 - d / 3, 0)``.

    ``d`` is the distance from the ego to the line through the current and next route waypoints
    (`RouteTracker`), never to a lane of the road: off the route the factor is 0.

    Args:
        distance: d [m], >= 0, a float or an array.

    Examples:
        >>> centering_factor(np.array([0.0, 1.5, 3.0, 10.0])).tolist()
        [1.0, 0.5, 0.0, 0.0]
    """
    return np.maximum(1.0 - np.asarray(distance, dtype=np.float64) / MAX_DISTANCE, 0.0)


def route_angle(route_yaw: float, velocity_yaw: float, speed: float) -> float:
    """Signed angle [rad] from the route heading to the ego's velocity, as VLM-RL's ``angle_diff`` returns it.

    VLM-RL's helper returns 0 when either vector has zero length (the ego stands still) and for angles
    of magnitude `ANGLE_LIMIT` (2.3 rad) or more, and rounds to 0.01 rad (`ANGLE_DECIMALS`); this
    function does all three. So a standing ego, and one driving against the route (|theta| >= 2.3),
    get an angle factor of 1: a quirk kept for parity (the speed reward is 0 at standstill, and a turn
    against the route on this 3 m corridor ends off-track first).

    Args:
        route_yaw: Heading of the route at the ego's current waypoint [rad].
        velocity_yaw: Direction of the ego's velocity [rad] (heading plus slip angle).
        speed: Ego speed [m/s], >= 0.

    Returns:
        The angle in [-2.3, 2.3] (0 from 2.3 rad on, tested before rounding), positive when the velocity
        points right of the route, rounded to 0.01.

    Examples:
        >>> route_angle(0.0, 0.5, 3.0), route_angle(0.0, 0.5, 0.0), route_angle(0.0, 3.0, 3.0)
        (0.5, 0.0, 0.0)
    """
    if speed <= 0.0:
        return 0.0
    theta = math.remainder(velocity_yaw - route_yaw, math.tau)
    if abs(theta) >= ANGLE_LIMIT:
        return 0.0
    return float(np.round(theta, ANGLE_DECIMALS))


def angle_factor(theta):
    """VLM-RL's heading factor ``max(1 - |theta| / (pi / 2), 0)``; theta from `route_angle`.

    Examples:
        >>> angle_factor(np.array([0.0, math.pi / 4, -math.pi / 2, 2.0])).tolist()
        [1.0, 0.5, 0.0, 0.0]
    """
    return np.maximum(1.0 - np.abs(np.asarray(theta, dtype=np.float64)) / (math.pi / 2), 0.0)


def distance_std_factor(distances) -> float:
    """VLM-RL's stability factor ``max(1 - std(last 30 d) / 0.4, 0)``.

    Args:
        distances: The centre distances [m] of the episode so far, newest last (at least one); only the
            last `STD_WINDOW` count. The standard deviation is numpy's (population, ddof 0).

    Examples:
        >>> distance_std_factor([0.0, 0.4]), distance_std_factor([1.0] * 40)
        (0.5, 1.0)
    """
    recent = np.asarray(distances, dtype=np.float64)[-STD_WINDOW:]
    return float(max(1.0 - float(np.std(recent)) / STD_SCALE, 0.0))


def base_reward(speed_kmh: float, distance: float, theta: float, distances) -> float:
    """VLM-RL's ``reward_fn5``: speed reward x centring x angle x distance-std factors.

    Args:
        speed_kmh: Ego speed [km/h].
        distance: Current distance from the route line [m].
        theta: Angle from `route_angle` [rad].
        distances: Centre-distance history, newest last (`distance_std_factor`).

    Examples:
        >>> base_reward(10.0, 1.5, math.pi / 4, [0.0, 0.4])  # 0.5 * 0.5 * 0.5 * 0.5
        0.0625
    """
    return float(speed_reward(speed_kmh) * centering_factor(distance) * angle_factor(theta)
                 * distance_std_factor(distances))


@dataclass(frozen=True)
class RouteRules:
    """Which early stops apply and their limits (VLM-RL ``early_stop=True``).

    The defaults are VLM-RL's training rules; `evaluation_rules` gives its evaluation's (off-track and too-fast
    off, the no-progress stop on).

    Attributes:
        max_distance: Off-track beyond this distance from the route [m] (`MAX_DISTANCE`); inf: never.
        max_speed_kmh: Too fast above this speed [km/h] (`MAX_SPEED_KMH`); inf: never.
        stop_speed_kmh: Stopped below this speed [km/h] (`STOP_SPEED_KMH`).
        stop_time: Stopped this long in a row [s] ends the episode (`STOP_TIME`), > 0.
        no_progress_time: `NO_PROGRESS` once this long has passed [s] with the first waypoint not yet passed;
            inf (default, training): never; `EVAL_NO_PROGRESS_TIME` in VLM-RL's evaluation.
    """

    max_distance: float = MAX_DISTANCE
    max_speed_kmh: float = MAX_SPEED_KMH
    stop_speed_kmh: float = STOP_SPEED_KMH
    stop_time: float = STOP_TIME
    no_progress_time: float = math.inf

    def __post_init__(self) -> None:
        for name in ("max_distance", "max_speed_kmh", "stop_speed_kmh", "stop_time", "no_progress_time"):
            value = getattr(self, name)
            if isinstance(value, bool) or not (isinstance(value, int | float) and value > 0):  # NaN fails too
                raise ValueError(f"{name}={value!r}: must be a number > 0")
        if math.isinf(self.stop_time) or math.isinf(self.stop_speed_kmh):
            raise ValueError(f"stop_time={self.stop_time!r}, stop_speed_kmh={self.stop_speed_kmh!r}: must be finite "
                             "(to never end an episode for standing, give a stop_time longer than the episode)")

    def stop_ticks(self, dt: float) -> int:
        """Ticks of ``dt`` seconds stopped in a row that end the episode: ceil(stop_time / dt).

        Examples:
            >>> RouteRules().stop_ticks(0.05), RouteRules().stop_ticks(1 / 15)
            (1800, 1350)
        """
        return math.ceil(self.stop_time / dt - 1e-9)


def evaluation_rules(stop_time: float = STOP_TIME) -> RouteRules:
    """VLM-RL's evaluation early stops (``eval=True`` and ``eval.py``).

    No off-track, no too-fast, the stop rule, and `NO_PROGRESS` after `EVAL_NO_PROGRESS_TIME`.

    Examples:
        >>> r = evaluation_rules()
        >>> r.max_distance, r.max_speed_kmh, r.no_progress_time
        (inf, inf, 10.0)
    """
    return RouteRules(max_distance=math.inf, max_speed_kmh=math.inf, stop_time=stop_time,
                      no_progress_time=EVAL_NO_PROGRESS_TIME)


def termination(rules: RouteRules, collided: bool, distance: float, speed_kmh: float, stopped_ticks: int,
                dt: float, reached_end: bool, ticks: int = 0, index: int = 1) -> str | None:
    """Why the episode ends now, or None.

    The first failure of `FAILURES` that holds, then `NO_PROGRESS`, then `SUCCESS`.

    Args:
        rules: The limits.
        collided: The ego touched a vehicle or walker this tick.
        distance: Distance from the route line [m].
        speed_kmh: Ego speed [km/h].
        stopped_ticks: Ticks in a row with the speed below ``rules.stop_speed_kmh``, this one included.
        dt: Tick length [s].
        reached_end: The ego has passed the route's last waypoint.
        ticks: Ticks since the reset, this one included (for `RouteRules.no_progress_time`).
        index: The current waypoint (0: the first not yet passed).

    Examples:
        >>> termination(RouteRules(), False, 3.5, 20.0, 0, 0.05, False)
        'off_track'
        >>> termination(RouteRules(), False, 0.1, 20.0, 0, 0.05, True)
        'success'
    """
    if collided:
        return COLLISION
    if distance > rules.max_distance:
        return OFF_TRACK
    if speed_kmh > rules.max_speed_kmh:
        return TOO_FAST
    if stopped_ticks >= rules.stop_ticks(dt):
        return STOPPED
    if index == 0 and ticks * dt >= rules.no_progress_time - 1e-9:
        return NO_PROGRESS
    if reached_end:
        return SUCCESS
    return None


def advance_index(waypoints: np.ndarray, yaw: np.ndarray, index: int, xy) -> int:
    """The ego's current waypoint after it moved to ``xy``: VLM-RL's "did we pass the next waypoint" loop.

    While the ego lies ahead of the next waypoint along that waypoint's heading (a positive dot
    product), the next one becomes current; the index never goes back, and stops at the last waypoint.

    Args:
        waypoints: Route positions (M, 2) [m].
        yaw: Route headings (M,) [rad].
        index: The current waypoint before the move, in [0, M).
        xy: Ego position (2,) [m].

    Examples:
        >>> wp = np.stack([np.arange(5.0), np.zeros(5)], axis=1)
        >>> advance_index(wp, np.zeros(5), 0, (2.5, 0.3)), advance_index(wp, np.zeros(5), 0, (9.0, 0.0))
        (2, 4)
    """
    x, y = float(xy[0]), float(xy[1])
    last = len(waypoints) - 1
    while index < last:
        nx, ny = waypoints[index + 1]
        if math.cos(yaw[index + 1]) * (x - nx) + math.sin(yaw[index + 1]) * (y - ny) > 0.0:
            index += 1
        else:
            break
    return index


def route_distance(waypoints: np.ndarray, index: int, xy) -> float:
    """Distance [m] from ``xy`` to the line through the current waypoint and the next (VLM-RL's centre distance).

    At the last waypoint: the line through the last two; on a one-waypoint route: the distance to that point.
    """
    if len(waypoints) == 1:
        return distance_to_line(waypoints[0], waypoints[0], xy)
    i = min(index, len(waypoints) - 2)
    return distance_to_line(waypoints[i], waypoints[i + 1], xy)


def waypoints_ahead(waypoints: np.ndarray, yaw: np.ndarray, index: int, count: int = NUM_WAYPOINTS) -> np.ndarray:
    """``count`` route waypoints from ``index`` on, padded by extrapolating the last segment.

    Args:
        waypoints: Route positions (M, 2) [m], about `WAYPOINT_SPACING` apart.
        yaw: Route headings (M,) [rad] (used to extrapolate a one-waypoint route, 1 m steps).
        index: First waypoint, in [0, M).
        count: How many, >= 1.

    Returns:
        (count, 2) float64 [m], world frame.

    Examples:
        >>> wp = np.stack([np.arange(3.0), np.zeros(3)], axis=1)
        >>> waypoints_ahead(wp, np.zeros(3), 1, 4)[:, 0].tolist()
        [1.0, 2.0, 3.0, 4.0]
    """
    out = waypoints[index:index + count]
    missing = count - len(out)
    if missing <= 0:
        return out.copy()
    if len(waypoints) >= 2:
        step = waypoints[-1] - waypoints[-2]
    else:
        step = WAYPOINT_SPACING * np.array([math.cos(yaw[-1]), math.sin(yaw[-1])])
    extra = waypoints[-1] + np.arange(1, missing + 1)[:, None] * step
    return np.concatenate([out, extra])


def to_ego_frame(points: np.ndarray, xy, yaw: float) -> np.ndarray:
    """World points (N, 2) [m] as (lateral, longitudinal) [m] in the ego frame, VLM-RL's waypoint order.

    VLM-RL rotates by the ego yaw and swaps the axes; lateral is positive to the right.

    Examples:
        >>> to_ego_frame(np.array([[10.0, 2.0]]), (0.0, 0.0), 0.0).tolist()
        [[2.0, 10.0]]
    """
    dx, dy = points[:, 0] - float(xy[0]), points[:, 1] - float(xy[1])
    c, s = math.cos(yaw), math.sin(yaw)
    return np.stack([-dx * s + dy * c, dx * c + dy * s], axis=1)


@dataclass(frozen=True)
class RouteStep:
    """What one tick of the route task measured (`RouteTracker.update`).

    Attributes:
        distance: Distance from the route line [m].
        theta: Angle from `route_angle` [rad].
        speed_reward: `speed_reward` of the speed.
        centering_factor: `centering_factor` of ``distance``.
        angle_factor: `angle_factor` of ``theta``.
        distance_std_factor: `distance_std_factor` of the history.
        base_reward: Product of the four.
        reward: ``base_reward``, or `PENALTY` on a failure.
        end: `termination`'s reason, or None.
    """

    distance: float
    theta: float
    speed_reward: float
    centering_factor: float
    angle_factor: float
    distance_std_factor: float
    base_reward: float
    reward: float
    end: str | None


@dataclass
class RouteTracker:
    """One episode's route bookkeeping: current waypoint, distances, averages, the stop timer.

    Attributes:
        waypoints: Route positions (M, 2) [m].
        yaw: Route headings (M,) [rad].
        rules: Early-stop limits.
        dt: Tick length [s].
        index: Current waypoint (VLM-RL ``current_waypoint_index``).
        total_distance: Distance driven [m], summed per-tick displacement (``distance_traveled``).
        center_dev_sum: Sum of the centre distances of the ticks [m].
        speed_sum: Sum of the speeds of the ticks [km/h].
        steps: Ticks done.
        stopped_ticks: Ticks in a row below the stop speed.
        history: Last `STD_WINDOW` centre distances [m].
        last_xy: Ego position after the last tick [m].
        reward_sum: Sum of the step rewards, failure penalty included (VLM-RL ``total_reward``).
        speed_m2, center_dev_m2, reward_m2: Sums of squared deviations from the running mean (Welford's
            online variance) of the speeds [km/h^2], centre distances [m^2] and rewards, for `outcome`'s stds.
        collision_speed: Speed at the collision tick [km/h], 0 without a collision.
        end: The end reason of the last tick (`termination`), None while the episode runs.
    """

    waypoints: np.ndarray
    yaw: np.ndarray
    rules: RouteRules
    dt: float
    last_xy: np.ndarray
    index: int = 0
    total_distance: float = 0.0
    center_dev_sum: float = 0.0
    speed_sum: float = 0.0
    steps: int = 0
    stopped_ticks: int = 0
    history: deque = field(default_factory=lambda: deque(maxlen=STD_WINDOW))
    reward_sum: float = 0.0
    speed_m2: float = 0.0
    center_dev_m2: float = 0.0
    reward_m2: float = 0.0
    collision_speed: float = 0.0
    end: str | None = None

    @property
    def routes_completed(self) -> float:
        """``(index + 1) / M``: VLM-RL's ``routes_completed`` of one route, in (0, 1]."""
        return (self.index + 1) / len(self.waypoints)

    @property
    def avg_center_dev(self) -> float:
        """Mean centre distance over the ticks [m] (0 before the first)."""
        return self.center_dev_sum / self.steps if self.steps else 0.0

    @property
    def avg_speed(self) -> float:
        """Mean speed over the ticks [km/h], standstill included (0 before the first)."""
        return self.speed_sum / self.steps if self.steps else 0.0

    def measure(self, xy, velocity_yaw: float, speed: float) -> tuple[float, float]:
        """Centre distance [m] and `route_angle` [rad] at ``xy`` without changing the tracker."""
        index = advance_index(self.waypoints, self.yaw, self.index, xy)
        return route_distance(self.waypoints, index, xy), route_angle(float(self.yaw[index]), velocity_yaw, speed)

    def update(self, xy, velocity_yaw: float, speed: float, collided: bool) -> RouteStep:
        """Account one tick that left the ego at ``xy`` and return its measures, reward and end reason.

        Args:
            xy: Ego position (2,) [m].
            velocity_yaw: Direction of the ego's velocity [rad].
            speed: Ego speed [m/s], >= 0.
            collided: The ego touched a vehicle or walker during the tick.
        """
        xy = np.asarray(xy, dtype=np.float64)
        self.index = advance_index(self.waypoints, self.yaw, self.index, xy)
        distance = route_distance(self.waypoints, self.index, xy)
        theta = route_angle(float(self.yaw[self.index]), velocity_yaw, speed)
        speed_kmh = speed * C.KMH_PER_MS
        self.total_distance += float(math.hypot(*(xy - self.last_xy)))
        self.last_xy = xy
        n = self.steps + 1
        self.speed_sum, self.speed_m2 = _welford(self.speed_sum, self.speed_m2, n, speed_kmh)
        self.center_dev_sum, self.center_dev_m2 = _welford(self.center_dev_sum, self.center_dev_m2, n, distance)
        self.steps = n
        self.stopped_ticks = self.stopped_ticks + 1 if speed_kmh < self.rules.stop_speed_kmh else 0
        self.history.append(distance)
        terms = (float(speed_reward(speed_kmh)), float(centering_factor(distance)), float(angle_factor(theta)),
                 distance_std_factor(self.history))
        base = terms[0] * terms[1] * terms[2] * terms[3]
        end = termination(self.rules, collided, distance, speed_kmh, self.stopped_ticks, self.dt,
                          self.index >= len(self.waypoints) - 1, n, self.index)
        reward = PENALTY if end in FAILURES else base
        self.reward_sum, self.reward_m2 = _welford(self.reward_sum, self.reward_m2, n, reward)
        self.end = end
        if end == COLLISION:
            self.collision_speed = speed_kmh
        return RouteStep(distance, theta, *terms, base, reward, end)

    def arrive(self) -> None:
        """Mark the route done (the episode ended at the goal).

        The current waypoint becomes the last one, so `routes_completed` is 1, as VLM-RL's, whose episode ends
        at the last waypoint.
        """
        self.index = len(self.waypoints) - 1

    def _std(self, m2: float) -> float:
        """Sample standard deviation (ddof 1, pandas' ``std``) from a Welford sum; 0 below two ticks."""
        return math.sqrt(max(m2, 0.0) / (self.steps - 1)) if self.steps > 1 else 0.0

    def outcome(self, success_radius: float = SUCCESS_RADIUS) -> dict[str, float | int | bool | str]:
        """VLM-RL's per-episode evaluation summary (``eval_plots.summary_eval``) of the ticks so far.

        Meant for the end of an episode (the env gives it as ``info["outcome"]`` on the terminal step), but
        defined at any time. Means and standard deviations run over every tick (standstill included); the
        standard deviations are the sample ones (ddof 1) as pandas computes them, 0 for a one-tick episode
        (pandas: NaN). Collision fields are 0 when the episode did not end in a collision (VLM-RL leaves
        them 0 or missing).

        Args:
            success_radius: ``success`` radius [m] around the last waypoint (VLM-RL: `SUCCESS_RADIUS`; the
                Gymnasium env passes the scenario's own radius for maze and free roam).

        Returns:
            A dict with the keys `OUTCOME_KEYS`:
            ``total_distance`` [m], summed per-tick displacement; ``total_reward``, the sum of the step
            rewards, failure penalty included; ``routes_completed``, ``(index + 1) / M`` clipped to <= 1;
            ``speed_mean``, ``speed_std`` [km/h]; ``center_dev_mean``, ``center_dev_std`` [m];
            ``reward_mean``, ``reward_std``; ``collision_speed`` [km/h] at the collision tick;
            ``CPS`` = 1 / ticks and ``CPM`` = 1000 / ``total_distance`` (0 when it is 0), collisions per
            tick and per km, both 0 without a collision; ``success``, the final position closer than
            ``success_radius`` to the last waypoint (whatever ended the episode); ``termination``, the end
            reason ("" while running); ``episode_length`` [ticks].

        Examples:
            >>> wp = np.stack([np.arange(3.0), np.zeros(3)], axis=1)
            >>> t = RouteTracker(wp, np.zeros(3), RouteRules(), 0.05, np.zeros(2))
            >>> _ = t.update((1.0, 0.0), 0.0, 5.0, True)
            >>> o = t.outcome()
            >>> o["termination"], o["collision_speed"], o["CPS"], o["CPM"], o["total_reward"], o["success"]
            ('collision', 18.0, 1.0, 1000.0, -10.0, True)
        """
        collided = self.end == COLLISION
        steps = self.steps
        final = float(math.hypot(*(self.last_xy - self.waypoints[-1])))
        return {
            "total_distance": self.total_distance,
            "total_reward": self.reward_sum,
            "routes_completed": min(self.routes_completed, 1.0),
            "speed_mean": self.avg_speed,
            "speed_std": self._std(self.speed_m2),
            "center_dev_mean": self.avg_center_dev,
            "center_dev_std": self._std(self.center_dev_m2),
            "reward_mean": self.reward_sum / steps if steps else 0.0,
            "reward_std": self._std(self.reward_m2),
            "collision_speed": self.collision_speed if collided else 0.0,
            "CPS": 1.0 / steps if collided and steps else 0.0,
            "CPM": CPM_PER_M / self.total_distance if collided and self.total_distance > 0.0 else 0.0,
            "success": final < success_radius,
            "termination": self.end or "",
            "episode_length": steps,
        }


def _welford(total: float, m2: float, n: int, x: float) -> tuple[float, float]:
    """Welford's online update: the new sum and sum of squared deviations after adding the ``n``-th value ``x``.

    Examples:
        >>> _welford(*_welford(0.0, 0.0, 1, 1.0), 2, 3.0)  # values 1, 3: sum 4, squared deviations 2
        (4.0, 2.0)
    """
    mean_old = total / (n - 1) if n > 1 else 0.0
    total += x
    m2 += (x - mean_old) * (x - total / n)
    return total, m2
