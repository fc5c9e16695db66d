"""Episode videos: replay a record's actions tick by tick and write a GIF (imageio).

An episode is deterministic given its scenario, env seed and actions, so a record is enough to
re-create it. Each decision is replayed as the action on one tick followed by
``ticks_per_action - 1`` ``observe`` ticks (observe keeps the controls: the same motion as the
original decision, bit for bit), rendering every tick (20 frames/s of simulated time).
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np

import carla_gym  # noqa: F401
from agents.records import episode_seed
from carla_gym.envs.spaces import TOOL_ACTIONS
from carla_gym.sim import constants as C


def replay_frames(record: dict, view: str = "front", size: tuple[int, int] = (320, 180),
                  ticks_per_action: int = 10) -> tuple[list[np.ndarray], dict]:
    """Frames of the episode of ``record`` and the replayed outcome (equal to the record's).

    Args:
        record: An `agents.records` record.
        view: ``"front"``, ``"birdeye"`` or ``"topdown"``.
        size: Frame ``(width, height)`` [px].
        ticks_per_action: Ticks per decision of the original episode.

    Returns:
        ``(frames, outcome)``: uint8 (H, W, 3) frames, one per tick plus the first.
    """
    control = any(not isinstance(a, str) for a in record["actions"])
    env = gym.make("CarlaTrolley-v0", scenario=record["scenario"], observation_mode="state", ticks_per_action=1,
                   action_mode="control" if control else "tools", render_mode="rgb_array",
                   render_width=size[0], render_height=size[1], render_view=view)
    try:
        env.reset(seed=episode_seed(record["seed"], record["episode"]))
        frames, info, done = [env.render()], {}, False
        actions = list(record["actions"])
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
                if done:
                    break
        return frames, info["outcome"]
    finally:
        env.close()


def write_gif(record: dict, path: str | Path, view: str = "front", ticks_per_action: int = 10) -> Path:
    """Replay ``record`` and write an animated GIF at real-time speed (20 frames/s).

    Returns:
        The path written.
    """
    import imageio.v3 as iio

    frames, _ = replay_frames(record, view=view, ticks_per_action=ticks_per_action)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp.gif")
    iio.imwrite(tmp, np.stack(frames), duration=1000 * C.DT, loop=0)
    tmp.replace(path)
    return path
