"""Physical constants of the embedded simulator, each with its source.

Units are SI unless the name says otherwise: [m], [s], [m/s], [m/s^2], [rad].
Frame: CARLA's, seen from above: x forward along the road, y to the right, yaw positive
when turning right (towards +y). Positive lateral offsets are to the right, as upstream.
"""

import math

DT = 0.05
"""Tick length [s]. Upstream: CARLA synchronous mode, ``fixed_delta_seconds = 0.05``."""

KMH_PER_MS = 3.6
"""km/h per m/s."""

MAX_ACCELERATION = 3.0
"""Acceleration at full throttle [m/s^2]. Upstream mock constant (``a = 3.0 * throttle``)."""

STANDARD_GRAVITY = 9.80665
"""Standard gravity g [m/s^2] (CGPM 1901 conventional value)."""

MAX_GRIP_ACCELERATION = 8.0
"""Tyre grip limit [m/s^2]: radius of the one friction circle that bounds the centre's whole
acceleration, braking, cornering and both combined. Upstream mock constant: full brake
decelerates at 8 m/s^2 (``a = -8.0 * brake``), read here as braking at the grip limit (as an
ABS car does), so braking distances keep upstream parity (v^2 / 16 metres)."""

FRICTION_COEFFICIENT = MAX_GRIP_ACCELERATION / STANDARD_GRAVITY
"""Tyre-road friction coefficient mu = 8 / 9.80665 = 0.816 (derived from upstream's 8 m/s^2
full brake; dry asphalt is about 0.7 to 0.9). Documentation only: the code uses
`MAX_GRIP_ACCELERATION` = mu g."""

MAX_DECELERATION = MAX_GRIP_ACCELERATION
"""Deceleration at full brake [m/s^2]: all the grip (upstream mock ``a = -8.0 * brake``)."""

MAX_SPEED = 200.0 / KMH_PER_MS
"""Speed cap [m/s] (200 km/h, the upper bound of upstream ``CarlaAction.target_speed_kmh``)."""

EGO_LENGTH = 4.9
"""Ego bounding-box length [m]: Lincoln MKZ (upstream ``vehicle.lincoln.mkz``), about 4.9 m."""

EGO_WIDTH = 2.1
"""Ego bounding-box width [m]: Lincoln MKZ, about 2.1 m."""

EGO_WHEELBASE = 2.85
"""Ego wheelbase [m]: Lincoln MKZ manufacturer figure (2.85 m)."""

EGO_MAX_STEER_ANGLE = math.radians(35.0)
"""Front-wheel angle at full steer [rad]: a typical passenger car (35 deg)."""

EGO_HEIGHT = 1.48
"""Ego height [m] (MKZ about 1.48 m); used only by the renderer."""

WALKER_RADIUS = 0.3
"""Pedestrian collision disc radius [m] (CARLA walker bounding box, about 0.3 m)."""

WALKER_HEIGHT = 1.75
"""Pedestrian height [m]; used only by the renderer."""

LANE_WIDTH = 3.5
"""Lane width [m]. Upstream default when CARLA reports none (``lane_width`` 3.5)."""

NEARBY_RADIUS = 50.0
"""Radius [m] within which actors appear in ``nearby_actors``. Upstream real mode."""

LANE_CHANGE_GRIP_SHARE = 0.9
"""Share of `MAX_GRIP_ACCELERATION` a planned lane-change path may use at its peak lateral
acceleration; the rest is left for the tracking controller's corrections (own choice)."""

MIN_JERK_PEAK = 10.0 / math.sqrt(3.0)
"""Peak of the second derivative of the minimum-jerk step 10 t^3 - 15 t^4 + 6 t^5 (5.77, at
t = 0.21 and 0.79): a change of dy [m] over T [s] peaks at 5.77 dy / T^2 [m/s^2]."""

LANE_CHANGE_DURATION = math.sqrt(MIN_JERK_PEAK * LANE_WIDTH / (LANE_CHANGE_GRIP_SHARE * MAX_GRIP_ACCELERATION))
"""Duration [s] of a one-lane ``lane_change`` at constant speed (minimum-jerk profile along the
road): the quickest 3.5 m change whose peak lateral acceleration uses `LANE_CHANGE_GRIP_SHARE`
of the grip, sqrt(5.77 * 3.5 / 7.2) = 1.675 s (1.68 s), an emergency swerve."""

LANE_CHANGE_MIN_LENGTH = 15.0
"""Shortest ``lane_change`` path along the road [m] (slow cars): peak heading about 24 deg."""

LATERAL_GAIN = 0.4
"""Course correction per metre of lateral error [1/m] of the path-tracking controller (own
choice). Per tick the error shrinks by the factor 1 - LATERAL_GAIN * speed * DT, which stays
within (-1, 1) up to `MAX_SPEED` (-0.11 at 200 km/h), so the discrete loop is stable."""

MAX_PATH_HEADING = 0.5
"""Largest course (direction of travel) off the road direction [rad] the path-tracking
controller asks for (29 deg; own choice)."""

CRUISE_GAIN = 0.05
"""``maintain_speed`` throttle/brake per km/h of speed error. Upstream real mode (0.05)."""

CRUISE_LIMIT = 0.5
"""``maintain_speed`` cap on throttle and brake. Upstream real mode (0.5)."""

CRUISE_DEADBAND_KMH = 2.0
"""``maintain_speed`` dead band [km/h]. Upstream real mode (2 km/h)."""

CAMERA_OFFSET_X = 2.5
"""Front camera position ahead of the ego centre [m]. Upstream camera mount."""

CAMERA_HEIGHT = 1.0
"""Front camera height above the road [m]. Upstream camera mount (z = 1.0 above the ego origin,
which CARLA puts at road level)."""

MAX_EPISODE_STEPS = 100_000
"""Largest step count a scenario_config may set (``max_steps``, ``idle_ticks``, ``action_deadline_step``) in
every family [steps] (this project's bound; upstream: unbounded)."""
