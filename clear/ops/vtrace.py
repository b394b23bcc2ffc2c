"""V-trace off-policy returns (Espeholt et al. 2018, arXiv 1802.01561).

All functions work on time-major tensors `[T, B, ...]`, eagerly and inside
`tf.function`, with a static or an unknown number of steps T.

With importance ratios rho_t = pi(a_t | x_t) / mu(a_t | x_t), truncated
ratios rho_bar_t = min(clip_rho_threshold, rho_t) and trace coefficients
c_t = min(1, rho_t) (lambda = 1), the V-trace target is

  v_s = V(x_s) + sum_{t >= s} gamma^{t - s} (prod_{i = s}^{t - 1} c_i) delta_t,
  delta_t = rho_bar_t (r_t + gamma_t V(x_{t + 1}) - V(x_t)),

with V(x_T) the bootstrap value. Equivalently, backwards in time,

  v_s - V(x_s) = delta_s + gamma_s c_s (v_{s + 1} - V(x_{s + 1})).

That recursion is a first order linear recurrence; `scan_discounted_sum`
solves it in ceil(log2 T) vectorised doubling steps instead of T sequential
ones. Called eagerly, `from_importance_weights` runs as one XLA-compiled
function (compiled once per input shape); inside a `tf.function` its ops
join the caller's graph.
"""

import collections

import tensorflow as tf

from clear.ops import guards

VTraceReturns = collections.namedtuple('VTraceReturns',
                                       ['vs', 'pg_advantages'])
VTraceReturns.__doc__ = """V-trace outputs, gradients stopped.

Attributes:
  vs: `[T, B, ...]` V-trace value targets v_s.
  pg_advantages: `[T, B, ...]` policy-gradient advantages
    rho_bar_pg_s (r_s + gamma_s v_{s + 1} - V(x_s)), with v_T the bootstrap.
"""

VTraceFromLogitsReturns = collections.namedtuple(
    'VTraceFromLogitsReturns',
    ['vs', 'pg_advantages', 'log_rhos', 'behaviour_action_log_probs',
     'target_action_log_probs'])
VTraceFromLogitsReturns.__doc__ = """V-trace outputs computed from logits.

Attributes:
  vs: `[T, B]` V-trace value targets (gradient stopped).
  pg_advantages: `[T, B]` policy-gradient advantages (gradient stopped).
  log_rhos: `[T, B]` log pi(a) - log mu(a), summed over action heads.
  behaviour_action_log_probs: `[T, B]` log mu(a), summed over heads.
  target_action_log_probs: `[T, B]` log pi(a), summed over heads. Gradients
    flow from it into the target logits.
"""


def _shift_up(x, shift):
  """`x[t + shift]` along axis 0, with zeros past the end.

  `shift` is a python int, or a scalar tensor inside a while loop; the
  latter uses a roll and a mask so that the shape stays fixed (XLA needs
  loop variables of constant shape).
  """
  if isinstance(shift, int):
    return tf.pad(x[shift:], [[0, shift]] + [[0, 0]] * (x.shape.rank - 1))
  num_steps = tf.shape(x)[0]
  keep = tf.range(num_steps) < num_steps - shift
  keep = tf.reshape(keep, [-1] + [1] * (x.shape.rank - 1))
  return tf.where(keep, tf.roll(x, shift=-shift, axis=0), tf.zeros_like(x))


