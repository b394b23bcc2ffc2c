"""Tests of the IMPALA-CLEAR and critic-pretraining train steps."""


import numpy as np
import pytest
import sonnet as snt
import tensorflow as tf
import tree

from clear import types
from clear.algorithms.impala import learner as learner_lib
from clear.ops import losses
from clear.ops import transitions
from tests import event_files

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
  assert learner.num_updates.numpy() == 41


def test_loss_matches_independent_alignment():
  """The learner's loss equals the loss computed on hand-aligned tensors."""
  agent, batch = agent_and_batch()
  learner = make_learner(agent, reward_clipping='none', discounting=0.9)
  _, metrics = learner._grads_fn(batch)
  outputs, _ = agent.unroll(batch.agent_outputs.action, batch.env_outputs,
                            batch.agent_state)
  env = batch.env_outputs
  assert env.truncated[1:].any()  # The cut at truncations is covered too.
  terminated = env.done[1:] & ~env.truncated[1:]
  values = outputs.baseline[:-1].numpy()
  loss, extra = losses.impala_clear_loss(
      target_logits={'action': outputs.logits['action'][:-1]},
      behaviour_logits={'action': batch.agent_outputs.logits['action'][1:]},
      actions={'action': batch.agent_outputs.action['action'][1:]},
      values=outputs.baseline[:-1],
      bootstrap_value=outputs.baseline[-1],
      behaviour_values=batch.agent_outputs.baseline[1:],
      rewards=np.where(env.truncated[1:], values, env.reward[1:]),
      discounts=np.where(env.truncated[1:], 0.0,
                         0.9 * ~terminated).astype(np.float32),
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
  values = outputs.baseline[:-1].numpy()
  # A truncated step's return is its own value; the step before it
  # bootstraps from that value.
  rewards = np.where(env.truncated[1:], values, np.clip(env.reward[1:], -1, 1))
  discounts = np.where(env.truncated[1:], 0.0,
                       0.95 * ~(env.done[1:] & ~env.truncated[1:]))
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
  assert learner.num_updates.numpy() == 0
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


def test_learning_rate_warms_up_then_decays():
  agent = TinyTestAgent()
  frames_per_step = 6 * 2  # T x fresh columns x step_mul 1.
  learner = make_learner(agent, learning_rate=1e-3,
                         learning_rate_warmup_frames=2 * frames_per_step,
                         total_environment_frames=4 * frames_per_step)
  batch = make_batch()
  learner.agent.unroll(batch.agent_outputs.action, batch.env_outputs,
                       batch.agent_state)  # Creates the variables.
  start = values_of(agent.trainable_variables)
  seen = [learner.step(batch)['learning_rate'].numpy()]
  # The rate is taken at the frames before the update: the first is 0 and
  # moves nothing.
  for b, a in zip(start, values_of(agent.trainable_variables)):
    np.testing.assert_array_equal(b, a)
  seen += [learner.step(batch)['learning_rate'].numpy() for _ in range(4)]
  # Frames 0, 12, 24, 36, 48: ramp min(1, f / 24) x decay (1 - f / 48).
  np.testing.assert_allclose(
      seen, [0.0, 1e-3 * 0.5 * 0.75, 1e-3 * 0.5, 1e-3 * 0.25, 0.0],
      atol=1e-9)
  assert any(np.any(b != a) for b, a in
             zip(start, values_of(agent.trainable_variables)))


@pytest.mark.parametrize('warmup', [0, 1, 700, 5_000])
def test_learning_rate_at_matches_a_numpy_loop(warmup):
  total, peak = 10_000, 6e-4
  for frames in [0, 1, 350, 699, 700, 701, 4_999, 5_000, 9_999, 10_000,
                 12_000]:
    expected = peak * max(0.0, 1.0 - frames / total)
    if warmup and frames < warmup:
      expected *= frames / warmup
    got = learner_lib.learning_rate_at(frames, peak, total, warmup).numpy()
    # float32: 1 - f / total keeps about 7 digits of the fraction.
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=peak * 1e-6)


