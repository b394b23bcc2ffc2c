r"""Renders return curves of one or more runs from their TensorBoard events.

  python -m clear.plot --logdir=/tmp/clear/replay50 \
      --logdir=/tmp/clear/replay0 --labels='replay 50%,replay 0%' \
      --out=/tmp/clear/forgetting.png

One figure (PNG, `--dpi` 100) with a panel per task, holding each run's
evaluation curve of that task (`<tag_prefix><task>/return`, by default
`eval/<task>/return` as `clear.runtime.evaluation.write_eval_summaries`
writes), and a panel of the runs' training returns (`episode/<env>/return`,
smoothed like TensorBoard). The x-axis is total env frames: the summaries'
step. Where a run's logdir holds a `tasks.json` (see
`clear.continual.schedule`), the segments of the task sequence are drawn
at their boundaries: in a task's panel its training segments are shaded,
and every panel marks the boundaries (from the first run that has the
file; a run whose segments differ, random lengths of another seed, has its
switches marked in its colour).

With `--baselines=path.json` (`clear.continual.metrics.read_baselines`:
per task a random and a single-task return and the single-task curve)
each task's panel marks those two returns, a summary panel draws each
run's mean normalised evaluation return, and `--metrics_out=path.json`
writes every sequence run's continual-learning metrics
(`clear.continual.metrics.forgetting_metrics`, from its evaluations)
normalised, with forward transfer against the single-task curves, and
what each run cost (`clear.analysis.usage`: run time, env frames/s, peak
memory, replay bytes) from its `runtime/` and `replay/` scalars.

Seeds of a method (`clear.continual.seed_stats`): with runs labelled
`<method>_s<seed>` (`clear_s0`, `impala_s1`), `--group_seeds` draws one
line per method, the mean over its seeds (aligned on the evaluation
frames) with the 95% Student t interval shaded, in every task panel and the
normalised summary panel. `--table_out=table.md` (and `--table_json`)
writes per method the mean and 95% interval over seeds of the final
return, forgetting per visit, CORA's isolated forgetting and zero-shot
transfer and the area under the curve (normalised with `--baselines`).

A run whose event files are gone can still be drawn from a summary JSON
that `--summary_out` wrote (`--reference=path.json`, or
`path.json:label` for one of its runs): its trailing means at the
summary's `--at_frames`, at the first crossing of its threshold and at its
end, as a dashed line with markers in the training panel.

`--max_frames=N` draws only the points at or below N env frames, so that
the start of long runs (or references) can be compared with short ones; the
summaries still cover everything.

Event files are read from the local logdir and its subfolders without
TensorFlow (`clear.analysis.events`).
Needs matplotlib: `pip install "clear-rl[plot]"`.
"""

import json
import math
import os
import sys
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from absl import app
from absl import flags
import numpy as np

from clear.analysis import curve_summary
from clear.analysis import events
from clear.analysis import usage as usage_lib
from clear.continual import history as history_lib
from clear.continual import metrics as metrics_lib
from clear.continual import schedule as schedule_lib
from clear.continual import seed_stats
from clear.runtime import run_lock

# Event reading lives in clear.analysis.events; these names stay clear.plot's
# too.
Series = events.Series
event_files = events.event_files
read_scalars = events.read_scalars
curves = events.curves

RUN_TIME_TAG = usage_lib.RUN_TIME_TAG
INSTALL_HINT = ('clear.plot needs matplotlib: pip install "clear-rl[plot]" '
                '(or pip install matplotlib).')


