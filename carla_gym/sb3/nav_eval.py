"""Evaluation of a policy on VLM-RL's evaluation routes of `CarlaNavigation-v0` (VLM-RL ``eval.py``).

VLM-RL's procedure (``eval.py`` and ``eval_plots.py``): one episode per evaluation route
(``scenario_config["route"] = "eval"``, ``reset(options={"route_index": k})`` for k = 0..9),
deterministic actions, at 0, 20 or 40 NPC vehicles, under VLM-RL's evaluation end rules
(`EVAL_TERMINATION`: the env's ``termination="vlm-rl-eval"``: no off-track or too-fast end; a collision,
``"stopped"`` (below 1 km/h for the env's ``stop_time_s``), ``"no_progress"`` (the first waypoint not
passed after 10 s), ``"success"`` (past the last waypoint) or arrival end the episode, and the env's
``time_limit_s`` (default 300 s) truncates it). Each episode's metrics are the env's ``info["outcome"]``
(`carla_gym.sim.navigation.route_task.RouteTracker.outcome`). `summarise` pools them as VLM-RL's summary
row does (means over episodes; ``total_distance`` summed) and adds the rates this project plots (route
completion, collision rate, success rate).

The comparison harness (`agents.nav`) plays every agent by the same end rules, so a policy's outcome on a
route and seed is the same here and in ``python -m agents.compare``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import gymnasium as gym
import numpy as np

EVAL_TERMINATION = "vlm-rl-eval"
"""`CarlaNavigation-v0` ``termination`` of every evaluation episode, here and in the comparison harness
(`agents.nav`): VLM-RL's evaluation ends (``eval.py``; the env's "Episode End")."""
EVAL_SEED = 101
"""Seed of every evaluation episode's reset (VLM-RL ``eval.py --seed`` default 101; the route comes from
``route_index``, the seed draws the traffic)."""
NUM_EVAL_ROUTES = 10
"""VLM-RL's evaluation routes (`carla_gym.sim.navigation.route_task.EVAL_ROUTES`)."""
TRAFFIC_LEVELS = (0, 20, 40)
"""NPC vehicles of the final evaluation: VLM-RL's empty, regular and dense traffic."""
COLUMNS = ("traffic", "episodes", "route_completion", "collision_rate", "success_rate", "mean_return", "speed_mean",
           "total_distance", "collision_speed", "CPM", "CPS", "off_track_rate", "too_fast_rate", "stopped_rate",
           "time_limit_rate")
"""Columns of a `summarise` row (eval.csv)."""


def play_routes(act: Callable[[object], object], env_kwargs: Mapping, traffic: int, seed: int = EVAL_SEED,
                routes: Iterable[int] = range(NUM_EVAL_ROUTES),
                on_record: Callable[[dict], None] | None = None) -> list[dict]:
    """Play one episode per evaluation route; returns each episode's outcome.

    Args:
        act: Observation -> action (e.g. ``lambda obs: model.predict(obs, deterministic=True)[0]``).
        env_kwargs: `CarlaNavigation-v0` keyword arguments of the trained policy (observation and action
            modes, steering smoothing, ticks per action, reward mode, ...); its ``scenario_config`` is kept except
            ``traffic`` and ``route``, which this sets, and ``termination`` is always `EVAL_TERMINATION`.
        traffic: NPC vehicles, one of `TRAFFIC_LEVELS`.
        seed: Reset seed of every episode.
        routes: Places in the evaluation route cycle (``route_index``).
        on_record: Called with each record as soon as its episode ends (e.g. to append it to a log).

    Returns:
        One record per episode: the outcome's keys (``scenario`` included) plus ``traffic``, ``route_index``
        and ``route`` (start, end spawn indices).

    Raises:
        ValueError: Bad env settings or ``traffic`` (the env's message).
    """
    config = {**dict(env_kwargs.get("scenario_config") or {}), "traffic": traffic, "route": "eval"}
    kwargs = {**env_kwargs, "scenario_config": config, "termination": EVAL_TERMINATION}
    env = gym.make("CarlaNavigation-v0", **kwargs)
    records = []
    try:
        for k in routes:
            obs, info = env.reset(seed=seed, options={"route_index": int(k)})
            terminated = truncated = False
            while not (terminated or truncated):  # the env truncates at its time_limit_s
                obs, _, terminated, truncated, info = env.step(act(obs))
            record = {**info["outcome"], "traffic": traffic, "route_index": int(k), "route": list(info["route"])}
            records.append(record)
            if on_record is not None:
                on_record(record)
    finally:
        env.close()
    return records


