"""Tests for clear.continual.metrics: every metric against hand-computed
values, CORA's isolated forgetting and zero-shot transfer, and the keys the
metrics had before they left the continual module, unchanged."""

import json
import os

import numpy as np
import pytest

from clear.continual import history as history_lib
from clear.continual import metrics as continual_metrics
from clear.continual import schedule as schedule_lib

TESTDATA = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        'testdata')

# --- The metrics --------------------------------------------------------------

# Two tasks of 100 frames, evaluated every 50 frames.
_FRAMES = [0, 50, 100, 150, 200]
_A = [0.0, 8.0, 10.0, 6.0, 4.0]
_B = [0.0, 1.0, 2.0, 9.0, 8.0]


def _history(frames=_FRAMES, **curves):
  history = history_lib.EvalHistory()
  for i, f in enumerate(frames):
    history.append(f, {task: values[i] for task, values in curves.items()})
  return history


def test_forgetting_hand_computed():
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100)
  metrics = continual_metrics.forgetting_metrics(_history(A=_A, B=_B),
                                                 schedule)
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
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100)
  reference = {'A': [(0, 0.0), (100, 10.0)],
               'B': [(0, 0.0), (50, 5.0), (100, 5.0)]}
  normalization = {'A': (0.0, 10.0), 'B': (0.0, 10.0)}
  metrics = continual_metrics.forgetting_metrics(
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
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100)
  metrics = continual_metrics.forgetting_metrics(
      _history(A=_A, B=_B), schedule, reference={'A': [(0, 0), (100, 10)]})
  # A's returns span [0, 10]: the same numbers as with (0, 10).
  assert metrics['forward_transfer'] == {'A': pytest.approx(0.3)}
  assert any('min-max' in n for n in metrics['notes'])


def test_end_of_training_is_the_nearest_evaluation():
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100, num_cycles=2)
  frames = [0, 90, 110, 290, 320, 400]
  a = [0.0, 5.0, 6.0, 7.0, 9.0, 1.0]
  metrics = continual_metrics.forgetting_metrics(
      _history(frames, A=a, B=[0.0] * 6), schedule)
  entry = metrics['per_task']['A']
  # A last trains in [200, 300): the evaluation at 290 is nearest.
  assert entry['end_of_training_frames'] == 290
  assert entry['forgetting'] == 6.0
  assert entry['forgetting_from_best'] == 8.0
  # A tie (90 and 110 around 100) takes the earlier evaluation.
  one_cycle = schedule_lib.TaskSchedule(['A', 'B'], 100)
  metrics = continual_metrics.forgetting_metrics(
      _history([0, 90, 110], A=[0.0, 5.0, 6.0]), one_cycle)
  assert metrics['per_task']['A']['end_of_training_frames'] == 90
  assert any("'B' was never evaluated" in n for n in metrics['notes'])


