"""Tests for clear.ops.vtrace against a slow numpy transcription of the
paper."""

import numpy as np
import pytest
import tensorflow as tf

from clear.ops import vtrace


def _slow_vtrace(log_rhos, discounts, rewards, values, bootstrap_value,
                 clip_rho_threshold, clip_pg_rho_threshold):
  """V-trace written like eq. (1) of Espeholt et al. 2018, in float64.

  v_s = V(x_s) + sum_{t >= s} (prod_{i = s}^{t - 1} gamma_i c_i) delta_t,
  delta_t = rho_bar_t (r_t + gamma_t V(x_{t+1}) - V(x_t)).
  """
  log_rhos, discounts, rewards, values, bootstrap_value = (
      np.asarray(x, np.float64)
      for x in (log_rhos, discounts, rewards, values, bootstrap_value))
  rhos = np.exp(log_rhos)
  clipped_rhos = (rhos if clip_rho_threshold is None else
                  np.minimum(clip_rho_threshold, rhos))
  cs = np.minimum(1.0, rhos)
  num_steps = values.shape[0]
  next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
  vs = np.zeros_like(values)
  for s in range(num_steps):
    v_s = np.copy(values[s])
    for t in range(s, num_steps):
      trace = np.prod(discounts[s:t] * cs[s:t], axis=0)
      delta = clipped_rhos[t] * (
          rewards[t] + discounts[t] * next_values[t] - values[t])
      v_s += trace * delta
    vs[s] = v_s
  next_vs = np.concatenate([vs[1:], bootstrap_value[None]], axis=0)
  clipped_pg_rhos = (rhos if clip_pg_rho_threshold is None else
                     np.minimum(clip_pg_rho_threshold, rhos))
  pg_advantages = clipped_pg_rhos * (rewards + discounts * next_vs - values)
  return vs, pg_advantages


def _random_inputs(num_steps, batch_size, extra_dims=(), seed=0):
  rng = np.random.RandomState(seed)
  shape = (num_steps, batch_size) + tuple(extra_dims)
  # Spread rho around 1 so that every clipping threshold is active.
  log_rhos = rng.randn(*shape).astype(np.float32) * 0.8
  # Random discounts in [0, 1) with about one in five exactly zero.
  discounts = rng.uniform(0.5, 1.0, size=shape).astype(np.float32)
  discounts *= rng.rand(*shape) > 0.2
  rewards = rng.randn(*shape).astype(np.float32)
  values = rng.randn(*shape).astype(np.float32)
  bootstrap_value = rng.randn(*shape[1:]).astype(np.float32)
  return log_rhos, discounts, rewards, values, bootstrap_value


_CLIPPING = [
    pytest.param(None, None, id='no_clipping'),
    pytest.param(1.0, 1.0, id='clip_1'),
    pytest.param(3.7, 2.2, id='clip_3.7_pg_2.2'),
    pytest.param(0.5, None, id='clip_0.5_pg_none'),
]
_SHAPES = [
    pytest.param(1, 1, id='T1_B1'),
    pytest.param(5, 1, id='T5_B1'),
    pytest.param(13, 4, id='T13_B4'),
]


def _assert_close(actual, expected):
  np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('num_steps,batch_size', _SHAPES)
@pytest.mark.parametrize('clip_rho,clip_pg_rho', _CLIPPING)
def test_matches_slow_reference_eagerly(num_steps, batch_size, clip_rho,
                                        clip_pg_rho):
  inputs = _random_inputs(num_steps, batch_size)
  expected_vs, expected_pg = _slow_vtrace(*inputs, clip_rho, clip_pg_rho)
  result = vtrace.from_importance_weights(
      *inputs, clip_rho_threshold=clip_rho,
      clip_pg_rho_threshold=clip_pg_rho)
  assert isinstance(result, vtrace.VTraceReturns)
  assert result.vs.shape == (num_steps, batch_size)
  _assert_close(result.vs, expected_vs)
  _assert_close(result.pg_advantages, expected_pg)


