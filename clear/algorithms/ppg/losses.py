"""PPG's losses (Cobbe et al. 2020, arXiv 2009.04416): pure functions.

`clear.algorithms.ppg.policy` holds the networks and the two-phase training that
calls them; this module holds only the maths, as `clear.ops.losses` does for
IMPALA-CLEAR.

Conventions: B is any flat batch of samples (a minibatch of flattened
`[T * B]` steps), A_i the number of choices of action head i. The policy of
a state with several action heads is the product of the heads:
log-probabilities, entropies and KLs are summed over heads. Every loss
returns a per-sample `[B]` loss and a namedtuple of its pieces; the caller
takes the mean.
"""

import collections

import tensorflow as tf

from clear.ops import guards
from clear.ops import vtrace


PPOSurrogateExtra = collections.namedtuple(
    'PPOSurrogateExtra',
    ['policy_loss', 'entropy', 'ratio', 'approx_kl', 'clipped'])
PPOSurrogateExtra.__doc__ = """The pieces of `ppo_surrogate_loss`, `[B]` each.

Attributes:
  policy_loss: -min(rho A, clip(rho, 1 - eps, 1 + eps) A).
  entropy: the policy's entropy, summed over heads.
  ratio: rho = pi(a) / pi_old(a) (gradient flows into pi).
  approx_kl: (rho - 1) - log rho, an unbiased, non-negative estimate of
    KL(pi_old || pi) from the taken action (gradient stopped).
  clipped: 1.0 where |rho - 1| > eps, else 0.0.
"""

ValueLossExtra = collections.namedtuple('ValueLossExtra',
                                        ['unclipped', 'clipped'])
ValueLossExtra.__doc__ = """The pieces of `clipped_value_loss`, `[B]` each.

Attributes:
  unclipped: 0.5 (V - G)^2.
  clipped: 1.0 where the clipped term was the larger one (and differs),
    else 0.0; always 0.0 without clipping.
"""

PPGAuxLossExtra = collections.namedtuple('PPGAuxLossExtra',
                                         ['aux_value_loss', 'bc_kl'])
PPGAuxLossExtra.__doc__ = """The pieces of `ppg_aux_loss`, `[B]` each.

Attributes:
  aux_value_loss: 0.5 (V_aux - G)^2.
  bc_kl: KL(pi_old || pi), summed over heads.
"""


def _check_heads(fn_name, logits, old_logits, actions=None):
  """Checks matching nests of `[B, A_i]` logits (and `[B]` actions)."""
  try:
    tf.nest.assert_same_structure(logits, old_logits)
    if actions is not None:
      tf.nest.assert_same_structure(logits, actions)
  except (ValueError, TypeError) as e:
    names = 'logits, old_logits and actions' if actions is not None else (
        'logits and old_logits')
    raise ValueError(f'{fn_name}: {names} must have the same nest structure: '
                     f'{e}') from e
  logits = tf.nest.map_structure(tf.convert_to_tensor, logits)
  old_logits = tf.nest.map_structure(
      lambda x: tf.stop_gradient(tf.convert_to_tensor(x)), old_logits)
  if not tf.nest.flatten(logits):
    raise ValueError(f'{fn_name}: at least one action head is needed.')
  for head, old_head in zip(tf.nest.flatten(logits),
                            tf.nest.flatten(old_logits)):
    guards.check_rank(fn_name, 'logits', head, 2)
    guards.check_rank(fn_name, 'old_logits', old_head, 2)
  if actions is not None:
    actions = tf.nest.map_structure(tf.convert_to_tensor, actions)
    for head_actions in tf.nest.flatten(actions):
      guards.check_rank(fn_name, 'actions', head_actions, 1)
  return logits, old_logits, actions


def _check_values(fn_name, dtype, **named):
  """Converts `[B]` float tensors, checking their ranks."""
  out = []
  for arg_name, tensor in named.items():
    tensor = tf.convert_to_tensor(tensor, dtype=dtype)
    guards.check_rank(fn_name, arg_name, tensor, 1)
    out.append(tensor)
  return out


def _entropy(logits):
  """Entropy per sample, summed over the heads of a nest of logits."""
  return tf.add_n([
      -tf.reduce_sum(tf.nn.softmax(head) * tf.nn.log_softmax(head), axis=-1)
      for head in tf.nest.flatten(logits)])


def _kl(p_logits, q_logits):
  """KL(p || q) per sample, summed over heads; exact 0 for masked choices."""
  total = []
  for p_head, q_head in zip(tf.nest.flatten(p_logits),
                            tf.nest.flatten(q_logits)):
    p_log = tf.nn.log_softmax(p_head)
    total.append(tf.reduce_sum(tf.exp(p_log) * (p_log -
                                                tf.nn.log_softmax(q_head)),
                               axis=-1))
  return tf.add_n(total)


def summed_log_probs(logits, actions):
  return tf.add_n(tf.nest.flatten(
      vtrace.log_probs_from_logits_and_actions(logits, actions)))


