"""Agents that act in `CarlaTrolley-v0`: scripted baselines (and, later, SB3 and LLM agents)."""

from agents.scripted import SCRIPTED_AGENTS, OracleAgent, ScriptedAgent, best_trolley_action

__all__ = ["SCRIPTED_AGENTS", "OracleAgent", "ScriptedAgent", "best_trolley_action"]
