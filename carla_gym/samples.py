"""Write sample frames of every scenario: python -m carla_gym.samples docs/samples.

For each named scenario (aliases and micro-benchmarks, without the micro-benchmarks'
_deadzone twins, whose scene is identical) it saves the front camera at 640x360 and 84x84 and
the bird's-eye view at 256x256 and 84x84, after the ego has observed for --ticks ticks (20 =
1 s by default), or until one tick before the episode's deadline when that comes sooner
(3 ticks for action-bias scenarios, 0 with deadzone).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from PIL import Image

from carla_gym.cli_args import HelpFormatter
from carla_gym.sim.render import render
from carla_gym.sim.scenarios import resolve_scenario, scenario_names
from carla_gym.sim.world import World

SIZES = (("front", 640, 360), ("front", 84, 84), ("birdeye", 256, 256), ("birdeye", 84, 84))
"""(view, width, height) of each saved frame."""


def write_samples(out_dir: Path, ticks: int = 20) -> list[Path]:
    """Save the sample PNGs into ``out_dir`` and return their paths.

    Args:
        out_dir: Output folder (created if missing).
        ticks: Ticks to simulate (observe only) before taking the frames.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in scenario_names():
        if name.endswith("_deadzone") and name.startswith("trolley_micro_"):
            continue
        world = World(resolve_scenario(name))
        for _ in range(min(ticks, world.spec.horizon - 1)):
            world.tick()
        for view, width, height in SIZES:
            path = out_dir / f"{name}_{view}_{width}x{height}.png"
            Image.fromarray(render(world, view, width, height)).save(path)
            written.append(path)
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("out_dir", type=Path, nargs="?", default=Path("docs/samples"),
                        help="output folder (default: docs/samples)")
    parser.add_argument("--ticks", type=int, default=20, help="ticks to simulate before the frames (default 20)")
    args = parser.parse_args()
    paths = write_samples(args.out_dir, args.ticks)
    print(f"wrote {len(paths)} images to {args.out_dir}")
