"""clear.study through the real command: a small study of CartPole ->
Acrobot runs, run in parallel, stopped with SIGINT and continued, with a
method whose flag is bad, its status table and its report (the aggregates
checked against values computed by hand from the runs' own metrics)."""

import json
import os
import re
import signal
import subprocess
import time

import numpy as np
import psutil
import pytest

from clear.study import report as report_lib
from clear.study import spec as spec_lib
from clear.study import state as state_lib
from clear.study import table as table_lib
from tests.study_files import ROOT
from tests.study_files import log_text
from tests.study_files import run_study
from tests.study_files import study_command
from tests.study_files import study_text
from tests.study_files import tree_digest
from tests.study_files import write_study

# --- The study file -------------------------------------------------------


def test_a_study_file_gives_each_run_its_flags_in_order(tmp_path):
  (tmp_path / 'flags').mkdir()
  (tmp_path / 'flags' / 'a.flags').write_text('--replay_proportion=0.5\n')
  (tmp_path / 'single.flags').write_text('--env=gym:CartPole-v1\n')
  path = write_study(tmp_path, '''
root = "runs/seq"
seeds = [0, 1]
flags = ["--frames_per_task=100"]
keep = "kept"
[methods.a]
flagfile = "flags/a.flags"
flags = ["--num_actors=1"]
name = "Method A"
[methods.b]
flags = ["--replay_proportion=0"]
seeds = [3]
[references]
root = "runs/single"
[references.runs."gym:CartPole-v1"]
flagfile = "single.flags"
''')
  # Under another root than the file's, runs are not kept: the study's kept
  # runs neither stand for them nor get replaced by them.
  elsewhere = spec_lib.load(path, root=str(tmp_path / 'elsewhere'))
  assert {r.keep for r in elsewhere.runs} == {''}
  assert elsewhere.report.metrics == ''  # The file names none.
  root = str(tmp_path / 'elsewhere')
  assert elsewhere.runs[1].flags[-1] == f'--logdir={root}/a_s0'
  study = spec_lib.load(path, root=os.path.join(os.getcwd(), 'runs/seq'))
  assert [r.label for r in study.runs] == ['CartPole-v1', 'a_s0', 'a_s1',
                                          'b_s3']
  reference, a0 = study.runs[0], study.runs[1]
  assert reference.method == 'reference' and reference.task == (
      'gym:CartPole-v1')
  assert reference.logdir == os.path.join(os.getcwd(), 'runs', 'single',
                                          'CartPole-v1')
  assert a0.flags == (
      '--frames_per_task=100', f'--flagfile={tmp_path}/flags/a.flags',
      '--num_actors=1', '--seed=0',
      f'--logdir={os.getcwd()}/runs/seq/a_s0')
  assert a0.keep == str(tmp_path / 'kept' / 'a_s0')
  assert study.methods['a'].name == 'Method A'
  assert [r.label for r in study.select(['b'])] == ['b_s3']
  assert [r.label for r in study.select(seeds=[1])] == ['a_s1']
  assert [r.label for r in study.select(['reference'])] == ['CartPole-v1']
  with pytest.raises(spec_lib.StudyError, match="no method 'c'"):
    study.select(['c'])
  with pytest.raises(spec_lib.StudyError, match='seeds are \\[0, 1, 3\\]'):
    study.select(seeds=[7])


def test_another_roots_report_goes_under_it(tmp_path):
  path = write_study(tmp_path, 'root = "runs"\nseeds = [0]\nkeep = "kept"\n'
                     '[methods.a]\nflags = []\n[report]\n'
                     'metrics = "m.json"\naggregate = "a.json"\n'
                     '[[report.tables]]\ntable = "t.md"\nfigure = "f.png"\n')
  own = spec_lib.load(path, root=os.path.join(os.getcwd(), 'runs'))
  assert own.report.metrics == str(tmp_path / 'm.json')
  assert own.runs[0].keep == str(tmp_path / 'kept' / 'a_s0')
  smoke = spec_lib.load(path, root=str(tmp_path / 'smoke'))
  report = tmp_path / 'smoke' / 'report'
  assert (smoke.report.metrics, smoke.report.aggregate) == (
      str(report / 'm.json'), str(report / 'a.json'))
  assert (smoke.report.tables[0].table, smoke.report.tables[0].figure) == (
      str(report / 't.md'), str(report / 'f.png'))
  assert smoke.runs[0].keep == ''


