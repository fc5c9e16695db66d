"""Numpy renderer of a town: front camera, bird's-eye view and VLM-RL's top-down reward camera.

Used by `CarlaNavigation-v0` and the server's navigation sessions. The ground of a town (grass, sidewalks,
asphalt lanes and junctions, white and yellow lane markings, zebra crosswalks) is rasterised
once per town into a class grid of `RASTER_RESOLUTION` metres (`town_ground`, cached) with
coarser copies (each cell the highest class of the 2 x 2 cells below it, so markings survive);
every frame is then one table look-up per ground pixel at the level that matches the pixel's
ground footprint. Dynamic things are drawn over it: traffic lights (from the caller's
`light_state` array), the route and goal (bird's-eye views only), vehicles and walkers.

Views (the camera models of `carla_gym.sim.render`, the trolley renderer):

- ``"front"``: the pinhole camera at upstream's mount (`CAMERA_OFFSET_X` ahead of the ego centre,
  `CAMERA_HEIGHT` up, no pitch, 90 deg horizontal field of view by default). Vehicles are the
  filled outlines (convex hulls) of their projected 3D boxes (`VEHICLE_HEIGHT` tall, one colour), walkers the trolley
  renderer's figures, lights a pole with a coloured head; all sorted far to near.
- ``"birdeye"``: orthographic, centred on the ego, forward up, square pixels of
  ``span / width`` metres (default `BIRDEYE_SPAN` = 40 m across: 0.476 m per pixel at 84 px).
  Vehicles are filled oriented boxes (the ego `EGO_COLOUR`), walkers discs, lights a bar across
  the end of their lane, the route a polyline and the goal a disc.
- ``"topdown"``: VLM-RL's CLIP reward camera (`carla_gym.sim.render.topdown_chw`'s geometry:
  18.3 m wide, centred 5.2 m ahead of and 1.6 m left of the ego), drawn as the bird's-eye view.

Frames are built channel-first (3, H, W); `render_town` returns (H, W, 3) unless asked.

Examples:
    >>> from carla_gym.sim.town import get_town
    >>> town = get_town("Town02")
    >>> sp = town.spawn_points
    >>> cars = np.array([[*sp.xy[0], sp.yaw[0], 4.9, 2.1]])
    >>> img = render_town(town, cars, np.zeros((0, 2)), view="birdeye", width=84, height=84)
    >>> img.shape, img.dtype.name, img[42, 42].tolist() == EGO_COLOUR.tolist()
    ((84, 84, 3), 'uint8', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim import render as trolley
from carla_gym.sim.town.network import Light, Marking, Town

GRASS, SIDEWALK, ASPHALT, WHITE, SKY, YELLOW = 0, 1, 3, 4, 5, 6
"""Ground classes: indices into `PALETTE` (0-5 those of `carla_gym.sim.render.PALETTE`). Their order
is their priority when cells are merged into coarser levels (a marking beats asphalt)."""

PALETTE = np.concatenate([trolley.PALETTE, np.array([(230, 190, 40)], dtype=np.uint8)])
"""RGB colour of each ground class: the trolley renderer's, plus yellow centre lines."""
_PALETTE_T = np.ascontiguousarray(PALETTE.T)

RASTER_RESOLUTION = 0.2
"""Cell size [m] of the finest ground raster (this project's choice: 18 MB for Town06)."""
RASTER_LEVELS = 4
"""Raster levels: cells of 0.2, 0.4, 0.8 and 1.6 m."""
RASTER_MARGIN = 20.0
"""Grass around the town's lane extent [m]; farther is grass too (clipped look-ups)."""
_STAMP = 0.7 * RASTER_RESOLUTION  # sample spacing of painted bands: below cell / sqrt(2), no holes

