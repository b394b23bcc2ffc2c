"""Tests of Progress & Compress: the two columns, the loss, the phases, the
learner, the run and the flags."""


import numpy as np
import pytest
import tensorflow as tf

import agents
from agents import pnc as pnc_agents
from agents import testing
from clear import checkpoint as checkpoint_lib
from clear import train
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import config as impala_config
from clear.algorithms.impala import policy as impala_policy
from clear.algorithms.pnc import policy as pnc_policy
from clear.continual import clock as clock_lib
from clear.continual import methods as continual_methods
from clear.continual import pnc
from clear.continual.methods import base
from clear.runtime import evaluation
from clear.runtime import run_config
from clear.runtime import run_loop
from tests.event_files import saved_tensors
from tests.event_files import scalar_series
from tests import train_flags
from tests.random_batches import CARTPOLE_SPEC
from tests.random_batches import random_batch

MINATAR_SPEC = types.EnvSpec(
    observation_spec={'board': types.ArraySpec((10, 10, 4), np.bool_)},
    action_spec={'action': types.DiscreteSpec(6)}, name='minatar:Test')


@pytest.fixture(autouse=True)
def seeded():
  tf.random.set_seed(0)


def unroll_inputs(spec, t=6, b=3, seed=0):
  rng = np.random.default_rng(seed)
  return (testing.random_actions(spec, (t, b), rng),
          testing.random_step_output(spec, (t, b), rng, done_prob=0.2))


def shapes(module):
  return {v.name.split('/', 2)[-1]: tuple(v.shape)
          for v in module.trainable_variables}


# --- The two columns ----------------------------------------------------------


def test_lateral_adaptors_have_the_shapes_of_the_layers_they_feed():
  # MinAtar: conv 16 3x3 VALID (10x10 -> 8x8, flattened 1024), linear 128,
  # LSTM 16, 6 actions. Laterals into every layer but the conv.
  agent = pnc_agents.make_pnc_agent(MINATAR_SPEC, seed=1, core_size=16)
  assert shapes(agent.laterals) == {
      'torso_1/v/w:0': (1024, 128), 'torso_1/v/b:0': (128,),
      'torso_1/u/w:0': (128, 128), 'torso_1/alpha:0': (128,),
      'core/v/w:0': (128, 16), 'core/v/b:0': (16,),
      'core/u/w:0': (16, 64), 'core/alpha:0': (64,),
      'action_head/v/w:0': (16, 6), 'action_head/v/b:0': (6,),
      'action_head/u/w:0': (6, 6), 'action_head/alpha:0': (6,),
      'baseline/v/w:0': (16, 1), 'baseline/v/b:0': (1,),
      'baseline/u/w:0': (1, 1), 'baseline/alpha:0': (1,)}
  for alpha in (v for v in agent.laterals.trainable_variables
                if 'alpha' in v.name):
    assert 0.0 <= np.min(alpha) and np.max(alpha) <= 0.1
  # The IMPALA shallow torso: a conv adaptor into its second convolution
  # ('SAME' 8x8 stride 4 then 4x4 stride 2: 36x36 -> 9x9x16 -> 5x5x32).
  spec = testing.atari_spec(4, frame_shape=(36, 36, 2))
  agent = pnc_agents.make_pnc_agent(spec, network='impala_shallow',
                                    core_size=8, torso_size=32)
  found = shapes(agent.laterals)
  assert found['torso_1/v/w:0'] == (4, 4, 16, 32)
  assert found['torso_1/u/w:0'] == (1, 1, 32, 32)
  assert found['torso_1/alpha:0'] == (32,)
  assert found['torso_2/v/w:0'] == (5 * 5 * 32, 32)
  # A feed-forward MLP agent: no core lateral; heads read the core input.
  agent = pnc_agents.make_pnc_agent(CARTPOLE_SPEC, network='mlp',
                                    core_size=0, mlp_sizes=(8, 5))
  found = shapes(agent.laterals)
  assert agent.laterals.core is None
  assert found['torso_1/v/w:0'] == (8, 5)
  assert found['action_head/v/w:0'] == (5 + 1 + 2, 2)


