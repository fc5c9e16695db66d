"""Learning check: the default `train_sb3.py` run must reach >= 95% success on escape_exists.

Usage:
    python benchmarks/learn_ppo.py [--seeds 0 1 2] [--threshold 0.95]

Runs the default command once per seed (into runs/learn_ppo/seed<N>, overwritten), prints wall
time, success rate and mean reward per seed, and exits non-zero if any seed misses the threshold.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train_sb3  # noqa: E402


def main() -> int:
    """Train once per seed; return 1 if any seed misses the threshold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threshold", type=float, default=0.95)
    args = parser.parse_args()
    failures = 0
    for seed in args.seeds:
        start = time.perf_counter()
        summary = train_sb3.main(["--seed", str(seed), "--output-dir", f"runs/learn_ppo/seed{seed}", "--overwrite"])
        wall = time.perf_counter() - start
        ok = summary["success_rate"] >= args.threshold
        failures += not ok
        print(f"seed {seed}: success {summary['success_rate']:.1%}, mean reward {summary['mean_reward']:.3f}, "
              f"train {summary['train_seconds']:.1f} s, total wall {wall:.1f} s, "
              f"{summary['total_timesteps']} steps -> {'PASS' if ok else 'FAIL'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
