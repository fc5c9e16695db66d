"""The road: a straight, flat road along +x with same-direction lanes of equal width.

Lanes are numbered relative to the ego's starting lane: 0 is the starting lane, -1 the lane to
its left, +1 the lane to its right (positive = right, as upstream's lateral offsets). Lane i
has its centre at y = i * lane_width. The ego is on the road while its centre lies between the
outer edges of the outermost lanes; leaving it is a road departure (reported, not terminal).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

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
        return lane * self.lane_width

    def lane_at(self, y: float) -> int:
        """Index of the lane (existing or not) whose strip contains lateral position ``y`` [m]."""
        return math.floor(y / self.lane_width + 0.5)

    def has_lane(self, lane: int) -> bool:
        """Whether lane ``lane`` exists."""
        return self.lanes[0] <= lane <= self.lanes[-1]

    def on_road(self, y: float) -> bool:
        """Whether lateral position ``y`` [m] lies on the road surface."""
        return self.left_edge <= y <= self.right_edge

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
