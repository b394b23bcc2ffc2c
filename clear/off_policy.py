"""Machinery shared by the off-policy actor-critic learners (SAC, DDPG).

T is time, B is batch, N is the number of critics. The pieces:

- Networks: `MLP`, and `CriticEnsemble`, N MLP critics held as stacked
  `[N, in, out]` weights so that all of them run in one batched matmul per
  layer. Observations are rank-0/1 arrays concatenated into one vector.
- Actions: `ActionLayout` splits an action spec into at most one discrete
  head and any number of bounded continuous heads, whose values it maps to
  and from one `[-1, 1]` vector (what networks see and produce).
- Target networks: `TargetUpdater` copies online variables into targets,
  target <- (1 - tau) target + tau online every `period` updates (tau = 1 is
  a hard copy).
- Replay: the policy's `clear.replay.ReplayBuffer` holds whole unrolls
  `[T + 1]`; a learner samples windows of L + 1 steps (L transitions) out of
  them, uniformly or by priority (`sample_segments`), and `transitions`
  lines a window up into time-major transitions.
- Targets and losses: `q_targets` runs a `clear.value_estimators` estimator
  over a segment, `critic_ensemble_loss` regresses every critic on them,
  `segment_priorities` turns TD errors into replay priorities.
- `OffPolicyPolicy`: the `clear.policy.Policy` side both algorithms share
  (inserting fresh unrolls, learning_starts, updates per step, many
  gradient updates per `tf.function` call, skipped non-finite updates,
  counters, summaries, checkpointables, acting weights).

Transitions and episode ends. In a window, transition t goes from
observation t to observation t + 1 with the action `agent_outputs.action[t +
1]`, and the reward, `done` and `truncated` of `env_outputs[t + 1]`. After a
`done` the environment has already reset, so observation t + 1 belongs to
the next episode and is never bootstrapped from:
- termination: the discount is 0 (`clear.learner.transition_discounts`);
- truncation (time limit): the last observation of the episode is lost, so
  the transition cannot be learnt from. It is masked out of the critic loss
  (weight 0), and for the estimator its target is replaced by the target
  value of its own start state, V(x_t) (reward V(x_t), discount 0), so
  multi-step targets of earlier transitions stop there with a one-step
  bootstrap from V(x_t) instead of running into the next episode.
"""

import abc
import math
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np
import sonnet as snt
import tensorflow as tf
import tree

from agents import initializers
from agents import torsos
from clear import learner as learner_lib
from clear import policy as policy_lib
from clear import replay as replay_lib
from clear import types
from clear import value_estimators

# Estimators that give Q-value targets from (rewards, discounts, values).
# V-trace targets estimate V(x_t) and need behaviour log-probabilities, which
# continuous heads do not store, so it is not offered here.
Q_ESTIMATORS = ('td0', 'td1', 'td_lambda', 'gae')
NETWORKS = ('auto', 'mlp')
# Bytes of sampled segments sent to one tf.function call at most; more
# updates than fit are split over several calls (priorities are refreshed
# between calls).
SAMPLE_BYTES_PER_CALL = 32 * 2**20


# --- Observations and networks ------------------------------------------------


def observation_keys(spec: types.EnvSpec) -> List[str]:
  """The observation names an MLP reads, in spec order.

  Raises:
    ValueError: the spec has an observation of rank 2 or more.
  """
  bad = [k for k, s in spec.observation_spec.items() if len(s.shape) > 1]
  if bad:
    raise ValueError(
        f'Off-policy (SAC/DDPG) networks take rank-0/1 observations only; '
        f'got {bad} in the observation spec of {spec.name!r}.')
  return list(spec.observation_spec)


def observation_size(spec: types.EnvSpec) -> int:
  return int(sum(np.prod(s.shape, dtype=np.int64)
                 for s in spec.observation_spec.values()))


def flat_observation(observation, keys) -> tf.Tensor:
  """Concatenates `[N]` / `[N, d]` observations into float32 `[N, D]`."""
  parts = []
  for key in keys:
    x = torsos.to_float(observation[key])
    parts.append(x[:, None] if x.shape.rank == 1 else x)
  return tf.concat(parts, axis=-1)


def merge_leading(x: tf.Tensor, num_dims: int = 2) -> tf.Tensor:
  """`[d0, ..., d_{k-1}, ...]` -> `[d0 * ... * d_{k-1}, ...]`."""
  return tf.reshape(x, [-1] + x.shape[num_dims:].as_list())


