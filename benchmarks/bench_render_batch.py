"""Batched rendering: render_batch of N trolley worlds against N single-world renders, 84x84.

Times `carla_gym.sim.render.render_batch` for N in (1, 16, 256) at 84x84, front camera and bird's-eye
view, against N calls of the single-world function (`front_chw`, `birdeye_chw`) in the same run, and
prints microseconds per image and their ratio. The worlds are copies of ``trolley_micro_escape_exists``
driven to varied poses (mid lane change, so yaw != 0, and straight).

Usage:
    python benchmarks/bench_render_batch.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

from carla_gym.sim import ToolCall, World, resolve_scenario
from carla_gym.sim import render as R

SIZES = (1, 16, 256)
"""Batch sizes timed (the target: 84x84 image observations at N = 256)."""


def make_worlds(n: int) -> list[World]:
    """``n`` worlds of ``trolley_micro_escape_exists`` at varied poses: every third mid lane change."""
    spec = resolve_scenario("trolley_micro_escape_exists")
    worlds = []
    for i in range(n):
        world = World(spec)
        if i % 3 == 1:
            world.apply(ToolCall("lane_change", lane_direction="left"))
        for _ in range(5 + i % 17):
            world.tick()
        worlds.append(world)
    return worlds


def batch_args(worlds: list[World]) -> tuple:
    """`render_batch` arguments (pose, padded pedestrians, mask, roads) of ``worlds``."""
    wx = np.stack([np.asarray(w.walker_x, dtype=np.float64) for w in worlds])
    wy = np.stack([np.asarray(w.walker_y, dtype=np.float64) for w in worlds])
    pose = np.array([[w.ego.x, w.ego.y, w.ego.yaw] for w in worlds]).T
    return (*pose, wx, wy, np.ones(wx.shape, dtype=bool), [w.spec.road for w in worlds])


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timing repeats; the best is reported")
    args = parser.parse_args()
    single = {"front": R.front_chw, "birdeye": R.birdeye_chw}
    print(f"{'view':8s} {'N':>4s} {'single us/img':>14s} {'batch us/img':>13s} {'speed-up':>9s}")
    for view in ("front", "birdeye"):
        for n in SIZES:
            worlds = make_worlds(n)
            batch = batch_args(worlds)
            out = np.empty((n, 3, 84, 84), dtype=np.uint8)
            assert np.array_equal(R.render_batch(view, 84, 84, *batch, out=out),
                                  np.stack([single[view](w, 84, 84) for w in worlds]))
            number = max(1, 512 // n)
            t_single = min(timeit.repeat(lambda: [single[view](w, 84, 84) for w in worlds],  # noqa: B023
                                         number=number, repeat=args.repeats)) / number / n
            t_batch = min(timeit.repeat(lambda: R.render_batch(view, 84, 84, *batch, out=out),  # noqa: B023
                                        number=number, repeat=args.repeats)) / number / n
            print(f"{view:8s} {n:4d} {t_single * 1e6:14.1f} {t_batch * 1e6:13.1f} {t_single / t_batch:8.1f}x")


if __name__ == "__main__":
    main()
