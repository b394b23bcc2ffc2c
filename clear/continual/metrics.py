r"""Continual-learning metrics of a run's evaluations, and their baselines.

Every metric that `continual_metrics.json` holds is defined here, in one
place. `forgetting_metrics(history, schedule, reference, normalization)`
computes them all from a run's `clear.continual.history.EvalHistory` and
`TaskSchedule`; `clear.runtime.run_loop` writes them at the end of a sequence
run and `clear.plot --metrics_out` for many runs from their event files.

Notation
--------
Tasks i are the distinct names of the sequence; N entries make up one
cycle, and segment k (k = 0, 1, ...) trains entry k mod N on the frames
[b_k, b_(k+1)), the schedule's `boundaries()`: b_k = k D with equal
segments (D = `frames_per_task`), the sum of the lengths before k with
`--segment_lengths=random`. p_i(t) is task i's mean evaluation return at
an evaluation at frame t (the points of the history); T is task i's last
evaluation. e(b) is the evaluation nearest frame b (the earlier one on a
tie): a run evaluates every task at each segment switch, a batch's worth
of frames after the boundary, so e(b_k) is the evaluation at the start of
segment k and e(b_(k+1)) the one at its end. f_i is task i's first
segment, L_i = b_(f_i+1) - b_(f_i) its length, t_i the frame at which its
last segment ends, and t_i* = e(t_i) (so T when the run stopped before
t_i).
A segment counts as *reached* when the run has an evaluation at or after
its end; a task's next segment, when the run has not reached its start,
counts as T.

Per task (`per_task[i]`, and in `average_*` the mean over tasks)
----------------------------------------------------------------
final_return            p_i(T).
best_return             max_t p_i(t), at `best_frames`.
end_of_training_return  p_i(t_i*), at `end_of_training_frames`.
forgetting              p_i(t_i*) - p_i(T): what the task lost after its
                        last training (Continual World's forgetting; 0 for
                        the task trained last).
forgetting_from_best    max_t p_i(t) - p_i(T): the drop from the best
                        return ever reached (CLEAR's view).
forgetting_per_visit    the mean, over task i's reached segments k, of
                        p_i(e(end of k)) - p_i(e(start of i's next
                        segment)), T after its last: what the task loses
                        while the others train, every visit. With one
                        cycle it equals `forgetting`.
forgetting_by_visit     the terms of that mean, one per reached segment
                        of task i in order: the drop across each gap
                        (the last: from its last segment to T).

Average performance
-------------------
average_final_return    (1/N) sum_i p_i(T), Continual World's P(T).
average_return_auc      the mean over evaluations t of the mean over tasks
                        of p_i(t): the (evaluation-weighted) area under the
                        average-performance curve.

Normalised (with baselines)
---------------------------
Given {task: (low, high)} (a random policy's and a single-task run's
returns, `Baselines`), every return is also reported as
p~ = (p - low) / (high - low) (0 random, 1 single task): `normalized_*`
per task and `average_normalized_*`; `average_normalized_return_auc` is
the area above on p~, over the normalised tasks.

Forward transfer (with single-task reference curves)
----------------------------------------------------
  FT_i = (AUC_i - AUC_ref_i) / (1 - AUC_ref_i)
AUC_i is the mean of p~_i over task i's first segment [b_(f_i),
b_(f_i+1)] and AUC_ref_i the mean of the reference's p~ over [0, L_i], as
many frames from the reference's start (`curve_auc`: the curve piecewise
linear between evaluations); p~ uses the baselines
when given, else min-max over the run's and the reference's returns of
that task. None when AUC_ref_i = 1; omitted without a reference.

CORA's metrics (Powers et al., 2022, continual_rl's metrics code)
-----------------------------------------------------------------
Both measure the change of one task's return over one segment, isolated
from the other segments, and scale it per task by

  s_i = max_t |p_i(t)|    (`cora_return_scale`)

the largest absolute evaluation return of task i. CORA takes that maximum
over every evaluation of every run of a method; in one run's metrics it is
over that run's evaluations (`clear.continual.seed_stats` re-scales the seeds of
a method by the maximum over all of them, as CORA does).

Isolated forgetting of task i by segment k (`cora_isolated_forgetting`):

  IF_ik = (p_i(e(b_k)) - p_i(e(b_(k+1)))) / s_i

the drop of task i's return while segment k trains, for every reached
segment k after f_i within the first C cycles (k < C N; C =
`cora_forgetting_cycles`, 1 as in every CORA experiment: later cycles,
the last included, do not count; when C > 1, task i's own later segments
count too, as in CORA). Positive: the return fell.

Zero-shot forward transfer to task i from segment p
(`cora_zero_shot_transfer`):

  ZT_ip = (p_i(e(b_(p+1))) - p_i(e(b_p))) / s_i

the rise of task i's return while segment p trains, for every reached
segment p before f_i (so tasks first trained in segment 0 have none).
e(0) is the first evaluation, CORA's baseline for p = 0.

Per task, `cora_*_by_segment` holds {k: value} and `cora_*` their mean;
the run's `cora_isolated_forgetting` and `cora_zero_shot_transfer` are
the means over *all* (task, segment) pairs pooled (CORA's overall
average, which weighs tasks by their number of pairs). None where there
are no pairs or s_i = 0. CORA's tables print these numbers times 10.

Where this differs from CORA's script only in form: CORA reads a point
just before a boundary (its evaluations are dense); here the evaluation
nearest it. CORA smooths each curve with a trailing mean of 20 logged
points first; each evaluation here is already a mean over
`--eval_episodes` episodes and a segment holds only a few of them, so the
evaluations are used as they are.
"""

