"""Aggregate scores over runs and tasks, with bootstrap intervals.

A study compares methods (CLEAR, online EWC, ...) on a suite of tasks
with a few runs (seeds) each. For each method, `scores[n, m]` is a
`[num_runs, num_tasks]` matrix: run n's score on task m, e.g. its
normalised final return on each game. With 3 to 5 runs, a mean with a
t interval per task says little, so this module gives the statistics of
Agarwal et al. 2021, "Deep reinforcement learning at the edge of the
statistical precipice", as their library rliable (1.2) defines them:

- `iqm`: the interquartile mean of all num_runs * num_tasks scores,
  `scipy.stats.trim_mean(scores, 0.25, axis=None)`: sort them, drop
  floor(N / 4) from each end (N scores; whole scores only, so with N = 6
  the mean of the middle 4) and average the rest.
- `interval_estimates`: per method, the IQM and its stratified bootstrap
  confidence interval: each of `reps` replicates draws, for every task on
  its own, num_runs of that task's scores with replacement (a replicate
  never moves a score to another task, and may pair run 1's score on
  task 0 with run 3's on task 1); the interval is the (1 - confidence) / 2
  and (1 + confidence) / 2 percentiles of the replicates' IQMs
  (`np.percentile`, linear interpolation): rliable's 'percentile' method.
- `probability_of_improvement`: P(X > Y), for a score X of one method
  and Y of the other on the same task, ties counting half (the
  Mann-Whitney U over the num_runs_x * num_runs_y pairs), averaged over
  tasks; its interval resamples the two methods' runs independently,
  within each task.

These are written here on numpy and scipy rather than imported from
rliable: rliable 1.2 needs arch < 8, and arch 7 fails to import with
pandas 3. The replicates are drawn as rliable draws them, from a
`np.random.RandomState(seed)` (rliable uses numpy's global RNG, so after
`np.random.seed(seed)` it gives the same intervals); numpy's global RNG
is neither used nor changed. An interval depends only on its scores,
`reps`, `seed` and `confidence`, not on the other methods or their order.

A method with fewer than 2 runs has a point estimate and no interval
(low and high None). NaN, None or infinite scores are refused rather
than skipped: drop the run or the task first.
"""

from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

import numpy as np
from scipy import stats

REPS = 2000
CONFIDENCE = 0.95


class Estimate(NamedTuple):
  """An aggregate statistic and its bootstrap confidence interval.

  Attributes:
    point: the statistic of the scores themselves.
    low: the interval's lower bound (None with fewer than 2 runs).
    high: the interval's upper bound (None with fewer than 2 runs).
  """
  point: float
  low: Optional[float] = None
  high: Optional[float] = None


def _matrix(scores, name: str) -> np.ndarray:
  """`scores` as a float64 `[num_runs, num_tasks]` matrix.

  Raises:
    ValueError: naming `name`, when `scores` is not a matrix with a run and
      a task or more, or has NaN, None or infinite entries.
  """
  try:
    matrix = np.asarray(scores, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f'{name}: scores must be a [num_runs, num_tasks] '
                     f'matrix of numbers ({e}).') from e
  if matrix.ndim != 2 or 0 in matrix.shape:
    raise ValueError(f'{name}: scores must be a [num_runs, num_tasks] '
                     f'matrix with a run and a task or more, got shape '
                     f'{matrix.shape}.')
  bad = [tuple(int(i) for i in where)
         for where in np.argwhere(~np.isfinite(matrix))]
  if bad:
    raise ValueError(f'{name}: {len(bad)} score(s) are NaN, None or '
                     f'infinite, at (run, task) {bad[:5]}; drop the run or '
                     f'the task rather than aggregate a partial matrix.')
  return matrix


def _check_bootstrap(name: str, reps: int, confidence: float):
  if isinstance(reps, bool) or not isinstance(reps, (int, np.integer)) or (
      reps < 1):
    raise ValueError(f'{name}: reps must be an int >= 1, got {reps!r}.')
  if not 0 < confidence < 1:
    raise ValueError(f'{name}: confidence must be in (0, 1), got '
                     f'{confidence!r}.')


def _iqm(scores: np.ndarray) -> np.ndarray:
  """IQM over the last two axes: `[..., runs, tasks]` -> `[...]`."""
  return stats.trim_mean(scores.reshape(scores.shape[:-2] + (-1,)), 0.25,
                         axis=-1)


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  """P(X > Y) averaged over tasks, over the last two axes: x
  `[..., runs_x, tasks]` and y `[..., runs_y, tasks]` -> `[...]`."""
  a, b = x[..., :, None, :], y[..., None, :, :]  # [..., runs_x, runs_y, tasks]
  wins = np.count_nonzero(a > b, axis=(-3, -2, -1))
  ties = np.count_nonzero(a == b, axis=(-3, -2, -1))
  return (wins + 0.5 * ties) / (a.shape[-3] * b.shape[-2] * a.shape[-1])


