"""Tests of clear.runtime.resources: a replay the machine cannot hold is
refused."""

import logging
import re
import subprocess
import sys

import psutil
import pytest

from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import learner as learner_lib
from clear.replay import buffer as replay
from clear.runtime import resources
from clear.runtime import run_config
from clear.runtime import run_loop

GB = 10**9


def plan(memory, disk, capacity):
  return replay.StoragePlan(memory, disk, capacity)


def test_a_replay_larger_than_the_memory_is_one_line_with_the_bytes():
  need = resources.ReplayNeed('--replay_buffer_size', 1_000_000,
                              plan(172_527 * 1_000_000, 0, 1_000_000))
  with pytest.raises(resources.ReplayTooLarge) as raised:
    resources.check_replay_fits([need], available_memory=16 * GB)
  message = str(raised.value)
  assert '\n' not in message
  assert message.startswith(
      '--replay_buffer_size=1000000: the replay needs 173 GB '
      '(172,527,000,000 bytes) of memory (173 kB per unroll), and 16 GB '
      '(16,000,000,000 bytes) is available.')
  # 16e9 // 172,527 = 92,739 unrolls.
  assert 'about 92,739 unrolls fit now' in message
  assert '--replay_storage=memmap' in message
  # One that fits passes; one that takes most of the memory is warned of.
  assert resources.check_replay_fits([need], 250 * GB) == []
  warnings = resources.check_replay_fits([need], 180 * GB)
  assert len(warnings) == 1 and 'may run short' in warnings[0]


def test_memmap_needs_its_disk_and_its_tables_in_memory(tmp_path):
  need = resources.ReplayNeed('--replay_buffer_size', 100,
                              plan(900, 10_000, 100), str(tmp_path / 'mm'))
  resources.check_replay_fits([need], available_memory=1000,
                              disk_free=10_000)
  with pytest.raises(resources.ReplayTooLarge,
                     match=r'memory-mapped replay needs 10 kB \(10,000 '
                     r'bytes\) of disk \(100 bytes per unroll\) under '
                     + str(tmp_path / 'mm') + r', and 5 kB .*\(about 50 '
                     'unrolls fit'):
    resources.check_replay_fits([need], available_memory=1000,
                                disk_free=5000)
  with pytest.raises(resources.ReplayTooLarge) as raised:
    resources.check_replay_fits([need], available_memory=800,
                                disk_free=10_000)
  assert '--replay_storage=memmap' not in str(raised.value)  # It is.
  # The disk free is counted where the folder will be, with the files a new
  # buffer replaces there.
  (tmp_path / 'mm').mkdir()
  (tmp_path / 'mm' / 'leaf_000.npy').write_bytes(b'x' * 5000)
  assert (resources.free_disk(str(tmp_path / 'mm')) -
          resources.free_disk(str(tmp_path / 'elsewhere' / 'mm'))) in range(
              5000 - 4096 * 64, 5000 + 4096 * 64)


def test_checkpoints_copy_the_replay_to_disk_even_from_memory(tmp_path):
  # 200 bytes per unroll in memory; 3 checkpoints kept and 1 being written
  # hold 4 copies: 4 x 200 x 1,000 = 800,000 bytes of disk.
  need = resources.ReplayNeed('--replay_buffer_size', 1000,
                              plan(200_000, 0, 1000))
  checkpoints = str(tmp_path / 'run' / 'checkpoints')
  fits = lambda free: resources.check_replay_fits(
      [need], available_memory=GB, disk_free=free, checkpoints=checkpoints,
      checkpoint_copies=4)
  with pytest.raises(resources.ReplayTooLarge) as raised:
    fits(700_000)
  # 700,000 // 800 bytes per unroll = 875 unrolls.
  assert str(raised.value) == (
      '--replay_buffer_size=1000: the replay needs 800 kB (800,000 bytes) '
      'of disk (800 bytes per unroll: 4 copies in checkpoints, the kept '
      f'ones and one being written) under {tmp_path / "run"}, and 700 kB '
      '(700,000 bytes) is free there. Give a smaller --replay_buffer_size '
      '(about 875 unrolls fit), or another --logdir.')
  # 80% of 1,000,000 is 800,000: not above it. Of 990,000 it is.
  assert fits(1_000_000) == []
  assert fits(990_000) == [
      f'The replay will take 800 kB of the 990 kB of disk free under '
      f'{tmp_path / "run"} (4 copies in checkpoints, the kept ones and one '
      'being written): the disk may fill up as the run goes on.']
  # Without a checkpoint folder, nothing is counted on disk.
  assert resources.check_replay_fits([need], available_memory=GB,
                                     disk_free=0, checkpoint_copies=4) == []


