"""Speed of CarlaTrolley-v0 on one core: steps/s (state, image), reset time, highway-env ratio.

Usage (pin to one core; needs the [bench] extra for the highway-env comparison):
    taskset -c 1 python benchmarks/bench_env.py [--seconds 1] [--repeats 5]

Targets (from the project's performance study of peer simulators): state-only >= 20,000
steps/s, 84x84 image >= 5,000 steps/s, reset <= 100 us; all with ticks_per_action=1 through
gym.make, random tool actions, resets included. Each figure is the median of --repeats runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import carla_gym  # noqa: E402,F401
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.hints import install_command  # noqa: E402
from carla_gym.io import report_results  # noqa: E402


def steps_per_second(env: gym.Env, seconds: float, seed: int = 0, actions=None, check_every: int = 1000) -> float:
    """Actions drawn beforehand (default: uniform over the action space), with resets, for about ``seconds``.

    Args:
        env: The env.
        seconds: Measuring time [s] (checked every ``check_every`` steps).
        seed: Seed of the default actions and the first reset.
        actions: A sequence of actions to cycle through instead of the uniform draws.
        check_every: Steps between clock reads.

    Returns:
        Steps per second, resets included.
    """
    rng = np.random.default_rng(seed)
    if actions is None and isinstance(env.action_space, gym.spaces.Discrete):
        actions = rng.integers(0, env.action_space.n, size=100_000)
    elif actions is None:
        actions = rng.uniform(-1.0, 1.0, size=(100_000, *env.action_space.shape)).astype(np.float32)
    env.reset(seed=seed)
    steps, start = 0, time.perf_counter()
    while True:
        for _ in range(check_every):
            _, _, terminated, truncated, _ = env.step(actions[steps % len(actions)])
            steps += 1
            if terminated or truncated:
                env.reset()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def reset_seconds(env: gym.Env, n: int = 5000) -> float:
    """Mean wall time of one reset [s]."""
    env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(n):
        env.reset()
    return (time.perf_counter() - start) / n


def highway_steps_per_second(seconds: float) -> float | None:
    """highway-fast-v0 steps/s with IDLE actions, or None if highway-env is not installed."""
    try:
        import highway_env  # noqa: F401
    except ImportError:
        return None
    env = gym.make("highway-fast-v0")
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(1)
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def median_of(fn, repeats: int) -> float:
    """Median over ``repeats`` calls (the machines are shared; single runs are noisy)."""
    return statistics.median(fn() for _ in range(repeats))


def main() -> dict:
    """Measure every figure, print them and optionally write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement [s]")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per figure; the median is reported")
    parser.add_argument("--scenario", default="trolley_micro_escape_exists")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    make = lambda **kw: gym.make("CarlaTrolley-v0", scenario=args.scenario, ticks_per_action=1, **kw)  # noqa: E731
    n, sec = args.repeats, args.seconds
    envs = {
        "state": make(observation_mode="state"),
        "image84": make(observation_mode="dict"),
        "birdeye84": make(observation_mode="dict", image_view="birdeye"),
        "control_state": make(observation_mode="state", action_mode="control"),
    }
    results = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
                   f"{platform.python_version()}, numpy {np.__version__}, gymnasium {gym.__version__}",
        **{f"{k}_steps_per_s": median_of(lambda e=e: steps_per_second(e, sec), n) for k, e in envs.items()},
        "reset_us_state": 1e6 * median_of(lambda: reset_seconds(envs["state"]), n),
        "reset_us_image84": 1e6 * median_of(lambda: reset_seconds(envs["image84"], n=2000), n),
    }
    hw = highway_steps_per_second(sec)
    if hw is not None:
        hw = median_of(lambda: highway_steps_per_second(sec), n)
    results["highway_fast_v0_steps_per_s"] = hw
    if hw:
        results["ratio_state_vs_highway_fast"] = results["state_steps_per_s"] / hw
        results["ratio_image84_vs_highway_fast"] = results["image84_steps_per_s"] / hw
    if hw is None:
        results["highway_fast_v0_steps_per_s"] = f"not measured: highway-env is missing; {install_command('bench')}"
    report_results(results, args.json)
    return results


if __name__ == "__main__":
    main()
