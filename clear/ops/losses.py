"""The IMPALA + CLEAR loss and its reward and return helpers.

Everything here is a pure function of time-major `[T, B, ...]` tensors; the
learner prepares (aligns, clips, discounts) its batch and reduces nothing
further: the loss terms are sums over time and batch, as in the original
IMPALA and CLEAR learners.

CLEAR (Rolnick et al. 2018, arXiv 1811.11682) trains on a batch whose first
`num_replay` columns are replayed trajectories. On top of the V-trace
actor-critic terms it adds, on those columns only, a policy-cloning term
KL(mu || pi) and a value-cloning term (V - V_behaviour)^2 that keep the
network close to what it did when the trajectories were recorded.
"""

import collections
import operator

import tensorflow as tf

from clear.ops import guards
from clear.ops import vtrace

REWARD_CLIPPING_MODES = ('abs_one', 'soft_asymmetric', 'none')

ImpalaClearLossExtra = collections.namedtuple(
    'ImpalaClearLossExtra',
    ['total', 'policy_gradient', 'baseline', 'entropy', 'policy_cloning',
     'value_cloning', 'vs', 'pg_advantages', 'log_rhos'])
ImpalaClearLossExtra.__doc__ = """The pieces of `impala_clear_loss`.

The five loss terms are unweighted scalars, each summed over time and batch.

Attributes:
  total: the weighted loss (the same tensor as the first return value).
  policy_gradient: sum of -log pi(a) * advantage.
  baseline: 0.5 * sum of (vs - V)^2.
  entropy: sum of p log p over heads, i.e. minus the entropy.
  policy_cloning: sum over replay columns and heads of KL(mu || pi).
  value_cloning: sum over replay columns of (V - V_behaviour)^2.
  vs: `[T, B]` V-trace value targets (gradient stopped).
  pg_advantages: `[T, B]` V-trace policy-gradient advantages, before any
    `clip_advantage` (gradient stopped).
  log_rhos: `[T, B]` log pi(a) - log mu(a) summed over heads.
"""


def clip_rewards(rewards, mode):
  """Clips rewards the way IMPALA's learner does.

  T is time, B is batch (any shape works; the clipping is elementwise).

  Args:
    rewards: float32 `[T, B]`.
    mode: one of `REWARD_CLIPPING_MODES`:
      'abs_one': clip to [-1, 1].
      'soft_asymmetric': 5 * tanh(r / 5), with negative rewards further scaled
        by 0.3 (a smooth squashing that punishes less than it rewards).
      'none': unchanged.

  Returns:
    float32 tensor shaped like `rewards`.

  Raises:
    ValueError: for an unknown mode.
  """
  rewards = tf.convert_to_tensor(rewards)
  if mode == 'abs_one':
    return tf.clip_by_value(rewards, -1.0, 1.0)
  if mode == 'soft_asymmetric':
    squeezed = tf.tanh(rewards / 5.0)
    return tf.where(rewards < 0.0, 0.3 * squeezed, squeezed) * 5.0
  if mode == 'none':
    return rewards
  raise ValueError(f'clip_rewards: unknown mode {mode!r}; expected one of '
                   f'{REWARD_CLIPPING_MODES}.')


def _discounted_returns_maths(rewards, discounts, bootstrap_value):
  return tf.stop_gradient(
      vtrace.scan_discounted_sum(rewards, discounts, bootstrap_value))


# As for V-trace: one XLA dispatch when eager, inlined ops inside a graph.
_discounted_returns_xla = tf.function(_discounted_returns_maths,
                                      jit_compile=True, reduce_retracing=True,
                                      autograph=False)


