"""Tests for clear.continual.aggregate: IQM, probability of improvement and
their stratified bootstrap intervals, against hand-computed values and a
numpy loop written out from the definitions."""

import numpy as np
import pytest

from clear.continual import aggregate

# --- References -------------------------------------------------------------


def _iqm(scores):
  """Sorts all scores, drops floor(N / 4) at each end, averages the rest."""
  values = np.sort(np.ravel(scores))
  cut = len(values) // 4
  return float(np.mean(values[cut:len(values) - cut]))


def _improvement(x, y):
  """The fraction of (run of x, run of y) pairs where x is higher, ties
  half, per task; averaged over tasks."""
  per_task = []
  for task in range(x.shape[1]):
    a, b = x[:, task, None], y[None, :, task]
    per_task.append(np.mean((a > b) + 0.5 * (a == b)))
  return float(np.mean(per_task))


def _reference_interval(matrices, statistic, reps, seed, confidence):
  """Stratified percentile bootstrap: each replicate draws, for every
  matrix in turn, an index `[num_runs, num_tasks]` from a RandomState
  seeded with `seed` (the stream numpy's global RNG gives after
  np.random.seed(seed)), so that entry (n, m) takes run index[n, m]'s score
  on the same task m."""
  rng = np.random.RandomState(seed)
  values = []
  for _ in range(reps):
    samples = []
    for matrix in matrices:
      runs, tasks = matrix.shape
      index = rng.choice(runs, (runs, tasks))
      samples.append(matrix[index, np.arange(tasks)])
    values.append(statistic(*samples))
  alpha = (1.0 - confidence) / 2
  return tuple(np.percentile(values, [100 * alpha, 100 * (1.0 - alpha)]))


SCORES = np.random.RandomState(1).normal(size=(5, 3)) + [0.0, 1.0, 2.0]


# --- IQM --------------------------------------------------------------------


def test_iqm_averages_the_middle_half():
  # Sorted: -50, 0, 1, 2, 3, 4, 7, 100; the middle half 1, 2, 3, 4.
  scores = [[0, 100], [1, 2], [3, 4], [-50, 7]]
  assert aggregate.iqm(np.array(scores)) == 2.5
  assert aggregate.iqm(scores) == 2.5


def test_iqm_trims_whole_scores_only():
  # 6 scores: 6 / 4 = 1.5, so one score goes at each end, and the middle
  # 1, 2, 4, 8 count fully: 3.75. (Weighting the half scores at the
  # quartiles would give (0.5 + 2 + 4 + 4) / 3 = 3.5.)
  assert aggregate.iqm([[8, 0], [2, 16], [1, 4]]) == 3.75
  # 5 scores: 1.25, one at each end: (10 + 20 + 30) / 3.
  assert aggregate.iqm([[1000], [10], [0], [30], [20]]) == 20.0
  # 3 scores: nothing trimmed.
  assert aggregate.iqm([[1, 2, 6]]) == 3.0
  assert aggregate.iqm(SCORES) == pytest.approx(_iqm(SCORES), rel=1e-12)


# --- Probability of improvement ---------------------------------------------


def test_probability_of_improvement_hand_counted():
  x = np.array([[1.0, 5.0], [3.0, 5.0]])
  y = np.array([[2.0, 5.0], [0.0, 4.0], [3.0, 6.0]])
  # Task 0, x (1, 3) against y (2, 0, 3): 1 beats 0; 3 beats 2 and 0 and
  # ties 3: 3.5 of 6 pairs. Task 1, x (5, 5) against y (5, 4, 6): each 5
  # ties 5 and beats 4: 3 of 6. Mean (3.5 / 6 + 3 / 6) / 2 = 13 / 24.
  forward = aggregate.probability_of_improvement(x, y, reps=200)
  assert forward.point == pytest.approx(13 / 24, rel=1e-12)
  assert _improvement(x, y) == pytest.approx(13 / 24, rel=1e-12)
  # Ties count half, so the two directions add up to 1.
  backward = aggregate.probability_of_improvement(y, x, reps=200)
  assert backward.point == pytest.approx(11 / 24, rel=1e-12)
  assert aggregate.probability_of_improvement(x, x, reps=200).point == 0.5