@pytest.mark.parametrize('spec,kwargs', [
    (MINATAR_SPEC, dict(core_size=16)),
    (MINATAR_SPEC, dict(core_size=16, core='layer_norm_lstm',
                        torso_norm='layer_norm')),
    (CARTPOLE_SPEC, dict(network='mlp', core_size=0)),
    (testing.sc2_spec(), dict(core_size=8)),  # FullyConv, masks, spatial.
])
def test_columns_compute_what_a_plain_agent_computes(spec, kwargs):
  # The knowledge base is exactly `Agent.unroll`; with every alpha at 0 the
  # active column is exactly its own plain agent (the laterals add 0).
  agent = pnc_agents.make_pnc_agent(spec, seed=4, **kwargs)
  actions, env = unroll_inputs(spec)
  state = agent.initial_state(3)
  both, final = agent.unroll_both(actions, env, state)
  plain, plain_final = agent.knowledge_base.unroll(
      actions, env, state[pnc_agents.KNOWLEDGE_BASE])
  tf.nest.map_structure(np.testing.assert_array_equal,
                        both.knowledge_base, plain)
  tf.nest.map_structure(np.testing.assert_array_equal,
                        final[pnc_agents.KNOWLEDGE_BASE], plain_final)
  plain_active, _ = agent.active.unroll(actions, env,
                                        state[pnc_agents.ACTIVE])
  with pytest.raises(AssertionError):  # The laterals carry something...
    np.testing.assert_array_equal(both.active.baseline,
                                  plain_active.baseline)
  for v in agent.laterals.trainable_variables:
    if 'alpha' in v.name:
      v.assign(tf.zeros_like(v))
  active, _ = agent.unroll(actions, env, state)  # ... and nothing at 0.
  tf.nest.map_structure(np.testing.assert_array_equal, active, plain_active)


def test_the_knowledge_base_reaches_the_active_column_through_the_laterals():
  agent = pnc_agents.make_pnc_agent(MINATAR_SPEC, seed=2, core_size=16)
  actions, env = unroll_inputs(MINATAR_SPEC)
  state = agent.initial_state(3)
  before, _ = agent.unroll(actions, env, state)
  kb_weights = [v.numpy() for v in agent.knowledge_base_variables]
  for v in agent.knowledge_base_variables:
    v.assign_add(0.3 * tf.random.normal(v.shape))
  after, _ = agent.unroll(actions, env, state)
  for key in ('action',):
    assert np.max(np.abs(after.logits[key] - before.logits[key])) > 1e-3
  # Only through the laterals: at alpha 0 the knowledge base is invisible.
  for v in agent.laterals.trainable_variables:
    if 'alpha' in v.name:
      v.assign(tf.zeros_like(v))
  moved, _ = agent.unroll(actions, env, state)
  for v, w in zip(agent.knowledge_base_variables, kb_weights):
    v.assign(w)
  back, _ = agent.unroll(actions, env, state)
  tf.nest.map_structure(np.testing.assert_array_equal, moved, back)


def test_stepping_equals_unrolling_and_a_reset_redraws_the_active_column():
  agent = pnc_agents.make_pnc_agent(MINATAR_SPEC, seed=3, core_size=16)
  actions, env = unroll_inputs(MINATAR_SPEC, t=4, b=2)
  state = agent.initial_state(2)
  unrolled, final = agent.unroll(actions, env, state)
  step = tf.function(agent.step, autograph=False)
  for t in range(4):
    output, state = step(tf.nest.map_structure(lambda x, t=t: x[t], env),
                         {k: v[t] for k, v in actions.items()}, state)
    np.testing.assert_allclose(output.logits['action'],
                               unrolled.logits['action'][t], atol=1e-5)
  tf.nest.map_structure(
      lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5), state, final)
  kb = [v.numpy() for v in agent.knowledge_base_variables]
  agent.reset_active_column(pnc_agents.active_column_seed(3, 1))
  fresh = pnc_agents.make_pnc_agent(MINATAR_SPEC, seed=3, core_size=16)
  fresh.reset_active_column(pnc_agents.active_column_seed(3, 1))
  other = pnc_agents.make_pnc_agent(MINATAR_SPEC, seed=3, core_size=16)
  for a, b, c in zip(agent.active_variables, fresh.active_variables,
                     other.active_variables):
    np.testing.assert_array_equal(a, b)  # The seed decides the draw...
  assert any(not np.array_equal(a, c) for a, c in zip(
      agent.active_variables, other.active_variables))  # ... a new one.
  for v, w in zip(agent.knowledge_base_variables, kb):
    np.testing.assert_array_equal(v, w)
  with pytest.raises(ValueError, match='separate_critic=False'):
    pnc_agents.make_pnc_agent(MINATAR_SPEC, separate_critic=True)


