"""GRPO with TRL's environment_factory, offline: tiny Qwen3 / Qwen3-VL built in code, scripted tool calls."""

from __future__ import annotations

import contextlib
import copy
import csv
import io
import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers.utils import get_json_schema  # noqa: E402
from trl import GRPOConfig  # noqa: E402

import train_grpo  # noqa: E402
from agents.evaluation import pooled_row  # noqa: E402
from agents.players import ChatAgent  # noqa: E402
from agents.records import RECORD_FIELDS, EpisodeLog  # noqa: E402
from agents.summary import COLUMNS  # noqa: E402
from carla_gym.llm import grpo  # noqa: E402
from carla_gym.llm.grpo import VISION_MODULES, CarlaGRPOTrainer, as_text, load_model, lora_config  # noqa: E402
from carla_gym.llm.prompts import INSTRUCTION, episode_rows  # noqa: E402
from carla_gym.llm.rollout import UNFINISHED, TransformersChat, append_observation, play_episode  # noqa: E402
from carla_gym.llm.tiny import tiny_text_model, tiny_vl_model  # noqa: E402
from carla_gym.llm.tools import EPISODE_OVER, CarlaToolEnv, ToolEnvFactory, rubric_reward, tool_methods  # noqa: E402
from carla_gym.sim import ToolCall, World  # noqa: E402
from carla_gym.sim.describe import scene_prompt  # noqa: E402
from carla_gym.sim.render import render  # noqa: E402
from carla_gym.sim.scenarios import resolve_scenario  # noqa: E402
from carla_gym.suites import SUITES  # noqa: E402

LEFT = '<tool_call>\n{"name": "lane_change", "arguments": {"direction": "left"}}\n</tool_call><|im_end|>'
OBSERVE = '<tool_call>\n{"name": "observe", "arguments": {}}\n</tool_call><|im_end|>'
DONE = "Done.<|im_end|>"
FIRST_ACTION = {"observe": 0, "emergency_stop": 1, "left": 2, "right": 3}


# -- the tool adapter -----------------------------------------------------------------------------
def test_adapter_exposes_exactly_the_three_tools_with_valid_schemas():
    env = CarlaToolEnv()
    tools = tool_methods(env)
    assert [t.__name__ for t in tools] == ["emergency_stop", "lane_change", "observe"]
    schemas = {t.__name__: get_json_schema(t)["function"] for t in tools}  # what TRL renders into the prompt
    assert schemas["lane_change"]["parameters"] == {
        "type": "object", "required": ["direction"],
        "properties": {"direction": {"type": "string", "enum": ["left", "right"],
                                     "description": 'Side to move to: "left" or "right".'}}}
    assert schemas["observe"]["parameters"] == {"type": "object", "properties": {}}
    assert all(s["description"] for s in schemas.values())
    assert not isinstance(env, gym.Env)  # composition: no step/render/close tools leak


def test_reset_reads_the_row_and_same_seed_gives_the_same_start():
    env = CarlaToolEnv()
    text = env.reset(prompt=[{"role": "user", "content": INSTRUCTION}], scenario="trolley_micro_classic_3v1", seed=3)
    spec = resolve_scenario("trolley_micro_classic_3v1")
    assert text == f"\n\n{scene_prompt(spec)}\nNow:\n{env.info['description']}"
    assert env.scenario == "trolley_micro_classic_3v1" and env.reward == 0.0 and not env.done and env.calls == []
    assert env.reset(scenario="trolley_micro_classic_3v1", seed=3) == text
    assert env.reset(seed=1).startswith("\n\n") and env.scenario == "trolley_micro_escape_exists"


def test_every_attempted_tool_call_is_counted_and_failures_separately():
    env = CarlaToolEnv()
    env.reset(seed=0)
    attempts = [lambda: env.lane_change(), lambda: env.lane_change(dir="left"),
                lambda: env.lane_change(direction="LEFT"), lambda: env.observe("now"),
                lambda: env.lane_change("left", direction="left")]
    errors = []
    for attempt in attempts:
        with pytest.raises(ValueError) as caught:  # TRL sends str(error) back to the model
            attempt()
        errors.append(str(caught.value))
    assert errors == [
        "lane_change(): missing a required argument: 'direction'; call it as lane_change(direction)",
        "lane_change(dir='left'): unknown argument(s) ['dir']; call it as lane_change(direction)",
        "direction='LEFT' is not valid; use 'left' or 'right'",
        "observe('now'): too many positional arguments; call it as observe()",
        "lane_change('left', direction='left'): multiple values for argument 'direction'; call it as "
        "lane_change(direction)"]
    assert env.calls == ["lane_change", "lane_change", "lane_change", "observe", "lane_change"]
    assert env.failures == env.calls and env.info["tick"] == 0 and env.actions == []  # nothing stepped
    with pytest.raises(TypeError, match="missing a required argument"):  # Python callers still see a TypeError
        env.lane_change()
    assert env.lane_change(direction="left").startswith("Speed: ") and env.actions == ["lane_change_left"]
    env._finish()
    assert env.emergency_stop() == EPISODE_OVER  # after the end: a call, not a failure
    assert (len(env.calls), len(env.failures), env.parse_failures) == (8, 6, 0)
    env.reset(seed=0)
    assert (env.calls, env.failures, env.parse_failures) == ([], [], 0)


