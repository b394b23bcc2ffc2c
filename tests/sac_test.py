"""Tests of clear.algorithms.sac.policy and clear.algorithms.sac.losses: the
maths against numpy, dead gradients, the policy."""

import collections
import math

import numpy as np
import pytest
import tensorflow as tf
import tree

from agents import testing
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.sac import losses as sac_losses
from clear.algorithms.sac import policy as sac
from tests import event_files

T, B, N, A = 4, 3, 2, 5


def _log_normal(x, mean, log_std):
  return (-0.5 * ((x - mean) / np.exp(log_std))**2 - log_std -
          0.5 * np.log(2 * np.pi))


# --- The squashed Gaussian ----------------------------------------------------


def test_tanh_gaussian_log_prob_matches_the_change_of_variables():
  rng = np.random.RandomState(0)
  mean = rng.randn(6, 3)
  log_std = rng.uniform(-1.0, 0.5, size=(6, 3))
  pre_tanh = mean + np.exp(log_std) * rng.randn(6, 3)
  half_range = np.array([2.0, 0.5, 1.0])
  got = sac_losses.tanh_gaussian_log_prob(pre_tanh.astype(np.float32),
                                          mean.astype(np.float32),
                                          log_std.astype(np.float32),
                                          np.log(half_range).sum()).numpy()
  # y = h tanh(u): dy/du = h (1 - tanh(u)^2).
  expected = (_log_normal(pre_tanh, mean, log_std) -
              np.log(half_range * (1 - np.tanh(pre_tanh)**2))).sum(-1)
  np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_tanh_gaussian_density_integrates_to_one_over_the_bounds():
  # One dimension, actions in [-3, 3]: integrate p(y) on a fine grid.
  h, mean, log_std = 3.0, 0.4, -0.3
  y = np.linspace(-h, h, 200001)[1:-1]
  u = np.arctanh(y / h)
  log_p = sac_losses.tanh_gaussian_log_prob(
      u[:, None].astype(np.float32), np.float32([mean]),
      np.float32([log_std]), np.log(h)).numpy()
  np.testing.assert_allclose(np.trapezoid(np.exp(log_p), y), 1.0, atol=2e-3)


def test_tanh_gaussian_log_prob_is_finite_where_tanh_saturates():
  u = np.float32([[-30.0], [25.0]])
  got = sac_losses.tanh_gaussian_log_prob(u, np.zeros_like(u),
                                          np.zeros_like(u))
  assert np.all(np.isfinite(got.numpy()))
  # log(1 - tanh(u)^2) ~ 2 (log 2 - |u|) for large |u|.
  np.testing.assert_allclose(
      got.numpy(), _log_normal(u, 0, 0)[:, 0] - 2 * (np.log(2) - np.abs(u[:,
                                                                       0])),
      rtol=1e-5)


def test_tanh_gaussian_sample_is_reparameterised():
  mean = tf.Variable([[0.3, -1.0]])
  log_std = tf.Variable([[-0.5, 0.2]])
  noise = tf.constant([[0.7, -1.2]])
  with tf.GradientTape() as tape:
    pre_tanh, action = sac_losses.tanh_gaussian_sample(mean, log_std, noise)
  d_mean, d_log_std = tape.gradient(action, [mean, log_std])
  slope = 1 - np.tanh(pre_tanh.numpy())**2
  np.testing.assert_allclose(d_mean.numpy(), slope, rtol=1e-5)
  np.testing.assert_allclose(d_log_std.numpy(),
                             slope * np.exp(log_std.numpy()) * noise.numpy(),
                             rtol=1e-5)
  assert np.all(np.abs(action.numpy()) < 1)


# --- Losses -------------------------------------------------------------------