class Run(NamedTuple):
  """What one logdir contributes to the figure.

  Attributes:
    label: the run's name in legends.
    logdir: where it was read.
    eval_curves: dict task -> `Series` of evaluation returns.
    train_curves: dict env name -> `Series` of training episode returns.
    schedule: the `schedule_lib.TaskSchedule` of its `tasks.json`, or None.
    run_time: `Series` of the seconds the run had spent running (resumes
      summed, downtime excluded) against env frames, or None.
    eval_noise: dict task -> `Series` of the half-widths of its
      evaluations' 95% intervals (`eval/<task>/return_ci95`; empty for a
      run that did not log them).
    usage: its `clear.analysis.usage.RunUsage`, or None.
  """
  label: str
  logdir: str
  eval_curves: Dict[str, Series]
  train_curves: Dict[str, Series]
  schedule: Optional[schedule_lib.TaskSchedule]
  run_time: Optional[Series] = None
  eval_noise: Optional[Dict[str, Series]] = None
  usage: Optional[usage_lib.RunUsage] = None


class Reference(NamedTuple):
  """A run drawn from a summary JSON (`--reference`): its label and the
  trailing means it recorded, int64 `[N]` env frames and float64 `[N]`
  means, ordered by frames."""
  label: str
  steps: np.ndarray
  means: np.ndarray


def load_references(spec: str) -> List[Reference]:
  """The runs of a `--summary_out` JSON, as `Reference`s.

  Args:
    spec: `path.json` (every run in it) or `path.json:label` (one run).
      A run contributes one reference per training env; its points are
      `means_at_frames`, (frames_to_threshold, threshold) and (frames,
      final_mean), where present.

  Raises:
    ValueError: a missing or unreadable file, an unknown label, or a run
      without any trailing mean.
  """
  path, _, wanted = spec.partition('.json:')
  path = path if path.endswith('.json') else path + '.json'
  try:
    with open(path) as f:
      summary = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f'--reference={spec}: cannot read {path} as a summary '
                     f'JSON ({e}).') from e
  if not isinstance(summary, dict):
    raise ValueError(f'--reference={spec}: {path} is not a summary JSON '
                     '(clear.plot --summary_out).')
  if wanted and wanted not in summary:
    raise ValueError(f'--reference={spec}: no run {wanted!r} in {path}; it '
                     f'has {sorted(summary)}.')
  references = []
  for label in ([wanted] if wanted else summary):
    training = summary[label].get('training', {}) if isinstance(
        summary[label], dict) else {}
    for env, curve in sorted(training.items()):
      points = {int(k): v for k, v in (curve.get('means_at_frames')
                                       or {}).items() if v is not None}
      if curve.get('frames_to_threshold') is not None:
        points[int(curve['frames_to_threshold'])] = curve['threshold']
      if curve.get('final_mean') is not None and curve.get('frames'):
        points[int(curve['frames'])] = curve['final_mean']
      if not points:
        continue
      steps = np.array(sorted(points), np.int64)
      references.append(Reference(
          label if len(training) == 1 else f'{label}: {env}', steps,
          np.array([points[k] for k in steps], np.float64)))
  if not references:
    raise ValueError(f'--reference={spec}: {path} holds no trailing means '
                     'to draw.')
  return references


def load_run(logdir: str, label: Optional[str] = None,
             tag_prefix: str = 'eval/',
             train_tag_prefix: str = 'episode/') -> Run:
  """Reads a run's curves and `tasks.json`.

  Raises:
    ValueError: a missing logdir, no event files or a bad `tasks.json`.
  """
  scalars = read_scalars(logdir)
  if not label:
    label = os.path.basename(os.path.normpath(logdir))
  return Run(label, logdir, curves(scalars, tag_prefix),
             curves(scalars, train_tag_prefix),
             schedule_lib.read_tasks_json(logdir),
             scalars.get(RUN_TIME_TAG),
             curves(scalars, tag_prefix, '/' + history_lib.CI95_SUFFIX),
             usage_lib.run_usage(scalars))


