"""Hand-built EnvSpecs and random batches for agent tests and benchmarks.

T is time, B is batch. The specs mimic the environment families (Atari,
classic control, SC2) without importing `envs`.
"""

import collections
from typing import Optional, Sequence

import numpy as np
import tensorflow as tf

from clear import types


def atari_spec(num_actions: int = 6, step_mul: Optional[int] = None,
               frame_shape=(84, 84, 4)) -> types.EnvSpec:
  """'frame' uint8 `[84, 84, 4]`, 'action' DiscreteSpec(num_actions)."""
  actions = collections.OrderedDict(action=types.DiscreteSpec(num_actions))
  if step_mul:
    actions[types.STEP_MUL_KEY] = types.DiscreteSpec(step_mul)
  return types.EnvSpec(
      collections.OrderedDict(frame=types.ArraySpec(frame_shape, np.uint8)),
      actions, 'atari:Test')


def control_spec(obs_size: int = 4, num_actions: int = 2,
                 step_mul: Optional[int] = None) -> types.EnvSpec:
  """'vector' float32 `[obs_size]`, 'action' DiscreteSpec(num_actions)."""
  actions = collections.OrderedDict(action=types.DiscreteSpec(num_actions))
  if step_mul:
    actions[types.STEP_MUL_KEY] = types.DiscreteSpec(step_mul)
  return types.EnvSpec(
      collections.OrderedDict(vector=types.ArraySpec((obs_size,), np.float32)),
      actions, 'gym:Test')


def sc2_spec(screen: int = 8, minimap: int = 6, num_functions: int = 10,
             screen_channels: int = 3, minimap_channels: int = 2,
             step_mul: Optional[int] = None) -> types.EnvSpec:
  """An SC2LE-like spec: masked function head, spatial and small heads."""
  obs = collections.OrderedDict(
      screen=types.ArraySpec((screen, screen, screen_channels), np.float16),
      minimap=types.ArraySpec((minimap, minimap, minimap_channels), np.uint8),
      player=types.ArraySpec((11,), np.float32),
      available_actions=types.ArraySpec((num_functions,), np.float32))
  actions = collections.OrderedDict(
      function=types.DiscreteSpec(num_functions,
                                  mask_key='available_actions'),
      screen=types.DiscreteSpec(screen * screen, spatial=(screen, screen)),
      minimap=types.DiscreteSpec(minimap * minimap,
                                 spatial=(minimap, minimap)),
      queued=types.DiscreteSpec(2),
      screen2=types.DiscreteSpec(screen * screen, spatial=(screen, screen)),
      select_add=types.DiscreteSpec(2))
  if step_mul:
    actions[types.STEP_MUL_KEY] = types.DiscreteSpec(step_mul)
  return types.EnvSpec(obs, actions, 'sc2:Test')


def random_observation(spec: types.EnvSpec, shape: Sequence[int],
                       rng: np.random.Generator) -> dict:
  """Observations of leading `shape`; masks keep choice 0 available."""
  mask_keys = {s.mask_key for s in spec.action_spec.values()
               if getattr(s, 'mask_key', None)}
  obs = {}
  for key, s in spec.observation_spec.items():
    full = tuple(shape) + tuple(s.shape)
    if key in mask_keys:
      x = (rng.random(full) < 0.5).astype(s.dtype)
      x[..., 0] = 1
    elif np.dtype(s.dtype) == np.uint8:
      x = rng.integers(0, 256, full, dtype=np.uint8)
    else:
      x = rng.normal(size=full).astype(s.dtype) * 3
    obs[key] = x
  return obs


def random_step_output(spec: types.EnvSpec, shape: Sequence[int],
                       rng: np.random.Generator, done_prob: float = 0.2,
                       truncated_share: float = 0.0) -> types.StepOutput:
  """A `StepOutput` of numpy arrays with leading `shape` (`[B]`, `[T, B]`);
  about `truncated_share` of the episode ends are truncations."""
  shape = tuple(shape)
  done = rng.random(shape) < done_prob
  truncated = done & (rng.random(shape) < truncated_share)
  return types.StepOutput(
      reward=rng.normal(size=shape).astype(np.float32) * 2,
      info=types.EpisodeInfo(
          episode_return=np.zeros(shape, np.float32),
          episode_step=np.zeros(shape, np.int32),
          episode_frames=np.zeros(shape, np.int32)),
      done=done,
      truncated=truncated,
      observation=random_observation(spec, shape, rng))


def random_actions(spec: types.EnvSpec, shape: Sequence[int],
                   rng: np.random.Generator) -> dict:
  """dict name -> actions of leading `shape`: int32 for discrete heads,
  float32 uniform within the bounds for continuous ones."""
  shape = tuple(shape)
  actions = {}
  for k, s in spec.action_spec.items():
    if isinstance(s, types.DiscreteSpec):
      actions[k] = rng.integers(0, s.num_values, shape).astype(np.int32)
    else:
      actions[k] = rng.uniform(s.minimum, s.maximum,
                               shape + tuple(s.shape)).astype(np.float32)
  return actions


def random_unroll(spec: types.EnvSpec, shape: Sequence[int],
                  rng: np.random.Generator, done_prob: float = 0.15,
                  truncated_share: float = 0.5) -> types.Unroll:
  """A stateless `Unroll` of leading `shape` (`[T + 1, B]`): random step
  outputs, valid actions, normal logits for discrete heads and baselines."""
  shape = tuple(shape)
  logits = {k: rng.normal(size=shape + (s.num_values,)).astype(np.float32)
            for k, s in spec.action_spec.items()
            if isinstance(s, types.DiscreteSpec)}
  return types.Unroll(
      {}, random_step_output(spec, shape, rng, done_prob, truncated_share),
      types.AgentOutput(random_actions(spec, shape, rng), logits,
                        rng.normal(size=shape).astype(np.float32)))


def step_output_signature(spec: types.EnvSpec, shape) -> types.StepOutput:
  """`tf.TensorSpec`s of a `StepOutput` with leading `shape` (None ok)."""
  shape = list(shape)
  return types.StepOutput(
      reward=tf.TensorSpec(shape, tf.float32),
      info=types.EpisodeInfo(
          episode_return=tf.TensorSpec(shape, tf.float32),
          episode_step=tf.TensorSpec(shape, tf.int32),
          episode_frames=tf.TensorSpec(shape, tf.int32)),
      done=tf.TensorSpec(shape, tf.bool),
      truncated=tf.TensorSpec(shape, tf.bool),
      observation={k: tf.TensorSpec(shape + list(s.shape), s.dtype)
                   for k, s in spec.observation_spec.items()})


def action_signature(spec: types.EnvSpec, shape) -> dict:
  """`tf.TensorSpec`s of an action dict with leading `shape`."""
  return {k: tf.TensorSpec(list(shape), tf.int32) for k in spec.action_spec}
