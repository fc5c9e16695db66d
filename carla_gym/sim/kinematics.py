"""Ego motion: a kinematic bicycle model about the vehicle centre.

The model is written once against a small math namespace (`SCALAR` for Python floats,
`NUMPY` for arrays with a leading batch dimension), so a single `World` and a future
batched vector env share the same equations.

Per tick of length ``dt`` [s], with throttle t, brake b in [0, 1] and steer s in [-1, 1]:

* acceleration a = MAX_ACCELERATION * t - MAX_DECELERATION * b [m/s^2];
* speed v' = clip(v + a dt, 0, MAX_SPEED); while braking to a stop the car stops within the
  tick, and the distance covered is integrated exactly (so a full stop from v takes
  exactly v^2 / (2 MAX_DECELERATION) metres);
* front-wheel angle delta = s * EGO_MAX_STEER_ANGLE, capped by tyre grip so that
  v^2 tan(delta) / L <= MAX_LATERAL_ACCELERATION; slip angle beta = atan(tan(delta) / 2)
  (centre halfway between the axles);
* yaw rate = v_mean sin(beta) / (L / 2), position advances by the distance covered along
  the heading yaw + beta, both evaluated at the mid-tick heading.
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


def _wrap_scalar(angle: float) -> float:
    return angle if -math.pi <= angle < math.pi else math.atan2(math.sin(angle), math.cos(angle))


def _wrap_numpy(angle: np.ndarray) -> np.ndarray:
    return np.arctan2(np.sin(angle), np.cos(angle))


SCALAR = SimpleNamespace(
    sin=math.sin,
    cos=math.cos,
    tan=math.tan,
    atan=math.atan,
    atan2=math.atan2,
    sqrt=math.sqrt,
    clip=_clip,
    maximum=max,
    minimum=min,
    where=_where,
    wrap=_wrap_scalar,
)
"""Math namespace for one world held in Python floats (fast for a single env)."""

NUMPY = SimpleNamespace(
    sin=np.sin,
    cos=np.cos,
    tan=np.tan,
    atan=np.arctan,
    atan2=np.arctan2,
    sqrt=np.sqrt,
    clip=np.clip,
    maximum=np.maximum,
    minimum=np.minimum,
    where=np.where,
    wrap=_wrap_numpy,
)
"""Math namespace for a batch of worlds held in numpy arrays of shape (N,)."""


@dataclass
class EgoState:
    """Ego pose and speed; floats for one world or float64 arrays of shape (N,) for a batch.

    Attributes:
        x: Position along the road [m].
        y: Lateral position, positive to the right [m].
        yaw: Heading, positive turning right [rad].
        speed: Forward speed [m/s], >= 0.
    """

    x: float
    y: float
    yaw: float
    speed: float


def wrap_angle(angle, m=SCALAR):
    """Wrap an angle [rad] to [-pi, pi]."""
    return m.wrap(angle)


def step_ego(ego: EgoState, throttle, brake, steer, dt: float = C.DT, m=SCALAR) -> EgoState:
    """Advance the ego by one tick.

    Args:
        ego: State at the start of the tick (not modified).
        throttle: Throttle in [0, 1].
        brake: Brake in [0, 1].
        steer: Steer in [-1, 1], positive to the right.
        dt: Tick length [s].
        m: Math namespace, `SCALAR` for floats or `NUMPY` for arrays.

    Returns:
        The state at the end of the tick.
    """
    accel = C.MAX_ACCELERATION * throttle - C.MAX_DECELERATION * brake
    v0 = ego.speed
    v1 = m.clip(v0 + accel * dt, 0.0, C.MAX_SPEED)
    # Distance covered: exact for constant acceleration, including a stop within the tick.
    stopping = m.maximum(-accel, 1e-12)
    stops_in_tick = (accel < 0.0) & (v1 <= 0.0) if m is NUMPY else (accel < 0.0 and v1 <= 0.0)
    distance = m.where(stops_in_tick, v0 * v0 / (2.0 * stopping), 0.5 * (v0 + v1) * dt)
    grip = C.MAX_LATERAL_ACCELERATION * C.EGO_WHEELBASE / m.maximum(v0 * v0, 1e-9)  # max tan(delta)
    tan_delta = m.tan(steer * C.EGO_MAX_STEER_ANGLE)
    beta = m.atan(0.5 * m.clip(tan_delta, -grip, grip))
    dyaw = distance * m.sin(beta) / (0.5 * C.EGO_WHEELBASE)
    heading = ego.yaw + 0.5 * dyaw + beta
    return EgoState(
        x=ego.x + distance * m.cos(heading),
        y=ego.y + distance * m.sin(heading),
        yaw=wrap_angle(ego.yaw + dyaw, m),
        speed=v1,
    )


def steer_for_yaw_rate(yaw_rate, speed, m=SCALAR):
    """Steer command in [-1, 1] that yields ``yaw_rate`` [rad/s] at ``speed`` [m/s].

    Inverts the bicycle model above; returns 0 at standstill, saturates at +-1.
    """
    safe_speed = m.maximum(speed, 1e-6)
    sin_beta = m.clip(yaw_rate * 0.5 * C.EGO_WHEELBASE / safe_speed, -0.99, 0.99)
    beta = m.atan(sin_beta / m.sqrt(1.0 - sin_beta * sin_beta))
    delta = m.atan(2.0 * m.tan(beta))
    steer = m.clip(delta / C.EGO_MAX_STEER_ANGLE, -1.0, 1.0)
    return m.where(speed > 1e-6, steer, 0.0 * steer)
