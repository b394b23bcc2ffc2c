"""Value targets and advantages from a time-major batch of transitions.

T is time, B is batch. Every estimator takes the same four tensors, where
row t describes the transition x_t --a_t--> x_{t+1}:

  rewards          float `[T, B, ...]`  r_t
  discounts        float `[T, B, ...]`  d_t: gamma times "not terminated"
                                        for transition t (the caller applies
                                        its own truncation policy)
  values           float `[T, B, ...]`  V(x_t)
  bootstrap_value  float `[B, ...]`     V(x_T)

and returns a `ValueEstimate(returns, advantages)` of `[T, B, ...]` tensors
with gradients stopped (they are targets). The trailing `...` dimensions are
optional (for example several value heads) and shared by all arguments.

Writing V(x_T) for the bootstrap value and delta_t = r_t + d_t V(x_{t+1}) -
V(x_t) for the TD error, the estimators are:

  td0:        G_t = r_t + d_t V(x_{t+1})
  td1:        G_t = r_t + d_t G_{t+1},                          G_T = V(x_T)
  td_lambda:  G_t = r_t + d_t ((1 - lambda) V(x_{t+1}) + lambda G_{t+1})
  gae:        A_t = delta_t + d_t lambda A_{t+1},  A_T = 0,  G_t = A_t + V(x_t)
  vtrace:     G_t = v_t of V-trace, A_t its policy-gradient advantage

GAE and TD(lambda) give the same returns; lambda = 0 gives TD(0) and lambda
= 1 gives the Monte-Carlo (TD(1)) return. Except for V-trace, whose
advantages carry the truncated importance weight, advantages are
returns - values. All recursions run through
`clear.ops.vtrace.scan_discounted_sum`, so a static or an unknown T both work,
eagerly and inside `tf.function`.
"""

import collections
import numbers

import tensorflow as tf

from clear.ops import vtrace as vtrace_lib

ESTIMATORS = ('td0', 'td1', 'td_lambda', 'gae', 'vtrace')

ValueEstimate = collections.namedtuple('ValueEstimate',
                                       ['returns', 'advantages'])
ValueEstimate.__doc__ = """Value targets and advantages, gradients stopped.

Attributes:
  returns: float `[T, B, ...]`, the value targets G_t.
  advantages: float `[T, B, ...]`, G_t - V(x_t) (for V-trace: the
    policy-gradient advantages).
"""


def _check_inputs(fn_name, rewards, discounts, values, bootstrap_value):
  """Converts to tensors of the rewards' dtype and checks ranks and shapes."""
  rewards = tf.convert_to_tensor(rewards)
  if not rewards.dtype.is_floating:
    raise ValueError(f'{fn_name}: rewards must be a float tensor, got '
                     f'{rewards.dtype}.')
  dtype = rewards.dtype
  discounts = tf.convert_to_tensor(discounts, dtype=dtype)
  values = tf.convert_to_tensor(values, dtype=dtype)
  bootstrap_value = tf.convert_to_tensor(bootstrap_value, dtype=dtype)
  rank = rewards.shape.rank
  if rank is None or rank < 2:
    raise ValueError(f'{fn_name}: rewards must have rank 2 or more '
                     f'([T, B, ...]), got shape {rewards.shape}.')
  for arg_name, tensor in (('discounts', discounts), ('values', values)):
    if tensor.shape.rank != rank:
      raise ValueError(f'{fn_name}: {arg_name} must have rank {rank} like '
                       f'rewards, got shape {tensor.shape}.')
    if not tensor.shape.is_compatible_with(rewards.shape):
      raise ValueError(f'{fn_name}: {arg_name} must have the shape of '
                       f'rewards {rewards.shape}, got {tensor.shape}.')
  if bootstrap_value.shape.rank != rank - 1:
    raise ValueError(f'{fn_name}: bootstrap_value must have rank {rank - 1} '
                     f'([B, ...]), got shape {bootstrap_value.shape}.')
  if not bootstrap_value.shape.is_compatible_with(rewards.shape[1:]):
    raise ValueError(f'{fn_name}: bootstrap_value must have shape '
                     f'{rewards.shape[1:]} ([B, ...] of rewards), got '
                     f'{bootstrap_value.shape}.')
  return rewards, discounts, values, bootstrap_value


def _check_lambda(fn_name, lambda_, dtype):
  """Python numbers must lie in [0, 1]; tensors must broadcast to `[T, B]`."""
  if isinstance(lambda_, numbers.Real):
    if not 0.0 <= lambda_ <= 1.0:
      raise ValueError(f'{fn_name}: lambda_ must be in [0, 1], got '
                       f'{lambda_}.')
    return tf.constant(lambda_, dtype=dtype)
  return tf.convert_to_tensor(lambda_, dtype=dtype)


