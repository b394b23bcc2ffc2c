"""Tests for clear.algorithms.ppg.policy: the losses, the value normaliser and
PPGPolicy."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tree

from agents import testing
from agents import torsos
from clear import checkpoint as checkpoint_lib
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.ppg import losses as ppg_losses
from clear.algorithms.ppg import networks as ppg_networks
from clear.algorithms.ppg import policy as ppg
from clear.ops import value_estimators
from clear.runtime import run_config
from clear.runtime import run_loop
from tests import event_files
import envs


# --- Slow numpy references ----------------------------------------------------


def _log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(axis=-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _slow_ppo(logits, old_logits, actions, advantages, clip_ratio,
              entropy_cost):
  """Per sample, head by head, written from the PPO paper's eq. (7)."""
  num_samples = len(advantages)
  loss = np.zeros(num_samples)
  for i in range(num_samples):
    log_ratio, entropy = 0.0, 0.0
    for key in logits:
      new = _log_softmax(logits[key][i])
      old = _log_softmax(old_logits[key][i])
      log_ratio += new[actions[key][i]] - old[actions[key][i]]
      entropy -= np.sum(np.exp(new) * new)
    ratio = np.exp(log_ratio)
    clipped = min(max(ratio, 1 - clip_ratio), 1 + clip_ratio)
    loss[i] = (-min(ratio * advantages[i], clipped * advantages[i]) -
               entropy_cost * entropy)
  return loss


def _slow_value_loss(values, old_values, returns, value_clip):
  loss = np.zeros(len(values))
  for i, (v, old, g) in enumerate(zip(values, old_values, returns)):
    loss[i] = 0.5 * (v - g)**2
    if value_clip > 0:
      clipped = old + min(max(v - old, -value_clip), value_clip)
      loss[i] = max(loss[i], 0.5 * (clipped - g)**2)
  return loss


def _slow_aux(logits, old_logits, aux_values, returns, bc_weight):
  loss = 0.5 * (np.asarray(aux_values, np.float64) - returns)**2
  for key in logits:
    old = _log_softmax(old_logits[key])
    new = _log_softmax(logits[key])
    loss += bc_weight * np.sum(np.exp(old) * (old - new), axis=-1)
  return loss


def _random_heads(rng, num_samples, sizes=(('move', 3), ('fire', 2))):
  logits = {k: rng.normal(size=(num_samples, n)).astype(np.float32)
            for k, n in sizes}
  old_logits = {k: (v + 0.3 * rng.normal(size=v.shape)).astype(np.float32)
                for k, v in logits.items()}
  actions = {k: rng.integers(0, n, num_samples).astype(np.int32)
             for k, n in sizes}
  return logits, old_logits, actions


def _assert_close(actual, expected, tol=1e-5):
  np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


# --- Losses -------------------------------------------------------------------


@pytest.mark.parametrize('clip_ratio,entropy_cost', [(0.2, 0.0), (0.1, 0.01),
                                                     (0.5, 0.3)])
def test_ppo_surrogate_loss_matches_slow_reference(clip_ratio, entropy_cost):
  rng = np.random.default_rng(0)
  logits, old_logits, actions = _random_heads(rng, 12)
  advantages = rng.normal(size=12).astype(np.float32)
  loss, extra = ppg_losses.ppo_surrogate_loss(
      logits, old_logits, actions, advantages, clip_ratio, entropy_cost)
  assert isinstance(extra, ppg_losses.PPOSurrogateExtra)
  _assert_close(loss, _slow_ppo(logits, old_logits, actions, advantages,
                                clip_ratio, entropy_cost))
  _assert_close(extra.policy_loss, _slow_ppo(
      logits, old_logits, actions, advantages, clip_ratio, 0.0))
  ratio = extra.ratio.numpy()
  _assert_close(extra.clipped, np.abs(ratio - 1) > clip_ratio)
  _assert_close(extra.approx_kl, ratio - 1 - np.log(ratio))
  assert np.all(extra.approx_kl.numpy() >= 0)


