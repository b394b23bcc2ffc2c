"""Recurrent cores that reset their state at episode boundaries.

B is batch. `ResettingCore` wraps any `snt.RNNCore` and takes `(x, done)` as
input, so that `snt.dynamic_unroll` over time-major `[T, B, ...]` inputs
resets the state of a row at exactly the steps where its `done` is set,
before processing that step (the observation then starts a new episode).

`LSTM` and `LayerNormLSTM` split a step into the input's projection
`x W_i` and the rest, so that `unroll` projects all T steps' inputs in one
matmul before the loop: the loop (and its gradient, which would otherwise
form a `[D, 4H]` weight gradient at every step) then only does `h W_h`.
"""

import sonnet as snt
import tensorflow as tf
import tree


class ResettingCore(snt.RNNCore):
  """`core` with `state := core.initial_state` where `done` is set."""

  def __init__(self, core: snt.RNNCore, step=None,
               name: str = 'resetting_core'):
    """step: what maps (x, state) after the reset (default: `core`)."""
    super().__init__(name=name)
    self._core = core
    self._step = step or core

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
    return self._step(x, state)



class LSTM(snt.LSTM):
  """`snt.LSTM` (no projection) with its step split for `unroll`:
  `core(x, state) == core.step_projected(core.project_inputs(x), state)`.
  Same variables, so checkpoints of either load into the other."""

  def project_inputs(self, inputs):
    """float32 `[N, D]` -> the gates' input part `x W_i`, `[N, 4H]`."""
    self._initialize(inputs)
    return tf.matmul(inputs, self.input_to_hidden)

  def step_projected(self, gates_x, prev_state):
    """One step from `project_inputs`' `[B, 4H]`; as `snt.LSTM.__call__`."""
    gates = gates_x + tf.matmul(prev_state.hidden, self.hidden_to_hidden)
    i, f, g, o = tf.split(gates + self.b, num_or_size_splits=4, axis=1)
    cell = tf.sigmoid(f) * prev_state.cell
    cell += tf.sigmoid(i) * tf.tanh(g)
    hidden = tf.sigmoid(o) * tf.tanh(cell)
    return hidden, snt.LSTMState(hidden=hidden, cell=cell)


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
    return self.step_projected(self.project_inputs(inputs), prev_state)

  def project_inputs(self, inputs):
    """float32 `[N, D]` -> the gates' input part `x W_i`, `[N, 4H]`."""
    self._initialize(inputs)
    return tf.matmul(inputs, self.w_i)

  def step_projected(self, gates_x, prev_state):
    """One step from `project_inputs`' `[B, 4H]`."""
    h = self._hidden_size
    gates = gates_x + tf.matmul(prev_state.hidden, self.w_h)
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
  done = tf.convert_to_tensor(done, tf.bool)
  if isinstance(core, (LSTM, LayerNormLSTM)):
    # All steps' input projections in one matmul; the loop steps the rest.
    time_batch = [n if n is not None else tf.shape(inputs)[i]
                  for i, n in enumerate(inputs.shape[:2])]
    projected = core.project_inputs(tf.reshape(inputs,
                                               [-1, inputs.shape[-1]]))
    inputs = tf.reshape(projected, time_batch + [projected.shape[-1]])
    if isinstance(core, LSTM):
      return lstm_unroll(inputs, done, initial_state, core.hidden_to_hidden,
                         core.b)
    resetting = ResettingCore(core, step=core.step_projected)
  else:
    resetting = ResettingCore(core)
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


def _time_loop(num_steps, body, state, reverse=False):
  """Runs `state = body(t, state)` for t in [0, T) (or back from T - 1)."""
  def step(i, state):
    t = num_steps - 1 - i if reverse else i
    return i + 1, body(t, state)
  return tf.while_loop(lambda i, _: i < num_steps, step,
                       (tf.constant(0), state),
                       maximum_iterations=num_steps)[1]


