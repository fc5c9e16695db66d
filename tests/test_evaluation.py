"""One episode where more say nothing: a deterministic agent plays a fixed scenario once (`agents.evaluation`)."""

from __future__ import annotations

import pytest

from agents.evaluation import episodes_to_play, is_deterministic, is_fixed_scenario, play_all
from agents.players import GymAgent, RandomAgent, oracle_agent
from agents.scripted import SCRIPTED_AGENTS
from agents.summary import markdown, summary_rows
from carla_gym.envs.spaces import TOOL_INDEX

STATE = {"observation_mode": "state"}
ESCAPE = "trolley_micro_escape_exists"


def _play(agent, scenarios, seeds, episodes):
    try:
        return play_all([agent], scenarios, seeds, episodes)
    finally:
        agent.close()


def test_the_brake_agent_plays_a_fixed_scenario_once_for_a_hundred_episodes():
    records = _play(GymAgent("brake", SCRIPTED_AGENTS["brake"](), STATE), [ESCAPE], [3, 4], 100)
    assert [(r["scenario"], r["seed"], r["episode"], r["played_once"]) for r in records] == [(ESCAPE, 3, 0, True)]
    (record,) = records
    assert (record["trolley_action"], record["actual_pedestrians_hit"], record["reward"]) == ("BRAKE", 0, 0.0)
    row, pooled = summary_rows(records, ["brake"], [ESCAPE])
    assert (row["episodes"], row["replicates_identical"], row["scenarios_played_once"]) == (1, True, 1)
    assert markdown([row]).splitlines()[2].startswith(f"| brake | {ESCAPE} | 1 (deterministic) | 100% exact | ")


def test_the_random_agent_plays_every_episode():
    records = _play(GymAgent("random", RandomAgent(), STATE), [ESCAPE], [0], 100)
    assert [(r["seed"], r["episode"]) for r in records] == [(0, e) for e in range(100)]
    assert not any(r["played_once"] for r in records)
    assert len({tuple(r["actions"]) for r in records}) > 1  # the episodes differ: each one says something


@pytest.mark.parametrize("name", ["brake", "oracle"])
def test_the_generated_family_always_plays_every_episode(name):
    agent = oracle_agent(STATE) if name == "oracle" else GymAgent(name, SCRIPTED_AGENTS[name](), STATE)
    records = _play(agent, ["trolley_generated_test"], [0, 1], 3)
    assert [(r["seed"], r["episode"], r["played_once"]) for r in records] == [
        (s, e, False) for s in (0, 1) for e in range(3)]


def test_every_scripted_agent_and_the_oracle_are_deterministic_random_is_not():
    for name, factory in SCRIPTED_AGENTS.items():
        assert is_deterministic(GymAgent(name, factory(), STATE)), name
    assert is_deterministic(oracle_agent(STATE))
    assert not is_deterministic(GymAgent("random", RandomAgent(), STATE))


class _Observer:
    """A policy that always observes, declaring whether it is deterministic (or not, with None)."""

    def __init__(self, deterministic: bool | None) -> None:
        if deterministic is not None:
            self.deterministic = deterministic

    def act(self, observation, info: dict) -> int:
        return TOOL_INDEX["observe"]


def test_a_declared_attribute_decides_on_the_agent_then_on_its_policy():
    assert not is_deterministic(GymAgent("a", _Observer(None), STATE))  # an unknown policy: every episode
    assert is_deterministic(GymAgent("a", _Observer(True), STATE))
    declared = GymAgent("a", SCRIPTED_AGENTS["brake"](), STATE)
    declared.deterministic = False  # the agent's own declaration comes first
    assert not is_deterministic(declared)
    assert len(_play(declared, [ESCAPE], [0], 4)) == 4
    assert len(_play(GymAgent("a", _Observer(True), STATE), [ESCAPE, "trolley_saves"], [0], 4)) == 2


def test_an_sb3_model_acting_deterministically_plays_a_fixed_scenario_once():
    import gymnasium as gym
    from stable_baselines3 import PPO

    from agents.sb3 import ModelPolicy

    env = gym.make("CarlaTrolley-v0", scenario=ESCAPE, **STATE)
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, seed=0, device="cpu")  # untrained: weights of seed 0
    env.close()
    agent = GymAgent("ppo", ModelPolicy(model), STATE)
    assert is_deterministic(agent)
    records = _play(agent, [ESCAPE, "trolley_generated_test"], [0], 3)
    assert [(r["scenario"], r["episode"], r["played_once"]) for r in records] == [
        (ESCAPE, 0, True), *(("trolley_generated_test", e, False) for e in range(3))]


def test_skipped_keys_and_the_plan_of_each_scenario():
    assert episodes_to_play(True, ESCAPE, [5, 6], 10) == [(5, 0)]
    assert episodes_to_play(True, "trolley_generated_train", [5], 2) == [(5, 0), (5, 1)]
    assert episodes_to_play(False, "bias_3v1", [0, 1], 1) == [(0, 0), (1, 0)]
    assert [is_fixed_scenario(n) for n in ("bias_3v1", "trolley_saves", "trolley_micro_classic_3v1_deadzone",
                                           "trolley_generated_test", "free_roam_Town05", "no such scenario")] == [
        True, True, True, False, False, False]
    agent = GymAgent("brake", SCRIPTED_AGENTS["brake"](), STATE)
    try:  # the one episode of a fixed scenario, already recorded: nothing left to play there
        records = play_all([agent], [ESCAPE, "trolley_saves"], [0, 1], 5, skip={("brake", ESCAPE, 0, 0)})
        assert [(r["scenario"], r["seed"], r["episode"]) for r in records] == [("trolley_saves", 0, 0)]
    finally:
        agent.close()


@pytest.mark.parametrize("scenario", ["trolley_micro_classic_3v1_deadzone", "trolley_micro_escape_exists", "bias_3v1"])
def test_what_one_episode_stands_for_is_what_every_seed_plays(scenario):
    """The premise, checked: a deterministic agent's episodes on a fixed scenario agree at every seed and episode."""
    agents = [GymAgent(name, factory(), STATE) for name, factory in SCRIPTED_AGENTS.items()]
    try:
        everything = play_all(agents, [scenario], [0, 7], 2, every_episode=True)
        once = play_all(agents, [scenario], [0, 7], 2)
    finally:
        for agent in agents:
            agent.close()
    assert len(everything) == 4 * len(agents) and not any(r["played_once"] for r in everything)
    assert [(r["agent"], r["seed"], r["episode"], r["played_once"]) for r in once] == [
        (name, 0, 0, True) for name in SCRIPTED_AGENTS]
    stable = lambda r: {k: v for k, v in r.items() if k not in ("seed", "episode", "wall_time_s", "played_once")}  # noqa: E731
    for record in once:
        replicates = [stable(r) for r in everything if r["agent"] == record["agent"]]
        assert replicates == [stable(record)] * 4, record["agent"]


def test_an_agent_on_an_openenv_server_plays_every_episode():
    from agents.evaluation import is_deterministic
    from agents.players import GymAgent
    from agents.scripted import ScriptedAgent

    brake = ScriptedAgent(1)
    assert is_deterministic(GymAgent("brake", brake)) is True
    assert is_deterministic(GymAgent("brake", brake, {"backend": "embedded"})) is True
    assert is_deterministic(GymAgent("brake", brake, {"backend": "openenv", "base_url": "http://x"})) is False


def test_random_agent_refuses_an_unknown_action_mode():
    with pytest.raises(ValueError, match="action_mode='camera': choose 'tools' or 'control'"):
        RandomAgent("camera")
