"""Progress & Compress's two columns: a knowledge base and an active column.

T is time, B is batch, N = T * B (the merged batch the layers see).

Progress & Compress (Schwarz et al. 2018, arXiv 1805.06370) keeps two full
agents of the same configuration (`agents.make_agent`): the knowledge base
(KB), which holds what the tasks seen so far taught, and the active column
(AC), which learns the current task. Layer i of the active column also reads
what the knowledge base fed its own layer i, through a lateral adaptor (the
paper's equation 1):

  h_i = act(W_i h_{i-1} + b_i + alpha_i * U_i relu(V_i h^KB_{i-1} + c_i))

V_i has the kind and output width of W_i (a convolution with the layer's
kernel, stride and padding, or a dense layer), with a bias c_i; U_i is a
1x1 convolution or a square dense layer without bias; alpha_i is a trainable
scale per output unit, drawn from U(0, `ALPHA_INIT_MAX`) as in progressive
networks (Rusu et al. 2016). The knowledge base's activations enter through
a stop-gradient: nothing the active column learns moves the knowledge base.

The lateral sites are every layer but the first, which reads the
observation:
  - the torso's layers after its first, for the torsos that are a stack of
    layers ('minatar': its linear layer; 'impala_shallow': its second
    convolution and linear layer; 'mlp': every hidden layer after the
    first). The 'impala_deep' and 'fullyconv' torsos are taken whole, so
    their laterals start at the core;
  - the recurrent core's input projection: V maps the knowledge base's
    torso features to H units, U those to the 4H gate pre-activations
    (a feed-forward agent has no core, and no lateral there);
  - every non-spatial policy head and the baseline, from the knowledge
    base's core output (its core input for a feed-forward agent).

`PncAgent.step` acts with the active column (which needs the knowledge
base's activations, so both columns run and both keep a recurrent state);
`unroll` re-unrolls the active column; `unroll_both` returns both columns'
outputs, the knowledge base's with gradients, for distillation. The
knowledge base alone is an ordinary `agents.Agent`: evaluation plays it as
one (`PncAgent.knowledge_base`).

The columns' forward pass is written here layer by layer from the agent's
own modules; with every alpha at 0 the active column computes exactly what
`Agent.unroll` does, and the knowledge base always does (tests pin both).
"""

from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import agent as agent_lib
from agents import cores
from agents import heads
from agents import initializers
from agents import torsos
from clear import types

# Each alpha starts uniform in [0, ALPHA_INIT_MAX].
ALPHA_INIT_MAX = 0.1

# State keys of the two columns.
KNOWLEDGE_BASE, ACTIVE = 'knowledge_base', 'active'

# pylint: disable=protected-access
# The forward pass below walks the agent's and the torsos' own modules; the
# tests check it against `Agent.unroll` bit for bit.


def active_column_seed(seed: int, generation: int) -> int:
  """The seed of the active column (and its adaptors) of `generation`: 0
  for the first, g for its g-th re-initialisation."""
  return int(seed) + 1_000_003 * (int(generation) + 1)


class _Trace(NamedTuple):
  """What a column fed its layers (all merged `[N, ...]`).

  Attributes:
    layer_inputs: the input of each torso layer, for torsos walked layer by
      layer (`_torso_layers`); empty for the others.
    features: `[N, D]`, the torso's output (the core's feature input).
    core_output: `[N, H]`, what the heads read.
  """
  layer_inputs: List[tf.Tensor]
  features: tf.Tensor
  core_output: tf.Tensor


def _torso_layers(torso) -> Optional[List[Tuple[str, snt.Module, object]]]:
  """(kind, layer, norm or None) of a torso that is a stack of layers, in
  order; None for a torso taken whole."""
  if isinstance(torso, torsos.MinAtarTorso):
    return [('conv', torso._conv, None),
            ('linear', torso._linear, torso._linear_norm)]
  if isinstance(torso, torsos.ImpalaShallowTorso):
    return [('conv', torso._conv1, None),
            ('conv', torso._conv2, None),
            ('linear', torso._linear, torso._linear_norm)]
  if isinstance(torso, torsos.MLPTorso):
    norms = torso._norms or [None] * len(torso._layers)
    return [('linear', layer, norm)
            for layer, norm in zip(torso._layers, norms)]
  return None


