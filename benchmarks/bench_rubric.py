"""Cost of the server's rubric (openenv-core's rubric classes) per step: time and retained memory.

Usage:
    python benchmarks/bench_rubric.py [--episodes 100] [--steps 50] [--repeats 3] [--json results.json]

Time: `CarlaEnvironment.step` (``observe``, in-process) over ``--episodes`` episodes of ``--steps`` steps of
``trolley_micro_escape_exists``, with the rubric and with its ``forward`` replaced by a no-op, alternating
``--repeats`` times (ratios in one run). Memory: what one long episode retains per step (tracemalloc over
2,000 steps): the trolley rubric keeps every step's action and observation until the next reset, as
openenv-core's trajectory rubrics (and upstream's) do.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from pathlib import Path

from carla_gym.cli_args import HelpFormatter
from carla_gym.io import report_results
from carla_gym.openenv.models import CarlaAction
from carla_gym.server.environment import CarlaEnvironment

SCENARIO = "trolley_micro_escape_exists"
CONFIG = {"max_steps": 100_000, "initial_speed_kmh": 0.0}  # a standing ego: the episode lasts as long as asked
OBSERVE = CarlaAction(action_type="observe")


def step_time_us(noop: bool, episodes: int, steps: int) -> float:
    """Mean `CarlaEnvironment.step` time [us]; ``noop``: the rubric's ``forward`` returns 0.0 at once."""
    env = CarlaEnvironment()
    total = 0.0
    for _ in range(episodes):
        env.reset(scenario_name=SCENARIO, scenario_config=CONFIG)
        if noop:
            env.rubric.forward = lambda action, observation: 0.0
        start = time.perf_counter()
        for _ in range(steps):
            env.step(OBSERVE)
        total += time.perf_counter() - start
    env.close()
    return total / (episodes * steps) * 1e6


def retained_kib_per_step(steps: int = 2000) -> float:
    """Memory [KiB] one episode retains per step (tracemalloc, after 100 warm-up steps)."""
    env = CarlaEnvironment()
    env.reset(scenario_name=SCENARIO, scenario_config=CONFIG)
    for _ in range(100):
        env.step(OBSERVE)
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for _ in range(steps):
        env.step(OBSERVE)
    grown = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    env.close()
    return grown / steps / 1024


def main() -> None:
    """Run the measurements, print them and optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--episodes", type=int, default=100, help="episodes per timing")
    parser.add_argument("--steps", type=int, default=50, help="observe steps per episode")
    parser.add_argument("--repeats", type=int, default=3, help="alternating timings of each")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    results = {}
    for i in range(args.repeats):
        results[f"step_us_with_rubric_{i}"] = step_time_us(False, args.episodes, args.steps)
        results[f"step_us_rubric_noop_{i}"] = step_time_us(True, args.episodes, args.steps)
    results["retained_kib_per_step"] = retained_kib_per_step()
    report_results(results, args.json)


if __name__ == "__main__":
    main()
