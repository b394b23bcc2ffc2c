"""The IMPALA-CLEAR train step and the critic-pretraining step.

A learner owns an agent, its optimizers and the run's counters. Its `step`
takes a batch of unrolls (`clear.types.Unroll` with `[T + 1, B, ...]`
entries), re-unrolls the agent over it, aligns the agent's outputs with the
actor's (shift by one, bootstrap from the last baseline), discounts each
step (per step, or per frame under dynamic step multipliers), cuts the
targets at truncated episode ends (`losses.cut_at_truncations`), computes
`losses.impala_clear_loss`, clips gradients by global norm and applies them
with the config's optimizer (`optimizers.make_optimizer`). `critic_step`
fits the critic alone to discounted returns.

A continual-learning method (`clear.continual.methods.base.Method`) may add
terms to the loss (`loss/<name>`); the learner knows no method by name.

The first `num_replay` batch columns are replayed unrolls: they contribute to
the loss like fresh ones and to the cloning terms, but never to the frame
count. Non-finite losses or gradients skip the update (counted in
`num_skipped_steps`), so a poisoned batch never reaches the weights.
"""

from typing import NamedTuple

import sonnet as snt
import tensorflow as tf
import tree

from clear import types
from clear.algorithms.impala import config as config_lib
from clear.algorithms.impala import optimizers
from clear.ops import guards
from clear.ops import losses
from clear.ops import transitions

# The config and its check, where the learner's users find them.
LearnerConfig = config_lib.LearnerConfig
validate_config = config_lib.validate_config


class AlignedBatch(NamedTuple):
  """A batch with learner and actor outputs aligned, all `[T, B]` nests.

  `target` are the learner's outputs at `env_outputs[t]`; `behaviour` the
  actor's outputs at the same observations; `rewards`, `done`, `truncated`
  describe the transition that followed. `bootstrap_value` is `[B]`.
  """
  target: types.AgentOutput
  behaviour: types.AgentOutput
  rewards: tf.Tensor
  done: tf.Tensor
  truncated: tf.Tensor
  bootstrap_value: tf.Tensor


def align(learner_outputs, batch: types.Unroll) -> AlignedBatch:
  """Shifts a re-unrolled batch so every `[t]` entry describes one transition.

  T is the unroll length, B the batch size. `learner_outputs[t]` were computed
  at `env_outputs[t]`; the actor's `agent_outputs[t + 1]` hold the behaviour
  policy's outputs at that same observation and the action taken there, and
  `env_outputs[t + 1]` the reward and episode end that followed.

  Args:
    learner_outputs: `AgentOutput` of `[T + 1, B, ...]` from `agent.unroll`.
    batch: `Unroll` of `[T + 1, B, ...]`.

  Returns:
    `AlignedBatch` of `[T, B, ...]` entries; bootstrap value `[B]`.
  """
  shift = lambda t: t[1:]
  env = tree.map_structure(shift, batch.env_outputs)
  return AlignedBatch(
      target=tree.map_structure(lambda t: t[:-1], learner_outputs),
      behaviour=tree.map_structure(shift, batch.agent_outputs),
      rewards=tf.cast(env.reward, tf.float32),
      done=tf.cast(env.done, tf.bool),
      truncated=tf.cast(env.truncated, tf.bool),
      bootstrap_value=learner_outputs.baseline[-1])


def _discrete_heads(aligned: AlignedBatch):
  """Target logits, behaviour logits and actions for every discrete head."""
  names = sorted(aligned.target.logits)
  return ({k: aligned.target.logits[k] for k in names},
          {k: aligned.behaviour.logits[k] for k in names},
          {k: aligned.behaviour.action[k] for k in names})


def learning_rate_at(frames, peak, total_frames, warmup_frames=0):
  """The learning rate after `frames` environment frames.

  A linear decay from `peak` to 0 at `total_frames`, multiplied, while
  `frames < warmup_frames`, by a linear ramp `frames / warmup_frames`:

    peak * min(1, frames / warmup_frames) * max(0, 1 - frames / total_frames)

  Args:
    frames: scalar (float32 tensor or number), frames trained on so far.
    peak: the learning rate the decay starts from.
    total_frames: frames at which the rate reaches 0.
    warmup_frames: length of the ramp; 0 = none.

  Returns:
    Scalar float32 tensor.
  """
  frames = tf.cast(frames, tf.float32)
  rate = peak * tf.maximum(0.0, 1.0 - frames / float(total_frames))
  if warmup_frames > 0:
    rate *= tf.minimum(1.0, frames / float(warmup_frames))
  return rate


