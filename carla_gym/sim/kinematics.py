"""Ego motion: a kinematic bicycle model about the vehicle centre, bounded by one friction circle.

The model is written once against a small math namespace (`SCALAR` for Python floats,
`NUMPY` for arrays with a leading batch dimension), so a single `World`, the batched worlds of
`carla_gym.sim.batch` and the town traffic share the same equations, bit for bit.

The state is the centre's position, the heading (yaw), the speed and the slip angle beta:
the centre moves with velocity vector V = speed * (cos(yaw + beta), sin(yaw + beta)), so its
direction of travel (the course) is yaw + beta. Per tick of length ``dt`` [s], with throttle t,
brake b in [0, 1] and steer s in [-1, 1]:

1. The tyres ask for the kinematic (no-slip) motion: acceleration
   a = MAX_ACCELERATION * t - MAX_DECELERATION * b [m/s^2], speed v' = clip(v + a dt, 0,
   MAX_SPEED); front-wheel angle delta = s * EGO_MAX_STEER_ANGLE, capped so that steady
   cornering v^2 tan(delta) / L stays within `MAX_GRIP_ACCELERATION`; slip beta' =
   atan(tan(delta) / 2) (centre halfway between the axles); yaw change = distance *
   sin(beta') / (L / 2); so the requested end velocity is v' along yaw + yaw change + beta'.
2. Friction circle: the velocity change the tyres can deliver in one tick is at most
   `MAX_GRIP_ACCELERATION` * dt, whatever its direction (braking, cornering, a change of slip,
   or all at once). A larger request is cut to the same share k < 1 of each part: the speed
   change, the yaw change and the slip change (the car slides: its course lags the wheels),
   with k = grip dt / sqrt(dv^2 + v max(v, v') turn^2) for a requested speed change dv and
   course change ``turn``: the exact change, sqrt(k^2 dv^2 + 4 v (v + k dv) sin^2(k turn / 2)),
   is at most k times that root, so it lands inside the circle (on its edge but for
   sin(x) < x). Braking and steering give up the same fraction; a slide neither scrubs nor
   gains speed beyond the pedals' share, and the slip moves the share k of the way from its
   old value towards the steering geometry's.
3. Position advances by the mean of the start and end velocity vectors times dt (exact for the
   constant acceleration of the tick), so the acceleration measured from consecutive positions
   is bounded by the same circle. A car that brakes to a stop within the tick stops on its
   course after exactly v^2 / (2 |a|) metres (so a full stop from v takes v^2 / (2
   MAX_DECELERATION) metres, as before).

Inside the circle (k = 1) the model is the plain kinematic bicycle, and straight-line closed
forms (constant speed coasting, v^2 / (2 a) braking distances) hold to the last bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from carla_gym.sim import constants as C


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def _where(cond: bool, a: float, b: float) -> float:
    return a if cond else b


def _not(cond: bool) -> bool:
    return not cond


def _wrap_scalar(angle: float) -> float:
    return angle if -math.pi <= angle < math.pi else _atan2(_sin(angle), _cos(angle))


def _clip_numpy(a, lo, hi):
    """`numpy.clip` as two ufuncs: the same values (NaN stays NaN), at half the call overhead on small arrays."""
    return np.minimum(np.maximum(a, lo), hi)


def _wrap_numpy(angle: np.ndarray) -> np.ndarray:
    outside = ~((angle >= -math.pi) & (angle < math.pi))  # NaN counts as outside, as in `_wrap_scalar`
    if not outside.any():
        return angle
    angle = angle.copy()
    angle[outside] = np.arctan2(np.sin(angle[outside]), np.cos(angle[outside]))
    return angle


def _sin(x: float) -> float:
    return x if x == 0.0 else float(np.sin(x))  # sin(+-0) = +-0 in every IEEE implementation


def _cos(x: float) -> float:
    return 1.0 if x == 0.0 else float(np.cos(x))


def _tan(x: float) -> float:
    return x if x == 0.0 else float(np.tan(x))


def _atan(x: float) -> float:
    return x if x == 0.0 else float(np.arctan(x))


def _atan2(y: float, x: float) -> float:
    return float(np.arctan2(y, x))


SCALAR = SimpleNamespace(
    sin=_sin,
    cos=_cos,
    tan=_tan,
    atan=_atan,
    atan2=_atan2,
    sqrt=math.sqrt,
    floor=math.floor,
    clip=_clip,
    maximum=max,
    minimum=min,
    where=_where,
    not_=_not,
    wrap=_wrap_scalar,
)
"""Math namespace for one world held in Python (or numpy) scalars.

