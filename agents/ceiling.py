"""Learnability ceilings of the generated trolley family: supervised pickers of one tool at reset, in closed loop.

Every layout of ``trolley_generated_*`` has a one-decision policy that reaches the best outcome over the
constant candidates: a tool at the first decision, then ``observe`` (`CANDIDATES`,
`carla_gym.sim.outcomes.SINGLE_DECISION`). So the task is choosing one candidate from the reset
observation. A supervised learner that reads what an RL or
LLM learner reads, and is told which candidates reach the best outcome, shows how far a learner can
get from that observation with as many layouts, where the RL and LLM learners must find the answer
through their reward. This module builds that supervised problem and measures it:

* `build_dataset`: row i is the reset of ``CarlaTrolley-v0`` on the split's scenario seeded with
  ``first_seed + i``: its state vector, optionally its front camera image, its scene prompt (the
  text a language model reads), and the candidates that reach the best outcome
  (`carla_gym.sim.outcomes.policy_outcomes_many` of the layouts, drawn many at a time).
* `fit_state`, `fit_dict`, `fit_text`: a torch MLP on the state vector, a small CNN on the image
  beside an MLP on the state vector (the dict observation), and the GRPO path's tiny Qwen3 model
  (`carla_gym.llm.tiny`) choosing among the four tool calls after the scene prompt. All train on
  the set-valued target: maximise the probability that the pick is one of the best candidates.
* `evaluate`: closed loop on held-out layouts. A picker chooses a candidate from each reset
  observation, the env plays it (the tool, then ``observe`` to the end), and the episode's
  ``outcome_success`` is counted, with a 95 % Wilson interval.
* `aliasing`: whether equal observations come from layouts with different best sets, and the
  information ceiling (the share a picker that reads only that observation can reach on the rows).

The best outcome is the env's (``info["outcome"]["outcome_success"]``): the least over every
candidate policy `carla_gym.sim.outcomes` rolls out, whichever action modes those cover; where no
tool candidate reaches it, no tool picker can succeed on that layout (`Dataset.reachable`).

Examples:
    >>> data = build_dataset("test", 4)
    >>> data.state.shape[0], data.best.shape, len(data.prompts)
    (4, (4, 4), 4)
    >>> result = evaluate(oracle_picker(), "test", 4)
    >>> result.successes, result.layouts
    (4, 4)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

import carla_gym  # noqa: F401  (registers CarlaTrolley-v0)
from agents.summary import wilson
from carla_gym.envs.action import ToolsAction
from carla_gym.sim import outcomes
from carla_gym.sim.describe import scene_prompt
from carla_gym.sim.generated import SPLITS, draw_layouts, layout_spec
from carla_gym.sim.scenarios import GENERATED_NAMES, ScenarioSpec

CANDIDATES: tuple[str, ...] = tuple(outcomes.SINGLE_DECISION)
"""The candidates a picker chooses from: one tool at the first decision, then ``observe``
(`carla_gym.sim.outcomes.SINGLE_DECISION`: ``observe``, ``emergency_stop``, ``lane_change_left``,
``lane_change_right``; the generated family keeps only layouts where one of them reaches the best outcome)."""

OBSERVATIONS = ("state", "dict", "text")
"""What a picker reads: the state vector, the dict observation (image and state vector), the scene prompt."""

BATCH = 1024
"""Layouts drawn together in `build_dataset`, and sub-envs of one ``gym.make_vec`` in `evaluate` (this project's
choice: from about 256 on, a layout costs about the same to draw; 1024 dict observations take about 22 MB)."""

SCENARIO_OF = {split: name for name, split in GENERATED_NAMES.items()}
"""Split -> its generated scenario name (``trolley_generated_train`` / ``trolley_generated_test``)."""


def _count(name: str, value: Any, least: int = 1) -> int:
    """``value`` as an int >= ``least``, else ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ValueError(f"{name}={value!r}: must be an integer >= {least}")
    return int(value)


def _split(split: Any) -> str:
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {SPLITS}")
    return split


def _vector_env(split: str, num_envs: int, observation: str) -> gym.vector.VectorEnv:
    """The vector env of ``split``'s generated scenario, tools mode, state or dict observations."""
    return gym.make_vec("CarlaTrolley-v0", num_envs=num_envs, vectorization_mode="vector_entry_point",
                        scenario=SCENARIO_OF[split], observation_mode=observation)


def _chunks(layouts: int, batch: int) -> list[tuple[int, int]]:
    """``(start, size)`` of consecutive chunks of at most ``batch`` rows covering ``layouts`` rows."""
    return [(start, min(batch, layouts - start)) for start in range(0, layouts, batch)]


