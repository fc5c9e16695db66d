"""Learning checks of ``train_sb3.py`` (this project's acceptance targets), with wall time and steps.

Usage:
    python benchmarks/learn_sb3.py [--checks ppo_escape ppo_mixed sac_escape] [--seeds 0] [--json out.json]

Checks (each run writes to runs/learn_sb3/<check>_seed<N>, overwritten; 100 evaluation episodes
per scenario; exit status 1 if any check misses its threshold):

| Check | Command | Threshold |
|---|---|---|
| ppo_escape | default: PPO, tools, state, escape_exists, 20,480 steps | success >= 95% |
| ppo_mixed | PPO, ``--scenario mixed`` (see `carla_gym.suites`), 30,000 steps | reward >= 0.9 x the oracle's |
| sac_escape | SAC, control actions, escape_exists, 10,000 steps | success >= 90% |
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train_sb3  # noqa: E402
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.io import write_json_atomic  # noqa: E402

CHECKS = {
    "ppo_escape": ([], lambda r: r["success_rate"] >= 0.95, "success >= 95%"),
    "ppo_mixed": (["--scenario", "mixed", "--total-timesteps", "30000"],
                  lambda r: r["reward_vs_oracle"] >= 0.9, "reward >= 0.9 x oracle"),
    "sac_escape": (["--algo", "sac"], lambda r: r["success_rate"] >= 0.90, "success >= 90%"),
}


def headline(evaluation: dict) -> dict:
    """The measures the checks read from a run's eval.json (`train_sb3.main`'s result): the ``all`` rows.

    Returns:
        The trained policy's success rate, mean reward, pedestrians actually hit per episode and
        road departure rate over its scenarios (equal weight), the oracle's mean reward on the
        same episodes and their ratio ``reward_vs_oracle`` (None when the oracle's is 0).
    """
    pooled = {row["agent"]: row for row in evaluation["rows"] if row["scenario"] == "all"}
    policy, oracle = pooled[evaluation["algo"]], pooled["oracle"]
    return {"success_rate": policy["success_rate"], "mean_reward": policy["mean_reward"],
            "oracle_mean_reward": oracle["mean_reward"],
            "reward_vs_oracle": policy["mean_reward"] / oracle["mean_reward"] if oracle["mean_reward"] else None,
            "mean_actual_hits": policy["actual_pedestrians_hit"], "road_departure_rate": policy["road_departure_rate"]}


def main() -> int:
    """Run the checks; return 1 if any misses its threshold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--checks", nargs="+", default=list(CHECKS), choices=list(CHECKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    failures, rows = 0, []
    for check in args.checks:
        extra, passed, threshold = CHECKS[check]
        for seed in args.seeds:
            out = Path("runs/learn_sb3") / f"{check}_seed{seed}"
            start = time.perf_counter()
            evaluation = train_sb3.main([*extra, "--seed", str(seed), "--output-dir", str(out), "--overwrite"])
            result = {**headline(evaluation), "total_timesteps": evaluation["total_timesteps"],
                      "train_seconds": evaluation["train_seconds"]}
            ok = passed(result)
            failures += not ok
            rows.append({"check": check, "seed": seed, "passed": ok, "threshold": threshold,
                         "success_rate": result["success_rate"], "mean_reward": result["mean_reward"],
                         "reward_vs_oracle": result["reward_vs_oracle"], "mean_actual_hits": result["mean_actual_hits"],
                         "road_departure_rate": result["road_departure_rate"], "steps": result["total_timesteps"],
                         "train_seconds": result["train_seconds"],
                         "wall_seconds": round(time.perf_counter() - start, 1)})
            print(f"{check} seed {seed}: {'PASS' if ok else 'FAIL'} ({threshold}); success "
                  f"{result['success_rate']:.1%}, reward {result['mean_reward']:.3f} vs oracle "
                  f"{result['oracle_mean_reward']:.3f}, pedestrians actually hit {result['mean_actual_hits']:.2f} per "
                  f"episode, road departures {result['road_departure_rate']:.0%}, {result['total_timesteps']} steps, "
                  f"{result['train_seconds']:.1f} s training", flush=True)
    if args.json:
        write_json_atomic(args.json, rows)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