def test_entropy_cost_at_matches_hand_values():
  # Linear from 0.01 at 0 frames to 0.001 at 10,000, then held.
  for frames, expected in [(0, 0.01), (2_500, 0.00775), (5_000, 0.0055),
                           (10_000, 0.001), (30_000, 0.001)]:
    got = learner_lib.entropy_cost_at(frames, 0.01, 0.001, 10_000).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_entropy_cost_follows_its_schedule_into_the_loss():
  """The scheduled weight is the one the total loss uses, taken at the
  frames before each update, as the learning rate is."""
  agent = TinyTestAgent()
  frames_per_step = 6 * 2  # T x fresh columns x step_mul 1.
  batch = make_batch(agent=agent)
  learner = make_learner(agent, learning_rate=0.0, entropy_cost=0.5,
                         entropy_cost_end=0.1,
                         total_environment_frames=2 * frames_per_step)
  seen = []
  for _ in range(3):
    metrics = learner.step(batch)  # lr 0: the weights never move.
    others = (metrics['loss/total'] - metrics['policy/entropy_cost'] *
              metrics['loss/entropy'])
    seen.append((metrics['policy/entropy_cost'].numpy(), others.numpy()))
  np.testing.assert_allclose([cost for cost, _ in seen], [0.5, 0.3, 0.1],
                             rtol=1e-6)
  # With the entropy term taken out, every update's loss is the same.
  np.testing.assert_allclose([rest for _, rest in seen], seen[0][1],
                             rtol=1e-5)
  # ...and it is the loss of a learner whose weight is held at 0.1.
  held = make_learner(agent, entropy_cost=0.1)._grads_fn(batch)[1]
  np.testing.assert_allclose(metrics['loss/total'], held['loss/total'],
                             rtol=1e-5)
  assert held['policy/entropy_cost'].numpy() == np.float32(0.1)


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


@pytest.mark.parametrize('optimizer', ['adam', 'rmsprop'])
def test_each_update_graph_is_traced_once(optimizer):
  # The optimizers' slots are made before the first graph is built: a
  # `tf.function` that creates variables is traced a second time (seconds
  # at Atari scale, at every start of a run).
  agent, batch = agent_and_batch()
  learner = make_learner(agent, optimizer=optimizer)
  signature = tree.map_structure(
      lambda x: tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)), batch)
  learner.trace(signature, critic=True)
  for _ in range(2):
    learner.critic_step(batch)
    learner.step(batch)
  # pylint: disable=protected-access
  assert learner._step_fn.experimental_get_tracing_count() == 1
  assert learner._critic_step_fn.experimental_get_tracing_count() == 1


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


def test_rmsprop_matches_a_numpy_loop():
  # Three updates of w -= lr g / sqrt(m + epsilon),
  # m = decay m + (1 - decay) g^2 from m0 = 1, with the gradients of each
  # step's weights.
  agent, batch = agent_and_batch()
  learner = make_learner(agent, optimizer='rmsprop', learning_rate=1e-2)
  config = learner.config
  weights = values_of(agent.trainable_variables)
  mean_squares = [np.ones_like(w) for w in weights]
  for _ in range(3):
    grads = [g.numpy() for g in learner._grads_fn(batch)[0]]
    learner.step(batch)
    for i, g in enumerate(grads):
      mean_squares[i] = (config.rmsprop_decay * mean_squares[i] +
                         (1 - config.rmsprop_decay) * g**2)
      denominator = np.sqrt(mean_squares[i] + config.rmsprop_epsilon)
      weights[i] = weights[i] - 1e-2 * g / denominator
    for expected, variable in zip(weights, agent.trainable_variables):
      np.testing.assert_allclose(variable.numpy(), expected, rtol=1e-4,
                                 atol=1e-6)
    # Later gradients are taken at the updated weights, not the numpy ones.
    for w, v in zip(weights, agent.trainable_variables):
      w[...] = v.numpy()


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
  tags = event_files.tags(tmp_path)
  for tag in ('loss/policy_gradient', 'loss/baseline', 'loss/entropy',
              'loss/policy_cloning', 'loss/value_cloning', 'loss/total',
              'grad_norm', 'learning_rate', 'policy/entropy', 'action/action',
              'critic_pretrain/loss/baseline', 'critic_pretrain/grad_norm'):
    assert tag in tags, (tag, sorted(tags))


