"""Every option with a fixed set of values lists them in ``--help`` and in the error for a bad value.

The commands run in this process as `test_cli_help` runs them (``runpy``, as ``python -m`` /
``python script.py`` run them).
"""

from __future__ import annotations

import re
import typing

import pytest
from test_cli_help import run_help

CHOICES = {
    "python -m agents.compare": {"--backend": ("embedded", "openenv"),
                                 "--video-view": ("front", "birdeye", "topdown")},
    "python -m agents.study": {"--budget": ("smoke", "default", "full"),
                               "--agents": ("ppo_state", "sac_state", "ppo_image", "sac_image", "ppo_clip",
                                            "sac_clip", "grpo")},
    "python train_sb3.py": {"--env": ("CarlaTrolley-v0", "CarlaNavigation-v0"), "--algo": ("ppo", "sac"),
                            "--action-mode": ("auto", "tools", "control"), "--preset": ("cpu", "vlm-rl"),
                            "--vec-env": ("batched", "dummy", "subproc"),
                            "--policy": ("MlpPolicy", "MultiInputPolicy"),
                            "--reward-mode": ("auto", "rubric", "physical", "vlm-rl"), "--traffic": ("0", "20", "40"),
                            "--observation-mode": ("auto", "state", "dict", "vlm-rl"),
                            "--eval-traffic": ("0", "20", "40"), "--backend": ("embedded", "openenv"),
                            "--clip": ("none", "vit-b-32", "vlm-rl"), "--clip-mode": ("", "replace", "add")},
    "python train_grpo.py": {"--nav_view": ("front", "birdeye"),
                             "--reward_mode": ("auto", "rubric", "physical", "outcome"),
                             "--tiny_tokenizer": ("words", "lines")},
    "carla-gym collect": {"--provider": ("scripted", "openai", "anthropic"),
                          "--teacher": ("oracle", "random", "brake")},
    "python -m carla_gym.reward.calibrate": {"--prompts": ("trolley", "vlm_rl"),
                                             "--preprocess": ("openclip", "vlm_rl"),
                                             "--policies": ("observe", "emergency_stop", "lane_change_left",
                                                            "lane_change_right")},
}
"""Command -> its options with a fixed set of values -> those values, in the order ``--help`` lists them."""

ARGV = {
    "python -m agents.compare": ["-m", "agents.compare"],
    "python -m agents.study": ["-m", "agents.study"],
    "python train_sb3.py": ["train_sb3.py"],
    "python train_grpo.py": ["train_grpo.py"],
    "carla-gym collect": ["-m", "carla_gym.cli", "collect"],
    "python -m carla_gym.reward.calibrate": ["-m", "carla_gym.reward.calibrate"],
}


@pytest.mark.parametrize("name", sorted(CHOICES))
def test_help_lists_the_values_of_every_option_with_fixed_values(monkeypatch, capsys, name):
    code, out, err = run_help([*ARGV[name], "--help"], monkeypatch, capsys)
    assert code == 0, err[-2000:]
    for flag, values in CHOICES[name].items():
        shown = "{" + ",".join(values) + "}"
        assert re.search(rf"^  {re.escape(flag)} {re.escape(shown)}", out, re.MULTILINE), (flag, shown)


@pytest.mark.parametrize(("name", "flag"), [("python -m agents.compare", "--backend"),
                                            ("python -m agents.compare", "--video-view"),
                                            ("python -m carla_gym.reward.calibrate", "--prompts"),
                                            ("python -m carla_gym.reward.calibrate", "--preprocess")])
def test_a_bad_value_is_refused_naming_the_valid_ones(monkeypatch, capsys, name, flag):
    code, _, err = run_help([*ARGV[name], flag, "nope"], monkeypatch, capsys)
    assert code == 2
    valid = ", ".join(f"'?{re.escape(v)}'?" for v in CHOICES[name][flag])  # quoted up to Python 3.11
    assert re.search(rf"error: argument {flag}: invalid choice: 'nope' \(choose from {valid}\)", err), err


def test_the_listed_values_are_the_ones_the_code_accepts():
    from agents import compare
    from carla_gym.envs.spaces import TOOL_ACTIONS
    from carla_gym.reward import calibrate
    from carla_gym.reward.encoder import PREPROCESS_MODES
    from carla_gym.reward.prompts import PROMPT_PRESETS
    from carla_gym.sim.render import VIEWS

    def values(cls, field):
        (annotation,) = [typing.get_type_hints(cls)[field]]
        if typing.get_origin(annotation) is list:
            (annotation,) = typing.get_args(annotation)
        return typing.get_args(annotation)

    assert values(compare.Args, "video_view") == VIEWS
    assert values(calibrate.Args, "prompts") == tuple(sorted(PROMPT_PRESETS))
    assert values(calibrate.Args, "preprocess") == PREPROCESS_MODES
    assert values(calibrate.Args, "policies") == TOOL_ACTIONS