class MLP(snt.Module):
  """ReLU hidden layers and a linear output layer.

  Args:
    hidden_sizes: widths of the hidden layers.
    output_size: width of the output.
    w_init: weight initialiser (e.g. `agents.initializers.SeededFanIn`).
  """

  def __init__(self, hidden_sizes: Sequence[int], output_size: int, w_init,
               name: str = 'mlp'):
    super().__init__(name=name)
    self._layers = [snt.Linear(h, w_init=w_init, name=f'linear{i}')
                    for i, h in enumerate(hidden_sizes)]
    self._output = snt.Linear(output_size, w_init=w_init, name='output')

  def __call__(self, x: tf.Tensor) -> tf.Tensor:
    for layer in self._layers:
      x = tf.nn.relu(layer(x))
    return self._output(x)


class CriticEnsemble(snt.Module):
  """N independent MLP critics evaluated in one pass.

  Layer l holds weights `[N, in, out]` and biases `[N, 1, out]`; critic i
  uses slice i, initialised like a single `snt.Linear` (truncated normal,
  stddev 1 / sqrt(in)) from its own seeds. Weights exist once built.

  Args:
    num_critics: N.
    input_size: width of the input rows.
    hidden_sizes: widths of the hidden layers.
    output_size: outputs per critic (1 for Q(s, a), the number of discrete
      actions for a Q network).
    rng: numpy Generator that seeds the initialisation.
  """

  def __init__(self, num_critics: int, input_size: int,
               hidden_sizes: Sequence[int], output_size: int,
               rng: np.random.Generator, name: str = 'critics'):
    super().__init__(name=name)
    self.num_critics = num_critics
    self.input_size = input_size
    self.output_size = output_size
    init = initializers.SeededFanIn(rng)
    sizes = [input_size] + list(hidden_sizes) + [output_size]
    self._weights, self._biases = [], []
    with self.name_scope:
      for layer, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = tf.stack([init([n_in, n_out], tf.float32)
                      for _ in range(num_critics)])
        self._weights.append(tf.Variable(w, name=f'w{layer}'))
        self._biases.append(tf.Variable(
            tf.zeros([num_critics, 1, n_out]), name=f'b{layer}'))

  def __call__(self, inputs: tf.Tensor) -> tf.Tensor:
    """float32 `[M, in]` (shared by all critics) or `[N, M, in]` ->
    `[N, M, out]`."""
    x = tf.convert_to_tensor(inputs, tf.float32)
    if x.shape.rank == 2:
      x = tf.einsum('mi,nio->nmo', x, self._weights[0]) + self._biases[0]
    elif x.shape.rank == 3:
      x = tf.matmul(x, self._weights[0]) + self._biases[0]
    else:
      raise ValueError('CriticEnsemble: inputs must be [M, in] or '
                       f'[N, M, in], got shape {x.shape}.')
    for w, b in zip(self._weights[1:], self._biases[1:]):
      x = tf.matmul(tf.nn.relu(x), w) + b
    return x


def hidden_sizes(agent_config: policy_lib.AgentConfig) -> List[int]:
  """Two hidden layers of `core_size` units (actors get only AgentConfig).

  Raises:
    ValueError: the network is not an MLP.
  """
  if agent_config.network not in NETWORKS:
    raise ValueError(
        f'Off-policy (SAC/DDPG) policies use MLP networks: network must be '
        f'one of {NETWORKS}, got {agent_config.network!r}.')
  if agent_config.core_size < 1:
    raise ValueError(
        f'core_size must be >= 1, got {agent_config.core_size}.')
  return [agent_config.core_size] * 2


# --- Actions ------------------------------------------------------------------


