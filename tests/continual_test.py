"""Tests for clear.continual: schedule, history, metrics and the evaluator."""

import json
import os

import numpy as np
import pytest

import envs
from clear import algorithms
from clear import continual
from clear import policy as policy_lib
from clear import snapshot

GYM = 'gym:CartPole-v1,gym:Acrobot-v1'


# --- Schedule ---------------------------------------------------------------


def test_schedule_cycles_and_boundaries():
  schedule = continual.TaskSchedule(['A', 'B'], frames_per_task=100,
                                    num_cycles=2)
  assert schedule.total_frames == 400 and schedule.num_segments == 4
  table = [  # frames, task, segment end
      (0, 0, 100), (99, 0, 100), (100, 1, 200), (250, 0, 300),
      (399, 1, 400), (400, 1, 400), (1000, 1, 400)]
  for frames, task, end in table:
    assert schedule.task_at(frames) == task, frames
    assert schedule.segment_end(frames) == end, frames
  assert schedule.task_name_at(250) == 'A'
  assert schedule.boundaries() == [(0, 100, 0), (100, 200, 1),
                                   (200, 300, 0), (300, 400, 1)]
  assert schedule.training_end('A') == 300
  assert schedule.training_end('B') == 400
  with pytest.raises(ValueError, match="'C' is not one of"):
    schedule.training_end('C')
  with pytest.raises(ValueError, match='frames must be >= 0'):
    schedule.task_at(-1)


def test_schedule_with_a_repeated_task():
  schedule = continual.TaskSchedule(['A', 'B', 'A'], 10)
  assert schedule.unique_task_names == ['A', 'B']
  assert [s.task for s in schedule.segments_of('A')] == [0, 2]
  assert schedule.training_end('A') == 30


@pytest.mark.parametrize('args, match', [
    (([], 10), 'non-empty'),
    (('A,B', 10), 'non-empty'),
    ((['A'], 0), 'frames_per_task'),
    ((['A'], 10, 0), 'num_cycles'),
    ((['A'], 1.5), 'frames_per_task'),
])
def test_schedule_bad_arguments(args, match):
  with pytest.raises(ValueError, match=match):
    continual.TaskSchedule(*args)


def test_tasks_json_round_trip(tmp_path):
  logdir = str(tmp_path / 'run')
  assert continual.read_tasks_json(logdir) is None
  schedule = continual.TaskSchedule(['atari:Pong', 'atari:Breakout'], 5000,
                                    3)
  path = continual.write_tasks_json(logdir, schedule)
  with open(path) as f:
    assert json.load(f) == {'tasks': ['atari:Pong', 'atari:Breakout'],
                            'frames_per_task': 5000, 'num_cycles': 3}
  assert continual.read_tasks_json(logdir) == schedule
  with open(path, 'w') as f:
    f.write('{"tasks": ["A"]}')
  with pytest.raises(ValueError, match='frames_per_task'):
    continual.read_tasks_json(logdir)


# --- History ----------------------------------------------------------------


def test_history_survives_a_snapshot(tmp_path):
  history = continual.EvalHistory()
  history.append(0, {'A': 1.0, 'B': 2.0})
  history.append(10, {'A': 3.5})
  history.append(10, {'B': -1.0, 'C': 0.25})
  with pytest.raises(ValueError, match='before the last'):
    history.append(5, {'A': 0.0})
  path = str(tmp_path / 'state.npz')
  snapshot.save(path, snapshot.prefixed('eval', history.to_arrays()))
  restored = continual.EvalHistory.from_arrays(
      snapshot.subset('eval', snapshot.load(path)))
  assert restored.records == history.records
  assert restored.tasks == ['A', 'B', 'C']
  frames, returns = restored.curve('B')
  np.testing.assert_array_equal(frames, [0, 10])
  np.testing.assert_array_equal(returns, [2.0, -1.0])
  empty = continual.EvalHistory.from_arrays(
      continual.EvalHistory().to_arrays())
  assert not len(empty)


