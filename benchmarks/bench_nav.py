"""Speed of the navigation world and of CarlaNavigation-v0: ticks/s and env steps/s against highway-fast-v0.

Usage (pin to one core; needs the [bench] extra for the highway-env comparison):
    taskset -c 1 python benchmarks/bench_nav.py [--seconds 1] [--repeats 3] [--json results.json]

Figures: ticks/s of free_roam_Town05_v20_p10 (a `NavWorld` on Town05 with 20 NPC vehicles and 10
walkers; state only, nothing rendered) with the ego standing on full brake ("idle": the world's own
cost), driven by recorded controls without a route ("control": how an RL or LLM agent drives it; the
ego is located on the lane network every tick) and on the normal behaviour agent's autopilot (a new
goal whenever it arrives); highway-fast-v0 steps/s with IDLE actions in the same run and the ratio
(the target: at least 50x); reset time per town (world construction plus planning a goal route, warm: each town's
static tables are built once per process and cached; the first build, town included, is reported apart); tick
cost on Town05 with 0, 10, 20, 40 and 80 NPC vehicles (10 walkers). Each figure is the median of
--repeats runs; the speed figures and highway-fast-v0 are measured in turn within each repeat and the
ratios are medians of the per-repeat ratios.

`CarlaNavigation-v0` figures, in the same repeats: env steps/s of ``route_Town02`` with 20 NPC cars
on the training routes, resets included, with ``action_mode="control"`` (one 0.05 s tick per step; actions
drawn beforehand: steer ~ N(0, 0.05), pedal uniform in [0.2, 0.5], so episodes end now and then, as early in
training) in each ``observation_mode`` (state; dict: 96 x 96 bird's-eye image; vlm-rl: VLM-RL's 192 x 192 x 6
raster), and ``action_mode="tools"`` (10 ticks per step, uniform random meta-actions) with the state vector.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import platform
import statistics
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

import carla_gym  # noqa: E402,F401 - registers CarlaNavigation-v0
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.hints import install_command  # noqa: E402
from carla_gym.io import report_results  # noqa: E402
from carla_gym.sim.navigation.world import NavWorld  # noqa: E402
from carla_gym.sim.town import TOWN_NAMES, get_town  # noqa: E402

BENCH_DIR = Path(__file__).resolve().parent


@functools.cache
def _bench_env():
    """benchmarks/bench_env.py as a module, loaded once (the benchmarks folder is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_env", BENCH_DIR / "bench_env.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _highway_steps_per_second(seconds: float) -> float | None:
    """highway-fast-v0 steps/s, as `bench_env.highway_steps_per_second` (one definition)."""
    return _bench_env().highway_steps_per_second(seconds)


ENV_MODES = {
    "control_state": {"observation_mode": "state"},
    "control_dict": {"observation_mode": "dict"},
    "control_vlm_rl": {"observation_mode": "vlm-rl"},
    "tools_state": {"observation_mode": "state", "action_mode": "tools"},
}
"""`CarlaNavigation-v0` figure name -> its arguments (over route_Town02, 20 cars, training routes)."""


def env_steps_per_second(env: gym.Env, seconds: float) -> float:
    """`CarlaNavigation-v0` steps/s with the actions of the module docstring (`bench_env.steps_per_second`)."""
    actions = None
    if not isinstance(env.action_space, gym.spaces.Discrete):
        rng = np.random.default_rng(0)
        actions = np.stack([rng.normal(0.0, 0.05, 10_000), rng.uniform(0.2, 0.5, 10_000)], axis=1)
        actions = list(actions.clip(-1.0, 1.0).astype(np.float32))
    return _bench_env().steps_per_second(env, seconds, actions=actions, check_every=50)


def set_random_goal(w: NavWorld, rng: np.random.Generator) -> None:
    """Give the ego a route to a random reachable spawn point (tries up to 20 of them)."""
    sp = w.town.spawn_points
    for k in rng.permutation(len(sp))[:20]:
        try:
            w.set_goal(sp.xy[k], "normal")
            return
        except ValueError:
            continue
    raise RuntimeError(f"no reachable goal found in {w.town.name}")


def autopilot_controls(town: str, n_vehicles: int, n_walkers: int, ticks: int) -> list[tuple[float, float, float]]:
    """Controls the normal behaviour agent gives the ego over ``ticks`` ticks (a new goal on arrival)."""
    w = NavWorld(town, n_vehicles, n_walkers, seed=0)
    rng = np.random.default_rng(0)
    set_random_goal(w, rng)
    out = []
    for _ in range(ticks):
        if w.route_done():
            set_random_goal(w, rng)
        out.append(w.autopilot_control())
        w.tick(*out[-1])
    return out


def ticks_per_second(town: str, n_vehicles: int, n_walkers: int, seconds: float, ego: str = "idle",
                     controls: list | None = None) -> float:
    """Ticks/s of one world for about ``seconds``.

    Args:
        town: Town name.
        n_vehicles: NPC vehicles.
        n_walkers: Walkers.
        seconds: Wall time to measure for [s].
        controls: Ego (throttle, brake, steer) per tick for ``ego="control"`` (`autopilot_controls`).
        ego: "idle" (full brake, standing), "autopilot" (the normal behaviour agent on a route, a new
            goal on arrival) or "control" (``controls`` replayed in a loop, no route: an RL or LLM
            agent driving by control, the ego located on the lane network every tick).
    """
    w = NavWorld(town, n_vehicles, n_walkers, seed=0)
    rng = np.random.default_rng(0)
    if ego == "autopilot":
        set_random_goal(w, rng)
    ticks, start = 0, time.perf_counter()
    while True:
        for _ in range(200):
            if ego == "autopilot":
                if w.route_done():
                    set_random_goal(w, rng)
                w.tick(*w.autopilot_control())
            elif ego == "control":
                w.tick(*controls[ticks % len(controls)])
            else:
                w.tick(0.0, 1.0, 0.0)
            ticks += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return ticks / elapsed


def reset_seconds(town: str, n: int = 20) -> float:
    """Mean wall time [s] of building free_roam's world and routing a goal.

    The world has 20 vehicles and 10 walkers (0 where the town has no sidewalks: Town06).
    """
    walkers = 10 if get_town(town).sidewalks else 0
    start = time.perf_counter()
    for seed in range(n):
        w = NavWorld(town, 20, walkers, seed=seed)
        set_random_goal(w, np.random.default_rng(seed))
    return (time.perf_counter() - start) / n


def main() -> dict:
    """Measure every figure, print them and optionally write them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement [s]")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per figure; the median is reported")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    args = parser.parse_args()
    n, sec = args.repeats, args.seconds
    med = lambda fn: statistics.median(fn() for _ in range(n))  # noqa: E731
    results: dict = {"machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
                                f"{platform.python_version()}, numpy {np.__version__}"}
    first = {}
    for town in TOWN_NAMES:
        start = time.perf_counter()
        NavWorld(get_town(town), 0, 0)
        first[town] = 1e3 * (time.perf_counter() - start)
    recorded = autopilot_controls("Town05", 20, 10, 4000)
    egos = ("idle", "control", "autopilot")
    envs = {name: gym.make("CarlaNavigation-v0", scenario="route_Town02",
                           scenario_config={"traffic": 20, "route": "train"}, **kwargs)
            for name, kwargs in ENV_MODES.items()}
    runs = []  # each repeat measures every figure once, interleaved, so that load on the machine hits all alike
    for _ in range(n):
        run = {ego: ticks_per_second("Town05", 20, 10, sec, ego, recorded) for ego in egos}
        run |= {name: env_steps_per_second(env, sec) for name, env in envs.items()}
        run["highway"] = _highway_steps_per_second(sec)
        runs.append(run)
    for ego in egos:
        results[f"free_roam_Town05_v20_p10_{ego}_ticks_per_s"] = statistics.median(r[ego] for r in runs)
    for name in envs:
        results[f"CarlaNavigation_v0_{name}_steps_per_s"] = statistics.median(r[name] for r in runs)
    if runs[0]["highway"] is None:
        results["highway_fast_v0_steps_per_s"] = f"not measured: highway-env is missing; {install_command('bench')}"
    else:
        results["highway_fast_v0_steps_per_s"] = statistics.median(r["highway"] for r in runs)
        for figure in (*egos, *envs):  # the median of the per-repeat ratios
            results[f"ratio_{figure}_vs_highway_fast"] = statistics.median(r[figure] / r["highway"] for r in runs)
    for town in TOWN_NAMES:
        results[f"reset_ms_{town}"] = 1e3 * med(lambda t=town: reset_seconds(t))
        results[f"first_static_build_ms_{town}"] = first[town]
    counts = (0, 10, 20, 40, 80)
    runs = [{nv: ticks_per_second("Town05", nv, 10, sec) for nv in counts} for _ in range(n)]  # interleaved
    for nv in counts:
        results[f"tick_us_Town05_v{nv}_p10"] = 1e6 / statistics.median(r[nv] for r in runs)
    report_results(results, args.json)
    return results


if __name__ == "__main__":
    main()