import json
import os
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from clear.continual import history as history_lib
from clear.continual import schedule as schedule_lib


# CORA's forgetting counts the segments of this many cycles (its default).
CORA_FORGETTING_CYCLES = 1


def _value(x) -> Optional[float]:
  """A JSON number, or None for NaN / inf / None."""
  if x is None:
    return None
  x = float(x)
  return x if np.isfinite(x) else None


def _mean(values) -> Optional[float]:
  values = [v for v in values if v is not None]
  return _value(np.mean(values)) if values else None


def _visit_drops(values, visits: Sequence[Tuple[int, int]]
                 ) -> Tuple[List[Optional[float]], Optional[float]]:
  """The drop of `values` float `[N]` across each of `visits` (index at a
  segment's end, index at the next visit; see `_visits`), and their mean
  (None without visits)."""
  drops = [values[e] - values[n] for e, n in visits]
  return ([_value(d) for d in drops],
          _value(np.mean(drops) if drops else None))


def _normalize(x, low_high):
  low, high = low_high
  return (np.asarray(x, np.float64) - low) / (high - low)


def curve_auc(frames, values, start: float, end: float) -> float:
  """The mean of a curve over frames `[start, end]`.

  The curve is piecewise linear through `(frames, values)` and constant
  before the first and after the last point; the result is its integral
  over `[start, end]` divided by `end - start` (trapezoidal rule, exact for
  that curve).
  """
  frames = np.asarray(frames, np.float64)
  values = np.asarray(values, np.float64)
  if end <= start:
    raise ValueError(f'curve_auc: need end > start, got [{start}, {end}].')
  inside = frames[(frames > start) & (frames < end)]
  grid = np.concatenate([[start], inside, [end]])
  return float(np.trapezoid(np.interp(grid, frames, values), grid) /
               (end - start))


def _nearest(frames: np.ndarray, target: int) -> int:
  """Index of the evaluation nearest `target` (the earlier on a tie)."""
  return int(np.argmin(np.abs(frames - target)))


def _visits(frames: np.ndarray, segments: Sequence[schedule_lib.Segment]
            ) -> List[Tuple[int, int]]:
  """For each of a task's segments that ended by the last evaluation: the
  indices (in `frames`) of the evaluations nearest its end and nearest the
  start of the task's next segment (the last evaluation after its last
  segment, or when the next one starts after it)."""
  last = len(frames) - 1
  visits = []
  for k, segment in enumerate(segments):
    if segment.end > frames[last]:
      break
    nxt = segments[k + 1].start if k + 1 < len(segments) else None
    visits.append((_nearest(frames, segment.end),
                   _nearest(frames, nxt) if nxt is not None and
                   nxt <= frames[last] else last))
  return visits


# --- Per task ---------------------------------------------------------------