@pytest.mark.parametrize('text, key', [
    ('seeds = [0]\n[methods.a]\nflags = []\n', 'root'),
    ('root = "r"\n[methods.a]\nflags = []\n', 'seeds'),
    ('root = "r"\nseeds = [0]\n', 'methods'),
    ('root = "r"\nseeds = [0]\nbogus = 1\n[methods.a]\nflags = []\n',
     'bogus'),
    ('root = "r"\nseeds = [0, 0]\n[methods.a]\nflags = []\n', 'seeds'),
    ('root = "r"\nseeds = ["x"]\n[methods.a]\nflags = []\n', 'seeds'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflagfile = "none.flags"\n',
     'methods.a.flagfile'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = ["x=1"]\n',
     'methods.a.flags'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = ["--seed=3"]\n',
     'methods.a.flags'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nname = "A"\n', 'methods.a'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = []\nseed = 1\n',
     'methods.a.seed'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = []\n'
     '[baselines]\nfile = "missing.json"\n', 'baselines.file'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = []\n'
     '[report]\nimprovement_of = "b"\n', 'report.improvement_of'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = []\n[methods.b]\n'
     'flags = []\n[[report.tables]]\nmethods = ["a"]\ntable = "t.md"\n'
     'improvement_of = "b"\n', 'report.tables[0].improvement_of'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = []\n'
     '[[report.tables]]\nmethods = ["b"]\ntable = "t.md"\n',
     'report.tables[0].methods'),
    ('root = "r"\nseeds = [0]\n[methods.a]\nflags = []\n'
     '[[report.tables]]\ntable = "t.md"\ntraining_panel = 1\n',
     'report.tables[0].training_panel'),
    ('root = "r"\nseeds = [0\n', 'not a readable TOML file'),
])
def test_a_bad_study_file_is_one_error_naming_the_key(tmp_path, text, key):
  path = write_study(tmp_path, text)
  with pytest.raises(spec_lib.StudyError) as error:
    spec_lib.load(path)
  assert str(error.value).startswith(f'{path}: ')
  assert key in str(error.value)


def test_a_bad_study_file_through_the_command_changes_nothing(tmp_path):
  path = write_study(tmp_path, 'root = "runs"\nseeds = [0]\n'
                     '[methods.a]\nflags = ["--seed=1"]\n')
  before = tree_digest(tmp_path)
  result = run_study(tmp_path, 'run', path, timeout=120)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [
      f'clear.study: {path}: methods.a.flags: --seed=1: the study sets '
      '--seed and --logdir of each run itself.']
  assert tree_digest(tmp_path) == before
  result = run_study(tmp_path, 'run', timeout=120)
  assert result.returncode == 2 and 'give a command and a study file' in (
      result.stderr)


# --- State ----------------------------------------------------------------


def test_progress_and_errors_are_read_from_a_runs_log(tmp_path):
  path = write_study(tmp_path, study_text(100, {'a': []}, seeds='[0]'))
  run = spec_lib.load(path, root=str(tmp_path / 'runs')).runs[0]
  assert state_lib.status(run).state == state_lib.PENDING
  os.makedirs(state_lib.state_dir(run))
  with open(state_lib.log_path(run), 'w') as f:
    f.write('I1205 [main] frames 1,000/8,000 (12.5%) | 900 env fps | 3.0 '
            'updates/s | lag 1.0 | return n/a (last 0) | ETA 0m07s\n'
            'I1205 [main] frames 4,000/8,000 (50.0%) | 900 env fps | 3.0 '
            'updates/s | lag 1.0 | return 21.5 (last 40) | ETA 1h02m\n'
            'Traceback (most recent call last):\n'
            'ValueError: something broke\n')
  assert state_lib.progress(run) == state_lib.Progress(4000, 8000, 21.5,
                                                       '1h02m')
  state_lib.record_exit(run, 1, time.time())
  status = state_lib.status(run)
  assert (status.state, status.error) == (state_lib.FAILED,
                                          'ValueError: something broke')
  assert table_lib.row(status) == ('a_s0', 'failed', '4,000/8,000', '21.5',
                                   '', 'ValueError: something broke')
  state_lib.record_exit(run, 130, time.time())
  assert state_lib.status(run).state == state_lib.STOPPED
  state_lib.record_exit(run, 0, time.time())
  assert state_lib.status(run).state == state_lib.PENDING  # No logdir.
  os.makedirs(run.logdir)  # A logdir without event files yet.
  assert state_lib.status(run).state == state_lib.FINISHED
  os.remove(state_lib.log_path(run))
  assert state_lib.progress(run) == state_lib.NO_PROGRESS