def _interval(matrices: Sequence[np.ndarray],
              statistic: Callable[..., np.ndarray], reps: int, seed: int,
              confidence: float) -> Estimate:
  """`statistic(*matrices)` and its percentile stratified bootstrap
  interval, each matrix `[runs_i, tasks]` resampled on its own.

  Each replicate draws, for every matrix in turn, `index[n, m]` uniform in
  [0, runs_i) and takes entry (n, m) from `matrix[index[n, m], m]`
  (rliable's `StratifiedBootstrap` / `StratifiedIndependentBootstrap`).
  """
  point = float(statistic(*matrices))
  if min(len(matrix) for matrix in matrices) < 2:
    return Estimate(point)
  rng = np.random.RandomState(seed)
  indices: List[List[np.ndarray]] = [[] for _ in matrices]
  for _ in range(reps):
    for index, matrix in zip(indices, matrices):
      index.append(rng.choice(len(matrix), matrix.shape))
  tasks = np.arange(matrices[0].shape[1])
  values = statistic(*[matrix[np.stack(index), tasks]  # [reps, runs, tasks]
                       for matrix, index in zip(matrices, indices)])
  alpha = (1.0 - confidence) / 2
  low, high = np.percentile(values, [100 * alpha, 100 * (1.0 - alpha)])
  return Estimate(point, float(low), float(high))


def iqm(scores: np.ndarray) -> float:
  """The interquartile mean of all scores (rliable's `aggregate_iqm`).

  Args:
    scores: float `[num_runs, num_tasks]`.

  Returns:
    The mean of the scores left after dropping the floor(N / 4) lowest and
    highest of the N = num_runs * num_tasks.

  Raises:
    ValueError: `scores` not a matrix, or with NaN, None or infinite
      entries.
  """
  return float(_iqm(_matrix(scores, 'iqm')))


def interval_estimates(scores: Dict[str, np.ndarray], reps: int = REPS,
                       seed: int = 0, confidence: float = CONFIDENCE
                       ) -> Dict[str, Estimate]:
  """Each method's IQM and its stratified bootstrap confidence interval
  (rliable's `get_interval_estimates` with `aggregate_iqm`).

  Args:
    scores: {method: float `[num_runs, num_tasks]`}.
    reps: bootstrap replicates.
    seed: seeds each method's replicates (the same seed for every method).
    confidence: the interval's coverage.

  Returns:
    {method: Estimate(IQM, low, high)} in the order of `scores`; low and
    high None for a method with one run.

  Raises:
    ValueError: naming the method, when its scores are not a matrix or
      have NaN, None or infinite entries; or bad `reps` or `confidence`.
  """
  _check_bootstrap('interval_estimates', reps, confidence)
  matrices = {method: _matrix(matrix, f'interval_estimates: {method!r}')
              for method, matrix in scores.items()}
  return {method: _interval([matrix], _iqm, reps, seed, confidence)
          for method, matrix in matrices.items()}


def probability_of_improvement(x: np.ndarray, y: np.ndarray,
                               reps: int = REPS, seed: int = 0,
                               confidence: float = CONFIDENCE) -> Estimate:
  """P(X > Y) averaged over tasks, and its stratified bootstrap interval.

  Per task, the fraction of (run of x, run of y) pairs where x scores
  higher, a tie counting half (rliable's `probability_of_improvement`);
  then the mean over tasks.

  Args:
    x: float `[num_runs_x, num_tasks]`, one method's scores.
    y: float `[num_runs_y, num_tasks]`, the other's, on the same tasks.
    reps: bootstrap replicates (x's and y's runs resampled independently,
      within each task).
    seed: seeds the replicates.
    confidence: the interval's coverage.

  Returns:
    Estimate(P(X > Y), low, high); low and high None when x or y has one
    run.

  Raises:
    ValueError: naming x or y, when it is not a matrix or has NaN, None or
      infinite entries; when their numbers of tasks differ; or bad `reps`
      or `confidence`.
  """
  name = 'probability_of_improvement'
  _check_bootstrap(name, reps, confidence)
  x, y = _matrix(x, f'{name}: x'), _matrix(y, f'{name}: y')
  if x.shape[1] != y.shape[1]:
    raise ValueError(f'{name}: x and y must score the same tasks, got '
                     f'{x.shape[1]} and {y.shape[1]} tasks.')
  return _interval([x, y], _improvement, reps, seed, confidence)
