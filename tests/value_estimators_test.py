"""Tests for clear.ops.value_estimators against slow numpy transcriptions."""

import numpy as np
import pytest
import tensorflow as tf

from clear.ops import value_estimators as ve
from clear.ops import vtrace


def _discount_products(discounts, start, stop):
  """prod_{i = start}^{stop - 1} d_i, elementwise over the batch."""
  return np.prod(discounts[start:stop], axis=0)


def _slow_n_step(rewards, discounts, values, bootstrap_value, t, n):
  """G_t^(n) = sum_{k < n} (prod_{i < k} d_{t+i}) r_{t+k} + (prod d) V_{t+n}.

  Written from the definition; `n` steps must fit in the unroll.
  """
  next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
  total = np.zeros_like(bootstrap_value)
  for k in range(n):
    total += _discount_products(discounts, t, t + k) * rewards[t + k]
  return total + (_discount_products(discounts, t, t + n) *
                  next_values[t + n - 1])


def _slow_td0(rewards, discounts, values, bootstrap_value):
  return np.stack([_slow_n_step(rewards, discounts, values, bootstrap_value,
                                t, 1) for t in range(len(rewards))])


def _slow_td1(rewards, discounts, values, bootstrap_value):
  num_steps = len(rewards)
  return np.stack([_slow_n_step(rewards, discounts, values, bootstrap_value,
                                t, num_steps - t) for t in range(num_steps)])


def _slow_td_lambda(rewards, discounts, values, bootstrap_value, lambda_):
  """The lambda-weighted mixture of n-step returns (Sutton & Barto 12.1).

  G_t = (1 - l) sum_{n = 1}^{N - 1} l^{n - 1} G_t^(n) + l^{N - 1} G_t^(N)
  with N = T - t, the number of steps left in the unroll.
  """
  num_steps = len(rewards)
  result = []
  for t in range(num_steps):
    steps_left = num_steps - t
    g = lambda_**(steps_left - 1) * _slow_n_step(
        rewards, discounts, values, bootstrap_value, t, steps_left)
    for n in range(1, steps_left):
      g += (1 - lambda_) * lambda_**(n - 1) * _slow_n_step(
          rewards, discounts, values, bootstrap_value, t, n)
    result.append(g)
  return np.stack(result)


def _slow_gae(rewards, discounts, values, bootstrap_value, lambda_):
  """A_t = sum_k (prod_{i < k} d_{t+i} lambda) delta_{t+k}."""
  num_steps = len(rewards)
  next_values = np.concatenate([values[1:], bootstrap_value[None]], axis=0)
  deltas = rewards + discounts * next_values - values
  advantages = np.zeros_like(values)
  for t in range(num_steps):
    for k in range(num_steps - t):
      advantages[t] += (lambda_**k * _discount_products(discounts, t, t + k) *
                        deltas[t + k])
  return advantages


def _random_inputs(num_steps, batch_size, extra_dims=(), seed=0,
                   dtype=np.float32):
  rng = np.random.RandomState(seed)
  shape = (num_steps, batch_size) + tuple(extra_dims)
  rewards = rng.randn(*shape)
  # Discounts around 0.9, with about one in five transitions terminated.
  discounts = rng.uniform(0.8, 1.0, size=shape) * (rng.rand(*shape) > 0.2)
  values = rng.randn(*shape)
  bootstrap_value = rng.randn(*shape[1:])
  return tuple(x.astype(dtype)
               for x in (rewards, discounts, values, bootstrap_value))


def _as64(inputs):
  return [np.asarray(x, np.float64) for x in inputs]


def _assert_close(actual, expected, tol=1e-5):
  np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


_SHAPES = [
    pytest.param(1, 1, id='T1_B1'),
    pytest.param(4, 1, id='T4_B1'),
    pytest.param(11, 3, id='T11_B3'),
]
_LAMBDAS = [0.0, 0.5, 0.95, 1.0]


@pytest.mark.parametrize('num_steps,batch_size', _SHAPES)
def test_td0_and_td1_match_slow_reference(num_steps, batch_size):
  inputs = _random_inputs(num_steps, batch_size, seed=num_steps)
  for fn, slow in ((ve.td0, _slow_td0), (ve.td1, _slow_td1)):
    result = fn(*inputs)
    assert isinstance(result, ve.ValueEstimate)
    expected = slow(*_as64(inputs))
    _assert_close(result.returns, expected)
    _assert_close(result.advantages, expected - inputs[2])