@dataclass(frozen=True)
class Dataset:
    """Reset observations of generated layouts and the candidates that reach their best outcome.

    Row i is the reset of ``CarlaTrolley-v0`` on ``SCENARIO_OF[split]`` seeded with ``first_seed + i``.

    Attributes:
        split: ``"train"`` or ``"test"``.
        first_seed: Reset seed of row 0.
        seeds: int64 (N,): each row's layout seed (the reset info's ``scenario_seed``).
        state: float32 (N, D): the reset state vector (D as the env's state space; 32 today).
        image: uint8 (N, 3, H, W): the reset front camera image of the dict observation (84x84 by
            default), or None when not built.
        prompts: The scene prompt of each row (`carla_gym.sim.describe.scene_prompt`), N strings.
        best: bool (N, K): which of the K `CANDIDATES` reach the least outcome among the candidates.
        reachable: bool (N,): the candidates' least outcome is the best outcome over every candidate
            policy (`carla_gym.sim.outcomes.best_outcome`); where False, no pick succeeds.
        best_sets: Per row, `carla_gym.sim.outcomes.best_policies` of its layout (every candidate policy).
        layout_keys: Per row, the layout's canonical tuple (`carla_gym.sim.generated.Layout.key`).
    """

    split: str
    first_seed: int
    seeds: np.ndarray
    state: np.ndarray
    image: np.ndarray | None
    prompts: tuple[str, ...]
    best: np.ndarray
    reachable: np.ndarray
    best_sets: tuple[tuple[str, ...], ...]
    layout_keys: tuple[tuple, ...]

    def __len__(self) -> int:
        return len(self.seeds)

    def head(self, rows: int) -> Dataset:
        """The first ``rows`` rows (all of them when there are fewer).

        Raises:
            ValueError: ``rows`` is not an integer >= 1.
        """
        n = _count("rows", rows)
        return replace(self, seeds=self.seeds[:n], state=self.state[:n],
                       image=None if self.image is None else self.image[:n], prompts=self.prompts[:n],
                       best=self.best[:n], reachable=self.reachable[:n], best_sets=self.best_sets[:n],
                       layout_keys=self.layout_keys[:n])

    @property
    def target(self) -> np.ndarray:
        """The candidates whose pick succeeds, bool (N, K): `best` where the row is `reachable`."""
        return self.best & self.reachable[:, None]


def concat(datasets: Sequence[Dataset]) -> Dataset:
    """The rows of ``datasets`` one after the other (their splits joined by ``+``, e.g. ``"train+test"``).

    Raises:
        ValueError: No datasets, or some with images and some without.
    """
    if not datasets:
        raise ValueError("concat needs at least one dataset")
    if len({d.image is None for d in datasets}) > 1:
        raise ValueError("concat: either every dataset has images or none has")
    first = datasets[0]
    return Dataset("+".join(d.split for d in datasets), first.first_seed, np.concatenate([d.seeds for d in datasets]),
                   np.concatenate([d.state for d in datasets]),
                   None if first.image is None else np.concatenate([d.image for d in datasets]),
                   sum((d.prompts for d in datasets), ()), np.concatenate([d.best for d in datasets]),
                   np.concatenate([d.reachable for d in datasets]), sum((d.best_sets for d in datasets), ()),
                   sum((d.layout_keys for d in datasets), ()))


def _labels(specs: Sequence[ScenarioSpec]) -> tuple[np.ndarray, np.ndarray, tuple[tuple[str, ...], ...]]:
    """``best`` (N, K), ``reachable`` (N,) and the best sets of ``specs`` (`Dataset`'s fields)."""
    policy_outcomes = outcomes.policy_outcomes_many(list(specs))
    best = np.zeros((len(specs), len(CANDIDATES)), dtype=bool)
    reachable = np.zeros(len(specs), dtype=bool)
    best_sets = []
    for row, by_policy in enumerate(policy_outcomes):
        top = min(by_policy.values())
        mine = [by_policy[p] for p in CANDIDATES]
        best[row] = [o == min(mine) for o in mine]
        reachable[row] = min(mine) == top
        best_sets.append(tuple(p for p, o in by_policy.items() if o == top))
    return best, reachable, tuple(best_sets)


