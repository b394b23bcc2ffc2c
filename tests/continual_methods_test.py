"""Tests of the method interface, the clock, hidden task boundaries and L2."""

import os
import re

import numpy as np
import pytest
import tensorflow as tf

from clear import checkpoint as checkpoint_lib
from clear import train
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import config as impala_config
from clear.algorithms.impala import learner as learner_lib
from clear.algorithms.impala import policy as impala_policy
from clear.continual import clock as clock_lib
from clear.continual import ewc
from clear.continual import methods
from clear.continual import pnc
from clear.continual import schedule as schedule_lib
from clear.continual.methods import base
from clear.continual.methods import l2
from clear.runtime import run_config
from clear.runtime import run_loop
from tests.event_files import scalar_series
from tests import train_flags
from tests.random_batches import CARTPOLE_SPEC
from tests.random_batches import random_batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def seeded():
  tf.random.set_seed(0)


# --- The learner knows no method ----------------------------------------------


def test_the_learner_holds_no_method_specific_code():
  # Neither the IMPALA-CLEAR learner, its policy nor its config names a
  # method or a method's state; the config has no method field.
  words = re.compile(r'ewc|fisher|pnc|progress|compress|anchor|l2|'
                     r'continual_method|knowledge', re.IGNORECASE)
  for name in ('learner.py', 'policy.py', 'config.py'):
    path = os.path.join(ROOT, 'clear', 'algorithms', 'impala', name)
    with open(path) as f:
      found = sorted(set(words.findall(f.read())))
    assert not found, (name, found)
  assert not [field for field in impala_config.LearnerConfig._fields
              if words.search(field)]


# --- The clock ------------------------------------------------------------


def test_periods_are_the_segments_when_given_and_the_interval_when_hidden():
  schedule = schedule_lib.TaskSchedule(['a', 'b', 'a'], 40, num_cycles=2)
  given = clock_lib.Clock.given(schedule)
  assert given.boundaries == 'given'
  assert given.period_at(0) == clock_lib.Period(0, 0, 40, 0, 'a')
  assert given.period_at(79) == clock_lib.Period(1, 40, 80, 1, 'b')
  assert given.period_at(80) == clock_lib.Period(2, 80, 120, 0, 'a')
  assert given.period_at(239) == clock_lib.Period(5, 200, 240, 0, 'a')
  assert given.period_at(250).index == 5  # Past the end: the last one.
  hidden = clock_lib.Clock.hidden(30)
  assert hidden.boundaries == 'hidden'
  assert [hidden.period_at(f) for f in (0, 29, 30, 250)] == [
      clock_lib.Period(0, 0, 30), clock_lib.Period(0, 0, 30),
      clock_lib.Period(1, 30, 60), clock_lib.Period(8, 240, 270)]
  assert hidden.period_at(250).length == 30
  with pytest.raises(ValueError, match='frames must be >= 0'):
    hidden.period_at(-1)
  with pytest.raises(ValueError, match='give a schedule'):
    clock_lib.Clock.hidden(0)


