"""Tests of EWC and online EWC: the maths, the method, the run, the flags."""

import glob
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from clear import checkpoint as checkpoint_lib
from clear import train
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import learner as learner_lib
from clear.algorithms.impala import policy as impala_policy
from clear.continual import clock as clock_lib
from clear.continual import ewc
from clear.continual import methods
from clear.continual import schedule as schedule_lib
from clear.continual.methods import base
from clear.continual.methods import ewc as ewc_methods
from clear.runtime import run_config
from clear.runtime import run_loop
from tests.event_files import saved_tensors
from tests.event_files import scalar_series
from tests import train_flags
from tests.random_batches import CARTPOLE_SPEC
from tests.random_batches import random_batch



@pytest.fixture(autouse=True)
def seeded():
  tf.random.set_seed(0)


# --- The maths ----------------------------------------------------------------


def test_fisher_is_the_mean_squared_batch_gradient_of_a_tiny_network():
  # A linear network y = x W + b with loss_m = 0.5 sum (y - target)^2 on
  # batch m: numpy's hand-derived gradients dW = x^T e, db = sum e (e the
  # residuals) against TensorFlow's, squared and averaged over the batches.
  rng = np.random.RandomState(0)
  weights = tf.Variable(rng.randn(3, 2).astype(np.float32))
  bias = tf.Variable(rng.randn(2).astype(np.float32))
  batches = [(rng.randn(5, 3).astype(np.float32),
              rng.randn(5, 2).astype(np.float32)) for _ in range(4)]

  def gradients():  # A generator: one batch's gradients at a time.
    for x, target in batches:
      with tf.GradientTape() as tape:
        loss = 0.5 * tf.reduce_sum(tf.square(x @ weights + bias - target))
      yield tape.gradient(loss, [weights, bias])

  fisher = ewc.fisher_diagonal(gradients())
  expected_w, expected_b = np.zeros((3, 2)), np.zeros(2)
  for x, target in batches:
    residual = x @ weights.numpy() + bias.numpy() - target
    expected_w += (x.T @ residual)**2 / len(batches)
    expected_b += residual.sum(0)**2 / len(batches)
  np.testing.assert_allclose(fisher[0], expected_w, rtol=1e-5)
  np.testing.assert_allclose(fisher[1], expected_b, rtol=1e-5)


def test_fisher_needs_batches_of_matching_gradients():
  with pytest.raises(ValueError, match='fisher_diagonal: at least one'):
    ewc.fisher_diagonal([])
  with pytest.raises(ValueError,
                     match=r'fisher_diagonal: batch 1 gradients\[0\]'):
    ewc.fisher_diagonal([[tf.ones([2])], [tf.ones([3])]])


def test_penalty_is_zero_at_the_anchor_and_its_gradient_is_lambda_f_delta():
  rng = np.random.RandomState(1)
  shapes = [(3, 2), (2,)]
  anchors = [[rng.randn(*s).astype(np.float32) for s in shapes]
             for _ in range(2)]
  fishers = [[rng.rand(*s).astype(np.float32) for s in shapes]
             for _ in range(2)]
  lam = 3.7
  # The definition (one term per anchor) and the merged form the learner
  # uses (one quadratic for all anchors): both exactly 0 at a single anchor.
  at_anchor = [tf.Variable(a) for a in anchors[0]]
  merged = ewc.merge_anchors(anchors[:1], fishers[:1])
  assert merged.residual.numpy() == 0.0
  for penalty_fn in (
      lambda v: ewc.ewc_penalty(v, anchors[:1], fishers[:1], lam).total,
      lambda v: ewc.merged_penalty(v, merged, lam)):
    with tf.GradientTape() as tape:
      penalty = penalty_fn(at_anchor)
    assert penalty.numpy() == 0.0
    for grad in tape.gradient(penalty, at_anchor):
      np.testing.assert_array_equal(grad, np.zeros_like(grad))
  # Elsewhere, with two anchors: lambda/2 sum_k F_k d_k^2, gradient
  # lambda sum_k F_k d_k.
  theta = [tf.Variable(rng.randn(*s).astype(np.float32)) for s in shapes]
  per_task = [sum(np.sum(f * (t.numpy() - a)**2)
                  for t, a, f in zip(theta, anchor, fisher))
              for anchor, fisher in zip(anchors, fishers)]
  with tf.GradientTape(persistent=True) as tape:
    penalty = ewc.ewc_penalty(theta, anchors, fishers, lam)
    merged = ewc.merged_penalty(theta, ewc.merge_anchors(anchors, fishers),
                                lam)
  np.testing.assert_allclose(penalty.per_task, per_task, rtol=1e-5)
  for total in (penalty.total, merged):
    np.testing.assert_allclose(total, lam / 2 * sum(per_task), rtol=1e-5)
    for i, grad in enumerate(tape.gradient(total, theta)):
      expected = sum(lam * fishers[k][i] * (theta[i].numpy() - anchors[k][i])
                     for k in range(2))
      np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def test_ewc_keeps_a_slot_per_task_and_a_revisit_overwrites_it():
  variables = [tf.Variable(tf.zeros([2, 2])), tf.Variable(tf.zeros([3]))]
  state = ewc.EwcState(variables, num_slots=2)
  assert state.num_anchors == 0
  values = lambda c: [tf.fill([2, 2], c), tf.fill([3], c)]
  state.consolidate(0, values(1.0), values(10.0))
  assert state.num_anchors == 1  # One boundary, one anchor.
  np.testing.assert_array_equal(state.fishers[1][0], np.zeros([2, 2]))
  state.consolidate(1, values(2.0), values(20.0))
  state.consolidate(0, values(3.0), values(30.0))  # Task 0 again.
  assert state.num_anchors == 2
  np.testing.assert_array_equal(state.anchors[0][1], [3.0] * 3)
  np.testing.assert_array_equal(state.fishers[0][1], [30.0] * 3)
  np.testing.assert_array_equal(state.anchors[1][0], np.full([2, 2], 2.0))
  # The penalty (merged at each consolidation) is the sum over both slots.
  theta = values(0.5)
  assert state.penalty(theta, 2.0).numpy() == pytest.approx(
      (30.0 * 2.5**2 + 20.0 * 1.5**2) * 7)


