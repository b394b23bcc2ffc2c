"""The Progress & Compress learner: progress and compress updates, and the
knowledge base's online EWC.

`PncLearner` is the IMPALA-CLEAR learner (`clear.algorithms.impala.learner`)
over the active column of an `agents.pnc.PncAgent`: its `step` is the
progress update, the IMPALA-CLEAR loss of the active column (with its
laterals), applied to the active column's and its adaptors' variables only.
`compress_step` is the compress update: the distillation KL from the active
column to the knowledge base (`clear.continual.pnc.distillation_loss`, on the
fresh columns of the batch: the states the active column visited) plus
online EWC on the knowledge base's weights (`loss/ewc`), applied to the
knowledge base only, by its own optimizer (`knowledge_base_optimizer`; the
same learning-rate schedule). Both count frames and updates on the same
counters.

The phases follow the periods of the method's clock
(`clear.continual.methods.pnc`). `consolidate_knowledge_base` ends a
period: the knowledge base's diagonal Fisher from batches of the period's
last unrolls joins the running one (F <- gamma F + F_new) and its weights
become the anchor. The Fisher is the
mean squared gradient of the knowledge base's V-trace policy-gradient loss
on those unrolls: the knowledge base the target policy, the recorded active
column the behaviour, and the active column's critic (trained on the task)
the values. The knowledge base's own baseline head is never trained
(compress distils the policy alone): its values would weight each step by a
random head's errors, and its loss (which EWC adds, as CORA does) would
mark the shared layers as important in proportion to them; both are left
out, so that head gets no Fisher.
"""

import tensorflow as tf
import tree
import sonnet as snt

from agents import pnc as pnc_agents
from clear import types
from clear.algorithms.impala import config as config_lib
from clear.algorithms.impala import learner as learner_lib
from clear.algorithms.impala import optimizers
from clear.continual import ewc
from clear.continual import pnc
from clear.ops import guards
from clear.ops import losses

# pylint: disable=protected-access
# The IMPALA-CLEAR learner's update plumbing (`_update`, `_prepare`,
# `_discrete_heads`) serves both phases.


def fresh_columns(batch: types.Unroll, num_replay: int) -> types.Unroll:
  """The batch without its first `num_replay` (replayed) columns."""
  if not num_replay:
    return batch
  return types.Unroll(
      agent_state=tree.map_structure(lambda x: x[num_replay:],
                                     batch.agent_state),
      env_outputs=tree.map_structure(lambda x: x[:, num_replay:],
                                     batch.env_outputs),
      agent_outputs=tree.map_structure(lambda x: x[:, num_replay:],
                                       batch.agent_outputs))


class _ActiveColumn(snt.Module):
  """The active column as `ImpalaClearLearner` sees an agent: its unroll
  (the knowledge base feeding the laterals) and its own variables."""

  def __init__(self, agent: pnc_agents.PncAgent):
    super().__init__(name='active_column')
    self._pnc = agent

  def unroll(self, prev_actions, env_outputs, state):
    return self._pnc.unroll(prev_actions, env_outputs, state)

  @property
  def trainable_variables(self):
    return self._pnc.active_variables

  @property
  def critic_variables(self):
    return self._pnc.active_critic_variables

  @property
  def policy_variables(self):
    critic = {v.ref() for v in self.critic_variables}
    return tuple(v for v in self.trainable_variables
                 if v.ref() not in critic)


