"""Tests of the resetting recurrent core and its while-loop unroll."""

import numpy as np
import pytest
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


def _layer_norm_lstm_numpy(x, hidden, cell, core):
  """One step of a layer-normalised LSTM, by hand."""
  def norm(v, scale, offset):
    mean = v.mean(-1, keepdims=True)
    var = v.var(-1, keepdims=True)
    return (v - mean) / np.sqrt(var + 1e-5) * scale + offset
  sigmoid = lambda v: 1 / (1 + np.exp(-v))
  h = hidden.shape[-1]
  gates = x @ core.w_i.numpy() + hidden @ core.w_h.numpy()
  gates = norm(gates.reshape(-1, 4, h), core.gate_scale.numpy(),
               core.gate_offset.numpy())
  i, f, g, o = gates[:, 0], gates[:, 1], gates[:, 2], gates[:, 3]
  new_cell = sigmoid(f) * cell + sigmoid(i) * np.tanh(g)
  new_hidden = sigmoid(o) * np.tanh(norm(new_cell, core.cell_scale.numpy(),
                                         core.cell_offset.numpy()))
  return new_hidden, new_cell


def test_layer_norm_lstm_matches_numpy_and_unrolls_with_resets():
  rng = np.random.default_rng(5)
  init = lambda shape, dtype: tf.constant(
      rng.normal(size=shape, scale=0.5), dtype)
  core = cores.LayerNormLSTM(6, init, forget_bias=1.0)
  inputs, done = _inputs()
  state = snt.LSTMState(tf.constant(rng.normal(size=(3, 6)), tf.float32),
                        tf.constant(rng.normal(size=(3, 6)), tf.float32))
  output, new_state = core(inputs[0], state)
  # The forget gate's offsets start at forget_bias, the others at 0.
  np.testing.assert_array_equal(core.gate_offset.numpy()[1], np.ones(6))
  np.testing.assert_array_equal(core.gate_offset.numpy()[[0, 2, 3]], 0)
  # Non-trivial gains and offsets, so the check covers them.
  core.gate_scale.assign(rng.normal(size=(4, 6)))
  core.gate_offset.assign(rng.normal(size=(4, 6)))
  core.cell_scale.assign(rng.normal(size=6))
  core.cell_offset.assign(rng.normal(size=6))
  output, new_state = core(inputs[0], state)
  hidden, cell = _layer_norm_lstm_numpy(inputs[0].numpy(),
                                        state.hidden.numpy(),
                                        state.cell.numpy(), core)
  np.testing.assert_allclose(output, hidden, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(new_state.hidden, hidden, rtol=1e-4, atol=1e-5)
  np.testing.assert_allclose(new_state.cell, cell, rtol=1e-4, atol=1e-5)
  expected, expected_state = _python_loop(core, inputs, done, state)
  outputs, final_state = cores.unroll(core, inputs, done, state)
  np.testing.assert_allclose(outputs, expected, atol=1e-6)
  tf.nest.map_structure(
      lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
      final_state, expected_state)


def test_lstm_split_step_equals_sonnet_lstm_and_loads_its_checkpoint(
    tmp_path):
  # cores.LSTM is snt.LSTM's step split in two: the same maths, the same
  # variables (a checkpoint of either restores into the other).
  rng = np.random.default_rng(3)
  reference = snt.LSTM(8, forget_bias=1.0)
  inputs, done = _inputs()
  state = snt.LSTMState(tf.constant(rng.normal(size=(3, 8)), tf.float32),
                        tf.constant(rng.normal(size=(3, 8)), tf.float32))
  reference(inputs[0], state)  # creates the variables
  reference.b.assign(rng.normal(size=32))  # a bias that is not 0 or 1
  expected, expected_state = _python_loop(reference, inputs, done, state)
  path = tf.train.Checkpoint(core=reference).write(str(tmp_path / 'ckpt'))
  core = cores.LSTM(8)
  core(inputs[0], state)  # creates the variables
  tf.train.Checkpoint(core=core).read(path).assert_consumed()
  got, got_state = _python_loop(core, inputs, done, state)
  np.testing.assert_allclose(got, expected, atol=1e-6)
  projected = core.step_projected(core.project_inputs(inputs[0]), state)
  np.testing.assert_allclose(projected[0], core(inputs[0], state)[0],
                             atol=1e-6)
  # unroll projects all steps at once, in and out of a tf.function.
  unrolled = (cores.unroll(core, inputs, done, state),
              tf.function(cores.unroll, autograph=False)(core, inputs, done,
                                                         state))
  for outputs, final_state in unrolled:
    np.testing.assert_allclose(outputs, expected, atol=1e-6)
    tf.nest.map_structure(
        lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
        final_state, expected_state)


@pytest.mark.parametrize('in_function', [False, True])
def test_unroll_gradients_match_the_step_by_step_loop(in_function):
  # cores.LSTM's unroll has a hand-written backward pass (lstm_unroll);
  # automatic differentiation of the plain loop is the reference, with a
  # state that is not zero, resets, and a loss on the outputs and the final
  # state (whose gradients then also reach the initial state).
  rng = np.random.default_rng(7)
  core = cores.LSTM(8)
  inputs, done = _inputs(steps=7)
  done[0, 2] = True
  state = snt.LSTMState(tf.constant(rng.normal(size=(3, 8)), tf.float32),
                        tf.constant(rng.normal(size=(3, 8)), tf.float32))
  _python_loop(core, inputs, done, state)  # creates the variables
  core.b.assign(rng.normal(size=32) * 0.5)
  weights = tf.constant(rng.normal(size=(7, 3, 8)), tf.float32)

  def grads(fn):
    with tf.GradientTape() as tape:
      tape.watch([inputs, state])
      outputs, final = fn(core, inputs, done, state)
      loss = (tf.reduce_sum(tf.sin(outputs) * weights) +
              tf.reduce_sum(final.hidden * final.cell) +
              tf.reduce_sum(tf.square(final.cell)))
    return tape.gradient(loss, [inputs, state] +
                         list(core.trainable_variables))

  reference = grads(_python_loop)
  got = (tf.function(grads, autograph=False)(cores.unroll) if in_function
         else grads(cores.unroll))
  assert len(got) == len(reference) == 5  # inputs, state, w_i, w_h, b
  tf.nest.map_structure(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5),
      got, reference)
