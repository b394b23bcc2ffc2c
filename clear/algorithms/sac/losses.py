"""SAC's maths (Haarnoja et al. 2018, 1812.05905): pure functions.

`clear.algorithms.sac.policy` holds the config, the networks and the learner
that call them; this module holds the tanh-squashed Gaussian, the soft policy of
discrete actions, the critic, actor and temperature losses, and the target
entropies of the temperatures.

T is time, B is batch, N is the number of critics, A the number of discrete
actions, C the number of continuous action entries.
"""

import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from agents import heads
from clear import types
from clear.algorithms.off_policy import losses as off_policy_losses
from clear.algorithms.off_policy import networks as off_policy_networks

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
DISCRETE_ENTROPY_RATIO = 0.3


def tanh_gaussian_sample(mean, log_std, noise):
  """Reparameterised sample of a tanh-squashed diagonal Gaussian.

  Args:
    mean: float32 `[..., C]`.
    log_std: float32 `[..., C]`.
    noise: float32 `[..., C]`, standard normal draws.

  Returns:
    (pre_tanh float32 `[..., C]` u = mean + exp(log_std) noise,
     action float32 `[..., C]` tanh(u) in (-1, 1)).
  """
  pre_tanh = mean + tf.exp(log_std) * noise
  return pre_tanh, tf.tanh(pre_tanh)


def tanh_gaussian_log_prob(pre_tanh, mean, log_std, log_half_range=0.0):
  """Log density of y = m + h tanh(u), u ~ N(mean, exp(log_std)^2).

  log p(y) = sum_c [log N(u_c; mean_c, std_c) - log(1 - tanh(u_c)^2)]
             - log_half_range,
  with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), which stays
  finite where tanh(u) rounds to +-1.

  Args:
    pre_tanh: float32 `[..., C]`, u.
    mean: float32 `[..., C]`.
    log_std: float32 `[..., C]`.
    log_half_range: sum over c of log h_c (0 for actions in [-1, 1]).

  Returns:
    float32 `[...]`.
  """
  pre_tanh = tf.convert_to_tensor(pre_tanh, tf.float32)
  if pre_tanh.shape.rank is not None and pre_tanh.shape.rank < 1:
    raise ValueError('tanh_gaussian_log_prob: pre_tanh must be [..., C], '
                     f'got shape {pre_tanh.shape}.')
  z = (pre_tanh - mean) * tf.exp(-log_std)
  gaussian = -0.5 * tf.square(z) - log_std - 0.5 * math.log(2.0 * math.pi)
  log_det = 2.0 * (math.log(2.0) - pre_tanh - tf.nn.softplus(-2.0 * pre_tanh))
  return tf.reduce_sum(gaussian - log_det, axis=-1) - log_half_range


def bounded_log_std(raw):
  """Maps an unbounded output to log_std in [LOG_STD_MIN, LOG_STD_MAX]."""
  return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tf.tanh(raw) + 1)


def soft_policy_logits(q_values, alpha, mask=None):
  """Logits of p(a|s) proportional to exp(min_i Q_i(s, a) / alpha).

  Args:
    q_values: float32 `[N, ..., A]`.
    alpha: float32 scalar (gradients stopped).
    mask: optional `[..., A]`, nonzero where the action is available.

  Returns:
    float32 `[..., A]` (masked entries at `heads.MASKED_LOGIT`).
  """
  logits = tf.reduce_min(q_values, axis=0) / tf.stop_gradient(alpha)
  if mask is not None:
    logits = heads.mask_logits(logits, mask)
  return logits


def entropy_bonus_rewards(rewards, discounts, next_regulariser, alpha):
  """Rewards with the next state's entropy bonus: r_t - d_t alpha reg_{t+1}.

  T is time, B is batch.

  Args:
    rewards: float32 `[T, B]`.
    discounts: float32 `[T, B]`.
    next_regulariser: float32 `[T, B]`, log pi - w log prior at x_{t+1}
      (expected under pi for discrete actions), already weighted by the
      part's alpha when `alpha` is 1.
    alpha: float32 scalar, the temperature.

  Returns:
    float32 `[T, B]`, gradients stopped through the bonus.
  """
  for name, x in (('rewards', rewards), ('discounts', discounts),
                  ('next_regulariser', next_regulariser)):
    if tf.convert_to_tensor(x).shape.rank != 2:
      raise ValueError(f'entropy_bonus_rewards: {name} must be [T, B], got '
                       f'shape {tf.convert_to_tensor(x).shape}.')
  bonus = -tf.stop_gradient(alpha * next_regulariser)
  return rewards + discounts * bonus


