"""Navigation replays: re-run a record's actions in `CarlaNavigation-v0` and write a captioned GIF (imageio).

An episode is deterministic given its case, env seed and actions, so a record (`agents.nav.nav_record`)
is enough to re-create it: the replay makes the env with the record's action mode, ticks per action and
steering smoothing and steps the recorded actions (a chat agent's record, ``action_mode`` ``"calls"``, holds
its env steps as `carla_gym.llm.nav_tools.call_record` dicts, redone with `CarlaNavigationEnv.step_call`).
The env's render is the bird's-eye view (256 x 256 px, 40 m across) with the route ahead and the goal drawn,
shown at `SCALE` x. One frame per env step (every ``ticks_per_action`` ticks: 0.5 s for tools, 0.05 s for
control; a chat agent's steps last as long as its calls), so with `FRAME_MS` a tools episode plays
at 5x real time. A band under each frame (`agents.video.with_caption`) gives the agent, case and outcome, then the
tick, time, action and speed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from agents.nav import CALLS, make_case_env, parse_case
from agents.records import episode_seed
from carla_gym.envs.navigation import NAV_TOOL_ACTIONS
from carla_gym.sim import constants as C
from carla_gym.sim.world import NavigationCall

FRAME_MS = 100
"""Duration [ms] of one GIF frame (this project's choice: 10 frames/s)."""
SCALE = 2
"""Each rendered pixel becomes SCALE x SCALE GIF pixels (512 px wide), so that the caption's two lines fit."""


def nav_replay(record: dict) -> tuple[list[np.ndarray], list[dict], dict]:
    """Replay the episode of a navigation ``record`` decision by decision.

    Returns:
        ``(frames, states, outcome)``: uint8 (256, 256, 3) bird's-eye frames, the first after reset and one
        after each decision; per frame ``{"tick", "action", "speed_kmh"}`` (``action`` None on the first);
        the replayed ``info["outcome"]`` (equal to the record's).
    """
    calls = record["action_mode"] == CALLS
    kwargs = {"action_mode": "tools" if calls else record["action_mode"],
              "ticks_per_action": record["ticks_per_action"], "steer_smoothing": record["steer_smoothing"],
              "observation_mode": "state", "render_mode": "rgb_array"}
    env, options = make_case_env(record["scenario"], kwargs)
    try:
        _, info = env.reset(seed=episode_seed(record["seed"], record["episode"]), options=options)
        frames, states = [env.render()], [{"tick": 0, "action": None, "speed_kmh": info["speed"]}]
        tick = 0
        for action in record["actions"]:
            if calls:
                _, _, terminated, truncated, info = env.unwrapped.step_call(NavigationCall(**action["call"]),
                                                                            action["ticks"])
            else:
                step = NAV_TOOL_ACTIONS.index(action) if isinstance(action, str) else np.asarray(action, np.float32)
                _, _, terminated, truncated, info = env.step(step)
            tick += info["ticks"]
            frames.append(env.render())
            states.append({"tick": tick, "action": action, "speed_kmh": info["speed"]})
            if terminated or truncated:
                break
        return frames, states, info.get("outcome", {})
    finally:
        env.close()


def nav_caption(record: dict, state: dict) -> tuple[str, str]:
    """The two caption lines of one frame: who and how the episode ended, then what happens at this tick.

    >>> record = {"agent": "follow_route", "scenario": "route_Town02/traffic_20/eval_3", "success": True,
    ...           "routes_completed": 0.98, "termination": "goal_reached", "collisions": {"vehicle": 0, "walker": 0}}
    >>> nav_caption(record, {"tick": 40, "action": "follow_route", "speed_kmh": 21.04})
    ('follow_route | route_Town02/traffic_20/eval_3 | goal_reached, success, route 98%', \
'tick 40 (2.00 s) | follow_route | 21.0 km/h')
    >>> nav_caption({**record, "success": False, "termination": "collision", "collisions": {"vehicle": 1,
    ...              "walker": 0}}, {"tick": 0, "action": None, "speed_kmh": 0.0})
    ('follow_route | route_Town02/traffic_20/eval_3 | collision, failure, route 98%, hit 1 vehicle', \
'tick 0 (0.00 s) | start | 0.0 km/h')
    """
    hits = ", ".join(f"{n} {kind}" for kind, n in record["collisions"].items() if n)
    outcome = (f"{record['termination']}, {'success' if record['success'] else 'failure'}, "
               f"route {record['routes_completed']:.0%}" + (f", hit {hits}" if hits else ""))
    action = state["action"]
    if action is None:
        action = "start"
    elif isinstance(action, dict):  # a chat agent's env step
        call = action["call"]
        args = ", ".join(f"{k}={v}" for k, v in call.items() if k != "action_type")
        action = ("play-out: " if action.get("play_out") else "") + f"{call['action_type']}({args})"
    elif not isinstance(action, str):
        action = f"steer {action[0]:+.2f} pedal {action[1]:+.2f}"
    tick = state["tick"]
    return (f"{record['agent']} | {record['scenario']} | {outcome}",
            f"tick {tick} ({tick * C.DT:.2f} s) | {action} | {state['speed_kmh']:.1f} km/h")


def write_nav_gif(record: dict, path: str | Path) -> Path:
    """Replay a navigation ``record`` and write an animated GIF, one captioned frame per decision.

    Returns:
        The path written.

    Raises:
        ValueError: Not a navigation record (its case does not parse).
    """
    from agents.video import with_caption
    from carla_gym.hints import needs_extra

    with needs_extra("compare"):
        import imageio.v3 as iio

    parse_case(record["scenario"])
    frames, states, _ = nav_replay(record)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.gif")
    captioned = [with_caption(frame.repeat(SCALE, axis=0).repeat(SCALE, axis=1), nav_caption(record, state))
                 for frame, state in zip(frames, states, strict=True)]
    iio.imwrite(tmp, np.stack(captioned), duration=FRAME_MS, loop=0)
    tmp.replace(path)
    return path