def entropy_cost_at(frames, start, end, total_frames):
  """The entropy weight after `frames` environment frames.

  Linear from `start` at 0 frames to `end` at `total_frames`, then `end`:

    start + (end - start) * min(1, frames / total_frames)

  Args:
    frames: scalar (float32 tensor or number), frames trained on so far.
    start, end: the weights at 0 and at `total_frames` frames.
    total_frames: frames at which the weight reaches `end`.

  Returns:
    Scalar float32 tensor.
  """
  share = tf.minimum(1.0, tf.cast(frames, tf.float32) / float(total_frames))
  return start + (end - start) * share


class ImpalaClearLearner(snt.Module):
  """IMPALA with CLEAR replay: V-trace plus policy and value cloning.

  Attributes:
    agent: the agent being trained (an `agents.Agent`-like module with
      `unroll`, `critic_variables` and `trainable_variables`).
    config: `LearnerConfig`.
    learning_rate: variable, `learning_rate_at` the frames trained on
      before the update being applied.
    num_env_frames, num_updates, num_skipped_steps: int64 counters.
    optimizer, critic_optimizer: Sonnet optimizers of the main phase and of
      critic pretraining.
    method: the continual-learning method whose loss terms every main
      update adds, or None.
  """

  def __init__(self, agent, config: LearnerConfig, method=None,
               name='impala_clear'):
    super().__init__(name=name)
    validate_config(config)
    self.agent = agent
    self.config = config
    self.learning_rate = tf.Variable(config.learning_rate, dtype=tf.float32,
                                     trainable=False, name='learning_rate')
    self.num_env_frames = guards.step_counter('num_env_frames')
    self.num_updates = guards.step_counter('num_updates')
    self.num_skipped_steps = guards.step_counter('num_skipped_steps')
    self.optimizer = optimizers.make_optimizer(config, self.learning_rate)
    self.critic_optimizer = optimizers.make_optimizer(config,
                                                      self.learning_rate)
    self._grads_fn = tf.function(self._loss_and_grads, autograph=False,
                                 jit_compile=config.jit_compile)
    self._critic_grads_fn = tf.function(self._critic_loss_and_grads,
                                        autograph=False,
                                        jit_compile=config.jit_compile)
    self._step_fn = tf.function(self._step, autograph=False)
    self._critic_step_fn = tf.function(self._critic_step, autograph=False)
    self.method = method
    if method is not None:
      method.attach(self)

  # --- Entry points ----------------------------------------------------------

  @snt.no_name_scope
  def step(self, batch: types.Unroll):
    """One IMPALA-CLEAR update on a batch of `[T + 1, B]` unrolls.

    Returns:
      Dict of scalar metric tensors (loss terms, grad norm, learning rate,
      counters, `skipped` when the update was dropped for non-finite
      numbers).
    """
    optimizers.create_slots(self.optimizer,
                            lambda: self.agent.trainable_variables,
                            self._step_fn)
    return self._step_fn(batch)

  @snt.no_name_scope
  def critic_step(self, batch: types.Unroll):
    """One critic-pretraining update: baseline loss on discounted returns.

    Only `agent.critic_variables` change; the policy is left untouched.
    """
    optimizers.create_slots(self.critic_optimizer,
                            lambda: self.agent.critic_variables,
                            self._critic_step_fn)
    return self._critic_step_fn(batch)

  def create_slots(self, critic: bool = False):
    """Makes the optimizer's slots (and the critic optimizer's, with
    `critic`) now, without tracing: a checkpoint restored before fills them,
    so one saved before any update still holds them."""
    optimizers.create_slots(self.optimizer,
                            lambda: self.agent.trainable_variables,
                            self._step_fn)
    if critic:
      optimizers.create_slots(self.critic_optimizer,
                              lambda: self.agent.critic_variables,
                              self._critic_step_fn)

  @snt.no_name_scope
  def trace(self, signature, critic: bool = False):
    """Builds the graph of `step` (and of `critic_step`) without running it.

    Args:
      signature: nest of `tf.TensorSpec` of a batch (an `Unroll`).
      critic: also build `critic_step`'s graph.
    """
    self.create_slots(critic)
    self._step_fn.get_concrete_function(signature)
    if critic:
      self._critic_step_fn.get_concrete_function(signature)

  # --- Shared pieces -------------------------------------------------------

  def _prepare(self, batch: types.Unroll):
    learner_outputs, _ = self.agent.unroll(batch.agent_outputs.action,
                                           batch.env_outputs,
                                           batch.agent_state)
    aligned = align(learner_outputs, batch)
    rewards = losses.clip_rewards(aligned.rewards * self.config.reward_scaling,
                                  self.config.reward_clipping)
    discounts = transitions.transition_discounts(
        aligned.done, aligned.truncated, self.config.discounting,
        transitions.executed_step_frames(batch, self.config),
        self.config.discounting_step_mul)
    rewards, discounts = losses.cut_at_truncations(
        rewards, discounts, aligned.target.baseline, aligned.truncated)
    return aligned, rewards, discounts

  def _decay_learning_rate(self):
    # The rate at the frames before the update (a warm-up's first is 0).
    self.learning_rate.assign(learning_rate_at(
        self.num_env_frames, self.config.learning_rate,
        self.config.total_environment_frames,
        self.config.learning_rate_warmup_frames))

  @snt.no_name_scope
  def _update(self, batch, grads_fn, optimizer, variables, loss_key, prefix):
    """Computes gradients, applies them if finite, counts, summarises."""
    grads, metrics = grads_fn(batch)
    frames = transitions.frames_in_batch(batch, self.config.num_replay,
                                         self.config)

    def apply():
      self._decay_learning_rate()
      optimizer.apply(grads, variables())
      self.num_env_frames.assign_add(frames)

    applied = guards.apply_if_finite(
        guards.all_finite([metrics[loss_key], metrics['grad_norm']]), apply,
        self.num_updates, self.num_skipped_steps)
    metrics.update(self._counters(tf.logical_not(applied)))
    self._write_summaries(metrics, batch, prefix=prefix)
    return metrics

  # --- Main IMPALA-CLEAR phase --------------------------------------------

  def _entropy_cost(self):
    """The entropy weight at the frames before this update."""
    config = self.config
    if config.entropy_cost_end is None:
      return tf.constant(config.entropy_cost, tf.float32)
    return entropy_cost_at(self.num_env_frames, config.entropy_cost,
                           config.entropy_cost_end,
                           config.total_environment_frames)

  def _clear_loss(self, batch, num_replay, entropy_cost, policy_cloning_cost,
                  value_cloning_cost):
    """`losses.impala_clear_loss` of a re-unrolled batch.

    Returns:
      (aligned batch, rewards, loss, `losses.ImpalaClearLossExtra`).
    """
    aligned, rewards, discounts = self._prepare(batch)
    target_logits, behaviour_logits, actions = _discrete_heads(aligned)
    loss, extra = losses.impala_clear_loss(
        target_logits=target_logits,
        behaviour_logits=behaviour_logits,
        actions=actions,
        values=aligned.target.baseline,
        bootstrap_value=aligned.bootstrap_value,
        behaviour_values=aligned.behaviour.baseline,
        rewards=rewards,
        discounts=discounts,
        num_replay=num_replay,
        baseline_cost=self.config.baseline_cost,
        entropy_cost=entropy_cost,
        policy_cloning_cost=policy_cloning_cost,
        value_cloning_cost=value_cloning_cost,
        clip_advantage=self.config.clip_advantage)
    return aligned, rewards, loss, extra

  def _loss_and_grads(self, batch: types.Unroll):
    entropy_cost = self._entropy_cost()
    with tf.GradientTape() as tape:
      aligned, rewards, loss, extra = self._clear_loss(
          batch, self.config.num_replay, entropy_cost,
          self.config.policy_cloning_cost, self.config.value_cloning_cost)
      terms = self.method.loss_terms() if self.method is not None else {}
      for term in terms.values():
        loss = loss + term
    grads, grad_norm = guards.clipped_gradients(
        tape, loss, self.agent.trainable_variables, self.config.clip_grad_norm)
    steps = tf.cast(tf.size(rewards), tf.float32)
    metrics = {
        'loss/total': loss,
        'loss/policy_gradient': extra.policy_gradient,
        'loss/baseline': extra.baseline,
        'loss/entropy': extra.entropy,
        'loss/policy_cloning': extra.policy_cloning,
        'loss/value_cloning': extra.value_cloning,
        'grad_norm': grad_norm,
        # Mean policy entropy per step, summed over heads (entropy term is
        # sum p log p, i.e. minus the entropy).
        'policy/entropy': -extra.entropy / steps,
        'policy/entropy_cost': entropy_cost,
        'policy/mean_log_rho': tf.reduce_mean(extra.log_rhos),
        'value/mean_baseline': tf.reduce_mean(aligned.target.baseline),
        'value/mean_vtrace_target': tf.reduce_mean(extra.vs),
    }
    metrics.update({f'loss/{name}': term for name, term in terms.items()})
    return grads, metrics

  def policy_and_baseline_loss(self, batch: types.Unroll):
    """The policy-gradient plus weighted baseline loss of a batch of fresh
    `[T + 1, B]` unrolls (no entropy, no cloning), through the same
    re-unroll, alignment and V-trace as an update, for a method that
    weighs the weights by the squared gradients of this loss. Scalar."""
    _, _, _, extra = self._clear_loss(batch, 0, 0.0, 0.0, 0.0)
    return extra.policy_gradient + self.config.baseline_cost * extra.baseline

  @snt.no_name_scope
  def _step(self, batch: types.Unroll):
    """`step`'s graph."""
    return self._update(batch, self._grads_fn, self.optimizer,
                        lambda: self.agent.trainable_variables, 'loss/total',
                        prefix='')

  # --- Critic pretraining ---------------------------------------------------

  def _critic_loss_and_grads(self, batch: types.Unroll):
    with tf.GradientTape() as tape:
      aligned, rewards, discounts = self._prepare(batch)
      returns = losses.discounted_returns(rewards, discounts,
                                          aligned.bootstrap_value)
      loss = 0.5 * tf.reduce_sum(
          tf.square(returns - aligned.target.baseline))
    grads, grad_norm = guards.clipped_gradients(
        tape, loss, self.agent.critic_variables, self.config.clip_grad_norm)
    return grads, {'loss/baseline': loss, 'grad_norm': grad_norm,
                   'value/mean_baseline': tf.reduce_mean(
                       aligned.target.baseline),
                   'value/mean_return': tf.reduce_mean(returns)}

  @snt.no_name_scope
  def _critic_step(self, batch: types.Unroll):
    """`critic_step`'s graph."""
    return self._update(batch, self._critic_grads_fn, self.critic_optimizer,
                        lambda: self.agent.critic_variables, 'loss/baseline',
                        prefix='critic_pretrain/')

  # --- Bookkeeping ----------------------------------------------------------

  def _counters(self, skipped):
    return {'learning_rate': tf.identity(self.learning_rate),
            'num_env_frames': tf.identity(self.num_env_frames),
            'num_updates': tf.identity(self.num_updates),
            'num_skipped_steps': tf.identity(self.num_skipped_steps),
            'skipped': skipped}

  @snt.no_name_scope
  def _write_summaries(self, metrics, batch, prefix):
    """Writes scalars and action histograms to the default summary writer,
    stepped by env frames like every other summary of a run (the update
    count is the `num_updates` scalar)."""
    step = self.num_env_frames
    for name, value in metrics.items():
      if name != 'skipped':
        tf.summary.scalar(prefix + name, value, step=step)
    if not prefix:
      for name, action in batch.agent_outputs.action.items():
        tf.summary.histogram(f'action/{name}', action[1:], step=step)
