r"""Statistics over the seeds of each method: grouping, intervals, table.

Runs are labelled `<method>_s<seed>` (`clear_s0`, `online_ewc_s2`, ...);
`group_labels` groups them by method, methods in order of first
appearance. Over a method's seeds, a number is reported as its mean and
the half-width of its 95% confidence interval from Student's t
distribution with n - 1 degrees of freedom (n seeds):

  mean +- t_{0.975, n-1} s / sqrt(n),   s the sample standard deviation

(no interval with one seed); `t_quantile` is scipy's `stats.t.ppf` with
the arguments checked.

`mean_curve` averages the seeds' evaluation curves of one task for
`clear.plot --group_seeds`; `seed_table` / `table_markdown` make the
per-method table of `clear.plot --table_out` and `--table_json` from the
runs' `clear.continual.metrics.forgetting_metrics`.
"""

import math
import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from clear.continual import metrics as continual_metrics

LABEL = re.compile(r'(?P<method>.+)_s(?P<seed>\d+)')
CONFIDENCE = 0.95


# --- Labels -----------------------------------------------------------------


def parse_label(label: str, flag: str) -> Tuple[str, int]:
  """(method, seed) of a label `<method>_s<seed>`.

  Raises:
    ValueError: naming `flag` and the label, when it is not of that form.
  """
  match = LABEL.fullmatch(label)
  if not match:
    raise ValueError(f'{flag} needs run labels <method>_s<seed> (e.g. '
                     f'clear_s0, online_ewc_s2); got {label!r}. Name the '
                     f'logdirs so, or give --labels.')
  return match.group('method'), int(match.group('seed'))


def group_labels(labels: Sequence[str], flag: str) -> Dict[str, List[int]]:
  """{method: indices into `labels` of its seeds}, methods in order of
  first appearance.

  Raises:
    ValueError: naming `flag` and the label, for a label not of the form
      `<method>_s<seed>` or a seed given twice.
  """
  groups, seen = {}, {}
  for i, label in enumerate(labels):
    method, seed = parse_label(label, flag)
    if (method, seed) in seen:
      raise ValueError(f'{flag}: {label!r} names seed {seed} of {method!r} '
                       f'again (as {labels[seen[method, seed]]!r}); give '
                       f'each run its own label.')
    seen[method, seed] = i
    groups.setdefault(method, []).append(i)
  return groups


# --- Student t interval -------------------------------------------------------


def _check_dof(dof) -> int:
  if isinstance(dof, bool) or not isinstance(dof, (int, np.integer)) or (
      dof < 1):
    raise ValueError(f'Student t: degrees of freedom must be an int >= 1, '
                     f'got {dof!r}.')
  return int(dof)


def t_quantile(p: float, dof: int) -> float:
  """The p-quantile of Student's t with `dof` (whole) degrees of freedom
  (`scipy.stats.t.ppf`).

  Raises:
    ValueError: `dof` not an int >= 1, or `p` not in (0, 1).
  """
  dof = _check_dof(dof)
  if not 0 < p < 1:
    raise ValueError(f't_quantile: p must be in (0, 1), got {p}.')
  return float(stats.t.ppf(p, dof))


class Interval(NamedTuple):
  """A mean over seeds and its confidence interval.

  Attributes:
    mean: the mean of `values` (None without values).
    half_width: t_{0.975, n-1} s / sqrt(n) (None with fewer than 2).
    values: the seeds' values the mean is over.
  """
  mean: Optional[float]
  half_width: Optional[float]
  values: Tuple[float, ...]

  @property
  def n(self) -> int:
    return len(self.values)


def mean_interval(values: Sequence[float],
                  confidence: float = CONFIDENCE) -> Interval:
  """The mean of `values` and the half-width of its two-sided Student t
  confidence interval (n - 1 degrees of freedom)."""
  values = tuple(float(v) for v in values)
  if not values:
    return Interval(None, None, values)
  mean = float(np.mean(values))
  if len(values) < 2:
    return Interval(mean, None, values)
  t = t_quantile(0.5 + confidence / 2, len(values) - 1)
  return Interval(mean, float(t * np.std(values, ddof=1) /
                              math.sqrt(len(values))), values)


