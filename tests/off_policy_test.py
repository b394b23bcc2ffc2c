"""Tests of the machinery SAC and DDPG share, clear.algorithms.off_policy:
networks (critics, actions, target networks), losses (Q targets, critic
loss, priorities), segments and config."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tree

from clear import types
from clear.algorithms.ddpg import policy as ddpg
from clear.algorithms.off_policy import config as off_policy_config
from clear.algorithms.off_policy import losses as off_policy_losses
from clear.algorithms.off_policy import networks as off_policy_networks
from clear.algorithms.off_policy import segments as off_policy_replay
from clear.algorithms.sac import policy as sac
from clear.replay import buffer as replay

T, B, N = 5, 4, 3


def _spec(action_spec, observation=((3,),)):
  return types.EnvSpec(
      collections.OrderedDict(
          (f'o{i}', types.ArraySpec(shape, np.float32))
          for i, shape in enumerate(observation)),
      collections.OrderedDict(action_spec))


# --- Networks -----------------------------------------------------------------


def test_critic_ensemble_is_n_independent_mlps():
  critics = off_policy_networks.CriticEnsemble(N, 5, [7, 6], 2,
                                               np.random.default_rng(0))
  x = np.random.RandomState(1).randn(9, 5).astype(np.float32)
  out = critics(x).numpy()
  assert out.shape == (N, 9, 2)
  weights = [v.numpy() for v in critics._weights]
  biases = [v.numpy() for v in critics._biases]
  for i in range(N):
    h = x.astype(np.float64)
    for layer, (w, b) in enumerate(zip(weights, biases)):
      h = h @ w[i] + b[i]
      if layer < len(weights) - 1:
        h = np.maximum(h, 0.0)
    np.testing.assert_allclose(out[i], h, rtol=1e-5, atol=1e-5)
  # Per-critic inputs [N, M, in] give the same as shared ones.
  np.testing.assert_allclose(critics(np.stack([x] * N)).numpy(), out,
                             rtol=1e-5, atol=1e-6)
  # Critics start different (own seeds) and are seeded.
  assert not np.allclose(out[0], out[1])
  again = off_policy_networks.CriticEnsemble(N, 5, [7, 6], 2,
                                             np.random.default_rng(0))
  np.testing.assert_array_equal(again(x).numpy(), out)
  with pytest.raises(ValueError, match='CriticEnsemble'):
    critics(x[0])


def test_action_layout_maps_heads_to_the_unit_box_and_back():
  layout = off_policy_networks.ActionLayout(collections.OrderedDict(
      a=types.ContinuousSpec((2,), -2.0, 2.0),
      b=types.DiscreteSpec(4),
      c=types.ContinuousSpec((), 0.0, 10.0)))
  assert layout.discrete_key == 'b' and layout.num_discrete == 4
  assert layout.continuous_size == 3
  np.testing.assert_allclose(layout.log_half_range,
                             2 * np.log(2.0) + np.log(5.0))
  actions = {'a': np.array([[-2.0, 1.0], [0.5, 2.0]], np.float32),
             'c': np.array([0.0, 7.5], np.float32)}
  unit = layout.env_to_unit(actions).numpy()
  np.testing.assert_allclose(unit, [[-1.0, 0.5, -1.0], [0.25, 1.0, 0.5]])
  back = layout.unit_to_env(unit)
  np.testing.assert_allclose(back['a'].numpy(), actions['a'], rtol=1e-6)
  np.testing.assert_allclose(back['c'].numpy(), actions['c'], rtol=1e-6)
  assert back['c'].shape == (2,)
  # Round-off past the unit box never leaves the bounds.
  out = layout.unit_to_env(np.full([1, 3], 1.0000001, np.float32))
  assert out['a'].numpy().max() <= 2.0 and out['c'].numpy().max() <= 10.0


def test_action_layout_rejects_two_discrete_heads():
  with pytest.raises(ValueError, match='at most one discrete.*step_mul'):
    off_policy_networks.ActionLayout({
        'a': types.DiscreteSpec(2),
        types.STEP_MUL_KEY: types.DiscreteSpec(4)})


def test_image_observations_are_rejected():
  with pytest.raises(ValueError, match='rank-0/1'):
    off_policy_networks.observation_keys(_spec({'a': types.DiscreteSpec(2)},
                                      observation=((4, 4, 1),)))


# --- Target networks ----------------------------------------------------------


def _variables(seed, shapes=((3, 2), (2,))):
  rng = np.random.RandomState(seed)
  return [tf.Variable(rng.randn(*s).astype(np.float32)) for s in shapes]


@pytest.mark.parametrize('compiled', [False, True])
def test_soft_updates_follow_tau_and_period(compiled):
  online, target = _variables(0), _variables(1)
  updater = off_policy_networks.TargetUpdater(online, target, tau=0.1,
                                              period=3)
  # Construction copies the online weights.
  for o, t in zip(online, target):
    np.testing.assert_array_equal(o.numpy(), t.numpy())
  call = tf.function(updater) if compiled else updater
  expected = [t.numpy().astype(np.float64) for t in target]
  for step in range(1, 8):
    for v in online:
      v.assign_add(tf.ones_like(v))  # The online weights keep moving.
    moved = bool(call())
    assert moved == (step % 3 == 0)
    if moved:
      expected = [0.9 * e + 0.1 * o.numpy() for e, o in zip(expected, online)]
    for e, t in zip(expected, target):
      np.testing.assert_allclose(t.numpy(), e, rtol=1e-5)
  assert int(updater.num_calls.numpy()) == 7


def test_tau_one_is_a_hard_copy():
  online, target = _variables(0), _variables(1)
  updater = off_policy_networks.TargetUpdater(online, target, tau=1.0,
                                              period=1)
  for v in online:
    v.assign(tf.random.stateless_normal(v.shape, [1, 2]))
  updater()
  for o, t in zip(online, target):
    np.testing.assert_array_equal(o.numpy(), t.numpy())


@pytest.mark.parametrize('kwargs,match', [
    (dict(tau=0.0, period=1), 'tau'), (dict(tau=1.5, period=1), 'tau'),
    (dict(tau=0.1, period=0), 'period')])
def test_target_updater_rejects_bad_settings(kwargs, match):
  with pytest.raises(ValueError, match=match):
    off_policy_networks.TargetUpdater(_variables(0), _variables(1), **kwargs)


def test_target_updater_rejects_mismatched_variables():
  with pytest.raises(ValueError, match='does not match'):
    off_policy_networks.TargetUpdater(
        _variables(0), _variables(1, ((2, 3), (2,))), 0.5, 1)


# --- Q targets and critic loss ------------------------------------------------


def _numpy_q_targets(rewards, discounts, truncated, values, bootstrap,
                     estimator, lam):
  """Slow per-column loops, written from the formulas."""
  t_len, b_len = rewards.shape
  targets = np.zeros([t_len, b_len])
  for b in range(b_len):
    nxt = lambda t: values[t + 1, b] if t + 1 < t_len else bootstrap[b]
    later = bootstrap[b]  # G_{t+1}, starting from G_T = V(x_T).
    for t in reversed(range(t_len)):
      if truncated[t, b]:
        g = values[t, b]  # Stops here, with V(x_t).
      elif estimator == 'td0':
        g = rewards[t, b] + discounts[t, b] * nxt(t)
      elif estimator == 'td1':
        g = rewards[t, b] + discounts[t, b] * later
      else:
        g = rewards[t, b] + discounts[t, b] * (
            (1 - lam) * nxt(t) + lam * later)
      targets[t, b] = g
      later = g
  return targets


def _q_inputs(seed):
  rng = np.random.RandomState(seed)
  terminated = rng.rand(T, B) < 0.2
  truncated = (rng.rand(T, B) < 0.2) & ~terminated
  return dict(
      rewards=rng.randn(T, B).astype(np.float32),
      discounts=(0.9 * ~terminated).astype(np.float32),
      truncated=truncated,
      values=rng.randn(T, B).astype(np.float32),
      bootstrap_value=rng.randn(B).astype(np.float32))


@pytest.mark.parametrize('estimator,lam', [('td0', 0.0), ('td1', 1.0),
                                           ('td_lambda', 0.7), ('gae', 0.7)])
@pytest.mark.parametrize('compiled', [False, True])
def test_q_targets_match_numpy(estimator, lam, compiled):
  inputs = _q_inputs(3)
  fn = lambda **kw: off_policy_losses.q_targets(estimator=estimator,
                                                lambda_=lam, **kw)
  if compiled:
    fn = tf.function(fn)
  out = fn(**inputs)
  numpy_estimator = 'td_lambda' if estimator == 'gae' else estimator
  expected = _numpy_q_targets(inputs['rewards'], inputs['discounts'],
                              inputs['truncated'], inputs['values'],
                              inputs['bootstrap_value'], numpy_estimator,
                              lam)
  np.testing.assert_allclose(out.targets.numpy(), expected, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_array_equal(out.mask.numpy(), ~inputs['truncated'])


def test_q_targets_never_bootstrap_across_a_termination():
  # One column: reward 1 each step, termination at t = 1, values 100.
  out = off_policy_losses.q_targets(np.ones([3, 1], np.float32),
                             np.array([[0.5], [0.0], [0.5]], np.float32),
                             np.zeros([3, 1], bool),
                             np.full([3, 1], 100.0, np.float32),
                             np.full([1], 100.0, np.float32), 'td1')
  np.testing.assert_allclose(out.targets.numpy()[:, 0], [1.5, 1.0, 51.0])


def test_q_targets_have_no_gradient():
  inputs = {k: tf.constant(v) for k, v in _q_inputs(0).items()}
  with tf.GradientTape() as tape:
    tape.watch([inputs['values'], inputs['bootstrap_value'],
                inputs['rewards']])
    out = off_policy_losses.q_targets(estimator='td_lambda', **inputs)
  grads = tape.gradient(out.targets, [inputs['values'],
                                      inputs['bootstrap_value'],
                                      inputs['rewards']])
  assert all(g is None for g in grads)


@pytest.mark.parametrize('bad,match', [
    ('rewards', 'rewards must have rank 2'),
    ('bootstrap_value', 'bootstrap_value must have rank 1')])
def test_q_targets_check_ranks(bad, match):
  inputs = _q_inputs(0)
  inputs[bad] = inputs[bad][None]
  with pytest.raises(ValueError, match=match):
    off_policy_losses.q_targets(**inputs)


def test_q_targets_reject_vtrace():
  with pytest.raises(ValueError, match='estimator'):
    off_policy_losses.q_targets(estimator='vtrace', **_q_inputs(0))


def test_critic_ensemble_loss_matches_numpy_and_stops_target_gradients():
  rng = np.random.RandomState(0)
  q = tf.constant(rng.randn(N, T, B).astype(np.float32))
  targets = tf.constant(rng.randn(T, B).astype(np.float32))
  mask = (rng.rand(T, B) > 0.3).astype(np.float32)
  weights = rng.uniform(0.2, 1.0, size=B).astype(np.float32)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch([q, targets])
    loss, extra = off_policy_losses.critic_ensemble_loss(q, targets, mask,
                                                         weights)
    total = tf.reduce_sum(loss)
  expected = 0.5 * ((targets.numpy()[None] - q.numpy())**2).sum(0)
  np.testing.assert_allclose(loss.numpy(), expected * mask * weights[None],
                             rtol=1e-5)
  np.testing.assert_allclose(extra.squared_errors.numpy(),
                             ((targets.numpy()[None] - q.numpy())**2).mean(0),
                             rtol=1e-5)
  assert tape.gradient(loss, targets) is None
  # d loss / d q_i = -(G - q_i) * mask * w.
  np.testing.assert_allclose(
      tape.gradient(total, q).numpy(),
      -(targets.numpy()[None] - q.numpy()) * mask * weights, rtol=1e-5)
  with pytest.raises(ValueError, match='critic_ensemble_loss'):
    off_policy_losses.critic_ensemble_loss(q[0], targets, mask)


def test_segment_priorities_are_the_rms_of_counted_errors():
  errors = np.array([[1.0, 4.0], [9.0, 16.0], [4.0, 1.0]], np.float32)
  mask = np.array([[1, 1], [1, 0], [0, 0]], np.float32)
  np.testing.assert_allclose(
      off_policy_losses.segment_priorities(errors, mask).numpy(),
      [np.sqrt(5.0), 2.0], rtol=1e-6)
  # A segment with nothing counted gets 0 (the buffer adds its floor).
  np.testing.assert_allclose(
      off_policy_losses.segment_priorities(errors,
                                           np.zeros_like(mask)).numpy(), 0)


@pytest.mark.parametrize('estimator,lam', [('td0', 0.0), ('td_lambda', 0.7)])
def test_next_state_targets_take_start_values_from_the_transition_before(
    estimator, lam):
  inputs = _q_inputs(5)
  next_values = np.random.RandomState(6).randn(T, B).astype(np.float32)
  out = off_policy_losses.next_state_targets(
      inputs['rewards'], inputs['discounts'], inputs['truncated'],
      next_values, estimator, lam)
  # V(x_t) = V(x_{t+1}) of transition t - 1; x_0's only enters a truncated
  # first transition, whose target is masked out.
  values = np.concatenate([np.zeros([1, B], np.float32), next_values[:-1]])
  expected = _numpy_q_targets(inputs['rewards'], inputs['discounts'],
                              inputs['truncated'], values, next_values[-1],
                              estimator, lam)
  np.testing.assert_allclose(out.targets.numpy(), expected, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_array_equal(out.mask.numpy(),
                                1.0 - inputs['truncated'])
  with pytest.raises(ValueError, match='next_state_targets: next_values'):
    off_policy_losses.next_state_targets(
        inputs['rewards'], inputs['discounts'], inputs['truncated'],
        next_values[0])


def test_masked_mean_counts_only_unmasked_entries():
  values = np.array([[1.0, 2.0], [3.0, 10.0]], np.float32)
  mask = np.array([[1.0, 0.0], [1.0, 0.0]], np.float32)
  assert off_policy_losses.masked_mean(values, mask).numpy() == 2.0
  assert off_policy_losses.masked_mean(values, 0 * mask).numpy() == 0.0


# --- Segments -----------------------------------------------------------------


def _unroll(length, seed, num_actions=3):
  """One stored unroll `[length + 1]` with a termination and a truncation."""
  rng = np.random.RandomState(seed)
  done = np.zeros([length + 1], bool)
  truncated = np.zeros([length + 1], bool)
  done[[3, 6]] = True
  truncated[6] = True
  return types.Unroll(
      agent_state={},
      env_outputs=types.StepOutput(
          reward=np.arange(length + 1, dtype=np.float32) + 100 * seed,
          info=types.EpisodeInfo(np.zeros([length + 1], np.float32),
                                 np.zeros([length + 1], np.int32),
                                 np.zeros([length + 1], np.int32)),
          done=done, truncated=truncated,
          observation={'o0': rng.randn(length + 1, 3).astype(np.float32)}),
      agent_outputs=types.AgentOutput(
          action={'a': rng.randint(num_actions, size=length + 1).astype(
              np.int32)},
          logits={'a': np.zeros([length + 1, num_actions], np.float32)},
          baseline=np.zeros([length + 1], np.float32)))


def test_transitions_line_up_actions_rewards_and_episode_ends():
  item = _unroll(8, 0)
  segments = off_policy_replay.segments_from_unrolls(
      tree.map_structure(lambda x: np.stack([x, x]), item))
  tr = off_policy_replay.transitions(segments, discounting=0.9,
                                     reward_scaling=2.0)
  # Time-major: observations [9, 2], transitions [8, 2].
  assert tr.first.shape == (9, 2) and tr.reward.shape == (8, 2)
  # Transition t: action of agent_outputs[t + 1], reward of env_outputs[t +
  # 1] (scaled), discount 0 only where env_outputs[t + 1] terminated.
  np.testing.assert_array_equal(tr.action['a'].numpy()[:, 0],
                                item.agent_outputs.action['a'][1:])
  np.testing.assert_array_equal(tr.prev_action['a'].numpy()[:, 0],
                                item.agent_outputs.action['a'])
  np.testing.assert_allclose(tr.reward.numpy()[:, 0], 2.0 * np.arange(1, 9))
  expected_discount = np.full([8], 0.9, np.float32)
  expected_discount[2] = 0.0  # env_outputs[3] terminated.
  np.testing.assert_allclose(tr.discount.numpy()[:, 0], expected_discount)
  np.testing.assert_array_equal(tr.truncated.numpy()[:, 0],
                                [0, 0, 0, 0, 0, 1, 0, 0])  # env_outputs[6].
  np.testing.assert_array_equal(tr.first.numpy()[:, 0], item.env_outputs.done)
  np.testing.assert_allclose(tr.observation['o0'].numpy()[:, 1],
                             item.env_outputs.observation['o0'])


def test_sample_segments_cut_windows_of_stored_unrolls():
  length, window = 8, 3
  buffer = replay.ReplayBuffer(4, 'fifo', seed=0,
                               slots_per_item=length - window + 1)
  items = [_unroll(length, seed) for seed in range(3)]
  for item in items:
    buffer.insert(item)
  segments, draw = off_policy_replay.sample_segments(buffer, 50, window)
  assert segments.reward.shape == (50, window + 1)
  assert draw.slots.max() <= length - window
  for row in range(50):
    item, start = items[draw.indices[row]], draw.slots[row]
    np.testing.assert_array_equal(
        segments.reward[row],
        item.env_outputs.reward[start:start + window + 1])
    np.testing.assert_array_equal(
        segments.action['a'][row],
        item.agent_outputs.action['a'][start:start + window + 1])
  assert set(draw.slots) == set(range(length - window + 1))


# --- Config checks ------------------------------------------------------------


class _Config:
  """A duck-typed config with every field `validate_common` reads."""

  def __init__(self, **overrides):
    self.__dict__.update(dict(
        batch_size=1, num_replay=0, unroll_length=8,
        total_environment_frames=100, fixed_step_mul=True, step_mul=1,
        discounting=0.99, actor_learning_rate=1e-3,
        critic_learning_rate=1e-3, tau=0.005, target_update_period=1,
        num_critics=2, value_estimator='td0', td_lambda=0.9,
        sample_length=1, replay_capacity=1000, priority_exponent=0.6,
        importance_exponent=0.4, learning_starts=0, updates_per_step=1.0,
        sample_batch_size=32, clip_grad_norm=0.0, reward_scaling=1.0))
    self.__dict__.update(overrides)


@pytest.mark.parametrize('overrides,match', [
    (dict(num_replay=2), 'num_replay must be 0'),
    (dict(fixed_step_mul=False), 'dynamic step multipliers'),
    (dict(value_estimator='vtrace'), 'vtrace is not available'),
    (dict(value_estimator='td2'), 'value_estimator must be one of'),
    (dict(sample_length=9), 'sample_length'),
    (dict(replay_capacity=4), 'replay_capacity'),
    (dict(tau=0.0), 'tau'),
    (dict(num_critics=0), 'num_critics'),
    (dict(updates_per_step=0.0), 'updates_per_step'),
    (dict(importance_exponent=1.5), 'importance_exponent'),
    (dict(td_lambda=-0.1), 'td_lambda'),
    (dict(reward_scaling=float('nan')), 'reward_scaling'),
])
def test_validate_common_names_the_bad_setting(overrides, match):
  with pytest.raises(ValueError, match=match):
    off_policy_config.validate_common(_Config(**overrides), None, 'SAC')


def test_validate_common_rejects_a_step_mul_head():
  spec = _spec({'a': types.ContinuousSpec((1,), -1.0, 1.0),
                types.STEP_MUL_KEY: types.DiscreteSpec(4)})
  with pytest.raises(ValueError, match='dynamic step multipliers'):
    off_policy_config.validate_common(_Config(), spec, 'SAC')


# --- Shared config fields -----------------------------------------------------


SAC_OWN = ('alpha_learning_rate', 'target_entropy', 'initial_alpha',
           'max_log_alpha', 'prior_actor', 'prior_kl_weight',
           'target_kld_per_dim')
DDPG_OWN = ('exploration_noise', 'target_noise', 'target_noise_clip',
            'actor_update_period')


@pytest.mark.parametrize('config,own,num_critics', [
    (sac.SACConfig, SAC_OWN, 2), (ddpg.DDPGConfig, DDPG_OWN, 1)])
def test_each_config_declares_every_shared_setting_once(config, own,
                                                        num_critics):
  shared = [s.name for s in off_policy_config.SHARED_SETTINGS]
  assert [f for f in config._fields if f not in own] == shared
  # The algorithm's own fields sit after the critics' learning rate (SAC's
  # temperature rate) and after num_critics.
  at = shared.index('critic_learning_rate') + 1
  after = shared.index('num_critics') + 1
  rates = [f for f in own if f.endswith('learning_rate')]
  others = [f for f in own if f not in rates]
  assert list(config._fields) == (shared[:at] + rates + shared[at:after] +
                                  others + shared[after:])
  assert len(set(config._fields)) == len(config._fields)
  for setting in config.SETTINGS:
    assert setting.help, setting.name
    if setting.name in off_policy_config.SHARED and (
        setting.name != 'num_critics'):
      assert setting == off_policy_config.SHARED[setting.name]
  assert config._field_defaults == {s.name: s.default
                                    for s in config.SETTINGS}
  assert config().num_critics == num_critics
  module = config.__name__[:-len('Config')].lower()
  assert config.__module__ == f'clear.algorithms.{module}.policy'
  assert 'Attributes:' in config.__doc__ and 'tau: how far' in config.__doc__


def test_shared_names_an_unknown_setting_with_a_key_error():
  assert off_policy_config.shared('tau', 'batch_size') == (
      off_policy_config.SHARED['tau'], off_policy_config.SHARED['batch_size'])
  with pytest.raises(KeyError):
    off_policy_config.shared('nope')
