"""Tests for clear.continual.schedule, clear.continual.history and
clear.runtime.evaluation's evaluator (the metrics are tested in
continual_metrics_test.py)."""

import json

import numpy as np
import pytest

from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.continual import history as history_lib
from clear.continual import schedule as schedule_lib
from clear.runtime import evaluation
import envs

GYM = 'gym:CartPole-v1,gym:Acrobot-v1'


# --- Schedule ---------------------------------------------------------------


def test_schedule_cycles_and_boundaries():
  schedule = schedule_lib.TaskSchedule(['A', 'B'], frames_per_task=100,
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
  schedule = schedule_lib.TaskSchedule(['A', 'B', 'A'], 10)
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
    schedule_lib.TaskSchedule(*args)


def test_tasks_json_round_trip(tmp_path):
  logdir = str(tmp_path / 'run')
  assert schedule_lib.read_tasks_json(logdir) is None
  schedule = schedule_lib.TaskSchedule(['atari:Pong', 'atari:Breakout'], 5000,
                                    3)
  path = schedule_lib.write_tasks_json(logdir, schedule)
  with open(path) as f:
    assert json.load(f) == {'tasks': ['atari:Pong', 'atari:Breakout'],
                            'frames_per_task': 5000, 'num_cycles': 3}
  assert schedule_lib.read_tasks_json(logdir) == schedule
  with open(path, 'w') as f:
    f.write('{"tasks": ["A"]}')
  with pytest.raises(ValueError, match='frames_per_task'):
    schedule_lib.read_tasks_json(logdir)


# --- History ----------------------------------------------------------------


def test_history_survives_a_snapshot(tmp_path):
  history = history_lib.EvalHistory()
  history.append(0, {'A': 1.0, 'B': 2.0})
  history.append(10, {'A': 3.5})
  history.append(10, {'B': -1.0, 'C': 0.25})
  with pytest.raises(ValueError, match='before the last'):
    history.append(5, {'A': 0.0})
  path = str(tmp_path / 'state.npz')
  snapshot.save(path, snapshot.prefixed('eval', history.to_arrays()))
  restored = history_lib.EvalHistory.from_arrays(
      snapshot.subset('eval', snapshot.load(path)))
  assert restored.records == history.records
  assert restored.tasks == ['A', 'B', 'C']
  frames, returns = restored.curve('B')
  np.testing.assert_array_equal(frames, [0, 10])
  np.testing.assert_array_equal(returns, [2.0, -1.0])
  empty = history_lib.EvalHistory.from_arrays(
      history_lib.EvalHistory().to_arrays())
  assert not len(empty)


# --- Evaluator --------------------------------------------------------------


def _evaluator(max_steps):
  """An evaluator and its policy (seeded: equal calls, equal results)."""
  env = envs.make(GYM, task=0)
  policy = registry.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8), seed=3)
  env.close()
  return evaluation.Evaluator(GYM, {}, policy, num_episodes=3, seed=7,
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
  means = {name: result.mean_return for name, result in
           first.evaluate_tasks(policy.get_weights()).items()}
  assert set(means) == set(first.task_names)
  assert means['gym:Acrobot-v1'] == -48.0
  first.close()
  second.close()


def test_an_evaluation_reports_the_half_width_of_its_interval():
  # 1.96 * sample std / sqrt(n) by hand: [1, 2, 3, 4] has std 1.2910 (ddof
  # 1), so 1.96 * 1.2910 / 2 = 1.2652; one episode has no interval.
  assert evaluation.ci95_half_width([1.0, 2.0, 3.0, 4.0]) == pytest.approx(
      1.26517, abs=1e-5)
  assert evaluation.ci95_half_width([7.0]) == 0.0
  result = evaluation.TaskEvaluation(np.array([2.0, 2.0, 5.0]), 0, 10)
  assert result.ci95_half_width == pytest.approx(
      1.96 * np.std([2.0, 2.0, 5.0], ddof=1) / np.sqrt(3))
  summary = evaluation.summarize_returns([1.0, 2.0, 3.0, 4.0])
  assert summary['ci95'] == pytest.approx([2.5 - 1.26517, 2.5 + 1.26517],
                                          abs=1e-5)


def test_evaluator_rejects_a_policy_of_another_spec():
  env = envs.make('gym:CartPole-v1')
  policy = registry.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8))
  with pytest.raises(ValueError, match='spec differs'):
    evaluation.Evaluator(GYM, {}, policy, num_episodes=1)
