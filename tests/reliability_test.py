"""Fault-injection tests of the real binary: kills, shutdown, crafted and
corrupt files, interrupts while starting up."""

import glob
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver
from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.
from pysc2.env import mock_sc2_env
from pysc2.lib import protocol

from clear import checkpoint as checkpoint_lib
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import learner as learner_lib
from clear import plot
from clear.cli import configs
from clear.cli import validation
from clear.runtime import actor_worker
from clear.runtime import run_config
from clear.runtime import run_lock
from clear.runtime import run_loop
from tests import event_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen(
      [sys.executable, '-m', 'clear.train', *args], cwd=ROOT, env=env,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def read_until(process, pattern, count=1, timeout=180):
  """Reads output lines until `pattern` matched `count` times."""
  lines, seen = [], 0
  deadline = time.time() + timeout
  for line in process.stdout:
    lines.append(line)
    if re.search(pattern, line):
      seen += 1
      if seen >= count:
        return lines
    assert time.time() < deadline, ''.join(lines[-30:])
  raise AssertionError('process ended early:\n' + ''.join(lines[-30:]))


def descendants(process):
  try:
    return psutil.Process(process.pid).children(recursive=True)
  except psutil.NoSuchProcess:
    return []


def wait_gone(processes, timeout=20):
  _, alive = psutil.wait_procs(processes, timeout=timeout)
  return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def saved_counter(logdir, name):
  path = tf.train.latest_checkpoint(os.path.join(logdir, 'checkpoints'))
  reader = tf.train.load_checkpoint(path)
  return int(reader.get_tensor(f'{name}/.ATTRIBUTES/VARIABLE_VALUE')), path


@pytest.mark.slow  # Minutes on 2 cores: run by .ci/run's slow step.
def test_sigkill_during_checkpoints_leaves_the_latest_readable(tmp_path):
  logdir = str(tmp_path)
  args = ['--logdir=' + logdir, '--checkpoint_interval_s=1',
          '--total_environment_frames=2000000', '--log_interval_s=1',
          '--envs_per_actor=8', '--num_actors=2']
  rng = random.Random(0)
  for _ in range(2):
    process = start(*args)
    read_until(process, r'Saved checkpoint', count=2)
    children = descendants(process)
    time.sleep(rng.uniform(0.0, 1.0))  # Somewhere in a write cycle.
    process.kill()
    process.wait(30)
    # Orphaned actors notice the closed pipe and exit by themselves.
    assert not wait_gone(children), [c.cmdline() for c in children]
    frames, path = saved_counter(logdir, 'num_env_frames')
    number = int(path.rsplit('-', 1)[1])
    replay = os.path.join(logdir, 'checkpoints', f'state-{number}', 'replay')
    with open(os.path.join(replay, 'replay.json')) as f:
      assert json.load(f)['size'] > 0
  # The same command resumes exactly at the latest checkpoint's counters.
  process = start(*args)
  lines = read_until(process, r'Resuming at')
  process.send_signal(signal.SIGTERM)
  process.communicate(timeout=180)
  resumed = re.search(r'Resuming at (\d+) frames, (\d+) updates',
                      ''.join(lines))
  assert int(resumed.group(1)) == frames
  assert 'Restored' in ''.join(lines)


def test_sigterm_stops_every_process_and_writes_a_final_checkpoint(tmp_path):
  process = start('--logdir=' + str(tmp_path), '--num_actors=2',
                  '--envs_per_actor=8', '--total_environment_frames=2000000',
                  '--log_interval_s=1', '--checkpoint_interval_s=3600')
  read_until(process, r'First update')
  time.sleep(1.0)
  children = descendants(process)
  assert len(children) >= 2  # Two actors (plus multiprocessing's tracker).
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=180)
  assert process.returncode == 128 + signal.SIGTERM, output[-2000:]
  assert 'Saved checkpoint' in output
  assert not wait_gone(children, timeout=10)
  steps, _ = saved_counter(str(tmp_path), 'num_steps')
  assert steps > 0


class _MarkerWriterForTest:
  """Unpickling this object creates a marker file: proof of unpickling."""

  def __init__(self, path):
    self.path = path

  def __reduce__(self):
    return (open, (self.path, 'w'))


