"""Speed of the vector env CarlaTrolleyVectorEnv against the single env, and how it grows with N.

Usage (one process pinned to one core; the highway-fast-v0 ratio needs the [bench] extra):
    taskset -c 1 python benchmarks/bench_vec.py [--seconds 1] [--repeats 5] [--plot docs/vec_scaling.png]

Every figure is env-steps per second with resets included, ticks_per_action=1, random tool actions
drawn beforehand, scenario trolley_micro_escape_exists unless named. The single env is made with
gym.make (default wrappers included) and timed as benchmarks/bench_env.py times it; the vector env
with gym.make_vec(..., vectorization_mode="vector_entry_point") autoresets inside the timed loop
(Gymnasium's NEXT_STEP mode: a sub-env whose episode ended resets on the next step, which is timed
but not counted as an env-step). The measurements of each comparison are interleaved (single,
vector, single, vector, ...) in one run and each figure is the median of --repeats of them.

``--layouts K`` times a new layout of the generated family instead (`layout_costs`: its draw and its
candidate policies' rollouts, the cost each generated reset pays): the rollouts in Worlds before the
array rollouts, one layout at a time now, and K layouts in one call.

Targets (this project's): state only at N = 4096 >= 1,000,000 env-steps/s and >= 40x the single
env; 84x84 images at N = 256 >= 10x the single env; the single env's ratio to highway-fast-v0 no
lower than bench_env.py's. The script prints the figures, then the markdown tables of docs/performance.md.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import importlib.util
import io
import os
import platform
import pstats
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from bench_env import highway_steps_per_second, steps_per_second  # noqa: E402

import carla_gym  # noqa: E402,F401
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.hints import install_command  # noqa: E402
from carla_gym.io import replace_durably, report_results  # noqa: E402
from carla_gym.suites import SUITES  # noqa: E402

SCENARIO = "trolley_micro_escape_exists"
"""Scenario of every figure but the mixed one (bench_env.py's)."""
STATE_N = 4096
"""Sub-envs of the state-only comparison."""
IMAGE_N = 256
"""Sub-envs of the 84x84 image comparison."""
SIZES = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
"""Sub-env counts of the scaling curve (1 to 65,536)."""
IMAGE_SIZE = 84
"""Image side [px] (the single env's default)."""
TARGET_STEPS_PER_S = 1_000_000
"""State-only env-steps/s at N = 4096 (the target, the order of published batched simulators)."""
TARGET_STATE_RATIO = 40.0
"""Vector / single env, state only (the target)."""
TARGET_IMAGE_RATIO = 10.0
"""Vector / single env, 84x84 images (the target)."""
IMAGE_CASES = {"image84": "front", "birdeye84": "birdeye"}
"""Image figures: result-key stem -> ``image_view``."""


def make_single(scenario: str | Sequence[str] = SCENARIO, observation_mode: str = "state",
                image_view: str = "front") -> gym.Env:
    """``gym.make("CarlaTrolley-v0", ...)`` with tool actions, ticks_per_action=1 and 84x84 images (bench_env.py's)."""
    return gym.make("CarlaTrolley-v0", scenario=scenario, observation_mode=observation_mode, image_view=image_view,
                    ticks_per_action=1, image_width=IMAGE_SIZE, image_height=IMAGE_SIZE)


def make_vector(num_envs: int, scenario: str | Sequence[str] = SCENARIO, observation_mode: str = "state",
                image_view: str = "front") -> gym.vector.VectorEnv:
    """The vector env with `make_single`'s settings: ``gym.make_vec(..., vectorization_mode="vector_entry_point")``."""
    return gym.make_vec("CarlaTrolley-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        scenario=scenario, observation_mode=observation_mode, image_view=image_view,
                        ticks_per_action=1, image_width=IMAGE_SIZE, image_height=IMAGE_SIZE)


def draw_actions(envs: gym.vector.VectorEnv, seed: int, max_values: int = 2**20) -> np.ndarray:
    """Uniform random batch actions, drawn beforehand: shape (K, N, ...) with K*N about ``max_values``, K in [16, 256].

    Args:
        envs: The vector env (its ``single_action_space`` must be Discrete or Box).
        seed: Seed of the draws.
        max_values: Rough bound on the number of drawn actions (memory), this project's choice.

    Returns:
        int64 tool indices (K, N) for Discrete, float32 (K, N, *shape) in [-1, 1] for Box.

    Raises:
        ValueError: Another action space.
    """
    rng = np.random.default_rng(seed)
    n, space = envs.num_envs, envs.single_action_space
    k = int(np.clip(max_values // n, 16, 256))
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, size=(k, n))
    if isinstance(space, gym.spaces.Box):
        return rng.uniform(-1.0, 1.0, size=(k, n, *space.shape)).astype(np.float32)
    raise ValueError(f"action space {space}: draw_actions supports Discrete (tools) and Box (control)")


def vector_run(envs: gym.vector.VectorEnv, seconds: float, seed: int = 0) -> tuple[int, int, float]:
    """Step a vector env with NEXT_STEP autoreset, resets included, for about ``seconds``.

    The clock is read after every batch step (at least one). Autoreset steps (the step after a sub-env's
    episode ended, whose action Gymnasium ignores) are timed but not counted, so the count holds the same
    transitions as the single env's (`bench_env.steps_per_second`).

    Args:
        envs: A vector env with ``autoreset_mode`` NEXT_STEP (Gymnasium's default).
        seconds: Measuring time [s].
        seed: Seed of the actions and of the reset before the timed loop.

    Returns:
        ``(batch steps, counted env-steps, elapsed [s])``.

    Raises:
        ValueError: Another autoreset mode.
    """
    mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if mode != gym.vector.AutoresetMode.NEXT_STEP:
        raise ValueError(f"autoreset_mode={mode}: vector_run counts steps of AutoresetMode.NEXT_STEP only")
    actions = draw_actions(envs, seed)
    envs.reset(seed=seed)
    steps, counted, pending = 0, 0, 0  # pending: sub-envs that ended in the last step (they autoreset in this one)
    start = time.perf_counter()
    while True:
        _, _, terminated, truncated, _ = envs.step(actions[steps % len(actions)])
        steps += 1
        counted += envs.num_envs - pending
        pending = int(np.count_nonzero(terminated | truncated))
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps, counted, elapsed


def vector_steps_per_second(envs: gym.vector.VectorEnv, seconds: float, seed: int = 0) -> float:
    """Counted env-steps per second of `vector_run` (resets included, autoreset steps not counted)."""
    _, counted, elapsed = vector_run(envs, seconds, seed)
    return counted / elapsed


def interleaved(measures: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """Median of ``repeats`` calls of each measure, called round robin (a, b, c, a, b, c, ...).

    Interleaving spreads the shared machine's slow and fast minutes over every figure of a comparison.
    """
    values: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            values[name].append(measure())
    return {name: statistics.median(v) for name, v in values.items()}


def machine() -> str:
    """The processor, cores and library versions (bench_env.py's line)."""
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, numpy {np.__version__}, gymnasium {gym.__version__}")


def measure(seconds: float = 1.0, repeats: int = 5, state_n: int = STATE_N, image_n: int = IMAGE_N,
            sizes: Sequence[int] = SIZES, scaling_seconds: float = 0.5, highway: bool = True) -> dict:
    """Every figure of the benchmark, each comparison interleaved in this run.

    Args:
        seconds: Time per measurement [s].
        repeats: Measurements per figure; the median is reported.
        state_n: Sub-envs of the state-only, mixed and profiled cases.
        image_n: Sub-envs of the image cases.
        sizes: Sub-env counts of the scaling curve.
        scaling_seconds: Cap on the time per scaling measurement [s] (the curve uses min(seconds, this)).
        highway: Also time highway-fast-v0 (when highway-env is installed) beside the single env.

    Returns:
        Flat dict for `carla_gym.io.report_results`: ``machine``, ``date``, the N of each case, and
        ``{single,vector}_{state,image84,birdeye84,mixed}_steps_per_s``, ``ratio_*`` (vector / single),
        ``highway_fast_v0_steps_per_s`` and ``ratio_single_state_vs_highway_fast`` (or a "not measured"
        note), ``scaling_N{n}_steps_per_s`` and ``scaling_N{n}_us_per_step`` [us] for each n in ``sizes``.
    """
    results: dict[str, float | str] = {
        "machine": machine(),
        "date": datetime.date.today().isoformat(),
        "state_num_envs": state_n,
        "image_num_envs": image_n,
    }
    single, vector = make_single(), make_vector(state_n)
    group = {"single_state": lambda: steps_per_second(single, seconds),
             "vector_state": lambda: vector_steps_per_second(vector, seconds)}
    hw_missing = highway and importlib.util.find_spec("highway_env") is None
    if highway and not hw_missing:
        group["highway_fast_v0"] = lambda: highway_steps_per_second(seconds)
    state = interleaved(group, repeats)
    results.update({f"{k}_steps_per_s": v for k, v in state.items()})
    results["ratio_state"] = state["vector_state"] / state["single_state"]
    if "highway_fast_v0" in state:
        results["ratio_single_state_vs_highway_fast"] = state["single_state"] / state["highway_fast_v0"]
    elif hw_missing:
        results["highway_fast_v0_steps_per_s"] = f"not measured: highway-env is missing; {install_command('bench')}"
    vector.close()

    group = {}
    for key, view in IMAGE_CASES.items():
        s, v = make_single(observation_mode="dict", image_view=view), make_vector(image_n, observation_mode="dict",
                                                                                  image_view=view)
        group[f"single_{key}"] = lambda s=s: steps_per_second(s, seconds)
        group[f"vector_{key}"] = lambda v=v: vector_steps_per_second(v, seconds)
    images = interleaved(group, repeats)
    results.update({f"{k}_steps_per_s": v for k, v in images.items()})
    for key in IMAGE_CASES:
        results[f"ratio_{key}"] = images[f"vector_{key}"] / images[f"single_{key}"]

    mixed_single, mixed_vector = make_single(list(SUITES["mixed"])), make_vector(state_n, list(SUITES["mixed"]))
    mixed = interleaved({"single_mixed": lambda: steps_per_second(mixed_single, seconds),
                         "vector_mixed": lambda: vector_steps_per_second(mixed_vector, seconds)}, repeats)
    results.update({f"{k}_steps_per_s": v for k, v in mixed.items()})
    results["ratio_mixed"] = mixed["vector_mixed"] / mixed["single_mixed"]
    mixed_vector.close()

    point = min(seconds, scaling_seconds)
    curve_envs = {n: make_vector(n) for n in sizes}
    curve = interleaved({n: lambda v=v: vector_steps_per_second(v, point) for n, v in curve_envs.items()}, repeats)
    for n, value in curve.items():
        results[f"scaling_N{n}_steps_per_s"] = value
        results[f"scaling_N{n}_us_per_step"] = 1e6 / value
    return results


def scaling_points(results: dict) -> list[tuple[int, float, float]]:
    """``(N, env-steps/s, us per env-step)`` of the ``scaling_N{n}_*`` keys, by N."""
    sizes = sorted(int(m.group(1)) for k in results if (m := re.fullmatch(r"scaling_N(\d+)_steps_per_s", k)))
    return [(n, results[f"scaling_N{n}_steps_per_s"], results[f"scaling_N{n}_us_per_step"]) for n in sizes]


def _met(value: float, target: float) -> str:
    return "met" if value >= target else "not met"


def markdown_tables(results: dict) -> str:
    """The figures table (with targets, met or not met) and the scaling table, as docs/performance.md shows them."""
    n, m = results["state_num_envs"], results["image_num_envs"]
    single = results["single_state_steps_per_s"]
    rows = [
        ("single env, state only [steps/s]", "", f"{single:,.0f}", ""),
        (f"vector env N={n:,}, state only [env-steps/s]", f">= {TARGET_STEPS_PER_S:,}",
         f"{results['vector_state_steps_per_s']:,.0f}", _met(results["vector_state_steps_per_s"], TARGET_STEPS_PER_S)),
        ("vector / single, state only", f">= {TARGET_STATE_RATIO:.0f}x", f"{results['ratio_state']:,.1f}x",
         _met(results["ratio_state"], TARGET_STATE_RATIO)),
    ]
    for key, label in (("image84", "84x84 front camera + state"), ("birdeye84", "84x84 bird's-eye + state")):
        target = f">= {TARGET_IMAGE_RATIO:.0f}x" if key == "image84" else ""
        rows += [
            (f"single env, {label} [steps/s]", "", f"{results[f'single_{key}_steps_per_s']:,.0f}", ""),
            (f"vector env N={m:,}, {label} [env-steps/s]", "", f"{results[f'vector_{key}_steps_per_s']:,.0f}", ""),
            (f"vector / single, {label}", target, f"{results[f'ratio_{key}']:,.1f}x",
             _met(results[f"ratio_{key}"], TARGET_IMAGE_RATIO) if target else ""),
        ]
    rows += [
        ("single env, mixed suite, state only [steps/s]", "", f"{results['single_mixed_steps_per_s']:,.0f}", ""),
        (f"vector env N={n:,}, mixed suite, state only [env-steps/s]", "",
         f"{results['vector_mixed_steps_per_s']:,.0f}", ""),
        ("vector / single, mixed suite", "", f"{results['ratio_mixed']:,.1f}x", ""),
    ]
    hw = results.get("highway_fast_v0_steps_per_s")
    if isinstance(hw, float):
        rows += [("highway-fast-v0 [steps/s]", "", f"{hw:,.1f}", ""),
                 ("single env, state only / highway-fast-v0", "no lower than bench_env.py's",
                  f"{results['ratio_single_state_vs_highway_fast']:,.0f}x", "")]
    lines = ["| Figure | Target | Measured | Result |", "|---|---|---|---|"]
    lines += [f"| {' | '.join(row)} |" for row in rows]
    lines += ["", "| N | env-steps/s | us per env-step |", "|---|---|---|"]
    lines += [f"| {n:,} | {rate:,.0f} | {us:,.2f} |" for n, rate, us in scaling_points(results)]
    return "\n".join(lines)


def plot_scaling(results: dict, path: str | os.PathLike) -> None:
    """Log-log plot of env-steps/s and us per env-step against N, the single env as a horizontal line (PNG).

    Written through a temporary file and a rename (`carla_gym.io.replace_durably`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = scaling_points(results)
    sizes = [p[0] for p in points]
    single = results["single_state_steps_per_s"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, values, single_value, ylabel in ((left, [p[1] for p in points], single, "env-steps/s"),
                                             (right, [p[2] for p in points], 1e6 / single, "us per env-step")):
        ax.loglog(sizes, values, "o-", label="vector env (state only, tools)")
        ax.axhline(single_value, color="grey", linestyle="--", label="single env (gym.make)")
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes], rotation=45, fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel("N (sub-envs)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    left.axhline(TARGET_STEPS_PER_S, color="tab:red", linestyle=":", label="target at N=4096")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.suptitle(f"CarlaTrolley-v0 vector env on one core, {SCENARIO}, ticks_per_action=1", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)
    replace_durably(tmp, path)


def _world_rollouts(specs: Sequence) -> list[dict]:
    """The rollouts before the array form: each candidate of each spec in its own `World` (`outcomes.rollout`)."""
    from carla_gym.sim import outcomes

    return [{p: outcomes.rollout(spec, p) for p in outcomes.CANDIDATES} for spec in specs]


def layout_costs(layouts: int = 64, repeats: int = 3, split: str = "train", first_seed: int = 10**9) -> dict:
    """Cost of a new generated layout [ms]: its draw and the rollouts of its candidate policies, three ways.

    ``world``: each candidate policy (`outcomes.CANDIDATES`, both action modes) rolled out in its own
    `World`, one layout at a time (the code before the
    array rollouts, `outcomes.rollout`, patched in); ``one``: `generated.draw_layout` one seed at a
    time (the single env's reset); ``together``: `generated.draw_layouts` of all ``layouts`` seeds in
    one call (the vector env draws its worlds' layouts ahead this way). Interleaved round robin; each
    measurement draws fresh seeds (never a cached layout). Every way gives the same layouts.

    Returns:
        ``layout_ms_{world,one,together}`` (median over ``repeats``) and ``layout_speedup_{one,together}``
        (world / that way).
    """
    from unittest import mock

    from carla_gym.sim import generated, outcomes

    seeds = iter(range(first_seed, first_seed + 3 * repeats * layouts + 1, layouts))

    def timed(draw: Callable[[range], object]) -> float:
        start = next(seeds)
        began = time.perf_counter()
        draw(range(start, start + layouts))
        return (time.perf_counter() - began) * 1e3 / layouts

    def world(batch: range) -> None:
        with mock.patch.object(outcomes, "rollouts", _world_rollouts):
            for seed in batch:
                generated.draw_layout(split, seed)

    costs = interleaved({"world": lambda: timed(world),
                         "one": lambda: timed(lambda b: [generated.draw_layout(split, s) for s in b]),
                         "together": lambda: timed(lambda b: generated.draw_layouts(split, b))}, repeats)
    results = {f"layout_ms_{k}": v for k, v in costs.items()}
    for way in ("one", "together"):
        results[f"layout_speedup_{way}"] = costs["world"] / costs[way]
    return results


def profile_vector(num_envs: int = STATE_N, seconds: float = 2.0, top: int = 20) -> str:
    """Profile of `vector_steps_per_second` (cProfile) on the state-only vector env: the ``top`` by own time."""
    envs = make_vector(num_envs)
    profiler = cProfile.Profile()
    profiler.runcall(vector_steps_per_second, envs, seconds)
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> dict:
    """Measure every figure, print them and the markdown tables; optionally write JSON and the plot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement [s]")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per figure; the median is reported")
    parser.add_argument("--scaling-seconds", type=float, default=0.5,
                        help="cap on the time per point of the scaling curve [s]")
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")
    parser.add_argument("--plot", type=Path, default=None, help="write the scaling plot (PNG) to this path")
    parser.add_argument("--layouts", type=int, default=0,
                        help="only time a new generated layout (layout_costs) over this many seeds per measurement")
    parser.add_argument("--profile", action="store_true",
                        help=f"also print a cProfile of the state-only vector env at N={STATE_N} (own time)")
    args = parser.parse_args()
    if args.layouts:
        results = layout_costs(args.layouts, args.repeats)
        report_results(results, args.json)
        return results
    results = measure(args.seconds, args.repeats, scaling_seconds=args.scaling_seconds)
    report_results(results, args.json)
    print()
    print(markdown_tables(results))
    if args.plot is not None:
        plot_scaling(results, args.plot)
    if args.profile:
        print()
        print(profile_vector(seconds=max(args.seconds, 2.0)))
    return results


if __name__ == "__main__":
    main()