@pytest.mark.parametrize('lambda_', _LAMBDAS)
@pytest.mark.parametrize('num_steps,batch_size', _SHAPES)
def test_td_lambda_and_gae_match_slow_reference(num_steps, batch_size,
                                                lambda_):
  inputs = _random_inputs(num_steps, batch_size, seed=num_steps + 1)
  expected_returns = _slow_td_lambda(*_as64(inputs), lambda_)
  expected_advantages = _slow_gae(*_as64(inputs), lambda_)
  td = ve.td_lambda(*inputs, lambda_)
  _assert_close(td.returns, expected_returns)
  _assert_close(td.advantages, expected_returns - inputs[2])
  gae = ve.gae(*inputs, lambda_)
  _assert_close(gae.advantages, expected_advantages)
  _assert_close(gae.returns, expected_advantages + inputs[2])


@pytest.mark.parametrize('lambda_', _LAMBDAS)
def test_gae_returns_equal_td_lambda_returns(lambda_):
  inputs = _random_inputs(17, 4, seed=5)
  _assert_close(ve.gae(*inputs, lambda_).returns,
                ve.td_lambda(*inputs, lambda_).returns)


def test_lambda_zero_is_td0_and_lambda_one_is_td1():
  inputs = _random_inputs(9, 3, seed=6)
  for fn in (ve.td_lambda, ve.gae):
    for lambda_, reference in ((0.0, ve.td0), (1.0, ve.td1)):
      result, expected = fn(*inputs, lambda_), reference(*inputs)
      _assert_close(result.returns, expected.returns)
      _assert_close(result.advantages, expected.advantages)


def test_vtrace_matches_from_importance_weights():
  inputs = _random_inputs(8, 3, seed=7)
  log_rhos = np.random.RandomState(8).randn(8, 3).astype(np.float32)
  result = ve.vtrace(*inputs, log_rhos, clip_rho_threshold=2.0,
                     clip_pg_rho_threshold=None)
  rewards, discounts, values, bootstrap_value = inputs
  expected = vtrace.from_importance_weights(
      log_rhos, discounts, rewards, values, bootstrap_value,
      clip_rho_threshold=2.0, clip_pg_rho_threshold=None)
  _assert_close(result.returns, expected.vs)
  _assert_close(result.advantages, expected.pg_advantages)


def test_on_policy_vtrace_is_td1():
  # With rho = c = 1 the V-trace target telescopes to the Monte-Carlo
  # return, and its advantage r_t + d_t v_{t+1} - V(x_t) to G_t - V(x_t).
  inputs = _random_inputs(10, 4, seed=9)
  result = ve.vtrace(*inputs, log_rhos=np.zeros([10, 4], np.float32))
  expected = ve.td1(*inputs)
  _assert_close(result.returns, expected.returns)
  _assert_close(result.advantages, expected.advantages)


def test_termination_cuts_the_return():
  # Transition 1 terminates: G_0 = r_0 + d_0 r_1, whatever follows.
  rewards = np.array([[1.0], [2.0], [4.0]], np.float32)
  discounts = np.array([[0.5], [0.0], [0.5]], np.float32)
  values = np.array([[10.0], [20.0], [30.0]], np.float32)
  bootstrap_value = np.array([100.0], np.float32)
  result = ve.td1(rewards, discounts, values, bootstrap_value)
  _assert_close(result.returns[:, 0], [2.0, 2.0, 54.0])
  result = ve.td0(rewards, discounts, values, bootstrap_value)
  _assert_close(result.returns[:, 0], [11.0, 2.0, 54.0])
  # lambda = 0.5: G_2 = 54, G_1 = 2, G_0 = 1 + 0.5 (0.5 * 20 + 0.5 * 2) = 6.5.
  result = ve.td_lambda(rewards, discounts, values, bootstrap_value, 0.5)
  _assert_close(result.returns[:, 0], [6.5, 2.0, 54.0])


