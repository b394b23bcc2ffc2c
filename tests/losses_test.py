"""Tests for clear.ops.losses: values against numpy, dead gradients, modes."""

import numpy as np
import pytest
import tensorflow as tf

from clear.ops import losses

T, B = 6, 5
HEADS = {'function': 4, 'step_mul': 3}
COSTS = dict(baseline_cost=0.5, entropy_cost=0.01, policy_cloning_cost=0.3,
             value_cloning_cost=0.7)


def _make_inputs(seed=0, masked=False):
  """Random loss inputs with two action heads, as numpy arrays."""
  rng = np.random.RandomState(seed)
  target_logits = {k: rng.randn(T, B, n).astype(np.float32)
                   for k, n in HEADS.items()}
  behaviour_logits = {k: rng.randn(T, B, n).astype(np.float32)
                      for k, n in HEADS.items()}
  actions = {k: rng.randint(0, n, size=(T, B)).astype(np.int32)
             for k, n in HEADS.items()}
  if masked:
    # The last choice of 'function' is unavailable to both policies and is
    # never taken.
    for logits in (target_logits, behaviour_logits):
      logits['function'][..., -1] = -1e9
    actions['function'] %= HEADS['function'] - 1
  discounts = (rng.uniform(0.8, 1.0, size=(T, B)) *
               (rng.rand(T, B) > 0.2)).astype(np.float32)
  return dict(
      target_logits=target_logits,
      behaviour_logits=behaviour_logits,
      actions=actions,
      values=rng.randn(T, B).astype(np.float32),
      bootstrap_value=rng.randn(B).astype(np.float32),
      behaviour_values=rng.randn(T, B).astype(np.float32),
      rewards=rng.randn(T, B).astype(np.float32),
      discounts=discounts)