@pytest.mark.parametrize('clip_rho,clip_pg_rho', _CLIPPING)
def test_matches_slow_reference_with_unknown_time_and_batch(clip_rho,
                                                            clip_pg_rho):
  spec = tf.TensorSpec([None, None], tf.float32)

  @tf.function(input_signature=[spec] * 4 +
               [tf.TensorSpec([None], tf.float32)])
  def compiled(log_rhos, discounts, rewards, values, bootstrap_value):
    result = vtrace.from_importance_weights(
        log_rhos, discounts, rewards, values, bootstrap_value,
        clip_rho_threshold=clip_rho, clip_pg_rho_threshold=clip_pg_rho)
    assert result.vs.shape.as_list() == [None, None]
    return result

  # One trace serves several lengths, including non powers of two.
  for num_steps, batch_size in [(1, 2), (7, 3), (16, 2), (21, 5)]:
    inputs = _random_inputs(num_steps, batch_size, seed=num_steps)
    expected_vs, expected_pg = _slow_vtrace(*inputs, clip_rho, clip_pg_rho)
    result = compiled(*inputs)
    _assert_close(result.vs, expected_vs)
    _assert_close(result.pg_advantages, expected_pg)


def test_static_time_inside_tf_function():
  inputs = [tf.constant(x) for x in _random_inputs(9, 3, seed=3)]
  result = tf.function(vtrace.from_importance_weights)(*inputs)
  expected_vs, expected_pg = _slow_vtrace(*inputs, 1.0, 1.0)
  _assert_close(result.vs, expected_vs)
  _assert_close(result.pg_advantages, expected_pg)


def test_thresholds_as_tensors():
  inputs = _random_inputs(6, 2, seed=4)
  result = vtrace.from_importance_weights(
      *inputs, clip_rho_threshold=tf.constant(1.5),
      clip_pg_rho_threshold=tf.constant(0.7))
  expected_vs, expected_pg = _slow_vtrace(*inputs, 1.5, 0.7)
  _assert_close(result.vs, expected_vs)
  _assert_close(result.pg_advantages, expected_pg)


def test_float64_inputs_and_int_threshold():
  inputs = [x.astype(np.float64) for x in _random_inputs(6, 2, seed=4)]
  result = vtrace.from_importance_weights(*inputs, clip_rho_threshold=2,
                                          clip_pg_rho_threshold=None)
  assert result.vs.dtype == tf.float64
  expected_vs, expected_pg = _slow_vtrace(*inputs, 2.0, None)
  np.testing.assert_allclose(result.vs, expected_vs, rtol=1e-10)
  np.testing.assert_allclose(result.pg_advantages, expected_pg, rtol=1e-10)


@pytest.mark.parametrize('compile_fn', [False, True], ids=['eager', 'graph'])
def test_extra_trailing_dimensions(compile_fn):
  inputs = _random_inputs(6, 3, extra_dims=(2, 4), seed=5)
  fn = vtrace.from_importance_weights
  if compile_fn:
    spec = tf.TensorSpec([None, None, 2, 4], tf.float32)
    fn = tf.function(fn, input_signature=[spec] * 4 + [
        tf.TensorSpec([None, 2, 4], tf.float32)])
  result = fn(*inputs)
  expected_vs, expected_pg = _slow_vtrace(*inputs, 1.0, 1.0)
  assert result.vs.shape == (6, 3, 2, 4)
  _assert_close(result.vs, expected_vs)
  _assert_close(result.pg_advantages, expected_pg)


def test_long_unroll_matches_sequential_recursion():
  # Long enough for many doubling rounds; a plain backward loop is the
  # reference here (the double loop would be slow).
  log_rhos, discounts, rewards, values, bootstrap_value = _random_inputs(
      100, 4, seed=6)
  rhos = np.exp(log_rhos.astype(np.float64))
  clipped = np.minimum(1.0, rhos)
  next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
  deltas = clipped * (rewards + discounts * next_values - values)
  acc = np.zeros(4)
  vs_minus_v = np.zeros((100, 4))
  for t in reversed(range(100)):
    acc = deltas[t] + discounts[t] * clipped[t] * acc
    vs_minus_v[t] = acc
  result = vtrace.from_importance_weights(log_rhos, discounts, rewards,
                                          values, bootstrap_value)
  _assert_close(result.vs, values + vs_minus_v)


