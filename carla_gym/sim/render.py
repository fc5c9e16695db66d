"""Numpy renderer: a front camera, a bird's-eye view and VLM-RL's top-down reward camera of a `World`.

Both views colour the ground with one set of rules (`ground_classes`): asphalt lanes, white
lane markings (solid at the road edges, dashed between lanes), kerbs, pavement and grass.
The front camera is a pinhole camera at upstream's mount (2.5 m ahead of the ego centre,
1.0 m up, no pitch, 90 deg horizontal field of view by default) that draws the sky above
the horizon and pedestrians as upright figures (legs, shirt, head) sorted far to near. The
bird's-eye view is orthographic and turns with the ego (forward is up); it draws
pedestrians as discs and the ego as its box. The top-down view (`topdown_chw`) is the bird's-eye
view framed as VLM-RL's CLIP reward camera. There is no lighting, shading or haze.

Speed: every image row is a straight line on the ground, so a pixel's class is a table
look-up on its lateral position (`ground_rows`); lane markings widen to at least half a
pixel so they stay visible in small images. Frames are built channel-first (3, H, W), the
layout of the observation; `render_front` and `render_birdeye` return (H, W, 3).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.road import Road
from carla_gym.sim.world import World

PALETTE = np.array(
    [
        (70, 120, 50),  # 0 grass
        (150, 145, 135),  # 1 pavement
        (190, 190, 185),  # 2 kerb
        (60, 60, 64),  # 3 asphalt
        (235, 235, 235),  # 4 lane marking
        (135, 185, 235),  # 5 sky
    ],
    dtype=np.uint8,
)
"""RGB colour of each ground class."""
SKY = 5
_PALETTE_T = np.ascontiguousarray(PALETTE.T)  # (3, classes): one look-up table per channel
_DASHED = 6  # class of a dashed lane boundary before the dash/gap decision

KERB_WIDTH = 0.3
"""Kerb width [m] outside each road edge."""
PAVEMENT_WIDTH = 2.5
"""Pavement width [m] beyond the kerb."""
MARKING_WIDTH = 0.15
"""Lane-marking width [m]."""
DASH_PERIOD = 9.0
"""Dashed-marking period [m]."""
DASH_LENGTH = 3.0
"""Dash length [m]."""
LUT_RESOLUTION = 0.02
"""Lateral resolution [m] of the ground look-up tables."""
LUT_MARGIN = 30.0
"""Ground covered beyond the road edges [m]; farther away is grass."""
MARKING_LEVELS = 6
"""Marking half-widths in the tables: MARKING_WIDTH / 2 * 2**k for k < MARKING_LEVELS."""
STRAIGHT_SIN_YAW = 1e-3
"""Below this |sin(yaw)| every boundary crossing of a row shares one dash decision (error < 0.1 m)."""

FIGURE_DETAIL_PX = 6.0
"""Figures shorter than this [px] are drawn as one shirt-coloured mark."""

LEGS = np.array((40, 45, 80), dtype=np.uint8)
SHIRT = np.array((220, 60, 40), dtype=np.uint8)
SKIN = np.array((235, 190, 150), dtype=np.uint8)
EGO = np.array((30, 110, 200), dtype=np.uint8)
WALKER_TOP = np.array((230, 70, 40), dtype=np.uint8)


def _classes_across(y: np.ndarray, road: Road, half: float) -> np.ndarray:
    """Ground class at lateral positions ``y`` [m] with markings ``2 * half`` wide."""
    outside = np.maximum(road.left_edge - y, y - road.right_edge)
    cls = np.zeros(y.shape, dtype=np.uint8)
    cls[outside <= KERB_WIDTH + PAVEMENT_WIDTH] = 1
    cls[outside <= KERB_WIDTH] = 2
    on_road = outside <= 0.0
    cls[on_road] = 3
    cls[on_road & (outside >= -2.0 * half)] = 4
    if len(road.lanes) > 1:
        offset = y / road.lane_width - 0.5
        to_boundary = np.abs(offset - np.round(offset)) * road.lane_width
        cls[on_road & (to_boundary <= half) & (cls == 3)] = _DASHED
    return cls


def _lane_boundaries(road: Road) -> tuple[float, ...]:
    """Lateral positions [m] of the dashed boundaries between adjacent lanes."""
    return tuple((lane + 0.5) * road.lane_width for lane in road.lanes[:-1])


@lru_cache(maxsize=64)
def _ground_lut(road: Road) -> tuple[np.ndarray, float, int]:
    """Ground classes across the road for every table variant, interleaved.

    A variant is (marking level k, one bit per dashed boundary: dash or gap on this row);
    entry ``bin * variants + variant`` is the class of lateral bin ``bin``.

    Returns:
        (table, y of bin 0 [m], number of variants).
    """
    y0 = road.left_edge - LUT_MARGIN
    n = int(math.ceil((road.right_edge + LUT_MARGIN - y0) / LUT_RESOLUTION)) + 1
    y = y0 + (np.arange(n) + 0.5) * LUT_RESOLUTION
    bounds = _lane_boundaries(road)
    nearest = np.argmin(np.abs(y[:, None] - np.array(bounds)[None, :]), axis=1) if bounds else np.zeros(n, int)
    tables = []
    for k in range(MARKING_LEVELS):
        base = _classes_across(y, road, 0.5 * MARKING_WIDTH * 2**k)
        for bits in range(2 ** len(bounds)):
            cls = base.copy()
            dash = ((bits >> nearest) & 1).astype(bool)
            cls[(base == _DASHED) & dash] = 4
            cls[(base == _DASHED) & ~dash] = 3
            tables.append(cls)
    return np.stack(tables, axis=1).ravel(), y0, len(tables)


def _marking_level(footprint: np.ndarray | float) -> np.ndarray:
    """Table level whose marking half-width covers at least half a pixel of ``footprint`` [m]."""
    ratio = np.maximum(np.asarray(footprint, dtype=np.float64) / MARKING_WIDTH, 1.0)
    return np.minimum(np.ceil(np.log2(ratio)), MARKING_LEVELS - 1).astype(np.intp)


def ground_rows(
    road: Road,
    y_row: np.ndarray,
    y_step: np.ndarray,
    x_row: np.ndarray,
    x_step: np.ndarray,
    cols: np.ndarray,
    levels: np.ndarray,
    straight: bool = False,
) -> np.ndarray:
    """Ground classes of an image whose rows are straight lines on the ground.

    Pixel (r, u) sees the ground point x = x_row[r] + x_step[r] * cols[u],
    y = y_row[r] + y_step[r] * cols[u] [m]. Dashes are decided once per row and boundary,
    where the row crosses that boundary.

    Args:
        road: The road.
        y_row: Per-row lateral offset [m], shape (R,).
        y_step: Per-row lateral slope, shape (R,).
        x_row: Per-row longitudinal offset [m], shape (R,).
        x_step: Per-row longitudinal slope, shape (R,).
        cols: Column coordinates, shape (U,).
        levels: Per-row marking level (`_marking_level` of the pixel footprint), shape (R,).
        straight: The view is aligned with the road (|sin yaw| < `STRAIGHT_SIN_YAW`): one
            dash decision per row, taken at ``x_row``.

    Returns:
        uint8 class indices into `PALETTE`, shape (R, U).
    """
    lut, y0, variants = _ground_lut(road)
    bounds = _lane_boundaries(road)
    t = np.multiply.outer(y_step * (1.0 / LUT_RESOLUTION), cols)
    t += ((y_row - y0) * (1.0 / LUT_RESOLUTION))[:, None]
    idx = t.astype(np.intp)  # negative bins truncate towards 0 and clip to grass below
    idx *= variants
    variant = levels << len(bounds)
    if bounds and straight:
        variant = variant + (np.mod(x_row, DASH_PERIOD) < DASH_LENGTH) * ((1 << len(bounds)) - 1)
    elif bounds:
        safe = np.where(np.abs(y_step) > 1e-9, y_step, 1e-9)
        for bit, y_b in enumerate(bounds):
            x_b = x_row + x_step * ((y_b - y_row) / safe)
            variant = variant + ((np.mod(x_b, DASH_PERIOD) < DASH_LENGTH) << bit)
    idx += variant[:, None]
    return lut.take(idx, mode="clip")  # beyond either end of the table: grass


def ground_classes(x, y, road: Road, footprint: np.ndarray | float = 0.0) -> np.ndarray:
    """Ground class (index into `PALETTE`) at arbitrary world points (slow; for tests and tools).

    Args:
        x: Positions along the road [m], any shape.
        y: Lateral positions [m], same shape.
        road: The road.
        footprint: Ground size of a pixel [m] (scalar or same shape).

    Returns:
        uint8 array of the same shape.
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    levels = np.broadcast_to(_marking_level(footprint), x.shape).ravel()
    zero = np.zeros(x.size)
    return ground_rows(road, y.ravel(), zero, x.ravel(), zero, np.zeros(1), levels).reshape(x.shape)


