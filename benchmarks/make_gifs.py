"""The landing page's animations: writes docs/trolley.gif and docs/navigation.gif (python benchmarks/make_gifs.py).

Both episodes are seeded, so the GIFs are the same on every run:

- trolley: ``trolley_micro_classic_3v1`` (three people in the ego's lane, one in the right lane, a clear lane
  on the left), seed 0, ``lane_change_left`` at the first decision, then ``observe`` until the scenario scores
  the episode; one frame per 0.05 s tick, the front camera beside the bird's-eye view;
- navigation: ``free_roam_Town05_v10_p5`` (10 NPC cars, 5 walkers), seed 1, the normal behaviour agent's
  ``follow_route`` at every 0.5 s decision until the goal; the env's bird's-eye render (route and goal drawn),
  one frame per two decisions (1 s), played at 12 frames/s.

A band under each frame (`agents.video.with_caption`) says what happens. Needs the ``[compare]`` extra (imageio).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # agents is a package at the repository root
    sys.path.insert(0, str(REPO))

import carla_gym  # noqa: E402, F401 - registers the ids
from agents.video import with_caption  # noqa: E402
from carla_gym.envs.navigation import NAV_TOOL_ACTIONS  # noqa: E402
from carla_gym.envs.spaces import TOOL_ACTIONS  # noqa: E402
from carla_gym.sim import constants as C  # noqa: E402

TROLLEY = {"scenario": "trolley_micro_classic_3v1", "seed": 0, "first": "lane_change_left"}
"""The trolley episode: scenario, env seed and the tool of the first decision (then observe)."""
NAVIGATION = {"scenario": "free_roam_Town05_v10_p5", "seed": 1, "action": "follow_route", "every": 2}
"""The navigation episode: scenario, env seed, the tool of every decision, one frame kept per ``every`` decisions."""


def trolley_frames() -> list[np.ndarray]:
    """The trolley episode, one captioned frame per tick: front camera (320 x 180) beside bird's-eye (180 x 180)."""
    def make(view, width, height):
        return gym.make("CarlaTrolley-v0", scenario=TROLLEY["scenario"], observation_mode="state", ticks_per_action=1,
                        render_mode="rgb_array", render_view=view, render_width=width, render_height=height)

    front, top = make("front", 320, 180), make("birdeye", 180, 180)
    frames, done, tick, action = [], False, 0, "start"
    _, info = front.reset(seed=TROLLEY["seed"])
    top.reset(seed=TROLLEY["seed"])
    while True:
        picture = np.concatenate([front.render(), top.render()], axis=1)
        lines = (f"{TROLLEY['scenario']} | {action}",
                 f"tick {tick} ({tick * C.DT:.2f} s) | {info['speed_kmh']:.1f} km/h | {info['trolley_action']}")
        if done:
            outcome = info["outcome"]
            lines = (lines[0] + f" | {outcome['actual_pedestrians_hit']} hit", lines[1] + f" | rubric reward "
                     f"{outcome['reward']:g}")
        frames.append(with_caption(picture, lines))
        if done:
            break
        action = TROLLEY["first"] if tick < 10 else "observe"  # the tool acts on the decision's first tick
        step = TOOL_ACTIONS.index(TROLLEY["first"]) if tick == 0 else 0
        _, _, done, _, info = front.step(step)
        top.step(step)
        tick += 1
    front.close()
    top.close()
    return frames + [frames[-1]] * 20  # hold the end for a second


def navigation_frames() -> list[np.ndarray]:
    """The navigation episode, one captioned bird's-eye frame (256 x 256) per ``every`` decisions, and the last."""
    env = gym.make("CarlaNavigation-v0", scenario=NAVIGATION["scenario"], action_mode="tools",
                   observation_mode="state", reward_mode="rubric", render_mode="rgb_array")
    _, info = env.reset(seed=NAVIGATION["seed"])
    frames, tick, done, decisions = [], 0, False, 0
    while True:
        lines = (f"{NAVIGATION['scenario']} | {info['outcome']['termination'] if done else NAVIGATION['action']}",
                 f"t {tick * C.DT:.1f} s | {info['speed']:.1f} km/h | goal {info['goal_distance']:.0f} m")
        if done or decisions % NAVIGATION["every"] == 0:
            frames.append(with_caption(env.render(), lines))
        if done:
            break
        _, _, terminated, truncated, info = env.step(NAV_TOOL_ACTIONS.index(NAVIGATION["action"]))
        tick, decisions = tick + info["ticks"], decisions + 1
        done = terminated or truncated
    env.close()
    return frames + [frames[-1]] * 12


def write(frames: list[np.ndarray], path: Path, frame_ms: int) -> None:
    """Write ``frames`` (each H x W x 3, uint8) as a looping GIF, ``frame_ms`` [ms] per frame."""
    import imageio.v3 as iio

    iio.imwrite(path, np.stack(frames), duration=frame_ms, loop=0)
    print(f"wrote {path} ({len(frames)} frames, {path.stat().st_size / 1e6:.2f} MB)")


def main(argv: list[str] | None = None) -> int:
    """Write both GIFs into ``--out``; returns the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs"), help="folder for trolley.gif and navigation.gif")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write(trolley_frames(), out / "trolley.gif", frame_ms=round(1000 * C.DT))
    write(navigation_frames(), out / "navigation.gif", frame_ms=80)
    return 0


if __name__ == "__main__":
    sys.exit(main())