# --- Metrics ----------------------------------------------------------------

# Two tasks of 100 frames, evaluated every 50 frames.
_FRAMES = [0, 50, 100, 150, 200]
_A = [0.0, 8.0, 10.0, 6.0, 4.0]
_B = [0.0, 1.0, 2.0, 9.0, 8.0]


def _history(frames=_FRAMES, **curves):
  history = continual.EvalHistory()
  for i, f in enumerate(frames):
    history.append(f, {task: values[i] for task, values in curves.items()})
  return history


def test_forgetting_hand_computed():
  schedule = continual.TaskSchedule(['A', 'B'], 100)
  metrics = continual.forgetting_metrics(_history(A=_A, B=_B), schedule)
  a, b = metrics['per_task']['A'], metrics['per_task']['B']
  assert a['final_return'] == 4.0 and a['best_return'] == 10.0
  assert a['best_frames'] == 100
  assert a['end_of_training_frames'] == 100
  assert a['end_of_training_return'] == 10.0
  assert a['forgetting'] == 6.0 and a['forgetting_from_best'] == 6.0
  assert b['final_return'] == 8.0 and b['best_return'] == 9.0
  assert b['end_of_training_frames'] == 200
  assert b['forgetting'] == 0.0 and b['forgetting_from_best'] == 1.0
  assert metrics['average_forgetting'] == 3.0
  assert metrics['average_forgetting_from_best'] == 3.5
  assert metrics['average_final_return'] == 6.0
  assert metrics['average_best_return'] == 9.5
  # Mean task return per evaluation: 0, 4.5, 6, 7.5, 6.
  assert metrics['average_return_auc'] == pytest.approx(4.8)
  assert metrics['num_evaluations'] == 5 and metrics['final_frames'] == 200
  assert metrics['forward_transfer'] is None
  assert any('Forward transfer omitted' in n for n in metrics['notes'])
  json.dumps(metrics, allow_nan=False)


def test_forward_transfer_and_normalization():
  schedule = continual.TaskSchedule(['A', 'B'], 100)
  reference = {'A': [(0, 0.0), (100, 10.0)],
               'B': [(0, 0.0), (50, 5.0), (100, 5.0)]}
  normalization = {'A': (0.0, 10.0), 'B': (0.0, 10.0)}
  metrics = continual.forgetting_metrics(
      _history(A=_A, B=_B), schedule, reference=reference,
      normalization=normalization)
  # A on [0, 100]: 0, .8, 1 -> AUC (20 + 45) / 100 = .65; reference .5.
  # B on [100, 200]: .2, .9, .8 -> AUC .7; reference (12.5 + 25) / 100.
  assert metrics['forward_transfer']['A'] == pytest.approx(0.3)
  assert metrics['forward_transfer']['B'] == pytest.approx(
      (0.7 - 0.375) / 0.625)
  assert metrics['average_forward_transfer'] == pytest.approx(
      (0.3 + 0.52) / 2)
  a = metrics['per_task']['A']
  assert a['normalized_final_return'] == pytest.approx(0.4)
  assert a['normalized_forgetting'] == pytest.approx(0.6)
  assert metrics['average_normalized_final_return'] == pytest.approx(0.6)
  assert metrics['average_normalized_forgetting_from_best'] == pytest.approx(
      0.35)


def test_forward_transfer_min_max_normalised_by_default():
  schedule = continual.TaskSchedule(['A', 'B'], 100)
  metrics = continual.forgetting_metrics(
      _history(A=_A, B=_B), schedule, reference={'A': [(0, 0), (100, 10)]})
  # A's returns span [0, 10]: the same numbers as with (0, 10).
  assert metrics['forward_transfer'] == {'A': pytest.approx(0.3)}
  assert any('min-max' in n for n in metrics['notes'])


