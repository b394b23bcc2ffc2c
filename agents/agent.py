"""The IMPALA agent: torso -> LSTM core -> policy heads and baseline.

T is time, B is batch. The agent sees, at each step, an `env_output`
(`clear.types.StepOutput`) and the previous action (the one that led to that
env_output, see `clear.types`), and returns a `clear.types.AgentOutput`.

Core input (IMPALA): torso features, the reward clipped to [-1, 1], and a
one-hot encoding of the previous action of every non-spatial head. The core
state of a row is reset to the initial state where `done` is set, before the
row's observation is processed. The core is an LSTM (`cores.LSTM`,
`snt.LSTM`'s maths) or a layer-normalised LSTM (`cores.LayerNormLSTM`), its
kernels drawn per block by fan-in; the torso's hidden layers use ReLU, and
the pre-activations of its final linear layer (each hidden layer of the MLP
torso) can be layer-normalised (`torso_norm`); see `make_agent`.

`unroll` applies the torso and heads once to the merged `[T * B, ...]` batch
and runs only the core over time (`cores.unroll`: the core's input
projection for all steps in one matmul, then a `tf.while_loop` built
without AutoGraph, equivalent to `snt.dynamic_unroll`), so it traces in
constant time in T, accepts an unknown T, and works under XLA
(`jit_compile=True`).

Agent state: a dict `{'policy': snt.LSTMState(hidden, cell)}`, plus
`'critic': snt.LSTMState` with `separate_critic=True`; float32 `[B, core_size]`
leaves.

With `core_size=0` the agent is feed-forward (IMPALA's Atari agents without
memory, enough where frames are stacked): the heads read the core input
itself, and the state is the empty dict.
"""

from typing import Callable, Dict, Mapping, Optional, Tuple

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import cores
from agents import heads
from agents import initializers
from agents import torsos
from clear import types

NETWORKS = ('auto', 'impala_shallow', 'impala_deep', 'mlp', 'fullyconv',
            'minatar')

CORES = ('lstm', 'layer_norm_lstm')
TORSO_NORMS = tuple(torsos.NORMS)

# 'auto' gives a single image no larger than this on both sides (MinAtar's
# 10x10 boards) the small MinAtar torso instead of IMPALA's 84x84 one.
SMALL_IMAGE_SIZE = 16

TorsoFactory = Callable[[str, snt.initializers.Initializer], snt.Module]


def _merge_time_batch(x: tf.Tensor) -> tf.Tensor:
  """`[T, B, ...]` -> `[T * B, ...]`, keeping the static inner shape."""
  return tf.reshape(x, [-1] + x.shape[2:].as_list())


def _time_batch_dims(x: tf.Tensor):
  """`[T, B]` of `x` as Python ints where static, scalar tensors otherwise."""
  dynamic = tf.shape(x)
  return [x.shape[i] if x.shape[i] is not None else dynamic[i]
          for i in range(2)]


def _split_time_batch(y: tf.Tensor, time_batch) -> tf.Tensor:
  """`[T * B, ...]` -> `[T, B, ...]`."""
  return tf.reshape(y, list(time_batch) + y.shape[1:].as_list())


def _make_core(core_size: int, w_init, core: str):
  """A `core` (a `CORES` name) of `core_size` units, or None (feed-forward)
  for 0."""
  if core_size == 0:
    return None
  if core == 'layer_norm_lstm':
    return cores.LayerNormLSTM(core_size, w_init, name='lstm')
  return cores.LSTM(core_size, w_i_init=w_init, w_h_init=w_init, name='lstm')


class _Critic(snt.Module):
  """A separate value network: its own torso, LSTM and baseline head."""

  def __init__(self, torso: snt.Module, core_size: int, w_init, core: str,
               name: str = 'critic'):
    super().__init__(name=name)
    self.torso = torso
    self.core = _make_core(core_size, w_init, core)
    self.baseline = snt.Linear(1, w_init=w_init, name='baseline')