def _log_softmax(logits):
  logits = logits.astype(np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _numpy_loss_terms(inputs, num_replay, clip_advantage):
  """The five loss terms computed independently in float64 numpy."""
  target_lp = sum(
      np.take_along_axis(_log_softmax(inputs['target_logits'][k]),
                         inputs['actions'][k][..., None], -1)[..., 0]
      for k in HEADS)
  behaviour_lp = sum(
      np.take_along_axis(_log_softmax(inputs['behaviour_logits'][k]),
                         inputs['actions'][k][..., None], -1)[..., 0]
      for k in HEADS)
  rhos = np.exp(target_lp - behaviour_lp)
  clipped = np.minimum(1.0, rhos)
  values = inputs['values'].astype(np.float64)
  rewards, discounts = inputs['rewards'], inputs['discounts']
  bootstrap = inputs['bootstrap_value'].astype(np.float64)
  # V-trace as a backward loop: v_s = V_s + delta_s + g_s c_s (v_{s+1} -
  # V_{s+1}).
  next_values = np.concatenate([values[1:], bootstrap[None]])
  deltas = clipped * (rewards + discounts * next_values - values)
  vs = np.zeros_like(values)
  acc = np.zeros(B)
  for t in reversed(range(T)):
    acc = deltas[t] + discounts[t] * clipped[t] * acc
    vs[t] = values[t] + acc
  next_vs = np.concatenate([vs[1:], bootstrap[None]])
  advantages = clipped * (rewards + discounts * next_vs - values)
  if clip_advantage:
    advantages = np.where(advantages > 0, advantages, 0.0)
  entropy = 0.0
  policy_cloning = 0.0
  for k in HEADS:
    log_pi = _log_softmax(inputs['target_logits'][k])
    log_mu = _log_softmax(inputs['behaviour_logits'][k])
    entropy += np.sum(np.exp(log_pi) * log_pi)
    policy_cloning += np.sum(
        (np.exp(log_mu) * (log_mu - log_pi))[:, :num_replay])
  return dict(
      policy_gradient=np.sum(-target_lp * advantages),
      baseline=0.5 * np.sum((vs - values) ** 2),
      entropy=entropy,
      policy_cloning=policy_cloning,
      value_cloning=np.sum(
          (values - inputs['behaviour_values'])[:, :num_replay] ** 2),
      vs=vs,
      log_rhos=target_lp - behaviour_lp)


def _loss(inputs, num_replay=2, clip_advantage=False):
  return losses.impala_clear_loss(**inputs, num_replay=num_replay,
                                  clip_advantage=clip_advantage, **COSTS)


@pytest.mark.parametrize('clip_advantage', [False, True],
                         ids=['raw_adv', 'clipped_adv'])
@pytest.mark.parametrize('num_replay', [0, 2, B])
def test_terms_match_numpy(num_replay, clip_advantage):
  inputs = _make_inputs(seed=num_replay)
  loss, extra = _loss(inputs, num_replay, clip_advantage)
  expected = _numpy_loss_terms(inputs, num_replay, clip_advantage)
  for name in ('policy_gradient', 'baseline', 'entropy', 'policy_cloning',
               'value_cloning', 'vs', 'log_rhos'):
    np.testing.assert_allclose(getattr(extra, name), expected[name],
                               rtol=1e-5, atol=1e-5, err_msg=name)
  expected_total = (
      expected['policy_gradient'] + COSTS['baseline_cost'] *
      expected['baseline'] + COSTS['entropy_cost'] * expected['entropy'] +
      COSTS['policy_cloning_cost'] * expected['policy_cloning'] +
      COSTS['value_cloning_cost'] * expected['value_cloning'])
  np.testing.assert_allclose(loss, expected_total, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(extra.total, loss)
  assert loss.shape == ()
  assert extra.pg_advantages.shape == (T, B)


def test_clip_advantage_zeroes_negative_advantages():
  inputs = _make_inputs(seed=3)
  _, raw = _loss(inputs, clip_advantage=False)
  _, clipped = _loss(inputs, clip_advantage=True)
  assert np.any(raw.pg_advantages.numpy() < 0)
  assert not np.isclose(raw.policy_gradient, clipped.policy_gradient)
  np.testing.assert_allclose(
      clipped.policy_gradient,
      _numpy_loss_terms(inputs, 2, clip_advantage=True)['policy_gradient'],
      rtol=1e-5, atol=1e-5)
  # Only the policy-gradient term depends on the flag.
  for name in ('baseline', 'entropy', 'policy_cloning', 'value_cloning'):
    np.testing.assert_allclose(getattr(raw, name), getattr(clipped, name))


def test_num_replay_changes_only_the_cloning_terms():
  inputs = _make_inputs(seed=4)
  _, few = _loss(inputs, num_replay=1)
  _, many = _loss(inputs, num_replay=4)
  for name in ('policy_gradient', 'baseline', 'entropy', 'vs',
               'pg_advantages'):
    np.testing.assert_allclose(getattr(few, name), getattr(many, name))
  assert many.policy_cloning > few.policy_cloning > 0
  assert many.value_cloning > few.value_cloning > 0


def test_no_replay_gives_exactly_zero_cloning_terms():
  loss, extra = _loss(_make_inputs(seed=5), num_replay=0)
  assert extra.policy_cloning.numpy() == 0.0
  assert extra.value_cloning.numpy() == 0.0
  assert np.isfinite(loss.numpy())


def _gradients(inputs, num_replay=2, clip_advantage=False):
  tensors = tf.nest.map_structure(tf.constant, inputs)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(tensors)
    loss, extra = _loss(tensors, num_replay, clip_advantage)
  return tape, tensors, loss, extra


def _is_dead(grad):
  return grad is None or not np.any(grad.numpy())


def test_dead_gradients():
  tape, tensors, loss, extra = _gradients(_make_inputs(seed=6))
  grads = tape.gradient(loss, tensors,
                        unconnected_gradients=tf.UnconnectedGradients.NONE)
  for name in ('behaviour_logits', 'behaviour_values', 'rewards',
               'discounts'):
    assert all(_is_dead(g) for g in tf.nest.flatten(grads[name])), name
  # The V-trace targets are constants with respect to the values.
  for target in (extra.vs, extra.pg_advantages):
    assert _is_dead(tape.gradient(target, tensors['values']))
    assert _is_dead(tape.gradient(target, tensors['bootstrap_value']))
  # Learning signals do reach the learner's outputs.
  assert all(np.any(g.numpy()) for g in grads['target_logits'].values())
  assert np.any(grads['values'].numpy())


def test_gradients_of_the_terms():
  """d baseline / d V = V - vs and d value_cloning / d V = 2 (V - V_mu)."""
  inputs = _make_inputs(seed=7)
  tape, tensors, _, extra = _gradients(inputs, num_replay=2)
  np.testing.assert_allclose(
      tape.gradient(extra.baseline, tensors['values']),
      inputs['values'] - extra.vs.numpy(), rtol=1e-5, atol=1e-5)
  expected = 2 * (inputs['values'] - inputs['behaviour_values'])
  expected[:, 2:] = 0
  np.testing.assert_allclose(
      tape.gradient(extra.value_cloning, tensors['values']), expected,
      rtol=1e-5, atol=1e-5)
  # The policy gradient of a head is -(onehot(a) - pi) * advantage.
  logits = inputs['target_logits']['step_mul']
  probs = np.exp(_log_softmax(logits))
  onehot = np.eye(HEADS['step_mul'])[inputs['actions']['step_mul']]
  np.testing.assert_allclose(
      tape.gradient(extra.policy_gradient,
                    tensors['target_logits']['step_mul']),
      -(onehot - probs) * extra.pg_advantages.numpy()[..., None],
      rtol=1e-4, atol=1e-5)


def test_eager_and_tf_function_agree_with_unknown_time_and_batch():
  inputs = _make_inputs(seed=8)
  logits_spec = {k: tf.TensorSpec([None, None, n], tf.float32)
                 for k, n in HEADS.items()}
  spec = tf.TensorSpec([None, None], tf.float32)

  @tf.function(input_signature=[
      logits_spec, logits_spec,
      {k: tf.TensorSpec([None, None], tf.int32) for k in HEADS},
      spec, tf.TensorSpec([None], tf.float32), spec, spec, spec])
  def compiled(target_logits, behaviour_logits, actions, values,
               bootstrap_value, behaviour_values, rewards, discounts):
    return losses.impala_clear_loss(
        target_logits, behaviour_logits, actions, values, bootstrap_value,
        behaviour_values, rewards, discounts, num_replay=2,
        clip_advantage=True, **COSTS)

  eager_loss, eager_extra = _loss(inputs, num_replay=2, clip_advantage=True)
  graph_loss, graph_extra = compiled(**inputs)
  np.testing.assert_allclose(graph_loss, eager_loss, rtol=1e-5)
  for name in losses.ImpalaClearLossExtra._fields:
    np.testing.assert_allclose(getattr(graph_extra, name),
                               getattr(eager_extra, name), rtol=1e-5,
                               atol=1e-6, err_msg=name)


def test_masked_logits_give_finite_loss_and_gradients():
  inputs = _make_inputs(seed=9, masked=True)
  tape, tensors, loss, extra = _gradients(inputs, num_replay=3)
  assert np.isfinite(loss.numpy())
  grads = tape.gradient(loss, [tensors['target_logits'], tensors['values']])
  for grad in tf.nest.flatten(grads):
    assert np.all(np.isfinite(grad.numpy()))
  # Masked choices add nothing: same terms as without the masked column.
  unmasked = dict(inputs)
  unmasked['target_logits'] = dict(inputs['target_logits'],
                                   function=inputs['target_logits'][
                                       'function'][..., :-1])
  unmasked['behaviour_logits'] = dict(inputs['behaviour_logits'],
                                      function=inputs['behaviour_logits'][
                                          'function'][..., :-1])
  _, expected = _loss(unmasked, num_replay=3)
  for name in ('entropy', 'policy_cloning', 'policy_gradient'):
    np.testing.assert_allclose(getattr(extra, name), getattr(expected, name),
                               rtol=1e-5, err_msg=name)


def test_rejects_bad_inputs():
  inputs = _make_inputs(seed=10)
  with pytest.raises(ValueError, match='impala_clear_loss: values'):
    _loss(dict(inputs, values=inputs['values'][0]))
  with pytest.raises(ValueError, match='impala_clear_loss: bootstrap_value'):
    _loss(dict(inputs, bootstrap_value=inputs['values']))
  with pytest.raises(ValueError, match='impala_clear_loss: target_logits'):
    _loss(dict(inputs, target_logits={
        k: v[0] for k, v in inputs['target_logits'].items()}))
  with pytest.raises(ValueError, match='impala_clear_loss: .*same structure'):
    _loss(dict(inputs, actions={'function': inputs['actions']['function']}))
  with pytest.raises(ValueError, match='impala_clear_loss: num_replay'):
    _loss(inputs, num_replay=B + 1)


def test_clip_rewards_modes():
  rewards = np.array([-10.0, -1.0, -0.5, 0.0, 0.5, 2.0, 10.0], np.float32)
  np.testing.assert_allclose(
      losses.clip_rewards(rewards, 'abs_one'),
      [-1.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.0])
  # 5 tanh(r / 5), times 0.3 for negative rewards.
  np.testing.assert_allclose(
      losses.clip_rewards(rewards, 'soft_asymmetric'),
      [-1.4460413701137254, -0.296062980337356, -0.14950199193743374, 0.0,
       0.49833997312477907, 1.8997448112761246, 4.820137900379084],
      rtol=1e-6)
  np.testing.assert_array_equal(losses.clip_rewards(rewards, 'none'),
                                rewards)
  with pytest.raises(ValueError, match="abs_one.*soft_asymmetric.*none"):
    losses.clip_rewards(rewards, 'abs_two')


def _numpy_returns(rewards, discounts, bootstrap_value):
  returns = np.zeros(rewards.shape)
  acc = bootstrap_value.astype(np.float64)
  for t in reversed(range(rewards.shape[0])):
    acc = rewards[t] + discounts[t] * acc
    returns[t] = acc
  return returns


def test_discounted_returns():
  inputs = _make_inputs(seed=11)
  args = (inputs['rewards'], inputs['discounts'], inputs['bootstrap_value'])
  expected = _numpy_returns(*args)
  np.testing.assert_allclose(losses.discounted_returns(*args), expected,
                             rtol=1e-5, atol=1e-5)
  spec = tf.TensorSpec([None, None], tf.float32)
  compiled = tf.function(losses.discounted_returns, input_signature=[
      spec, spec, tf.TensorSpec([None], tf.float32)])
  np.testing.assert_allclose(compiled(*args), expected, rtol=1e-5, atol=1e-5)
  # A single step bootstraps at once.
  np.testing.assert_allclose(
      compiled(args[0][:1], args[1][:1], args[2]),
      args[0][:1] + args[1][:1] * args[2], rtol=1e-6)
  tensors = [tf.constant(x) for x in args]
  with tf.GradientTape() as tape:
    tape.watch(tensors)
    returns = losses.discounted_returns(*tensors)
  assert all(_is_dead(g) for g in tape.gradient(returns, tensors))
  with pytest.raises(ValueError, match='discounted_returns: bootstrap_value'):
    losses.discounted_returns(args[0], args[1], args[0])


def test_cut_at_truncations_by_hand():
  rewards = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
  discounts = np.full((3, 2), 0.9, np.float32)
  values = np.array([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0]], np.float32)
  truncated = np.array([[False, False], [True, False], [False, True]])
  values_t = tf.constant(values)
  with tf.GradientTape() as tape:
    tape.watch(values_t)
    cut_rewards, cut_discounts = losses.cut_at_truncations(
        rewards, discounts, values_t, truncated)
  np.testing.assert_array_equal(cut_rewards,
                                [[1.0, 2.0], [30.0, 4.0], [5.0, 60.0]])
  np.testing.assert_allclose(cut_discounts,
                             [[0.9, 0.9], [0.0, 0.9], [0.9, 0.0]], rtol=1e-7)
  assert _is_dead(tape.gradient(cut_rewards, values_t))
  # Returns then stop at the cut: row 0 of column 0 bootstraps from V(x_1).
  returns = losses.discounted_returns(cut_rewards, cut_discounts,
                                      tf.constant([100.0, 100.0]))
  np.testing.assert_allclose(returns[:, 0], [1.0 + 0.9 * 30.0, 30.0,
                                             5.0 + 0.9 * 100.0], rtol=1e-6)
  np.testing.assert_allclose(returns[:, 1], [2.0 + 0.9 * (4.0 + 0.9 * 60.0),
                                             4.0 + 0.9 * 60.0, 60.0],
                             rtol=1e-6)
  with pytest.raises(ValueError, match='cut_at_truncations: truncated'):
    losses.cut_at_truncations(rewards, discounts, values, truncated[0])