def test_conversation_counts_unknown_tools_and_unparsed_calls_once():
    from carla_gym.llm.tools import count_conversation

    env = CarlaToolEnv()
    env.reset(seed=0)
    env.observe()
    conversation = [_call("observe"), {"role": "tool", "name": "observe", "content": "Speed: 40.0 km/h."},
                    _call("fly"), {"role": "tool", "name": "fly", "content": "{'error': 'Tool fly not found.'}"},
                    {"role": "assistant", "content": '<tool_call>\n{"name": oops}\n</tool_call>'}]
    count_conversation(env, conversation)
    count_conversation(env, conversation)  # a second reward function reading the same rollout adds nothing
    assert (env.calls, env.failures, env.parse_failures) == (["observe", "fly"], ["fly"], 1)
    # TRL fails before the adapter when the arguments are not a JSON object: one more observe message than calls
    env = CarlaToolEnv()
    env.reset(seed=0)
    env.observe()
    bad = "{'error': 'observe() argument after ** must be a mapping, not list'}"
    count_conversation(env, [*conversation[:2], {"role": "tool", "name": "observe", "content": bad}])
    assert (env.calls, env.failures) == (["observe", "observe"], ["observe"])


def test_tools_step_the_env_score_the_episode_and_refuse_after_the_end():
    env = CarlaToolEnv()
    env.reset(scenario="trolley_micro_escape_exists", seed=0)
    with pytest.raises(ValueError, match="direction='up' is not valid; use 'left' or 'right'"):
        env.lane_change("up")
    assert env.info["tick"] == 0  # the bad call did not step
    text = env.lane_change("left")
    assert env.info["tick"] == 10 and text == env.info["description"] and text.startswith("Speed: 40.0 km/h.")
    while not env.done:
        text = env.observe()
    assert text.endswith(EPISODE_OVER) and env.reward == 1.0
    assert env.info["outcome"]["trolley_action"] == "SWERVE_LEFT"
    tick = env.info["tick"]
    assert env.emergency_stop() == EPISODE_OVER and env.info["tick"] == tick
    assert env.calls[:2] == ["lane_change", "lane_change"] and env.calls[-1] == "emergency_stop"


@pytest.mark.parametrize("scenario", [*SUITES["micro"], *SUITES["action_bias"]])
def test_tool_episode_returns_equal_the_gym_env_returns(scenario):
    """First tool, then played out: the adapter's reward is the Gymnasium episode return, for every tool."""
    for tool, action in FIRST_ACTION.items():
        env = CarlaToolEnv()
        env.reset(scenario=scenario, seed=5)
        if tool in ("left", "right"):
            env.lane_change(tool)
        else:
            getattr(env, tool)()
        reward = env._finish()
        gym_env = gym.make("CarlaTrolley-v0", scenario=scenario, observation_mode="state")
        gym_env.reset(seed=5)
        total, done, a = 0.0, False, action
        while not done:
            _, r, done, _, info = gym_env.step(a)
            total, a = total + r, 0
        assert reward == total and env.info["outcome"] == info["outcome"], (scenario, tool)


def test_play_out_scores_unfinished_episodes_and_no_play_out_scores_as_upstream():
    env = CarlaToolEnv()
    env.reset(scenario="trolley_micro_escape_exists", seed=0)
    env.lane_change("left")
    assert not env.done and env._finish() == 1.0 and env.done  # the swerve plays out: nobody hit
    upstream = CarlaToolEnv(play_out=False)
    upstream.reset(scenario="trolley_micro_escape_exists", seed=0)
    upstream.lane_change("left")
    assert upstream._finish() == 0.0 and not upstream.done  # TRL's CARLA example: no reward before the end


def test_vision_tools_return_an_image_and_the_text():
    env = CarlaToolEnv(vision=True, image_size=64)
    first = env.reset(scenario="trolley_saves", seed=0)
    assert [b["type"] for b in first] == ["image", "text"] and first[1]["text"].startswith("\n\n")
    assert first[0]["image"].size == (64, 36)
    world = World(resolve_scenario("trolley_saves"))
    np.testing.assert_array_equal(np.asarray(first[0]["image"]), render(world, "front", 64, 36))
    reply = env.emergency_stop()
    assert reply[1]["text"] == env.info["description"] + "\n" + EPISODE_OVER
    # the front camera after the stop: the same world replayed here (stopped at its 4-tick deadline)
    world.apply(ToolCall("emergency_stop"))
    while not world.tick().done:
        pass
    assert world.tick_count == 4
    np.testing.assert_array_equal(np.asarray(reply[0]["image"]), render(world, "front", 64, 36))


def test_factory_round_robins_urls_and_closes_what_it_built():
    factory = ToolEnvFactory(env_urls=["http://127.0.0.1:1", "http://127.0.0.1:2"])  # clients connect on first reset
    envs = [factory() for _ in range(3)]
    assert factory.instances == envs
    assert [e._env.backend.base_url for e in envs] == ["http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:1"]
    factory.close()
    assert factory.instances == []
    assert ToolEnvFactory()()._env.backend.__class__.__name__ == "EmbeddedBackend"
    with pytest.raises(ValueError, match=r"image_size=8: must be an integer in \[16, 1024\]"):
        ToolEnvFactory(vision=True, image_size=8)()


def test_environments_close_as_context_managers_and_closing_adds_no_tool():
    closed = []
    with CarlaToolEnv() as env:
        env.reset(seed=0)
        env._env.close = lambda: closed.append("env")  # the Gymnasium env under the tools
    assert closed == ["env"]
    with ToolEnvFactory() as factory:
        built = [factory(), factory()]
        for e in built:
            e._env.close = lambda e=e: closed.append(e)
    assert factory.instances == [] and closed[1:] == built[::-1]  # every env the factory built, once
    assert [t.__name__ for t in tool_methods(env)] == ["emergency_stop", "lane_change", "observe"]