def test_transition_discounts_keep_gamma_on_truncation():
  done = np.array([[True, True, False]])
  truncated = np.array([[False, True, False]])
  np.testing.assert_allclose(
      transitions.transition_discounts(done, truncated, 0.9), [[0., .9, .9]])


def test_transition_discounts_per_frame_match_a_numpy_loop():
  rng = np.random.RandomState(3)
  done = rng.rand(7, 5) < 0.3
  truncated = done & (rng.rand(7, 5) < 0.5)
  frames = rng.randint(1, 9, size=(7, 5))
  got = transitions.transition_discounts(done, truncated, 0.99, frames,
                                         discounting_step_mul=4).numpy()
  gamma_frame = 0.99 ** (1 / 4)
  for t in range(7):
    for b in range(5):
      expected = 1.0
      for _ in range(frames[t, b]):  # One discount per frame.
        expected *= gamma_frame
      if done[t, b] and not truncated[t, b]:
        expected = 0.0
      np.testing.assert_allclose(got[t, b], expected, rtol=1e-6)
  # A step of the reference multiplier keeps the per-step discount.
  np.testing.assert_allclose(transitions.transition_discounts(
      done[:1] & False, truncated[:1], 0.99, np.full((1, 5), 4), 4),
                             np.full((1, 5), 0.99), rtol=1e-6)


def _prepared(learner, batch):
  """The learner's aligned outputs, rewards and discounts, as numpy."""
  aligned, rewards, discounts = learner._prepare(tree.map_structure(
      tf.convert_to_tensor, batch))
  return aligned, rewards.numpy(), discounts.numpy()


def test_per_frame_discounts_follow_the_executed_multipliers():
  """Under dynamic multipliers every column, replayed or fresh, discounts
  a step by gamma ** ((m + 1) / reference), m the executed multiplier."""
  agent, batch = agent_and_batch(dynamic_step_mul=True)
  env = batch.env_outputs
  env.done[:] = False
  env.done[3, 1] = True  # A termination: discount 0 whatever m is.
  env.truncated[:] = False
  learner = make_learner(agent, fixed_step_mul=False, discount_per='frame',
                         discounting=0.9, discounting_step_mul=2)
  _, _, discounts = _prepared(learner, batch)
  executed = batch.agent_outputs.action[types.STEP_MUL_KEY][1:] + 1
  expected = 0.9 ** (executed / 2.0)
  expected[2, 1] = 0.0
  np.testing.assert_allclose(discounts, expected, rtol=1e-6)
  per_step = make_learner(agent, fixed_step_mul=False, discounting=0.9)
  _, _, discounts = _prepared(per_step, batch)
  np.testing.assert_allclose(discounts[discounts > 0], 0.9)


def _numpy_vtrace_targets(values, bootstrap, rewards, done, truncated, rhos,
                          gamma):
  """V-trace targets of one column, episode by episode, written from the
  paper's sum: v_s = V_s + sum_t gamma^(t-s) (prod c) delta_t over the
  steps t >= s of x_s's own episode. A termination ends the sum with a 0
  bootstrap; a truncation ends it *before* the cut step, bootstrapping
  from that step's own value (the cut step's target is its value)."""
  steps = len(values)
  targets = np.zeros(steps)
  for s in range(steps):
    if truncated[s]:
      targets[s] = values[s]
      continue
    total, weight = values[s], 1.0
    for t in range(s, steps):
      if truncated[t]:
        break  # delta_t is not computed: x_{t+1} is another episode's.
      if done[t]:
        next_value = 0.0
      else:
        next_value = values[t + 1] if t + 1 < steps else bootstrap
      total += weight * min(1.0, rhos[t]) * (
          rewards[t] + gamma * next_value - values[t])
      if done[t]:
        break
      weight *= gamma * min(1.0, rhos[t])
    targets[s] = total
  return targets


