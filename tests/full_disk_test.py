"""A full disk is a clean stop: tests on small real file systems (tmpfs,
mounted for each test, so they need root).

A memory-mapped replay gets its disk blocks before the run starts, a
replay whose files and checkpoint copies cannot fit is refused at start,
and a checkpoint that meets a full disk leaves nothing of itself, stops
the run with one message, and the same command resumes once there is
space.
"""

import glob
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from clear import checkpoint as checkpoint_lib
from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import learner as learner_lib
from clear.replay import buffer as replay_lib
from clear.runtime import resources
from clear.runtime import run_config
from clear.runtime import run_loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1 << 20


@pytest.fixture
def small_disk(tmp_path):
  """`small_disk(size)` mounts a tmpfs of `size` bytes and returns its
  folder; each is unmounted after the test."""
  mounted = []

  def mount(size):
    folder = str(tmp_path / f'disk{len(mounted)}')
    os.mkdir(folder)
    result = subprocess.run(
        ['mount', '-t', 'tmpfs', '-o', f'size={size}', 'tmpfs', folder],
        capture_output=True, text=True)
    if result.returncode and os.geteuid() != 0:
      pytest.skip('a small file system to fill needs root to mount a tmpfs '
                  f'({result.stderr.strip()})')
    assert result.returncode == 0, result.stderr
    mounted.append(folder)
    return folder

  yield mount
  for folder in reversed(mounted):
    if subprocess.run(['umount', folder]).returncode:
      subprocess.run(['umount', '--lazy', folder], check=True)


def fill(disk, leave=0):
  """Writes `disk`/filler until at most `leave` bytes are free there;
  returns its path."""
  path = os.path.join(disk, 'filler')
  fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
  try:
    while shutil.disk_usage(disk).free > leave:
      os.write(fd, b'\1' * min(MB, shutil.disk_usage(disk).free - leave))
  except OSError as e:  # The last bytes.
    assert e.errno == 28, e
  finally:
    os.close(fd)
  return path


def files_of(folder):
  """{path relative to `folder`: md5 of a file, or '/' for a folder}."""
  found = {}
  for root, dirs, files in os.walk(folder):
    for name in dirs:
      found[os.path.relpath(os.path.join(root, name), folder)] = '/'
    for name in files:
      with open(os.path.join(root, name), 'rb') as f:
        found[os.path.relpath(os.path.join(root, name), folder)] = (
            hashlib.md5(f.read()).hexdigest())
  return found


def example_item():
  # leaf_000: 6 int32 (24 bytes an unroll); leaf_001: 6 x 1000 float32
  # (24,000 bytes an unroll).
  return {'action': np.zeros([6], np.int32),
          'observation': np.zeros([6, 1000], np.float32)}


def test_a_memmap_replay_that_cannot_get_its_disk_leaves_no_file(
    small_disk):
  disk = small_disk(MB)
  folder = os.path.join(disk, 'replay_memmap')
  # 60 unrolls of 24,024 bytes: 1,441,440 bytes, more than the 1 MiB
  # there is; leaf_000 (1,440 bytes) fits, leaf_001 does not.
  buffer = replay_lib.ReplayBuffer(60, storage='memmap', directory=folder)
  [need] = resources.replay_needs(buffer, 60, {}, None, example_item())
  assert need.plan.disk_bytes == 1_441_440
  with pytest.raises(resources.ReplayTooLarge) as raised:
    resources.allocate_replay(buffer, need, example_item())
  message = str(raised.value)
  assert message.startswith(
      '--replay_buffer_size=60: the memory-mapped replay could not allocate '
      f'its 1.44 MB (1,441,440 bytes) of disk under {folder}: no space left '
      'on the device (No space left on device writing '
      f'{folder}/leaf_001.npy); 1.05 MB (1,048,576 bytes) is free there.')
  # 1,048,576 // 24,024 = 43.
  assert message.endswith('(about 43 unrolls fit), or another --logdir.')
  # Nothing half-made: leaf_000 and the folder are gone, and their space.
  assert os.listdir(disk) == []
  assert shutil.disk_usage(disk).used == 0
  # The number said fits, allocated block for block.
  buffer = replay_lib.ReplayBuffer(43, storage='memmap', directory=folder)
  resources.allocate_replay(buffer, need._replace(value=43),
                            example_item())
  for name in ('leaf_000.npy', 'leaf_001.npy'):
    stat = os.stat(os.path.join(folder, name))
    assert stat.st_blocks * 512 >= stat.st_size >= 43 * 24


