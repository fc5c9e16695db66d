"""The embedded backend: runs `carla_gym.sim.World` in-process."""

from __future__ import annotations

import numpy as np

from carla_gym.backends.base import Backend, StepReport
from carla_gym.sim.decision import decide
from carla_gym.sim.describe import scene_prompt
from carla_gym.sim.render import render
from carla_gym.sim.scenarios import is_generated, resolve_scenario, warn_ignored
from carla_gym.sim.snapshot import Snapshot, snapshot_of
from carla_gym.sim.validate import check_config, check_seed
from carla_gym.sim.world import ToolCall, World


class EmbeddedBackend(Backend):
    """Pure Python/numpy simulation of the upstream trolley scenarios (no CARLA, no GPU).

    The simulation itself is deterministic: the same scenario and actions give bit-identical
    results, so ``seed`` is checked (as the OpenEnv server checks it) and has no effect, except
    on the generated family (``trolley_generated_train``/``_test``), whose layout is drawn from it
    (`carla_gym.sim.generated.draw_layout`; such a reset needs a seed).

    ``scenario_config`` goes through `carla_gym.sim.validate.json_safe` first, as it does on its
    way to an OpenEnv server, so numpy numbers are accepted and unsendable values (NaN, sets,
    non-string keys) refused alike on both backends.

    Args:
        text: Whether snapshots carry the per-decision ``description`` (`carla_gym.sim.snapshot.snapshot_of`).
    """

    def __init__(self, text: bool = True) -> None:
        self.text = text
        self.world: World | None = None
        self._prompt = ""
        self._resolved: dict = {}

    def _resolve(self, scenario: str, scenario_config: dict | None, seed: int | None = None) -> tuple:
        """Resolved spec and its prompt, cached per (name, config, seed of a generated name): specs are immutable.

        The key holds each value's type, so ``True``, ``1`` and ``1.0`` are validated apart.
        """
        scenario_config = check_config(scenario_config)
        seed = seed if is_generated(scenario) else None
        try:
            items = sorted(scenario_config.items())
            key = (scenario, seed, tuple((k, type(v).__name__, v) for k, v in items))
            hash(key)
        except TypeError:  # unhashable (lists): resolve (and fail) without caching
            spec = resolve_scenario(scenario, scenario_config, seed)
            return spec, scene_prompt(spec)
        if key not in self._resolved:
            spec = resolve_scenario(scenario, scenario_config, seed)
            if len(self._resolved) >= 256:
                self._resolved.clear()
            self._resolved[key] = (spec, scene_prompt(spec))
        return self._resolved[key]

    def reset(self, scenario: str, seed: int | None = None, scenario_config: dict | None = None) -> Snapshot:
        """See `Backend.reset`; warns (`ConfigIgnoredWarning`) about keys that change nothing here.

        Raises:
            ValueError: Unknown scenario, invalid ``scenario_config`` or ``seed`` (or none for a generated
                scenario).
            TypeError: ``scenario_config`` is not a dict.
        """
        seed = check_seed(seed)
        spec, self._prompt = self._resolve(scenario, scenario_config, seed)
        self.world = World(spec)
        warn_ignored(spec.ignored)
        return self.snapshot()

    def _require_world(self) -> World:
        if self.world is None:
            raise RuntimeError("call reset() before step() or render()")
        return self.world

    def step(self, call: ToolCall, ticks: int = 1) -> StepReport:
        """See `Backend.step`: one `carla_gym.sim.decision.decide`."""
        decision = decide(self._require_world(), call, ticks)
        return StepReport(self.snapshot(), decision.ticks, decision.rubric_reward, decision.raw_reward,
                          decision.new_hits)

    def snapshot(self) -> Snapshot:
        """The current scene as a `Snapshot`."""
        return snapshot_of(self._require_world(), self._prompt, self.text)

    def render(self, view: str, width: int, height: int, channels_first: bool = False) -> np.ndarray:
        """See `Backend.render`."""
        return render(self._require_world(), view, width, height, channels_first)