class CriticLossExtra(NamedTuple):
  """Pieces of `sac_critic_loss`.

  Attributes:
    targets: float32 `[T, B]`, the soft Q targets G_t.
    mask: float32 `[T, B]`, 0 for truncated transitions.
    td_errors: float32 `[N, T, B]`, G_t - Q_i(x_t, a_t).
    squared_errors: float32 `[T, B]`, mean over critics of the squared TD
      errors (what priorities are made of).
  """
  targets: tf.Tensor
  mask: tf.Tensor
  td_errors: tf.Tensor
  squared_errors: tf.Tensor


def sac_critic_loss(q_values, next_target_q, next_penalty, rewards, discounts,
                    truncated, next_discrete_probs=None,
                    importance_weights=None, estimator='td0', lambda_=0.95):
  """Soft Q regression of every critic, per element.

  T is time, B is batch, N critics, A discrete actions. Transition t goes
  from x_t to x_{t+1}. The value of x_{t+1} is V(x_{t+1}) = min_i
  Qtarget_i(x_{t+1}, a') at the policy's a' (expected under the discrete
  policy when `next_discrete_probs` is given); the entropy bonus -penalty
  of x_{t+1} goes into the reward (times the discount), so the one-step
  target is r_t + d_t (V(x_{t+1}) - penalty_{t+1}), and multi-step
  estimators collect the bonus at every step. See
  `off_policy_losses.q_targets` for the estimator and the masking of
  truncated transitions.

  Args:
    q_values: float32 `[N, T, B]`, Q_i(x_t, a_t) of the replayed actions.
    next_target_q: float32 `[N, T, B]` (or `[N, T, B, A]` with discrete
      probabilities), target critics at x_{t+1} and the policy's actions.
    next_penalty: float32 `[T, B]`, sum over action parts of alpha (log pi
      - w log prior) at x_{t+1} (for discrete parts, expected under pi).
    rewards: float32 `[T, B]`.
    discounts: float32 `[T, B]`, 0 where transition t terminated.
    truncated: bool `[T, B]`.
    next_discrete_probs: float32 `[T, B, A]` or None.
    importance_weights: float32 `[B]` or `[T, B]`, or None.
    estimator: one of `off_policy_losses.Q_ESTIMATORS`.
    lambda_: lambda of 'td_lambda' / 'gae'.

  Returns:
    (loss float32 `[T, B]`, `CriticLossExtra`); no gradient reaches the
    targets, target critics, penalties or temperatures.

  Raises:
    ValueError: wrong ranks or estimator.
  """
  name = 'sac_critic_loss'
  next_target_q = tf.convert_to_tensor(next_target_q, tf.float32)
  rank = 3 if next_discrete_probs is None else 4
  if next_target_q.shape.rank != rank:
    raise ValueError(f'{name}: next_target_q must have rank {rank}, got '
                     f'shape {next_target_q.shape}.')
  next_values = policy_values(next_target_q, next_discrete_probs)
  rewards = entropy_bonus_rewards(rewards, discounts, next_penalty, 1.0)
  targets = off_policy_losses.next_state_targets(
      rewards, discounts, truncated, next_values, estimator, lambda_)
  loss, extra = off_policy_losses.critic_ensemble_loss(
      q_values, targets.targets, targets.mask, importance_weights)
  return loss, CriticLossExtra(targets.targets, targets.mask, extra.td_errors,
                               extra.squared_errors)


class ActorLossExtra(NamedTuple):
  """Pieces of `sac_actor_loss`, `[T, B]` each.

  Attributes:
    policy_q: the Q value the actor climbs (min over critics).
    regulariser: log pi - w log prior of the sampled actions.
  """
  policy_q: tf.Tensor
  regulariser: tf.Tensor


def sac_actor_loss(q_values, regulariser, alpha, discrete_probs=None):
  """The SAC actor loss alpha reg - min_i Q_i, per element.

  T is time, B is batch, N critics, A discrete actions.

  Args:
    q_values: float32 `[N, T, B]`, Q_i(x_t, a_t) at reparameterised policy
      actions, or `[N, T, B, A]` with `discrete_probs` (mixed actions).
    regulariser: float32 `[T, B]`, log pi(a_t|x_t) - w log prior(a_t|x_t)
      of the same actions (carries the actor's gradient).
    alpha: float32 scalar temperature (gradients stopped).
    discrete_probs: float32 `[T, B, A]`, the discrete policy (gradients
      stopped); the Q taken is sum_a p(a) min_i Q_i(., a).

  Returns:
    (loss float32 `[T, B]`, `ActorLossExtra`).
  """
  q_values = tf.convert_to_tensor(q_values, tf.float32)
  rank = 4 if discrete_probs is not None else 3
  if q_values.shape.rank != rank:
    raise ValueError(f'sac_actor_loss: q_values must have rank {rank}, got '
                     f'shape {q_values.shape}.')
  if tf.convert_to_tensor(regulariser).shape.rank != 2:
    raise ValueError('sac_actor_loss: regulariser must be [T, B].')
  q = tf.reduce_min(q_values, axis=0)
  if discrete_probs is not None:
    q = tf.reduce_sum(tf.stop_gradient(discrete_probs) * q, axis=-1)
  loss = tf.stop_gradient(alpha) * regulariser - q
  return loss, ActorLossExtra(q, regulariser)