def task_metrics(task: str, frames: np.ndarray, returns: np.ndarray,
                 schedule: schedule_lib.TaskSchedule,
                 normalization: Dict[str, Tuple[float, float]],
                 notes: List[str]) -> dict:
  """Task `task`'s `per_task` entry (final, best and end-of-training
  returns, the three forgettings, normalised when `normalization` has the
  task; see the module docstring) from its evaluations `frames` int `[N]`,
  `returns` float `[N]`, N >= 1. Appends to `notes` when the task is not in
  the schedule."""
  final = returns[-1]
  best = int(np.argmax(returns))
  entry = {'num_evaluations': int(len(frames)),
           'final_return': _value(final),
           'best_return': _value(returns[best]),
           'best_frames': int(frames[best])}
  try:
    end = schedule.training_end(task)
  except ValueError:
    end = None
    notes.append(f'{task!r} is evaluated but not in the schedule: no '
                 f'forgetting.')
  visits = []  # (index at a segment's end, index at the next visit)
  if end is not None:
    nearest = _nearest(frames, end)
    entry.update(
        end_of_training_frames=int(frames[nearest]),
        end_of_training_return=_value(returns[nearest]),
        forgetting=_value(returns[nearest] - final))
    visits = _visits(frames, schedule.segments_of(task))
    by_visit, per_visit = _visit_drops(returns, visits)
    entry['forgetting_per_visit'] = per_visit
    entry['forgetting_by_visit'] = by_visit
  entry['forgetting_from_best'] = _value(returns[best] - final)
  if task in normalization:
    scaled = _normalize(returns, normalization[task])
    entry.update(normalized_final_return=_value(scaled[-1]),
                 normalized_best_return=_value(scaled[best]),
                 normalized_forgetting_from_best=_value(
                     scaled[best] - scaled[-1]))
    if end is not None:
      entry['normalized_forgetting'] = _value(scaled[nearest] - scaled[-1])
      by_visit, per_visit = _visit_drops(scaled, visits)
      entry['normalized_forgetting_per_visit'] = per_visit
      entry['normalized_forgetting_by_visit'] = by_visit
  return entry


# --- Average performance ----------------------------------------------------


def average_return_curves(history: history_lib.EvalHistory, tasks,
                          normalization: Dict[str, Tuple[float, float]]
                          ) -> Tuple[List[float], List[float]]:
  """Per evaluation, the mean return over `tasks` and the mean normalised
  return over those of `tasks` in `normalization` (evaluations without
  such tasks are skipped)."""
  curve, scaled_curve = [], []
  for record in history.records:
    values = [v for k, v in record.returns.items() if k in tasks]
    if values:
      curve.append(np.mean(values))
    scaled = [float(_normalize(v, normalization[k]))
              for k, v in record.returns.items()
              if k in tasks and k in normalization]
    if scaled:
      scaled_curve.append(np.mean(scaled))
  return curve, scaled_curve


# --- Forward transfer -------------------------------------------------------


def forward_transfer(
    history: history_lib.EvalHistory, schedule: schedule_lib.TaskSchedule,
    tasks, reference: Dict[str, Sequence[Tuple[int, float]]],
    normalization: Dict[str, Tuple[float, float]],
    notes: List[str]) -> Dict[str, Optional[float]]:
  """{task: FT_i} against the single-task `reference` curves, for the
  tasks of `reference` that are in `tasks` (evaluated) and trained by
  `schedule` (see the module docstring). Appends to `notes` why a task
  has none."""
  transfer = {}
  for task, points in reference.items():
    frames, returns = history.curve(task)
    if task not in tasks or task not in schedule.task_names:
      notes.append(f'No forward transfer for {task!r}: not trained and '
                   f'evaluated in this run.')
      continue
    points = np.asarray(points, np.float64).reshape(-1, 2)
    if task in normalization:
      low_high = normalization[task]
    else:
      both = np.concatenate([returns, points[:, 1]])
      low_high = (both.min(), both.max())
      if low_high[1] == low_high[0]:
        notes.append(f'No forward transfer for {task!r}: its returns are '
                     f'all equal, nothing to normalise with.')
        continue
    first = schedule.segments_of(task)[0]
    auc = curve_auc(frames, _normalize(returns, low_high), first.start,
                    first.end)
    # The reference over as many frames as the task's first segment.
    auc_ref = curve_auc(points[:, 0], _normalize(points[:, 1], low_high),
                        0, first.end - first.start)
    transfer[task] = (_value((auc - auc_ref) / (1 - auc_ref))
                      if auc_ref != 1 else None)
  return transfer


# --- CORA's metrics ---------------------------------------------------------