def test_ppo_surrogate_loss_single_head_and_masked_choices():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(6, 4)).astype(np.float32)
  logits[:, 3] = -1e9  # Masked in both policies: adds nothing anywhere.
  old_logits = logits + 0.2
  actions = rng.integers(0, 3, 6).astype(np.int32)
  advantages = rng.normal(size=6).astype(np.float32)
  loss, extra = ppg_losses.ppo_surrogate_loss(logits, old_logits, actions,
                                              advantages, 0.2, 0.01)
  expected = _slow_ppo({'a': logits}, {'a': old_logits}, {'a': actions},
                       advantages, 0.2, 0.01)
  _assert_close(loss, expected)
  assert np.all(np.isfinite(extra.entropy))


@pytest.mark.parametrize('value_clip', [0.0, 0.1, 1.0])
def test_clipped_value_loss_matches_slow_reference(value_clip):
  rng = np.random.default_rng(2)
  values, old_values, returns = rng.normal(size=(3, 20)).astype(np.float32)
  loss, extra = ppg_losses.clipped_value_loss(values, old_values, returns,
                                              value_clip)
  expected = _slow_value_loss(values, old_values, returns, value_clip)
  _assert_close(loss, expected)
  _assert_close(extra.unclipped, 0.5 * (values - returns)**2)
  if value_clip == 0:
    assert not np.any(extra.clipped)
  else:
    _assert_close(extra.clipped, expected > extra.unclipped.numpy() + 1e-7)
    assert np.any(extra.clipped)
  # A tensor radius gives the same numbers.
  tensor_loss, _ = ppg_losses.clipped_value_loss(values, old_values, returns,
                                                 tf.constant(value_clip))
  _assert_close(tensor_loss, expected)


@pytest.mark.parametrize('bc_weight', [0.0, 1.0, 2.5])
def test_ppg_aux_loss_matches_slow_reference(bc_weight):
  rng = np.random.default_rng(3)
  logits, old_logits, _ = _random_heads(rng, 9)
  aux_values, returns = rng.normal(size=(2, 9)).astype(np.float32)
  loss, extra = ppg_losses.ppg_aux_loss(logits, old_logits, aux_values,
                                        returns, bc_weight)
  _assert_close(loss, _slow_aux(logits, old_logits, aux_values, returns,
                                bc_weight))
  _assert_close(extra.aux_value_loss, 0.5 * (aux_values - returns)**2)
  _assert_close(extra.bc_kl, _slow_aux(logits, old_logits, returns, returns,
                                       1.0))
  # KL of a policy with itself is zero.
  _, same = ppg_losses.ppg_aux_loss(logits, logits, aux_values, returns,
                                    bc_weight)
  _assert_close(same.bc_kl, np.zeros(9))


def test_losses_under_tf_function_with_unknown_batch():
  rng = np.random.default_rng(4)
  spec = tf.TensorSpec([None], tf.float32)
  logit_spec = {'move': tf.TensorSpec([None, 3], tf.float32),
                'fire': tf.TensorSpec([None, 2], tf.float32)}
  action_spec = {'move': tf.TensorSpec([None], tf.int32),
                 'fire': tf.TensorSpec([None], tf.int32)}

  @tf.function(input_signature=[logit_spec, logit_spec, action_spec, spec])
  def compiled(logits, old_logits, actions, values):
    ppo, _ = ppg_losses.ppo_surrogate_loss(logits, old_logits, actions,
                                           values, 0.2, 0.01)
    value, _ = ppg_losses.clipped_value_loss(values, values * 0.5,
                                             values * 2, 0.3)
    aux, _ = ppg_losses.ppg_aux_loss(logits, old_logits, values, values * 2,
                                     1.0)
    return ppo, value, aux

  for num_samples in (1, 7):
    logits, old_logits, actions = _random_heads(rng, num_samples)
    values = rng.normal(size=num_samples).astype(np.float32)
    ppo, value, aux = compiled(logits, old_logits, actions, values)
    _assert_close(ppo, _slow_ppo(logits, old_logits, actions, values, 0.2,
                                 0.01))
    _assert_close(value, _slow_value_loss(values, values * 0.5, values * 2,
                                          0.3))
    _assert_close(aux, _slow_aux(logits, old_logits, values, values * 2,
                                 1.0))