def smooth(values, weight: float) -> np.ndarray:
  """TensorBoard's smoothing: a debiased exponential moving average.

  Args:
    values: float `[N]`.
    weight: in [0, 1); 0 returns the values unchanged.
  """
  if not 0 <= weight < 1:
    raise ValueError(f'smoothing must be in [0, 1), got {weight}.')
  values = np.asarray(values, np.float64)
  out = np.empty_like(values)
  average = 0.0
  for i, value in enumerate(values):
    average = average * weight + (1 - weight) * value
    out[i] = average / (1 - weight ** (i + 1))
  return out


def summarize(runs: Sequence[Run], window: int = 100,
              threshold: Optional[float] = None,
              at_frames: Sequence[int] = ()) -> Dict[str, Dict]:
  """label -> {'logdir', 'training': env -> its
  `curve_summary.CurveSummary` as a dict}."""
  return {run.label: {
      'logdir': run.logdir,
      'training': {env: curve_summary.summarize_curve(
          series, window, threshold, run_time=run.run_time,
          at_frames=at_frames)._asdict()
                   for env, series in sorted(run.train_curves.items())}}
          for run in runs}


def eval_history(run: Run) -> history_lib.EvalHistory:
  """The run's evaluations from its event files, one record per frame
  count at which any task was evaluated."""
  by_frames = {}
  for task, series in run.eval_curves.items():
    for step, value in zip(series.steps, series.values):
      by_frames.setdefault(int(step), {})[task] = float(value)
  return history_lib.EvalHistory(
      [history_lib.EvalRecord(f, by_frames[f]) for f in sorted(by_frames)])


def normalized_mean_curve(run: Run, normalization) -> Series:
  """The mean over the tasks in `normalization` ({task: (low, high)}) of
  the run's normalised evaluation return (p - low) / (high - low), at each
  evaluation that includes all of those tasks the run has curves of.
  Wall times are the first task's."""
  tasks = [t for t in normalization if t in run.eval_curves]
  if not tasks:
    return Series(np.zeros([0], np.int64), np.zeros([0]), np.zeros([0]))
  common = set(run.eval_curves[tasks[0]].steps.tolist())
  for task in tasks[1:]:
    common &= set(run.eval_curves[task].steps.tolist())
  steps = np.array(sorted(common), np.int64)
  scaled = []
  for task in tasks:
    series = run.eval_curves[task]
    low, high = normalization[task]
    values = series.values[np.searchsorted(series.steps, steps)]
    scaled.append((values - low) / (high - low))
  first = run.eval_curves[tasks[0]]
  return Series(steps, np.mean(scaled, axis=0),
                first.wall_times[np.searchsorted(first.steps, steps)])


def eval_noise(run: Run,
               normalization: Optional[Dict[str, Tuple[float, float]]] = None
               ) -> Dict[str, dict]:
  """How noisy the run's evaluations were: per task, the median and the
  largest half-width of their 95% intervals (in returns), how many
  evaluations logged one and, for a task of `normalization` (task ->
  (random, single-task) returns), the median half-width on that scale,
  divided by their difference ({} for a run that logged none)."""
  noise = {}
  for task, series in sorted((run.eval_noise or {}).items()):
    if not len(series.values):
      continue
    median = float(np.median(series.values))
    noise[task] = {'median_ci95_half_width': median,
                   'max_ci95_half_width': float(np.max(series.values)),
                   'num_evaluations': int(len(series.values))}
    if normalization and task in normalization:
      low, high = normalization[task]
      noise[task]['normalized_median_ci95_half_width'] = median / (
          high - low)
  return noise


def check_baselines(runs: Sequence[Run],
                    baselines: Optional[metrics_lib.Baselines]):
  """`metrics_lib.check_coverage` of the runs with a task schedule."""
  metrics_lib.check_coverage(baselines, {
      run.label: run.schedule.unique_task_names for run in runs
      if run.schedule is not None})


