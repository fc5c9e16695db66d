"""Sample frames of every town and the town renderer's speed: python benchmarks/town_samples.py [OUT_DIR].

Writes ``town_<name>_front.png`` (640x360) and ``town_<name>_birdeye.png`` (256x256, 50 m across,
with the route and goal) into docs/samples (or ``out_dir``) for a scene placed by a seeded
Generator: the ego at a spawn point, 20 NPC vehicles at the spawn points nearest to it, 20 walkers
on the sidewalks nearest to it, the lights at t = 12 s, and a route to a spawn point 60 to 150 m
away. Then prints ms per frame of `render_town` at 84x84 and 640x360 on Town05 (not a timed test).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from PIL import Image

from carla_gym.cli_args import HelpFormatter
from carla_gym.sim.town import TOWN_NAMES, get_town, light_state, plan_route
from carla_gym.sim.town.render import render_town
from carla_gym.sim.traffic.vehicles import make_vehicles


def scene(name: str, seed: int = 0, n_vehicles: int = 20, n_walkers: int = 20) -> dict:
    """Keyword arguments of `render_town` for a seeded scene in town ``name`` (see the module docstring)."""
    town = get_town(name)
    rng = np.random.default_rng(seed)
    sp = town.spawn_points
    ego = int(rng.integers(len(sp)))
    near = np.argsort(np.hypot(*(sp.xy - sp.xy[ego]).T))[1:n_vehicles + 1]
    rows = np.concatenate([[ego], near])
    cars = make_vehicles(sp.xy[rows, 0], sp.xy[rows, 1], sp.yaw[rows], rng=rng)
    walk = np.concatenate(town.sidewalks) if town.sidewalks else np.zeros((0, 2))
    walk = walk[np.argsort(np.hypot(*(walk - sp.xy[ego]).T))[:40 * n_walkers]]
    walkers = walk[rng.choice(len(walk), min(n_walkers, len(walk)), replace=False)] if len(walk) else walk
    dist = np.hypot(*(sp.xy - sp.xy[ego]).T)
    goal = sp.xy[int(rng.choice(np.flatnonzero((dist > 60) & (dist < 150))))]
    route = plan_route(town, sp.xy[ego], goal)
    return {"town": town, "vehicles": cars, "walkers_xy": walkers, "light_states": light_state(town, 12.0),
            "route": route, "goal": route.waypoints[-1]}


def main(out_dir: Path) -> None:
    """Write the samples and print the speed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOWN_NAMES:
        if name.endswith("_Opt"):
            continue
        kw = scene(name)
        Image.fromarray(render_town(view="front", width=640, height=360, **kw)).save(out_dir / f"town_{name}_front.png")
        Image.fromarray(render_town(view="birdeye", width=256, height=256, span=50.0, **kw)).save(
            out_dir / f"town_{name}_birdeye.png")
    kw = scene("Town05")
    for view, w, h in (("front", 84, 84), ("front", 640, 360), ("birdeye", 84, 84), ("birdeye", 640, 360),
                       ("topdown", 84, 84), ("topdown", 640, 360)):
        render_town(view=view, width=w, height=h, **kw)
        n = 50
        t0 = time.perf_counter()
        for _ in range(n):
            render_town(view=view, width=w, height=h, **kw)
        print(f"{view:8s} {w}x{h}: {1e3 * (time.perf_counter() - t0) / n:.2f} ms per frame (21 vehicles, 20 walkers)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("out_dir", nargs="?", type=Path, default=Path("docs/samples"),
                        help="folder for the PNGs (created if missing)")
    main(parser.parse_args().out_dir)
