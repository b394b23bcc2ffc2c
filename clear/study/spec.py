"""A study file: the runs of a study (methods x seeds, and the single-task
reference runs), where they go and what `report` writes.

A study file is TOML (`tomllib`, standard library). Paths in it are
relative to the file's folder, except `root` (here and under
`[references]`), which is relative to the folder the command runs in:
flagfiles and outputs sit beside the file, logdirs in the user's
workspace.

    root = "runs/minatar_seq"        # logdirs <root>/<method>_s<seed>
    seeds = [0, 1, 2]                # every method's, unless it names its own
    flagfile = "flags/common.flags"  # optional: flags of every run
    flags = ["--checkpoint_interval_s=300"]   # optional, after the flagfile
    keep = "runs"                    # finished runs' kept scalars and JSON
    cpus_per_run = 2                 # what each run asks Ray for
    gpus_per_run = 0

    [methods.clear]                  # a method: a flagfile, flags, or both
    flagfile = "flags/clear.flags"
    name = "CLEAR"                   # its name in tables and figures

    [methods.ewc_lambda10]
    flagfile = "flags/ewc.flags"
    flags = ["--ewc_lambda=10"]
    seeds = [0]

    [references]                     # optional: each task trained alone
    root = "runs/minatar"            # logdirs <root>/<task without family>
    seed = 0
    keep = "runs/single"
    [references.runs."minatar:Asterix"]
    flagfile = "flags/single_task_asterix.flags"

    [baselines]                      # the normalisation (report)
    file = "baselines.json"          # made from the references if missing
    frames = 3000000                 # the references' return near these
    window = 300000                  # frames (within this many)

    [report]
    metrics = "continual_metrics.json"
    aggregate = "aggregate.json"
    improvement_of = "clear"         # P(this method improves on each other)
    [[report.tables]]
    methods = ["clear", "impala"]    # default: every method
    table = "continual_methods.md"
    figure = "continual_methods.png"
    training_panel = false           # default true: training returns too
    improvement_of = "clear"         # default: the report's

A run's command line is `clear.train`'s flags in this order: the study's
flagfile and flags, the method's flagfile and flags, `--seed` and
`--logdir`, then the extra flags given to `clear.study run` after `--`
(so those win).
"""

import os
import re
import tomllib
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

REFERENCE_METHOD = 'reference'
_NAME = re.compile(r'[A-Za-z0-9][A-Za-z0-9_.-]*')

_TOP_KEYS = {'root', 'seeds', 'flagfile', 'flags', 'keep', 'cpus_per_run',
             'gpus_per_run', 'methods', 'references', 'baselines', 'report'}
_METHOD_KEYS = {'flagfile', 'flags', 'seeds', 'name'}
_REFERENCE_KEYS = {'root', 'seed', 'keep', 'flagfile', 'flags', 'runs'}
_REFERENCE_RUN_KEYS = {'flagfile', 'flags'}
_BASELINE_KEYS = {'file', 'frames', 'window', 'random_episodes',
                  'random_envs', 'seed'}
_REPORT_KEYS = {'metrics', 'aggregate', 'improvement_of', 'tables'}
_TABLE_KEYS = {'methods', 'table', 'figure', 'training_panel',
               'improvement_of'}


class StudyError(ValueError):
  """A study file (or a selection of it) that cannot be used; the message
  names the file and the key."""


class Run(NamedTuple):
  """One `clear.train` run of a study.

  Attributes:
    label: `<method>_s<seed>`, or a reference's task without its family.
    method: the method's key, or `REFERENCE_METHOD`.
    seed: its `--seed`.
    logdir: its logdir.
    flags: its `clear.train` flags, `--logdir` included (extra flags not).
    keep: where its kept scalars go when it finishes ('' for nowhere).
    task: a reference's task (e.g. 'minatar:Asterix'); '' for a method's.
  """
  label: str
  method: str
  seed: int
  logdir: str
  flags: Tuple[str, ...]
  keep: str
  task: str = ''


class Method(NamedTuple):
  key: str
  name: str
  flags: Tuple[str, ...]
  seeds: Tuple[int, ...]


class Baselines(NamedTuple):
  """Where the normalisation is read (or made from the references)."""
  file: str
  frames: Optional[int]
  window: int
  random_episodes: int
  random_envs: int
  seed: int


