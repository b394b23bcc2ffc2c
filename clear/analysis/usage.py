"""What a run cost: its run time, env frames/s, peak memory and replay
bytes, from the `runtime/` and `replay/` scalars `clear.runtime.run_loop`
logs. `clear.plot --metrics_out` writes it per run under 'usage'.
"""

from typing import Dict, NamedTuple, Optional

import numpy as np

from clear.analysis import events

RUN_TIME_TAG = 'runtime/run_time_s'
FRAMES_TAG = 'runtime/num_env_frames'
PEAK_MEMORY_TAG = 'runtime/memory_peak_pss_mb'
REPLAY_BYTES_TAG = 'replay/bytes'


class RunUsage(NamedTuple):
  """What a run cost, from its `runtime/` and `replay/` scalars (the points
  `events.read_scalars` keeps: a resume drops those it went back over).

  Attributes:
    env_frames: the most env frames it logged.
    run_time_s: the seconds it had spent running then (resumes summed,
      downtime excluded), or None.
    env_frames_per_s: env_frames / run_time_s over the whole run, or None.
    peak_memory_pss_mb: the highest peak PSS (MB, the learner and its actor
      processes) any of its processes logged, or None.
    replay_bytes: the most bytes its replay held, or None (no replay).
  """
  env_frames: int
  run_time_s: Optional[float]
  env_frames_per_s: Optional[float]
  peak_memory_pss_mb: Optional[float]
  replay_bytes: Optional[int]


def _values(scalars: Dict[str, events.Series], tag: str
            ) -> Optional[np.ndarray]:
  """The values of `tag` ordered by step, or None when it was not logged."""
  series = scalars.get(tag)
  return series.values if series is not None and len(series.values) else None


def run_usage(scalars: Dict[str, events.Series]) -> Optional[RunUsage]:
  """The `RunUsage` of a run's scalars (`events.read_scalars`), or None when
  it logged no `runtime/num_env_frames`. The run loop logs the frames and
  the run time together, with the frames as step, so the last of each are
  the end of the run."""
  frames = _values(scalars, FRAMES_TAG)
  if frames is None:
    return None
  run_time = _values(scalars, RUN_TIME_TAG)
  peak = _values(scalars, PEAK_MEMORY_TAG)
  replay = _values(scalars, REPLAY_BYTES_TAG)
  env_frames = int(frames[-1])
  run_time_s = float(run_time[-1]) if run_time is not None else None
  return RunUsage(
      env_frames, run_time_s,
      env_frames / run_time_s if run_time_s else None,
      float(np.max(peak)) if peak is not None else None,
      int(np.max(replay)) if replay is not None else None)