def continual_metrics(runs: Sequence[Run],
                      baselines: Optional[metrics_lib.Baselines] = None
                      ) -> Dict[str, dict]:
  """label -> `continual_metrics.forgetting_metrics` of each run with a task
  schedule (`tasks.json`) and evaluations, normalised and with forward
  transfer when `baselines` are given, its `eval_noise` under
  'eval_noise' when it logged one, and its `clear.analysis.usage.RunUsage`
  under 'usage'.

  Raises:
    ValueError: no run has both.
  """
  check_baselines(runs, baselines)
  metrics = {}
  for run in runs:
    if run.schedule is None or not run.eval_curves:
      continue
    metrics[run.label] = metrics_lib.forgetting_metrics(
        eval_history(run), run.schedule,
        reference=baselines.reference if baselines else None,
        normalization=baselines.normalization if baselines else None)
    noise = eval_noise(run, baselines.normalization if baselines else None)
    if noise:
      metrics[run.label]['eval_noise'] = noise
    if run.usage is not None:
      metrics[run.label]['usage'] = run.usage._asdict()
  if not metrics:
    raise ValueError(f'No run in {[run.logdir for run in runs]} has a task '
                     f'schedule (tasks.json) and evaluations, so there are '
                     f'no continual-learning metrics to write.')
  return metrics


def _pyplot():
  """matplotlib.pyplot with the Agg backend, or one ImportError that says
  how to install it."""
  try:
    import matplotlib  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(INSTALL_HINT) from e
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def _task_order(runs: Sequence[Run]) -> List[str]:
  tasks = []
  for run in runs:
    if run.schedule is not None:
      tasks.extend(run.schedule.unique_task_names)
  for run in runs:
    tasks.extend(sorted(run.eval_curves))
  return schedule_lib.unique_names(
      [t for t in tasks if any(t in run.eval_curves for run in runs)])


def up_to(steps: np.ndarray, values: np.ndarray,
          max_frames: Optional[int]) -> Tuple[np.ndarray, np.ndarray]:
  """The `(steps, values)` pairs at steps <= `max_frames` (None: all)."""
  steps, values = np.asarray(steps), np.asarray(values)
  if max_frames is None:
    return steps, values
  keep = steps <= max_frames
  return steps[keep], values[keep]


