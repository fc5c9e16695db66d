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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from carla_gym.sim import constants as C
from carla_gym.sim.kinematics import EgoState, steer_for_course, wrap_angle


@dataclass
class Controls:
    """Controller state of one ego vehicle (persists across ticks).

    Attributes:
        throttle: Applied throttle in [0, 1] (ignored while cruising).
        brake: Applied brake in [0, 1] (ignored while cruising).
        steer: Manual steer in [-1, 1], used only when ``manual_steer`` is True.
        manual_steer: True after a ``control`` action: the tracking controller is off.
        cruise_kmh: ``maintain_speed`` target [km/h], or None when cruise control is off.
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
    cruise_kmh: float | None = None
    path_x0: float = 0.0
    path_y0: float = 0.0
    path_y1: float = 0.0
    path_length: float = 0.0
    path_slope0: float = 0.0

    def change_lane(self, x_now: float, y_now: float, yaw_now: float, target_y: float, speed: float) -> None:
        """Start a smooth path from the car's pose to the lane centre ``target_y`` [m].

        The path is a quintic in the distance along the road that starts at the car's position
        and heading with no curvature and ends on the lane centre, parallel to the road, with no
        curvature (the minimum-jerk profile when the car starts straight). It spans
        ``max(speed * LANE_CHANGE_DURATION, LANE_CHANGE_MIN_LENGTH, grip length)`` metres,
        where the grip length keeps the path's peak lateral acceleration within
        `LANE_CHANGE_GRIP_SHARE` of `MAX_GRIP_ACCELERATION` (longer than one lane's
        `LANE_CHANGE_DURATION` for two lanes at once, or a reversal while still moving
        sideways); a car that brakes meanwhile stays on the same curve.
        """
        self.manual_steer = False
        self.path_x0, self.path_y0, self.path_y1 = x_now, y_now, target_y
        self.path_slope0 = math.tan(min(max(yaw_now, -C.MAX_PATH_HEADING), C.MAX_PATH_HEADING))
        # Minimum-jerk peak lateral acceleration is MIN_JERK_PEAK * dy / T^2 over T = L / v; a car already
        # moving sideways needs to cover about the drift of its heading over the usual duration too.
        drift = abs(self.path_slope0) * speed * C.LANE_CHANGE_DURATION
        planned = C.LANE_CHANGE_GRIP_SHARE * C.MAX_GRIP_ACCELERATION
        grip_time = math.sqrt(C.MIN_JERK_PEAK * (abs(target_y - y_now) + drift) / planned)
        self.path_length = max(speed * C.LANE_CHANGE_DURATION, C.LANE_CHANGE_MIN_LENGTH, speed * grip_time)

    def set_pedals(self, throttle: float, brake: float) -> None:
        """Apply throttle and brake in [0, 1] and switch cruise control off."""
        self.throttle, self.brake, self.cruise_kmh = throttle, brake, None

    def release_manual_steer(self) -> None:
        """Centre a manual steering wheel, as CARLA's brake and cruise commands do (steer 0)."""
        if self.manual_steer:
            self.steer = 0.0

    def reference(self, x: float) -> tuple[float, float]:
        """Reference lateral position [m] and slope dy/dx of the path at road position ``x`` [m]."""
        if self.path_length <= 0.0:
            return self.path_y1, 0.0
        tau = (x - self.path_x0) / self.path_length
        if tau >= 1.0:
            return self.path_y1, 0.0
        tau = max(tau, 0.0)
        # y(tau) = y0 + m0 tau + a3 tau^3 + a4 tau^4 + a5 tau^5 with y(1) = y1, y'(1) = y''(0) = y''(1) = 0.
        m0 = self.path_slope0 * self.path_length
        rest = self.path_y1 - self.path_y0 - m0
        a3, a4, a5 = 10.0 * rest + 4.0 * m0, -15.0 * rest - 7.0 * m0, 6.0 * rest + 3.0 * m0
        t2 = tau * tau
        y = self.path_y0 + m0 * tau + t2 * tau * (a3 + tau * (a4 + tau * a5))
        dy_dtau = m0 + t2 * (3.0 * a3 + tau * (4.0 * a4 + tau * 5.0 * a5))
        return y, dy_dtau / self.path_length

    def pedals(self, speed_kmh: float) -> tuple[float, float]:
        """Throttle and brake for this tick at ``speed_kmh`` [km/h] (cruise control or held pedals)."""
        if self.cruise_kmh is None:
            return self.throttle, self.brake
        error = self.cruise_kmh - speed_kmh
        if error > C.CRUISE_DEADBAND_KMH:
            return min(C.CRUISE_LIMIT, C.CRUISE_GAIN * error), 0.0
        if error < -C.CRUISE_DEADBAND_KMH or self.cruise_kmh <= C.CRUISE_DEADBAND_KMH:
            # Slow down; a target inside the dead band of 0 km/h means "stop and stay stopped".
            return 0.0, min(C.CRUISE_LIMIT, max(C.CRUISE_GAIN * -error, C.CRUISE_GAIN * C.CRUISE_DEADBAND_KMH))
        return 0.0, 0.0  # in the dead band: coast, which holds the speed (no drag)

    def commands(self, ego: EgoState, dt: float = C.DT) -> tuple[float, float, float]:
        """Throttle, brake and steer to apply during the next tick (see the module docstring)."""
        throttle, brake = self.pedals(ego.speed * C.KMH_PER_MS)
        if self.manual_steer:
            return throttle, brake, self.steer
        if self.path_length == 0.0 and ego.y == self.path_y1 and ego.yaw == 0.0 and ego.beta == 0.0:
            return throttle, brake, 0.0  # on the lane centre, heading along it: nothing to correct
        step = ego.speed * dt  # the course set now holds at the end of the tick, one step ahead
        y_ref = self.reference(ego.x)[0]
        slope = self.reference(ego.x + step)[1] + C.LATERAL_GAIN * (y_ref - ego.y)
        course_wanted = min(max(math.atan(slope), -C.MAX_PATH_HEADING), C.MAX_PATH_HEADING)
        return throttle, brake, steer_for_course(wrap_angle(course_wanted - ego.yaw), step)
