"""Episode videos: replay a record's actions tick by tick and write a GIF (imageio).

An episode is deterministic given its scenario, env seed and actions, so a record is enough to
re-create it. Each decision is replayed as the action on one tick followed by
``ticks_per_action - 1`` ``observe`` ticks (observe keeps the controls: the same motion as the
original decision, bit for bit), rendering every tick (20 frames/s of simulated time). A band
under each GIF frame gives the agent, scenario and outcome, then the tick, time, action and
speed (`caption`).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

import carla_gym  # noqa: F401
from agents.records import episode_seed
from carla_gym.envs.spaces import TOOL_ACTIONS
from carla_gym.sim import constants as C

CAPTION_HEIGHT = 30
"""Height [px] of the caption band under each GIF frame (two lines of an 11 px font)."""


def replay(record: dict, view: str = "front", size: tuple[int, int] = (320, 180),
           ticks_per_action: int = 10) -> tuple[list[np.ndarray], list[dict], dict]:
    """Replay the episode of ``record`` tick by tick.

    Args:
        record: An `agents.records` record.
        view: ``"front"``, ``"birdeye"`` or ``"topdown"``.
        size: Frame ``(width, height)`` [px].
        ticks_per_action: Ticks per decision of the original episode.

    Returns:
        ``(frames, states, outcome)``: uint8 (H, W, 3) frames, one per tick plus the first; per
        frame the state ``{"tick", "action", "speed_kmh"}`` (``action``: the decision being
        executed, None before the first); the replayed outcome (equal to the record's).
    """
    control = any(not isinstance(a, str) for a in record["actions"])
    env = gym.make("CarlaTrolley-v0", scenario=record["scenario"], observation_mode="state", ticks_per_action=1,
                   action_mode="control" if control else "tools", render_mode="rgb_array",
                   render_width=size[0], render_height=size[1], render_view=view)
    try:
        _, info = env.reset(seed=episode_seed(record["seed"], record["episode"]))
        frames = [env.render()]
        states = [{"tick": info["tick"], "action": None, "speed_kmh": info["speed_kmh"]}]
        actions, done = list(record["actions"]), False
        while not done:
            action = actions.pop(0) if actions else "observe"
            if isinstance(action, str):
                first, rest = TOOL_ACTIONS.index(action), [0] * (ticks_per_action - 1)
            else:
                first = rest = np.asarray(action, dtype=np.float32)
                rest = [rest] * (ticks_per_action - 1)
            for a in [first, *rest]:
                _, _, done, _, info = env.step(a)
                frames.append(env.render())
                states.append({"tick": info["tick"], "action": action, "speed_kmh": info["speed_kmh"]})
                if done:
                    break
        return frames, states, info["outcome"]
    finally:
        env.close()


def replay_frames(record: dict, view: str = "front", size: tuple[int, int] = (320, 180),
                  ticks_per_action: int = 10) -> tuple[list[np.ndarray], dict]:
    """Frames of the episode of ``record`` and the replayed outcome (see `replay`)."""
    frames, _, outcome = replay(record, view, size, ticks_per_action)
    return frames, outcome


def caption(record: dict, state: dict) -> tuple[str, str]:
    """The two caption lines of one frame: who and how it ended, then what happens at this tick.

    >>> record = {"agent": "oracle", "scenario": "trolley_micro_classic_3v1", "trolley_action": "SWERVE_LEFT",
    ...           "actual_pedestrians_hit": 1, "reward": 1.0, "road_departure": False}
    >>> caption(record, {"tick": 12, "action": "lane_change_left", "speed_kmh": 38.25})
    ('oracle | classic_3v1 | outcome SWERVE_LEFT, 1 hit, reward 1', 'tick 12 (0.60 s) | lane_change_left | 38.2 km/h')
    >>> caption(record, {"tick": 0, "action": None, "speed_kmh": 40.0})[1]
    'tick 0 (0.00 s) | start | 40.0 km/h'
    >>> caption(record, {"tick": 3, "action": [-0.6, 0.2], "speed_kmh": 40.0})[1]
    'tick 3 (0.15 s) | steer -0.60 pedal +0.20 | 40.0 km/h'
    """
    outcome = (f"outcome {record['trolley_action']}, {record['actual_pedestrians_hit']} hit, "
               f"reward {record['reward']:g}" + (", left the road" if record["road_departure"] else ""))
    action = state["action"]
    if action is None:
        action = "start"
    elif not isinstance(action, str):
        action = f"steer {action[0]:+.2f} pedal {action[1]:+.2f}"
    tick = state["tick"]
    return (f"{record['agent']} | {record['scenario'].removeprefix('trolley_micro_')} | {outcome}",
            f"tick {tick} ({tick * C.DT:.2f} s) | {action} | {state['speed_kmh']:.1f} km/h")


def with_caption(frame: np.ndarray, lines: tuple[str, ...]) -> np.ndarray:
    """``frame`` with a black band of `CAPTION_HEIGHT` px below it holding ``lines`` in white.

    Returns:
        uint8 array (H + CAPTION_HEIGHT, W, 3).
    """
    from PIL import Image, ImageDraw, ImageFont

    height, width = frame.shape[:2]
    image = Image.new("RGB", (width, height + CAPTION_HEIGHT))
    image.paste(Image.fromarray(frame), (0, 0))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=11)
    for i, line in enumerate(lines):
        draw.text((3, height + 2 + 13 * i), line, fill=(255, 255, 255), font=font)
    return np.asarray(image)


def write_gif(record: dict, path: str | Path, view: str = "front", ticks_per_action: int = 10) -> Path:
    """Replay ``record`` and write an animated GIF at real-time speed (20 frames/s) with a caption band.

    Each frame carries `caption`: the agent, scenario and outcome, then tick, time, action and speed.

    Returns:
        The path written.
    """
    from carla_gym.hints import needs_extra

    with needs_extra("compare"):
        import imageio.v3 as iio

    frames, states, _ = replay(record, view=view, ticks_per_action=ticks_per_action)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.gif")
    captioned = [with_caption(frame, caption(record, state)) for frame, state in zip(frames, states, strict=True)]
    iio.imwrite(tmp, np.stack(captioned), duration=1000 * C.DT, loop=0)
    tmp.replace(path)
    return path