# --- Runs -----------------------------------------------------------------


@pytest.mark.slow  # Six runs and a report: about two minutes on 2 cores.
def test_a_study_runs_in_parallel_marks_a_bad_method_failed_and_reports(
    tmp_path):
  path = write_study(tmp_path, study_text(
      1500, {'clear': ['--replay_proportion=0.5'],
             'impala': ['--replay_proportion=0'],
             'broken': ['--no_such_flag=1']}))
  result = run_study(tmp_path, 'run', path, '--parallel=2',
                     '--progress_interval_s=5')
  output = result.stdout
  assert result.returncode == 1, output + result.stderr[-3000:]
  assert re.search(r'2 run\(s\) failed: broken_s0, broken_s1', output)
  for label in ('clear_s0', 'clear_s1', 'impala_s0', 'impala_s1'):
    assert f'{label}: finished' in output
    logdir = tmp_path / 'runs' / label
    assert (logdir / 'checkpoints' / 'checkpoint').exists()
    header = log_text(tmp_path, label).splitlines()[1]
    assert header.endswith(f'--seed={label[-1]} --logdir={logdir}'), header
    # Kept as soon as it finished.
    assert (tmp_path / 'kept' / label / 'run.json').exists()
  assert not (tmp_path / 'runs' / 'broken_s0').exists()
  assert 'no_such_flag' in log_text(tmp_path, 'broken_s0')

  status = run_study(tmp_path, 'status', path, timeout=120)
  assert status.returncode == 0, status.stderr
  rows = {line.split()[0]: line for line in status.stdout.splitlines()[1:-1]}
  assert rows['clear_s0'].split()[1] == 'finished'
  assert re.search(r'clear_s0 +finished +3,\d{3}/3,000', rows['clear_s0'])
  assert rows['broken_s1'].split()[1] == 'failed'
  assert 'no_such_flag' in rows['broken_s1']
  assert status.stdout.splitlines()[-1] == '6 runs: 4 finished, 2 failed'

  # The report, normalised by hand-made baselines.
  baselines = {'notes': [], 'tasks': {
      'gym:CartPole-v1': {'low': 20.0, 'high': 200.0, 'curve': []},
      'gym:Acrobot-v1': {'low': -500.0, 'high': -100.0, 'curve': []}}}
  (tmp_path / 'baselines.json').write_text(json.dumps(baselines))
  with open(path, 'a') as f:
    f.write('[baselines]\nfile = "baselines.json"\n'
            '[report]\nmetrics = "out/metrics.json"\n'
            'aggregate = "out/aggregate.json"\n'
            '[[report.tables]]\nmethods = ["clear", "impala"]\n'
            'table = "out/table.md"\nfigure = "out/figure.png"\n'
            '[[report.tables]]\nmethods = ["clear", "impala"]\n'
            'table = "out/of_impala.md"\nimprovement_of = "impala"\n')
  report = run_study(tmp_path, 'report', path, '--methods=clear,impala',
                     timeout=300)
  assert report.returncode == 0, report.stderr[-3000:]
  metrics = json.loads((tmp_path / 'out' / 'metrics.json').read_text())
  assert sorted(metrics) == ['clear_s0', 'clear_s1', 'impala_s0',
                             'impala_s1']
  aggregate = json.loads((tmp_path / 'out' / 'aggregate.json').read_text())
  tasks = ['gym:CartPole-v1', 'gym:Acrobot-v1']
  for method in ('clear', 'impala'):
    finals = sorted(metrics[f'{method}_s{seed}']['per_task'][task][
        'normalized_final_return'] for seed in (0, 1) for task in tasks)
    # Four (run, task) values: the interquartile mean is the mean of the
    # middle two.
    iqm = aggregate['methods'][method]['final_return']
    assert iqm['iqm'] == pytest.approx((finals[1] + finals[2]) / 2)
    assert iqm['low'] <= iqm['iqm'] <= iqm['high']
    aucs = [metrics[f'{method}_s{seed}']['average_normalized_return_auc']
            for seed in (0, 1)]
    assert aggregate['methods'][method]['return_auc']['iqm'] == (
        pytest.approx(np.mean(aucs)))
  # P(clear > impala) per task, averaged over the tasks (ties count half).
  expected = []
  for task in tasks:
    x = [metrics[f'clear_s{s}']['per_task'][task]['normalized_final_return']
         for s in (0, 1)]
    y = [metrics[f'impala_s{s}']['per_task'][task]['normalized_final_return']
         for s in (0, 1)]
    expected.append(np.mean([(a > b) + 0.5 * (a == b) for a in x for b in y]))
  improvement = aggregate['probability_of_improvement']['impala']
  assert improvement['final_return']['probability'] == pytest.approx(
      np.mean(expected))
  table = (tmp_path / 'out' / 'table.md').read_text()
  assert table.startswith('| method | seeds | normalised final return')
  assert '| clear | 2 |' in table and 'IQM final return' in table
  # A table with its own improvement_of: P(impala > clear), the complement
  # since ties count half.
  own = aggregate['tables']['of_impala.md']
  assert own['improvement_of'] == 'impala'
  assert own['probability_of_improvement']['clear']['final_return'][
      'probability'] == pytest.approx(1 - np.mean(expected))
  assert 'P(impala higher final return)' in (
      tmp_path / 'out' / 'of_impala.md').read_text()
  assert 'P(clear higher final return)' in table
  assert (tmp_path / 'out' / 'figure.png').stat().st_size > 0


