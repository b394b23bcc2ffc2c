"""Tests of the resetting recurrent core and its while-loop unroll."""

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import cores


def _inputs(steps=6, batch=3, seed=0):
  rng = np.random.default_rng(seed)
  inputs = tf.constant(rng.normal(size=(steps, batch, 4)).astype(np.float32))
  done = rng.random((steps, batch)) < 0.3
  done[min(1, steps - 1), 0] = True
  return inputs, done


def _python_loop(core, inputs, done, state):
  """The definition: reset where done, then step, one t at a time."""
  outputs = []
  for t in range(inputs.shape[0]):
    initial = core.initial_state(inputs.shape[1])
    state = tf.nest.map_structure(
        lambda i, s, d=done[t]: tf.where(d[:, None], i, s), initial, state)
    output, state = core(inputs[t], state)
    outputs.append(output)
  return tf.stack(outputs), state


def test_unroll_matches_python_loop_and_dynamic_unroll():
  core = snt.LSTM(8)
  inputs, done = _inputs()
  state = core.initial_state(3)
  state = snt.LSTMState(state.hidden + 0.5, state.cell - 0.3)
  expected, expected_state = _python_loop(core, inputs, done, state)
  for outputs, final_state in (
      cores.unroll(core, inputs, done, state),
      snt.dynamic_unroll(cores.ResettingCore(core), (inputs, done), state)):
    np.testing.assert_allclose(outputs, expected, atol=1e-6)
    tf.nest.map_structure(
        lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
        final_state, expected_state)


def test_unroll_with_unknown_time_in_tf_function():
  core = snt.LSTM(8)
  state = core.initial_state(3)
  _python_loop(core, *_inputs(), state)  # creates the variables

  @tf.function(input_signature=[tf.TensorSpec([None, 3, 4]),
                                tf.TensorSpec([None, 3], tf.bool)])
  def run(inputs, done):
    outputs, final_state = cores.unroll(core, inputs, done, state)
    assert outputs.shape.as_list() == [None, 3, 8]
    return outputs, final_state

  for steps in (1, 6):
    inputs, done = _inputs(steps)
    got, _ = run(inputs, done)
    expected, _ = _python_loop(core, inputs, done, state)
    np.testing.assert_allclose(got, expected, atol=1e-6)
  assert run.experimental_get_tracing_count() == 1
