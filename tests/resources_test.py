"""Tests of clear.runtime.resources: a replay the machine cannot hold is
refused."""

import logging
import subprocess
import sys

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


def test_tree_memory_counts_the_children_it_has():
  # A child holding 300 MB of touched pages adds them to the tree's PSS.
  alone = resources.tree_memory()
  child = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time; b = bytearray(300 << 20); '
       'b[::4096] = b"x" * len(b[::4096]); print("ready", flush=True); '
       'time.sleep(60)'], stdout=subprocess.PIPE, text=True)
  try:
    assert child.stdout.readline().strip() == 'ready'
    with_child = resources.tree_memory()
    of_child = resources.tree_memory(child.pid)
  finally:
    child.kill()
    child.wait()
  # The tree without the child is measured again right after it, as the
  # other processes' PSS moves while a test session runs.
  after = resources.tree_memory()
  assert with_child.processes == alone.processes + 1
  assert of_child.processes == 1 and of_child.pss > 300 << 20
  assert with_child.pss - after.pss > 300 << 20
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
