"""Continual learning over a task sequence: its schedule and `tasks.json`.

The task sequence of a continual run (CLEAR's setting: tasks trained one
after another, each for `frames_per_task` env frames, the sequence
optionally cycled): `TaskSchedule` says which task is trained at a given
frame count, and gives the segment boundaries (also written to `tasks.json`
for `clear.plot`). `write_json` is the atomic JSON writer the run's files
use. The evaluations of the tasks are `clear.continual.history`, the
metrics computed from them (forgetting, forward transfer, CORA's metrics)
and the baselines that normalise them `clear.continual.metrics`; the
evaluator that plays them is `clear.runtime.evaluation`.

Frames are total env frames of the run (the learner's `num_env_frames`, the
step of every summary). Task names are `envs.make` names
(`atari:Pong`); a name may appear several times in a sequence and is then
one task trained in several segments.

`tasks.json` (in the run's logdir; `write_tasks_json` / `read_tasks_json`):
  {"tasks": ["atari:Pong", "atari:Breakout"], "frames_per_task": 50000000,
   "num_cycles": 1}
Other keys are ignored.

Plain Python: `clear.plot` reads schedules without TensorFlow.
"""

import json
import numbers
import os
from typing import List, NamedTuple, Optional, Sequence, Tuple

TASKS_JSON = 'tasks.json'


def positive_int(name: str, value) -> int:
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
      value < 1):
    raise ValueError(f'{name} must be an int >= 1, got {value!r}.')
  return int(value)


def unique_names(names: Sequence[str]) -> List[str]:
  """`names` without repeats, in order of first appearance."""
  return list(dict.fromkeys(names))


class Segment(NamedTuple):
  """Frames `[start, end)` during which task `task` (an index) is trained."""
  start: int
  end: int
  task: int


class TaskSchedule:
  """Tasks trained one after another, `frames_per_task` frames each.

  Segment k (k = 0 ... num_tasks * num_cycles - 1) covers frames
  `[k * frames_per_task, (k + 1) * frames_per_task)` and trains task
  `k % num_tasks`. Frames at or past `total_frames` belong to the last
  segment (a run overshoots its budget by up to one batch).

  Args:
    task_names: the sequence, in order (names may repeat).
    frames_per_task: frames of one segment.
    num_cycles: how many times the sequence is trained.
  """

  def __init__(self, task_names: Sequence[str], frames_per_task: int,
               num_cycles: int = 1):
    if isinstance(task_names, str) or not task_names:
      raise ValueError(f'TaskSchedule: task_names must be a non-empty list '
                       f'of names, got {task_names!r}.')
    self._task_names = tuple(str(n) for n in task_names)
    self._frames_per_task = positive_int('TaskSchedule: frames_per_task',
                                          frames_per_task)
    self._num_cycles = positive_int('TaskSchedule: num_cycles', num_cycles)

  @property
  def task_names(self) -> Tuple[str, ...]:
    return self._task_names

  @property
  def unique_task_names(self) -> List[str]:
    return unique_names(self._task_names)

  @property
  def num_tasks(self) -> int:
    return len(self._task_names)

  @property
  def frames_per_task(self) -> int:
    return self._frames_per_task

  @property
  def num_cycles(self) -> int:
    return self._num_cycles

  @property
  def num_segments(self) -> int:
    return self.num_tasks * self._num_cycles

  @property
  def total_frames(self) -> int:
    return self.num_segments * self._frames_per_task

  def segment_index(self, frames: int) -> int:
    """The segment that trains at `frames` (clamped to the last one)."""
    if frames < 0:
      raise ValueError(f'TaskSchedule: frames must be >= 0, got {frames}.')
    return min(int(frames) // self._frames_per_task, self.num_segments - 1)

  def task_at(self, frames: int) -> int:
    """Index (in `task_names`) of the task trained at `frames`."""
    return self.segment_index(frames) % self.num_tasks

  def task_name_at(self, frames: int) -> str:
    return self._task_names[self.task_at(frames)]

  def segment_end(self, frames: int) -> int:
    """The frame at which the segment training at `frames` ends."""
    return (self.segment_index(frames) + 1) * self._frames_per_task

  def boundaries(self) -> List[Segment]:
    """Every segment, in order."""
    n = self._frames_per_task
    return [Segment(k * n, (k + 1) * n, k % self.num_tasks)
            for k in range(self.num_segments)]

  def segments_of(self, task_name: str) -> List[Segment]:
    """The segments that train `task_name` (all its positions, all cycles).

    Raises:
      ValueError: the name is not in the sequence.
    """
    segments = [s for s in self.boundaries()
                if self._task_names[s.task] == task_name]
    if not segments:
      raise ValueError(f'TaskSchedule: {task_name!r} is not one of the '
                       f'tasks {list(self._task_names)}.')
    return segments

  def training_end(self, task_name: str) -> int:
    """The frame at which `task_name`'s last training segment ends."""
    return self.segments_of(task_name)[-1].end

  def to_json(self) -> dict:
    """The `tasks.json` content (see the module docstring)."""
    return {'tasks': list(self._task_names),
            'frames_per_task': self._frames_per_task,
            'num_cycles': self._num_cycles}

  @classmethod
  def from_json(cls, value: dict) -> 'TaskSchedule':
    try:
      return cls(list(value['tasks']), value['frames_per_task'],
                 value.get('num_cycles', 1))
    except (KeyError, TypeError) as e:
      raise ValueError(f'A task schedule needs "tasks" (a list of names) and '
                       f'"frames_per_task" (and optionally "num_cycles"); '
                       f'got {value!r}.') from e

  def __eq__(self, other):
    return (isinstance(other, TaskSchedule) and
            self.to_json() == other.to_json())

  def __repr__(self):
    return (f'TaskSchedule({list(self._task_names)}, frames_per_task='
            f'{self._frames_per_task}, num_cycles={self._num_cycles})')


def write_json(path: str, value):
  """Writes `value` as JSON to `path` atomically (NaN refused), creating
  the folder."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(value, f, indent=2, allow_nan=False)
    f.write('\n')
  os.replace(tmp, path)


def write_tasks_json(logdir: str, schedule: TaskSchedule) -> str:
  """Writes `logdir/tasks.json` (atomically); returns its path."""
  os.makedirs(logdir, exist_ok=True)
  path = os.path.join(logdir, TASKS_JSON)
  write_json(path, schedule.to_json())
  return path


def read_tasks_json(logdir: str) -> Optional[TaskSchedule]:
  """The schedule in `logdir/tasks.json`, or None when there is none.

  Raises:
    ValueError: the file is not a valid schedule.
  """
  path = os.path.join(logdir, TASKS_JSON)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      value = json.load(f)
    return TaskSchedule.from_json(value)
  except (ValueError, AttributeError) as e:
    raise ValueError(f'{path} is not a valid task schedule: {e}') from e
