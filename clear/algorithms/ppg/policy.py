"""Phasic Policy Gradient (Cobbe et al. 2020, arXiv 2009.04416) on clear.

PPG trains two feed-forward networks with two optimizers. The losses are
pure functions in `clear.algorithms.ppg.losses`, the networks and the value
normaliser are in `clear.algorithms.ppg.networks`, the config and its defaults
in `clear.algorithms.ppg.config`; this module holds the two phases of training:

- the policy network: torso -> categorical heads, plus an auxiliary value
  head that shares the torso;
- the value network: its own torso -> value head.

Policy phase (every `learn` call, on a fresh `[T + 1, B]` batch of
unrolls). The current networks evaluate the batch once: their logits are
the "old" policy of the PPO ratio and their values feed the selected value
estimator (`value_estimator`, GAE(lambda) by default) for advantages and
returns. Then `policy_epochs` epochs of `num_minibatches` shuffled
minibatches each take one gradient step on the policy network (PPO clipped
surrogate minus an entropy bonus) and one on the value network (optionally
clipped value loss). The observations, value targets and old values are kept
in an auxiliary memory, in return units: with `normalize_value`, the
auxiliary phase normalises them with the statistics of its own time (the
networks' value space has moved since the batch was collected).

Auxiliary phase (every `aux_freq` policy iterations). The policy network's
logits on every stored observation are frozen as pi_old (computed at the
start of the phase, as in the paper, rather than stored with the batch);
then `aux_train_epoch` epochs of `aux_num_minibatches` minibatches fit the
auxiliary value head to the stored targets while a behaviour-cloning term
`aux_bc_weight * KL(pi_old || pi)` keeps the action distribution, and give
the value network one extra step each. The memory is then cleared. (The
memory is not checkpointed: a resumed run starts a fresh one.)

Every gradient step is applied only when its losses and gradient norms are
finite; otherwise it is skipped and counted (`num_skipped_steps`).

Conventions: T is time, B is batch, A_i the number of choices of action
head i; in the losses below B is any flat batch of samples (a minibatch of
the flattened `[T * B]` steps). The policy of a state with several action
heads is the product of the heads (log-probabilities, entropies and KLs are
summed over heads). Only discrete (`DiscreteSpec`) heads are supported.

Metrics returned by `learn` (numpy scalars) and written as `tf.summary`
scalars: loss/policy, loss/value, loss/entropy (minus the mean entropy),
policy/entropy, policy/approx_kl, policy/clip_fraction, value/clip_fraction,
value/mean_value, value/mean_return, advantage/abs_max, grad_norm/policy,
policy/kl_stopped (share of the phase's steps the policy sat out, see
`target_kl`),
grad_norm/value, learning_rate/policy, learning_rate/value, and after an
auxiliary phase aux/value_loss, aux/bc_kl, aux/loss, aux/value_net_loss,
aux/grad_norm_policy, aux/grad_norm_value; plus the counters
num_env_frames, num_updates, num_gradient_steps, num_skipped_steps and
`skipped` (True when any gradient step of the call was skipped).
"""

import numpy as np
import sonnet as snt
import tensorflow as tf
import tree

from agents import heads as heads_lib
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.ppg import config as ppg_config
from clear.algorithms.ppg import losses as ppg_losses
from clear.algorithms.ppg import networks as ppg_networks
from clear.ops import guards
from clear.ops import losses
from clear.ops import transitions
from clear.ops import value_estimators

# The algorithm's config and its check, where `clear.algorithms.registry` (and
# users) find them.
PPGConfig = ppg_config.PPGConfig
validate_config = ppg_config.validate_config


# --- The policy --------------------------------------------------------------


def _merge(x):
  """`[T, B, ...]` -> `[T * B, ...]`."""
  return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], axis=0))


def _gather(nest, indices):
  return tf.nest.map_structure(lambda x: tf.gather(x, indices), nest)


def _minibatch_indices(rng, num_samples, epochs, num_minibatches):
  """`[epochs * num_minibatches, size]` indices; each epoch a permutation.

  The `num_samples % num_minibatches` samples left over by an epoch's
  permutation are skipped in that epoch (a different few each time).
  """
  size = num_samples // num_minibatches
  keys = rng.uniform([epochs, num_samples])
  permutations = tf.argsort(keys, axis=1)[:, :size * num_minibatches]
  return tf.reshape(permutations, [epochs * num_minibatches, size])