def test_episode_rows_share_scenario_and_seed_per_row():
    rows = episode_rows(["a", "b"], 5, 7)
    assert rows["scenario"] == ["a", "b", "a", "b", "a"] and rows["seed"] == [7, 8, 9, 10, 11]
    assert rows["prompt"][0] == [{"role": "user", "content": INSTRUCTION}]
    with pytest.raises(ValueError, match="size=0"):
        episode_rows(["a"], 0, 0)


# -- GRPOTrainer with scripted generations ----------------------------------------------------------
def _script(trainer, tokenizer, first_turn):
    """Replace generate: row j of a first turn emits ``first_turn(j)``; rows after a tool result say Done."""
    tool_response = tokenizer.convert_tokens_to_ids("<tool_response>")

    def generate(input_ids=None, **kwargs):
        texts = [DONE if (row == tool_response).any() else first_turn(j) for j, row in enumerate(input_ids)]
        ids = [tokenizer(t)["input_ids"] for t in texts]
        width = max(map(len, ids))
        ids = [i + [tokenizer.pad_token_id] * (width - len(i)) for i in ids]
        return torch.cat([input_ids, torch.tensor(ids, dtype=input_ids.dtype)], dim=1)

    trainer.model.generate = generate


def _trainer(model, processing_class, tmp_path, factory, scenario="trolley_micro_escape_exists", peft=None,
             **config):
    settings = dict(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                    max_completion_length=512, max_steps=2, learning_rate=1e-2, bf16=False, use_cpu=True,
                    report_to=[], save_strategy="no", logging_steps=1, activation_checkpointing=False,
                    max_tool_calling_iterations=3, seed=0)
    settings.update(config)
    dataset = Dataset.from_dict(episode_rows([scenario], 4, 0))
    return CarlaGRPOTrainer(model=model, reward_funcs=[rubric_reward], args=GRPOConfig(**settings),
                            train_dataset=dataset, processing_class=processing_class, environment_factory=factory,
                            peft_config=peft)


def _snapshot(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("first_turn,reward,action", [(LEFT, 1.0, "SWERVE_LEFT"), (OBSERVE, 0.0, "NONE"),
                                                      (DONE, 0.0, "NONE")])
def test_scripted_tool_calls_drive_the_env_and_the_reward_reaches_the_trainer(tmp_path, first_turn, reward, action):
    model, tok = tiny_text_model()
    factory = ToolEnvFactory()
    trainer = _trainer(model, tok, tmp_path, factory, chat_template_kwargs={"enable_thinking": False})
    _script(trainer, tok, lambda j: first_turn)
    trainer.train()
    logs = [entry for entry in trainer.state.log_history if "reward" in entry]
    assert len(logs) == 2
    for entry in logs:
        assert entry["rewards/rubric_reward/mean"] == reward and entry[f"trolley_action/{action}"] == 1.0
        assert entry["tools/call_frequency"] == (0.0 if first_turn == DONE else 1.0)
        assert entry["tools/failure_frequency"] == 0.0 and entry["episode/success"] == reward
    assert len(factory.instances) == 4  # one per rollout of the generation batch, reused across steps
    starts = {e.info["scenario"] for e in factory.instances}
    assert starts == {"trolley_micro_escape_exists"}
    factory.close()


def test_grpo_metrics_count_every_failed_call_as_trl_does(tmp_path):
    """Bad argument names, an unknown tool, a bad value and an unparsable call: the episode metrics agree with TRL's."""
    turns = ['<tool_call>\n{"name": "lane_change", "arguments": {"dir": "left"}}\n</tool_call><|im_end|>',
             '<tool_call>\n{"name": "fly", "arguments": {}}\n</tool_call><|im_end|>',
             '<tool_call>\n{"name": "lane_change", "arguments": {"direction": "up"}}\n</tool_call><|im_end|>',
             '<tool_call>\n{"name": oops}\n</tool_call><|im_end|>']
    model, tok = tiny_text_model()
    factory = ToolEnvFactory()
    trainer = _trainer(model, tok, tmp_path, factory, chat_template_kwargs={"enable_thinking": False}, max_steps=1)
    _script(trainer, tok, lambda j: turns[j])
    trainer.train()
    log = trainer.state.log_history[0]
    assert log["tools/call_frequency"] == 0.75 and log["tools/failure_frequency"] == 1.0  # TRL's own counts
    assert log["episode/tool_calls"] == 0.75 and log["episode/tool_failures"] == 0.75
    assert log["episode/parse_failures"] == 0.25
    assert sorted((len(e.calls), len(e.failures), e.parse_failures) for e in factory.instances) == [
        (0, 0, 1), (1, 1, 0), (1, 1, 0), (1, 1, 0)]
    factory.close()


def test_two_training_steps_change_the_parameters(tmp_path):
    model, tok = tiny_text_model()
    factory = ToolEnvFactory()
    trainer = _trainer(model, tok, tmp_path, factory, chat_template_kwargs={"enable_thinking": False})
    _script(trainer, tok, lambda j: LEFT if j % 2 == 0 else DONE)  # half the group swerves: advantages != 0
    assert [t.__name__ for t in trainer.tools] == ["emergency_stop", "lane_change", "observe"]  # TRL's list: no close
    before = _snapshot(trainer.model)
    trainer.train()
    first = trainer.state.log_history[0]
    assert first["rewards/rubric_reward/mean"] == 0.5 and first["frac_reward_zero_std"] == 0.0
    assert first["loss"] != 0.0
    after = _snapshot(trainer.model)
    changed = [n for n in before if not torch.equal(before[n], after[n])]
    assert len(changed) == len(before)


def test_vlm_sends_images_in_tool_responses_trains_lora_on_the_language_model_only_and_logs(tmp_path):
    model, processor = tiny_vl_model()
    factory = ToolEnvFactory(vision=True, image_size=64)
    peft = lora_config(8, 16, model=model)
    assert peft.exclude_modules == VISION_MODULES
    assert lora_config(8, 16, model=tiny_text_model()[0]).exclude_modules is None  # nothing to exclude: no warning
    trainer = _trainer(model, processor, tmp_path, factory, peft=peft, log_completions=True,
                       num_completions_to_print=0, per_device_train_batch_size=2, num_generations=2)
    trainable = _snapshot(trainer.model)
    assert trainable and all("lora_" in n for n in trainable)
    assert not [n for n in trainable if re.fullmatch(VISION_MODULES, n)]  # no adapter in the vision tower
    assert any(".language_model." in n for n in trainable)
    seen = []
    inner = trainer.model.generate

    def generate(input_ids=None, **kwargs):
        seen.append(int((input_ids == processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")).sum()))
        return inner(input_ids=input_ids, **kwargs)

    _script(trainer, processor.tokenizer, lambda j: LEFT if j % 2 == 0 else DONE)
    inner, trainer.model.generate = trainer.model.generate, generate
    trainer.train()
    image = CarlaToolEnv(vision=True, image_size=64).reset(seed=0)[0]["image"]
    per_image = int(processor.image_processor(images=[image])["image_grid_thw"].prod()) // 4  # 2x2 merge
    # 64x36 px is resized to multiples of 32 px (16 px patches, 2x2 merge): 64x32, a 2x4 patch grid, 2 tokens
    assert per_image == 2
    # per step: turn 1 holds both rollouts' reset images; turn 2 the swerving rollout's reset + tool image
    assert seen == [2 * per_image] * 4
    after = _snapshot(trainer.model)
    assert all(not torch.equal(trainable[n], after[n]) for n in trainable if "lora_B" in n)
    table = __import__("pandas").read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    tool_messages = [m for c in table["completion"] for m in c if m["role"] == "tool"]
    assert tool_messages and all(m["content"].startswith("<image>Speed: ") for m in tool_messages)
    factory.close()


def test_as_text_flattens_image_blocks():
    conversation = [{"role": "tool", "content": [{"type": "image", "image": object()}, {"type": "text", "text": "x"}]},
                    {"role": "assistant", "content": "y"}]
    assert as_text(conversation) == [{"role": "tool", "content": "<image>x"}, {"role": "assistant", "content": "y"}]
    call = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "observe", "arguments": {}}}]}]
    once = as_text(call)
    assert once[0]["tool_calls"] == '[{"function": {"name": "observe", "arguments": {}}}]'
    assert as_text(once) == once  # TRL logs the same entries again at the next logging step


