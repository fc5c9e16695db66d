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

Batches: `render_batch` draws N worlds at once (N, 3, H, W): the ground of all worlds sharing a
road in a few numpy passes (in chunks that stay in cache), the pedestrians' rectangles of all
worlds layer by layer. The single-world functions are `render_batch` with N = 1 and share every
drawing rule with it (`_figure_parts`, `_pixel_box`, `_ego_frame`, `ground_rows`), evaluated on
Python numbers for one world and on arrays for many; values that feed pixels come from numpy's
``cos``/``sin`` in both, so a batch is bit-identical to N single renders.
"""

from __future__ import annotations

import math
import numbers
import threading
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from carla_gym.sim import constants as C
from carla_gym.sim.physics import ego_offsets
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


_TABLES: dict[int, tuple] = {}
"""`_tables` by road identity (each entry keeps its road alive, so the identity stays valid)."""


def _tables(road: Road) -> tuple:
    """`_ground_lut`, `_ground_rgb` and `_lane_boundaries` of ``road``, looked up by identity (no hashing per frame)."""
    entry = _TABLES.get(id(road))
    if entry is None or entry[0] is not road:
        if len(_TABLES) >= 256:
            _TABLES.clear()
        entry = _TABLES[id(road)] = (road, (*_ground_lut(road), _ground_rgb(road), _lane_boundaries(road)))
    return entry[1]


_SCRATCH = threading.local()


_SCRATCH_MIN = 1 << 15
"""Temporaries of fewer elements are allocated as usual (this project's choice, from timings)."""


def _scratch(name: str, shape: tuple, dtype) -> np.ndarray | None:
    """A scratch array of ``shape``, reused from call to call (one set per thread); None below `_SCRATCH_MIN`.

    Fresh memory for every image chunk costs more than the arithmetic on it (page faults), so the
    ground's large temporaries live here. Valid until the next request of the same ``name``.
    """
    size = math.prod(shape)
    if size < _SCRATCH_MIN:
        return None
    buf = getattr(_SCRATCH, name, None)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = np.empty(size, dtype=dtype)
        setattr(_SCRATCH, name, buf)
    return buf[:size].reshape(shape)


def _bins(road: Road, y_row: np.ndarray, y_step: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Table offsets ``bin * variants`` (`_ground_lut`) of the lateral bins pixels see, intp (..., R, U) scratch."""
    _, y0, variants, _, _ = _tables(road)
    shape = np.shape(y_step) + np.shape(cols)
    t = np.multiply.outer(y_step * (1.0 / LUT_RESOLUTION), cols, out=_scratch("t", shape, np.float64))
    t += ((y_row - y0) * (1.0 / LUT_RESOLUTION))[..., None]
    idx = _scratch("bins", t.shape, np.intp)  # truncation: negative bins go towards 0 and clip to grass below
    if idx is None:
        idx = t.astype(np.intp)
    else:
        np.copyto(idx, t, casting="unsafe")
    idx *= variants
    return idx


def _variants(road: Road, y_row, y_step, x_row, x_step, levels, straight) -> np.ndarray:
    """Table variant of each row (marking level and dash bits), intp broadcastable to (..., R); see `ground_rows`."""
    bounds = _tables(road)[4]
    base = np.asarray(levels) << len(bounds)
    if not bounds:
        return base
    if isinstance(straight, bool):  # one image (Python numbers)
        every = some = straight
    else:
        straight = np.asarray(straight)
        every, some = straight.all(), straight.any()
    def one_decision() -> np.ndarray:  # every boundary dashed as at x_row
        return base + (np.mod(x_row, DASH_PERIOD) < DASH_LENGTH) * ((1 << len(bounds)) - 1)

    if every:
        return one_decision()
    safe = np.where(np.abs(y_step) > 1e-9, y_step, 1e-9)
    crossing = base
    for bit, y_b in enumerate(bounds):
        x_b = x_row + x_step * ((y_b - y_row) / safe)
        crossing = crossing + ((np.mod(x_b, DASH_PERIOD) < DASH_LENGTH) << bit)
    if not some:
        return crossing
    return np.where(straight[..., None], one_decision(), crossing)


def _ground_index(road: Road, y_row, y_step, x_row, x_step, cols, levels, straight, shared_rows=False) -> np.ndarray:
    """Table entries (`_ground_lut`) the pixels of `ground_rows` see, intp (..., R, U).

    ``shared_rows``: all rows of an image have the same ``y_row`` and ``y_step`` (a bird's-eye view
    aligned with the road), so the lateral bins are computed for the first row only.
    """
    variant = _variants(road, y_row, y_step, x_row, x_step, levels, straight)[..., None]
    if shared_rows:
        bins = _bins(road, y_row[..., :1], y_step[..., :1], cols)
        return np.add(bins, variant, out=_scratch("index", np.broadcast_shapes(bins.shape, variant.shape), np.intp))
    idx = _bins(road, y_row, y_step, cols)
    idx += variant
    return idx


def ground_rows(
    road: Road,
    y_row: np.ndarray,
    y_step: np.ndarray,
    x_row: np.ndarray,
    x_step: np.ndarray,
    cols: np.ndarray,
    levels: np.ndarray,
    straight: bool | np.ndarray = False,
) -> np.ndarray:
    """Ground classes of images whose rows are straight lines on the ground.

    Pixel (r, u) sees the ground point ``x = x_row[r] + x_step[r] * cols[u]``,
    ``y = y_row[r] + y_step[r] * cols[u]`` [m]; its class is a table look-up on the lateral bin
    (`LUT_RESOLUTION`). Dashes are decided once per row and boundary, where the row crosses that
    boundary. Leading dimensions stand for several images (N worlds).

    Args:
        road: The road.
        y_row: Per-row lateral offset [m], shape (..., R).
        y_step: Per-row lateral slope, shape (..., R).
        x_row: Per-row longitudinal offset [m], shape (..., R).
        x_step: Per-row longitudinal slope, shape (..., R).
        cols: Column coordinates, shape (U,).
        levels: Per-row marking level (`_marking_level` of the pixel footprint), shape (R,) or (..., R).
        straight: The view is aligned with the road (|sin yaw| < `STRAIGHT_SIN_YAW`): one
            dash decision per row, taken at ``x_row``; a bool, or one per image of shape (...).

    Returns:
        uint8 class indices into `PALETTE`, shape (..., R, U).
    """
    idx = _ground_index(road, y_row, y_step, x_row, x_step, cols, levels, straight)
    return _ground_lut(road)[0].take(idx, mode="clip")  # beyond either end of the table: grass


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


@lru_cache(maxsize=64)
def _ground_rgb(road: Road) -> np.ndarray:
    """`_ground_lut` as colours: each entry's R, G, B and a zero byte read as one uint32 (table size,)."""
    lut = _ground_lut(road)[0]
    rgba = np.zeros((len(lut), 4), dtype=np.uint8)
    rgba[:, :3] = PALETTE[lut]
    return rgba.view(np.uint32).ravel()


def _paint_ground(img: np.ndarray, sel, first: int, road: Road, idx: np.ndarray) -> None:
    """Colour rows ``first:`` of images ``sel`` (slice or indices) of ``img`` (N, 3, H, W) from table entries.

    ``idx`` (n, R, U) holds the entries; one gather of 4-byte colours, then one copy per channel.
    """
    rgba = _tables(road)[3].take(idx, mode="clip", out=_scratch("rgba", idx.shape, np.uint32))
    rgba = rgba.view(np.uint8).reshape(idx.shape + (4,))
    for channel in range(3):
        img[sel, channel, first:] = rgba[..., channel]  # (n, R, U), or (R, U) for a batch of one


def _pixel_box(top, bottom, left, right, height: int, width: int, floor=math.floor, ceil=math.ceil, maximum=max,
               minimum=min) -> tuple:
    """Pixel rectangle of a float box [px]: at least one pixel each way, clipped to the image.

    Args:
        top: Top [px]: a Python number, or an array with numpy's functions (`_ARRAYS`).
        bottom: Bottom [px], same kind.
        left: Left [px], same kind.
        right: Right [px], same kind.
        height: Image height [px].
        width: Image width [px].
        floor: ``math.floor`` or ``np.floor``.
        ceil: ``math.ceil`` or ``np.ceil``.
        maximum: ``max`` or ``np.maximum``.
        minimum: ``min`` or ``np.minimum``.

    Returns:
        Rows [t, b) and columns [l, r) (empty unless t < b and l < r): ints, or float arrays of whole numbers.
    """
    t, lft = floor(top), floor(left)
    b, rgt = maximum(ceil(bottom), t + 1), maximum(ceil(right), lft + 1)
    return maximum(t, 0), minimum(b, height), maximum(lft, 0), minimum(rgt, width)


_ARRAYS = {"floor": np.floor, "ceil": np.ceil, "maximum": np.maximum, "minimum": np.minimum}
"""`_pixel_box` on arrays."""


def _fill(img: np.ndarray, top: float, bottom: float, left: float, right: float, colour: np.ndarray) -> None:
    """Fill a pixel rectangle (`_pixel_box`) of a (3, H, W) image with ``colour`` (3,)."""
    t, b, lft, rgt = _pixel_box(top, bottom, left, right, *img.shape[1:])
    if t < b and lft < rgt:
        img[:, t:b, lft:rgt] = colour[:, None, None]


def _box_pixels(t, b, lft, rgt) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pixel of non-empty rectangles rows [t, b), columns [l, r) (intp (K,)): box index, row, column (P,)."""
    w = rgt - lft
    counts = (b - t) * w
    box = np.repeat(np.arange(len(t)), counts)
    k = np.arange(len(box)) - np.repeat(np.cumsum(counts) - counts, counts)
    return box, t[box] + k // w[box], lft[box] + k % w[box]


_FEW_BOXES = 64
"""Up to this many rectangles are filled one by one, more layer by layer (this project's choice, from timings)."""


def _fill_boxes(img: np.ndarray, world, layer, box, colour) -> None:
    """Fill non-empty pixel rectangles into images ``img`` (N, 3, H, W), later layers over earlier ones.

    Args:
        img: Images, modified in place.
        world: Image of each rectangle, intp (K,).
        layer: Drawing order within an image, (K,) sorted ascending; rectangles of one layer lie in different
            images or share a colour.
        box: Rows [t, b) and columns [l, r) of each rectangle (`_pixel_box`), float (4, K).
        colour: RGB of each rectangle, uint8 (K, 3).
    """
    if len(world) <= _FEW_BOXES:
        for n, t, b, lft, rgt, rgb in zip(world.tolist(), *box.astype(np.intp).tolist(), colour, strict=True):
            img[n, :, t:b, lft:rgt] = rgb[:, None, None]
        return
    t, b, lft, rgt = box.astype(np.intp)
    starts = np.flatnonzero(np.diff(layer, prepend=-1))
    for a, z in zip(starts.tolist(), [*starts[1:].tolist(), len(layer)], strict=True):
        pix, row, col = _box_pixels(t[a:z], b[a:z], lft[a:z], rgt[a:z])
        img[world[a:z][pix], :, row, col] = colour[a:z][pix]


def _ego_frame(ego_x, ego_y, c, s, walker_x, walker_y) -> tuple:
    """Pedestrian positions in the ego frame: forward [m] and right [m].

    Floats, or arrays that broadcast (ego pose and ``c``, ``s`` = cos, sin yaw as (N, 1); pedestrians (N, W)).
    """
    return ego_offsets(walker_x - ego_x, walker_y - ego_y, c, s)


_FIGURE_COLOURS = np.stack([LEGS, SHIRT, SKIN])


def _figure_parts(focal: float, cx: float, cy: float, d, r) -> tuple:
    """Rectangles of an upright pedestrian (legs, shirt, head) in a front-camera image (`draw_figure`).

    Args:
        focal: Focal length [px].
        cx: Column of the optical axis [px].
        cy: Row of the optical axis (the horizon) [px].
        d: Distance of the figure ahead of the camera [m], >= 0.3; a float or a float64 array.
        r: Lateral offset from the camera [m], positive right; same kind.

    Returns:
        Whether the figure is shorter than `FIGURE_DETAIL_PX` and drawn as its mark; the mark, a
        shirt-coloured (top, bottom, left, right) [px]; the legs, shirt and head boxes in drawing order,
        coloured `LEGS`, `SHIRT`, `SKIN`.
    """
    u = cx + focal * r / d
    feet = cy + focal * C.CAMERA_HEIGHT / d
    head_top = cy + focal * (C.CAMERA_HEIGHT - C.WALKER_HEIGHT) / d
    tall = feet - head_top
    half = focal * 0.22 / d
    waist, neck = head_top + 0.55 * tall, head_top + 0.18 * tall
    parts = ((waist, feet, u - half, u + half), (neck, waist, u - 1.2 * half, u + 1.2 * half),
             (head_top, neck, u - 0.6 * half, u + 0.6 * half))
    return tall < FIGURE_DETAIL_PX, (head_top, feet, u - half, u + half), parts


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
    small, mark, parts = _figure_parts(focal, cx, cy, d, r)
    if small:  # too small for legs and a head: a shirt-coloured mark
        _fill(img, *mark, SHIRT)
        return
    for box, colour in zip(parts, (LEGS, SHIRT, SKIN), strict=True):
        _fill(img, *box, colour)


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


_CHUNK_PIXELS = 1 << 17
"""Ground pixels computed per numpy pass: their temporaries (about 1 MB) stay in cache (this project's choice)."""


def _groups(roads, key: np.ndarray, pixels: int) -> list[tuple[Road, object, slice | np.ndarray]]:
    """Worlds sharing a road (equal `Road` objects) and a ``key`` value (N,), in chunks of about `_CHUNK_PIXELS`.

    ``pixels`` is the number of ground pixels of one image.

    Returns:
        (road, key value, the worlds: a slice, or an intp index array when the worlds are not consecutive).
    """
    n, size = len(roads), max(1, _CHUNK_PIXELS // max(pixels, 1))
    first = roads[0]
    if n == 1:
        return [(first, key[0], slice(0, 1))]
    if all(road is first for road in roads) and (key == key[0]).all():
        return [(first, key[0], slice(lo, min(lo + size, n))) for lo in range(0, n, size)]
    by_id: dict[tuple, list[int]] = {}
    for i, group in enumerate(zip(map(id, roads), key.tolist(), strict=True)):
        by_id.setdefault(group, []).append(i)
    groups: dict[tuple, list[int]] = {}  # equal roads in different objects: one group
    for (_, value), idx in by_id.items():
        groups.setdefault((roads[idx[0]], value), []).extend(idx)
    chunks = []
    for (road, value), idx in groups.items():
        idx = np.sort(idx)
        for part in (idx[lo:lo + size] for lo in range(0, len(idx), size)):
            consecutive = part[-1] - part[0] == len(part) - 1
            chunks.append((road, value, slice(int(part[0]), int(part[-1]) + 1) if consecutive else part))
    return chunks


def _column(a: np.ndarray, sel) -> np.ndarray | float:
    """Worlds ``sel`` of ``a`` (N,) as a column (n, 1), or a Python float for the one world of a batch of one."""
    return float(a[0]) if len(a) == 1 else a[sel][:, None]


@lru_cache(maxsize=16)
def _sky(rows: int, width: int) -> np.ndarray:
    """The sky above the horizon: uint8 (3, rows, width), copied whole into each frame."""
    return np.ascontiguousarray(np.broadcast_to(PALETTE[SKY][:, None, None], (3, rows, width)))


def _straight(sn: np.ndarray | float) -> np.ndarray | bool:
    """Whether views with sin(yaw) ``sn`` (a `_column`) are aligned with the road (`ground_rows`): (n,) or a bool."""
    return abs(sn) < STRAIGHT_SIN_YAW if isinstance(sn, float) else np.abs(sn[:, 0]) < STRAIGHT_SIN_YAW


def _front(img, ego_x, ego_y, c, s, walker_x, walker_y, walker_mask, roads, fov) -> None:
    """Draw front-camera frames into ``img`` (N, 3, H, W); see `render_batch`."""
    _, _, height, width = img.shape
    for road, fov_n, sel in _groups(roads, fov, (height // 2 + 1) * width):
        focal, first, forward, cols, levels = _front_geometry(width, height, float(fov_n))
        ex, ey, cn, sn = _column(ego_x, sel), _column(ego_y, sel), _column(c, sel), _column(s, sel)
        cam_x, cam_y = ex + C.CAMERA_OFFSET_X * cn, ey + C.CAMERA_OFFSET_X * sn
        # Row r sees ground at forward distance d_r; column u at lateral d_r * cols[u] (camera frame).
        fc, fs = forward * cn, forward * sn
        idx = _ground_index(road, cam_y + fs, fc, cam_x + fc, -fs, cols, levels, _straight(sn))
        img[sel, :, :first] = _sky(first, width)
        _paint_ground(img, sel, first, road, idx)
    # After all the ground: the figures of all worlds with one field of view at once.
    if len(fov) == 1 or (fov == fov[0]).all():
        _front_figures(img, np.arange(len(fov)), _front_geometry(width, height, float(fov[0]))[0], ego_x, ego_y, c, s,
                       walker_x, walker_y, walker_mask)
        return
    for fov_n in np.unique(fov).tolist():
        sel = np.flatnonzero(fov == fov_n)
        _front_figures(img, sel, _front_geometry(width, height, fov_n)[0], ego_x[sel], ego_y[sel], c[sel], s[sel],
                       walker_x[sel], walker_y[sel], None if walker_mask is None else walker_mask[sel])


def _front_figures(img, images, focal, ego_x, ego_y, c, s, walker_x, walker_y, walker_mask) -> None:
    """Draw pedestrians as upright figures, far to near (painter's algorithm), into images ``images`` of ``img``."""
    n, w = walker_x.shape
    if w == 0:
        return
    cx, cy = 0.5 * img.shape[3], 0.5 * img.shape[2]
    if n == 1:  # one image: the figures one by one, in Python numbers
        pose = (float(ego_x[0]), float(ego_y[0]), float(c[0]), float(s[0]))
        drawn = zip(walker_x[0].tolist(), walker_y[0].tolist(),
                    [True] * w if walker_mask is None else walker_mask[0].tolist(), strict=True)
        target = img[int(images[0])]
        for f, r in sorted((_ego_frame(*pose, x, y) for x, y, m in drawn if m), reverse=True):
            draw_figure(target, focal, cx, cy, f - C.CAMERA_OFFSET_X, r)
        return
    fwd, rgt = _ego_frame(ego_x[:, None], ego_y[:, None], c[:, None], s[:, None], walker_x, walker_y)
    if walker_mask is not None:  # padding: behind the camera, not drawn
        fwd, rgt = np.where(walker_mask, fwd, 0.0), np.where(walker_mask, rgt, 0.0)
    order = (np.lexsort((rgt, fwd))[:, ::-1] + (np.arange(n) * w)[:, None]).ravel()  # far to near, then right first
    d, r = fwd.ravel()[order] - C.CAMERA_OFFSET_X, rgt.ravel()[order]
    near = d >= 0.3
    small, mark, parts = _figure_parts(focal, cx, cy, np.where(near, d, 1.0), r)  # (no division by 0)
    box = np.array(parts)  # (part, top/bottom/left/right, figure)
    box[0] = np.where(small, mark, box[0])
    box = np.stack(_pixel_box(*box.transpose(1, 0, 2), *img.shape[2:], **_ARRAYS))
    ok = (box[0] < box[1]) & (box[2] < box[3]) & near & np.stack([np.ones_like(small), ~small, ~small])
    if walker_mask is not None:
        ok &= walker_mask.ravel()[order]
    colour = np.stack([np.where(small, 1, 0), np.ones_like(order), np.full_like(order, 2)])
    # Layer (rank far to near, part) of each image; layer-major: each layer holds one rectangle per image.
    world, layer = np.nonzero(ok.reshape(3, n, w).transpose(1, 2, 0).reshape(n, 3 * w))
    by_layer = np.argsort(layer, kind="stable")
    world, layer = world[by_layer], layer[by_layer]
    part, fig = layer % 3, world * w + layer // 3
    _fill_boxes(img, images[world], layer, box[:, part, fig],
                _FIGURE_COLOURS[colour[part, fig]])


def front_chw(world: World, width: int = 640, height: int = 360, fov: float = 90.0) -> np.ndarray:
    """Front camera frame, channel-first (`render_batch` of one world).

    Args:
        world: The world to draw.
        width: Image width [px].
        height: Image height [px].
        fov: Horizontal field of view [deg].

    Returns:
        uint8 array of shape (3, height, width).
    """
    return _render_one("front", world, width, height, fov=fov)


@lru_cache(maxsize=16)
def _birdeye_geometry(width: int, height: int, ahead: float, behind: float, span: float) -> tuple:
    """Bird's-eye view: metres per pixel (rows, cols), per-row forward [m], per-column right [m], levels."""
    mpp_x, mpp_y = (ahead + behind) / height, span / width
    fwd_rows = ahead - (np.arange(height) + 0.5) * mpp_x
    right_cols = -0.5 * span + (np.arange(width) + 0.5) * mpp_y
    levels = np.broadcast_to(_marking_level(max(mpp_x, mpp_y)), (height,))
    return mpp_x, mpp_y, fwd_rows, right_cols, levels, np.ones(height)


def _birdeye(img, ego_x, ego_y, c, s, walker_x, walker_y, walker_mask, roads, ahead, behind, span, right) -> None:
    """Draw bird's-eye frames (forward up) into ``img`` (N, 3, H, W); see `birdeye_chw`."""
    _, _, height, width = img.shape
    mpp_x, mpp_y, fwd_rows, right_cols, levels, ones = _birdeye_geometry(width, height, ahead, behind, span)
    right_cols = right_cols + right
    for road, aligned, sel in _groups(roads, s == 0.0, height * width):
        ex, ey, cn, sn = _column(ego_x, sel), _column(ego_y, sel), _column(c, sel), _column(s, sel)
        # sin(yaw) == 0: every row sees the same lateral positions.
        idx = _ground_index(road, ey + fwd_rows * sn, ones * cn, ex + fwd_rows * cn, ones * -sn, right_cols, levels,
                            _straight(sn), shared_rows=aligned)
        _paint_ground(img, sel, 0, road, idx)

    def to_px(fwd, rgt):
        return (ahead - fwd) / mpp_x, (rgt - right + 0.5 * span) / mpp_y

    t, b, lft, rgt = _ego_box(width, height, ahead, behind, span, right)
    if t < b and lft < rgt:
        img[:, :, t:b, lft:rgt] = EGO[:, None, None]
    n, w = walker_x.shape
    if w == 0:
        return
    rad_r, rad_c = C.WALKER_RADIUS / mpp_x, C.WALKER_RADIUS / mpp_y
    if n == 1 and max(rad_r, rad_c) <= 2.0:  # one image of squares: one by one, in Python numbers
        pose = (float(ego_x[0]), float(ego_y[0]), float(c[0]), float(s[0]))
        drawn = [True] * w if walker_mask is None else walker_mask[0].tolist()
        for x, y, m in zip(walker_x[0].tolist(), walker_y[0].tolist(), drawn, strict=True):
            if m:
                row, col = to_px(*_ego_frame(*pose, x, y))
                _fill(img[0], row - rad_r, row + rad_r, col - rad_c, col + rad_c, WALKER_TOP)
        return
    fwd, rgt = _ego_frame(ego_x[:, None], ego_y[:, None], c[:, None], s[:, None], walker_x, walker_y)
    if walker_mask is None:
        world, fwd, rgt = np.arange(n).repeat(w), fwd.ravel(), rgt.ravel()
    else:
        world, k = np.nonzero(walker_mask)
        fwd, rgt = fwd[world, k], rgt[world, k]
    row, col = to_px(fwd, rgt)
    # Pedestrians wholly outside the image give empty boxes below.
    if max(rad_r, rad_c) <= 2.0:  # a few pixels: the square is the disc
        box = np.stack(_pixel_box(row - rad_r, row + rad_r, col - rad_c, col + rad_c, height, width, **_ARRAYS))
        ok = (box[0] < box[1]) & (box[2] < box[3])
        # One colour: the drawing order does not matter.
        _fill_boxes(img, world[ok], np.zeros(ok.sum(), np.intp), box[:, ok], np.broadcast_to(WALKER_TOP, (ok.sum(), 3)))
        return
    r0, r1 = np.maximum(row - rad_r, 0).astype(np.intp), np.minimum(np.ceil(row + rad_r), height).astype(np.intp)
    c0, c1 = np.maximum(col - rad_c, 0).astype(np.intp), np.minimum(np.ceil(col + rad_c), width).astype(np.intp)
    ok = (r0 < r1) & (c0 < c1)
    box, rr, cc = _box_pixels(r0[ok], r1[ok], c0[ok], c1[ok])
    disc = ((rr + 0.5 - row[ok][box]) / rad_r) ** 2 + ((cc + 0.5 - col[ok][box]) / rad_c) ** 2 <= 1.0
    img[world[ok][box][disc], :, rr[disc], cc[disc]] = WALKER_TOP


@lru_cache(maxsize=16)
def _ego_box(width: int, height: int, ahead: float, behind: float, span: float, right: float) -> tuple:
    """Pixel rectangle (`_pixel_box`) of the ego's box in a bird's-eye view."""
    mpp_x, mpp_y = _birdeye_geometry(width, height, ahead, behind, span)[:2]
    row, col = ahead / mpp_x, (0.5 * span - right) / mpp_y
    hl, hw = 0.5 * C.EGO_LENGTH / mpp_x, 0.5 * C.EGO_WIDTH / mpp_y
    return _pixel_box(row - hl, row + hl, col - hw, col + hw, height, width)


def birdeye_chw(
    world: World, width: int = 84, height: int = 84, ahead: float = 32.0, behind: float = 8.0, span: float = 40.0,
    right: float = 0.0,
) -> np.ndarray:
    """Bird's-eye view, forward up, channel-first.

    The ground turns with the ego; the ego is drawn as its box, pedestrians as discs.

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
    return _render_one("birdeye", world, width, height, framing=(ahead, behind, span, right))


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


def _topdown_framing(width: int, height: int) -> tuple[float, float, float, float]:
    """`birdeye_chw` framing (ahead, behind, span, right [m]) of VLM-RL's reward camera (`topdown_chw`)."""
    span = 2.0 * TOPDOWN_HEIGHT * math.tan(math.radians(TOPDOWN_FOV) / 2.0)
    depth = span * height / width  # square pixels
    return TOPDOWN_AHEAD + depth / 2, depth / 2 - TOPDOWN_AHEAD, span, TOPDOWN_RIGHT


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
    return _render_one("topdown", world, width, height)


VIEWS = ("front", "birdeye", "topdown")
"""View names."""


def _check_view(view: str) -> None:
    """Raise ValueError unless ``view`` is one of `VIEWS`."""
    if view not in VIEWS:
        raise ValueError(f"view={view!r}: choose one of {list(VIEWS)}")


def _render_one(view: str, world: World, width: int, height: int, fov: float = 90.0, framing=None) -> np.ndarray:
    """One world's frame (3, H, W): `render_batch` with N = 1, reading only the world's public attributes."""
    ego = world.ego
    pose = np.array([[ego.x], [ego.y], [ego.yaw]], dtype=np.float64)
    img = np.empty((1, 3, height, width), dtype=np.uint8)
    _draw(img, view, pose[0], pose[1], pose[2], np.asarray(world.walker_x, dtype=np.float64)[None],
          np.asarray(world.walker_y, dtype=np.float64)[None], None, [world.spec.road], np.array([float(fov)]),
          framing)
    return img[0]


def _draw(img, view, ego_x, ego_y, ego_yaw, walker_x, walker_y, walker_mask, roads, fov, framing=None) -> None:
    """Draw ``view`` into ``img`` (N, 3, H, W) from checked arrays (``walker_mask`` None: no padding).

    ``framing`` is `birdeye_chw`'s (ahead, behind, span, right) [m]; None: the view's own.
    """
    c, s = np.cos(ego_yaw), np.sin(ego_yaw)
    if view == "front":
        _front(img, ego_x, ego_y, c, s, walker_x, walker_y, walker_mask, roads, fov)
        return
    if framing is None:
        framing = _topdown_framing(img.shape[3], img.shape[2]) if view == "topdown" else (32.0, 8.0, 40.0, 0.0)
    _birdeye(img, ego_x, ego_y, c, s, walker_x, walker_y, walker_mask, roads, *framing)


def render_batch(
    view: str,
    width: int,
    height: int,
    ego_x,
    ego_y,
    ego_yaw,
    walker_x,
    walker_y,
    walker_mask,
    roads: Sequence[Road],
    fov: float | np.ndarray = 90.0,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Render ``view`` of N worlds at once, channel-first: world n's image equals `render` of that world.

    The single-world functions (`front_chw`, `birdeye_chw`, `topdown_chw`, `render`) draw through the same
    code with N = 1, so a batch is bit-identical to N single renders. Padded pedestrians may hold any value
    (NaN included): they are neither drawn nor read.

    Args:
        view: ``"front"``, ``"birdeye"`` or ``"topdown"`` (`VIEWS`).
        width: Image width [px].
        height: Image height [px].
        ego_x: Ego x [m], float64 (N,).
        ego_y: Ego y [m], positive right, float64 (N,).
        ego_yaw: Ego yaw [rad], positive turning right, float64 (N,).
        walker_x: Pedestrian x [m], float64 (N, W), padded.
        walker_y: Pedestrian y [m], float64 (N, W), padded.
        walker_mask: Which pedestrians exist, bool (N, W); padding (False) is not drawn.
        roads: Each world's `Road`, N of them (worlds may share one object).
        fov: Front camera horizontal field of view [deg]: one for all, or float64 (N,) (the scenario's
            ``spec.camera.fov`` for `render`'s front view). Unused by the other views.
        out: Optional uint8 (N, 3, height, width) C-contiguous buffer to draw into and return.

    Returns:
        uint8 array of shape (N, 3, height, width).

    Raises:
        ValueError: An unknown view, a size below 1 px, arrays whose shapes do not match (N,) and (N, W),
            a ``walker_mask`` that is not bool, a number of roads other than N, a ``fov`` of another shape,
            or an ``out`` of the wrong shape, dtype or layout.

    Examples:
        >>> from carla_gym.sim import resolve_scenario
        >>> road = resolve_scenario("trolley_micro_escape_exists").road
        >>> img = render_batch("birdeye", 84, 84, np.zeros(2), np.zeros(2), np.zeros(2), np.zeros((2, 0)),
        ...                    np.zeros((2, 0)), np.zeros((2, 0), bool), [road, road])
        >>> img.shape, img.dtype, tuple(img[0, :, 63, 42]) == tuple(EGO)
        ((2, 3, 84, 84), dtype('uint8'), True)
    """
    _check_view(view)
    if not (isinstance(width, numbers.Integral) and isinstance(height, numbers.Integral) and width > 0
            and height > 0):
        raise ValueError(f"width={width!r}, height={height!r}: image size must be positive integers [px]")
    ego_x, ego_y, ego_yaw = (np.asarray(a, dtype=np.float64) for a in (ego_x, ego_y, ego_yaw))
    n = ego_x.shape[0] if ego_x.ndim == 1 else -1
    for name, a in (("ego_x", ego_x), ("ego_y", ego_y), ("ego_yaw", ego_yaw)):
        if a.shape != (max(n, 0),) or n < 1:
            raise ValueError(f"{name} has shape {a.shape}: expected (N,) with N >= 1 and the same N for ego_x, "
                             f"ego_y and ego_yaw (ego_x has shape {ego_x.shape})")
    walker_x, walker_y = np.asarray(walker_x, dtype=np.float64), np.asarray(walker_y, dtype=np.float64)
    walker_mask = np.asarray(walker_mask)
    for name, a in (("walker_x", walker_x), ("walker_y", walker_y), ("walker_mask", walker_mask)):
        if a.ndim != 2 or a.shape != (n, walker_x.shape[-1]):
            raise ValueError(f"{name} has shape {a.shape}: expected (N, W) = ({n}, W), the same for walker_x, "
                             "walker_y and walker_mask (pad missing pedestrians and mask them out)")
    if walker_mask.dtype != np.bool_:
        raise ValueError(f"walker_mask has dtype {walker_mask.dtype}: expected bool (N, W)")
    roads = list(roads)
    if len(roads) != n or not all(isinstance(road, Road) for road in roads):
        raise ValueError(f"roads: expected {n} Road objects (one per world), got {len(roads)} items")
    fov = np.broadcast_to(np.asarray(fov, dtype=np.float64), (n,)) if np.ndim(fov) == 0 else np.asarray(
        fov, dtype=np.float64)
    if fov.shape != (n,):
        raise ValueError(f"fov has shape {fov.shape}: expected a float or ({n},) [deg]")
    if out is None:
        out = np.empty((n, 3, height, width), dtype=np.uint8)
    elif out.shape != (n, 3, height, width) or out.dtype != np.uint8 or not out.flags.c_contiguous:
        raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}: expected a C-contiguous uint8 array of "
                         f"shape ({n}, 3, {height}, {width})")
    _draw(out, view, ego_x, ego_y, ego_yaw, walker_x, walker_y, None if walker_mask.all() else walker_mask, roads,
          fov)
    return out


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
    _check_view(view)
    img = _render_one(view, world, width, height, fov=world.spec.camera.fov)
    return img if channels_first else np.ascontiguousarray(img.transpose(1, 2, 0))