# Writes a memory-mapped array of 240 kB on a 1 MiB disk: its row 0
# before the rest of the disk is taken, the other rows after.
WRITE_AFTER_FILLING = '''
import os, sys
import numpy as np
from clear.replay import frame_store
disk, reserve = sys.argv[1], sys.argv[2] == 'reserve'
path = os.path.join(disk, 'planes.npy')
shape = (12, 20_000)  # 240,000 bytes.
if reserve:
  planes = frame_store.open_memmap(path, np.uint8, shape)
else:  # As NumPy makes it: sparse.
  planes = np.lib.format.open_memmap(path, 'w+', np.uint8, shape)
planes[0] = 7
fd = os.open(os.path.join(disk, 'filler'), os.O_WRONLY | os.O_CREAT)
try:
  while True:
    os.write(fd, b'1' * 4096)
except OSError:
  pass
planes[1:] = 7
planes.flush()
print('written', int(planes.sum()) // 7)
'''


@pytest.mark.parametrize('reserve', [True, False])
def test_a_reserved_memmap_outlives_a_full_disk_a_sparse_one_does_not(
    small_disk, reserve):
  disk = small_disk(MB)
  result = subprocess.run(
      [sys.executable, '-c', WRITE_AFTER_FILLING, disk,
       'reserve' if reserve else 'sparse'], cwd=ROOT, capture_output=True,
      text=True, timeout=120,
      env=dict(os.environ, PYTHONPATH=ROOT))
  if reserve:
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ['written', '240000']
  else:  # The failure the reservation prevents: SIGBUS, nothing said.
    assert result.returncode == -signal.SIGBUS, result.stderr[-2000:]
    assert 'written' not in result.stdout


def test_a_checkpoint_that_meets_a_full_disk_leaves_nothing_of_itself(
    small_disk):
  disk = small_disk(2 * MB)
  directory = os.path.join(disk, 'checkpoints')
  weights = tf.Variable(tf.zeros([100_000]))  # 400 kB a checkpoint.
  checkpointer = checkpoint_lib.Checkpointer(directory, {'weights': weights})
  checkpointer.save()
  before = files_of(directory)
  filler = fill(disk, leave=100_000)
  weights.assign(tf.ones([100_000]))
  with pytest.raises(tf.errors.ResourceExhaustedError,
                     match='No space left on device'):
    checkpointer.save()
  # No ckpt-2 files, no ckpt-2_temp folder; the index names ckpt-1.
  assert files_of(directory) == before
  assert tf.train.latest_checkpoint(directory) == os.path.join(directory,
                                                               'ckpt-1')
  assert checkpointer.next_number == 2
  os.remove(filler)
  assert checkpointer.save() == os.path.join(directory, 'ckpt-2')
  saved = tf.train.load_checkpoint(os.path.join(directory, 'ckpt-2'))
  np.testing.assert_array_equal(
      saved.get_tensor('weights/.ATTRIBUTES/VARIABLE_VALUE'),
      np.ones([100_000]))


def test_a_snapshot_that_meets_a_full_disk_leaves_the_last_one_whole(
    small_disk):
  disk = small_disk(MB)
  path = os.path.join(disk, 'state.npz')
  snapshot.save(path, {'x': np.arange(1000, dtype=np.int64)})
  with open(path, 'rb') as f:
    before = f.read()
  # 2 MB of arrays on a 1 MiB disk.
  with pytest.raises(OSError) as raised:
    snapshot.save(path, {'x': np.zeros(1 << 18, np.float64)})
  assert raised.value.errno == 28
  assert os.listdir(disk) == ['state.npz']
  with open(path, 'rb') as f:
    assert f.read() == before
  np.testing.assert_array_equal(snapshot.load(path)['x'], np.arange(1000))


def test_a_read_only_logdir_is_not_called_a_full_disk(small_disk):
  disk = small_disk(64 * MB)
  logdir = os.path.join(disk, 'run')
  config = run_config.RunConfig(
      'gym:CartPole-v1', {}, 'impala', policy_lib.AgentConfig('mlp', 8),
      learner_lib.LearnerConfig(batch_size=4, num_replay=2, unroll_length=5,
                                total_environment_frames=5000),
      logdir, num_actors=1, envs_per_actor=4, backend='inline',
      checkpoint_interval_s=3600.0)
  run_loop.train(config, max_updates=2)
  run = run_loop._Run(config)  # pylint: disable=protected-access
  before = files_of(logdir)
  subprocess.run(['mount', '-o', 'remount,ro', disk], check=True)
  try:
    with pytest.raises(checkpoint_lib.WriteError) as raised:
      run.save()
  finally:
    subprocess.run(['mount', '-o', 'remount,rw', disk], check=True)
  state = os.path.join(logdir, 'checkpoints', 'state-2')
  assert str(raised.value) == (
      f'Could not write checkpoint 2 ({state}): the path cannot be written '
      '(Read-only file system: no permission there, or a file system '
      'mounted read-only). Nothing of it was kept, and ckpt-1 with its '
      'state is intact: make it writable and rerun the same command to '
      'resume from there.')
  assert files_of(logdir) == before


