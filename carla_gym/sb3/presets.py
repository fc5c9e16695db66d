"""Hyperparameter presets, with stable-baselines3's keyword names verbatim.

``cpu``: settings that learn the trolley scenarios quickly on a small CPU (this project's
measurements, docs/performance.md). ``vlm-rl``: VLM-RL's published settings (VLM-RL's ``config.py``
``algorithm_params``), including its quadratic
learning-rate decay.
"""

from __future__ import annotations

import dataclasses

PRESETS = ("cpu", "vlm-rl")
"""Preset names."""
ALGOS = ("ppo", "sac")
"""Algorithms."""


@dataclasses.dataclass(frozen=True)
class QuadraticSchedule:
    """VLM-RL's learning-rate schedule: end + (init - end) * progress_remaining**2.

    A class rather than a closure so that saved models can be loaded again (SB3 pickles it).
    """

    init: float
    end: float

    def __call__(self, progress_remaining: float) -> float:
        """Learning rate at ``progress_remaining`` (1 at the start, 0 at the end)."""
        return self.end + (self.init - self.end) * progress_remaining**2


NAV_CPU_PPO = dict(n_steps=512, batch_size=256, learning_rate=3e-4, ent_coef=0.0, gamma=0.99,
                   policy_kwargs=dict(log_std_init=-1.0, net_arch=[128, 128]))
"""The ``cpu`` preset's PPO on `CarlaNavigation-v0` (this project's choice, docs/performance.md "CarlaNavigation-v0
learning (CPU)"): longer rollouts and larger batches than the trolley's (episodes last hundreds of 0.05 s
steps), no entropy bonus and a narrower initial action noise (std e^-1 = 0.37: full-width noise on steer
leaves the lane within a second)."""


GENERATED_CPU_PPO = dict(n_steps=64, batch_size=256, n_epochs=10, learning_rate=1e-3, ent_coef=0.003, gamma=1.0,
                         gae_lambda=1.0, policy_kwargs=dict(net_arch=[256, 256]))
"""The ``cpu`` preset's PPO on the generated trolley family (this project's measurements, docs/training/sb3.md
"Learning the generated family", and the best trial of the Optuna study in benchmarks/tuning/ppo_MlpPolicy.jsonl):
an episode is one decision that matters followed by a few that should leave the car alone, scored at the end, so
no discount and plain Monte Carlo returns (``gamma`` = ``gae_lambda`` = 1), a wider network and larger batches
than the single-scenario recipe, and a small entropy bonus."""


def hyperparameters(preset: str, algo: str, extractor: bool = False, navigation: bool = False,
                    generated: bool = False) -> dict:
    """Keyword arguments of the SB3 algorithm for a preset.

    Args:
        preset: One of `PRESETS`.
        algo: One of `ALGOS`.
        extractor: With ``vlm-rl``: VLM-RL's feature extractor for Dict observations
            (`carla_gym.sb3.extractor.VLMRLExtractor` as ``policy_kwargs["features_extractor_class"]``;
            ``train_sb3.py`` asks for it on `CarlaNavigation-v0`'s Dict observations). Ignored by ``cpu``.
        navigation: For `CarlaNavigation-v0`: the ``cpu`` preset's PPO is `NAV_CPU_PPO`.
        generated: Every training scenario is of the generated trolley family: the ``cpu`` preset's PPO is
            `GENERATED_CPU_PPO`.

    Raises:
        ValueError: Unknown preset or algorithm.

    Examples:
        >>> hyperparameters("vlm-rl", "sac", extractor=True)["policy_kwargs"]["features_extractor_class"].__name__
        'VLMRLExtractor'
    """
    if preset not in PRESETS:
        raise ValueError(f"preset={preset!r}: choose one of {list(PRESETS)}")
    if algo not in ALGOS:
        raise ValueError(f"algo={algo!r}: choose one of {list(ALGOS)}")
    if preset == "cpu":
        if algo == "ppo" and navigation:
            return {**NAV_CPU_PPO, "policy_kwargs": dict(NAV_CPU_PPO["policy_kwargs"])}
        if algo == "ppo" and generated:
            return {**GENERATED_CPU_PPO, "policy_kwargs": dict(GENERATED_CPU_PPO["policy_kwargs"])}
        if algo == "ppo":
            return dict(n_steps=128, batch_size=64, learning_rate=3e-4, ent_coef=0.01, gamma=0.99)
        return dict(buffer_size=50_000, learning_starts=500, batch_size=256, train_freq=4, gradient_steps=2,
                    learning_rate=1e-3, gamma=0.98, tau=0.005)
    if algo == "ppo":  # VLM-RL "PPO"
        hyper = dict(learning_rate=QuadraticSchedule(1e-4, 1e-6), n_steps=1024, batch_size=64, n_epochs=10,
                     gamma=0.98, gae_lambda=0.95, clip_range=0.2, ent_coef=0.05,
                     policy_kwargs=dict(net_arch=dict(pi=[500, 300], vf=[500, 300])))
    else:
        hyper = dict(learning_rate=QuadraticSchedule(1e-4, 5e-7), buffer_size=100_000, batch_size=256,  # "SAC_CLIP"
                     gamma=0.98, tau=0.02, train_freq=64, gradient_steps=64, learning_starts=10_000, ent_coef="auto",
                     use_sde=True, policy_kwargs=dict(log_std_init=-3, net_arch=[500, 300]))
    if extractor:  # VLM-RL CustomMultiInputExtractor(features_dim=256)
        from carla_gym.sb3.extractor import IMAGE_FEATURES, VLMRLExtractor

        hyper["policy_kwargs"] |= dict(features_extractor_class=VLMRLExtractor,
                                       features_extractor_kwargs=dict(features_dim=IMAGE_FEATURES))
    return hyper


