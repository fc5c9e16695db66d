"""CARLA's navigation agents over arrays: PID controllers, local planner, basic and behaviour agents.

They drive the NPC vehicles and the ego's ``follow_route`` in the navigation world
(`carla_gym.sim.navigation`).

* `pid` -- the two PID loops (longitudinal and lateral) and the vehicle control they give.
* `local_planner` -- routes, the waypoint queue, arrival and route completion.
* `behavior` -- CARLA's BasicAgent and BehaviorAgent as pure functions.
"""

from carla_gym.sim.agents.behavior import BEHAVIORS, AgentParams, AgentStep, Obstacles, agent_params, agent_step
from carla_gym.sim.agents.local_planner import PlannerState, Routes, arrived, make_routes, route_completion, track
from carla_gym.sim.agents.pid import ControllerState, PidGains, PidState, heading_error, pid_step, vehicle_control

__all__ = [
    "BEHAVIORS",
    "AgentParams",
    "AgentStep",
    "ControllerState",
    "Obstacles",
    "PidGains",
    "PidState",
    "PlannerState",
    "Routes",
    "agent_params",
    "agent_step",
    "arrived",
    "heading_error",
    "make_routes",
    "pid_step",
    "route_completion",
    "track",
    "vehicle_control",
]
