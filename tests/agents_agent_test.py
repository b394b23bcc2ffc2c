"""Tests of agents.Agent: unroll == repeated step, shapes, compilation."""

import numpy as np
import pytest
import tensorflow as tf
import tree

import agents
from agents import testing
from clear import types

T, B, CORE = 5, 3, 32

# name -> (spec factory, make_agent kwargs)
FAMILIES = {
    'shallow': (testing.atari_spec, dict(network='impala_shallow')),
    'deep': (lambda: testing.atari_spec(frame_shape=(36, 36, 4)),
             dict(network='impala_deep')),
    'mlp': (testing.control_spec, dict(network='mlp')),
    'fullyconv': (testing.sc2_spec, dict(network='fullyconv')),
    'mlp_step_mul': (lambda: testing.control_spec(step_mul=4),
                     dict(network='mlp')),
    'fullyconv_step_mul': (lambda: testing.sc2_spec(step_mul=3),
                           dict(network='fullyconv')),
    'shallow_separate_critic': (testing.atari_spec,
                                dict(network='impala_shallow',
                                     separate_critic=True)),
    'fullyconv_separate_critic': (testing.sc2_spec,
                                  dict(network='fullyconv',
                                       separate_critic=True)),
    'shallow_feed_forward': (testing.atari_spec,
                             dict(network='impala_shallow', core_size=0)),
    'fullyconv_feed_forward_separate_critic': (
        testing.sc2_spec, dict(network='fullyconv', core_size=0,
                               separate_critic=True)),
    'shallow_layer_norm_lstm': (
        testing.atari_spec, dict(network='impala_shallow',
                                 core='layer_norm_lstm')),
    'mlp_layer_norm_separate_critic': (
        testing.control_spec, dict(network='mlp', core='layer_norm_lstm',
                                   separate_critic=True)),
    'shallow_torso_layer_norm': (
        testing.atari_spec, dict(network='impala_shallow',
                                 torso_norm='layer_norm')),
    'mlp_torso_layer_norm_separate_critic': (
        testing.control_spec, dict(network='mlp', torso_norm='layer_norm',
                                   separate_critic=True)),
}


def _make(family, seed=0):
  spec_fn, kwargs = FAMILIES[family]
  spec = spec_fn()
  return spec, agents.make_agent(spec, seed=seed,
                                 **{'core_size': CORE, **kwargs})


def _trajectory(spec, seed=0):
  """Random [T, B] inputs with done at chosen (t, b) and never elsewhere."""
  rng = np.random.default_rng(seed)
  env_outputs = testing.random_step_output(spec, (T, B), rng, done_prob=0.)
  done = env_outputs.done
  done[2, 0] = True   # mid-unroll reset in row 0
  done[0, 1] = True   # reset on the first step in row 1
  done[3, 1] = True   # and again later; row 2 never resets
  prev_actions = testing.random_actions(spec, (T, B), rng)
  return prev_actions, env_outputs


def _random_state(agent, seed=1):
  rng = np.random.default_rng(seed)
  return tree.map_structure(
      lambda x: tf.constant(rng.normal(size=x.shape).astype(np.float32)),
      agent.initial_state(B))


def _at(nest, t):
  return tree.map_structure(lambda x: x[t], nest)


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_unroll_equals_repeated_step(family):
  spec, agent = _make(family)
  prev_actions, env_outputs = _trajectory(spec)
  state0 = _random_state(agent)

  unrolled, final_state = agent.unroll(prev_actions, env_outputs, state0)

  state = state0
  for t in range(T):
    out, state = agent.step(_at(env_outputs, t), _at(prev_actions, t), state)
    for k in spec.action_spec:
      np.testing.assert_allclose(unrolled.logits[k][t], out.logits[k],
                                 rtol=1e-4, atol=1e-5, err_msg=f'{k} t={t}')
    np.testing.assert_allclose(unrolled.baseline[t], out.baseline,
                               rtol=1e-4, atol=1e-5, err_msg=f't={t}')
  tree.map_structure(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
      final_state, state)


