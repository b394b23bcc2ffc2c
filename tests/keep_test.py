"""Tests for clear.analysis.keep: the small copy of a run reads back as the
run's own scalars, through the same reader clear.plot uses, and is written
whole or not at all."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from clear.analysis import events
from clear.analysis import keep


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


def _contents(folder):
  """{relative path: bytes} of every file under `folder`."""
  found = {}
  for parent, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(parent, name)
      with open(path, 'rb') as f:
        found[os.path.relpath(path, folder)] = f.read()
  return found


def test_the_kept_scalars_read_back_as_the_original(tmp_path):
  _run(tmp_path / 'run')
  kept = keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'),
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
  names = sorted(os.listdir(tmp_path / 'kept'))
  assert names[0].startswith(keep.EVENT_FILE_PREFIX)
  assert names[1:] == ['run.json', 'tasks.json']
  # Nothing is left beside it.
  assert sorted(os.listdir(tmp_path)) == ['kept', 'run']


def test_the_kept_event_file_is_read_by_tensorflow_too(tmp_path):
  _run(tmp_path / 'run')
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['runtime/'])
  path, = [os.path.join(tmp_path / 'kept', name)
           for name in os.listdir(tmp_path / 'kept')
           if name.startswith(keep.EVENT_FILE_PREFIX)]
  # TensorFlow's reader checks the records' CRCs.
  values = [value.simple_value
            for event in tf.compat.v1.train.summary_iterator(path)
            for value in event.summary.value]
  np.testing.assert_allclose(values, [step / 3 for step in range(0, 1000,
                                                                  100)],
                             rtol=1e-6)


def test_a_resumed_run_is_kept_with_one_point_a_step(tmp_path):
  logdir = tmp_path / 'run'
  # The first sitting logs steps 0-300 and stops at 300; the second resumes
  # from its checkpoint at 300 and logs 300 again, then 400.
  for suffix, steps, offset in (('a', (0, 100, 200, 300), 0.0),
                                ('b', (300, 400), 50.0)):
    writer = tf.summary.create_file_writer(str(logdir), filename_suffix=suffix)
    with writer.as_default():
      for step in steps:
        tf.summary.scalar('runtime/run_time_s', step / 3 + offset, step=step)
    writer.close()
  assert keep.keep(str(logdir), str(tmp_path / 'kept'), ['runtime/']) == 5
  path, = [os.path.join(tmp_path / 'kept', name)
           for name in os.listdir(tmp_path / 'kept')
           if name.startswith(keep.EVENT_FILE_PREFIX)]
  points = [(event.step, value.simple_value)
            for event in tf.compat.v1.train.summary_iterator(path)
            for value in event.summary.value]
  np.testing.assert_allclose(points, [(0, 0.0), (100, 100 / 3),
                                      (200, 200 / 3), (300, 150.0),
                                      (400, 400 / 3 + 50)], rtol=1e-6)


def test_the_default_tags_are_what_a_results_page_reports(tmp_path):
  _run(tmp_path / 'run')
  writer = tf.summary.create_file_writer(str(tmp_path / 'run' / 'more'))
  with writer.as_default():
    tf.summary.scalar('runtime/eval_wait_s', 12.5, step=100)
    tf.summary.scalar('runtime/actor_restarts', 0, step=100)
  writer.close()
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'))
  # Evaluations with their intervals, the clock, the wait for evaluations
  # and the replay's bytes; not the losses, the other runtime counters or
  # the replay's fill.
  assert sorted(events.read_scalars(str(tmp_path / 'kept'))) == [
      'eval/gym:CartPole-v1/return', 'eval/gym:CartPole-v1/return_ci95',
      'replay/bytes', 'runtime/eval_wait_s', 'runtime/run_time_s']


def test_an_earlier_copy_is_replaced(tmp_path):
  _run(tmp_path / 'run')
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['eval/'])
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['replay/'])
  assert sorted(events.read_scalars(str(tmp_path / 'kept'))) == [
      'replay/bytes', 'replay/size']
  assert len([name for name in os.listdir(tmp_path / 'kept')
              if name.startswith(keep.EVENT_FILE_PREFIX)]) == 1
  assert sorted(os.listdir(tmp_path)) == ['kept', 'run']


def test_a_folder_it_did_not_write_is_refused_and_left_unchanged(tmp_path):
  _run(tmp_path / 'run')
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['eval/'])
  (tmp_path / 'kept' / 'notes.txt').write_text('mine')
  before = _contents(tmp_path / 'kept')
  with pytest.raises(ValueError, match=r'--out=.*kept holds notes\.txt'):
    keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['replay/'])
  assert _contents(tmp_path / 'kept') == before
  assert sorted(os.listdir(tmp_path)) == ['kept', 'run']


def test_a_sub_folder_is_not_its_own(tmp_path):
  _run(tmp_path / 'run')
  os.makedirs(tmp_path / 'kept' / 'run.json')
  with pytest.raises(ValueError, match='holds run.json'):
    keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'))
  assert os.listdir(tmp_path / 'kept' / 'run.json') == []


def test_a_failing_write_leaves_no_output_and_no_temporary_folder(
    tmp_path, monkeypatch):
  _run(tmp_path / 'run')

  def copy_fails(src, dst):
    del src, dst
    raise OSError('disk full')

  monkeypatch.setattr(keep.shutil, 'copyfile', copy_fails)
  with pytest.raises(OSError, match='disk full'):
    keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'))
  assert sorted(os.listdir(tmp_path)) == ['run']


def test_a_failing_write_keeps_the_earlier_copy(tmp_path, monkeypatch):
  _run(tmp_path / 'run')
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['eval/'])
  before = _contents(tmp_path / 'kept')

  def write_fails(out, scalars):
    del scalars
    with open(os.path.join(out, keep.EVENT_FILE_PREFIX + 'half'), 'wb') as f:
      f.write(b'\0')
    raise OSError('disk full')

  monkeypatch.setattr(keep, 'write_scalars', write_fails)
  with pytest.raises(OSError, match='disk full'):
    keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['replay/'])
  assert _contents(tmp_path / 'kept') == before
  assert sorted(os.listdir(tmp_path)) == ['kept', 'run']


def test_a_temporary_folder_left_by_an_interrupted_call_is_cleared(
    tmp_path):
  _run(tmp_path / 'run')
  os.makedirs(tmp_path / 'kept.tmp')
  (tmp_path / 'kept.tmp' / 'run.json').write_text('{}')
  keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['eval/'])
  assert sorted(os.listdir(tmp_path)) == ['kept', 'run']
  # One that holds something else is not its own: refused, untouched.
  (tmp_path / 'kept.tmp').mkdir()
  (tmp_path / 'kept.tmp' / 'notes.txt').write_text('mine')
  with pytest.raises(ValueError, match='kept.tmp .*holds notes.txt'):
    keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['eval/'])
  assert os.listdir(tmp_path / 'kept.tmp') == ['notes.txt']


def test_a_run_without_the_tags_is_refused(tmp_path):
  _run(tmp_path / 'run')
  with pytest.raises(ValueError, match='no scalar tag starts with'):
    keep.keep(str(tmp_path / 'run'), str(tmp_path / 'kept'), ['nope/'])
  assert not os.path.exists(tmp_path / 'kept')