def _torso_forward(torso, observation, laterals, kb_trace):
  """The torso on merged observations, adding `laterals[i - 1](KB input of
  layer i)` to layer i's pre-activation when `kb_trace` is given.

  Returns:
    (features `[N, D]`, spatial maps, the input of each layer walked).
  """
  layers = _torso_layers(torso)
  if layers is None:
    out = torso(observation)
    return out.features, out.spatial, []
  if isinstance(torso, torsos.MLPTorso):
    x = torsos._concat_vectors(observation, torso._keys)
  else:
    x = torsos.to_float(observation[torso._image_key])
  inputs = []
  for i, (kind, layer, norm) in enumerate(layers):
    if kind == 'linear' and x.shape.rank > 2:
      x = snt.flatten(x)
    inputs.append(x)
    pre = layer(x)
    if kb_trace is not None and i > 0:
      pre = pre + laterals[i - 1](kb_trace.layer_inputs[i])
    x = tf.nn.relu(torsos._normed(norm, pre))
  if not isinstance(torso, torsos.MLPTorso):
    extra = torsos._concat_vectors(observation, torso._extra_keys)
    if extra is not None:
      x = tf.concat([x, extra], axis=-1)
  return x, {}, inputs


class _ProjectedCore:
  """A core whose input is already projected (`project_inputs`), for
  `cores.unroll`'s generic loop: `ResettingCore(core, core.step_projected)`
  as `cores.unroll` builds for a layer-normalised LSTM."""

  def __init__(self, core):
    self._core = core

  def initial_state(self, batch_size):
    return self._core.initial_state(batch_size)

  def __call__(self, gates_x, state):
    return self._core.step_projected(gates_x, state)


def _core_forward(agent, features, extras, done, state, lateral, kb_trace):
  """`Agent._unroll_core` for the policy core, adding `lateral(KB features)`
  to the gates' input projection when `kb_trace` is given.

  Returns:
    (merged core output `[N, H]`, final state or None).
  """
  core = agent._core
  time_batch = agent_lib._time_batch_dims(done)
  if core is None:
    inputs = tf.concat([agent_lib._split_time_batch(features, time_batch),
                        extras], -1)
    return agent_lib._merge_time_batch(inputs), None
  inputs = tf.concat([agent_lib._split_time_batch(features, time_batch),
                      extras], -1)
  # `cores.unroll`, with the lateral added to the projection.
  time_batch = [n if n is not None else tf.shape(inputs)[i]
                for i, n in enumerate(inputs.shape[:2])]
  projected = core.project_inputs(tf.reshape(inputs, [-1, inputs.shape[-1]]))
  if kb_trace is not None:
    projected = projected + lateral(kb_trace.features)
  projected = tf.reshape(projected, time_batch + [projected.shape[-1]])
  if isinstance(core, cores.LSTM):
    outputs, final = cores.lstm_unroll(projected, done, state,
                                       core.hidden_to_hidden, core.b)
  else:
    outputs, final = cores.unroll(_ProjectedCore(core), projected, done,
                                  state)
  return agent_lib._merge_time_batch(outputs), final


def _column_apply(agent, laterals, reward, done, observation, prev_action,
                  state, kb_trace=None):
  """`Agent._apply` of one column; with `kb_trace` (the knowledge base's
  `_Trace` of the same inputs), the active column with its laterals.

  Returns:
    (logits dict `[T, B, A]`, baseline `[T, B]`, new state, `_Trace`).
  """
  reward = tf.convert_to_tensor(reward, tf.float32)
  done = tf.convert_to_tensor(done, tf.bool)
  time_batch = agent_lib._time_batch_dims(reward)
  observation = {k: agent_lib._merge_time_batch(tf.convert_to_tensor(v))
                 for k, v in observation.items()}
  extras = [tf.clip_by_value(reward, -1., 1.)[..., None]]
  for k in agent._one_hot_keys:
    extras.append(tf.one_hot(tf.cast(prev_action[k], tf.int32),
                             agent._action_spec[k].num_values))
  extras = tf.concat(extras, axis=-1)
  if kb_trace is None:
    torso_laterals = core_lateral = None
  else:
    torso_laterals, core_lateral = laterals.torso, laterals.core

  features, spatial, layer_inputs = _torso_forward(
      agent._torso, observation, torso_laterals, kb_trace)
  new_state = {}
  core_out, new_state['policy'] = _core_forward(
      agent, features, extras, done, state.get('policy'), core_lateral,
      kb_trace)
  logits = agent._heads(core_out, spatial)
  baseline = agent._baseline(core_out)
  if kb_trace is not None:
    for key, adaptor in laterals.heads.items():
      logits[key] = logits[key] + adaptor(kb_trace.core_output)
    baseline = baseline + laterals.baseline(kb_trace.core_output)
  logits = heads.apply_masks(logits, observation, agent._action_spec)

  logits = {k: agent_lib._split_time_batch(v, time_batch)
            for k, v in logits.items()}
  baseline = agent_lib._split_time_batch(baseline[:, 0], time_batch)
  new_state = {k: v for k, v in new_state.items() if v is not None}
  return logits, baseline, new_state, _Trace(layer_inputs, features,
                                             core_out)


