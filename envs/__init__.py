"""Environments for clear: Atari (ALE), gymnasium, MinAtar and StarCraft II.

`envs.make('atari:Pong', num_envs=8, seed=0)` returns a batched,
auto-resetting environment whose `reset`/`step` return
`clear.types.StepOutput`s of `[B, ...]` numpy arrays; see `envs.registry`
and `envs.batched`.
"""

from envs.batched import BatchedEnv
from envs.recovery import CrashRecoveryEnv
from envs.recovery import EnvCrashError
from envs.registry import make
from envs.single import SnapshotUnsupported

__all__ = ['BatchedEnv', 'CrashRecoveryEnv', 'EnvCrashError', 'SnapshotUnsupported',
           'make']