# --- Curves -----------------------------------------------------------------


class SeedCurve(NamedTuple):
  """The mean of several seeds' curves.

  Attributes:
    steps: int64 `[M]` env frames.
    mean: float64 `[M]` mean over seeds.
    half_width: float64 `[M]` half-width of the 95% t interval (NaN with
      one seed).
    num_seeds: how many curves.
  """
  steps: np.ndarray
  mean: np.ndarray
  half_width: np.ndarray
  num_seeds: int


def mean_curve(curves: Sequence[Tuple[np.ndarray, np.ndarray]],
               confidence: float = CONFIDENCE) -> SeedCurve:
  """Averages curves (steps int `[N_j]` increasing, values float `[N_j]`)
  on the evaluation frames: the union of their steps within the range
  every curve covers, each curve linearly interpolated there (where the
  seeds evaluate at the same frames, their own values).

  Raises:
    ValueError: no curve, or an empty one.
  """
  if not curves or any(len(steps) == 0 for steps, _ in curves):
    raise ValueError('mean_curve: needs one or more non-empty curves.')
  start = max(int(steps[0]) for steps, _ in curves)
  end = min(int(steps[-1]) for steps, _ in curves)
  grid = np.unique(np.concatenate([np.asarray(s, np.int64)
                                   for s, _ in curves]))
  grid = grid[(grid >= start) & (grid <= end)]
  values = np.array([np.interp(grid, steps, v) for steps, v in curves],
                    np.float64).reshape(len(curves), len(grid))
  mean = values.mean(axis=0)
  if len(curves) < 2:
    half = np.full_like(mean, np.nan)
  else:
    t = t_quantile(0.5 + confidence / 2, len(curves) - 1)
    half = t * values.std(axis=0, ddof=1) / math.sqrt(len(curves))
  return SeedCurve(grid, mean, half, len(curves))


# --- Table ------------------------------------------------------------------


class Column(NamedTuple):
  """A column of the table: its JSON name, its header, and the
  `forgetting_metrics` key it reads with baselines and without (None: one
  of CORA's, rescaled over the method's seeds)."""
  name: str
  header: str
  normalized_key: Optional[str]
  key: Optional[str]


COLUMNS = (
    Column('final_return', 'final return',
           'average_normalized_final_return', 'average_final_return'),
    Column('forgetting_per_visit', 'forgetting per visit',
           'average_normalized_forgetting_per_visit',
           'average_forgetting_per_visit'),
    Column('isolated_forgetting', 'isolated forgetting (CORA)', None, None),
    Column('zero_shot_transfer', 'zero-shot transfer (CORA)', None, None),
    Column('return_auc', 'area under the curve',
           'average_normalized_return_auc', 'average_return_auc'),
)


def caption(normalized: bool, cycles: int = 1) -> str:
  """What the table's numbers are (its caption); `cycles`: those whose
  segments count for CORA's forgetting."""
  scale = ('normalised per game (0: the random policy, 1: the single-task '
           'run), ' if normalized else 'in return units, ')
  within = ('the first cycle' if cycles == 1 else
            f'the first {cycles} cycles')
  return (
      f'Per method, the mean over seeds ± the half-width of the 95% '
      f'confidence interval from Student\'s t distribution with n − 1 '
      f'degrees of freedom (n seeds; no interval with one seed; "k of n" '
      f'where only k seeds have the number). Final return, forgetting per '
      f'visit and area under the curve are {scale}averaged over games: '
      f'the return at the last evaluation; the drop of a game\'s return '
      f'from the end of each of its training segments to the start of its '
      f'next one; the mean return over the run\'s evaluations. CORA\'s '
      f'isolated forgetting is the drop of a game\'s return during each '
      f'later segment of {within}, and its zero-shot transfer the '
      f'rise during each segment before the game is first trained, both '
      f'divided by the largest absolute evaluation return of that game '
      f'over the method\'s seeds and averaged over all (game, segment) '
      f'pairs.')