def test_forgetting_per_visit_over_two_cycles():
  # A trains [0, 100) and [200, 300), B [100, 200) and [300, 400).
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100, num_cycles=2)
  frames = [0, 100, 200, 300, 400]
  a = [0.0, 10.0, 4.0, 12.0, 9.0]
  b = [1.0, 1.0, 8.0, 5.0, 11.0]
  normalization = {'A': (0.0, 10.0), 'B': (1.0, 11.0)}
  metrics = continual_metrics.forgetting_metrics(
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
  # The drop across each gap, in order: the terms of those means.
  assert a_entry['forgetting_by_visit'] == pytest.approx([6.0, 3.0])
  assert b_entry['forgetting_by_visit'] == pytest.approx([3.0, 0.0])
  assert a_entry['normalized_forgetting_by_visit'] == pytest.approx(
      [0.6, 0.3])
  assert b_entry['normalized_forgetting_by_visit'] == pytest.approx(
      [0.3, 0.0])
  # Normalised means per evaluation: (0 + 0) / 2, (1 + 0) / 2, (.4 + .7)
  # / 2, (1.2 + .4) / 2, (.9 + 1) / 2.
  assert metrics['average_normalized_return_auc'] == pytest.approx(
      np.mean([0.0, 0.5, 0.55, 0.8, 0.95]))
  # A run stopped in A's second segment: only the first visit counts.
  stopped = continual_metrics.forgetting_metrics(
      _history(frames[:3], A=a[:3], B=b[:3]), schedule)
  assert stopped['per_task']['A']['forgetting_per_visit'] == (
      pytest.approx(6.0))
  assert stopped['per_task']['A']['forgetting_by_visit'] == (
      pytest.approx([6.0]))
  # B's segment ends at the last evaluation: nothing lost yet.
  assert stopped['per_task']['B']['forgetting_by_visit'] == [0.0]


def test_baselines_round_trip_and_errors(tmp_path):
  baselines = continual_metrics.Baselines(
      {'minatar:Breakout': (0.5, 17.0), 'minatar:Asterix': (0.25, 16.0)},
      {'minatar:Breakout': [(0, 0.5), (250_000, 3.0)]})
  path = str(tmp_path / 'baselines.json')
  schedule_lib.write_json(path, continual_metrics.baselines_json(baselines,
                                                             ['a note']))
  read = continual_metrics.read_baselines(path)
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
      continual_metrics.read_baselines(path)
  with pytest.raises(ValueError, match='not a baselines JSON'):
    continual_metrics.read_baselines(str(tmp_path / 'missing.json'))


def test_metrics_errors():
  schedule = schedule_lib.TaskSchedule(['A'], 10)
  with pytest.raises(ValueError, match='no evaluations'):
    continual_metrics.forgetting_metrics(history_lib.EvalHistory(), schedule)
  with pytest.raises(ValueError, match='low != high'):
    continual_metrics.forgetting_metrics(_history([0], A=[1.0]), schedule,
                                         normalization={'A': (1.0, 1.0)})


def test_curve_auc():
  auc = continual_metrics.curve_auc
  assert auc([0, 10], [0, 1], 0, 10) == pytest.approx(0.5)
  # Constant beyond the points; interpolated inside.
  assert auc([10, 20], [2, 4], 0, 30) == pytest.approx(
      (10 * 2 + 10 * 3 + 10 * 4) / 30)
  assert auc([0, 10], [0, 10], 5, 10) == pytest.approx(7.5)


def test_write_metrics_json_is_atomic_and_strict(tmp_path):
  path = str(tmp_path / 'out' / 'metrics.json')
  continual_metrics.write_metrics_json(
      path, {'a': np.float32(1.5), 'b': float('nan'),
             'c': [np.int64(3), {'d': np.inf}]})
  with open(path) as f:
    assert json.load(f) == {'a': 1.5, 'b': None, 'c': [3, {'d': None}]}
  assert os.listdir(tmp_path / 'out') == ['metrics.json']


# --- Unchanged by the move out of the continual module ------------------------


def _golden_cases():
  """(name, history, schedule, reference, normalization): the inputs of
  testdata/continual_metrics_before_split.json, which `forgetting_metrics`
  wrote (through `write_metrics_json`) before it moved here."""
  rng = np.random.RandomState(20261129)
  cases = []
  # Three tasks of 100 frames, two cycles, evaluated every 25 frames a few
  # frames after each quarter (as runs do: a batch's overshoot), and at 0.
  schedule = schedule_lib.TaskSchedule(['A', 'B', 'C'], 100, num_cycles=2)
  history = history_lib.EvalHistory()
  for f in [0] + [25 * k + 3 for k in range(1, 25)]:
    history.append(f, {t: float(np.round(rng.uniform(-5, 20), 2))
                       for t in ('A', 'B', 'C')})
  reference = {'A': [(0, 0.0), (50, 6.0), (100, 9.0)],
               'C': [(0, 1.0), (100, 4.0)]}
  normalization = {'A': (-1.0, 15.0), 'B': (0.0, 10.0), 'C': (2.0, 12.0)}
  cases.append(('full', history, schedule, reference, normalization))
  cases.append(('plain', history, schedule, None, None))
  cases.append(('minmax', history, schedule, reference, None))
  # A repeated task, a run stopped in its third segment, a task evaluated
  # but not trained, and evaluations at uneven frames.
  repeated = schedule_lib.TaskSchedule(['A', 'B', 'A'], 40)
  history = history_lib.EvalHistory()
  for f in (0, 13, 41, 55, 79, 88, 101):
    history.append(f, {t: float(np.round(rng.uniform(0, 9), 2))
                       for t in ('A', 'B', 'D')})
  cases.append(('repeated', history, repeated,
                {'B': [(0, 0.0), (40, 3.0)]}, {'A': (0.0, 9.0)}))
  return cases


def _old_keys_only(new, old):
  """`new` cut to the keys `old` has, recursively (for dicts)."""
  if isinstance(old, dict):
    return {k: _old_keys_only(new[k], v) for k, v in old.items()}
  return new


def test_old_keys_keep_their_values_and_order(tmp_path):
  with open(os.path.join(TESTDATA, 'continual_metrics_before_split.json')) as f:
    before = json.load(f)
  for name, history, schedule, reference, normalization in _golden_cases():
    path = str(tmp_path / f'{name}.json')
    continual_metrics.write_metrics_json(path, continual_metrics.
                                         forgetting_metrics(
                                             history, schedule, reference,
                                             normalization))
    with open(path) as f:
      now = json.load(f)
    old = before[name]
    # Every old key, at every level, with the very same numbers (exact
    # equality of the JSON), and in the same order.
    assert _old_keys_only(now, old) == old, name
    assert [k for k in now if k in old] == list(old), name
    for task, entry in old['per_task'].items():
      assert [k for k in now['per_task'][task] if k in entry] == list(entry)
    # The new keys are CORA's and the per-visit drops.
    new_keys = set(now) - set(old)
    assert new_keys == {'cora_isolated_forgetting', 'cora_zero_shot_transfer',
                        'cora_forgetting_cycles'}, name
    for task in schedule.unique_task_names:
      entry = now['per_task'][task]
      by_visit = {'forgetting_by_visit'}
      if 'normalized_forgetting_per_visit' in entry:
        by_visit.add('normalized_forgetting_by_visit')
      assert set(entry) - set(old['per_task'][task]) == {
          'cora_return_scale', 'cora_isolated_forgetting',
          'cora_isolated_forgetting_by_segment', 'cora_zero_shot_transfer',
          'cora_zero_shot_transfer_by_segment'} | by_visit, (name, task)
      # The per-visit means are the means of the lists.
      for key in by_visit:
        mean_key = key.replace('by_visit', 'per_visit')
        assert np.mean(entry[key]) == pytest.approx(entry[mean_key]), (
            name, task, key)


# --- CORA's metrics -----------------------------------------------------------

# Three tasks of 100 frames, evaluated a few frames after every boundary
# (and once mid-segment, at 50, which no boundary is nearest).
_CORA_FRAMES = [0, 50, 102, 204, 306, 408, 510, 612]
_CORA = {'A': [2.0, 3.0, 10.0, 6.0, 4.0, 9.0, 5.0, 7.0],
         'B': [1.0, 1.0, 3.0, 8.0, 2.0, 2.0, 6.0, 4.0],
         'C': [-4.0, -8.0, -2.0, 2.0, 5.0, 1.0, 3.0, 6.0]}


def _cora_history(scale_a=1.0, end=None):
  curves = dict(_CORA, A=[v * scale_a for v in _CORA['A']])
  frames = [f for f in _CORA_FRAMES if end is None or f <= end]
  return _history(frames, **{t: v[:len(frames)] for t, v in curves.items()})


def test_cora_metrics_hand_computed():
  schedule = schedule_lib.TaskSchedule(['A', 'B', 'C'], 100, num_cycles=2)
  metrics = continual_metrics.forgetting_metrics(_cora_history(), schedule)
  a, b, c = (metrics['per_task'][t] for t in 'ABC')
  # Scales: the largest |return|: 10, 8 and |-8|.
  assert (a['cora_return_scale'], b['cora_return_scale'],
          c['cora_return_scale']) == (10.0, 8.0, 8.0)
  # Forgetting in the first cycle, segments after the task's own:
  # A by B (segment 1): A(102) - A(204) = 10 - 6; by C (2): 6 - 4.
  # B by C (2): B(204) - B(306) = 8 - 2. C, trained last: none.
  assert a['cora_isolated_forgetting_by_segment'] == {
      '1': pytest.approx(0.4), '2': pytest.approx(0.2)}
  assert a['cora_isolated_forgetting'] == pytest.approx(0.3)
  assert b['cora_isolated_forgetting_by_segment'] == {
      '2': pytest.approx(0.75)}
  assert c['cora_isolated_forgetting_by_segment'] == {}
  assert c['cora_isolated_forgetting'] is None
  # Zero-shot transfer from the segments before the task's first:
  # B from A (0): B(102) - B(0) = 3 - 1; C from A: -2 - -4, from B: 2 - -2.
  assert a['cora_zero_shot_transfer_by_segment'] == {}
  assert b['cora_zero_shot_transfer_by_segment'] == {
      '0': pytest.approx(0.25)}
  assert c['cora_zero_shot_transfer_by_segment'] == {
      '0': pytest.approx(0.25), '1': pytest.approx(0.5)}
  assert c['cora_zero_shot_transfer'] == pytest.approx(0.375)
  # The run's averages pool every (task, segment) pair: (.4 + .2 + .75) / 3
  # and (.25 + .25 + .5) / 3, not the means over tasks (.525, .3125).
  assert metrics['cora_isolated_forgetting'] == pytest.approx(0.45)
  assert metrics['cora_zero_shot_transfer'] == pytest.approx(1 / 3)
  assert metrics['cora_forgetting_cycles'] == 1
  json.dumps(metrics, allow_nan=False)


def test_cora_forgetting_over_two_cycles_and_a_stopped_run():
  schedule = schedule_lib.TaskSchedule(['A', 'B', 'C'], 100, num_cycles=2)
  metrics = continual_metrics.forgetting_metrics(_cora_history(), schedule,
                                                 cora_cycles=2)
  a = metrics['per_task']['A']
  # Segments 1 to 5, A's own second segment (3) too, as CORA counts it:
  # 10-6, 6-4, 4-9, 9-5, 5-7 over 10.
  assert a['cora_isolated_forgetting_by_segment'] == pytest.approx(
      {'1': 0.4, '2': 0.2, '3': -0.5, '4': 0.4, '5': -0.2})
  c = metrics['per_task']['C']
  assert c['cora_isolated_forgetting_by_segment'] == pytest.approx(
      {'3': 4 / 8, '4': -2 / 8, '5': -3 / 8})
  assert metrics['cora_forgetting_cycles'] == 2
  # Transfer does not depend on the cycles.
  assert c['cora_zero_shot_transfer_by_segment'] == pytest.approx(
      {'0': 0.25, '1': 0.5})
  # Stopped at 408: segment 3, [300, 400), is reached; 4 is not.
  stopped = continual_metrics.forgetting_metrics(
      _cora_history(end=408), schedule, cora_cycles=2)
  assert list(stopped['per_task']['A'][
      'cora_isolated_forgetting_by_segment']) == ['1', '2', '3']
  # Stopped at 204: C's transfer from segment 1 is there, its forgetting
  # (first cycle) none; B's forgetting by segment 2 is not reached.
  early = continual_metrics.forgetting_metrics(_cora_history(end=204),
                                               schedule)
  assert early['per_task']['B']['cora_isolated_forgetting_by_segment'] == {}
  assert early['per_task']['C']['cora_zero_shot_transfer'] == pytest.approx(
      0.375)
  with pytest.raises(ValueError, match='cycles must be an int >= 1'):
    continual_metrics.cora_metrics(_cora_history(), schedule, cycles=0)


def test_cora_rescaled_uses_the_methods_largest_return():
  schedule = schedule_lib.TaskSchedule(['A', 'B', 'C'], 100)
  runs = [continual_metrics.forgetting_metrics(_cora_history(scale), schedule)
          for scale in (1.0, 0.5)]
  # Each run alone normalises A by its own scale: the same numbers.
  assert (runs[1]['per_task']['A']['cora_isolated_forgetting'] ==
          pytest.approx(0.3))
  assert runs[1]['per_task']['A']['cora_return_scale'] == 5.0
  # Together, A is normalised by 10 in both: the second run's A pairs are
  # (5 - 3) / 10 and (3 - 2) / 10.
  (f0, z0), (f1, z1) = continual_metrics.cora_rescaled(runs)
  assert f0 == pytest.approx(0.45)
  assert f1 == pytest.approx((0.2 + 0.1 + 0.75) / 3)
  assert z0 == z1 == pytest.approx(1 / 3)
  # One run alone: its own numbers, the run's pooled averages.
  assert continual_metrics.cora_rescaled(runs[1:]) == [
      (pytest.approx(runs[1]['cora_isolated_forgetting']),
       pytest.approx(runs[1]['cora_zero_shot_transfer']))]
  assert runs[1]['cora_isolated_forgetting'] == pytest.approx(0.45)


def test_cora_metrics_of_a_task_that_always_returns_zero():
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 10)
  frames = [0, 10, 20]
  zero = continual_metrics.forgetting_metrics(
      _history(frames, A=[0.0, 0.0, 0.0], B=[1.0, 2.0, 4.0]), schedule)
  entry = zero['per_task']['A']
  assert entry['cora_return_scale'] == 0.0
  assert entry['cora_isolated_forgetting_by_segment'] == {'1': None}
  assert zero['cora_isolated_forgetting'] is None
  # B: transfer from A (segment 0): (2 - 1) / 4.
  assert zero['cora_zero_shot_transfer'] == pytest.approx(0.25)
  assert any('every evaluation returned 0' in n for n in zero['notes'])
  # Beside a seed where A does move, its drops of 0 count as 0.
  moving = continual_metrics.forgetting_metrics(
      _history(frames, A=[0.0, 8.0, 2.0], B=[1.0, 2.0, 4.0]), schedule)
  assert continual_metrics.cora_rescaled([zero, moving]) == [
      (0.0, pytest.approx(0.25)), (pytest.approx(0.75), pytest.approx(0.25))]


