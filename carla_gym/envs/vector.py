"""`CarlaTrolleyVectorEnv`: N `CarlaTrolley-v0` envs in one `gymnasium.vector.VectorEnv`, on one array core.

``gym.make_vec("CarlaTrolley-v0", num_envs=N)`` (or with ``vectorization_mode="vector_entry_point"``)
returns this env: the N worlds live in the arrays of one `carla_gym.sim.batch.TrolleyBatch`,
so a step is one call of the same physics and rules a single env runs, for all worlds at once.
Sub-env i gives exactly what a single ``gym.make("CarlaTrolley-v0", ...)`` env gives for the
same seed and actions: observations, rewards, terminations and outcomes, bit for bit.

Autoreset follows Gymnasium (``metadata["autoreset_mode"]``): by default ``NEXT_STEP``, where the
step after a sub-env terminates resets it (its action is ignored, its reward is 0);
``autoreset_mode=AutoresetMode.SAME_STEP`` resets in the same step and puts the last
observation and info in ``info["final_obs"]`` and ``info["final_info"]``.

Examples:
    >>> import gymnasium as gym
    >>> import carla_gym
    >>> envs = gym.make_vec("CarlaTrolley-v0", num_envs=3, vectorization_mode="vector_entry_point",
    ...                     observation_mode="state")
    >>> obs, info = envs.reset(seed=0)
    >>> obs.shape, envs.action_space
    ((3, 32), MultiDiscrete([4 4 4]))
    >>> obs, reward, terminated, truncated, info = envs.step([2, 0, 1])  # lane_change_left, observe, emergency_stop
    >>> reward.tolist(), terminated.tolist()
    ([0.0, 0.0, 0.0], [False, False, False])
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from carla_gym.envs import spaces as S
from carla_gym.envs.action import ControlAction, ToolsAction, split_pedal
from carla_gym.envs.observation import DictObservation, StateObservation
from carla_gym.envs.rewards import REWARD_TERMS
from carla_gym.envs.trolley import DEFAULT_SCENARIO, CarlaTrolleyEnv
from carla_gym.sim import constants as C
from carla_gym.sim import physics, rules
from carla_gym.sim.batch import TrolleyBatch
from carla_gym.sim.generated import LAYOUT_CACHE, MAX_PEOPLE, draw_layouts
from carla_gym.sim.kinematics import NUMPY
from carla_gym.sim.render import render_batch
from carla_gym.sim.scenarios import GENERATED_NAMES, ScenarioSpec, is_generated, resolve_scenario, warn_ignored
from carla_gym.sim.validate import check_config, check_number
from carla_gym.sim.world import call_inputs

_TOOL_INPUTS = np.array([call_inputs(call) for call in ToolsAction.CALLS], dtype=np.float64)
"""`carla_gym.sim.world.call_inputs` of each tool index (rows in `carla_gym.envs.spaces.TOOL_ACTIONS` order)."""
_TOOL_KIND, _TOOL_BRAKE, _TOOL_DIRECTION = (_TOOL_INPUTS[:, 0].astype(np.int64), _TOOL_INPUTS[:, 2],
                                            _TOOL_INPUTS[:, 5].astype(np.int64))
assert not _TOOL_INPUTS[:, [1, 3]].any()  # no tool sets a throttle or a steer

SUPPORTED = {"action_mode": ("tools", "control"), "observation_mode": ("state", "dict"),
             "backend": ("embedded",)}
"""Constructor values the vector env runs; others (custom types, the remote backend) run in Gymnasium's
``vectorization_mode="sync"`` or ``"async"`` over single envs."""

LOOKAHEAD = 8
"""Most resets per world whose generated layouts are drawn ahead, together (this project's choice)."""

AHEAD_BATCH = 256
"""Layouts a full draw ahead aims at (N worlds x their resets ahead; this project's choice): the top-ups of
about half the worlds then hold enough layouts for one `carla_gym.sim.generated.draw_layouts` call to cost
about 5 ms per layout (4.6 ms at 64 layouts a call, 5.2 at 256; 10 at 32, 18 at 16) against 40-90 ms one at a
time (`carla_gym.sim.generated.draw_layout`); more ahead only draws layouts a short run never uses. Measured with
``benchmarks/bench_vec.py --layouts K --repeats 3`` (medians) on a 2-core machine under a load of about 5. With
the default ticks_per_action (10) on trolley_generated_train, N=4/64/1024 step at about 250/900-1,600/2,700-3,000
env-steps/s, the first reset taking 0.4/1.4/7.2 s (`benchmarks/bench_vec.py`'s ``vector_steps_per_second``, 3 s
each, the same machine)."""


class _Departure:
    """What the reward terms read of a scene (``road_departure``), for arrays of worlds."""

    __slots__ = ("road_departure",)

    def __init__(self, road_departure: np.ndarray) -> None:
        self.road_departure = road_departure


class CarlaTrolleyVectorEnv(VectorEnv):
    """N trolley envs stepped together on the array core (`carla_gym.sim.batch.TrolleyBatch`).

    ## Description
    The same task as `carla_gym.envs.trolley.CarlaTrolleyEnv` (read its docstring), for ``num_envs``
    sub-envs at once. Each sub-env draws its scenario and seed from its own ``np_random`` exactly
    as a single env does, so sub-env i seeded with s is the single env seeded with s.

    ## Action Space
    ``batch_space`` of the single env's: ``MultiDiscrete([4] * N)`` for tools, ``Box(-1, 1, (N, 2),
    float32)`` for control.

    ## Observation Space
    ``batch_space`` of the single env's: the state vectors (N, 32) float32, or
    ``Dict(image=(N, 3, H, W) uint8, state=(N, 32) float32)``; images are rendered for all worlds in one
    call (`carla_gym.sim.render.render_batch`).

    ## Rewards
    As the single env (``reward_mode`` "rubric" or "physical"); 0 for a sub-env's autoreset step.

    ## Episode End
    ``terminated`` as the single env; ``truncated`` is False unless ``max_episode_steps`` is given
    (Gymnasium's ``TimeLimit`` on each sub-env, as ``gym.make(..., max_episode_steps=k)``). Autoreset:
    see the module docstring; with ``SAME_STEP`` the info of a sub-env that ended is in
    ``info["final_info"]`` and its top-level entries are the reset's (none).

    ## Info
    Gymnasium's vector format (each key with a boolean mask ``_key`` of the sub-envs it holds for):
    every step ``rubric_reward``, ``raw_reward``, ``new_hits``, ``ticks`` and ``reward_terms`` (a dict
    of arrays) for the sub-envs that stepped; ``outcome`` (the single env's outcome dict, object
    array) for the sub-envs whose episode ended in this step; ``scenario`` (the name drawn) for the
    sub-envs that reset (at `reset` and at autoresets), and ``scenario_seed`` (int64, the seed of the
    layout) for those that reset into a generated scenario (``trolley_generated_*``: each reset draws a
    new layout from the sub-env's ``np_random``, as the single env does). The single env's per-step scene keys
    (speed, lane, text) are not repeated here: read the observation, or use single envs.

    ## Arguments
    ``num_envs`` (N >= 1), ``autoreset_mode`` (``AutoresetMode.NEXT_STEP`` or ``SAME_STEP``),
    ``max_episode_steps`` (None, or a step limit per episode: truncation, as Gymnasium's ``TimeLimit``), and the
    single env's arguments (``scenario``, ``action_mode``, ``observation_mode``, ``reward_mode``,
    ``ticks_per_action``, ``image_width``, ``image_height``, ``image_view``, ``scenario_config``,
    ``steer_smoothing``), checked by the single env's rules. Not supported here: ``backend`` other than
    "embedded", ``render_mode``, ``reward_frame_size``, ``info_text`` (use single envs through
    ``vectorization_mode="sync"``).

    Raises:
        ValueError: ``num_envs`` < 1, an argument the single env refuses, or one not supported here
            (the message names it and the way forward).

    ## Version History
    * v0: Initial release.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(self, num_envs: int = 1, scenario: str | Sequence[str] = DEFAULT_SCENARIO,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP, max_episode_steps: int | None = None,
                 **kwargs: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r}: must be an integer >= 1")
        if max_episode_steps is not None:
            max_episode_steps = check_number("max_episode_steps", max_episode_steps, 1, 10**9, integer=True)
        self.max_episode_steps = max_episode_steps
        for key in ("render_mode", "reward_frame_size", "info_text", "base_url", "connect_timeout_s",
                    "message_timeout_s"):
            if kwargs.get(key) not in (None, False):
                raise ValueError(f"{key}={kwargs[key]!r} is not supported by the vector env; use single envs: "
                                 "gym.make_vec(..., vectorization_mode='sync'), or for SB3 a DummyVecEnv of "
                                 "gym.make envs (train_sb3.py --vec-env dummy)")
        for key, valid in SUPPORTED.items():
            value = kwargs.get(key, valid[0])
            if value not in valid:
                raise ValueError(f"{key}={value!r}: the vector env supports {list(valid)}; for others use "
                                 "gym.make_vec(..., vectorization_mode='sync')")
        given = autoreset_mode
        try:
            autoreset_mode = AutoresetMode(autoreset_mode)
        except ValueError:
            autoreset_mode = None
        if autoreset_mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP):
            raise ValueError(f"autoreset_mode={given!r}: choose AutoresetMode.NEXT_STEP ('NextStep') or "
                             "AutoresetMode.SAME_STEP ('SameStep'); DISABLED is not supported (use "
                             "reset(options={'reset_mask': ...}) with NEXT_STEP instead)")
        # The single env checks every argument and owns the spaces; the vector env reuses both.
        self.single = CarlaTrolleyEnv(scenario=scenario, **kwargs)
        self.num_envs = int(num_envs)
        self.metadata = {**self.metadata, "autoreset_mode": autoreset_mode}
        self.autoreset_mode = autoreset_mode
        self.single_observation_space = self.single.observation_space
        self.single_action_space = self.single.action_space
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.control = isinstance(self.single.action_type, ControlAction)
        self.images = isinstance(self.single.observation_type, DictObservation)
        assert self.images or isinstance(self.single.observation_type, StateObservation)
        self._config = check_config(self.single.scenario_config)
        self._generated = [is_generated(name) for name in self.single.scenarios]
        # a generated name's entry is its seed-0 layout, never run: each reset draws the row's own (_reset_rows)
        specs = [resolve_scenario(name, self._config, seed=0) for name in self.single.scenarios]
        for spec in specs:
            warn_ignored(spec.ignored)
        width = max([len(spec.walkers) for spec in specs] + [MAX_PEOPLE] * any(self._generated))
        self.batch = TrolleyBatch(specs, self.num_envs, width)
        self._seed = np.full(self.num_envs, -1, dtype=np.int64)  # each world's layout seed (generated), else -1
        self._ahead = np.zeros(self.num_envs, dtype=np.int64)  # resets whose layouts are drawn ahead, per world
        # resets ahead per world: N x depth near AHEAD_BATCH, all of them within half the layout cache
        self._depth = max(1, min(LOOKAHEAD, -(-AHEAD_BATCH // self.num_envs), LAYOUT_CACHE // (2 * self.num_envs)))
        self._terms = REWARD_TERMS[self.single.reward_mode]
        self._rngs: list[np.random.Generator | None] = [None] * self.num_envs
        self._steer = np.zeros(self.num_envs)  # applied steer (steer_smoothing), 0 after a reset
        self._autoreset = np.zeros(self.num_envs, dtype=bool)
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)  # steps since each sub-env's reset (TimeLimit)
        self._started = False

    # -- Gymnasium API ----------------------------------------------------------------------
    def reset(self, *, seed: int | Sequence[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset every sub-env (or those in ``options["reset_mask"]``).

        Args:
            seed: None, an int s (sub-env i is seeded with s + i, as Gymnasium's sync vector env
                does), or one seed (or None) per sub-env.
            options: Optional ``{"scenario": name}`` (one of the env's scenarios, for every reset
                sub-env) and ``{"reset_mask": bool (N,)}`` (reset only those sub-envs).

        Returns:
            ``(observations, info)``; info holds each reset sub-env's ``scenario`` name (with mask ``_scenario``).

        Raises:
            ValueError: A bad seed or option (naming it and what is valid).
        """
        options = dict(options or {})
        unknown = sorted(set(options) - {"scenario", "reset_mask"})
        if unknown:
            raise ValueError(f"reset options {unknown} are not supported; valid: ['reset_mask', 'scenario']")
        n = self.num_envs
        if seed is None or isinstance(seed, (int, np.integer)):
            seeds = [None] * n if seed is None else [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise ValueError(f"seed: expected None, an int or {n} seeds, got {len(seeds)}")
        mask = np.ones(n, dtype=bool) if "reset_mask" not in options else np.asarray(options["reset_mask"])
        if mask.shape != (n,) or mask.dtype != np.bool_:
            raise ValueError(f"options['reset_mask']: expected a bool array of shape ({n},), got "
                             f"{getattr(mask, 'dtype', type(mask))} of shape {getattr(mask, 'shape', None)}")
        if not mask.any():
            raise ValueError("options['reset_mask'] selects no sub-env; select at least one (or leave it out)")
        generators = {}
        for row in np.flatnonzero(mask).tolist():
            if seeds[row] is not None or self._rngs[row] is None:
                try:  # gymnasium.Env.reset seeds np_random this way (and checks the seed)
                    generators[row] = seeding.np_random(seeds[row])[0]
                except Exception as exc:
                    raise ValueError(f"seed={seeds[row]!r} (sub-env {row}): {exc}") from exc
        scenario = options.get("scenario")
        if scenario is not None and scenario not in self.single.scenarios:
            raise ValueError(f"options['scenario']={scenario!r}: the vector env runs {list(self.single.scenarios)}; "
                             "make it with scenario=[...] including this name")
        if not self._started and not mask.all():
            raise ValueError("options['reset_mask'] must select every sub-env at the first reset")
        rows = np.flatnonzero(mask)
        for row, generator in generators.items():
            self._rngs[row] = generator
            self._ahead[row] = 0  # a new generator: its layouts ahead are not drawn yet
        self._reset_rows(rows, scenario)
        self._started = True
        self._autoreset[rows] = False
        info: dict[str, Any] = {}
        self._reset_info(info, rows)
        return self._observe(), info

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env (autoresetting those whose episode ended, per ``autoreset_mode``).

        Args:
            actions: An element of `action_space`: int (N,) tool indices in [0, 3], or float (N, 2)
                ``[steer, throttle_or_brake]`` in [-1, 1].

        Returns:
            ``(observations, rewards float64 (N,), terminated bool (N,), truncated bool (N,), info)``.

        Raises:
            RuntimeError: Called before `reset`.
            ValueError: ``actions`` of the wrong shape, dtype or range (the message names the expected
                shape); nothing is changed.
        """
        if not self._started:
            raise RuntimeError("call reset() before step()")
        n, batch = self.num_envs, self.batch
        kind, throttle, brake, steer, direction, applied = self._parse(actions)
        resets = np.flatnonzero(self._autoreset)
        stepping = np.flatnonzero(~self._autoreset)
        before = batch.state.road_departure.copy()
        # the worlds that reset now run too (no copy of the others); the reset below overwrites them
        result = batch.decide(kind, throttle, brake, steer, 30.0, direction, self.single.ticks_per_action,
                              resetting=self._autoreset if len(resets) else None, check=False)  # _parse checked
        if applied is not None:
            self._steer[stepping] = applied[stepping]
        terms = self._terms(_Departure(before), _Departure(batch.state.road_departure), result.rubric_reward,
                            result.new_hits)
        rewards = np.zeros(n)
        for value in terms.values():  # in order, from 0: the bits of the single env's sum(terms.values())
            rewards = rewards + value
        terminated = batch.done.copy()
        stepped = ~self._autoreset
        self._elapsed += stepped
        truncated = np.zeros(n, dtype=bool)
        if self.max_episode_steps is not None:  # Gymnasium's TimeLimit on each sub-env
            truncated = stepped & ~terminated & (self._elapsed >= self.max_episode_steps)
        info: dict[str, Any] = {}
        for key, value in (("rubric_reward", result.rubric_reward), ("raw_reward", result.raw_reward),
                           ("new_hits", result.new_hits), ("ticks", result.ticks)):
            value[resets] = 0  # the resetting worlds' entries are masked out: Gymnasium's default value
            info[key], info["_" + key] = value, stepped.copy()
        info["reward_terms"] = {k: np.broadcast_to(v, (n,)).copy() for k, v in terms.items()}
        for value in info["reward_terms"].values():
            value[resets] = 0.0
        info["_reward_terms"] = stepped.copy()
        ended = np.flatnonzero(terminated & stepped)
        if len(ended):
            outcome = np.full(n, None, dtype=object)
            for row, value in zip(ended.tolist(), self.batch.outcomes(ended), strict=True):
                outcome[row] = value
            info["outcome"], info["_outcome"] = outcome, terminated & stepped
        if len(resets):
            self._reset_rows(resets, None)
            self._reset_info(info, resets)
            rewards[resets] = 0.0
            terminated[resets] = False
        finished = np.flatnonzero(terminated | truncated)
        if self.autoreset_mode == AutoresetMode.SAME_STEP and len(finished):
            final_obs = self._observe()
            done = terminated | truncated
            final_info = {}  # the finished step's info of the sub-envs that ended; theirs at top level is the reset's
            for key in [k for k in info if not k.startswith("_")]:
                final_info[key], final_info["_" + key] = info[key], info["_" + key] & done
                info["_" + key] = info["_" + key] & ~done
                if not info["_" + key].any():
                    del info[key], info["_" + key]
            self._reset_rows(finished, None)
            self._reset_info(info, finished)
            obs = self._observe()
            info["final_obs"], info["_final_obs"] = self._split(final_obs, finished), done.copy()
            info["final_info"], info["_final_info"] = final_info, done.copy()
            self._autoreset[:] = False
        else:
            obs = self._observe()
            self._autoreset = terminated | truncated
        return obs, rewards, terminated, truncated, info

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle (a checkpoint): the layouts drawn ahead lived in the saving process's cache, so none are ahead."""
        self.__dict__.update(state)
        self._ahead[:] = 0

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release (the worlds are arrays)."""

    # -- helpers ------------------------------------------------------------------------------
    def _reset_info(self, info: dict[str, Any], rows: np.ndarray) -> None:
        """Add the reset info of sub-envs ``rows`` (each one's ``scenario`` name) to a vector info dict."""
        if "scenario" not in info:
            info["scenario"], info["_scenario"] = np.full(self.num_envs, None, dtype=object), np.zeros(
                self.num_envs, dtype=bool)
        names = self.single.scenarios
        for row, index in zip(rows.tolist(), self.batch.scenario[rows].tolist(), strict=True):
            info["scenario"][row] = names[index]
        info["_scenario"][rows] = True
        seeded = rows[self._seed[rows] >= 0]
        if len(seeded):
            if "scenario_seed" not in info:
                info["scenario_seed"] = np.zeros(self.num_envs, dtype=np.int64)
                info["_scenario_seed"] = np.zeros(self.num_envs, dtype=bool)
            info["scenario_seed"][seeded] = self._seed[seeded]
            info["_scenario_seed"][seeded] = True

    def _reset_rows(self, rows: np.ndarray, scenario: str | None) -> None:
        """New episodes in ``rows``: each sub-env draws from its ``np_random`` as a single env's reset does."""
        names = self.single.scenarios
        index = np.zeros(len(rows), dtype=np.int64)
        own: list[ScenarioSpec | None] = [None] * len(rows)
        for k, row in enumerate(rows.tolist()):
            rng = self._rngs[row]
            if rng is None:
                rng = self._rngs[row] = seeding.np_random()[0]
            if scenario is not None:
                index[k] = names.index(scenario)
            elif len(names) > 1:
                index[k] = int(rng.integers(len(names)))
            seed = int(rng.integers(2**31 - 1))  # the single env's backend seed: a generated layout's seed
            self._seed[row] = seed if self._generated[index[k]] else -1
        if any(self._generated):
            self._draw_ahead(rows, index)
            for k, row in enumerate(rows.tolist()):
                if self._generated[index[k]]:
                    own[k] = resolve_scenario(names[index[k]], self._config, int(self._seed[row]))
        self.batch.reset(rows, index, own if any(self._generated) else None)
        self._steer[rows] = 0.0
        self._elapsed[rows] = 0

    def _draw_ahead(self, rows: np.ndarray, index: np.ndarray) -> None:
        """Draw the layouts of the generated resets of ``rows`` now, with those of resets to come, all together.

        `carla_gym.sim.generated.draw_layouts` draws many layouts for about the cost of one, and a
        world's next seeds are known: they are its ``np_random``'s next draws (a copy of it is drawn
        from, as `_reset_rows` will). Where a world has no layouts ahead left, every world with fewer
        than half of `LOOKAHEAD` left gets its next ones. A guess gone wrong (an ``options["scenario"]``)
        only costs a draw now; no result depends on it.
        """
        names, wanted = self.single.scenarios, {}
        for k, row in enumerate(rows.tolist()):
            if self._generated[index[k]]:
                wanted.setdefault(GENERATED_NAMES[names[index[k]]], []).append(int(self._seed[row]))
        self._ahead[rows] -= 1
        if (self._ahead[rows] < 0).any():
            for row in np.flatnonzero(self._ahead < self._depth // 2).tolist():
                rng = copy.deepcopy(self._rngs[row])
                for _ in range(self._depth):
                    i = int(rng.integers(len(names))) if len(names) > 1 else 0
                    seed = int(rng.integers(2**31 - 1))
                    if self._generated[i]:
                        wanted.setdefault(GENERATED_NAMES[names[i]], []).append(seed)
                self._ahead[row] = self._depth
        for split, seeds in wanted.items():
            draw_layouts(split, seeds)

    def _parse(self, actions: Any):
        """Tool calls of a batch of actions (checked): kind, throttle, brake, steer, direction, applied steer."""
        n = self.num_envs
        a = np.asarray(actions)
        if not self.control:
            integral = np.issubdtype(a.dtype, np.integer) or (
                np.issubdtype(a.dtype, np.floating) and bool(np.all(np.isfinite(a) & (a == np.round(a)))))
            if a.shape != (n,) or not integral:
                raise ValueError(f"actions: expected integers of shape ({n},) (tool indices in [0, "
                                 f"{len(S.TOOL_ACTIONS) - 1}]; floats with whole values are taken, as the single env "
                                 f"takes them), got {a.dtype} of shape {a.shape}")
            bad = np.flatnonzero((a < 0) | (a >= len(S.TOOL_ACTIONS)))
            if len(bad):
                names = ", ".join(f"{i}={t}" for i, t in enumerate(S.TOOL_ACTIONS))
                raise ValueError(f"actions[{bad[0]}]={a[bad[0]]}: tool indices must be in "
                                 f"[0, {len(S.TOOL_ACTIONS) - 1}] ({names})")
            a = a.astype(np.int64)
            return _TOOL_KIND[a], 0.0, _TOOL_BRAKE[a], 0.0, _TOOL_DIRECTION[a], None
        if a.shape != (n, 2) or not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_):
            raise ValueError(f"actions: expected numbers of shape ({n}, 2) ([steer, throttle_or_brake] per sub-env), "
                             f"got {a.dtype} of shape {a.shape}")
        a = a.astype(np.float64)
        inside = np.all((a >= -1.0) & (a <= 1.0), axis=1)  # also refuses NaN
        if not inside.all():
            row = int(np.flatnonzero(~inside)[0])
            raise ValueError(f"actions[{row}]={a[row].tolist()}: both entries must be in [-1, 1]")
        steer = a[:, 0].copy()
        throttle, brake = split_pedal(a[:, 1])
        applied = None
        smoothing = self.single.steer_smoothing
        if smoothing:
            steer = applied = S.smooth_steer(self._steer, steer, smoothing, self.single.ticks_per_action * C.DT)
        return np.full(n, rules.KIND["control"]), throttle, brake, steer, 0, applied

    def _observe(self) -> Any:
        """Observations of every world (the single env's layout, `carla_gym.envs.spaces.pack_state`)."""
        batch, s = self.batch, self.batch.state
        lane = batch.lanes()
        forward, right, present = batch.nearest_actors(S.MAX_ACTORS)
        steer = self._steer if self.single.steer_smoothing else None
        left, right_lane = physics.lane_flags(lane, s.lane_lo, s.lane_hi)
        state = S.pack_state(s.ego.speed * C.KMH_PER_MS, s.ego.y, s.ego.yaw, left, right_lane, s.road_departure,
                             s.first_hit >= 0, physics.ticks_left(s.tick, s.horizon, NUMPY), forward, right, present,
                             steer)
        if not self.images:
            return state
        height, width = self.single.image_size
        specs = batch.row_specs.tolist()
        mask = np.arange(s.walker_x.shape[1]) < s.walker_count[:, None]
        image = render_batch(self.single.image_view, width, height, s.ego.x, s.ego.y, s.ego.yaw, s.walker_x,
                             s.walker_y, mask, [spec.road for spec in specs],
                             np.array([spec.camera.fov for spec in specs]))
        return {"image": image, "state": state}

    def _split(self, obs: Any, rows: np.ndarray) -> np.ndarray:
        """The observations of ``rows`` as an object array of length N (None elsewhere), Gymnasium's final_obs."""
        out = np.full(self.num_envs, None, dtype=object)
        for row in rows.tolist():
            out[row] = {k: v[row] for k, v in obs.items()} if isinstance(obs, dict) else obs[row]
        return out