class CoraMetrics(NamedTuple):
  """CORA's isolated forgetting and zero-shot transfer of one run.

  Attributes:
    per_task: {task: {'cora_return_scale', 'cora_isolated_forgetting',
      'cora_isolated_forgetting_by_segment', 'cora_zero_shot_transfer',
      'cora_zero_shot_transfer_by_segment'}} for every evaluated task of
      the schedule; by-segment dicts are keyed by str(segment index).
    isolated_forgetting: the mean of IF_ik over every pair (or None).
    zero_shot_transfer: the mean of ZT_ip over every pair (or None).
  """
  per_task: Dict[str, dict]
  isolated_forgetting: Optional[float]
  zero_shot_transfer: Optional[float]


def cora_pairs(frames: np.ndarray, first_segment: int,
               schedule: schedule_lib.TaskSchedule,
               cycles: int = CORA_FORGETTING_CYCLES
               ) -> Tuple[Dict[int, Tuple[int, int]],
                          Dict[int, Tuple[int, int]]]:
  """The evaluations CORA's metrics compare, for a task first trained in
  segment `first_segment`, evaluated at `frames` (int `[N]`, N >= 1).

  Returns:
    (forgetting, transfer): {segment k: (index of e(b_k), index of
    e(b_(k+1)))}, b_k the start of segment k in `schedule.boundaries()`,
    for the segments after `first_segment` and before `cycles` *
    num_tasks (forgetting), and for the segments before it (transfer);
    only segments whose end the evaluations reach.
  """
  boundaries = schedule.boundaries()
  last = frames[-1]

  def pairs(segments):
    return {k: (_nearest(frames, boundaries[k].start),
                _nearest(frames, boundaries[k].end))
            for k in segments if boundaries[k].end <= last}

  end = min(cycles * schedule.num_tasks, schedule.num_segments)
  return (pairs(range(first_segment + 1, end)),
          pairs(range(first_segment)))


def cora_metrics(history: history_lib.EvalHistory,
                 schedule: schedule_lib.TaskSchedule,
                 cycles: int = CORA_FORGETTING_CYCLES,
                 notes: Optional[List[str]] = None) -> CoraMetrics:
  """CORA's isolated forgetting and zero-shot forward transfer of a run
  (definitions in the module docstring), each normalised per task by the
  run's largest absolute evaluation return of that task.

  Args:
    history: the run's evaluations.
    schedule: its task schedule.
    cycles: the cycles whose segments count for forgetting (CORA's
      `num_cycles_for_forgetting`, 1 in all its experiments).
    notes: a list to append to when a task's returns are all 0.
  """
  if isinstance(cycles, bool) or not isinstance(cycles, int) or cycles < 1:
    raise ValueError(f'cora_metrics: cycles must be an int >= 1, got '
                     f'{cycles!r}.')
  notes = [] if notes is None else notes
  per_task = {}
  forgetting_all, transfer_all = [], []
  for task in schedule.unique_task_names:
    frames, returns = history.curve(task)
    if not len(frames):
      continue
    scale = float(np.max(np.abs(returns)))
    first = schedule.segment_index(schedule.segments_of(task)[0].start)
    forgetting, transfer = cora_pairs(frames, first, schedule, cycles)
    if scale == 0:
      notes.append(f'{task!r}: every evaluation returned 0, so CORA\'s '
                   f'metrics (normalised by the largest |return|) are '
                   f'undefined.')

    def normalised(pairs, sign):
      if scale == 0:
        return {str(k): None for k in pairs}
      return {str(k): _value(sign * (returns[b] - returns[a]) / scale)
              for k, (a, b) in pairs.items()}

    by_forgetting = normalised(forgetting, -1.0)
    by_transfer = normalised(transfer, 1.0)
    forgetting_all.extend(by_forgetting.values())
    transfer_all.extend(by_transfer.values())
    per_task[task] = {
        'cora_return_scale': _value(scale),
        'cora_isolated_forgetting': _mean(by_forgetting.values()),
        'cora_isolated_forgetting_by_segment': by_forgetting,
        'cora_zero_shot_transfer': _mean(by_transfer.values()),
        'cora_zero_shot_transfer_by_segment': by_transfer}
  return CoraMetrics(per_task, _mean(forgetting_all), _mean(transfer_all))