def test_dead_gradients():
  rng = np.random.default_rng(5)
  logits, old_logits, actions = _random_heads(rng, 8)
  logits, old_logits = (tree.map_structure(tf.constant, x)
                        for x in (logits, old_logits))
  values, old_values, returns, advantages = (
      tf.constant(x) for x in rng.normal(size=(4, 8)).astype(np.float32))
  sources = {'logits': logits, 'old_logits': old_logits, 'values': values,
             'old_values': old_values, 'returns': returns,
             'advantages': advantages}
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(tree.flatten(sources))
    ppo, _ = ppg_losses.ppo_surrogate_loss(logits, old_logits, actions,
                                           advantages, 0.2, 0.01)
    value, _ = ppg_losses.clipped_value_loss(values, old_values, returns, 0.2)
    aux, _ = ppg_losses.ppg_aux_loss(logits, old_logits, values, returns, 1.0)
    ppo, value, aux = (tf.reduce_sum(x) for x in (ppo, value, aux))

  def receivers(loss):
    """The sources that receive a (nonzero) gradient from `loss`."""
    found = tape.gradient(loss, sources)
    return {name for name, grads in found.items()
            if any(g is not None and np.any(g.numpy() != 0)
                   for g in tree.flatten(grads))}

  assert receivers(ppo) == {'logits'}
  assert receivers(value) == {'values'}
  assert receivers(aux) == {'logits', 'values'}


@pytest.mark.parametrize('fn,args,message', [
    ('ppo', {'advantages': np.zeros([4, 1])}, 'ppo_surrogate_loss: advantages'),
    ('ppo', {'actions': np.zeros([4, 1], np.int32)},
     'ppo_surrogate_loss: actions'),
    ('ppo', {'logits': np.zeros([4], np.float32)},
     'ppo_surrogate_loss: logits'),
    ('ppo', {'old_logits': {'a': np.zeros([4, 2], np.float32)}},
     'ppo_surrogate_loss: .*same nest structure'),
    ('value', {'values': np.zeros([4, 1], np.float32)},
     'clipped_value_loss: values'),
    ('value', {'returns': np.zeros([], np.float32)},
     'clipped_value_loss: returns'),
    ('aux', {'aux_values': np.zeros([4, 1], np.float32)},
     'ppg_aux_loss: aux_values'),
    ('aux', {'old_logits': np.zeros([4, 2, 1], np.float32)},
     'ppg_aux_loss: old_logits'),
])
def test_losses_reject_bad_ranks(fn, args, message):
  base = {'logits': np.zeros([4, 2], np.float32),
          'old_logits': np.zeros([4, 2], np.float32),
          'actions': np.zeros([4], np.int32),
          'advantages': np.zeros([4], np.float32),
          'values': np.zeros([4], np.float32),
          'old_values': np.zeros([4], np.float32),
          'returns': np.zeros([4], np.float32),
          'aux_values': np.zeros([4], np.float32)}
  base.update(args)
  with pytest.raises(ValueError, match=message):
    if fn == 'ppo':
      ppg_losses.ppo_surrogate_loss(base['logits'], base['old_logits'],
                                    base['actions'], base['advantages'], 0.2)
    elif fn == 'value':
      ppg_losses.clipped_value_loss(base['values'], base['old_values'],
                                    base['returns'], 0.2)
    else:
      ppg_losses.ppg_aux_loss(base['logits'], base['old_logits'],
                              base['aux_values'], base['returns'], 1.0)


# --- Value normaliser ---------------------------------------------------------


def test_value_normalizer_tracks_all_values_seen():
  normalizer = ppg_networks.ValueNormalizer()
  _assert_close(normalizer.normalize(tf.constant([3.0])), [3.0])
  rng = np.random.default_rng(6)
  chunks = [rng.normal(5.0, 3.0, size=n).astype(np.float32)
            for n in (1, 10, 37, 4)]
  for chunk in chunks:
    normalizer.update(chunk)
  everything = np.concatenate(chunks)
  _assert_close(normalizer.mean, everything.mean(), tol=1e-4)
  _assert_close(normalizer.variance, everything.var(), tol=1e-4)
  assert normalizer.count.numpy() == len(everything)
  x = tf.constant(rng.normal(size=5).astype(np.float32))
  _assert_close(normalizer.denormalize(normalizer.normalize(x)), x)
  _assert_close(normalizer.normalize(x),
                (x - everything.mean()) / everything.std(), tol=1e-4)