def lstm_unroll(gates_x, done, initial_state, w_h, b):
  """`cores.LSTM` over time from its input projections, with resets.

  The forward pass is `LSTM.step_projected` step by step (the state reset
  to zeros where `done` is set). The backward pass is written out: the loop
  back through time carries only the state's gradients and keeps each
  step's gate gradients, so that the recurrent kernel's gradient is one
  `[H, T B] x [T B, 4H]` matmul after the loop, instead of one `[H, 4H]`
  matmul and sum per step as automatic differentiation of the loop does.

  Args:
    gates_x: float32 `[T, B, 4H]`, `x_t W_i` for every step.
    done: bool `[T, B]`; where set, the state is zeroed before step t.
    initial_state: `snt.LSTMState(hidden, cell)`, float32 `[B, H]` each.
    w_h: the recurrent kernel `[H, 4H]` (a variable); b: the bias `[4H]`.

  Returns:
    (hidden `[T, B, H]`, the final `snt.LSTMState`).
  """
  done = tf.convert_to_tensor(done, tf.bool)
  num_steps = tf.shape(gates_x)[0]
  dtype = gates_x.dtype

  def arrays(count, dtype=dtype):
    return [tf.TensorArray(dtype, size=num_steps) for _ in range(count)]

  @tf.custom_gradient
  def run(gates_x, hidden, cell):
    kernel, bias = tf.convert_to_tensor(w_h), tf.convert_to_tensor(b)
    gates_ta = tf.TensorArray(dtype, size=num_steps).unstack(gates_x)
    done_ta = tf.TensorArray(tf.bool, size=num_steps).unstack(done)

    def forward(t, carry):
      hidden, cell, saved = carry
      keep = tf.cast(~done_ta.read(t), dtype)[:, None]
      prev_h, prev_c = hidden * keep, cell * keep
      gates = gates_ta.read(t) + tf.matmul(prev_h, kernel) + bias
      i, f, g, o = tf.split(gates, num_or_size_splits=4, axis=1)
      i, f, g, o = tf.sigmoid(i), tf.sigmoid(f), tf.tanh(g), tf.sigmoid(o)
      cell = f * prev_c + i * g
      tanh_c = tf.tanh(cell)
      hidden = o * tanh_c
      values = (hidden, prev_h, prev_c, i, f, g, o, tanh_c)
      return hidden, cell, [a.write(t, v) for a, v in zip(saved, values)]

    hidden, cell, saved = _time_loop(num_steps, forward,
                                     (hidden, cell, arrays(8)))
    saved = [a.stack() for a in saved]
    outputs, prev_h_all = saved[0], saved[1]

    def grad(d_outputs, d_hidden, d_cell, variables=None):
      d_outputs = _zeros_if_none(d_outputs, outputs)
      d_hidden, d_cell = (_zeros_if_none(d_hidden, hidden),
                          _zeros_if_none(d_cell, cell))
      parts = [tf.TensorArray(dtype, size=num_steps).unstack(v)
               for v in saved[2:]]
      back_done_ta = tf.TensorArray(tf.bool, size=num_steps).unstack(done)

      def backward(t, carry):
        d_h, d_c, d_gates_ta = carry
        prev_c, i, f, g, o, tanh_c = (a.read(t) for a in parts)
        d_h = d_h + d_outputs[t]
        d_c = d_c + d_h * o * (1. - tf.square(tanh_c))
        d_gates = tf.concat([d_c * g * i * (1. - i),
                             d_c * prev_c * f * (1. - f),
                             d_c * i * (1. - tf.square(g)),
                             d_h * tanh_c * o * (1. - o)], axis=1)
        keep = tf.cast(~back_done_ta.read(t), dtype)[:, None]
        d_prev_h = tf.matmul(d_gates, kernel, transpose_b=True) * keep
        return d_prev_h, d_c * f * keep, d_gates_ta.write(t, d_gates)

      d_h0, d_c0, d_gates = _time_loop(
          num_steps, backward, (d_hidden, d_cell, arrays(1)[0]),
          reverse=True)
      d_gates = d_gates.stack()
      width = d_gates.shape[-1]
      d_kernel = tf.matmul(tf.reshape(prev_h_all, [-1, kernel.shape[0]]),
                           tf.reshape(d_gates, [-1, width]), transpose_a=True)
      d_bias = tf.reduce_sum(tf.reshape(d_gates, [-1, width]), axis=0)
      by_ref = {v.ref(): g for v, g in ((w_h, d_kernel), (b, d_bias))}
      return ((d_gates, d_h0, d_c0),
              [by_ref.get(v.ref()) for v in (variables or [])])

    return (outputs, hidden, cell), grad

  outputs, hidden, cell = run(gates_x, initial_state.hidden,
                              initial_state.cell)
  return outputs, snt.LSTMState(hidden=hidden, cell=cell)


def _zeros_if_none(grad, like):
  return tf.zeros_like(like) if grad is None else grad
