"""L2: a quadratic penalty toward the weights at the last consolidation.

Continual World's L2 baseline (Wolczyk et al. 2021): at the end of each
period the weights become the anchor theta*, and every update adds

  penalty = lambda / 2 * sum_i (theta_i - theta*_i)^2        (`loss/l2`)

with the same weight for every parameter, where EWC weighs each by its
Fisher. Before the first consolidation there is no anchor and the penalty
is 0. The gradient with respect to theta_i is lambda * (theta_i - theta*_i).

The default lambda, 0.01, spreads evenly the total weight EWC's default
penalty puts on one anchor (docs/continual.md#methods-built-for-forgetting).
"""

import logging
import math
from typing import List, Sequence

import tensorflow as tf

from clear.continual.methods import base

SETTINGS = (
    base.Setting('l2_lambda', 0.01,
                 'l2: lambda, the weight of the penalty lambda/2 sum '
                 '(theta - anchor)^2 toward the weights at the last '
                 'consolidation.'),
)
L2Settings = base.settings_class('L2Settings', SETTINGS)


def l2_penalty(variables: Sequence[tf.Tensor], anchor: Sequence[tf.Tensor],
               lam) -> tf.Tensor:
  """lambda / 2 * sum_i (theta_i - theta*_i)^2 over N variables.

  Args:
    variables: N float tensors (or variables), theta.
    anchor: N tensors shaped like them, theta* (no gradient reaches them).
    lam: lambda, python float or float32 scalar.

  Returns:
    float32 scalar.

  Raises:
    ValueError: lists that differ in length or shapes.
  """
  if len(variables) != len(anchor) or not variables:
    raise ValueError('l2_penalty: needs one anchor tensor per variable, at '
                     f'least one; got {len(variables)} and {len(anchor)}.')
  terms = []
  for i, (v, a) in enumerate(zip(variables, anchor)):
    v = tf.convert_to_tensor(v)
    a = tf.stop_gradient(tf.convert_to_tensor(a))
    if not v.shape.is_compatible_with(a.shape):
      raise ValueError(f'l2_penalty: anchor[{i}] has shape {a.shape}, '
                       f'expected {v.shape}.')
    terms.append(tf.reduce_sum(tf.square(v - a)))
  return tf.cast(lam, terms[0].dtype) / 2.0 * tf.add_n(terms)


class L2State(tf.Module):
  """The anchor, whether it is set, and the periods consolidated."""

  def __init__(self, variables: Sequence[tf.Variable], name: str = 'l2'):
    super().__init__(name=name)
    self.anchor = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                               name=f'anchor_{i}')
                   for i, v in enumerate(variables)]
    self.weight = tf.Variable(0.0, trainable=False, name='weight')
    self.num_boundaries = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name='num_boundaries')


class L2(base.Method):
  """L2 toward the last anchor (see the module docstring)."""

  NAME = 'l2'
  SETTINGS = SETTINGS
  RECORDED = ('l2_lambda',)
  Settings = L2Settings

  @classmethod
  def problems(cls, settings) -> List[str]:
    if not (math.isfinite(settings.l2_lambda) and settings.l2_lambda >= 0):
      return ['--l2_lambda must be a finite number >= 0 (got '
              f'{settings.l2_lambda}).']
    return []

  def attach(self, learner):
    self._variables = lambda: learner.agent.trainable_variables
    self.state = L2State(learner.agent.trainable_variables)

  def loss_terms(self):
    # `weight` is 0 until the first anchor is set.
    return {'l2': self.state.weight * l2_penalty(
        self._variables(), self.state.anchor, self.settings.l2_lambda)}

  def checkpointables(self):
    return {'continual': self.state}

  def consolidate(self, ended):
    if base.consolidated(self.state.num_boundaries, ended):
      return {}
    for anchor, value in zip(self.state.anchor, self._variables()):
      anchor.assign(value)
    self.state.weight.assign(1.0)
    base.mark_consolidated(self.state.num_boundaries, ended)
    norm = float(tf.linalg.global_norm(self.state.anchor))
    logging.info('l2: %s: the weights are the anchor (norm %.4g).',
                 ended.ended(), norm)
    return {'anchor_norm': norm}