class _DenseAdaptor(snt.Module):
  """alpha * U relu(V h + c): `[N, d]` -> `[N, output_size]`."""

  def __init__(self, hidden_size: int, output_size: int, w_init,
               alpha: np.ndarray, name: str):
    super().__init__(name=name)
    self.v = snt.Linear(hidden_size, w_init=w_init, name='v')
    self.u = snt.Linear(output_size, with_bias=False, w_init=w_init,
                        name='u')
    self.alpha = tf.Variable(alpha, name='alpha')

  def __call__(self, h):
    return self.alpha * self.u(tf.nn.relu(self.v(h)))


class _ConvAdaptor(snt.Module):
  """alpha * U relu(V h + c) with V a convolution shaped like `like` and U
  a 1x1 convolution: `[N, H, W, C]` -> `[N, H', W', like's channels]`."""

  def __init__(self, like: snt.Conv2D, w_init, alpha: np.ndarray,
               name: str):
    super().__init__(name=name)
    self.v = snt.Conv2D(like.output_channels, like.kernel_shape,
                        stride=like.stride, padding=like.conv_padding,
                        w_init=w_init, name='v')
    self.u = snt.Conv2D(like.output_channels, 1, with_bias=False,
                        w_init=w_init, name='u')
    self.alpha = tf.Variable(alpha, name='alpha')

  def __call__(self, h):
    return self.alpha * self.u(tf.nn.relu(self.v(h)))


class Laterals(snt.Module):
  """The lateral adaptors of an active column (see the module docstring).

  Attributes:
    torso: one adaptor per torso layer after the first (layers walked by
      `_torso_layers`; empty for torsos taken whole).
    core: the adaptor into the core's gates, or None (feed-forward agent).
    heads: dict head name -> adaptor, for the non-spatial policy heads.
    baseline: the adaptor into the baseline.

  Their weights are created by the first forward pass (`PncAgent` makes
  one when built), drawn from `seed`.
  """

  def __init__(self, column: agent_lib.Agent, seed: int,
               name: str = 'laterals'):
    super().__init__(name=name)
    rng = np.random.default_rng([int(seed), 1])
    w_init = initializers.SeededFanIn(rng)
    alpha = lambda n: rng.uniform(0.0, ALPHA_INIT_MAX, n).astype(np.float32)
    self.torso = []
    for i, (kind, layer, _) in enumerate(
        (_torso_layers(column._torso) or [])[1:], start=1):
      if kind == 'conv':
        self.torso.append(_ConvAdaptor(layer, w_init,
                                       alpha(layer.output_channels),
                                       name=f'torso_{i}'))
      else:
        self.torso.append(_DenseAdaptor(layer.output_size, layer.output_size,
                                        w_init, alpha(layer.output_size),
                                        name=f'torso_{i}'))
    self.core = None
    if column._core is not None:
      units = int(column._core.initial_state(1).hidden.shape[-1])
      self.core = _DenseAdaptor(units, 4 * units, w_init, alpha(4 * units),
                                name='core')
    self.heads = {}
    spatial = column._heads._spatial_inputs
    for key, spec in column._action_spec.items():
      if key not in spatial:
        self.heads[key] = _DenseAdaptor(spec.num_values, spec.num_values,
                                        w_init, alpha(spec.num_values),
                                        name=f'{key}_head')
    self.baseline = _DenseAdaptor(1, 1, w_init, alpha(1), name='baseline')