def _next_values(values, bootstrap_value):
  """V(x_{t+1}) for t = 0 .. T-1: values shifted up, bootstrap appended."""
  return tf.concat([values[1:], bootstrap_value[tf.newaxis]], axis=0)


def _estimate(returns, advantages):
  return ValueEstimate(returns=tf.stop_gradient(returns),
                       advantages=tf.stop_gradient(advantages))


def td0(rewards, discounts, values, bootstrap_value):
  """One-step TD targets G_t = r_t + d_t V(x_{t+1}).

  T is time, B is batch; see the module docstring for the conventions.

  Args:
    rewards: float32 `[T, B, ...]`, r_t.
    discounts: float32 `[T, B, ...]`, d_t (0 where transition t terminated).
    values: float32 `[T, B, ...]`, V(x_t).
    bootstrap_value: float32 `[B, ...]`, V(x_T).

  Returns:
    `ValueEstimate`; advantages are the TD errors delta_t.

  Raises:
    ValueError: when ranks or shapes do not match.
  """
  rewards, discounts, values, bootstrap_value = _check_inputs(
      'td0', rewards, discounts, values, bootstrap_value)
  returns = rewards + discounts * _next_values(values, bootstrap_value)
  return _estimate(returns, returns - values)


def td1(rewards, discounts, values, bootstrap_value):
  """Monte-Carlo returns G_t = r_t + d_t G_{t+1}, bootstrapped G_T = V(x_T).

  T is time, B is batch; see the module docstring for the conventions.

  Args:
    rewards: float32 `[T, B, ...]`, r_t.
    discounts: float32 `[T, B, ...]`, d_t (0 where transition t terminated).
    values: float32 `[T, B, ...]`, V(x_t), used only for the advantages.
    bootstrap_value: float32 `[B, ...]`, V(x_T).

  Returns:
    `ValueEstimate`.

  Raises:
    ValueError: when ranks or shapes do not match.
  """
  rewards, discounts, values, bootstrap_value = _check_inputs(
      'td1', rewards, discounts, values, bootstrap_value)
  returns = vtrace_lib.scan_discounted_sum(rewards, discounts,
                                          bootstrap_value)
  return _estimate(returns, returns - values)


def td_lambda(rewards, discounts, values, bootstrap_value, lambda_):
  """Lambda-returns G_t = r_t + d_t ((1 - lambda) V(x_{t+1}) + lambda G_{t+1}).

  T is time, B is batch; see the module docstring for the conventions. The
  recursion starts from G_T = V(x_T), so the last step is the TD(0) target.

  Args:
    rewards: float32 `[T, B, ...]`, r_t.
    discounts: float32 `[T, B, ...]`, d_t (0 where transition t terminated).
    values: float32 `[T, B, ...]`, V(x_t).
    bootstrap_value: float32 `[B, ...]`, V(x_T).
    lambda_: python float in [0, 1], or a float tensor broadcastable to
      `[T, B, ...]` (e.g. a scalar).

  Returns:
    `ValueEstimate`.

  Raises:
    ValueError: when ranks or shapes do not match, or a python lambda_ lies
      outside [0, 1].
  """
  name = 'td_lambda'
  rewards, discounts, values, bootstrap_value = _check_inputs(
      name, rewards, discounts, values, bootstrap_value)
  lambda_ = _check_lambda(name, lambda_, rewards.dtype)
  next_values = _next_values(values, bootstrap_value)
  sequence = rewards + discounts * (1.0 - lambda_) * next_values
  decay = discounts * lambda_ * tf.ones_like(discounts)
  returns = vtrace_lib.scan_discounted_sum(sequence, decay, bootstrap_value)
  return _estimate(returns, returns - values)