class Table(NamedTuple):
  """A table and figure of some methods; '' for one not asked for.
  `improvement_of`: the method its probabilities of improvement are of."""
  methods: Tuple[str, ...]
  table: str
  figure: str
  training_panel: bool = True
  improvement_of: str = ''


class Report(NamedTuple):
  metrics: str
  aggregate: str
  improvement_of: str
  tables: Tuple[Table, ...]


class Study(NamedTuple):
  """A parsed study file.

  Attributes:
    path: the file.
    root: the methods' logdirs' folder.
    methods: {key: Method}, in the file's order.
    references: the reference runs, in the file's order.
    runs: every run: the references first, then each method's seeds.
    cpus_per_run, gpus_per_run: what each run asks Ray for.
    baselines: a `Baselines`, or None.
    report: a `Report`.
  """
  path: str
  root: str
  methods: Dict[str, Method]
  references: Tuple[Run, ...]
  runs: Tuple[Run, ...]
  cpus_per_run: float
  gpus_per_run: float
  baselines: Optional[Baselines]
  report: Report

  def select(self, methods: Sequence[str] = (),
             seeds: Sequence[int] = ()) -> List[Run]:
    """The runs of `methods` (keys, or 'reference') and `seeds` (all when
    empty), in study order.

    Raises:
      StudyError: a method or seed the study does not have.
    """
    known = list(self.methods) + ([REFERENCE_METHOD] if self.references
                                  else [])
    for method in methods:
      if method not in known:
        raise StudyError(f'--methods: {self.path} has no method {method!r}; '
                         f'it has {", ".join(known)}.')
    all_seeds = sorted({run.seed for run in self.runs})
    for seed in seeds:
      if seed not in all_seeds:
        raise StudyError(f'--seeds: no run of {self.path} has seed {seed}; '
                         f'its seeds are {all_seeds}.')
    return [run for run in self.runs
            if (not methods or run.method in methods) and
            (not seeds or run.seed in seeds)]


def _fail(path: str, key: str, message: str):
  raise StudyError(f'{path}: {key}: {message}')


def _check_keys(path: str, where: str, table: dict, allowed: set):
  unknown = sorted(set(table) - allowed)
  if unknown:
    _fail(path, f'{where}{unknown[0]}',
          f'unknown key; allowed here: {", ".join(sorted(allowed))}.')


def _table(path: str, key: str, value) -> dict:
  if not isinstance(value, dict):
    _fail(path, key, f'must be a table, got {value!r}.')
  return value


def _int(path: str, key: str, value, minimum: int = 0) -> int:
  if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
    _fail(path, key, f'must be an integer >= {minimum}, got {value!r}.')
  return value


def _number(path: str, key: str, value) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)) or (
      value < 0):
    _fail(path, key, f'must be a number >= 0, got {value!r}.')
  return float(value)


def _bool(path: str, key: str, value) -> bool:
  if not isinstance(value, bool):
    _fail(path, key, f'must be true or false, got {value!r}.')
  return value


def _string(path: str, key: str, value, empty: bool = False) -> str:
  if not isinstance(value, str) or not (value or empty):
    _fail(path, key, f'must be a non-empty string, got {value!r}.')
  return value


def _seeds(path: str, key: str, value) -> Tuple[int, ...]:
  if not isinstance(value, list) or not value:
    _fail(path, key, f'must be a non-empty list of seeds, got {value!r}.')
  seeds = tuple(_int(path, key, seed) for seed in value)
  if len(set(seeds)) != len(seeds):
    _fail(path, key, f'names a seed twice: {list(seeds)}.')
  return seeds


def _file(path: str, key: str, value, must_exist: bool) -> str:
  """A path of the study file, made absolute from the file's folder."""
  value = os.path.expanduser(_string(path, key, value))
  full = os.path.normpath(os.path.join(os.path.dirname(path), value))
  if must_exist and not os.path.isfile(full):
    _fail(path, key, f'{full} does not exist.')
  return full


def _flags(path: str, where: str, table: dict) -> Tuple[str, ...]:
  """`--flagfile=...` (when given) and the `flags` list of `table`."""
  flags = []
  if 'flagfile' in table:
    flags.append('--flagfile=' + _file(path, where + 'flagfile',
                                       table['flagfile'], True))
  given = table.get('flags', [])
  if not isinstance(given, list):
    _fail(path, where + 'flags', f'must be a list of flags, got {given!r}.')
  for flag in given:
    if not isinstance(flag, str) or not flag.startswith('--'):
      _fail(path, where + 'flags',
            f'each flag is a string starting with --, got {flag!r}.')
    if flag.split('=', 1)[0] in ('--seed', '--logdir'):
      _fail(path, where + 'flags', f'{flag}: the study sets --seed and '
            '--logdir of each run itself.')
  return tuple(flags + given)


