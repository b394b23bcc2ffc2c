"""PPG's networks: the policy network (torso -> categorical heads, plus an
auxiliary value head on the same torso), the value network (its own torso
-> value), and the running normaliser of value targets (see
`clear.algorithms.ppg.policy` for how the phases train them).

`agent_config` (`clear.algorithms.policy.AgentConfig`) meaning for PPG:
  network: the torso of both networks, as in `agents.make_agent` ('auto',
    'mlp', 'impala_shallow', 'impala_deep', 'fullyconv', 'minatar').
  core_size: the hidden width: the MLP torso has two ReLU layers of this
    size; image torsos end in a linear layer of this size.
  separate_critic: ignored; PPG always has a separate value network.
"""

import numpy as np
import sonnet as snt
import tensorflow as tf

import agents
from agents import heads as heads_lib
from agents import initializers
from agents import torsos
from clear import types


# --- Value normalisation -----------------------------------------------------


class ValueNormalizer(tf.Module):
  """Running mean and variance of value targets (checkpointable).

  Merges batch moments with Chan et al.'s parallel formula, so the result
  equals the moments of everything seen so far. Before any update it is the
  identity (mean 0, std 1).

  Attributes:
    mean, variance: float32 scalar variables.
    count: float64 scalar variable, the number of values seen.
  """

  def __init__(self, epsilon=1e-8, name='value_normalizer'):
    super().__init__(name=name)
    self._epsilon = epsilon
    self.mean = tf.Variable(0.0, trainable=False, name='mean')
    self.variance = tf.Variable(1.0, trainable=False, name='variance')
    self.count = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                             name='count')

  @property
  def std(self):
    return tf.sqrt(self.variance + self._epsilon)

  def update(self, values):
    """Folds float32 `values` (any shape, at least one element) in."""
    values = tf.reshape(tf.cast(values, tf.float32), [-1])
    batch_mean, batch_variance = tf.nn.moments(values, axes=[0])
    batch_count = tf.cast(tf.size(values), tf.float64)
    total = self.count + batch_count
    batch_weight = tf.cast(batch_count / total, tf.float32)
    old_weight = tf.cast(self.count / total, tf.float32)
    delta = batch_mean - self.mean
    new_mean = self.mean + delta * batch_weight
    new_variance = (old_weight * self.variance + batch_weight * batch_variance
                    + tf.square(delta) * old_weight * batch_weight)
    self.mean.assign(new_mean)
    self.variance.assign(new_variance)
    self.count.assign(total)

  def normalize(self, values):
    return (values - self.mean) / self.std

  def denormalize(self, values):
    return values * self.std + self.mean


# --- Networks ----------------------------------------------------------------


def _make_torso(spec: types.EnvSpec, network: str, width: int, w_init, name):
  """An `agents.torsos` encoder for `network` with hidden width `width`."""
  obs_spec = spec.observation_spec
  if network == 'mlp':
    return torsos.MLPTorso(obs_spec, w_init, (width, width), name=name)
  if network == 'impala_shallow':
    return torsos.ImpalaShallowTorso(obs_spec, w_init, width, name=name)
  if network == 'impala_deep':
    return torsos.ImpalaDeepTorso(obs_spec, w_init, width, name=name)
  if network == 'minatar':
    return torsos.MinAtarTorso(obs_spec, w_init, width, name=name)
  mask_keys = {s.mask_key for s in spec.action_spec.values()
               if s.mask_key is not None}
  return torsos.FullyConvTorso(obs_spec, w_init, mask_keys, width, name=name)


class PolicyNetwork(snt.Module):
  """Torso -> masked categorical logits per head, and an auxiliary value."""

  def __init__(self, spec, network, width, rng, name='policy_network'):
    super().__init__(name=name)
    self._action_spec = spec.action_spec
    w_init = initializers.SeededFanIn(rng)
    self.torso = _make_torso(spec, network, width, w_init, 'torso')
    # Small initial logits: the first policy is close to uniform.
    self.heads = heads_lib.PolicyHeads(
        spec.action_spec, initializers.SeededFanIn(rng, scale=0.01),
        spatial_resolutions=getattr(self.torso, 'resolutions', ()))
    self.aux_value = snt.Linear(1, w_init=w_init, name='aux_value')

  def __call__(self, observation):
    """observation: dict of `[N, ...]` -> (logits dict `[N, A_i]`, `[N]`)."""
    torso_out = self.torso(observation)
    logits = self.heads(torso_out.features, torso_out.spatial)
    logits = heads_lib.apply_masks(logits, observation, self._action_spec)
    return logits, self.aux_value(torso_out.features)[:, 0]


class ValueNetwork(snt.Module):
  """Torso -> value `[N]`."""

  def __init__(self, spec, network, width, rng, name='value_network'):
    super().__init__(name=name)
    w_init = initializers.SeededFanIn(rng)
    self.torso = _make_torso(spec, network, width, w_init, 'torso')
    self.value = snt.Linear(1, w_init=w_init, name='value')

  def __call__(self, observation):
    return self.value(self.torso(observation).features)[:, 0]


class PPGAgent(snt.Module):
  """Both networks, the value normaliser and the sampling generator.

  Attributes:
    policy_network: `PolicyNetwork`.
    value_network: `ValueNetwork`.
    normalizer: `ValueNormalizer`; the value network (and auxiliary head)
      predict normalised values when `normalize_value` is on.
    rng: `tf.random.Generator` for action sampling.
  """

  def __init__(self, spec, network='auto', width=256, seed=0, name='agent'):
    super().__init__(name=name)
    network = agents.resolve_network(spec, network)
    init_rng = np.random.default_rng(seed)
    self.policy_network = PolicyNetwork(spec, network, width, init_rng)
    self.value_network = ValueNetwork(spec, network, width, init_rng)
    self.normalizer = ValueNormalizer()
    with self.name_scope:
      self.rng = tf.random.Generator.from_seed(seed)
    zeros = {k: tf.zeros((1,) + tuple(s.shape), tf.as_dtype(s.dtype))
             for k, s in spec.observation_spec.items()}
    self.policy_network(zeros)
    self.value_network(zeros)

  @property
  def acting_variables(self):
    """What actors need: both networks and the normaliser's statistics."""
    return (tuple(self.policy_network.trainable_variables) +
            tuple(self.value_network.trainable_variables) +
            (self.normalizer.mean, self.normalizer.variance))


def check_action_spec(spec: types.EnvSpec):
  """Raises ValueError unless every action head is a DiscreteSpec whose
  mask (if any) is an observation."""
  for key, head in spec.action_spec.items():
    if not isinstance(head, types.DiscreteSpec):
      raise ValueError(
          f'PPGPolicy: action head {key!r} is {type(head).__name__}; PPG '
          'supports only discrete (DiscreteSpec) action heads.')
    if head.mask_key is not None and (
        head.mask_key not in spec.observation_spec):
      raise ValueError(f'PPGPolicy: action head {key!r} has mask_key '
                       f'{head.mask_key!r}, which is not an observation.')
