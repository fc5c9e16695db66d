"""Vehicles as arrays: one row per vehicle (the ego included), stepped by the one bicycle model.

The motion model is `carla_gym.sim.kinematics.step_ego` evaluated with the `NUMPY` namespace on
whole columns: there is no second model, and every vehicle's row evolves exactly as a single
vehicle would (bit for bit; tests/test_traffic.py checks it). All columns may carry leading
batch dimensions (B, N) for a later batch of B worlds: the step is elementwise.

Each row steps with its own ``wheelbase`` column (`step_ego`'s ``wheelbase`` argument); every
vehicle shares the ego's steering lock `EGO_MAX_STEER_ANGLE`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import NUMPY, EgoState, step_ego

NPC_LENGTH_RANGE = (4.2, 5.0)
"""NPC car length range [m], drawn uniformly (typical CARLA car blueprints)."""

NPC_WIDTH_RANGE = (1.8, 2.2)
"""NPC car width range [m], drawn uniformly (typical CARLA car blueprints)."""

NPC_WHEELBASE_SHARE = C.EGO_WHEELBASE / C.EGO_LENGTH
"""Wheelbase as a share of length for NPCs (0.58, the Lincoln MKZ's 2.85 / 4.9; own choice)."""


@dataclass
class Vehicles:
    """State of N vehicles; every field is a float64 array of the same shape (..., N).

    Attributes:
        x: Centre x [m].
        y: Centre y [m] (positive to the right of +x, the simulator's frame).
        yaw: Heading [rad], positive turning right.
        speed: Speed of the centre [m/s], >= 0.
        beta: Slip angle [rad] (see `carla_gym.sim.kinematics`).
        length: Bounding-box length [m].
        width: Bounding-box width [m].
        wheelbase: Wheelbase [m], used by the step.
    """

    x: np.ndarray
    y: np.ndarray
    yaw: np.ndarray
    speed: np.ndarray
    beta: np.ndarray
    length: np.ndarray
    width: np.ndarray
    wheelbase: np.ndarray

    def __post_init__(self) -> None:
        shape = np.shape(self.x)
        for f in fields(self):
            value = np.asarray(getattr(self, f.name), dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"{f.name} has shape {value.shape}: every column must have x's shape {shape}")
            setattr(self, f.name, value)
        if (self.length <= 0).any() or (self.width <= 0).any():
            raise ValueError("length and width must be > 0 [m]")
        if (self.speed < 0).any():
            raise ValueError("speed must be >= 0 [m/s]")

    @classmethod
    def trusted(cls, **columns: np.ndarray) -> Vehicles:
        """Vehicles from columns known to be valid, without ``__post_init__``'s checks (a tick's own results).

        Args:
            **columns: Every field, each a float64 array of one shape, as the class requires.
        """
        v = object.__new__(cls)
        v.__dict__.update(columns)
        return v

    def __len__(self) -> int:
        return int(np.shape(self.x)[-1]) if np.ndim(self.x) else 1

    def xy(self) -> np.ndarray:
        """Centres as one (..., N, 2) array [m]."""
        return np.stack([self.x, self.y], axis=-1)


def make_vehicles(x, y, yaw, speed=0.0, rng: np.random.Generator | None = None, ego: bool = True) -> Vehicles:
    """N vehicles at standstill or cruising, with CARLA-like footprints.

    Row 0 is the ego (Lincoln MKZ, `EGO_LENGTH` x `EGO_WIDTH`) when ``ego``; the other rows are
    NPCs whose length and width are drawn uniformly from `NPC_LENGTH_RANGE` and
    `NPC_WIDTH_RANGE` with ``rng`` (same seed, same sizes).

    Args:
        x: Centre x, (N,) [m].
        y: Centre y, (N,) [m].
        yaw: Heading, (N,) [rad].
        speed: Speed, scalar or (N,) [m/s], >= 0.
        rng: Generator for the NPC sizes; required when there is an NPC row.
        ego: Whether row 0 is the ego.

    Returns:
        The vehicles, slip 0.

    Raises:
        ValueError: If an NPC row exists and ``rng`` is None, or the shapes differ.
    """
    x = np.atleast_1d(np.asarray(x, dtype=np.float64))
    n = x.shape[-1]
    n_npc = n - 1 if ego else n
    length = np.full(n, C.EGO_LENGTH)
    width = np.full(n, C.EGO_WIDTH)
    if n_npc > 0:
        if rng is None:
            raise ValueError(f"rng=None: a numpy Generator is needed to draw {n_npc} NPC sizes")
        length[n - n_npc:] = rng.uniform(*NPC_LENGTH_RANGE, size=n_npc)
        width[n - n_npc:] = rng.uniform(*NPC_WIDTH_RANGE, size=n_npc)
    wheelbase = length * NPC_WHEELBASE_SHARE
    if ego and n:
        wheelbase[0] = C.EGO_WHEELBASE
    zeros = np.zeros(n)
    return Vehicles(x, np.asarray(y, dtype=np.float64) + zeros, np.asarray(yaw, dtype=np.float64) + zeros,
                    np.asarray(speed, dtype=np.float64) + zeros, zeros.copy(), length, width, wheelbase)


def step_vehicles(v: Vehicles, throttle, brake, steer, dt: float = C.DT) -> Vehicles:
    """Advance all vehicles by one tick with the bicycle model of `carla_gym.sim.kinematics`.

    Args:
        v: State at the start of the tick (not modified).
        throttle: Throttle in [0, 1], broadcastable to v's shape.
        brake: Brake in [0, 1], same.
        steer: Steer in [-1, 1], positive to the right, same.
        dt: Tick length [s], > 0.

    Returns:
        The state at the end of the tick (sizes carried over).

    Raises:
        ValueError: If a pedal is outside [0, 1], the steer outside [-1, 1] or dt <= 0.
    """
    throttle, brake, steer = (np.asarray(a, dtype=np.float64) for a in (throttle, brake, steer))
    for name, a, lo in (("throttle", throttle, 0.0), ("brake", brake, 0.0), ("steer", steer, -1.0)):
        if np.count_nonzero((a >= lo) & (a <= 1.0)) != a.size:  # NaN fails too
            raise ValueError(f"{name} has values outside [{lo:g}, 1]")
    if not dt > 0:
        raise ValueError(f"dt={dt!r}: must be > 0 [s]")
    s = step_ego(EgoState(v.x, v.y, v.yaw, v.speed, v.beta), throttle, brake, steer, dt, NUMPY, v.wheelbase)
    return Vehicles.trusted(x=s.x, y=s.y, yaw=s.yaw, speed=s.speed, beta=np.asarray(s.beta, dtype=np.float64),
                            length=v.length, width=v.width, wheelbase=v.wheelbase)
