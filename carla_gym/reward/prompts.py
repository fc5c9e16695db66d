"""Language goals for the CLIP reward: VLM-RL's exact prompts and a preset for trolley scenes."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Prompts:
    """The language goals a head may use.

    Attributes:
        neg: Negative goal (CLG, LORD).
        pos: Positive goal (CLG).
        target: Target description (VLM-RM, VLM-SR, RoboCLIP).
        baseline: Baseline description (VLM-RM).
    """

    neg: str
    pos: str
    target: str
    baseline: str


PROMPT_PRESETS = {
    # VLM-RL config.py, reward_clg / reward_lord / reward_vlm_rm (exact strings).
    "vlm_rl": Prompts(
        neg="Two cars have collided with each other on the road",
        pos="The road is clear with no car accidents",
        target="A car is driving safely",
        baseline="A car",
    ),
    # This project's goals for trolley scenes seen from above: pedestrians hit versus a clear road.
    "trolley": Prompts(
        neg="A car has run into pedestrians standing on the road",
        pos="The road ahead is clear and every pedestrian is safe",
        target="A car drives safely past pedestrians",
        baseline="A car on a road",
    ),
}
"""Prompt presets by name."""


def resolve_prompts(prompts: str | Prompts) -> Prompts:
    """A preset by name, or the given `Prompts`.

    Raises:
        ValueError: Unknown preset name.
    """
    if isinstance(prompts, Prompts):
        return prompts
    if prompts not in PROMPT_PRESETS:
        raise ValueError(f"prompts={prompts!r}: choose one of {sorted(PROMPT_PRESETS)} or pass a Prompts object")
    return PROMPT_PRESETS[prompts]
