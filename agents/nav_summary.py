"""Summary of navigation records: one row per agent and case group, outcomes first; Markdown, CSV and JSON.

A row pools the records of one agent in one group (`agents.nav.case_group`: a suite of evaluation routes at
one traffic level, or one maze / free-roam case) over seeds and episodes. The VLM-RL metrics are computed by
the one rule the training evaluation also uses, `carla_gym.sb3.nav_eval.summarise` (VLM-RL's ``eval_plots.py``):

| Column | Meaning |
|---|---|
| ``success_rate`` | share of episodes whose outcome has ``success`` (below) |
| ``route_completion`` | mean ``routes_completed`` (share of the route's waypoints passed, <= 1) |
| ``collision_rate`` | share of episodes ending in a collision |
| ``CPM`` | collisions per km: VLM-RL's per-episode ``1000 / total_distance`` (0 without a collision), averaged |
| ``speed_mean`` | mean over episodes of the per-episode average speed [km/h], standstill included |
| ``time`` | mean episode length [s] of simulated time |
| ``total_distance`` | mean distance driven per episode [m] |
| ``mean_reward`` | mean summed rubric reward (upstream's navigation rubric) |
| ``decisions`` | per episode |
| ``chat_agent`` | whether the agent is a tool-calling chat agent (`agents.records.is_chat_record`) |
| ``tool_calls`` | per episode (chat agents only) |
| ``tool_failures``, ``parse_failures`` | totals (chat agents) |
| ``wall_ms`` | wall time per episode [ms] (the only column that differs between runs) |

The Markdown table (`nav_markdown`) shows the tool-call columns (tool calls per episode, tool failures,
parse failures) only where some row is a chat agent's, as the trolley summary does (`agents.summary`);
the CSV and JSON files keep every column.

An outcome's ``success`` (`carla_gym.envs.navigation.CarlaNavigationEnv`, Info): on a route, the final position
within 5 m of the route's last waypoint (VLM-RL's rule, whatever ended the episode); in the maze and free roam,
within the arrival radius of the goal (upstream's 5 m and 10 m).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.records import is_chat_record
from carla_gym.io import write_csv_atomic, write_json_atomic, write_text_atomic
from carla_gym.sb3.nav_eval import summarise

NAV_COLUMNS = ("agent", "scenario", "episodes", "success_rate", "route_completion", "collision_rate", "CPM",
               "speed_mean", "time", "total_distance", "mean_reward", "decisions", "chat_agent", "tool_calls",
               "tool_failures", "parse_failures", "wall_ms")
"""Columns of a navigation summary row (``scenario``: the case group)."""


def nav_row(agent: str, group: str, records: Sequence[dict]) -> dict[str, Any]:
    """The summary row of one agent's records in one group (module docstring).

    Raises:
        ValueError: No records.

    Examples:
        >>> r = dict(routes_completed=1.0, termination="goal_reached", success=True, total_reward=9.0,
        ...          speed_mean=20.0, total_distance=300.0, collision_speed=0.0, CPM=0.0, CPS=0.0, time=54.0,
        ...          reward=10.5, decisions=108, tool_calls=[], tool_failures=0, parse_failures=0, wall_time_s=1.0)
        >>> crash = {**r, "routes_completed": 0.5, "termination": "collision", "success": False,
        ...          "total_distance": 100.0, "CPM": 10.0, "speed_mean": 10.0, "time": 36.0, "reward": -4.5}
        >>> row = nav_row("a", "g", [r, crash])
        >>> row["success_rate"], row["route_completion"], row["collision_rate"], row["CPM"], row["speed_mean"]
        (0.5, 0.75, 0.5, 5.0, 15.0)
        >>> row["time"], row["total_distance"], row["mean_reward"]
        (45.0, 200.0, 3.0)
    """
    n = len(records)
    vlm = summarise(list(records))
    return {
        "agent": agent, "scenario": group, "episodes": n, "success_rate": vlm["success_rate"],
        "route_completion": vlm["route_completion"], "collision_rate": vlm["collision_rate"], "CPM": vlm["CPM"],
        "speed_mean": vlm["speed_mean"], "time": math.fsum(r["time"] for r in records) / n,
        "total_distance": vlm["total_distance"] / n, "mean_reward": math.fsum(r["reward"] for r in records) / n,
        "decisions": sum(r["decisions"] for r in records) / n,
        "chat_agent": any(map(is_chat_record, records)),
        "tool_calls": sum(len(r["tool_calls"]) for r in records) / n,
        "tool_failures": sum(r["tool_failures"] for r in records),
        "parse_failures": sum(r["parse_failures"] for r in records),
        "wall_ms": 1e3 * math.fsum(r["wall_time_s"] for r in records) / n,
    }


def nav_rows(records: Sequence[dict], agents: Sequence[str], groups: Sequence[str]) -> list[dict[str, Any]]:
    """One row per agent and group, in the given orders (pairs without records are left out)."""
    rows = []
    for agent in agents:
        for group in groups:
            mine = sorted((r for r in records if r["agent"] == agent and r["group"] == group),
                          key=lambda r: (r["scenario"], r["seed"], r["episode"]))  # order-free sums
            if mine:
                rows.append(nav_row(agent, group, mine))
    return rows


NAV_MARKDOWN_COLUMNS = (
    ("agent", False, lambda r: str(r["agent"])),
    ("scenario", False, lambda r: str(r["scenario"])),
    ("n", False, lambda r: str(r["episodes"])),
    ("success", False, lambda r: f"{r['success_rate']:.0%}"),
    ("route completion", False, lambda r: f"{r['route_completion']:.0%}"),
    ("collisions", False, lambda r: f"{r['collision_rate']:.0%}"),
    ("collisions/km", False, lambda r: f"{r['CPM']:.2f}"),
    ("avg speed [km/h]", False, lambda r: f"{r['speed_mean']:.1f}"),
    ("time [s]", False, lambda r: f"{r['time']:.1f}"),
    ("distance [m]", False, lambda r: f"{r['total_distance']:.0f}"),
    ("reward", False, lambda r: f"{r['mean_reward']:.2f}"),
    ("decisions", False, lambda r: f"{r['decisions']:.1f}"),
    ("tool calls/ep", True, lambda r: f"{r['tool_calls']:.1f}"),
    ("tool failures", True, lambda r: str(r["tool_failures"])),
    ("parse failures", True, lambda r: str(r["parse_failures"])),
    ("ms/ep", False, lambda r: f"{r['wall_ms']:.0f}"),
)
"""Every column of `nav_markdown`'s table: ``(header, chat only, cell)``, outcomes first; a chat-only column
is shown where some row is a chat agent's (``chat_agent``)."""


