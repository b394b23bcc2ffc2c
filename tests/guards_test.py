"""Tests of clear.ops.guards: rank and shape checks and the finite-step
guard."""

import numpy as np
import pytest
import tensorflow as tf

from clear.ops import guards


def test_check_rank_names_the_function_and_argument():
  guards.check_rank('f', 'x', tf.zeros([2, 3]), 2)
  with pytest.raises(ValueError, match=r'f: x must have rank 1, got shape '
                     r'\(2, 3\)'):
    guards.check_rank('f', 'x', tf.zeros([2, 3]), 1)


def test_check_shape_accepts_compatible_shapes_and_names_the_expectation():
  guards.check_shape('f', 'x', tf.zeros([2, 3]), tf.TensorShape([None, 3]),
                     '[T, 3]')
  with pytest.raises(ValueError, match=r'f: x must have shape \[T, 4\] '
                     r'\(\(None, 4\)\), got \(2, 3\)'):
    guards.check_shape('f', 'x', tf.zeros([2, 3]),
                       tf.TensorShape([None, 4]), '[T, 4]')


def test_all_finite_looks_at_every_entry_of_every_tensor():
  assert guards.all_finite([1.0, np.ones([3]), tf.constant(2, tf.int64)])
  assert not guards.all_finite([1.0, np.array([0.0, np.nan])])
  assert not guards.all_finite([np.inf])


@pytest.mark.parametrize('compiled', [False, True])
def test_apply_if_finite_applies_and_counts_or_skips_and_counts(compiled):
  steps = guards.step_counter('steps')
  skipped = guards.step_counter('skipped')
  target = tf.Variable(0.0)
  assert steps.dtype == tf.int64 and not steps.trainable

  def step(value):
    return guards.apply_if_finite(
        guards.all_finite([value]), lambda: target.assign_add(value), steps,
        skipped)

  if compiled:
    step = tf.function(step)
  assert bool(step(tf.constant(2.0)))
  assert not bool(step(tf.constant(np.nan, tf.float32)))
  assert bool(step(tf.constant(3.0)))
  assert target.numpy() == 5.0  # The NaN step changed nothing.
  assert (int(steps.numpy()), int(skipped.numpy())) == (2, 1)
