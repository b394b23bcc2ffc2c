"""Tests for results/keep_scalars.py: the small copy of a run reads back as
the run's own scalars, through the same reader clear.plot uses."""

import functools
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from clear.analysis import events

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'results', 'keep_scalars.py')


@functools.lru_cache(maxsize=None)
def _module():
  spec = importlib.util.spec_from_file_location('keep_scalars', SCRIPT)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _run(logdir):
  """A logdir with eval, runtime and loss scalars and two JSON files."""
  writer = tf.summary.create_file_writer(str(logdir))
  with writer.as_default():
    for step in range(0, 1000, 100):
      tf.summary.scalar('eval/gym:CartPole-v1/return', step / 7, step=step)
      tf.summary.scalar('eval/gym:CartPole-v1/return_ci95', 1.5, step=step)
      tf.summary.scalar('runtime/run_time_s', step / 3, step=step)
      tf.summary.scalar('replay/bytes', 1e6, step=step)
      tf.summary.scalar('replay/size', step, step=step)
      tf.summary.scalar('loss/total', -step, step=step)
  writer.close()
  for name in ('run.json', 'tasks.json'):
    with open(os.path.join(logdir, name), 'w') as f:
      json.dump({'name': name}, f)


def _keep_with_the_script(tmp_path):
  """Runs the script on tmp_path/run into tmp_path/kept (default tags)."""
  return subprocess.run(
      [sys.executable, SCRIPT, f'--logdir={tmp_path / "run"}',
       f'--out={tmp_path / "kept"}'], capture_output=True, text=True,
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))


def test_the_kept_scalars_read_back_as_the_original(tmp_path):
  _run(tmp_path / 'run')
  kept = _module().keep(str(tmp_path / 'run'), str(tmp_path / 'kept'),
                        ['eval/', 'runtime/'])
  original = events.read_scalars(str(tmp_path / 'run'))
  copy = events.read_scalars(str(tmp_path / 'kept'))
  assert sorted(copy) == ['eval/gym:CartPole-v1/return',
                          'eval/gym:CartPole-v1/return_ci95',
                          'runtime/run_time_s']
  assert kept == 30
  for tag, series in copy.items():
    np.testing.assert_array_equal(series.steps, original[tag].steps)
    np.testing.assert_allclose(series.values, original[tag].values,
                               rtol=1e-6)
    np.testing.assert_array_equal(series.wall_times, original[tag].wall_times)
  assert sorted(os.listdir(tmp_path / 'kept'))[1:] == ['run.json',
                                                       'tasks.json']


def test_the_default_tags_are_what_a_results_page_reports(tmp_path):
  _run(tmp_path / 'run')
  result = _keep_with_the_script(tmp_path)
  assert result.returncode == 0, result.stderr
  # Evaluations with their intervals, the clock and the replay's bytes; not
  # the losses or the replay's fill.
  assert sorted(events.read_scalars(str(tmp_path / 'kept'))) == [
      'eval/gym:CartPole-v1/return', 'eval/gym:CartPole-v1/return_ci95',
      'replay/bytes', 'runtime/run_time_s']


def test_a_folder_it_did_not_write_is_refused(tmp_path):
  _run(tmp_path / 'run')
  os.makedirs(tmp_path / 'kept')
  (tmp_path / 'kept' / 'notes.txt').write_text('mine')
  result = _keep_with_the_script(tmp_path)
  assert result.returncode == 2
  assert 'notes.txt' in result.stderr and 'Traceback' not in result.stderr
  assert os.listdir(tmp_path / 'kept') == ['notes.txt']


def test_a_run_without_the_tags_is_refused(tmp_path):
  _run(tmp_path / 'run')
  with pytest.raises(ValueError, match='no scalar tag starts with'):
    _module().keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['nope/'])