def plot_runs(runs: Sequence[Run], out: str, smoothing: float = 0.6,
              dpi: int = 100,
              references: Sequence[Reference] = (),
              baselines: Optional[metrics_lib.Baselines] = None,
              training_panel: bool = True,
              max_frames: Optional[int] = None,
              group_seeds: bool = False) -> str:
  """Draws `runs` (and `references`, in the training panel) into the PNG
  `out` (see the module docstring). With `baselines`, each task's panel
  marks its single-task (high) and random (low) returns, and a summary
  panel draws each run's mean normalised evaluation return
  (`normalized_mean_curve`). `training_panel=False` leaves out the panel
  of training returns. `max_frames` keeps only the points at or below it
  (`up_to`; smoothing is applied before the cut, so the drawn part is the
  same as in the whole figure). `group_seeds` draws, for the runs labelled
  `<method>_s<seed>`, one line per method in the task and summary panels:
  `seed_stats.mean_curve` of its seeds, the 95% interval shaded (and
  clipped to the y range of the means and reference levels, `_fit_means`);
  in the training panel each seed's curve takes its method's colour.

  Returns:
    `out`.

  Raises:
    ValueError: no run has evaluation or training return curves; with
      `group_seeds`, a label not `<method>_s<seed>`.
    ImportError: matplotlib is missing (the message says how to install).
  """
  groups = (seed_stats.group_labels([r.label for r in runs], '--group_seeds')
            if group_seeds else None)
  # Per run: its colour index and legend name (its method's, once).
  color_of = list(range(len(runs)))
  legend_of = [run.label for run in runs]
  for g, members in enumerate((groups or {}).values()):
    for k, i in enumerate(members):
      color_of[i] = g
      legend_of[i] = list(groups)[g] if k == 0 else None
  tasks = _task_order(runs)
  has_training = training_panel and (
      any(run.train_curves for run in runs) or bool(references))
  if not tasks and not has_training:
    raise ValueError(
        f'No return curves in {[run.logdir for run in runs]}: expected '
        f'scalars <tag_prefix><task>/return or episode/<env>/return.')
  normalization = baselines.normalization if baselines else {}
  has_summary = any(t in normalization for t in tasks)
  plt = _pyplot()
  panels = (tasks + (['normalized'] if has_summary else []) +
            (['training'] if has_training else []))
  ncols = min(3, len(panels))
  nrows = math.ceil(len(panels) / ncols)
  fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.0 * nrows),
                           squeeze=False, dpi=dpi)
  axes = axes.ravel()
  colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
  schedule = next((r.schedule for r in runs if r.schedule is not None), None)
  segments = schedule.boundaries() if schedule is not None else []
  shades = plt.get_cmap('Pastel1').colors

  for ax, panel in zip(axes, panels):
    for segment in segments:
      name = schedule.task_names[segment.task]
      if panel == 'training':
        color = shades[schedule.unique_task_names.index(name) % len(shades)]
        ax.axvspan(segment.start, segment.end, color=color, alpha=0.5, lw=0)
        if len(segments) <= 12:  # Name the segments while they fit.
          ax.text((segment.start + segment.end) / 2, 0.98,
                  name.partition(':')[2] or name, ha='center', va='top',
                  fontsize=6, transform=ax.get_xaxis_transform())
      elif name == panel:
        ax.axvspan(segment.start, segment.end, color='0.88', lw=0)
      ax.axvline(segment.start, color='0.6', lw=0.6, ls=':')
    for i, run in enumerate(runs):  # Other schedules' switches.
      for segment in (run.schedule.boundaries()[1:] if run.schedule not in
                      (None, schedule) else ()):
        ax.axvline(segment.start, color=colors[color_of[i] % len(colors)],
                   lw=0.6, ls=':')
    means = []  # With groups: the values of this panel's mean lines.
    if panel == 'normalized' and groups:
      for g, (method, members) in enumerate(groups.items()):
        means.append(_draw_seed_mean(
            ax, [normalized_mean_curve(runs[i], normalization)
                 for i in members],
            colors[g % len(colors)], method, max_frames))
    elif panel != 'training' and groups:
      for g, (method, members) in enumerate(groups.items()):
        means.append(_draw_seed_mean(
            ax, [runs[i].eval_curves.get(panel) for i in members],
            colors[g % len(colors)], method, max_frames))
    if panel == 'normalized':
      for i, run in enumerate(runs if not groups else ()):
        series = normalized_mean_curve(run, normalization)
        steps, values = up_to(series.steps, series.values, max_frames)
        if len(steps):
          ax.plot(steps, values, color=colors[i % len(colors)],
                  marker='o', ms=2.5, lw=1.2, label=run.label)
      ax.axhline(1.0, color='0.3', lw=0.8, ls='--')
      ax.axhline(0.0, color='0.6', lw=0.8, ls='--')
      ax.set_title('mean over tasks, normalised (0 random, 1 single task)',
                   fontsize=9)
      ax.set_ylabel('normalised evaluation return', fontsize=8)
      _fit_means(ax, means, [0.0, 1.0])
    elif panel == 'training':
      styles = ['-', '--', '-.', ':']
      for i, run in enumerate(runs):
        for j, (env, series) in enumerate(sorted(run.train_curves.items())):
          color = colors[color_of[i] % len(colors)]
          label = legend_of[i] if (len(run.train_curves) == 1 or
                                   legend_of[i] is None) else (
                                       f'{legend_of[i]}: {env}')
          ax.plot(*up_to(series.steps, series.values, max_frames),
                  color=color, alpha=0.2, lw=0.5)
          ax.plot(*up_to(series.steps, smooth(series.values, smoothing),
                         max_frames),
                  color=color, ls=styles[j % len(styles)], lw=1.2,
                  label=label)
      for i, reference in enumerate(references,
                                    start=len(groups or runs)):
        ax.plot(*up_to(reference.steps, reference.means, max_frames),
                color=colors[i % len(colors)], ls='--', marker='o', ms=3,
                lw=1.0, label=f'{reference.label} (trailing means)')
      ax.set_title('training episode return', fontsize=9)
      if (len(runs) + len(references) > 1 or
          any(len(r.train_curves) > 1 for r in runs)):
        ax.legend(fontsize=7)
    else:
      for i, run in enumerate(runs if not groups else ()):
        series = run.eval_curves.get(panel)
        if series is not None:
          ax.plot(*up_to(series.steps, series.values, max_frames),
                  color=colors[i % len(colors)],
                  marker='o', ms=2.5, lw=1.2, label=run.label)
      if panel in normalization:
        low, high = normalization[panel]
        ax.axhline(high, color='0.3', lw=0.8, ls='--')
        ax.axhline(low, color='0.6', lw=0.8, ls='--')
      _fit_means(ax, means, normalization.get(panel, ()))
      ax.set_title(panel, fontsize=9)
      ax.set_ylabel('evaluation return', fontsize=8)
    ax.set_xlabel('env frames', fontsize=8)
    ax.tick_params(labelsize=7)
  if tasks and (len(runs) > 1 or groups):
    axes[0].legend(fontsize=7)
  for ax in axes[len(panels):]:
    ax.set_visible(False)
  fig.tight_layout()
  directory = os.path.dirname(out)
  if directory:
    os.makedirs(directory, exist_ok=True)
  fig.savefig(out, dpi=dpi, format='png')
  plt.close(fig)
  return out


