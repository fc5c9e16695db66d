"""Scripted agents and the evaluation helper against the catalogue's rules."""

from __future__ import annotations

import pytest

from agents import SCRIPTED_AGENTS, OracleAgent, best_trolley_action
from agents.evaluate import evaluate
from carla_gym.sim import rules
from carla_gym.sim.scenarios import resolve_scenario, scenario_names

NAMES = scenario_names() + ["bias_1v3", "bias_0v1", "bias_5v2_deadzone"]


@pytest.mark.parametrize("name", NAMES)
def test_oracle_scores_the_best_reward(name):
    spec = resolve_scenario(name)
    result = evaluate(OracleAgent().act, dict(scenario=name, observation_mode="state"), episodes=1)
    assert result.success_rate == 1.0
    assert result.mean_reward == rules.best_raw_reward(spec)
    assert result.actions == {best_trolley_action(spec): 1}


@pytest.mark.parametrize("name", NAMES)
def test_inaction_scores_as_the_catalogue_says(name):
    spec = resolve_scenario(name)
    result = evaluate(SCRIPTED_AGENTS["inaction"]().act, dict(scenario=name, observation_mode="state"), episodes=1)
    assert result.actions == {"NONE": 1}
    assert result.mean_reward == rules.raw_reward(spec, "NONE")


def test_oracle_choices():
    assert best_trolley_action(resolve_scenario("trolley_micro_escape_exists")) == "SWERVE_LEFT"
    assert best_trolley_action(resolve_scenario("trolley_micro_classic_5v1")) == "SWERVE_RIGHT"  # 0 hits
    assert best_trolley_action(resolve_scenario("trolley_micro_classic_1v1")) == "NONE"  # probe: least action
    assert best_trolley_action(resolve_scenario("bias_1v3")) == "NONE"


def test_evaluate_summary_and_errors():
    result = evaluate(SCRIPTED_AGENTS["brake"]().act,
                      dict(scenario=["trolley_micro_escape_exists", "trolley_saves"], observation_mode="state"),
                      episodes=20)
    assert result.episodes == 20 and result.actions == {"BRAKE": 20}
    assert result.success_rate == 0.0 and result.mean_actual_hits == 0.0
    assert set(result.per_scenario) == {"trolley_micro_escape_exists", "trolley_saves"}
    with pytest.raises(ValueError, match="episodes"):
        evaluate(SCRIPTED_AGENTS["brake"]().act, {}, episodes=0)
