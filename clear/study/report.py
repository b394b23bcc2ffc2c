"""`clear.study report`: a study's metrics, tables, figures and aggregates.

From the method runs of a study (each read from its kept copy when it has
one, else from its logdir; runs with neither are left out and named), it
writes what the study file's `[report]` asks for:

  * `metrics`: every run's `clear.continual.metrics.forgetting_metrics`,
    labelled `<method>_s<seed>`, normalised by the baselines (made from
    the reference runs first, when the baselines file is missing);
  * per `[[report.tables]]`: the seed table of `clear.plot --table_out`
    (mean ± Student t interval over seeds, methods by their names) and
    beneath it the aggregate table, and the figure of `clear.plot
    --group_seeds --notraining_panel`;
  * `aggregate`: the aggregates as JSON.

The aggregates (`clear.continual.aggregate`: rliable's definitions) are
taken over seeds and tasks at once: per method, the interquartile mean of the
normalised final return and forgetting per visit over its (run, task)
pairs, and of the normalised area under the curve over its runs (one
number a run), each with its 95% stratified bootstrap interval; and the
probability that `improvement_of` improves on each other method (a higher
final return, and a lower forgetting per visit), or that a table's own
`improvement_of` does, over the table's methods (under `tables` by the
table's file name). They need the baselines: without them, returns of
different games are on different scales.

A run that is still training or was stopped counts as it is now, and is
marked partial: in `metrics` (`"partial": true`) and under each table. A
figure draws a method's partial runs only when it has no finished one.
"""

import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from clear import plot
from clear.continual import aggregate as aggregate_lib
from clear.continual import baselines as baselines_lib
from clear.continual import metrics as metrics_lib
from clear.continual import schedule as schedule_lib
from clear.continual import seed_stats
from clear.study import spec as spec_lib
from clear.study import state as state_lib

# (name, header, per-task key or None for the run's number, sign: +1 when
# higher is better).
AGGREGATES = (
    ('final_return', 'final return', 'normalized_final_return', 1),
    ('forgetting_per_visit', 'forgetting per visit',
     'normalized_forgetting_per_visit', -1),
    ('return_auc', 'area under the curve', None, 1),
)
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0


def read_baselines(study: spec_lib.Study, say=print
                   ) -> Optional[metrics_lib.Baselines]:
  """The study's baselines; made from its finished reference runs (and
  written) when the file does not exist yet.

  Raises:
    ValueError: a reference run has not finished.
  """
  b = study.baselines
  if b is None:
    return None
  if os.path.isfile(b.file):
    return metrics_lib.read_baselines(b.file)
  logdirs = {}
  for run in study.references:
    status = state_lib.status(run, with_progress=False)
    if status.state != state_lib.FINISHED:
      raise ValueError(f'{b.file} does not exist, and the reference run '
                       f'{run.label} it is made from is {status.state}: '
                       f'`clear.study run {study.path} --methods='
                       f'{spec_lib.REFERENCE_METHOD}` first.')
    logdirs[run.task] = run.keep if state_lib.is_kept(run) else run.logdir
  baselines, _, notes = baselines_lib.make_baselines(
      list(logdirs), logdirs, b.frames, b.window, b.random_episodes,
      b.random_envs, b.seed)
  baselines_lib.write_baselines(b.file, baselines, notes)
  say(f'Wrote {b.file} (from the reference runs)')
  return baselines


def load_method_runs(runs: Sequence[spec_lib.Run], say=print):
  """([(spec Run, plot.Run)], labels of partial runs) of the method runs
  that can be read."""
  loaded, partial = [], []
  for run in runs:
    if run.method == spec_lib.REFERENCE_METHOD:
      continue
    status = state_lib.status(run, with_progress=False)
    source = run.keep if state_lib.is_kept(run) else run.logdir
    if not os.path.isdir(source):
      say(f'{run.label}: no logdir or kept copy yet; left out.')
      continue
    loaded.append((run, plot.load_run(source, run.label)))
    if status.state != state_lib.FINISHED:
      partial.append(run.label)
  return loaded, partial


def score_matrices(metrics: Dict[str, dict], labels_by_method: Dict[
    str, List[str]]) -> Dict[str, Dict[str, np.ndarray]]:
  """{aggregate name: {method: float64 [runs, tasks] (the AUC: [runs, 1])}}
  from the runs' normalised metrics; the tasks in the first run's order.

  Raises:
    ValueError: a run without normalised metrics (no baselines).
  """
  scores = {name: {} for name, _, _, _ in AGGREGATES}
  for method, labels in labels_by_method.items():
    rows = {name: [] for name in scores}
    for label in labels:
      m = metrics[label]
      if 'average_normalized_final_return' not in m:
        raise ValueError(f'{label} has no normalised metrics: the '
                         'aggregates need the study\'s [baselines].')
      for name, _, key, _ in AGGREGATES:
        if key is None:
          rows[name].append([m['average_normalized_return_auc']])
        else:
          rows[name].append([m['per_task'][task][key] for task in m['tasks']])
    for name in scores:
      scores[name][method] = np.asarray(rows[name], np.float64)
  return scores


