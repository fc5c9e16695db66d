"""GRPO that learns: warm start transcripts, the outcome reward, batched evaluation, curves."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
import train_grpo  # noqa: E402
from carla_gym.llm.curve import EVAL_COLUMNS, TRAIN_COLUMNS, LearningCurve, summarise  # noqa: E402
from carla_gym.llm.rollout import play_episode, play_episodes  # noqa: E402
from carla_gym.llm.sft import (  # noqa: E402
    CLOSING,
    IGNORE_INDEX,
    TOOL_CHOICES,
    sft_dataset,
    tool_call_message,
    training_template,
    transcript,
    transcript_ids,
)
from carla_gym.llm.tiny import lines_tokenizer, tiny_text_model, tiny_tokenizer  # noqa: E402
from carla_gym.llm.tools import CarlaToolEnv, outcome_reward, tool_methods  # noqa: E402
from carla_gym.sim.outcomes import best_policies, policy_outcomes  # noqa: E402
from carla_gym.sim.scenarios import resolve_scenario  # noqa: E402

TRAIN, TEST = "trolley_generated_train", "trolley_generated_test"
THINKING_OFF = {"enable_thinking": False}
CHOICE_OF = {"observe": 0, "emergency_stop": 1, "lane_change_left": 2, "lane_change_right": 3}


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _spec(env: CarlaToolEnv):
    return resolve_scenario(env.info["scenario"], seed=env.info["scenario_seed"])


# -- warm start transcripts -------------------------------------------------------------------------
def test_transcript_plays_the_tool_and_renders_as_the_grpo_rollout_of_that_choice(tok):
    with CarlaToolEnv() as env:
        messages = transcript(env, TRAIN, 3, 2)
        tools = tool_methods(env)
        assert env.actions == ["lane_change_left"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[1] == tool_call_message("lane_change", {"direction": "left"})
    assert messages[2]["name"] == "lane_change" and messages[2]["content"].startswith("Speed: ")
    assert messages[3] == {"role": "assistant", "content": CLOSING}
    template = training_template(tok)
    ids, labels = transcript_ids(tok, messages, tools, template, THINKING_OFF)
    assert len(ids) == len(labels)
    # the ids are the whole rendered conversation, up to the last end-of-turn token
    full = tok.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=False, **THINKING_OFF)
    assert tok.decode(ids) + "\n" == full
    # they start with exactly the ids GRPOTrainer generates from
    prompt = tok.apply_chat_template(messages[:1], tools=tools, chat_template=template, add_generation_prompt=True,
                                     tokenize=True, return_dict=True, **THINKING_OFF)["input_ids"]
    assert ids[:len(prompt)] == list(prompt) and set(labels[:len(prompt)]) == {IGNORE_INDEX}
    # only the model's two turns are trained
    trained = tok.decode([i for i, label in zip(ids, labels, strict=True) if label != IGNORE_INDEX])
    assert trained == ('<tool_call>\n{"name": "lane_change", "arguments": {"direction": "left"}}\n</tool_call>'
                       f"<|im_end|>{CLOSING}<|im_end|>")
    assert [label for label in labels if label != IGNORE_INDEX] == [i for i, label in zip(ids, labels, strict=True)
                                                                    if label != IGNORE_INDEX]
    with pytest.raises(ValueError, match=r"choice=4: must be in \[0, 4\)"):
        transcript(CarlaToolEnv(), TRAIN, 3, 4)


def test_sft_dataset_is_seeded_and_draws_each_tool_uniformly(tok):
    rows = sft_dataset(tok, [TRAIN], 12, 7, chat_template_kwargs=THINKING_OFF)
    again = sft_dataset(tok, [TRAIN], 12, 7, chat_template_kwargs=THINKING_OFF)
    assert rows == again
    choices = np.random.default_rng(7).integers(4, size=12).tolist()
    names = ["observe", "emergency_stop", "lane_change_left", "lane_change_right"]
    assert rows["tool"] == [names[c] for c in choices]  # the drawn tool, whatever the scene
    assert sorted(set(rows["tool"])) == sorted(names)
    assert len(TOOL_CHOICES) == 4
    with pytest.raises(ValueError, match="size=0"):
        sft_dataset(tok, [TRAIN], 0, 7)


def test_lines_tokenizer_writes_a_tool_call_as_one_token_and_decodes_every_text_back():
    tok = lines_tokenizer(["trolley_micro_escape_exists"], episodes=8)
    call = '{"name": "lane_change", "arguments": {"direction": "left"}}'
    assert len(tok(call, add_special_tokens=False)["input_ids"]) == 1
    with CarlaToolEnv() as env:
        messages = transcript(env, TRAIN, 5, 1)  # a scene never seen in training the tokenizer
        tools = tool_methods(env)
    text = tok.apply_chat_template(messages, tools=tools, chat_template=training_template(tok), tokenize=False,
                                   **THINKING_OFF)
    assert tok.decode(tok(text)["input_ids"]) == text
    ids, _ = transcript_ids(tok, messages, tools, training_template(tok), THINKING_OFF)  # prefixes hold
    assert tok.decode(ids) + "\n" == text


# -- the outcome reward ---------------------------------------------------------------------------
def test_outcome_reward_pays_reaching_the_simulated_best_outcome():
    with CarlaToolEnv(reward_mode="outcome") as env:
        for seed in range(6):
            env.reset(scenario=TEST, seed=seed)
            spec = _spec(env)
            outcomes, best = policy_outcomes(spec), best_policies(spec)
            for policy in ("observe", "emergency_stop", "lane_change_left", "lane_change_right"):
                env.reset(scenario=TEST, seed=seed)
                name, arguments = TOOL_CHOICES[CHOICE_OF[policy]]
                getattr(env, name)(**arguments)
                [reward] = outcome_reward([env])
                assert reward == float(policy in best)
                assert env.info["outcome"]["actual_pedestrians_hit"] == outcomes[policy].pedestrians_hit
    with pytest.raises(ValueError, match=r"reward_mode='best'.*'outcome'"):
        CarlaToolEnv(reward_mode="best")


def test_env_steps_count_every_env_step_of_a_rollout_play_out_included():
    """One lane_change_left, then the play-out: env_steps_total is the gym env's step count, decisions_total is 1."""
    import gymnasium as gym

    reference = gym.make("CarlaTrolley-v0", scenario=TRAIN, observation_mode="state")
    _, info = reference.reset(seed=5)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, info = reference.step(CHOICE_OF["lane_change_left"] if steps == 0 else 0)
        steps, done = steps + 1, terminated or truncated
    reference.close()
    assert steps > 1  # the play-out adds steps beyond the one tool call
    with CarlaToolEnv(reward_mode="outcome") as env:
        for episode in (1, 2):
            env.reset(scenario=TRAIN, seed=5)
            env.lane_change(direction="left")
            outcome_reward([env])
            assert (env.env_steps_total, env.decisions_total) == (episode * steps, episode)
        assert env.info["outcome"] == info["outcome"]


