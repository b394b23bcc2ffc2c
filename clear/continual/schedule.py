"""Continual learning over a task sequence: schedule and evaluation.

The pieces a continual run (CLEAR's setting: tasks trained one after
another, each for `frames_per_task` env frames, the sequence optionally
cycled) needs besides the ordinary training loop:

  * `TaskSchedule`: which task is trained at a given frame count, and the
    segment boundaries (also written to `tasks.json` for `clear.plot`);
  * `Evaluator`: plays a few episodes of *every* task of the sequence with
    the current weights; `write_eval_summaries` logs them as
    `eval/<task>/return`;
  * `EvalHistory`: the evaluations so far, as plain numpy arrays for the
    run's checkpoint state (`clear.snapshot`), so they survive a resume;

and `write_json`, the atomic JSON writer the run's files use. The metrics
computed from an `EvalHistory` (forgetting, forward transfer, CORA's
metrics) and the baselines that normalise them are in
`clear.continual.metrics`.

Frames are total env frames of the run (the learner's `num_env_frames`, the
step of every summary). Task names are `envs.make` names
(`atari:Pong`); a name may appear several times in a sequence and is then
one task trained in several segments.

`tasks.json` (in the run's logdir; `write_tasks_json` / `read_tasks_json`):
  {"tasks": ["atari:Pong", "atari:Breakout"], "frames_per_task": 50000000,
   "num_cycles": 1}
Other keys are ignored.

This module imports TensorFlow (and the actor) only where an `Evaluator` or
summaries need it, so `clear.plot` can read schedules without TensorFlow.
"""

import json
import logging
import numbers
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from clear import snapshot
import envs
from envs import multitask

TASKS_JSON = 'tasks.json'


def _positive_int(name: str, value) -> int:
  if (isinstance(value, bool) or not isinstance(value, numbers.Integral) or
      value < 1):
    raise ValueError(f'{name} must be an int >= 1, got {value!r}.')
  return int(value)


def unique_names(names: Sequence[str]) -> List[str]:
  """`names` without repeats, in order of first appearance."""
  return list(dict.fromkeys(names))


# --- Schedule ---------------------------------------------------------------


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
    self._frames_per_task = _positive_int('TaskSchedule: frames_per_task',
                                          frames_per_task)
    self._num_cycles = _positive_int('TaskSchedule: num_cycles', num_cycles)

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


# --- Evaluation -------------------------------------------------------------


class TaskEvaluation(NamedTuple):
  """One task's evaluation.

  Attributes:
    returns: float64 `[num_episodes]`, one episode per env: the first
      episode each env finished (so short episodes are not favoured), or
      the partial return of an episode cut by `max_steps`.
    num_unfinished: how many of them `max_steps` cut.
    num_steps: agent steps taken per env.
  """
  returns: np.ndarray
  num_unfinished: int
  num_steps: int

  @property
  def mean_return(self) -> float:
    return float(np.mean(self.returns))