def test_probability_of_improvement_interval_matches_the_reference():
  x = SCORES[:4] + 0.5
  y = SCORES
  estimate = aggregate.probability_of_improvement(x, y, reps=300, seed=3)
  assert estimate.point == pytest.approx(_improvement(x, y), rel=1e-12)
  low, high = _reference_interval([x, y], _improvement, 300, 3, 0.95)
  assert (estimate.low, estimate.high) == (pytest.approx(low, abs=1e-12),
                                           pytest.approx(high, abs=1e-12))
  assert estimate.low < estimate.point < estimate.high
  # With the same seed, again the same interval.
  assert aggregate.probability_of_improvement(x, y, reps=300,
                                              seed=3) == estimate


# --- Intervals --------------------------------------------------------------


def test_interval_contains_the_point_and_is_reproducible():
  estimates = aggregate.interval_estimates({'clear': SCORES}, reps=500)
  point, low, high = estimates['clear']
  assert point == pytest.approx(_iqm(SCORES), rel=1e-12)
  assert low < point < high
  assert aggregate.interval_estimates({'clear': SCORES},
                                      reps=500) == estimates
  other = aggregate.interval_estimates({'clear': SCORES}, reps=500, seed=1)
  assert other['clear'].point == point
  assert (other['clear'].low, other['clear'].high) != (low, high)


def test_interval_matches_the_stratified_bootstrap_reference():
  for confidence in (0.95, 0.8):
    estimate = aggregate.interval_estimates(
        {'clear': SCORES}, reps=400, seed=5, confidence=confidence)['clear']
    low, high = _reference_interval([SCORES], _iqm, 400, 5, confidence)
    assert estimate.low == pytest.approx(low, abs=1e-12)
    assert estimate.high == pytest.approx(high, abs=1e-12)
  # Resampling whole runs (rows) instead would be another interval.
  rng = np.random.RandomState(5)
  rows = [_iqm(SCORES[rng.choice(5, 5)]) for _ in range(400)]
  assert tuple(np.percentile(rows, [10, 90])) != pytest.approx(
      (estimate.low, estimate.high), abs=1e-6)


def test_each_method_interval_is_its_own():
  # A method's interval does not depend on the other methods or their order.
  alone = aggregate.interval_estimates({'ewc': SCORES[:, :2]}, reps=300)
  both = aggregate.interval_estimates(
      {'clear': SCORES, 'ewc': SCORES[:, :2]}, reps=300)
  assert list(both) == ['clear', 'ewc']
  assert both['ewc'] == alone['ewc']


def test_the_global_random_state_is_left_as_it_was():
  np.random.seed(7)
  expected = np.random.random(3)
  np.random.seed(7)
  aggregate.interval_estimates({'clear': SCORES}, reps=50, seed=11)
  aggregate.probability_of_improvement(SCORES, SCORES + 1, reps=50, seed=11)
  np.testing.assert_array_equal(np.random.random(3), expected)


def test_equal_runs_collapse_the_interval_to_the_point():
  # Every run has the same score on each task, so every replicate is the
  # scores themselves: IQM of 1, 1, 1, 5, 5, 5 is (1 + 1 + 5 + 5) / 4.
  scores = np.array([[1.0, 5.0]] * 3)
  assert aggregate.interval_estimates({'a': scores}, reps=200)['a'] == (
      3.0, 3.0, 3.0)
  assert aggregate.probability_of_improvement(
      scores, np.array([[2.0, 4.0]] * 2), reps=200) == (0.5, 0.5, 0.5)


