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


class SeededLSTMGlorot(snt.initializers.Initializer):
  """Glorot-uniform over an LSTM's concatenated `[input + hidden, 4H]` kernel.

  TF1's LSTM cells (which scalable_agent, IMPALA's code, used) keep one
  kernel for `[x, h]` and draw it from U(-l, l), l = sqrt(6 / (D + H + 4H)),
  D the input and H the hidden size. Sonnet 2's `snt.LSTM` keeps the two
  blocks apart (`w_i` `[D, 4H]`, then `w_h` `[H, 4H]`); this initializer,
  given to both, draws each block from that same distribution: at D = 263,
  H = 256 about 0.036 standard deviation, against `SeededFanIn`'s 0.062 for
  either block. One instance serves one LSTM: the first call must be
  `w_i` (it fixes D), as `snt.LSTM` and `agents.cores.LayerNormLSTM` make
  them. Seeds come from `rng` as in `SeededFanIn`.
  """

  def __init__(self, rng: np.random.Generator, hidden_size: int):
    self._rng = rng
    self._hidden_size = int(hidden_size)
    self._input_size = None

  def __call__(self, shape, dtype):
    shape = [int(d) for d in shape]
    h = self._hidden_size
    if len(shape) != 2 or shape[1] != 4 * h:
      raise ValueError(f'SeededLSTMGlorot({h}) initialises [n, {4 * h}] '
                       f'LSTM kernels, got shape {shape}.')
    if self._input_size is None:
      self._input_size = shape[0]
    limit = np.sqrt(6.0 / (self._input_size + h + 4 * h))
    seed = self._rng.integers(0, 2**31 - 1, size=2)
    return tf.random.stateless_uniform(
        shape, seed=tf.constant(seed, tf.int64), minval=-limit, maxval=limit,
        dtype=dtype)