class Evaluator:
  """Plays `num_episodes` episodes of every task of a sequence.

  One batched env of `num_episodes` envs per distinct task (built once,
  kept), each stepped by a `clear.runtime.actor.Actor` sharing `policy`. Every
  evaluation starts fresh episodes (`Actor.reset`) and takes the first
  episode of each env. The envs continue their seeded random streams
  (Atari no-op starts, gym initial states) from one evaluation to the next
  and the policy samples with its own seeded RNG, so the evaluations of a
  run are deterministic given `seed`, the policy's seed and the weights.

  Args:
    env_name: the sequence name (or a single task's name).
    env_options: options for `envs.make` (as for training).
    policy: an acting `clear.algorithms.policy.Policy` for the sequence's spec
      (e.g. `registry.make_policy(algorithm, spec, agent_config,
      seed=...)`), used only by the evaluator.
    num_episodes: episodes (and envs) per task.
    seed: seed of the first env of each task (envs seed, seed + 1, ...).
    max_steps: agent steps per env and evaluation after which unfinished
      episodes are cut and count with their partial return (a stuck
      policy cannot hang the run); rounded up to whole unrolls. The
      default is Atari's episode cap (108,000 frames at 4 frames a step).
    unroll_length: T, steps per `Actor.collect`.
  """

  def __init__(self, env_name: str, env_options: dict, policy,
               num_episodes: int = 10, seed: int = 0,
               max_steps: int = 27_000, unroll_length: int = 100):
    from clear.runtime import actor as actor_lib  # pylint: disable=g-import-not-at-top
    self._num_episodes = _positive_int('Evaluator: num_episodes',
                                       num_episodes)
    self._max_steps = _positive_int('Evaluator: max_steps', max_steps)
    unroll_length = _positive_int('Evaluator: unroll_length', unroll_length)
    self._policy = policy
    names = multitask.split_sequence(env_name)
    self._actors = {}
    try:
      for name in unique_names(names):
        options = dict(env_options)
        if len(names) > 1:
          options['task'] = names.index(name)
        env = envs.make(env_name, num_envs=self._num_episodes, seed=seed,
                        **options)
        if (env.spec.observation_spec != policy.spec.observation_spec or
            env.spec.action_spec != policy.spec.action_spec):
          env.close()
          raise ValueError(f'Evaluator: the policy was built for '
                           f'{policy.spec.name!r}, whose spec differs from '
                           f'{env_name!r} task {name!r}.')
        self._actors[name] = actor_lib.Actor(
            env, policy, min(unroll_length, self._max_steps))
    except BaseException:
      self.close()
      raise

  @property
  def task_names(self) -> List[str]:
    """The distinct tasks, in sequence order."""
    return list(self._actors)

  def evaluate_tasks(self, weights=None) -> Dict[str, TaskEvaluation]:
    """Evaluates every task (after loading `weights` when given)."""
    if weights is not None:
      self._policy.set_weights(weights)
    return {name: self._evaluate(name, actor)
            for name, actor in self._actors.items()}

  def evaluate(self, weights=None) -> Dict[str, float]:
    """{task name: mean return over `num_episodes` episodes}."""
    return {name: result.mean_return
            for name, result in self.evaluate_tasks(weights).items()}

  def _evaluate(self, name: str, actor) -> TaskEvaluation:
    actor.reset()
    n = self._num_episodes
    returns = np.zeros([n], np.float64)
    finished = np.zeros([n], bool)
    steps = 0
    last_return = np.zeros([n], np.float64)
    while not finished.all() and steps < self._max_steps:
      outputs = actor.collect().unroll.env_outputs
      done = outputs.done[1:]  # [T, B]; step 0 repeats the last unroll's.
      episode_return = outputs.info.episode_return[1:]
      for t in range(done.shape[0]):
        first = done[t] & ~finished
        returns[first] = episode_return[t, first]
        finished |= first
      last_return = episode_return[-1]
      steps += done.shape[0]
    unfinished = ~finished
    returns[unfinished] = last_return[unfinished]
    if unfinished.any():
      logging.warning('Evaluator: %d of %d episodes of %s were cut after '
                      '%d steps (max_steps); their partial returns count.',
                      int(unfinished.sum()), n, name, steps)
    return TaskEvaluation(returns, int(unfinished.sum()), steps)

  def close(self):
    for actor in self._actors.values():
      actor.close()
    self._actors = {}


def write_eval_summaries(results: Dict[str, float], frames: int):
  """Writes `eval/<task>/return` per task and `eval/mean_return` (their
  mean) at step `frames` to the default `tf.summary` writer."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  for name, value in results.items():
    tf.summary.scalar(f'eval/{name}/return', float(value), step=int(frames))
  if results:
    tf.summary.scalar('eval/mean_return', float(np.mean(list(
        results.values()))), step=int(frames))


# --- History ----------------------------------------------------------------


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
    return unique_names([name for r in self._records for name in r.returns])

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
