"""Tests of the IMPALA-CLEAR and critic-pretraining train steps."""

import glob
import os

import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf
import tree

from clear import learner as learner_lib
from clear import losses
from clear import types

OBS_DIM = 5
NUM_ACTIONS = 3
MAX_STEP_MUL = 4


class TinyTestAgent(snt.Module):
  """A small recurrent agent for learner tests (MLP + LSTM, reset on done)."""

  def __init__(self, dynamic_step_mul=False, hidden=16):
    super().__init__(name='tiny_test_agent')
    self._torso = snt.nets.MLP([hidden], activate_final=True)
    self._core = snt.LSTM(hidden)
    self._heads = {'action': snt.Linear(NUM_ACTIONS)}
    if dynamic_step_mul:
      self._heads[types.STEP_MUL_KEY] = snt.Linear(MAX_STEP_MUL)
    self._baseline = snt.Linear(1, name='baseline')

  def initial_state(self, batch_size):
    return self._core.initial_state(batch_size)

  @property
  def critic_variables(self):
    return self._baseline.trainable_variables

  def unroll(self, prev_actions, env_outputs, state):
    del prev_actions  # The tiny agent ignores the previous action.
    obs = tf.cast(env_outputs.observation['vector'], tf.float32)
    done = tf.cast(env_outputs.done, tf.bool)
    initial = self._core.initial_state(tf.shape(obs)[1])
    outputs = []
    for t in range(obs.shape[0]):
      state = tree.map_structure(
          lambda i, s, t=t: tf.where(done[t][:, None], i, s), initial, state)
      out, state = self._core(self._torso(obs[t]), state)
      outputs.append(out)
    core = tf.stack(outputs)
    logits = {k: head(core) for k, head in self._heads.items()}
    baseline = tf.squeeze(self._baseline(core), -1)
    action = {k: tf.argmax(v, -1, output_type=tf.int32)
              for k, v in logits.items()}
    return types.AgentOutput(action, logits, baseline), state


def make_batch(t=6, b=4, dynamic_step_mul=False, seed=0, agent=None):
  """A random batch of `[t + 1, b]` unrolls with episode ends in it."""
  rng = np.random.RandomState(seed)
  done = rng.rand(t + 1, b) < 0.15
  truncated = done & (rng.rand(t + 1, b) < 0.3)
  env_outputs = types.StepOutput(
      reward=rng.randn(t + 1, b).astype(np.float32),
      info=types.EpisodeInfo(np.zeros((t + 1, b), np.float32),
                             np.zeros((t + 1, b), np.int32),
                             np.zeros((t + 1, b), np.int32)),
      done=done,
      truncated=truncated,
      observation={'vector': rng.randn(t + 1, b, OBS_DIM).astype(np.float32)})
  action = {'action': rng.randint(NUM_ACTIONS, size=(t + 1, b)).astype(
      np.int32)}
  logits = {'action': rng.randn(t + 1, b, NUM_ACTIONS).astype(np.float32)}
  if dynamic_step_mul:
    action[types.STEP_MUL_KEY] = rng.randint(
        MAX_STEP_MUL, size=(t + 1, b)).astype(np.int32)
    logits[types.STEP_MUL_KEY] = rng.randn(t + 1, b, MAX_STEP_MUL).astype(
        np.float32)
  agent_outputs = types.AgentOutput(
      action=action, logits=logits,
      baseline=rng.randn(t + 1, b).astype(np.float32))
  agent = agent or TinyTestAgent(dynamic_step_mul)
  state = tree.map_structure(lambda s: s.numpy(), agent.initial_state(b))
  batch = types.Unroll(state, env_outputs, agent_outputs)
  agent.unroll(action, env_outputs, state)  # Creates the variables.
  return batch


def agent_and_batch(dynamic_step_mul=False):
  agent = TinyTestAgent(dynamic_step_mul)
  return agent, make_batch(dynamic_step_mul=dynamic_step_mul, agent=agent)


def make_learner(agent, b=4, t=6, **kwargs):
  config = learner_lib.LearnerConfig(batch_size=b, unroll_length=t,
                                     **{'num_replay': 2, **kwargs})
  return learner_lib.ImpalaClearLearner(agent, config)


def values_of(variables):
  return [v.numpy().copy() for v in variables]


@pytest.fixture(autouse=True)
def seeded():
  """Sonnet's default initialisers draw from TF's global RNG."""
  tf.random.set_seed(0)