def test_pncs_phases_split_each_period_by_its_own_length():
  # Random segment lengths with given boundaries: each visit's first half
  # progresses, whatever its length.
  schedule = schedule_lib.TaskSchedule.with_random_lengths(['a', 'b'], 100,
                                                           1, seed=3)
  first, second = schedule.boundaries()
  assert first.end != 100  # Not the nominal length.
  clock = clock_lib.Clock.given(schedule)
  half = [first.start + (first.end - first.start + 1) // 2,
          second.start + (second.end - second.start + 1) // 2]
  for start, middle, end in ((first.start, half[0], first.end),
                             (second.start, half[1], second.end)):
    assert [pnc.phase_at(f, clock.period_at(f), 0.5)
            for f in (start, middle - 1, middle, end - 1)] == [
                pnc.PROGRESS, pnc.PROGRESS, pnc.COMPRESS, pnc.COMPRESS]


# --- EWC without task identities ---------------------------------------------


def test_accumulated_anchors_give_ewcs_penalty_over_all_of_them():
  # Three anchors added one by one (EWC under hidden boundaries) against
  # `ewc_penalty` summed over the three, in value and gradient.
  rng = np.random.RandomState(0)
  shapes = [(3, 2), (2,)]
  anchors = [[rng.randn(*s).astype(np.float32) for s in shapes]
             for _ in range(3)]
  fishers = [[rng.rand(*s).astype(np.float32) for s in shapes]
             for _ in range(3)]
  theta = [tf.Variable(rng.randn(*s).astype(np.float32)) for s in shapes]
  state = ewc.EwcState(theta, 1)
  for anchor, fisher in zip(anchors, fishers):
    state.accumulate(anchor, fisher)
  with tf.GradientTape(persistent=True) as tape:
    got = state.penalty(theta, 3.0)
    expected = ewc.ewc_penalty(theta, anchors, fishers, 3.0).total
  np.testing.assert_allclose(got, expected, rtol=1e-5)
  for g, e in zip(tape.gradient(got, theta), tape.gradient(expected, theta)):
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)
  for latest, anchor in zip(state.anchors[0], anchors[-1]):
    np.testing.assert_array_equal(latest, anchor)
  with pytest.raises(ValueError, match='online EWC'):
    ewc.EwcState(theta, 1, online=True).accumulate(anchors[0], fishers[0])


# --- L2 -------------------------------------------------------------------


def test_l2_penalty_and_gradient_match_hand_computed_values():
  theta = [tf.Variable([1.0, 2.0]), tf.Variable([[3.0]])]
  anchor = [tf.constant([0.0, 1.0]), tf.constant([[5.0]])]
  with tf.GradientTape() as tape:
    penalty = l2.l2_penalty(theta, anchor, 2.0)
  # lambda / 2 * ((1 - 0)^2 + (2 - 1)^2 + (3 - 5)^2) = 1 * 6.
  assert penalty.numpy() == pytest.approx(6.0)
  grads = tape.gradient(penalty, theta)  # lambda * (theta - anchor).
  np.testing.assert_allclose(grads[0], [2.0, 2.0])
  np.testing.assert_allclose(grads[1], [[-4.0]])
  with pytest.raises(ValueError, match='anchor\\[1\\] has shape'):
    l2.l2_penalty(theta, [anchor[0], tf.zeros([2])], 1.0)


def make_l2_policy(lam):
  config = learner_lib.LearnerConfig(batch_size=4, num_replay=2,
                                     unroll_length=5, clip_grad_norm=0.0)
  method = l2.L2(l2.L2Settings(l2_lambda=lam), base.Context(
      clock_lib.Clock.hidden(40), 2, 0))
  return impala_policy.ImpalaPolicy(CARTPOLE_SPEC,
                                    policy_lib.AgentConfig('mlp', 8), config,
                                    method=method)


def test_l2_adds_nothing_before_an_anchor_and_its_penalty_after(tmp_path,
                                                                caplog):
  policy = make_l2_policy(3.0)
  plain = learner_lib.ImpalaClearLearner(policy.agent, policy.learner.config)
  batch = random_batch(policy, 0)
  _, metrics = policy.learner._grads_fn(batch)
  assert metrics['loss/l2'].numpy() == 0.0
  with caplog.at_level('INFO'):
    assert policy.consolidate(clock_lib.Period(0, 0, 40))['anchor_norm'] > 0
  assert 'l2: period 0 ended at 40 frames: the weights are the anchor' in (
      caplog.text)
  assert policy.consolidate(clock_lib.Period(0, 0, 40)) == {}  # Once.
  anchor = [v.numpy() for v in policy.agent.trainable_variables]
  for v in policy.agent.trainable_variables:
    v.assign_add(0.1 * tf.random.normal(v.shape))
  deltas = [v.numpy() - a for v, a in
            zip(policy.agent.trainable_variables, anchor)]
  grads, metrics = policy.learner._grads_fn(batch)
  plain_grads, plain_metrics = plain._grads_fn(batch)
  expected = 1.5 * sum(np.sum(d * d) for d in deltas)
  assert metrics['loss/l2'].numpy() == pytest.approx(expected, rel=1e-4)
  assert metrics['loss/total'].numpy() == pytest.approx(
      plain_metrics['loss/total'].numpy() + expected, rel=1e-4)
  for g, p, d in zip(grads, plain_grads, deltas):
    np.testing.assert_allclose(g.numpy() - p.numpy(), 3.0 * d, rtol=1e-3,
                               atol=1e-4)
  saved = tf.train.Checkpoint(**policy.checkpointables()).save(
      str(tmp_path / 'c'))
  assert {'continual/anchor/0/.ATTRIBUTES/VARIABLE_VALUE',
          'continual/weight/.ATTRIBUTES/VARIABLE_VALUE'} <= {
              key for key, _ in tf.train.list_variables(saved)}