def _paint(img: np.ndarray, cls: np.ndarray) -> None:
    """Write the colours of classes ``cls`` (R, U) into the channel-first ``img`` (3, R, U)."""
    _PALETTE_T.take(cls, axis=1, out=img, mode="clip")


def _fill(img: np.ndarray, top: float, bottom: float, left: float, right: float, colour: np.ndarray) -> None:
    """Fill a pixel rectangle of a (3, H, W) image, at least one pixel each way, clipped."""
    h, w = img.shape[1:]
    t, b = int(math.floor(top)), max(int(math.ceil(bottom)), int(math.floor(top)) + 1)
    lft, rgt = int(math.floor(left)), max(int(math.ceil(right)), int(math.floor(left)) + 1)
    t, b, lft, rgt = max(t, 0), min(b, h), max(lft, 0), min(rgt, w)
    if t < b and lft < rgt:
        img[:, t:b, lft:rgt] = colour[:, None, None]


@lru_cache(maxsize=16)
def _front_geometry(width: int, height: int, fov_deg: float) -> tuple:
    """Front camera geometry.

    Returns:
        Focal length [px], first ground row, per-row ground distance [m], column coordinates
        (lateral metres per metre of distance), per-row marking level.
    """
    focal = 0.5 * width / math.tan(math.radians(fov_deg) / 2)
    rows = np.arange(height) + 0.5 - 0.5 * height
    first = int(np.searchsorted(rows, 1e-9))  # first row below the horizon
    forward = C.CAMERA_HEIGHT * focal / rows[first:]
    cols = (np.arange(width) + 0.5 - 0.5 * width) / focal
    return focal, first, forward, cols, _marking_level(forward / focal)