# -- batched evaluation -----------------------------------------------------------------------------
class _FirstCalls:
    """Batch chat policy: episode i first calls ``TOOL_CHOICES[firsts[i]]``, and stops after a tool result."""

    def __init__(self, firsts):
        self.firsts = list(firsts)
        self.batches = 0

    def batch(self, conversations, tools):
        self.batches += 1
        return [{"role": "assistant", "content": CLOSING} if c[-1]["role"] == "tool"
                else tool_call_message(*TOOL_CHOICES[self.firsts[i]]) for i, c in enumerate(conversations)]


def test_play_episodes_plays_each_seed_as_play_episode_does():
    firsts, seeds = [0, 1, 2, 3, 2], [10000, 10001, 10002, 10003, 10004]
    envs = [CarlaToolEnv(reward_mode="outcome") for _ in range(6)]
    chat = _FirstCalls(firsts)
    records = play_episodes(chat, envs, TEST, seeds, 1)
    assert chat.batches == 2  # one batch per turn
    names = ["observe", "emergency_stop", "lane_change_left", "lane_change_right"]
    for first, record, seed in zip(firsts, records, seeds, strict=True):
        one = _FirstCalls([first])
        alone = play_episode(lambda messages, tools, one=one: one.batch([messages], tools)[0],
                             CarlaToolEnv(reward_mode="outcome"), TEST, seed, 1)
        assert (record["reward"], record["tool_calls"], record["turns"]) == (alone["reward"], alone["tool_calls"], 2)
        assert record["outcome"]["actual_pedestrians_hit"] == alone["actual_pedestrians_hit"]
        assert record["actions"] == [names[first]] and record["seed"] == seed
    with pytest.raises(ValueError, match="2 environments for 5 seeds"):
        play_episodes(chat, envs[:2], TEST, seeds, 1)
    for env in envs:
        env._close()


