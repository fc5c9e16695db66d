"""Simulation backends behind `CarlaTrolleyEnv`: one interface, several simulators.

* `base` -- the `Backend` interface: what the Gymnasium env needs from a simulator.
* `embedded` -- `EmbeddedBackend` (default): this package's pure Python/numpy simulator, in-process.
* `openenv` -- the same interface on a remote OpenEnv CARLA server, over the wire.
"""

from carla_gym.backends.base import Backend, Snapshot, StepReport
from carla_gym.backends.embedded import EmbeddedBackend

__all__ = ["Backend", "EmbeddedBackend", "Snapshot", "StepReport"]