def front_chw(world: World, width: int = 640, height: int = 360, fov: float = 90.0) -> np.ndarray:
    """Front camera frame, channel-first.

    Args:
        world: The world to draw.
        width: Image width [px].
        height: Image height [px].
        fov: Horizontal field of view [deg].

    Returns:
        uint8 array of shape (3, height, width).
    """
    focal, first, forward, cols, levels = _front_geometry(width, height, float(fov))
    ego = world.ego
    c, s = math.cos(ego.yaw), math.sin(ego.yaw)
    cam_x, cam_y = ego.x + C.CAMERA_OFFSET_X * c, ego.y + C.CAMERA_OFFSET_X * s
    img = np.empty((3, height, width), dtype=np.uint8)
    img[:, :first] = PALETTE[SKY][:, None, None]
    # Row r sees ground at forward distance d_r; column u at lateral d_r * cols[u] (camera frame).
    cls = ground_rows(world.spec.road, cam_y + forward * s, forward * c, cam_x + forward * c, forward * -s,
                      cols, levels, straight=abs(s) < STRAIGHT_SIN_YAW)
    _paint(img[:, first:], cls)
    # Pedestrians as upright figures, far to near (painter's algorithm).
    cx, cy = 0.5 * width, 0.5 * height
    for d, r in sorted(zip(*world.walker_offsets(), strict=True), reverse=True):
        draw_figure(img, focal, cx, cy, d - C.CAMERA_OFFSET_X, r)
    return img