def scan_discounted_sum(sequence, decay, initial_value):
  """Solves x_t = sequence_t + decay_t * x_{t + 1} backwards from x_T.

  T is time, B is batch. Uses recursive doubling: after k rounds every x_t
  holds the sum over the next 2^k steps, so ceil(log2 T) rounds of
  elementwise operations replace T sequential steps. The result equals the
  sequential recursion up to float rounding.

  Args:
    sequence: float `[T, B, ...]`.
    decay: float `[T, B, ...]`, the per-step factor (e.g. discounts).
    initial_value: float `[B, ...]`, the value x_T after the last step.

  Returns:
    float `[T, B, ...]`, the sums x_0 .. x_{T-1}. Differentiable; callers
    that want targets stop the gradient themselves.

  Raises:
    ValueError: when the ranks do not match.
  """
  sequence = tf.convert_to_tensor(sequence)
  decay = tf.convert_to_tensor(decay, dtype=sequence.dtype)
  initial_value = tf.convert_to_tensor(initial_value, dtype=sequence.dtype)
  rank = sequence.shape.rank
  if rank is None or rank < 1:
    raise ValueError('scan_discounted_sum: sequence must have a known rank of '
                     f'at least 1, got shape {sequence.shape}.')
  guards.check_rank('scan_discounted_sum', 'decay', decay, rank)
  guards.check_rank('scan_discounted_sum', 'initial_value', initial_value,
                    rank - 1)
  # Fold x_T into the last step so the recursion starts from zero.
  total = sequence + decay * tf.concat(
      [tf.zeros_like(sequence[1:]), initial_value[tf.newaxis]], axis=0)
  factor = decay
  num_steps = sequence.shape[0]
  if num_steps is not None:
    # Static T: an unrolled Python loop (ceil(log2 T) rounds).
    shift = 1
    while shift < num_steps:
      total += factor * _shift_up(total, shift)
      factor *= _shift_up(factor, shift)
      shift *= 2
    return total

  def body(shift, total, factor):
    total += factor * _shift_up(total, shift)
    factor *= _shift_up(factor, shift)
    return shift * 2, total, factor

  _, total, _ = tf.while_loop(
      lambda shift, total, factor: shift < tf.shape(total)[0],
      body, (tf.constant(1), total, factor))
  return total


def _vtrace_maths(log_rhos, discounts, rewards, values, bootstrap_value,
                  clip_rho_threshold, clip_pg_rho_threshold):
  """The V-trace maths on checked rank-2 arguments."""
  rhos = tf.exp(log_rhos)
  if clip_rho_threshold is not None:
    clipped_rhos = tf.minimum(rhos, clip_rho_threshold)
  else:
    clipped_rhos = rhos
  cs = tf.minimum(tf.ones_like(rhos), rhos)
  values_t_plus_1 = tf.concat([values[1:], bootstrap_value[tf.newaxis]],
                              axis=0)
  deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)
  vs_minus_v_xs = scan_discounted_sum(deltas, discounts * cs,
                                      tf.zeros_like(bootstrap_value))
  vs = values + vs_minus_v_xs
  vs_t_plus_1 = tf.concat([vs[1:], bootstrap_value[tf.newaxis]], axis=0)
  if clip_pg_rho_threshold is not None:
    clipped_pg_rhos = tf.minimum(rhos, clip_pg_rho_threshold)
  else:
    clipped_pg_rhos = rhos
  pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 -
                                     values)
  return tf.stop_gradient(vs), tf.stop_gradient(pg_advantages)


# Eager calls run the maths as one XLA-compiled function (one dispatch instead
# of about 80 small ops); inside a caller's tf.function the ops are inlined
# into the caller's graph instead, which then decides about XLA itself.
_vtrace_maths_xla = tf.function(_vtrace_maths, jit_compile=True,
                                reduce_retracing=True, autograph=False)


def _vtrace_core(*args):
  if tf.executing_eagerly():
    return _vtrace_maths_xla(*args)
  return _vtrace_maths(*args)


def _threshold(fn_name, arg_name, threshold, dtype):
  """None and python numbers stay as they are (trace-time constants)."""
  if threshold is None:
    return None
  if isinstance(threshold, (int, float)):
    return float(threshold)
  threshold = tf.convert_to_tensor(threshold, dtype=dtype)
  guards.check_rank(fn_name, arg_name, threshold, 0)
  return threshold