Transcendental functions are numpy's ufuncs on scalars, not `math`'s: numpy's SIMD loops and the
C library may differ in the last bit, and a world held in scalars must compute the same bits as
the same world in a row of a batch (`NUMPY`). Their results are turned back into Python floats,
whose arithmetic is faster than numpy scalars' and gives the same IEEE results. Square roots are
correctly rounded in both, and selections (`where`, `clip`, `maximum`) are exact, so Python's
cheaper versions serve."""

NUMPY = SimpleNamespace(
    sin=np.sin,
    cos=np.cos,
    tan=np.tan,
    atan=np.arctan,
    atan2=np.arctan2,
    sqrt=np.sqrt,
    floor=np.floor,
    clip=_clip_numpy,
    maximum=np.maximum,
    minimum=np.minimum,
    where=np.where,
    not_=np.logical_not,
    wrap=_wrap_numpy,
)
"""Math namespace for a batch of worlds held in numpy arrays of shape (N,): row i computes the
same bits as world i held in scalars (`SCALAR`)."""


@dataclass
class EgoState:
    """Ego pose and motion; floats for one world or float64 arrays of shape (N,) for a batch.

    Attributes:
        x: Position along the road [m].
        y: Lateral position, positive to the right [m].
        yaw: Heading, positive turning right [rad].
        speed: Speed of the centre [m/s], >= 0.
        beta: Slip angle [rad]: the centre travels along ``yaw + beta`` (the course). It is the
            steering geometry's atan(tan(delta) / 2) while the tyres grip, and between its
            previous value and that while they slide; 0 when driving straight.
    """

    x: float
    y: float
    yaw: float
    speed: float
    beta: float = 0.0

    def velocity(self, m=None):
        """Velocity vector of the centre ``(vx, vy)`` [m/s] (floats or arrays of shape (N,))."""
        m = m or (NUMPY if isinstance(self.speed, np.ndarray) else SCALAR)
        course = self.yaw + self.beta
        return self.speed * m.cos(course), self.speed * m.sin(course)


def wrap_angle(angle, m=SCALAR):
    """Wrap an angle [rad] to [-pi, pi]."""
    return m.wrap(angle)


def step_ego(ego: EgoState, throttle, brake, steer, dt: float = C.DT, m=SCALAR,
             wheelbase=C.EGO_WHEELBASE) -> EgoState:
    """Advance the ego by one tick (the model in this module's docstring).

    Args:
        ego: State at the start of the tick (not modified).
        throttle: Throttle in [0, 1].
        brake: Brake in [0, 1].
        steer: Steer in [-1, 1], positive to the right.
        dt: Tick length [s].
        m: Math namespace, `SCALAR` for floats or `NUMPY` for arrays.
        wheelbase: Wheelbase L [m], > 0: a float, or an array like the state's for one per vehicle.
            Default `EGO_WHEELBASE` (the Lincoln MKZ's); every vehicle shares the ego's steering lock.

    Returns:
        The state at the end of the tick; its velocity differs from the start's by at most
        `MAX_GRIP_ACCELERATION` * dt.
    """
    grip = C.MAX_GRIP_ACCELERATION
    # 1. The kinematic request: speed, distance (exact for a stop within the tick), slip, yaw.
    accel = C.MAX_ACCELERATION * throttle - C.MAX_DECELERATION * brake
    v0 = ego.speed
    v1 = m.clip(v0 + accel * dt, 0.0, C.MAX_SPEED)
    stops_in_tick = (accel < 0.0) & (v1 <= 0.0) if m is NUMPY else (accel < 0.0 and v1 <= 0.0)
    # Distance at the start speed's share: all of it when the car stops within the tick (v1 = 0).
    first = m.where(stops_in_tick, v0 * v0 / (2.0 * m.maximum(-accel, 1e-12)), 0.5 * v0 * dt)
    distance = first + 0.5 * v1 * dt
    max_tan_delta = grip * wheelbase / m.maximum(v0 * v0, 1e-9)  # steady cornering grip
    tan_delta = m.tan(steer * C.EGO_MAX_STEER_ANGLE)
    beta1 = m.atan(0.5 * m.clip(tan_delta, -max_tan_delta, max_tan_delta))
    dyaw = distance * m.sin(beta1) / (0.5 * wheelbase)
    turn = dyaw + beta1 - ego.beta  # course change
    # 2. The friction circle. |V' - V|^2 = dv^2 + 4 v0 v' sin^2(turn / 2) for a speed change dv to v' and
    # a course change `turn`; with a share k of both it is at most k^2 (dv^2 + v0 max(v0, v') turn^2).
    dv = v1 - v0
    reach2 = (grip * dt) ** 2
    # The whole request is inside the circle. |chord| <= |turn|, so where the turn passes the test the
    # chord does too: "the turn passes or the chord passes" (one world skips the sine where the turn passes).
    dv2 = dv * dv
    grips = dv2 + v0 * v1 * turn * turn <= reach2
    if m is not SCALAR:
        chord = 2.0 * m.sin(0.5 * turn)
        grips = grips | (dv2 + v0 * v1 * chord * chord <= reach2)
    elif not grips:
        chord = 2.0 * m.sin(0.5 * turn)
        grips = dv2 + v0 * v1 * chord * chord <= reach2
    bound = m.sqrt(dv * dv + v0 * m.maximum(v0, v1) * turn * turn)  # >= the exact change, so the share is < 1
    share = m.where(grips, 1.0, grip * dt / m.maximum(bound, 1e-12))
    speed = v0 + share * dv
    course0 = ego.yaw + ego.beta
    course1 = course0 + share * turn
    # 3. Position: the mean of the start and end velocities (the stop case: exact distance, speed 0).
    last = 0.5 * speed * dt
    return EgoState(
        x=ego.x + first * m.cos(course0) + last * m.cos(course1),
        y=ego.y + first * m.sin(course0) + last * m.sin(course1),
        yaw=wrap_angle(ego.yaw + share * dyaw, m),
        speed=speed,
        beta=ego.beta + share * (beta1 - ego.beta),
    )


_MAX_BETA = math.atan(0.5 * math.tan(C.EGO_MAX_STEER_ANGLE))
"""Largest slip angle the steering geometry gives [rad] (full steer, centre halfway between the axles)."""


def steer_for_course(turn, distance, m=SCALAR, wheelbase=C.EGO_WHEELBASE):
    """Steer command in [-1, 1] that turns the course by ``turn`` [rad] within one tick.

    Inverts the kinematic request of `step_ego` for a car that covers ``distance`` [m] this
    tick: the course at the end of the tick is yaw + distance sin(beta) / (L / 2) + beta, so
    beta solves beta + k sin(beta) = turn with k = distance / (L / 2) (three Newton steps from
    turn / (1 + k); the left side grows monotonically). Saturates at +-1; at standstill it
    sets the wheels so that the car sets off along the wanted course.

    Args:
        turn: Wanted course at the end of the tick minus the current yaw [rad] (floats, or
            arrays of shape (N,) with ``m=NUMPY``).
        distance: Distance the car covers this tick [m], >= 0.
        m: Math namespace, `SCALAR` or `NUMPY`.
        wheelbase: Wheelbase L [m] (float or like ``turn``), default `EGO_WHEELBASE`.

    Returns:
        The steer command, like ``turn``.
    """
    k = distance / (0.5 * wheelbase)
    beta = m.clip(turn / (1.0 + k), -_MAX_BETA, _MAX_BETA)
    for _ in range(3):
        step = m.clip(beta - (beta + k * m.sin(beta) - turn) / (1.0 + k * m.cos(beta)), -_MAX_BETA, _MAX_BETA)
        if (step == beta) if m is SCALAR else np.array_equal(step, beta):
            break  # a fixed point (for every row): the remaining steps would return it again, bit for bit
        beta = step
    return m.clip(m.atan(2.0 * m.tan(beta)) / C.EGO_MAX_STEER_ANGLE, -1.0, 1.0)
