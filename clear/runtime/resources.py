"""What a run takes of the machine: its replay, checked before it starts,
and the memory of its processes, watched while it runs.

A replay buffer allocates its whole capacity at its first insert (see
`clear.replay.buffer.ReplayBuffer.storage_plan`): in memory, or for memmap
storage as `.npy` files under the logdir, allocated before the run starts
(`allocate_replay`). A capacity the machine cannot hold would otherwise fail
minutes later with a NumPy memory error, after a checkpoint was written.
`check_replay_fits` compares the plan with the memory available now
(psutil's `available`: free plus reclaimable caches) and the free disk under
the logdir, which holds the memmap files and, in every checkpoint's
`state-N` folder, a copy of the replay's contents: the kept checkpoints and
one being written. It refuses with one message naming the flag, the bytes
needed and the bytes there are.

`tree_memory` measures the learner's process and its descendants (actor
processes, a local Ray's workers); `MemoryWatch` keeps the peak of such
readings over a run, taken at most once every `interval_s` (reading PSS
walks each process's page tables: tens of milliseconds for a large one).
"""

import errno
import glob
import logging
import os
import shutil
import time
from typing import Callable, Dict, List, NamedTuple, Optional

import psutil
import tensorflow as tf

from clear.replay import buffer as replay_lib

# Above this share of what is available, the run starts with a warning:
# the learner's TensorFlow and the actors need memory too.
WARN_SHARE = 0.8


class ReplayNeed(NamedTuple):
  """One buffer's plan and the flag that sizes it.

  Attributes:
    flag: e.g. '--replay_buffer_size', for messages.
    value: the flag's value.
    plan: `ReplayBuffer.storage_plan`.
    directory: where its memmap files go (None in memory).
    per_item: how many of the flag's units one stored unroll holds (1 for
      a capacity in unrolls, the unroll length for one in transitions).
    unit: the flag's unit, for messages.
  """
  flag: str
  value: int
  plan: replay_lib.StoragePlan
  directory: Optional[str] = None
  per_item: int = 1
  unit: str = 'unrolls'

  def fitting(self, budget: int, used: int) -> int:
    """About the largest flag value whose buffer takes at most `budget`
    bytes, when this one's takes `used`."""
    return max(0, budget) // max(1, _per_item(used, self)) * self.per_item


class ReplayTooLarge(ValueError):
  """A replay buffer cannot fit in the memory or disk there is."""


def format_bytes(n: float) -> str:
  """E.g. '1.73 GB' (decimal units, as the log's replay line)."""
  for unit in ('bytes', 'kB', 'MB', 'GB', 'TB', 'PB'):
    if abs(n) < 1000 or unit == 'PB':
      return f'{n:,.0f} bytes' if unit == 'bytes' else f'{n:.3g} {unit}'
    n /= 1000


def _exact(n: int) -> str:
  return f'{format_bytes(n)} ({n:,} bytes)' if n >= 1000 else format_bytes(n)