@pytest.mark.slow  # Minutes on 2 cores: run by .ci/run's slow step.
def test_crafted_pickles_in_the_logdir_are_never_loaded(tmp_path):
  logdir = str(tmp_path / 'run')
  marker = str(tmp_path / 'UNPICKLED')
  process = start('--logdir=' + logdir, '--total_environment_frames=3000',
                  '--backend=inline')
  output, _ = process.communicate(timeout=180)
  assert process.returncode == 0, output[-2000:]
  payload = pickle.dumps(_MarkerWriterForTest(marker))
  with open(os.path.join(logdir, 'evil.pkl'), 'wb') as f:
    f.write(payload)
  replay = glob.glob(os.path.join(logdir, 'checkpoints', 'state-*',
                                  'replay'))[0]
  np.save(os.path.join(replay, 'contents_000.npy'),
          np.array([_MarkerWriterForTest(marker)], dtype=object),
          allow_pickle=True)
  # Resuming refuses the pickled replay file with one clear message...
  process = start('--logdir=' + logdir, '--total_environment_frames=6000',
                  '--backend=inline')
  output, _ = process.communicate(timeout=180)
  assert process.returncode == 2, output[-2000:]
  assert 'allow_empty_replay_on_resume' in output
  assert 'Traceback' not in output
  # ...and with the explicit flag resumes with an empty buffer.
  process = start('--logdir=' + logdir, '--total_environment_frames=6000',
                  '--backend=inline', '--allow_empty_replay_on_resume')
  output, _ = process.communicate(timeout=180)
  assert process.returncode == 0, output[-2000:]
  assert 'EMPTY replay buffer' in output
  assert not os.path.exists(marker)


# --- Broken files and early interrupts ---------------------------------------


def run_binary(*args, timeout=240):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'clear.train', *args],
                        cwd=ROOT, env=env, timeout=timeout,
                        capture_output=True, text=True)


# A tiny run that the default flags (gym:CartPole-v1, LSTM 64) would not
# restore: test mode has to rebuild it from its run.json.
RUN_FLAGS = ('--env=gym:CartPole-v0', '--core_size=16', '--backend=inline',
             '--envs_per_actor=4', '--batch_size=4', '--unroll_length=5')


@pytest.fixture(scope='module')
def two_checkpoint_run(tmp_path_factory):
  """A run with checkpoints 1 and 2, made as the binary makes it."""
  logdir = str(tmp_path_factory.mktemp('two_checkpoints'))
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', f'--logdir={logdir}', *RUN_FLAGS])
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
  for _ in range(2):
    run_loop.train(config, max_updates=2)
  return logdir


def copy_of(logdir, tmp_path):
  copy = str(tmp_path / 'run')
  shutil.copytree(logdir, copy)
  return copy


