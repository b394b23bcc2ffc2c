"""The Progress & Compress policy: IMPALA with two columns
(`clear.continual.pnc`).

`PncPolicy` is what `registry.make_policy('impala', ...)` builds for
`continual_method='pnc'` (the learner's) and for the actors' copies
(`AgentConfig.pnc_columns`). It shares `ImpalaPolicy`'s plumbing (acting,
critic pretraining, counters, the kept unrolls of the current task) over an
`agents.pnc.PncAgent`:

  - acting: the active column samples, in both phases (actors receive both
    columns and the adaptors as one flat weight list);
  - `learn`: the progress or the compress update, by the phase of the frames
    trained so far (`clear.continual.pnc.phase_at`); a phase change is
    logged and written as the scalar `continual/pnc_phase` (0 progress, 1
    compress);
  - `end_task`: the finished task's Fisher of the knowledge base joins its
    running one and its weights become the anchor (online EWC), then the
    active column is re-initialised for the next task (unless
    `pnc_reset_active_column` is off);
  - evaluation, test mode and recordings play the knowledge base alone:
    checkpoints keep it under 'agent', where a plain IMPALA agent of the
    same network reads it, and `evaluation_weights` are its weights.

Its settings are `clear.algorithms.impala.config.LearnerConfig` fields:
`pnc_progress_fraction`, the share of each visit of a task in the progress
phase (default 0.5, half and half as CORA ran it; the rest compresses);
`pnc_reset_active_column`, whether each task switch re-draws the active
column and its adaptors (default True; CORA re-draws the column's layers and
keeps its adaptors; its optimizer's moments are kept, as CORA keeps them);
`pnc_frames_per_task`, the frames of a visit (the run loop sets it from the
task sequence). The compress phases' penalty takes the online-EWC fields
(`ewc_lambda`, `ewc_gamma`, `ewc_fisher_batches`, `ewc_fisher_frames`).
"""

import logging
import time

import tensorflow as tf

from agents import pnc as pnc_agents
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import policy as impala_policy
from clear.algorithms.pnc import learner as pnc_learner
from clear.continual import pnc
from clear.replay import buffer as replay_lib


def make_agent(spec, agent_config: policy_lib.AgentConfig,
               seed: int) -> pnc_agents.PncAgent:
  """The two-column agent of `agent_config`'s network."""
  return pnc_agents.make_pnc_agent(
      spec, seed=seed, network=agent_config.network,
      core_size=agent_config.core_size,
      separate_critic=agent_config.separate_critic, core=agent_config.core,
      torso_norm=agent_config.torso_norm)