def cora_rescaled(runs: Sequence[dict]) -> List[Tuple[Optional[float],
                                                      Optional[float]]]:
  """CORA's run averages for several runs of one method, normalised as
  CORA normalises them: per task by the largest `cora_return_scale` of all
  the runs (not each run's own).

  Args:
    runs: `forgetting_metrics` dicts (e.g. the seeds of one method).

  Returns:
    per run, (isolated forgetting, zero-shot transfer): the mean over the
    run's (task, segment) pairs of its difference of returns divided by
    the method's scale of the task (None without pairs).
  """
  top = {}
  for metrics in runs:
    for task, entry in metrics.get('per_task', {}).items():
      if entry.get('cora_return_scale') is not None:
        top[task] = max(top.get(task, 0.0), entry['cora_return_scale'])
  result = []
  for metrics in runs:
    values = {'forgetting': [], 'transfer': []}
    for task, entry in metrics.get('per_task', {}).items():
      scale = entry.get('cora_return_scale')
      if scale is None or not top.get(task):
        continue
      for kind, key in (('forgetting', 'cora_isolated_forgetting'),
                        ('transfer', 'cora_zero_shot_transfer')):
        for value in entry[f'{key}_by_segment'].values():
          # A run whose returns of the task are all 0 stored None (its own
          # scale is 0); every difference of its returns is then 0.
          values[kind].append(0.0 if scale == 0 else
                              value * scale / top[task])
    result.append((_mean(values['forgetting']), _mean(values['transfer'])))
  return result


# --- All of them ------------------------------------------------------------


def forgetting_metrics(
    history: history_lib.EvalHistory, schedule: schedule_lib.TaskSchedule,
    reference: Optional[Dict[str, Sequence[Tuple[int, float]]]] = None,
    normalization: Optional[Dict[str, Tuple[float, float]]] = None,
    cora_cycles: int = CORA_FORGETTING_CYCLES) -> dict:
  """Every continual-learning metric of a run (see the module docstring),
  as a JSON-serializable dict.

  Args:
    history: the run's `EvalHistory`.
    schedule: the run's `TaskSchedule`.
    reference: optional single-task curves {task: [(frames, return),
      ...]}, frames counted from the reference run's start, for forward
      transfer.
    normalization: optional {task: (low, high)}, high != low.
    cora_cycles: the cycles whose segments count for CORA's isolated
      forgetting.

  Returns:
    dict with 'tasks', 'num_evaluations', 'final_frames', 'schedule',
    'per_task' {task: {...}}, the 'average_*' metrics, 'forward_transfer'
    ({task: FT_i} or None), 'average_forward_transfer', CORA's pooled
    'cora_isolated_forgetting' and 'cora_zero_shot_transfer' (with
    'cora_forgetting_cycles') and 'notes'. Undefined numbers are None.

  Raises:
    ValueError: an empty history, or a bad normalization.
  """
  if not len(history):
    raise ValueError('forgetting_metrics: the history has no evaluations.')
  normalization = dict(normalization or {})
  for task, (low, high) in normalization.items():
    if not np.isfinite(low) or not np.isfinite(high) or high == low:
      raise ValueError(f'forgetting_metrics: normalization of {task!r} '
                       f'needs finite low != high, got {(low, high)}.')
  tasks = schedule_lib.unique_names(list(schedule.unique_task_names) +
                                 history.tasks)
  notes = []
  per_task = {}
  for task in tasks:
    frames, returns = history.curve(task)
    if not len(frames):
      notes.append(f'{task!r} was never evaluated.')
      continue
    per_task[task] = task_metrics(task, frames, returns, schedule,
                                  normalization, notes)

  def average(key):
    return _mean(e.get(key) for e in per_task.values())

  curve, scaled_curve = average_return_curves(history, per_task,
                                              normalization)
  metrics = {
      'tasks': tasks,
      'num_evaluations': len(history),
      'final_frames': history.records[-1].frames,
      'schedule': schedule.to_json(),
      'per_task': per_task,
      'average_final_return': average('final_return'),
      'average_best_return': average('best_return'),
      'average_forgetting': average('forgetting'),
      'average_forgetting_from_best': average('forgetting_from_best'),
      'average_forgetting_per_visit': average('forgetting_per_visit'),
      'average_return_auc': _mean(curve),
  }
  if normalization:
    for key in ('final_return', 'best_return', 'forgetting',
                'forgetting_from_best', 'forgetting_per_visit'):
      metrics[f'average_normalized_{key}'] = average(f'normalized_{key}')
    metrics['average_normalized_return_auc'] = _mean(scaled_curve)

  if reference:
    transfer = forward_transfer(history, schedule, per_task, reference,
                                normalization, notes)
    metrics['forward_transfer'] = transfer
    metrics['average_forward_transfer'] = _mean(transfer.values())
    if not normalization:
      notes.append('Forward transfer uses returns min-max normalised per '
                   'task over the run and the reference.')
  else:
    metrics['forward_transfer'] = None
    metrics['average_forward_transfer'] = None
    notes.append('Forward transfer omitted: it needs single-task reference '
                 'curves (reference={task: [(frames, return), ...]}).')

  cora = cora_metrics(history, schedule, cora_cycles, notes)
  for task, entry in cora.per_task.items():
    per_task[task].update(entry)
  metrics['cora_isolated_forgetting'] = cora.isolated_forgetting
  metrics['cora_zero_shot_transfer'] = cora.zero_shot_transfer
  metrics['cora_forgetting_cycles'] = cora_cycles
  metrics['notes'] = notes
  return metrics


