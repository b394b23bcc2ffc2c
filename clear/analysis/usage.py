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


def run_usage(scalars: Dict[str, events.Series]) -> Optional[RunUsage]:
  """The `RunUsage` of a run's scalars (`events.read_scalars`), or None when it
  logged no `runtime/num_env_frames`."""
  frames = scalars.get(FRAMES_TAG)
  if frames is None or not len(frames.values):
    return None
  last = int(np.argmax(frames.values))
  env_frames = int(frames.values[last])
  run_time = scalars.get(RUN_TIME_TAG)
  run_time_s = None
  if run_time is not None and len(run_time.values):
    # The run time logged beside the most frames (same step).
    at = np.flatnonzero(run_time.steps == frames.steps[last])
    run_time_s = float(run_time.values[at[-1] if len(at) else -1])
  fps = env_frames / run_time_s if run_time_s else None
  peak = scalars.get(PEAK_MEMORY_TAG)
  replay = scalars.get(REPLAY_BYTES_TAG)
  return RunUsage(
      env_frames, run_time_s, fps,
      float(np.max(peak.values)) if peak is not None and len(peak.values)
      else None,
      int(np.max(replay.values)) if replay is not None and len(replay.values)
      else None)