def test_scan_discounted_sum_static_and_dynamic():
  rng = np.random.RandomState(7)
  sequence = rng.randn(11, 3).astype(np.float32)
  decay = rng.uniform(0, 1, size=(11, 3)).astype(np.float32)
  initial = rng.randn(3).astype(np.float32)
  expected = np.zeros((11, 3))
  acc = initial.astype(np.float64)
  for t in reversed(range(11)):
    acc = sequence[t] + decay[t] * acc
    expected[t] = acc
  _assert_close(vtrace.scan_discounted_sum(sequence, decay, initial),
                expected)
  dynamic = tf.function(vtrace.scan_discounted_sum, input_signature=[
      tf.TensorSpec([None, None], tf.float32)] * 2 +
                        [tf.TensorSpec([None], tf.float32)])
  _assert_close(dynamic(sequence, decay, initial), expected)


def test_no_gradient_through_targets():
  inputs = [tf.constant(x) for x in _random_inputs(5, 2, seed=8)]
  with tf.GradientTape(persistent=True) as tape:
    for x in inputs:
      tape.watch(x)
    result = vtrace.from_importance_weights(*inputs)
    vs_sum = tf.reduce_sum(result.vs)
    pg_sum = tf.reduce_sum(result.pg_advantages)
  for target in (vs_sum, pg_sum):
    for grad in tape.gradient(target, inputs):
      assert grad is None or not np.any(grad.numpy())