# --- The loss and the phases --------------------------------------------------


def test_distillation_loss_matches_numpy_with_masked_actions():
  rng = np.random.RandomState(0)
  t, b = 4, 3
  student = {'a': rng.randn(t, b, 5).astype(np.float32) * 2,
             'b': rng.randn(t, b, 3).astype(np.float32)}
  teacher = {'a': rng.randn(t, b, 5).astype(np.float32) * 2,
             'b': rng.randn(t, b, 3).astype(np.float32)}
  mask = rng.rand(t, b, 5) < 0.4
  mask[..., 0] = False  # Choice 0 stays available.
  for logits in (student, teacher):  # Masked as the agent masks them.
    logits['a'] = np.where(mask, agents.MASKED_LOGIT,
                           logits['a']).astype(np.float32)

  def log_softmax(x):
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))

  expected = np.zeros((t, b))
  expected_grads = {}
  for key in student:
    p, q = np.exp(log_softmax(teacher[key])), np.exp(log_softmax(student[key]))
    for i in range(t):
      for j in range(b):
        for k in range(p.shape[-1]):
          if p[i, j, k] > 0:
            expected[i, j] += p[i, j, k] * (np.log(p[i, j, k]) -
                                            np.log(q[i, j, k]))
    expected_grads[key] = q - p  # d KL / d student logits.
  student_vars = {k: tf.Variable(v) for k, v in student.items()}
  teacher_vars = {k: tf.Variable(v) for k, v in teacher.items()}
  with tf.GradientTape(persistent=True) as tape:
    loss = pnc.distillation_loss(student_vars, teacher_vars)
  np.testing.assert_allclose(loss.per_step, expected, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(loss.total, expected.sum(), rtol=1e-4)
  assert np.all(np.isfinite(loss.per_step))
  for key in student:
    grad = tape.gradient(loss.total, student_vars[key])
    np.testing.assert_allclose(grad, expected_grads[key], atol=1e-5)
    assert tape.gradient(loss.total, teacher_vars[key]) is None
  masked_grad = tape.gradient(loss.total, student_vars['a']).numpy()[mask]
  np.testing.assert_array_equal(masked_grad, np.zeros_like(masked_grad))
  # Identical policies: exactly 0.
  assert pnc.distillation_loss(teacher, teacher).total.numpy() == 0.0
  with pytest.raises(ValueError, match='distillation_loss: .*same'):
    pnc.distillation_loss({'a': student['a']}, teacher)
  with pytest.raises(ValueError, match=r"distillation_loss: "
                     r"student_logits\['a'\] must have rank 3"):
    pnc.distillation_loss({'a': student['a'][0]}, {'a': teacher['a'][0]})


def test_phases_fall_where_hand_computed():
  progress, compress = pnc.PROGRESS, pnc.COMPRESS
  # 1M frames a visit, half and half.
  visits = clock_lib.Clock.hidden(1_000_000)
  for frames, phase in [(0, progress), (499_999, progress),
                        (500_000, compress), (999_999, compress),
                        (1_000_000, progress), (1_499_360, progress),
                        (1_500_000, compress), (14_999_999, compress)]:
    assert pnc.phase_at(frames, visits.period_at(frames), 0.5) == phase, (
        frames)
  # 640-frame updates: update 782 (from 500,480 frames) is the first to
  # compress; 781 (from 499,840) the last to progress.
  assert pnc.phase_at(781 * 640, visits.period_at(0), 0.5) == progress
  assert pnc.phase_at(782 * 640, visits.period_at(0), 0.5) == compress
  # 30% of 10 frames: offsets 0-2 progress, 3-9 compress.
  tens = clock_lib.Clock.hidden(10)
  assert [pnc.phase_at(f, tens.period_at(f), 0.3) for f in range(12, 24)] == (
      [progress] * 1 + [compress] * 7 + [progress] * 3 + [compress])
  # Periods of their own lengths: 7 frames (offsets 0-3 progress), then 20
  # (offsets 0-9).
  period = clock_lib.Period(1, 7, 27)
  assert [pnc.phase_at(f, period, 0.5) for f in (7, 16, 17, 26)] == [
      progress, progress, compress, compress]
  assert pnc.compress_start(7, 0.5) == 4  # ceil(3.5)
  for bad in (0.0, 1.0, 1.5):
    with pytest.raises(ValueError, match='progress_fraction must be in'):
      pnc.phase_at(0, tens.period_at(0), bad)
  with pytest.raises(ValueError, match='before the period'):
    pnc.phase_at(6, period, 0.5)


# --- The learner --------------------------------------------------------------


def make_policy(seed=0, core_size=8, visit=40, **settings):
  """20 frames an update, `visit` frames a visit of a task (a period):
  progress, then compress."""
  config = impala_config.LearnerConfig(batch_size=4, num_replay=0,
                                       unroll_length=5)
  method = continual_methods.METHODS['pnc'](
      continual_methods.METHODS['pnc'].Settings(**{
          'ewc_fisher_batches': 2, 'ewc_lambda': 50.0, **settings}),
      base.Context(clock_lib.Clock.hidden(visit), 2, seed))
  return registry.make_policy('impala', CARTPOLE_SPEC,
                              policy_lib.AgentConfig('mlp', core_size),
                              config, seed=seed, method=method)


def end_visit(policy, index, task=None):
  """Tells `policy` that period `index` (of 40 frames) has ended."""
  return policy.consolidate(clock_lib.Period(index, 40 * index,
                                             40 * (index + 1), task))


def values(variables):
  return [v.numpy() for v in variables]


def moved(before, variables):
  """Whether each of `variables` differs from its value in `before`."""
  return [not np.array_equal(a, b) for a, b in zip(before, values(variables))]


def train_on(policy, seeds):
  """One update on each `random_batch` of `seeds`, its unrolls kept as the
  run loop keeps them; per update (phase, stats, KB moved, AC moved)."""
  steps = []
  for seed in seeds:
    kb, active = (policy.agent.knowledge_base_variables,
                  policy.agent.active_variables)
    kb_before, active_before = values(kb), values(active)
    phase = policy.learner.phase_at(policy.num_env_frames)
    batch = random_batch(policy, seed)
    stats = policy.learn(batch)
    policy.observe(run_loop.split_unrolls(batch))
    steps.append((phase, stats, moved(kb_before, kb),
                  moved(active_before, active)))
  return steps


def visits_policy():
  """80 frames a visit: progress, progress, compress, compress; a
  feed-forward network (cheaper to trace: the other tests and the run's
  cover the recurrent core)."""
  return make_policy(core_size=0, visit=80, ewc_fisher_frames=40,
                     ewc_gamma=0.5)


@pytest.fixture(scope='module')
def mid_compress():
  """A policy trained as a run trains it: a visit of CartPole, the switch
  (Fisher, anchor, a new active column), then the second visit up to the
  middle of its compress phase (140 frames).

  Returns:
    (policy, the steps of `train_on` before the switch, (KB moved, the
    active column's values) after the switch, the steps after it).
  """
  tf.random.set_seed(0)
  policy = visits_policy()
  first = train_on(policy, range(4))
  kb, active = (policy.agent.knowledge_base_variables,
                policy.agent.active_variables)
  kb_before = values(kb)
  end_visit(policy, 0, 0)
  switch = moved(kb_before, kb), values(active)
  second = train_on(policy, range(4, 7))
  return policy, first, switch, second


def test_progress_moves_only_the_active_column_and_compress_only_the_kb(
    mid_compress):
  policy, first, switch, second = mid_compress
  assert isinstance(policy, pnc_policy.PncPolicy)
  progress, compress = pnc.PROGRESS, pnc.COMPRESS
  assert [phase for phase, *_ in first + second] == [
      progress, progress, compress, compress, progress, progress, compress]
  for phase, stats, kb_moved, active_moved in first + second:
    if phase == progress:  # The knowledge base is frozen.
      assert not any(kb_moved) and any(active_moved)
      assert 'loss/policy_gradient' in stats
      assert 'loss/distillation' not in stats
    else:  # The active column is.
      assert not any(active_moved) and any(kb_moved)
      assert stats['loss/distillation'] > 0
      assert 'loss/policy_gradient' not in stats
  # No anchor before the first switch; after it, the first compress update
  # starts at the anchor (progress left the knowledge base there).
  assert [stats['loss/ewc'] for phase, stats, *_ in first + second
          if phase == compress] == [0.0, 0.0, 0.0]
  # The switch draws a new active column (and adaptors), the one of the
  # policy's seed for segment 1, and leaves the knowledge base alone.
  kb_moved, active = switch
  assert not any(kb_moved)
  drawn = pnc_policy.make_agent(CARTPOLE_SPEC, policy_lib.AgentConfig('mlp', 0),
                                seed=0)
  drawn.reset_active_column(pnc_agents.active_column_seed(0, 1))
  for a, b in zip(active, values(drawn.active_variables)):
    np.testing.assert_array_equal(a, b)
  assert policy.num_env_frames == 140 and policy.num_updates == 7


def test_a_checkpoint_holds_all_of_pnc_and_resumes_bit_for_bit(
    mid_compress, tmp_path):
  # The trained policy is saved in the middle of a compress phase: a real
  # checkpoint and the kept unrolls, as the run loop writes them. A fresh
  # policy restored from them must go on exactly as the first does: a
  # compress update away from the anchor, the switch (the Fisher drawn
  # from the restored unrolls, merged into the running one; the next
  # active column), a progress update.
  first, *_ = mid_compress
  assert first.learner.phase_at(first.num_env_frames) == pnc.COMPRESS

  def state(policy):
    learner = policy.learner
    return (list(policy.agent.trainable_variables) +
            [policy.agent.rng.state] + list(learner.optimizer.variables) +
            list(learner.knowledge_base_optimizer.variables) +
            list(learner.knowledge_base_ewc.variables) +
            [learner.num_env_frames, learner.num_updates,
             learner.learning_rate])

  def go_on(policy):
    steps = [stats for _, stats, *_ in train_on(policy, [7])]
    steps.append(end_visit(policy, 1, 1))
    steps.extend(stats for _, stats, *_ in train_on(policy, [8]))
    steps[1].pop('seconds')
    return steps

  path = checkpoint_lib.Checkpointer(str(tmp_path / 'checkpoints'),
                                     first.checkpointables()).save()
  first.method.kept.buffer.save(str(tmp_path / 'ewc_fisher'))
  saved = set(tf.train.load_checkpoint(path).get_variable_to_shape_map())
  for prefix in ('agent/', 'pnc_agent/active/', 'pnc_agent/laterals/',
                 'pnc_agent/rng/', 'optimizer/', 'continual/anchors/',
                 'continual/fishers/', 'continual/num_boundaries/',
                 'pnc_knowledge_base_optimizer/'):
    assert any(k.startswith(prefix) for k in saved), prefix

  second = visits_policy()
  assert checkpoint_lib.Checkpointer(
      str(tmp_path / 'checkpoints'),
      second.checkpointables()).restore_latest() == path
  second.method.kept.buffer.restore(
      str(tmp_path / 'ewc_fisher'),
      run_loop.split_unrolls(policy_lib.example_batch(second, 5, 1))[0])
  assert len(second.method.kept.buffer) == len(first.method.kept.buffer) == 8
  expected, got = go_on(first), go_on(second)
  assert expected[0]['loss/ewc'] > 0  # Compress, away from the anchor.
  assert expected[1]['fisher_batches'] == 2
  assert expected[1]['active_column_reset'] == 1.0
  assert 'loss/policy_gradient' in expected[2]  # The next visit's progress.
  assert got == expected
  pairs = list(zip(state(first), state(second)))
  assert len(pairs) > 60
  for a, b in pairs:
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.name)


