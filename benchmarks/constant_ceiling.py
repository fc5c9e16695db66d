"""The constant-action ceiling of the generated trolley family.

For each candidate policy (a fixed tool choice: the tool at the first decision then ``observe``,
or the tool at every decision; `carla_gym.sim.outcomes.POLICIES`) the share of layouts where it
reaches the best simulated outcome (ties count for every tied policy), the share where one tool
alone is best, and how many pedestrians the best outcome still hits. The family's design asks that on the
test split no policy exceed 50 % and that at least three tools each be best somewhere; this project
tunes the draw (`carla_gym.sim.generated`) for about 40 % at most, each of ``emergency_stop``,
``lane_change_left`` and ``lane_change_right`` alone best in more than 15 %.

Usage:
    python benchmarks/constant_ceiling.py [--split test] [--layouts 2000] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import time

from carla_gym.sim.generated import SPLITS, constant_ceiling


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, count and print the ceiling as a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=SPLITS, default="test", help="layout split (default: test)")
    parser.add_argument("--layouts", type=int, default=2000, help="layouts, seeds first-seed onwards (default: 2000)")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first layout (default: 0)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    c = constant_ceiling(args.split, args.layouts, args.first_seed)
    seconds = time.perf_counter() - start
    print(f"{c.layouts} {args.split} layouts (seeds {args.first_seed}..{args.first_seed + c.layouts - 1}), "
          f"{seconds:.1f} s\n")
    print("| Policy | Reaches the best outcome | Its tool alone is best |")
    print("|---|---|---|")
    for policy, share in c.best_share.items():
        alone = f"{100 * c.unique_share[policy]:.1f} %" if policy in c.unique_share else ""
        print(f"| `{policy}` | {100 * share:.1f} % | {alone} |")
    print(f"\nBest outcome: pedestrians hit {', '.join(f'{h}: {100 * s:.1f} %' for h, s in c.best_hits.items())}; "
          f"leaves the road in {100 * c.best_departure:.1f} %")
    print(f"Highest share of one policy: {100 * max(c.best_share.values()):.1f} % (target: at most 50 %); "
          f"tools that alone are best somewhere: {sum(s > 0 for s in c.unique_share.values())} (at least 3)")


if __name__ == "__main__":
    main()