def test_memmap_files_and_checkpoint_copies_share_the_disk(tmp_path):
  # 10,000 bytes of memmap files and 900 of tables in memory: each copy
  # in a checkpoint holds both, 10,900; with 4 copies, 10,000 + 43,600 =
  # 53,600 bytes, 536 per unroll; 50,000 free fit 93 unrolls (49,848).
  need = resources.ReplayNeed('--replay_buffer_size', 100,
                              plan(900, 10_000, 100), str(tmp_path / 'mm'))
  with pytest.raises(resources.ReplayTooLarge) as raised:
    resources.check_replay_fits([need], available_memory=GB,
                                disk_free=50_000,
                                checkpoints=str(tmp_path / 'checkpoints'),
                                checkpoint_copies=4)
  assert str(raised.value) == (
      '--replay_buffer_size=100: the replay needs 53.6 kB (53,600 bytes) of '
      'disk (536 bytes per unroll: the memory-mapped buffer and 4 copies in '
      f'checkpoints, the kept ones and one being written) under {tmp_path}, '
      'and 50 kB (50,000 bytes) is free there. Give a smaller '
      '--replay_buffer_size (about 93 unrolls fit), or another --logdir.')
  assert resources.check_replay_fits(
      [need], available_memory=GB, disk_free=53_600 * 5 // 4,
      checkpoints=str(tmp_path / 'checkpoints'), checkpoint_copies=4) == []


def test_the_free_disk_counts_the_state_folders_checkpoints_replace(
    tmp_path):
  checkpoints = tmp_path / 'checkpoints'
  for name in ('state-1/replay', 'state-2'):
    (checkpoints / name).mkdir(parents=True)
  (checkpoints / 'state-1' / 'replay' / 'contents_000.npy').write_bytes(
      b'x' * 1_000_000)
  (checkpoints / 'state-2' / 'run.npz').write_bytes(b'x' * 1_000_000)
  # The TF files stay: they are not the replay's.
  (checkpoints / 'ckpt-2.data-00000-of-00001').write_bytes(b'x' * 1_000_000)
  counted = resources.free_disk(None, str(checkpoints))
  bare = resources.free_disk(None, str(tmp_path / 'elsewhere' / 'ckpts'))
  # Other writers share the disk: a margin of 64 pages.
  assert counted - bare in range(2_000_000 - 4096 * 64,
                                 2_000_000 + 4096 * 64)
  # By default the check measures that disk: 100 TB of replay, 4 copies.
  need = resources.ReplayNeed('--replay_buffer_size', 10**9,
                              plan(10**14, 0, 10**9))
  where = re.escape(str(tmp_path))
  with pytest.raises(resources.ReplayTooLarge,
                     match=rf'needs 400 TB .* under {where}, and '):
    resources.check_replay_fits([need], available_memory=10**15,
                                checkpoints=str(checkpoints),
                                checkpoint_copies=4)


def test_off_policy_capacities_are_named_in_transitions():
  need = resources.ReplayNeed('--replay_capacity', 1_000_000,
                              plan(50_000 * 10**6, 0, 50_000),
                              per_item=20, unit='transitions')
  with pytest.raises(resources.ReplayTooLarge,
                     match=r'--replay_capacity=1000000: .*about 20,000 '
                     r'transitions fit now\)\.$'):
    resources.check_replay_fits([need], available_memory=1 * GB)


