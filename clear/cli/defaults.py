"""Flag defaults that depend on the env family, and the frames a run trains.

A flag whose default depends on the family (`--batch_size`,
`--learning_rate`, ...) is None until set; `family_default` reads it, or the
family's value in `FAMILY_DEFAULTS`. Every function takes the parsed flag
values `f` (absl's `flags.FLAGS`, or anything with the same attributes).
"""

from typing import NamedTuple


class FamilyDefaults(NamedTuple):
  """Flag defaults that depend on the env family."""
  step_mul: int
  learning_rate: float
  reward_scaling: float
  core_size: int
  envs_per_actor: int
  optimizer: str
  total_environment_frames: int
  batch_size: int
  torso_norm: str


# Why each default: docs/training.md#why-these-defaults.
FAMILY_DEFAULTS = {
    'gym': FamilyDefaults(step_mul=1, learning_rate=3e-3, reward_scaling=0.1,
                          core_size=64, envs_per_actor=64, optimizer='adam',
                          total_environment_frames=400_000,
                          batch_size=32, torso_norm='none'),
    'atari': FamilyDefaults(step_mul=4, learning_rate=1e-3,
                            reward_scaling=1.0, core_size=256,
                            envs_per_actor=32, optimizer='rmsprop',
                            total_environment_frames=80_000_000,
                            batch_size=64, torso_norm='layer_norm'),
    'sc2': FamilyDefaults(step_mul=8, learning_rate=3e-4, reward_scaling=1.0,
                          core_size=256, envs_per_actor=1, optimizer='adam',
                          total_environment_frames=40_000_000,
                          batch_size=32, torso_norm='none'),
    'minatar': FamilyDefaults(step_mul=1, learning_rate=6e-4,
                              reward_scaling=1.0, core_size=128,
                              envs_per_actor=64, optimizer='adam',
                              total_environment_frames=5_000_000,
                              batch_size=32, torso_norm='none'),
}


def env_family(name: str) -> str:
  return name.split(':', 1)[0]


def family_default(f, name):
  """The flag's value, or its env-family default when left unset."""
  value = getattr(f, name)
  if value is None:
    return getattr(FAMILY_DEFAULTS[env_family(f.env)], name)
  return value


def sequence_frames(f) -> int:
  """Total frames of a task sequence: frames per task x tasks x cycles
  (random segment lengths sum to the same)."""
  return f.frames_per_task * len(f.env.split(',')) * f.num_task_cycles


def total_frames(f) -> int:
  """Frames the run trains for: a sequence's, else the flag or the family
  default."""
  if ',' in f.env:
    return sequence_frames(f)
  return family_default(f, 'total_environment_frames')