def test_a_corrupt_newest_checkpoint_is_skipped_with_a_warning(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  checkpoints = os.path.join(logdir, 'checkpoints')
  data = os.path.join(checkpoints, 'ckpt-2.data-00000-of-00001')
  with open(data, 'r+b') as f:
    f.truncate(os.path.getsize(data) // 2)
  os.mkdir(os.path.join(logdir, 'test_results.json'))  # Cannot be written.
  warning = ('Skipping unreadable checkpoint in {}: ckpt-2 (with state-2): '
             'IndexError: Read less bytes than requested. Restoring ckpt-1 '
             '(with state-1) instead.').format(checkpoints)
  # Test mode plays with checkpoint 1, on the env and network of run.json,
  # and prints its results although it cannot write them.
  result = run_binary('--mode=test', f'--logdir={logdir}',
                      '--test_num_episodes=2')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert warning in result.stderr
  printed = json.loads(result.stdout)
  assert printed['checkpoint'] == os.path.join(checkpoints, 'ckpt-1')
  assert printed['env'] == 'gym:CartPole-v0' and printed['num_episodes'] == 2
  assert 'warning: the results above were not written to' in result.stderr
  # Training resumes from checkpoint 1 and its replay, and the next
  # checkpoint replaces the bad one.
  frames = int(tf.train.load_checkpoint(os.path.join(
      checkpoints, 'ckpt-1')).get_tensor(
          'num_env_frames/.ATTRIBUTES/VARIABLE_VALUE'))
  result = run_binary(f'--logdir={logdir}', *RUN_FLAGS,
                      f'--total_environment_frames={frames + 40}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert warning in result.stderr
  assert f'Resuming at {frames} frames' in result.stderr
  assert re.search(r'Restored \d+ replayed unrolls .* from '
                   + re.escape(os.path.join(checkpoints, 'state-1')),
                   result.stderr), result.stderr[-3000:]
  assert checkpoint_lib.unreadable_reason(
      os.path.join(checkpoints, 'ckpt-2')) is None


def test_no_readable_checkpoint_is_one_message(two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  checkpoints = os.path.join(logdir, 'checkpoints')
  for path in glob.glob(os.path.join(checkpoints, '*.index')):
    os.remove(path)
  before = sorted(os.listdir(checkpoints))
  result = run_binary(f'--logdir={logdir}', *RUN_FLAGS)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = [line for line in result.stderr.splitlines()
            if line.startswith('error:')]
  assert len(errors) == 1, result.stderr[-3000:]
  assert errors[0].startswith(f'error: No checkpoint in {checkpoints} can be '
                              'read (ckpt-2 (with state-2): ckpt-2.index is '
                              'missing; ckpt-1 (with state-1): ckpt-1.index '
                              'is missing).')
  assert 'backup' in errors[0] and '--logdir' in errors[0]
  assert sorted(os.listdir(checkpoints)) == before  # Nothing written over.


def start_in_own_group(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen(
      [sys.executable, '-m', 'clear.train', *args], cwd=ROOT, env=env,
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
      start_new_session=True)


def test_ctrl_c_while_starting_up_exits_quietly(tmp_path):
  # A terminal's Ctrl-C reaches every process of the group. First while
  # the program is still loading TensorFlow.
  process = start_in_own_group(f'--logdir={tmp_path / "a"}')
  time.sleep(0.5)
  os.killpg(process.pid, signal.SIGINT)
  output, _ = process.communicate(timeout=120)
  assert process.returncode == 130, output[-3000:]
  assert 'Interrupted' in output
  assert 'Traceback' not in output and 'KeyboardInterrupt' not in output
  # Then while its actor process is starting up (itself loading
  # TensorFlow): the actor exits quietly, the learner writes a checkpoint.
  process = start_in_own_group(f'--logdir={tmp_path / "b"}', '--num_actors=1',
                               '--envs_per_actor=4')
  deadline = time.time() + 180
  actors = []
  while not actors:
    assert time.time() < deadline and process.poll() is None
    actors = [c for c in descendants(process)
              if 'spawn_main' in ' '.join(c.cmdline())]
    time.sleep(0.02)
  time.sleep(0.2)  # The start has returned; the actor is importing.
  os.killpg(process.pid, signal.SIGINT)
  output, _ = process.communicate(timeout=180)
  assert process.returncode == 130, output[-3000:]
  assert 'Signal 2: stopping' in output and 'Saved checkpoint' in output
  assert 'Traceback' not in output and 'KeyboardInterrupt' not in output
  assert not wait_gone(actors)


# --- One run per logdir; refused and interrupted commands ---------------------


def files_of(folder):
  """{path relative to `folder`: md5 of a file, or '/' for a folder}."""
  found = {}
  for root, dirs, files in os.walk(folder):
    for name in dirs:
      found[os.path.relpath(os.path.join(root, name), folder)] = '/'
    for name in files:
      path = os.path.join(root, name)
      with open(path, 'rb') as f:
        found[os.path.relpath(path, folder)] = hashlib.md5(
            f.read()).hexdigest()
  return found


def error_lines(stderr):
  return [line for line in stderr.splitlines() if line.startswith('error:')]


def frames_of_checkpoint(path):
  return int(tf.train.load_checkpoint(path).get_tensor(
      'num_env_frames/.ATTRIBUTES/VARIABLE_VALUE'))


def test_a_second_run_on_a_live_logdir_is_refused_and_the_first_goes_on(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  first = start(f'--logdir={logdir}', *RUN_FLAGS, '--log_interval_s=1',
                '--total_environment_frames=100000000',
                '--checkpoint_interval_s=3600')
  try:
    read_until(first, r'First update')
    # Paused, it holds its lock as it would running, and leaves the CPU to
    # the commands below.
    first.send_signal(signal.SIGSTOP)
    names = set(files_of(logdir))
    with open(os.path.join(logdir, 'run.json'), 'rb') as f:
      run_json = f.read()
    # The same command with another seed: one message naming the live
    # run, and nothing read or written.
    second = run_binary(f'--logdir={logdir}', *RUN_FLAGS, '--seed=1')
    assert second.returncode == 2, second.stderr[-3000:]
    assert 'Traceback' not in second.stderr
    errors = error_lines(second.stderr)
    assert len(errors) == 1, second.stderr[-3000:]
    assert errors[0].startswith(
        f'error: --logdir={logdir} is in use by a live training run (PID '
        f'{first.pid} on host {socket.gethostname()}, started ')
    assert 'Stop that run first' in errors[0]
    assert 'Restored' not in second.stderr
    assert set(files_of(logdir)) == names
    with open(os.path.join(logdir, 'run.json'), 'rb') as f:
      assert f.read() == run_json
    # Test mode and clear.plot read the live logdir, and say so.
    tested = run_binary('--mode=test', f'--logdir={logdir}',
                        '--test_num_episodes=2')
    assert tested.returncode == 0, tested.stderr[-3000:]
    assert (f'{logdir} is in use by a live training run (PID {first.pid} '
            in tested.stderr)
    assert json.loads(tested.stdout)['num_episodes'] == 2
    notes = plot.say_if_live([logdir])
    assert len(notes) == 1 and f'PID {first.pid} ' in notes[0]
    assert first.poll() is None  # Untouched, still training.
  finally:
    first.send_signal(signal.SIGCONT)
    first.send_signal(signal.SIGTERM)
    output, _ = first.communicate(timeout=180)
  assert first.returncode == 128 + signal.SIGTERM, output[-3000:]
  assert 'Saved checkpoint ' + os.path.join(logdir, 'checkpoints',
                                            'ckpt-3') in output
  # Its lock went with it: the logdir is free again.
  assert not os.path.exists(os.path.join(logdir, run_lock.LOCK_FILE))
  assert run_lock.live_holder(logdir) is None


def _copy_without_run_json(run, tmp_path):
  logdir = copy_of(run, tmp_path)
  os.remove(os.path.join(logdir, 'run.json'))
  return logdir


@pytest.mark.parametrize('case', ['ddpg_on_cartpole', 'missing_init_from',
                                  'a_failed_restore'])
def test_a_refused_command_leaves_the_logdir_as_it_found_it(
    two_checkpoint_run, tmp_path, case):
  if case == 'a_failed_restore':
    # Its checkpoints, but no run.json: a restore with another LSTM fails.
    logdir = _copy_without_run_json(two_checkpoint_run, tmp_path)
    args = [*RUN_FLAGS, '--core_size=32']
    expected = (f'error: Cannot restore {logdir}/checkpoints/ckpt-2: it was '
                'written for a different network')
  else:
    logdir = str(tmp_path / 'new' / 'run')  # Neither exists yet.
    args = (['--algorithm=ddpg', '--backend=inline']
            if case == 'ddpg_on_cartpole' else
            [f'--init_from={tmp_path / "nothing"}'])
    expected = ('error: DDPG needs continuous actions only'
                if case == 'ddpg_on_cartpole' else
                f'error: --init_from={tmp_path / "nothing"}: no such folder '
                'or checkpoint')
  before = files_of(str(tmp_path))
  result = run_binary(f'--logdir={logdir}', *args)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = error_lines(result.stderr)
  assert len(errors) == 1 and errors[0].startswith(expected), errors
  assert files_of(str(tmp_path)) == before  # Nothing written, not a folder.
  if case == 'a_failed_restore':
    # The original flags still resume it: nothing recorded the wrong size.
    with flagsaver.flagsaver():
      flags.FLAGS.unparse_flags()
      flags.FLAGS(['train', f'--logdir={logdir}', *RUN_FLAGS])
      config = configs.config_from_flags(flags.FLAGS)
    assert run_loop._Run(config).restored.endswith('ckpt-2')  # pylint: disable=protected-access


def test_a_second_signal_lets_the_final_checkpoint_be_written(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  # Actor processes: stopping them gives the second signal time to come
  # while the run stops.
  process = start(f'--logdir={logdir}', *RUN_FLAGS, '--backend=local',
                  '--num_actors=1', '--total_environment_frames=100000000',
                  '--checkpoint_interval_s=3600')
  read_until(process, r'First update')
  process.send_signal(signal.SIGTERM)
  read_until(process, r'Signal 15: stopping after the current update')
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=180)
  assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
  assert 'Signal 15 again: still stopping' in output
  assert 'Saved checkpoint ' + os.path.join(logdir, 'checkpoints',
                                            'ckpt-3') in output
  assert 'Traceback' not in output and 'Interrupted' not in output


def test_signals_after_the_run_has_ended_leave_its_exit_status(
    two_checkpoint_run, tmp_path):
  # Signals that come while the finished program shuts down (threads,
  # exit hooks, Python's own teardown) neither kill it nor change its status.
  logdir = copy_of(two_checkpoint_run, tmp_path)
  process = start(f'--logdir={logdir}', *RUN_FLAGS,
                  '--total_environment_frames=400')
  read_until(process, r'Done: ')
  sent = 0
  while process.poll() is None and sent < 2000:
    process.send_signal(signal.SIGTERM)
    sent += 1
    time.sleep(0.002)
  output, _ = process.communicate(timeout=60)
  assert sent > 0
  assert process.returncode == 0, output[-3000:]
  assert 'Traceback' not in output


@pytest.mark.slow  # About 20 s on 2 cores: run by .ci/run's slow step.
def test_a_third_signal_stops_at_once_and_says_what_was_not_saved(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  process = start(f'--logdir={logdir}', *RUN_FLAGS, '--backend=local',
                  '--num_actors=1', '--total_environment_frames=100000000',
                  '--checkpoint_interval_s=3600')
  lines = read_until(process, r'First update')
  process.send_signal(signal.SIGTERM)
  lines += read_until(process, r'Signal 15: stopping')
  process.send_signal(signal.SIGTERM)
  lines += read_until(process, r'Signal 15 again')
  process.send_signal(signal.SIGTERM)  # While the run stops and saves.
  output, _ = process.communicate(timeout=180)
  output = ''.join(lines) + output
  assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
  assert 'Traceback' not in output
  last = [line for line in output.splitlines()
          if line.startswith('Stopped at once')]
  written = os.path.exists(os.path.join(logdir, 'checkpoints',
                                        'ckpt-3.index'))
  if not last:  # It came once everything was done: nothing was lost.
    assert written and "'stopped_early': True" in output, output[-3000:]
  elif written:
    assert 'the final checkpoint ckpt-3 had been written' in last[0]
  else:
    assert ('the final checkpoint was NOT written, so the training since '
            'ckpt-2 (saved ') in last[0]
  assert run_lock.live_holder(logdir) is None


def test_a_replay_that_cannot_fit_is_refused_before_anything_starts(
    tmp_path):
  logdir = str(tmp_path / 'pong')
  result = run_binary('--env=atari:Pong', f'--logdir={logdir}',
                      '--replay_buffer_size=1000000000', '--backend=inline')
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = error_lines(result.stderr)
  assert len(errors) == 1, result.stderr[-3000:]
  # 172,527 bytes per Pong unroll (the README's replay table).
  assert errors[0].startswith(
      'error: --replay_buffer_size=1000000000: the replay needs 173 TB '
      '(172,527,000,000,000 bytes) of memory (173 kB per unroll), and ')
  assert re.search(r'is available\. Give a smaller --replay_buffer_size '
                   r'\(about [\d,]+ unrolls fit now\)', errors[0])
  assert not os.path.exists(logdir)


def test_checkpoint_files_gone_but_their_state_left_is_refused(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  checkpoints = os.path.join(logdir, 'checkpoints')
  for path in glob.glob(os.path.join(checkpoints, 'ckpt-*')) + [
      os.path.join(checkpoints, 'checkpoint')]:
    os.remove(path)
  before = files_of(logdir)
  result = run_binary(f'--logdir={logdir}', *RUN_FLAGS)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = error_lines(result.stderr)
  assert len(errors) == 1 and errors[0].startswith(
      f'error: {checkpoints} holds state-1, state-2 (replay and run state) '
      'but no checkpoint: the ckpt-N files are gone'), result.stderr[-3000:]
  assert files_of(logdir) == before  # The orphaned state is still there.


def test_a_finished_run_is_left_as_it_is_and_tilde_is_home(
    two_checkpoint_run, tmp_path):
  home = tmp_path / 'home'
  home.mkdir()
  logdir = str(home / 'run')
  shutil.copytree(two_checkpoint_run, logdir)
  frames = frames_of_checkpoint(os.path.join(logdir, 'checkpoints',
                                             'ckpt-2'))
  before = files_of(logdir)
  # The shell leaves a ~ after = alone; the binary expands it.
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2',
             HOME=str(home))
  result = subprocess.run(
      [sys.executable, '-m', 'clear.train', '--logdir=~/run', *RUN_FLAGS,
       f'--total_environment_frames={frames}'], cwd=str(tmp_path), env=env,
      timeout=240, capture_output=True, text=True)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert (f'The run in {logdir} is complete ({frames:,} of {frames:,} '
          'frames, ckpt-2): nothing to do, and nothing was written.'
          in result.stderr), result.stderr[-3000:]
  assert 'could not be found' not in result.stderr
  assert files_of(logdir) == before  # No checkpoint rotated out.
  assert sorted(os.listdir(tmp_path)) == ['home']  # No folder named ~.


@pytest.mark.slow  # replay_test covers resizing; this, the binary's words.
def test_a_resume_with_another_replay_size_resizes_the_replay(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  with open(os.path.join(logdir, 'checkpoints', 'state-2', 'replay',
                         'replay.json')) as f:
    held = json.load(f)['size']
  assert held > 2
  frames = frames_of_checkpoint(os.path.join(logdir, 'checkpoints',
                                             'ckpt-2'))
  result = run_binary(f'--logdir={logdir}', *RUN_FLAGS,
                      '--replay_buffer_size=2',
                      f'--total_environment_frames={frames + 20}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert (f"Replay 'replay' resized from 10,000 to 2 unrolls: kept 2 of the "
          f'{held} it held (a uniform sample, as a reservoir of this size '
          'keeps).') in result.stderr, result.stderr[-3000:]
  assert 'cannot be read' not in result.stderr
  with open(os.path.join(logdir, 'run.json')) as f:
    assert json.load(f)['settings']['replay_buffer_size'] == 2


def test_a_hand_edited_run_json_is_one_message_naming_the_field(
    two_checkpoint_run, tmp_path):
  logdir = copy_of(two_checkpoint_run, tmp_path)
  path = os.path.join(logdir, 'run.json')
  with open(path) as f:
    saved = json.load(f)
  saved['core_size'] = 'sixteen'
  with open(path, 'w') as f:
    json.dump(saved, f)
  before = files_of(logdir)
  result = run_binary('--mode=test', f'--logdir={logdir}')
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert error_lines(result.stderr) == [
      f"error: {path}: core_size is 'sixteen', but --core_size takes an "
      'integer. Put back the value the run was made with, or move the file '
      'away (or use a new --logdir).']
  assert files_of(logdir) == before


@pytest.fixture(scope='module')
def minatar_run(tmp_path_factory):
  """A tiny MinAtar run, made as the binary makes it."""
  logdir = str(tmp_path_factory.mktemp('minatar'))
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', f'--logdir={logdir}', '--env=minatar:Breakout',
                 *RUN_FLAGS[1:]])
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
  run_loop.train(config, max_updates=1)
  return logdir


def test_a_signal_before_the_run_starts_stops_it_and_writes_nothing(
    minatar_run, tmp_path):
  logdir = copy_of(minatar_run, tmp_path)
  before = files_of(logdir)
  process = start(f'--logdir={logdir}', '--env=minatar:Breakout',
                  *RUN_FLAGS[1:], '--total_environment_frames=1000000')
  # Then it checks and restores the run, and imports MinAtar (whose import
  # swallows a KeyboardInterrupt): nothing is written until that is done.
  lines = read_until(process, r'learner on')
  time.sleep(0.3)  # On a 2-core machine, about when MinAtar is imported.
  process.send_signal(signal.SIGTERM)
  output, _ = process.communicate(timeout=120)
  output = ''.join(lines) + output
  assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
  assert 'Interrupted before the run started: nothing was written.' in output
  assert 'Traceback' not in output and 'Saved checkpoint' not in output
  assert files_of(logdir) == before


def test_ctrl_c_while_test_mode_imports_minatar_stops_it(minatar_run,
                                                         tmp_path):
  logdir = copy_of(minatar_run, tmp_path)
  process = start_in_own_group('--mode=test', f'--logdir={logdir}',
                               '--test_num_episodes=50')
  # The env's packages (MinAtar, whose import swallows a Ctrl-C) load
  # right after the run's settings are read.
  lines = read_until(process, r'Settings from')
  time.sleep(0.3)  # On a 2-core machine, about when MinAtar is imported.
  os.killpg(process.pid, signal.SIGINT)
  output, _ = process.communicate(timeout=120)
  output = ''.join(lines) + output
  assert process.returncode == 130, output[-3000:]
  assert 'Interrupted.' in output
  assert 'Traceback' not in output and 'KeyboardInterrupt' not in output
  assert '"num_episodes"' not in output
  assert not os.path.exists(os.path.join(logdir, 'test_results.json'))


def test_an_interrupt_caught_inside_exec_keeps_the_exit_status(tmp_path):
  # What the test above hits when its Ctrl-C lands in one of the many
  # `exec`s of strings that importing matplotlib runs (namedtuple,
  # dataclasses): CPython remembers the KeyboardInterrupt although the
  # program caught it, and ended `python -m clear.train` by SIGINT (-2)
  # instead of with 130. Here the interrupt is raised there on purpose.
  (tmp_path / 'interrupted_in_exec.py').write_text(
      'import sys\n'
      'from clear.cli import signals\n'
      'try:\n'
      '  exec("raise KeyboardInterrupt")\n'
      'except KeyboardInterrupt:\n'
      '  print("Interrupted.")\n'
      'signals.exit_now(130)\n'
      'sys.exit(130)\n')
  env = dict(os.environ, PYTHONPATH=f'{ROOT}{os.pathsep}{tmp_path}',
             TF_CPP_MIN_LOG_LEVEL='2')
  result = subprocess.run([sys.executable, '-m', 'interrupted_in_exec'],
                          cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
  assert result.returncode == 130, result.stdout + result.stderr
  assert result.stdout == 'Interrupted.\n'


# --- Environment crashes, through the whole runtime ---------------------------


class CrashOnceMockEnvForTest(mock_sc2_env.SC2TestEnv):
  """pysc2's mock env; the first game in a process to reach step 3 dies."""

  crashed = False

  def __init__(self, **kwargs):
    self._steps = 0
    super().__init__(**kwargs)

  def step(self, actions, step_mul=None):
    self._steps += 1
    if self._steps == 3 and not CrashOnceMockEnvForTest.crashed:
      CrashOnceMockEnvForTest.crashed = True
      raise protocol.ConnectionError('Connection already closed. SC2 '
                                     'probably crashed.')
    return super().step(actions, step_mul)


class AlwaysCrashingMockEnvForTest(mock_sc2_env.SC2TestEnv):
  """pysc2's mock env that dies at its second step, every launch."""

  def __init__(self, **kwargs):
    self._steps = 0
    super().__init__(**kwargs)

  def step(self, actions, step_mul=None):
    self._steps += 1
    if self._steps >= 2:
      raise protocol.ProtocolError('Game died.')
    return super().step(actions, step_mul)


def sc2_config(logdir, factory, backend):
  return run_config.RunConfig(
      env_name='sc2:MoveToBeacon',
      env_options={'env_factory': factory, 'max_env_failures': 3,
                   'screen_size': 16, 'minimap_size': 16},
      algorithm='impala',
      agent_config=policy_lib.AgentConfig('fullyconv', 16),
      learner_config=learner_lib.LearnerConfig(
          batch_size=2, num_replay=0, unroll_length=4,
          total_environment_frames=10**6, step_mul=8),
      logdir=str(logdir), num_actors=1, envs_per_actor=2,
      backend=backend, log_interval_s=0.0)


def test_a_crashed_env_is_relaunched_and_counted(tmp_path):
  run_loop.train(sc2_config(tmp_path, CrashOnceMockEnvForTest, 'inline'),
                 max_updates=4)
  restarts = [value for _, value in event_files.scalar_series(
      tmp_path, 'runtime/env_restarts')]
  assert restarts and max(restarts) == 1


def test_an_env_that_keeps_crashing_stops_the_run_loudly(tmp_path):
  config = sc2_config(tmp_path, AlwaysCrashingMockEnvForTest, 'local')
  start_time = time.time()
  try:
    run_loop.train(config, max_updates=50)
  except actor_worker.ActorFailure as e:
    assert 'crashed 3 times in a row' in str(e)
  else:
    raise AssertionError('the run should have failed')
  assert time.time() - start_time < 120
