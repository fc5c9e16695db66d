"""Agents on `CarlaTrolley-v0` and the comparison harness.

- scripted.py: fixed tool policies and the catalogue oracle.
- players.py: one interface for every agent (`GymAgent` for scripted, random and SB3 policies,
  `ChatAgent` for tool-calling models, `oracle_agent`); specs.py parses ``[label=]kind[:argument]``;
  sb3.py and llm.py load trained SB3 runs (or wrap a model in memory), local transformers models
  (``train_grpo.py`` runs included) and OpenAI-compatible endpoints.
- evaluation.py: the one evaluation path (`play_all`, `write_summary`, `EVAL_SEED`), used by the
  harness and by ``train_sb3.py`` and ``train_grpo.py``.
- compare.py (``python -m agents.compare``, ``carla-gym-compare``, ``carla-gym compare``): every
  agent on the same scenarios and seeds; records.py (JSONL with resume), summary.py (tables,
  intervals), plots.py, video.py.
- nav.py, nav_summary.py, nav_video.py: the same harness on `CarlaNavigation-v0` (suites ``nav*``, the
  follow_route* baselines, random and SB3 runs, chat models through `carla_gym.llm.NavToolEnv`; VLM-RL's metrics
  from ``info["outcome"]``; bird's-eye GIFs).
"""

from agents.scripted import SCRIPTED_AGENTS, OracleAgent, ScriptedAgent, best_trolley_action

__all__ = ["SCRIPTED_AGENTS", "OracleAgent", "ScriptedAgent", "best_trolley_action"]