class Agent(snt.Module):
  """IMPALA actor-critic with an LSTM core; see the module docstring.

  Build it with `make_agent`. Its variables exist as soon as it is built.
  Sampling draws from `self.rng`, a `tf.random.Generator` seeded from `seed`;
  the generator is tracked by `tf.train.Checkpoint(agent=...)` (it is not in
  `agent.variables`).

  Wrap `step` and `unroll` in `tf.function` for speed; both also run eagerly.
  They have no tensor-dependent Python control flow and are marked
  `do_not_convert`, so AutoGraph skips them (converting the modules and
  `tree` cost several seconds of tracing).
  """

  def __init__(self,
               env_spec: types.EnvSpec,
               make_torso: TorsoFactory,
               core_size: int = 256,
               separate_critic: bool = False,
               seed: int = 0,
               spatial_hidden_channels: int = 16,
               core: str = 'lstm',
               name: str = 'agent'):
    """See `make_agent`; `make_torso(name, w_init)` returns a new torso."""
    super().__init__(name=name)
    self._env_spec = env_spec
    self._observation_spec = env_spec.observation_spec
    self._action_spec = env_spec.action_spec
    # Heads whose previous action is fed to the core as a one-hot.
    self._one_hot_keys = [k for k, s in self._action_spec.items()
                          if s.spatial is None]
    init_rng = np.random.default_rng(seed)
    w_init = initializers.SeededFanIn(init_rng)

    with self.name_scope:
      self.rng = tf.random.Generator.from_seed(seed)
    self._torso = make_torso('torso', w_init)
    self._core = _make_core(core_size, w_init, core)
    resolutions = getattr(self._torso, 'resolutions', ())
    self._heads = heads.PolicyHeads(
        self._action_spec, w_init, spatial_resolutions=resolutions,
        spatial_hidden_channels=spatial_hidden_channels)
    if separate_critic:
      self._critic = _Critic(make_torso('critic_torso', w_init), core_size,
                             w_init, core)
      self._baseline = None
    else:
      self._critic = None
      self._baseline = snt.Linear(1, w_init=w_init, name='baseline')
    self._build()

  # ---------------------------------------------------------------- public

  @property
  def env_spec(self) -> types.EnvSpec:
    return self._env_spec

  def initial_state(self, batch_size) -> Dict[str, snt.LSTMState]:
    """Zero LSTM state(s); float32 `[batch_size, core_size]` leaves (the
    empty dict for a feed-forward agent)."""
    state = {}
    if self._core is not None:
      state['policy'] = self._core.initial_state(batch_size)
    if self._critic is not None and self._critic.core is not None:
      state['critic'] = self._critic.core.initial_state(batch_size)
    return state

  @property
  def critic_variables(self) -> Tuple[tf.Variable, ...]:
    """What critic pretraining trains: the baseline head, or the critic."""
    if self._critic is not None:
      return tuple(self._critic.trainable_variables)
    return tuple(self._baseline.trainable_variables)

  @property
  def policy_variables(self) -> Tuple[tf.Variable, ...]:
    """All trainable variables that are not `critic_variables`."""
    critic = {v.ref() for v in self.critic_variables}
    return tuple(v for v in self.trainable_variables if v.ref() not in critic)

  @tf.autograph.experimental.do_not_convert
  def step(self, env_output: types.StepOutput, prev_action: Mapping,
           state) -> Tuple[types.AgentOutput, Dict]:
    """One timestep on a batch, sampling actions.

    Args:
      env_output: `StepOutput` of `[B, ...]` arrays (numpy or tensors);
        `info` is not used.
      prev_action: dict name -> int `[B]`, the action that led to
        `env_output` (any value where `done` is set).
      state: from `initial_state` or the previous `step`.

    Returns:
      (AgentOutput(action=dict int32 `[B]`, logits=dict float32 `[B, A]`
      with unavailable choices at `heads.MASKED_LOGIT`, baseline float32
      `[B]`), new_state).
    """
    reward = tf.convert_to_tensor(env_output.reward, tf.float32)
    if reward.shape.rank != 1:
      raise ValueError('Agent.step expects [B] rewards, got shape '
                       f'{reward.shape}')
    expand = lambda x: tf.convert_to_tensor(x)[None]
    logits, baseline, new_state = self._apply(
        reward=expand(reward),
        done=expand(env_output.done),
        observation={k: expand(env_output.observation[k])
                     for k in self._observation_spec},
        prev_action={k: expand(prev_action[k]) for k in self._one_hot_keys},
        state=state)
    logits = {k: v[0] for k, v in logits.items()}
    action = heads.sample_actions(logits, self.rng)
    return types.AgentOutput(action, logits, baseline[0]), new_state

  @tf.autograph.experimental.do_not_convert
  def unroll(self, prev_actions: Mapping, env_outputs: types.StepOutput,
             state) -> Tuple[types.AgentOutput, Dict]:
    """Time-major unroll, equal to `step` applied T times.

    Args:
      prev_actions: dict name -> int `[T, B]`; `prev_actions[k][t]` led to
        `env_outputs[t]`.
      env_outputs: `StepOutput` of `[T, B, ...]`; `info` is not used.
      state: the state before `env_outputs[0]`.

    Returns:
      (AgentOutput of `[T, B, ...]`, final_state). Its `action` is the
      argmax of the masked logits (no sampling, no RNG consumed); learners
      use the stored behaviour actions instead.
    """
    reward = tf.convert_to_tensor(env_outputs.reward, tf.float32)
    if reward.shape.rank != 2:
      raise ValueError('Agent.unroll expects time-major [T, B] rewards, got '
                       f'shape {reward.shape}')
    logits, baseline, final_state = self._apply(
        reward=reward,
        done=env_outputs.done,
        observation={k: env_outputs.observation[k]
                     for k in self._observation_spec},
        prev_action={k: prev_actions[k] for k in self._one_hot_keys},
        state=state)
    action = heads.greedy_actions(logits)
    return types.AgentOutput(action, logits, baseline), final_state

  # --------------------------------------------------------------- private

  def _build(self):
    """Creates all variables with a zero batch of T = B = 1."""
    zeros = lambda s: tf.zeros((1, 1) + tuple(s.shape), tf.as_dtype(s.dtype))
    self._apply(
        reward=tf.zeros([1, 1]),
        done=tf.zeros([1, 1], tf.bool),
        observation={k: zeros(s) for k, s in self._observation_spec.items()},
        prev_action={k: tf.zeros([1, 1], tf.int32)
                     for k in self._one_hot_keys},
        state=self.initial_state(1))

  def _unroll_core(self, core, features, extras, done, state):
    """Runs `core` over time on merged features; returns merged outputs and
    the final state (None for a feed-forward agent: the core input is the
    output)."""
    time_batch = _time_batch_dims(done)
    if core is None:
      inputs = tf.concat([_split_time_batch(features, time_batch), extras], -1)
      return _merge_time_batch(inputs), None
    inputs = tf.concat([_split_time_batch(features, time_batch), extras], -1)
    outputs, final_state = cores.unroll(core, inputs, done, state)
    return _merge_time_batch(outputs), final_state

  def _apply(self, reward, done, observation, prev_action, state):
    """Logits `[T, B, A]`, baselines `[T, B]`, final state."""
    reward = tf.convert_to_tensor(reward, tf.float32)
    done = tf.convert_to_tensor(done, tf.bool)
    time_batch = _time_batch_dims(reward)
    observation = {k: _merge_time_batch(tf.convert_to_tensor(v))
                   for k, v in observation.items()}
    extras = [tf.clip_by_value(reward, -1., 1.)[..., None]]
    for k in self._one_hot_keys:
      extras.append(tf.one_hot(tf.cast(prev_action[k], tf.int32),
                               self._action_spec[k].num_values))
    extras = tf.concat(extras, axis=-1)

    torso_out = self._torso(observation)
    new_state = {}
    core_out, new_state['policy'] = self._unroll_core(
        self._core, torso_out.features, extras, done, state.get('policy'))
    logits = self._heads(core_out, torso_out.spatial)
    logits = heads.apply_masks(logits, observation, self._action_spec)

    if self._critic is not None:
      critic_features = self._critic.torso(observation).features
      critic_out, new_state['critic'] = self._unroll_core(
          self._critic.core, critic_features, extras, done,
          state.get('critic'))
      baseline = self._critic.baseline(critic_out)
    else:
      baseline = self._baseline(core_out)

    logits = {k: _split_time_batch(v, time_batch) for k, v in logits.items()}
    baseline = _split_time_batch(baseline[:, 0], time_batch)
    new_state = {k: v for k, v in new_state.items() if v is not None}
    return logits, baseline, new_state