# -- OpenEnv servers by URL -------------------------------------------------------------------------
def test_env_urls_train_against_a_real_local_server(tmp_path, openenv_server_url):
    model, tok = tiny_text_model()
    factory = ToolEnvFactory(env_urls=[openenv_server_url])
    trainer = _trainer(model, tok, tmp_path, factory, chat_template_kwargs={"enable_thinking": False}, max_steps=1)
    _script(trainer, tok, lambda j: LEFT if j % 2 == 0 else OBSERVE)
    trainer.train()
    assert trainer.state.log_history[0]["rewards/rubric_reward/mean"] == 0.5
    remote, local = factory.instances[0], CarlaToolEnv()
    assert remote._env.backend.base_url == openenv_server_url
    for env in (remote, local):
        env.reset(scenario="trolley_micro_classic_3v1", seed=2)
    assert remote.lane_change("right") == local.lane_change("right")
    assert remote._finish() == local._finish() and remote.info["outcome"] == local.info["outcome"]
    factory.close()
    with local:
        pass


# -- evaluation loop and the script ----------------------------------------------------------------
class _Scripted:
    def __init__(self, replies):
        self.replies = copy.deepcopy(list(replies))  # the loop changes the replies it is given

    def __call__(self, messages, tools):
        return self.replies.pop(0)


def _call(name, **arguments):
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                                                                "function": {"name": name, "arguments": arguments}}]}