class PncLearner(learner_lib.ImpalaClearLearner):
  """Progress & Compress over a `PncAgent` (see the module docstring).

  Attributes (besides `ImpalaClearLearner`'s, whose `agent` is a view of the
  active column and whose `optimizer` trains it):
    pnc_agent: the `PncAgent`.
    knowledge_base_optimizer: trains the knowledge base (compress phases).
    knowledge_base_ewc: `ewc.EwcState` (online) over the knowledge base's
      trainable variables; its `num_boundaries` counts the task switches
      consolidated.
  """

  def __init__(self, agent: pnc_agents.PncAgent,
               config: config_lib.LearnerConfig, method, name: str = 'pnc'):
    config_lib.validate_config(config)
    problems = method.problems(method.settings)
    if problems:
      raise ValueError('PncLearner: ' + ' '.join(problems))
    # The active column's learner is plain IMPALA-CLEAR.
    super().__init__(_ActiveColumn(agent), config, name=name)
    self.pnc_method = method
    self.settings = method.settings
    self.pnc_agent = agent
    self.knowledge_base_optimizer = optimizers.make_optimizer(
        config, self.learning_rate)
    self.knowledge_base_ewc = ewc.EwcState(
        agent.knowledge_base_variables, 1, online=True,
        name='knowledge_base_ewc')
    self._compress_grads_fn = tf.function(self._compress_loss_and_grads,
                                          autograph=False,
                                          jit_compile=config.jit_compile)
    self._compress_step_fn = tf.function(self._compress_step,
                                         autograph=False)
    self._kb_fisher_grads_fn = tf.function(self._knowledge_base_fisher_grads,
                                           autograph=False,
                                           jit_compile=config.jit_compile)
    method.attach(self)

  # --- Entry points ----------------------------------------------------------

  def phase_at(self, frames: int) -> int:
    """`clear.continual.pnc.phase_at` in the method's period at
    `frames`."""
    return pnc.phase_at(frames,
                        self.pnc_method.context.clock.period_at(frames),
                        self.settings.pnc_progress_fraction)

  @snt.no_name_scope
  def compress_step(self, batch: types.Unroll):
    """One compress update of the knowledge base on a batch of `[T + 1, B]`
    unrolls (the fresh columns are distilled on).

    Returns:
      Dict of scalar metric tensors (`loss/total`, `loss/distillation`,
      `loss/ewc`, grad norm, counters, `skipped`).
    """
    self._create_knowledge_base_slots()
    return self._compress_step_fn(batch)

  def create_slots(self, critic: bool = False):
    """Makes both columns' optimizer slots (and the critic optimizer's,
    with `critic`) now, without tracing (see `ImpalaClearLearner`)."""
    super().create_slots(critic)
    self._create_knowledge_base_slots()

  @snt.no_name_scope
  def trace(self, signature, critic: bool = False):
    """Builds the graphs of both phases' updates (and of `critic_step`)."""
    super().trace(signature, critic=critic)  # Calls `create_slots`.
    self._compress_step_fn.get_concrete_function(signature)

  def _create_knowledge_base_slots(self):
    optimizers.create_slots(self.knowledge_base_optimizer,
                            lambda: self.pnc_agent.knowledge_base_variables,
                            self._compress_step_fn)

  def consolidate_knowledge_base(self, batches) -> ewc.FisherSummary:
    """Ends a task: the knowledge base's Fisher from `batches` (an iterable
    of `[T + 1, B]` `Unroll` batches of the task's fresh unrolls) merged
    into the running one (decay `ewc_gamma`), its weights the anchor.

    Returns:
      `ewc.FisherSummary` of the new task's Fisher.
    """
    fisher, summary = ewc.fisher_from_batches(self._kb_fisher_grads_fn,
                                              batches)
    self.knowledge_base_ewc.consolidate(
        0, self.pnc_agent.knowledge_base_variables, fisher,
        self.settings.ewc_gamma)
    return summary

  # --- Compress ------------------------------------------------------------

  def _compress_loss_and_grads(self, batch: types.Unroll):
    fresh = fresh_columns(batch, self.config.num_replay)
    variables = self.pnc_agent.knowledge_base_variables
    with tf.GradientTape() as tape:
      outputs, _ = self.pnc_agent.unroll_both(fresh.agent_outputs.action,
                                              fresh.env_outputs,
                                              fresh.agent_state)
      # Row t holds both columns at env_outputs[t]; the last row repeats as
      # the next unroll's first, so it is left out, as in the RL loss.
      distillation = pnc.distillation_loss(
          {k: v[:-1] for k, v in outputs.knowledge_base.logits.items()},
          {k: v[:-1] for k, v in outputs.active.logits.items()})
      penalty = self.knowledge_base_ewc.penalty(variables,
                                                self.settings.ewc_lambda)
      loss = distillation.total + penalty
    grads, grad_norm = guards.clipped_gradients(
        tape, loss, variables, self.config.clip_grad_norm)
    steps = tf.cast(tf.size(distillation.per_step), tf.float32)
    return grads, {
        'loss/total': loss,
        'loss/distillation': distillation.total,
        'loss/ewc': penalty,
        'grad_norm': grad_norm,
        # Mean KL(active column || knowledge base) per step.
        'policy/distillation_kl': distillation.total / steps,
    }

  @snt.no_name_scope
  def _compress_step(self, batch: types.Unroll):
    """`compress_step`'s graph."""
    return self._update(batch, self._compress_grads_fn,
                        self.knowledge_base_optimizer,
                        lambda: self.pnc_agent.knowledge_base_variables,
                        'loss/total', prefix='')

  # --- The knowledge base's Fisher -----------------------------------------

  def _knowledge_base_fisher_grads(self, batch: types.Unroll):
    """Gradients of the knowledge base's V-trace policy-gradient loss on a
    batch of fresh unrolls (the knowledge base the target policy, the
    recorded active column the behaviour, the active column's critic the
    values): one term of its Fisher."""
    kb = self.pnc_agent.knowledge_base
    variables = kb.trainable_variables
    with tf.GradientTape() as tape:
      # The active column's re-unroll: rewards, discounts and its values,
      # prepared as for its own updates; the knowledge base's policy.
      aligned, rewards, discounts = self._prepare(batch)
      outputs, _ = kb.unroll(batch.agent_outputs.action, batch.env_outputs,
                             batch.agent_state[pnc_agents.KNOWLEDGE_BASE])
      aligned = aligned._replace(target=aligned.target._replace(
          logits=learner_lib.align(outputs, batch).target.logits))
      target_logits, behaviour_logits, actions = (
          learner_lib._discrete_heads(aligned))
      _, extra = losses.impala_clear_loss(
          target_logits=target_logits, behaviour_logits=behaviour_logits,
          actions=actions, values=tf.stop_gradient(aligned.target.baseline),
          bootstrap_value=tf.stop_gradient(aligned.bootstrap_value),
          behaviour_values=aligned.behaviour.baseline, rewards=rewards,
          discounts=discounts, num_replay=0, baseline_cost=0.0,
          entropy_cost=0.0, policy_cloning_cost=0.0, value_cloning_cost=0.0,
          clip_advantage=self.config.clip_advantage)
    grads = tape.gradient(extra.policy_gradient, variables)
    return [tf.zeros_like(v) if g is None else g
            for g, v in zip(grads, variables)]