def test_online_ewc_keeps_one_anchor_and_a_decayed_running_fisher():
  variables = [tf.Variable(tf.zeros([4]))]
  state = ewc.EwcState(variables, num_slots=5, online=True)
  assert state.num_slots == 1
  state.consolidate(0, [tf.fill([4], 1.0)], [tf.constant([1., 2., 3., 4.])],
                    gamma=0.5)
  state.consolidate(0, [tf.fill([4], 7.0)], [tf.constant([1., 1., 1., 1.])],
                    gamma=0.5)
  assert state.num_anchors == 1
  np.testing.assert_array_equal(state.anchors[0][0], [7.0] * 4)
  np.testing.assert_allclose(state.fishers[0][0], [1.5, 2.0, 2.5, 3.0])
  with pytest.raises(ValueError, match='gamma must be in'):
    ewc.online_fisher([tf.ones([1])], [tf.ones([1])], 0.0)


def test_fisher_buffer_holds_the_frames_asked_for():
  assert ewc.fisher_buffer_unrolls(100_000, 20) == 5000
  assert ewc.fisher_buffer_unrolls(100_001, 20) == 5001
  assert ewc.fisher_buffer_unrolls(100_000, 20, 4) == 1250
  assert ewc.fisher_buffer_unrolls(1, 20) == 1


# --- The learner ------------------------------------------------------------


TWO_TASKS = clock_lib.Clock.given(schedule_lib.TaskSchedule(['a', 'b'], 40))


def make_method(name='ewc', clock=TWO_TASKS, num_tasks=2, **settings):
  """The method `name` with `settings`, for a run of `num_tasks` tasks."""
  cls = methods.METHODS[name]
  return cls(cls.Settings(**settings), base.Context(clock, num_tasks, 0))


def make_policy(seed=0, method=None, **kwargs):
  config = learner_lib.LearnerConfig(**{
      'batch_size': 4, 'num_replay': 2, 'unroll_length': 5,
      'clip_grad_norm': 0.0, **kwargs})
  return impala_policy.ImpalaPolicy(CARTPOLE_SPEC,
                                    policy_lib.AgentConfig('mlp', 8), config,
                                    seed=seed, method=method)


def period(index, task):
  """The `index`-th period of TWO_TASKS, of task `task`."""
  return clock_lib.Period(index, 40 * index, 40 * (index + 1), task, 'ab'[task])