def nav_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """A Markdown table of `nav_rows`, outcomes first; the tool-call columns only with a chat agent's row.

    Examples:
        >>> row = dict(agent="a", scenario="g", episodes=1, success_rate=1.0, route_completion=1.0,
        ...            collision_rate=0.0, CPM=0.0, speed_mean=18.0, time=27.0, total_distance=132.0,
        ...            mean_reward=1.0, decisions=54.0, chat_agent=False, tool_calls=0.0, tool_failures=0,
        ...            parse_failures=0, wall_ms=480.0)
        >>> nav_markdown([row]).splitlines()[0].split(" | ")[-3:]  # no chat agent: no tool-call columns
        ['reward', 'decisions', 'ms/ep |']
        >>> nav_markdown([{**row, "chat_agent": True}]).splitlines()[2].endswith("| 54.0 | 0.0 | 0 | 0 | 480 |")
        True
    """
    chat = any(r.get("chat_agent", False) for r in rows)
    columns = [(header, cell) for header, chat_only, cell in NAV_MARKDOWN_COLUMNS if chat or not chat_only]
    lines = ["| " + " | ".join(header for header, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r) for _, cell in columns) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_nav_summary(records: Sequence[dict], agents: Sequence[str], groups: Sequence[str], out_dir: str | Path,
                      stem: str = "summary") -> list[dict[str, Any]]:
    """Write ``<stem>.csv`` (`NAV_COLUMNS`), ``<stem>.md`` (`nav_markdown`) and ``<stem>.json`` (``{"rows": ...}``).

    Returns:
        The rows (`nav_rows`).
    """
    rows = nav_rows(records, agents, groups)
    out = Path(out_dir)
    write_csv_atomic(out / f"{stem}.csv", NAV_COLUMNS, [[r[c] for c in NAV_COLUMNS] for r in rows])
    write_text_atomic(out / f"{stem}.md", nav_markdown(rows))
    write_json_atomic(out / f"{stem}.json", {"rows": rows})
    return rows


def nav_figure(rows: Sequence[dict[str, Any]]):
    """Four heatmaps, agent (rows) x case group (columns), each cell labelled with its value.

    Panels: success [%], route completion [%], collisions per km and average speed [km/h].

    Args:
        rows: `nav_rows` output.
    """
    import numpy as np

    from agents.plots import _pyplot, fit_titles

    plt = _pyplot()
    agents = list(dict.fromkeys(r["agent"] for r in rows))
    groups = list(dict.fromkeys(r["scenario"] for r in rows))
    table = {(r["agent"], r["scenario"]): r for r in rows}
    panels = (("success_rate", "success [%]", 100.0, "RdYlGn", "{:.0f}"),
              ("route_completion", "route completion [%]", 100.0, "RdYlGn", "{:.0f}"),
              ("CPM", "collisions per km", 1.0, "Reds", "{:.1f}"),
              ("speed_mean", "average speed [km/h]", 1.0, "Blues", "{:.1f}"))
    fig, axes = plt.subplots(1, 4, figsize=(4 * max(3.0, 0.7 * len(groups) + 1.5), 0.45 * len(agents) + 2.8),
                             layout="constrained")
    for ax, (key, title, scale, cmap, fmt) in zip(axes, panels, strict=True):
        grid = np.array([[scale * table[(a, g)][key] if (a, g) in table else np.nan for g in groups]
                         for a in agents])
        top = 100.0 if scale == 100.0 else max(1.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0)
        ax.imshow(grid, vmin=0.0, vmax=top, cmap=cmap, aspect="auto")
        for (i, j), value in np.ndenumerate(grid):
            if not np.isnan(value):
                ax.text(j, i, fmt.format(value), ha="center", va="center", fontsize=7)
        ax.set_xticks(np.arange(len(groups)), groups, rotation=60, ha="right", fontsize=7)
        ax.set_yticks(np.arange(len(agents)), agents if ax is axes[0] else [], fontsize=8)
        ax.set_title(title, fontsize=9)
    return fit_titles(fig)


def plot_nav(rows: Sequence[dict[str, Any]], out_dir: str | Path) -> Path:
    """Write ``navigation.png`` (`nav_figure`); returns its path."""
    from agents.plots import _save

    return _save(nav_figure(rows), Path(out_dir) / "navigation.png")