def test_actor_loss_matches_numpy_and_leaves_alpha_alone():
  rng = np.random.RandomState(1)
  q = tf.constant(rng.randn(N, T, B).astype(np.float32))
  reg = tf.constant(rng.randn(T, B).astype(np.float32))
  log_alpha = tf.Variable(-0.7)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([q, reg])
    loss, extra = sac_losses.sac_actor_loss(q, reg, tf.exp(log_alpha))
    total = tf.reduce_sum(loss)
  expected = np.exp(-0.7) * reg.numpy() - q.numpy().min(0)
  np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
  np.testing.assert_allclose(extra.policy_q.numpy(), q.numpy().min(0))
  assert tape.gradient(total, log_alpha) is None
  np.testing.assert_allclose(tape.gradient(total, reg).numpy(),
                             np.exp(-0.7), rtol=1e-5)
  # Only the smallest critic is climbed.
  grad_q = tape.gradient(total, q).numpy()
  np.testing.assert_array_equal(grad_q,
                                -1.0 * (q.numpy() == q.numpy().min(0)))


def test_mixed_actor_loss_weights_q_by_the_fixed_discrete_policy():
  rng = np.random.RandomState(2)
  q = tf.constant(rng.randn(N, T, B, A).astype(np.float32))
  probs = tf.constant(
      tf.nn.softmax(rng.randn(T, B, A).astype(np.float32)).numpy())
  reg = rng.randn(T, B).astype(np.float32)
  with tf.GradientTape() as tape:
    tape.watch(probs)
    loss, _ = sac_losses.sac_actor_loss(q, reg, 0.5, discrete_probs=probs)
  expected = 0.5 * reg - (probs.numpy() * q.numpy().min(0)).sum(-1)
  np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5, atol=1e-6)
  assert tape.gradient(loss, probs) is None


def test_alpha_loss_matches_numpy_and_stops_the_regulariser():
  rng = np.random.RandomState(3)
  reg = tf.constant(rng.randn(T, B).astype(np.float32))
  log_alpha = tf.Variable(0.3)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(reg)
    loss, extra = sac_losses.sac_alpha_loss(log_alpha, reg, -1.5)
    total = tf.reduce_mean(loss)
  gap = -reg.numpy() + 1.5
  np.testing.assert_allclose(loss.numpy(), 0.3 * gap, rtol=1e-5)
  np.testing.assert_allclose(extra.entropy_gap.numpy(), gap, rtol=1e-6)
  assert tape.gradient(total, reg) is None
  # Entropy above target (gap > 0 on average) -> alpha goes down.
  np.testing.assert_allclose(tape.gradient(total, log_alpha).numpy(),
                             gap.mean(), rtol=1e-5)


def _numpy_soft_targets(rewards, discounts, truncated, next_values,
                        next_penalty, estimator, lam):
  """Soft targets by a slow loop: bonus in every reward, stop at truncation."""
  targets = np.zeros_like(rewards, np.float64)
  for b in range(rewards.shape[1]):
    later = next_values[-1, b]
    for t in reversed(range(rewards.shape[0])):
      soft_r = rewards[t, b] - discounts[t, b] * next_penalty[t, b]
      if truncated[t, b]:
        g = next_values[t - 1, b] if t > 0 else 0.0
      elif estimator == 'td0':
        g = soft_r + discounts[t, b] * next_values[t, b]
      else:
        g = soft_r + discounts[t, b] * ((1 - lam) * next_values[t, b] +
                                        lam * later)
      targets[t, b] = g
      later = g
  return targets


def _critic_inputs(seed, discrete):
  rng = np.random.RandomState(seed)
  terminated = rng.rand(T, B) < 0.2
  truncated = (rng.rand(T, B) < 0.25) & ~terminated
  shape = (N, T, B, A) if discrete else (N, T, B)
  return dict(
      q_values=rng.randn(N, T, B).astype(np.float32),
      next_target_q=rng.randn(*shape).astype(np.float32),
      next_penalty=rng.randn(T, B).astype(np.float32),
      rewards=rng.randn(T, B).astype(np.float32),
      discounts=(0.95 * ~terminated).astype(np.float32),
      truncated=truncated,
      next_discrete_probs=(tf.nn.softmax(rng.randn(T, B, A)).numpy().astype(
          np.float32) if discrete else None),
      importance_weights=rng.uniform(0.1, 1, size=B).astype(np.float32))


