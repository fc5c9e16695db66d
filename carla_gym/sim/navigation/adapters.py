"""Adapters from a built `carla_gym.sim.town.Town` to the traffic arrays of `carla_gym.sim.traffic`.

Written once here so that every user of a town's traffic (the navigation world, later the env)
builds the same `Lanes` and `Sidewalks`: lane ids are the town's lane ids, sidewalk ids are the
indices of ``Town.sidewalks``.
"""

from __future__ import annotations

import numpy as np

from carla_gym.sim.town import Town
from carla_gym.sim.traffic.lanes import Lanes
from carla_gym.sim.traffic.walkers import Sidewalks

CROSSWALK_SNAP = 1.0
"""Largest distance [m] from a crosswalk end to a sidewalk centreline for the crossing to be kept (own
choice: the town builder places crosswalk ends on sidewalk centrelines, so anything farther is a
crossing without a sidewalk at that end, which walkers cannot use)."""


def lanes_from_town(town: Town) -> Lanes:
    """The town's lanes as `Lanes`: same ids, centrelines, successors and speed limits [m/s]."""
    return Lanes([lane.points for lane in town.lanes], [lane.successors for lane in town.lanes],
                 np.array([lane.speed_limit for lane in town.lanes]))


def sidewalks_from_town(town: Town) -> Sidewalks:
    """The town's sidewalks as `Sidewalks`, with crosswalks snapped to sidewalk arc positions.

    The town builder appends a road's two sidewalks one after the other (right side, then left
    side, or both sides of a one-way road), so sidewalk ``2k`` and ``2k + 1`` are each other's
    ``opposite`` (the jaywalking target). Each crosswalk end is snapped to the nearest sidewalk
    point; a crosswalk whose ends do not both lie within `CROSSWALK_SNAP` of a sidewalk, or whose
    ends snap to the same sidewalk, is left out.

    Raises:
        ValueError: If the town has no sidewalk.
    """
    if not town.sidewalks:
        raise ValueError(f"town {town.name} has no sidewalk; walkers need at least one")
    m = len(town.sidewalks)
    opposite = np.arange(m) ^ 1
    opposite[opposite >= m] = -1
    sw = Sidewalks(town.sidewalks, town.sidewalk_width, opposite)
    crosswalks = []
    for ends in town.crosswalks:
        d2 = ((ends[:, None, :] - sw.points[None, :, :]) ** 2).sum(-1)  # (2, P)
        nearest = d2.argmin(axis=1)
        if np.sqrt(d2[[0, 1], nearest]).max() > CROSSWALK_SNAP:
            continue
        line = np.searchsorted(sw.first, nearest, side="right") - 1
        if line[0] == line[1]:
            continue
        crosswalks.append((line[0], sw.arc[nearest[0]], line[1], sw.arc[nearest[1]]))
    sw.crosswalks = np.asarray(crosswalks, dtype=np.float64).reshape(-1, 4)
    return sw