def test_value_normalizer_is_checkpointable(tmp_path):
  normalizer = ppg_networks.ValueNormalizer()
  normalizer.update(np.array([1.0, 2.0, 6.0], np.float32))
  path = tf.train.Checkpoint(n=normalizer).save(str(tmp_path / 'ckpt'))
  restored = ppg_networks.ValueNormalizer()
  tf.train.Checkpoint(n=restored).restore(path).assert_consumed()
  for name in ('mean', 'variance', 'count'):
    assert getattr(restored, name).numpy() == getattr(normalizer,
                                                      name).numpy()


# --- Config -------------------------------------------------------------------


@pytest.mark.parametrize('changes,message', [
    ({'num_replay': 2}, 'num_replay must be 0'),
    ({'batch_size': 0}, 'batch_size must be >= 1'),
    ({'aux_freq': 0}, 'aux_freq must be >= 1'),
    ({'num_minibatches': 10_000}, 'num_minibatches=10000 exceeds'),
    ({'aux_num_minibatches': 10**6}, 'aux_num_minibatches=1000000 exceeds'),
    ({'value_estimator': 'td2'}, 'value_estimator must be one of'),
    ({'gae_lambda': 1.5}, r'gae_lambda must be in \[0, 1\]'),
    ({'discounting': -0.1}, r'discounting must be in \[0, 1\]'),
    ({'clip_ratio': 0.0}, 'clip_ratio must be > 0'),
    ({'value_clip': -1.0}, 'value_clip must be >= 0'),
    ({'reward_clipping': 'big'}, 'reward_clipping must be one of'),
])
def test_validate_config(changes, message):
  ppg.validate_config(ppg.PPGConfig())
  with pytest.raises(ValueError, match='PPGConfig.' + message):
    ppg.validate_config(ppg.PPGConfig()._replace(**changes))


def test_config_has_the_fields_the_run_loop_reads():
  config = ppg.PPGConfig()
  for field in ('batch_size', 'num_replay', 'unroll_length',
                'total_environment_frames', 'fixed_step_mul', 'step_mul',
                'discounting', 'learning_rate', 'clip_grad_norm'):
    assert hasattr(config, field)
  assert config.num_replay == 0


# --- The policy ---------------------------------------------------------------

_AGENT = policy_lib.AgentConfig('mlp', 16)


@pytest.fixture
def eager():
  """Runs `tf.function`s eagerly: the same maths without the several
  seconds of tracing each new policy costs. `test_learns_a_bandit_and_counts`
  covers the compiled phases."""
  tf.config.run_functions_eagerly(True)
  yield
  tf.config.run_functions_eagerly(False)


def _multi_head_spec():
  observation = collections.OrderedDict(
      vector=types.ArraySpec((3,), np.float32),
      available=types.ArraySpec((4,), np.float32))
  actions = collections.OrderedDict(
      move=types.DiscreteSpec(4, mask_key='available'),
      fire=types.DiscreteSpec(2))
  return types.EnvSpec(observation, actions, 'test:MultiHead')


def _batch(spec, num_steps, batch_size, rng, reward_fn=None,
           done_prob=0.2):
  """A `[T + 1, B]` unroll batch with uniform behaviour logits."""
  shape = [num_steps + 1, batch_size]
  env = testing.random_step_output(spec, shape, rng, done_prob=done_prob)
  actions = testing.random_actions(spec, shape, rng)
  for key, head in spec.action_spec.items():
    if head.mask_key is not None:  # Only available choices are taken.
      actions[key] = np.zeros(shape, np.int32)
  logits = {k: np.zeros(shape + [s.num_values], np.float32)
            for k, s in spec.action_spec.items()}
  if reward_fn is not None:
    reward = np.zeros(shape, np.float32)
    reward[1:] = reward_fn(actions)[1:]
    env = env._replace(reward=reward)
  return types.Unroll(
      {}, env, types.AgentOutput(actions, logits,
                                 np.zeros(shape, np.float32)))


def _config(**kwargs):
  return ppg.PPGConfig(**{'batch_size': 4, 'unroll_length': 6,
                          'num_minibatches': 2, 'aux_train_epoch': 0,
                          **kwargs})


