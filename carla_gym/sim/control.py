"""Persistent vehicle controls and the controllers behind the tool actions.

As in CARLA, a command stays applied until another replaces it: after ``emergency_stop`` the
brake stays on during later ``observe`` ticks. What each action changes:

| action           | longitudinal                              | lateral                                  |
|------------------|-------------------------------------------|------------------------------------------|
| observe          | unchanged                                 | unchanged                                |
| control          | throttle, brake as given; cruise off      | manual steer as given                    |
| emergency_stop   | throttle 0, brake 1; cruise off           | unchanged (manual steer is reset to 0)   |
| brake_vehicle    | throttle 0, brake = intensity; cruise off | unchanged (manual steer is reset to 0)   |
| maintain_speed   | cruise control to the target [km/h]       | unchanged (manual steer is reset to 0)   |
| lane_change      | unchanged                                 | track a path to the adjacent lane centre |

Lateral "tracking" is the default: the car follows a reference path y_ref(t) that is its lane
centre (lane keeping) until a ``lane_change`` replaces it with a minimum-jerk path from the
current position to the adjacent lane centre over `LANE_CHANGE_DURATION`, after which it keeps
the new lane. The tracking controller is closed loop: each tick it steers towards the heading
that makes the lateral error decay at `LATERAL_GAIN`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import EgoState, steer_for_yaw_rate, wrap_angle


@dataclass
class Controls:
    """Controller state of one ego vehicle (persists across ticks).

    Attributes:
        throttle: Applied throttle in [0, 1] (ignored while cruising).
        brake: Applied brake in [0, 1] (ignored while cruising).
        steer: Manual steer in [-1, 1], used only when ``manual_steer`` is True.
        manual_steer: True after a ``control`` action: the tracking controller is off.
        cruise_kmh: ``maintain_speed`` target [km/h], or None when cruise control is off.
        path_y0: Lateral start of the reference path [m].
        path_y1: Lateral end of the reference path (a lane centre) [m].
        path_t0: Simulation time at which the reference path starts [s].
        path_duration: Duration of the reference path [s] (0 for lane keeping).
    """

    throttle: float = 0.0
    brake: float = 0.0
    steer: float = 0.0
    manual_steer: bool = False
    cruise_kmh: float | None = None
    path_y0: float = 0.0
    path_y1: float = 0.0
    path_t0: float = 0.0
    path_duration: float = 0.0

    def keep_lane(self, lane_y: float) -> None:
        """Track the lane centre at ``lane_y`` [m] from now on."""
        self.manual_steer = False
        self.path_y0 = self.path_y1 = lane_y
        self.path_duration = 0.0

    def change_lane(self, y_now: float, target_y: float, time_now: float) -> None:
        """Start a minimum-jerk path from ``y_now`` to ``target_y`` [m] at ``time_now`` [s]."""
        self.manual_steer = False
        self.path_y0, self.path_y1 = y_now, target_y
        self.path_t0 = time_now
        self.path_duration = C.LANE_CHANGE_DURATION

    def set_pedals(self, throttle: float, brake: float) -> None:
        """Apply throttle and brake in [0, 1] and switch cruise control off."""
        self.throttle, self.brake, self.cruise_kmh = throttle, brake, None

    def release_manual_steer(self) -> None:
        """Centre a manual steering wheel, as CARLA's brake and cruise commands do (steer 0)."""
        if self.manual_steer:
            self.steer = 0.0

    def reference(self, time_now: float) -> tuple[float, float]:
        """Reference lateral position [m] and lateral velocity [m/s] at ``time_now`` [s]."""
        if self.path_duration <= 0.0:
            return self.path_y1, 0.0
        tau = min(max((time_now - self.path_t0) / self.path_duration, 0.0), 1.0)
        delta = self.path_y1 - self.path_y0
        shape = tau**3 * (10.0 - 15.0 * tau + 6.0 * tau * tau)
        slope = 30.0 * tau * tau * (1.0 - tau) ** 2 / self.path_duration
        return self.path_y0 + delta * shape, delta * slope

    def commands(self, ego: EgoState, time_now: float, dt: float = C.DT) -> tuple[float, float, float]:
        """Throttle, brake and steer to apply during the tick that starts at ``time_now`` [s]."""
        if self.cruise_kmh is None:
            throttle, brake = self.throttle, self.brake
        else:
            error = self.cruise_kmh - ego.speed * C.KMH_PER_MS
            throttle = min(C.CRUISE_LIMIT, C.CRUISE_GAIN * error) if error > C.CRUISE_DEADBAND_KMH else 0.0
            brake = min(C.CRUISE_LIMIT, -C.CRUISE_GAIN * error) if error < -C.CRUISE_DEADBAND_KMH else 0.0
        if self.manual_steer:
            return throttle, brake, self.steer
        if self.path_duration == 0.0 and ego.y == self.path_y1 and ego.yaw == 0.0:
            return throttle, brake, 0.0  # on the lane centre, heading along it: nothing to correct
        y_ref, vy_ref = self.reference(time_now)
        vy_wanted = vy_ref + C.LATERAL_GAIN * (y_ref - ego.y)
        yaw_wanted = math.atan2(vy_wanted, max(ego.speed, 0.5))
        yaw_rate = wrap_angle(yaw_wanted - ego.yaw) / dt
        return throttle, brake, steer_for_yaw_rate(yaw_rate, ego.speed)