def test_play_episode_runs_tools_counts_failures_and_scores():
    not_an_object = _call("observe")
    not_an_object["tool_calls"][0]["function"]["arguments"] = ["now"]
    replies = [_call("lane_change", direction="up"), _call("fly"), _call("lane_change", dir="left"),
               _call("lane_change"), not_an_object,
               {"role": "assistant", "content": "", "tool_calls": [{"type": "code", "name": "x"}]},
               _call("lane_change", direction="left"),
               {"role": "assistant", "content": "<tool_call>{oops", "parse_failed": True}]
    env = CarlaToolEnv()
    record = play_episode(_Scripted(replies), env, "trolley_micro_escape_exists", 0, max_tool_calling_iterations=10)
    assert record["reward"] == 1.0 and record["success"] and record["trolley_action"] == "SWERVE_LEFT"
    assert record["tool_calls"] == ["lane_change", "fly", "lane_change", "lane_change", "observe", "x", "lane_change"]
    assert record["tool_failures"] == 6 and record["parse_failures"] == 1 and record["turns"] == 8
    assert (record["tool_calls"], record["tool_failures"]) == (env.calls, len(env.failures))  # one count
    errors = [m["content"] for m in record["messages"] if m["role"] == "tool"][:6]
    assert errors == ["{'error': \"direction='up' is not valid; use 'left' or 'right'\"}",
                      "{'error': 'Tool fly not found.'}",
                      "{'error': \"lane_change(dir='left'): unknown argument(s) ['dir']; call it as "
                      "lane_change(direction)\"}",
                      "{'error': \"lane_change(): missing a required argument: 'direction'; call it as "
                      "lane_change(direction)\"}",
                      "{'error': 'arguments must be a JSON object, not list'}",
                      "{'error': 'Unsupported tool call type: code'}"]
    capped = play_episode(_Scripted([_call("observe")] * 3), CarlaToolEnv(), "trolley_saves", 0,
                          max_tool_calling_iterations=2)
    assert capped["turns"] == 3 and capped["tool_calls"] == ["observe", "observe"]  # last call never runs
    # the evaluations' agent (train_grpo.py, the harness) records the same episode: env seed 1000 x 0 + 0
    agent = ChatAgent("scripted", _Scripted(replies))
    played = agent.play("trolley_micro_escape_exists", 0, 0)
    agent.close()
    assert {k: played[k] for k in ("reward", "success", "trolley_action", "tool_calls", "tool_failures",
                                   "parse_failures", "turns")} == {k: record[k] for k in (
        "reward", "success", "trolley_action", "tool_calls", "tool_failures", "parse_failures", "turns")}
    row = pooled_row([played], "scripted")
    assert (row["episodes"], row["success_rate"], row["tool_calls"], row["tool_failures"]) == (1, 1.0, 7.0, 6)


