"""Tests of clear.checkpoint: fallback past unreadable checkpoints, run.json."""

import gc
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from clear import checkpoint as checkpoint_lib


def make_checkpointer(directory, value=0.0, shape=(3, 2)):
  weights = tf.Variable(tf.fill(shape, value), name='weights')
  return checkpoint_lib.Checkpointer(directory, {'weights': weights}), weights


def save_three(directory):
  """Checkpoints 1, 2 and 3 holding weights 1, 2 and 3, each with a
  state-N folder beside it as the run loop writes; returns their paths."""
  checkpointer, weights = make_checkpointer(directory)
  paths = []
  for value in (1.0, 2.0, 3.0):
    weights.assign(tf.fill(weights.shape, value))
    number = checkpointer.next_number
    os.makedirs(checkpoint_lib.state_dir(directory, number))
    paths.append(checkpointer.save())
  return paths


def data_file(path):
  return path + '.data-00000-of-00001'


def truncate(path):
  with open(data_file(path), 'r+b') as f:
    f.truncate(os.path.getsize(data_file(path)) // 2)


def test_candidates_are_the_latest_then_every_other_by_number(tmp_path):
  directory = str(tmp_path)
  paths = save_three(directory)
  assert checkpoint_lib.checkpoint_candidates(directory) == paths[::-1]
  # A damaged index file hides none of them; nor does a data file whose
  # index is missing (a checkpoint 4 killed mid-write), which comes after
  # the latest the index file names.
  with open(data_file(os.path.join(directory, 'ckpt-4')), 'wb') as f:
    f.write(b'partial')
  assert checkpoint_lib.checkpoint_candidates(directory)[:2] == [
      paths[2], os.path.join(directory, 'ckpt-4')]
  with open(os.path.join(directory, 'checkpoint'), 'w') as f:
    f.write('this is { not a checkpoint state')
  assert checkpoint_lib.checkpoint_candidates(directory) == [
      os.path.join(directory, 'ckpt-4')] + paths[::-1]
  assert checkpoint_lib.checkpoint_candidates(str(tmp_path / 'none')) == []


def test_unreadable_reason_finds_truncated_damaged_and_missing_files(
    tmp_path):
  paths = save_three(str(tmp_path))
  assert checkpoint_lib.unreadable_reason(paths[0]) is None
  truncate(paths[2])
  assert 'IndexError' in checkpoint_lib.unreadable_reason(paths[2])
  with open(data_file(paths[1]), 'r+b') as f:  # Same size, other bytes.
    data = bytearray(f.read())
    for i in range(0, len(data), 7):
      data[i] ^= 0xFF
    f.seek(0)
    f.write(bytes(data))
  assert checkpoint_lib.unreadable_reason(paths[1]) is not None
  os.remove(paths[0] + '.index')
  assert checkpoint_lib.unreadable_reason(paths[0]) == (
      'ckpt-1.index is missing')


def test_restore_falls_back_to_the_newest_readable_one_and_says_so(
    tmp_path, caplog):
  directory = str(tmp_path)
  paths = save_three(directory)
  truncate(paths[2])
  checkpointer, weights = make_checkpointer(directory)
  with caplog.at_level(logging.WARNING):
    assert checkpointer.restore_latest() == paths[1]
  np.testing.assert_array_equal(weights.numpy(), np.full((3, 2), 2.0))
  warnings = [r.getMessage() for r in caplog.records
              if r.levelno == logging.WARNING]
  assert len(warnings) == 1
  assert 'ckpt-3 (with state-3)' in warnings[0]
  assert 'IndexError' in warnings[0]
  assert 'Restoring ckpt-2 (with state-2)' in warnings[0]
  # The next save takes number 3 and writes over the bad files.
  assert checkpointer.next_number == 3
  weights.assign(tf.fill(weights.shape, 5.0))
  assert checkpointer.save() == paths[2]
  assert checkpoint_lib.unreadable_reason(paths[2]) is None
  fresh, restored = make_checkpointer(directory)
  assert fresh.restore_latest() == paths[2]
  np.testing.assert_array_equal(restored.numpy(), np.full((3, 2), 5.0))


def test_a_missing_index_falls_back_too(tmp_path):
  directory = str(tmp_path)
  paths = save_three(directory)
  os.remove(paths[2] + '.index')
  os.remove(paths[1] + '.index')
  checkpointer, weights = make_checkpointer(directory)
  assert checkpointer.restore_latest() == paths[0]
  np.testing.assert_array_equal(weights.numpy(), np.full((3, 2), 1.0))


def test_no_readable_checkpoint_is_one_error_that_says_what_to_do(tmp_path):
  directory = str(tmp_path)
  paths = save_three(directory)
  for path in paths[1:]:
    truncate(path)
  os.remove(paths[0] + '.index')
  checkpointer, _ = make_checkpointer(directory)
  with pytest.raises(checkpoint_lib.CheckpointError) as error:
    checkpointer.restore_latest()
  message = str(error.value)
  for name in ('ckpt-3 (with state-3)', 'ckpt-2 (with state-2)',
               'ckpt-1.index is missing', 'backup', '--logdir'):
    assert name in message, message
  with pytest.raises(checkpoint_lib.CheckpointError, match='backup'):
    checkpoint_lib.restore_part(directory, {'weights': tf.Variable(
        tf.zeros((3, 2)))})


def test_a_fresh_directory_restores_nothing(tmp_path):
  checkpointer, _ = make_checkpointer(str(tmp_path / 'new'))
  assert checkpointer.restore_latest() is None
  with pytest.raises(checkpoint_lib.CheckpointError, match='train first'):
    checkpoint_lib.restore_part(str(tmp_path / 'new'),
                                {'weights': tf.Variable(tf.zeros((3, 2)))})


def test_restore_part_falls_back_in_a_folder_but_not_for_a_named_one(
    tmp_path):
  logdir = tmp_path / 'run'
  directory = str(logdir / 'checkpoints')
  paths = save_three(directory)
  truncate(paths[2])
  weights = tf.Variable(tf.zeros((3, 2)))
  assert checkpoint_lib.restore_part(str(logdir),
                                     {'weights': weights}) == paths[1]
  np.testing.assert_array_equal(weights.numpy(), np.full((3, 2), 2.0))
  with pytest.raises(checkpoint_lib.CheckpointError, match='IndexError'):
    checkpoint_lib.restore_part(paths[2], {'weights': weights})


def test_another_network_fails_without_tensorflows_list_of_values(tmp_path):
  directory = str(tmp_path)
  save_three(directory)
  seen = []
  handler = logging.Handler()
  handler.emit = lambda record: seen.append(record.getMessage())
  tf.get_logger().addHandler(handler)
  try:
    with pytest.raises(checkpoint_lib.CheckpointError,
                       match='different network'):
      checkpoint_lib.restore_part(directory, {'weights': tf.Variable(
          tf.zeros((5, 2)))})
    gc.collect()  # The failed restore's leftovers report when collected.
  finally:
    tf.get_logger().removeHandler(handler)
  assert not [m for m in seen if 'could not be found' in m], seen


def test_read_run_identity_finds_run_json_from_any_checkpoint_location(
    tmp_path):
  logdir = tmp_path / 'run'
  identity = {'env': 'gym:CartPole-v0', 'core_size': 16}
  checkpoint_lib.check_run_identity(str(logdir), identity)
  paths = save_three(str(logdir / 'checkpoints'))
  for location in (str(logdir), str(logdir / 'checkpoints'), paths[1]):
    assert checkpoint_lib.read_run_identity(location) == identity
  assert checkpoint_lib.read_run_identity(str(tmp_path / 'other')) is None
  with open(logdir / 'run.json', 'w') as f:
    f.write('{"env": ')
  with pytest.raises(checkpoint_lib.CheckpointError, match='unreadable'):
    checkpoint_lib.read_run_identity(str(logdir))
  with open(logdir / 'run.json', 'w') as f:
    json.dump(['not', 'an', 'object'], f)
  with pytest.raises(checkpoint_lib.CheckpointError, match='JSON object'):
    checkpoint_lib.read_run_identity(str(logdir))


def test_verifying_a_run_identity_writes_nothing(tmp_path):
  logdir = tmp_path / 'run'
  identity = {'env': 'gym:CartPole-v0', 'core_size': 16}
  assert checkpoint_lib.verify_run_identity(str(logdir), identity) is None
  assert not logdir.exists()
  checkpoint_lib.write_run_identity(str(logdir), identity, {'batch_size': 4})
  written = (logdir / 'run.json').read_bytes()
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match=r"core_size: checkpoint has 16, flags say 32"):
    checkpoint_lib.verify_run_identity(str(logdir),
                                       {**identity, 'core_size': 32})
  assert checkpoint_lib.verify_run_identity(str(logdir), identity) == {
      **identity, 'settings': {'batch_size': 4}}
  # New settings replace the old ones, atomically: no temporary is left.
  checkpoint_lib.write_run_identity(str(logdir), identity, {'batch_size': 8})
  assert json.loads((logdir / 'run.json').read_text())['settings'] == {
      'batch_size': 8}
  assert sorted(os.listdir(logdir)) == ['run.json']
  assert (logdir / 'run.json').read_bytes() != written


