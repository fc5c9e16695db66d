"""The constant-policy ceiling of the generated trolley family, per action mode.

For each constant policy of both action modes of `CarlaTrolley-v0` (`carla_gym.sim.outcomes.CANDIDATES`:
the tool policies, a tool at the first decision then ``observe`` or the tool at every decision, and the
control policies, one ``[steer, throttle_or_brake]`` at every decision) the share of layouts where it
reaches the best simulated outcome, which is its outcome success rate as a constant agent (ties count for
every tied policy); the share where one tool alone is best among the tool policies; the best constant of
each mode; and how many pedestrians the best outcome still hits. The family's design asks that on the test
split no constant policy of either mode exceed 50 % and that at least three tools each be best somewhere
(`carla_gym.sim.generated` tunes its draw for that).

Usage:
    python benchmarks/constant_ceiling.py [--split test] [--layouts 2000] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import time

from carla_gym.sim.generated import SPLITS, constant_ceiling
from carla_gym.sim.outcomes import CONTROL_ACTIONS, MODE_POLICIES, policy_call

CEILING = 0.5
"""Most a constant policy of either mode may reach (this project's design of the generated family)."""


def applies(policy: str) -> str:
    """What ``policy`` does, in words: its tool calls, or its control action at every decision."""
    if policy in CONTROL_ACTIONS:
        steer, pedal = CONTROL_ACTIONS[policy]
        return f"[steer, throttle_or_brake] = [{steer:g}, {pedal:g}] at every decision"
    call = policy_call(policy, 0)
    tool = call.action_type if call.lane_direction is None else f"lane_change {call.lane_direction}"
    if policy.endswith("_every") or tool == "observe":
        return f"{tool} at every decision"
    return f"{tool}, then observe"


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, count and print the ceiling as markdown tables (one row per constant policy)."""
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
    print("| Action mode | Constant policy | Applies | Reaches the best outcome | Its tool alone is best |")
    print("|---|---|---|---|---|")
    for mode, policies in MODE_POLICIES.items():
        for policy in policies:
            alone = f"{100 * c.unique_share[policy]:.1f} %" if policy in c.unique_share else ""
            print(f"| {mode} | `{policy}` | {applies(policy)} | {100 * c.best_share[policy]:.1f} % | {alone} |")
    print("\n| Action mode | Best constant | Reaches the best outcome |")
    print("|---|---|---|")
    for mode in MODE_POLICIES:
        policy, share = c.best_constant(mode)
        print(f"| {mode} | `{policy}` | {100 * share:.1f} % |")
    print(f"\nBest outcome: pedestrians hit {', '.join(f'{h}: {100 * s:.1f} %' for h, s in c.best_hits.items())}; "
          f"leaves the road in {100 * c.best_departure:.1f} %")
    highest = max(c.best_share.values())
    print(f"Highest share of one constant policy: {100 * highest:.1f} % (target: at most {100 * CEILING:.0f} % in "
          f"each mode); tools that alone are best somewhere: {sum(s > 0 for s in c.unique_share.values())} "
          "(at least 3)")


if __name__ == "__main__":
    main()
