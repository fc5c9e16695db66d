"""CPU learning result on CarlaNavigation-v0: route completion on VLM-RL's evaluation routes.

Usage:
    python benchmarks/learn_nav.py [--seeds 0] [--json results/learn_nav.json]

Trains the recipe below with ``train_sb3.py`` (run directory runs/learn_nav/seed<N>, overwritten), then
evaluates it as VLM-RL's eval.py does (`carla_gym.sb3.nav_eval`): one episode per evaluation route of
the Town02 analogue (10 routes), deterministic actions, at 0, 20 and 40 NPC vehicles. Prints and
writes (``--json``) route completion, collision rate, success rate, average speed and collisions per
km at each density, with the training steps, the training wall time and the process CPU time
(training and evaluation; the embedded simulator and the policy run in this one process). Exit
status 1 if route completion at 0 vehicles is below the target (80 %) or training took 30 minutes
or more.

The recipe (this project's choice, from short exploration runs recorded in docs/performance.md) is
``train_sb3.py``'s default on this env with ``--traffic 0``: PPO on the state vector (MlpPolicy),
control actions, one 0.05 s tick per step as VLM-RL, 4 in-process envs, the ``cpu`` preset's
navigation PPO (`carla_gym.sb3.presets.NAV_CPU_PPO`) for 100,000 steps, on VLM-RL's training
routes (its 12 intersection pairs and random pairs) of the empty town. With several seeds the
means and sample standard deviations over seeds are printed too (``mean_*``, ``std_*``).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train_sb3  # noqa: E402
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.io import report_results  # noqa: E402

TARGET_COMPLETION = 0.8
"""Route completion at 0 vehicles the recipe must reach (this project's target)."""
MAX_TRAIN_SECONDS = 30 * 60
"""Training wall-time budget [s] on 2 cores (this project's target)."""
RECIPE = ["--env", "CarlaNavigation-v0", "--traffic", "0", "--eval-freq", "20000"]
"""``train_sb3.py`` flags of the recipe (the rest are its defaults on CarlaNavigation-v0)."""
MEASURES = ("route_completion", "collision_rate", "success_rate", "speed_mean", "total_distance", "CPM",
            "collision_speed")
"""Measures reported per traffic level (`carla_gym.sb3.nav_eval.summarise` keys)."""


def main() -> int:
    """Train and evaluate the recipe per seed; return 1 if a seed misses the target or the budget."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="training seeds")
    parser.add_argument("--json", type=Path, default=None, help="write the results here as JSON")
    args = parser.parse_args()
    results: dict = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
                                f"{platform.python_version()}", "command": "python train_sb3.py " + " ".join(RECIPE)}
    failures = 0
    for seed in args.seeds:
        out = Path("runs/learn_nav") / f"seed{seed}"
        cpu, wall = time.process_time(), time.perf_counter()
        summary = train_sb3.main([*RECIPE, "--seed", str(seed), "--output-dir", str(out), "--overwrite"])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        results |= {f"seed{seed}_steps": summary["total_timesteps"],
                    f"seed{seed}_train_wall_s": summary["train_seconds"],
                    f"seed{seed}_total_wall_s": round(wall, 1), f"seed{seed}_total_cpu_s": round(cpu, 1)}
        for traffic, row in summary["traffic"].items():
            for key in MEASURES:
                results[f"seed{seed}_traffic{traffic}_{key}"] = row[key]
        failures += (summary["traffic"]["0"]["route_completion"] < TARGET_COMPLETION
                     or summary["train_seconds"] >= MAX_TRAIN_SECONDS)
    if len(args.seeds) > 1:
        names = [k.split("_", 1)[1] for k in results if k.startswith(f"seed{args.seeds[0]}_")]
        for name in names:
            values = np.array([results[f"seed{seed}_{name}"] for seed in args.seeds], dtype=np.float64)
            results[f"mean_{name}"], results[f"std_{name}"] = float(values.mean()), float(values.std(ddof=1))
    report_results(results, args.json)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