@pytest.mark.parametrize('family', ['shallow', 'fullyconv_separate_critic'])
def test_unroll_forgets_everything_before_done(family):
  # Row 0 resets at t = 2: from there on it must match a fresh unroll that
  # starts at t = 2 from any state (done[2] resets it too).
  spec, agent = _make(family)
  prev_actions, env_outputs = _trajectory(spec)
  full, _ = agent.unroll(prev_actions, env_outputs, _random_state(agent))
  tail = lambda x: x[2:]
  fresh, _ = agent.unroll(tree.map_structure(tail, prev_actions),
                          tree.map_structure(tail, env_outputs),
                          _random_state(agent, seed=9))
  np.testing.assert_allclose(full.baseline[2:, 0], fresh.baseline[:, 0],
                             rtol=1e-4, atol=1e-5)
  # Row 2 never resets, so its outputs depend on the initial state.
  assert np.all(np.abs(full.baseline[2:, 2] - fresh.baseline[:, 2]) > 1e-7)


@pytest.mark.parametrize('family', ['mlp', 'fullyconv_separate_critic'])
def test_done_resets_state(family):
  spec, agent = _make(family)
  rng = np.random.default_rng(3)
  env_output = testing.random_step_output(spec, (B,), rng)
  env_output = env_output._replace(done=np.array([True, False, True]))
  prev_action = testing.random_actions(spec, (B,), rng)
  from_random, _ = agent.step(env_output, prev_action, _random_state(agent))
  from_initial, _ = agent.step(env_output, prev_action,
                               agent.initial_state(B))
  for rows, check in (([0, 2], np.testing.assert_allclose),
                      ([1], lambda a, b: np.testing.assert_raises(
                          AssertionError, np.testing.assert_allclose, a, b))):
    check(tf.gather(from_random.baseline, rows),
          tf.gather(from_initial.baseline, rows))


@pytest.mark.parametrize('family', sorted(FAMILIES))
def test_output_shapes_and_dtypes(family):
  spec, agent = _make(family)
  rng = np.random.default_rng(0)
  out, state = agent.step(testing.random_step_output(spec, (B,), rng),
                          testing.random_actions(spec, (B,), rng),
                          agent.initial_state(B))
  assert set(out.action) == set(spec.action_spec) == set(out.logits)
  for k, s in spec.action_spec.items():
    assert out.action[k].dtype == tf.int32 and out.action[k].shape == [B]
    assert out.logits[k].dtype == tf.float32
    assert out.logits[k].shape == [B, s.num_values]
    assert np.all((out.action[k] >= 0) & (out.action[k] < s.num_values))
  assert out.baseline.dtype == tf.float32 and out.baseline.shape == [B]
  expected_keys = {'policy', 'critic'} if 'critic' in family else {'policy'}
  assert set(state) == (set() if 'feed_forward' in family else expected_keys)
  for leaf in tree.flatten(state):
    assert leaf.dtype == tf.float32 and leaf.shape == [B, CORE]

  prev_actions, env_outputs = _trajectory(spec)
  out, _ = agent.unroll(prev_actions, env_outputs, agent.initial_state(B))
  for k, s in spec.action_spec.items():
    assert out.logits[k].shape == [T, B, s.num_values]
    assert out.action[k].shape == [T, B] and out.action[k].dtype == tf.int32
    np.testing.assert_array_equal(
        out.action[k], np.argmax(out.logits[k], axis=-1))
  assert out.baseline.shape == [T, B]


@pytest.mark.parametrize('family', ['shallow', 'shallow_feed_forward',
                                    'fullyconv_feed_forward_separate_critic'])