def draw_figure(img: np.ndarray, focal: float, cx: float, cy: float, d: float, r: float) -> None:
    """Draw an upright pedestrian (legs, shirt, head) into a (3, H, W) front-camera image.

    Args:
        img: Channel-first image, modified in place.
        focal: Focal length [px].
        cx: Column of the optical axis [px].
        cy: Row of the optical axis (the horizon) [px].
        d: Distance of the figure ahead of the camera [m]; nothing is drawn below 0.3 m.
        r: Lateral offset of the figure from the camera [m], positive right.
    """
    if d < 0.3:
        return
    u = cx + focal * r / d
    feet = cy + focal * C.CAMERA_HEIGHT / d
    head_top = cy + focal * (C.CAMERA_HEIGHT - C.WALKER_HEIGHT) / d
    tall = feet - head_top
    half = focal * 0.22 / d
    if tall < FIGURE_DETAIL_PX:  # too small for legs and a head: a shirt-coloured mark
        _fill(img, head_top, feet, u - half, u + half, SHIRT)
        return
    _fill(img, head_top + 0.55 * tall, feet, u - half, u + half, LEGS)
    _fill(img, head_top + 0.18 * tall, head_top + 0.55 * tall, u - 1.2 * half, u + 1.2 * half, SHIRT)
    _fill(img, head_top, head_top + 0.18 * tall, u - 0.6 * half, u + 0.6 * half, SKIN)


@lru_cache(maxsize=16)
def _birdeye_geometry(width: int, height: int, ahead: float, behind: float, span: float) -> tuple:
    """Bird's-eye view: metres per pixel (rows, cols), per-row forward [m], per-column right [m], levels."""
    mpp_x, mpp_y = (ahead + behind) / height, span / width
    fwd_rows = ahead - (np.arange(height) + 0.5) * mpp_x
    right_cols = -0.5 * span + (np.arange(width) + 0.5) * mpp_y
    levels = np.broadcast_to(_marking_level(max(mpp_x, mpp_y)), (height,))
    return mpp_x, mpp_y, fwd_rows, right_cols, levels, np.ones(height)


def birdeye_chw(
    world: World, width: int = 84, height: int = 84, ahead: float = 32.0, behind: float = 8.0, span: float = 40.0,
    right: float = 0.0,
) -> np.ndarray:
    """Bird's-eye view, forward up, channel-first.

    Args:
        world: The world to draw.
        width: Image width [px].
        height: Image height [px].
        ahead: Ground shown ahead of the ego centre [m].
        behind: Ground shown behind the ego centre [m].
        span: Ground width shown [m].
        right: Lateral offset of the image centre from the ego centre [m], positive right.

    Returns:
        uint8 array of shape (3, height, width).
    """
    mpp_x, mpp_y, fwd_rows, right_cols, levels, ones = _birdeye_geometry(width, height, ahead, behind, span)
    right_cols = right_cols + right
    ego = world.ego
    c, s = math.cos(ego.yaw), math.sin(ego.yaw)
    img = np.empty((3, height, width), dtype=np.uint8)
    cls = ground_rows(world.spec.road, ego.y + fwd_rows * s, ones * c, ego.x + fwd_rows * c, ones * -s,
                      right_cols, levels, straight=abs(s) < STRAIGHT_SIN_YAW)
    _paint(img, cls)

    def to_px(fwd: float, rgt: float) -> tuple[float, float]:
        return (ahead - fwd) / mpp_x, (rgt - right + 0.5 * span) / mpp_y

    row, col = to_px(0.0, 0.0)
    hl, hw = 0.5 * C.EGO_LENGTH / mpp_x, 0.5 * C.EGO_WIDTH / mpp_y
    _fill(img, row - hl, row + hl, col - hw, col + hw, EGO)
    rad_r, rad_c = C.WALKER_RADIUS / mpp_x, C.WALKER_RADIUS / mpp_y
    for f, r in zip(*world.walker_offsets(), strict=True):
        row, col = to_px(f, r)
        if not (-rad_r <= row < height + rad_r and -rad_c <= col < width + rad_c):
            continue
        if max(rad_r, rad_c) <= 2.0:  # a few pixels: the square is the disc
            _fill(img, row - rad_r, row + rad_r, col - rad_c, col + rad_c, WALKER_TOP)
            continue
        r0, r1 = int(max(row - rad_r, 0)), int(min(math.ceil(row + rad_r), height))
        c0, c1 = int(max(col - rad_c, 0)), int(min(math.ceil(col + rad_c), width))
        rr, cc = np.mgrid[r0:r1, c0:c1]
        disc = ((rr + 0.5 - row) / rad_r) ** 2 + ((cc + 0.5 - col) / rad_c) ** 2 <= 1.0
        img[:, r0:r1, c0:c1][:, disc] = WALKER_TOP[:, None]
    return img


