"""Intelligent Driver Model (Treiber, Hennecke, Helbing 2000), vectorised over vehicles.

a = a_max [1 - (v / v0)^delta - (s* / s)^2],  s* = s0 + v T + v dv / (2 sqrt(a_max b)),

for a follower at speed v, desired speed v0, bumper-to-bumper gap s to its leader and approach
rate dv = v - v_leader (Treiber, Hennecke, Helbing 2000). Without a leader (s = inf) the interaction term
vanishes: a = a_max [1 - (v / v0)^delta]. In a steady platoon (dv = 0, a = 0) the gap is
s_e = (s0 + v T) / sqrt(1 - (v / v0)^delta).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from carla_gym.sim import constants as C


@dataclass(frozen=True)
class IDMParams:
    """IDM parameters; defaults are the IDM literature's typical urban values.

    Attributes:
        time_headway: T [s]: 1.5 (urban set).
        min_gap: s0 [m]: 2.0 (urban set).
        max_acceleration: a_max [m/s^2]: 1.5, the top of the urban 1.0-1.5.
        comfortable_deceleration: b [m/s^2]: 2.0, the top of the urban 1.5-2.0.
        delta: Acceleration exponent: 4.
    """

    time_headway: float = 1.5
    min_gap: float = 2.0
    max_acceleration: float = 1.5
    comfortable_deceleration: float = 2.0
    delta: float = 4.0

    def __post_init__(self) -> None:
        for name in ("time_headway", "min_gap", "max_acceleration", "comfortable_deceleration", "delta"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)!r}: must be > 0")


URBAN = IDMParams()
"""The urban parameter set (Treiber, Hennecke, Helbing 2000)."""


def idm_acceleration(speed, desired_speed, gap, leader_speed, p: IDMParams = URBAN) -> np.ndarray:
    """IDM acceleration [m/s^2] of each follower, elementwise over broadcast arrays.

    Args:
        speed: Follower speed v [m/s], >= 0.
        desired_speed: v0 [m/s], > 0 (the lane's speed limit).
        gap: Bumper-to-bumper gap s to the leader [m]; ``inf`` for a free road. Gaps at or
            below 0 (contact) are treated as 1 mm, which asks for the strongest braking.
        leader_speed: Leader speed [m/s] (ignored where the gap is inf).
        p: Parameters.

    Returns:
        Accelerations [m/s^2], at most a_max; unbounded below (the caller clips to the brakes).

    Raises:
        ValueError: If a desired speed is <= 0.
    """
    v = np.asarray(speed, dtype=np.float64)
    v0 = np.asarray(desired_speed, dtype=np.float64)
    if not (v0 > 0).all():
        raise ValueError("desired_speed must be > 0 [m/s]")
    s = np.maximum(np.asarray(gap, dtype=np.float64), 1e-3)
    dv = v - np.asarray(leader_speed, dtype=np.float64)
    free = 1.0 - (v / v0) ** p.delta
    s_star = p.min_gap + np.maximum(v * p.time_headway + v * dv / (2.0 * np.sqrt(p.max_acceleration
                                                                                 * p.comfortable_deceleration)), 0.0)
    interaction = np.where(np.isinf(s), 0.0, (s_star / s) ** 2)
    return p.max_acceleration * (free - interaction)


def equilibrium_gap(speed, desired_speed, p: IDMParams = URBAN) -> np.ndarray:
    """Steady platoon gap s_e = (s0 + v T) / sqrt(1 - (v/v0)^delta) [m], for 0 <= v < v0.

    Raises:
        ValueError: If a speed is outside [0, desired_speed).
    """
    v, v0 = np.asarray(speed, dtype=np.float64), np.asarray(desired_speed, dtype=np.float64)
    if not ((v >= 0) & (v < v0)).all():
        raise ValueError("speed must lie in [0, desired_speed) [m/s] for an equilibrium gap")
    return (p.min_gap + v * p.time_headway) / np.sqrt(1.0 - (v / v0) ** p.delta)


def pedals_for(acceleration) -> tuple[np.ndarray, np.ndarray]:
    """Throttle and brake in [0, 1] that ask the bicycle model for ``acceleration`` [m/s^2].

    Inverts `kinematics.step_ego`'s a = MAX_ACCELERATION t - MAX_DECELERATION b: exact within
    [-MAX_DECELERATION, MAX_ACCELERATION] (before the friction circle and the speed clip), clipped outside.

    Returns:
        ``(throttle, brake)``, float64 arrays like ``acceleration``.
    """
    a = np.asarray(acceleration, dtype=np.float64)
    return (np.minimum(np.maximum(a / C.MAX_ACCELERATION, 0.0), 1.0),
            np.minimum(np.maximum(-a / C.MAX_DECELERATION, 0.0), 1.0))
