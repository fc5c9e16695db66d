"""GRPO tool-calling on navigation (maze, free roam, routes): NavToolEnv against CarlaNavigation-v0, TRL offline."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import gymnasium as gym
import numpy as np
import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig  # noqa: E402

import train_grpo  # noqa: E402
from carla_gym.llm.grpo import CarlaGRPOTrainer  # noqa: E402
from carla_gym.llm.nav_tools import (  # noqa: E402
    MAX_FOLLOW_STEPS,
    NavToolEnv,
    NavToolEnvFactory,
    call_record,
    nav_episode_metrics,
    nav_rubric_reward,
)
from carla_gym.llm.prompts import INSTRUCTION, NAV_INSTRUCTION, episode_rows, nav_scene_prompt  # noqa: E402
from carla_gym.llm.rollout import UNFINISHED, play_episode  # noqa: E402
from carla_gym.llm.tiny import tiny_text_model, tiny_vl_model  # noqa: E402
from carla_gym.llm.tools import EPISODE_OVER, count_conversation, tool_methods  # noqa: E402
from carla_gym.sim.navigation.describe import observation_text  # noqa: E402
from carla_gym.sim.navigation.route_task import EVAL_ROUTES, spawn_pair  # noqa: E402
from carla_gym.sim.town.render import render_town  # noqa: E402
from carla_gym.sim.world import NavigationCall  # noqa: E402

TOOLS = ["control_vehicle", "emergency_stop", "follow_route", "init_navigation_agent", "lane_change", "observe",
         "set_destination"]
DONE = "Done.<|im_end|>"


def _goal(env):
    return env.info["goal"]


def _gym(scenario, seed, **kwargs):
    """The Gymnasium env a Gymnasium agent would use, reset with ``seed``: ``(env, reset info)``."""
    env = gym.make("CarlaNavigation-v0", scenario=scenario, reward_mode="rubric", action_mode="tools", **kwargs)
    return env.unwrapped, env.reset(seed=seed)[1]


# -- the adapter ------------------------------------------------------------------------------------
def test_adapter_exposes_the_seven_navigation_tools_with_valid_schemas():
    env = NavToolEnv()
    assert [t.__name__ for t in tool_methods(env)] == TOOLS and not isinstance(env, gym.Env)
    schemas = {t.__name__: get_json_schema(t)["function"] for t in tool_methods(env)}  # what TRL renders
    assert schemas["init_navigation_agent"]["parameters"]["properties"]["behavior"]["enum"] == [
        "normal", "cautious", "aggressive"]
    assert schemas["lane_change"]["parameters"]["required"] == ["direction"]
    assert schemas["set_destination"]["parameters"]["required"] == ["x", "y"]
    assert schemas["control_vehicle"]["parameters"]["required"] == ["throttle", "steer"]
    assert schemas["follow_route"]["parameters"]["properties"]["steps"]["type"] == "integer"
    assert schemas["observe"]["parameters"] == {"type": "object", "properties": {}}
    assert all(s["description"] for s in schemas.values())


def test_reset_is_the_gym_envs_reset_and_its_text_the_scene_prompt_and_first_observation():
    env = NavToolEnv()
    text = env.reset(prompt=[{"role": "user", "content": NAV_INSTRUCTION}], scenario="maze_navigation", seed=3)
    genv, info = _gym("maze_navigation", 3)  # seed 3 of gym.make("CarlaNavigation-v0"): the same episode
    scene = nav_scene_prompt(genv.episode.spec, tool_methods(env))
    assert text == f"\n\n{scene}\nNow:\n{info['text']}" and env.info == info
    assert scene.startswith("You drive a car in a maze of city streets.\n\nGoal: get within 5.0m of the destination.")
    assert [line.split("(")[0] for line in scene.split("Tools:\n")[1].splitlines()] == [f"- {t}" for t in TOOLS]
    assert env.reset(scenario="maze_navigation", seed=3) == text and env.calls == [] and env.reward == 0.0
    x, y, z = info["goal"]
    assert f"at ({x:.1f}, {y:.1f}, {z:.1f})." in text  # set_destination's arguments are visible
    route = env.reset(scenario="route_Town02", seed=0, scenario_config={"traffic": 0, "route": "eval"}, route_index=3)
    genv, _ = _gym("route_Town02", 0, scenario_config={"traffic": 0, "route": "eval"})
    _, info = genv.reset(seed=0, options={"route_index": 3})
    assert env.info == info and info["traffic"] == 0
    assert info["route"] == spawn_pair(EVAL_ROUTES[3], len(genv.world.town.spawn_points))  # VLM-RL's eval route 3
    assert route.endswith(f"Now:\n{info['text']}")
    with pytest.raises(ValueError, match="'trolley_saves' is not a navigation scenario"):
        env.reset(scenario="trolley_saves")


def test_observation_text_reports_every_field():
    obs = {"speed_kmh": 0.0, "goal_distance": 4.96, "goal_direction": "behind", "current_lane": "unknown",
           "nearby_actors": [], "collided_with": "vehicle.tesla.model3",
           "scenario_data": {"goal_location": [1.0, 2.0, 0.0]}}
    assert observation_text(obs) == ("Speed: 0.0 km/h.\nGoal: 5.0 m away, behind, at (1.0, 2.0, 0.0).\n"
                                     "Lane: unknown.\nNo nearby actors detected.\n"
                                     "COLLISION detected with vehicle.tesla.model3!")


@pytest.mark.parametrize("scenario,seed", [("free_roam_Town10HD_Opt_v5", 2), ("maze_navigation", 1)])
def test_every_tool_is_one_gym_env_step_call_with_its_reward_and_info(scenario, seed):
    """Same calls through CarlaNavigationEnv.step_call: the same reward, info and text after every tool."""
    env = NavToolEnv()
    env.reset(scenario=scenario, seed=seed)
    genv, info = _gym(scenario, seed)
    x, y, _ = info["goal"]
    script = [  # (tool call, the step_call action, its ticks)
        (lambda: env.observe(), NavigationCall("observe"), 10),
        (lambda: env.control_vehicle(0.6, 0.05), NavigationCall("control", throttle=0.6, steer=0.05), 10),
        (lambda: env.lane_change("right"), NavigationCall("lane_change", lane_direction="right"), 10),
        (lambda: env.emergency_stop(), NavigationCall("emergency_stop"), 10),
        (lambda: env.init_navigation_agent("cautious"),
         NavigationCall("init_navigation_agent", navigation_behavior="cautious"), 1),
        (lambda: env.set_destination(x, y), NavigationCall("set_destination", destination_x=x, destination_y=y,
                                                           destination_z=0.0), 1),
        (lambda: env.follow_route(500), NavigationCall("follow_route", route_steps=MAX_FOLLOW_STEPS), None),
        (lambda: env.follow_route(), NavigationCall("follow_route", route_steps=10), None),
    ]
    if scenario == "maze_navigation":  # a one-lane road: the lane change is refused by both, nothing changes
        with pytest.raises(ValueError, match="no same-direction neighbour on the right"):
            genv.step_call(script[2][1], 10)
        with pytest.raises(ValueError, match="no same-direction neighbour on the right"):
            env.lane_change("right")
        del script[2]
    total, ticks = 0.0, []
    for tool, call, n in script:
        _, reward, terminated, truncated, info = genv.step_call(call, n)
        total += reward
        ticks.append(info["ticks"])
        assert tool() == info["text"]
        assert env.info == info and env.reward == total and env.done == (terminated or truncated)
    assert env.episode.ticks == genv.episode.ticks == sum(ticks)
    assert ticks[:-4] == [10] * (len(script) - 4)
    assert ticks[-4:] == [1, 1, MAX_FOLLOW_STEPS, 10]  # the cap: follow_route(500) drove 200 ticks
    assert env.actions == [c.action_type for _, c, _ in script]
    assert env.steps == [call_record(c, n) for _, c, n in script]


def test_observe_equals_the_gym_envs_observe_action():
    """A Gymnasium agent's tools-mode ``observe`` (action 0) and the tool: the same rewards and texts."""
    env = NavToolEnv()
    env.reset(scenario="free_roam_Town02_v20", seed=5)
    env.control_vehicle(0.5, 0.0)
    genv, _ = _gym("free_roam_Town02_v20", 5)
    _, total, *_ = genv.step_call(NavigationCall("control", throttle=0.5), 10)
    for _ in range(3):
        _, reward, _, _, info = genv.step(0)
        total += reward
        assert env.observe() == info["text"] and env.reward == total and env.info == info