def default_replay_need(env_name, core_size, num_envs=1):
  spec = run_config.env_spec(run_config.RunConfig(
      env_name, {}, 'impala', policy_lib.AgentConfig('auto', core_size),
      learner_lib.LearnerConfig(), '/nonexistent'))
  policy = registry.make_policy('impala', spec,
                                  policy_lib.AgentConfig('auto', core_size))
  item = run_loop.split_unrolls(policy_lib.example_batch(policy, 20,
                                                         num_envs))[0]
  buffer = replay.ReplayBuffer(10_000,
                               stacked_observations=spec.stacked_frames)
  return resources.replay_needs(buffer, 10_000, {}, None, item)


@pytest.mark.parametrize('env_name,core_size,item_bytes', [
    ('atari:Pong', 256, 172_527),  # The README's replay table.
    ('minatar:Seaquest', 128, 23_074),
])
def test_the_default_buffers_fit_a_modest_machine(env_name, core_size,
                                                 item_bytes, caplog):
  needs = default_replay_need(env_name, core_size)
  assert needs[0].plan.item_bytes == item_bytes
  assert needs[0].plan.memory_bytes == 10_000 * item_bytes
  with caplog.at_level(logging.WARNING):
    assert resources.check_replay_fits(needs, available_memory=4 * GB) == []


# A parent without TensorFlow, so that its own PSS stays put while other
# processes come and go: it starts a child holding 300 MB of touched pages
# when told, and ends it when told again.
_CHILD = ('import time; b = bytearray(300 << 20); '
          'b[::4096] = b"x" * len(b[::4096]); print("ready", flush=True); '
          'time.sleep(120)')
_PARENT = f"""
import subprocess, sys
print("started", flush=True)
sys.stdin.readline()
child = subprocess.Popen([sys.executable, '-c', {_CHILD!r}],
                         stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), child.pid, flush=True)
sys.stdin.readline()
child.kill()
child.wait()
print("gone", flush=True)
sys.stdin.readline()
"""


def test_tree_memory_counts_the_children_it_has():
  parent = subprocess.Popen([sys.executable, '-c', _PARENT],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)

  def tell():
    parent.stdin.write('\n')
    parent.stdin.flush()
    return parent.stdout.readline().split()

  try:
    assert parent.stdout.readline().strip() == 'started'
    alone = resources.tree_memory(parent.pid)
    ready, child_pid = tell()
    assert ready == 'ready'
    with_child = resources.tree_memory(parent.pid)
    of_child = resources.tree_memory(int(child_pid))
    assert tell() == ['gone']
    after = resources.tree_memory(parent.pid)
  finally:
    for process in psutil.Process(parent.pid).children():
      process.kill()
    parent.kill()
    parent.wait()
  assert alone.processes == after.processes == 1
  assert with_child.processes == 2
  assert of_child.processes == 1 and of_child.pss > 300 << 20
  assert with_child.pss - after.pss > 300 << 20
  assert with_child.pss - of_child.pss < alone.pss + (10 << 20)
  assert with_child.rss >= with_child.pss


def test_a_memory_watch_measures_once_an_interval_and_keeps_the_peak():
  now = [0.0]
  readings = iter([resources.TreeMemory(5, 9, 2),
                   resources.TreeMemory(7, 8, 3),
                   resources.TreeMemory(4, 10, 1)])
  fake_measure = lambda: next(readings)
  watch = resources.MemoryWatch(interval_s=60, measure=fake_measure,
                                clock=lambda: now[0])
  assert watch.last is None and watch.peak == (0, 0, 0)
  assert watch.maybe_measure() == (5, 9, 2)  # The first is taken at once.
  now[0] = 59.9
  assert watch.maybe_measure() is None
  now[0] = 60.0
  assert watch.maybe_measure() == (7, 8, 3)
  assert watch.maybe_measure(force=True) == (4, 10, 1)
  assert watch.peak == (7, 10, 3) and watch.last == (4, 10, 1)
