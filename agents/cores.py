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