class ActionLayout:
  """How a policy sees an action spec: <= 1 discrete and >= 0 continuous heads.

  Continuous heads are concatenated, flattened, into one vector of
  `continuous_size` entries in [-1, 1]; `unit_to_env` and `env_to_unit` map
  between that vector and the per-head actions within their bounds.

  Raises:
    ValueError: more than one discrete head, or a continuous head with
      minimum >= maximum.
  """

  def __init__(self, action_spec, algorithm: str = 'SAC'):
    discrete = [k for k, s in action_spec.items()
                if isinstance(s, types.DiscreteSpec)]
    if len(discrete) > 1:
      raise ValueError(
          f'{algorithm} handles at most one discrete action head, got '
          f'{discrete}' + (' (a dynamic step multiplier adds one; use '
                           'fixed_step_mul)' if types.STEP_MUL_KEY in
                           discrete else '') + '.')
    self.discrete_key = discrete[0] if discrete else None
    self.discrete_spec = action_spec[discrete[0]] if discrete else None
    self.continuous_keys = [k for k, s in action_spec.items()
                            if isinstance(s, types.ContinuousSpec)]
    self.specs = {k: action_spec[k] for k in self.continuous_keys}
    self.sizes = [int(np.prod(s.shape, dtype=np.int64))
                  for s in self.specs.values()]
    for key, s in self.specs.items():
      if not s.minimum < s.maximum:
        raise ValueError(f'Action head {key!r}: minimum {s.minimum} must be '
                         f'below maximum {s.maximum}.')
    self.continuous_size = int(sum(self.sizes))
    half = [np.full([n], (s.maximum - s.minimum) / 2.0, np.float32)
            for n, s in zip(self.sizes, self.specs.values())]
    mid = [np.full([n], (s.maximum + s.minimum) / 2.0, np.float32)
           for n, s in zip(self.sizes, self.specs.values())]
    self.half_range = (np.concatenate(half) if half
                       else np.zeros([0], np.float32))
    self.midpoint = np.concatenate(mid) if mid else np.zeros([0], np.float32)

  @property
  def num_discrete(self) -> int:
    return self.discrete_spec.num_values if self.discrete_spec else 0

  @property
  def log_half_range(self) -> float:
    """Sum of log((max - min) / 2) over the continuous entries: the log
    Jacobian of the map from [-1, 1] to the bounds."""
    return float(np.sum(np.log(self.half_range)))

  def env_to_unit(self, actions) -> tf.Tensor:
    """dict of `[..., *shape]` continuous actions -> float32 `[..., C]`."""
    parts = []
    for key, size in zip(self.continuous_keys, self.sizes):
      x = tf.cast(actions[key], tf.float32)
      shape = self.specs[key].shape
      lead = tf.shape(x)[:x.shape.rank - len(shape)]
      parts.append(tf.reshape(x, tf.concat([lead, [size]], 0)))
    x = tf.concat(parts, axis=-1)
    return (x - self.midpoint) / self.half_range

  def unit_to_env(self, unit: tf.Tensor) -> Dict[str, tf.Tensor]:
    """float32 `[..., C]` in [-1, 1] -> dict of per-head actions in bounds.

    The result is clipped to the bounds, so float round-off never leaves
    them.
    """
    x = unit * self.half_range + self.midpoint
    out, offset = {}, 0
    for key, size in zip(self.continuous_keys, self.sizes):
      s = self.specs[key]
      piece = tf.clip_by_value(x[..., offset:offset + size], s.minimum,
                               s.maximum)
      lead = tf.shape(piece)[:-1]
      out[key] = tf.reshape(piece, tf.concat([lead, list(s.shape)], 0))
      offset += size
    return out


# --- Target networks ----------------------------------------------------------


def soft_update(source: Sequence[tf.Variable], target: Sequence[tf.Variable],
                tau):
  """target <- (1 - tau) * target + tau * source, variable by variable."""
  for s, t in zip(source, target):
    t.assign((1.0 - tau) * t + tau * s)


class TargetUpdater:
  """Moves target variables towards online ones every `period` calls.

  Construction hard-copies the online variables into the targets. Each call
  counts; on every `period`-th call the targets move by `tau` (tau = 1 is a
  hard copy). Works eagerly and inside `tf.function`.

  Args:
    source: online variables.
    target: target variables, same shapes and order.
    tau: float in (0, 1].
    period: int >= 1.

  Attributes:
    num_calls: int64 variable, calls so far (checkpoint it).
  """

  def __init__(self, source: Sequence[tf.Variable],
               target: Sequence[tf.Variable], tau: float, period: int,
               name: str = 'target_updates'):
    source, target = list(source), list(target)
    if len(source) != len(target):
      raise ValueError(f'TargetUpdater: {len(source)} online variables but '
                       f'{len(target)} targets.')
    for s, t in zip(source, target):
      if s.shape != t.shape or s.dtype != t.dtype:
        raise ValueError(f'TargetUpdater: online {s.name} {s.shape} does not '
                         f'match target {t.name} {t.shape}.')
    if not 0.0 < tau <= 1.0:
      raise ValueError(f'TargetUpdater: tau must be in (0, 1], got {tau}.')
    if period < 1:
      raise ValueError(f'TargetUpdater: period must be >= 1, got {period}.')
    self.source, self.target = source, target
    self.tau, self.period = float(tau), int(period)
    self.num_calls = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name=name)
    soft_update(source, target, 1.0)

  def __call__(self):
    """Counts one update; moves the targets on every period-th call."""
    calls = self.num_calls.assign_add(1)

    def move():
      soft_update(self.source, self.target, self.tau)
      return tf.constant(True)

    return tf.cond(tf.equal(calls % self.period, 0), move,
                   lambda: tf.constant(False))


# --- Replayed segments --------------------------------------------------------


