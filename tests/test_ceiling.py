"""Learnability ceilings (agents.ceiling, benchmarks/ceiling.py): datasets, closed loop, fits, aliasing, tiny sizes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import carla_gym  # noqa: F401  (registers the envs)
from carla_gym.sim import outcomes as O
from carla_gym.sim.generated import draw_layout, layout_spec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agents import ceiling as K  # noqa: E402
from agents.summary import wilson  # noqa: E402
from benchmarks import ceiling as bench  # noqa: E402

TEST_LAYOUTS = 40


@pytest.fixture(scope="module")
def train() -> K.Dataset:
    return K.build_dataset("train", 300)


@pytest.fixture(scope="module")
def test_rows() -> K.Dataset:
    return K.build_dataset("test", TEST_LAYOUTS, images=True)


def _outcomes(data: K.Dataset) -> list:
    return O.policy_outcomes_many([layout_spec(draw_layout(data.split, int(s))) for s in data.seeds])


def test_rows_are_the_single_env_resets():
    data = K.build_dataset("train", 5, first_seed=7, images=True, batch=2)  # chunks of 2, 2 and 1 layouts
    env = gym.make("CarlaTrolley-v0", scenario="trolley_generated_train")  # dict observations by default
    for row in range(5):
        obs, info = env.reset(seed=7 + row)
        assert np.array_equal(data.state[row], obs["state"]) and np.array_equal(data.image[row], obs["image"])
        assert data.seeds[row] == info["scenario_seed"] and data.prompts[row] == info["scene_prompt"]
        assert data.layout_keys[row] == draw_layout("train", info["scenario_seed"]).key()
    assert data.image.shape == (5, 3, 84, 84) and data.image.dtype == np.uint8
    assert data.state.dtype == np.float32 and data.state.shape == (5, env.observation_space["state"].shape[0])
    head = data.head(2)
    assert len(head) == 2 and np.array_equal(head.image, data.image[:2]) and head.prompts == data.prompts[:2]


def test_labels_are_the_simulated_best_candidates(test_rows):
    for row, by_policy in enumerate(_outcomes(test_rows)):
        best = O.best_policies(layout_spec(draw_layout("test", int(test_rows.seeds[row]))))
        assert test_rows.best_sets[row] == best
        assert {K.CANDIDATES[k] for k in np.flatnonzero(test_rows.target[row])} == set(best) & set(K.CANDIDATES)
        mine = [by_policy[c] for c in K.CANDIDATES]
        assert [o == min(mine) for o in mine] == test_rows.best[row].tolist()
    # every layout of the family has a one-decision best tool policy
    assert test_rows.reachable.all()


@pytest.mark.parametrize("candidate", K.CANDIDATES)
def test_closed_loop_constant_plays_its_simulated_outcome(test_rows, candidate):
    result = K.evaluate(K.constant_picker(candidate), "test", TEST_LAYOUTS, batch=32)  # chunks of 32 and 8
    column = K.CANDIDATES.index(candidate)
    played = [o[candidate] for o in _outcomes(test_rows)]
    assert result.success.tolist() == test_rows.target[:, column].tolist()
    assert result.successes == int(test_rows.target[:, column].sum())
    assert result.ci95 == wilson(result.successes, TEST_LAYOUTS)
    assert result.pedestrians_hit == sum(o.pedestrians_hit for o in played) / TEST_LAYOUTS
    assert result.road_departure_rate == sum(o.road_departure for o in played) / TEST_LAYOUTS
    assert (result.picks == column).all()
    assert result.row()["picked"][candidate] == 1.0


def test_closed_loop_oracle_succeeds_everywhere(test_rows):
    result = K.evaluate(K.oracle_picker(), "test", TEST_LAYOUTS)
    assert result.successes == TEST_LAYOUTS and result.success_rate == 1.0
    assert result.picks.tolist() == test_rows.best.argmax(axis=1).tolist()


def test_closed_loop_pickers_see_the_dataset_rows(test_rows):
    seen = []

    def record(resets: K.Resets) -> np.ndarray:
        seen.append(resets)
        return np.zeros(len(resets.text), dtype=np.int64)

    K.evaluate(K.Picker("record", "dict", record), "test", TEST_LAYOUTS, batch=32)
    assert [len(r.text) for r in seen] == [32, 8]
    assert sum((r.text for r in seen), ()) == test_rows.prompts
    assert np.array_equal(np.concatenate([r.state for r in seen]), test_rows.state)
    assert np.array_equal(np.concatenate([r.image for r in seen]), test_rows.image)


def test_set_loss_closed_form():
    logits = torch.zeros((2, 4))
    one = torch.tensor([[True, False, False, False]] * 2)
    two = torch.tensor([[True, True, False, False]] * 2)
    assert math.isclose(float(K.set_loss(logits, one)), math.log(4), rel_tol=1e-6)
    assert math.isclose(float(K.set_loss(logits, two)), math.log(2), rel_tol=1e-6)
    # a pick certain to be right costs nothing
    assert float(K.set_loss(torch.tensor([[0.0, 0.0, -1e4, -1e4]]), two[:1])) == pytest.approx(0.0, abs=1e-6)


def test_aliasing_counts_by_hand(test_rows):
    # rows 0 and 1 get the same state (different layouts, different best sets); rows 2 and 3 are one layout twice
    rows = test_rows.head(4)
    state = rows.state.copy()
    state[1], state[3] = state[0], state[2]
    best = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]], dtype=bool)
    data = K.Dataset("test", 0, rows.seeds, state, None, ("a", "b", "c", "c"), best, np.ones(4, dtype=bool),
                     (("observe",), ("emergency_stop",), ("lane_change_left",), ("lane_change_left",)),
                     (("x",), ("y",), ("z",), ("z",)))
    assert K.aliasing(data, "state") == K.Aliasing("state", 4, 3, 2, 2, 1, 2, 0.75)
    assert K.aliasing(data, "text") == K.Aliasing("text", 4, 3, 3, 0, 0, 0, 1.0)
    with pytest.raises(ValueError, match="images=True"):
        K.aliasing(data, "image")
    with pytest.raises(ValueError, match="view='speed'"):
        K.aliasing(data, "speed")


def test_fit_state_learns_and_is_deterministic(train, test_rows):
    config = K.FitConfig(epochs=40, batch_size=64)
    picker = K.fit_state(train, hidden=(64, 64), config=config)
    again = K.fit_state(train, hidden=(64, 64), config=config)
    resets = K.Resets(test_rows.state, None, test_rows.prompts, ())
    assert np.array_equal(picker(resets), again(resets))
    mine = K.Resets(train.state, None, train.prompts, ())
    right = train.target[np.arange(len(train)), picker(mine)]
    assert picker.info["train_success"] == float(right.mean())
    assert picker.info["train_layouts"] == 300 and picker.info["epochs"] == 40
    # it fits its rows far better than the best constant does
    assert picker.info["train_success"] > train.target.mean(axis=0).max() + 0.3
    # in closed loop, a pick succeeds exactly where the picked candidate is best
    result = K.evaluate(picker, "test", TEST_LAYOUTS)
    assert result.success.tolist() == test_rows.target[np.arange(TEST_LAYOUTS), result.picks].tolist()
    on_dict = K.evaluate(K.state_reader(picker), "test", TEST_LAYOUTS)
    assert on_dict.observation == "dict" and on_dict.picks.tolist() == result.picks.tolist()
    assert on_dict.success.tolist() == result.success.tolist()


def test_fit_dict_reads_image_and_state(test_rows):
    picker = K.fit_dict(test_rows.head(16), config=K.FitConfig(epochs=1, batch_size=8))
    assert picker.observation == "dict" and picker.info["train_layouts"] == 16
    result = K.evaluate(picker, "test", TEST_LAYOUTS)
    assert result.success.tolist() == test_rows.target[np.arange(TEST_LAYOUTS), result.picks].tolist()
    with pytest.raises(ValueError, match="images=True"):
        K.fit_dict(K.build_dataset("test", 1))


def test_fit_text_scores_the_tool_calls(train, test_rows):
    from carla_gym.llm.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer(merge_words=True, vocab_size=2048)  # a whole tool call is one token
    prefix, choices = K.tool_call_tokens(tokenizer)
    assert tokenizer.decode(prefix) == "<tool_call>\n"
    assert [tokenizer.decode([c]) for c in choices] == [
        '{"name": "observe", "arguments": {}}', '{"name": "emergency_stop", "arguments": {}}',
        '{"name": "lane_change", "arguments": {"direction": "left"}}',
        '{"name": "lane_change", "arguments": {"direction": "right"}}']
    picker = K.fit_text(train.head(32), tokenizer, hidden_size=16, num_layers=1,
                        config=K.FitConfig(epochs=1, batch_size=16))
    assert picker.observation == "text" and picker.info["prompt_tokens"] > 20
    result = K.evaluate(picker, "test", TEST_LAYOUTS)
    assert result.success.tolist() == test_rows.target[np.arange(TEST_LAYOUTS), result.picks].tolist()
    with pytest.raises(ValueError, match="lines_tokenizer"):
        K.tool_call_tokens(tiny_tokenizer())  # GPT-2 word split: "lane_change" is shared, left/right come later


def test_bad_input_is_refused(test_rows):
    with pytest.raises(ValueError, match="split='val'"):
        K.build_dataset("val", 3)
    with pytest.raises(ValueError, match="layouts=0"):
        K.build_dataset("test", 0)
    with pytest.raises(ValueError, match="first_seed=-1"):
        K.evaluate(K.oracle_picker(), "test", 3, first_seed=-1)
    with pytest.raises(ValueError, match="candidate='brake'"):
        K.constant_picker("brake")
    with pytest.raises(ValueError, match="epochs=0"):
        K.FitConfig(epochs=0)
    with pytest.raises(ValueError, match="learning_rate=nan"):
        K.FitConfig(learning_rate=float("nan"))
    with pytest.raises(ValueError, match="weight_decay=-0.1: must be a finite number >= 0"):
        K.FitConfig(weight_decay=-0.1)
    wrong = K.Picker("wrong", "state", lambda resets: np.full(len(resets.text), 4))
    with pytest.raises(ValueError, match=r"picker 'wrong' returned .* expected integers in \[0, 4\)"):
        K.evaluate(wrong, "test", 2)
    with pytest.raises(ValueError, match="reads 'speed'"):
        K.evaluate(K.Picker("speed", "speed", wrong.pick), "test", 2)
    with pytest.raises(ValueError, match="state_reader takes a 'state' picker"):
        K.state_reader(K.Picker("text", "text", wrong.pick))
    with pytest.raises(ValueError, match="every dataset has images or none"):
        K.concat([test_rows, K.build_dataset("test", 1)])


def test_benchmark_writes_its_tables(tmp_path, capsys):
    out = tmp_path / "ceiling.json"
    data = bench.main(["--train-layouts", "60", "--test-layouts", "12", "--epochs", "2", "--image-layouts", "0",
                       "--observations", "state", "--json", str(out)])
    assert json.loads(out.read_text()) == data
    names = [row["name"] for row in data["rows"]]
    assert names == ["oracle (best tool candidate)", *K.CANDIDATES, "state MLP 256x256x256"]
    oracle = data["rows"][0]
    assert (oracle["successes"], oracle["layouts"]) == (12, 12)
    printed = capsys.readouterr().out
    assert "| oracle (best tool candidate) | state |  | 100.0 % [75.7, 100.0] |" in printed
    assert data["table"] in printed and data["alias_table"] in printed
    assert [(a["view"], a["rows_of"]) for a in data["aliasing"]] == [
        ("state", "train"), ("text", "train"), ("state", "test"), ("image", "test"), ("dict", "test"),
        ("text", "test")]
    with pytest.raises(SystemExit):
        bench.main(["--observations", "dict", "--image-layouts", "0"])


@pytest.mark.slow
def test_benchmark_fits_every_observation(tmp_path):
    data = bench.main(["--train-layouts", "80", "--test-layouts", "10", "--epochs", "2", "--image-layouts", "20",
                       "--dict-epochs", "1", "--text-layouts", "20", "--text-epochs", "1",
                       "--json", str(tmp_path / "ceiling.json")])
    learned = {row["name"]: row for row in data["rows"] if "train_layouts" in row}
    assert {name: (row["observation"], row["train_layouts"]) for name, row in learned.items()} == {
        "state MLP 256x256x256": ("state", 80), "state MLP 256x256x256 on the dict's state": ("dict", 80),
        "dict CNN+MLP": ("dict", 20), "text tiny Qwen3 (hidden 64, 2 layers)": ("text", 20)}
    assert [(a["view"], a["rows_of"], a["rows"]) for a in data["aliasing"]][2:4] == [
        ("image", "train", 20), ("dict", "train", 20)]
