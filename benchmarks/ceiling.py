"""Learnability ceilings of the generated trolley family: supervised pickers per observation, in closed loop.

Builds the train split's reset observations with their best candidates (`agents.ceiling`), fits a
supervised picker per observation a learner gets (the state vector: an MLP; the dict observation:
a CNN on the image beside an MLP on the state vector, and the state MLP reading the dict's state
entry; the scene prompt: the GRPO path's tiny Qwen3 model), and plays each in closed loop on
held-out test layouts (the picker chooses a tool at reset, the env plays it), beside the oracle
and the constant tools. It also counts how each observation aliases layouts (equal observations,
different best sets) and the share a picker of that observation can reach at most.

Prints two markdown tables and writes them as JSON (``--json``).

Usage:
    python benchmarks/ceiling.py [--train-layouts 20000] [--test-layouts 2000] [--epochs 50]
        [--image-layouts 10000] [--dict-epochs 20] [--text-layouts 10000] [--text-epochs 4]
        [--observations state dict text] [--seed 0] [--threads 1] [--json results/ceiling.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import ceiling as K  # noqa: E402
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.io import write_json_atomic  # noqa: E402


def _percent(value: float) -> str:
    return f"{100 * value:.1f} %"


def result_table(rows: list[dict]) -> str:
    """The closed-loop results as a markdown table (one row per picker, `agents.ceiling.Evaluation.row` dicts)."""
    lines = ["| Picker | Reads | Train layouts | Outcome success [95 % CI] | Off road | Hits per episode |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        low, high = row["ci95"]
        trained = f"{row['train_layouts']:,}" if row.get("train_layouts") else ""
        lines.append(f"| {row['name']} | {row['observation']} | {trained} | "
                     f"{_percent(row['success_rate'])} [{100 * low:.1f}, {100 * high:.1f}] | "
                     f"{_percent(row['road_departure_rate'])} | {row['pedestrians_hit']:.3f} |")
    return "\n".join(lines)


def alias_table(rows: list[dict]) -> str:
    """The aliasing counts as a markdown table (`agents.ceiling.Aliasing` dicts with their ``rows_of`` label)."""
    lines = ["| Observation | Rows | Layouts | Distinct observations | Rows aliased | Conflicting groups | "
             "Information ceiling |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['view']} ({row['rows_of']}) | {row['rows']:,} | {row['layouts']:,} | "
                     f"{row['observations']:,} | {row['aliased_rows']:,} | {row['conflicting_groups']:,} | "
                     f"{_percent(row['information_ceiling'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    """Parse the flags, build, fit, evaluate; print the tables and write the JSON. Returns the JSON data."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--train-layouts", type=int, default=20_000, help="train rows (resets seeded 0 onwards)")
    parser.add_argument("--test-layouts", type=int, default=2000, help="held-out test layouts played in closed loop")
    parser.add_argument("--epochs", type=int, default=50, help="epochs of the state MLP")
    parser.add_argument("--image-layouts", type=int, default=10_000,
                        help="train rows rendered for the dict CNN and the image aliasing count (0: none)")
    parser.add_argument("--dict-epochs", type=int, default=20, help="epochs of the dict CNN+MLP")
    parser.add_argument("--text-layouts", type=int, default=10_000, help="train rows of the text model")
    parser.add_argument("--text-epochs", type=int, default=4, help="epochs of the text model")
    parser.add_argument("--observations", nargs="+", choices=K.OBSERVATIONS, default=list(K.OBSERVATIONS),
                        help="observations to fit pickers for")
    parser.add_argument("--seed", type=int, default=0, help="seed of the models' initialisation and row order")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: on a shared 2-core machine the fits ran faster than with 2)")
    parser.add_argument("--json", type=Path, default=Path("results/ceiling.json"), help="JSON output")
    args = parser.parse_args(argv)
    for flag in ("train_layouts", "test_layouts", "epochs", "dict_epochs", "text_layouts", "text_epochs", "threads"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: must be >= 1")
    if args.image_layouts < 0:
        parser.error(f"--image-layouts {args.image_layouts}: must be >= 0")
    if "dict" in args.observations and args.image_layouts == 0:
        parser.error("--observations dict needs --image-layouts >= 1 (the CNN's training images)")
    import torch

    torch.set_num_threads(args.threads)
    seconds: dict[str, float] = {}
    start = clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[name] = round(now - clock, 1)
        clock = now
        print(f"[{now - start:6.1f} s] {name}", file=sys.stderr, flush=True)

    train = K.build_dataset("train", args.train_layouts)
    lap("train rows")
    test = K.build_dataset("test", args.test_layouts, images=True)
    lap("test rows")
    images = K.build_dataset("train", min(args.image_layouts, args.train_layouts), images=True) \
        if args.image_layouts else None
    lap("train images")

    aliases = [{**vars(K.aliasing(train, view)), "rows_of": "train"} for view in ("state", "text")]
    if images is not None:
        aliases += [{**vars(K.aliasing(images, view)), "rows_of": "train"} for view in ("image", "dict")]
    aliases += [{**vars(K.aliasing(test, view)), "rows_of": "test"} for view in K.ALIAS_VIEWS]
    lap("aliasing")

    pickers = [K.oracle_picker(), *(K.constant_picker(c) for c in K.CANDIDATES)]
    if "state" in args.observations or "dict" in args.observations:
        state = K.fit_state(train, config=replace(K.STATE_FIT, epochs=args.epochs, seed=args.seed))
        pickers.append(state)
        lap("fit state")
    if "dict" in args.observations:
        pickers.append(K.state_reader(state))
        pickers.append(K.fit_dict(images, config=replace(K.DICT_FIT, epochs=args.dict_epochs, seed=args.seed)))
        lap("fit dict")
    if "text" in args.observations:
        pickers.append(K.fit_text(train.head(args.text_layouts),
                                  config=replace(K.TEXT_FIT, epochs=args.text_epochs, seed=args.seed)))
        lap("fit text")

    rows = []
    for picker in pickers:
        result = K.evaluate(picker, "test", args.test_layouts)
        rows.append({**result.row(), **picker.info})
    lap("closed loop")

    constants = [r for r in rows if r["name"] in K.CANDIDATES]
    best_constant = max(constants, key=lambda r: r["success_rate"])
    shown = [r for r in rows if r["name"] not in K.CANDIDATES or r is best_constant]
    best_constant_label = f"best constant ({best_constant['name']})"
    table = result_table([{**r, "name": best_constant_label} if r is best_constant else r for r in shown])
    print(f"Closed loop on {args.test_layouts:,} held-out test layouts (resets seeded 0 onwards), one episode each:\n")
    print(table)
    print("\nHow each observation separates layouts (equal observations whose best sets differ conflict):\n")
    print(alias_table(aliases))
    data = {"command": "python benchmarks/ceiling.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                        "torch": torch.__version__},
            "seconds": {**seconds, "total": round(time.perf_counter() - start, 1)},
            "rows": rows, "aliasing": aliases, "table": table, "alias_table": alias_table(aliases)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.json, data)
    print(f"\nWrote {args.json} ({data['seconds']['total']:.0f} s)")
    return data


if __name__ == "__main__":
    main()