def discounted_returns(rewards, discounts, bootstrap_value):
  """Bootstrapped discounted returns G_t = r_t + d_t G_{t+1}, G_T = bootstrap.

  T is time, B is batch.

  Args:
    rewards: float32 `[T, B]`, r_t.
    discounts: float32 `[T, B]`, d_t (0 where an episode ended).
    bootstrap_value: float32 `[B]`, G_T.

  Returns:
    float32 `[T, B]` returns, gradient stopped.

  Raises:
    ValueError: when the ranks do not match.
  """
  name = 'discounted_returns'
  rewards = tf.convert_to_tensor(rewards)
  discounts = tf.convert_to_tensor(discounts, dtype=rewards.dtype)
  bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=rewards.dtype)
  guards.check_rank(name, 'rewards', rewards, 2)
  guards.check_rank(name, 'discounts', discounts, 2)
  guards.check_rank(name, 'bootstrap_value', bootstrap_value, 1)
  if tf.executing_eagerly():
    return _discounted_returns_xla(rewards, discounts, bootstrap_value)
  return _discounted_returns_maths(rewards, discounts, bootstrap_value)


def cut_at_truncations(rewards, discounts, values, truncated):
  """Keeps value targets from crossing a truncated episode end.

  T is time, B is batch. Row t describes the transition from x_t; where it
  was truncated (time limit, env crash), the batched env has already
  replaced x_{t+1} with the first observation of the next episode, so any
  target that bootstraps through row t would mix two episodes. This cuts
  the trace at row t instead:

    rewards_t <- V(x_t) (gradient stopped), discounts_t <- 0.

  Every return-like target built by a backward recursion over
  (rewards, discounts) then equals V(x_t) at row t and bootstraps from
  V(x_t) at row t - 1: V-trace gives v_t = V(x_t) and a policy-gradient
  advantage of exactly 0 there, and TD(lambda), GAE and discounted returns
  give a zero advantage and a target equal to the value. The truncated
  step itself is not learned from (its reward is lost, one step per
  truncation), and nothing of the next episode reaches the targets of the
  episode that was cut.

  The alternative, bootstrapping from the real final observation, would
  need the actor to send that observation (one more frame per truncation
  through every unroll and the replay) or its value under the behaviour
  weights (stale by the time the learner uses it); cutting needs only the
  `truncated` flag, which every unroll already holds.

  Args:
    rewards: float32 `[T, B]`, r_t (clipped and scaled).
    discounts: float32 `[T, B]`, d_t.
    values: float32 `[T, B]`, V(x_t).
    truncated: bool `[T, B]`, row t's transition was truncated.

  Returns:
    (rewards, discounts), float32 `[T, B]` each, gradients stopped.

  Raises:
    ValueError: when a rank is not 2.
  """
  name = 'cut_at_truncations'
  rewards = tf.convert_to_tensor(rewards)
  discounts = tf.convert_to_tensor(discounts, dtype=rewards.dtype)
  values = tf.stop_gradient(tf.convert_to_tensor(values, dtype=rewards.dtype))
  truncated = tf.convert_to_tensor(truncated, dtype=tf.bool)
  for arg_name, tensor in (('rewards', rewards), ('discounts', discounts),
                           ('values', values), ('truncated', truncated)):
    guards.check_rank(name, arg_name, tensor, 2)
  return (tf.stop_gradient(tf.where(truncated, values, rewards)),
          tf.stop_gradient(tf.where(truncated, tf.zeros_like(discounts),
                                    discounts)))


def _negative_entropy(logits):
  """sum_a p(a) log p(a) per step; exact zeros for masked (p = 0) choices."""
  log_probs = tf.nn.log_softmax(logits)
  return tf.reduce_sum(tf.exp(log_probs) * log_probs, axis=-1)


def _kl_behaviour_to_target(behaviour_logits, target_logits):
  """KL(mu || pi) = sum_a mu(a) (log mu(a) - log pi(a)) per step."""
  behaviour_log_probs = tf.nn.log_softmax(behaviour_logits)
  target_log_probs = tf.nn.log_softmax(target_logits)
  return tf.reduce_sum(
      tf.exp(behaviour_log_probs) * (behaviour_log_probs - target_log_probs),
      axis=-1)


