"""What a curve of training episode returns reached: its trailing means of
a window of episodes, the best and final ones, when it first reached a
threshold return (in frames, wall seconds and run seconds) and whether it
stayed there."""

from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np

from clear.analysis.events import Series


def trailing_means(values, window: int) -> np.ndarray:
  """Means of the last `window` values at each point from the window-th
  on: float64 `[max(N - window + 1, 0)]` for `[N]` values."""
  values = np.asarray(values, np.float64)
  if window < 1:
    raise ValueError(f'window must be >= 1, got {window}.')
  if len(values) < window:
    return np.zeros([0])
  sums = np.cumsum(np.concatenate([[0.0], values]))
  return (sums[window:] - sums[:-window]) / window


class CurveSummary(NamedTuple):
  """What a training return curve reached (see `summarize_curve`).

  Attributes:
    episodes: episodes in the curve.
    frames: env frames at its last episode.
    final_mean: mean of the last `window` returns (of all, if fewer; None
      if none).
    best_mean: the best such trailing mean over the run (None if fewer).
    threshold: the return asked about (None if none).
    frames_to_threshold: env frames when the trailing mean first reached
      `threshold` (None if never).
    seconds_to_threshold: wall seconds from the start to then (includes
      any time the run was stopped before a resume).
    run_seconds_to_threshold: the seconds the run had spent running by
      then, interpolated in its `runtime/run_time_s` (None without it).
    means_at_frames: dict frames -> the mean of the last `window` returns
      of episodes that ended by then (None if fewer, or if the curve
      stops before those frames), to compare runs at equal frames.
    min_mean_after_threshold: the lowest trailing mean from the first
      crossing of `threshold` to the end of the curve: whether a solved
      task stayed solved (None if never reached).
  """
  episodes: int
  frames: int
  final_mean: Optional[float]
  best_mean: Optional[float]
  threshold: Optional[float]
  frames_to_threshold: Optional[int]
  seconds_to_threshold: Optional[float]
  run_seconds_to_threshold: Optional[float] = None
  means_at_frames: Optional[Dict[int, Optional[float]]] = None
  min_mean_after_threshold: Optional[float] = None


def _mean_at(steps: np.ndarray, means: np.ndarray, frames: int,
             window: int) -> Optional[float]:
  """The trailing mean (of `trailing_means(values, window)`) of the
  episodes whose `steps` ended by `frames` (see `CurveSummary`)."""
  if not len(steps) or frames > steps[-1]:
    return None
  end = int(np.searchsorted(steps, frames, side='right'))
  return float(means[end - window]) if end >= window else None


def summarize_curve(series: Series, window: int = 100,
                    threshold: Optional[float] = None,
                    start_time: Optional[float] = None,
                    run_time: Optional[Series] = None,
                    at_frames: Sequence[int] = ()) -> CurveSummary:
  """Summarizes one curve of episode returns with `window`-episode means;
  seconds count from `start_time` (default: the first episode's end), run
  seconds are read from `run_time` (see `Run`), and trailing means are
  also taken at each of `at_frames`."""
  means = trailing_means(series.values, window)
  frames = seconds = run_seconds = min_after = None
  if threshold is not None:
    reached = np.flatnonzero(means >= threshold)
    if reached.size:
      min_after = float(means[reached[0]:].min())
      i = int(reached[0]) + window - 1
      frames = int(series.steps[i])
      start = series.wall_times[0] if start_time is None else start_time
      seconds = float(series.wall_times[i] - start)
      if run_time is not None and len(run_time.steps):
        run_seconds = float(np.interp(frames, run_time.steps,
                                      run_time.values))
  return CurveSummary(
      episodes=len(series.values),
      frames=int(series.steps[-1]) if len(series.steps) else 0,
      final_mean=(float(np.mean(series.values[-window:]))
                  if len(series.values) else None),
      best_mean=float(means.max()) if means.size else None,
      threshold=threshold, frames_to_threshold=frames,
      seconds_to_threshold=seconds, run_seconds_to_threshold=run_seconds,
      means_at_frames=({int(n): _mean_at(series.steps, means, int(n),
                                         window)
                        for n in at_frames} if len(at_frames) else None),
      min_mean_after_threshold=min_after)