def from_importance_weights(log_rhos,
                            discounts,
                            rewards,
                            values,
                            bootstrap_value,
                            clip_rho_threshold=1.0,
                            clip_pg_rho_threshold=1.0):
  """V-trace targets and advantages from log importance weights.

  T is time, B is batch; `...` are optional extra trailing dimensions shared
  by every `[T, B, ...]` argument (for example several value heads).
  Row t describes the transition x_t --a_t--> x_{t+1}: `values[t]` is
  V(x_t), `rewards[t]` and `discounts[t]` belong to that transition, and
  `bootstrap_value` is V(x_T).

  Args:
    log_rhos: float32 `[T, B, ...]`, log pi(a_t | x_t) - log mu(a_t | x_t).
    discounts: float32 `[T, B, ...]`, gamma_t (0 where an episode ended).
    rewards: float32 `[T, B, ...]`, r_t.
    values: float32 `[T, B, ...]`, V(x_t) under the current estimate.
    bootstrap_value: float32 `[B, ...]`, V(x_T).
    clip_rho_threshold: python float or scalar tensor, the rho_bar truncation
      of the importance weights in the value target; None disables it.
    clip_pg_rho_threshold: python float or scalar tensor, the truncation of
      the importance weights in the policy-gradient advantage; None disables
      it.

  Returns:
    `VTraceReturns(vs, pg_advantages)`, each float32 `[T, B, ...]`, with
    gradients stopped.

  Raises:
    ValueError: when ranks or shapes do not match.
  """
  name = 'from_importance_weights'
  log_rhos = tf.convert_to_tensor(log_rhos)
  if not log_rhos.dtype.is_floating:
    raise ValueError(f'{name}: log_rhos must be a float tensor, got '
                     f'{log_rhos.dtype}.')
  dtype = log_rhos.dtype
  discounts = tf.convert_to_tensor(discounts, dtype=dtype)
  rewards = tf.convert_to_tensor(rewards, dtype=dtype)
  values = tf.convert_to_tensor(values, dtype=dtype)
  bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=dtype)

  rank = log_rhos.shape.rank
  if rank is None or rank < 2:
    raise ValueError(f'{name}: log_rhos must have rank 2 or more '
                     f'([T, B, ...]), got shape {log_rhos.shape}.')
  for arg_name, tensor in (('discounts', discounts), ('rewards', rewards),
                           ('values', values)):
    guards.check_rank(name, arg_name, tensor, rank)
    guards.check_shape(name, arg_name, tensor, log_rhos.shape,
                       'equal to log_rhos')
  guards.check_rank(name, 'bootstrap_value', bootstrap_value, rank - 1)
  guards.check_shape(name, 'bootstrap_value', bootstrap_value,
                     log_rhos.shape[1:], '[B, ...] of log_rhos')
  clip_rho_threshold = _threshold(name, 'clip_rho_threshold',
                                  clip_rho_threshold, dtype)
  clip_pg_rho_threshold = _threshold(name, 'clip_pg_rho_threshold',
                                     clip_pg_rho_threshold, dtype)

  if rank == 2:
    vs, pg_advantages = _vtrace_core(log_rhos, discounts, rewards, values,
                                     bootstrap_value, clip_rho_threshold,
                                     clip_pg_rho_threshold)
  else:
    # Fold the trailing dimensions into the batch so that the compiled core
    # always sees rank 2.
    shape = tf.shape(log_rhos)
    flat = [tf.reshape(x, [shape[0], -1])
            for x in (log_rhos, discounts, rewards, values)]
    vs, pg_advantages = _vtrace_core(*flat,
                                     tf.reshape(bootstrap_value, [-1]),
                                     clip_rho_threshold,
                                     clip_pg_rho_threshold)
    vs = tf.reshape(vs, shape)
    pg_advantages = tf.reshape(pg_advantages, shape)
  return VTraceReturns(vs=vs, pg_advantages=pg_advantages)


def log_probs_from_logits_and_actions(logits, actions):
  """Log-probabilities of the taken actions under softmax policies.

  T is time, B is batch (any leading dimensions work; `[T, B]` is typical).
  `logits` and `actions` may be single tensors or matching nests (one entry
  per action head); the result has the structure of `actions`. Masked
  choices may hold large negative logits (e.g. -1e9, not -inf).

  Args:
    logits: float32 `[T, B, NUM_ACTIONS]` (or a nest of them, one per head,
      each with its own NUM_ACTIONS).
    actions: int32 or int64 `[T, B]` (or a matching nest), indices into the
      last axis of `logits`.

  Returns:
    float32 `[T, B]` log pi(a_t | x_t) (or a nest of them), differentiable
    with respect to `logits`.

  Raises:
    ValueError: when the nests differ or a head's ranks do not fit.
  """
  name = 'log_probs_from_logits_and_actions'
  try:
    tf.nest.assert_same_structure(logits, actions)
  except (ValueError, TypeError) as e:
    raise ValueError(f'{name}: logits and actions must have the same nest '
                     f'structure: {e}') from e

  def head_log_probs(head_logits, head_actions):
    head_logits = tf.convert_to_tensor(head_logits)
    head_actions = tf.convert_to_tensor(head_actions)
    if head_actions.shape.rank is None or head_actions.shape.rank < 1:
      raise ValueError(f'{name}: actions must have a known rank of at least '
                       f'1, got shape {head_actions.shape}.')
    guards.check_rank(name, 'logits', head_logits, head_actions.shape.rank + 1)
    if head_actions.dtype not in (tf.int32, tf.int64):
      head_actions = tf.cast(head_actions, tf.int32)
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=head_actions, logits=head_logits)

  return tf.nest.map_structure(head_log_probs, logits, actions)