# --- Hidden boundaries in a run ----------------------------------------------


class RecordingMethod(base.Method):
  """A test fake: records every call the run makes to a method."""

  NAME = 'recording'
  Settings = base.settings_class('RecordingSettings', ())
  calls = []

  def attach(self, learner):
    self.calls.append(('attach', self.context.clock.boundaries))

  def observe(self, unrolls):
    self.calls.append(('observe', len(unrolls)))

  def consolidate(self, ended):
    self.calls.append(('consolidate', ended))
    return {'ended_at': float(ended.end)}


def sequence_config(logdir, method='recording', boundaries='given', **kwargs):
  """CartPole then Acrobot: 20 frames an update, 40 a task, twice."""
  return run_config.RunConfig(**{
      'env_name': 'gym:CartPole-v1,gym:Acrobot-v1', 'env_options': {},
      'algorithm': 'impala', 'agent_config': policy_lib.AgentConfig('mlp', 8),
      'learner_config': learner_lib.LearnerConfig(
          batch_size=4, num_replay=0, unroll_length=5,
          total_environment_frames=160),
      'logdir': str(logdir), 'num_actors': 1, 'envs_per_actor': 4,
      'backend': 'inline', 'seed': 2, 'frames_per_task': 40,
      'num_task_cycles': 2, 'eval_episodes': 1, 'eval_max_steps': 5,
      'log_interval_s': 3600.0, 'checkpoint_interval_s': 3600.0,
      'continual': methods.make_config(method, boundaries, 30, **kwargs)})


def test_under_hidden_boundaries_a_method_never_learns_of_a_switch(
    tmp_path, monkeypatch):
  monkeypatch.setitem(methods.METHODS, 'recording', RecordingMethod)
  runs = {}
  for boundaries in ('given', 'hidden'):
    RecordingMethod.calls = []
    logdir = tmp_path / boundaries
    run_loop.train(sequence_config(logdir, boundaries=boundaries))
    runs[boundaries] = (list(RecordingMethod.calls),
                        scalar_series(logdir, 'continual/ended_at'))
  calls, ended = runs['hidden']
  assert calls[0] == ('attach', 'hidden')
  periods = [args for kind, args in calls if kind == 'consolidate']
  # Every 30 frames, at the first update past each multiple (20 frames an
  # update), but the run's end (160 frames): no period names a task, none
  # ends at a switch (40, 80, 120).
  assert periods == [clock_lib.Period(k, 30 * k, 30 * (k + 1))
                     for k in range(4)]
  assert all(p.task is None and p.task_name is None for p in periods)
  assert [step for step, _ in ended] == [40, 60, 100, 120]
  assert [value for _, value in ended] == [30.0, 60.0, 90.0, 120.0]
  assert sum(n for kind, n in calls if kind == 'observe') == 32  # 160 / 5.
  calls, ended = runs['given']
  periods = [args for kind, args in calls if kind == 'consolidate']
  assert [(p.index, p.end, p.task_name) for p in periods] == [
      (0, 40, 'gym:CartPole-v1'), (1, 80, 'gym:Acrobot-v1'),
      (2, 120, 'gym:CartPole-v1')]
  assert [step for step, _ in ended] == [40, 80, 120]