def test_loss_decreases_on_a_fixed_batch():
  """The terms with fixed targets fall: both CLEAR cloning losses.

  (Neither the total nor the V-trace baseline term is a fixed objective:
  the policy-gradient surrogate and the V-trace targets move with the
  network. Baseline fitting is checked by the critic-step test.)
  """
  agent, batch = agent_and_batch()
  learner = make_learner(agent, learning_rate=1e-2, policy_cloning_cost=10.0,
                         value_cloning_cost=1.0)
  first = learner.step(batch)
  for _ in range(40):
    last = learner.step(batch)
  for key in ('loss/policy_cloning', 'loss/value_cloning'):
    assert last[key] < 0.5 * first[key], (key, first[key], last[key])
  assert np.isfinite(last['loss/total'])
  assert learner.num_steps.numpy() == 41


def test_loss_matches_independent_alignment():
  """The learner's loss equals the loss computed on hand-aligned tensors."""
  agent, batch = agent_and_batch()
  learner = make_learner(agent, reward_clipping='none', discounting=0.9)
  _, metrics = learner._grads_fn(batch)
  outputs, _ = agent.unroll(batch.agent_outputs.action, batch.env_outputs,
                            batch.agent_state)
  env = batch.env_outputs
  terminated = env.done[1:] & ~env.truncated[1:]
  loss, extra = losses.impala_clear_loss(
      target_logits={'action': outputs.logits['action'][:-1]},
      behaviour_logits={'action': batch.agent_outputs.logits['action'][1:]},
      actions={'action': batch.agent_outputs.action['action'][1:]},
      values=outputs.baseline[:-1],
      bootstrap_value=outputs.baseline[-1],
      behaviour_values=batch.agent_outputs.baseline[1:],
      rewards=env.reward[1:],
      discounts=(0.9 * ~terminated).astype(np.float32),
      num_replay=2, baseline_cost=0.5, entropy_cost=0.01,
      policy_cloning_cost=0.01, value_cloning_cost=0.005)
  np.testing.assert_allclose(metrics['loss/total'], loss, rtol=1e-5)
  np.testing.assert_allclose(metrics['loss/baseline'], extra.baseline,
                             rtol=1e-5)


def test_num_replay_changes_only_the_cloning_terms():
  agent, batch = agent_and_batch()
  with_replay = make_learner(agent, num_replay=3)._grads_fn(batch)[1]
  without = make_learner(agent, num_replay=0)._grads_fn(batch)[1]
  for key in ('loss/policy_gradient', 'loss/baseline', 'loss/entropy'):
    np.testing.assert_allclose(with_replay[key], without[key], rtol=1e-6)
  assert without['loss/policy_cloning'] == 0.0
  assert without['loss/value_cloning'] == 0.0
  assert with_replay['loss/policy_cloning'] > 0.0
  assert with_replay['loss/value_cloning'] > 0.0


def test_frames_with_fixed_step_mul():
  agent = TinyTestAgent()
  learner = make_learner(agent, b=4, t=6, num_replay=1, step_mul=4)
  learner.step(make_batch(t=6, b=4))
  assert learner.num_env_frames.numpy() == 6 * (4 - 1) * 4


def test_frames_with_dynamic_step_mul_count_executed_multipliers():
  agent, batch = agent_and_batch(dynamic_step_mul=True)
  learner = make_learner(agent, num_replay=2, fixed_step_mul=False)
  learner.step(batch)
  executed = batch.agent_outputs.action[types.STEP_MUL_KEY]
  expected = sum(int(executed[t, b]) + 1 for t in range(1, 7)
                 for b in range(2, 4))
  assert learner.num_env_frames.numpy() == expected
  # The learner's own (re-computed) multipliers must not be what is counted.
  relearned, _ = agent.unroll(batch.agent_outputs.action, batch.env_outputs,
                              batch.agent_state)
  recount = int(np.sum(relearned.action[types.STEP_MUL_KEY][:-1, 2:] + 1))
  assert recount != expected or np.array_equal(
      relearned.action[types.STEP_MUL_KEY][:-1, 2:], executed[1:, 2:])


def test_dynamic_step_mul_head_enters_the_loss():
  agent, batch = agent_and_batch(dynamic_step_mul=True)
  learner = make_learner(agent, fixed_step_mul=False)
  grads, _ = learner._grads_fn(batch)
  head = agent._heads[types.STEP_MUL_KEY].w
  index = [v.ref() for v in agent.trainable_variables].index(head.ref())
  assert np.abs(grads[index].numpy()).sum() > 0