def test_a_restore_stopped_before_tracing_keeps_both_optimizers_slots(
    mid_compress, tmp_path):
  # A resumed run stopped before its learner traces saves what it restored
  # (`Policy.create_slots`): the knowledge base's optimizer slots too.
  first, *_ = mid_compress
  path = checkpoint_lib.Checkpointer(str(tmp_path / 'first'),
                                     first.checkpointables()).save()
  second = visits_policy()
  checkpoint_lib.Checkpointer(str(tmp_path / 'first'),
                              second.checkpointables()).restore_latest()
  second.create_slots()
  again = checkpoint_lib.Checkpointer(str(tmp_path / 'second'),
                                      second.checkpointables()).save()
  reader, reread = (tf.train.load_checkpoint(p) for p in (path, again))
  saved = reader.get_variable_to_shape_map()
  assert saved.keys() == reread.get_variable_to_shape_map().keys()
  slots = [k for k in saved if k.startswith((  # Adam's moments.
      'pnc_knowledge_base_optimizer/m/', 'pnc_knowledge_base_optimizer/v/'))]
  assert len(slots) == 2 * len(first.agent.knowledge_base_variables)
  for key in saved:
    if key != '_CHECKPOINTABLE_OBJECT_GRAPH':
      np.testing.assert_array_equal(reader.get_tensor(key),
                                    reread.get_tensor(key), err_msg=key)