@pytest.mark.parametrize('name', ve.ESTIMATORS)
def test_unknown_time_and_batch_inside_tf_function(name):
  spec = tf.TensorSpec([None, None], tf.float32)

  @tf.function(input_signature=[spec] * 4 +
               [tf.TensorSpec([None], tf.float32)])
  def compiled(log_rhos, rewards, discounts, values, bootstrap_value):
    result = ve.estimate(name, rewards, discounts, values, bootstrap_value,
                         lambda_=0.9, log_rhos=log_rhos)
    assert result.returns.shape.as_list() == [None, None]
    return result

  for num_steps, batch_size in [(1, 2), (6, 3), (13, 1)]:
    inputs = _random_inputs(num_steps, batch_size, seed=num_steps)
    log_rhos = np.random.RandomState(num_steps).randn(
        num_steps, batch_size).astype(np.float32) * 0.5
    result = compiled(log_rhos, *inputs)
    expected = ve.estimate(name, *inputs, lambda_=0.9, log_rhos=log_rhos)
    _assert_close(result.returns, expected.returns)
    _assert_close(result.advantages, expected.advantages)


@pytest.mark.parametrize('name', ve.ESTIMATORS)
def test_extra_trailing_dimensions(name):
  inputs = _random_inputs(7, 2, extra_dims=(3,), seed=11)
  log_rhos = np.zeros([7, 2, 3], np.float32)
  result = ve.estimate(name, *inputs, lambda_=0.8, log_rhos=log_rhos)
  assert result.returns.shape == (7, 2, 3)
  for k in range(3):
    column = [x[..., k] for x in inputs]
    expected = ve.estimate(name, *column, lambda_=0.8,
                           log_rhos=log_rhos[..., k])
    _assert_close(result.returns[..., k], expected.returns)
    _assert_close(result.advantages[..., k], expected.advantages)


def test_float64_inputs_and_tensor_lambda():
  inputs = _random_inputs(6, 2, seed=12, dtype=np.float64)
  result = ve.td_lambda(*inputs, tf.constant(0.7, tf.float64))
  assert result.returns.dtype == tf.float64
  _assert_close(result.returns, _slow_td_lambda(*inputs, 0.7), tol=1e-10)
  # A per-step lambda broadcasts like the discounts.
  per_step = np.full([6, 2], 0.7)
  _assert_close(ve.gae(*inputs, per_step).returns, result.returns, tol=1e-10)


@pytest.mark.parametrize('name', ve.ESTIMATORS)
def test_no_gradient_flows_into_the_targets(name):
  rewards, discounts, values, bootstrap_value = (
      tf.constant(x) for x in _random_inputs(5, 2, seed=13))
  log_rhos = tf.constant(np.full([5, 2], 0.3, np.float32))
  sources = [rewards, discounts, values, bootstrap_value, log_rhos]
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(sources)
    result = ve.estimate(name, rewards, discounts, values, bootstrap_value,
                         lambda_=0.9, log_rhos=log_rhos)
  for output in result:
    assert all(g is None for g in tape.gradient(output, sources))


_BAD_RANKS = [
    pytest.param(0, (5,), 'rewards', id='rewards_rank_1'),
    pytest.param(1, (5, 2, 1), 'discounts', id='discounts_rank_3'),
    pytest.param(2, (5,), 'values', id='values_rank_1'),
    pytest.param(3, (5, 2), 'bootstrap_value', id='bootstrap_rank_2'),
    pytest.param(2, (4, 2), 'values', id='values_wrong_length'),
    pytest.param(3, (3,), 'bootstrap_value', id='bootstrap_wrong_batch'),
]


@pytest.mark.parametrize('index,bad_shape,arg_name', _BAD_RANKS)
@pytest.mark.parametrize('name', ve.ESTIMATORS)
def test_rejects_bad_shapes(name, index, bad_shape, arg_name):
  inputs = list(_random_inputs(5, 2))
  inputs[index] = np.zeros(bad_shape, np.float32)
  with pytest.raises(ValueError, match=f'{name}: {arg_name}'):
    ve.estimate(name, *inputs, log_rhos=np.zeros([5, 2], np.float32))


def test_rejects_bad_arguments():
  inputs = _random_inputs(5, 2)
  with pytest.raises(ValueError, match='estimate: unknown estimator'):
    ve.estimate('td2', *inputs)
  with pytest.raises(ValueError, match='estimate: the vtrace estimator needs'):
    ve.estimate('vtrace', *inputs)
  with pytest.raises(ValueError, match=r'gae: lambda_ must be in \[0, 1\]'):
    ve.gae(*inputs, 1.5)
  with pytest.raises(ValueError, match='vtrace: log_rhos must have the shape'):
    ve.vtrace(*inputs, log_rhos=np.zeros([5], np.float32))
  with pytest.raises(ValueError, match='td1: rewards must be a float tensor'):
    ve.td1(np.zeros([5, 2], np.int32), *inputs[1:])
