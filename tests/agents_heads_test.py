"""Tests of action masking and sampling (agents.heads) through the agent."""

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf

import agents
from agents import heads
from agents import testing

B = 256


def test_mask_logits():
  logits = tf.constant([[1., 2., 3.], [0., 0., 0.]])
  masked = heads.mask_logits(logits, np.array([[1, 0, 1], [0, 0, 1]],
                                              np.float32))
  np.testing.assert_array_equal(
      masked, [[1., agents.MASKED_LOGIT, 3.],
               [agents.MASKED_LOGIT, agents.MASKED_LOGIT, 0.]])
  probs = tf.nn.softmax(masked)
  assert probs[0, 1] == 0. and probs[1, 0] == 0. and probs[1, 2] == 1.
  # Entropy stays finite: masked entries contribute 0 * -1e9 = 0.
  entropy = -tf.reduce_sum(probs * tf.nn.log_softmax(masked), -1)
  assert np.all(np.isfinite(entropy))


@pytest.fixture(scope='module')
def sc2_agent():
  spec = testing.sc2_spec(screen=8, minimap=6, num_functions=10, step_mul=3)
  agent = agents.make_agent(spec, core_size=16, seed=0)
  # Make unavailable functions overwhelmingly attractive before masking.
  bias = agent._heads._heads['function'].b
  bias.assign(tf.range(10, dtype=tf.float32) * 10.)
  return spec, agent


def test_masked_functions_are_never_sampled(sc2_agent):
  spec, agent = sc2_agent
  step = tf.function(agent.step)
  rng = np.random.default_rng(0)
  state = agent.initial_state(B)
  picked = np.zeros(10, np.int64)
  for _ in range(8):  # 2048 draws
    env_output = testing.random_step_output(spec, (B,), rng)
    available = env_output.observation['available_actions']
    out, state = step(env_output, testing.random_actions(spec, (B,), rng),
                      state)
    function = out.action['function'].numpy()
    assert np.all(available[np.arange(B), function] == 1)
    probs = tf.nn.softmax(out.logits['function']).numpy()
    assert np.all(probs[available == 0] == 0.)
    np.testing.assert_array_equal(
        out.logits['function'].numpy()[available == 0], agents.MASKED_LOGIT)
    picked += np.bincount(function, minlength=10)
    for key, s in spec.action_spec.items():
      a = out.action[key].numpy()
      assert np.all((a >= 0) & (a < s.num_values)), key
  # The biased-up available functions dominate, but sampling is not argmax.
  assert np.count_nonzero(picked) > 1


def test_sampling_follows_the_softmax():
  logits = {'a': tf.math.log(tf.constant([[0.1, 0.2, 0.7]] * 20000))}
  actions = heads.sample_actions(logits, tf.random.Generator.from_seed(1))
  freq = np.bincount(actions['a'].numpy(), minlength=3) / 20000
  np.testing.assert_allclose(freq, [0.1, 0.2, 0.7], atol=0.015)


def test_sampling_advances_the_generator():
  logits = {'a': tf.zeros([64, 100]), 'b': tf.zeros([64, 100])}
  rng = tf.random.Generator.from_seed(3)
  first = heads.sample_actions(logits, rng)
  second = heads.sample_actions(logits, rng)
  assert np.any(first['a'].numpy() != second['a'].numpy())
  assert np.any(first['a'].numpy() != first['b'].numpy())


def test_spatial_logits_are_row_major():
  # Logits reshaped to [H, W] follow the map's pixels: a map that lights up
  # pixel (y, x) gives the largest logit at index y * W + x.
  height, width, y, x = 6, 8, 2, 5
  spatial_map = np.zeros([1, height, width, 4], np.float32)
  spatial_map[0, y, x, :] = 10.
  probe = heads.SpatialHead(1, snt.initializers.Ones(), name='probe')
  logits = probe(tf.zeros([1, 16]), tf.constant(spatial_map))
  assert logits.shape == [1, height * width]
  assert int(tf.argmax(logits[0])) == y * width + x
