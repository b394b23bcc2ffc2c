"""The evaluations of a continual run, kept across resumes.

`EvalHistory` holds every evaluation of the tasks so far ({task: mean
return} at a frame count), and converts to and from plain numpy arrays for
the run's checkpoint state (`clear.snapshot`), so they survive a resume.
`clear.continual.metrics` computes the run's metrics from it.
"""

from typing import Dict, List, NamedTuple, Sequence, Tuple

import numpy as np

from clear import snapshot
from clear.continual import schedule as schedule_lib

# An evaluation of a task logs its mean return as `eval/<task>/return` and
# the half-width of that mean's 95% interval as `eval/<task>/<CI95_SUFFIX>`.
CI95_SUFFIX = 'return_ci95'


class EvalRecord(NamedTuple):
  """One evaluation: at `frames`, {task name: mean return}."""
  frames: int
  returns: Dict[str, float]


class EvalHistory:
  """The evaluations of a run, in frame order."""

  def __init__(self, records: Sequence[EvalRecord] = ()):
    self._records = []
    for record in records:
      self.append(*record)

  def append(self, frames: int, returns: Dict[str, float]):
    """Adds an evaluation at `frames` (not before the last one).

    Raises:
      ValueError: frames go back, or no returns.
    """
    if self._records and frames < self._records[-1].frames:
      raise ValueError(f'EvalHistory: frames {frames} come before the last '
                       f'evaluation ({self._records[-1].frames}).')
    if not returns:
      raise ValueError('EvalHistory: an evaluation needs at least one task.')
    self._records.append(EvalRecord(
        int(frames), {str(k): float(v) for k, v in returns.items()}))

  @property
  def records(self) -> List[EvalRecord]:
    return list(self._records)

  def __len__(self):
    return len(self._records)

  @property
  def tasks(self) -> List[str]:
    """Every task evaluated, in order of first appearance."""
    return schedule_lib.unique_names(
        [name for r in self._records for name in r.returns])

  def curve(self, task: str) -> Tuple[np.ndarray, np.ndarray]:
    """(frames int64 `[N]`, returns float64 `[N]`) of the evaluations that
    include `task`."""
    points = [(r.frames, r.returns[task]) for r in self._records
              if task in r.returns]
    frames = np.array([p[0] for p in points], np.int64)
    return frames, np.array([p[1] for p in points], np.float64)

  def to_arrays(self) -> snapshot.Arrays:
    """Plain arrays for `clear.snapshot`: `frames` int64 `[N]`, `returns`
    float64 `[N, K]` (NaN where a task was not evaluated) and `tasks` (the
    K names, JSON in a 0-d unicode array)."""
    tasks = self.tasks
    returns = np.full([len(self._records), len(tasks)], np.nan, np.float64)
    for i, record in enumerate(self._records):
      for j, task in enumerate(tasks):
        returns[i, j] = record.returns.get(task, np.nan)
    return {'frames': np.array([r.frames for r in self._records], np.int64),
            'returns': returns, 'tasks': snapshot.to_json_array(tasks)}

  @classmethod
  def from_arrays(cls, arrays: snapshot.Arrays) -> 'EvalHistory':
    """Rebuilds what `to_arrays` returned.

    Raises:
      ValueError: missing entries or inconsistent shapes.
    """
    try:
      tasks = snapshot.from_json_array(arrays['tasks'])
      frames, returns = arrays['frames'], arrays['returns']
    except KeyError as e:
      raise ValueError(f'EvalHistory.from_arrays: {e} is missing.') from None
    if returns.shape != (len(frames), len(tasks)):
      raise ValueError(f'EvalHistory.from_arrays: returns are '
                       f'{returns.shape}, expected '
                       f'{(len(frames), len(tasks))}.')
    records = [EvalRecord(int(f), {t: float(v) for t, v in zip(tasks, row)
                                   if not np.isnan(v)})
               for f, row in zip(frames, returns)]
    return cls(records)