def _fit_means(ax, means: Sequence[Optional[np.ndarray]],
               levels: Sequence[float]):
  """Fits `ax`'s y range to the `means` a panel drawn with `group_seeds`
  shows (None: a method without a curve) and its reference `levels`, with
  a 5% margin. The shaded intervals are clipped to it: with two or three
  seeds they can be far wider than the means they surround and would
  flatten them. Without a drawn mean, leaves `ax` as it is."""
  drawn = [np.asarray(m, np.float64).reshape([-1]) for m in means
           if m is not None and len(m)]
  if not drawn:
    return
  values = np.concatenate(drawn + [np.asarray(levels, np.float64)])
  low, high = float(np.nanmin(values)), float(np.nanmax(values))
  margin = 0.05 * (high - low) or 0.5
  ax.set_ylim(low - margin, high + margin)


def _draw_seed_mean(ax, curves: Sequence[Optional[Series]], color: str,
                    method: str, max_frames: Optional[int]
                    ) -> Optional[np.ndarray]:
  """Draws the mean of a method's seeds' `curves` (None or empty: that
  seed has none) on `ax`, the 95% interval shaded.

  Returns:
    The drawn mean values ([num_points]), or None when no seed has a
    curve.
  """
  curves = [(c.steps, c.values) for c in curves
            if c is not None and len(c.steps)]
  if not curves:
    return None
  mean = seed_stats.mean_curve(curves)
  steps, values = up_to(mean.steps, mean.mean, max_frames)
  seeds = f'{mean.num_seeds} seed{"s" if mean.num_seeds > 1 else ""}'
  ax.plot(steps, values, color=color, lw=1.4, label=f'{method} ({seeds})')
  if mean.num_seeds > 1:
    half = mean.half_width[:len(steps)]
    ax.fill_between(steps, values - half, values + half, color=color,
                    alpha=0.2, lw=0)
  return values


