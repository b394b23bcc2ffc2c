"""The networks of the off-policy learners (SAC, DDPG) and their targets.

N is the number of critics.

- Observations: rank-0/1 arrays concatenated into one float vector
  (`observation_keys`, `flat_observation`).
- Networks: `MLP`, and `CriticEnsemble`, N MLP critics held as stacked
  `[N, in, out]` weights so that all of them run in one batched matmul per
  layer; `hidden_sizes` reads their widths from the agent config.
- Actions: `ActionLayout` splits an action spec into at most one discrete
  head and any number of bounded continuous heads, whose values it maps to
  and from one `[-1, 1]` vector (what networks see and produce).
- Target networks: `TargetUpdater` copies online variables into targets,
  target <- (1 - tau) target + tau online every `period` updates (tau = 1 is
  a hard copy).
"""

from typing import Dict, List, Sequence

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import initializers
from agents import torsos
from clear import types
from clear.algorithms import policy as policy_lib

NETWORKS = ('auto', 'mlp')


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


def make_critics(num_critics: int, spec: types.EnvSpec, layout,
                 hidden: Sequence[int], rng: np.random.Generator,
                 name: str) -> CriticEnsemble:
  """The critics of an `ActionLayout`: Q(s, a) on [observation; continuous
  action in [-1, 1]], one output per discrete action (or one without a
  discrete head)."""
  return CriticEnsemble(num_critics,
                        observation_size(spec) + layout.continuous_size,
                        hidden, layout.num_discrete or 1, rng, name=name)


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
