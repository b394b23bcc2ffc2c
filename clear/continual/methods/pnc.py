"""Progress & Compress as a method (`clear.continual.pnc` for its maths).

P&C brings its own policy (`clear.algorithms.pnc.policy.PncPolicy`): two
columns, whose active column acts in training and whose knowledge base
plays in evaluation; its learner alternates the progress and the compress
updates by the phase of the current period of the method's clock
(`clear.continual.pnc.phase_at`): under given boundaries each visit of a
task, under hidden ones every `--consolidation_interval_frames`, as the
P&C paper proposes for the task-agnostic case.

At the end of each period the method merges the knowledge base's Fisher,
from the period's kept unrolls, into its running one and makes its weights
the anchor (online EWC, with the `ewc_*` settings), then re-initialises the
active column for the next period (unless `pnc_reset_active_column` is
off).

Defaults: `pnc_progress_fraction` 0.5, half of each period in progress and
half in compress, as CORA ran it (the paper gives no split); the active
column re-drawn at each switch, as CORA re-draws its layers (keeping their
optimizer's moments, as CORA keeps them).
"""

import logging
import time
from typing import List

from agents import pnc as pnc_agents
from clear.algorithms.pnc import policy as pnc_policy
from clear.continual.methods import base
from clear.continual.methods import ewc as ewc_method

SETTINGS = ewc_method.SETTINGS + (
    base.Setting('pnc_progress_fraction', 0.5,
                 'pnc: the share of each period (a visit of a task, or the '
                 'consolidation interval) in the progress phase, the rest '
                 'compresses (in (0, 1); half and half as in Progress & '
                 'Compress).'),
    base.Setting('pnc_reset_active_column', True,
                 'pnc: re-initialise the active column (and its lateral '
                 'adaptors) at the end of each period.'),
)
PncSettings = base.settings_class('PncSettings', SETTINGS)


class Pnc(base.Method):
  """Progress & Compress (see the module docstring)."""

  NAME = 'pnc'
  SETTINGS = SETTINGS
  IDENTITY = ('ewc_fisher_frames', 'pnc_progress_fraction',
              'pnc_reset_active_column')
  RECORDED = ewc_method.Ewc.RECORDED
  Settings = PncSettings

  @classmethod
  def problems(cls, settings) -> List[str]:
    found = ewc_method.problems(settings)
    if not 0 < settings.pnc_progress_fraction < 1:
      found.append('--pnc_progress_fraction must be in (0, 1) (got '
                   f'{settings.pnc_progress_fraction}).')
    return found

  @classmethod
  def agent_problems(cls, agent_config) -> List[str]:
    if agent_config.separate_critic:
      return ['--continual_method=pnc needs --noseparate_critic: its '
              'columns share their torso and core with the baseline.']
    return []

  @classmethod
  def actor_agent_config(cls, agent_config):
    return agent_config._replace(pnc_columns=True)  # The active column acts.

  @classmethod
  def policy_class(cls, default):
    del default
    return pnc_policy.PncPolicy

  def attach(self, learner):
    """`learner` is the policy's `clear.algorithms.pnc.learner.PncLearner`,
    which holds the knowledge base's online EWC state."""
    self._learner = learner
    self.kept = ewc_method.KeptUnrolls(self.settings, learner.config,
                                       self.context)

  def observe(self, unrolls):
    self.kept.observe(unrolls)

  def checkpointables(self):
    return {'continual': self._learner.knowledge_base_ewc}

  def replay_buffers(self):
    return {ewc_method.KeptUnrolls.NAME: self.kept.buffer}

  def consolidate(self, ended):
    learner, settings = self._learner, self.settings
    state = learner.knowledge_base_ewc
    if base.consolidated(state.num_boundaries, ended):
      return {}
    start = time.monotonic()
    following = ended.index + 1
    stats = self.kept.fisher_stats(
        learner.consolidate_knowledge_base, learner.config.batch_size,
        settings.ewc_fisher_batches, 'pnc: knowledge base', ended.ended(),
        "the knowledge base's Fisher and anchor stay as they were")
    if settings.pnc_reset_active_column:
      learner.pnc_agent.reset_active_column(
          pnc_agents.active_column_seed(self.context.seed, following))
      logging.info('pnc: active column re-initialised for period %d '
                   '(%.1f s with the Fisher).', following,
                   time.monotonic() - start)
    base.mark_consolidated(state.num_boundaries, ended)
    self.kept.restart(following)
    stats.update(active_column_reset=float(settings.pnc_reset_active_column),
                 seconds=time.monotonic() - start)
    return stats