def test_end_of_training_is_the_nearest_evaluation():
  schedule = continual.TaskSchedule(['A', 'B'], 100, num_cycles=2)
  frames = [0, 90, 110, 290, 320, 400]
  a = [0.0, 5.0, 6.0, 7.0, 9.0, 1.0]
  metrics = continual.forgetting_metrics(
      _history(frames, A=a, B=[0.0] * 6), schedule)
  entry = metrics['per_task']['A']
  # A last trains in [200, 300): the evaluation at 290 is nearest.
  assert entry['end_of_training_frames'] == 290
  assert entry['forgetting'] == 6.0
  assert entry['forgetting_from_best'] == 8.0
  # A tie (90 and 110 around 100) takes the earlier evaluation.
  one_cycle = continual.TaskSchedule(['A', 'B'], 100)
  metrics = continual.forgetting_metrics(
      _history([0, 90, 110], A=[0.0, 5.0, 6.0]), one_cycle)
  assert metrics['per_task']['A']['end_of_training_frames'] == 90
  assert any("'B' was never evaluated" in n for n in metrics['notes'])


def test_forgetting_per_visit_over_two_cycles():
  # A trains [0, 100) and [200, 300), B [100, 200) and [300, 400).
  schedule = continual.TaskSchedule(['A', 'B'], 100, num_cycles=2)
  frames = [0, 100, 200, 300, 400]
  a = [0.0, 10.0, 4.0, 12.0, 9.0]
  b = [1.0, 1.0, 8.0, 5.0, 11.0]
  normalization = {'A': (0.0, 10.0), 'B': (1.0, 11.0)}
  metrics = continual.forgetting_metrics(
      _history(frames, A=a, B=b), schedule, normalization=normalization)
  a_entry, b_entry = metrics['per_task']['A'], metrics['per_task']['B']
  # A: (10 - 4) after its first visit, (12 - 9) after its last.
  assert a_entry['forgetting_per_visit'] == pytest.approx(4.5)
  assert a_entry['forgetting'] == pytest.approx(3.0)
  # B: (8 - 5), then 0 (trained last: its segment ends at the last
  # evaluation).
  assert b_entry['forgetting_per_visit'] == pytest.approx(1.5)
  assert metrics['average_forgetting_per_visit'] == pytest.approx(3.0)
  assert a_entry['normalized_forgetting_per_visit'] == pytest.approx(0.45)
  assert b_entry['normalized_forgetting_per_visit'] == pytest.approx(0.15)
  assert metrics['average_normalized_forgetting_per_visit'] == (
      pytest.approx(0.3))
  # Normalised means per evaluation: (0 + 0) / 2, (1 + 0) / 2, (.4 + .7)
  # / 2, (1.2 + .4) / 2, (.9 + 1) / 2.
  assert metrics['average_normalized_return_auc'] == pytest.approx(
      np.mean([0.0, 0.5, 0.55, 0.8, 0.95]))
  # A run stopped in A's second segment: only the first visit counts.
  stopped = continual.forgetting_metrics(
      _history(frames[:3], A=a[:3], B=b[:3]), schedule)
  assert stopped['per_task']['A']['forgetting_per_visit'] == (
      pytest.approx(6.0))


def test_baselines_round_trip_and_errors(tmp_path):
  baselines = continual.Baselines(
      {'minatar:Breakout': (0.5, 17.0), 'minatar:Asterix': (0.25, 16.0)},
      {'minatar:Breakout': [(0, 0.5), (250_000, 3.0)]})
  path = str(tmp_path / 'baselines.json')
  continual.write_json(path, continual.baselines_json(baselines, ['a note']))
  read = continual.read_baselines(path)
  assert read.normalization == baselines.normalization
  assert read.reference == baselines.reference
  with open(path) as f:
    assert json.load(f)['notes'] == ['a note']
  for content, match in (
      ('{"tasks": {}}', 'not a baselines JSON'),
      ('[1, 2]', 'not a baselines JSON'),
      ('{"tasks": {"A": {"low": 1}}}', "task 'A' needs numbers"),
      ('{"tasks": {"A": {"low": 2, "high": 1}}}', 'finite low < high'),
      ('{"tasks": {"A": {"low": 0, "high": 1, "curve": [[1]]}}}',
       "task 'A' needs numbers")):
    with open(path, 'w') as f:
      f.write(content)
    with pytest.raises(ValueError, match=match):
      continual.read_baselines(path)
  with pytest.raises(ValueError, match='not a baselines JSON'):
    continual.read_baselines(str(tmp_path / 'missing.json'))