def load_runs(logdirs: Sequence[str],
              labels: Optional[Sequence[str]] = None,
              tag_prefix: str = 'eval/',
              train_tag_prefix: str = 'episode/') -> List[Run]:
  """Loads the runs in `logdirs`, named by `labels` (default: folder names).

  Raises:
    ValueError: no logdir, a label count that does not match, a missing
      logdir or no event files.
  """
  if not logdirs:
    raise ValueError('Give at least one --logdir.')
  if labels and len(labels) != len(logdirs):
    raise ValueError(f'--labels has {len(labels)} names for {len(logdirs)} '
                     f'logdirs.')
  return [load_run(logdir, labels[i] if labels else None, tag_prefix,
                   train_tag_prefix) for i, logdir in enumerate(logdirs)]


def _define_flags():
  """The binary's flags (defined only when run as a program, so importing
  this module never clashes with another binary's --logdir)."""
  flags.DEFINE_multi_string('logdir', None,
                            'A run\'s logdir; repeat to compare runs.')
  flags.DEFINE_list('labels', None,
                    'Comma-separated run names, one per --logdir (default: '
                    'the logdirs\' folder names).')
  flags.DEFINE_string('out', 'returns.png', 'The PNG file to write.')
  flags.DEFINE_string('tag_prefix', 'eval/',
                      'Per-task curves are the scalars '
                      '<tag_prefix><task>/return.')
  flags.DEFINE_string('train_tag_prefix', 'episode/',
                      'Training curves are the scalars '
                      '<train_tag_prefix><env>/return.')
  flags.DEFINE_float('smoothing', 0.6,
                     'TensorBoard-style smoothing of training curves, [0, 1).')
  flags.DEFINE_integer('dpi', 100, 'Resolution of the PNG.')
  flags.DEFINE_string('summary_out', '',
                      'Also write a JSON summary of each run\'s training '
                      'curves here (final and best trailing means, frames '
                      'and seconds to --threshold).')
  flags.DEFINE_integer('window', 100, 'Episodes per trailing mean in the '
                       'summary.')
  flags.DEFINE_list('at_frames', [], 'Env frame counts (comma-separated) at '
                    'which the summary also reports each run\'s trailing '
                    'mean, to compare runs at equal frames.')
  flags.DEFINE_float('threshold', None, 'Return whose first crossing by the '
                     'trailing mean the summary reports.')
  flags.DEFINE_multi_string(
      'reference', [], 'A summary JSON from --summary_out (path.json, or '
      'path.json:label for one of its runs) whose trailing means are drawn '
      'beside the runs, for a run whose event files are gone; repeatable.')
  flags.DEFINE_string(
      'baselines', '', 'A baselines JSON (clear.continual.metrics.'
      'read_baselines: '
      'per task a random and a single-task return, and the single-task '
      'curve): adds a panel of the mean normalised evaluation return, and '
      'normalises --metrics_out and gives it forward transfer.')
  flags.DEFINE_string(
      'metrics_out', '', 'Write the continual-learning metrics of every run '
      'with a tasks.json (forgetting, final and best returns, area under '
      'the curve, CORA\'s isolated forgetting and zero-shot transfer; see '
      'clear.continual.metrics), computed from its evaluations, to this '
      'JSON.')
  flags.DEFINE_bool('training_panel', True,
                    'Draw the panel of training returns.')
  flags.DEFINE_bool(
      'group_seeds', False, 'Runs are labelled <method>_s<seed> (e.g. '
      'clear_s0, from the logdir names or --labels): draw one line per '
      'method, the mean over its seeds aligned on the evaluation frames, '
      'with the 95% Student t interval shaded (task and normalised panels).')
  flags.DEFINE_string(
      'table_out', '', 'Write a Markdown table here: per method (runs '
      'labelled <method>_s<seed>), the mean and 95% Student t interval over '
      'seeds of the final return, forgetting per visit, CORA\'s isolated '
      'forgetting and zero-shot transfer and the area under the curve '
      '(normalised with --baselines), and the number of seeds.')
  flags.DEFINE_string('table_json', '', 'Write the numbers of the '
                      '--table_out table (means, interval half-widths and '
                      'bounds, the seeds\' values) as JSON here (with or '
                      'without --table_out).')
  flags.DEFINE_string('max_frames', '', 'Draw only the points at or below '
                      'this many env frames (e.g. 10e6; default: all).')
  flags.mark_flag_as_required('logdir')