DEFAULT_TIMESTEPS = {("cpu", "ppo"): 20_480, ("cpu", "sac"): 10_000, ("vlm-rl", "ppo"): 1_000_000,
                     ("vlm-rl", "sac"): 1_000_000}
"""Default training length per (preset, algorithm) [env steps]; VLM-RL trains 1M steps."""
NAV_DEFAULT_TIMESTEPS = {("cpu", "ppo"): 100_000}
"""`CarlaNavigation-v0` defaults that differ from `DEFAULT_TIMESTEPS` (the CPU recipe's length, docs/performance.md)."""
GENERATED_DEFAULT_TIMESTEPS = {("cpu", "ppo"): 81_920}
"""Defaults on the generated trolley family that differ from `DEFAULT_TIMESTEPS`: `GENERATED_CPU_PPO` for about
two minutes on 2 CPU cores with 16 batched envs (80 rollouts of 1,024 steps; docs/training/sb3.md)."""


def replay_buffer_bytes(buffer_size: int, observation_nbytes: int, action_nbytes: int = 8) -> int:
    """Memory of an SB3 (Dict)ReplayBuffer: observations and next observations, plus actions etc.

    Examples:
        >>> round(replay_buffer_bytes(50_000, 3 * 84 * 84 + 32 * 4) / 2**30, 2)  # 84x84 image + state [GiB]
        1.98
    """
    return buffer_size * (2 * observation_nbytes + action_nbytes + 4 * 3)


SB3_DEFAULTS = {("ppo", "n_steps"): 2048, ("sac", "train_freq"): 1}
"""stable-baselines3's defaults of the settings that set the rollout length (``PPO``/``SAC`` signatures)."""


def rollout_steps(algo: str, n_envs: int, hyper: dict) -> int | None:
    """Env steps per rollout: SB3 trains in whole rollouts, so a run's length is a multiple of this.

    PPO collects ``n_steps`` steps of every env per update; SAC ``train_freq`` steps of every env
    (None when ``train_freq`` counts episodes, whose length varies).

    Examples:
        >>> rollout_steps("ppo", 4, {"n_steps": 128}), rollout_steps("sac", 2, {"train_freq": 4})
        (512, 8)
        >>> rollout_steps("sac", 2, {"train_freq": (1, "episode")}) is None
        True
    """
    if algo == "ppo":
        return hyper.get("n_steps", SB3_DEFAULTS[("ppo", "n_steps")]) * n_envs
    freq = hyper.get("train_freq", SB3_DEFAULTS[("sac", "train_freq")])
    if isinstance(freq, tuple | list):
        count, unit = freq
        return count * n_envs if unit == "step" else None
    return freq * n_envs