def summarise(records: list[dict]) -> dict:
    """VLM-RL's summary of evaluation episodes, plus this project's rates (`COLUMNS`, less ``traffic``).

    ``route_completion``: mean ``routes_completed``; ``collision_rate`` / ``success_rate`` / ``*_rate``: the
    fraction of episodes that ended so; ``mean_return``: mean ``total_reward``; ``total_distance`` [m]: summed
    (VLM-RL's total row); ``speed_mean`` [km/h], ``collision_speed`` [km/h] (0 for episodes without a
    collision), ``CPM`` and ``CPS``: means over episodes, as VLM-RL.

    Raises:
        ValueError: No records.

    Examples:
        >>> row = summarise([{"routes_completed": 1.0, "termination": "success", "success": True, "total_reward": 9.0,
        ...                   "speed_mean": 20.0, "total_distance": 300.0, "collision_speed": 0.0, "CPM": 0.0,
        ...                   "CPS": 0.0},
        ...                  {"routes_completed": 0.5, "termination": "collision", "success": False,
        ...                   "total_reward": 1.0, "speed_mean": 10.0, "total_distance": 100.0,
        ...                   "collision_speed": 12.0, "CPM": 10.0, "CPS": 0.01}])
        >>> row["route_completion"], row["collision_rate"], row["success_rate"], row["total_distance"], row["CPM"]
        (0.75, 0.5, 0.5, 400.0, 5.0)
    """
    if not records:
        raise ValueError("records=[]: summarise needs at least one evaluation episode")

    def mean(values) -> float:
        return float(np.mean(np.asarray(list(values), dtype=np.float64)))

    def rate(end: str) -> float:
        return mean(r["termination"] == end for r in records)

    return {"episodes": len(records), "route_completion": mean(r["routes_completed"] for r in records),
            "collision_rate": rate("collision"), "success_rate": mean(bool(r["success"]) for r in records),
            "mean_return": mean(r["total_reward"] for r in records),
            "speed_mean": mean(r["speed_mean"] for r in records),
            "total_distance": float(sum(r["total_distance"] for r in records)),
            "collision_speed": mean(r["collision_speed"] for r in records), "CPM": mean(r["CPM"] for r in records),
            "CPS": mean(r["CPS"] for r in records), "off_track_rate": rate("off_track"),
            "too_fast_rate": rate("too_fast"), "stopped_rate": rate("stopped"),
            "time_limit_rate": rate("time_limit")}


def write_summary(records: list[dict], out: Path, extra: Mapping | None = None) -> dict:
    """Write ``eval.csv``, ``eval.md`` and ``eval.json`` (last: it marks a run complete) of a final evaluation.

    Args:
        records: `play_routes` records of one or more traffic levels.
        out: The run directory.
        extra: More entries of eval.json (algorithm, training time, ...).

    Returns:
        eval.json's content: ``{"traffic": {"0": row, "20": row, ...}, **extra}``.
    """
    from carla_gym.io import write_csv_atomic, write_json_atomic, write_text_atomic

    levels = sorted({r["traffic"] for r in records})
    rows = {str(t): summarise([r for r in records if r["traffic"] == t]) for t in levels}
    write_csv_atomic(out / "eval.csv", COLUMNS, ([t, *(round(row[c], 4) for c in COLUMNS[1:])]
                                                 for t, row in rows.items()))
    shown = ("traffic", "episodes", "route_completion", "collision_rate", "success_rate", "speed_mean", "CPM")
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join([t, *(f"{row[c]:.3g}" for c in shown[1:])]) + " |" for t, row in rows.items()]
    write_text_atomic(out / "eval.md", "\n".join(lines) + "\n")
    summary = {"traffic": rows, **dict(extra or {})}
    write_json_atomic(out / "eval.json", summary)
    return json.loads(json.dumps(summary))
