"""Training wall time of a ``train_sb3.py`` run, ``--vec-env batched`` vs ``--vec-env dummy``, back to back.

Usage:
    nice -n 10 python benchmarks/ppo_vec_time.py [--vec-envs batched dummy] [--seed 0] [--json out.json] [-- FLAGS]

Each vec env runs the PPO recipe of `RECIPE` (tools, state vector, trolley_micro_escape_exists with
the rubric reward, the cpu preset's steps on 4 envs, any FLAGS after ``--`` added) in this process, writing to
runs/ppo_vec_time/<vec_env> (overwritten). Reported per run: the whole invocation's wall time, the
training wall time (``train_seconds`` of eval.json: rollouts, updates and the periodic evaluations),
the training wall time at the first periodic evaluation with 100 % success (``wall_s`` of
evaluations.csv; None if none reached it) and the final evaluation's success rate (100 episodes).
Both runs see the same episodes (`carla_gym.sb3.envs.make_venv`: the batched env equals DummyVecEnv
bit for bit), so their learning curves match and only the times differ. The target: the
batched run reaches 100 % in less training wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train_sb3  # noqa: E402
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.io import write_json_atomic  # noqa: E402

OUT = Path("runs/ppo_vec_time")
"""Where the runs go (one folder per vec env, overwritten)."""


def first_full_success(evaluations_csv: Path) -> tuple[int | None, float | None]:
    """Timesteps and training wall time [s] of the first periodic evaluation with success rate 1 (None, None: none)."""
    with open(evaluations_csv) as f:
        for row in csv.DictReader(f):
            if float(row["success_rate"]) == 1.0:
                return int(row["timesteps"]), float(row["wall_s"])
    return None, None


RECIPE = ("--scenario", "trolley_micro_escape_exists", "--reward-mode", "rubric", "--n-envs", "4")
"""The ``train_sb3.py`` flags of the timed runs (the single-scenario recipe these measurements have always used)."""


def run(vec_env: str, seed: int, flags: list[str]) -> dict:
    """One `RECIPE` train_sb3.py run with ``--vec-env vec_env``; its times and final success rate."""
    out = OUT / vec_env
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation = train_sb3.main([*RECIPE, "--vec-env", vec_env, "--seed", str(seed), "--output-dir", str(out),
                                     "--overwrite", *flags])
    wall = time.perf_counter() - start
    steps, wall_at_full = first_full_success(out / "evaluations.csv")
    pooled = {row["agent"]: row for row in evaluation["rows"] if row["scenario"] == "all"}
    return {"vec_env": vec_env, "wall_s": round(wall, 1), "train_s": evaluation["train_seconds"],
            "steps_to_100": steps, "train_s_to_100": wall_at_full,
            "final_success_rate": pooled[evaluation["algo"]]["success_rate"],
            "total_timesteps": evaluation["total_timesteps"]}


def main() -> None:
    """Run each vec env in turn; print one line each and the batched/dummy ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--vec-envs", nargs="+", default=["batched", "dummy"], choices=["batched", "dummy", "subproc"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("flags", nargs="*", help="more train_sb3.py flags, after --")
    args = parser.parse_args()
    rows = []
    for vec_env in args.vec_envs:
        rows.append(run(vec_env, args.seed, args.flags))
        print(rows[-1], flush=True)
    by = {row["vec_env"]: row for row in rows}
    if {"batched", "dummy"} <= set(by):
        for key in ("wall_s", "train_s", "train_s_to_100"):
            if by["batched"][key] and by["dummy"][key]:
                print(f"batched / dummy {key}: {by['batched'][key] / by['dummy'][key]:.2f}")
    if args.json:
        write_json_atomic(args.json, {"rows": rows, "argv": sys.argv[1:]})


if __name__ == "__main__":
    main()