def test_metrics_errors():
  schedule = continual.TaskSchedule(['A'], 10)
  with pytest.raises(ValueError, match='no evaluations'):
    continual.forgetting_metrics(continual.EvalHistory(), schedule)
  with pytest.raises(ValueError, match='low != high'):
    continual.forgetting_metrics(_history([0], A=[1.0]), schedule,
                                 normalization={'A': (1.0, 1.0)})


def test_curve_auc():
  assert continual.curve_auc([0, 10], [0, 1], 0, 10) == pytest.approx(0.5)
  # Constant beyond the points; interpolated inside.
  assert continual.curve_auc([10, 20], [2, 4], 0, 30) == pytest.approx(
      (10 * 2 + 10 * 3 + 10 * 4) / 30)
  assert continual.curve_auc([0, 10], [0, 10], 5, 10) == pytest.approx(7.5)


def test_write_metrics_json_is_atomic_and_strict(tmp_path):
  path = str(tmp_path / 'out' / 'metrics.json')
  continual.write_metrics_json(path, {'a': np.float32(1.5), 'b': float('nan'),
                                      'c': [np.int64(3), {'d': np.inf}]})
  with open(path) as f:
    assert json.load(f) == {'a': 1.5, 'b': None, 'c': [3, {'d': None}]}
  assert os.listdir(tmp_path / 'out') == ['metrics.json']


# --- Evaluator --------------------------------------------------------------


def _evaluator(max_steps):
  """An evaluator and its policy (seeded: equal calls, equal results)."""
  env = envs.make(GYM, task=0)
  policy = algorithms.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8), seed=3)
  env.close()
  return continual.Evaluator(GYM, {}, policy, num_episodes=3, seed=7,
                             max_steps=max_steps, unroll_length=16), policy


def test_evaluator_plays_every_task_deterministically():
  (first, policy), (second, _) = _evaluator(40), _evaluator(40)
  assert first.task_names == ['gym:CartPole-v1', 'gym:Acrobot-v1']
  results = first.evaluate_tasks()
  again = second.evaluate_tasks()
  for name, result in results.items():
    np.testing.assert_array_equal(result.returns, again[name].returns)
    assert result[1:] == again[name][1:]
  acrobot = results['gym:Acrobot-v1']
  # Acrobot pays -1 a step and lasts far longer than 48 steps (40 rounded
  # up to whole unrolls of 16): every episode is cut with return -48.
  assert acrobot.num_steps == 48 and acrobot.num_unfinished == 3
  np.testing.assert_array_equal(acrobot.returns, [-48.0] * 3)
  cartpole = results['gym:CartPole-v1']
  assert cartpole.returns.shape == (3,)
  assert np.all(cartpole.returns >= 1) and np.all(cartpole.returns <= 48)
  means = first.evaluate(policy.get_weights())
  assert set(means) == set(first.task_names)
  assert means['gym:Acrobot-v1'] == -48.0
  first.close()
  second.close()


def test_evaluator_rejects_a_policy_of_another_spec():
  env = envs.make('gym:CartPole-v1')
  policy = algorithms.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8))
  with pytest.raises(ValueError, match='spec differs'):
    continual.Evaluator(GYM, {}, policy, num_episodes=1)
