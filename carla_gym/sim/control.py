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

Lateral "tracking" is the default: the car follows a reference path y_ref(x) on the road that
is its lane centre (lane keeping) until a ``lane_change`` replaces it with a minimum-jerk path
from the current position to the adjacent lane centre (over `LANE_CHANGE_DURATION` seconds at
the current speed, at least `LANE_CHANGE_MIN_LENGTH` metres), after which it keeps the new
lane. The tracking controller is closed loop: each tick it steers so that the car's course (its
direction of travel, yaw + slip) at the end of the tick is the path's heading one tick ahead plus
a correction of the lateral error (`LATERAL_GAIN` per metre), never more than
`MAX_PATH_HEADING` off the road direction; it steers the course rather than the yaw because the
centre travels along the course (at low speed the slip is large). A car that brakes during a
lane change stays on the same curve and stops part-way; one friction circle shares the grip
between the brakes and the curve (see `kinematics`).

``maintain_speed`` uses upstream's cruise gains; inside the dead band it coasts (which holds
the speed, there is no drag), and a target within the dead band of 0 km/h brakes to a stop.

Like `carla_gym.sim.kinematics`, every rule here is written once against a math namespace: a
`Controls` holds floats for one car (``m=SCALAR``) or arrays of shape (N,) for a batch of cars
(``m=NUMPY``, `carla_gym.sim.batch`), and row i of a batch computes the same bits as car i alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import SCALAR, EgoState, steer_for_course