def _image_network_error(network, observation_spec):
  images = torsos.image_keys(observation_spec)
  if len(images) != 1:
    return (f"network={network!r} needs exactly one [H, W, C] image "
            f'observation, but observation_spec has {images}')
  return None


def _check_action_spec(action_spec, observation_spec):
  for key, spec in action_spec.items():
    if not isinstance(spec, types.DiscreteSpec):
      raise ValueError(
          f'env_spec.action_spec[{key!r}] is {type(spec).__name__}; the IMPALA '
          'agent supports only DiscreteSpec (categorical) heads')
    if spec.spatial is not None and (
        int(np.prod(spec.spatial)) != spec.num_values):
      raise ValueError(
          f'env_spec.action_spec[{key!r}]: spatial {spec.spatial} does not '
          f'match num_values {spec.num_values}')
    if spec.mask_key is not None:
      mask_spec = observation_spec.get(spec.mask_key)
      if mask_spec is None or tuple(mask_spec.shape) != (spec.num_values,):
        raise ValueError(
            f'env_spec.action_spec[{key!r}].mask_key={spec.mask_key!r} must '
            f'name a [{spec.num_values}] entry of env_spec.observation_spec')


def resolve_network(env_spec: types.EnvSpec, network: str = 'auto') -> str:
  """The concrete network name for `network` ('auto' picks by observation).

  Raises:
    ValueError: unknown `network`, or one that cannot read the observations.
  """
  obs_spec = env_spec.observation_spec
  if network not in NETWORKS:
    raise ValueError(f'network must be one of {NETWORKS}, got {network!r}')
  images = torsos.image_keys(obs_spec)
  if network == 'auto':
    if 'screen' in obs_spec and 'minimap' in obs_spec:
      network = 'fullyconv'
    elif len(images) == 1 and max(
        obs_spec[images[0]].shape[:2]) <= SMALL_IMAGE_SIZE:
      network = 'minatar'
    elif len(images) == 1:
      network = 'impala_shallow'
    elif not images and all(len(s.shape) <= 1 for s in obs_spec.values()):
      network = 'mlp'
    else:
      raise ValueError(
          "network='auto' cannot pick a network for observation_spec "
          f'{dict(obs_spec)}; pass network explicitly')
  if network in ('impala_shallow', 'impala_deep', 'minatar'):
    error = _image_network_error(network, obs_spec)
    if error:
      raise ValueError(error)
    if network == 'minatar' and min(obs_spec[images[0]].shape[:2]) < 3:
      raise ValueError(
          f"network='minatar' needs an image of at least 3x3 (its 3x3 "
          f'convolution is unpadded), got {images[0]!r} of shape '
          f'{tuple(obs_spec[images[0]].shape)}')
  elif network == 'mlp':
    bad = [k for k, s in obs_spec.items() if len(s.shape) > 1]
    if bad:
      raise ValueError(
          f"network='mlp' takes only vector observations, but "
          f'observation_spec has {bad} of rank > 1 (use an image network)')
  elif network == 'fullyconv':
    if not images:
      raise ValueError(
          "network='fullyconv' needs [H, W, C] observations (screen, "
          'minimap), observation_spec has none')
    resolutions = {tuple(obs_spec[k].shape[:2]) for k in images}
    for key, spec in env_spec.action_spec.items():
      if (getattr(spec, 'spatial', None) is not None and
          tuple(spec.spatial) not in resolutions):
        raise ValueError(
            f"network='fullyconv': spatial head {key!r} of size "
            f'{spec.spatial} matches no observation resolution {resolutions}')
  return network


