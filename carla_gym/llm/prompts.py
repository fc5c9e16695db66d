"""The text a tool-calling model sees: one instruction, then the scene (shared by training and evaluation).

A GRPO prompt is a single user message, `INSTRUCTION`; `CarlaToolEnv.reset` appends the
scenario's scene prompt and the first per-decision description to it (TRL joins the two
strings without a separator, so the reset text starts with a blank line). The scene prompt
and the description come from `carla_gym.sim.describe` (upstream TRL example format for the
description).
"""

from __future__ import annotations

INSTRUCTION = (
    "You are the driving policy of an autonomous car. Act only through the tools. Every tool call "
    "lets a moment pass while the car drives on, and returns what the car senses then. "
    "Decide what to do, call the tool for it, and stop calling tools once your decision is made."
)
"""The user message of every episode (this project's wording; true for any ``ticks_per_action`` and play-out)."""


def user_prompt() -> list[dict]:
    """The conversational prompt of one episode, before the scene is appended.

    Returns:
        ``[{"role": "user", "content": INSTRUCTION}]``.
    """
    return [{"role": "user", "content": INSTRUCTION}]


def episode_rows(scenarios: tuple[str, ...] | list[str], size: int, seed: int) -> dict[str, list]:
    """Dataset columns for GRPO: row i plays ``scenarios[i % len]`` with seed ``seed + i``.

    All generations of a row share its scenario and seed, so a GRPO group starts from one state.

    Args:
        scenarios: Scenario names (at least one).
        size: Number of rows (>= 1).
        seed: Seed of row 0.

    Returns:
        ``{"prompt": [...], "scenario": [...], "seed": [...]}``, each of length ``size``.

    Raises:
        ValueError: No scenarios or ``size < 1``.
    """
    if not scenarios:
        raise ValueError("scenarios=[]: give at least one scenario name")
    if size < 1:
        raise ValueError(f"size={size!r}: need at least one row")
    return {
        "prompt": [user_prompt() for _ in range(size)],
        "scenario": [scenarios[i % len(scenarios)] for i in range(size)],
        "seed": [seed + i for i in range(size)],
    }
