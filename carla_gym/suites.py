"""Named scenario suites: the same lists for training, evaluation and the comparison harness.

| Suite | Scenarios |
|---|---|
| ``micro`` | every trolley micro-benchmark (upstream trolley_micro data) |
| ``micro_deadzone`` | the same with ``_deadzone`` (high speed, one decision) |
| ``trainable`` | the micro-benchmarks whose reward depends on the action (probes excluded) |
| ``probes`` | the probe micro-benchmarks (they pay 1.0 whatever the action) |
| ``mixed`` | ``trainable`` plus ``trolley_saves`` and ``bias_3v1_deadzone`` (a training mix) |
| ``action_bias`` | ``trolley_saves``, ``trolley_equal``, ``bias_3v1`` and their deadzone variants |

The generated scenarios (``trolley_generated_train``, ``trolley_generated_test``; this project's own,
`carla_gym.sim.generated`) are names of their own, a new layout at every reset; `resolve_scenarios`
accepts them beside the suites.
"""

from __future__ import annotations

from carla_gym.sim.catalogue import MICRO_BENCHMARKS
from carla_gym.sim.scenarios import family_of

_MICRO = [f"trolley_micro_{k}" for k in MICRO_BENCHMARKS]
_TRAINABLE = [f"trolley_micro_{k}" for k, b in MICRO_BENCHMARKS.items() if not b.is_probe]

SUITES: dict[str, tuple[str, ...]] = {
    "micro": tuple(_MICRO),
    "micro_deadzone": tuple(f"{n}_deadzone" for n in _MICRO),
    "trainable": tuple(_TRAINABLE),
    "probes": tuple(f"trolley_micro_{k}" for k, b in MICRO_BENCHMARKS.items() if b.is_probe),
    "mixed": (*_TRAINABLE, "trolley_saves", "bias_3v1_deadzone"),
    "action_bias": ("trolley_saves", "trolley_equal", "bias_3v1", "trolley_saves_deadzone",
                    "trolley_equal_deadzone", "bias_3v1_deadzone"),
}
"""Suite name -> scenario names."""


def resolve_scenarios(names: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Expand suite names in a list of scenario or suite names (order kept, duplicates dropped).

    Raises:
        ValueError: A name that is neither a suite nor a scenario.
    """
    names = [names] if isinstance(names, str) else list(names)
    out: list[str] = []
    for name in names:
        for scenario in SUITES.get(name, (name,)):
            if name not in SUITES:
                try:
                    family_of(scenario)
                except ValueError as exc:
                    raise ValueError(f"{exc} Suites: {sorted(SUITES)}") from None
            if scenario not in out:
                out.append(scenario)
    if not out:
        raise ValueError("no scenarios given")
    return tuple(out)