def gae(rewards, discounts, values, bootstrap_value, lambda_):
  """Generalised advantage estimation (Schulman et al. 2015, 1506.02438).

  T is time, B is batch; see the module docstring for the conventions.
  A_t = delta_t + d_t lambda A_{t+1} with A_T = 0 and delta_t = r_t + d_t
  V(x_{t+1}) - V(x_t); the returns A_t + V(x_t) equal the TD(lambda) ones.

  Args:
    rewards: float32 `[T, B, ...]`, r_t.
    discounts: float32 `[T, B, ...]`, d_t (0 where transition t terminated).
    values: float32 `[T, B, ...]`, V(x_t).
    bootstrap_value: float32 `[B, ...]`, V(x_T).
    lambda_: python float in [0, 1], or a float tensor broadcastable to
      `[T, B, ...]`.

  Returns:
    `ValueEstimate` with the GAE advantages.

  Raises:
    ValueError: when ranks or shapes do not match, or a python lambda_ lies
      outside [0, 1].
  """
  name = 'gae'
  rewards, discounts, values, bootstrap_value = _check_inputs(
      name, rewards, discounts, values, bootstrap_value)
  lambda_ = _check_lambda(name, lambda_, rewards.dtype)
  deltas = (rewards + discounts * _next_values(values, bootstrap_value) -
            values)
  decay = discounts * lambda_ * tf.ones_like(discounts)
  advantages = vtrace_lib.scan_discounted_sum(deltas, decay,
                                          tf.zeros_like(bootstrap_value))
  return _estimate(advantages + values, advantages)


def vtrace(rewards, discounts, values, bootstrap_value, log_rhos,
                    clip_rho_threshold=1.0, clip_pg_rho_threshold=1.0):
  """V-trace targets and policy-gradient advantages (see `clear.ops.vtrace`).

  T is time, B is batch; see the module docstring for the conventions. With
  log_rhos = 0 (on-policy) the targets are the TD(1) returns.

  Args:
    rewards: float32 `[T, B, ...]`, r_t.
    discounts: float32 `[T, B, ...]`, d_t (0 where transition t terminated).
    values: float32 `[T, B, ...]`, V(x_t).
    bootstrap_value: float32 `[B, ...]`, V(x_T).
    log_rhos: float32 `[T, B, ...]`, log pi(a_t | x_t) - log mu(a_t | x_t).
    clip_rho_threshold: V-trace rho_bar (None disables it).
    clip_pg_rho_threshold: truncation of the policy-gradient importance
      weights (None disables it).

  Returns:
    `ValueEstimate(returns=vs, advantages=pg_advantages)`.

  Raises:
    ValueError: when ranks or shapes do not match.
  """
  name = 'vtrace'
  rewards, discounts, values, bootstrap_value = _check_inputs(
      name, rewards, discounts, values, bootstrap_value)
  log_rhos = tf.convert_to_tensor(log_rhos, dtype=rewards.dtype)
  if (log_rhos.shape.rank != rewards.shape.rank or
      not log_rhos.shape.is_compatible_with(rewards.shape)):
    raise ValueError(f'{name}: log_rhos must have the shape of rewards '
                     f'{rewards.shape}, got {log_rhos.shape}.')
  result = vtrace_lib.from_importance_weights(
      log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values,
      bootstrap_value=bootstrap_value, clip_rho_threshold=clip_rho_threshold,
      clip_pg_rho_threshold=clip_pg_rho_threshold)
  return _estimate(result.vs, result.pg_advantages)



def estimate(name, rewards, discounts, values, bootstrap_value, lambda_=0.95,
             log_rhos=None):
  """Runs the estimator called `name` (one of `ESTIMATORS`).

  T is time, B is batch; see the module docstring for the conventions.
  `lambda_` is used by 'td_lambda' and 'gae' only, `log_rhos` by 'vtrace'
  only (with the default clipping thresholds of 1).

  Args:
    name: python str, one of `ESTIMATORS`.
    rewards: float32 `[T, B, ...]`, r_t.
    discounts: float32 `[T, B, ...]`, d_t (0 where transition t terminated).
    values: float32 `[T, B, ...]`, V(x_t).
    bootstrap_value: float32 `[B, ...]`, V(x_T).
    lambda_: python float in [0, 1] or a float tensor broadcastable to
      `[T, B, ...]`.
    log_rhos: float32 `[T, B, ...]` log importance weights; required for
      'vtrace'.

  Returns:
    `ValueEstimate`.

  Raises:
    ValueError: for an unknown name, 'vtrace' without log_rhos, or bad
      shapes.
  """
  if name == 'td0':
    return td0(rewards, discounts, values, bootstrap_value)
  if name == 'td1':
    return td1(rewards, discounts, values, bootstrap_value)
  if name == 'td_lambda':
    return td_lambda(rewards, discounts, values, bootstrap_value, lambda_)
  if name == 'gae':
    return gae(rewards, discounts, values, bootstrap_value, lambda_)
  if name == 'vtrace':
    if log_rhos is None:
      raise ValueError('estimate: the vtrace estimator needs log_rhos.')
    return vtrace(rewards, discounts, values, bootstrap_value, log_rhos)
  raise ValueError(f'estimate: unknown estimator {name!r}; expected one of '
                   f'{ESTIMATORS}.')
