"""The unbatched environment interface that every family implements.

`envs.batched.BatchedEnv` turns a list of these into the batched,
auto-resetting environment that the rest of clear uses. A single env only
knows about one episode at a time: it never resets itself and keeps no
episode statistics.
"""

import abc
from typing import Dict, NamedTuple

import numpy as np

from clear import types


class Transition(NamedTuple):
  """What `SingleEnv.step` returns.

  Attributes:
    observation: dict name -> array (shapes from the observation spec). May
      alias internal buffers: valid only until the next `step` / `reset`.
    reward: float, summed over the raw frames of this agent step.
    terminated: bool, the episode really ended.
    truncated: bool, the episode was cut (time limit); never set together
      with `terminated`.
    frames: int, raw frames (game steps) this agent step consumed.
  """
  observation: dict
  reward: float
  terminated: bool
  truncated: bool
  frames: int


class SnapshotUnsupported(NotImplementedError):
  """The environment cannot save or restore its state."""


class SingleEnv(abc.ABC):
  """One environment instance, unbatched."""

  @property
  @abc.abstractmethod
  def spec(self) -> types.EnvSpec:
    """Observation and action specs, without batch dimension."""

  @abc.abstractmethod
  def reset(self) -> dict:
    """Starts a new episode and returns its first observation."""

  @abc.abstractmethod
  def step(self, action: dict) -> Transition:
    """Applies `action` (dict name -> scalar, or array for continuous)."""

  def get_state(self) -> Dict[str, np.ndarray]:
    """Everything that decides the env's future, as named numpy arrays.

    With `set_state` this lets a resumed run continue the same episodes
    exactly (see `clear.snapshot`; JSON values as 0-d unicode arrays).

    Raises:
      SnapshotUnsupported: the env cannot be captured (the default).
    """
    raise SnapshotUnsupported(
        f'{type(self).__name__} ({self.spec.name}) cannot save its state; a '
        'resumed run starts fresh episodes.')

  def set_state(self, state: Dict[str, np.ndarray]):
    """Restores what `get_state` returned (on an env built the same way)."""
    del state
    raise SnapshotUnsupported(
        f'{type(self).__name__} ({self.spec.name}) cannot restore a state.')

  def close(self):
    """Releases the environment's resources."""
