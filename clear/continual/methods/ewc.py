"""EWC and online EWC as methods (the maths: `clear.continual.ewc`).

At the end of each period the method estimates the diagonal Fisher of the
learner's policy-gradient plus baseline loss from `ewc_fisher_batches`
batches drawn from the period's latest `ewc_fisher_frames` frames of fresh
unrolls (kept here, and beside each checkpoint), and makes the weights an
anchor; every update then adds lambda / 2 * sum F (theta - anchor)^2
(`loss/ewc`).

  ewc, given boundaries: one anchor and Fisher per task; a revisit of a
    task replaces its own.
  ewc, hidden boundaries: each period adds an anchor (there is no task to
    replace), folded into the one merged quadratic the penalty reads.
  online_ewc: one anchor, the latest, and a running Fisher
    F <- gamma F + F_new, the same under both.

Defaults: 100 Fisher batches of `batch_size` unrolls and gamma 0.99, as
CORA (Powers et al. 2022) used; the Fisher drawn from the period's last
100,000 frames; lambda 1 (docs/continual.md#methods-built-for-forgetting
says why).
"""

import logging
import math
import time
from typing import List

import tensorflow as tf

from clear.continual import ewc
from clear.continual.methods import base
from clear.replay import buffer as replay_lib

SETTINGS = (
    base.Setting('ewc_lambda', 1.0,
                 'lambda, the weight of the EWC penalty.'),
    base.Setting('ewc_gamma', 0.99,
                 'online_ewc (and pnc): the running Fisher becomes gamma F + '
                 "the new period's at each consolidation (in (0, 1])."),
    base.Setting('ewc_fisher_batches', 100,
                 'Batches of --batch_size unrolls of the period that ended '
                 'its Fisher is the mean squared gradient over.'),
    base.Setting('ewc_fisher_frames', 100_000,
                 "Frames of the current period's latest unrolls kept (in "
                 'memory, and beside each checkpoint) to draw those batches '
                 'from.'),
)
EwcSettings = base.settings_class('EwcSettings', SETTINGS)


def problems(settings) -> List[str]:
  """What is wrong with EWC settings, each naming its flag."""
  found = []
  if not (math.isfinite(settings.ewc_lambda) and settings.ewc_lambda >= 0):
    found.append('--ewc_lambda must be a finite number >= 0 (got '
                 f'{settings.ewc_lambda}).')
  if not 0 < settings.ewc_gamma <= 1:
    found.append(f'--ewc_gamma must be in (0, 1] (got {settings.ewc_gamma}).')
  for name in ('ewc_fisher_batches', 'ewc_fisher_frames'):
    if getattr(settings, name) < 1:
      found.append(f'--{name} must be >= 1 (got {getattr(settings, name)}).')
  return found


class KeptUnrolls:
  """The fresh unrolls of the current period a Fisher is drawn from: a
  FIFO of `ewc_fisher_frames` frames, emptied at each consolidation.

  Args:
    settings: with `ewc_fisher_frames`.
    learner_config: with `unroll_length`, `fixed_step_mul`, `step_mul`.
    context: the method's `base.Context` (seed, stacked frames).
  """

  NAME = 'ewc_fisher'  # Its folder beside each checkpoint.

  def __init__(self, settings, learner_config, context: base.Context):
    self._capacity = ewc.fisher_buffer_unrolls(
        settings.ewc_fisher_frames, learner_config.unroll_length,
        learner_config.step_mul if learner_config.fixed_step_mul else 1)
    self._context = context
    self.buffer = self._new(0)

  def _new(self, period: int) -> replay_lib.ReplayBuffer:
    return replay_lib.ReplayBuffer(
        self._capacity, 'fifo',
        seed=self._context.seed + 7_907 * (period + 1),
        stacked_observations=self._context.stacked_frames)

  def observe(self, unrolls):
    for unroll in unrolls:
      self.buffer.insert(unroll)

  def batches(self, batch_size: int, count: int):
    """`count` `[T + 1, B]` batches of `batch_size` kept unrolls (a
    generator: each is drawn when asked)."""
    return (replay_lib.swap_time_and_batch(self.buffer.sample(batch_size))
            for _ in range(count))

  def fisher_stats(self, estimate, batch_size: int, count: int, who: str,
                   what: str, if_none_kept: str):
    """Estimates a Fisher from the kept unrolls and logs it.

    Args:
      estimate: called with `count` batches of `batch_size` kept unrolls
        (`batches`); returns its `ewc.FisherSummary`.
      batch_size, count: as `batches`.
      who: the method's name, for the log.
      what: what ended (`clock.Period.ended()`), for the log.
      if_none_kept: what follows when no unroll is kept, for the warning.

    Returns:
      {'fisher_mean', 'fisher_max', 'fisher_batches'}, or {} when no unroll
      is kept (`estimate` is then not called).
    """
    if not len(self.buffer):
      logging.warning('%s: %s with none of its unrolls kept (a resume with '
                      'an empty buffer?): %s.', who, what, if_none_kept)
      return {}
    start = time.monotonic()
    summary = estimate(self.batches(batch_size, count))
    logging.info(
        '%s: %s: Fisher from %d batches of %d unrolls drawn from its last '
        '%d, mean %.3g, max %.3g (%.1f s).', who, what, summary.num_batches,
        batch_size, len(self.buffer), summary.mean, summary.max,
        time.monotonic() - start)
    return {'fisher_mean': summary.mean, 'fisher_max': summary.max,
            'fisher_batches': summary.num_batches}

  def restart(self, period: int):
    """Empties the FIFO for period `period` (reseeding its sampling)."""
    self.buffer = self._new(period)


