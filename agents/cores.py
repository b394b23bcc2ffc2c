"""A recurrent core that resets its state at episode boundaries.

B is batch. `ResettingCore` wraps any `snt.RNNCore` and takes `(x, done)` as
input, so that `snt.dynamic_unroll` over time-major `[T, B, ...]` inputs
resets the state of a row at exactly the steps where its `done` is set,
before processing that step (the observation then starts a new episode).
"""

import sonnet as snt
import tensorflow as tf
import tree


class ResettingCore(snt.RNNCore):
  """`core` with `state := core.initial_state` where `done` is set."""

  def __init__(self, core: snt.RNNCore, name: str = 'resetting_core'):
    super().__init__(name=name)
    self._core = core

  def initial_state(self, batch_size):
    return self._core.initial_state(batch_size)

  def __call__(self, inputs, prev_state):
    """inputs: (x `[B, D]`, done bool `[B]`); prev_state: the core's state."""
    x, done = inputs
    done = tf.convert_to_tensor(done, tf.bool)
    initial = self._core.initial_state(tf.shape(done)[0])
    state = tree.map_structure(
        lambda i, s: tf.where(done[:, None], tf.cast(i, s.dtype), s),
        initial, prev_state)
    return self._core(x, state)



class LayerNormLSTM(snt.RNNCore):
  """An LSTM with layer normalisation (Ba, Kiros and Hinton, 2016).

  The gates' pre-activations `x W_i + h W_h` `[B, 4H]` are normalised per
  gate (input, forget, cell, output: Sonnet's order) over their H units,
  then scaled and shifted by learned `[4, H]` gains and offsets (the
  offsets take the place of the bias; the forget gate's start at
  `forget_bias`), and the cell is normalised before its tanh:

    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h' = sigmoid(o) * tanh(LN(c'))

  as TF1's `LayerNormBasicLSTMCell`. The state is `snt.LSTMState(hidden,
  cell)`, float32 `[B, H]` each, so it stands in for `snt.LSTM`.
  """

  def __init__(self, hidden_size: int, w_init, forget_bias: float = 1.0,
               epsilon: float = 1e-5, name: str = 'layer_norm_lstm'):
    super().__init__(name=name)
    self._hidden_size = int(hidden_size)
    self._w_init = w_init
    self._forget_bias = float(forget_bias)
    self._epsilon = float(epsilon)

  def initial_state(self, batch_size):
    zeros = tf.zeros([batch_size, self._hidden_size], tf.float32)
    return snt.LSTMState(hidden=zeros, cell=zeros)

  @snt.once
  def _initialize(self, inputs):
    h = self._hidden_size
    self.w_i = tf.Variable(self._w_init([inputs.shape[-1], 4 * h],
                                        tf.float32), name='w_i')
    self.w_h = tf.Variable(self._w_init([h, 4 * h], tf.float32), name='w_h')
    self.gate_scale = tf.Variable(tf.ones([4, h]), name='gate_scale')
    offset = tf.tensor_scatter_nd_update(
        tf.zeros([4, h]), [[1]], [tf.fill([h], self._forget_bias)])
    self.gate_offset = tf.Variable(offset, name='gate_offset')
    self.cell_scale = tf.Variable(tf.ones([h]), name='cell_scale')
    self.cell_offset = tf.Variable(tf.zeros([h]), name='cell_offset')

  def _normalize(self, x, scale, offset):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + self._epsilon) * scale + (
        offset)

  def __call__(self, inputs, prev_state):
    """inputs float32 `[B, D]`; returns (hidden `[B, H]`, LSTMState)."""
    self._initialize(inputs)
    h = self._hidden_size
    gates = tf.matmul(inputs, self.w_i) + tf.matmul(prev_state.hidden,
                                                    self.w_h)
    gates = self._normalize(tf.reshape(gates, [-1, 4, h]), self.gate_scale,
                            self.gate_offset)
    i, f, g, o = tf.unstack(gates, axis=1)
    cell = tf.sigmoid(f) * prev_state.cell + tf.sigmoid(i) * tf.tanh(g)
    hidden = tf.sigmoid(o) * tf.tanh(
        self._normalize(cell, self.cell_scale, self.cell_offset))
    return hidden, snt.LSTMState(hidden=hidden, cell=cell)


def unroll(core: snt.RNNCore, inputs: tf.Tensor, done, initial_state):
  """Runs `core` over time, resetting its state where `done` is set.

  The same as `snt.dynamic_unroll(ResettingCore(core), (inputs, done),
  initial_state)`, written as a plain `tf.while_loop` without AutoGraph so
  that it traces fast (AutoGraph conversion cost seconds per process) and
  compiles under XLA. With an unknown T it stays a single trace.

  Args:
    core: an `snt.RNNCore` mapping float `[B, D]` inputs to one float
      `[B, H]` output tensor (e.g. `snt.LSTM`).
    inputs: float32 `[T, B, D]`.
    done: bool `[T, B]`; where set, the state is reset before step t.
    initial_state: the core's state before step 0.

  Returns:
    (outputs `[T, B, H]`, final_state).
  """
  resetting = ResettingCore(core)
  done = tf.convert_to_tensor(done, tf.bool)
  num_steps = tf.shape(inputs)[0]
  inputs_ta = tf.TensorArray(inputs.dtype, size=num_steps).unstack(inputs)
  done_ta = tf.TensorArray(tf.bool, size=num_steps).unstack(done)
  outputs_ta = tf.TensorArray(inputs.dtype, size=num_steps)

  def body(t, outputs_ta, state):
    output, state = resetting((inputs_ta.read(t), done_ta.read(t)), state)
    return t + 1, outputs_ta.write(t, output), state

  _, outputs_ta, final_state = tf.while_loop(
      lambda t, *_: t < num_steps, body,
      (tf.constant(0), outputs_ta, initial_state),
      maximum_iterations=num_steps)
  return outputs_ta.stack(), final_state