@pytest.mark.parametrize('discrete', [False, True])
@pytest.mark.parametrize('estimator,lam', [('td0', 0.0), ('td_lambda', 0.6),
                                           ('td1', 1.0)])
def test_critic_loss_matches_numpy(discrete, estimator, lam):
  inputs = _critic_inputs(4, discrete)
  loss, extra = sac_losses.sac_critic_loss(estimator=estimator,
                                           lambda_=lam, **inputs)
  next_q = inputs['next_target_q'].min(0)
  if discrete:
    next_q = (inputs['next_discrete_probs'] * next_q).sum(-1)
  targets = _numpy_soft_targets(
      inputs['rewards'], inputs['discounts'], inputs['truncated'], next_q,
      inputs['next_penalty'], 'td0' if estimator == 'td0' else 'lambda', lam)
  mask = ~inputs['truncated']
  np.testing.assert_allclose(extra.targets.numpy()[mask], targets[mask],
                             rtol=1e-5, atol=1e-5)
  expected = (0.5 * ((targets[None] - inputs['q_values'])**2).sum(0) * mask *
              inputs['importance_weights'])
  np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-4, atol=1e-5)
  np.testing.assert_array_equal(extra.mask.numpy(), mask)


def test_critic_loss_reaches_only_the_online_critics():
  inputs = {k: tf.constant(v) for k, v in _critic_inputs(5, True).items()}
  watched = ['q_values', 'next_target_q', 'next_penalty',
             'next_discrete_probs', 'rewards', 'importance_weights']
  with tf.GradientTape() as tape:
    tape.watch([inputs[k] for k in watched])
    loss, _ = sac_losses.sac_critic_loss(estimator='td_lambda', **inputs)
  grads = dict(zip(watched, tape.gradient(loss, [inputs[k]
                                                 for k in watched])))
  assert grads['q_values'] is not None
  assert all(grads[k] is None for k in watched[1:]), grads


def test_critic_loss_checks_ranks():
  inputs = _critic_inputs(0, False)
  inputs['next_target_q'] = inputs['next_target_q'][0]
  with pytest.raises(ValueError, match='sac_critic_loss'):
    sac_losses.sac_critic_loss(**inputs)


def test_discrete_policy_is_a_softmax_of_min_q_over_alpha():
  rng = np.random.RandomState(6)
  q = rng.randn(N, B, A).astype(np.float32)
  mask = np.ones([B, A], np.float32)
  mask[0, 1] = 0
  logits = sac_losses.soft_policy_logits(q, 0.5, mask).numpy()
  expected = q.min(0) / 0.5
  np.testing.assert_allclose(logits[mask > 0], expected[mask > 0],
                             rtol=1e-6)
  assert logits[0, 1] < -1e8
  reg, probs = sac_losses.discrete_regulariser(logits)
  p = probs.numpy()
  assert p[0, 1] == 0.0
  with np.errstate(divide='ignore'):
    entropy = -np.nansum(p * np.where(p > 0, np.log(p), 0), -1)
  np.testing.assert_allclose(reg.numpy(), -entropy, rtol=1e-5)
  # KL to a uniform prior: E[log pi + log A].
  kl, _ = sac_losses.discrete_regulariser(
      logits[1:], np.full([B - 1, A], -np.log(A)), 1.0)
  np.testing.assert_allclose(kl.numpy(), -entropy[1:] + np.log(A), rtol=1e-5)


# --- Target entropy and config ------------------------------------------------


CONTINUOUS = collections.OrderedDict(
    force=types.ContinuousSpec((2,), -2.0, 2.0))
DISCRETE = collections.OrderedDict(move=types.DiscreteSpec(4))
MIXED = collections.OrderedDict(move=types.DiscreteSpec(4),
                                force=types.ContinuousSpec((2,), -2.0, 2.0))


