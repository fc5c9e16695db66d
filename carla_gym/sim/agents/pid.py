"""CARLA's vehicle PID controllers as functions over arrays (one row per agent).

Two PID loops turn a target speed and a target waypoint into pedals and steering, with the
parameters of CARLA's LocalPlanner (CARLA's ``agents/navigation``):

- Longitudinal: the error is target speed minus current speed, both in **km/h** (CARLA's PIDs
  take km/h, as its ``get_speed`` returns); K_P / K_I / K_D = 1.5 / 0.05 / 0.2. A positive
  output is throttle (capped at 0.75), a negative one brake (capped at 0.3).
- Lateral: the error is the signed angle [rad] between the vehicle's heading (its yaw, not its
  course) and the vector from the vehicle to the target waypoint, positive when the waypoint
  lies to the right (the frame of `carla_gym.sim.constants`: y to the right, yaw and steer
  positive to the right); K_P / K_I / K_D = 1.95 / 0.05 / 0.2; the output is the steer, capped
  at 0.8 and changed by at most 0.1 per tick.

Each PID keeps its last `PID_BUFFER` errors. On a tick it appends the new error e, then outputs
clip(K_P e + K_D (e - e_prev) / dt + K_I sum(buffer) dt, -1, 1), where the derivative and
integral terms are 0 while the buffer holds a single error (the first tick).

All arrays have shape (N,) (or any common leading shape): N agents are stepped by one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CONTROL_DT = 0.05
"""Control period [s]. CARLA LocalPlanner default."""

PID_BUFFER = 10
"""Errors each PID remembers for its integral term. CARLA's PID controllers (a 10-error queue)."""

STEER_RATE_LIMIT = 0.1
"""Largest change of the steer command per tick. CARLA's vehicle PID controller."""

MAX_THROTTLE = 0.75
"""Throttle cap of the longitudinal PID. CARLA LocalPlanner default."""

MAX_BRAKE = 0.3
"""Brake cap of the longitudinal PID. CARLA LocalPlanner default."""

MAX_STEER = 0.8
"""Steer cap of the lateral PID. CARLA LocalPlanner default."""


def _clip(x, lo, hi) -> np.ndarray:
    """``np.clip(x, lo, hi)`` as two ufuncs, at half its call overhead on small arrays.

    ``np.clip``'s values, NaN included (checked bit for bit with numpy 2.4, signed zeros and array bounds
    included), except a -0.0 against a scalar bound of 0: +0.0 here, -0.0 from ``np.clip``, so callers
    with such a bound keep ``np.clip``.
    """
    return np.minimum(np.maximum(x, lo), hi)