# --- Unequal segments ---------------------------------------------------------


def test_metrics_of_unequal_segments_hand_computed():
  # A trains [0, 60), B [60, 200) (frames_per_task 100, the mean length);
  # evaluations at 0, 60, 120 and 200.
  schedule = schedule_lib.TaskSchedule(['A', 'B'], 100,
                                       segment_frames=[60, 140])
  frames = [0, 60, 120, 200]
  a = [0.0, 6.0, 4.0, 2.0]
  b = [1.0, 2.0, 5.0, 9.0]
  reference = {'A': [(0, 0.0), (100, 10.0)],
               'B': [(0, 0.0), (70, 7.0), (140, 7.0), (200, 10.0)]}
  normalization = {'A': (0.0, 10.0), 'B': (0.0, 10.0)}
  metrics = continual_metrics.forgetting_metrics(
      _history(frames, A=a, B=b), schedule, reference, normalization)
  entry_a, entry_b = metrics['per_task']['A'], metrics['per_task']['B']
  # A's training ends at 60: 6 there, 2 at the end.
  assert entry_a['end_of_training_frames'] == 60
  assert entry_a['forgetting'] == 4.0
  assert entry_a['forgetting_per_visit'] == 4.0
  # CORA: A's forgetting by segment 1 pairs e(60) and e(200), over A's
  # scale 6: (6 - 2) / 6 (segment 1 taken as [100, 200) would pair e(100) =
  # the evaluation at 120: (4 - 2) / 6).
  assert entry_a['cora_isolated_forgetting_by_segment'] == {
      '1': pytest.approx(2 / 3)}
  # B is first trained in segment 1 (its start, 60, is not past 100):
  # transfer from segment 0 pairs e(0) and e(60), over B's scale 9.
  assert entry_b['cora_zero_shot_transfer_by_segment'] == {
      '0': pytest.approx(1 / 9)}
  assert entry_b['cora_isolated_forgetting_by_segment'] == {}
  assert metrics['cora_isolated_forgetting'] == pytest.approx(2 / 3)
  assert metrics['cora_zero_shot_transfer'] == pytest.approx(1 / 9)
  # Forward transfer against the reference's first 60 frames for A, its
  # first 140 for B (the lengths of their first segments).
  # A on [0, 60]: 0 to .6, mean .3; the reference on [0, 60]: 0 to .6,
  # mean .3: no transfer (against its first 100 frames, mean .5, it would
  # be -.4).
  assert metrics['forward_transfer']['A'] == pytest.approx(0.0)
  # B on [60, 200]: .2, .5 at 120, .9 at 200: (21 + 56) / 140 = .55; the
  # reference on [0, 140]: 0 to .7 by 70, then .7: (24.5 + 49) / 140 =
  # .525. FT = .025 / .475.
  assert metrics['forward_transfer']['B'] == pytest.approx(1 / 19)
  assert metrics['schedule']['segment_frames'] == [60, 140]


def test_cora_pairs_of_a_random_schedule_follow_its_boundaries():
  schedule = schedule_lib.TaskSchedule.with_random_lengths(
      ['A', 'B', 'C'], 100, 1, seed=0)
  starts = [s.start for s in schedule.boundaries()] + [300]
  # An evaluation at every boundary, and one between each two.
  frames = np.array(sorted(starts + [(x + y) // 2 for x, y in
                                     zip(starts, starts[1:])]))
  forgetting, transfer = continual_metrics.cora_pairs(frames, 1, schedule)
  index = {int(f): i for i, f in enumerate(frames)}
  assert forgetting == {2: (index[starts[2]], index[300])}
  assert transfer == {0: (index[0], index[starts[1]])}