# What `_policy_step` and `_aux_step` report (means over the phase's steps).
_POLICY_STEP_METRICS = (
    'loss/policy', 'loss/value', 'loss/entropy', 'policy/entropy',
    'policy/approx_kl', 'policy/clip_fraction', 'policy/kl_stopped',
    'value/clip_fraction', 'advantage/abs_max', 'grad_norm/policy',
    'grad_norm/value')
_AUX_STEP_METRICS = ('aux/loss', 'aux/value_loss', 'aux/bc_kl',
                     'aux/value_net_loss', 'aux/grad_norm_policy',
                     'aux/grad_norm_value')


def _applied(optimizer, grads, variables):
  optimizer.apply(grads, variables)
  return tf.constant(True)



class PPGPolicy(policy_lib.Policy):
  """PPG behind the `clear.algorithms.policy.Policy` interface (see module
  docstring).

  Acting is stateless: `initial_state` is an empty dict. `num_updates`
  counts policy iterations (`learn` calls that applied at least one
  gradient step); gradient steps are counted in the `num_gradient_steps`
  metric.

  Args:
    spec: the environment spec; every action head must be a DiscreteSpec.
    agent_config: `clear.algorithms.policy.AgentConfig` (see module docstring).
    learner_config: `PPGConfig`, or None for an acting-only copy.
    seed: seeds the weights, action sampling and minibatch shuffling.

  Raises:
    ValueError: for continuous action heads or an impossible config.
  """

  def __init__(self, spec: types.EnvSpec,
               agent_config: policy_lib.AgentConfig,
               learner_config: PPGConfig = None, seed: int = 0):
    super().__init__(spec)
    ppg_networks.check_action_spec(spec)
    self._agent_config = agent_config
    self.agent = ppg_networks.PPGAgent(spec, agent_config.network,
                                       int(agent_config.core_size), seed=seed)
    self._act = tf.function(self._act_graph, autograph=False)
    self.config = learner_config
    if learner_config is None:
      return
    validate_config(learner_config)
    self._build_learner(learner_config, seed)

  # --- Acting ----------------------------------------------------------------

  def initial_state(self, batch_size):
    del batch_size
    return {}

  def _act_graph(self, observation):
    logits, _ = self.agent.policy_network(observation)
    value = self.agent.value_network(observation)
    value = self.agent.normalizer.denormalize(value)
    action = heads_lib.sample_actions(logits, self.agent.rng)
    return types.AgentOutput(action, logits, value)

  def act(self, env_output, prev_action, state):
    del prev_action  # Feed-forward networks.
    observation = {k: env_output.observation[k]
                   for k in self.spec.observation_spec}
    return policy_lib.to_numpy(self._act(observation)), state

  def acting_variables(self):
    return self.agent.acting_variables

  def sampling_rng(self):
    return self.agent.rng

  def acting_checkpointables(self):
    return {'agent': self.agent}

  def _init_twin(self):
    return type(self)(self.spec, self._agent_config)

  def _scope_variables(self, scope):
    """'policy' is the policy network (with its auxiliary head); 'critic'
    the value network and the value normaliser's statistics."""
    agent = self.agent
    critic = (tuple(agent.value_network.trainable_variables) +
              (agent.normalizer.mean, agent.normalizer.variance,
               agent.normalizer.count))
    policy = tuple(agent.policy_network.trainable_variables)
    return {'all': policy + critic, 'critic': critic, 'policy': policy}[scope]

  # --- Learning --------------------------------------------------------------

  def _build_learner(self, config: PPGConfig, seed: int):
    self.learning_rate = tf.Variable(config.learning_rate, trainable=False,
                                     name='learning_rate')
    make = lambda name: snt.optimizers.Adam(
        self.learning_rate, epsilon=config.adam_epsilon, name=name)
    self.policy_optimizer = make('policy_optimizer')
    self.value_optimizer = make('value_optimizer')
    # Slots now, so that the training loops never create variables.
    # pylint: disable=protected-access
    self.policy_optimizer._initialize(self._policy_variables)
    self.value_optimizer._initialize(self._value_variables)
    # pylint: enable=protected-access
    counter = guards.step_counter
    self._num_env_frames = counter('num_env_frames')
    self._num_updates = counter('num_updates')
    self._num_gradient_steps = counter('num_gradient_steps')
    self._num_skipped_steps = counter('num_skipped_steps')
    self._num_iterations = counter('num_iterations')
    self._shuffle_rng = tf.random.Generator.from_seed(seed + 1)
    self._memory = []
    self._policy_phase = tf.function(self._policy_phase_graph,
                                     autograph=False, reduce_retracing=True)
    self._aux_phase = tf.function(self._aux_phase_graph, autograph=False,
                                  reduce_retracing=True)

  @property
  def _policy_variables(self):
    return self.agent.policy_network.trainable_variables

  @property
  def _value_variables(self):
    return self.agent.value_network.trainable_variables

  def _apply_if_finite(self, updates, scalars, gates=None):
    """Applies every (optimizer, grads, variables) if all scalars are finite.

    `gates`, when given, holds a bool scalar per update: an update whose
    gate is False is left out (the step still counts as applied).

    Returns:
      float32 1.0 when applied, 0.0 when skipped (and counted).
    """
    gates = gates or [None] * len(updates)

    def apply():
      for (optimizer, grads, variables), gate in zip(updates, gates):
        if gate is None:
          optimizer.apply(grads, variables)
        else:
          tf.cond(gate, lambda o=optimizer, g=grads, v=variables: _applied(
              o, g, v), lambda: tf.constant(False))

    applied = guards.apply_if_finite(guards.all_finite(scalars), apply,
                                     self._num_gradient_steps,
                                     self._num_skipped_steps)
    return tf.cast(applied, tf.float32)

  def _evaluate_batch(self, batch: types.Unroll):
    """Old logits, values, advantages and targets of a `[T + 1, B]` batch.

    Truncated steps (time limits, env crashes) are cut out: the targets of
    the steps before them bootstrap from their value
    (`losses.cut_at_truncations`), and they themselves are left out of the
    returned rows, so they are in no minibatch, advantage normalisation,
    value statistic or auxiliary phase.

    Returns:
      dict of flat `[N, ...]` tensors, N = T * B less the truncated steps:
      observation, action, old_logits, advantages, targets (value targets
      in the networks' value space), old_values (the value network's
      outputs, same space), returns and old_value_returns (the same two in
      return units, for the auxiliary memory); and the mean return and
      value in return units.
    """
    config = self.config
    env = batch.env_outputs
    observation = {k: tf.convert_to_tensor(env.observation[k])
                   for k in self.spec.observation_spec}
    merged = tree.map_structure(_merge, observation)
    logits, _ = self.agent.policy_network(merged)
    raw_values = self.agent.value_network(merged)
    time_batch = tf.shape(env.reward)
    split = lambda x: tf.reshape(x, tf.concat([time_batch, tf.shape(x)[1:]],
                                              axis=0))
    logits = tree.map_structure(lambda x: split(x)[:-1], logits)
    raw_values = split(raw_values)
    normalizer = self.agent.normalizer
    values = normalizer.denormalize(raw_values)

    actions = {k: tf.cast(batch.agent_outputs.action[k][1:], tf.int32)
               for k in logits}
    rewards = losses.clip_rewards(
        tf.cast(env.reward[1:], tf.float32) * config.reward_scaling,
        config.reward_clipping)
    truncated = tf.cast(env.truncated[1:], tf.bool)
    discounts = transitions.transition_discounts(
        tf.cast(env.done[1:], tf.bool), truncated, config.discounting)
    # No target crosses a truncation; the cut steps are left out below.
    rewards, discounts = losses.cut_at_truncations(rewards, discounts,
                                                   values[:-1], truncated)
    log_rhos = None
    if config.value_estimator == 'vtrace':
      behaviour_logits = {k: batch.agent_outputs.logits[k][1:]
                          for k in logits}
      log_rhos = (ppg_losses.summed_log_probs(logits, actions) -
                  ppg_losses.summed_log_probs(behaviour_logits, actions))
    estimate = value_estimators.estimate(
        config.value_estimator, rewards, discounts, values[:-1], values[-1],
        lambda_=config.gae_lambda, log_rhos=log_rhos)
    # Rows (flat `[T * B]`) that are learned from: all but truncated steps.
    keep = tf.logical_not(_merge(truncated))
    kept = lambda x: tf.boolean_mask(_merge(x), keep)
    targets = kept(estimate.returns)
    if config.normalize_value:
      # A poisoned batch (skipped below) must not poison the statistics.
      def update():
        normalizer.update(targets)
        return tf.constant(True)

      tf.cond(tf.reduce_all(tf.math.is_finite(targets)), update,
              lambda: tf.constant(False))
      targets = normalizer.normalize(targets)
    return {
        'observation': tree.map_structure(lambda x: kept(x[:-1]),
                                          observation),
        'action': tree.map_structure(kept, actions),
        'old_logits': tree.map_structure(kept, logits),
        'advantages': kept(estimate.advantages),
        'targets': targets,
        'old_values': kept(raw_values[:-1]),
        'returns': kept(estimate.returns),
        'old_value_returns': kept(values[:-1]),
    }, tf.reduce_mean(estimate.returns), tf.reduce_mean(values[:-1])

  def _policy_step(self, data, policy_on):
    """One minibatch step on both networks.

    `policy_on` (bool scalar) is False once an earlier step of the phase
    went past the KL limit (`target_kl`); the policy network then stays as
    it is. Returns (metrics, applied, policy_on for the next step).
    """
    config = self.config
    advantages = data['advantages']
    if config.normalize_advantage:
      advantages = ppg_losses.normalize_advantages(advantages)
    with tf.GradientTape() as tape:
      logits, _ = self.agent.policy_network(data['observation'])
      loss, extra = ppg_losses.ppo_surrogate_loss(
          logits, data['old_logits'], data['action'], advantages,
          config.clip_ratio, config.entropy_cost)
      policy_loss = tf.reduce_mean(loss)
    policy_grads, policy_norm = guards.clipped_gradients(
        tape, policy_loss, self._policy_variables, self.config.clip_grad_norm)
    with tf.GradientTape() as tape:
      values = self.agent.value_network(data['observation'])
      loss, value_extra = ppg_losses.clipped_value_loss(
          values, data['old_values'], data['targets'], config.value_clip)
      value_loss = config.value_cost * tf.reduce_mean(loss)
    value_grads, value_norm = guards.clipped_gradients(
        tape, value_loss, self._value_variables, self.config.clip_grad_norm)
    approx_kl = tf.reduce_mean(extra.approx_kl)  # Before this step.
    if config.target_kl > 0:
      policy_on = tf.logical_and(policy_on,
                                 approx_kl <= 1.5 * config.target_kl)
    applied = self._apply_if_finite(
        [(self.policy_optimizer, policy_grads, self._policy_variables),
         (self.value_optimizer, value_grads, self._value_variables)],
        [policy_loss, value_loss, policy_norm, value_norm],
        gates=[policy_on, None])
    return {
        'loss/policy': tf.reduce_mean(extra.policy_loss),
        'loss/value': value_loss,
        'loss/entropy': -tf.reduce_mean(extra.entropy),
        'policy/entropy': tf.reduce_mean(extra.entropy),
        'policy/approx_kl': approx_kl,
        'policy/clip_fraction': tf.reduce_mean(extra.clipped),
        'policy/kl_stopped': 1.0 - tf.cast(policy_on, tf.float32),
        'value/clip_fraction': tf.reduce_mean(value_extra.clipped),
        'advantage/abs_max': tf.reduce_max(tf.abs(advantages)),
        'grad_norm/policy': policy_norm,
        'grad_norm/value': value_norm,
    }, applied, policy_on

  def _loop(self, step_fn, names, data, indices):
    """Runs `step_fn` on every row of minibatch `indices`; mean metrics.

    `step_fn(minibatch, carry)` returns (dict `names` -> float32 scalar
    metrics, float32 1.0 when its update was applied else 0.0, the bool
    carry for the next step); the carry starts True.

    Returns:
      (dict of metrics averaged over the steps, number of applied steps).
    """
    num_steps = tf.shape(indices)[0]

    def body(i, sums, applied, carry):
      metrics, step_applied, carry = step_fn(_gather(data, indices[i]), carry)
      sums = {k: sums[k] + metrics[k] for k in names}
      return i + 1, sums, applied + step_applied, carry

    _, sums, applied, _ = tf.while_loop(
        lambda i, *_: i < num_steps, body,
        (tf.constant(0), {k: tf.constant(0.0) for k in names},
         tf.constant(0.0), tf.constant(True)))
    count = tf.cast(tf.maximum(num_steps, 1), tf.float32)
    return {k: v / count for k, v in sums.items()}, applied

  def _policy_phase_graph(self, batch: types.Unroll):
    config = self.config
    self._decay_learning_rate()
    data, mean_return, mean_value = self._evaluate_batch(batch)
    num_samples = tf.shape(data['advantages'])[0]
    indices = _minibatch_indices(self._shuffle_rng, num_samples,
                                 config.policy_epochs, config.num_minibatches)
    metrics, applied = self._loop(self._policy_step, _POLICY_STEP_METRICS,
                                  data, indices)
    num_steps = tf.shape(indices)[0]
    self._num_updates.assign_add(tf.cast(applied > 0, tf.int64))
    self._num_iterations.assign_add(1)
    metrics.update({
        'value/mean_return': mean_return,
        'value/mean_value': mean_value,
        'skipped': applied < tf.cast(num_steps, tf.float32),
    })
    # In return units: the auxiliary phase normalises them with the
    # statistics of its own time, not those of the batch's.
    memory = {k: data[k] for k in ('observation', 'returns',
                                   'old_value_returns')}
    return metrics, memory

  def _aux_step(self, data, carry):
    config = self.config
    with tf.GradientTape() as tape:
      logits, aux_values = self.agent.policy_network(data['observation'])
      loss, extra = ppg_losses.ppg_aux_loss(
          logits, data['old_logits'], aux_values, data['targets'],
          config.aux_bc_weight)
      aux_loss = tf.reduce_mean(loss)
    policy_grads, policy_norm = guards.clipped_gradients(
        tape, aux_loss, self._policy_variables, self.config.clip_grad_norm)
    with tf.GradientTape() as tape:
      values = self.agent.value_network(data['observation'])
      loss, _ = ppg_losses.clipped_value_loss(
          values, data['old_values'], data['targets'], config.value_clip)
      value_loss = tf.reduce_mean(loss)
    value_grads, value_norm = guards.clipped_gradients(
        tape, value_loss, self._value_variables, self.config.clip_grad_norm)
    applied = self._apply_if_finite(
        [(self.policy_optimizer, policy_grads, self._policy_variables),
         (self.value_optimizer, value_grads, self._value_variables)],
        [aux_loss, value_loss, policy_norm, value_norm])
    return {
        'aux/loss': aux_loss,
        'aux/value_loss': tf.reduce_mean(extra.aux_value_loss),
        'aux/bc_kl': tf.reduce_mean(extra.bc_kl),
        'aux/value_net_loss': value_loss,
        'aux/grad_norm_policy': policy_norm,
        'aux/grad_norm_value': value_norm,
    }, applied, carry

  def _aux_phase_graph(self, memory, num_minibatches):
    config = self.config
    old_logits, _ = self.agent.policy_network(memory['observation'])
    space = (self.agent.normalizer.normalize if config.normalize_value
             else tf.identity)
    data = {'observation': memory['observation'], 'old_logits': old_logits,
            'targets': space(memory['returns']),
            'old_values': space(memory['old_value_returns'])}
    num_samples = tf.shape(memory['returns'])[0]
    indices = _minibatch_indices(self._shuffle_rng, num_samples,
                                 config.aux_train_epoch, num_minibatches)
    metrics, applied = self._loop(self._aux_step, _AUX_STEP_METRICS, data,
                                  indices)
    metrics['aux/skipped'] = applied < tf.cast(tf.shape(indices)[0],
                                               tf.float32)
    return metrics

  def _decay_learning_rate(self):
    if not self.config.decay_learning_rate:
      return
    progress = tf.cast(self._num_env_frames, tf.float32) / float(
        self.config.total_environment_frames)
    self.learning_rate.assign(self.config.learning_rate *
                              tf.maximum(0.0, 1.0 - progress))

  def _run_aux_phase(self):
    """Concatenates the memory, trains on it and clears it."""
    memory = tree.map_structure(lambda *x: tf.concat(x, axis=0),
                                *self._memory)
    num_minibatches = self.config.aux_num_minibatches or (
        self.config.num_minibatches * len(self._memory))
    self._memory = []
    return self._aux_phase(memory, tf.constant(num_minibatches))

  def learn(self, batch: types.Unroll):
    """One PPG policy iteration (and an auxiliary phase every aux_freq).

    Args:
      batch: `types.Unroll` of `[T + 1, B, ...]` numpy arrays or tensors,
        fresh from the actors.

    Returns:
      dict of numpy scalars (see the module docstring).
    """
    if self.config is None:
      raise NotImplementedError('PPGPolicy: this copy only acts.')
    metrics, memory = self._policy_phase(batch)
    self._num_env_frames.assign_add(transitions.frames_in_batch(
        batch, 0, self.config))
    self._memory.append(memory)
    skipped = bool(metrics['skipped'])
    if int(self._num_iterations.numpy()) % self.config.aux_freq == 0:
      if self.config.aux_train_epoch > 0:
        aux_metrics = self._run_aux_phase()
        skipped = skipped or bool(aux_metrics.pop('aux/skipped'))
        metrics.update(aux_metrics)
      self._memory = []
    metrics = policy_lib.to_numpy(metrics)
    metrics.update({
        'skipped': np.bool_(skipped),
        'learning_rate/policy': self.learning_rate.numpy(),
        'learning_rate/value': self.learning_rate.numpy(),
        'num_env_frames': self._num_env_frames.numpy(),
        'num_updates': self._num_updates.numpy(),
        'num_gradient_steps': self._num_gradient_steps.numpy(),
        'num_skipped_steps': self._num_skipped_steps.numpy(),
    })
    step = self._num_env_frames  # As every summary of a run.
    for name, value in metrics.items():
      if name != 'skipped':
        tf.summary.scalar(name, value, step=step)
    return metrics

  def trace(self, example_batch, critic=False):
    """Traces both phases for batches shaped like `example_batch`."""
    del critic
    if tf.config.functions_run_eagerly():
      return  # Nothing would use the graphs.
    spec_of = lambda x: tf.TensorSpec(np.shape(x),
                                      tf.as_dtype(np.asarray(x).dtype))
    self._policy_phase.get_concrete_function(
        tree.map_structure(spec_of, example_batch))
    if self.config.aux_train_epoch > 0:
      observation = example_batch.env_outputs.observation
      memory = {
          'observation': {
              k: tf.TensorSpec([None] + list(np.shape(observation[k])[2:]),
                               tf.as_dtype(np.asarray(observation[k]).dtype))
              for k in self.spec.observation_spec},
          'returns': tf.TensorSpec([None], tf.float32),
          'old_value_returns': tf.TensorSpec([None], tf.float32)}
      self._aux_phase.get_concrete_function(
          memory, tf.TensorSpec([], tf.int32))

  # --- Bookkeeping -----------------------------------------------------------

  @property
  def num_env_frames(self):
    return int(self._num_env_frames.numpy())

  @property
  def num_updates(self):
    return int(self._num_updates.numpy())

  def add_env_frames(self, frames):
    self._num_env_frames.assign_add(int(frames))

  def checkpointables(self):
    return {'agent': self.agent,
            'policy_optimizer': self.policy_optimizer,
            'value_optimizer': self.value_optimizer,
            'learning_rate': self.learning_rate,
            'num_env_frames': self._num_env_frames,
            'num_updates': self._num_updates,
            'num_iterations': self._num_iterations,
            'num_gradient_steps': self._num_gradient_steps,
            'num_skipped_steps': self._num_skipped_steps,
            'shuffle_rng': self._shuffle_rng}
