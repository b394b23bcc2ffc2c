"""What the learners (IMPALA-CLEAR, PPG, SAC, DDPG) guard their steps with.

- `check_rank` and `check_shape`: the rank and shape checks of a loss or
  V-trace input, whose errors name the function and the argument;
- `all_finite` and `apply_if_finite`: a gradient step is applied only when
  its losses and gradient norms are finite; otherwise nothing changes and
  the step is counted as skipped;
- `clipped_gradients`: the gradients of a loss, clipped by global norm;
- `step_counter`: the int64 counters of frames and steps they checkpoint.
"""

from typing import Callable, Sequence

import tensorflow as tf


def check_rank(fn_name: str, arg_name: str, tensor, rank: int):
  """Raises ValueError unless `tensor` has rank `rank` (unknown ranks fail).

  Args:
    fn_name: the function whose input it is, for the message.
    arg_name: the argument's name, for the message.
    tensor: a tensor (anything with a `shape`).
    rank: the rank it must have.
  """
  if tensor.shape.rank != rank:
    raise ValueError(f'{fn_name}: {arg_name} must have rank {rank}, got '
                     f'shape {tensor.shape}.')


def check_shape(fn_name: str, arg_name: str, tensor, shape,
                expected: str):
  """Raises ValueError unless `tensor`'s shape is compatible with `shape`.

  Args:
    fn_name: the function whose input it is, for the message.
    arg_name: the argument's name, for the message.
    tensor: a tensor (anything with a `shape`).
    shape: a `tf.TensorShape` (or list) it must be compatible with.
    expected: the shape in words for the message, e.g. '[T, B]'.
  """
  if not tensor.shape.is_compatible_with(shape):
    raise ValueError(f'{fn_name}: {arg_name} must have shape {expected} '
                     f'({shape}), got {tensor.shape}.')


def all_finite(values: Sequence) -> tf.Tensor:
  """Bool scalar: every tensor in `values` is finite everywhere."""
  checks = [tf.reduce_all(tf.math.is_finite(tf.cast(v, tf.float32)))
            for v in values]
  return tf.reduce_all(tf.stack(checks))


def apply_if_finite(finite, apply_fn: Callable[[], None],
                    num_updates: tf.Variable,
                    num_skipped_steps: tf.Variable) -> tf.Tensor:
  """Runs `apply_fn` and counts a step, or counts a skipped one.

  Works eagerly and inside `tf.function`.

  Args:
    finite: bool scalar, whether the step's numbers are all finite.
    apply_fn: applies the step (its return value is ignored).
    num_updates: int64 variable, incremented when the step is applied.
    num_skipped_steps: int64 variable, incremented when it is not.

  Returns:
    Bool scalar: the step was applied (= `finite`).
  """

  def apply():
    apply_fn()
    num_updates.assign_add(1)
    return tf.constant(True)

  def skip():
    num_skipped_steps.assign_add(1)
    return tf.constant(False)

  return tf.cond(finite, apply, skip)


def clipped_gradients(tape, loss, variables, clip_norm: float):
  """Gradients of `loss` (zeros where unused), clipped by global norm
  (`clip_norm` 0: not clipped).

  Returns:
    (gradients, global norm before clipping).
  """
  grads = tape.gradient(loss, variables)
  grads = [tf.zeros_like(v) if g is None else g
           for g, v in zip(grads, variables)]
  norm = tf.linalg.global_norm(grads)
  if clip_norm > 0:
    grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
  return grads, norm


def step_counter(name: str) -> tf.Variable:
  """A non-trainable int64 variable starting at 0."""
  return tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
