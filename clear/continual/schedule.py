"""Continual learning over a task sequence: its schedule and `tasks.json`.

The task sequence of a continual run (CLEAR's setting: tasks trained one
after another, each for about `frames_per_task` env frames, the sequence
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

Segment lengths (`clear.train --segment_lengths`): 'equal' gives every
segment `frames_per_task` frames. 'random' (`random_segment_frames`) draws
each segment's length around `frames_per_task`, from u_k ~ Uniform(0.5,
1.5), scaled so that the lengths sum to `frames_per_task` x segments: a
method that acts on a fixed clock of frames (a consolidation every so many
frames) cannot line up with switches that come at irregular frames, and the
run's budget is the equal schedule's, so the two compare frame for frame.
The lengths are a pure function of (tasks, frames_per_task, cycles, seed):
a resumed run rebuilds the same ones.

`tasks.json` (in the run's logdir; `write_tasks_json` / `read_tasks_json`):
  {"tasks": ["atari:Pong", "atari:Breakout"], "frames_per_task": 50000000,
   "num_cycles": 1}
and, for segments of other lengths than `frames_per_task`,
  "segment_frames": [41000000, ...]   (one per segment, in order)
with, when they were drawn by `random_segment_frames`,
  "segment_lengths": "random", "seed": 3.
A file without "segment_frames" is the equal schedule. Other keys are
ignored.

Python and numpy: `clear.plot` reads schedules without TensorFlow.
"""

import bisect
import itertools
import json
import numbers
import os
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

TASKS_JSON = 'tasks.json'
# The values of `clear.train --segment_lengths`.
SEGMENT_LENGTHS = ('equal', 'random')
# u_k ~ Uniform(RANDOM_SPREAD) scales segment k of a random schedule.
RANDOM_SPREAD = (0.5, 1.5)
# Added to the run's seed for the random lengths' generator, so that their
# stream is apart from the run's other seeded streams (actors, replay,
# evaluation).
SEGMENT_SEED_OFFSET = 611_953


def positive_int(name: str, value) -> int:
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
      value < 1):
    raise ValueError(f'{name} must be an int >= 1, got {value!r}.')
  return int(value)


def unique_names(names: Sequence[str]) -> List[str]:
  """`names` without repeats, in order of first appearance."""
  return list(dict.fromkeys(names))


def random_segment_frames(frames_per_task: int, num_segments: int,
                          seed: int) -> List[int]:
  """Random segment lengths around `frames_per_task`, summing to
  `frames_per_task * num_segments`.

  Draws u_k ~ Uniform(0.5, 1.5) (`RANDOM_SPREAD`) for k = 0 ...
  num_segments - 1 from `np.random.default_rng(seed +
  SEGMENT_SEED_OFFSET)`. With F = frames_per_task * num_segments and
  U = sum_k u_k, segment k < num_segments - 1 gets
  1 + floor(u_k / U * (F - num_segments)) frames and the last segment the
  rest, so every length is >= 1 and they sum to F exactly; segment k's
  length is about u_k / mean(u) * frames_per_task.

  Args:
    frames_per_task: int >= 1, the mean length.
    num_segments: int >= 1.
    seed: int >= 0, the run's seed.

  Returns:
    The lengths, `num_segments` ints.

  Raises:
    ValueError: an argument out of range.
  """
  frames_per_task = positive_int('random_segment_frames: frames_per_task',
                                 frames_per_task)
  num_segments = positive_int('random_segment_frames: num_segments',
                              num_segments)
  if (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or
      seed < 0):
    raise ValueError(f'random_segment_frames: seed must be an int >= 0, got '
                     f'{seed!r}.')
  rng = np.random.default_rng(int(seed) + SEGMENT_SEED_OFFSET)
  u = rng.uniform(*RANDOM_SPREAD, size=num_segments)
  total = frames_per_task * num_segments
  shares = np.floor(u / u.sum() * (total - num_segments)).astype(np.int64)
  lengths = [1 + int(n) for n in shares[:-1]]
  return lengths + [total - sum(lengths)]


