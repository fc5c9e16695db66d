"""Tool-calling language models on CarlaTrolley-v0: TRL GRPO adapter, prompts, rollouts, tiny test models.

- `CarlaToolEnv` (tools.py): the env as tools ``observe``, ``emergency_stop``, ``lane_change``
  for TRL's ``environment_factory`` (``with CarlaToolEnv() as env:`` closes one); `ToolEnvFactory`
  builds and closes them; `rubric_reward` is the GRPO reward function.
- `NavToolEnv` (nav_tools.py): `CarlaNavigation-v0` (maze, free roam, routes) as upstream's seven
  navigation tools, every tool one env ``step_call``; `NavToolEnvFactory` builds and closes them;
  `nav_rubric_reward` is their GRPO reward function.
- prompts.py: the instruction every episode starts with, and the GRPO dataset rows.
- rollout.py: `play_episode` / `TransformersChat`: the same episodes outside the trainer (the
  evaluations play them through `agents.players.ChatAgent`).
- grpo.py: model loading, LoRA config, the trainer with VLM-safe completion logs.
- tiny.py: random tiny Qwen3 / Qwen3-VL with a locally trained tokenizer (offline tests).

Importing this package does not import torch, transformers or trl.
"""

from carla_gym.llm.nav_tools import NavToolEnv, NavToolEnvFactory, nav_rubric_reward
from carla_gym.llm.prompts import INSTRUCTION, episode_rows, user_prompt
from carla_gym.llm.rollout import TransformersChat, play_episode
from carla_gym.llm.tools import EPISODE_OVER, CarlaToolEnv, ToolEnvFactory, rubric_reward, tool_methods

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
    "play_episode",
    "rubric_reward",
    "tool_methods",
    "user_prompt",
]
