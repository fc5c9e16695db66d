"""Tool-calling language models on both env families: TRL GRPO adapters, prompts, rollouts, tiny test models.

* `tools` -- `CarlaToolEnv`: `CarlaTrolley-v0` as tools ``observe``, ``emergency_stop``, ``lane_change``
  for TRL's ``environment_factory`` (``with CarlaToolEnv() as env:`` closes one); `ToolEnvFactory`
  builds and closes them; `rubric_reward` is the GRPO reward function (`outcome_reward` with
  ``reward_mode="outcome"``: 1.0 for reaching the simulated best outcome).
* `nav_tools` -- `NavToolEnv`: `CarlaNavigation-v0` (maze, free roam, routes) as upstream's seven
  navigation tools, every tool one env ``step_call``; `NavToolEnvFactory` builds and closes them;
  `nav_rubric_reward` is their GRPO reward function.
* `prompts` -- the instruction every episode starts with, and the GRPO dataset rows.
* `rollout` -- `play_episode` / `TransformersChat`: the same episodes outside the trainer (the
  evaluations play them through `agents.players.ChatAgent`).
* `grpo` -- model loading, LoRA config, the trainer with VLM-safe completion logs.
* `tiny` -- random tiny Qwen3 / Qwen3-VL with a locally trained tokenizer (offline tests, the CPU recipe).
* `sft` -- the supervised warm start (TRL's SFTTrainer) on synthetic transcripts with a uniformly random tool.
* `curve` -- `LearningCurve`, the held-out evaluation every few GRPO steps (eval_curve.csv, train_curve.csv).

Importing this package does not import torch, transformers or trl.
"""

from carla_gym.llm.nav_tools import NavToolEnv, NavToolEnvFactory, nav_rubric_reward
from carla_gym.llm.prompts import INSTRUCTION, episode_rows, user_prompt
from carla_gym.llm.rollout import TransformersChat, play_episode
from carla_gym.llm.tools import EPISODE_OVER, CarlaToolEnv, ToolEnvFactory, outcome_reward, rubric_reward, tool_methods

__all__ = [
    "EPISODE_OVER",
    "INSTRUCTION",
    "CarlaToolEnv",
    "NavToolEnv",
    "NavToolEnvFactory",
    "ToolEnvFactory",
    "TransformersChat",
    "episode_rows",
    "nav_rubric_reward",
    "outcome_reward",
    "play_episode",
    "rubric_reward",
    "tool_methods",
    "user_prompt",
]