def test_errors_come_back_as_text_count_as_failures_and_change_nothing():
    env = NavToolEnv()
    env.reset(scenario="free_roam_Town02_v20", seed=1)
    attempts = [lambda: env.lane_change("left"), lambda: env.lane_change("up"),
                lambda: env.set_destination(1e4, 1e4), lambda: env.control_vehicle(2, 0),
                lambda: env.follow_route(0), lambda: env.follow_route(2.5), lambda: env.init_navigation_agent("fast"),
                lambda: env.observe(now=True)]
    errors = []
    for attempt in attempts:
        with pytest.raises(ValueError) as caught:
            attempt()
        errors.append(str(caught.value))
    assert errors[0].startswith("lane_change left: lane 25 (lane_0) of Town02 has no same-direction neighbour")
    assert errors[1:] == [
        "direction='up' is not valid; use 'left' or 'right'",
        "set_destination (destination_x, destination_y)=(10000.0, 10000.0): 13882.3 m from the nearest lane of "
        "Town02, off the road network (must be within 10.0 m)",
        "throttle=2: must be a number in [0, 1]",
        "steps=0: must be an integer in [1, 10000]",
        "steps=2.5: must be an integer in [1, 10000]",
        "behavior='fast' is not valid; use one of ['normal', 'cautious', 'aggressive']",
        "observe(now=True): unknown argument(s) ['now']; call it as observe()"]
    assert env.failures == env.calls == ["lane_change", "lane_change", "set_destination", "control_vehicle",
                                         "follow_route", "follow_route", "init_navigation_agent", "observe"]
    assert env.episode.ticks == env.episode.steps == 0 and env.actions == env.steps == [] and env.reward == 0.0
    assert env.info == _gym("free_roam_Town02_v20", 1)[1]  # nothing changed
    count_conversation(env, [{"role": "tool", "name": "fly", "content": "{'error': 'Tool fly not found.'}"}])
    assert (len(env.calls), len(env.failures)) == (9, 9)
    assert nav_episode_metrics([env]) == {"episode/tool_calls": 9.0, "episode/tool_failures": 9.0,
                                          "episode/parse_failures": 0.0}