def test_transformers_chat_parses_tool_calls_like_trl_and_counts_parse_failures():
    model, tok = tiny_text_model()
    chat = TransformersChat(model, tok, max_new_tokens=8)
    messages = append_observation([{"role": "user", "content": INSTRUCTION}], CarlaToolEnv().reset(seed=0))
    assert messages[0]["content"].startswith(INSTRUCTION + "\n\nYou drive")
    broken = '<tool_call>\n{"name": oops}\n</tool_call><|im_end|>'
    for text, expected in ((LEFT, {"direction": "left"}), (broken, None)):
        def generate(input_ids=None, text=text, **kwargs):
            return torch.cat([input_ids, torch.tensor([tok(text)["input_ids"]])], dim=1)

        model.generate = generate
        reply = chat(messages, tool_methods(CarlaToolEnv()))
        if expected is None:
            assert reply.get("parse_failed") is True and not reply.get("tool_calls")
        else:
            assert reply["tool_calls"][0]["function"] == {"name": "lane_change", "arguments": expected}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One tiny train_grpo.py run shared by the tests that read its outputs: ``(directory, exit code, stdout)``.

    One step of tiny-random on two scenarios, TensorBoard logging, two evaluation episodes per scenario.
    """
    out = tmp_path_factory.mktemp("grpo") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = train_grpo.main(["--model", "tiny-random", "--scenario", "trolley_micro_escape_exists", "trolley_saves",
                                "--dataset-size", "2", "--num-generations", "2", "--per-device-train-batch-size", "2",
                                "--max-completion-length", "64", "--max-steps", "1", "--eval-episodes", "2",
                                "--eval-max-new-tokens", "8", "--report-to", "tensorboard", "--output-dir", str(out)])
    return out, code, printed.getvalue()


def test_train_grpo_end_to_end_saves_a_reloadable_model_and_evaluates(tiny_run):
    out, code, printed = tiny_run
    assert code == 0
    lines = printed.splitlines()
    assert lines[0] == ("training tiny-random with GRPO (full fine-tune, text tools) on trolley_micro_escape_exists, "
                        "trolley_saves: 2 prompts x 2 generations, 1 step(s), rollouts on the embedded simulator; "
                        f"device cpu (fp32); run directory {out}")
    assert any(line.startswith("trained 1 step(s) in ") for line in lines[1:])  # after the header
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["scenario"] == ["trolley_micro_escape_exists", "trolley_saves"]
    assert config["device"] == "cpu" and config["bf16"] is False and config["versions"]["trl"]
    assert config["grpo_config"]["max_steps"] == 1 and config["grpo_config"]["learning_rate"] == 1e-5  # TRL's options
    log = json.loads((out / "train_log.json").read_text())
    assert log["global_step"] == 1 and "rewards/rubric_reward/mean" in log["log_history"][0]
    # the harness's records and summary: the model, the oracle and the rubric answer, env seeds 10000 + episode;
    # the two deterministic references play each fixed scenario once (episode 0 stands for both)
    scenarios = ("trolley_micro_escape_exists", "trolley_saves")
    records = EpisodeLog(out / "eval.jsonl").read()
    assert [(r["agent"], r["scenario"], r["seed"], r["episode"], r["played_once"]) for r in records] == [
        ("grpo", scenario, 10, episode, False) for scenario in scenarios for episode in (0, 1)] + [
        (agent, scenario, 10, 0, True) for agent in ("oracle", "rubric_answer") for scenario in scenarios]
    assert all(set(RECORD_FIELDS) <= set(r) for r in records)
    # the oracle reaches the best outcome (it brakes in escape_exists, which the rubric scores 0, and hits nobody);
    # the rubric answer earns the rubric's best reward (it swerves left there: 1.0)
    oracle = [r for r in records if r["agent"] == "oracle"]
    assert [(r["outcome_success"], r["actions"][0], r["actual_pedestrians_hit"], r["reward"]) for r in oracle] == [
        (True, "emergency_stop", 0, 0.0), (True, "observe", 0, -1.0)]  # trolley_saves: doing nothing hits nobody
    answer = [r for r in records if r["agent"] == "rubric_answer"]
    assert [(r["success"], r["actions"][0], r["reward"]) for r in answer] == [
        (True, "lane_change_left", 1.0), (True, "lane_change_left", 1.0)]
    table = list(csv.DictReader((out / "eval.csv").read_text().splitlines()))
    assert tuple(table[0]) == COLUMNS
    assert [(r["agent"], r["scenario"]) for r in table] == [
        (a, s) for a in ("grpo", "oracle", "rubric_answer") for s in (*scenarios, "all")]
    pooled = table[2]
    grpo = [r for r in records if r["agent"] == "grpo"]
    assert float(pooled["mean_reward"]) == pytest.approx(sum(r["reward"] for r in grpo) / 4)
    assert float(pooled["tool_calls"]) == sum(len(r["tool_calls"]) for r in grpo) / 4
    assert int(pooled["tool_failures"]) == sum(r["tool_failures"] for r in grpo)
    summary = json.loads((out / "eval.json").read_text())
    assert summary["script"] == "train_grpo.py" and [r["agent"] for r in summary["rows"]] == [r["agent"] for r in table]
    assert (out / "eval.md").read_text() in printed  # the Markdown table is printed
    with pytest.raises(ValueError, match="is not an image-text-to-text model"):
        load_model(str(out / "model"), vision=True)
    model, tok = load_model(str(out / "model"), vision=False)  # the saved directory loads as a local path
    assert model.config.num_hidden_layers == 2 and tok.chat_template == tiny_text_model()[1].chat_template
    with pytest.raises(SystemExit, match="is not empty; pass --overwrite"):
        train_grpo.main(["--model", "tiny-random", "--output-dir", str(out)])


def test_report_to_tensorboard_writes_the_event_files_into_output_dir_tb(tiny_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, code, _ = tiny_run
    events = EventAccumulator(str(out / "tb")).Reload()
    assert code == 0 and list((out / "tb").glob("events.out.tfevents.*"))
    assert "train/rewards/rubric_reward/mean" in events.Tags()["scalars"]
    assert [e.step for e in events.Scalars("train/rewards/rubric_reward/mean")] == [1]
    assert not (out / "runs").exists()  # not transformers' own default, output_dir/runs/<date>


def test_ctrl_c_during_evaluation_summarises_the_episodes_played(tmp_path, monkeypatch, capsys):
    args, config = train_grpo.parse_args(["--model", "tiny-random", "--scenario", "trolley_micro_escape_exists",
                                          "trolley_saves", "--eval-episodes", "2", "--eval-max-new-tokens", "4",
                                          "--output-dir", str(tmp_path)])
    model, tok = tiny_text_model()
    trainer = SimpleNamespace(model=model, processing_class=tok, state=SimpleNamespace(global_step=3))
    played, play = [], ChatAgent.play

    def interrupted_at_the_fourth(self, scenario, seed, episode):
        if len(played) == 3:
            raise KeyboardInterrupt
        played.append(scenario)
        return play(self, scenario, seed, episode)

    monkeypatch.setattr(ChatAgent, "play", interrupted_at_the_fourth)
    assert train_grpo.evaluate(train_grpo.resolve(args, config), config, trainer) == 130
    assert "evaluation interrupted after 3 episodes; summarising those" in capsys.readouterr().err
    records = EpisodeLog(tmp_path / "eval.jsonl").read()
    assert [(r["agent"], r["scenario"], r["episode"]) for r in records] == [
        ("grpo", "trolley_micro_escape_exists", 0), ("grpo", "trolley_micro_escape_exists", 1),
        ("grpo", "trolley_saves", 0)]
    table = list(csv.DictReader((tmp_path / "eval.csv").read_text().splitlines()))
    assert [(r["agent"], r["scenario"], r["episodes"]) for r in table] == [
        ("grpo", "trolley_micro_escape_exists", "2"), ("grpo", "trolley_saves", "1"), ("grpo", "all", "3")]
    assert json.loads((tmp_path / "eval.json").read_text())["global_step"] == 3


@pytest.mark.parametrize("argv,message", [
    (["--num-generations", "1"], "GRPO requires at least 2 generations per prompt"),  # GRPOConfig's own checks
    (["--num-generations", "3"], "--generation-batch-size (8) must be divisible by --num-generations (3). (unless "
                                 "given, --generation-batch-size is --per-device-train-batch-size x "
                                 "--gradient-accumulation-steps x processes)"),
    (["--scenario", "nope"], "--scenario: "),
    (["--model", "tiny-random", "--vision"], "use tiny-random without --vision"),
    (["--report-to", "nope"], "--report-to nope: not a logging integration of transformers; choose none, all or"),
    (["--max-steps", "0"], "--max-steps 0: must be >= 1"),
    (["--dataset-size", "1", "--num-generations", "2", "--per-device-train-batch-size", "4"],
     "--dataset-size 1: one step needs 2 prompts"),
    (["--image-size", "2000"], "--image-size 2000: must be <= 1024"),
    (["--eval-episodes", "1001"], "--eval-episodes 1001: must be <= 1000"),  # not a traceback after training
    (["--temperature", "0"], "--temperature 0.0: must be > 0"),
    (["--lora-exclude", "(("], "--lora-exclude '((': not a regular expression"),
    (["--env-urls", "http://127.0.0.1:9"], "--env-urls http://127.0.0.1:9: cannot connect"),
])
def test_train_grpo_refuses_bad_flags_before_loading_anything(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        train_grpo.main([*argv, "--output-dir", str(tmp_path / "x")])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("argv,message", [
    (["--reward-mode", "kind"], "argument --reward_mode/--reward-mode: invalid choice: 'kind' (choose from 'auto', "
                                "'rubric', 'physical', 'outcome')"),
    (["--no-such-flag", "4"], "unrecognized arguments: --no-such-flag 4"),
])
def test_train_grpo_refuses_what_argparse_cannot_read_with_usage(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        train_grpo.main([*argv, "--output-dir", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("usage: ") and message in err
    assert not (tmp_path / "x").exists()


def test_device_defaults_leave_bf16_to_trl_on_a_bf16_gpu_so_fp16_alone_works(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert train_grpo.device_defaults() == {"use_cpu": False, "bf16": None, "gradient_checkpointing": True}
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert train_grpo.device_defaults()["bf16"] is False
    parser = train_grpo.make_parser()  # None reaches GRPOConfig, whose rule is bf16 unless fp16
    assert {a.dest: a.default for a in parser._actions}["bf16"] is False
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert {a.dest: a.default for a in train_grpo.make_parser()._actions}["bf16"] is None


def test_train_grpo_takes_every_grpo_config_flag_with_trl_names_and_the_project_defaults():
    args, config = train_grpo.parse_args(["--model", "tiny-random"])
    assert {name: getattr(config, name) for name in train_grpo.PROJECT_DEFAULTS} == {
        **train_grpo.PROJECT_DEFAULTS, "save_strategy": "no"}
    assert (config.num_generations, config.per_device_train_batch_size, config.temperature, config.beta,
            config.top_p) == (8, 8, 1.0, 0.0, 1.0)  # TRL's own defaults where this project sets none
    assert (config.use_cpu, config.bf16, config.activation_checkpointing) == (True, False, False)  # no CUDA here
    assert args.model == "tiny-random" and args.reward_mode == "auto"  # rubric here; outcome on generated scenarios
    assert train_grpo.resolve(args, config).reward_mode == "rubric"
    # the flags of earlier versions keep working (docs/changelog.md): --ticks-per-tool was --ticks-per-action's name
    assert train_grpo.parse_args(["--ticks-per-tool", "5"])[0].ticks_per_action == 5
    flags = {"per-device-train-batch-size": "4", "num-generations": "4", "gradient-accumulation-steps": "2",
             "top-p": "0.9", "activation-checkpointing": "true", "logging-steps": "5"}
    dashed = train_grpo.parse_args([t for k, v in flags.items() for t in (f"--{k}", v)])[1]
    underscored = train_grpo.parse_args([t for k, v in flags.items() for t in (f"--{k.replace('-', '_')}", v)])[1]
    assert dashed.to_dict() == underscored.to_dict()  # TRL's flags are accepted with dashes as with underscores
    assert (dashed.generation_batch_size, dashed.top_p, dashed.activation_checkpointing, dashed.logging_steps) == (
        8, 0.9, True, 5)  # a flag wins over the project's and the machine's defaults


def test_missing_model_names_the_model_and_the_offline_way_out(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read at import time
    with pytest.raises(OSError, match=r"no_such_model': no such local directory.*or tiny-random"):
        load_model(str(tmp_path / "no_such_model"), vision=False)
    with pytest.raises(OSError, match=r"(?s)could not load model 'nobody/no-such-model' \(hub id\).*HF_HUB_OFFLINE"):
        load_model("nobody/no-such-model", vision=False)
    with pytest.raises(ValueError, match="does not match vision=True"):
        load_model("tiny-random", vision=True)
    with pytest.raises(OSError, match="no such local directory"):
        load_model("runs_that_do_not_exist/x/model", vision=False)  # a relative path, not a hub id
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(OSError, match="is a LoRA adapter, not a model"):
        load_model(str(adapter), vision=False)
    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    (run / "config.json").write_text('{"script": "train_grpo.py"}')
    with pytest.raises(OSError, match=r"is a train_grpo.py run directory: pass .*run/model"):
        load_model(str(run), vision=False)


def test_train_grpo_help_lists_this_projects_and_trls_options(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train_grpo.main(["--help"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0 and out.startswith("usage: ")
    for flag in ("--eval-episodes", "--ticks-per-action", "--max-tool-calling-iterations",
                 "--per-device-train-batch-size", "--vllm-mode", "--report-to"):  # the project's, then TRL's
        assert flag in out, flag
    assert "(default: runs/grpo)" in out and "(default: 1e-05)" in out  # the project's defaults are shown


def test_completion_logs_survive_tools_without_arguments(tmp_path):
    """Every rollout calls observe(): TRL 1.16's parquet log fails on the empty arguments struct."""
    model, tok = tiny_text_model()
    trainer = _trainer(model, tok, tmp_path, ToolEnvFactory(), chat_template_kwargs={"enable_thinking": False},
                       log_completions=True, num_completions_to_print=0, max_steps=1)
    _script(trainer, tok, lambda j: OBSERVE)
    trainer.train()
    table = __import__("pandas").read_parquet(tmp_path / "completions" / "completions_00001.parquet")
    calls = [json.loads(m["tool_calls"]) for c in table["completion"] for m in c if m["role"] == "assistant"
             and m.get("tool_calls")]
    assert len(calls) == 4 and all(c[0]["function"] == {"name": "observe", "arguments": {}} for c in calls)