def _summed_log_probs(fn_name, logits, actions):
  """Checks one nest of heads and returns log-probs summed over heads."""
  for head_logits, head_actions in zip(tf.nest.flatten(logits),
                                       tf.nest.flatten(actions)):
    guards.check_rank(fn_name, 'policy logits',
                      tf.convert_to_tensor(head_logits), 3)
    guards.check_rank(fn_name, 'actions', tf.convert_to_tensor(head_actions),
                      2)
  return tf.add_n(tf.nest.flatten(
      log_probs_from_logits_and_actions(logits, actions)))


def from_logits(behaviour_policy_logits,
                target_policy_logits,
                actions,
                discounts,
                rewards,
                values,
                bootstrap_value,
                clip_rho_threshold=1.0,
                clip_pg_rho_threshold=1.0):
  """V-trace for softmax policies, from behaviour and target logits.

  T is time, B is batch, NUM_ACTIONS is the number of choices of a head.
  The policies may have several independent heads: pass matching nests
  (e.g. dicts) of logits and actions, and the log-probabilities are summed
  over heads, i.e. the joint action is the product of the heads.

  Args:
    behaviour_policy_logits: float32 `[T, B, NUM_ACTIONS]` or a nest of them,
      the logits of the policy mu that acted. No gradient flows into them.
    target_policy_logits: float32 `[T, B, NUM_ACTIONS]` or a matching nest,
      the logits of the policy pi being learned.
    actions: int32 `[T, B]` or a matching nest, the actions taken by mu.
    discounts: float32 `[T, B]`, gamma_t.
    rewards: float32 `[T, B]`, r_t.
    values: float32 `[T, B]`, V(x_t).
    bootstrap_value: float32 `[B]`, V(x_T).
    clip_rho_threshold: see `from_importance_weights`.
    clip_pg_rho_threshold: see `from_importance_weights`.

  Returns:
    `VTraceFromLogitsReturns`; `vs` and `pg_advantages` have their gradients
    stopped, `target_action_log_probs` (and hence `log_rhos`) carry gradients
    into the target logits.

  Raises:
    ValueError: when the nests differ or ranks do not match.
  """
  name = 'from_logits'
  try:
    tf.nest.assert_same_structure(behaviour_policy_logits, actions)
    tf.nest.assert_same_structure(target_policy_logits, actions)
  except (ValueError, TypeError) as e:
    raise ValueError(f'{name}: behaviour_policy_logits, target_policy_logits '
                     f'and actions must have the same nest structure: {e}'
                    ) from e
  behaviour_policy_logits = tf.nest.map_structure(
      lambda x: tf.stop_gradient(tf.convert_to_tensor(x)),
      behaviour_policy_logits)
  behaviour_action_log_probs = _summed_log_probs(
      name, behaviour_policy_logits, actions)
  target_action_log_probs = _summed_log_probs(name, target_policy_logits,
                                              actions)
  for arg_name, tensor in (('discounts', discounts), ('rewards', rewards),
                           ('values', values)):
    guards.check_rank(name, arg_name, tf.convert_to_tensor(tensor), 2)
  guards.check_rank(name, 'bootstrap_value',
                    tf.convert_to_tensor(bootstrap_value), 1)
  log_rhos = target_action_log_probs - behaviour_action_log_probs
  vtrace_returns = from_importance_weights(
      log_rhos=log_rhos,
      discounts=discounts,
      rewards=rewards,
      values=values,
      bootstrap_value=bootstrap_value,
      clip_rho_threshold=clip_rho_threshold,
      clip_pg_rho_threshold=clip_pg_rho_threshold)
  return VTraceFromLogitsReturns(
      vs=vtrace_returns.vs,
      pg_advantages=vtrace_returns.pg_advantages,
      log_rhos=log_rhos,
      behaviour_action_log_probs=behaviour_action_log_probs,
      target_action_log_probs=target_action_log_probs)