def test_autopilot_reaches_the_maze_goal_and_tools_stop_after_the_end():
    env = NavToolEnv()
    env.reset(scenario="maze_navigation", seed=0)
    env.init_navigation_agent()
    env.set_destination(*_goal(env))
    while not env.done:
        text = env.follow_route(MAX_FOLLOW_STEPS)
    assert text.endswith("\n" + EPISODE_OVER) and env.reward == 1.0  # the maze rubric: +1 on arrival
    outcome = env.outcome
    assert outcome is env.info["outcome"] and outcome["success"] and outcome["termination"] == "goal_reached"
    ticks = env.episode.ticks
    assert env.observe() == EPISODE_OVER and env.episode.ticks == ticks and env.calls[-1] == "observe"
    assert nav_rubric_reward([env]) == [1.0]
    metrics = nav_episode_metrics([env])
    assert metrics["episode/success"] == 1.0 and metrics["episode/collision"] == 0.0
    assert metrics["episode/route_completion"] == outcome["routes_completed"] > 0.9
    assert metrics["episode/time"] == outcome["time"] == ticks / 20  # 0.05 s ticks


@pytest.mark.parametrize("scenario", ["maze_navigation", "free_roam_Town02_v20"])
def test_play_out_holds_the_controls_until_the_gym_env_ends_and_no_play_out_scores_the_reward_so_far(scenario):
    env, upstream = NavToolEnv(time_limit_s=20.0), NavToolEnv(play_out=False, time_limit_s=20.0)
    for e in (env, upstream):
        e.reset(scenario=scenario, seed=4)
        e.control_vehicle(0.4, 0.0)
    genv, _ = _gym(scenario, 4, time_limit_s=20.0)
    _, total, *_ = genv.step_call(NavigationCall("control", throttle=0.4), 10)
    so_far, done, steps = total, False, 0
    while not done:
        _, reward, terminated, truncated, info = genv.step_call(NavigationCall("observe"), 10)
        total, done, steps = total + reward, terminated or truncated, steps + 1
    assert upstream._finish() == so_far and not upstream.done
    assert env._finish() == total and env.done and env.info == info and env.outcome == info["outcome"]
    assert env.actions == ["control"] and len(env.steps) == 1 + steps  # the play-out is logged, not an action
    assert env.steps[1] == {"call": {"action_type": "observe"}, "ticks": 10, "play_out": True}