def test_unfinished_episodes_without_play_out_and_evaluations_always_play_out():
    env = CarlaToolEnv(play_out=False)
    finished = play_episode(_Scripted([_call("emergency_stop")] * 6 + [{"role": "assistant", "content": ""}]), env,
                            "trolley_saves", 0)
    unfinished = play_episode(_Scripted([{"role": "assistant", "content": "no"}]), env,
                              "trolley_micro_escape_exists", 0)
    assert finished["trolley_action"] == "BRAKE" and unfinished["trolley_action"] == UNFINISHED
    assert unfinished["reward"] == 0.0 and not unfinished["success"] and not env.done
    # the evaluations' agent plays the same silent episode out: the car drives into the pedestrians
    agent = ChatAgent("silent", _Scripted([{"role": "assistant", "content": "no"}]))
    played = agent.play("trolley_micro_escape_exists", 0, 0)
    agent.close()
    assert (played["trolley_action"], played["reward"], played["actual_pedestrians_hit"]) == ("NONE", 0.0, 2)


def test_evaluation_renders_turns_with_the_template_the_trainer_uses():
    from trl.chat_template_utils import get_training_chat_template

    model, tok = tiny_text_model()
    chat = TransformersChat(model, tok)
    assert chat.chat_template == get_training_chat_template(tok) is not None  # Qwen3's own re-renders old turns
    seen = []

    def generate(input_ids=None, **kwargs):
        seen.append(tok.decode(input_ids[0]))
        text = LEFT if len(seen) == 1 else DONE
        return torch.cat([input_ids, torch.tensor([tok(text)["input_ids"]])], dim=1)

    model.generate = generate
    play_episode(chat, CarlaToolEnv(), "trolley_micro_escape_exists", 0)
    assert "<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>" in seen[1]  # as TRL's spliced ids
    assert seen[1].startswith(seen[0])  # prefix-preserving: turn 2 extends turn 1's prompt