def _per_item(nbytes: int, need: ReplayNeed) -> int:
  return -(-nbytes // need.plan.capacity)


def _allocated(paths) -> int:
  """Bytes of disk the files at `paths` (and under those that are folders)
  take."""
  total = 0
  for path in paths:
    files = [path] if os.path.isfile(path) else [
        os.path.join(root, name) for root, _, names in os.walk(path)
        for name in names]
    for name in files:
      try:
        total += os.lstat(name).st_blocks * 512
      except OSError:  # Gone meanwhile.
        pass
  return total


def free_disk(folder: Optional[str], checkpoints: Optional[str] = None
              ) -> int:
  """Free bytes on the file system of `folder` (or of its nearest existing
  parent), plus what the memmap files already there take, as a new buffer
  replaces them; with `checkpoints` (a checkpoint folder, where `folder`
  may be None), plus what its `state-*` folders take, as the next
  checkpoints replace them."""
  existing = _allocated(glob.glob(
      os.path.join(glob.escape(folder), '*.npy')) if folder else [])
  if checkpoints:
    existing += _allocated(glob.glob(
        os.path.join(glob.escape(checkpoints), 'state-*')))
  path = os.path.abspath(folder or checkpoints)
  while not os.path.exists(path):
    path = os.path.dirname(path)
  return shutil.disk_usage(path).free + existing


def replay_needs(buffer: Optional[replay_lib.ReplayBuffer],
                 replay_buffer_size: int,
                 policy_buffers: Dict[str, replay_lib.ReplayBuffer],
                 learner_config, item) -> List[ReplayNeed]:
  """The needs of a run's buffers: the CLEAR replay `buffer` (or None),
  sized by --replay_buffer_size, and the buffers an off-policy learner owns
  (sized by --replay_capacity transitions), for unrolls like `item`."""
  needs = []
  if buffer is not None:
    needs.append(ReplayNeed(
        '--replay_buffer_size', replay_buffer_size, buffer.storage_plan(item),
        buffer.directory if buffer.storage == 'memmap' else None))
  for name, owned in policy_buffers.items():
    if hasattr(learner_config, 'replay_capacity'):
      needs.append(ReplayNeed(
          '--replay_capacity', learner_config.replay_capacity,
          owned.storage_plan(item), per_item=learner_config.unroll_length,
          unit='transitions'))
    else:
      needs.append(ReplayNeed(f'the capacity of replay {name!r}',
                              owned.capacity, owned.storage_plan(item)))
  return needs


def check_replay_fits(needs: List[ReplayNeed],
                      available_memory: Optional[int] = None,
                      disk_free: Optional[int] = None,
                      checkpoints: Optional[str] = None,
                      checkpoint_copies: int = 0) -> List[str]:
  """Refuses replay buffers the machine cannot hold; logs (and returns) a
  warning for ones that fit but take most of the memory or disk there is.

  Args:
    needs: the run's buffers.
    available_memory: bytes of memory available (default: psutil's).
    disk_free: free bytes for the memmap files and checkpoint copies
      (default: `free_disk` of the buffers' directory and `checkpoints`).
    checkpoints: the folder whose `state-N` folders each hold a copy of the
      buffers' contents, or None not to count them.
    checkpoint_copies: how many such copies there are at once (the
      checkpoints kept, and one being written).

  Returns:
    The warnings logged.

  Raises:
    ReplayTooLarge: one line naming the flag, the bytes needed and the
      bytes available.
  """
  if available_memory is None:
    available_memory = psutil.virtual_memory().available
  warnings = []
  memory = sum(n.plan.memory_bytes for n in needs)
  if needs and memory > available_memory:
    biggest = max(needs, key=lambda n: n.plan.memory_bytes)
    fits = biggest.fitting(available_memory - (
        memory - biggest.plan.memory_bytes), biggest.plan.memory_bytes)
    raise ReplayTooLarge(
        f'{biggest.flag}={biggest.value}: the replay needs '
        f'{_exact(memory)} of memory '
        f'({format_bytes(_per_item(biggest.plan.memory_bytes, biggest))} '
        'per unroll), and '
        f'{_exact(available_memory)} is available. Give a smaller '
        f'{biggest.flag} (about '
        f'{fits:,} {biggest.unit} fit now)' + (
            ', or --replay_storage=memmap to keep it on disk under --logdir.'
            if biggest.flag == '--replay_buffer_size' and
            biggest.directory is None else '.'))
  if needs and memory > WARN_SHARE * available_memory:
    warnings.append(
        f'The replay will take {format_bytes(memory)} of the '
        f'{format_bytes(available_memory)} of memory available now: the '
        'learner and the actors may run short.')
  copies = checkpoint_copies if checkpoints else 0
  on_disk = [n.plan.disk_bytes + copies * (n.plan.memory_bytes +
                                           n.plan.disk_bytes) for n in needs]
  disk = sum(on_disk)
  if disk:
    directory = next((n.directory for n in needs if n.directory), None)
    free = disk_free if disk_free is not None else free_disk(directory,
                                                             checkpoints)
    where = os.path.dirname(checkpoints) if copies else directory
    parts = ['the memory-mapped buffer'] if directory else []
    if copies:
      parts.append(f'{copies} copies in checkpoints, the kept ones and one '
                   'being written')
    biggest, bytes_of_biggest = max(zip(needs, on_disk), key=lambda p: p[1])
    per_item = format_bytes(_per_item(bytes_of_biggest, biggest))
    if disk > free:
      fits = biggest.fitting(free - (disk - bytes_of_biggest),
                             bytes_of_biggest)
      raise ReplayTooLarge(
          f'{biggest.flag}={biggest.value}: the '
          f'{"replay" if copies else "memory-mapped replay"} needs '
          f'{_exact(disk)} of disk ({per_item} per unroll'
          f'{": " + " and ".join(parts) if copies else ""}) under {where}, '
          f'and {_exact(free)} is free there. Give a smaller {biggest.flag} '
          f'(about {fits:,} {biggest.unit} fit), or another --logdir.')
    if disk > WARN_SHARE * free:
      warnings.append(
          f'The replay will take {format_bytes(disk)} of the '
          f'{format_bytes(free)} of disk free under {where} '
          f'({" and ".join(parts)}): the disk may fill up as the run goes '
          'on.')
  for warning in warnings:
    logging.warning('%s', warning)
  return warnings


def allocate_replay(buffer: replay_lib.ReplayBuffer, need: ReplayNeed, item):
  """Allocates `buffer`'s storage for unrolls like `item` (the disk blocks
  of its memory-mapped files), so that a disk that cannot hold them stops
  the run before it starts.

  Raises:
    ReplayTooLarge: the disk is full (ENOSPC, EDQUOT); one line naming the
      flag, the folder and the bytes, and none of the files is left.
  """
  try:
    buffer.allocate(item)
  except OSError as e:
    if e.errno not in (errno.ENOSPC, errno.EDQUOT):
      raise
    free = free_disk(need.directory)
    raise ReplayTooLarge(
        f'{need.flag}={need.value}: the memory-mapped replay could not '
        f'allocate its {_exact(need.plan.disk_bytes)} of disk under '
        f'{need.directory}: no space left on the device ({e.strerror} '
        f'writing {e.filename}); {_exact(free)} is free there. Give a '
        f'smaller {need.flag} (about '
        f'{need.fitting(free, need.plan.disk_bytes):,} {need.unit} fit), '
        'or another --logdir.') from e


class TreeMemory(NamedTuple):
  """Memory of a process and its descendants, in bytes.

  Attributes:
    pss: proportional set sizes summed (a page shared by n processes counts
      1/n in each): what the tree really holds.
    rss: resident set sizes summed (shared pages counted in every process).
    processes: how many processes were measured.
  """
  pss: int
  rss: int
  processes: int


def tree_memory(pid: Optional[int] = None) -> TreeMemory:
  """Measures process `pid` (default: this one) and all its descendants;
  a process that ends meanwhile, or cannot be read, is left out."""
  root = psutil.Process(pid)
  pss = rss = count = 0
  for process in [root] + root.children(recursive=True):
    try:
      info = process.memory_full_info()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
      continue
    pss += getattr(info, 'pss', info.rss)  # PSS is Linux's; RSS elsewhere.
    rss += info.rss
    count += 1
  return TreeMemory(pss, rss, count)


class MemoryWatch:
  """The peak of a run's memory readings, taken at most every `interval_s`.

  Attributes:
    peak: the largest PSS and RSS seen (`TreeMemory`, each maximised on its
      own), zeros before the first reading.
    last: the latest reading, or None.
  """

  def __init__(self, interval_s: float = 60.0,
               measure: Callable[[], TreeMemory] = tree_memory,
               clock: Callable[[], float] = time.monotonic):
    self._interval_s = interval_s
    self._measure = measure
    self._clock = clock
    self._measured_at = None
    self.peak = TreeMemory(0, 0, 0)
    self.last = None

  def maybe_measure(self, force: bool = False) -> Optional[TreeMemory]:
    """Measures if `interval_s` has passed since the last reading (or
    `force`, or never measured); returns the reading, or None."""
    now = self._clock()
    if not force and self._measured_at is not None and (
        now - self._measured_at < self._interval_s):
      return None
    self._measured_at = now
    self.last = self._measure()
    self.peak = TreeMemory(max(self.peak.pss, self.last.pss),
                           max(self.peak.rss, self.last.rss),
                           max(self.peak.processes, self.last.processes))
    return self.last

  def summarise(self, step: int, force: bool = False) -> bool:
    """`maybe_measure`, and a reading taken is logged and written as
    `runtime/memory_pss_mb` and `runtime/memory_peak_pss_mb` at `step` to
    the default `tf.summary` writer; returns whether one was."""
    reading = self.maybe_measure(force=force)
    if reading is not None:
      tf.summary.scalar('runtime/memory_pss_mb', reading.pss / 1e6, step=step)
      tf.summary.scalar('runtime/memory_peak_pss_mb', self.peak.pss / 1e6,
                        step=step)
      logging.info('memory: %.0f MB (PSS of %d processes; RSS sum %.0f MB), '
                   'peak %.0f MB', reading.pss / 1e6, reading.processes,
                   reading.rss / 1e6, self.peak.pss / 1e6)
    return reading is not None
