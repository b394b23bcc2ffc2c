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


def test_schedule_of_unequal_segments():
  # A [0, 60), B [60, 200), A [200, 330), B [330, 400).
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100, num_cycles=2,
                                       segment_frames=[60, 140, 130, 70])
  assert schedule.total_frames == 400 and schedule.num_segments == 4
  assert schedule.segment_frames == (60, 140, 130, 70)
  table = [  # frames, segment, task, segment end
      (0, 0, 0, 60), (59, 0, 0, 60), (60, 1, 1, 200), (199, 1, 1, 200),
      (200, 2, 0, 330), (329, 2, 0, 330), (330, 3, 1, 400),
      (400, 3, 1, 400), (1000, 3, 1, 400)]
  for frames, segment, task, end in table:
    assert schedule.segment_index(frames) == segment, frames
    assert schedule.task_at(frames) == task, frames
    assert schedule.segment_end(frames) == end, frames
  assert schedule.segment_at(250) == schedule_lib.Segment(200, 330, 0)
  assert schedule.segment_at(5000) == schedule_lib.Segment(330, 400, 1)
  assert schedule.boundaries() == [(0, 60, 0), (60, 200, 1), (200, 330, 0),
                                   (330, 400, 1)]
  assert schedule.segments_of('B') == [(60, 200, 1), (330, 400, 1)]
  assert schedule.training_end('A') == 330
  assert schedule.training_end('B') == 400
  # The lengths are recorded, and read back.
  assert schedule.to_json() == {'tasks': ['A', 'B'], 'frames_per_task': 100,
                                'num_cycles': 2,
                                'segment_frames': [60, 140, 130, 70]}
  assert schedule_lib.TaskSchedule.from_json(schedule.to_json()) == schedule
  assert schedule != schedule_lib.TaskSchedule(['A', 'B'], 100, 2)
  # Lengths all equal to frames_per_task are the equal schedule.
  same = schedule_lib.TaskSchedule(['A', 'B'], 100, 1, [100, 100])
  assert same.to_json() == schedule_lib.TaskSchedule(['A', 'B'],
                                                     100).to_json()
  # The equal schedule's segment_at.
  assert schedule_lib.TaskSchedule(['A', 'B'], 100).segment_at(
      150) == schedule_lib.Segment(100, 200, 1)


@pytest.mark.parametrize('kwargs, match', [
    (dict(segment_frames=[60, 140]), 'one length per segment'),
    (dict(segment_frames='60,140,130,70'), 'one length per segment'),
    (dict(segment_frames=[60, 0, 130, 70]), 'segment_frames must be an int'),
    (dict(random_seed=3), 'random_seed needs the segment_frames'),
    (dict(segment_frames=[60, 140, 130, 70], random_seed='3'),
     'random_seed must be an int'),
])
def test_schedule_bad_segment_frames(kwargs, match):
  with pytest.raises(ValueError, match=match):
    schedule_lib.TaskSchedule(['A', 'B'], 100, 2, **kwargs)


def test_random_segment_frames():
  lengths = schedule_lib.random_segment_frames(1000, 4, seed=3)
  # Pinned: a change of the draw would move the segments of runs that
  # resume.
  assert lengths == [1012, 1097, 686, 1205]
  # u_k ~ Uniform(0.5, 1.5) from the run's seed plus the offset; each
  # segment 1 + floor(u_k / sum(u) * (4000 - 4)), the last the rest.
  u = np.random.default_rng(3 + schedule_lib.SEGMENT_SEED_OFFSET).uniform(
      0.5, 1.5, 4)
  assert np.all((u >= 0.5) & (u < 1.5))
  expected = [1 + int(np.floor(x / u.sum() * 3996)) for x in u[:3]]
  assert lengths == expected + [4000 - sum(expected)]
  # A pure function of its arguments; another seed draws others.
  assert schedule_lib.random_segment_frames(1000, 4, 3) == lengths
  assert schedule_lib.random_segment_frames(1000, 4, 4) != lengths
  for seed in range(20):
    drawn = schedule_lib.random_segment_frames(100, 6, seed)
    assert sum(drawn) == 600 and len(drawn) == 6
    # Within the spread: 100 u / mean(u) lies in (100 / 3, 300).
    assert all(33 <= n <= 300 for n in drawn), drawn
  # Every segment gets a frame, however short the segments.
  assert schedule_lib.random_segment_frames(1, 3, 0) == [1, 1, 1]
  assert min(schedule_lib.random_segment_frames(2, 5, 1)) >= 1
  assert sum(schedule_lib.random_segment_frames(2, 5, 1)) == 10
  with pytest.raises(ValueError, match='seed must be an int >= 0'):
    schedule_lib.random_segment_frames(100, 2, -1)
  with pytest.raises(ValueError, match='frames_per_task must be an int'):
    schedule_lib.random_segment_frames(0, 2, 0)


def test_a_random_schedule_is_rebuilt_from_its_arguments_and_tasks_json(
    tmp_path):
  schedule = schedule_lib.TaskSchedule.with_random_lengths(
      ['A', 'B', 'C'], 1000, num_cycles=2, seed=3)
  assert schedule.segment_frames == tuple(
      schedule_lib.random_segment_frames(1000, 6, 3))
  assert schedule.total_frames == 6000  # The equal schedule's budget.
  assert schedule.random_seed == 3 and schedule.frames_per_task == 1000
  assert schedule == schedule_lib.TaskSchedule.with_random_lengths(
      ['A', 'B', 'C'], 1000, 2, 3)
  assert schedule != schedule_lib.TaskSchedule.with_random_lengths(
      ['A', 'B', 'C'], 1000, 2, 4)
  ends = np.cumsum(schedule.segment_frames)
  assert [s.end for s in schedule.boundaries()] == list(ends)
  assert schedule.segment_at(int(ends[2])) == schedule_lib.Segment(
      int(ends[2]), int(ends[3]), 0)
  logdir = str(tmp_path / 'run')
  path = schedule_lib.write_tasks_json(logdir, schedule)
  with open(path) as f:
    assert json.load(f) == {
        'tasks': ['A', 'B', 'C'], 'frames_per_task': 1000, 'num_cycles': 2,
        'segment_lengths': 'random', 'seed': 3,
        'segment_frames': list(schedule.segment_frames)}
  assert schedule_lib.read_tasks_json(logdir) == schedule
  # An old tasks.json, without the keys, is the equal schedule.
  with open(path, 'w') as f:
    f.write('{"tasks": ["A", "B"], "frames_per_task": 50, "num_cycles": 1}')
  old = schedule_lib.read_tasks_json(logdir)
  assert old.boundaries() == [(0, 50, 0), (50, 100, 1)]
  assert old.random_seed is None
  with open(path, 'w') as f:
    f.write('{"tasks": ["A", "B"], "frames_per_task": 50, '
            '"segment_lengths": "random", "seed": 1}')
  with pytest.raises(ValueError, match='needs the "segment_frames"'):
    schedule_lib.read_tasks_json(logdir)
  with open(path, 'w') as f:
    f.write('{"tasks": ["A", "B"], "frames_per_task": 50, '
            '"segment_lengths": "sometimes"}')
  with pytest.raises(ValueError, match='"segment_lengths" must be one of'):
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
