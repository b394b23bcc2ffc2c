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


# gym: dense rewards (CartPole pays 1 a step) make values ~100, whose squared
# baseline error would swamp the policy gradient; scaling by 0.1 fixes that.
# atari: IMPALA's Atari settings (RMSProp, decay 0.99) but with epsilon 1e-5
# (--rmsprop_epsilon; IMPALA's 0.01 reached +18 on Pong at 25M frames, 1e-5
# at 15M: see the README); 400k frames would decay the learning rate to 0
# before anything is learned. The rate is 1e-3 with the torso's linear layer
# layer-normalised (--torso_norm): one rate of 1e-3 without the norm learned
# Pong sooner on seed 0 but killed that layer's ReLU units on seed 1, as did
# 8e-4; with the norm both seeds reached +18 sooner than 6e-4 without it
# (8.1M and 12.2M frames against 15.2M and 14.4M; the README's Pong
# results). Atari batches hold 64 unrolls, decayed over 80M frames: batches
# of 32 plateaued at +20.0 on 40M frames, and on 80M frames killed the
# torso's convolutions on one seed of two; with 64 both seeds reached +18 by
# 12M frames and settled above +20. Batches of 32 for the other families;
# 16 on Atari learned Pong sooner on one seed and not at all in 10M frames
# on another (the README's Pong results).
# minatar: MinAtar's network (an LSTM of 128 after its 128-unit layer) and
# its 5M-frame budget. MinAtar's own actor-critic updates on every single
# transition with bias-corrected RMSProp (decay 0.999) at 2^-11 = 4.9e-4,
# in effect Adam without momentum; a batch of 32 x 20 steps averages far
# more noise away, so Adam at a slightly larger 6e-4 (decayed to 0, as in
# every family). Rewards are small integers: no scaling. 64 envs per actor:
# one inference call costs about as much for 64 boards as for 32, so the
# actor's frames per second nearly double.
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
  """Total frames of a task sequence: frames per task x tasks x cycles."""
  return f.frames_per_task * len(f.env.split(',')) * f.num_task_cycles


def total_frames(f) -> int:
  """Frames the run trains for: a sequence's, else the flag or the family
  default."""
  if ',' in f.env:
    return sequence_frames(f)
  return family_default(f, 'total_environment_frames')