def test_learner_fisher_is_the_squared_gradient_of_pg_and_baseline_only():
  # The reference: the ordinary training gradient of a learner whose loss
  # is only the policy-gradient and baseline terms (no entropy, no cloning,
  # every column fresh), squared and averaged over the batches. The EWC
  # learner itself keeps the entropy and cloning terms in its training loss.
  method = make_method(ewc_fisher_batches=3)
  policy = make_policy(method=method, entropy_cost=0.5,
                       policy_cloning_cost=1.0, value_cloning_cost=1.0)
  reference = learner_lib.ImpalaClearLearner(
      policy.agent, policy.learner.config._replace(
          num_replay=0, entropy_cost=0.0, policy_cloning_cost=0.0,
          value_cloning_cost=0.0))
  batches = [random_batch(policy, seed) for seed in range(3)]
  weights = [v.numpy() for v in policy.agent.trainable_variables]
  unrolls = [u for batch in batches for u in run_loop.split_unrolls(batch)]
  policy.observe(unrolls)  # Kept: 12 unrolls.
  stats = policy.consolidate(period(1, 1))
  assert stats['fisher_batches'] == 3
  assert method._gradients.experimental_get_tracing_count() == 1
  # The batches the method drew, again from a buffer seeded the same way.
  drawn = ewc_methods.KeptUnrolls(method.settings, policy.learner.config,
                                  method.context)
  drawn.observe(unrolls)
  expected = [np.zeros_like(w) for w in weights]
  for batch in drawn.batches(4, 3):
    grads, _ = reference._grads_fn(batch)
    for e, g in zip(expected, grads):
      e += g.numpy()**2 / 3
  state = method.state
  for fisher, e in zip(state.fishers[1], expected):
    np.testing.assert_allclose(fisher, e, rtol=1e-5, atol=1e-12)
  assert max(np.max(e) for e in expected) > 0
  assert stats['fisher_max'] == pytest.approx(
      max(np.max(e) for e in expected), rel=1e-5)
  for anchor, w in zip(state.anchors[1], weights):
    np.testing.assert_array_equal(anchor, w)
  assert state.num_anchors == 1
  for fisher in state.fishers[0]:  # The other task's slot is untouched.
    np.testing.assert_array_equal(fisher, np.zeros_like(fisher))


def test_the_penalty_enters_the_loss_and_its_gradient():
  method = make_method(ewc_lambda=50.0, ewc_fisher_batches=1)
  policy = make_policy(method=method)
  plain = learner_lib.ImpalaClearLearner(policy.agent, policy.learner.config)
  variables = policy.agent.trainable_variables
  policy.observe(run_loop.split_unrolls(random_batch(policy, 0)))
  policy.consolidate(period(0, 0))
  for v in variables:  # Away from the anchor.
    v.assign_add(0.1 * tf.random.normal(v.shape))
  batch = random_batch(policy, 1)
  grads, metrics = policy.learner._grads_fn(batch)
  plain_grads, plain_metrics = plain._grads_fn(batch)
  state = method.state
  deltas = [v.numpy() - a.numpy() for v, a in zip(variables, state.anchors[0])]
  fishers = [f.numpy() for f in state.fishers[0]]
  expected = 25.0 * sum(np.sum(f * d * d) for f, d in zip(fishers, deltas))
  assert expected > 0
  assert metrics['loss/ewc'].numpy() == pytest.approx(expected, rel=1e-4)
  assert metrics['loss/total'].numpy() == pytest.approx(
      plain_metrics['loss/total'].numpy() + expected, rel=1e-4)
  assert 'loss/ewc' not in plain_metrics
  for g, p, f, d in zip(grads, plain_grads, fishers, deltas):
    np.testing.assert_allclose(g.numpy() - p.numpy(), 50.0 * f * d,
                               rtol=1e-3, atol=1e-5)


def checkpoint_keys(policy, directory):
  path = tf.train.Checkpoint(**policy.checkpointables()).save(directory)
  return set(tf.train.load_checkpoint(path).get_variable_to_shape_map())


def test_ewc_changes_nothing_before_a_boundary(tmp_path):
  # Before any boundary the penalty is exactly 0 and so are its gradients:
  # the same weights as without a method.
  default = make_policy()
  on = make_policy(method=make_method(num_tasks=3))
  assert default.method is None and not default.replay_buffers()
  for step in range(2):
    batch = random_batch(default, step)
    results = [p.learn(batch) for p in (default, on)]
  assert results[1]['loss/ewc'] == 0.0
  assert 'loss/ewc' not in results[0]
  for a, c in zip(default.get_weights(), on.get_weights()):
    np.testing.assert_array_equal(a, c)
  assert not any(k.startswith('continual/') for k in checkpoint_keys(
      default, str(tmp_path / 'a' / 'c')))
  assert any(k.startswith('continual/') for k in checkpoint_keys(
      on, str(tmp_path / 'c' / 'c')))