def test_l2_consolidates_on_the_clock_in_a_run_and_records_it(tmp_path):
  config = sequence_config(tmp_path, 'l2', 'hidden', l2_lambda=10.0)
  run_loop.train(config)
  anchored = scalar_series(tmp_path, 'continual/anchor_norm')
  assert [step for step, _ in anchored] == [40, 60, 100, 120]
  penalties = scalar_series(tmp_path, 'loss/l2')
  assert len(penalties) == 8
  # 0 until the first anchor, and at each update that starts right after
  # a consolidation (from 40, 60, 100 and 120 frames: the weights are the
  # anchor); positive at the others (from 80 and 140).
  assert [(step, value > 0) for step, value in penalties] == [
      (20, False), (40, False), (60, False), (80, False), (100, True),
      (120, False), (140, False), (160, True)]
  identity = run_config.run_identity(config)
  assert (identity['continual_method'], identity['task_boundaries'],
          identity['consolidation_interval_frames']) == ('l2', 'hidden', 30)
  assert run_config.run_settings(config)['l2_lambda'] == 10.0
  # A resume must keep the boundaries: given ones are refused, naming the
  # flag, and nothing is written.
  with open(os.path.join(str(tmp_path), 'run.json')) as f:
    before = f.read()
  given = config._replace(continual=config.continual._replace(
      task_boundaries='given'))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match='Resume with --task_boundaries=hidden'):
    run_loop.train(given)
  with open(os.path.join(str(tmp_path), 'run.json')) as f:
    assert f.read() == before


# --- The flags --------------------------------------------------------------


parse = train_flags.parse


SEQUENCE = ['--env=minatar:Breakout,minatar:Freeway', '--frames_per_task=10']


@pytest.mark.parametrize('args,message', [
    (SEQUENCE + ['--continual_method=l2', '--l2_lambda=-1'],
     '--l2_lambda must be a finite number >= 0'),
    (SEQUENCE + ['--l2_lambda=3'], '--l2_lambda needs --continual_method=l2'),
    (SEQUENCE + ['--task_boundaries=hidden'],
     '--task_boundaries needs a --continual_method'),
    (SEQUENCE + ['--continual_method=ewc',
                 '--consolidation_interval_frames=1000'],
     '--consolidation_interval_frames needs --task_boundaries=hidden'),
    (SEQUENCE + ['--continual_method=ewc', '--task_boundaries=hidden',
                 '--consolidation_interval_frames=0'],
     '--consolidation_interval_frames must be >= 1'),
])
def test_bad_flags_get_one_clear_message(args, message):
  with pytest.raises(train.app.UsageError, match=message):
    parse(*args)


def test_flags_choose_the_method_and_its_boundaries():
  config = parse(*SEQUENCE, '--continual_method=l2', '--l2_lambda=0.5',
                 '--task_boundaries=hidden',
                 '--consolidation_interval_frames=1000')
  assert config.continual == methods.ContinualConfig(
      'l2', l2.L2Settings(l2_lambda=0.5), 'hidden', 1000)
  default = parse(*SEQUENCE, '--continual_method=online_ewc').continual
  assert (default.task_boundaries, default.consolidation_interval_frames) == (
      'given', methods.DEFAULT_CONSOLIDATION_INTERVAL_FRAMES)
  assert 'task_boundaries' not in run_config.run_identity(
      parse(*SEQUENCE, '--continual_method=online_ewc'))


def test_run_json_records_only_the_flags_of_the_runs_own_method():
  # Other methods' settings would be recorded at their defaults of the day,
  # and read back as if they were the run's.
  recorded = {args: set(parse(*SEQUENCE, *args).flags) for args in (
      (), ('--continual_method=l2',),
      ('--continual_method=online_ewc', '--task_boundaries=hidden'))}
  settings = set(methods.all_settings())
  assert not recorded[()] & (settings | {'task_boundaries',
                                         'consolidation_interval_frames'})
  assert recorded[('--continual_method=l2',)] & settings == {'l2_lambda'}
  assert 'consolidation_interval_frames' not in recorded[
      ('--continual_method=l2',)]
  hidden = recorded[('--continual_method=online_ewc',
                     '--task_boundaries=hidden')]
  assert hidden & settings == {'ewc_lambda', 'ewc_gamma',
                               'ewc_fisher_batches', 'ewc_fisher_frames'}
  assert {'task_boundaries', 'consolidation_interval_frames'} <= hidden