def _log_softmax(logits):
  logits = logits.astype(np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _pick(log_probs, actions):
  return np.take_along_axis(log_probs, actions[..., None], axis=-1)[..., 0]


def _random_logits_inputs(num_steps, batch_size, num_actions, seed):
  rng = np.random.RandomState(seed)
  behaviour = rng.randn(num_steps, batch_size, num_actions).astype(np.float32)
  target = rng.randn(num_steps, batch_size, num_actions).astype(np.float32)
  actions = rng.randint(0, num_actions, size=(num_steps, batch_size))
  _, discounts, rewards, values, bootstrap_value = _random_inputs(
      num_steps, batch_size, seed=seed)
  return (behaviour, target, actions.astype(np.int32), discounts, rewards,
          values, bootstrap_value)


def test_log_probs_from_logits_and_actions():
  behaviour, _, actions, *_ = _random_logits_inputs(4, 3, 5, seed=9)
  log_probs = vtrace.log_probs_from_logits_and_actions(behaviour, actions)
  _assert_close(log_probs, _pick(_log_softmax(behaviour), actions))
  nested = vtrace.log_probs_from_logits_and_actions(
      {'a': behaviour}, {'a': actions.astype(np.int64)})
  _assert_close(nested['a'], log_probs)


@pytest.mark.parametrize('clip_rho,clip_pg_rho', _CLIPPING[:3])
def test_from_logits_matches_numpy(clip_rho, clip_pg_rho):
  (behaviour, target, actions, discounts, rewards, values,
   bootstrap_value) = _random_logits_inputs(6, 3, 4, seed=10)
  result = vtrace.from_logits(behaviour, target, actions, discounts, rewards,
                              values, bootstrap_value,
                              clip_rho_threshold=clip_rho,
                              clip_pg_rho_threshold=clip_pg_rho)
  assert isinstance(result, vtrace.VTraceFromLogitsReturns)
  behaviour_lp = _pick(_log_softmax(behaviour), actions)
  target_lp = _pick(_log_softmax(target), actions)
  _assert_close(result.behaviour_action_log_probs, behaviour_lp)
  _assert_close(result.target_action_log_probs, target_lp)
  _assert_close(result.log_rhos, target_lp - behaviour_lp)
  expected_vs, expected_pg = _slow_vtrace(
      target_lp - behaviour_lp, discounts, rewards, values, bootstrap_value,
      clip_rho, clip_pg_rho)
  _assert_close(result.vs, expected_vs)
  _assert_close(result.pg_advantages, expected_pg)


def test_from_logits_sums_heads_and_has_gradients_only_into_target():
  rng = np.random.RandomState(11)
  sizes = {'move': 4, 'step_mul': 3}
  behaviour = {k: tf.constant(rng.randn(5, 2, n).astype(np.float32))
               for k, n in sizes.items()}
  target = {k: tf.constant(rng.randn(5, 2, n).astype(np.float32))
            for k, n in sizes.items()}
  actions = {k: rng.randint(0, n, size=(5, 2)).astype(np.int32)
             for k, n in sizes.items()}
  _, discounts, rewards, values, bootstrap_value = _random_inputs(5, 2, seed=11)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([behaviour, target])
    result = vtrace.from_logits(behaviour, target, actions, discounts,
                                rewards, values, bootstrap_value)
    objective = tf.reduce_sum(result.target_action_log_probs)
  target_lp = sum(_pick(_log_softmax(target[k].numpy()), actions[k])
                  for k in sizes)
  behaviour_lp = sum(_pick(_log_softmax(behaviour[k].numpy()), actions[k])
                     for k in sizes)
  _assert_close(result.target_action_log_probs, target_lp)
  _assert_close(result.log_rhos, target_lp - behaviour_lp)
  target_grads = tape.gradient(objective, target)
  assert all(np.any(g.numpy()) for g in target_grads.values())
  behaviour_grads = tape.gradient(tf.reduce_sum(result.log_rhos), behaviour)
  assert all(g is None or not np.any(g.numpy())
             for g in behaviour_grads.values())


def test_from_logits_with_unknown_time_and_batch():
  inputs = _random_logits_inputs(7, 3, 4, seed=12)
  spec2 = tf.TensorSpec([None, None], tf.float32)
  compiled = tf.function(vtrace.from_logits, input_signature=[
      tf.TensorSpec([None, None, 4], tf.float32)] * 2 + [
          tf.TensorSpec([None, None], tf.int32), spec2, spec2, spec2,
          tf.TensorSpec([None], tf.float32)])
  eager = vtrace.from_logits(*inputs)
  graph = compiled(*inputs)
  for name in vtrace.VTraceFromLogitsReturns._fields:
    _assert_close(getattr(graph, name), getattr(eager, name))


_GOOD = _random_inputs(4, 2, seed=13)


@pytest.mark.parametrize('index,bad_shape,arg_name', [
    pytest.param(0, (4,), 'log_rhos', id='log_rhos_rank_1'),
    pytest.param(1, (4, 2, 1), 'discounts', id='discounts_rank_3'),
    pytest.param(2, (4,), 'rewards', id='rewards_rank_1'),
    pytest.param(3, (4, 3), 'values', id='values_wrong_batch'),
    pytest.param(4, (1, 2), 'bootstrap_value', id='bootstrap_rank_2'),
])
def test_from_importance_weights_rejects_bad_ranks(index, bad_shape,
                                                   arg_name):
  inputs = list(_GOOD)
  inputs[index] = np.zeros(bad_shape, np.float32)
  with pytest.raises(ValueError, match=f'from_importance_weights: {arg_name}'):
    vtrace.from_importance_weights(*inputs)


def test_from_importance_weights_rejects_vector_threshold():
  with pytest.raises(ValueError,
                     match='from_importance_weights: clip_rho_threshold'):
    vtrace.from_importance_weights(*_GOOD, clip_rho_threshold=[1.0, 2.0])


def test_from_logits_rejects_bad_ranks():
  (behaviour, target, actions, discounts, rewards, values,
   bootstrap_value) = _random_logits_inputs(4, 2, 3, seed=14)
  with pytest.raises(ValueError, match='from_logits: policy logits'):
    vtrace.from_logits(behaviour[0], target[0], actions[0], discounts,
                       rewards, values, bootstrap_value)
  with pytest.raises(ValueError, match='from_logits: actions'):
    vtrace.from_logits(behaviour, target, actions[..., None], discounts,
                       rewards, values, bootstrap_value)
  with pytest.raises(ValueError, match='from_logits: rewards'):
    vtrace.from_logits(behaviour, target, actions, discounts, rewards[0],
                       values, bootstrap_value)
  with pytest.raises(ValueError, match='from_logits: bootstrap_value'):
    vtrace.from_logits(behaviour, target, actions, discounts, rewards,
                       values, values)
  with pytest.raises(ValueError, match='from_logits: .*same nest structure'):
    vtrace.from_logits({'a': behaviour}, {'b': target}, {'a': actions},
                       discounts, rewards, values, bootstrap_value)


def test_log_probs_rejects_bad_ranks():
  with pytest.raises(ValueError,
                     match='log_probs_from_logits_and_actions: logits'):
    vtrace.log_probs_from_logits_and_actions(
        np.zeros((3, 2), np.float32), np.zeros((3, 2), np.int32))