def impala_clear_loss(target_logits,
                      behaviour_logits,
                      actions,
                      values,
                      bootstrap_value,
                      behaviour_values,
                      rewards,
                      discounts,
                      num_replay,
                      baseline_cost,
                      entropy_cost,
                      policy_cloning_cost,
                      value_cloning_cost,
                      clip_advantage=False,
                      clip_rho_threshold=1.0,
                      clip_pg_rho_threshold=1.0):
  """The IMPALA V-trace actor-critic loss plus the CLEAR cloning terms.

  T is time, B is batch, A_i the number of choices of action head i. All
  `[T, B]` inputs are already aligned: row t holds the state x_t the
  learner evaluated, the action a_t taken there, and the reward and
  discount of the transition it led to. Batch columns `[:num_replay]` are
  replayed trajectories, the rest are fresh ones. Each term is summed over
  time and batch (and over heads where there are heads):

    log_rho = sum_i log pi_i(a_i) - log mu_i(a_i)
    policy_gradient = sum -(sum_i log pi_i(a_i)) * A_vtrace
    baseline = 0.5 * sum (vs - V)^2
    entropy = sum_i sum p_i log p_i            (minus the entropy)
    policy_cloning = sum_replay sum_i KL(mu_i || pi_i)
    value_cloning = sum_replay (V - V_behaviour)^2

  and loss = policy_gradient + baseline_cost * baseline + entropy_cost *
  entropy + policy_cloning_cost * policy_cloning + value_cloning_cost *
  value_cloning. Gradients reach only `target_logits` and `values`; the
  V-trace targets and advantages are constants. Masked choices may hold
  large negative logits (e.g. -1e9, not -inf); they add exactly 0 to the
  entropy and KL terms.

  Args:
    target_logits: dict name -> float32 `[T, B, A_i]`, the learner's logits.
    behaviour_logits: dict name -> float32 `[T, B, A_i]`, the acting
      policy's logits (same keys).
    actions: dict name -> int32 `[T, B]`, the actions taken (same keys).
    values: float32 `[T, B]`, the learner's V(x_t).
    bootstrap_value: float32 `[B]`, the learner's V(x_T).
    behaviour_values: float32 `[T, B]`, V(x_t) as recorded when acting.
    rewards: float32 `[T, B]`, clipped rewards.
    discounts: float32 `[T, B]`, per-step discounts (0 at episode ends;
      see `cut_at_truncations` for truncated ones).
    num_replay: python int in [0, B], number of leading replayed columns.
    baseline_cost: python float or scalar, weight of the baseline term.
    entropy_cost: python float or scalar, weight of the entropy term.
    policy_cloning_cost: python float or scalar, weight of policy cloning.
    value_cloning_cost: python float or scalar, weight of value cloning.
    clip_advantage: python bool; when True, negative V-trace advantages are
      set to 0 in the policy-gradient term.
    clip_rho_threshold: V-trace rho_bar (None disables it).
    clip_pg_rho_threshold: V-trace truncation of the policy-gradient
      importance weights (None disables it).

  Returns:
    `(loss, extra)`: loss a float32 scalar, extra an `ImpalaClearLossExtra`.

  Raises:
    ValueError: when the nests differ, a rank is wrong or num_replay is out
      of range.
  """
  name = 'impala_clear_loss'
  try:
    tf.nest.assert_same_structure(target_logits, behaviour_logits)
    tf.nest.assert_same_structure(target_logits, actions)
  except (ValueError, TypeError) as e:
    raise ValueError(f'{name}: target_logits, behaviour_logits and actions '
                     f'must have the same structure: {e}') from e
  target_logits = tf.nest.map_structure(tf.convert_to_tensor, target_logits)
  behaviour_logits = tf.nest.map_structure(
      lambda x: tf.stop_gradient(tf.convert_to_tensor(x)), behaviour_logits)
  actions = tf.nest.map_structure(tf.convert_to_tensor, actions)
  for head_target, head_behaviour, head_actions in zip(
      tf.nest.flatten(target_logits), tf.nest.flatten(behaviour_logits),
      tf.nest.flatten(actions)):
    guards.check_rank(name, 'target_logits', head_target, 3)
    guards.check_rank(name, 'behaviour_logits', head_behaviour, 3)
    guards.check_rank(name, 'actions', head_actions, 2)
  if not tf.nest.flatten(target_logits):
    raise ValueError(f'{name}: at least one action head is needed.')

  values = tf.convert_to_tensor(values)
  dtype = values.dtype
  bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=dtype)
  behaviour_values = tf.stop_gradient(
      tf.convert_to_tensor(behaviour_values, dtype=dtype))
  rewards = tf.stop_gradient(tf.convert_to_tensor(rewards, dtype=dtype))
  discounts = tf.stop_gradient(tf.convert_to_tensor(discounts, dtype=dtype))
  for arg_name, tensor in (('values', values),
                           ('behaviour_values', behaviour_values),
                           ('rewards', rewards), ('discounts', discounts)):
    guards.check_rank(name, arg_name, tensor, 2)
  guards.check_rank(name, 'bootstrap_value', bootstrap_value, 1)
  batch_size = values.shape[1]
  try:
    num_replay = operator.index(num_replay)
  except TypeError as e:
    raise ValueError(f'{name}: num_replay must be a python int, got '
                     f'{num_replay!r}.') from e
  if num_replay < 0 or (batch_size is not None and num_replay > batch_size):
    raise ValueError(f'{name}: num_replay must be a python int in [0, B], '
                     f'got {num_replay!r} with B = {batch_size}.')

  # Log-probabilities of the taken joint action (product over heads).
  vtrace_returns = vtrace.from_logits(
      behaviour_policy_logits=behaviour_logits,
      target_policy_logits=target_logits,
      actions=actions,
      discounts=discounts,
      rewards=rewards,
      values=values,
      bootstrap_value=bootstrap_value,
      clip_rho_threshold=clip_rho_threshold,
      clip_pg_rho_threshold=clip_pg_rho_threshold)
  target_log_probs = vtrace_returns.target_action_log_probs
  log_rhos = vtrace_returns.log_rhos
  vs = tf.stop_gradient(vtrace_returns.vs)
  pg_advantages = tf.stop_gradient(vtrace_returns.pg_advantages)

  advantages = pg_advantages
  if clip_advantage:
    advantages = tf.maximum(advantages, tf.zeros_like(advantages))
  policy_gradient = tf.reduce_sum(-target_log_probs * advantages)
  baseline = 0.5 * tf.reduce_sum(tf.square(vs - values))
  entropy = tf.add_n([tf.reduce_sum(_negative_entropy(head))
                      for head in tf.nest.flatten(target_logits)])

  # CLEAR cloning terms, on the replayed columns only.
  policy_cloning = tf.add_n([
      tf.reduce_sum(_kl_behaviour_to_target(head_behaviour[:, :num_replay],
                                            head_target[:, :num_replay]))
      for head_target, head_behaviour in zip(
          tf.nest.flatten(target_logits), tf.nest.flatten(behaviour_logits))])
  value_cloning = tf.reduce_sum(
      tf.square(values[:, :num_replay] - behaviour_values[:, :num_replay]))

  total = (policy_gradient + baseline_cost * baseline +
           entropy_cost * entropy + policy_cloning_cost * policy_cloning +
           value_cloning_cost * value_cloning)
  extra = ImpalaClearLossExtra(
      total=total,
      policy_gradient=policy_gradient,
      baseline=baseline,
      entropy=entropy,
      policy_cloning=policy_cloning,
      value_cloning=value_cloning,
      vs=vs,
      pg_advantages=pg_advantages,
      log_rhos=log_rhos)
  return total, extra