def test_a_run_stopped_while_it_starts_up_stops_too(tmp_path):
  # The study runs in the background (SIGINT ignored, as a shell starts a
  # background job) and is stopped the moment its run starts, while the
  # run's Python still imports: the run must not inherit the ignored SIGINT
  # and train on (its 20M frames would take an hour).
  path = write_study(tmp_path, study_text(
      10_000_000, {'a': ['--replay_proportion=0']}, seeds='[0]'))
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  process = subprocess.Popen(
      study_command('run', path, '--parallel=1'), cwd=str(tmp_path), env=env,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
  lines = []
  for line in process.stdout:
    lines.append(line)
    if 'a_s0: started' in line:
      break
  # The run's process has started: its Python is loading TensorFlow.
  deadline = time.time() + 120
  while time.time() < deadline:
    try:
      if '=== clear.study: a_s0 starts' in log_text(tmp_path, 'a_s0'):
        break
    except FileNotFoundError:
      pass
    time.sleep(0.05)
  process.send_signal(signal.SIGTERM)
  sent = time.time()
  rest, _ = process.communicate(timeout=300)
  output = ''.join(lines) + rest
  assert process.returncode == 130, output
  assert time.time() - sent < 120, output
  log = log_text(tmp_path, 'a_s0')
  if 'Interrupted before the run started' in log:
    assert 'a_s0: stopped before it started, nothing written' in output
  else:  # It got past its imports first, and wrote its checkpoint.
    assert 'Signal 2: stopping' in log, log[-3000:]
    assert 'a_s0: stopped with its final checkpoint' in output
  logdir = f'--logdir={tmp_path / "runs" / "a_s0"}'
  assert not [p for p in psutil.process_iter(['cmdline'])
              if logdir in (p.info['cmdline'] or [])]


@pytest.mark.slow  # Three runs of the binary: about 90 s on 2 cores.
def test_a_study_stopped_with_sigint_continues_where_it_stopped(tmp_path):
  path = write_study(tmp_path, study_text(
      15_000, {'a': ['--replay_proportion=0']}, seeds='[0, 1, 2]'))
  # a_s0 short, so it finishes before the stop; the others are long.
  with open(path) as f:
    text = f.read()
  text = text.replace('[methods.a]', '[methods.quick]\nflags = '
                      '["--frames_per_task=1000"]\nseeds = [0]\n'
                      '[methods.a]')
  with open(path, 'w') as f:
    f.write(text)
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  # Started as a shell starts a background job: with SIGINT ignored. The
  # study stops on SIGTERM, as on Ctrl-C.
  process = subprocess.Popen(
      study_command('run', path, '--parallel=1'), cwd=str(tmp_path), env=env,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
  lines = []
  stopped = False
  deadline = time.time() + 400
  for line in process.stdout:
    lines.append(line)
    if 'a_s0: started' in line:
      break
  # Stop once a_s0 has trained a little.
  while time.time() < deadline:
    try:
      if re.search(r'frames [1-9][\d,]*/', log_text(tmp_path, 'a_s0')):
        # The run trains at the study's own priority (Ray's workers run at
        # nice 15 unless told).
        logdir = f'--logdir={tmp_path / "runs" / "a_s0"}'
        runs = [p for p in psutil.process_iter(['cmdline', 'nice'])
                if logdir in (p.info['cmdline'] or [])]
        assert [p.info['nice'] for p in runs] == [
            os.getpriority(os.PRIO_PROCESS, 0)]
        process.send_signal(signal.SIGTERM)
        stopped = True
        break
    except FileNotFoundError:
      pass
    time.sleep(0.5)
  assert stopped, ''.join(lines)
  rest, _ = process.communicate(timeout=300)
  output = ''.join(lines) + rest
  assert process.returncode == 130, output
  assert 'quick_s0: finished' in output
  assert 'a_s0: stopped with its final checkpoint' in output
  assert 'a_s1: started' not in output
  study = spec_lib.load(path, root=str(tmp_path / 'runs'))
  states = {r.label: state_lib.status(r).state for r in study.runs}
  assert states == {'quick_s0': 'finished', 'a_s0': 'stopped',
                    'a_s1': 'pending', 'a_s2': 'pending'}
  quick = tree_digest(tmp_path / 'runs' / 'quick_s0')

  result = run_study(tmp_path, 'run', path, '--seeds=0', timeout=600)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  assert 'quick_s0: started' not in result.stdout
  assert tree_digest(tmp_path / 'runs' / 'quick_s0') == quick
  log = log_text(tmp_path, 'a_s0')
  assert log.count('=== clear.study: a_s0 starts') == 2
  assert 'Resuming at' in log.split('=== clear.study: a_s0 starts')[2]
  assert log_text(tmp_path, 'quick_s0').count('=== clear.study') == 1
  states = {r.label: state_lib.status(r).state for r in study.runs}
  assert states['a_s0'] == 'finished' and states['a_s1'] == 'pending'


def test_a_run_without_every_score_is_left_out_of_the_aggregates():
  # A run that has just started has NaN scores: the aggregates leave it
  # out and say so, rather than fail on a partial matrix.
  class Run:  # A test fake: the two fields the report reads of a run.
    def __init__(self, label, method):
      self.label, self.method = label, method

  def metrics(final):
    per_task = {task: {'normalized_final_return': final,
                       'normalized_forgetting_per_visit': 0.1}
                for task in ('a', 'b')}
    return {'tasks': ['a', 'b'], 'per_task': per_task,
            'average_normalized_final_return': final,
            'average_normalized_return_auc': 0.3}

  loaded = [(Run('x_s0', 'x'), None), (Run('x_s1', 'x'), None),
            (Run('y_s0', 'y'), None)]
  found = {'x_s0': metrics(0.5), 'x_s1': metrics(float('nan')),
           'y_s0': metrics(0.2)}
  said = []
  assert report_lib.aggregated_labels(loaded, found, said.append) == {
      'x': ['x_s0'], 'y': ['y_s0']}
  assert said == ['x_s1: left out of the aggregate statistics: not every '
                  'task has a score yet.']
  assert report_lib.has_every_score(metrics(0.0))
  assert not report_lib.has_every_score(metrics(None))


def test_a_figure_leaves_out_a_methods_partial_runs_beside_finished_ones():
  # A method's mean curve spans only the frames all its runs reached, so a
  # run under way would cut its finished seeds' curves short.
  class Run:  # A test fake: the two fields the report reads of a run.
    def __init__(self, label, method):
      self.label, self.method = label, method

  chosen = [(Run('x_s0', 'x'), 'x0'), (Run('x_s1', 'x'), 'x1'),
            (Run('y_s0', 'y'), 'y0')]
  said = []
  drawn = report_lib.figure_runs(chosen, ['x_s1', 'y_s0'], 'f.png',
                                 said.append)
  # y has no finished run: its partial one is drawn.
  assert [plotted for _, plotted in drawn] == ['x0', 'y0']
  assert said == ['f.png: left out the partial runs x_s1 (their methods '
                  'have finished runs).']
  said.clear()
  assert report_lib.figure_runs(chosen, [], 'f.png', said.append) == chosen
  assert said == []
