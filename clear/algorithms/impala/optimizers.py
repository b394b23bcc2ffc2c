"""The IMPALA-CLEAR learner's optimizers: Adam, or RMSProp as IMPALA ran it.

`make_optimizer` builds the one a `LearnerConfig` names. `RMSProp` is
Sonnet's with the mean squares starting where TF1's did; `create_slots`
makes an optimizer's slots before its update graph is traced.
"""

from typing import Sequence

import sonnet as snt
import tensorflow as tf

from clear.algorithms.impala import config as config_lib


class RMSProp(snt.optimizers.RMSProp):
  """Sonnet's RMSProp with the mean squares starting at `initial_mean_square`.

  Sonnet starts them at 0; TF1's `RMSPropOptimizer`, which IMPALA used,
  at 1. The slots are created on the first `apply`, as in Sonnet, so a
  checkpoint restored earlier fills them (delayed restoration). The update
  is Sonnet's, lr g / sqrt(ms + epsilon) (epsilon under the root, as TF1).
  """

  def __init__(self, learning_rate, decay, momentum, epsilon,
               initial_mean_square: float, name: str = 'rms_prop'):
    super().__init__(learning_rate, decay=decay, momentum=momentum,
                     epsilon=epsilon, name=name)
    self._initial_mean_square = float(initial_mean_square)

  def _initialize(self, parameters: Sequence[tf.Variable]):
    if self.mom:
      return
    def like(p, value, scope):
      with tf.name_scope(scope), tf.device(p.device):
        return tf.Variable(tf.fill(p.shape, tf.cast(value, p.dtype)),
                           trainable=False, name=p.name.split(':')[0])
    self.mom.extend(like(p, 0., 'momentum') for p in parameters)
    self.ms.extend(like(p, self._initial_mean_square, 'rms')
                   for p in parameters)


def make_optimizer(config: config_lib.LearnerConfig,
                   learning_rate: tf.Variable):
  """The optimizer named by `config.optimizer`."""
  if config.optimizer == 'adam':
    return snt.optimizers.Adam(learning_rate, beta1=config.adam_beta1,
                               beta2=config.adam_beta2,
                               epsilon=config.adam_epsilon)
  return RMSProp(learning_rate, decay=config.rmsprop_decay,
                 momentum=config.rmsprop_momentum,
                 epsilon=config.rmsprop_epsilon,
                 initial_mean_square=config.rmsprop_initial_mean_square)


def create_slots(optimizer, variables_fn, graph):
  """Creates `optimizer`'s slots for `variables_fn()` before `graph` is traced.

  Nothing to do (and no variable list to gather, on every update) once
  `graph`, the `tf.function` that applies `optimizer`, has been traced.

  A `tf.function` that creates variables on its first call is traced
  twice; with the slots made before, each update graph is traced once.
  They are made when the first update is built, as the optimizer's own
  first `apply` would make them, so a checkpoint restored earlier still
  fills them (delayed restoration) and a checkpoint holds the same
  objects. An agent that builds its weights on its first call (Sonnet
  raises ValueError for its variables until then) leaves them to that
  first trace.
  """
  if graph.experimental_get_tracing_count():
    return
  try:
    variables = list(variables_fn())
  except ValueError:
    return
  optimizer._initialize(variables)  # pylint: disable=protected-access