def test_without_reset_a_switch_keeps_the_active_column():
  policy = make_policy(pnc_reset_active_column=False)
  for unroll in run_loop.split_unrolls(random_batch(policy, 3)):
    policy.observe([unroll])
  active = values(policy.agent.active_variables)
  stats = end_visit(policy, 0, 0)
  assert stats['active_column_reset'] == 0.0 and stats['fisher_batches'] == 2
  assert not any(moved(active, policy.agent.active_variables))
  assert int(policy.learner.knowledge_base_ewc.num_boundaries.numpy()) == 1


def test_compress_loss_is_the_kl_to_the_active_column_plus_online_ewc():
  policy = make_policy(ewc_lambda=50.0, ewc_gamma=0.5)
  learner = policy.learner
  kb = policy.agent.knowledge_base_variables
  for unroll in run_loop.split_unrolls(random_batch(policy, 7)):
    policy.observe([unroll])
  stats = end_visit(policy, 0, 0)
  assert stats['fisher_batches'] == 2 and stats['fisher_max'] > 0
  assert stats['active_column_reset'] == 1.0
  state = learner.knowledge_base_ewc
  for anchor, v in zip(state.anchors[0], kb):
    np.testing.assert_array_equal(anchor, v)
  assert end_visit(policy, 0, 0) == {}  # Once per switch.
  for v in kb:  # Away from the anchor.
    v.assign_add(0.1 * tf.random.normal(v.shape))
  batch = random_batch(policy, 8)
  grads, metrics = learner._compress_grads_fn(batch)
  # The reference: the KL from the two columns' own unrolls, numpy's KL,
  # and lambda / 2 sum F (theta - theta*)^2.
  outputs, _ = policy.agent.unroll_both(batch.agent_outputs.action,
                                        batch.env_outputs, batch.agent_state)
  p = tf.nn.softmax(outputs.active.logits['action'][:-1]).numpy()
  q = tf.nn.softmax(outputs.knowledge_base.logits['action'][:-1]).numpy()
  kl = np.sum(p * (np.log(p) - np.log(q)))
  fishers = values(state.fishers[0])
  deltas = [v.numpy() - a.numpy() for v, a in zip(kb, state.anchors[0])]
  penalty = 25.0 * sum(np.sum(f * d * d) for f, d in zip(fishers, deltas))
  assert penalty > 0
  assert metrics['loss/distillation'].numpy() == pytest.approx(kl, rel=1e-4)
  assert metrics['loss/ewc'].numpy() == pytest.approx(penalty, rel=1e-4)
  assert metrics['loss/total'].numpy() == pytest.approx(kl + penalty,
                                                        rel=1e-4)
  assert len(grads) == len(kb)
  # The KB's Fisher is its policy-gradient loss's: its baseline head, which
  # compress never trains, gets none.
  critic = {v.ref() for v in policy.agent.knowledge_base.critic_variables}
  for f, v in zip(fishers, kb):
    if v.ref() in critic:
      np.testing.assert_array_equal(f, np.zeros_like(f))


