"""Agents on `CarlaTrolley-v0` and the comparison harness.

- scripted.py: fixed tool policies and the catalogue oracle; evaluate.py: quick evaluation
  (used by ``train_sb3.py``).
- players.py: one interface for the harness (`GymAgent` for scripted, random and SB3 policies,
  `ChatAgent` for tool-calling models); specs.py parses ``[label=]kind[:argument]``; sb3.py and
  llm.py load trained SB3 runs, local transformers models (``train_grpo.py`` runs included) and
  OpenAI-compatible endpoints.
- compare.py (``python -m agents.compare``): every agent on the same scenarios and seeds;
  records.py (JSONL with resume), summary.py (tables, intervals), plots.py, video.py.
"""

from agents.scripted import SCRIPTED_AGENTS, OracleAgent, ScriptedAgent, best_trolley_action

__all__ = ["SCRIPTED_AGENTS", "OracleAgent", "ScriptedAgent", "best_trolley_action"]