def test_feed_forward_outputs_depend_on_the_current_step_only(family):
  # Shuffling the time steps shuffles a feed-forward agent's outputs the same
  # way; an LSTM agent's outputs depend on the order.
  spec, agent = _make(family)
  prev_actions, env_outputs = _trajectory(spec)
  env_outputs = env_outputs._replace(done=np.zeros_like(env_outputs.done))
  order = np.array([3, 0, 4, 1, 2])
  shuffle = lambda x: tf.gather(x, order)
  out, _ = agent.unroll(prev_actions, env_outputs, agent.initial_state(B))
  shuffled, _ = agent.unroll(tree.map_structure(shuffle, prev_actions),
                             tree.map_structure(shuffle, env_outputs),
                             agent.initial_state(B))
  same = np.allclose(shuffle(out.baseline), shuffled.baseline, atol=1e-5)
  assert same == ('feed_forward' in family)
  if same:
    for k in spec.action_spec:
      np.testing.assert_allclose(shuffle(out.logits[k]), shuffled.logits[k],
                                 rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('family,jit', [('shallow', False), ('shallow', True),
                                        ('fullyconv_step_mul', False),
                                        ('fullyconv_step_mul', True),
                                        ('shallow_feed_forward', True),
                                        ('shallow_torso_layer_norm', True)])
def test_unroll_in_tf_function_with_unknown_time(family, jit):
  spec, agent = _make(family)
  unroll = tf.function(
      agent.unroll,
      input_signature=[
          testing.action_signature(spec, [None, B]),
          testing.step_output_signature(spec, [None, B]),
          tree.map_structure(lambda x: tf.TensorSpec(x.shape, x.dtype),
                             agent.initial_state(B)),
      ],
      jit_compile=jit)
  prev_actions, env_outputs = _trajectory(spec)
  state0 = _random_state(agent)
  expected, expected_state = agent.unroll(prev_actions, env_outputs, state0)
  for length in (T, 2):  # two lengths, one trace
    cut = lambda x, n=length: x[:n]
    got, got_state = unroll(tree.map_structure(cut, prev_actions),
                            tree.map_structure(cut, env_outputs), state0)
    for k in spec.action_spec:
      np.testing.assert_allclose(got.logits[k], expected.logits[k][:length],
                                 rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.baseline, expected.baseline[:length],
                               rtol=1e-4, atol=1e-4)
    if length == T:
      tree.map_structure(
          lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4),
          got_state, expected_state)
  assert unroll.experimental_get_tracing_count() == 1


@pytest.mark.parametrize('jit', [False, True])
def test_step_in_tf_function(jit):
  spec, agent = _make('fullyconv_step_mul')
  step = tf.function(agent.step, jit_compile=jit)
  rng = np.random.default_rng(0)
  out, state = step(testing.random_step_output(spec, (B,), rng),
                    testing.random_actions(spec, (B,), rng),
                    agent.initial_state(B))
  assert out.baseline.shape == [B]
  assert tree.flatten(state)[0].shape == [B, CORE]


def test_gradients_reach_every_variable_through_unroll():
  spec, agent = _make('fullyconv')
  prev_actions, env_outputs = _trajectory(spec)
  with tf.GradientTape() as tape:
    out, _ = agent.unroll(prev_actions, env_outputs, agent.initial_state(B))
    loss = tf.reduce_sum(out.baseline ** 2) + sum(
        tf.reduce_sum(tf.nn.softmax(x) * x) for x in out.logits.values())
  grads = tape.gradient(loss, agent.trainable_variables)
  missing = [v.name for v, g in zip(agent.trainable_variables, grads)
             if g is None]
  assert not missing
  for g in grads:
    assert np.all(np.isfinite(g))


@pytest.mark.parametrize('family', ['shallow_separate_critic',
                                    'fullyconv_separate_critic'])