def trained_timesteps(total: int, unit: int | None) -> int:
    """The env steps SB3 trains when asked for ``total``: ``total`` rounded up to whole rollouts of ``unit``.

    Examples:
        >>> trained_timesteps(256, 512), trained_timesteps(1024, 512), trained_timesteps(300, None)
        (512, 1024, 300)
    """
    return total if unit is None else -(-total // unit) * unit


def encode_hyperparameters(hyper: dict) -> dict:
    """JSON-ready hyperparameters with their types kept (config.json); `decode_hyperparameters` inverts it.

    int, float, bool, None, str, lists and dicts stay as they are; a tuple becomes
    ``{"__tuple__": [...]}``, a `QuadraticSchedule` ``{"__quadratic_schedule__": [init, end]}`` and a
    class of this package (e.g. a feature extractor) ``{"__class__": "module:name"}``.

    Raises:
        ValueError: A value of another type (named, with its hyperparameter), e.g. a set.

    Examples:
        >>> encode_hyperparameters({"n_steps": 128, "train_freq": (1, "episode")})
        {'n_steps': 128, 'train_freq': {'__tuple__': [1, 'episode']}}
        >>> encode_hyperparameters({"learning_rate": QuadraticSchedule(1e-4, 1e-6)})
        {'learning_rate': {'__quadratic_schedule__': [0.0001, 1e-06]}}
    """
    def encode(name: str, value):
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, QuadraticSchedule):
            return {"__quadratic_schedule__": [value.init, value.end]}
        if isinstance(value, type) and value.__module__.startswith("carla_gym."):
            return {"__class__": f"{value.__module__}:{value.__qualname__}"}
        if isinstance(value, tuple):
            return {"__tuple__": [encode(name, v) for v in value]}
        if isinstance(value, list):
            return [encode(name, v) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: encode(name, v) for k, v in value.items()}
        raise ValueError(f"{name}={value!r}: cannot be stored in config.json (valid: numbers, strings, booleans, "
                         "None, classes of carla_gym, and lists, tuples or string-keyed dicts of them)")

    return {name: encode(name, value) for name, value in hyper.items()}


def decode_hyperparameters(data: dict) -> dict:
    """The hyperparameters `encode_hyperparameters` stored.

    Examples:
        >>> hyper = hyperparameters("vlm-rl", "sac", extractor=True)
        >>> decode_hyperparameters(encode_hyperparameters(hyper)) == hyper
        True
    """
    def decode(value):
        if isinstance(value, list):
            return [decode(v) for v in value]
        if isinstance(value, dict):
            if set(value) == {"__tuple__"}:
                return tuple(decode(v) for v in value["__tuple__"])
            if set(value) == {"__quadratic_schedule__"}:
                return QuadraticSchedule(*value["__quadratic_schedule__"])
            if set(value) == {"__class__"} and value["__class__"].startswith("carla_gym."):
                import importlib

                module, _, name = value["__class__"].partition(":")
                return getattr(importlib.import_module(module), name)
            return {k: decode(v) for k, v in value.items()}
        return value

    return {name: decode(value) for name, value in data.items()}


NOT_HYPERPARAMETERS = ("self", "policy", "env", "seed", "device", "verbose", "tensorboard_log", "_init_setup_model")
"""Parameters of ``PPO``/``SAC.__init__`` that ``train_sb3.py`` sets itself (``--hp`` cannot)."""
RANGES = {"gamma": (0.0, 1.0), "learning_rate": (0.0, 1.0), "tau": (0.0, 1.0)}
"""Hyperparameters that must be numbers in (low, high] (a schedule, e.g. `QuadraticSchedule`, is not checked)."""
MINIMUMS = {"batch_size": 2, "n_steps": 1, "buffer_size": 1, "n_epochs": 1}
"""Hyperparameters that must be integers >= the value."""


def hyperparameter_names(algo: str) -> list[str]:
    """The keyword arguments of SB3's ``PPO`` or ``SAC`` that ``--hp`` may set, sorted.

    Raises:
        ValueError: Unknown ``algo``.
    """
    import inspect

    from stable_baselines3 import PPO, SAC

    if algo not in ALGOS:
        raise ValueError(f"algo={algo!r}: choose one of {list(ALGOS)}")
    params = inspect.signature((PPO if algo == "ppo" else SAC).__init__).parameters
    return sorted(set(params) - set(NOT_HYPERPARAMETERS))


def parse_overrides(algo: str, items: list[str]) -> dict:
    """``train_sb3.py --hp name=value ...`` as a dict, values parsed as Python literals (else kept as strings).

    Raises:
        ValueError: An item without ``=`` or a name ``algo`` does not take; the message starts
            with ``--hp`` and names the item and what is valid.

    Examples:
        >>> parse_overrides("ppo", ["n_steps=64", "ent_coef=auto", "policy_kwargs={'net_arch': [16]}"])
        {'n_steps': 64, 'ent_coef': 'auto', 'policy_kwargs': {'net_arch': [16]}}
    """
    import ast

    valid = hyperparameter_names(algo)
    out = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--hp {item!r}: write name=value, e.g. n_steps=64")
        if name not in valid:
            raise ValueError(f"--hp {name!r}: not a {algo.upper()} hyperparameter; valid: {valid}")
        try:
            out[name] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[name] = text  # a string, e.g. ent_coef=auto
    return out