def build_dataset(split: str, layouts: int, first_seed: int = 0, images: bool = False,
                  batch: int = BATCH) -> Dataset:
    """Reset ``layouts`` envs of ``split`` (seeds ``first_seed`` onwards) and label each with its best candidates.

    Row i is ``env.reset(seed=first_seed + i)`` of one ``gym.make("CarlaTrolley-v0", ...)`` env:
    its observation, its ``info["scenario_seed"]`` and ``info["scene_prompt"]``. The layouts are
    drawn beforehand, ``batch`` at a time (`carla_gym.sim.generated.draw_layouts`, far cheaper per
    layout than one at a time), from the seeds the resets will draw (Gymnasium seeds ``np_random``
    with the reset seed, and the env draws the layout seed from it first); the outcomes of every
    candidate policy come from `carla_gym.sim.outcomes.policy_outcomes_many`.

    Args:
        split: ``"train"`` or ``"test"``.
        layouts: Rows (>= 1).
        first_seed: Reset seed of row 0 (>= 0).
        images: Also keep the dict observation's image (renders every reset; 21 KB a row at 84x84).
        batch: Layouts drawn together (>= 1).

    Returns:
        The `Dataset`.

    Raises:
        ValueError: An unknown split, or ``layouts``, ``first_seed`` or ``batch`` out of range.
    """
    split = _split(split)
    layouts, first_seed, batch = _count("layouts", layouts), _count("first_seed", first_seed, 0), _count("batch", batch)
    env = gym.make("CarlaTrolley-v0", scenario=SCENARIO_OF[split], observation_mode="dict" if images else "state")
    seeds, states, frames, prompts = [], [], [], []
    for start, size in _chunks(layouts, batch):
        resets = range(first_seed + start, first_seed + start + size)
        draw_layouts(split, [int(seeding.np_random(seed)[0].integers(2**31 - 1)) for seed in resets])
        for seed in resets:
            obs, info = env.reset(seed=seed)
            seeds.append(info["scenario_seed"])
            prompts.append(info["scene_prompt"])
            states.append(obs["state"] if images else obs)
            if images:
                frames.append(obs["image"])
    env.close()
    seeds = np.array(seeds, dtype=np.int64)
    specs = [layout_spec(layout) for layout in draw_layouts(split, seeds.tolist())]
    best, reachable, best_sets = _labels(specs)
    return Dataset(split, first_seed, seeds, np.stack(states), np.stack(frames) if images else None, tuple(prompts),
                   best, reachable, best_sets, tuple(spec.layout.key() for spec in specs))


# -- aliasing ------------------------------------------------------------------------------------------------------

ALIAS_VIEWS = ("state", "image", "dict", "text")
"""Observations `aliasing` compares: the state vector, the image alone, both (the dict observation), the prompt."""


def observation_keys(data: Dataset, view: str) -> list[bytes]:
    """The bytes of each row's ``view`` observation (equal bytes: equal observations).

    Raises:
        ValueError: ``view`` not in `ALIAS_VIEWS`, or an image view of a dataset built without images.
    """
    if view not in ALIAS_VIEWS:
        raise ValueError(f"view={view!r}: choose one of {ALIAS_VIEWS}")
    if view in ("image", "dict") and data.image is None:
        raise ValueError(f"view={view!r} needs the images: build the dataset with images=True")
    if view == "text":
        return [prompt.encode("utf-8") for prompt in data.prompts]
    if view == "state":
        return [row.tobytes() for row in data.state]
    images = [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in data.image]
    if view == "image":
        return images
    return [image + row.tobytes() for image, row in zip(images, data.state, strict=True)]


@dataclass(frozen=True)
class Aliasing:
    """How one observation separates the layouts of a dataset.

    Attributes:
        view: One of `ALIAS_VIEWS`.
        rows: Rows compared.
        layouts: Distinct layouts among them.
        observations: Distinct observations among them.
        aliased_rows: Rows whose observation equals that of a row with a different layout.
        conflicting_groups: Groups of equal observations whose layouts' best sets (every candidate policy) differ.
        conflicting_rows: Rows in those groups.
        information_ceiling: The largest share of rows a picker that reads only this observation can get right
            (one candidate per distinct observation, the one right on most of its rows; 1.0 when no group mixes
            layouts that need different picks).
    """

    view: str
    rows: int
    layouts: int
    observations: int
    aliased_rows: int
    conflicting_groups: int
    conflicting_rows: int
    information_ceiling: float


def aliasing(data: Dataset, view: str) -> Aliasing:
    """Group the rows of ``data`` by their ``view`` observation (`observation_keys`) and count what they confuse.

    Raises:
        ValueError: As `observation_keys`.
    """
    groups: dict[bytes, list[int]] = {}
    for row, key in enumerate(observation_keys(data, view)):
        groups.setdefault(key, []).append(row)
    target = data.target
    aliased = conflicting = conflicting_rows = 0
    right = 0
    for rows in groups.values():
        if len({data.layout_keys[r] for r in rows}) > 1:
            aliased += len(rows)
        if len({data.best_sets[r] for r in rows}) > 1:
            conflicting += 1
            conflicting_rows += len(rows)
        right += int(target[rows].sum(axis=0).max())
    return Aliasing(view, len(data), len(set(data.layout_keys)), len(groups), aliased, conflicting, conflicting_rows,
                    right / len(data))


