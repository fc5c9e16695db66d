"""The road: a straight, flat road along +x with same-direction lanes of equal width.

Lanes are numbered relative to the ego's starting lane: 0 is the starting lane, -1 the lane to
its left, +1 the lane to its right (positive = right, as upstream's lateral offsets). Lane i
has its centre at y = i * lane_width. The ego is on the road while its centre lies between the
outer edges of the outermost lanes; leaving it is a road departure (reported, not terminal).

Two lane indices exist for a lateral position y. `Road.lane_at` is the strip of width lane_width
containing y, numbered on past the road edges: the geometry of lane-change paths. `Road.nearest_lane`
is the existing (road) lane whose centre is nearest y: the one reference for what the car reports
and is scored against (the reported lane, the lane-exists flags, ``lane_offset`` and the CLIP
centring and stability factors). Off the road `Road.lane_offset` therefore grows with the distance
from the road, as VLM-RL's distance from the route it should follow does.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from carla_gym.sim import constants as C

_LANE_ID = re.compile(r"lane_(-?[0-9]{1,3})")


@dataclass(frozen=True)
class Road:
    """A straight road.

    Attributes:
        lanes: Sorted lane indices that exist (always contains 0).
        lane_width: Lane width [m].
    """

    lanes: tuple[int, ...] = (0,)
    lane_width: float = C.LANE_WIDTH

    def __post_init__(self) -> None:
        if 0 not in self.lanes or list(self.lanes) != sorted(set(self.lanes)):
            raise ValueError(f"lanes={self.lanes!r}: must be sorted, unique and contain 0")
        if list(self.lanes) != list(range(self.lanes[0], self.lanes[-1] + 1)):
            raise ValueError(f"lanes={self.lanes!r}: lanes must be contiguous")
        if not self.lane_width > 0:
            raise ValueError(f"lane_width={self.lane_width!r}: must be > 0 [m]")

    @property
    def left_edge(self) -> float:
        """Lateral position of the left road edge [m]."""
        return (self.lanes[0] - 0.5) * self.lane_width

    @property
    def right_edge(self) -> float:
        """Lateral position of the right road edge [m]."""
        return (self.lanes[-1] + 0.5) * self.lane_width

    def lane_centre(self, lane: int) -> float:
        """Lateral position [m] of the centre of lane ``lane`` (which need not exist)."""
        return lane_centre(lane, self.lane_width)

    def lane_at(self, y: float) -> int:
        """Index of the lane (existing or not) whose strip contains lateral position ``y`` [m]."""
        return lane_at(y, self.lane_width)

    def nearest_lane(self, y: float) -> int:
        """Index of the existing lane whose centre is nearest lateral position ``y`` [m].

        On the road this is `lane_at`; off the road it is the outermost lane on that side.

        Examples:
            >>> road = Road(lanes=(-1, 0))
            >>> road.lane_at(-6.975), road.nearest_lane(-6.975), road.nearest_lane(9.0)
            (-2, -1, 0)
        """
        return nearest_lane(y, self.lanes[0], self.lanes[-1], self.lane_width)

    def lane_offset(self, y: float) -> float:
        """Signed distance [m] of lateral position ``y`` from the centre of `nearest_lane` (+right).

        Examples:
            >>> round(Road(lanes=(-1, 0)).lane_offset(-6.975), 6)  # 1.725 m past the left road edge
            -3.475
        """
        return y - self.lane_centre(self.nearest_lane(y))

    def has_lane(self, lane: int) -> bool:
        """Whether lane ``lane`` exists."""
        return self.lanes[0] <= lane <= self.lanes[-1]

    def on_road(self, y: float) -> bool:
        """Whether lateral position ``y`` [m] lies on the road surface."""
        return bool(on_road(y, self.lanes[0], self.lanes[-1], self.lane_width))

    @staticmethod
    def lane_id(lane: int) -> str:
        """Wire name of a lane index, e.g. ``"lane_0"``, ``"lane_-1"``."""
        return f"lane_{lane}"

    @staticmethod
    def parse_lane_id(lane_id: str) -> int:
        """Lane index of a wire name such as ``"lane_-1"``.

        Raises:
            ValueError: If ``lane_id`` is not of the form ``lane_<integer>`` (at most 3 digits).
        """
        match = _LANE_ID.fullmatch(lane_id) if isinstance(lane_id, str) else None
        if match is None:
            raise ValueError(
                f"target_lane_id={lane_id!r}: expected 'lane_<n>' with n relative to the starting lane "
                "(0 = starting lane, -1 = left, 1 = right)"
            )
        return int(match.group(1))



def lane_centre(lane: int, lane_width: float = C.LANE_WIDTH) -> float:
    """Lateral position [m] of the centre of lane ``lane`` (0 = starting lane, +right).

    The one definition of lane centres: `Road.lane_centre` uses it with the road's width; the env
    uses it with the default width (3.5 m, upstream's default) for the lane a backend reports.
    """
    return lane * lane_width


def lane_at(y, lane_width: float = C.LANE_WIDTH, floor=math.floor):
    """Index of the lane strip containing lateral position ``y`` [m] (`Road.lane_at`).

    Args:
        y: Lateral position [m]: a float, or an array with ``floor=numpy.floor`` (then the result
            is a float array of whole numbers).
        lane_width: Lane width [m].
        floor: ``math.floor`` for floats, ``numpy.floor`` for arrays.
    """
    return floor(y / lane_width + 0.5)


def nearest_lane(y, lo, hi, lane_width: float = C.LANE_WIDTH, floor=math.floor):
    """Index of the road lane (``lo`` to ``hi``) whose centre is nearest ``y`` [m] (`Road.nearest_lane`).

    Floats, or arrays of shape (N,) with ``floor=numpy.floor`` (one road per element).
    """
    strip = lane_at(y, lane_width, floor)
    return min(max(strip, lo), hi) if floor is math.floor else np.minimum(np.maximum(strip, lo), hi)


def on_road(y, lo, hi, lane_width: float = C.LANE_WIDTH):
    """Whether ``y`` [m] lies between the outer edges of lanes ``lo`` and ``hi`` (floats or (N,) arrays)."""
    return ((lo - 0.5) * lane_width <= y) & (y <= (hi + 0.5) * lane_width)
