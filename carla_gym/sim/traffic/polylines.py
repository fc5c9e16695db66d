"""Packed polylines: many centrelines in one array, with vectorised lookup and projection.

A polyline is a (K, 2) float64 array of points [m] (K >= 2, consecutive points distinct). All
lines are stored end to end in one (P, 2) array, so that a lookup for N actors on N different
lines is one `numpy.searchsorted` over a global arc-length axis on which the lines are laid out
one after another (each line starts 1 m after the previous one ends, so no two overlap).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Polylines:
    """M polylines packed into flat arrays.

    Attributes:
        points: All points, (P, 2) float64 [m].
        first: Index in ``points`` of each line's first point, (M,) int64.
        count: Number of points of each line, (M,) int64.
        length: Arc length of each line, (M,) float64 [m].
        arc: Arc length of each point from its line's start, (P,) float64 [m].
    """

    def __init__(self, lines: Sequence[np.ndarray]):
        """Pack ``lines``.

        Args:
            lines: M >= 1 arrays of shape (K_i, 2), K_i >= 2, finite, consecutive points distinct.

        Raises:
            ValueError: If there is no line, a line has a wrong shape, a non-finite value, or
                two equal consecutive points.
        """
        if len(lines) == 0:
            raise ValueError("lines=[]: need at least 1 polyline")
        arrays = []
        for i, line in enumerate(lines):
            a = np.asarray(line, dtype=np.float64)
            if a.ndim != 2 or a.shape[1] != 2 or a.shape[0] < 2:
                raise ValueError(f"lines[{i}] has shape {a.shape}: must be (K, 2) with K >= 2")
            if not np.isfinite(a).all():
                raise ValueError(f"lines[{i}] has a non-finite coordinate")
            seg = np.hypot(*np.diff(a, axis=0).T)
            if (seg <= 0.0).any():
                raise ValueError(f"lines[{i}] has equal consecutive points (segment length 0 m)")
            arrays.append(a)
        self.count = np.array([len(a) for a in arrays], dtype=np.int64)
        self.first = np.concatenate([[0], np.cumsum(self.count)[:-1]]).astype(np.int64)
        self.points = np.concatenate(arrays)
        arcs = [np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(a, axis=0).T))]) for a in arrays]
        self.arc = np.concatenate(arcs)
        self.length = np.array([c[-1] for c in arcs])
        self._base = np.concatenate([[0.0], np.cumsum(self.length + 1.0)[:-1]])
        self._global = self.arc + np.repeat(self._base, self.count)
        # Per segment (indexed by its first point; the rows of each line's last point are never read):
        # the lookups below gather these instead of recomputing them per call.
        self._last = self.first + self.count - 2
        self._p0 = self.points[:-1].copy()
        self._d = np.diff(self.points, axis=0)
        dx, dy = self._d[:, 0], self._d[:, 1]
        self._hypot = np.hypot(dx, dy)
        self._seg2 = dx * dx + dy * dy
        self._sqrt = np.sqrt(self._seg2)
        self._heading = np.arctan2(dy, dx)
        # A line's end segments extend beyond its ends (`project`): bounds of the foot's parameter t.
        self._t_lo = np.zeros(len(self._d))
        self._t_lo[self.first] = -np.inf
        self._t_hi = np.ones(len(self._d))
        self._t_hi[self._last] = np.inf

    def __len__(self) -> int:
        return len(self.count)

    def segment(self, line: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Index (into ``points``) of the first point of the segment holding arc position ``s``.

        Args:
            line: Line indices, int array of any shape.
            s: Arc positions [m], same shape; outside [0, length] they map to the end segments.

        Returns:
            Segment start indices, int64, same shape.
        """
        idx = self._global.searchsorted(self._base[line] + s, side="right") - 1
        return idx.clip(self.first[line], self._last[line])

    def at(self, line: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Point and heading at arc position ``s`` of ``line`` (linear along each segment).

        Positions before the start or past the end extrapolate along the end segments.

        Args:
            line: Line indices, int array of any shape.
            s: Arc positions [m], float array of the same shape.

        Returns:
            ``(xy, heading)``: points (..., 2) [m] and segment headings (...,) [rad].
        """
        line = np.asarray(line, dtype=np.int64)
        s = np.asarray(s, dtype=np.float64)
        i = self.segment(line, s)
        t = (s - self.arc[i]) / self._hypot[i]
        return self._p0.take(i, axis=0) + t[..., None] * self._d.take(i, axis=0), self._heading[i]

    def project(self, line: np.ndarray, xy: np.ndarray, s_guess: np.ndarray, back: float = 4.0, ahead: float = 12.0):
        """Nearest point of ``line`` to ``xy`` among the segments from ``s_guess - back`` to ``s_guess + ahead``.

        The window keeps the cost at (N, window) and the answer on the stretch an actor is
        driving (a polyline that comes back near itself is not mistaken for another part).
        The first and last segments extend beyond the line's ends, so an actor that has driven
        past the end gets s > length (and the caller moves it to the next lane).

        Args:
            line: Line indices, (N,) int.
            xy: Positions, (N, 2) [m].
            s_guess: Arc positions near the answer, (N,) [m] (for example last tick's).
            back: Window behind ``s_guess`` [m], > 0.
            ahead: Window ahead of ``s_guess`` [m], > 0.

        Returns:
            ``(s, offset, heading)``: arc positions (N,) [m], signed lateral offsets (N,) [m]
            (positive to the right of the direction of travel, the simulator's frame: y right),
            and the lane heading there (N,) [rad].
        """
        line = np.asarray(line, dtype=np.int64)
        xy = np.asarray(xy, dtype=np.float64)
        lo = self.segment(line, s_guess - back)
        hi = self.segment(line, s_guess + ahead)
        width = int((hi - lo).max()) + 1 if lo.size else 1
        idx = np.minimum(lo[:, None] + np.arange(width), hi[:, None])  # (N, W)
        x, y = xy[:, 0, None], xy[:, 1, None]
        p0, d = self._p0.take(idx, axis=0), self._d.take(idx, axis=0)  # take: faster than [idx] on rows
        x0, y0, dx, dy = p0[..., 0], p0[..., 1], d[..., 0], d[..., 1]
        t = ((x - x0) * dx + (y - y0) * dy) / self._seg2[idx]
        t = t.clip(self._t_lo[idx], self._t_hi[idx])
        rx, ry = x - (x0 + t * dx), y - (y0 + t * dy)  # from the foot to xy
        k = (rx * rx + ry * ry).argmin(axis=1)
        rows = np.arange(len(line))
        j = idx[rows, k]
        seg = self._sqrt[j]
        s = self.arc[j] + t[rows, k] * seg
        dj = self._d.take(j, axis=0)
        offset = (dj[:, 0] * ry[rows, k] - dj[:, 1] * rx[rows, k]) / seg
        return s, offset, self._heading[j]