# --- The run ----------------------------------------------------------------


def sequence_config(logdir, **kwargs):
  """CartPole then Acrobot, twice: 4 fresh unrolls of 5 steps = 20 frames
  an update, 40 frames (2 updates) a task."""
  learner_config = learner_lib.LearnerConfig(
      batch_size=4, num_replay=0, unroll_length=5,
      total_environment_frames=160)
  continual = methods.make_config('ewc', ewc_fisher_batches=2,
                                  ewc_fisher_frames=60, ewc_lambda=100.0)
  return run_config.RunConfig(**{
      'continual': continual,
      'env_name': 'gym:CartPole-v1,gym:Acrobot-v1', 'env_options': {},
      'algorithm': 'impala', 'agent_config': policy_lib.AgentConfig('mlp', 8),
      'learner_config': learner_config, 'logdir': str(logdir),
      'num_actors': 1, 'envs_per_actor': 4, 'backend': 'inline', 'seed': 2,
      'frames_per_task': 40, 'num_task_cycles': 2, 'eval_episodes': 1,
      'eval_max_steps': 5, 'log_interval_s': 3600.0,
      'checkpoint_interval_s': 3600.0, **kwargs})


def test_boundaries_make_anchors_and_a_resume_keeps_them_bit_for_bit(
    tmp_path, monkeypatch):
  whole = sequence_config(tmp_path / 'whole')
  run_loop.train(whole)
  # Boundaries at 40, 80 and 120 frames (not at the end): CartPole, then
  # Acrobot get an anchor; CartPole's second visit overwrites its own.
  assert scalar_series(tmp_path / 'whole', 'continual/num_anchors') == [
      (40, 1.0), (80, 2.0), (120, 2.0)]
  penalties = scalar_series(tmp_path / 'whole', 'loss/ewc')
  assert len(penalties) == 8
  # Zero in the first task and at the first update of the second (which
  # starts at the anchor); positive from then on.
  assert all(value == 0.0 for step, value in penalties if step <= 60)
  assert all(value > 0.0 for step, value in penalties if step > 60)
  # A resume restores anchors, Fishers and counters bit for bit.
  saved = saved_tensors(tmp_path / 'whole', 'continual/')
  restored = run_loop._Run(whole).method.state
  # 2 slots of anchors and Fishers, their merged form, 3 scalars.
  assert len(saved) == 6 * len(restored.anchors[0]) + 3
  for name, value in saved.items():
    variable = restored  # continual/anchors/0/3/.ATTRIBUTES/VARIABLE_VALUE
    for part in name.split('/')[1:-2]:
      variable = (variable[int(part)] if part.isdigit()
                  else getattr(variable, part))
    np.testing.assert_array_equal(variable.numpy(), value, err_msg=name)
  # In parts, stopped right after the update that ended CartPole as if
  # killed before its Fisher was computed: the resumed run consolidates
  # first, from the unrolls saved with the checkpoint, and everything
  # matches the uninterrupted run bit for bit.
  parts = whole._replace(logdir=str(tmp_path / 'parts'))
  with monkeypatch.context() as patch:
    patch.setattr(run_loop._Run, 'consolidate', lambda self: None)
    assert run_loop.train(parts, max_updates=2).num_env_frames == 40
  assert saved_tensors(tmp_path / 'parts', 'continual/num_boundaries')[
      'continual/num_boundaries/.ATTRIBUTES/VARIABLE_VALUE'] == 0
  state = glob.glob(os.path.join(str(tmp_path), 'parts', 'checkpoints',
                                 'state-*', 'policy', 'ewc_fisher'))
  with open(os.path.join(state[0], 'replay.json')) as f:
    assert json.load(f)['size'] == 8  # 40 frames of CartPole.
  run_loop.train(parts)
  assert scalar_series(tmp_path / 'parts', 'loss/ewc') == penalties
  whole_state = saved_tensors(tmp_path / 'whole', '')
  parts_state = saved_tensors(tmp_path / 'parts', '')
  assert whole_state.keys() == parts_state.keys()
  for name, value in whole_state.items():
    if name.startswith(('continual/', 'agent/', 'optimizer/')):
      np.testing.assert_array_equal(parts_state[name], value, err_msg=name)