class Ewc(base.Method):
  """EWC (see the module docstring)."""

  NAME = 'ewc'
  SETTINGS = SETTINGS
  IDENTITY = ('ewc_fisher_frames',)
  RECORDED = ('ewc_lambda', 'ewc_gamma', 'ewc_fisher_batches')
  Settings = EwcSettings
  ONLINE = False

  @classmethod
  def problems(cls, settings):
    return problems(settings)

  def attach(self, learner):
    self._learner = learner
    variables = learner.agent.trainable_variables
    # Under hidden boundaries EWC has no task to give each anchor a slot.
    hidden = self.context.clock.boundaries == 'hidden'
    self.state = ewc.EwcState(
        variables, 1 if hidden else self.context.num_tasks,
        online=self.ONLINE)
    self.kept = KeptUnrolls(self.settings, learner.config, self.context)
    self._gradients = tf.function(self._fisher_gradients, autograph=False,
                                  jit_compile=learner.config.jit_compile)

  def loss_terms(self):
    return {'ewc': self.state.penalty(self._learner.agent.trainable_variables,
                                      self.settings.ewc_lambda)}

  def _fisher_gradients(self, batch):
    """Gradients of the learner's policy-gradient plus baseline loss on a
    batch of fresh unrolls: one term of the Fisher."""
    variables = self._learner.agent.trainable_variables
    with tf.GradientTape() as tape:
      loss = self._learner.policy_and_baseline_loss(batch)
    grads = tape.gradient(loss, variables)
    return [tf.zeros_like(v) if g is None else g
            for g, v in zip(grads, variables)]

  def observe(self, unrolls):
    self.kept.observe(unrolls)

  def checkpointables(self):
    return {'continual': self.state}

  def replay_buffers(self):
    return {KeptUnrolls.NAME: self.kept.buffer}

  def consolidate(self, ended):
    state = self.state
    if base.consolidated(state.num_boundaries, ended):
      return {}
    start = time.monotonic()

    def estimate(batches):
      diagonal, summary = ewc.fisher_from_batches(self._gradients,
                                                   batches)
      self._record(ended, diagonal)
      return summary

    stats = self.kept.fisher_stats(
        estimate, self._learner.config.batch_size,
        self.settings.ewc_fisher_batches, self.NAME, ended.ended(),
        'it gets no anchor')
    base.mark_consolidated(state.num_boundaries, ended)
    self.kept.restart(ended.index + 1)
    if ended.task is not None:  # Under hidden boundaries, every period.
      stats['num_anchors'] = state.num_anchors
    stats['seconds'] = time.monotonic() - start
    return stats

  def _record(self, ended, diagonal):
    """Makes the weights an anchor with Fisher `diagonal`."""
    values = self._learner.agent.trainable_variables
    if ended.task is None:
      self.state.accumulate(values, diagonal)
    else:
      self.state.consolidate(ended.task, values, diagonal)


class OnlineEwc(Ewc):
  """Online EWC (see the module docstring)."""

  NAME = 'online_ewc'
  ONLINE = True

  def _record(self, ended, diagonal):
    self.state.consolidate(0, self._learner.agent.trainable_variables,
                           diagonal, self.settings.ewc_gamma)