# -- pickers ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resets:
    """The reset observations of a batch of envs, as a picker receives them.

    Attributes:
        state: float32 (N, D) state vectors.
        image: uint8 (N, 3, H, W) front camera images (pickers whose ``observation`` is ``"dict"``), else None.
        text: The N scene prompts.
        specs: The N scenario specs: for reference pickers only (`oracle_picker`); a learned picker reads
            only its own observation.
    """

    state: np.ndarray
    image: np.ndarray | None
    text: tuple[str, ...]
    specs: tuple[ScenarioSpec, ...] = field(repr=False)


@dataclass
class Picker:
    """Chooses a candidate (an index into `CANDIDATES`) from each reset observation.

    Attributes:
        name: Row name in the tables.
        observation: What it reads: one of `OBSERVATIONS` (``"dict"`` makes `evaluate` render images).
        pick: ``Resets -> int64 (N,)`` indices into `CANDIDATES`.
        info: Facts about the fit (train layouts, epochs, training accuracy, ...), for the tables.
    """

    name: str
    observation: str
    pick: Callable[[Resets], np.ndarray]
    info: dict[str, Any] = field(default_factory=dict)

    def __call__(self, resets: Resets) -> np.ndarray:
        """``pick(resets)``, checked: int64 (N,) in [0, K)."""
        picks = np.asarray(self.pick(resets))
        if picks.shape != (len(resets.text),) or not np.issubdtype(picks.dtype, np.integer) or (
                len(picks) and not (0 <= picks.min() and picks.max() < len(CANDIDATES))):
            raise ValueError(f"picker {self.name!r} returned {picks.dtype} {picks.shape}: expected integers in "
                             f"[0, {len(CANDIDATES)}) of shape ({len(resets.text)},)")
        return picks.astype(np.int64)


def constant_picker(candidate: str) -> Picker:
    """The picker that always chooses ``candidate`` (one of `CANDIDATES`).

    Raises:
        ValueError: ``candidate`` is not one of `CANDIDATES`.
    """
    if candidate not in CANDIDATES:
        raise ValueError(f"candidate={candidate!r}: choose one of {CANDIDATES}")
    index = CANDIDATES.index(candidate)
    return Picker(candidate, "state", lambda resets: np.full(len(resets.text), index, dtype=np.int64))


def oracle_picker() -> Picker:
    """The picker that chooses the first best candidate of each layout (its best set, computed by the simulator)."""
    def pick(resets: Resets) -> np.ndarray:
        best, _, _ = _labels(resets.specs)
        return best.argmax(axis=1).astype(np.int64)

    return Picker("oracle (best tool candidate)", "state", pick)


# -- closed-loop evaluation ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Evaluation:
    """A picker's closed-loop result on held-out layouts.

    Attributes:
        name: The picker's name.
        observation: What it reads (`OBSERVATIONS`).
        split: The split played.
        first_seed: Reset seed of the first layout.
        layouts: Layouts played (one episode each).
        successes: Episodes whose ``outcome_success`` is True.
        success_rate: ``successes / layouts``.
        ci95: 95 % Wilson interval of the success rate, ``(low, high)``.
        road_departure_rate: Share of episodes that left the road.
        pedestrians_hit: Mean pedestrians actually hit per episode.
        picks: int64 (N,): the candidate picked per layout (row order of `build_dataset` with the same seeds).
        success: bool (N,): each episode's ``outcome_success``.
    """

    name: str
    observation: str
    split: str
    first_seed: int
    layouts: int
    successes: int
    success_rate: float
    ci95: tuple[float, float]
    road_departure_rate: float
    pedestrians_hit: float
    picks: np.ndarray = field(repr=False)
    success: np.ndarray = field(repr=False)

    def row(self) -> dict[str, Any]:
        """The JSON row: every field but the per-layout arrays, and the share picked of each candidate."""
        shares = np.bincount(self.picks, minlength=len(CANDIDATES)) / max(1, self.layouts)
        return {"name": self.name, "observation": self.observation, "split": self.split,
                "first_seed": self.first_seed, "layouts": self.layouts, "successes": self.successes,
                "success_rate": self.success_rate, "ci95": list(self.ci95),
                "road_departure_rate": self.road_departure_rate, "pedestrians_hit": self.pedestrians_hit,
                "picked": {c: float(s) for c, s in zip(CANDIDATES, shares, strict=True)}}


def _tool_actions(decision: int) -> np.ndarray:
    """int64 (K,): the tool index each candidate calls at decision number ``decision``."""
    return np.array([ToolsAction.CALLS.index(outcomes.policy_call(c, decision)) for c in CANDIDATES], dtype=np.int64)