def test_a_run_keeps_its_method_and_refuses_another(tmp_path):
  config = sequence_config(tmp_path)
  run_loop._Run(config).record_identity()  # Once a start is accepted.
  with open(os.path.join(str(tmp_path), 'run.json')) as f:
    recorded = json.load(f)
  assert recorded['continual_method'] == 'ewc'
  assert recorded['ewc_fisher_frames'] == 60
  assert recorded['settings']['ewc_lambda'] == 100.0
  continual = config.continual
  for method in ('none', 'online_ewc'):
    other = config._replace(continual=continual._replace(method=method))
    with pytest.raises(checkpoint_lib.CheckpointError,
                       match=f"continual_method='ewc', not '{method}'"):
      run_loop._Run(other)
  with pytest.raises(checkpoint_lib.CheckpointError, match='ewc_fisher_frames'):
    run_loop._Run(config._replace(continual=continual._replace(
        settings=continual.settings._replace(ewc_fisher_frames=80))))
  with pytest.raises(checkpoint_lib.CheckpointError, match='task_boundaries'):
    run_loop._Run(config._replace(continual=continual._replace(
        task_boundaries='hidden')))
  with open(os.path.join(str(tmp_path), 'run.json')) as f:
    assert json.load(f) == recorded  # Nothing was rewritten.
  single = config._replace(env_name='gym:CartPole-v1',
                           logdir=str(tmp_path / 'single'))
  with pytest.raises(ValueError, match='needs a task sequence'):
    run_loop._Run(single)
  assert not os.path.exists(os.path.join(str(tmp_path), 'single', 'run.json'))


# --- The flags --------------------------------------------------------------


parse = train_flags.parse


SEQUENCE = '--env=minatar:Breakout,minatar:Freeway'


@pytest.mark.parametrize('args,message', [
    (['--continual_method=ewc'], '--continual_method=ewc needs a task '
     'sequence --env'),
    ([SEQUENCE, '--frames_per_task=10', '--continual_method=ewc',
      '--ewc_lambda=-1'], '--ewc_lambda must be a finite number >= 0'),
    ([SEQUENCE, '--frames_per_task=10', '--continual_method=online_ewc',
      '--ewc_gamma=0'], r'--ewc_gamma must be in \(0, 1\]'),
    ([SEQUENCE, '--frames_per_task=10', '--continual_method=ewc',
      '--ewc_gamma=0.5'], '--ewc_gamma needs '
     '--continual_method=online_ewc or pnc'),
    ([SEQUENCE, '--frames_per_task=10', '--continual_method=ewc',
      '--ewc_fisher_batches=0'], '--ewc_fisher_batches must be >= 1'),
    ([SEQUENCE, '--frames_per_task=10', '--ewc_lambda=5'],
     '--ewc_lambda needs --continual_method=ewc or online_ewc or pnc'),
    ([SEQUENCE, '--frames_per_task=10', '--algorithm=ppg',
      '--continual_method=ewc'], '--continual_method applies to '
     '--algorithm=impala only'),
])
def test_bad_flags_get_one_clear_message(args, message):
  with pytest.raises(train.app.UsageError, match=message):
    parse(*args)


def test_flags_reach_the_learner_and_a_resume_keeps_the_recorded_lambda(
    tmp_path):
  logdir = f'--logdir={tmp_path}'
  config = parse(SEQUENCE, '--frames_per_task=10', logdir,
                 '--continual_method=online_ewc', '--ewc_lambda=300',
                 '--ewc_gamma=0.9', '--ewc_fisher_batches=7',
                 '--ewc_fisher_frames=2000')
  continual = config.continual
  assert continual.method == 'online_ewc'
  assert continual.settings == methods.METHODS['online_ewc'].Settings(
      ewc_lambda=300.0, ewc_gamma=0.9, ewc_fisher_batches=7,
      ewc_fisher_frames=2000)
  checkpoint_lib.check_run_identity(str(tmp_path),
                                    run_config.run_identity(config),
                                    run_config.run_settings(config))
  resumed = parse(SEQUENCE, '--frames_per_task=10', logdir,
                  '--continual_method=online_ewc').continual.settings
  assert (resumed.ewc_lambda, resumed.ewc_gamma,
          resumed.ewc_fisher_batches) == (300.0, 0.9, 7)
  changed = parse(SEQUENCE, '--frames_per_task=10', logdir,
                  '--continual_method=online_ewc', '--ewc_lambda=30')
  assert changed.continual.settings.ewc_lambda == 30.0
  # Without a method, run.json records no method and none of its settings.
  plain = parse(SEQUENCE, '--frames_per_task=10')
  assert not set(run_config.run_settings(plain)) & {
      'ewc_lambda', 'ewc_gamma', 'ewc_fisher_batches'}
  assert 'continual_method' not in run_config.run_identity(plain)