class PncPolicy(impala_policy.ImpalaPolicy):
  """Progress & Compress over a `PncAgent` (see the module docstring).

  Args:
    spec: the environment spec.
    agent_config: `AgentConfig` of each column.
    learner_config: a `LearnerConfig` with continual_method 'pnc', or None
      for an acting-only copy.
    seed: seeds the knowledge base as `ImpalaPolicy` seeds its agent, the
      active column and adaptors from it (`agents.pnc.active_column_seed`),
      and sampling.
  """

  def __init__(self, spec, agent_config: policy_lib.AgentConfig,
               learner_config=None, seed: int = 0):
    # pylint: disable-next=non-parent-init-called
    policy_lib.Policy.__init__(self, spec)
    self._agent_config = agent_config
    self.agent = make_agent(spec, agent_config, seed)
    self._step = tf.function(self.agent.step, autograph=False)
    self._acting_steps = {}  # Batch size -> `_step`'s concrete function.
    self.learner = None
    self.fisher_buffer = None  # The task's unrolls for the KB's Fisher.
    self._seed = seed
    self._phase = None  # The phase of the last update, for the log.
    if learner_config is not None:
      self.learner = pnc_learner.PncLearner(self.agent, learner_config)
      self.fisher_buffer = self._new_fisher_buffer(0)

  def acting_variables(self):
    return (self.agent.knowledge_base_variables +
            self.agent.active_variables)

  def reseed_sampling(self, seed: int):
    # `make_agent` seeds the sampling generator as the first active column.
    self.agent.rng.reset_from_seed(pnc_agents.active_column_seed(seed, 0))

  def evaluation_weights(self):
    """The knowledge base's weights, in a plain agent's order."""
    return [v.numpy() for v in self.agent.knowledge_base_variables]

  def _scope_variables(self, scope):
    # --init_from loads the knowledge base (from a plain agent or another
    # P&C run's knowledge base).
    kb = self.agent.knowledge_base
    return {'all': kb.trainable_variables,
            'critic': kb.critic_variables,
            'policy': kb.policy_variables}[scope]

  def _weight_checkpointables(self):
    return {'agent': self.agent.knowledge_base}

  def acting_checkpointables(self):
    return {'agent': self.agent.knowledge_base, 'pnc_agent': self.agent}

  def checkpointables(self):
    learner = self.learner
    return {'agent': self.agent.knowledge_base, 'pnc_agent': self.agent,
            'optimizer': learner.optimizer,
            'critic_optimizer': learner.critic_optimizer,
            'pnc_knowledge_base_optimizer': learner.knowledge_base_optimizer,
            'continual': learner.knowledge_base_ewc,
            'learning_rate': learner.learning_rate,
            'num_env_frames': learner.num_env_frames,
            # The update count's name in checkpoints.
            'num_steps': learner.num_updates,
            'num_skipped_steps': learner.num_skipped_steps}

  def learn(self, batch):
    frames = self.num_env_frames
    phase = self.learner.phase_at(frames)
    if phase != self._phase:
      lc = self.learner.config
      logging.info('pnc: %s phase from %s frames (%s frames into the visit '
                   'of %s).', pnc.PHASES[phase], f'{frames:,}',
                   f'{frames % lc.pnc_frames_per_task:,}',
                   f'{lc.pnc_frames_per_task:,}')
      tf.summary.scalar('continual/pnc_phase', phase, step=frames)
      self._phase = phase
    if phase == pnc.PROGRESS:
      return policy_lib.to_numpy(self.learner.step(batch))
    return policy_lib.to_numpy(self.learner.compress_step(batch))

  def end_task(self, segment, task, task_name):
    """The task switch: the knowledge base's Fisher from
    `ewc_fisher_batches` batches of the finished visit's kept unrolls
    (online EWC: merged into the running Fisher, the weights the anchor),
    then a fresh active column for the next task; the kept unrolls make
    way for the next task's."""
    del task  # Online EWC keeps one anchor for all tasks.
    if self.learner is None:
      return {}
    state = self.learner.knowledge_base_ewc
    if int(state.num_boundaries.numpy()) >= segment:
      return {}
    lc = self.learner.config
    start = time.monotonic()
    buffer = self.fisher_buffer
    stats = {}
    if len(buffer):
      batches = (replay_lib.swap_time_and_batch(buffer.sample(lc.batch_size))
                 for _ in range(lc.ewc_fisher_batches))
      summary = self.learner.consolidate_knowledge_base(batches)
      stats = {'fisher_mean': summary.mean, 'fisher_max': summary.max,
               'fisher_batches': summary.num_batches}
      logging.info(
          'pnc: task %s ended (segment %d): knowledge base Fisher from %d '
          'batches of %d unrolls drawn from its last %d, mean %.3g, max '
          '%.3g.', task_name, segment - 1, summary.num_batches,
          lc.batch_size, len(buffer), summary.mean, summary.max)
    else:
      logging.warning('pnc: task %s ended (segment %d) with none of its '
                      'unrolls kept (a resume with an empty buffer?): the '
                      "knowledge base's Fisher and anchor stay as they were.",
                      task_name, segment - 1)
    if lc.pnc_reset_active_column:
      self.agent.reset_active_column(
          pnc_agents.active_column_seed(self._seed, segment))
      logging.info('pnc: active column re-initialised for segment %d '
                   '(%.1f s with the Fisher).', segment,
                   time.monotonic() - start)
    state.num_boundaries.assign(segment)
    self.fisher_buffer = self._new_fisher_buffer(segment)
    stats.update(active_column_reset=float(lc.pnc_reset_active_column),
                 seconds=time.monotonic() - start)
    return stats

