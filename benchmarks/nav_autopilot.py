"""Success share of the normal behaviour agent driving the ego in every town at four traffic densities.

Usage:
    python benchmarks/nav_autopilot.py [--seeds 20] [--ticks 2400] [--length 150] [--json results.json]

An episode (one seed): a `NavWorld` with N NPC vehicles and M walkers (no jaywalkers); the ego gets
a goal about --length metres of route away, drawn by `carla_gym.sim.navigation.episode.draw_goal` with
a maze spec (the rule NavEpisode uses), and drives with `NavWorld.autopilot_control` (the normal
behaviour agent). Success: the route is done within --ticks ticks (0.05 s each; 2,400 = 120 s, room for
waits at lights and for gaps in oncoming traffic) with no ego contact (vehicle or walker). The target
is at least 95% on Town05 with 10 vehicles and 5 walkers. A
density the world refuses (walkers in Town06, which has no sidewalks) is reported as such.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from carla_gym.cli_args import HelpFormatter
from carla_gym.io import write_json_atomic
from carla_gym.sim.navigation.episode import draw_goal
from carla_gym.sim.navigation.scenarios import MAZE, resolve_nav_scenario
from carla_gym.sim.navigation.world import NavWorld
from carla_gym.sim.town import TOWN_NAMES

DENSITIES = ((0, 0), (5, 3), (10, 5), (20, 10))
"""(vehicles, walkers) pairs of the table."""


def episode(town: str, n_vehicles: int, n_walkers: int, seed: int, ticks: int, length: float) -> str:
    """One episode's outcome: ``success``, ``collision``, ``timeout`` or ``no_goal``."""
    w = NavWorld(town, n_vehicles, n_walkers, seed=seed)
    spec = resolve_nav_scenario(MAZE, {"goal_distance": length})
    try:
        goal, _ = draw_goal(spec, w.town, w.ego_location, np.random.default_rng(seed))
    except ValueError:
        return "no_goal"
    w.set_goal(goal[:2], "normal")
    for _ in range(ticks):
        w.tick(*w.autopilot_control())
        if w.counts["ego_vehicle"] or w.counts["ego_walker"]:
            return "collision"
        if w.route_done():
            return "success"
    return "timeout"


def main() -> None:
    """Run every town and density over --seeds seeds and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--seeds", type=int, default=20, help="episodes per town and density")
    parser.add_argument("--ticks", type=int, default=2400, help="tick budget per episode")
    parser.add_argument("--json", type=Path, default=None, help="also write the outcomes to this JSON file")
    parser.add_argument("--length", type=float, default=150.0, help="wanted route length [m]")
    parser.add_argument("--towns", nargs="*", default=list(TOWN_NAMES))
    args = parser.parse_args()
    print(f"{'town':14s}" + "".join(f"{f'v{v}/p{p}':>22s}" for v, p in DENSITIES))
    results: dict[str, list[str] | str] = {}
    for town in args.towns:
        cells = []
        for v, p in DENSITIES:
            try:
                out = [episode(town, v, p, s, args.ticks, args.length) for s in range(args.seeds)]
            except ValueError:
                cells.append("refused")  # e.g. walkers in a town without sidewalks
                results[f"{town}_v{v}_p{p}"] = "refused"
                continue
            results[f"{town}_v{v}_p{p}"] = out
            ok = out.count("success")
            cells.append(f"{100 * ok / len(out):.0f}% (c{out.count('collision')} t{out.count('timeout')})")
        print(f"{town:14s}" + "".join(f"{c:>22s}" for c in cells), flush=True)
        if args.json:  # written after every town, so an interrupted run keeps what it measured
            write_json_atomic(args.json, results)


if __name__ == "__main__":
    main()