def has_every_score(metrics: dict) -> bool:
  """Whether a run's metrics hold a finite value of every aggregate's
  score on every task (a run that has just started has none yet)."""
  values = [metrics.get('average_normalized_return_auc')]
  for _, _, key, _ in AGGREGATES:
    if key is not None:
      values += [metrics.get('per_task', {}).get(task, {}).get(key)
                 for task in metrics.get('tasks', ())]
  return all(isinstance(v, (int, float)) and np.isfinite(v) for v in values)


def aggregated_labels(loaded, metrics: Dict[str, dict], say=print
                      ) -> Dict[str, List[str]]:
  """{method: labels} of the `loaded` runs ((spec Run, plot Run) pairs)
  whose metrics have every score; the others are named and left out."""
  by_method = {}
  for run, _ in loaded:
    if run.label not in metrics:
      continue
    if 'average_normalized_final_return' in metrics[run.label] and (
        not has_every_score(metrics[run.label])):
      say(f'{run.label}: left out of the aggregate statistics: not every '
          'task has a score yet.')
      continue
    by_method.setdefault(run.method, []).append(run.label)
  return by_method


def figure_runs(chosen, partial: Sequence[str], figure: str, say=print):
  """The `chosen` runs ((spec Run, plot Run) pairs) a figure draws: a
  method's partial runs only when it has no finished one, since a method's
  mean curve spans only the frames all its runs reached (a run under way
  would cut its finished seeds' curves short). Names those left out."""
  finished = {run.method for run, _ in chosen if run.label not in partial}
  drawn = [(run, plotted) for run, plotted in chosen
           if run.label not in partial or run.method not in finished]
  left = [run.label for run, _ in chosen
          if run.label in partial and run.method in finished]
  if left:
    say(f'{figure}: left out the partial runs {", ".join(left)} (their '
        'methods have finished runs).')
  return drawn


def _estimate_json(estimate) -> dict:
  return {'iqm': estimate.point, 'low': estimate.low, 'high': estimate.high}


def probabilities_of_improvement(scores, methods: Sequence[str],
                                 improvement_of: str) -> dict:
  """P(`improvement_of` does better than each other of `methods`), by
  method and score (JSON-ready), from `score_matrices`' `scores`; empty
  when `improvement_of` is not among `methods`."""
  result = {}
  if improvement_of not in methods:
    return result
  for method in methods:
    if method == improvement_of:
      continue
    entry = {}
    for name, _, _, sign in AGGREGATES[:2]:
      estimate = aggregate_lib.probability_of_improvement(
          sign * scores[name][improvement_of], sign * scores[name][method],
          reps=BOOTSTRAP_REPS, seed=BOOTSTRAP_SEED)
      entry[name] = {'probability': estimate.point, 'low': estimate.low,
                     'high': estimate.high}
    result[method] = entry
  return result


def aggregates(metrics: Dict[str, dict], labels_by_method: Dict[str, List[str]],
               improvement_of: str,
               tables: Optional[Dict[str, Tuple[str, Sequence[str]]]] = None
               ) -> dict:
  """The aggregate statistics (JSON-ready) of `labels_by_method`'s runs.

  Args:
    metrics, labels_by_method: as `score_matrices`.
    improvement_of: the method whose probabilities of improvement over the
      others are given.
    tables: {table file name: (its improvement_of, its methods)} of the
      tables with their own, given under `tables`.
  """
  scores = score_matrices(metrics, labels_by_method)
  result = {'methods': {}, 'probability_of_improvement': {},
            'improvement_of': improvement_of,
            'bootstrap': {'reps': BOOTSTRAP_REPS, 'seed': BOOTSTRAP_SEED,
                          'confidence': 0.95, 'kind': 'stratified over '
                          'tasks (runs resampled within each task)'}}
  for method, labels in labels_by_method.items():
    entry = {'runs': list(labels)}
    for name, _, _, _ in AGGREGATES:
      estimate = aggregate_lib.interval_estimates(
          {method: scores[name][method]}, reps=BOOTSTRAP_REPS,
          seed=BOOTSTRAP_SEED)[method]
      entry[name] = _estimate_json(estimate)
    result['methods'][method] = entry
  result['probability_of_improvement'] = probabilities_of_improvement(
      scores, list(labels_by_method), improvement_of)
  for table, (of, methods) in (tables or {}).items():
    result.setdefault('tables', {})[table] = {
        'improvement_of': of,
        'probability_of_improvement': probabilities_of_improvement(
            scores, [m for m in methods if m in labels_by_method], of)}
  return result