class Segment(NamedTuple):
  """Frames `[start, end)` during which task `task` (an index) is trained."""
  start: int
  end: int
  task: int


class TaskSchedule:
  """Tasks trained one after another, one segment of frames per visit.

  Segment k (k = 0 ... num_tasks * num_cycles - 1) trains task
  `k % num_tasks` for `segment_frames[k]` frames, from the end of segment
  k - 1 (0 for the first): with equal lengths, frames
  `[k * frames_per_task, (k + 1) * frames_per_task)`. Frames at or past
  `total_frames` belong to the last segment (a run overshoots its budget by
  up to one batch). `with_random_lengths` makes the schedule of
  `--segment_lengths=random`.

  Args:
    task_names: the sequence, in order (names may repeat).
    frames_per_task: frames of one segment; with `segment_frames`, their
      nominal length (their mean, for random lengths).
    num_cycles: how many times the sequence is trained.
    segment_frames: the length of every segment, in order (num_tasks *
      num_cycles ints >= 1); None: each `frames_per_task`.
    random_seed: the seed `random_segment_frames` drew `segment_frames`
      with (recorded in `tasks.json`); None: lengths not drawn.
  """

  def __init__(self, task_names: Sequence[str], frames_per_task: int,
               num_cycles: int = 1,
               segment_frames: Optional[Sequence[int]] = None,
               random_seed: Optional[int] = None):
    if isinstance(task_names, str) or not task_names:
      raise ValueError(f'TaskSchedule: task_names must be a non-empty list '
                       f'of names, got {task_names!r}.')
    self._task_names = tuple(str(n) for n in task_names)
    self._frames_per_task = positive_int('TaskSchedule: frames_per_task',
                                          frames_per_task)
    self._num_cycles = positive_int('TaskSchedule: num_cycles', num_cycles)
    if segment_frames is None:
      if random_seed is not None:
        raise ValueError('TaskSchedule: random_seed needs the segment_frames '
                         'drawn with it.')
      lengths = (self._frames_per_task,) * self.num_segments
    else:
      lengths = (tuple(segment_frames) if isinstance(segment_frames, (
          list, tuple, np.ndarray)) else ())
      if len(lengths) != self.num_segments:
        raise ValueError(
            f'TaskSchedule: segment_frames must be a list of one length per '
            f'segment ({self.num_segments}), got {segment_frames!r}.')
      lengths = tuple(positive_int('TaskSchedule: segment_frames', n)
                      for n in lengths)
    if random_seed is not None and (
        isinstance(random_seed, bool) or
        not isinstance(random_seed, numbers.Integral)):
      raise ValueError(f'TaskSchedule: random_seed must be an int, got '
                       f'{random_seed!r}.')
    self._random_seed = None if random_seed is None else int(random_seed)
    # Explicit lengths are recorded in tasks.json; lengths all equal to
    # frames_per_task and not drawn are the equal schedule.
    self._explicit = self._random_seed is not None or any(
        n != self._frames_per_task for n in lengths)
    self._ends = list(itertools.accumulate(lengths))
    self._segments = tuple(
        Segment(end - n, end, k % self.num_tasks)
        for k, (n, end) in enumerate(zip(lengths, self._ends)))

  @classmethod
  def with_random_lengths(cls, task_names: Sequence[str],
                          frames_per_task: int, num_cycles: int,
                          seed: int) -> 'TaskSchedule':
    """The schedule of `--segment_lengths=random`: lengths drawn by
    `random_segment_frames(frames_per_task, tasks x num_cycles, seed)`.

    Raises:
      ValueError: a bad argument (a seed < 0 among them).
    """
    if isinstance(task_names, str) or not task_names:
      raise ValueError(f'TaskSchedule: task_names must be a non-empty list '
                       f'of names, got {task_names!r}.')
    num_cycles = positive_int('TaskSchedule: num_cycles', num_cycles)
    lengths = random_segment_frames(frames_per_task,
                                    len(task_names) * num_cycles, seed)
    return cls(task_names, frames_per_task, num_cycles, lengths, seed)

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
    """The nominal length of a segment: every segment's with equal lengths,
    their mean with random ones (see `segment_frames`)."""
    return self._frames_per_task

  @property
  def num_cycles(self) -> int:
    return self._num_cycles

  @property
  def num_segments(self) -> int:
    return self.num_tasks * self._num_cycles

  @property
  def segment_frames(self) -> Tuple[int, ...]:
    """The length of every segment, in order."""
    return tuple(s.end - s.start for s in self._segments)

  @property
  def random_seed(self) -> Optional[int]:
    """The seed the lengths were drawn with; None when not drawn."""
    return self._random_seed

  @property
  def total_frames(self) -> int:
    return self._ends[-1]

  def segment_index(self, frames: int) -> int:
    """The segment that trains at `frames` (clamped to the last one)."""
    if frames < 0:
      raise ValueError(f'TaskSchedule: frames must be >= 0, got {frames}.')
    return min(bisect.bisect_right(self._ends, int(frames)),
               self.num_segments - 1)

  def segment_at(self, frames: int) -> Segment:
    """The segment covering `frames` (clamped to the last one)."""
    return self._segments[self.segment_index(frames)]

  def task_at(self, frames: int) -> int:
    """Index (in `task_names`) of the task trained at `frames`."""
    return self.segment_index(frames) % self.num_tasks

  def task_name_at(self, frames: int) -> str:
    return self._task_names[self.task_at(frames)]

  def segment_end(self, frames: int) -> int:
    """The frame at which the segment training at `frames` ends."""
    return self.segment_at(frames).end

  def boundaries(self) -> List[Segment]:
    """Every segment, in order."""
    return list(self._segments)

  def segments_of(self, task_name: str) -> List[Segment]:
    """The segments that train `task_name` (all its positions, all cycles).

    Raises:
      ValueError: the name is not in the sequence.
    """
    segments = [s for s in self._segments
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
    value = {'tasks': list(self._task_names),
             'frames_per_task': self._frames_per_task,
             'num_cycles': self._num_cycles}
    if self._random_seed is not None:
      value.update(segment_lengths='random', seed=self._random_seed)
    if self._explicit:
      value['segment_frames'] = list(self.segment_frames)
    return value

  @classmethod
  def from_json(cls, value: dict) -> 'TaskSchedule':
    """The schedule of a `tasks.json` (see the module docstring).

    Raises:
      ValueError: the value is not a schedule.
    """
    try:
      mode = value.get('segment_lengths', 'equal')
      if mode not in SEGMENT_LENGTHS:
        raise ValueError(f'"segment_lengths" must be one of '
                         f'{list(SEGMENT_LENGTHS)}, got {mode!r}.')
      seed = value['seed'] if mode == 'random' else None
      lengths = value.get('segment_frames')
      if mode == 'random' and lengths is None:
        raise ValueError('"segment_lengths": "random" needs the '
                         '"segment_frames" drawn.')
      return cls(list(value['tasks']), value['frames_per_task'],
                 value.get('num_cycles', 1), lengths, seed)
    except (KeyError, TypeError) as e:
      raise ValueError(f'A task schedule needs "tasks" (a list of names) and '
                       f'"frames_per_task" (and optionally "num_cycles", '
                       f'"segment_frames", "segment_lengths" and "seed"); '
                       f'got {value!r}.') from e

  def __eq__(self, other):
    return (isinstance(other, TaskSchedule) and
            self.to_json() == other.to_json())

  def __repr__(self):
    extra = ''
    if self._explicit:
      extra = f', segment_frames={list(self.segment_frames)}'
    if self._random_seed is not None:
      extra += f', random_seed={self._random_seed}'
    return (f'TaskSchedule({list(self._task_names)}, frames_per_task='
            f'{self._frames_per_task}, num_cycles={self._num_cycles}'
            f'{extra})')


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
