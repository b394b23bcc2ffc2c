"""Environments for clear: Atari (ALE), gymnasium, MinAtar and StarCraft II.

`envs.make('atari:Pong', num_envs=8, seed=0)` returns a batched,
auto-resetting environment whose `reset`/`step` return
`clear.types.StepOutput`s of `[B, ...]` numpy arrays; see `envs.registry`
and `envs.batched`. A comma-separated name is a task sequence for continual
learning (`envs.multitask`).
"""

from envs import multitask
from envs import registry
from envs.batched import BatchedEnv
from envs.recovery import CrashRecoveryEnv
from envs.recovery import EnvCrashError
from envs.single import SnapshotUnsupported

__all__ = ['BatchedEnv', 'CrashRecoveryEnv', 'EnvCrashError',
           'SnapshotUnsupported', 'make']


def make(name: str, num_envs: int = 1, seed: int = 0,
         **options) -> BatchedEnv:
  """Builds `num_envs` auto-resetting envs of `name`, batched.

  Args:
    name: '<family>:<game>' (see `envs.registry.make`), or task names
      joined by commas: a task sequence, whose extra option `task` is the
      index of the active task (see `envs.multitask.make`).
    num_envs: batch size B.
    seed: seed of the first environment (the others take seed + 1, ...).
    **options: the family's options (see each family's `DEFAULT_OPTIONS`)
      and `envs.registry.COMMON_OPTIONS`.

  Returns:
    A `BatchedEnv` (a `multitask.MultiTaskBatchedEnv` for a sequence)
    whose `reset`/`step` return `[B, ...]` StepOutputs.

  Raises:
    ValueError: an unknown family, game, option or task.
  """
  if multitask.is_sequence(name):
    return multitask.make(name, num_envs, seed, **options)
  return registry.make(name, num_envs, seed, **options)
