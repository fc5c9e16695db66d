"""GRPO that learns on CPU: warm start, GRPO on the generated train split, held-out curve.

Usage:
    python benchmarks/grpo_learning.py [--output-dir runs/grpo_learning] [--png docs/grpo_learning.png] [-- FLAGS]

Runs ``train_grpo.py`` with `RECIPE` (flags after ``--`` are appended and win), then reads the run's
``eval_curve.csv`` (greedy success on ``trolley_generated_test``, held out, every few steps) and
``train_curve.csv`` (the training rollouts' reward), prints them as Markdown and draws both against
environment steps (every env step the training rollouts simulated, play-outs included: SB3's unit) and against
wall time into one PNG (matplotlib). The first evaluation (step 0) is the warm-started model before any GRPO
step, evaluated greedily: although the warm start's transcripts draw their tool uniformly at random, the greedy
warm-started model plays in practice one constant tool, so step 0 is that constant's success, not uniform chance.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from carla_gym.cli_args import HelpFormatter  # noqa: E402

RECIPE = [
    "--model", "tiny-random", "--tiny-tokenizer", "lines", "--tiny-hidden-size", "64", "--tiny-layers", "2",
    "--scenario", "trolley_generated_train", "--reward-mode", "outcome",
    "--sft-steps", "150", "--sft-examples", "256", "--sft-learning-rate", "1e-2",
    "--num-generations", "4", "--per-device-train-batch-size", "64", "--max-steps", "250",
    "--dataset-size", "4000", "--learning-rate", "1e-3", "--lr-scheduler-type", "constant", "--temperature", "1.0",
    "--max-completion-length", "64", "--max-tool-calling-iterations", "1",
    "--eval-every", "25", "--eval-curve-episodes", "64", "--eval-episodes", "0", "--eval-max-new-tokens", "32",
]
"""The learning recipe (this project's, tuned on a 2-core CPU; docs/performance.md "GRPO learning on CPU")."""


def read_rows(path: Path) -> list[dict[str, float]]:
    """The rows of a curve CSV with every value as a float (empty cells: NaN)."""
    with path.open() as f:
        return [{k: float(v) if v not in ("", None) else float("nan") for k, v in row.items()}
                for row in csv.DictReader(f)]


def markdown(rows: list[dict[str, float]]) -> str:
    """The evaluation curve as a Markdown table."""
    lines = ["| step | env steps | tool calls | wall [s] | test success | pedestrians hit | road departures | "
             "no tool call |", "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['step']:.0f} | {r['env_steps']:.0f} | {r.get('tool_calls', float('nan')):.0f} | "
              f"{r['wall_s']:.0f} | {r['success_rate']:.1%} | "
              f"{r['pedestrians_hit']:.2f} | {r['road_departure_rate']:.1%} | {r['no_tool_call_rate']:.1%} |"
              for r in rows]
    return "\n".join(lines)


def plot(eval_rows: list[dict[str, float]], train_rows: list[dict[str, float]], png: Path, title: str) -> None:
    """Success on the test split and the training reward against env steps and against wall time, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, key, label in ((axes[0], "env_steps", "environment steps of the training rollouts (play-outs included)"),
                           (axes[1], "wall_s", "wall time [s] (warm start and evaluations included)")):
        ax.plot([r[key] for r in train_rows], [r["reward"] for r in train_rows], color="tab:gray", alpha=0.6,
                label="training reward (outcome success of the rollouts)")
        ax.plot([r[key] for r in eval_rows], [r["success_rate"] for r in eval_rows], "o-", color="tab:blue",
                label="test split success (greedy, held out)")
        ax.set_xlabel(label)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("success by actual outcome")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Run the recipe, print the curve, write the PNG; returns train_grpo's exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--output-dir", type=Path, default=Path("runs/grpo_learning"), help="run directory")
    parser.add_argument("--png", type=Path, default=None, help="figure path (default: <output-dir>/learning.png)")
    parser.add_argument("--plot-only", action="store_true", help="only read an existing run's curves and plot them")
    parser.add_argument("extra", nargs="*", help="train_grpo.py flags after --, appended to the recipe")
    args = parser.parse_args(argv)
    png = args.png or args.output_dir / "learning.png"
    code = 0
    if not args.plot_only:
        import train_grpo

        start = time.perf_counter()
        code = train_grpo.main([*RECIPE, "--output-dir", str(args.output_dir), "--overwrite", *args.extra])
        print(f"train_grpo.py finished in {time.perf_counter() - start:.0f} s (exit {code})")
    eval_rows = read_rows(args.output_dir / "eval_curve.csv")
    train_rows = read_rows(args.output_dir / "train_curve.csv")
    print(markdown(eval_rows))
    plot(eval_rows, train_rows, png, "tiny Qwen3 + GRPO on trolley_generated_train; success on trolley_generated_test")
    print(f"figure: {png}")
    return code


if __name__ == "__main__":
    sys.exit(main())