@pytest.mark.parametrize('spec', [
    testing.control_spec(),
    _multi_head_spec(),
    testing.atari_spec(num_actions=3, step_mul=2, frame_shape=(36, 36, 2)),
], ids=['control', 'multi_head_masked', 'atari_step_mul'])
def test_act_matches_zero_agent_output(spec):
  network = 'auto' if 'frame' in spec.observation_spec else 'mlp'
  policy = ppg.PPGPolicy(spec, policy_lib.AgentConfig(network, 16), seed=3)
  rng = np.random.default_rng(7)
  env_output = testing.random_step_output(spec, [5], rng)
  state = policy.initial_state(5)
  assert state == {}
  output, new_state = policy.act(env_output, None, state)
  assert new_state == {}
  expected = policy_lib.zero_agent_output(spec, 5)
  tree.assert_same_structure(output, expected)
  for actual, zero in zip(tree.flatten(output), tree.flatten(expected)):
    assert actual.dtype == zero.dtype and actual.shape == zero.shape
  for key, head in spec.action_spec.items():
    assert np.all((output.action[key] >= 0) &
                  (output.action[key] < head.num_values))
    if head.mask_key is not None:
      available = env_output.observation[head.mask_key] != 0
      assert np.all(available[np.arange(5), output.action[key]])
  with pytest.raises(NotImplementedError, match='only acts'):
    policy.learn(_batch(spec, 2, 5, rng))


def test_minatar_boards_get_the_minatar_torso_and_act():
  # `--network=auto` resolves a 10x10 board to 'minatar'; both networks must
  # then be MinAtar's conv 3x3 (10x10 -> 8x8, 16 channels) and linear layer
  # of core_size units, not the FullyConv fallback.
  env = envs.make('minatar:Breakout', num_envs=3, seed=0)
  policy = ppg.PPGPolicy(env.spec, policy_lib.AgentConfig('auto', 16), seed=0)
  for network in (policy.agent.policy_network, policy.agent.value_network):
    assert isinstance(network.torso, torsos.MinAtarTorso)
    shapes = sorted(tuple(v.shape) for v in network.torso.trainable_variables)
    assert shapes == sorted([(3, 3, 4, 16), (16,), (8 * 8 * 16, 16), (16,)])
  env_output = env.reset()
  for _ in range(3):
    output, _ = policy.act(env_output, None, {})
    assert output.action['action'].shape == (3,)
    assert np.all((output.action['action'] >= 0) &
                  (output.action['action'] < 6))
    assert np.all(np.isfinite(output.baseline))
    env_output = env.step(output.action)


def test_rejects_continuous_actions():
  spec = types.EnvSpec(
      collections.OrderedDict(vector=types.ArraySpec((3,), np.float32)),
      collections.OrderedDict(torque=types.ContinuousSpec((1,), -2.0, 2.0)))
  with pytest.raises(ValueError, match="PPGPolicy: action head 'torque' is "
                     'ContinuousSpec'):
    ppg.PPGPolicy(spec, _AGENT)


def test_weights_move_from_learner_to_actor():
  spec = testing.control_spec()
  learner = ppg.PPGPolicy(spec, _AGENT, _config(), seed=1)
  actor = ppg.PPGPolicy(spec, _AGENT, seed=2)
  weights = learner.get_weights()
  assert all(w.dtype == np.float32 for w in weights)
  assert not all(np.array_equal(a, b)
                 for a, b in zip(weights, actor.get_weights()))
  actor.set_weights(weights)
  for a, b in zip(weights, actor.get_weights()):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError, match='set_weights: got 1 arrays'):
    actor.set_weights(weights[:1])


