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

MAX_DECELERATION = 8.0
"""Deceleration at full brake [m/s^2]. Upstream mock constant (``a = -8.0 * brake``)."""

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

LANE_CHANGE_DURATION = 1.5
"""Duration [s] of a ``lane_change`` at constant speed (minimum-jerk profile along the road).

1.5 s keeps the peak lateral acceleration of a 3.5 m change near 9 m/s^2, an emergency swerve.
"""

LANE_CHANGE_MIN_LENGTH = 15.0
"""Shortest ``lane_change`` path along the road [m] (slow cars): peak heading about 24 deg."""

LATERAL_GAIN = 0.4
"""Heading correction per metre of lateral error [1/m] of the path-tracking controller."""

MAX_PATH_HEADING = 0.5
"""Largest heading off the road direction [rad] the path-tracking controller asks for (29 deg)."""

MAX_LATERAL_ACCELERATION = 9.81
"""Tyre grip limit [m/s^2] (friction coefficient 1.0): the front-wheel angle is capped so that
v^2 tan(delta) / L stays below it, as no car can steer harder at speed."""

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