class Segments(NamedTuple):
  """Windows of L + 1 steps cut from stored unrolls, batch-major `[K, L + 1]`.

  Attributes:
    observation: dict of `[K, L + 1, ...]`.
    action: dict of `[K, L + 1, ...]`, `agent_outputs.action` (entry t + 1
      was taken at observation t; entry t led to observation t).
    reward: float32 `[K, L + 1]`, `env_outputs.reward`.
    done: bool `[K, L + 1]`.
    truncated: bool `[K, L + 1]`.
  """
  observation: dict
  action: dict
  reward: np.ndarray
  done: np.ndarray
  truncated: np.ndarray


def segments_from_unrolls(unrolls: types.Unroll) -> Segments:
  """The parts of batch-major unrolls `[K, L + 1]` that learners read."""
  env = unrolls.env_outputs
  return Segments(env.observation, unrolls.agent_outputs.action, env.reward,
                  env.done, env.truncated)


def sample_segments(buffer: replay_lib.ReplayBuffer, num_segments: int,
                    length: int, importance_exponent: float = 0.0):
  """Draws `num_segments` windows of `length` transitions from `buffer`.

  The buffer's slots are the window starts (`slots_per_item` = T - length
  + 1), drawn uniformly or by priority.

  Returns:
    (`Segments` `[K, length + 1]`, `replay.SlotSample` of the draws).
  """
  draw = buffer.sample_slots(num_segments, importance_exponent)
  windows = buffer.get_windows(draw.indices, draw.slots, length + 1)
  return segments_from_unrolls(windows), draw


class Transitions(NamedTuple):
  """A segment lined up as time-major transitions (L of them, K segments).

  Attributes:
    observation: dict of `[L + 1, K, ...]`, x_0 .. x_L.
    prev_action: dict of `[L + 1, K, ...]`, the action that led to x_t.
    first: bool `[L + 1, K]`, x_t is the first observation of an episode.
    action: dict of `[L, K, ...]`, a_t taken at x_t.
    reward: float32 `[L, K]`, r_t (scaled).
    discount: float32 `[L, K]`, gamma, or 0 where transition t terminated.
    truncated: bool `[L, K]`, transition t ended its episode by truncation.
  """
  observation: dict
  prev_action: dict
  first: tf.Tensor
  action: dict
  reward: tf.Tensor
  discount: tf.Tensor
  truncated: tf.Tensor


def transitions(segments: Segments, discounting: float,
                reward_scaling: float = 1.0) -> Transitions:
  """Batch-major segments `[K, L + 1]` -> time-major `Transitions`."""
  time_major = lambda x: tf.transpose(
      x, [1, 0] + list(range(2, x.shape.rank)))
  seg = tree.map_structure(lambda x: time_major(tf.convert_to_tensor(x)),
                           segments)
  done = tf.cast(seg.done, tf.bool)
  truncated = tf.cast(seg.truncated, tf.bool)
  return Transitions(
      observation=seg.observation,
      prev_action=seg.action,
      first=done,
      action=tree.map_structure(lambda a: a[1:], seg.action),
      reward=tf.cast(seg.reward[1:], tf.float32) * reward_scaling,
      discount=learner_lib.transition_discounts(done[1:], truncated[1:],
                                                discounting),
      truncated=truncated[1:])


# --- Targets and losses -------------------------------------------------------


class QTargets(NamedTuple):
  """Q-value targets of a segment, `[T, B]` each, gradients stopped.

  Attributes:
    targets: float32, the targets G_t for Q(x_t, a_t).
    mask: float32, 1 for transitions the critics learn from, 0 for
      truncated ones.
  """
  targets: tf.Tensor
  mask: tf.Tensor


def _check_rank(fn_name, name, x, rank):
  if x.shape.rank != rank:
    raise ValueError(f'{fn_name}: {name} must have rank {rank}, got shape '
                     f'{x.shape}.')


