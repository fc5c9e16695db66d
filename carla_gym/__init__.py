"""carla_gym: OpenEnv CARLA's trolley and navigation scenarios as Gymnasium environments.

``import carla_gym`` registers ``CarlaTrolley-v0`` and ``CarlaNavigation-v0``;
``gym.make("carla_gym:CarlaTrolley-v0")`` imports and registers them in a fresh process.

* `sim` -- the embedded simulator: trolley worlds, towns, traffic and navigation episodes (numpy, no Gymnasium).
* `envs` -- the Gymnasium environments, their observation, action and reward types, the vector env.
* `backends` -- where `CarlaTrolley-v0` simulates: in-process or on a remote OpenEnv CARLA server.
* `openenv` -- OpenEnv CARLA wire models and client.
* `server` -- the OpenEnv CARLA server on the embedded simulator, its web page and packaging.
* `llm` -- tool-calling language models: TRL GRPO adapters, prompts, rollouts, tiny test models.
* `sb3` -- stable-baselines3 training support for ``train_sb3.py``.
* `reward` -- CLIP reward shaping (VLM-RL).
* `suites` -- named scenario suites for training, evaluation and the comparison.
* `cli` -- the ``carla-gym`` console script.
* `cli_args` -- command lines from dataclasses: one field per ``--flag``.
* `collect` -- ``carla-gym collect``: rollout collection against a server through its MCP tools.
* `hints` -- commands that messages tell the user to run.
* `io` -- atomic, durable result files.
* `samples` -- sample frames of every scenario (``python -m carla_gym.samples``).
"""

from carla_gym.envs import ENV_IDS, CarlaTrolleyEnv, register_envs
from carla_gym.sim import ScenarioSpec, ToolCall, World, resolve_scenario, scenario_names

__version__ = "0.1.0"

register_envs()

__all__ = [
    "ENV_IDS",
    "CarlaTrolleyEnv",
    "ScenarioSpec",
    "ToolCall",
    "World",
    "__version__",
    "register_envs",
    "resolve_scenario",
    "scenario_names",
]
