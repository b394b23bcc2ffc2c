"""Q targets and critic losses of the off-policy learners (SAC, DDPG).

T is time, B is batch, N is the number of critics. Pure functions over
time-major `[T, B]` segments (see `clear.algorithms.off_policy.segments` for how
episode ends enter them):

- `q_targets` runs a `clear.ops.value_estimators` estimator over a segment;
  `next_state_targets` does so from the values of the next states, which
  is what both algorithms have;
- `critic_ensemble_loss` regresses every critic on the targets;
- `segment_priorities` turns TD errors into replay priorities, and
  `masked_mean` averages over the transitions that count.
"""

from typing import NamedTuple

import tensorflow as tf

from clear.algorithms.off_policy import config as off_policy_config
from clear.ops import guards
from clear.ops import value_estimators

Q_ESTIMATORS = off_policy_config.Q_ESTIMATORS


class QTargets(NamedTuple):
  """Q-value targets of a segment, `[T, B]` each, gradients stopped.

  Attributes:
    targets: float32, the targets G_t for Q(x_t, a_t).
    mask: float32, 1 for transitions the critics learn from, 0 for
      truncated ones.
  """
  targets: tf.Tensor
  mask: tf.Tensor


def q_targets(rewards, discounts, truncated, values, bootstrap_value,
              estimator: str = 'td0', lambda_=0.95) -> QTargets:
  """Q targets over a segment with a `clear.ops.value_estimators` estimator.

  T is time, B is batch. Transition t goes from x_t to x_{t+1}. Truncated
  transitions lost their next observation: they are masked out, and their
  target is set to V(x_t) (reward V(x_t), discount 0) so that multi-step
  targets of the transitions before them stop there (see
  `clear.algorithms.off_policy.segments`).

  Args:
    rewards: float32 `[T, B]`, r_t, including any entropy bonus.
    discounts: float32 `[T, B]`, 0 where transition t terminated.
    truncated: bool `[T, B]`, transition t was cut by a time limit.
    values: float32 `[T, B]`, target-network value V(x_t).
    bootstrap_value: float32 `[B]`, V(x_T).
    estimator: one of `Q_ESTIMATORS`.
    lambda_: lambda of 'td_lambda' and 'gae'.

  Returns:
    `QTargets`.

  Raises:
    ValueError: wrong ranks or an estimator not in `Q_ESTIMATORS`.
  """
  name = 'q_targets'
  rewards = tf.convert_to_tensor(rewards, tf.float32)
  values = tf.convert_to_tensor(values, tf.float32)
  discounts = tf.convert_to_tensor(discounts, tf.float32)
  truncated = tf.convert_to_tensor(truncated, tf.bool)
  for arg, x in (('rewards', rewards), ('discounts', discounts),
                 ('truncated', truncated), ('values', values)):
    guards.check_rank(name, arg, x, 2)
  guards.check_rank(name, 'bootstrap_value',
                    tf.convert_to_tensor(bootstrap_value), 1)
  if estimator not in Q_ESTIMATORS:
    raise ValueError(f'{name}: estimator must be one of {Q_ESTIMATORS}, got '
                     f'{estimator!r}.')
  values = tf.stop_gradient(values)
  rewards = tf.where(truncated, values, rewards)
  discounts = tf.where(truncated, tf.zeros_like(discounts), discounts)
  estimate = value_estimators.estimate(estimator, rewards, discounts, values,
                                       tf.stop_gradient(bootstrap_value),
                                       lambda_=lambda_)
  mask = 1.0 - tf.cast(truncated, tf.float32)
  return QTargets(tf.stop_gradient(estimate.returns), mask)