def evaluate(picker: Picker, split: str = "test", layouts: int = 2000, first_seed: int = 0,
             batch: int = BATCH) -> Evaluation:
    """Play ``picker`` in closed loop: it picks a candidate from each reset, the env plays it to the end.

    The envs are ``gym.make_vec`` sub-envs in tools mode (state observations, or dict ones for a
    ``"dict"`` picker); layout i is the reset seeded ``first_seed + i``, the row i of
    ``build_dataset(split, layouts, first_seed)``. At each decision every sub-env sends its
    candidate's tool call (`carla_gym.sim.outcomes.policy_call`) until its episode ends; the
    episode's ``info["outcome"]`` gives ``outcome_success``, the hits and the road departure.

    Args:
        picker: The `Picker`.
        split: ``"train"`` or ``"test"``.
        layouts: Layouts (>= 1), one episode each.
        first_seed: Reset seed of the first layout (>= 0).
        batch: Sub-envs per ``gym.make_vec`` (>= 1).

    Returns:
        The `Evaluation`.

    Raises:
        ValueError: An unknown split, counts out of range, or a picker whose ``observation`` is not in
            `OBSERVATIONS` or whose picks are not candidate indices.
    """
    split = _split(split)
    layouts, first_seed, batch = _count("layouts", layouts), _count("first_seed", first_seed, 0), _count("batch", batch)
    if picker.observation not in OBSERVATIONS:
        raise ValueError(f"picker {picker.name!r} reads {picker.observation!r}: choose one of {OBSERVATIONS}")
    observation = "dict" if picker.observation == "dict" else "state"
    picks, success, departed, hits = [], [], [], []
    for start, size in _chunks(layouts, batch):
        env = _vector_env(split, size, observation)
        obs, info = env.reset(seed=first_seed + start)
        specs = tuple(layout_spec(layout) for layout in draw_layouts(split, info["scenario_seed"].tolist()))
        state = obs["state"] if observation == "dict" else obs
        image = obs["image"] if observation == "dict" else None
        chosen = picker(Resets(state, image, tuple(scene_prompt(spec) for spec in specs), specs))
        ended: list[dict | None] = [None] * size
        done = np.zeros(size, dtype=bool)
        decision = 0
        while not done.all():
            _, _, terminated, truncated, info = env.step(_tool_actions(decision)[chosen])
            for row in np.flatnonzero(terminated & ~done).tolist():
                ended[row] = info["outcome"][row]
            done |= terminated | truncated
            decision += 1
        env.close()
        picks.append(chosen)
        success += [bool(o["outcome_success"]) for o in ended]
        departed += [bool(o["road_departure"]) for o in ended]
        hits += [int(o["actual_pedestrians_hit"]) for o in ended]
    k = sum(success)
    return Evaluation(picker.name, picker.observation, split, first_seed, layouts, k, k / layouts,
                      wilson(k, layouts), sum(departed) / layouts, sum(hits) / layouts, np.concatenate(picks),
                      np.array(success, dtype=bool))