def render_front(world: World, width: int = 640, height: int = 360, fov: float = 90.0) -> np.ndarray:
    """Front camera frame as uint8 (height, width, 3); see `front_chw`."""
    return np.ascontiguousarray(front_chw(world, width, height, fov).transpose(1, 2, 0))


def render_birdeye(world: World, width: int = 84, height: int = 84, **kwargs) -> np.ndarray:
    """Bird's-eye frame as uint8 (height, width, 3); see `birdeye_chw`."""
    return np.ascontiguousarray(birdeye_chw(world, width, height, **kwargs).transpose(1, 2, 0))


TOPDOWN_HEIGHT = 6.4
"""Height [m] of the top-down reward camera above the ground (VLM-RL config, ``birdview1`` mount)."""
TOPDOWN_FOV = 110.0
"""Field of view [deg] of the top-down reward camera (VLM-RL config: every camera is 110 deg)."""
TOPDOWN_AHEAD = 5.2
"""Forward offset [m] of the top-down camera from the ego centre (VLM-RL ``birdview1``, x = 5.2)."""
TOPDOWN_RIGHT = -1.6
"""Rightward offset [m] of the top-down camera (VLM-RL ``birdview1``, y = -1.6: 1.6 m to the left)."""
TOPDOWN_SIZE = 517
"""Width and height [px] of VLM-RL's top-down reward camera (VLM-RL ``birdview1`` camera, 517x517)."""


def topdown_chw(world: World, width: int = TOPDOWN_SIZE, height: int = TOPDOWN_SIZE) -> np.ndarray:
    """VLM-RL's reward camera: looking straight down (pitch -90 deg), forward up, channel-first.

    A pinhole camera looking straight down at flat ground maps the ground plane with one scale, so
    the frame is the bird's-eye view of the ground rectangle the camera sees: with square pixels
    the horizontal field of view is `TOPDOWN_FOV` and the footprint is
    2 * `TOPDOWN_HEIGHT` * tan(FOV / 2) = 18.3 m wide, centred `TOPDOWN_AHEAD` m ahead of and
    1.6 m left of the ego centre. Pedestrians are drawn as discs (seen from above).

    Args:
        world: The world to draw.
        width: Image width [px].
        height: Image height [px].

    Returns:
        uint8 array of shape (3, height, width).
    """
    span = 2.0 * TOPDOWN_HEIGHT * math.tan(math.radians(TOPDOWN_FOV) / 2.0)
    depth = span * height / width  # square pixels
    return birdeye_chw(world, width, height, ahead=TOPDOWN_AHEAD + depth / 2, behind=depth / 2 - TOPDOWN_AHEAD,
                       span=span, right=TOPDOWN_RIGHT)


VIEWS = ("front", "birdeye", "topdown")
"""View names."""


def render(world: World, view: str, width: int, height: int, channels_first: bool = False) -> np.ndarray:
    """Render ``view`` at ``width`` x ``height`` [px].

    Args:
        world: The world to draw.
        view: ``"front"`` (upstream's camera, the scenario's field of view), ``"birdeye"``, or
            ``"topdown"`` (VLM-RL's reward camera, `topdown_chw`).
        width: Width [px].
        height: Height [px].
        channels_first: Return (3, H, W) instead of (H, W, 3).

    Returns:
        uint8 RGB array.

    Raises:
        ValueError: Unknown view.
    """
    if view == "front":
        img = front_chw(world, width, height, world.spec.camera.fov)
    elif view == "birdeye":
        img = birdeye_chw(world, width, height)
    elif view == "topdown":
        img = topdown_chw(world, width, height)
    else:
        raise ValueError(f"view={view!r}: choose one of {list(VIEWS)}")
    return img if channels_first else np.ascontiguousarray(img.transpose(1, 2, 0))