def check_hyperparameters(algo: str, hyper: dict, n_envs: int) -> None:
    """Refuse hyperparameters SB3 would reject late (or silently misuse), or config.json could not store.

    Checks: every value encodes (`encode_hyperparameters`), `RANGES`, `MINIMUMS`, and a PPO
    rollout (``n_steps`` x ``n_envs``) of at least 2 steps.

    Raises:
        ValueError: The first bad value; the message starts with ``--hp`` and says what is valid.

    Examples:
        >>> check_hyperparameters("ppo", {"n_steps": 64, "gamma": 1.5}, 2)
        Traceback (most recent call last):
        ...
        ValueError: --hp gamma=1.5: must be in (0.0, 1.0]
    """
    try:
        encode_hyperparameters(hyper)
    except ValueError as exc:
        raise ValueError(f"--hp {exc}") from None
    for name, (low, high) in RANGES.items():
        value = hyper.get(name)
        if isinstance(value, bool) or (isinstance(value, int | float) and not low < value <= high):
            raise ValueError(f"--hp {name}={value}: must be in ({low}, {high}]")
    for name, low in MINIMUMS.items():
        value = hyper.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ValueError(f"--hp {name}={value!r}: must be an integer >= {low}")
    if algo == "ppo" and hyper.get("n_steps", SB3_DEFAULTS[("ppo", "n_steps")]) * n_envs < 2:
        raise ValueError(f"--hp n_steps={hyper['n_steps']} x --n-envs {n_envs}: PPO needs a rollout of at least 2 "
                         "steps")


def whole_rollouts(algo: str, n_envs: int, hyper: dict, total: int) -> tuple[int, str | None]:
    """The env steps SB3 trains for ``--total-timesteps total``, and the note saying so when it rounds up.

    Examples:
        >>> steps, note = whole_rollouts("ppo", 2, {"n_steps": 32}, 100)
        >>> print(steps, note)  # doctest: +NORMALIZE_WHITESPACE
        128 note: --total-timesteps 100 rounded up to 128: PPO trains in whole rollouts of
        n_steps x n_envs = 32 x 2 = 64 steps
        >>> whole_rollouts("sac", 2, {"train_freq": 4}, 304)
        (304, None)
    """
    unit = rollout_steps(algo, n_envs, hyper)
    steps = trained_timesteps(total, unit)
    if steps == total:
        return total, None
    per = (f"n_steps x n_envs = {hyper.get('n_steps', SB3_DEFAULTS[('ppo', 'n_steps')])} x {n_envs}" if algo == "ppo"
           else f"train_freq x n_envs = {unit // n_envs} x {n_envs}")
    return steps, (f"note: --total-timesteps {total} rounded up to {steps}: {algo.upper()} trains in whole rollouts "
                   f"of {per} = {unit} steps")


def clip_reward_model(clip: str, pretrained: str, device: str = "cpu", prompts: str = "trolley"):
    """The CLIP reward model of a ``--clip`` preset (`carla_gym.reward.CLIPRewardModel`, CLG head).

    ``vit-b-32``: `carla_gym.reward.DEFAULT_MODEL` with this project's trolley prompts (random
    weights without ``pretrained``: no signal, a smoke test). ``vlm-rl``: VLM-RL's model, prompts
    and preprocessing (`carla_gym.reward.FAITHFUL_MODEL`; VLM-RL's ``config.py``).

    Args:
        clip: ``vit-b-32`` or ``vlm-rl``.
        pretrained: open_clip pretrained tag or checkpoint path ("" for random ``vit-b-32`` weights).
        device: Torch device of the model.
        prompts: Prompt preset of ``vit-b-32`` (`carla_gym.reward.PROMPT_PRESETS`): ``trolley`` (this project's
            trolley goals) or ``vlm_rl`` (VLM-RL's exact goals, which ``train_sb3.py`` uses on
            `CarlaNavigation-v0`). ``vlm-rl`` always uses VLM-RL's.

    Raises:
        ValueError: Unknown ``clip`` (or open_clip's errors: unknown tag, unreadable checkpoint).
    """
    from carla_gym.reward import DEFAULT_MODEL, FAITHFUL_MODEL, CLIPRewardModel, OpenClipEncoder

    if clip == "vlm-rl":
        encoder = OpenClipEncoder(FAITHFUL_MODEL[0], pretrained, device=device, preprocess="vlm_rl")
        return CLIPRewardModel(encoder, head="clg", prompts="vlm_rl")
    if clip == "vit-b-32":
        return CLIPRewardModel(OpenClipEncoder(DEFAULT_MODEL, pretrained or None, device=device), head="clg",
                               prompts=prompts)
    raise ValueError(f"clip={clip!r}: choose vit-b-32 or vlm-rl")