def test_target_kl_freezes_only_the_policy_for_the_rest_of_the_phase(eager):
  """After one step the policy is past a tiny KL limit: it sits out the
  other 7 minibatch steps, while the value network takes all 8, exactly as
  without a limit (its updates do not depend on the policy)."""
  spec = testing.control_spec()
  batch = _batch(spec, 6, 4, np.random.default_rng(5))
  runs = {}
  for target_kl in (0.0, 1e-6):
    policy = ppg.PPGPolicy(spec, _AGENT, _config(
        num_minibatches=8, target_kl=target_kl, learning_rate=1e-2), seed=0)
    before = [v.numpy().copy()
              for v in policy.agent.policy_network.trainable_variables]
    stats = policy.learn(batch)
    runs[target_kl] = (stats, before, policy)
  free, limited = runs[0.0], runs[1e-6]
  assert free[0]['policy/kl_stopped'] == 0.0
  np.testing.assert_allclose(limited[0]['policy/kl_stopped'], 7 / 8)
  assert limited[0]['num_gradient_steps'] == 8 and not limited[0]['skipped']
  moved = lambda run: [not np.array_equal(b, v.numpy()) for b, v in zip(
      run[1], run[2].agent.policy_network.trainable_variables)]
  assert any(moved(limited)) and any(moved(free))  # The first step counts.
  # One step against eight: not the same policy.
  assert any(not np.allclose(a.numpy(), b.numpy()) for a, b in zip(
      free[2].agent.policy_network.trainable_variables,
      limited[2].agent.policy_network.trainable_variables))
  for a, b in zip(free[2].agent.value_network.trainable_variables,
                  limited[2].agent.value_network.trainable_variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def _probability_of_action_zero(policy, spec, rng):
  observation = testing.random_observation(spec, [256], rng)
  logits, _ = policy.agent.policy_network(observation)
  return float(tf.reduce_mean(tf.nn.softmax(logits['action'])[:, 0]))


def test_learns_a_bandit_and_counts():
  spec = testing.control_spec()
  config = _config(policy_epochs=4, learning_rate=1e-2, aux_freq=2,
                   aux_train_epoch=1, normalize_advantage=True)
  policy = ppg.PPGPolicy(spec, _AGENT, config, seed=0)
  rng = np.random.default_rng(8)
  before = _probability_of_action_zero(policy, spec, rng)
  reward_fn = lambda actions: (actions['action'] == 0).astype(np.float32)
  for i in range(1, 5):
    stats = policy.learn(_batch(spec, 6, 4, rng, reward_fn, done_prob=1.0))
    assert not stats['skipped']
    assert ('aux/bc_kl' in stats) == (i % 2 == 0)
    # 4 epochs x 2 minibatches per iteration, plus one aux epoch of 4
    # minibatches (2 stored iterations x 2) every second one.
    assert stats['num_gradient_steps'] == 8 * i + 4 * (i // 2)
    assert stats['num_env_frames'] == 24 * i
    assert stats['num_updates'] == i
  assert policy.num_env_frames == 96 and policy.num_updates == 4
  assert not policy._memory  # pylint: disable=protected-access
  after = _probability_of_action_zero(policy, spec, rng)
  assert after > before + 0.15, (before, after)
  for key in ('loss/policy', 'loss/value', 'loss/entropy', 'policy/approx_kl',
              'policy/clip_fraction', 'aux/value_loss', 'aux/loss',
              'learning_rate/policy', 'learning_rate/value',
              'num_skipped_steps'):
    assert np.isfinite(stats[key]), key


def test_non_finite_batch_is_skipped(eager):
  spec = testing.control_spec()
  policy = ppg.PPGPolicy(spec, _AGENT, _config(normalize_value=True), seed=0)
  rng = np.random.default_rng(9)
  before = policy.get_weights()
  batch = _batch(spec, 6, 4, rng)
  batch.env_outputs.reward[3, 1] = np.nan
  stats = policy.learn(batch)
  assert stats['skipped']
  assert stats['num_skipped_steps'] == 2
  assert policy.num_updates == 0
  for a, b in zip(before, policy.get_weights()):
    np.testing.assert_array_equal(a, b)
  # The frames were consumed, and the normaliser ignored the poisoned
  # targets.
  assert policy.num_env_frames == 24
  assert policy.agent.normalizer.count.numpy() == 0
  stats = policy.learn(_batch(spec, 6, 4, rng))
  assert not stats['skipped'] and policy.num_updates == 1
  assert policy.agent.normalizer.count.numpy() == 24


def test_truncated_steps_are_cut_out_of_the_targets_and_the_data(eager):
  """A truncation in the middle of column 1 and at the last step of column
  2: those steps are in no minibatch, and the GAE targets of the steps
  before them bootstrap from their own value, never from the next
  episode's first observation (numpy loop over each episode)."""
  spec = testing.control_spec()
  policy = ppg.PPGPolicy(spec, _AGENT, _config(), seed=0)
  batch = _batch(spec, 6, 4, np.random.default_rng(4))
  env = batch.env_outputs
  env.done[:] = False
  env.truncated[:] = False
  cuts = {1: 3, 2: 6}  # Column: env_outputs row holding the reset obs.
  for b, row in cuts.items():
    env.done[row, b] = env.truncated[row, b] = True
  flat = {k: v.reshape((28,) + v.shape[2:])
          for k, v in env.observation.items()}
  # Values as the batch is evaluated: before it updates the normaliser.
  values = policy.agent.normalizer.denormalize(
      policy.agent.value_network(flat)).numpy().reshape(7, 4)
  data, _, _ = policy._evaluate_batch(batch)  # pylint: disable=protected-access
  gamma, lambda_ = 0.99, 0.95
  expected = {}
  for b in range(4):
    is_cut = lambda t, b=b: b in cuts and t == cuts[b] - 1  # Aligned rows.
    advantage = 0.0
    for t in reversed(range(6)):
      if is_cut(t):
        continue  # Not learned from, and no trace runs through it.
      # Before a cut, the value of the cut (real) state is the bootstrap.
      delta = env.reward[t + 1, b] + gamma * values[t + 1, b] - values[t, b]
      goes_on = t + 1 < 6 and not is_cut(t + 1)
      advantage = delta + (gamma * lambda_ * advantage if goes_on else 0.0)
      expected[t * 4 + b] = advantage + values[t, b]
  kept_rows = [t * 4 + b for t in range(6) for b in range(4)
               if not (b in cuts and t == cuts[b] - 1)]
  assert sorted(expected) == kept_rows
  np.testing.assert_allclose(data['returns'].numpy(),
                             [expected[i] for i in kept_rows], rtol=1e-5,
                             atol=1e-5)
  # The value network learns them standardised (normalize_value).
  normalizer = policy.agent.normalizer
  np.testing.assert_allclose(
      data['targets'].numpy(),
      (data['returns'].numpy() - normalizer.mean.numpy()) /
      normalizer.std.numpy(), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
      data['observation']['vector'].numpy(),
      env.observation['vector'][:-1].reshape(24, -1)[kept_rows])
  assert data['advantages'].shape[0] == 22


def test_aux_phase_normalises_stored_returns_with_its_own_statistics(
    eager, monkeypatch):
  # The memory keeps returns in return units; the aux phase normalises all
  # of them with the statistics of its own time, which the second batch
  # has moved far from those the first batch was trained with.
  spec = testing.control_spec()
  policy = ppg.PPGPolicy(spec, _AGENT, _config(
      normalize_value=True, aux_freq=2, aux_train_epoch=1,
      num_minibatches=1, aux_num_minibatches=1), seed=0)
  rng = np.random.default_rng(12)
  seen = {'value': [], 'aux': []}
  real_value_loss = ppg_losses.clipped_value_loss
  real_aux_loss = ppg_losses.ppg_aux_loss

  def recording_value_loss(values, old_values, targets, value_clip):
    seen['value'].append(targets.numpy())
    return real_value_loss(values, old_values, targets, value_clip)

  def recording_aux_loss(logits, old_logits, aux_values, returns, bc_weight):
    seen['aux'].append(returns.numpy())
    return real_aux_loss(logits, old_logits, aux_values, returns, bc_weight)

  monkeypatch.setattr(ppg_losses, 'clipped_value_loss', recording_value_loss)
  monkeypatch.setattr(ppg_losses, 'ppg_aux_loss', recording_aux_loss)
  normalizer = policy.agent.normalizer
  reward = lambda s: lambda a: np.full(a['action'].shape, s, np.float32)
  policy.learn(_batch(spec, 6, 4, rng, reward(1.0), done_prob=0.3))
  first = policy._memory[0]['returns'].numpy()  # pylint: disable=protected-access
  first_mean, first_std = normalizer.mean.numpy(), normalizer.std.numpy()
  # The value network learned the first batch's returns normalised then.
  np.testing.assert_allclose(np.sort(seen['value'][0]),
                             np.sort((first - first_mean) / first_std),
                             rtol=1e-5, atol=1e-5)
  real_phase = policy._aux_phase  # pylint: disable=protected-access

  def recording_phase(memory, num_minibatches):
    seen['memory'] = memory['returns'].numpy()
    return real_phase(memory, num_minibatches)

  policy._aux_phase = recording_phase  # pylint: disable=protected-access
  stats = policy.learn(_batch(spec, 6, 4, rng, reward(20.0), done_prob=0.3))
  assert 'aux/value_loss' in stats
  mean, std = normalizer.mean.numpy(), normalizer.std.numpy()
  assert abs(mean - first_mean) > 5.0 and abs(std - first_std) > 1.0
  np.testing.assert_array_equal(seen['memory'][:len(first)], first)
  assert len(seen['aux']) == 1
  np.testing.assert_allclose(np.sort(seen['aux'][0]),
                             np.sort((seen['memory'] - mean) / std),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize('estimator', value_estimators.ESTIMATORS)
def test_every_value_estimator_learns(estimator, eager):
  spec = testing.control_spec()
  policy = ppg.PPGPolicy(spec, _AGENT, _config(value_estimator=estimator,
                                               value_clip=0.2), seed=0)
  stats = policy.learn(_batch(spec, 6, 4, np.random.default_rng(10)))
  assert not stats['skipped']
  assert np.isfinite(stats['loss/value'])


def test_checkpoint_restores_learner_state(tmp_path, eager):
  spec = _multi_head_spec()
  config = _config(normalize_value=True)
  policy = ppg.PPGPolicy(spec, _AGENT, config, seed=0)
  policy.learn(_batch(spec, 6, 4, np.random.default_rng(11)))
  path = tf.train.Checkpoint(**policy.checkpointables()).save(
      str(tmp_path / 'ckpt'))
  restored = ppg.PPGPolicy(spec, _AGENT, config, seed=5)
  tf.train.Checkpoint(**restored.checkpointables()).restore(
      path).assert_consumed()
  for a, b in zip(policy.get_weights(), restored.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert restored.num_env_frames == 24 and restored.num_updates == 1
  assert restored.value_optimizer.step.numpy() == 2
  assert restored.agent.normalizer.count.numpy() == 24


def test_acting_restore_init_from_and_rng_state(tmp_path, eager):
  spec = testing.control_spec()
  trained = ppg.PPGPolicy(spec, _AGENT, _config(normalize_value=True),
                          seed=0)
  trained.learn(_batch(spec, 6, 4, np.random.default_rng(12)))
  path = tf.train.Checkpoint(**trained.checkpointables()).save(
      str(tmp_path / 'ckpt'))
  # Test mode: an acting-only copy restores just what acting needs.
  actor = ppg.PPGPolicy(spec, _AGENT, seed=1)
  checkpoint_lib.restore_part(path, actor.acting_checkpointables())
  for a, b in zip(trained.get_weights(), actor.get_weights()):
    np.testing.assert_array_equal(a, b)
  # --init_from copies the chosen network only.
  policy_weights = len(trained.agent.policy_network.trainable_variables)
  for scope, copied in (('policy', slice(0, policy_weights)),
                        ('critic', slice(policy_weights, None))):
    fresh = ppg.PPGPolicy(spec, _AGENT, _config(), seed=2)
    before = fresh.get_weights()
    assert fresh.init_from(path, scope) == path
    after = fresh.get_weights()
    for i, (old, new, source) in enumerate(zip(before, after,
                                               trained.get_weights())):
      expected = source if i in range(len(after))[copied] else old
      np.testing.assert_array_equal(new, expected)
  with pytest.raises(ValueError, match='init scope must be one of'):
    fresh.init_from(path, 'torso')
  # The sampling generator's state moves between copies.
  env_output = testing.random_step_output(spec, [64],
                                          np.random.default_rng(13))
  state = actor.get_rng_state()
  first, _ = actor.act(env_output, None, {})
  actor.set_rng_state(state)
  again, _ = actor.act(env_output, None, {})
  np.testing.assert_array_equal(first.action['action'],
                                again.action['action'])


def test_trains_through_the_run_loop(tmp_path, eager):
  config = run_config.RunConfig(
      env_name='gym:CartPole-v1', env_options={}, algorithm='ppg',
      agent_config=_AGENT,
      learner_config=_config(aux_freq=2, aux_train_epoch=1),
      logdir=str(tmp_path), num_actors=1, envs_per_actor=4,
      backend='inline', log_interval_s=0.0, checkpoint_interval_s=3600.0)
  result = run_loop.train(config, max_updates=3)
  assert result.num_updates == 3 and result.num_env_frames == 3 * 24
  tags = event_files.tags(tmp_path)
  assert {'loss/policy', 'loss/value', 'policy/approx_kl', 'aux/bc_kl',
          'learning_rate/policy', 'learning_rate/value'} <= tags
  # Running it again resumes from the checkpoint.
  resumed = run_loop.train(config, max_updates=1)
  assert resumed.num_updates == 4