@pytest.mark.parametrize('actions,value,prior,expected', [
    (CONTINUOUS, None, '', {'continuous': 2 * (math.log(2.0) - 1)}),
    (DISCRETE, None, '', {'discrete': sac_losses.DISCRETE_ENTROPY_RATIO *
                                       math.log(4)}),
    (MIXED, -0.5, '', {'discrete': -0.5, 'continuous': -0.5}),
    (MIXED, (0.3, -2.0), '', {'discrete': 0.3, 'continuous': -2.0}),
    (MIXED, lambda s: 1.0, '', {'discrete': 1.0, 'continuous': 1.0}),
    (MIXED, None, 'uniform', {'discrete': -3.0, 'continuous': -6.0}),
])
def test_target_entropies(actions, value, prior, expected):
  config = sac.SACConfig(target_entropy=value, prior_actor=prior)
  got = sac_losses.target_entropies(config, actions)
  assert got.keys() == expected.keys()
  for k, v in expected.items():
    assert got[k] == pytest.approx(v)


def test_a_pair_of_target_entropies_needs_mixed_actions():
  with pytest.raises(ValueError, match='pair'):
    sac_losses.target_entropies(sac.SACConfig(target_entropy=(1.0, 2.0)),
                                DISCRETE)


@pytest.mark.parametrize('overrides,match', [
    (dict(prior_actor='gaussian'), 'prior_actor'),
    (dict(initial_alpha=0.0), 'initial_alpha'),
    (dict(alpha_learning_rate=0.0), 'alpha_learning_rate'),
    (dict(num_replay=1), 'num_replay'),
    (dict(value_estimator='vtrace'), 'vtrace'),
    (dict(target_entropy='high'), 'target_entropy'),
])
def test_validate_config_names_the_bad_setting(overrides, match):
  spec = _spec(CONTINUOUS)
  with pytest.raises(ValueError, match=match):
    sac.validate_config(sac.SACConfig(**overrides), spec)


def test_discrete_actions_need_the_acting_ensemble_size():
  sac.validate_config(sac.SACConfig(num_critics=3), _spec(CONTINUOUS))
  with pytest.raises(ValueError, match='num_critics must be 2'):
    sac.validate_config(sac.SACConfig(num_critics=3), _spec(DISCRETE))


# --- The policy ---------------------------------------------------------------


def _spec(actions):
  return types.EnvSpec(
      collections.OrderedDict(vector=types.ArraySpec((3,), np.float32)),
      collections.OrderedDict(actions), name='test')


def _config(**overrides):
  kwargs = dict(batch_size=2, unroll_length=T, learning_starts=0,
                sample_batch_size=6, sample_length=2, replay_capacity=400,
                jit_compile=False, tau=0.05)
  kwargs.update(overrides)
  return sac.SACConfig(**kwargs)


AGENT = policy_lib.AgentConfig('mlp', 16, False)


def random_batch(spec, seed, batch_size=2, length=T):
  """A time-major `[T + 1, B]` unroll batch of random valid data."""
  return testing.random_unroll(spec, (length + 1, batch_size),
                               np.random.default_rng(seed))


def _structure(nest):
  return tree.map_structure(lambda x: (np.shape(x), np.asarray(x).dtype),
                            nest)


@pytest.mark.parametrize('actions', [CONTINUOUS, DISCRETE, MIXED],
                         ids=['continuous', 'discrete', 'mixed'])
def test_act_gives_the_runtime_structure_within_bounds(actions):
  spec = _spec(actions)
  policy = sac.SACPolicy(spec, AGENT, _config(), seed=0)
  assert policy.initial_state(4) == {}
  step = tree.map_structure(lambda x: x[0], random_batch(spec, 0, 4))
  output, state = policy.act(step.env_outputs, None, {})
  assert state == {}
  assert _structure(output) == _structure(
      policy_lib.zero_agent_output(spec, 4))
  for k, s in actions.items():
    if isinstance(s, types.ContinuousSpec):
      assert np.all(output.action[k] >= s.minimum)
      assert np.all(output.action[k] <= s.maximum)
    else:
      assert np.all((0 <= output.action[k]) & (output.action[k] < 4))
  # Acting copies built without a config take the learner's weights and,
  # with the same sampling state, act identically.
  copy = sac.SACPolicy(spec, AGENT, seed=7)
  copy.set_weights(policy.get_weights())
  copy.set_rng_state(policy.get_rng_state())
  again, _ = policy.act(step.env_outputs, None, {})
  tree.map_structure(np.testing.assert_array_equal,
                     copy.act(step.env_outputs, None, {})[0], again)