@dataclass(frozen=True)
class PidGains:
    """Gains of one PID loop.

    Attributes:
        k_p: Proportional gain (output per unit of error).
        k_i: Integral gain (output per unit of error times seconds).
        k_d: Derivative gain (output per unit of error per second).
        dt: Control period [s], > 0.

    Raises:
        ValueError: If a gain is negative or not finite, or ``dt`` is not positive.
    """

    k_p: float
    k_i: float
    k_d: float
    dt: float = CONTROL_DT

    def __post_init__(self):
        for name in ("k_p", "k_i", "k_d"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0.0:
                raise ValueError(f"PID gain {name}={value!r} must be finite and >= 0")
        if not np.isfinite(self.dt) or self.dt <= 0.0:
            raise ValueError(f"PID dt={self.dt!r} must be finite and > 0 [s]")


LATERAL_GAINS = PidGains(k_p=1.95, k_i=0.05, k_d=0.2)
"""Steering PID on the heading error [rad]. CARLA LocalPlanner defaults."""

LONGITUDINAL_GAINS = PidGains(k_p=1.5, k_i=0.05, k_d=0.2)
"""Speed PID on the speed error [km/h]. CARLA LocalPlanner defaults."""


@dataclass(frozen=True)
class PidState:
    """Memory of N PID loops.

    Attributes:
        errors: Last `PID_BUFFER` errors, oldest first, float64 of shape (N, PID_BUFFER); zeros
            where fewer errors have been seen.
        count: Errors seen so far, capped at `PID_BUFFER`, int64 of shape (N,).
    """

    errors: np.ndarray
    count: np.ndarray

    @classmethod
    def zeros(cls, shape) -> PidState:
        """Fresh state (no error seen) for agents of leading shape ``shape`` (e.g. ``(N,)``)."""
        shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
        return cls(errors=np.zeros(shape + (PID_BUFFER,)), count=np.zeros(shape, dtype=np.int64))


def pid_step(state: PidState, error, gains: PidGains) -> tuple[np.ndarray, PidState]:
    """One tick of N PID loops (the rule in this module's docstring).

    Args:
        state: Memory before the tick (not modified).
        error: New errors, float64 of shape (N,), in the loop's unit (km/h or rad).
        gains: The loop's gains and period.

    Returns:
        ``(output, state)``: the outputs in [-1, 1], shape (N,), and the memory after the tick.

    Raises:
        ValueError: If ``error``'s shape is not the memory's leading shape (N,).
    """
    error = np.asarray(error, dtype=np.float64)
    previous = state.errors
    if error.shape != previous.shape[:-1]:
        raise ValueError(f"error has shape {error.shape}; need {previous.shape[:-1]}, one per PID loop")
    errors = np.empty_like(previous)
    errors[..., :-1] = previous[..., 1:]
    errors[..., -1] = error
    count = np.minimum(state.count + 1, PID_BUFFER)
    proportional = gains.k_p * error
    full = proportional + gains.k_d * ((error - previous[..., -1]) / gains.dt) + gains.k_i * (errors.sum(-1) * gains.dt)
    if not state.count.min(initial=1) >= 1:
        # Loops on their first tick: no derivative or integral term (k_d * 0 + k_i * 0 adds exactly +0.0).
        full = np.where(count >= 2, full, proportional + 0.0)
    return _clip(full, -1.0, 1.0), PidState(errors=errors, count=count)


def heading_error(x, y, yaw, target_x, target_y) -> np.ndarray:
    """Signed angle [rad] from the heading ``yaw`` to the vector towards the target, in [-pi, pi].

    CARLA's lateral error: the angle between the vehicle's forward vector and the vector to the
    target waypoint, positive when the target is to the right (y to the right in this frame); 0
    when the target is at the vehicle's position. Arrays of shape (N,); positions [m], yaw [rad].
    """
    dx, dy = np.asarray(target_x) - x, np.asarray(target_y) - y
    cos, sin = np.cos(yaw), np.sin(yaw)
    return np.arctan2(cos * dy - sin * dx, cos * dx + sin * dy)


@dataclass(frozen=True)
class ControllerState:
    """Memory of N vehicle controllers (CARLA's vehicle PID controller).

    Attributes:
        longitudinal: Speed PID memory.
        lateral: Steering PID memory.
        steer: Steer applied on the previous tick, float64 of shape (N,) (for the rate limit).
    """

    longitudinal: PidState
    lateral: PidState
    steer: np.ndarray

    @classmethod
    def zeros(cls, shape) -> ControllerState:
        """Fresh controllers (wheels straight) for agents of leading shape ``shape``."""
        shape = tuple(np.atleast_1d(shape)) if not isinstance(shape, tuple) else shape
        return cls(PidState.zeros(shape), PidState.zeros(shape), np.zeros(shape))


def vehicle_control(
    state: ControllerState,
    speed_kmh,
    target_speed_kmh,
    heading_error_rad,
    max_throttle: float = MAX_THROTTLE,
    max_brake: float = MAX_BRAKE,
    max_steer: float = MAX_STEER,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ControllerState]:
    """Pedals and steer of N vehicles for one tick.

    Args:
        state: Controller memory before the tick (not modified).
        speed_kmh: Current speeds [km/h], shape (N,).
        target_speed_kmh: Target speeds [km/h], shape (N,).
        heading_error_rad: Lateral errors [rad] from `heading_error`, shape (N,).
        max_throttle: Throttle cap in [0, 1].
        max_brake: Brake cap in [0, 1].
        max_steer: Steer cap in [0, 1].

    Returns:
        ``(throttle, brake, steer, state)``: throttle in [0, max_throttle] and brake in
        [0, max_brake] (never both non-zero), steer in [-max_steer, max_steer] within
        `STEER_RATE_LIMIT` of the previous tick's, each of shape (N,), and the memory after.
    """
    speed_error = np.asarray(target_speed_kmh, dtype=np.float64) - speed_kmh
    accel, longitudinal = pid_step(state.longitudinal, speed_error, LONGITUDINAL_GAINS)
    steer_wanted, lateral = pid_step(state.lateral, heading_error_rad, LATERAL_GAINS)
    throttle = np.where(accel >= 0.0, np.minimum(accel, max_throttle), 0.0)
    brake = np.where(accel < 0.0, np.minimum(-accel, max_brake), 0.0)
    steer = _clip(steer_wanted, state.steer - STEER_RATE_LIMIT, state.steer + STEER_RATE_LIMIT)
    steer = np.clip(steer, -max_steer, max_steer) if max_steer == 0.0 else _clip(steer, -max_steer, max_steer)
    return throttle, brake, steer, ControllerState(longitudinal, lateral, steer)