def q_targets(rewards, discounts, truncated, values, bootstrap_value,
              estimator: str = 'td0', lambda_=0.95) -> QTargets:
  """Q targets over a segment with a `clear.value_estimators` estimator.

  T is time, B is batch. Transition t goes from x_t to x_{t+1}. Truncated
  transitions lost their next observation: they are masked out, and their
  target is set to V(x_t) (reward V(x_t), discount 0) so that multi-step
  targets of the transitions before them stop there (see module docstring).

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
    _check_rank(name, arg, x, 2)
  _check_rank(name, 'bootstrap_value', tf.convert_to_tensor(bootstrap_value),
              1)
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
  _check_rank(name, 'q_values', q_values, 3)
  _check_rank(name, 'targets', targets, 2)
  _check_rank(name, 'mask', mask, 2)
  td_errors = targets[None] - q_values
  loss = 0.5 * tf.reduce_sum(tf.square(td_errors), axis=0) * mask
  if importance_weights is not None:
    w = tf.convert_to_tensor(importance_weights, tf.float32)
    if w.shape.rank == 1:
      w = w[None]
    _check_rank(name, 'importance_weights', w, 2)
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
  _check_rank('segment_priorities', 'squared_errors', squared_errors, 2)
  total = tf.reduce_sum(squared_errors * mask, axis=0)
  count = tf.maximum(tf.reduce_sum(mask, axis=0), 1.0)
  return tf.stop_gradient(tf.sqrt(total / count))


def make_adam(learning_rate: float, variables) -> snt.optimizers.Adam:
  """Adam whose slots exist already (so updates can run in a while loop)."""
  optimizer = snt.optimizers.Adam(learning_rate)
  variables = list(variables)
  # A zero update creates the slots and changes nothing (m = v = 0 give a
  # zero step); the step counter is then reset.
  optimizer.apply([tf.zeros_like(v) for v in variables], variables)
  optimizer.step.assign(0)
  return optimizer


# --- Config checks ------------------------------------------------------------


def validate_common(config, spec: Optional[types.EnvSpec], algorithm: str):
  """Checks the fields SAC and DDPG share; raises ValueError for the first
  impossible one."""
  c = config
  if c.batch_size < 1:
    raise ValueError(f'batch_size must be >= 1, got {c.batch_size}.')
  if c.num_replay != 0:
    raise ValueError(
        f'num_replay must be 0 for {algorithm}: the policy keeps its own '
        f'replay buffer (replay_capacity), got {c.num_replay}.')
  if c.unroll_length < 1:
    raise ValueError(f'unroll_length must be >= 1, got {c.unroll_length}.')
  if c.total_environment_frames < 1:
    raise ValueError('total_environment_frames must be >= 1, got '
                     f'{c.total_environment_frames}.')
  if not c.fixed_step_mul:
    raise ValueError(f'{algorithm} does not support dynamic step '
                     'multipliers: set fixed_step_mul=True.')
  if c.step_mul < 1:
    raise ValueError(f'step_mul must be >= 1, got {c.step_mul}.')
  if not 0.0 <= c.discounting <= 1.0:
    raise ValueError(f'discounting must be in [0, 1], got {c.discounting}.')
  for field in ('actor_learning_rate', 'critic_learning_rate'):
    if not getattr(c, field) > 0:
      raise ValueError(f'{field} must be > 0, got {getattr(c, field)}.')
  if not 0.0 < c.tau <= 1.0:
    raise ValueError(f'tau must be in (0, 1], got {c.tau}.')
  if c.target_update_period < 1:
    raise ValueError('target_update_period must be >= 1, got '
                     f'{c.target_update_period}.')
  if c.num_critics < 1:
    raise ValueError(f'num_critics must be >= 1, got {c.num_critics}.')
  if c.value_estimator == 'vtrace':
    raise ValueError(
        f'value_estimator=vtrace is not available for {algorithm}: V-trace '
        'estimates V(x_t) from behaviour log-probabilities, which replay '
        f'does not keep for continuous actions; use one of {Q_ESTIMATORS}.')
  if c.value_estimator not in Q_ESTIMATORS:
    raise ValueError(f'value_estimator must be one of {Q_ESTIMATORS}, got '
                     f'{c.value_estimator!r}.')
  if not 0.0 <= c.td_lambda <= 1.0:
    raise ValueError(f'td_lambda must be in [0, 1], got {c.td_lambda}.')
  if not 1 <= c.sample_length <= c.unroll_length:
    raise ValueError(
        f'sample_length must be in [1, unroll_length={c.unroll_length}], '
        f'got {c.sample_length}.')
  if c.replay_capacity < c.unroll_length:
    raise ValueError(
        f'replay_capacity ({c.replay_capacity} transitions) must hold at '
        f'least one unroll of unroll_length={c.unroll_length}.')
  if c.priority_exponent < 0:
    raise ValueError('priority_exponent must be >= 0, got '
                     f'{c.priority_exponent}.')
  if not 0.0 <= c.importance_exponent <= 1.0:
    raise ValueError('importance_exponent must be in [0, 1], got '
                     f'{c.importance_exponent}.')
  if c.learning_starts < 0:
    raise ValueError(
        f'learning_starts must be >= 0, got {c.learning_starts}.')
  held = max(1, c.replay_capacity // c.unroll_length) * c.unroll_length
  if c.learning_starts > held:
    raise ValueError(
        f'learning_starts ({c.learning_starts} transitions) exceeds the '
        f'{held} that replay_capacity={c.replay_capacity} holds (whole '
        f'unrolls of {c.unroll_length}): learning would never start.')
  if not c.updates_per_step > 0:
    raise ValueError(
        f'updates_per_step must be > 0, got {c.updates_per_step}.')
  if c.sample_batch_size < 1:
    raise ValueError(
        f'sample_batch_size must be >= 1, got {c.sample_batch_size}.')
  if c.clip_grad_norm < 0:
    raise ValueError(f'clip_grad_norm must be >= 0 (0 = off), got '
                     f'{c.clip_grad_norm}.')
  if not math.isfinite(c.reward_scaling):
    raise ValueError(f'reward_scaling must be finite, got '
                     f'{c.reward_scaling}.')
  if spec is not None:
    observation_keys(spec)
    if types.STEP_MUL_KEY in spec.action_spec:
      raise ValueError(f'{algorithm} does not support dynamic step '
                       'multipliers (the env spec has a step_mul action '
                       'head): use fixed_step_mul.')


# --- The policy ---------------------------------------------------------------


class Counters(tf.Module):
  """The learner's counters (int64) and its fractional update credit."""

  def __init__(self):
    super().__init__(name='counters')
    self.num_env_frames = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name='num_env_frames')
    self.num_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name='num_steps')
    self.num_skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name='num_skipped_steps')
    # Updates owed but not yet made (updates_per_step x new transitions
    # accumulates here; whole updates are taken out).
    self.update_credit = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                     name='update_credit')


