"""Traffic actors as arrays: vehicles, swept collisions, IDM car following, lanes and walkers.

Used by the navigation world (`carla_gym.sim.navigation.world`). Every actor is one row of float64
arrays and every update is a vectorised function, so stepping 40 vehicles costs little more than
stepping one. Lanes are plain arrays (centreline polylines and successor lists), independent of any
town builder.

* `polylines` -- packed polylines: point at arc length, projection with a signed lateral offset.
* `vehicles` -- vehicle rows and one batched step of the trolley side's bicycle model.
* `collision` -- exact static separating-axis tests and swept (sub-stepped) contact over a tick.
* `idm` -- Intelligent Driver Model accelerations and the pedal mapping of a wanted acceleration.
* `lanes` -- lane graph arrays, NPC route bookkeeping, leader search and pure-pursuit lane keeping.
* `walkers` -- pedestrians on sidewalks, crossing at crosswalks, a seeded share jaywalking.
"""
