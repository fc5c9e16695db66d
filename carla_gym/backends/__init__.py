"""Simulation backends behind `CarlaTrolleyEnv`: one interface, several simulators.

* `EmbeddedBackend` (default): this package's pure Python/numpy simulator, in-process.
* A remote OpenEnv CARLA backend implements the same `Backend` interface over the wire.
"""

from carla_gym.backends.base import Backend, Snapshot, StepReport
from carla_gym.backends.embedded import EmbeddedBackend

__all__ = ["Backend", "EmbeddedBackend", "Snapshot", "StepReport"]