def _frame_counts(texts: Sequence[str], flag: str = '--at_frames'
                  ) -> List[int]:
  """`flag`'s frame counts as ints (accepts 5000000, 5e6 and 5_000_000)."""
  counts = []
  for text in texts:
    try:
      value = float(text.replace('_', ''))
    except ValueError:
      value = float('nan')
    if not (math.isfinite(value) and value >= 0 and value == int(value)):
      raise ValueError(f'{flag} takes non-negative frame counts, got '
                       f'{text!r}.')
    counts.append(int(value))
  return counts


def say_if_live(logdirs: Sequence[str]) -> List[str]:
  """Notes (printed to stderr, and returned) for the logdirs a live training
  run holds (`clear.runtime.run_lock`): they are read as they are now."""
  notes = []
  for logdir in logdirs:
    holder = run_lock.live_holder(logdir)
    if holder is not None:
      notes.append(f'clear.plot: {logdir} is still training '
                   f'({holder.describe()}): its curves end where its event '
                   'files end now.')
      print(notes[-1], file=sys.stderr)
  return notes


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}.')
  f = flags.FLAGS
  # A path flag written --logdir=~/x reaches us with its ~.
  f.logdir = [os.path.expanduser(logdir) for logdir in f.logdir]
  for name in ('out', 'summary_out', 'metrics_out', 'baselines', 'table_out',
               'table_json'):
    setattr(f, name, os.path.expanduser(getattr(f, name)))
  try:
    say_if_live(f.logdir)
    runs = load_runs(f.logdir, f.labels, f.tag_prefix, f.train_tag_prefix)
    references = [r for spec in f.reference for r in load_references(spec)]
    if f.out and not f.out.lower().endswith('.png'):
      raise ValueError(f'--out={f.out}: the figure is a PNG; name it '
                       '<name>.png (or give --out= for no figure).')
    baselines = (metrics_lib.read_baselines(f.baselines)
                 if f.baselines else None)
    check_baselines(runs, baselines)
    if f.group_seeds:  # Checked before anything is written.
      seed_stats.group_labels([run.label for run in runs], '--group_seeds')
    metrics = table = None
    if f.metrics_out or f.table_out or f.table_json:
      metrics = continual_metrics(runs, baselines)
    if f.table_out or f.table_json:
      table = seed_stats.seed_table(
          metrics, '--table_out' if f.table_out else '--table_json')
    if f.metrics_out:
      metrics_lib.write_metrics_json(f.metrics_out, metrics)
      print(f'Wrote {f.metrics_out}')
    if f.table_json:
      metrics_lib.write_metrics_json(f.table_json, table)
      print(f'Wrote {f.table_json}')
    if f.table_out:
      seed_stats.write_text(f.table_out, seed_stats.table_markdown(table))
      print(seed_stats.table_markdown(table))
      print(f'Wrote {f.table_out}')
    if f.summary_out:
      summary = summarize(runs, f.window, f.threshold,
                          _frame_counts(f.at_frames))
      schedule_lib.write_json(f.summary_out, summary)
      print(json.dumps(summary, indent=1))
      print(f'Wrote {f.summary_out}')
    if f.out:
      max_frames = (_frame_counts([f.max_frames], '--max_frames')[0]
                    if f.max_frames else None)
      written = plot_runs(runs, f.out, f.smoothing, f.dpi, references,
                          baselines, f.training_panel, max_frames,
                          f.group_seeds)
      print(f'Wrote {written}')
  except (ValueError, ImportError) as e:
    sys.exit(f'clear.plot: {e}')


if __name__ == '__main__':
  _define_flags()
  app.run(main)