def ppo_surrogate_loss(logits, old_logits, actions, advantages, clip_ratio,
                       entropy_cost=0.0):
  """PPO's clipped surrogate objective with an entropy bonus, per sample.

  B is batch (any flat set of samples), A_i the choices of head i.
  With rho = pi(a) / pi_old(a) (a product over heads) and eps = clip_ratio:

    loss = -min(rho A, clip(rho, 1 - eps, 1 + eps) A) - entropy_cost H(pi)

  Gradients reach only `logits`.

  Args:
    logits: float32 `[B, A]`, or a nest (e.g. dict) of `[B, A_i]`, the
      policy being trained.
    old_logits: same structure, the policy that the ratio is taken against
      (no gradient flows into it).
    actions: int32 `[B]`, or a matching nest, the actions taken.
    advantages: float32 `[B]` (no gradient flows into them).
    clip_ratio: python float or scalar tensor, eps > 0.
    entropy_cost: python float or scalar tensor, weight of the bonus.

  Returns:
    `(loss, extra)`: loss float32 `[B]`, extra a `PPOSurrogateExtra`.

  Raises:
    ValueError: when nests differ or ranks are wrong.
  """
  name = 'ppo_surrogate_loss'
  logits, old_logits, actions = _check_heads(name, logits, old_logits,
                                             actions)
  dtype = tf.nest.flatten(logits)[0].dtype
  advantages, = _check_values(name, dtype, advantages=advantages)
  advantages = tf.stop_gradient(advantages)
  log_ratio = (summed_log_probs(logits, actions) -
               summed_log_probs(old_logits, actions))
  ratio = tf.exp(log_ratio)
  clipped_ratio = tf.clip_by_value(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
  policy_loss = -tf.minimum(ratio * advantages, clipped_ratio * advantages)
  entropy = _entropy(logits)
  loss = policy_loss - entropy_cost * entropy
  approx_kl = tf.stop_gradient((ratio - 1.0) - log_ratio)
  clipped = tf.cast(tf.abs(ratio - 1.0) > clip_ratio, dtype)
  return loss, PPOSurrogateExtra(policy_loss, entropy, ratio, approx_kl,
                                 tf.stop_gradient(clipped))


def clipped_value_loss(values, old_values, returns, value_clip=0.0):
  """The (optionally clipped) squared value error, per sample.

  B is batch. With c = value_clip > 0 and V_clip = V_old + clip(V - V_old,
  -c, c): loss = 0.5 max((V - G)^2, (V_clip - G)^2); with c = 0 it is
  0.5 (V - G)^2. Gradients reach only `values`.

  Args:
    values: float32 `[B]`, the values being trained.
    old_values: float32 `[B]`, the values before the update (no gradient;
      unused when value_clip is 0).
    returns: float32 `[B]`, the targets G (no gradient).
    value_clip: python float or scalar tensor >= 0; 0 disables clipping.
      A python 0 builds no clipping ops.

  Returns:
    `(loss, extra)`: loss float32 `[B]`, extra a `ValueLossExtra`.

  Raises:
    ValueError: when ranks are wrong.
  """
  name = 'clipped_value_loss'
  values = tf.convert_to_tensor(values)
  old_values, returns = _check_values(name, values.dtype,
                                      old_values=old_values, returns=returns)
  guards.check_rank(name, 'values', values, 1)
  old_values = tf.stop_gradient(old_values)
  returns = tf.stop_gradient(returns)
  unclipped = 0.5 * tf.square(values - returns)
  if isinstance(value_clip, (int, float)) and value_clip == 0:
    return unclipped, ValueLossExtra(unclipped, tf.zeros_like(unclipped))
  value_clip = tf.convert_to_tensor(value_clip, values.dtype)
  clipped_values = old_values + tf.clip_by_value(values - old_values,
                                                 -value_clip, value_clip)
  clipped_term = 0.5 * tf.square(clipped_values - returns)
  use_clipped = tf.logical_and(value_clip > 0, clipped_term > unclipped)
  loss = tf.where(use_clipped, clipped_term, unclipped)
  return loss, ValueLossExtra(unclipped,
                              tf.stop_gradient(tf.cast(use_clipped,
                                                       values.dtype)))


def ppg_aux_loss(logits, old_logits, aux_values, returns, bc_weight):
  """PPG's joint auxiliary loss: value distillation plus behaviour cloning.

  B is batch, A_i the choices of head i:

    loss = 0.5 (V_aux - G)^2 + bc_weight KL(pi_old || pi)

  Gradients reach `logits` and `aux_values` only.

  Args:
    logits: float32 `[B, A]`, or a nest of `[B, A_i]`, the current policy.
    old_logits: same structure, pi_old frozen at the start of the auxiliary
      phase (no gradient).
    aux_values: float32 `[B]`, the policy network's auxiliary value head.
    returns: float32 `[B]`, the value targets (no gradient).
    bc_weight: python float or scalar tensor, weight of the KL.

  Returns:
    `(loss, extra)`: loss float32 `[B]`, extra a `PPGAuxLossExtra`.

  Raises:
    ValueError: when nests differ or ranks are wrong.
  """
  name = 'ppg_aux_loss'
  logits, old_logits, _ = _check_heads(name, logits, old_logits)
  aux_values = tf.convert_to_tensor(aux_values)
  guards.check_rank(name, 'aux_values', aux_values, 1)
  returns, = _check_values(name, aux_values.dtype, returns=returns)
  aux_value_loss = 0.5 * tf.square(aux_values - tf.stop_gradient(returns))
  bc_kl = _kl(old_logits, logits)
  return aux_value_loss + bc_weight * bc_kl, PPGAuxLossExtra(aux_value_loss,
                                                             bc_kl)


def normalize_advantages(advantages):
  """Standardises float32 `[B]` advantages to mean 0 and std 1 (`[B]`)."""
  mean, variance = tf.nn.moments(advantages, axes=[0])
  return (advantages - mean) / (tf.sqrt(variance) + 1e-8)