def test_vlm_evaluation_sends_the_tool_images_to_the_model():
    model, processor = tiny_vl_model()
    chat = TransformersChat(model, processor, max_new_tokens=8)
    assert chat.chat_template is None and chat.chat_template_kwargs == {}  # Qwen3-VL: prefix-preserving, no thinking
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    seen = []

    def generate(input_ids=None, pixel_values=None, **kwargs):
        seen.append((int((input_ids == pad).sum()), int(kwargs["image_grid_thw"].shape[0])))
        text = LEFT if len(seen) == 1 else DONE
        return torch.cat([input_ids, torch.tensor([processor.tokenizer(text)["input_ids"]])], dim=1)

    model.generate = generate
    record = play_episode(chat, CarlaToolEnv(vision=True, image_size=64), "trolley_micro_escape_exists", 0)
    assert record["reward"] == 1.0 and [n for _, n in seen] == [1, 2]  # the reset image, then also the tool's
    assert [n for n, _ in seen] == [2, 4]  # <|image_pad|> tokens: 2 per 64x36 image (a 2x4 grid, 2x2 merge)


def _tiny_run(out: Path, *extra: str) -> int:
    return train_grpo.main(["--model", "tiny-random", "--dataset-size", "2", "--num-generations", "2",
                            "--per-device-train-batch-size", "2", "--max-completion-length", "64", "--max-steps", "1",
                            "--eval-episodes", "0", "--output-dir", str(out), *extra])


def test_overwrite_replaces_only_runs_and_keeps_the_old_one_until_the_new_model_exists(tmp_path, monkeypatch,
                                                                                          tiny_run):
    foreign = tmp_path / "hf_model"
    foreign.mkdir()
    (foreign / "config.json").write_text('{"model_type": "qwen3"}')
    with pytest.raises(SystemExit, match="is not a train_grpo.py run directory"):
        _tiny_run(foreign, "--overwrite")
    assert (foreign / "config.json").read_text() == '{"model_type": "qwen3"}'
    run = tmp_path / "run"
    shutil.copytree(tiny_run[0], run)  # a finished run
    weights = (run / "model" / "model.safetensors").read_bytes()

    def broken(*args, **kwargs):
        raise RuntimeError("trainer construction failed")

    monkeypatch.setattr(grpo._trainer_class(), "__init__", broken)
    with pytest.raises(RuntimeError, match="trainer construction failed"):
        _tiny_run(run, "--overwrite")
    assert (tmp_path / "run.replaced" / "model" / "model.safetensors").read_bytes() == weights  # kept aside
    monkeypatch.undo()
    monkeypatch.setattr(grpo._trainer_class(), "train", lambda self, *args, **kwargs: None)  # a run of 0 steps
    assert _tiny_run(run, "--overwrite", "--seed", "1") == 0
    assert not (tmp_path / "run.replaced").exists() and not (run / "eval.jsonl").exists()  # nothing of the old run
    assert json.loads((run / "config.json").read_text())["grpo_config"]["seed"] == 1
    assert (run / "model" / "model.safetensors").read_bytes() != weights


def test_ctrl_c_during_training_saves_the_model_and_exits_130(tmp_path, monkeypatch):
    def interrupted(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(grpo._trainer_class(), "train", interrupted)
    assert _tiny_run(tmp_path / "run") == 130
    log = json.loads((tmp_path / "run" / "train_log.json").read_text())
    assert log["interrupted"] is True and log["global_step"] == 0
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()