# CartPole with a network whose checkpoint (about 7 MB) is much larger
# than its state folder (about 0.6 MB with the replay's copy), so a disk
# with 2 MB free fails in TensorFlow's write, the later of the two.
COMMAND = ('--env=gym:CartPole-v1', '--backend=inline', '--envs_per_actor=4',
           '--batch_size=4', '--unroll_length=5', '--core_size=256',
           '--replay_storage=memmap', '--replay_buffer_size=200',
           '--checkpoint_interval_s=1', '--log_interval_s=1', '--seed=1',
           '--total_environment_frames=2000')


def binary(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return [sys.executable, '-m', 'clear.train', *args], env


def read_until(process, pattern, timeout=120):
  lines = []
  deadline = time.time() + timeout
  for line in process.stdout:
    lines.append(line)
    if re.search(pattern, line):
      return lines
    assert time.time() < deadline, ''.join(lines[-30:])
  raise AssertionError('process ended early:\n' + ''.join(lines[-30:]))


@pytest.mark.slow  # Two runs of the binary: run by .ci/run's slow step.
def test_a_full_disk_while_checkpointing_stops_the_run_and_loses_nothing(
    small_disk):
  disk = small_disk(64 * MB)
  logdir = os.path.join(disk, 'run')
  checkpoints = os.path.join(logdir, 'checkpoints')
  command, env = binary(f'--logdir={logdir}', *COMMAND)
  process = subprocess.Popen(command, cwd=ROOT, env=env,
                             stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
  try:
    read_until(process, r'Saved checkpoint .*/ckpt-1$')
    # The disk fills while the run is paused, between two checkpoints.
    process.send_signal(signal.SIGSTOP)
    kept = files_of(checkpoints)
    latest = tf.train.latest_checkpoint(checkpoints)
    filler = fill(disk, leave=2 * MB)
    process.send_signal(signal.SIGCONT)
    output, _ = process.communicate(timeout=120)
  finally:
    process.kill()
    process.wait()
  assert process.returncode == 2, output[-3000:]
  assert 'Traceback' not in output and 'Fatal Python error' not in output
  errors = [line for line in output.splitlines() if line.startswith('error')]
  number = checkpoint_lib.checkpoint_number(latest)
  assert errors == [
      f'error: Could not write checkpoint {number + 1} '
      f'({checkpoints}/ckpt-{number + 1}): no space left on the device. '
      f'Nothing of it was kept, and ckpt-{number} with its state is intact: '
      'free space and rerun the same command to resume from there.'
  ], output[-3000:]
  # The failed checkpoint left nothing (no state-N, no ckpt-N files or
  # temporary folder), and the one before is as it was, the latest.
  assert files_of(checkpoints) == kept
  assert tf.train.latest_checkpoint(checkpoints) == latest
  assert not glob.glob(os.path.join(logdir, '**', '*.partial'),
                       recursive=True)
  # Space made, the same command resumes from there and finishes.
  os.remove(filler)
  result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert f'Restored checkpoint {latest}\n' in result.stderr
  assert re.search(r'Resuming at [1-9]\d* frames', result.stderr)
  final = tf.train.latest_checkpoint(checkpoints)
  assert checkpoint_lib.checkpoint_number(final) > number
  assert tf.train.load_checkpoint(final).get_tensor(
      'num_env_frames/.ATTRIBUTES/VARIABLE_VALUE') >= 2000


def test_a_replay_whose_checkpoint_copies_cannot_fit_is_refused_at_start(
    small_disk):
  disk = small_disk(8 * MB)
  logdir = os.path.join(disk, 'run')
  # 1,000 unrolls: about 2.5 MB of memory-mapped files, which fit, and 4
  # copies in checkpoints (3 kept, 1 being written), which do not.
  command, env = binary(f'--logdir={logdir}', *COMMAND[:6],
                        '--replay_storage=memmap',
                        '--replay_buffer_size=1000')
  before = files_of(disk)
  result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=240)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = [line for line in result.stderr.splitlines()
            if line.startswith('error')]
  assert len(errors) == 1, result.stderr[-3000:]
  match = re.fullmatch(
      r'error: --replay_buffer_size=1000: the replay needs \S+ \S+ '
      r'\(([\d,]+) bytes\) of disk \(\S+ \S+ per unroll: the memory-mapped '
      r'buffer and 4 copies in checkpoints, the kept ones and one being '
      rf'written\) under {re.escape(logdir)}, and \S+ \S+ \(([\d,]+) bytes\) '
      r'is free there\. Give a smaller --replay_buffer_size \(about '
      r'([\d,]+) unrolls fit\), or another --logdir\.', errors[0])
  assert match, errors[0]
  needed, free, fits = (int(g.replace(',', '')) for g in match.groups())
  # The whole disk but the page of the lock file the run holds.
  assert free in range(8 * MB - 4 * 4096, 8 * MB + 1)
  assert 5 * 2_000_000 < needed and needed > free  # 5 copies of ~2.5 MB.
  assert fits == free // -(-needed // 1000)
  assert files_of(disk) == before  # Nothing written, not even the folder.