def _outputs_under(report: Report, folder: str) -> Report:
  """`report` with each output file moved into `folder`."""
  move = lambda f: os.path.join(folder, os.path.basename(f)) if f else ''
  return report._replace(
      metrics=move(report.metrics), aggregate=move(report.aggregate),
      tables=tuple(t._replace(table=move(t.table), figure=move(t.figure))
                   for t in report.tables))


def load(path: str, root: Optional[str] = None) -> Study:
  """Reads and checks the study file `path` (`root` replaces its root).

  Raises:
    StudyError: the file is missing or not TOML, or a key is missing, unknown
      or of the wrong kind (the message names the key).
  """
  path = os.path.abspath(os.path.expanduser(path))
  try:
    with open(path, 'rb') as f:
      data = tomllib.load(f)
  except FileNotFoundError:
    raise StudyError(f'{path}: no such study file.') from None
  except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
    raise StudyError(f'{path}: not a readable TOML file: {e}') from None
  _check_keys(path, '', data, _TOP_KEYS)
  if 'root' not in data:
    _fail(path, 'root', 'missing: the folder of the runs\' logdirs.')
  own_root = os.path.abspath(os.path.expanduser(_string(path, 'root',
                                                        data['root'])))
  root = own_root if root is None else os.path.abspath(
      os.path.expanduser(root))
  # Runs under another root (a smoke test, a copy) are not the study's: they
  # are not kept, the study's kept runs do not stand for them, and their
  # report goes to <root>/report.
  keeps = root == own_root
  seeds = _seeds(path, 'seeds', data['seeds']) if 'seeds' in data else None
  common = _flags(path, '', data)
  keep = (_file(path, 'keep', data['keep'], False)
          if 'keep' in data and keeps else '')

  methods = {}
  raw_methods = _table(path, 'methods', data.get('methods', {}))
  if not raw_methods:
    _fail(path, 'methods', 'missing: at least one [methods.<name>] table.')
  for key, raw in raw_methods.items():
    where = f'methods.{key}.'
    if not _NAME.fullmatch(key) or key == REFERENCE_METHOD:
      _fail(path, f'methods.{key}', 'a method key is letters, digits, '
            f'_ . - (and not {REFERENCE_METHOD!r}): it names logdirs.')
    raw = _table(path, f'methods.{key}', raw)
    _check_keys(path, where, raw, _METHOD_KEYS)
    if 'flagfile' not in raw and 'flags' not in raw:
      _fail(path, f'methods.{key}', 'give a flagfile, flags, or both.')
    method_seeds = (_seeds(path, where + 'seeds', raw['seeds'])
                    if 'seeds' in raw else seeds)
    if method_seeds is None:
      _fail(path, 'seeds', f'missing, and method {key!r} names no seeds.')
    name = _string(path, where + 'name', raw.get('name', key))
    methods[key] = Method(key, name, _flags(path, where, raw), method_seeds)

  references = []
  if 'references' in data:
    raw = _table(path, 'references', data['references'])
    _check_keys(path, 'references.', raw, _REFERENCE_KEYS)
    ref_root = os.path.abspath(os.path.expanduser(_string(
        path, 'references.root', raw.get('root', os.path.join(root,
                                                              'single')))))
    ref_seed = _int(path, 'references.seed', raw.get('seed', 0))
    ref_keep = (_file(path, 'references.keep', raw['keep'], False)
                if 'keep' in raw and keeps else '')
    ref_common = _flags(path, 'references.', raw)
    runs = _table(path, 'references.runs', raw.get('runs', {}))
    if not runs:
      _fail(path, 'references.runs', 'missing: one table per task, e.g. '
            '[references.runs."minatar:Asterix"].')
    for task, run in runs.items():
      where = f'references.runs."{task}".'
      label = task.split(':', 1)[-1]
      if not _NAME.fullmatch(label):
        _fail(path, where[:-1], f'{label!r} cannot name a logdir.')
      run = _table(path, where[:-1], run)
      _check_keys(path, where, run, _REFERENCE_RUN_KEYS)
      logdir = os.path.join(ref_root, label)
      references.append(Run(
          label, REFERENCE_METHOD, ref_seed, logdir,
          common + ref_common + _flags(path, where, run) +
          (f'--seed={ref_seed}', f'--logdir={logdir}'),
          os.path.join(ref_keep, label) if ref_keep else '', task))

  runs = list(references)
  for method in methods.values():
    for seed in method.seeds:
      label = f'{method.key}_s{seed}'
      logdir = os.path.join(root, label)
      runs.append(Run(label, method.key, seed, logdir,
                      common + method.flags + (f'--seed={seed}',
                                               f'--logdir={logdir}'),
                      os.path.join(keep, label) if keep else ''))
  logdirs = [run.logdir for run in runs]
  for run in runs:
    if logdirs.count(run.logdir) > 1:
      _fail(path, 'references.root', f'two runs share the logdir '
            f'{run.logdir}: give the references another root.')

  baselines = None
  if 'baselines' in data:
    raw = _table(path, 'baselines', data['baselines'])
    _check_keys(path, 'baselines.', raw, _BASELINE_KEYS)
    if 'file' not in raw:
      _fail(path, 'baselines.file', 'missing: the baselines JSON.')
    frames = (_int(path, 'baselines.frames', raw['frames'], 1)
              if 'frames' in raw else None)
    baselines = Baselines(
        _file(path, 'baselines.file', raw['file'], False), frames,
        _int(path, 'baselines.window', raw.get('window', 300_000)),
        _int(path, 'baselines.random_episodes',
             raw.get('random_episodes', 100), 1),
        _int(path, 'baselines.random_envs', raw.get('random_envs', 20), 1),
        _int(path, 'baselines.seed', raw.get('seed', 12345)))
    if not os.path.isfile(baselines.file) and (
        frames is None or not references):
      _fail(path, 'baselines.file', f'{baselines.file} does not exist, and '
            'the study cannot make it: that needs [references] runs and '
            'baselines.frames.')

  raw = _table(path, 'report', data.get('report', {}))
  _check_keys(path, 'report.', raw, _REPORT_KEYS)
  improvement_of = _string(path, 'report.improvement_of',
                           raw.get('improvement_of', next(iter(methods))))
  if improvement_of not in methods:
    _fail(path, 'report.improvement_of',
          f'{improvement_of!r} is not a method of the study.')
  tables = []
  raw_tables = raw.get('tables', [])
  if not isinstance(raw_tables, list):
    _fail(path, 'report.tables', 'must be an array of tables '
          '([[report.tables]]).')
  for i, table in enumerate(raw_tables):
    where = f'report.tables[{i}].'
    table = _table(path, where[:-1], table)
    _check_keys(path, where, table, _TABLE_KEYS)
    keys = table.get('methods', list(methods))
    if not isinstance(keys, list) or not keys:
      _fail(path, where + 'methods', 'must be a non-empty list of methods.')
    for key in keys:
      if key not in methods:
        _fail(path, where + 'methods', f'{key!r} is not a method of the '
              'study.')
    if 'table' not in table and 'figure' not in table:
      _fail(path, where[:-1], 'give a table, a figure, or both.')
    table_improvement_of = _string(path, where + 'improvement_of',
                                   table.get('improvement_of',
                                             improvement_of))
    if 'improvement_of' in table and table_improvement_of not in keys:
      _fail(path, where + 'improvement_of',
            f'{table_improvement_of!r} is not one of the table\'s methods.')
    tables.append(Table(
        tuple(keys),
        _file(path, where + 'table', table['table'], False)
        if 'table' in table else '',
        _file(path, where + 'figure', table['figure'], False)
        if 'figure' in table else '',
        _bool(path, where + 'training_panel',
              table.get('training_panel', True)), table_improvement_of))
  report = Report(
      _file(path, 'report.metrics', raw['metrics'], False)
      if 'metrics' in raw else '',
      _file(path, 'report.aggregate', raw['aggregate'], False)
      if 'aggregate' in raw else '',
      improvement_of, tuple(tables))

  if not keeps:  # Another root's report goes there, not over the study's.
    report = _outputs_under(report, os.path.join(root, 'report'))
    if baselines is not None and not os.path.isfile(baselines.file):
      baselines = baselines._replace(file=os.path.join(
          root, 'report', os.path.basename(baselines.file)))
  return Study(path, root, methods, tuple(references), tuple(runs),
               _number(path, 'cpus_per_run', data.get('cpus_per_run', 1)),
               _number(path, 'gpus_per_run', data.get('gpus_per_run', 0)),
               baselines, report)
