"""benchmarks/bench_vec.py at a tiny size (N = 2, 0.02 s per figure), so the script cannot rot.

No timing is asserted: only that every figure is there and positive, the tables and the plot.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
FIGURES = [f"{side}_{case}_steps_per_s" for case in ("state", "image84", "birdeye84", "mixed")
           for side in ("single", "vector")]


@pytest.fixture(scope="module")
def bench():
    """The script as a module (its folder on sys.path, as ``python benchmarks/bench_vec.py`` has it)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO / "benchmarks"))
        yield importlib.import_module("bench_vec")


@pytest.fixture(scope="module")
def results(bench):
    return bench.measure(seconds=0.02, repeats=2, state_n=2, image_n=2, sizes=(1, 3), highway=False)


def test_every_figure_is_measured_and_positive(results):
    for key in [*FIGURES, "ratio_state", "ratio_image84", "ratio_birdeye84", "ratio_mixed",
                "scaling_N1_steps_per_s", "scaling_N3_steps_per_s"]:
        assert results[key] > 0, key
    assert results["ratio_state"] == results["vector_state_steps_per_s"] / results["single_state_steps_per_s"]
    assert results["scaling_N3_us_per_step"] == 1e6 / results["scaling_N3_steps_per_s"]
    assert (results["state_num_envs"], results["image_num_envs"]) == (2, 2)
    assert "highway_fast_v0_steps_per_s" not in results  # highway=False: not timed, no ratio
    assert "ratio_single_state_vs_highway_fast" not in results


def test_tables_and_plot(bench, results, tmp_path):
    table = bench.markdown_tables(results)
    assert "| vector env N=2, state only [env-steps/s] | >= 1,000,000 |" in table
    assert [line.split(" | ")[0] for line in table.splitlines()[-2:]] == ["| 1", "| 3"]  # scaling rows by N
    bench.plot_scaling(results, tmp_path / "scaling.png")
    with Image.open(tmp_path / "scaling.png") as image:
        assert image.format == "PNG" and image.size == (1000, 400)  # figsize (10, 4) at 100 dpi


def test_met_and_not_met(bench, results):
    fast = {**results, "vector_state_steps_per_s": 2e6, "ratio_state": 40.0, "ratio_image84": 9.9}
    rows = {line.split(" | ")[0]: line.split(" | ")[-1] for line in bench.markdown_tables(fast).splitlines()}
    assert rows["| vector env N=2, state only [env-steps/s]"] == "met |"
    assert rows["| vector / single, state only"] == "met |"  # >= 40x: exactly 40 meets it
    assert rows["| vector / single, 84x84 front camera + state"] == "not met |"


class Ends(gym.vector.VectorEnv):
    """Two sub-envs; sub-env 0 ends on steps 1, 3, 5, ..., so steps 2, 4, ... autoreset it."""

    num_envs = 2
    single_action_space = gym.spaces.Discrete(4)
    metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

    def __init__(self):
        self.calls = 0

    def reset(self, seed=None, options=None):
        """Zeros (the observation is not read)."""
        return np.zeros(2), {}

    def step(self, actions):
        """Sub-env 0 terminates on odd calls."""
        assert actions.shape == (2,) and 0 <= actions.min() and actions.max() <= 3
        self.calls += 1
        return np.zeros(2), np.zeros(2), np.array([self.calls % 2 == 1, False]), np.zeros(2, dtype=bool), {}


def test_counts_only_stepped_sub_envs(bench):
    """Autoreset steps are timed, not counted: every counted step is one the single env also counts."""
    assert bench.vector_run(Ends(), 0.0)[:2] == (1, 2)  # one step at least, both sub-envs counted
    steps, counted, elapsed = bench.vector_run(Ends(), 0.005)
    assert counted == 2 * steps - steps // 2 and elapsed >= 0.005  # sub-env 0 autoresets on every even step
    envs = Ends()
    envs.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    with pytest.raises(ValueError, match="NEXT_STEP"):
        bench.vector_run(envs, 0.0)


def test_draw_actions_refuses_other_spaces(bench):
    class Tuple(gym.vector.VectorEnv):
        num_envs = 1
        single_action_space = gym.spaces.MultiBinary(2)

    with pytest.raises(ValueError, match="supports Discrete"):
        bench.draw_actions(Tuple(), 0)