def test_the_kb_fisher_weighs_steps_by_the_active_columns_critic():
  # The knowledge base's baseline head is never trained: its Fisher takes
  # the values of the active column's critic, and that head plays no part.
  policy = make_policy()
  learner, agent = policy.learner, policy.agent
  batch = random_batch(policy, 4)

  def squared_grads():
    return [g.numpy()**2 for g in learner._kb_fisher_grads_fn(batch)]

  reference = squared_grads()
  assert max(np.max(f) for f in reference) > 0
  kb_critic = {v.ref() for v in agent.knowledge_base.critic_variables}
  for v in agent.knowledge_base_variables:
    if v.ref() in kb_critic:
      v.assign_add(tf.random.normal(v.shape))
  for a, b in zip(squared_grads(), reference):
    np.testing.assert_array_equal(a, b)
  for v in agent.active.critic_variables:
    v.assign_add(tf.random.normal(v.shape))
  assert any(not np.allclose(a, b) for a, b in zip(squared_grads(),
                                                   reference))


def test_evaluation_plays_the_knowledge_base_as_a_plain_agent():
  policy = make_policy(seed=9)
  for v in policy.agent.knowledge_base_variables:  # Away from seed 9's.
    v.assign_add(0.1 * tf.random.normal(v.shape))
  plain = registry.make_policy('impala', CARTPOLE_SPEC,
                                 policy_lib.AgentConfig('mlp', 8), seed=9)
  assert type(plain) is impala_policy.ImpalaPolicy
  plain.set_weights(policy.evaluation_weights())
  actions, env = unroll_inputs(CARTPOLE_SPEC)
  state = policy.agent.initial_state(3)
  expected, _ = policy.agent.knowledge_base.unroll(
      actions, env, state[pnc_agents.KNOWLEDGE_BASE])
  got, _ = plain.agent.unroll(actions, env, plain.agent.initial_state(3))
  np.testing.assert_array_equal(got.logits['action'],
                                expected.logits['action'])
  # The actors' copies take all the weights and act with the active column.
  actor = registry.make_policy(
      'impala', CARTPOLE_SPEC,
      policy_lib.AgentConfig('mlp', 8, pnc_columns=True), seed=5)
  assert isinstance(actor, pnc_policy.PncPolicy) and actor.learner is None
  actor.set_weights(policy.get_weights())
  for a, b in zip(actor.get_weights(), policy.get_weights()):
    np.testing.assert_array_equal(a, b)
  # A plain IMPALA policy refuses to learn with 'pnc', which brings its
  # own policy.
  with pytest.raises(ValueError, match="'pnc' trains its own policy"):
    impala_policy.ImpalaPolicy(CARTPOLE_SPEC, policy_lib.AgentConfig('mlp', 8),
                               policy.learner.config, method=policy.method)


