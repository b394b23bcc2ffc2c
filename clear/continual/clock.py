"""When a continual-learning method consolidates: its clock of periods.

A method (`clear.continual.methods`) sees a run as a sequence of periods
and acts at the end of each (EWC estimates a Fisher and sets an anchor;
P&C ends a compress phase). Where periods end depends on
`--task_boundaries`:

  given:  a period is a segment of the task schedule
          (`clear.continual.schedule.TaskSchedule`), and it names its task;
  hidden: a period is `interval` frames, [k * interval, (k + 1) * interval),
          and names no task: the method never learns where a task ends.

Plain Python (no TensorFlow).
"""

from typing import NamedTuple, Optional

TASK_BOUNDARIES = ('given', 'hidden')


class Period(NamedTuple):
  """Frames `[start, end)`, the `index`-th period of a run.

  `task` is the index of the period's task among the sequence's distinct
  tasks and `task_name` its name, under given boundaries; both are None
  under hidden ones. The last period of a given schedule ends at the
  schedule's last frame; frames past it (a run overshoots its budget by up
  to a batch) still belong to it.
  """
  index: int
  start: int
  end: int
  task: Optional[int] = None
  task_name: Optional[str] = None

  @property
  def length(self) -> int:
    return self.end - self.start

  def ended(self) -> str:
    """Its end, as a log line says it."""
    if self.task is None:
      return f'period {self.index} ended at {self.end:,} frames'
    return f'task {self.task_name} ended (segment {self.index})'


class Clock:
  """The periods of a run (see the module docstring); build it with
  `given` or `hidden`."""

  def __init__(self, schedule=None, interval: int = 0):
    if (schedule is None) == (interval < 1):
      raise ValueError('Clock: give a schedule (given boundaries) or an '
                       f'interval >= 1 (hidden ones), got {schedule!r} and '
                       f'{interval!r}.')
    self._schedule = schedule
    self._interval = int(interval)

  @classmethod
  def given(cls, schedule) -> 'Clock':
    """Periods that are the segments of `schedule` (a `TaskSchedule`)."""
    return cls(schedule=schedule)

  @classmethod
  def hidden(cls, interval: int) -> 'Clock':
    """Periods of `interval` frames that name no task."""
    return cls(interval=interval)

  @property
  def boundaries(self) -> str:
    """'given' or 'hidden'."""
    return 'given' if self._schedule is not None else 'hidden'

  def period_at(self, frames: int) -> Period:
    """The period that trains at `frames` env frames (>= 0)."""
    if frames < 0:
      raise ValueError(f'Clock: frames must be >= 0, got {frames}.')
    if self._schedule is None:
      index = int(frames) // self._interval
      return Period(index, index * self._interval,
                    (index + 1) * self._interval)
    schedule = self._schedule
    segment = schedule.segment_at(frames)
    name = schedule.task_names[segment.task]
    return Period(schedule.segment_index(frames), segment.start, segment.end,
                  schedule.unique_task_names.index(name), name)

  def __repr__(self):
    if self._schedule is None:
      return f'Clock.hidden({self._interval})'
    return f'Clock.given({self._schedule!r})'