def _targets(learner, batch):
  """The aligned batch and the loss extras (V-trace targets, advantages,
  log-rhos) the learner's step computes on `batch`."""
  aligned, rewards, discounts = _prepared(learner, batch)
  _, extra = losses.impala_clear_loss(
      *learner_lib._discrete_heads(aligned),  # pylint: disable=protected-access
      values=aligned.target.baseline,
      bootstrap_value=aligned.bootstrap_value,
      behaviour_values=aligned.behaviour.baseline, rewards=rewards,
      discounts=discounts, num_replay=learner.config.num_replay,
      baseline_cost=0.5, entropy_cost=0.01, policy_cloning_cost=0.01,
      value_cloning_cost=0.005)
  return aligned, extra


@pytest.mark.parametrize('column', [0, 1, 2, 3])
def test_vtrace_targets_never_cross_a_truncation(column):
  """Truncations in the middle and at the last step, in replayed (0, 1)
  and fresh (2, 3) columns: the targets equal a per-episode numpy sum, and
  the next episode's first observation never reaches the targets of the
  episode that was cut."""
  agent, batch = agent_and_batch()
  env = batch.env_outputs
  env.done[:] = False
  env.truncated[:] = False
  cut = {0: 3, 1: 6, 2: 2, 3: 6}  # env_outputs row holding the reset obs.
  for b, row in cut.items():
    env.done[row, b] = env.truncated[row, b] = True
  env.done[5, 2] = True  # And a real termination after the cut in column 2.
  learner = make_learner(agent, num_replay=2, discounting=0.9,
                         reward_clipping='none')
  aligned, extra = _targets(learner, batch)
  values = aligned.target.baseline.numpy()[:, column]
  expected = _numpy_vtrace_targets(
      values, aligned.bootstrap_value.numpy()[column],
      env.reward[1:, column], env.done[1:, column], env.truncated[1:, column],
      np.exp(extra.log_rhos.numpy()[:, column]), 0.9)
  np.testing.assert_allclose(extra.vs.numpy()[:, column], expected,
                             rtol=1e-5, atol=1e-6)
  last_row_of_episode = cut[column] - 1
  # The cut step learns nothing: its target is its value, its advantage 0.
  np.testing.assert_allclose(extra.vs.numpy()[last_row_of_episode, column],
                             values[last_row_of_episode], rtol=1e-6)
  assert extra.pg_advantages.numpy()[last_row_of_episode, column] == 0.0

  # Changing the next episode's first observation (and so its value)
  # leaves every target of the cut episode as it was.
  changed = tree.map_structure(np.copy, batch)
  changed.env_outputs.observation['vector'][cut[column], column] += 5.0
  aligned2, extra2 = _targets(learner, changed)
  before = slice(0, cut[column])
  np.testing.assert_array_equal(extra2.vs.numpy()[before, column],
                                extra.vs.numpy()[before, column])
  np.testing.assert_array_equal(extra2.pg_advantages.numpy()[before, column],
                                extra.pg_advantages.numpy()[before, column])
  # ...whereas the new observation's value did change: it had a way in.
  if cut[column] < 6:
    assert aligned2.target.baseline.numpy()[cut[column], column] != values[
        cut[column]]
  else:
    assert aligned2.bootstrap_value.numpy()[column] != (
        aligned.bootstrap_value.numpy()[column])


@pytest.mark.parametrize('overrides,match', [
    ({'discount_per': 'episode'}, 'discount_per'),
    ({'discounting_step_mul': 0}, 'discounting_step_mul'),
    ({'num_replay': 4}, 'num_replay'),
    ({'num_replay': -1}, 'num_replay'),
    ({'unroll_length': 0}, 'unroll_length'),
    ({'optimizer': 'sgd'}, 'optimizer'),
    ({'step_mul': 0}, 'step_mul'),
    ({'discounting': 1.5}, 'discounting'),
    ({'learning_rate_warmup_frames': -1}, 'learning_rate_warmup_frames'),
    ({'entropy_cost_end': -0.1}, 'entropy_cost_end must be >= 0'),
    ({'entropy_cost_end': float('nan')}, 'entropy_cost_end must be >= 0'),
    ({'entropy_cost': -1.0}, 'entropy_cost must be >= 0'),
    ({'learning_rate_warmup_frames': 100, 'total_environment_frames': 100},
     'never reach its peak'),
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
