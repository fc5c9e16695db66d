"""Environment cost of GRPO: time per tool episode, and its share of a GRPO training step.

Usage:
    python benchmarks/bench_grpo.py [--episodes 2000] [--nav-episodes 10] [--steps 4] [--json out.json]

Measures:
* environment time per GRPO episode with `carla_gym.llm.CarlaToolEnv` (embedded simulator): reset
  (scene prompt and first description), the tool calls, and the play-out before scoring, over
  the trolley micro-benchmarks and action-bias scenarios. Two tool scripts: the decisive one
  (one tool, then scored: what a trained policy does) and a long one (observe twice, decide,
  then observe until the end: 3-5 tool calls); text tools and VLM tools (256x144 camera image);
* environment time per navigation episode with `carla_gym.llm.NavToolEnv`: upstream's autopilot
  flow (``init_navigation_agent``, ``set_destination`` to the goal, ``follow_route(200)`` until the env ends the
  episode) on maze_navigation, free_roam, free_roam_Town02_v20 and free_roam_Town10HD_Opt_v15_p10, seeds
  0..``--nav-episodes`` - 1, text tools and, on the last, front-camera VLM tools (256x144);
* one GRPO training step with the tiny random Qwen3 (``tiny-random``) on CPU, G = 8 rollouts, real
  sampling with up to 256 new tokens: the share of the step spent inside the environments
  (timed around reset, tools and the reward function). A real 0.6B model only makes generation
  slower, so this share is an upper bound for real training.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from carla_gym.cli_args import HelpFormatter
from carla_gym.io import report_results
from carla_gym.llm.nav_tools import MAX_FOLLOW_STEPS, NavToolEnv
from carla_gym.llm.tools import CarlaToolEnv
from carla_gym.suites import SUITES

SCENARIOS = (*SUITES["micro"], *SUITES["action_bias"])


def decisive(env: CarlaToolEnv) -> None:
    """One tool call (lane change left), then scoring."""
    env.lane_change("left")


def long(env: CarlaToolEnv) -> None:
    """Observe twice, brake, observe until the episode is over (up to 5 calls)."""
    env.observe()
    env.observe()
    env.emergency_stop()
    while not env.done and len(env.calls) < 5:
        env.observe()


def ms_per_episode(script, episodes: int, vision: bool = False) -> float:
    """Median environment time [ms] of reset + ``script`` + play-out + scoring."""
    env = CarlaToolEnv(vision=vision)
    times = []
    for i in range(episodes):
        start = time.perf_counter()
        env.reset(scenario=SCENARIOS[i % len(SCENARIOS)], seed=i)
        script(env)
        env._finish()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


NAV_SCENARIOS = ("maze_navigation", "free_roam", "free_roam_Town02_v20", "free_roam_Town10HD_Opt_v15_p10")
"""Navigation scenarios of the episode-time figures (upstream's maze and free-roam families, growing traffic)."""


def nav_episode(scenario: str, episodes: int, vision: bool = False) -> dict[str, float]:
    """Mean environment time [s], ticks and tool calls of the autopilot flow (module docstring) per episode."""
    times, ticks, calls = [], [], []
    with NavToolEnv(vision=vision) as env:
        for seed in range(episodes):
            start = time.perf_counter()
            env.reset(scenario=scenario, seed=seed)
            env.init_navigation_agent()
            env.set_destination(*env.info["goal"][:2])
            while not env.done:
                env.follow_route(MAX_FOLLOW_STEPS)
            times.append(time.perf_counter() - start)
            ticks.append(env.episode.ticks)
            calls.append(len(env.calls))
    label = f"navigation {scenario}{' VLM' if vision else ''}"
    return {f"{label} [s/episode]": float(np.mean(times)), f"{label} ticks/episode": float(np.mean(ticks)),
            f"{label} tool calls/episode": float(np.mean(calls))}


def training_step_share(steps: int) -> dict[str, float]:
    """Time one tiny GRPO run and the environment's part of it."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import tempfile
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    from datasets import Dataset
    from trl import GRPOConfig

    from carla_gym.llm import tools
    from carla_gym.llm.grpo import CarlaGRPOTrainer, chat_template_kwargs
    from carla_gym.llm.prompts import episode_rows
    from carla_gym.llm.tiny import tiny_text_model

    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
        wrapper.__name__, wrapper.__doc__, wrapper.__wrapped__ = fn.__name__, fn.__doc__, fn
        return wrapper

    originals = {name: getattr(tools.CarlaToolEnv, name) for name in ("reset", "_act", "_finish")}
    for name, fn in originals.items():
        setattr(tools.CarlaToolEnv, name, timed(fn))
    try:
        model, tok = tiny_text_model()
        with tempfile.TemporaryDirectory() as out, tools.ToolEnvFactory() as factory:
            config = GRPOConfig(output_dir=out, per_device_train_batch_size=8, num_generations=8,
                                max_completion_length=256, max_steps=steps, learning_rate=1e-5, bf16=False,
                                use_cpu=True, report_to=[], save_strategy="no", logging_steps=1,
                                activation_checkpointing=False, max_tool_calling_iterations=10,
                                chat_template_kwargs=chat_template_kwargs(tok), disable_tqdm=True)
            trainer = CarlaGRPOTrainer(model=model, reward_funcs=[tools.rubric_reward], args=config,
                                       train_dataset=Dataset.from_dict(episode_rows(SUITES["micro"], 8 * steps, 0)),
                                       processing_class=tok, environment_factory=factory)
            spent[0] = 0.0
            start = time.perf_counter()
            trainer.train()
            total = time.perf_counter() - start
    finally:
        for name, fn in originals.items():
            setattr(tools.CarlaToolEnv, name, fn)
    return {"grpo step, tiny-random Qwen3, G=8, CPU [s]": total / steps,
            "environment time per step [ms]": spent[0] / steps * 1e3,
            "environment share of the step [%]": 100 * spent[0] / total}


def main() -> None:
    """Run the measurements and print them (and write JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=HelpFormatter)
    parser.add_argument("--episodes", type=int, default=2000, help="episodes per episode-time figure")
    parser.add_argument("--nav-episodes", type=int, default=10, help="episodes per navigation scenario")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps for the training-step share")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    from carla_gym.hints import require_extra

    require_extra("grpo")  # a missing extra names its install command
    results = {
        "text episode, one decisive tool call [ms]": ms_per_episode(decisive, args.episodes),
        "text episode, 3-5 tool calls [ms]": ms_per_episode(long, args.episodes),
        "VLM episode (256x144 images), one decisive tool call [ms]": ms_per_episode(decisive, args.episodes // 4,
                                                                                    vision=True),
        "VLM episode (256x144 images), 3-5 tool calls [ms]": ms_per_episode(long, args.episodes // 4, vision=True),
    }
    for scenario in NAV_SCENARIOS:
        results.update(nav_episode(scenario, args.nav_episodes))
    results.update(nav_episode(NAV_SCENARIOS[-1], args.nav_episodes, vision=True))
    results.update(training_step_share(args.steps))
    report_results(results, args.json)


if __name__ == "__main__":
    main()