ZEBRA_STRIPE = 0.5
"""Width of each crosswalk stripe and of each gap between them [m] (this project's choice)."""
LIGHT_BAR_DEPTH = 0.8
"""Bird's-eye light mark: a bar this deep along the lane [m], across the lane's width, at its end."""
LIGHT_POLE_HEIGHT = 3.0
"""Front view: height of a traffic-light pole [m] (this project's choice)."""
LIGHT_HEAD_HEIGHT = 0.9
"""Front view: height of the coloured light head at the top of the pole [m]."""
LIGHT_POLE_OFFSET = 0.6
"""Front view: the pole stands this far right of the lane's right edge [m], at the lane's end."""
VEHICLE_HEIGHT = C.EGO_HEIGHT
"""Height [m] of every vehicle's box in the front view (the ego's, `constants.EGO_HEIGHT`)."""
NEAR = 0.3
"""Nearest distance ahead of the camera [m] that the front view draws (as the trolley figures)."""
BIRDEYE_SPAN = 40.0
"""Default ground width [m] of the bird's-eye view."""
ROUTE_WIDTH = 0.6
"""Drawn route width [m] (at least one pixel)."""
GOAL_RADIUS = 1.5
"""Drawn goal disc radius [m] (at least one pixel)."""

EGO_COLOUR = trolley.EGO
"""Ego vehicle colour (the trolley renderer's)."""
NPC_COLOURS = np.array(
    [(170, 40, 50), (200, 170, 60), (90, 90, 170), (205, 205, 212), (40, 130, 120), (140, 80, 160)], dtype=np.uint8)
"""Colour of vehicle i (other than the ego): ``NPC_COLOURS[i % 6]``."""
WALKER_COLOUR = trolley.WALKER_TOP
"""Walker colour from above (the trolley renderer's)."""
ROUTE_COLOUR = np.array((255, 150, 0), dtype=np.uint8)
"""Route polyline colour."""
GOAL_COLOUR = np.array((220, 0, 220), dtype=np.uint8)
"""Goal marker colour."""
LIGHT_COLOURS = np.array([(40, 200, 60), (240, 200, 0), (220, 30, 30)], dtype=np.uint8)
"""Colour of `Light.GREEN`, `Light.YELLOW`, `Light.RED` (indexed by the `Light` value)."""
POLE_COLOUR = np.array((50, 50, 50), dtype=np.uint8)
"""Traffic-light pole colour."""

VIEWS = ("front", "birdeye", "topdown")
"""View names."""


@dataclass(frozen=True, eq=False)
class Ground:
    """A town's rasterised ground.

    Attributes:
        levels: Class grids, level k of shape (NX / 2**k, NY / 2**k) uint8, cell (i, j) covering
            x in [x0 + i c, x0 + (i + 1) c), y likewise from y0, with c = resolution * 2**k.
        x0: x of the grid's corner [m].
        y0: y of the grid's corner [m].
        resolution: Cell size of level 0 [m].
    """

    levels: tuple[np.ndarray, ...]
    x0: float
    y0: float
    resolution: float