# --- The run ------------------------------------------------------------------


def sequence_config(logdir, **kwargs):
  """CartPole then Acrobot: 4 fresh unrolls of 5 steps = 20 frames an
  update, 80 frames (4 updates: 2 progress, 2 compress) a visit."""
  learner_config = impala_config.LearnerConfig(
      batch_size=4, num_replay=0, unroll_length=5,
      total_environment_frames=160)
  continual = continual_methods.make_config(
      'pnc', ewc_fisher_batches=2, ewc_fisher_frames=60, ewc_lambda=100.0)
  return run_config.RunConfig(**{
      'continual': continual,
      'env_name': 'gym:CartPole-v1,gym:Acrobot-v1', 'env_options': {},
      'algorithm': 'impala', 'agent_config': policy_lib.AgentConfig('mlp', 8),
      'learner_config': learner_config, 'logdir': str(logdir),
      'num_actors': 1, 'envs_per_actor': 4, 'backend': 'inline', 'seed': 2,
      'frames_per_task': 80, 'num_task_cycles': 1, 'eval_episodes': 1,
      'eval_max_steps': 5, 'log_interval_s': 3600.0,
      'checkpoint_interval_s': 3600.0, **kwargs})


@pytest.mark.slow  # ~20-40 s: three short runs.
def test_a_run_alternates_phases_and_a_resume_continues_bit_for_bit(
    tmp_path, monkeypatch):
  whole = sequence_config(tmp_path / 'whole')
  run_loop.train(whole)
  assert scalar_series(tmp_path / 'whole', 'continual/pnc_phase') == [
      (0, 0.0), (40, 1.0), (80, 0.0), (120, 1.0)]
  distillation = scalar_series(tmp_path / 'whole', 'loss/distillation')
  assert [step for step, _ in distillation] == [60, 80, 140, 160]
  penalties = scalar_series(tmp_path / 'whole', 'loss/ewc')
  # Zero before the first switch and at the first compress update after it
  # (the knowledge base is still at its anchor), positive after.
  assert [value > 0 for _, value in penalties] == [False, False, False, True]
  assert scalar_series(tmp_path / 'whole', 'continual/active_column_reset') == [
      (80, 1.0)]
  assert len(scalar_series(tmp_path / 'whole', 'loss/policy_gradient')) == 4
  # Test mode plays the knowledge base, read from the checkpoint as a plain
  # agent.
  acting, _ = evaluation.restored_acting_policy(whole)
  assert type(acting) is impala_policy.ImpalaPolicy
  saved = saved_tensors(tmp_path / 'whole')
  restored = run_loop._Run(whole)
  restored.checkpointer.expect_partial()  # No update: no optimizer slots.
  for a, b in zip(acting.get_weights(),
                  restored.policy.evaluation_weights()):
    np.testing.assert_array_equal(a, b)
  # In parts: stopped right after the update that ended CartPole, as if
  # killed before the switch was handled; the resumed run handles it first
  # (the knowledge base's Fisher from the unrolls saved with the
  # checkpoint, a new active column that the actors then receive), and
  # everything matches the uninterrupted run bit for bit.
  parts = whole._replace(logdir=str(tmp_path / 'parts'))
  with monkeypatch.context() as patch:
    patch.setattr(run_loop._Run, 'consolidate', lambda self: None)
    assert run_loop.train(parts, max_updates=4).num_env_frames == 80
  assert saved_tensors(tmp_path / 'parts', 'continual/num_boundaries')[
      'continual/num_boundaries/.ATTRIBUTES/VARIABLE_VALUE'] == 0
  run_loop.train(parts)
  for tag in ('loss/distillation', 'loss/ewc', 'loss/policy_gradient'):
    assert scalar_series(tmp_path / 'parts', tag) == scalar_series(
        tmp_path / 'whole', tag), tag
  parts_saved = saved_tensors(tmp_path / 'parts')
  assert saved.keys() == parts_saved.keys()
  compared = 0
  for name, value in saved.items():
    if name.startswith(('agent/', 'pnc_agent/', 'optimizer/', 'continual/',
                        'pnc_knowledge_base_optimizer/')):
      np.testing.assert_array_equal(parts_saved[name], value, err_msg=name)
      compared += 1
  assert any(k.startswith('pnc_knowledge_base_optimizer/') for k in saved)
  assert compared > 50