def test_critic_step_leaves_the_policy_untouched():
  agent, batch = agent_and_batch()
  learner = make_learner(agent, learning_rate=1e-2)
  critic_ids = {v.ref() for v in agent.critic_variables}
  policy = [v for v in agent.trainable_variables if v.ref() not in critic_ids]
  policy_before = values_of(policy)
  critic_before = values_of(agent.critic_variables)
  losses_seen = [learner.critic_step(batch)['loss/baseline'].numpy()
                 for _ in range(10)]
  for before, after in zip(policy_before, values_of(policy)):
    np.testing.assert_array_equal(before, after)
  assert any(np.any(b != a) for b, a in zip(critic_before,
                                             values_of(agent.critic_variables)))
  assert losses_seen[-1] < losses_seen[0]
  assert learner.num_env_frames.numpy() == 10 * 6 * 2


def test_critic_loss_fits_discounted_returns():
  agent, batch = agent_and_batch()
  learner = make_learner(agent, discounting=0.95, reward_clipping='abs_one')
  _, metrics = learner._critic_grads_fn(batch)
  outputs, _ = agent.unroll(batch.agent_outputs.action, batch.env_outputs,
                            batch.agent_state)
  env = batch.env_outputs
  rewards = np.clip(env.reward[1:], -1, 1)
  discounts = 0.95 * ~(env.done[1:] & ~env.truncated[1:])
  returns = np.zeros_like(rewards)
  acc = outputs.baseline[-1].numpy()
  for t in reversed(range(rewards.shape[0])):
    acc = rewards[t] + discounts[t] * acc
    returns[t] = acc
  expected = 0.5 * np.sum((returns - outputs.baseline[:-1].numpy()) ** 2)
  np.testing.assert_allclose(metrics['loss/baseline'], expected, rtol=1e-5)


def test_non_finite_reward_skips_the_update():
  agent, batch = agent_and_batch()
  batch.env_outputs.reward[3, 1] = np.nan
  learner = make_learner(agent, reward_clipping='none')
  before = values_of(agent.trainable_variables)
  metrics = learner.step(batch)
  assert bool(metrics['skipped'])
  assert learner.num_skipped_steps.numpy() == 1
  assert learner.num_steps.numpy() == 0
  assert learner.num_env_frames.numpy() == 0
  for b, a in zip(before, values_of(agent.trainable_variables)):
    np.testing.assert_array_equal(b, a)


def test_learning_rate_decays_linearly_to_zero_over_frames():
  agent = TinyTestAgent()
  frames_per_step = 6 * 2  # T x fresh columns x step_mul 1.
  learner = make_learner(agent, learning_rate=1e-3,
                         total_environment_frames=3 * frames_per_step)
  batch = make_batch()
  seen = [learner.step(batch)['learning_rate'].numpy() for _ in range(4)]
  np.testing.assert_allclose(seen, [1e-3, 1e-3 * 2 / 3, 1e-3 / 3, 0.0],
                             atol=1e-9)


def test_grad_norm_is_reported_before_clipping():
  agent, batch = agent_and_batch()
  clipped = make_learner(agent, clip_grad_norm=1e-3)
  grads, metrics = clipped._grads_fn(batch)
  unclipped_norm = make_learner(agent, clip_grad_norm=0)._grads_fn(batch)[1][
      'grad_norm']
  np.testing.assert_allclose(metrics['grad_norm'], unclipped_norm, rtol=1e-5)
  np.testing.assert_allclose(tf.linalg.global_norm(grads), 1e-3, rtol=1e-4)


@pytest.mark.parametrize('optimizer', ['adam', 'rmsprop'])
def test_optimizers_update_every_variable(optimizer):
  agent, batch = agent_and_batch()
  learner = make_learner(agent, optimizer=optimizer)
  before = values_of(agent.trainable_variables)
  learner.step(batch)
  changed = [np.any(b != a) for b, a in
             zip(before, values_of(agent.trainable_variables))]
  assert all(changed)


