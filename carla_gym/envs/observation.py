"""Observation types of `CarlaTrolleyEnv`: what the agent sees of a snapshot (HighwayEnv style).

An observation type owns the observation space and turns each simulator `Snapshot` into an
observation; the env never branches on ``observation_mode``. `OBSERVATION_TYPES` maps each
``observation_mode`` name to its class:

| ``observation_mode`` | Class | Space |
|---|---|---|
| ``"state"`` | `StateObservation` | the state vector, ``Box`` float32 (32,) or (33,) (`carla_gym.envs.spaces`) |
| ``"dict"`` | `DictObservation` | ``Dict(image=Box uint8 (3, H, W), state=<the state vector>)`` |

The state vector's entry 32 (the applied steer, with ``steer_smoothing``) comes from the env's
action type (`carla_gym.envs.action.ActionType.applied_steer`). To add a type, subclass
`ObservationType` (``space``, ``observe``; ``views`` if it renders cameras) and register it:
``OBSERVATION_TYPES["mine"] = MyObservation``; then ``gym.make("CarlaTrolley-v0",
observation_mode="mine")`` uses it. The constructor receives the env, whose arguments and
action type are set by then; ``observe`` may render through ``env.backend``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

import numpy as np
from gymnasium import spaces

from carla_gym.envs import spaces as S
from carla_gym.sim.snapshot import Snapshot

if TYPE_CHECKING:
    from carla_gym.envs.trolley import CarlaTrolleyEnv

ObsType = np.ndarray | dict[str, np.ndarray]
"""An observation of `CarlaTrolleyEnv`: the float32 state vector, or ``{"image": uint8 (3, H, W), "state": ...}``."""


class ObservationType(abc.ABC):
    """What the agent observes: a space and the observation of each snapshot.

    Args:
        env: The env, with its constructor arguments and ``action_type`` set.
    """

    views: tuple[str, ...] = ()
    """Camera views `observe` renders (`carla_gym.sim.render.VIEWS`); the env checks that its backend has them."""

    def __init__(self, env: CarlaTrolleyEnv) -> None:
        self.env = env

    @abc.abstractmethod
    def space(self) -> spaces.Space:
        """The observation space (built once by the env)."""

    @abc.abstractmethod
    def observe(self, snapshot: Snapshot) -> ObsType:
        """The observation of ``snapshot`` (the scene the backend is in now), inside `space`."""


class StateObservation(ObservationType):
    """The state vector alone (`carla_gym.envs.spaces`), with no rendering cost."""

    def space(self) -> spaces.Box:
        """``Box`` float32 of shape (32,), or (33,) when the action type observes its applied steer."""
        return S.state_space(steer=self.env.action_type.applied_steer is not None)

    def observe(self, snapshot: Snapshot) -> np.ndarray:
        """float32 (32,) or (33,): `carla_gym.envs.spaces.state_vector`."""
        return S.state_vector(snapshot, self.env.action_type.applied_steer)


class DictObservation(StateObservation):
    """``{"image": uint8 (3, image_height, image_width), "state": the state vector}``.

    The image is the env's ``image_view`` camera (front by default), channel-first.
    """

    def __init__(self, env: CarlaTrolleyEnv) -> None:
        super().__init__(env)
        self.views = (env.image_view,)

    def space(self) -> spaces.Dict:
        """``Dict(image=Box(0, 255, (3, H, W), uint8), state=StateObservation.space())``."""
        return spaces.Dict({"image": spaces.Box(0, 255, shape=(3, *self.env.image_size), dtype=np.uint8),
                            "state": super().space()})

    def observe(self, snapshot: Snapshot) -> dict[str, np.ndarray]:
        """The camera frame, rendered by the backend, and the state vector."""
        height, width = self.env.image_size
        image = self.env.backend.render(self.env.image_view, width, height, channels_first=True)
        return {"image": image, "state": super().observe(snapshot)}


OBSERVATION_TYPES: dict[str, type[ObservationType]] = {"dict": DictObservation, "state": StateObservation}
"""``observation_mode`` -> observation type class; add an entry to add a mode (module docstring)."""
