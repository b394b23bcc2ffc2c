"""Tests of clear.algorithms.ddpg.policy: the loss terms against numpy, dead
gradients, policy."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tree

from agents import testing
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.ddpg import policy as ddpg

T, B, N = 4, 3, 2
ACTIONS = collections.OrderedDict(
    force=types.ContinuousSpec((2,), -2.0, 2.0),
    torque=types.ContinuousSpec((), 0.0, 1.0))
SPEC = types.EnvSpec(
    collections.OrderedDict(vector=types.ArraySpec((3,), np.float32)),
    ACTIONS, name='test')
AGENT = policy_lib.AgentConfig('mlp', 16, False)


def random_batch(spec, seed, batch_size=2, length=T):
  """A time-major `[T + 1, B]` unroll batch of random valid data."""
  return testing.random_unroll(spec, (length + 1, batch_size),
                               np.random.default_rng(seed))


def _config(**overrides):
  kwargs = dict(batch_size=2, unroll_length=T, learning_starts=0,
                sample_batch_size=6, sample_length=2, replay_capacity=400,
                jit_compile=False, updates_per_step=1 / 8)
  kwargs.update(overrides)
  return ddpg.DDPGConfig(**kwargs)


def _loss_inputs(seed):
  rng = np.random.RandomState(seed)
  return dict(
      q_taken=tf.constant(rng.randn(N, T, B).astype(np.float32)),
      q_policy=tf.constant(rng.randn(N, T, B).astype(np.float32)),
      targets=tf.constant(rng.randn(T, B).astype(np.float32)),
      mask=(rng.rand(T, B) > 0.3).astype(np.float32),
      importance_weights=rng.uniform(0.2, 1, size=B).astype(np.float32))


def test_ddpg_loss_terms_match_numpy():
  inputs = _loss_inputs(0)
  terms = ddpg.ddpg_loss(**inputs)
  q_taken, q_policy = inputs['q_taken'].numpy(), inputs['q_policy'].numpy()
  g = inputs['targets'].numpy()
  np.testing.assert_allclose(terms.loss_actor.numpy(), -q_policy.min(0))
  np.testing.assert_allclose(
      terms.loss_value.numpy(),
      0.5 * ((g[None] - q_taken)**2).sum(0) * inputs['mask'] *
      inputs['importance_weights'], rtol=1e-5)
  np.testing.assert_allclose(terms.pred_value.numpy(), q_taken.mean(0),
                             rtol=1e-6)
  np.testing.assert_allclose(terms.target_value.numpy(), g)
  np.testing.assert_allclose(terms.td_error.numpy(), g - q_taken.mean(0),
                             rtol=1e-5, atol=1e-6)


def test_ddpg_loss_gradients_reach_only_their_own_inputs():
  inputs = _loss_inputs(1)
  watched = [inputs['q_taken'], inputs['q_policy'], inputs['targets']]
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(watched)
    terms = ddpg.ddpg_loss(**inputs)
  actor = tape.gradient(terms.loss_actor, watched)
  value = tape.gradient(terms.loss_value, watched)
  assert actor[0] is None and actor[1] is not None and actor[2] is None
  assert value[0] is not None and value[1] is None and value[2] is None
  for diagnostic in (terms.pred_value, terms.target_value, terms.td_error):
    assert all(g is None for g in tape.gradient(diagnostic, watched))
  with pytest.raises(ValueError, match='ddpg_loss'):
    ddpg.ddpg_loss(**{**inputs, 'q_policy': inputs['q_policy'][0]})


def test_discrete_actions_are_rejected_even_for_acting_copies():
  spec = SPEC._replace(action_spec=collections.OrderedDict(
      a=types.DiscreteSpec(3)))
  with pytest.raises(ValueError, match='DDPG needs continuous actions'):
    ddpg.DDPGPolicy(spec, AGENT)


@pytest.mark.parametrize('overrides,match', [
    (dict(exploration_noise=-0.1), 'exploration_noise'),
    (dict(actor_update_period=0), 'actor_update_period'),
    (dict(fixed_step_mul=False), 'dynamic step'),
    (dict(value_estimator='vtrace'), 'vtrace'),
])
def test_validate_config_names_the_bad_setting(overrides, match):
  with pytest.raises(ValueError, match=match):
    ddpg.validate_config(ddpg.DDPGConfig(**overrides), SPEC)


def test_act_structure_bounds_and_shipped_exploration_noise():
  policy = ddpg.DDPGPolicy(SPEC, AGENT, _config(exploration_noise=0.0),
                           seed=0)
  step = tree.map_structure(lambda x: x[0], random_batch(SPEC, 0, 64))
  output, state = policy.act(step.env_outputs, None, {})
  zero = policy_lib.zero_agent_output(SPEC, 64)
  assert tree.map_structure(lambda x: (x.shape, x.dtype), output) == (
      tree.map_structure(lambda x: (x.shape, x.dtype), zero))
  assert state == {}
  # Uniform until learning starts, then mu(s) plus the learner's noise.
  assert output.action['force'].std() > 0.9
  policy.agent.random_actions.assign(0.0)
  copy = ddpg.DDPGPolicy(SPEC, AGENT, seed=3)
  assert copy.agent.exploration_noise.numpy() == pytest.approx(0.1)
  copy.set_weights(policy.get_weights())
  assert copy.agent.exploration_noise.numpy() == 0.0
  first = copy.act(step.env_outputs, None, {})[0]
  second = copy.act(step.env_outputs, None, {})[0]
  tree.map_structure(np.testing.assert_array_equal, first, second)
  features = step.env_outputs.observation['vector']
  mu = np.tanh(policy.agent.actor(features).numpy())
  np.testing.assert_allclose(first.action['force'], 2.0 * mu[:, :2],
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(first.action['torque'], 0.5 * mu[:, 2] + 0.5,
                             rtol=1e-5, atol=1e-6)
  copy.agent.exploration_noise.assign(5.0)  # Clipped to the bounds.
  noisy = copy.act(step.env_outputs, None, {})[0]
  assert np.abs(noisy.action['force']).max() == 2.0
  assert 0.0 <= noisy.action['torque'].min() <= noisy.action[
      'torque'].max() <= 1.0


def test_td3_targets_and_delayed_actor_updates():
  policy = ddpg.DDPGPolicy(SPEC, AGENT, _config(
      num_critics=2, target_noise=0.2, actor_update_period=2, tau=0.2,
      target_update_period=2), seed=0)
  actor = policy.agent.actor.trainable_variables
  critics = policy.critics.trainable_variables
  online = list(critics) + list(actor)
  target = (list(policy.target_critics.trainable_variables) +
            list(policy.target_actor.trainable_variables))
  snapshot = lambda vs: [v.numpy() for v in vs]
  actor0, critics0, target0 = snapshot(actor), snapshot(critics), snapshot(
      target)
  assert policy.learn(random_batch(SPEC, 0))['updates'] == 1
  # Update 0: critics and actor learn; targets wait for period 2.
  assert all(not np.allclose(a, b.numpy()) for a, b in zip(actor0, actor))
  assert all(not np.allclose(a, b.numpy()) for a, b in zip(critics0,
                                                           critics))
  for a, b in zip(target0, target):
    np.testing.assert_array_equal(a, b.numpy())
  actor1 = snapshot(actor)
  stats = policy.learn(random_batch(SPEC, 1))
  assert not stats['skipped']
  # Update 1: the actor waits; targets move by tau towards the online nets.
  for a, b in zip(actor1, actor):
    np.testing.assert_array_equal(a, b.numpy())
  for t0, t, o in zip(target0, target, online):
    np.testing.assert_allclose(t.numpy(), 0.8 * t0 + 0.2 * o.numpy(),
                               rtol=1e-5, atol=1e-6)
  for name in ('loss/actor', 'loss/value', 'value/pred_mean',
               'value/target_mean', 'value/abs_td_error'):
    assert np.isfinite(stats[name]), name


def test_non_finite_updates_are_skipped_and_checkpoints_round_trip(tmp_path):
  policy = ddpg.DDPGPolicy(SPEC, AGENT, _config(prioritized=True), seed=0)
  policy.learn(random_batch(SPEC, 0))
  assert np.any(policy.buffer.priorities != 1.0)
  path = tf.train.Checkpoint(**policy.checkpointables()).save(
      str(tmp_path / 'ckpt'))
  assert {'agent', 'critics', 'target_critics', 'target_actor',
          'actor_optimizer', 'critic_optimizer', 'counters'} <= set(
              policy.checkpointables())
  batch = random_batch(SPEC, 1)
  batch.env_outputs.observation['vector'][:] = np.inf
  policy.buffer = type(policy.buffer)(10, 'fifo', slots_per_item=T - 1,
                                      prioritized=True)
  before = [v.numpy() for v in policy.agent.trainable_variables]
  stats = policy.learn(batch)
  assert stats['skipped'] and stats['num_skipped_steps'] == 1
  for b, v in zip(before, policy.agent.trainable_variables):
    np.testing.assert_array_equal(b, v.numpy())
  restored = ddpg.DDPGPolicy(SPEC, AGENT, _config(prioritized=True), seed=9)
  tf.train.Checkpoint(**restored.checkpointables()).restore(
      path).assert_existing_objects_matched()
  assert restored.num_updates == 1 and restored.num_env_frames == 2 * T
  for u, v in zip(restored.target_actor.variables,
                  policy.target_actor.variables):
    np.testing.assert_array_equal(u.numpy(), v.numpy())