@pytest.mark.parametrize('initial', [1.0, 0.0])
def test_rmsprop_first_update_follows_the_initial_mean_square(initial):
  # One update from mean square m0: m = decay m0 + (1 - decay) g^2 and
  # w -= lr g / sqrt(m + epsilon) (momentum 0). m0 = 1 is TF1's RMSProp,
  # whose first steps are about lr g; m0 = 0 is Sonnet's, about 10 lr sign(g).
  agent, batch = agent_and_batch()
  learner = make_learner(agent, optimizer='rmsprop', learning_rate=1e-2,
                         rmsprop_initial_mean_square=initial)
  grads, _ = learner._grads_fn(batch)
  before = values_of(agent.trainable_variables)
  learner.step(batch)
  config = learner.config
  for b, a, g in zip(before, values_of(agent.trainable_variables), grads):
    g = g.numpy()
    mean_square = (config.rmsprop_decay * initial +
                   (1 - config.rmsprop_decay) * g**2)
    expected = b - 1e-2 * g / np.sqrt(mean_square + config.rmsprop_epsilon)
    np.testing.assert_allclose(a, expected, rtol=1e-4, atol=1e-7)


def test_xla_step_matches_the_plain_step():
  plain_agent, batch = agent_and_batch()
  xla_agent = TinyTestAgent()
  make_batch(agent=xla_agent)  # Builds the variables.
  for src, dst in zip(plain_agent.trainable_variables,
                      xla_agent.trainable_variables):
    dst.assign(src)
  plain = make_learner(plain_agent)._grads_fn(batch)[1]
  xla = make_learner(xla_agent, jit_compile=True)._grads_fn(batch)[1]
  np.testing.assert_allclose(plain['loss/total'], xla['loss/total'],
                             rtol=1e-4)


def test_summaries_reach_a_tensorboard_event_file(tmp_path):
  agent = TinyTestAgent()
  learner = make_learner(agent)
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    learner.step(make_batch())
    learner.critic_step(make_batch())
  writer.flush()
  tags = set()
  for path in glob.glob(os.path.join(str(tmp_path), 'events.out.tfevents*')):
    for event in tf.compat.v1.train.summary_iterator(path):
      tags.update(v.tag for v in event.summary.value)
  for tag in ('loss/policy_gradient', 'loss/baseline', 'loss/entropy',
              'loss/policy_cloning', 'loss/value_cloning', 'loss/total',
              'grad_norm', 'learning_rate', 'policy/entropy', 'action/action',
              'critic_pretrain/loss/baseline', 'critic_pretrain/grad_norm'):
    assert tag in tags, (tag, sorted(tags))


def test_transition_discounts_keep_gamma_on_truncation():
  done = np.array([[True, True, False]])
  truncated = np.array([[False, True, False]])
  np.testing.assert_allclose(
      learner_lib.transition_discounts(done, truncated, 0.9), [[0., .9, .9]])


@pytest.mark.parametrize('overrides,match', [
    ({'num_replay': 4}, 'num_replay'),
    ({'num_replay': -1}, 'num_replay'),
    ({'unroll_length': 0}, 'unroll_length'),
    ({'optimizer': 'sgd'}, 'optimizer'),
    ({'step_mul': 0}, 'step_mul'),
    ({'discounting': 1.5}, 'discounting'),
])
def test_bad_config_is_rejected_clearly(overrides, match):
  config = learner_lib.LearnerConfig(batch_size=4, **{'num_replay': 0,
                                                      **overrides})
  with pytest.raises(ValueError, match=match):
    learner_lib.ImpalaClearLearner(TinyTestAgent(), config)


def test_inf_observation_skips_the_update():
  agent, batch = agent_and_batch()
  batch.env_outputs.observation['vector'][2, 0, 1] = np.inf
  learner = make_learner(agent)
  before = values_of(agent.trainable_variables)
  assert bool(learner.step(batch)['skipped'])
  for b, a in zip(before, values_of(agent.trainable_variables)):
    np.testing.assert_array_equal(b, a)


def test_extreme_log_rhos_give_a_finite_update():
  """Behaviour logits far from the target's: rhos are clipped, not inf."""
  agent, batch = agent_and_batch()
  logits = batch.agent_outputs.logits['action']
  logits *= 1e6  # log-rhos of order 1e6 either way.
  learner = make_learner(agent)
  metrics = learner.step(batch)
  assert not bool(metrics['skipped'])
  assert np.isfinite(metrics['loss/total'])
  assert all(np.all(np.isfinite(v)) for v in values_of(
      agent.trainable_variables))
