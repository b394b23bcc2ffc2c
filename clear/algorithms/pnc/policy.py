"""The Progress & Compress policy: IMPALA with two columns
(`clear.continual.pnc`).

`PncPolicy` is the policy of the method `clear.continual.methods.pnc`
(`continual_method='pnc'`), and the actors' copy of it
(`AgentConfig.pnc_columns`). It shares `ImpalaPolicy`'s plumbing (acting,
critic pretraining, counters, the method's hooks) over an
`agents.pnc.PncAgent`:

  - acting: the active column samples, in both phases (actors receive both
    columns and the adaptors as one flat weight list);
  - `learn`: the progress or the compress update, by the phase of the
    frames trained so far in the method's current period
    (`clear.continual.pnc.phase_at`); a phase change is logged and written
    as the scalar `continual/pnc_phase` (0 progress, 1 compress);
  - evaluation, test mode and recordings play the knowledge base alone:
    checkpoints keep it under 'agent', where a plain IMPALA agent of the
    same network reads it, and `evaluation_weights` are its weights.
"""

import logging

import tensorflow as tf

from agents import pnc as pnc_agents
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import policy as impala_policy
from clear.algorithms.pnc import learner as pnc_learner
from clear.continual import pnc


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
    learner_config: a `LearnerConfig`, or None for an acting-only copy.
    seed: seeds the knowledge base as `ImpalaPolicy` seeds its agent, the
      active column and adaptors from it (`agents.pnc.active_column_seed`),
      and sampling.
    method: the `clear.continual.methods.pnc.Pnc` method (needed with a
      learner config).
  """

  def __init__(self, spec, agent_config: policy_lib.AgentConfig,
               learner_config=None, seed: int = 0, method=None):
    # pylint: disable-next=non-parent-init-called
    policy_lib.Policy.__init__(self, spec)
    self._agent_config = agent_config
    self.agent = make_agent(spec, agent_config, seed)
    self._step = tf.function(self.agent.step, autograph=False)
    self._acting_steps = {}  # Batch size -> `_step`'s concrete function.
    self.learner = None
    self.method = None
    self._phase = None  # The phase of the last update, for the log.
    if learner_config is not None:
      if method is None:
        raise ValueError('PncPolicy: a learner needs the pnc method.')
      self.method = method
      self.learner = pnc_learner.PncLearner(self.agent, learner_config,
                                            method)

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
            **self.method.checkpointables(),
            'learning_rate': learner.learning_rate,
            'num_env_frames': learner.num_env_frames,
            # The update count's name in checkpoints.
            'num_steps': learner.num_updates,
            'num_skipped_steps': learner.num_skipped_steps}

  def learn(self, batch):
    frames = self.num_env_frames
    phase = self.learner.phase_at(frames)
    if phase != self._phase:
      period = self.method.context.clock.period_at(frames)
      logging.info('pnc: %s phase from %s frames (%s frames into the period '
                   'of %s).', pnc.PHASES[phase], f'{frames:,}',
                   f'{frames - period.start:,}', f'{period.length:,}')
      tf.summary.scalar('continual/pnc_phase', phase, step=frames)
      self._phase = phase
    if phase == pnc.PROGRESS:
      return policy_lib.to_numpy(self.learner.step(batch))
    return policy_lib.to_numpy(self.learner.compress_step(batch))