def test_termination_picks_the_gym_envs_end_rules_upstream_by_default():
    """A standing ego: upstream's ends wait for the time limit, ``"vlm-rl-eval"`` stops it at 10 s.

    Upstream's are the default (what GRPO trains with); the harness's ``"vlm-rl-eval"`` ends the episode when the
    first waypoint is not passed after 10 s (VLM-RL's eval.py).
    """
    row = {"scenario": "route_Town02", "seed": 0, "scenario_config": {"traffic": 0, "route": "eval"}, "route_index": 7}
    ends = {}
    for termination in (None, "vlm-rl-eval"):
        env = NavToolEnv(time_limit_s=20.0) if termination is None else NavToolEnv(time_limit_s=20.0,
                                                                                    termination=termination)
        env.reset(**row)
        env.emergency_stop()
        env._finish()
        ends[env.env.termination] = (env.outcome["termination"], env.outcome["time"], len(env.steps))
        env._close()
    assert ends == {"upstream": ("time_limit", 20.0, 40), "vlm-rl-eval": ("no_progress", 10.0, 20)}
    with pytest.raises(ValueError, match=r"termination='eval': choose one of \[None, 'vlm-rl', 'vlm-rl-eval', "):
        NavToolEnv(termination="eval")


def test_play_episode_plays_a_navigation_episode_with_the_nav_prompt():
    def call(name, **arguments):
        return {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": arguments}}]}

    class Autopilot:  # set up from the goal in the first message, then follow the route until the end
        def __call__(self, messages, tools):
            if EPISODE_OVER in str(messages[-1]["content"]):
                return {"role": "assistant", "content": "Arrived."}
            if len(messages) == 1:
                x, y = map(float, re.search(r"at \(([-\d.]+), ([-\d.]+),", messages[0]["content"]).groups())
                return {"role": "assistant", "content": "", "tool_calls": [
                    *call("init_navigation_agent")["tool_calls"], *call("set_destination", x=x, y=y)["tool_calls"]]}
            return call("follow_route", steps=200)

    env = NavToolEnv()
    record = play_episode(Autopilot(), env, "maze_navigation", 0, max_tool_calling_iterations=10)
    assert record["messages"][0]["content"].startswith(NAV_INSTRUCTION + "\n\nYou drive a car in a maze")
    assert record["success"] and record["termination"] == "goal_reached" and record["reward"] == 1.0
    follows = len(record["tool_calls"]) - 2
    assert record["tool_calls"] == ["init_navigation_agent", "set_destination"] + ["follow_route"] * follows
    assert follows >= 1 and record["tool_failures"] == 0
    assert record["turns"] == follows + 2 and record["messages"][-1]["content"] == "Arrived."  # tool turns, answer
    assert {k: record[k] for k in env.outcome} == env.outcome  # the env's terminal outcome
    unfinished = play_episode(lambda messages, tools: {"role": "assistant", "content": "Done."},
                              NavToolEnv(play_out=False), "maze_navigation", 0)
    assert unfinished["termination"] == UNFINISHED and unfinished["reward"] == 0.0 and not unfinished["success"]
    assert unfinished["routes_completed"] is None


def test_vision_tools_return_the_chosen_camera_and_the_text():
    for view in ("front", "birdeye"):
        env = NavToolEnv(vision=True, image_size=64, view=view)
        first = env.reset(scenario="free_roam_Town02_v20", seed=0)
        assert [b["type"] for b in first] == ["image", "text"] and first[0]["image"].size == (64, 36)
        genv, _ = _gym("free_roam_Town02_v20", 0)
        world = genv.world
        expected = render_town(world.town, world.vehicles, np.zeros((0, 2)), world.lights, view=view, width=64,
                               height=36, route=genv.route.waypoints, goal=np.array(genv.episode.goal[:2]))
        np.testing.assert_array_equal(np.asarray(first[0]["image"]), expected)
        reply = env.observe()
        assert reply[1]["text"] == env.info["text"]
    with pytest.raises(ValueError, match=r"view='top': choose one of \['front', 'birdeye'\]"):
        NavToolEnvFactory(view="top")
    with pytest.raises(ValueError, match=r"ticks_per_action=101: must be an integer in \[1, 100\]"):
        NavToolEnvFactory(ticks_per_action=101)


def test_episode_rows_give_navigation_scenarios_the_navigation_prompt():
    rows = episode_rows(["maze_navigation", "trolley_saves", "route_Town02", "free_roam_Town05"], 5, 5)
    assert [p[0]["content"] for p in rows["prompt"]] == [NAV_INSTRUCTION, INSTRUCTION, NAV_INSTRUCTION,
                                                         NAV_INSTRUCTION, NAV_INSTRUCTION]
    assert rows["seed"] == [5, 6, 7, 8, 9]


def test_factory_builds_and_closes_nav_envs():
    with NavToolEnvFactory(ticks_per_action=5) as factory:
        envs = [factory(), factory()]
        envs[0].reset(seed=0)
        envs[0].observe()
        assert envs[0].episode.ticks == 5 and factory.instances == envs
    assert factory.instances == [] and envs[0].episode is None


# -- GRPOTrainer with scripted multi-turn generations -------------------------------------------------
def _autopilot_script(trainer, tokenizer, autopilot_rows):
    """Script generate: first-turn rows in ``autopilot_rows`` drive by autopilot, the others stop at once.

    An autopilot row sets the agent up from the goal in the prompt, then follows the route until the episode is
    over (later turns hold only the rows still calling tools).
    """
    tool_response = tokenizer.convert_tokens_to_ids("<tool_response>")

    def reply(j, row):
        text, first = tokenizer.decode(row), not (row == tool_response).any()
        if (first and j not in autopilot_rows) or "The episode is over" in text:
            return DONE
        if first:
            x, y = re.search(r"at \(([-\d.]+), ([-\d.]+),", text).groups()
            calls = [{"name": "init_navigation_agent", "arguments": {}},
                     {"name": "set_destination", "arguments": {"x": float(x), "y": float(y)}}]
        else:
            calls = [{"name": "follow_route", "arguments": {"steps": 200}}]
        return "".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls) + "<|im_end|>"

    def generate(input_ids=None, **kwargs):
        ids = [tokenizer(reply(j, row))["input_ids"] for j, row in enumerate(input_ids)]
        width = max(map(len, ids))
        ids = [i + [tokenizer.pad_token_id] * (width - len(i)) for i in ids]
        return torch.cat([input_ids, torch.tensor(ids, dtype=input_ids.dtype)], dim=1)

    trainer.model.generate = generate