# --- Baselines ----------------------------------------------------------------


class Baselines(NamedTuple):
  """What a continual run's returns are measured against, per task.

  Attributes:
    normalization: {task: (low, high)}: e.g. a random policy's return and a
      single-task run's, so that p~ = (p - low) / (high - low) is 0 at
      random and 1 at single-task level (`forgetting_metrics`).
    reference: {task: [(frames, return), ...]}: the single-task learning
      curve, for forward transfer (may be empty).
  """
  normalization: Dict[str, Tuple[float, float]]
  reference: Dict[str, List[Tuple[int, float]]]


def baselines_json(baselines: Baselines, notes: Sequence[str] = ()) -> dict:
  """The JSON form that `read_baselines` reads:

    {"tasks": {task: {"low": float, "high": float,
                      "curve": [[frames, return], ...]}},
     "notes": [...]}
  """
  tasks = {}
  for task, (low, high) in baselines.normalization.items():
    tasks[task] = {'low': float(low), 'high': float(high),
                   'curve': [[int(f), float(r)] for f, r in
                             baselines.reference.get(task, [])]}
  return {'tasks': tasks, 'notes': list(notes)}


def check_coverage(baselines: Optional[Baselines],
                   tasks_by_run: Dict[str, Sequence[str]]):
  """Raises ValueError naming the tasks of a run (label -> its tasks) that
  `baselines` has no random and single-task returns for: every task of a
  run is normalised, or none (nothing to check without baselines)."""
  if baselines is None:
    return
  for label, tasks in tasks_by_run.items():
    missing = [task for task in tasks if task not in baselines.normalization]
    if missing:
      raise ValueError(
          f'the baselines have no {", ".join(missing)} (tasks of {label}); '
          'every task of a run needs its random and single-task returns, '
          'or none is normalised.')


def read_baselines(path: str) -> Baselines:
  """The `Baselines` in a JSON file written from `baselines_json`.

  Raises:
    ValueError: an unreadable file, or a task without finite `low` <
      `high`, or a malformed curve.
  """
  try:
    with open(path) as f:
      value = json.load(f)
    tasks = value['tasks']
    if not isinstance(tasks, dict) or not tasks:
      raise TypeError('"tasks" must be a non-empty object')
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'{path} is not a baselines JSON ({{"tasks": {{task: '
                     f'{{"low", "high", "curve"}}}}}}): {e}') from None
  normalization, reference = {}, {}
  for task, entry in tasks.items():
    try:
      low, high = float(entry['low']), float(entry['high'])
      curve = [(int(f), float(r)) for f, r in entry.get('curve', [])]
    except (KeyError, TypeError, ValueError) as e:
      raise ValueError(f'{path}: task {task!r} needs numbers "low" and '
                       f'"high" and a curve of [frames, return] pairs '
                       f'({e!r}).') from None
    if not (np.isfinite(low) and np.isfinite(high) and low < high):
      raise ValueError(f'{path}: task {task!r} needs finite low < high, got '
                       f'low {low}, high {high}.')
    normalization[task] = (low, high)
    if curve:
      reference[task] = sorted(curve)
  return Baselines(normalization, reference)


def write_metrics_json(path: str, metrics: dict):
  """Writes `metrics` to `path` as JSON, atomically (temporary file, then
  rename). Non-finite floats are written as null.

  Raises:
    TypeError: a value is not JSON-serializable.
  """
  def clean(value):
    if isinstance(value, dict):
      return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
      return [clean(v) for v in value]
    if isinstance(value, (np.integer, np.bool_)):
      return value.item()
    if isinstance(value, (float, np.floating)):
      return _value(value)
    return value

  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  schedule_lib.write_json(path, clean(metrics))