class AlphaLossExtra(NamedTuple):
  """Pieces of `sac_alpha_loss`, `[T, B]`.

  Attributes:
    entropy_gap: -reg - target, positive when the policy is more random
      than the target (alpha then falls).
  """
  entropy_gap: tf.Tensor


def sac_alpha_loss(log_alpha, regulariser, target_entropy):
  """Temperature loss log_alpha (-reg - target), per element.

  Its gradient lowers alpha while the entropy (or -KL to the prior) exceeds
  the target and raises it otherwise.

  Args:
    log_alpha: float32 scalar variable or tensor.
    regulariser: float32 `[T, B]`, log pi - w log prior (gradients
      stopped here).
    target_entropy: python float.

  Returns:
    (loss float32 `[T, B]`, `AlphaLossExtra`).
  """
  regulariser = tf.convert_to_tensor(regulariser, tf.float32)
  if regulariser.shape.rank != 2:
    raise ValueError('sac_alpha_loss: regulariser must be [T, B], got shape '
                     f'{regulariser.shape}.')
  gap = tf.stop_gradient(-regulariser - target_entropy)
  return log_alpha * gap, AlphaLossExtra(gap)


def policy_values(target_q_values, discrete_probs=None):
  """Target value of the policy's actions: min_i Q_i, expected under the
  discrete policy when given.

  Args:
    target_q_values: float32 `[N, T, B]` or `[N, T, B, A]`.
    discrete_probs: float32 `[T, B, A]` (with 4-d q values).

  Returns:
    float32 `[T, B]`, gradients stopped.
  """
  q = tf.reduce_min(target_q_values, axis=0)
  if discrete_probs is not None:
    q = tf.reduce_sum(discrete_probs * q, axis=-1)
  return tf.stop_gradient(q)


def discrete_regulariser(logits, log_prior=None, prior_weight=0.0):
  """Exact E_pi[log pi - w log prior] of a categorical policy.

  Args:
    logits: float32 `[..., A]`.
    log_prior: float32 `[..., A]` or None.
    prior_weight: w.

  Returns:
    (regulariser float32 `[...]`, probabilities `[..., A]`).
  """
  log_probs = tf.nn.log_softmax(logits)
  probs = tf.exp(log_probs)
  inner = log_probs
  if log_prior is not None:
    inner = inner - prior_weight * log_prior
  return tf.reduce_sum(probs * inner, axis=-1), probs


def default_target_entropy(head) -> float:
  """-1 per [-1, 1]-scaled continuous entry (in env units: log h - 1 each);
  DISCRETE_ENTROPY_RATIO x log A for a discrete head."""
  if isinstance(head, types.DiscreteSpec):
    return DISCRETE_ENTROPY_RATIO * math.log(head.num_values)
  size = int(np.prod(head.shape, dtype=np.int64))
  return size * (math.log((head.maximum - head.minimum) / 2.0) - 1.0)


def target_entropies(config, action_spec):
  """{'discrete': float, 'continuous': float} for the parts that exist.

  From a `clear.algorithms.sac.policy.SACConfig`'s target_entropy, prior_actor
  and target_kld_per_dim (see the fields in `clear.algorithms.sac.policy`).

  Raises:
    ValueError: a pair for non-mixed actions, or a malformed value.
  """
  layout = off_policy_networks.ActionLayout(action_spec, 'SAC')
  parts = {}
  if layout.discrete_key is not None:
    parts['discrete'] = [layout.discrete_spec]
  if layout.continuous_size:
    parts['continuous'] = list(layout.specs.values())
  value = config.target_entropy
  if value is None and config.prior_actor:
    dims = lambda specs: sum(
        1 if isinstance(s, types.DiscreteSpec) else int(np.prod(s.shape))
        for s in specs)
    return {k: -config.target_kld_per_dim * dims(v) for k, v in parts.items()}
  if value is None or callable(value):
    fn = value or default_target_entropy
    return {k: float(sum(fn(s) for s in v)) for k, v in parts.items()}
  if isinstance(value, (tuple, list)):
    if len(parts) != 2 or len(value) != 2:
      raise ValueError(
          'target_entropy: a (discrete, continuous) pair needs mixed '
          f'actions, got {value!r} for parts {sorted(parts)}.')
    return {'discrete': float(value[0]), 'continuous': float(value[1])}
  try:
    return {k: float(value) for k in parts}
  except (TypeError, ValueError) as e:
    raise ValueError('target_entropy must be None, a float, a callable or '
                     f'a pair, got {value!r}.') from e