def _trainer(model, processing_class, tmp_path, factory, **config):
    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=2, num_generations=2,
                    max_completion_length=2048, max_steps=1, learning_rate=1e-2, bf16=False, use_cpu=True,
                    report_to=[], save_strategy="no", logging_steps=1, activation_checkpointing=False,
                    max_tool_calling_iterations=6, seed=0, chat_template_kwargs={"enable_thinking": False})
    settings.update(config)
    dataset = Dataset.from_dict(episode_rows(["maze_navigation"], 2, 0))
    return CarlaGRPOTrainer(model=model, reward_funcs=[nav_rubric_reward], args=GRPOConfig(**settings),
                            train_dataset=dataset, processing_class=processing_class, environment_factory=factory)


def test_grpo_step_on_the_maze_with_multi_turn_autopilot_rollouts(tmp_path):
    model, tok = tiny_text_model()
    factory = NavToolEnvFactory(time_limit_s=60.0)  # the stopped rollout stands for 60 s, not the env's 300 s
    trainer = _trainer(model, tok, tmp_path, factory)
    assert [t.__name__ for t in trainer.tools] == TOOLS
    _autopilot_script(trainer, tok, autopilot_rows={0})
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    log = trainer.state.log_history[0]
    # one rollout drives to the goal (+1), the other stops at once and stands until the time limit (0): advantages != 0
    assert log["rewards/nav_rubric_reward/mean"] == 0.5 and log["frac_reward_zero_std"] == 0.0
    assert log["episode/success"] == 0.5 and log["episode/collision"] == 0.0
    stopped, driven = sorted(factory.instances, key=lambda e: len(e.calls))
    assert driven.calls == ["init_navigation_agent", "set_destination"] + ["follow_route"] * (len(driven.calls) - 2)
    assert driven.outcome["success"] and stopped.calls == [] and stopped.outcome["termination"] == "time_limit"
    assert stopped.outcome["time"] == 60.0 and stopped.reward == 0.0
    completion = (driven.outcome["routes_completed"] + stopped.outcome["routes_completed"]) / 2
    assert log["episode/route_completion"] == pytest.approx(completion)
    assert log["tools/call_frequency"] == len(driven.calls) / 2 == log["episode/tool_calls"]
    assert log["tools/failure_frequency"] == 0.0
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    factory.close()