def test_actors_act_uniformly_until_learning_starts():
  spec = _spec(CONTINUOUS)
  policy = sac.SACPolicy(spec, AGENT, _config(learning_starts=2 * T + 1),
                         seed=0)
  observation = {'vector': np.zeros([500, 3], np.float32)}
  step = policy_lib.zero_step_output(spec, 500)._replace(
      observation=observation)
  uniform = policy.act(step, None, {})[0].action['force']
  # Uniform on [-2, 2]: std 2 / sqrt(3) ~ 1.15; the fresh policy's actions
  # at a zero observation are all alike.
  assert 1.0 < uniform.std() < 1.3
  stats = policy.learn(random_batch(spec, 0))
  assert stats['updates'] == 0 and policy.num_updates == 0
  stats = policy.learn(random_batch(spec, 1))
  assert stats['updates'] == 2 * T  # One per new transition.
  acting = policy.act(step, None, {})[0].action['force']
  assert acting.std(0).max() < 0.6 * uniform.std()


def test_updates_per_step_carry_the_fraction_over_and_summaries(tmp_path):
  spec = _spec(DISCRETE)
  policy = sac.SACPolicy(spec, AGENT, _config(updates_per_step=0.3), seed=0)
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    policy.trace(None)  # As the run loop does, under its writer.
    counts = [int(policy.learn(random_batch(spec, i))['updates'])
              for i in range(4)]
  # 0.3 x 8 new transitions per call: 2.4, 4.8, 7.2, 9.6 in total.
  assert counts == [2, 2, 3, 2]
  assert policy.num_updates == 9
  assert policy.num_env_frames == 4 * 2 * T
  writer.flush()
  tags = event_files.tags(tmp_path)
  assert {'loss/critic', 'alpha/discrete',
          'policy/entropy_discrete'} <= tags, tags


