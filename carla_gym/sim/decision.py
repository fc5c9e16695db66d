"""One decision: apply a tool call, then tick until the batch or the episode ends.

The one loop behind `carla_gym.backends.EmbeddedBackend.step` (a Gymnasium decision of
``ticks_per_action`` ticks) and `carla_gym.server.environment.CarlaEnvironment.step` (an
OpenEnv step, with the ``metadata={"ticks": n}`` batching extension), so both sum rewards,
hits and distance the same way, tick for tick.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass

from carla_gym.sim import physics, rules
from carla_gym.sim.world import TickResult, ToolCall, World


@dataclass(frozen=True, slots=True)
class Decision:
    """What the ticks of one decision produced.

    Attributes:
        ticks: Ticks simulated (fewer than asked when the episode ended; 0 for ``capture_image``).
        rubric_reward: Sum of the ticks' upstream rubric rewards (the terminal reward, or 0).
        raw_reward: Upstream raw reward of the last tick (0.0 without ticks).
        raw_total: Sum of the ticks' raw rewards (what as many single upstream steps add up to).
        new_hits: Pedestrians hit for the first time during these ticks.
        distance: Distance the ego centre travelled, summed tick by tick [m].
    """

    ticks: int
    rubric_reward: float
    raw_reward: float
    raw_total: float
    new_hits: int
    distance: float


def check_ticks(ticks) -> None:
    """Refuse a tick count that is not an integer >= 0 (Python or numpy; booleans are refused).

    The rule of every "apply, then tick n" step: `decide` and
    `carla_gym.sim.navigation.episode.NavEpisode.step`.

    Raises:
        ValueError: Naming ``ticks`` and the valid range.
    """
    if isinstance(ticks, bool) or not isinstance(ticks, numbers.Integral) or ticks < 0:
        raise ValueError(f"ticks={ticks!r}: must be an integer >= 0")


def decide(world: World, call: ToolCall, ticks: int = 1,
           on_tick: Callable[[TickResult], None] | None = None) -> Decision:
    """Apply ``call`` to ``world``, then tick it up to ``ticks`` times, stopping when the episode ends.

    ``capture_image`` reads the scene only: it is applied (so a finished episode still refuses
    it, as `World.apply` refuses every call then) and runs no tick.

    Args:
        world: The running world; changed in place.
        call: The tool call.
        ticks: Ticks to simulate after the call, an integer >= 0 (Python or numpy).
        on_tick: Called with each tick's `TickResult` right after that tick (the OpenEnv server
            records its collision entries here, at the speed of the tick that hit).

    Returns:
        The `Decision` summed over the ticks run.

    Raises:
        ValueError: ``ticks`` is not an integer >= 0 (naming it), or the call is invalid for the
            world's state (see `World.apply`; nothing is changed).
        carla_gym.sim.EpisodeFinishedError: The episode is already done.
    """
    check_ticks(ticks)
    world.apply(call)
    state = world.state
    distance = 0.0

    def tick() -> TickResult:
        nonlocal distance
        before = state.ego
        result = world.tick()
        distance += math.hypot(state.ego.x - before.x, state.ego.y - before.y)
        return result

    done_ticks, rubric, raw, raw_total, hits = tick_loop(
        tick, physics.decision_ticks(rules.KIND[call.action_type], int(ticks)), on_tick)
    return Decision(done_ticks, rubric, raw, raw_total, hits, distance)


def tick_loop(tick: Callable[[], TickResult], ticks: int,
              on_tick: Callable[[TickResult], None] | None = None) -> tuple[int, float, float, float, int]:
    """Tick one world up to ``ticks`` times, stopping when its episode ends, and sum what the ticks produced.

    The one loop of a decision of one world: `decide` (a `World`) and the row-by-row path of
    `carla_gym.sim.batch.TrolleyBatch.decide` use it; the batch's array path sums the same way.

    Args:
        tick: Runs one tick and returns its `TickResult`.
        ticks: Ticks at most (`carla_gym.sim.physics.decision_ticks`).
        on_tick: Called with each tick's result right after it.

    Returns:
        ``(ticks run, rubric reward sum, last raw reward (0.0 without ticks), raw reward sum, new hits)``.
    """
    done_ticks, rubric, raw, raw_total, hits = 0, 0.0, 0.0, 0.0, 0
    for _ in range(ticks):
        result = tick()
        done_ticks += 1
        rubric += result.rubric_reward
        raw = result.raw_reward
        raw_total += raw
        hits += result.new_hits
        if on_tick is not None:
            on_tick(result)
        if result.done:
            break
    return done_ticks, rubric, raw, raw_total, hits