class Outputs(NamedTuple):
  """Both columns' outputs on the same unroll (`PncAgent.unroll_both`)."""
  knowledge_base: types.AgentOutput
  active: types.AgentOutput


class PncAgent(snt.Module):
  """A knowledge base and an active column with lateral adaptors.

  Build it with `make_pnc_agent`. The state is a dict with one entry per
  column, `{KNOWLEDGE_BASE: ..., ACTIVE: ...}`, each an `Agent` state.
  Acting samples from `self.rng`.

  Attributes:
    knowledge_base: the knowledge base, an `agents.Agent`.
    active: the active column's own layers, an `agents.Agent` of the same
      configuration.
    laterals: its `Laterals`.
    rng: the sampling generator.
  """

  def __init__(self, knowledge_base: agent_lib.Agent,
               active: agent_lib.Agent, seed: int,
               make_column: Callable[[int], agent_lib.Agent],
               name: str = 'pnc_agent'):
    """`seed` draws the adaptors and seeds sampling; `make_column(seed)`
    builds a fresh active column (for `reset_active_column`)."""
    super().__init__(name=name)
    if knowledge_base._critic is not None or active._critic is not None:
      raise ValueError('PncAgent: the columns cannot have a separate '
                       'critic (separate_critic=True).')
    self.knowledge_base = knowledge_base
    self.active = active
    self.laterals = Laterals(active, seed)
    with self.name_scope:
      self.rng = tf.random.Generator.from_seed(seed)
    self._make_column = make_column
    self._build()

  # ---------------------------------------------------------------- public

  @property
  def env_spec(self) -> types.EnvSpec:
    return self.knowledge_base.env_spec

  @property
  def knowledge_base_variables(self) -> Tuple[tf.Variable, ...]:
    """The knowledge base's trainable variables (`Agent` order)."""
    return tuple(self.knowledge_base.trainable_variables)

  @property
  def active_variables(self) -> Tuple[tf.Variable, ...]:
    """The active column's and its adaptors' trainable variables."""
    return (tuple(self.active.trainable_variables) +
            tuple(self.laterals.trainable_variables))

  @property
  def active_critic_variables(self) -> Tuple[tf.Variable, ...]:
    """The active column's baseline head and the adaptor into it."""
    return (tuple(self.active.critic_variables) +
            tuple(self.laterals.baseline.trainable_variables))

  def initial_state(self, batch_size) -> Dict[str, Dict]:
    return {KNOWLEDGE_BASE: self.knowledge_base.initial_state(batch_size),
            ACTIVE: self.active.initial_state(batch_size)}

  @tf.autograph.experimental.do_not_convert
  def step(self, env_output: types.StepOutput, prev_action,
           state) -> Tuple[types.AgentOutput, Dict]:
    """One timestep on a batch, sampling the active column's actions.

    Args and returns as `Agent.step`, with the two-column state; the
    outputs are the active column's.
    """
    reward = tf.convert_to_tensor(env_output.reward, tf.float32)
    if reward.shape.rank != 1:
      raise ValueError('PncAgent.step expects [B] rewards, got shape '
                       f'{reward.shape}')
    expand = lambda x: tf.convert_to_tensor(x)[None]
    inputs = self._inputs(
        expand(reward), expand(env_output.done),
        {k: expand(env_output.observation[k])
         for k in self.knowledge_base._observation_spec},
        {k: expand(prev_action[k])
         for k in self.knowledge_base._one_hot_keys})
    _, (logits, baseline), new_state = self._apply(inputs, state,
                                                   knowledge_base=False)
    logits = {k: v[0] for k, v in logits.items()}
    action = heads.sample_actions(logits, self.rng)
    return types.AgentOutput(action, logits, baseline[0]), new_state

  @tf.autograph.experimental.do_not_convert
  def unroll(self, prev_actions, env_outputs: types.StepOutput,
             state) -> Tuple[types.AgentOutput, Dict]:
    """The active column's time-major unroll (as `Agent.unroll`; greedy
    actions). The knowledge base runs too, for the laterals."""
    inputs = self._unroll_inputs(prev_actions, env_outputs, 'unroll')
    _, (logits, baseline), final = self._apply(inputs, state,
                                               knowledge_base=False)
    return (types.AgentOutput(heads.greedy_actions(logits), logits,
                              baseline), final)

  @tf.autograph.experimental.do_not_convert
  def unroll_both(self, prev_actions, env_outputs: types.StepOutput,
                  state) -> Tuple[Outputs, Dict]:
    """Both columns' time-major unrolls on the same inputs.

    Returns:
      (`Outputs` of `[T, B, ...]` `AgentOutput`s, final state). Gradients
      reach the knowledge base through its own outputs only.
    """
    inputs = self._unroll_inputs(prev_actions, env_outputs, 'unroll_both')
    (kb_logits, kb_baseline), (logits, baseline), final = self._apply(
        inputs, state, knowledge_base=True)
    return Outputs(
        types.AgentOutput(heads.greedy_actions(kb_logits), kb_logits,
                          kb_baseline),
        types.AgentOutput(heads.greedy_actions(logits), logits,
                          baseline)), final

  def reset_active_column(self, seed: int):
    """Re-draws the active column's and its adaptors' weights from `seed`
    (the variables stay the same objects, so optimizer slots and traced
    graphs keep working)."""
    fresh = PncAgent(self.knowledge_base, self._make_column(seed), seed,
                     self._make_column)
    for target, source in zip(self.active_variables, fresh.active_variables):
      target.assign(source)

  # --------------------------------------------------------------- private

  def _build(self):
    """Creates the adaptors' variables with a zero batch of T = B = 1."""
    kb = self.knowledge_base
    zeros = lambda s: tf.zeros((1, 1) + tuple(s.shape), tf.as_dtype(s.dtype))
    inputs = self._inputs(
        tf.zeros([1, 1]), tf.zeros([1, 1], tf.bool),
        {k: zeros(s) for k, s in kb._observation_spec.items()},
        {k: tf.zeros([1, 1], tf.int32) for k in kb._one_hot_keys})
    self._apply(inputs, self.initial_state(1), knowledge_base=False)

  @staticmethod
  def _inputs(reward, done, observation, prev_action):
    return dict(reward=reward, done=done, observation=observation,
                prev_action=prev_action)

  def _unroll_inputs(self, prev_actions, env_outputs, caller):
    reward = tf.convert_to_tensor(env_outputs.reward, tf.float32)
    if reward.shape.rank != 2:
      raise ValueError(f'PncAgent.{caller} expects time-major [T, B] '
                       f'rewards, got shape {reward.shape}')
    kb = self.knowledge_base
    return self._inputs(
        reward, env_outputs.done,
        {k: env_outputs.observation[k] for k in kb._observation_spec},
        {k: prev_actions[k] for k in kb._one_hot_keys})

  def _apply(self, inputs, state, knowledge_base: bool):
    """Both columns on the same inputs.

    Returns:
      ((KB logits, KB baseline) or None unless `knowledge_base`, (AC logits,
      AC baseline), new state). Without `knowledge_base` nothing of the
      knowledge base's computation carries a gradient.
    """
    kb_logits, kb_baseline, kb_state, trace = _column_apply(
        self.knowledge_base, None, state=state[KNOWLEDGE_BASE], **inputs)
    lateral_trace = tf.nest.map_structure(tf.stop_gradient, trace)
    logits, baseline, ac_state, _ = _column_apply(
        self.active, self.laterals, state=state[ACTIVE],
        kb_trace=lateral_trace, **inputs)
    new_state = {KNOWLEDGE_BASE: kb_state, ACTIVE: ac_state}
    kb_outputs = (kb_logits, kb_baseline) if knowledge_base else None
    return kb_outputs, (logits, baseline), new_state


def make_pnc_agent(env_spec: types.EnvSpec, seed: int = 0,
                   **agent_kwargs) -> PncAgent:
  """A `PncAgent` whose columns are `agents.make_agent(env_spec,
  **agent_kwargs)`: the knowledge base with `seed` (the weights a plain
  agent of that seed has), the active column and its adaptors with
  `active_column_seed(seed, 0)`.

  Raises:
    ValueError: as `make_agent`, or for `separate_critic=True`.
  """
  if agent_kwargs.get('separate_critic'):
    raise ValueError('Progress & Compress needs separate_critic=False: its '
                     'columns share their torso and core with the baseline.')
  make_column = lambda s: agent_lib.make_agent(env_spec, seed=s,
                                               **agent_kwargs)
  first = active_column_seed(seed, 0)
  return PncAgent(make_column(seed), make_column(first), first, make_column)