def _band(points: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Sample points covering the band between lateral offsets lo <= hi [m] of a polyline (K, 2).

    Returns:
        Sample positions (M, 2) [m] and their arc lengths along the polyline (M,) [m].
    """
    seg = np.hypot(*np.diff(points, axis=0).T)
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    s = np.linspace(0.0, cum[-1], max(2, math.ceil(cum[-1] / _STAMP) + 1))
    x, y = np.interp(s, cum, points[:, 0]), np.interp(s, cum, points[:, 1])
    d = np.gradient(np.stack([x, y], axis=1), axis=0)
    d /= np.maximum(np.hypot(*d.T), 1e-12)[:, None]
    right = np.stack([-d[:, 1], d[:, 0]], axis=1)
    offsets = np.linspace(lo, hi, max(2, math.ceil((hi - lo) / _STAMP) + 1))
    xy = np.stack([x, y], axis=1)[:, None, :] + offsets[None, :, None] * right[:, None, :]
    return xy.reshape(-1, 2), np.repeat(s, len(offsets))


def _cells(xy: np.ndarray, x0: float, y0: float, shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Level-0 cell indices of points (M, 2), clipped into the grid."""
    i = np.clip(((xy[:, 0] - x0) / RASTER_RESOLUTION).astype(np.intp), 0, shape[0] - 1)
    j = np.clip(((xy[:, 1] - y0) / RASTER_RESOLUTION).astype(np.intp), 0, shape[1] - 1)
    return i, j


def _hull(pts: np.ndarray) -> np.ndarray:
    """Convex hull (H, 2) of points (K, 2), counter-clockwise (x then y axes); fewer than 3 rows if degenerate."""
    pts = np.unique(np.round(pts, 6), axis=0)
    if len(pts) < 3:
        return pts
    pts = pts[np.lexsort((pts[:, 1], pts[:, 0]))]

    def half(seq):  # Andrew's monotone chain
        out: list[np.ndarray] = []
        for p in seq:
            while len(out) >= 2 and (out[-1][0] - out[-2][0]) * (p[1] - out[-2][1]) - (
                    out[-1][1] - out[-2][1]) * (p[0] - out[-2][0]) <= 0:
                out.pop()
            out.append(p)
        return out[:-1]

    return np.array(half(pts) + half(pts[::-1]))


def _fill_convex(grid: np.ndarray, pts: np.ndarray, x0: float, y0: float, value: int) -> None:
    """Set the cells whose centres lie in the convex hull of points (K, 2) [m] to ``value``."""
    hull = _hull(pts)
    if len(hull) < 3:
        return
    lo = np.maximum(np.floor((hull.min(0) - (x0, y0)) / RASTER_RESOLUTION).astype(int), 0)  # clipped into the grid:
    hi = np.minimum(np.ceil((hull.max(0) - (x0, y0)) / RASTER_RESOLUTION).astype(int), grid.shape)  # no wrap-around
    ii, jj = np.mgrid[lo[0]:hi[0], lo[1]:hi[1]]
    cx, cy = x0 + (ii + 0.5) * RASTER_RESOLUTION, y0 + (jj + 0.5) * RASTER_RESOLUTION
    inside = np.ones(ii.shape, dtype=bool)
    for a, b in zip(hull, np.roll(hull, -1, axis=0), strict=True):
        inside &= (b[0] - a[0]) * (cy - a[1]) - (b[1] - a[1]) * (cx - a[0]) >= 0
    grid[ii[inside], jj[inside]] = value


@lru_cache(maxsize=8)
def town_ground(town: Town) -> Ground:
    """Rasterise a town's ground once (cached per town object; towns are immutable).

    Painted in order: sidewalks (``town.sidewalk_width`` wide), asphalt (every lane at its
    width, plus the convex hull of each junction's connector lanes), markings on road lanes
    (`carla_gym.sim.render.MARKING_WIDTH` wide but at least one cell; broken ones dashed with the
    trolley renderer's `DASH_LENGTH` / `DASH_PERIOD` along the lane; a lane's solid left edge is a
    yellow centre line where asphalt lies 1 m beyond it, i.e. on two-way roads), then zebra
    stripes (`ZEBRA_STRIPE`) of each crosswalk where it lies on the road.

    Args:
        town: The town.

    Returns:
        The `Ground` (level 0 at `RASTER_RESOLUTION`, `RASTER_LEVELS` levels).
    """
    xmin, ymin, xmax, ymax = town.extent
    block = 2 ** (RASTER_LEVELS - 1)
    x0, y0 = xmin - RASTER_MARGIN, ymin - RASTER_MARGIN
    nx = math.ceil((xmax - xmin + 2 * RASTER_MARGIN) / RASTER_RESOLUTION / block) * block
    ny = math.ceil((ymax - ymin + 2 * RASTER_MARGIN) / RASTER_RESOLUTION / block) * block
    grid = np.zeros((nx, ny), dtype=np.uint8)
    half_sw = town.sidewalk_width / 2
    for walk in town.sidewalks:
        grid[_cells(_band(walk, -half_sw, half_sw)[0], x0, y0, grid.shape)] = SIDEWALK
    for lane in town.lanes:
        grid[_cells(_band(lane.points, -lane.width / 2, lane.width / 2)[0], x0, y0, grid.shape)] = ASPHALT
    for junction in sorted({lane.junction for lane in town.lanes if lane.junction >= 0}):
        pts = np.concatenate([lane.points for lane in town.lanes if lane.junction == junction])
        _fill_convex(grid, pts, x0, y0, ASPHALT)
    half_mark = max(trolley.MARKING_WIDTH, RASTER_RESOLUTION) / 2
    for lane in town.lanes:
        if lane.is_connector:
            continue
        for side, marking in ((-1.0, lane.left_marking), (1.0, lane.right_marking)):
            if marking == Marking.NONE:
                continue
            edge = side * lane.width / 2
            xy, s = _band(lane.points, edge - half_mark, edge + half_mark)
            colour = WHITE
            if side < 0 and marking == Marking.SOLID:
                beyond = _band(lane.points[len(lane.points) // 2 - 1:len(lane.points) // 2 + 1], edge - 1.0,
                               edge - 1.0)[0][:1]
                if grid[_cells(beyond, x0, y0, grid.shape)][0] == ASPHALT:
                    colour = YELLOW
            if marking == Marking.BROKEN:
                xy = xy[np.mod(s, trolley.DASH_PERIOD) < trolley.DASH_LENGTH]
            grid[_cells(xy, x0, y0, grid.shape)] = colour
    half_cw = town.crosswalk_width / 2
    for a, b in town.crosswalks:
        # The band runs across the road (a to b); stripes alternate along it.
        xy, s = _band(np.stack([a, b]), -half_cw, half_cw)
        i, j = _cells(xy, x0, y0, grid.shape)
        on_road = grid[i, j] >= ASPHALT
        grid[i[on_road], j[on_road]] = np.where(np.mod(s[on_road], 2 * ZEBRA_STRIPE) < ZEBRA_STRIPE, WHITE, ASPHALT)
    levels = [grid]
    for _ in range(RASTER_LEVELS - 1):
        g = levels[-1]
        levels.append(g.reshape(g.shape[0] // 2, 2, g.shape[1] // 2, 2).max(axis=(1, 3)))
    for g in levels:
        g.setflags(write=False)
    return Ground(tuple(levels), x0, y0, RASTER_RESOLUTION)


def _level(footprint: np.ndarray) -> np.ndarray:
    """Raster level whose cell is the largest not above ``footprint`` [m] (pixels see every marking)."""
    ratio = np.maximum(np.asarray(footprint, dtype=np.float64) / RASTER_RESOLUTION, 1.0)
    return np.minimum(np.floor(np.log2(ratio)), RASTER_LEVELS - 1).astype(np.intp)


def ground_lookup(ground: Ground, x: np.ndarray, y: np.ndarray, levels: np.ndarray | int = 0) -> np.ndarray:
    """Ground classes at world points.

    Args:
        ground: The town's `Ground`.
        x: x [m], shape (R, U) (or any shape with ``levels`` a scalar).
        y: y [m], same shape.
        levels: Raster level per row (R,) int, or one level for all points.

    Returns:
        uint8 classes (indices into `PALETTE`), the shape of ``x``; grass outside the raster.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    levels = np.asarray(levels)
    out = np.empty(x.shape, dtype=np.uint8)
    for k in np.unique(levels):
        rows = (levels == k) if levels.ndim else Ellipsis
        g, cell = ground.levels[int(k)], ground.resolution * 2 ** int(k)
        i = np.clip(((x[rows] - ground.x0) / cell).astype(np.intp), 0, g.shape[0] - 1)
        j = np.clip(((y[rows] - ground.y0) / cell).astype(np.intp), 0, g.shape[1] - 1)
        out[rows] = g[i, j]
    return out


def ground_class_at(town: Town, x, y) -> np.ndarray:
    """Ground class (index into `PALETTE`) at world points ``x``, ``y`` [m] (any shape), finest level."""
    return ground_lookup(town_ground(town), x, y)


@lru_cache(maxsize=8)
def _light_poses(town: Town) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """End point (L, 2) [m], heading (L,) [rad] and width (L,) [m] of every lane."""
    end = np.array([lane.points[-1] for lane in town.lanes])
    yaw = np.array([lane.yaw[-1] for lane in town.lanes])
    width = np.array([lane.width for lane in town.lanes])
    return end, yaw, width


def _fill_box(img: np.ndarray, row: float, col: float, fwd: float, rgt: float, half_len: float, half_wid: float,
              mpp: float, colour: np.ndarray) -> None:
    """Fill an oriented box into a (3, H, W) ortho image: centre (row, col) [px], axis (fwd, rgt) unit."""
    h, w = img.shape[1:]
    reach = (abs(fwd) * half_len + abs(rgt) * half_wid) / mpp, (abs(rgt) * half_len + abs(fwd) * half_wid) / mpp
    r0, r1 = max(int(math.floor(row - reach[0])), 0), min(int(math.ceil(row + reach[0])), h)
    c0, c1 = max(int(math.floor(col - reach[1])), 0), min(int(math.ceil(col + reach[1])), w)
    if r0 < r1 and c0 < c1:
        rr, cc = np.mgrid[r0:r1, c0:c1]
        f, r = (row - (rr + 0.5)) * mpp, (cc + 0.5 - col) * mpp
        inside = (np.abs(f * fwd + r * rgt) <= half_len) & (np.abs(r * fwd - f * rgt) <= half_wid)
        img[:, r0:r1, c0:c1][:, inside] = colour[:, None]
    ir, ic = int(math.floor(row)), int(math.floor(col))
    if 0 <= ir < h and 0 <= ic < w:  # boxes under a pixel still show
        img[:, ir, ic] = colour


def _ortho_chw(town: Town, boxes: np.ndarray, walkers: np.ndarray, lights: np.ndarray | None, ego: int,
               width: int, height: int, span: float, ahead: float, right: float, route, goal) -> np.ndarray:
    """Orthographic view, forward up, ``span`` metres across, centred ``ahead``/``right`` of the ego."""
    mpp = span / width
    ex, ey, eyaw = boxes[ego, :3]
    c, s = math.cos(eyaw), math.sin(eyaw)
    fwd_rows = ahead + (0.5 * height - (np.arange(height) + 0.5)) * mpp
    rgt_cols = right + ((np.arange(width) + 0.5) - 0.5 * width) * mpp
    x = ex + np.multiply.outer(fwd_rows * c, np.ones(width)) - np.multiply.outer(np.full(height, s), rgt_cols)
    y = ey + np.multiply.outer(fwd_rows * s, np.ones(width)) + np.multiply.outer(np.full(height, c), rgt_cols)
    img = np.empty((3, height, width), dtype=np.uint8)
    _PALETTE_T.take(ground_lookup(town_ground(town), x, y, int(_level(mpp))), axis=1, out=img, mode="clip")

    def to_px(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx, dy = xy[..., 0] - ex, xy[..., 1] - ey
        f, r = dx * c + dy * s, -dx * s + dy * c
        return 0.5 * height - (f - ahead) / mpp, 0.5 * width + (r - right) / mpp

    margin = 10.0 / mpp
    if lights is not None:
        end, yaw, lane_w = _light_poses(town)
        rows, cols = to_px(end)
        for i in np.flatnonzero(lights != Light.NONE):
            if -margin < rows[i] < height + margin and -margin < cols[i] < width + margin:
                rel = yaw[i] - eyaw
                back = 0.5 * LIGHT_BAR_DEPTH / mpp
                _fill_box(img, rows[i] + back * math.cos(rel), cols[i] - back * math.sin(rel), math.cos(rel),
                          math.sin(rel), 0.5 * LIGHT_BAR_DEPTH, 0.5 * lane_w[i], mpp, LIGHT_COLOURS[lights[i]])
    if route is not None and len(route) >= 2:
        seg = np.hypot(*np.diff(route, axis=0).T)
        cum = np.concatenate([[0.0], np.cumsum(seg)])
        s_dense = np.linspace(0.0, cum[-1], max(2, math.ceil(cum[-1] / (0.5 * mpp)) + 1))
        dense = np.stack([np.interp(s_dense, cum, route[:, 0]), np.interp(s_dense, cum, route[:, 1])], axis=1)
        rows, cols = to_px(dense)
        k = max(0, round(0.5 * ROUTE_WIDTH / mpp - 0.5))
        for dr in range(-k, k + 1):
            for dc in range(-k, k + 1):
                rr, cc = np.floor(rows).astype(np.intp) + dr, np.floor(cols).astype(np.intp) + dc
                ok = (rr >= 0) & (rr < height) & (cc >= 0) & (cc < width)
                img[:, rr[ok], cc[ok]] = ROUTE_COLOUR[:, None]
    if goal is not None:
        row, col = to_px(goal)
        _fill_box(img, float(row), float(col), 1.0, 0.0, GOAL_RADIUS, GOAL_RADIUS, mpp, GOAL_COLOUR)
    rows, cols = to_px(boxes[:, :2])
    for i in [*(i for i in range(len(boxes)) if i != ego), ego]:  # the ego on top
        if -margin < rows[i] < height + margin and -margin < cols[i] < width + margin:
            rel = boxes[i, 2] - eyaw
            colour = EGO_COLOUR if i == ego else NPC_COLOURS[i % len(NPC_COLOURS)]
            _fill_box(img, rows[i], cols[i], math.cos(rel), math.sin(rel), 0.5 * boxes[i, 3], 0.5 * boxes[i, 4],
                      mpp, colour)
    rows, cols = to_px(walkers)
    for row, col in zip(rows, cols, strict=True):
        if -margin < row < height + margin and -margin < col < width + margin:
            rad = C.WALKER_RADIUS
            _fill_box(img, row, col, 1.0, 0.0, rad, rad, mpp, WALKER_COLOUR)  # a disc of a few pixels: a square
    return img


def _clamp(coordinate: float, lo: int, hi: int) -> int:
    """The index of the pixel (or cell) holding ``coordinate`` [px], clamped into ``[lo, hi)`` (``lo < hi``).

    Floors (``int`` would round negative coordinates towards zero) and clamps on both sides, so that a shape
    whose centre lies outside the visible window still indexes a pixel inside it.

    >>> _clamp(-5.5, 0, 1), _clamp(3.7, 0, 10), _clamp(12.0, 2, 10)
    (0, 3, 9)
    """
    return min(max(math.floor(coordinate), lo), hi - 1)


def _fill_polygon(img: np.ndarray, uv: np.ndarray, colour: np.ndarray) -> None:
    """Fill the convex hull of image points (K, 2) (column, row) [px] into a (3, H, W) image (at least one pixel)."""
    h, w = img.shape[1:]
    c0, r0 = np.maximum(np.floor(uv.min(0)).astype(int), 0)
    c1, r1 = np.minimum(np.ceil(uv.max(0)).astype(int), (w, h))
    if c0 >= c1 or r0 >= r1:
        return
    hull = _hull(uv)
    if len(hull) < 3:
        trolley._fill(img, uv[:, 1].min(), uv[:, 1].max(), uv[:, 0].min(), uv[:, 0].max(), colour)
        return
    cc, rr = np.meshgrid(np.arange(c0, c1) + 0.5, np.arange(r0, r1) + 0.5)
    inside = np.ones(cc.shape, dtype=bool)
    for a, b in zip(hull, np.roll(hull, -1, axis=0), strict=True):
        inside &= (b[0] - a[0]) * (rr - a[1]) - (b[1] - a[1]) * (cc - a[0]) >= 0
    if not inside.any():  # thinner than a pixel: the pixel under the centre, clamped into the visible window
        row, col = _clamp(uv[:, 1].mean(), r0, r1), _clamp(uv[:, 0].mean(), c0, c1)
        inside[row - r0, col - c0] = True
    img[:, r0:r1, c0:c1][:, inside] = colour[:, None]


def _front_chw(town: Town, boxes: np.ndarray, walkers: np.ndarray, lights: np.ndarray | None, ego: int,
               width: int, height: int, fov: float) -> np.ndarray:
    """The ego's front camera (the trolley renderer's camera model), channel-first."""
    focal, first, forward, cols, _ = trolley._front_geometry(width, height, float(fov))
    ex, ey, eyaw = boxes[ego, :3]
    c, s = math.cos(eyaw), math.sin(eyaw)
    cam_x, cam_y = ex + C.CAMERA_OFFSET_X * c, ey + C.CAMERA_OFFSET_X * s
    img = np.empty((3, height, width), dtype=np.uint8)
    img[:, :first] = PALETTE[SKY][:, None, None]
    lat = np.multiply.outer(forward, cols)  # lateral offset [m] of each ground pixel, right positive
    x = cam_x + (forward * c)[:, None] - lat * s
    y = cam_y + (forward * s)[:, None] + lat * c
    cls = ground_lookup(town_ground(town), x, y, _level(forward / focal))
    _PALETTE_T.take(cls, axis=1, out=img[:, first:], mode="clip")
    cx, cy = 0.5 * width, 0.5 * height

    def cam(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx, dy = xy[..., 0] - cam_x, xy[..., 1] - cam_y
        return dx * c + dy * s, -dx * s + dy * c

    items = []  # (depth [m], kind, index)
    d, _ = cam(boxes[:, :2])
    items += [(float(d[i]), 0, i) for i in range(len(boxes)) if i != ego]
    d, _ = cam(walkers)
    items += [(float(d[i]), 1, i) for i in range(len(walkers))]
    if lights is not None:
        end, yaw, lane_w = _light_poses(town)
        lit = np.flatnonzero(lights != Light.NONE)
        pole = end[lit] + (0.5 * lane_w[lit] + LIGHT_POLE_OFFSET)[:, None] * np.stack(
            [-np.sin(yaw[lit]), np.cos(yaw[lit])], axis=1)
        d, _ = cam(pole)
        items += [(float(d[k]), 2, k) for k in range(len(lit))]
    for depth, kind, i in sorted(items, key=lambda t: (-t[0], t[1], t[2])):
        if kind == 1:
            f, r = cam(walkers[i])
            trolley.draw_figure(img, focal, cx, cy, float(f), float(r))
        elif kind == 2:
            f, r = cam(pole[i])
            if f < NEAR:
                continue
            half = max(0.5 * focal * 0.15 / f, 0.5)
            top = cy + focal * (C.CAMERA_HEIGHT - LIGHT_POLE_HEIGHT) / f
            u = cx + focal * r / f
            trolley._fill(img, top, cy + focal * C.CAMERA_HEIGHT / f, u - half, u + half, POLE_COLOUR)
            head = focal * 0.2 / f
            trolley._fill(img, top, top + focal * LIGHT_HEAD_HEIGHT / f, u - head, u + head,
                          LIGHT_COLOURS[lights[lit[i]]])
        else:
            if depth < -0.5 * math.hypot(boxes[i, 3], boxes[i, 4]):
                continue
            bx, by, byaw, half_len, half_wid = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3] / 2, boxes[i, 4] / 2
            bc, bs = math.cos(byaw), math.sin(byaw)
            corners = np.array([[bx + a * half_len * bc - b * half_wid * bs, by + a * half_len * bs + b * half_wid * bc]
                                for a in (-1, 1) for b in (-1, 1)])
            f, r = cam(corners)
            if f.max() < NEAR:
                continue
            f = np.maximum(f, NEAR)  # corners behind the camera: clamp (a near box fills the view's side)
            u = np.tile(cx + focal * r / f, 2)
            v = np.concatenate([cy + focal * C.CAMERA_HEIGHT / f, cy + focal * (C.CAMERA_HEIGHT - VEHICLE_HEIGHT) / f])
            _fill_polygon(img, np.stack([u, v], axis=1), NPC_COLOURS[i % len(NPC_COLOURS)])
    return img


def _as_boxes(vehicles) -> np.ndarray:
    """(N, 5) float64 rows x, y, yaw, length, width from an array or a `traffic.Vehicles`-like object."""
    if all(hasattr(vehicles, k) for k in ("x", "y", "yaw", "length", "width")):
        vehicles = np.stack([np.asarray(getattr(vehicles, k), dtype=np.float64)
                             for k in ("x", "y", "yaw", "length", "width")], axis=-1)
    return np.asarray(vehicles, dtype=np.float64)


def render_town(town: Town, vehicles, walkers_xy, light_states=None, ego_index: int = 0, view: str = "birdeye",
                width: int = 84, height: int = 84, route=None, goal=None, channels_first: bool = False,
                fov: float = 90.0, span: float = BIRDEYE_SPAN, ahead: float = 0.0) -> np.ndarray:
    """Render a town with its vehicles, walkers and lights from the ego's point of view.

    Args:
        town: The town (`carla_gym.sim.town.get_town`).
        vehicles: (N, 5) rows x [m], y [m], yaw [rad], length [m], width [m], N >= 1; or a
            `carla_gym.sim.traffic.Vehicles` (its columns are read).
        walkers_xy: Walker positions (M, 2) [m], M >= 0.
        light_states: `carla_gym.sim.town.light_state` output (L,) int (one per lane), or None to
            draw no lights.
        ego_index: Row of the ego in ``vehicles``.
        view: One of `VIEWS`.
        width: Image width [px], >= 1.
        height: Image height [px], >= 1.
        route: Route waypoints (K, 2) [m] (or a `carla_gym.sim.town.Route`), drawn in the
            bird's-eye and top-down views; None for none.
        goal: Goal position (2,) [m], drawn in the bird's-eye and top-down views; None for none.
        channels_first: Return (3, H, W) instead of (H, W, 3).
        fov: Front camera horizontal field of view [deg], in (0, 180).
        span: Bird's-eye ground width [m] (``span / width`` metres per pixel), > 0.
        ahead: Bird's-eye view only: its centre lies this far ahead of the ego [m] (0: centred on the ego).

    Returns:
        uint8 RGB array (height, width, 3), or (3, height, width) with ``channels_first``.

    Raises:
        ValueError: An unknown view, a bad size, array shape, ego index, field of view or span.
    """
    if view not in VIEWS:
        raise ValueError(f"view={view!r}: choose one of {list(VIEWS)}")
    if int(width) != width or int(height) != height or width < 1 or height < 1:
        raise ValueError(f"width={width}, height={height}: must be integers >= 1 [px]")
    boxes = _as_boxes(vehicles)
    if boxes.ndim != 2 or boxes.shape[1] != 5 or len(boxes) < 1 or not np.isfinite(boxes).all():
        raise ValueError(f"vehicles shape {boxes.shape}: must be (N, 5) finite with N >= 1")
    if not 0 <= ego_index < len(boxes):
        raise ValueError(f"ego_index={ego_index}: must be in [0, {len(boxes) - 1}]")
    walkers = np.asarray(walkers_xy, dtype=np.float64).reshape(-1, 2) if np.size(walkers_xy) else np.zeros((0, 2))
    if np.asarray(walkers_xy).ndim != 2 and np.size(walkers_xy):
        raise ValueError(f"walkers_xy shape {np.shape(walkers_xy)}: must be (M, 2) [m]")
    if light_states is not None:
        light_states = np.asarray(light_states)
        if light_states.shape != (len(town.lanes),):
            raise ValueError(f"light_states shape {light_states.shape}: must be ({len(town.lanes)},), one per lane")
    if not 0 < fov < 180:
        raise ValueError(f"fov={fov}: must be in (0, 180) [deg]")
    if not span > 0:
        raise ValueError(f"span={span}: must be > 0 [m]")
    if not math.isfinite(ahead):
        raise ValueError(f"ahead={ahead}: must be a finite distance [m]")
    if route is not None:
        route = np.asarray(getattr(route, "waypoints", route), dtype=np.float64)
    if goal is not None:
        goal = np.asarray(goal, dtype=np.float64).reshape(2)
    if view == "front":
        img = _front_chw(town, boxes, walkers, light_states, ego_index, int(width), int(height), fov)
    elif view == "birdeye":
        img = _ortho_chw(town, boxes, walkers, light_states, ego_index, int(width), int(height), span,
                         float(ahead), 0.0, route, goal)
    else:
        top_span = 2.0 * trolley.TOPDOWN_HEIGHT * math.tan(math.radians(trolley.TOPDOWN_FOV) / 2.0)
        img = _ortho_chw(town, boxes, walkers, light_states, ego_index, int(width), int(height), top_span,
                         trolley.TOPDOWN_AHEAD, trolley.TOPDOWN_RIGHT, route, goal)
    return img if channels_first else np.ascontiguousarray(img.transpose(1, 2, 0))


def render_world(world, **kwargs) -> np.ndarray:
    """`render_town` of a navigation world: its town, vehicles (the ego is row 0), walkers and traffic lights.

    Args:
        world: A `carla_gym.sim.navigation.world.NavWorld` (``town``, ``vehicles``, ``walkers.xy``, ``lights``).
        **kwargs: `render_town`'s other arguments (``view``, ``width``, ``height``, ``route``, ``goal``, ``fov``...).

    Returns:
        uint8 RGB array, as `render_town`.
    """
    walkers = np.asarray(world.walkers.xy, dtype=np.float64).reshape(-1, 2)
    return render_town(world.town, world.vehicles, walkers, world.lights, **kwargs)
