"""Agents on `CarlaTrolley-v0` and `CarlaNavigation-v0`, the comparison harness and the study.

* `scripted` -- the constant policies of both action modes (tools and control), the catalogue's rubric answer
  and the oracle (a candidate policy reaching the simulated best outcome).
* `players` -- one interface for every agent (`GymAgent` for scripted, random and SB3 policies,
  `ChatAgent` for tool-calling models, `oracle_agent`, `rubric_answer_agent`).
* `specs` -- agent specifications on the command line: ``[label=]kind[:argument]``.
* `sb3` -- trained SB3 runs (or a model in memory) as policies.
* `llm` -- local transformers models (``train_grpo.py`` runs included) and OpenAI-compatible endpoints.
* `evaluation` -- the one evaluation path (`play_all`, `write_summary`, `EVAL_SEED`), used by the
  harness and by ``train_sb3.py`` and ``train_grpo.py``.
* `compare` -- ``python -m agents.compare`` (``carla-gym-compare``, ``carla-gym compare``): every agent on
  the same scenarios and seeds.
* `records` -- episode records in JSONL, with resume.
* `summary` -- summary tables of episode records with 95% confidence intervals.
* `plots` -- comparison figures.
* `video` -- episode videos (GIF) replayed from records.
* `readme_table` -- regenerates the comparison table and figures (``python -m agents.readme_table``).
* `study` -- the direct comparison on generated trolley scenarios (``python -m agents.study``).
* `study_plot` -- the study's figure and table.
* `stats` -- interval estimates for comparing agents (`rliable`): IQM with stratified bootstrap intervals,
  performance profiles, probability of improvement, paired differences on the same layouts.
* `ceiling` -- learnability ceilings of the generated trolley family: supervised pickers of one tool from the
  reset observation (state vector, dict, scene text), scored in closed loop on held-out layouts, and the
  aliasing of observations.
* `nav` -- the same harness on `CarlaNavigation-v0`: suites ``nav*``, the follow_route* baselines, random
  and SB3 runs, chat models through `carla_gym.llm.NavToolEnv`.
* `nav_summary` -- navigation summaries: VLM-RL's metrics from ``info["outcome"]``.
* `nav_video` -- navigation replays as bird's-eye GIFs.
"""

from agents.scripted import (
    SCRIPTED_AGENTS,
    ControlAgent,
    OracleAgent,
    RubricAnswerAgent,
    ScriptedAgent,
    best_trolley_action,
)

__all__ = ["SCRIPTED_AGENTS", "ControlAgent", "OracleAgent", "RubricAnswerAgent", "ScriptedAgent",
           "best_trolley_action"]
