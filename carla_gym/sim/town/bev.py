"""VLM-RL's rasterised bird's-eye view (CARLA-Roach style): road, lane markings and a vehicle history.

Gym-free (numpy and `carla_gym.sim` only). VLM-RL's policy observation ``seg_camera`` (VLM-RL's
``carla_env/state_commons.py``) is a (192, 192, 6) uint8 image at 5 px/m (38.4 m square), ego-aligned
with forward up and the ego 40 px above the bottom edge, with the channels

| Channel | Content | Values |
|---------|---------|--------|
| 0 | road (asphalt, junctions, markings and crosswalks on it) | 0 / 255 |
| 1 | lane markings of road lanes | 0, 120 broken, 255 solid |
| 2-5 | other vehicles 1.0, 0.65, 0.35 and 0 s ago (`HISTORY_TICKS` at 0.05 s) | 0 / 255 |

Every channel is drawn in the ego's CURRENT pose (as Roach: past vehicle boxes are placed relative to where the
ego is now). The ego, walkers and the route are in no channel (as VLM-RL). The static layers are rasterised once
per town (`map_layers`, cached) into a world-frame grid of 0.2 m cells (5 px/m, the cells of
`carla_gym.sim.town.render.town_ground`) and sampled by an affine map per frame, nearest cell; vehicles are
filled oriented boxes. A pixel is set when its centre lies in the shape (edges included).

Pixel geometry: pixel (row, col) has its centre (row + 0.5, col + 0.5) in image coordinates; the ego centre
sits at (`EGO_ROW`, `BEV_SIZE` / 2) = (152, 96), on the corner between pixels, so a point f metres ahead and
r metres to the right lies at row ``152 - 5 f`` and column ``96 + 5 r``.

Examples:
    >>> from carla_gym.sim.town import get_town
    >>> town = get_town("Town02")
    >>> sp = town.spawn_points
    >>> history = VehicleHistory()
    >>> cars = np.array([[sp.xy[0, 0], sp.xy[0, 1], sp.yaw[0], 4.0, 2.0]])
    >>> ahead = cars[0, :2] + 10.0 * np.array([np.cos(sp.yaw[0]), np.sin(sp.yaw[0])])
    >>> history.reset(np.concatenate([cars, [[*ahead, sp.yaw[0], 4.0, 2.0]]]))
    >>> bev = render_bev(map_layers(town), cars[0, :3], history.frames())
    >>> bev.shape, bev.dtype.name, int(bev[..., 5].sum() // 255)  # 4 m x 2 m at 5 px/m
    ((192, 192, 6), 'uint8', 200)
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim import render as trolley
from carla_gym.sim.town.network import Marking, Town
from carla_gym.sim.town.render import ASPHALT, _band, _cells, town_ground

BEV_SIZE = 192
"""Width and height of the raster [px] (VLM-RL ``seg_camera`` Box(192, 192, 6))."""

PIXELS_PER_METER = 5.0
"""Raster scale [px/m]: 192 px = 38.4 m (VLM-RL / Roach ``pixels_per_meter``)."""

EGO_FROM_BOTTOM = 40
"""The ego centre lies this many pixels above the bottom edge (8 m; VLM-RL ``pixels_ev_to_bottom``)."""

EGO_ROW = BEV_SIZE - EGO_FROM_BOTTOM
"""Image row coordinate of the ego centre: 152 (pixel rows 0-151 lie ahead of it)."""

VEHICLE_RANGE = 39.0
"""Vehicles are drawn when their centre lies within this distance of the ego's along both world axes [m]
(VLM-RL ``|dx|, |dy| < 39``), measured when the frame is recorded."""

MIN_HALF_EXTENT = 0.8
"""Smallest half length and half width of a drawn vehicle box [m] (VLM-RL: boxes at scale 1.0, half-extents at
least 0.8 m)."""

HISTORY_SECONDS = (1.0, 2.0 / 3.0, 1.0 / 3.0, 0.0)
"""Age of the vehicle frames of channels 2-5 [s]: VLM-RL's queue indices -16, -11, -6, -1 of a 20-frame queue at
15 Hz are 15, 10, 5 and 0 frames back."""

HISTORY_TICKS = tuple(round(age / C.DT) for age in HISTORY_SECONDS)
"""Ticks back of channels 2-5 at this simulator's 0.05 s tick: (20, 13, 7, 0), the nearest to `HISTORY_SECONDS`
(1.0, 0.65, 0.35 and 0 s; this project's choice)."""

ROAD_VALUE = 255
"""Road pixels of channel 0 (Roach: a 0/255 mask)."""
SOLID_VALUE = 255
"""Solid lane markings in channel 1 (Roach: all markings 255 ...)."""
BROKEN_VALUE = 120
"""... except broken ones, 120 (VLM-RL / Roach ``lane_marking_white_broken``)."""
VEHICLE_VALUE = 255
"""Vehicle pixels of channels 2-5 (Roach: 0/255 masks)."""

MARKING_HALF_WIDTH = max(trolley.MARKING_WIDTH, 0.2) / 2
"""Half width of a painted marking band [m]: the renderer's 0.15 m markings widened to one 0.2 m cell, so that a
marking stays connected under any rotation of the sampling grid (this project's choice)."""


@dataclass(frozen=True, eq=False)
class MapLayers:
    """A town's static road and lane-marking layers on a world-frame grid.

    Attributes:
        packed: (NX, NY) little-endian uint16: road value (channel 0) in the low byte, marking value (channel 1)
            in the high byte of each cell, so that one ``take`` fetches both (read-only). Cell (i, j) covers
            x in [x0 + i res, x0 + (i + 1) res), y likewise from y0.
        x0: x of the grid's corner [m].
        y0: y of the grid's corner [m].
        resolution: Cell size [m] (0.2: `carla_gym.sim.town.render.RASTER_RESOLUTION`, 1 / `PIXELS_PER_METER`).
    """

    packed: np.ndarray
    x0: float
    y0: float
    resolution: float


@lru_cache(maxsize=8)
def map_layers(town: Town) -> MapLayers:
    """Rasterise a town's road and marking layers once (cached per town; towns are immutable).

    Road: every cell of `carla_gym.sim.town.render.town_ground` of class asphalt or above (asphalt, white and
    yellow paint, which lies only on the road). Markings: both edges of every road lane (connectors have none),
    `MARKING_HALF_WIDTH` either side of the edge; broken ones dashed as the renderer's (``DASH_LENGTH`` of every
    ``DASH_PERIOD`` along the lane) with `BROKEN_VALUE`, solid ones `SOLID_VALUE`, solid painted last (it wins
    where the two overlap).

    Args:
        town: The town.

    Returns:
        The `MapLayers` on the ground raster's grid (same corner, cells and shape).
    """
    ground = town_ground(town)
    base = ground.levels[0]
    road = np.where(base >= ASPHALT, ROAD_VALUE, 0).astype(np.uint16)
    marks = np.zeros(base.shape, dtype=np.uint16)
    for kind, value in ((Marking.BROKEN, BROKEN_VALUE), (Marking.SOLID, SOLID_VALUE)):
        for lane in town.lanes:
            if lane.is_connector:
                continue
            for side, marking in ((-1.0, lane.left_marking), (1.0, lane.right_marking)):
                if marking != kind:
                    continue
                edge = side * lane.width / 2
                xy, s = _band(lane.points, edge - MARKING_HALF_WIDTH, edge + MARKING_HALF_WIDTH)
                if kind == Marking.BROKEN:
                    xy = xy[np.mod(s, trolley.DASH_PERIOD) < trolley.DASH_LENGTH]
                marks[_cells(xy, ground.x0, ground.y0, base.shape)] = value
    packed = (road | (marks << 8)).astype("<u2")  # little-endian on every machine: the low byte first
    packed.setflags(write=False)
    return MapLayers(packed, ground.x0, ground.y0, ground.resolution)


def vehicle_boxes(vehicles, ego: int = 0) -> np.ndarray:
    """The boxes one history frame draws: every vehicle but the ego within `VEHICLE_RANGE` of it.

    Args:
        vehicles: A `carla_gym.sim.traffic.vehicles.Vehicles` (x, y, yaw, length, width read) or an (N, 5) array
            of rows x [m], y [m], yaw [rad], length [m], width [m].
        ego: Row of the ego.

    Returns:
        (K, 5) float64 rows x [m], y [m], yaw [rad], half length [m], half width [m] (each at least
        `MIN_HALF_EXTENT`), in row order.
    """
    if hasattr(vehicles, "length"):
        rows = np.stack([vehicles.x, vehicles.y, vehicles.yaw, vehicles.length, vehicles.width], axis=-1)
    else:
        rows = np.asarray(vehicles, dtype=np.float64).reshape(-1, 5)
    near = (np.abs(rows[:, 0] - rows[ego, 0]) < VEHICLE_RANGE) & (np.abs(rows[:, 1] - rows[ego, 1]) < VEHICLE_RANGE)
    near[ego] = False
    out = rows[near].astype(np.float64, copy=True)
    out[:, 3:] = np.maximum(0.5 * out[:, 3:], MIN_HALF_EXTENT)
    return out


class VehicleHistory:
    """The vehicle boxes of the last ``max(HISTORY_TICKS) + 1`` ticks (VLM-RL's 20-frame queue at 20 Hz).

    `reset` at an episode start, `record` after every tick; `frames` gives the boxes of `HISTORY_TICKS`. Before
    the queue has filled, a frame older than the episode repeats the oldest frame recorded (Roach clips the queue
    index the same way), so at a reset all four channels show the same cars.
    """

    def __init__(self, ticks: tuple[int, ...] = HISTORY_TICKS) -> None:
        if not ticks or any(isinstance(t, bool) or not isinstance(t, int) or t < 0 for t in ticks):
            raise ValueError(f"ticks={ticks!r}: must be a non-empty tuple of ints >= 0 (ticks back)")
        self.ticks = tuple(ticks)
        self._queue: deque[np.ndarray] = deque(maxlen=max(ticks) + 1)

    def reset(self, vehicles, ego: int = 0) -> None:
        """Forget every frame and record the first one (`vehicle_boxes` of ``vehicles``)."""
        self._queue.clear()
        self.record(vehicles, ego)

    def record(self, vehicles, ego: int = 0) -> None:
        """Append the boxes of the vehicles now (`vehicle_boxes`), dropping frames older than the history."""
        self._queue.append(vehicle_boxes(vehicles, ego))

    def frames(self) -> list[np.ndarray]:
        """Boxes (K_i, 5) of each of ``ticks`` back, oldest first as given.

        Raises:
            RuntimeError: Before the first `reset`.
        """
        if not self._queue:
            raise RuntimeError("VehicleHistory has no frame yet: call reset(vehicles) at the episode start")
        n = len(self._queue)
        return [self._queue[max(n - 1 - t, 0)] for t in self.ticks]


def _pixel_axes(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Forward offset [m] of each pixel row's centre and right offset [m] of each column's centre from the ego."""
    forward = (EGO_ROW - (np.arange(size) + 0.5)) / PIXELS_PER_METER
    right = (np.arange(size) + 0.5 - 0.5 * size) / PIXELS_PER_METER
    return forward, right


_FORWARD, _RIGHT = _pixel_axes(BEV_SIZE)


def render_bev(layers: MapLayers, ego_pose, frames: list[np.ndarray]) -> np.ndarray:
    """VLM-RL's ``seg_camera`` raster (module docstring).

    Args:
        layers: The town's `map_layers`.
        ego_pose: Ego centre x [m], y [m] and heading yaw [rad] (3,).
        frames: One (K_i, 5) box array per vehicle channel (`VehicleHistory.frames`), oldest first.

    Returns:
        (192, 192, 2 + len(frames)) uint8, channel-last as VLM-RL's space.
    """
    ex, ey, eyaw = (float(v) for v in ego_pose)
    c, s = math.cos(eyaw), math.sin(eyaw)
    out = np.zeros((BEV_SIZE, BEV_SIZE, 2 + len(frames) + len(frames) % 2), dtype=np.uint8)  # even: a u2 view
    # Static layers: world cell of each pixel centre, an affine map of (row, col); nearest cell.
    res, (nx, ny) = layers.resolution, layers.packed.shape
    u = np.add.outer(((ex - layers.x0) + _FORWARD * c) / res, -_RIGHT * s / res)
    v = np.add.outer(((ey - layers.y0) + _FORWARD * s) / res, _RIGHT * c / res)
    # Clipped first, so truncation is the floor; outside the grid: the grid's edge, its grass margin (0).
    i = np.clip(u, 0.0, nx - 1, out=u).astype(np.intp)
    j = np.clip(v, 0.0, ny - 1, out=v).astype(np.intp)
    i *= ny
    i += j
    # Both layers at once: channels 0-1 of each pixel are one little-endian uint16 (road byte first).
    out.view("<u2")[..., 0] = layers.packed.ravel().take(i)
    # Vehicles: every box of every frame at once, each in a square window of pixels around its centre.
    counts = [len(f) for f in frames]
    if sum(counts):
        boxes = np.concatenate(frames)
        channel = np.repeat(np.arange(len(frames)) + 2, counts)
        dx, dy = boxes[:, 0] - ex, boxes[:, 1] - ey
        fwd, rgt = dx * c + dy * s, -dx * s + dy * c
        row, col = EGO_ROW - fwd * PIXELS_PER_METER, 0.5 * BEV_SIZE + rgt * PIXELS_PER_METER
        reach = np.hypot(boxes[:, 3], boxes[:, 4]) * PIXELS_PER_METER
        seen = (row + reach > 0) & (row - reach < BEV_SIZE) & (col + reach > 0) & (col - reach < BEV_SIZE)
        if seen.any():
            boxes, channel, row, col, reach = boxes[seen], channel[seen], row[seen], col[seen], reach[seen]
            rel = boxes[:, 2] - eyaw
            bc, bs = np.cos(rel)[:, None, None], np.sin(rel)[:, None, None]
            k = int(math.ceil(2 * reach.max())) + 2
            r0 = np.floor(row - reach).astype(np.intp)
            c0 = np.floor(col - reach).astype(np.intp)
            rr = r0[:, None, None] + np.arange(k)[None, :, None]
            cc = c0[:, None, None] + np.arange(k)[None, None, :]
            f = (row[:, None, None] - (rr + 0.5)) / PIXELS_PER_METER
            r = (cc + 0.5 - col[:, None, None]) / PIXELS_PER_METER
            inside = ((np.abs(f * bc + r * bs) <= boxes[:, 3, None, None])
                      & (np.abs(r * bc - f * bs) <= boxes[:, 4, None, None])
                      & (rr >= 0) & (rr < BEV_SIZE) & (cc >= 0) & (cc < BEV_SIZE))
            b, wr, wc = np.nonzero(inside)
            out[rr[b, wr, 0], cc[b, 0, wc], channel[b]] = VEHICLE_VALUE
    return out if len(frames) % 2 == 0 else np.ascontiguousarray(out[..., :-1])