def test_separate_critic_variables(family):
  spec, agent = _make(family)
  policy = {v.ref() for v in agent.policy_variables}
  critic = {v.ref() for v in agent.critic_variables}
  assert policy and critic and not policy & critic
  assert policy | critic == {v.ref() for v in agent.trainable_variables}

  prev_actions, env_outputs = _trajectory(spec)
  with tf.GradientTape(persistent=True) as tape:
    out, _ = agent.unroll(prev_actions, env_outputs, _random_state(agent))
    baseline = tf.reduce_sum(out.baseline)
    logits = sum(tf.reduce_sum(x * tf.nn.softmax(x))
                 for x in out.logits.values())
  for g in tape.gradient(baseline, agent.policy_variables):
    assert g is None or not np.any(g)
  for g in tape.gradient(logits, agent.critic_variables):
    assert g is None or not np.any(g)
  assert all(g is not None
             for g in tape.gradient(baseline, agent.critic_variables))

  # Changing the critic leaves the policy untouched.
  for v in agent.critic_variables:
    v.assign(v + 0.5)
  out2, _ = agent.unroll(prev_actions, env_outputs, _random_state(agent))
  for k in spec.action_spec:
    np.testing.assert_array_equal(out.logits[k], out2.logits[k])
  assert np.any(out.baseline.numpy() != out2.baseline.numpy())


def test_shared_critic_is_the_baseline_head():
  spec, agent = _make('mlp')
  assert {v.name for v in agent.critic_variables} == {
      'agent/baseline/w:0', 'agent/baseline/b:0'}
  policy = {v.ref() for v in agent.policy_variables}
  critic = {v.ref() for v in agent.critic_variables}
  assert not policy & critic
  assert policy | critic == {v.ref() for v in agent.trainable_variables}


def test_auto_network_choice():
  assert agents.resolve_network(testing.atari_spec()) == 'impala_shallow'
  assert agents.resolve_network(testing.control_spec()) == 'mlp'
  assert agents.resolve_network(testing.sc2_spec()) == 'fullyconv'


def test_checkpoint_restores_weights_and_rng(tmp_path):
  spec, agent = _make('mlp', seed=5)
  _, other = _make('mlp', seed=6)
  path = tf.train.Checkpoint(agent=agent).write(str(tmp_path / 'ckpt'))
  tf.train.Checkpoint(agent=other).read(path).assert_consumed()
  for a, b in zip(agent.variables, other.variables):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(agent.rng.state, other.rng.state)


@pytest.mark.parametrize('family', ['mlp', 'fullyconv_step_mul'])
def test_same_seed_same_actions(family):
  spec, agent_a = _make(family, seed=7)
  _, agent_b = _make(family, seed=7)
  _, agent_c = _make(family, seed=8)
  for a, b in zip(agent_a.trainable_variables, agent_b.trainable_variables):
    np.testing.assert_array_equal(a, b)
  rng = np.random.default_rng(0)
  inputs = [(testing.random_step_output(spec, (16,), rng),
             testing.random_actions(spec, (16,), rng)) for _ in range(3)]

  def run(agent):
    state, actions = agent.initial_state(16), []
    for env_output, prev_action in inputs:
      out, state = agent.step(env_output, prev_action, state)
      actions.append({k: v.numpy() for k, v in out.action.items()})
    return actions

  actions_a, actions_b, actions_c = run(agent_a), run(agent_b), run(agent_c)
  tree.map_structure(np.testing.assert_array_equal, actions_a, actions_b)
  assert any(np.any(a[k] != c[k])
             for a, c in zip(actions_a, actions_c) for k in a)