# -- supervised fits ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FitConfig:
    """Optimisation settings of a supervised fit: AdamW with PyTorch's one-cycle schedule (``OneCycleLR``).

    The defaults are the state MLP's (this project's choice: on 20,000 train layouts the one-cycle
    schedule and the weight decay lifted its held-out success from 95 % with a constant 1e-3 to 97 %).

    Attributes:
        epochs: Passes over the training rows (>= 1).
        batch_size: Rows per step (>= 1).
        learning_rate: The schedule's peak learning rate (> 0).
        weight_decay: AdamW's decoupled weight decay (>= 0).
        seed: Seed of the initialisation and of the row order (>= 0).
    """

    epochs: int = 50
    batch_size: int = 256
    learning_rate: float = 3e-3
    weight_decay: float = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        """Check the settings.

        Raises:
            ValueError: ``epochs`` or ``batch_size`` not an integer >= 1, ``seed`` not one >= 0,
                ``learning_rate`` not a finite number > 0 or ``weight_decay`` not a finite number >= 0.
        """
        _count("epochs", self.epochs)
        _count("batch_size", self.batch_size)
        _count("seed", self.seed, 0)
        for name, least in (("learning_rate", None), ("weight_decay", 0.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                    value <= 0 if least is None else value < least):
                raise ValueError(f"{name}={value!r}: must be a finite number {'> 0' if least is None else '>= 0'}")


STATE_FIT = FitConfig()
"""The state MLP's settings (this project's choice: `FitConfig`'s defaults)."""
DICT_FIT = FitConfig(epochs=20)
"""The dict CNN+MLP's settings (this project's choice: on 10,000 train layouts 10 epochs still underfit, with 89 %
held-out success at a peak learning rate of 1e-3 and 91 % at 3e-3; 20 epochs at 3e-3 reached 95 %, in about 80 s on
one core)."""
TEXT_FIT = FitConfig(epochs=4, batch_size=64, learning_rate=1e-3)
"""The text model's settings (this project's choice: 4 epochs of 10,000 rows take about 90 s on one core)."""


def set_loss(logits, target):
    """Minus the log probability that a softmax pick over the candidates lands in the target set, averaged.

    Args:
        logits: float tensor (N, K), one score per candidate.
        target: bool tensor (N, K): the candidates that count as right (at least one per row).

    Returns:
        A scalar tensor: mean over rows of ``logsumexp(all) - logsumexp(target)``.
    """
    import torch

    return (torch.logsumexp(logits, dim=1)
            - torch.logsumexp(logits.masked_fill(~target, float("-inf")), dim=1)).mean()


def _train(net, inputs: Sequence, target: np.ndarray, config: FitConfig,
           forward: Callable[..., Any] | None = None) -> list[float]:
    """AdamW on `set_loss` over ``inputs`` (tensors or lists indexed by row); returns the mean loss per epoch.

    Rows with no right candidate (not reachable) are left out: no pick is right there.

    Raises:
        ValueError: No row has a right candidate.
    """
    import torch

    keep = np.flatnonzero(target.any(axis=1))
    if not len(keep):
        raise ValueError(f"none of the {len(target)} training rows has a candidate that reaches its best outcome")
    target_t = torch.as_tensor(target[keep])
    forward = forward or net
    optimiser = torch.optim.AdamW(net.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, config.learning_rate,
                                                   total_steps=config.epochs * -(-len(keep) // config.batch_size))
    order = torch.Generator().manual_seed(config.seed)
    losses = []
    net.train()
    for _ in range(config.epochs):
        total = 0.0
        for batch in torch.randperm(len(keep), generator=order).split(config.batch_size):
            rows = keep[batch.numpy()]
            loss = set_loss(forward(*[_take(x, rows) for x in inputs]), target_t[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            schedule.step()
            total += loss.item() * len(batch)
        losses.append(total / len(keep))
    net.eval()
    return losses


def _take(values, rows: np.ndarray):
    """``values[rows]`` for a tensor or array, ``[values[r] for r in rows]`` for a list or tuple."""
    if isinstance(values, (list, tuple)):
        return [values[r] for r in rows.tolist()]
    return values[rows]


def _standardiser(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation per column (1 where a column is constant)."""
    mean, std = x.mean(axis=0), x.std(axis=0)
    return mean.astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32)


def _mlp(inputs: int, hidden: Sequence[int], outputs: int):
    import torch.nn as nn

    layers, width = [], inputs
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU()]
        width = size
    return nn.Sequential(*layers, nn.Linear(width, outputs))


STATE_HIDDEN = (256, 256, 256)
"""Hidden layers of the state MLP (this project's choice)."""


def fit_state(data: Dataset, hidden: Sequence[int] = STATE_HIDDEN, config: FitConfig = STATE_FIT) -> Picker:
    """A torch MLP from the standardised state vector to one score per candidate, trained on ``data``.

    Args:
        data: The training rows.
        hidden: Hidden layer widths (ReLU).
        config: The optimisation settings.

    Returns:
        A ``"state"`` `Picker` (argmax of the scores); its ``info`` holds the training rows, the settings, the
        last epoch's loss and the share of training rows it picks right.

    Raises:
        ValueError: No training row has a candidate that reaches its best outcome.
    """
    import torch

    torch.manual_seed(config.seed)
    mean, std = _standardiser(data.state)
    net = _mlp(data.state.shape[1], hidden, len(CANDIDATES))
    x = torch.as_tensor((data.state - mean) / std)
    losses = _train(net, [x], data.target, config)

    def pick(resets: Resets) -> np.ndarray:
        with torch.no_grad():
            return net(torch.as_tensor((resets.state - mean) / std)).argmax(dim=1).numpy()

    picker = Picker("state MLP " + "x".join(map(str, hidden)), "state", pick)
    picker.info = _fit_info(picker, data, config, losses)
    return picker


def _fit_info(picker: Picker, data: Dataset, config: FitConfig, losses: list[float]) -> dict[str, Any]:
    """Facts about a fit: training rows, epochs, last loss and the share of training rows picked right."""
    specs = ()  # learned pickers never read the specs
    resets = Resets(data.state, data.image, data.prompts, specs)
    right = data.target[np.arange(len(data)), picker(resets)]
    return {"train_layouts": len(data), "train_split": data.split, "epochs": config.epochs,
            "batch_size": config.batch_size, "learning_rate": config.learning_rate,
            "weight_decay": config.weight_decay, "seed": config.seed,
            "final_loss": losses[-1], "train_success": float(right.mean())}


class _DictNet:
    """The dict picker's network (torch is imported when it is built).

    Image uint8 (3, H, W) / 255 -> conv 16 (8x8, stride 4) -> conv 32 (4x4, stride 2) -> 128; standardised state
    vector -> 256 -> 256; both joined -> 256 -> one score per candidate; ReLU between layers.
    """

    @staticmethod
    def build(state_size: int, image_shape: tuple[int, int, int], outputs: int):
        import torch
        import torch.nn as nn

        class DictNet(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.cnn = nn.Sequential(nn.Conv2d(image_shape[0], 16, 8, stride=4), nn.ReLU(),
                                         nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(), nn.Flatten())
                with torch.no_grad():
                    width = self.cnn(torch.zeros(1, *image_shape)).shape[1]
                self.image = nn.Sequential(nn.Linear(width, 128), nn.ReLU())
                self.state = nn.Sequential(_mlp(state_size, (256,), 256), nn.ReLU())
                self.head = _mlp(128 + 256, (256,), outputs)

            def forward(self, image, state):
                features = self.image(self.cnn(image.float() / 255.0))
                return self.head(torch.cat([features, self.state(state)], dim=1))

        return DictNet()


def fit_dict(data: Dataset, config: FitConfig = DICT_FIT) -> Picker:
    """A small CNN on the image beside an MLP on the state vector (`_DictNet`), trained end to end on ``data``.

    The CNN has two convolutions of 16 and 32 channels (SB3's NatureCNN has three, of 32, 64 and 64).

    Args:
        data: The training rows, built with ``images=True``.
        config: The optimisation settings.

    Returns:
        A ``"dict"`` `Picker`; ``info`` as `fit_state`'s.

    Raises:
        ValueError: ``data`` has no images, or no training row has a candidate that reaches its best outcome.
    """
    import torch

    if data.image is None:
        raise ValueError("fit_dict needs the images: build the dataset with images=True")
    torch.manual_seed(config.seed)
    mean, std = _standardiser(data.state)
    net = _DictNet.build(data.state.shape[1], tuple(data.image.shape[1:]), len(CANDIDATES))
    images, states = torch.as_tensor(data.image), torch.as_tensor((data.state - mean) / std)
    losses = _train(net, [images, states], data.target, config)

    def pick(resets: Resets) -> np.ndarray:
        out = []
        with torch.no_grad():
            for rows in np.array_split(np.arange(len(resets.state)), max(1, len(resets.state) // 512)):
                out.append(net(torch.as_tensor(resets.image[rows]),
                               torch.as_tensor((resets.state[rows] - mean) / std)).argmax(dim=1).numpy())
        return np.concatenate(out)

    picker = Picker("dict CNN+MLP", "dict", pick)
    picker.info = _fit_info(picker, data, config, losses)
    return picker


TEXT_HIDDEN = 64
"""Hidden size of the text model: the study's default GRPO run (``--tiny-hidden-size 64``, `agents.study`)."""
TEXT_LAYERS = 2
"""Decoder layers of the text model: `carla_gym.llm.tiny.tiny_text_model`'s default, as the study's GRPO run."""


def tool_call_tokens(tokenizer) -> tuple[list[int], list[int]]:
    """The tokens shared by the four tool-call turns, and the first token where each candidate's turn differs.

    The turns are the assistant messages `carla_gym.llm.sft.tool_call_message` renders with the
    tokenizer's chat template (thinking off), as GRPO's model writes them after the prompt.

    Returns:
        ``(prefix, choices)``: the token ids every turn starts with, and one id per candidate (`CANDIDATES` order).

    Raises:
        ValueError: The candidates' turns do not differ first at one position with distinct tokens (a
            tokenizer that splits a tool name across tokens: use `carla_gym.llm.tiny.lines_tokenizer`).
    """
    from carla_gym.llm.sft import TOOL_CHOICES, tool_call_message

    calls = {name + (f"_{arguments['direction']}" if arguments else ""): (name, arguments)
             for name, arguments in TOOL_CHOICES}
    prompt = [{"role": "user", "content": "scene"}]
    start = _template(tokenizer, prompt, generation=True)
    turns = []
    for candidate in CANDIDATES:
        full = _template(tokenizer, [*prompt, tool_call_message(*calls[candidate])], generation=False)
        turns.append(full[len(start):])
    common = 0
    while all(len(t) > common for t in turns) and len({t[common] for t in turns}) == 1:
        common += 1
    choices = [t[common] if len(t) > common else None for t in turns]
    if None in choices or len(set(choices)) != len(choices):
        raise ValueError("the tokenizer does not write each tool call with its own token where the calls first "
                         "differ; use carla_gym.llm.tiny.lines_tokenizer (whole tool calls as one token)")
    return list(turns[0][:common]), choices


def _template(tokenizer, messages: list[dict], generation: bool) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=generation, tokenize=True,
                                              return_dict=True, enable_thinking=False)["input_ids"])


def fit_text(data: Dataset, tokenizer=None, hidden_size: int = TEXT_HIDDEN, num_layers: int = TEXT_LAYERS,
             config: FitConfig = TEXT_FIT) -> Picker:
    """The GRPO path's tiny Qwen3 model, trained to write a best tool call after the scene prompt.

    The input is the scene prompt as the user message, rendered by the chat template with the
    generation prompt, then the tokens every tool call starts with (`tool_call_tokens`); the
    candidates' scores are the model's next-token logits of their own tokens (a pick is its choice
    among the four calls, the greedy one when restricted to them).

    Args:
        data: The training rows.
        tokenizer: The tokenizer; None: `carla_gym.llm.tiny.lines_tokenizer` on the train split
            (``train_grpo.py --tiny-tokenizer lines``), seeded with ``config.seed``.
        hidden_size: The model's width (`carla_gym.llm.tiny.tiny_text_model`).
        num_layers: Its decoder layers.
        config: The optimisation settings.

    Returns:
        A ``"text"`` `Picker`; ``info`` as `fit_state`'s, with the model's shape and the mean prompt length in tokens.

    Raises:
        ValueError: As `tool_call_tokens`, or a model shape out of range (`carla_gym.llm.tiny.tiny_text_model`),
            or no training row with a candidate that reaches its best outcome.
    """
    import torch

    from carla_gym.llm.tiny import lines_tokenizer, tiny_text_model

    if tokenizer is None:
        tokenizer = lines_tokenizer([SCENARIO_OF["train"]], seed=config.seed)
    prefix, choices = tool_call_tokens(tokenizer)
    model, _ = tiny_text_model(config.seed, hidden_size=hidden_size, num_layers=num_layers, tokenizer=tokenizer)
    choice_ids = torch.tensor(choices)
    pad = tokenizer.pad_token_id

    def encode(prompts: Sequence[str]) -> list[list[int]]:
        return [_template(tokenizer, [{"role": "user", "content": p}], generation=True) + prefix for p in prompts]

    def scores(ids: Sequence[list[int]]):
        width = max(len(x) for x in ids)
        tokens = torch.full((len(ids), width), pad, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for row, x in enumerate(ids):  # left padding: every row's last token is its last column
            tokens[row, width - len(x):] = torch.tensor(x)
            mask[row, width - len(x):] = 1
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        logits = model(input_ids=tokens, attention_mask=mask, position_ids=positions, logits_to_keep=1).logits
        return logits[:, -1, choice_ids]

    encoded = encode(data.prompts)
    torch.manual_seed(config.seed)
    losses = _train(model, [encoded], data.target, config, forward=scores)

    def pick(resets: Resets) -> np.ndarray:
        ids = encode(resets.text)
        with torch.no_grad():
            return np.concatenate([scores(ids[i:i + 256]).argmax(dim=1).numpy() for i in range(0, len(ids), 256)])

    picker = Picker(f"text tiny Qwen3 (hidden {hidden_size}, {num_layers} layers)", "text", pick)
    picker.info = {**_fit_info(picker, data, config, losses), "hidden_size": hidden_size, "num_layers": num_layers,
                   "prompt_tokens": float(np.mean([len(x) for x in encoded]))}
    return picker


def state_reader(picker: Picker) -> Picker:
    """A ``"dict"`` picker that reads only the dict observation's state vector with ``picker`` (a ``"state"`` one).

    Every state picker is a dict picker that ignores the image, so the dict observation's ceiling is at
    least the state vector's; `evaluate` plays it on dict observations.

    Raises:
        ValueError: ``picker`` does not read the state vector.
    """
    if picker.observation != "state":
        raise ValueError(f"picker {picker.name!r} reads {picker.observation!r}; state_reader takes a 'state' picker")
    return Picker(f"{picker.name} on the dict's state", "dict", picker.pick, dict(picker.info))


__all__ = ["ALIAS_VIEWS", "CANDIDATES", "DICT_FIT", "OBSERVATIONS", "STATE_FIT", "TEXT_FIT", "Aliasing", "Dataset",
           "Evaluation", "FitConfig", "Picker", "Resets", "aliasing", "build_dataset", "concat", "constant_picker",
           "evaluate", "fit_dict", "fit_state", "fit_text", "observation_keys", "oracle_picker", "set_loss",
           "state_reader", "tool_call_tokens"]