def test_target_critics_move_only_by_soft_updates():
  spec = _spec(CONTINUOUS)
  policy = sac.SACPolicy(spec, AGENT, _config(updates_per_step=1 / 8,
                                              tau=0.3), seed=1)
  online = policy.critics.trainable_variables
  target = policy.target_critics.trainable_variables
  before = [v.numpy() for v in target]
  for o, t in zip(online, target):
    np.testing.assert_array_equal(o.numpy(), t.numpy())
  stats = policy.learn(random_batch(spec, 0))
  assert stats['updates'] == 1 and not stats['skipped']
  for o, t, b in zip(online, target, before):
    assert not np.allclose(o.numpy(), b)
    np.testing.assert_allclose(t.numpy(), 0.7 * b + 0.3 * o.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_temperature_rises_to_its_cap_below_the_target_entropy():
  spec = _spec(CONTINUOUS)
  policy = sac.SACPolicy(spec, AGENT, _config(target_entropy=50.0,
                                              alpha_learning_rate=0.01,
                                              max_log_alpha=0.05,
                                              updates_per_step=4), seed=0)
  assert policy.agent.log_alpha['continuous'].numpy() == 0.0
  log_alpha = policy.agent.log_alpha['continuous']
  policy.learn(random_batch(spec, 0))
  # The entropy is far below the target: 32 Adam steps of about 0.01 raise
  # log alpha, up to its cap. (The opposite direction is the sign test of
  # `sac_alpha_loss`.)
  assert log_alpha.numpy() == pytest.approx(0.05)


def test_mixed_actions_priors_and_prioritized_replay_learn():
  spec = _spec(MIXED)
  policy = sac.SACPolicy(spec, AGENT, _config(prior_actor='same_action',
                                              value_estimator='td_lambda',
                                              prioritized=True),
                         seed=0)
  before = [v.numpy() for v in policy.agent.trainable_variables]
  stats = policy.learn(random_batch(spec, 0))
  assert not stats['skipped']
  for name in ('loss/actor', 'loss/critic', 'alpha/discrete',
               'alpha/continuous', 'policy/regulariser'):
    assert np.isfinite(stats[name]), name
  after = policy.agent.trainable_variables
  assert all(not np.allclose(b, a.numpy()) for b, a in zip(before, after))
  # Prioritized replay: the sampled segments got their TD priorities.
  priorities = policy.buffer.priorities
  assert priorities.shape == (2, T - 2 + 1)
  assert np.any(priorities != 1.0)
  assert policy.replay_buffers() == {'transitions': policy.buffer}


def test_non_finite_rewards_skip_the_update_and_are_counted():
  spec = _spec(CONTINUOUS)
  policy = sac.SACPolicy(spec, AGENT, _config(), seed=0)
  batch = random_batch(spec, 0)
  batch.env_outputs.reward[:] = np.nan
  variables = (policy.agent.trainable_variables +
               policy.critics.trainable_variables +
               policy.target_critics.trainable_variables)
  before = [v.numpy() for v in variables]
  stats = policy.learn(batch)
  assert stats['skipped'] and stats['num_skipped_steps'] == stats['updates']
  assert policy.num_updates == 0
  for b, v in zip(before, variables):
    np.testing.assert_array_equal(b, v.numpy())


def test_xla_and_plain_updates_agree():
  spec = _spec(DISCRETE)  # Updates draw no random numbers.
  config = _config(updates_per_step=3 / 8)
  plain = sac.SACPolicy(spec, AGENT, config, seed=3)
  xla = sac.SACPolicy(spec, AGENT, config._replace(jit_compile=True), seed=3)
  a = plain.learn(random_batch(spec, 0))
  b = xla.learn(random_batch(spec, 0))
  assert a['updates'] == b['updates'] == 3
  np.testing.assert_allclose(a['loss/critic'], b['loss/critic'], rtol=1e-3)
  for u, v in zip(plain.agent.variables, xla.agent.variables):
    np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=1e-3, atol=1e-4)


def test_checkpoint_round_trip(tmp_path):
  spec = _spec(MIXED)
  policy = sac.SACPolicy(spec, AGENT, _config(), seed=0)
  policy.learn(random_batch(spec, 0))
  path = tf.train.Checkpoint(**policy.checkpointables()).save(
      str(tmp_path / 'ckpt'))
  restored = sac.SACPolicy(spec, AGENT, _config(), seed=5)
  status = tf.train.Checkpoint(**restored.checkpointables()).restore(path)
  status.assert_existing_objects_matched()
  assert restored.num_updates == policy.num_updates
  assert restored.num_env_frames == policy.num_env_frames
  for a, b in zip(tree.flatten(policy.checkpointables()),
                  tree.flatten(restored.checkpointables())):
    for u, v in zip(getattr(a, 'variables', [a]), getattr(b, 'variables',
                                                          [b])):
      np.testing.assert_array_equal(u.numpy(), v.numpy())
  np.testing.assert_array_equal(restored.get_rng_state()['rng'],
                                policy.get_rng_state()['rng'])
  assert restored.acting_checkpointables() == {'agent': restored.agent}
  # --init_from: only the chosen part is loaded into a fresh policy.
  fresh = sac.SACPolicy(spec, AGENT, _config(), seed=6)
  actor_before = [v.numpy() for v in fresh.agent.actor.variables]
  assert fresh.init_from(path, 'critic') == path
  for u, v in zip(fresh.critics.variables + fresh.target_critics.variables,
                  policy.critics.variables + policy.target_critics.variables):
    np.testing.assert_array_equal(u.numpy(), v.numpy())
  for u, v in zip(actor_before, fresh.agent.actor.variables):
    np.testing.assert_array_equal(u, v.numpy())
  with pytest.raises(ValueError, match='init scope'):
    fresh.init_from(path, 'actor')