BAD_ARGUMENTS = [
    ('network', lambda: agents.make_agent(testing.atari_spec(),
                                          network='resnet')),
    ('mlp', lambda: agents.make_agent(testing.atari_spec(), network='mlp')),
    ('impala_shallow', lambda: agents.make_agent(testing.control_spec(),
                                                 network='impala_shallow')),
    ('impala_deep', lambda: agents.make_agent(testing.sc2_spec(),
                                              network='impala_deep')),
    ('fullyconv', lambda: agents.make_agent(testing.control_spec(),
                                            network='fullyconv')),
    ('core_size', lambda: agents.make_agent(testing.control_spec(),
                                            core_size=-1)),
    ('action_spec', lambda: agents.make_agent(types.EnvSpec(
        testing.control_spec().observation_spec,
        {'force': types.ContinuousSpec((1,), -1., 1.)}))),
    ('mask_key', lambda: agents.make_agent(types.EnvSpec(
        testing.control_spec().observation_spec,
        {'action': types.DiscreteSpec(2, mask_key='missing')}))),
    ('spatial', lambda: agents.make_agent(types.EnvSpec(
        testing.control_spec().observation_spec,
        {'point': types.DiscreteSpec(10, spatial=(3, 3))}))),
    ('env_spec', lambda: agents.make_agent({'frame': None})),
]


@pytest.mark.parametrize('word,build', BAD_ARGUMENTS,
                         ids=[w for w, _ in BAD_ARGUMENTS])
def test_bad_arguments_raise_value_error(word, build):
  with pytest.raises(ValueError, match=word):
    build()


def test_rank_errors_name_the_method():
  spec, agent = _make('mlp')
  rng = np.random.default_rng(0)
  with pytest.raises(ValueError, match='Agent.unroll'):
    agent.unroll(testing.random_actions(spec, (B,), rng),
                 testing.random_step_output(spec, (B,), rng),
                 agent.initial_state(B))
  with pytest.raises(ValueError, match='Agent.step'):
    agent.step(testing.random_step_output(spec, (T, B), rng),
               testing.random_actions(spec, (T, B), rng),
               agent.initial_state(B))


@pytest.mark.parametrize('kwargs, match', [
    (dict(core='gru'), 'core must be one of'),
    (dict(torso_norm='batch_norm'),
     r"torso_norm must be one of \('none', 'layer_norm'\), got 'batch_norm'")])
def test_bad_core_options(kwargs, match):
  with pytest.raises(ValueError, match=match):
    agents.make_agent(testing.control_spec(), network='mlp', core_size=4,
                      **kwargs)


@pytest.mark.parametrize('family, norms', [
    ('shallow_torso_layer_norm', ['torso/linear_norm']),
    ('mlp_torso_layer_norm_separate_critic', [
        'critic_torso/linear0_norm', 'critic_torso/linear1_norm',
        'torso/linear0_norm', 'torso/linear1_norm'])])
def test_torso_norm_adds_only_the_norms_and_trains_them(family, norms):
  # The same seed without the norm builds the same other weights, and a
  # gradient reaches each gain and offset.
  spec, agent = _make(family)
  plain = agents.make_agent(spec, seed=0, **{
      'core_size': CORE, **FAMILIES[family][1], 'torso_norm': 'none'})
  plain = {v.name: v.numpy() for v in plain.trainable_variables}
  named = {v.name: v for v in agent.trainable_variables}
  assert not [name for name in plain if '_norm/' in name]
  assert sorted(set(named) - set(plain)) == sorted(
      f'agent/{n}/{w}:0' for n in norms for w in ('offset', 'scale'))
  for name, value in plain.items():
    np.testing.assert_array_equal(named[name].numpy(), value, err_msg=name)
  prev_actions, env_outputs = _trajectory(spec)
  with tf.GradientTape() as tape:
    out, _ = agent.unroll(prev_actions, env_outputs, agent.initial_state(B))
    loss = tf.reduce_sum(out.baseline ** 2) + sum(
        tf.reduce_sum(tf.nn.softmax(x) * x) for x in out.logits.values())
  norm_variables = [v for v in agent.trainable_variables if '_norm/' in v.name]
  for v, g in zip(norm_variables, tape.gradient(loss, norm_variables)):
    assert g is not None and np.any(g.numpy()), v.name