def test_state_left_without_its_checkpoint_is_not_started_over(tmp_path,
                                                               caplog):
  logdir = tmp_path / 'run'
  checkpoint_lib.check_fresh_start(str(logdir), None)  # A new logdir.
  paths = save_three(str(logdir / 'checkpoints'))
  for path in paths:
    for name in os.listdir(os.path.dirname(path)):
      if name.startswith(os.path.basename(path) + '.'):
        os.remove(os.path.join(os.path.dirname(path), name))
  os.remove(str(logdir / 'checkpoints' / 'checkpoint'))
  os.rmdir(str(logdir / 'checkpoints' / 'state-1'))
  before = sorted(os.listdir(logdir / 'checkpoints'))
  with pytest.raises(checkpoint_lib.CheckpointError) as raised:
    checkpoint_lib.check_fresh_start(str(logdir), {'env': 'x'})
  assert str(raised.value).startswith(
      f'{logdir / "checkpoints"} holds state-2, state-3 (replay and run '
      'state) but no checkpoint:')
  assert 'Put the checkpoint files back' in str(raised.value)
  assert sorted(os.listdir(logdir / 'checkpoints')) == before
  # Only run.json of an earlier start: a warning, then a fresh start.
  for name in before:
    os.rmdir(str(logdir / 'checkpoints' / name))
  with caplog.at_level(logging.WARNING):
    checkpoint_lib.check_fresh_start(str(logdir), {'env': 'x'})
  assert any('holds the run.json of an earlier start but no checkpoint' in
             r.getMessage() for r in caplog.records)