def seed_table(metrics: Dict[str, dict], flag: str = '--table_out') -> dict:
  """The per-method table (JSON-ready) from label -> `forgetting_metrics`.

  Normalised columns are used when every run has them (baselines given).

  Returns:
    {'caption', 'normalized', 'columns': [{'name', 'header'}],
     'methods': {method: {'seeds': [labels], 'num_seeds': n,
                          name: {'mean', 'half_width', 'low', 'high', 'n',
                                 'values'}}}}; low/high are mean -+
    half-width, None where undefined.

  Raises:
    ValueError: naming `flag`, a label not `<method>_s<seed>`.
  """
  labels = list(metrics)
  groups = group_labels(labels, flag)
  normalized = bool(metrics) and all(
      'average_normalized_final_return' in m for m in metrics.values())
  methods = {}
  for method, members in groups.items():
    runs = [metrics[labels[i]] for i in members]
    cora = continual_metrics.cora_rescaled(runs)
    entry = {'seeds': [labels[i] for i in members], 'num_seeds': len(runs)}
    for column in COLUMNS:
      if column.name == 'isolated_forgetting':
        values = [c[0] for c in cora]
      elif column.name == 'zero_shot_transfer':
        values = [c[1] for c in cora]
      else:
        key = column.normalized_key if normalized else column.key
        values = [run.get(key) for run in runs]
      interval = mean_interval([v for v in values if v is not None])
      half = interval.half_width
      entry[column.name] = {
          'mean': interval.mean, 'half_width': half,
          'low': None if half is None else interval.mean - half,
          'high': None if half is None else interval.mean + half,
          'n': interval.n, 'values': values}
    methods[method] = entry
  cycles = {m.get('cora_forgetting_cycles',
                  continual_metrics.CORA_FORGETTING_CYCLES)
            for m in metrics.values()}
  if len(cycles) > 1:
    raise ValueError(f'{flag}: the runs\' CORA forgetting counts different '
                     f'numbers of cycles ({sorted(cycles)}); compute their '
                     f'metrics alike.')
  return {'caption': caption(normalized, cycles.pop() if cycles else 1),
          'normalized': normalized,
          'columns': [{'name': c.name,
                       'header': ('normalised ' if normalized and
                                  c.normalized_key else '') + c.header}
                      for c in COLUMNS],
          'methods': methods}


def _cell(value: dict, num_seeds: int, digits: int) -> str:
  if value['mean'] is None:
    return '—'
  text = f'{value["mean"]:.{digits}f}'
  if value['half_width'] is not None:
    text += f' ± {value["half_width"]:.{digits}f}'
  if value['n'] < num_seeds:
    text += f' ({value["n"]} of {num_seeds})'
  return text


def table_markdown(table: dict, digits: int = 3) -> str:
  """The table as Markdown, its caption below it."""
  headers = ['method', 'seeds'] + [c['header'] for c in table['columns']]
  lines = ['| ' + ' | '.join(headers) + ' |',
           '|' + '|'.join([' --- '] + [' ---: '] * (len(headers) - 1)) + '|']
  for method, entry in table['methods'].items():
    cells = [method, str(entry['num_seeds'])] + [
        _cell(entry[c['name']], entry['num_seeds'], digits)
        for c in table['columns']]
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + f'\n\nTable: {table["caption"]}\n'


def write_text(path: str, text: str):
  """Writes `text` to `path` atomically, creating the folder."""
  directory = os.path.dirname(path)
  if directory:
    os.makedirs(directory, exist_ok=True)
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    f.write(text)
  os.replace(tmp, path)
