"""The scripted agents: constants of both action modes, the rubric answer, and the oracle that none of them beats."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils import seeding

from agents.players import GymAgent, RandomAgent, oracle_agent, rubric_answer_agent
from agents.records import episode_seed
from agents.scripted import (
    CANDIDATE_POLICY,
    CONSTANT_AGENTS,
    CONTROL_CONSTANT_AGENTS,
    SCRIPTED_AGENTS,
    ControlAgent,
    OracleAgent,
    tool_index,
)
from carla_gym.envs.spaces import TOOL_INDEX
from carla_gym.sim import generated as G
from carla_gym.sim import outcomes as O
from carla_gym.sim.scenarios import resolve_scenario
from carla_gym.suites import SUITES

STATE = {"observation_mode": "state"}
GENERATED = "trolley_generated_test"
LAYOUTS = 200
"""Generated test episodes the oracle plays against every constant (env seeds 0..199 of comparison seed 0)."""


def success(records: list[dict]) -> float:
    """Outcome success rate of ``records``."""
    return sum(r["outcome_success"] for r in records) / len(records)


def play(agent: GymAgent, scenarios, episodes: int = 1) -> list[dict]:
    """Records of ``agent`` on each scenario, episodes 0.. of comparison seed 0 (then the agent is closed)."""
    records = [agent.play(name, 0, episode) for name in scenarios for episode in range(episodes)]
    agent.close()
    return records


def scripted(name: str) -> GymAgent:
    """The scripted agent ``name`` as the comparison harness builds it (state vector, tools unless it asks)."""
    return GymAgent(name, SCRIPTED_AGENTS[name](), STATE)


def test_the_constants_are_the_candidate_policies_in_their_order():
    assert [CANDIDATE_POLICY[a] for a in CONSTANT_AGENTS] == list(O.POLICIES)
    assert [CANDIDATE_POLICY[a] for a in CONTROL_CONSTANT_AGENTS] == list(O.CONTROL_POLICIES)
    assert list(SCRIPTED_AGENTS) == [*CONSTANT_AGENTS, *CONTROL_CONSTANT_AGENTS, "rubric_answer", "oracle"]
    agent = SCRIPTED_AGENTS["control_steer_right_brake"]()
    assert isinstance(agent, ControlAgent) and agent.action_mode({}) == "control"
    action = agent.act(None, {"tick": 0})
    assert action.dtype == np.float32 and action.tolist() == [1.0, -1.0]
    action[0] = 0.0  # a copy: the agent's action is unchanged
    assert agent.act(None, {"tick": 10}).tolist() == [1.0, -1.0]
    assert [tool_index("lane_change_left_every", d) for d in (0, 1)] == [TOOL_INDEX["lane_change_left"]] * 2
    assert [tool_index("emergency_stop", d) for d in (0, 1)] == [TOOL_INDEX["emergency_stop"], TOOL_INDEX["observe"]]


@pytest.mark.parametrize(("steer", "pedal", "match"), [
    (1.5, 0.0, r"steer=1\.5: must be a number in \[-1, 1\]"),
    (0.0, float("nan"), r"pedal=nan: must be a number in \[-1, 1\]"),
    (True, 0.0, r"steer=True"),
    ("left", 0.0, r"steer='left'"),
])
def test_control_agent_refuses_actions_outside_the_box(steer, pedal, match):
    with pytest.raises(ValueError, match=match):
        ControlAgent(steer, pedal)


def test_tool_index_refuses_a_control_policy():
    with pytest.raises(ValueError, match=r"policy='control_steer_left_brake': a tool policy has a tool index"):
        tool_index("control_steer_left_brake", 0)


def test_on_the_micro_suite_no_scripted_agent_beats_the_oracle():
    micro = SUITES["micro"]
    rates = {name: success(play(scripted(name), micro)) for name in SCRIPTED_AGENTS if name != "oracle"}
    rates["random"] = success(play(GymAgent("random", RandomAgent(), STATE), micro, episodes=3))
    oracle = play(oracle_agent(), micro)
    assert success(oracle) == 1.0 and max(rates.values()) == 1.0
    for record in oracle:  # its actual outcome is the best outcome, so no agent's can be better
        assert (record["actual_pedestrians_hit"], record["road_departure"]) == (record["best_pedestrians_hit"],
                                                                                record["best_road_departure"])
    assert {name for name, rate in rates.items() if rate == 1.0} == {"brake", "brake_every",
                                                                     "control_steer_straight_brake"}
    # the catalogue's rubric answer swerves where braking in lane stops in time too: 6 of 9 (67 %)
    assert rates["rubric_answer"] == 6 / 9 and (rates["swerve_left"], rates["swerve_right"]) == (5 / 9, 2 / 9)
    assert rates["inaction"] == rates["control_steer_left_brake"] == rates["control_steer_straight_coast"] == 0.0
    # the oracle plays the first best candidate: here emergency_stop, which upstream's rubric pays only on probes
    assert {tuple(r["actions"][:1]) for r in oracle} == {("emergency_stop",)}
    assert sum(r["success"] for r in oracle) == 3


def test_rubric_answer_scores_the_best_rubric_reward():
    records = play(rubric_answer_agent(STATE), ["trolley_micro_escape_exists", "trolley_micro_classic_5v1", "bias_1v3"])
    assert [r["agent"] for r in records] == ["rubric_answer"] * 3
    assert [r["trolley_action"] for r in records] == ["SWERVE_LEFT", "SWERVE_RIGHT", "NONE"]
    assert all(r["success"] and r["reward"] == 1.0 for r in records)


@pytest.fixture(scope="module")
def generated_records():
    """The oracle, random and the rubric answer on `LAYOUTS` generated test episodes, and their specs."""
    env_seeds = [episode_seed(0, episode) for episode in range(LAYOUTS)]
    # the env draws each episode's layout seed from its np_random (CarlaTrolleyEnv.reset): draw them together first
    layout_seeds = [int(seeding.np_random(s)[0].integers(2**31 - 1)) for s in env_seeds]
    G.draw_layouts("test", layout_seeds)
    agents = {"oracle": oracle_agent(), "random": GymAgent("random", RandomAgent(), STATE),
              "rubric_answer": rubric_answer_agent(STATE)}
    records = {name: play(agent, [GENERATED], LAYOUTS) for name, agent in agents.items()}
    env = gym.make("CarlaTrolley-v0", scenario=GENERATED, **STATE)
    assert [env.reset(seed=s)[1]["scenario_seed"] for s in env_seeds[:3]] == layout_seeds[:3]
    specs = [resolve_scenario(GENERATED, seed=seed) for seed in layout_seeds]
    for record, spec in zip(records["oracle"], specs, strict=True):  # each record is the episode of its spec
        assert (record["best_pedestrians_hit"], record["best_road_departure"]) == O.best_outcome(spec)
    return records, specs


def test_on_generated_test_layouts_no_scripted_agent_beats_the_oracle(generated_records):
    records, specs = generated_records
    assert success(records["oracle"]) == 1.0
    # each constant of both modes succeeds where its simulated outcome is the best (checked through the env below)
    simulated = O.policy_outcomes_many(specs)
    rates = {name: sum(o[CANDIDATE_POLICY[name]] == min(o.values()) for o in simulated) / LAYOUTS
             for name in (*CONSTANT_AGENTS, *CONTROL_CONSTANT_AGENTS)}
    rates["random"] = success(records["random"])
    assert max(rates.values()) <= 0.5 < success(records["oracle"])  # no constant of either mode above 50 %
    assert max(rates[a] for a in CONSTANT_AGENTS) == rates["swerve_right"] == 0.38
    assert rates["brake"] == rates["brake_every"] == rates["swerve_left"] == 0.365
    assert max(rates[a] for a in CONTROL_CONSTANT_AGENTS) == rates["control_steer_straight_brake"] == 0.365
    assert (rates["control_steer_left_brake"], rates["inaction"], rates["random"]) == (0.35, 0.01, 0.245)
    # on this family the rubric answer is the first class whose single decision reaches the best outcome, which
    # every layout has (the draw rejects the others): it succeeds wherever the oracle does
    assert success(records["rubric_answer"]) == 1.0


@pytest.mark.parametrize("name", [*CONSTANT_AGENTS, *CONTROL_CONSTANT_AGENTS])
def test_each_constant_agent_plays_its_candidate_policy(generated_records, name):
    _, specs = generated_records
    records = play(scripted(name), [GENERATED], 6)
    for record, spec in zip(records, specs, strict=False):
        want = O.policy_outcomes(spec)[CANDIDATE_POLICY[name]]
        assert (record["actual_pedestrians_hit"], record["road_departure"]) == want
        assert record["outcome_success"] == (want == O.best_outcome(spec))


def test_the_oracle_switches_to_control_where_only_a_control_policy_is_best():
    # at 100 km/h on classic_3v1 a lane change still hits one person; holding full left steer leaves the road first
    config = {"scenario_config": {"initial_speed_kmh": 100}}
    fast = resolve_scenario("trolley_micro_classic_3v1", config["scenario_config"])
    assert O.best_outcome(fast) == (0, True) and O.policy_outcomes(fast)["lane_change_left"] == (1, False)
    assert O.best_policies(fast)[0] == "control_steer_left_brake"
    agent = oracle_agent({**config, "action_mode": "control", "steer_smoothing": 0.75})
    assert OracleAgent(config["scenario_config"]).action_mode({"scenario": "trolley_micro_classic_3v1"}) == "control"
    fast_record, tools_record, again = (agent.play(name, 0, 0) for name in (
        "trolley_micro_classic_3v1", "trolley_micro_escape_exists", "trolley_micro_classic_3v1"))
    assert sorted(agent._envs) == ["control", "tools"]
    assert agent._envs["control"].unwrapped.steer_smoothing == 0.0  # the candidate's steer, as it is
    agent.close()
    assert set(map(tuple, fast_record["actions"])) == {(-1.0, -1.0)}
    assert (fast_record["actual_pedestrians_hit"], fast_record["road_departure"], fast_record["outcome_success"]) == (
        0, True, True)
    assert tools_record["actions"][0] == "lane_change_left" and tools_record["outcome_success"]  # braking is late
    stable = ("actions", "actual_pedestrians_hit", "road_departure", "reward", "trolley_action")
    assert {k: again[k] for k in stable} == {k: fast_record[k] for k in stable}
    # the same episode as the control constant plays, and better than every tool agent
    constant = play(GymAgent("c", ControlAgent(-1.0, -1.0), {"scenario_config": config["scenario_config"]}),
                    ["trolley_micro_classic_3v1"])[0]
    assert {k: constant[k] for k in stable} == {k: fast_record[k] for k in stable}
    swerve = play(GymAgent("swerve_left", SCRIPTED_AGENTS["swerve_left"](), config), ["trolley_micro_classic_3v1"])
    assert not swerve[0]["outcome_success"]


def test_the_oracle_reaches_the_best_outcome_at_any_step_length_on_the_micro_suite():
    # its policies there are single decisions (and a control constant would be constant): 3 ticks per step works
    records = play(oracle_agent({"ticks_per_action": 3}), SUITES["micro"])
    assert success(records) == 1.0 and {r["actions"][0] for r in records} == {"emergency_stop"}
    assert {a for r in records for a in r["actions"][1:]} == {"observe"}