@dataclass
class Controls:
    """Controller state of one ego vehicle (floats), or of N (arrays of shape (N,)); persists across ticks.

    Attributes:
        throttle: Applied throttle in [0, 1] (ignored while cruising).
        brake: Applied brake in [0, 1] (ignored while cruising).
        steer: Manual steer in [-1, 1], used only when ``manual_steer`` is True.
        manual_steer: True after a ``control`` action: the tracking controller is off.
        cruise: True while ``maintain_speed`` cruise control is on.
        cruise_kmh: ``maintain_speed`` target [km/h] (read only while ``cruise`` is on).
        path_x0: Position along the road where the reference path starts [m].
        path_y0: Lateral start of the reference path [m].
        path_y1: Lateral end of the reference path (a lane centre) [m].
        path_length: Length of the reference path along the road [m] (0 for lane keeping).
        path_slope0: Slope dy/dx of the path at its start (the car's heading then).
    """

    throttle: float = 0.0
    brake: float = 0.0
    steer: float = 0.0
    manual_steer: bool = False
    cruise: bool = False
    cruise_kmh: float = 0.0
    path_x0: float = 0.0
    path_y0: float = 0.0
    path_y1: float = 0.0
    path_length: float = 0.0
    path_slope0: float = 0.0

    def change_lane(self, x_now, y_now, yaw_now, target_y, speed, m=SCALAR) -> None:
        """Start a smooth path from the car's pose to the lane centre ``target_y`` [m].

        The path is a quintic in the distance along the road that starts at the car's position
        and heading with no curvature and ends on the lane centre, parallel to the road, with no
        curvature (the minimum-jerk profile when the car starts straight). It spans
        ``max(speed * LANE_CHANGE_DURATION, LANE_CHANGE_MIN_LENGTH, grip length)`` metres,
        where the grip length keeps the path's peak lateral acceleration within
        `LANE_CHANGE_GRIP_SHARE` of `MAX_GRIP_ACCELERATION` (longer than one lane's
        `LANE_CHANGE_DURATION` for two lanes at once, or a reversal while still moving
        sideways); a car that brakes meanwhile stays on the same curve.

        Args:
            x_now: Position along the road [m] (float, or (N,) with ``m=NUMPY``; likewise below).
            y_now: Lateral position [m].
            yaw_now: Heading [rad].
            target_y: Lateral position of the target lane centre [m].
            speed: Speed [m/s].
            m: Math namespace (`carla_gym.sim.kinematics.SCALAR` or ``NUMPY``).
        """
        self.manual_steer = False if m is SCALAR else np.zeros(np.shape(x_now), dtype=bool)
        self.path_x0, self.path_y0, self.path_y1 = x_now, y_now, target_y
        self.path_slope0 = m.tan(m.clip(yaw_now, -C.MAX_PATH_HEADING, C.MAX_PATH_HEADING))
        # Minimum-jerk peak lateral acceleration is MIN_JERK_PEAK * dy / T^2 over T = L / v; a car already
        # moving sideways needs to cover about the drift of its heading over the usual duration too.
        drift = abs(self.path_slope0) * speed * C.LANE_CHANGE_DURATION
        planned = C.LANE_CHANGE_GRIP_SHARE * C.MAX_GRIP_ACCELERATION
        grip_time = m.sqrt(C.MIN_JERK_PEAK * (abs(target_y - y_now) + drift) / planned)
        self.path_length = m.maximum(m.maximum(speed * C.LANE_CHANGE_DURATION, C.LANE_CHANGE_MIN_LENGTH),
                                     speed * grip_time)

    def set_pedals(self, throttle: float, brake: float) -> None:
        """Apply throttle and brake in [0, 1] and switch cruise control off (one car)."""
        self.throttle, self.brake, self.cruise = throttle, brake, False

    def set_cruise(self, target_kmh: float) -> None:
        """Switch ``maintain_speed`` cruise control on with target ``target_kmh`` [km/h] (one car)."""
        self.cruise, self.cruise_kmh = True, target_kmh

    def reference(self, x, m=SCALAR):
        """Reference lateral position [m] and slope dy/dx of the path at road position ``x`` [m].

        Args:
            x: Position along the road [m] (float, or (N,) with ``m=NUMPY``).
            m: Math namespace.

        Returns:
            ``(y, slope)``, like ``x``.
        """
        keep = self.path_length <= 0.0
        if m is SCALAR and keep:
            return self.path_y1, 0.0
        length = m.where(keep, 1.0, self.path_length)
        tau = (x - self.path_x0) / length
        flat = keep | (tau >= 1.0)
        tau = m.maximum(tau, 0.0)
        # y(tau) = y0 + m0 tau + a3 tau^3 + a4 tau^4 + a5 tau^5 with y(1) = y1, y'(1) = y''(0) = y''(1) = 0.
        m0 = self.path_slope0 * length
        rest = self.path_y1 - self.path_y0 - m0
        a3, a4, a5 = 10.0 * rest + 4.0 * m0, -15.0 * rest - 7.0 * m0, 6.0 * rest + 3.0 * m0
        t2 = tau * tau
        y = self.path_y0 + m0 * tau + t2 * tau * (a3 + tau * (a4 + tau * a5))
        dy_dtau = m0 + t2 * (3.0 * a3 + tau * (4.0 * a4 + tau * 5.0 * a5))
        return m.where(flat, self.path_y1, y), m.where(flat, 0.0, dy_dtau / length)

    def pedals(self, speed_kmh, m=SCALAR):
        """Throttle and brake for this tick at ``speed_kmh`` [km/h] (cruise control or held pedals).

        Args:
            speed_kmh: Speed [km/h] (float, or (N,) with ``m=NUMPY``).
            m: Math namespace.
        """
        if m is SCALAR and not self.cruise:
            return self.throttle, self.brake
        error = self.cruise_kmh - speed_kmh
        speed_up = error > C.CRUISE_DEADBAND_KMH
        # Slow down; a target inside the dead band of 0 km/h means "stop and stay stopped".
        slow_down = (error < -C.CRUISE_DEADBAND_KMH) | (self.cruise_kmh <= C.CRUISE_DEADBAND_KMH)
        throttle = m.where(speed_up, m.minimum(C.CRUISE_LIMIT, C.CRUISE_GAIN * error), 0.0)
        brake = m.minimum(C.CRUISE_LIMIT, m.maximum(C.CRUISE_GAIN * -error, C.CRUISE_GAIN * C.CRUISE_DEADBAND_KMH))
        brake = m.where(speed_up | m.not_(slow_down), 0.0, brake)  # in the dead band: coast (no drag)
        return m.where(self.cruise, throttle, self.throttle), m.where(self.cruise, brake, self.brake)

    def commands(self, ego: EgoState, dt: float = C.DT, m=SCALAR):
        """Throttle, brake and steer to apply during the next tick (see the module docstring).

        Args:
            ego: The car's state (floats, or arrays of shape (N,) with ``m=NUMPY``).
            dt: Tick length [s].
            m: Math namespace.
        """
        throttle, brake = self.pedals(ego.speed * C.KMH_PER_MS, m)
        settled = (self.path_length == 0.0) & (ego.y == self.path_y1) & (ego.yaw == 0.0) & (ego.beta == 0.0)
        if m is SCALAR and (self.manual_steer or settled):  # the same values the general case selects
            return throttle, brake, self.steer if self.manual_steer else 0.0
        step = ego.speed * dt  # the course set now holds at the end of the tick, one step ahead
        y_ref = self.reference(ego.x, m)[0]
        slope = self.reference(ego.x + step, m)[1] + C.LATERAL_GAIN * (y_ref - ego.y)
        course_wanted = m.clip(m.atan(slope), -C.MAX_PATH_HEADING, C.MAX_PATH_HEADING)
        steer = steer_for_course(m.wrap(course_wanted - ego.yaw), step, m)
        return throttle, brake, m.where(self.manual_steer, self.steer, m.where(settled, 0.0, steer))