def next_state_targets(rewards, discounts, truncated, next_values,
                       estimator: str = 'td0', lambda_=0.95) -> QTargets:
  """`q_targets` from the target values of the next states only.

  T is time, B is batch. The value of a transition's start state, V(x_t),
  only enters the (masked) target of a truncated transition; the next
  states give V(x_1) .. V(x_T), so V(x_t) is that of the transition before
  for t >= 1, and zeros stand in for V(x_0), which would only matter for a
  truncated first transition (masked out).

  Args:
    rewards: float32 `[T, B]`, r_t, including any entropy bonus.
    discounts: float32 `[T, B]`, 0 where transition t terminated.
    truncated: bool `[T, B]`, transition t was cut by a time limit.
    next_values: float32 `[T, B]`, target value V(x_{t+1}).
    estimator: one of `Q_ESTIMATORS`.
    lambda_: lambda of 'td_lambda' and 'gae'.

  Returns:
    `QTargets`.

  Raises:
    ValueError: wrong ranks or an estimator not in `Q_ESTIMATORS`.
  """
  next_values = tf.convert_to_tensor(next_values, tf.float32)
  guards.check_rank('next_state_targets', 'next_values', next_values, 2)
  values = tf.concat([tf.zeros_like(next_values[:1]), next_values[:-1]], 0)
  return q_targets(rewards, discounts, truncated, values, next_values[-1],
                   estimator, lambda_)


class CriticLossExtra(NamedTuple):
  """Pieces of `critic_ensemble_loss`.

  Attributes:
    td_errors: float32 `[N, T, B]`, G_t - Q_i(x_t, a_t).
    squared_errors: float32 `[T, B]`, mean over critics of the squared TD
      errors (unmasked, unweighted; what priorities are made of).
  """
  td_errors: tf.Tensor
  squared_errors: tf.Tensor


def critic_ensemble_loss(q_values, targets, mask, importance_weights=None):
  """Squared TD errors of every critic, summed over critics.

  T is time, B is batch, N the number of critics.

  Args:
    q_values: float32 `[N, T, B]`, Q_i(x_t, a_t).
    targets: float32 `[T, B]`, G_t (gradients are stopped here).
    mask: float32 `[T, B]`, 0 for transitions left out.
    importance_weights: float32 `[B]` or `[T, B]` replay weights, or None.

  Returns:
    (loss float32 `[T, B]` = mask * w * sum_i 0.5 (G_t - Q_i)^2,
     `CriticLossExtra`).

  Raises:
    ValueError: wrong ranks.
  """
  name = 'critic_ensemble_loss'
  q_values = tf.convert_to_tensor(q_values, tf.float32)
  targets = tf.stop_gradient(tf.convert_to_tensor(targets, tf.float32))
  mask = tf.convert_to_tensor(mask, tf.float32)
  guards.check_rank(name, 'q_values', q_values, 3)
  guards.check_rank(name, 'targets', targets, 2)
  guards.check_rank(name, 'mask', mask, 2)
  td_errors = targets[None] - q_values
  loss = 0.5 * tf.reduce_sum(tf.square(td_errors), axis=0) * mask
  if importance_weights is not None:
    w = tf.convert_to_tensor(importance_weights, tf.float32)
    if w.shape.rank == 1:
      w = w[None]
    guards.check_rank(name, 'importance_weights', w, 2)
    loss *= tf.stop_gradient(w)
  squared = tf.reduce_mean(tf.square(td_errors), axis=0)
  return loss, CriticLossExtra(td_errors, tf.stop_gradient(squared))


def segment_priorities(squared_errors, mask):
  """Replay priority of each segment: the RMS TD error of its transitions.

  Args:
    squared_errors: float32 `[T, B]`, squared TD errors.
    mask: float32 `[T, B]`, 0 for transitions that do not count.

  Returns:
    float32 `[B]`, sqrt(sum mask e^2 / max(1, sum mask)).
  """
  squared_errors = tf.convert_to_tensor(squared_errors, tf.float32)
  mask = tf.convert_to_tensor(mask, tf.float32)
  guards.check_rank('segment_priorities', 'squared_errors', squared_errors,
                    2)
  total = tf.reduce_sum(squared_errors * mask, axis=0)
  count = tf.maximum(tf.reduce_sum(mask, axis=0), 1.0)
  return tf.stop_gradient(tf.sqrt(total / count))


def masked_mean(values, mask):
  """sum(mask * values) / max(1, sum(mask)): a mean over the transitions
  that count (float32 scalar; `values` and `mask` of one shape)."""
  return tf.reduce_sum(values * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)