def make_agent(env_spec: types.EnvSpec,
               network: str = 'auto',
               core_size: int = 256,
               separate_critic: bool = False,
               seed: int = 0,
               torso_size: Optional[int] = None,
               mlp_sizes=(256, 256),
               spatial_hidden_channels: int = 16,
               core: str = 'lstm',
               torso_norm: str = 'none') -> Agent:
  """Builds an IMPALA agent for `env_spec`.

  Args:
    env_spec: `clear.types.EnvSpec`; every action head must be DiscreteSpec.
    network: 'auto', 'impala_shallow', 'impala_deep', 'mlp', 'fullyconv'
      or 'minatar'. 'auto' picks fullyconv for 'screen' + 'minimap'
      observations, minatar for a single image of at most
      `SMALL_IMAGE_SIZE` on both sides (MinAtar's 10x10 boards),
      impala_shallow for any other single image, mlp for vectors.
    core_size: LSTM size; 0 for a feed-forward agent (no LSTM).
    separate_critic: whether the baseline comes from a separate network
      (own torso and LSTM, state under `'critic'`), so that pretraining the
      critic cannot change the policy.
    seed: seeds the weights and the sampling generator `agent.rng`.
    torso_size: output size of the linear layer of image torsos; None for
      each torso's own (256; 128 for minatar, as MinAtar's network).
    mlp_sizes: hidden sizes of the MLP torso.
    spatial_hidden_channels: hidden channels of FullyConv spatial heads.
    core: 'lstm' (`cores.LSTM`, an `snt.LSTM`) or 'layer_norm_lstm'
      (`cores.LayerNormLSTM`).
    torso_norm: a `TORSO_NORMS` name: 'none' (the papers'), 'layer_norm',
      which layer-normalises the pre-activation of the image torsos' final
      linear layer and of each MLP hidden layer across its units, with a
      learnable gain and offset (`snt.LayerNorm`): `relu(norm(linear(x)))`.
      Normalised across units, a wide layer (the shallow torso's linear
      layer has fan-in 3,872) cannot lose all its ReLU units at once at a
      high learning rate (docs/training.md#why-these-defaults):
      its pre-activations cannot all fall below zero together. 'none'
      builds no norm variables.

  Returns:
    An `Agent` with its variables built.

  Raises:
    ValueError: naming the argument that is wrong.
  """
  if not isinstance(env_spec, types.EnvSpec):
    raise ValueError(f'env_spec must be a clear.types.EnvSpec, got '
                     f'{type(env_spec).__name__}')
  if (not isinstance(core_size, (int, np.integer)) or isinstance(
      core_size, bool) or core_size < 0):
    raise ValueError('core_size must be an int >= 0 (0: feed-forward), got '
                     f'{core_size!r}')
  _check_action_spec(env_spec.action_spec, env_spec.observation_spec)
  if core not in CORES:
    raise ValueError(f'core must be one of {CORES}, got {core!r}')
  if torso_norm not in TORSO_NORMS:
    raise ValueError(f'torso_norm must be one of {TORSO_NORMS}, got '
                     f'{torso_norm!r}')
  network = resolve_network(env_spec, network)
  obs_spec = env_spec.observation_spec
  mask_keys = {s.mask_key for s in env_spec.action_spec.values()
               if s.mask_key is not None}

  options = {'norm': torso_norm}
  if torso_size is not None:
    options['output_size'] = int(torso_size)

  def make_torso(name, w_init):
    if network == 'impala_shallow':
      return torsos.ImpalaShallowTorso(obs_spec, w_init, name=name, **options)
    if network == 'impala_deep':
      return torsos.ImpalaDeepTorso(obs_spec, w_init, name=name, **options)
    if network == 'minatar':
      return torsos.MinAtarTorso(obs_spec, w_init, name=name, **options)
    if network == 'mlp':
      return torsos.MLPTorso(obs_spec, w_init, mlp_sizes, name=name,
                             norm=torso_norm)
    return torsos.FullyConvTorso(obs_spec, w_init, mask_keys, name=name,
                                 **options)

  return Agent(env_spec, make_torso, core_size=int(core_size),
               separate_critic=bool(separate_critic), seed=seed,
               spatial_hidden_channels=spatial_hidden_channels, core=core)