class OffPolicyPolicy(policy_lib.Policy, abc.ABC):
  """The runtime side of an off-policy learner with its own replay.

  Subclasses build `self.agent` (a `snt.Module` with every acting variable
  and an `rng` Generator) in `_build_agent`, the learner's other networks
  in `_build_learner`, and implement `_act` (one acting step) and
  `_update` (one gradient update on time-major transitions).

  `learn(batch)` (time-major `Unroll` `[T + 1, B]`):
    1. inserts the B unrolls into the replay buffer and counts their frames;
    2. until `learning_starts` transitions are stored, stops there (actors
       act uniformly at random meanwhile, when `random_actions_until_start`);
    3. adds updates_per_step x B x T to an update credit and makes as many
       whole updates as the credit holds. Each update samples
       ceil(sample_batch_size / sample_length) segments of `sample_length`
       transitions and learns from all of them. All updates of one call run
       inside one `tf.function` (a while loop), their segments sampled up
       front (in chunks of at most `SAMPLE_BYTES_PER_CALL`), so priorities
       set by an update reach the sampler at the next chunk.
  An update whose losses or gradients are not finite changes nothing and is
  counted in `num_skipped_steps`.
  """

  algorithm = 'off-policy'

  def __init__(self, spec: types.EnvSpec,
               agent_config: policy_lib.AgentConfig, learner_config=None,
               seed: int = 0):
    super().__init__(spec)
    self.agent_config = agent_config
    self.config = learner_config
    self._observation_keys = observation_keys(spec)
    self._hidden_sizes = hidden_sizes(agent_config)
    self.layout = ActionLayout(spec.action_spec, self.algorithm)
    self._init_rng = np.random.default_rng(seed)
    self.agent = self._build_agent(seed)
    self._act_fn = tf.function(self._act, autograph=False)
    self.learning = learner_config is not None
    if not self.learning:
      return
    self._validate(learner_config, spec)
    c = learner_config
    self.counters = Counters()
    self.num_segments = int(math.ceil(c.sample_batch_size / c.sample_length))
    self.buffer = replay_lib.ReplayBuffer(
        max(1, c.replay_capacity // c.unroll_length), 'fifo',
        seed=seed, prioritized=c.prioritized,
        priority_exponent=c.priority_exponent,
        slots_per_item=c.unroll_length - c.sample_length + 1)
    self._build_learner()
    self._update_fn = None

  # --- To implement -----------------------------------------------------------

  @abc.abstractmethod
  def _validate(self, config, spec):
    """Raises ValueError for impossible settings."""

  @abc.abstractmethod
  def _build_agent(self, seed: int) -> snt.Module:
    """The acting networks and variables, with an `rng` Generator."""

  @abc.abstractmethod
  def _build_learner(self):
    """Learner-only networks, optimizers, target updaters, and the list
    `self.metric_names` of what `_update` reports."""

  @abc.abstractmethod
  def _act(self, observation):
    """One acting step on `[B]` observations -> `types.AgentOutput`."""

  @abc.abstractmethod
  def _update(self, transitions_: Transitions, weights: tf.Tensor):
    """One update; returns (metrics dict of scalars, finite bool,
    priorities float32 `[K]`), applying nothing when not finite.

    The metric names must be those of `self.metric_names`.
    """

  @abc.abstractmethod
  def _learner_checkpointables(self) -> Dict[str, object]:
    """Learner-only trackables, by name."""

  # --- Acting -----------------------------------------------------------------

  def initial_state(self, batch_size):
    del batch_size
    return {}  # Feed-forward networks.

  def act(self, env_output, prev_action, state):
    del prev_action
    observation = {k: env_output.observation[k]
                   for k in self._observation_keys}
    output = self._act_fn(observation)
    return policy_lib.to_numpy(output), state

  def acting_variables(self) -> List[tf.Variable]:
    return list(self.agent.variables)

  def sampling_rng(self):
    return self.agent.rng

  # --- Learning ---------------------------------------------------------------

  def _segment_signature(self):
    """TensorSpecs of `[n_updates, K, L + 1, ...]` segments."""
    L, K = self.config.sample_length, self.num_segments
    lead = [None, K, L + 1]
    obs = {k: tf.TensorSpec(lead + list(s.shape), s.dtype)
           for k, s in self.spec.observation_spec.items()
           if k in self._observation_keys}
    zero = policy_lib.zero_agent_output(self.spec, 1).action
    action = {k: tf.TensorSpec(lead + list(v.shape[1:]), v.dtype)
              for k, v in zero.items()}
    return (Segments(obs, action, tf.TensorSpec(lead, tf.float32),
                     tf.TensorSpec(lead, tf.bool),
                     tf.TensorSpec(lead, tf.bool)),
            tf.TensorSpec([None, K], tf.float32))

  def _get_update_fn(self):
    if self._update_fn is None:
      signature = self._segment_signature()
      # With XLA the whole loop of updates is one compiled program (about
      # 3x faster than compiling single updates for small networks); each
      # new number of updates per call compiles once.
      self._loop_fn = tf.function(self._update_loop, autograph=False,
                                  jit_compile=self.config.jit_compile)
      self._update_fn = tf.function(
          self._update_many, input_signature=signature, autograph=False)
    return self._update_fn

  def _update_many(self, segments: Segments, weights):
    """`_update_loop`, then summaries of the averaged metrics."""
    metrics, applied, priorities = self._loop_fn(segments, weights)
    step = self.counters.num_env_frames  # As every summary of a run.
    for name, value in metrics.items():
      tf.summary.scalar(name, value, step=step)
    return metrics, applied, priorities

  def _update_transitions(self, segments: Segments, weights):
    """One update on `[K, L + 1]` segments (see `_update`)."""
    c = self.config
    return self._update(transitions(segments, c.discounting,
                                     c.reward_scaling), weights)

  def _update_loop(self, segments: Segments, weights):
    """Runs one update per leading entry of `segments` in a while loop.

    Returns:
      (dict of metrics averaged over the finite updates, applied bool
      `[n]`, priorities float32 `[n, K]`).
    """
    n = tf.shape(weights)[0]
    metric_names = sorted(self.metric_names)
    applied_ta = tf.TensorArray(tf.bool, size=n)
    priorities_ta = tf.TensorArray(tf.float32, size=n)

    def body(i, sums, applied_ta, priorities_ta):
      metrics, finite, priorities = self._update_transitions(
          tree.map_structure(lambda x: x[i], segments), weights[i])
      sums = [s + tf.where(finite, tf.cast(metrics[k], tf.float32), 0.0)
              for s, k in zip(sums, metric_names)]
      with tf.control_dependencies([finite]):
        return (i + 1, sums, applied_ta.write(i, finite),
                priorities_ta.write(i, priorities))

    zeros = [tf.constant(0.0)] * len(metric_names)
    _, sums, applied_ta, priorities_ta = tf.while_loop(
        lambda i, *_: i < n, body,
        (tf.constant(0), zeros, applied_ta, priorities_ta),
        parallel_iterations=1)
    applied = applied_ta.stack()
    count = tf.maximum(tf.reduce_sum(tf.cast(applied, tf.float32)), 1.0)
    metrics = {k: s / count for k, s in zip(metric_names, sums)}
    return metrics, applied, priorities_ta.stack()

  def trace(self, example_batch, critic=False):
    del example_batch, critic
    self._get_update_fn().get_concrete_function()

  def _importance_exponent(self) -> float:
    """beta, annealed linearly from importance_exponent to 1 over the run."""
    c = self.config
    progress = min(1.0, self.num_env_frames / c.total_environment_frames)
    return c.importance_exponent + (1.0 - c.importance_exponent) * progress

  def _bytes_per_update(self) -> int:
    sig, _ = self._segment_signature()
    total = 0
    for spec in tree.flatten(sig):
      total += int(np.prod(spec.shape[1:])) * spec.dtype.size
    return max(1, total)

  def learn(self, batch: types.Unroll) -> Dict[str, np.ndarray]:
    """Stores the batch's unrolls, then makes the updates they pay for.

    Args:
      batch: time-major `Unroll` `[T + 1, B]` of fresh unrolls.

    Returns:
      Dict of numpy scalars: the update metrics averaged over this call's
      finite updates (none before learning starts), `updates` (made in this
      call), `skipped` (one was not finite), `num_skipped_steps`,
      `num_steps`, `num_env_frames` and `replay/size` (unrolls stored).
    """
    if not self.learning:
      raise NotImplementedError(f'{type(self).__name__} was built without a '
                                'learner config: it only acts.')
    c = self.config
    frames = int(learner_lib.frames_in_batch(batch, 0, c))
    self.counters.num_env_frames.assign_add(frames)
    num_unrolls = np.shape(batch.env_outputs.reward)[1]
    self.buffer.insert_batch(replay_lib.swap_time_and_batch(batch),
                             num_unrolls)
    stats = {}
    num_updates = 0
    skipped = False
    if len(self.buffer) * c.unroll_length >= c.learning_starts:
      self.agent.random_actions.assign(0.0)
      credit = (float(self.counters.update_credit.numpy()) +
                c.updates_per_step * num_unrolls * c.unroll_length)
      num_updates = int(credit)
      self.counters.update_credit.assign(credit - num_updates)
      chunk = max(1, SAMPLE_BYTES_PER_CALL // self._bytes_per_update())
      done = 0
      sums, count = {}, 0
      while done < num_updates:
        m = min(chunk, num_updates - done)
        metrics, applied = self._learn_chunk(m)
        num_applied = int(np.sum(applied))
        skipped = skipped or num_applied < m
        for k, v in metrics.items():
          sums[k] = sums.get(k, 0.0) + float(v) * num_applied
        count += num_applied
        done += m
      stats = {k: np.float32(v / max(count, 1)) for k, v in sums.items()}
    stats.update({
        'num_env_frames': np.int64(self.num_env_frames),
        'num_steps': np.int64(self.num_updates),
        'num_skipped_steps': np.int64(
            self.counters.num_skipped_steps.numpy()),
        'skipped': np.bool_(skipped),
        'updates': np.int64(num_updates),
        'replay/size': np.int64(len(self.buffer)),
    })
    return stats

  def _learn_chunk(self, m: int):
    """Samples and runs m updates; returns (metrics, applied `[m]`)."""
    c = self.config
    beta = self._importance_exponent() if c.prioritized else 0.0
    segments, draw = sample_segments(self.buffer, m * self.num_segments,
                                     c.sample_length, beta)
    segments = tree.map_structure(
        lambda x: x.reshape((m, self.num_segments) + x.shape[1:]), segments)
    segments = segments._replace(
        observation={k: segments.observation[k]
                     for k in self._observation_keys})
    weights = draw.weights.reshape(m, self.num_segments)
    metrics, applied, priorities = self._get_update_fn()(segments, weights)
    applied = applied.numpy()
    if c.prioritized and applied.any():
      rows = np.repeat(applied, self.num_segments)
      values = priorities.numpy().reshape(-1)
      rows &= np.isfinite(values)
      self.buffer.update_priorities(draw.indices[rows], draw.slots[rows],
                                    values[rows])
    return {k: v.numpy() for k, v in metrics.items()}, applied

  def _apply_if_finite(self, finite, apply_fn):
    """Runs `apply_fn` and counts a step, or counts a skipped one."""

    def apply():
      apply_fn()
      self.counters.num_steps.assign_add(1)
      return tf.constant(True)

    def skip():
      self.counters.num_skipped_steps.assign_add(1)
      return tf.constant(False)

    return tf.cond(finite, apply, skip)

  # --- Bookkeeping ------------------------------------------------------------

  @property
  def num_env_frames(self):
    return int(self.counters.num_env_frames.numpy())

  @property
  def num_updates(self):
    return int(self.counters.num_steps.numpy())

  def add_env_frames(self, frames):
    self.counters.num_env_frames.assign_add(int(frames))

  def checkpointables(self):
    return {'agent': self.agent, 'counters': self.counters,
            **self._learner_checkpointables()}

  def acting_checkpointables(self):
    return {'agent': self.agent}

  def _init_twin(self):
    return type(self)(self.spec, self.agent_config, self.config)

  def _weight_checkpointables(self):
    return {k: v for k, v in self.checkpointables().items()
            if k == 'agent' or k.endswith(('critics', 'actor'))}

  def replay_buffers(self):
    return {'transitions': self.buffer}


def all_finite(values) -> tf.Tensor:
  """True when every tensor in `values` is finite everywhere."""
  checks = [tf.reduce_all(tf.math.is_finite(tf.cast(v, tf.float32)))
            for v in values]
  return tf.reduce_all(tf.stack(checks))