def test_summarise_means_over_records():
    def record(success, hits, departed, actions, reward):
        return {"reward": reward, "actions": actions, "outcome": {
            "outcome_success": success, "success": not success, "actual_pedestrians_hit": hits,
            "road_departure": departed}}

    rows = summarise([record(True, 0, True, ["observe"], 1.0), record(False, 3, False, [], 0.0),
                      record(True, 0, False, ["emergency_stop"], 1.0), record(True, 1, False, ["observe"], 1.0)])
    assert rows == {"success_rate": 0.75, "mean_reward": 0.75, "pedestrians_hit": 1.0, "road_departure_rate": 0.25,
                    "rubric_success": 0.25, "no_tool_call_rate": 0.25}


def test_learning_curve_writes_an_evaluation_row_before_training_every_n_steps_and_at_the_end(tmp_path):
    class Model:
        training = True

        def eval(self):
            self.training = False

        def train(self, mode=True):
            self.training = mode

    counts = iter([(0, 0), (70, 12), (180, 30), (250, 41)])  # read at step 0, step 2, the log of step 3 and the end
    printed = []
    curve = LearningCurve(tmp_path, [TEST], [10000, 10001, 10002], 2, lambda: next(counts),
                          lambda model: _FirstCalls([1] * 3),
                          lambda: CarlaToolEnv(reward_mode="outcome"), 1, log=printed.append)
    model = Model()
    state = SimpleNamespace(global_step=0, is_world_process_zero=True)
    curve.on_train_begin(None, state, None, model=model)
    for step in (1, 2, 3):
        state.global_step = step
        curve.on_step_end(None, state, None, model=model)
    curve.on_log(None, state, None, logs={"reward": 0.5, "episode/outcome_success": 0.5, "episode/tool_calls": 1.0})
    curve.on_train_end(None, state, None, model=model)
    assert model.training  # restored after each evaluation
    with (tmp_path / "eval_curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == EVAL_COLUMNS
    assert [(int(r["step"]), int(r["env_steps"]), int(r["tool_calls"])) for r in rows] == [(0, 0, 0), (2, 70, 12),
                                                                                            (3, 250, 41)]
    with CarlaToolEnv(reward_mode="outcome") as env:
        expected = []
        for seed in (10000, 10001, 10002):
            env.reset(scenario=TEST, seed=seed)
            expected.append("emergency_stop" in best_policies(_spec(env)))
    assert {float(r["success_rate"]) for r in rows} == {sum(expected) / 3}
    assert [r["step"] for r in printed] == [0, 2, 3]
    with (tmp_path / "train_curve.csv").open() as f:
        train = list(csv.DictReader(f))
    assert tuple(train[0]) == TRAIN_COLUMNS
    assert (train[0]["step"], train[0]["env_steps"], train[0]["tool_calls"]) == ("3", "180", "30")
    assert (float(train[0]["reward"]), float(train[0]["tool_calls_per_rollout"])) == (0.5, 1.0)
    with pytest.raises(ValueError, match="every=0"):
        LearningCurve(tmp_path, [TEST], [10000], 0, int, int, int, 1)
    with pytest.raises(ValueError, match="seeds=\\[\\]"):
        LearningCurve(tmp_path, [TEST], [], 1, int, int, int, 1)


# -- the script ---------------------------------------------------------------------------------------
def _run(out: Path, *extra: str) -> tuple[int, str]:
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = train_grpo.main(["--model", "tiny-random", "--scenario", TRAIN, "--dataset-size", "2",
                                "--num-generations", "2", "--per-device-train-batch-size", "2",
                                "--max-completion-length", "32", "--max-tool-calling-iterations", "1",
                                "--eval-max-new-tokens", "8", "--output-dir", str(out), *extra])
    return code, printed.getvalue()


def test_train_grpo_warm_start_then_grpo_on_the_train_split_with_a_held_out_curve(tmp_path):
    out = tmp_path / "run"
    code, printed = _run(out, "--sft-steps", "2", "--sft-examples", "4", "--max-steps", "1", "--eval-every", "1",
                         "--eval-curve-episodes", "2", "--eval-episodes", "0", "--beta", "0.1")
    assert code == 0
    # --beta > 0: TRL's KL reference is the warm-started model, saved for it (a model built in code has no path)
    assert json.loads((out / "reference" / "config.json").read_text())["hidden_size"] == 32
    config = json.loads((out / "config.json").read_text())
    assert config["args"]["reward_mode"] == "outcome"  # auto: every training scenario is generated
    assert config["args"]["eval_scenario"] == [TEST] and config["processes"] == 1
    sft = json.loads((out / "sft_config.json").read_text())
    assert (sft["steps"], sft["examples"], sft["first_seed"], sum(sft["tools"].values())) == (2, 4, 10**6, 4)
    assert [row["step"] for row in json.loads((out / "sft_log.json").read_text())["log_history"]
            if "loss" in row] == [1, 2]
    with (out / "eval_curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [0, 1] and int(rows[0]["env_steps"]) == 0  # before, then each step
    # the step's 2 rollouts: at most one tool call each, every rollout played out to its end (>= 1 env step)
    assert 2 <= int(rows[1]["env_steps"]) and 0 <= int(rows[1]["tool_calls"]) <= 2
    assert all(0.0 <= float(r["success_rate"]) <= 1.0 for r in rows)
    assert printed.count("eval step ") == 2
    log = json.loads((out / "train_log.json").read_text())["log_history"]
    assert "rewards/outcome_reward/mean" in log[0] and "episode/outcome_success" in log[0]
    with (out / "train_curve.csv").open() as f:
        assert [int(r["step"]) for r in csv.DictReader(f)] == [1]


def test_ctrl_c_during_the_warm_start_exits_130_with_the_command_to_start_again(tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_grpo, "warm_start_run", interrupted)
    out = tmp_path / "run"
    code, printed = _run(out, "--sft-steps", "2", "--max-steps", "1")
    assert code == 130 and "trained" not in printed and not (out / "model").exists()
    message = capsys.readouterr().err
    assert "interrupted during the warm start; no model saved" in message
    assert message.rstrip().endswith(f"--output-dir {out} --sft-steps 2 --max-steps 1 --overwrite")


@pytest.mark.parametrize(("argv", "message"), [
    (["--sft-steps", "2", "--vision", "--model", "tiny-random-vl"], "--sft-steps: .* leave out --vision"),
    (["--eval-every", "-1"], "--eval-every -1"),
    (["--tiny-layers", "3", "--model", "Qwen/Qwen3-0.6B"], "shape --model tiny-random only"),
    (["--tiny-hidden-size", "30"], "--tiny-hidden-size 30: must be a multiple of 4"),
    (["--eval-scenario", "nowhere"], "--eval-scenario: "),
    (["--sft-learning-rate", "2"], r"--sft-learning-rate 2.0: must be in \(0, 1\)"),
    (["--eval-curve-episodes", "1001"], "--eval-curve-episodes 1001: must be <= 1000"),
    (["--scenario", "action_bias", "--reward-mode", "outcome"],
     "--reward-mode outcome: pays 1.0 for every choice on the action_bias scenario.s. trolley_saves, .*bias_3v1.*"
     "use --reward-mode rubric"),
    (["--scenario", "trolley_generated_train", "bias_3v1", "--reward-mode", "outcome"], "scenario.s. bias_3v1 "),
])
def test_train_grpo_refuses_bad_learning_flags_before_loading_anything(tmp_path, argv, message):
    with pytest.raises(SystemExit, match=message):
        train_grpo.main(["--model", "tiny-random", "--output-dir", str(tmp_path / "x"), *argv])


def test_tiny_text_model_sizes():
    model, tok = tiny_text_model(hidden_size=48, num_layers=3)
    assert (model.config.hidden_size, model.config.num_hidden_layers, model.config.head_dim) == (48, 3, 12)
    assert model.config.intermediate_size == 96 and model.config.vocab_size == len(tok)
    with pytest.raises(ValueError, match="hidden_size=30"):
        tiny_text_model(hidden_size=30)


@pytest.mark.slow
def test_accelerate_launch_two_cpu_processes_split_the_rollouts_and_evaluate_once(tmp_path):
    out = tmp_path / "run"
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    command = [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision",
               "no", "--dynamo_backend", "no", "train_grpo.py", "--model", "tiny-random", "--scenario", TRAIN,
               "--dataset-size", "4", "--num-generations", "2", "--per-device-train-batch-size", "2",
               "--max-completion-length", "32", "--max-tool-calling-iterations", "1", "--max-steps", "2",
               "--sft-steps", "1", "--sft-examples", "4", "--eval-every", "1", "--eval-curve-episodes", "2",
               "--eval-episodes", "1", "--eval-max-new-tokens", "8", "--output-dir", str(out)]
    done = subprocess.run(command, cwd=Path(train_grpo.__file__).parent, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["processes"] == 2
    assert done.stdout.count("eval step ") == 3  # the main process evaluates, once per due step
    with (out / "eval_curve.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [0, 1, 2]
    assert (out / "eval.csv").exists() and (out / "model" / "config.json").exists()


ENV_STEPS_SCRIPT = """
import os
import sys
from pathlib import Path

import torch.distributed as dist
from carla_gym.llm.curve import sum_over_processes

alone = sum_over_processes([7, 1])
dist.init_process_group("gloo")
rank = dist.get_rank()
total = sum_over_processes([10 + 5 * rank, 2 + rank])
Path(sys.argv[1], f"rank{os.environ['RANK']}.txt").write_text(f"alone {alone}, rank {rank} sum {total}")
dist.destroy_process_group()
"""


def test_env_steps_of_the_curve_go_through_the_all_reduce_in_an_initialised_process_group(tmp_path):
    """The fast twin of the test below: the all-reduce branch in this process, a gloo group of one."""
    import torch.distributed as dist

    from carla_gym.llm.curve import sum_over_processes

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert dist.is_initialized() and sum_over_processes([10, 2]) == (10, 2)
    finally:
        dist.destroy_process_group()
    assert not dist.is_initialized()


@pytest.mark.slow  # three fresh interpreters (torch.distributed.run); fast twin: the gloo group of one above
def test_env_steps_of_the_curve_sum_every_process_decisions(tmp_path):
    """The accelerate test's distributed part on its own: two gloo processes, as accelerate starts them."""
    script = tmp_path / "sum.py"
    script.write_text(ENV_STEPS_SCRIPT)
    root = str(Path(train_grpo.__file__).parent)
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(script), str(tmp_path)],
                          cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": root})
    assert done.returncode == 0, done.stderr[:4000]
    assert [(tmp_path / f"rank{r}.txt").read_text() for r in (0, 1)] == [
        "alone (7, 1), rank 0 sum (25, 5)", "alone (7, 1), rank 1 sum (25, 5)"]
