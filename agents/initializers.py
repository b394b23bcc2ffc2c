"""Seeded weight initialisation, so that an agent's weights follow its seed.

Sonnet's default initialisers draw from TensorFlow's global random state, so
two agents built in one process with the same seed would get different
weights. `SeededFanIn` draws instead from a stateless truncated normal whose
seeds come from a numpy generator owned by the agent's constructor: building
the same agent twice with the same seed gives the same weights, and nothing
random is left behind in the module once it is built.
"""

import numpy as np
import sonnet as snt
import tensorflow as tf


class SeededFanIn(snt.initializers.Initializer):
  """Truncated normal with stddev `1 / sqrt(fan_in)` (Sonnet's default), seeded.

  `fan_in` is the product of all dimensions but the last, which is the input
  size for `snt.Linear` and `snt.LSTM` weights and `kh * kw * in_channels` for
  `snt.Conv2D` kernels. Each call draws a fresh stateless seed from `rng`, so
  the values depend only on the seed and the order in which variables are
  created.
  """

  def __init__(self, rng: np.random.Generator, scale: float = 1.0):
    self._rng = rng
    self._scale = scale

  def __call__(self, shape, dtype):
    shape = [int(d) for d in shape]
    fan_in = max(1, int(np.prod(shape[:-1])))
    seed = self._rng.integers(0, 2**31 - 1, size=2)
    return tf.random.stateless_truncated_normal(
        shape,
        seed=tf.constant(seed, tf.int64),
        stddev=self._scale / np.sqrt(fan_in),
        dtype=dtype)