def _range(low, high) -> str:
  return '' if low is None else f' [{low:.2f}, {high:.2f}]'


def aggregate_markdown(result: dict, names: Dict[str, str]) -> str:
  """The aggregates as a Markdown table (methods by `names`)."""
  of = names.get(result['improvement_of'], result['improvement_of'])
  headers = ['method', 'runs'] + [f'IQM {header}' for _, header, _, _ in
                                  AGGREGATES] + [
      f'P({of} higher final return)', f'P({of} forgets less)']
  lines = ['| ' + ' | '.join(headers) + ' |',
           '|' + '|'.join([' --- '] + [' ---: '] * (len(headers) - 1)) + '|']
  for method, entry in result['methods'].items():
    cells = [names.get(method, method), str(len(entry['runs']))]
    for name, _, _, _ in AGGREGATES:
      e = entry[name]
      cells.append(f'{e["iqm"]:.2f}{_range(e["low"], e["high"])}')
    improvement = result['probability_of_improvement'].get(method)
    for name in ('final_return', 'forgetting_per_visit'):
      if improvement is None:
        cells.append('—')
      else:
        p = improvement[name]
        cells.append(f'{p["probability"]:.2f}{_range(p["low"], p["high"])}')
    lines.append('| ' + ' | '.join(cells) + ' |')
  caption = (
      'Table: Interquartile mean (IQM) over every (seed, game) pair of the '
      'normalised final return and forgetting per visit, and over seeds of '
      'the normalised area under the curve, with 95% stratified bootstrap '
      f'intervals ({BOOTSTRAP_REPS} resamples of the seeds within each '
      f'game; none with one seed). P({of} ...): the probability that a run '
      f'of {of} does better than one of the method on a game '
      '(Agarwal et al. 2021), with its bootstrap interval.')
  return '\n'.join(lines) + f'\n\n{caption}\n'


def write_report(study: spec_lib.Study, runs: Sequence[spec_lib.Run],
                 say=print) -> int:
  """Writes the study's report (see the module docstring); returns 0.

  Raises:
    ValueError: no run can be read, a reference missing for the baselines,
      or a run the metrics cannot be computed for.
  """
  baselines = read_baselines(study, say)
  loaded, partial = load_method_runs(runs, say)
  if not loaded:
    raise ValueError(f'No run of {study.path} has a logdir or a kept copy '
                     'yet: `clear.study run` first.')
  plot_runs = [run for _, run in loaded]
  metrics = plot.continual_metrics(plot_runs, baselines)
  for label in partial:
    if label in metrics:
      metrics[label]['partial'] = True
  report = study.report
  if report.metrics:
    metrics_lib.write_metrics_json(report.metrics, metrics)
    say(f'Wrote {report.metrics}')
  normalized = baselines is not None
  names = {key: method.name for key, method in study.methods.items()}
  result = None
  if normalized:
    own = {os.path.basename(table.table): (table.improvement_of,
                                           table.methods)
           for table in report.tables
           if table.table and table.improvement_of != report.improvement_of}
    result = aggregates(metrics, aggregated_labels(loaded, metrics, say),
                        report.improvement_of, own)
    if report.aggregate:
      schedule_lib.write_json(report.aggregate, result)
      say(f'Wrote {report.aggregate}')
  for table in report.tables:
    chosen = [(run, p) for run, p in loaded if run.method in table.methods]
    chosen.sort(key=lambda pair: table.methods.index(pair[0].method))
    if not chosen:
      say(f'{table.table or table.figure}: none of its runs can be read '
          'yet; not written.')
      continue
    if table.table:
      named_metrics = {f'{names[run.method]}_s{run.seed}': metrics[run.label]
                       for run, _ in chosen if run.label in metrics}
      text = seed_stats.table_markdown(seed_stats.seed_table(named_metrics))
      if result is not None:
        sub = dict(result, methods={m: e for m, e in result['methods'].items()
                                    if m in table.methods})
        if table.improvement_of != report.improvement_of:
          sub.update(result['tables'][os.path.basename(table.table)])
        text += '\n' + aggregate_markdown(sub, names)
      marked = [label for label in partial if label in metrics and
                any(run.label == label for run, _ in chosen)]
      if marked:
        text += (f'\nPartial runs (still training or stopped, counted as '
                 f'they are now): {", ".join(marked)}.\n')
      seed_stats.write_text(table.table, text)
      say(text)
      say(f'Wrote {table.table}')
    if table.figure:
      drawn = [p._replace(label=f'{names[run.method]}_s{run.seed}')
               for run, p in figure_runs(chosen, partial, table.figure, say)]
      written = plot.plot_runs(drawn, table.figure, baselines=baselines,
                               training_panel=table.training_panel,
                               group_seeds=True)
      say(f'Wrote {written}')
  return 0
