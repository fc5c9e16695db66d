"""Learning checks of ``train_sb3.py`` (this project's acceptance targets), with wall time and steps.

Usage:
    python benchmarks/learn_sb3.py [--checks ppo_escape ppo_mixed sac_escape] [--seeds 0] [--json out.json]

Checks (each run writes to runs/learn_sb3/<check>_seed<N>, overwritten; train_sb3.py's final
evaluation, 100 episodes per scenario, of which the deterministic trained policy plays each fixed
scenario once; exit status 1 if any check misses its threshold). They train with upstream's rubric
reward on upstream's fixed scenarios, 4 envs, and score upstream's rubric: success is rubric
success, and the reference reward is the rubric answer's (`agents.players.rubric_answer_agent`, the
catalogue's answer that upstream's rubric pays most), played on the same scenarios and seeds:

| Check | Command | Threshold |
|---|---|---|
| ppo_escape | PPO, tools, state, escape_exists, 20,480 steps (the cpu preset's) | success >= 95% |
| ppo_mixed | PPO, ``--scenario mixed`` (see `carla_gym.suites`), 30,000 steps | reward >= 0.9 x the rubric answer's |
| sac_escape | SAC, control actions, escape_exists, 10,000 steps (the cpu preset's) | success >= 90% |

The thresholds are this project's choice.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import train_sb3  # noqa: E402
from agents.evaluation import play_all, pooled_row  # noqa: E402
from agents.players import rubric_answer_agent  # noqa: E402
from carla_gym.cli_args import HelpFormatter  # noqa: E402
from carla_gym.io import write_json_atomic  # noqa: E402

RUBRIC = ["--reward-mode", "rubric", "--n-envs", "4"]
"""Upstream's rubric reward and 4 envs: the settings these checks were set with (train_sb3.py's defaults are the
generated family's)."""
ESCAPE = ["--scenario", "trolley_micro_escape_exists", *RUBRIC]

CHECKS = {
    "ppo_escape": (ESCAPE, lambda r: r["success_rate"] >= 0.95, "success >= 95%"),
    "ppo_mixed": (["--scenario", "mixed", *RUBRIC, "--total-timesteps", "30000"],
                  lambda r: r["reward_vs_rubric_answer"] >= 0.9, "reward >= 0.9 x rubric answer"),
    "sac_escape": (["--algo", "sac", *ESCAPE], lambda r: r["success_rate"] >= 0.90, "success >= 90%"),
}


def rubric_answer_reward(run_dir: Path, evaluation: dict) -> float:
    """The rubric answer's mean rubric reward over the run's evaluation scenarios (equal weight), on its seeds.

    Args:
        run_dir: The train_sb3.py run directory (its config.json gives the env settings).
        evaluation: The run's eval.json (`train_sb3.main`'s result): ``eval_scenario``, ``eval_seed`` and
            ``episodes_per_scenario``.
    """
    agent = rubric_answer_agent(json.loads((run_dir / "config.json").read_text())["env_kwargs"])
    try:
        records = play_all([agent], evaluation["eval_scenario"], [evaluation["eval_seed"]],
                           evaluation["episodes_per_scenario"])
    finally:
        agent.close()
    return pooled_row(records, agent.name)["mean_reward"]


def headline(evaluation: dict, reference_reward: float) -> dict:
    """The measures the checks read from a run's eval.json (`train_sb3.main`'s result): the ``all`` rows.

    Args:
        evaluation: The run's eval.json.
        reference_reward: The rubric answer's mean reward on the same scenarios (`rubric_answer_reward`).

    Returns:
        The trained policy's rubric success rate, mean rubric reward, pedestrians actually hit per
        episode and road departure rate over its scenarios (equal weight), the rubric answer's mean
        reward and their ratio ``reward_vs_rubric_answer`` (None when the rubric answer's is 0).

    Examples:
        >>> evaluation = {"algo": "ppo", "rows": [{"agent": "ppo", "scenario": "all", "success_rate": 0.5,
        ...     "mean_reward": 0.45, "actual_pedestrians_hit": 0.25, "road_departure_rate": 0.0}]}
        >>> headline(evaluation, 0.5)["reward_vs_rubric_answer"]
        0.9
    """
    policy = next(row for row in evaluation["rows"] if row["scenario"] == "all" and row["agent"] == evaluation["algo"])
    return {"success_rate": policy["success_rate"], "mean_reward": policy["mean_reward"],
            "rubric_answer_mean_reward": reference_reward,
            "reward_vs_rubric_answer": policy["mean_reward"] / reference_reward if reference_reward else None,
            "mean_actual_hits": policy["actual_pedestrians_hit"], "road_departure_rate": policy["road_departure_rate"]}


def main() -> int:
    """Run the checks; return 1 if any misses its threshold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--checks", nargs="+", default=list(CHECKS), choices=list(CHECKS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    failures, rows = 0, []
    for check in args.checks:
        extra, passed, threshold = CHECKS[check]
        for seed in args.seeds:
            out = Path("runs/learn_sb3") / f"{check}_seed{seed}"
            start = time.perf_counter()
            evaluation = train_sb3.main([*extra, "--seed", str(seed), "--output-dir", str(out), "--overwrite"])
            result = {**headline(evaluation, rubric_answer_reward(out, evaluation)),
                      "total_timesteps": evaluation["total_timesteps"],
                      "train_seconds": evaluation["train_seconds"]}
            ok = passed(result)
            failures += not ok
            rows.append({"check": check, "seed": seed, "passed": ok, "threshold": threshold,
                         "success_rate": result["success_rate"], "mean_reward": result["mean_reward"],
                         "reward_vs_rubric_answer": result["reward_vs_rubric_answer"],
                         "mean_actual_hits": result["mean_actual_hits"],
                         "road_departure_rate": result["road_departure_rate"], "steps": result["total_timesteps"],
                         "train_seconds": result["train_seconds"],
                         "wall_seconds": round(time.perf_counter() - start, 1)})
            print(f"{check} seed {seed}: {'PASS' if ok else 'FAIL'} ({threshold}); rubric success "
                  f"{result['success_rate']:.1%}, rubric reward {result['mean_reward']:.3f} vs the rubric answer's "
                  f"{result['rubric_answer_mean_reward']:.3f}, pedestrians actually hit "
                  f"{result['mean_actual_hits']:.2f} per episode, road departures {result['road_departure_rate']:.0%}, "
                  f"{result['total_timesteps']} steps, "
                  f"{result['train_seconds']:.1f} s training", flush=True)
    if args.json:
        write_json_atomic(args.json, rows)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