def test_a_pnc_run_records_its_schedule_and_refuses_another(tmp_path):
  config = sequence_config(tmp_path)
  run_loop._Run(config).record_identity()
  recorded = checkpoint_lib.read_run_identity(str(tmp_path))
  assert (recorded['continual_method'], recorded['pnc_progress_fraction'],
          recorded['pnc_reset_active_column']) == ('pnc', 0.5, True)
  continual = config.continual
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match='pnc_progress_fraction'):
    run_loop._Run(config._replace(continual=continual._replace(
        settings=continual.settings._replace(pnc_progress_fraction=0.25))))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match="continual_method='pnc', not 'online_ewc'"):
    run_loop._Run(config._replace(
        continual=continual_methods.make_config('online_ewc')))
  # Other methods' actors build the run's own agent config.
  for method in ('none', 'ewc', 'online_ewc', 'l2'):
    other = config._replace(continual=continual_methods.make_config(method))
    assert continual_methods.actor_agent_config(other) is other.agent_config
  assert continual_methods.actor_agent_config(config).pnc_columns


# --- The flags ----------------------------------------------------------------


parse = train_flags.parse


SEQUENCE = ['--env=minatar:Breakout,minatar:Freeway', '--frames_per_task=10']


@pytest.mark.parametrize('args,message', [
    (SEQUENCE + ['--pnc_progress_fraction=0.3'],
     '--pnc_progress_fraction needs --continual_method=pnc'),
    (SEQUENCE + ['--continual_method=online_ewc',
                 '--nopnc_reset_active_column'],
     '--pnc_reset_active_column needs --continual_method=pnc'),
    (SEQUENCE + ['--continual_method=pnc', '--pnc_progress_fraction=1'],
     r'--pnc_progress_fraction must be in \(0, 1\)'),
    (SEQUENCE + ['--continual_method=pnc', '--separate_critic'],
     '--continual_method=pnc needs --noseparate_critic'),
    (['--env=minatar:Breakout', '--continual_method=pnc'],
     '--continual_method=pnc needs a task sequence'),
    (SEQUENCE + ['--algorithm=ppg', '--continual_method=pnc'],
     '--continual_method applies to --algorithm=impala only'),
])
def test_bad_flags_get_one_clear_message(args, message):
  with pytest.raises(train.app.UsageError, match=message):
    parse(*args)


def test_flags_reach_the_learner():
  config = parse(*SEQUENCE, '--continual_method=pnc', '--ewc_gamma=0.9',
                 '--ewc_lambda=200', '--pnc_progress_fraction=0.25',
                 '--nopnc_reset_active_column', '--replay_proportion=0')
  settings = config.continual.settings
  assert (config.continual.method, settings.ewc_gamma, settings.ewc_lambda,
          settings.pnc_progress_fraction, settings.pnc_reset_active_column,
          config.learner_config.num_replay) == ('pnc', 0.9, 200.0, 0.25,
                                                False, 0)
  defaults = parse(*SEQUENCE, '--continual_method=pnc').continual.settings
  assert (defaults.pnc_progress_fraction, defaults.pnc_reset_active_column,
          defaults.ewc_gamma, defaults.ewc_lambda) == (0.5, True, 0.99, 1.0)