def test_the_bootstrap_never_moves_a_score_to_another_task():
  # Task 0 scores 0 to 0.75 and task 1 10 to 10.75 over 4 runs (sums exact
  # in binary). Resampled within tasks, a replicate has 4 scores of each,
  # and its IQM is the mean of task 0's 2 highest and task 1's 2 lowest:
  # in [(0 + 0 + 10 + 10) / 4, (0.75 + 0.75 + 10.75 + 10.75) / 4]. Mixing
  # tasks would put 5 of one task and 3 of the other in many replicates
  # (IQM at most 3.25, or at least 7.5).
  scores = np.array([[0.0, 10.0], [0.25, 10.25], [0.5, 10.5], [0.75, 10.75]])
  estimate = aggregate.interval_estimates({'a': scores}, reps=1000,
                                          confidence=0.999)['a']
  assert estimate.point == 5.375
  assert 5.0 <= estimate.low < estimate.high <= 5.75


def test_one_run_has_a_point_and_no_interval():
  estimates = aggregate.interval_estimates(
      {'partial': [[1.0, 2.0, 3.0]], 'clear': SCORES}, reps=100)
  assert estimates['partial'] == (2.0, None, None)
  assert estimates['clear'].low is not None
  # Task 0: 4 beats 1, loses to 5: 1 / 2. Task 1: 0 loses to 1, ties 0:
  # 1 / 4. Mean 3 / 8.
  assert aggregate.probability_of_improvement(
      [[4.0, 0.0]], [[1.0, 1.0], [5.0, 0.0]], reps=100) == (
          aggregate.Estimate(0.375, None, None))


# --- Errors -----------------------------------------------------------------


@pytest.mark.parametrize('scores', [
    [1.0, 2.0, 3.0], np.zeros((2, 2, 2)), np.zeros((0, 3)), np.zeros((2, 0)),
    5.0])
def test_not_a_matrix_is_refused(scores):
  with pytest.raises(ValueError, match=r"interval_estimates: 'ewc': scores "
                     r'must be a \[num_runs, num_tasks\] matrix'):
    aggregate.interval_estimates({'clear': SCORES, 'ewc': scores})
  with pytest.raises(ValueError, match=r'iqm: scores must be'):
    aggregate.iqm(scores)


def test_ragged_scores_are_refused():
  with pytest.raises(ValueError, match=r"'ewc': scores must be a "
                     r'\[num_runs, num_tasks\] matrix of numbers'):
    aggregate.interval_estimates({'ewc': [[1.0, 2.0], [3.0]]})


@pytest.mark.parametrize('bad', [np.nan, None, np.inf])
def test_missing_scores_are_refused(bad):
  scores = [[1.0, 2.0], [bad, 3.0], [4.0, 5.0]]
  with pytest.raises(ValueError, match=r"interval_estimates: 'clear': 1 "
                     r'score\(s\) are NaN, None or infinite, at \(run, '
                     r'task\) \[\(1, 0\)\]'):
    aggregate.interval_estimates({'clear': scores})
  with pytest.raises(ValueError, match=r'probability_of_improvement: y: 1 '
                     r'score\(s\) are NaN'):
    aggregate.probability_of_improvement(SCORES[:, :2], scores)


def test_probability_of_improvement_needs_the_same_tasks():
  with pytest.raises(ValueError, match=r'x and y must score the same tasks, '
                     r'got 3 and 2 tasks'):
    aggregate.probability_of_improvement(SCORES, SCORES[:, :2])


def test_bad_bootstrap_arguments_are_refused():
  for reps in (0, -3, 2.5, True):
    with pytest.raises(ValueError, match='reps must be an int >= 1'):
      aggregate.interval_estimates({'clear': SCORES}, reps=reps)
  for confidence in (0.0, 1.0, 95):
    with pytest.raises(ValueError, match=r'confidence must be in \(0, 1\)'):
      aggregate.probability_of_improvement(SCORES, SCORES,
                                           confidence=confidence)