@pytest.mark.slow
def test_grpo_step_with_a_vlm_sends_navigation_images(tmp_path):
    """Slow (6 s: long tool-schema prompts through a VLM backward pass).

    Fast equivalents: the adapter's images (test_vision_tools_return_the_chosen_camera_and_the_text) and
    test_grpo.py's trolley VLM step.
    """
    model, processor = tiny_vl_model()
    factory = NavToolEnvFactory(vision=True, image_size=64, view="birdeye", time_limit_s=60.0)
    trainer = _trainer(model, processor, tmp_path, factory, max_tool_calling_iterations=1)
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    seen = []
    _autopilot_script(trainer, processor.tokenizer, autopilot_rows={0})
    inner = trainer.model.generate

    def generate(input_ids=None, **kwargs):
        seen.append([int((row == pad).sum()) for row in input_ids])
        return inner(input_ids=input_ids, **kwargs)

    trainer.model.generate = generate
    trainer.train()
    # turn 1: both reset images (2 tokens each at 64x36); turn 2: row 0 also has its two tool images
    assert seen == [[2, 2], [6]]
    assert trainer.state.log_history[0]["tools/call_frequency"] == 1.0  # init + set_destination, then the limit
    factory.close()


# -- train_grpo.py -----------------------------------------------------------------------------------
def test_train_grpo_trains_and_evaluates_navigation(tmp_path):
    out = tmp_path / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = train_grpo.main(["--model", "tiny-random", "--scenario", "maze_navigation", "--dataset-size", "2",
                                "--num-generations", "2", "--per-device-train-batch-size", "2",
                                "--max-completion-length", "32", "--max-steps", "1", "--eval-episodes", "1",
                                "--eval-max-new-tokens", "4", "--nav-time-limit-s", "10", "--output-dir", str(out)])
    assert code == 0
    assert printed.getvalue().splitlines()[0] == (
        "training tiny-random with GRPO (full fine-tune, navigation text tools) on maze_navigation: 2 prompts x 2 "
        f"generations, 1 step(s), rollouts on the embedded simulator; device cpu (fp32); run directory {out}")
    log = json.loads((out / "train_log.json").read_text())["log_history"][0]
    assert "rewards/nav_rubric_reward/mean" in log
    evaluation = json.loads((out / "eval.json").read_text())
    [record] = evaluation["records"]
    assert (record["agent"], record["scenario"], record["seed"]) == ("grpo", "maze_navigation", 10000)
    # the summary is the harness's row (agents.nav_summary.nav_row) of the records
    from agents.nav_summary import NAV_COLUMNS, nav_row

    row = evaluation["summary"]["maze_navigation"]
    assert list(row) == list(NAV_COLUMNS) and row == json.loads(json.dumps(nav_row("grpo", "maze_navigation",
                                                                                    [record])))
    assert (row["episodes"], row["route_completion"], row["time"]) == (1, record["routes_completed"],
                                                                     record["time"])
    assert row["tool_calls"] == len(record["tool_calls"]) and row["decisions"] == record["decisions"]


ROUTE_REFUSAL = (
    "--scenario route_Town02: route scenarios (route_Town01, route_Town02, route_Town03, route_Town04, "
    "route_Town05) are not trained with GRPO; train_grpo.py's navigation scenarios are maze_navigation; "
    "free_roam; free_roam_<Map>")


@pytest.mark.parametrize("flags,message", [
    (["--scenario", "route_Town02"], ROUTE_REFUSAL),
    (["--scenario", "maze_navigation", "route_Town02"], ROUTE_REFUSAL),
    (["--scenario", "route_Town02", "trolley_saves"], "Route scenarios are for train_sb3.py --env "
                                                      "CarlaNavigation-v0 and python -m agents.compare"),
    (["--scenario", "maze_navigation", "trolley_saves"], "trolley_saves is a trolley scenario"),
    (["--scenario", "free_roam_Nowhere"], "--scenario: Scenario 'free_roam_Nowhere'"),
    (["--scenario", "maze_navigation", "--env-urls", "http://127.0.0.1:8000"], "embedded simulator only"),
    (["--scenario", "maze_navigation", "--reward-mode", "physical"], "--reward-mode physical: navigation"),
    (["--scenario", "maze_navigation", "--ticks-per-action", "101"], "--ticks-per-action 101: navigation tools"),
    (["--scenario", "maze_navigation", "--nav-time-limit-s", "0"], "--nav-time-limit-s: time_limit_s=0.0"),
])
def test_train_grpo_refuses_what_navigation_cannot_take(tmp_path, flags, message):
    args, config = train_grpo.parse_args(["--output-dir", str(tmp_path / "x"), *flags])
    with pytest.raises(SystemExit) as caught:
        train_grpo.resolve(args, config, [])
    assert message in str(caught.value)
