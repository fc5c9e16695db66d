"""Traffic actors as arrays: vehicles, swept collisions, IDM car following, lanes and walkers.

Foundation modules for issue 14, not yet wired into `carla_gym.sim.world`. Every actor is one
row of float64 arrays and every update is a vectorised function, so stepping 40 vehicles costs
little more than stepping one. Lanes are plain arrays (centreline polylines and successor
lists), independent of any town builder.

Modules:
    polylines: Packed polylines: point at arc length, projection with a signed lateral offset.
    vehicles: Vehicle rows and one batched step of the existing bicycle model.
    collision: Exact static separating-axis tests and swept (sub-stepped) contact over a tick.
    idm: Intelligent Driver Model accelerations and the pedal mapping of a wanted acceleration.
    lanes: Lane graph arrays, NPC route bookkeeping, leader search and pure-pursuit lane keeping.
    walkers: Pedestrians on sidewalks, crossing at crosswalks, a seeded share jaywalking.
"""
