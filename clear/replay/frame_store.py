"""Frame-stacked observations kept with each distinct frame once per unroll.

A frame-stacked observation (Atari's `frame`) is uint8 `[H, W, K]`: the
last K frames on the last axis, oldest first. Within an unroll, the stack
at step t is normally the stack at t - 1 moved along by one frame, plus a
new frame, so storing the `[T + 1, H, W, K]` stacks as they arrive keeps
nearly every frame K times. This module keeps each distinct frame (a
"plane", `[H, W]`) once and a small table saying which plane each channel
of each step holds; reading rebuilds the stacks bit for bit.

Encoding one unroll (`encode`, at insertion):
  * step 0: its K channels become planes 0 .. K - 1;
  * step t > 0, channel c: the plane of channel c + 1 at step t - 1 when
    the two are equal byte for byte (the usual shift); otherwise a plane
    already added for another channel of step t when equal to it (after an
    Atari reset the stack is K copies of one frame: one plane); otherwise
    a new plane.
Nothing is assumed about what the env puts in a stack, so the table is
exact whatever the stacking does after an episode reset. An unroll of pure
shifts uses T + K planes with `table[t, c] = t + c` ("regular").

Storage (`FrameStore`): per slot a fixed budget of T + K planes
(`[capacity, T + K, H, W]`, in memory or a memory-mapped `.npy` made by
`open_memmap`, which allocates its disk blocks at once), the
table (`[capacity, T + 1, K]`, in memory) and, for an unroll that needs
more planes than the budget, its extra planes in a per-slot spill kept in
memory (with memmap storage too). Atari never spills: a reset costs one
plane, like a shift.

Reading a regular slot merges K contiguous runs of planes into the
channel-last stacks in one `cv2.merge` (a SIMD interleave, about a
`memcpy`); other slots gather their planes by fancy indexing first.

Shapes: T + 1 steps per unroll, frames H x W, stack depth K.
"""

import errno
import os
from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import cv2
import numpy as np


class Encoded(NamedTuple):
  """One unroll's stacks as distinct frames.

  Attributes:
    planes: uint8 `[P, H, W]`, the distinct frames in order of first use.
    table: int64 `[T + 1, K]`, the plane each channel of each step holds:
      `stacks[t, :, :, c] == planes[table[t, c]]`.
  """
  planes: np.ndarray
  table: np.ndarray


def check_stacks(stacks, name: str = 'frame stacks') -> np.ndarray:
  """`stacks` as a uint8 `[T + 1, H, W, K]` array, K >= 2.

  Raises:
    ValueError: another dtype or rank, or a stack of one frame.
  """
  stacks = np.asarray(stacks)
  if stacks.dtype != np.uint8 or stacks.ndim != 4 or stacks.shape[-1] < 2:
    raise ValueError(
        f'{name}: frame-stacked observations must be uint8 [T + 1, H, W, K] '
        f'with K >= 2 frames, got {stacks.dtype}{list(stacks.shape)}.')
  return stacks


def encode(stacks) -> Encoded:
  """Splits one unroll's stacks into distinct planes and a table.

  Args:
    stacks: uint8 `[T + 1, H, W, K]`, K >= 2.

  Returns:
    `Encoded`; `decode(*encode(x))` equals `x`.
  """
  stacks = check_stacks(stacks, 'frame_store.encode')
  num_steps, _, _, depth = stacks.shape
  # [T + 1, K, H, W]: each channel's frame contiguous.
  by_channel = np.ascontiguousarray(np.moveaxis(stacks, -1, 1))
  flat = by_channel.reshape(num_steps, depth, -1)
  # shifted[t - 1, c]: channel c at step t equals channel c + 1 at t - 1.
  shifted = np.all(flat[1:, :-1] == flat[:-1, 1:], axis=-1)
  table = np.empty([num_steps, depth], np.int64)
  table[0] = np.arange(depth)
  sources = [(0, c) for c in range(depth)]  # (step, channel) of each plane.
  for t in range(1, num_steps):
    added = []  # Channels of step t that got a new plane.
    for c in range(depth):
      if c < depth - 1 and shifted[t - 1, c]:
        table[t, c] = table[t - 1, c + 1]
        continue
      twin = next((a for a in added
                   if np.array_equal(flat[t, c], flat[t, a])), None)
      if twin is not None:
        table[t, c] = table[t, twin]
      else:
        table[t, c] = len(sources)
        sources.append((t, c))
        added.append(c)
  steps, channels = np.array(sources).T
  planes = by_channel[steps, channels]
  return Encoded(planes, table)


def decode(planes, table) -> np.ndarray:
  """The stacks an `encode` result stands for: uint8 `[T + 1, H, W, K]`.

  Args:
    planes: uint8 `[P, H, W]`.
    table: int `[T + 1, K]`, entries in [0, P).
  """
  return np.moveaxis(np.asarray(planes)[np.asarray(table)], 1, -1)


def open_memmap(path: str, dtype, shape: Sequence[int]) -> np.memmap:
  """A new `.npy` file at `path` (replacing any), memory-mapped for reading
  and writing, its disk blocks allocated at once.

  A sparse file would meet a full disk only at some later write to the
  mapping, as a SIGBUS that kills the process; allocated, it cannot.

  Raises:
    OSError: the file cannot be made or its blocks allocated (errno ENOSPC
      or EDQUOT when the disk is full); it is removed.
  """
  array = None
  try:
    array = np.lib.format.open_memmap(path, mode='w+', dtype=dtype,
                                      shape=tuple(shape))
    _allocate_blocks(path)
  except BaseException:
    del array  # Unmapped, so its blocks are freed with the file.
    if os.path.exists(path):
      os.remove(path)
    raise
  return array


def _allocate_blocks(path: str):
  """Allocates every block of the file at `path` (posix_fallocate), where
  the platform and file system can; elsewhere the file stays sparse."""
  if not hasattr(os, 'posix_fallocate'):  # macOS.
    return
  fd = os.open(path, os.O_RDWR)
  try:
    os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
  except OSError as e:
    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
      raise OSError(e.errno, e.strerror, path) from e
  finally:
    os.close(fd)


def regular_table(num_steps: int, depth: int) -> np.ndarray:
  """The table of an unroll of pure shifts: `table[t, c] = t + c`."""
  return np.arange(num_steps)[:, None] + np.arange(depth)[None]


def _interleave(channels: Sequence[np.ndarray], out: np.ndarray):
  """Writes K `[R, W]` planes into `out` (`[R, W, K]`) channel-last."""
  merged = cv2.merge(list(channels), dst=out)
  if merged is not out:  # OpenCV allocated instead of writing in place.
    out[...] = merged.reshape(out.shape)


class FrameStore:
  """`[capacity]` unrolls of frame stacks, each distinct frame stored once.

  Reads and writes whole unrolls (`write`, `read`) or time windows of them
  (`read` with `starts` and `length`), returning what was written bit for
  bit.

  Args:
    capacity: number of slots (unrolls).
    shape: `(T + 1, H, W, K)`, one unroll's stacks.
    path: `.npy` file for the planes (memory-mapped, allocated on disk at
      once: `open_memmap`), or None for memory.

  Raises:
    OSError: the planes' file cannot be allocated (ENOSPC: a full disk).
  """

  def __init__(self, capacity: int, shape: Sequence[int],
               path: Optional[str] = None):
    if capacity < 1 or len(shape) != 4 or min(shape) < 1 or shape[3] < 2:
      raise ValueError('FrameStore: needs capacity >= 1 and a shape (T + 1, '
                       f'H, W, K) with K >= 2, got {capacity} and '
                       f'{tuple(shape)}.')
    num_steps, height, width, depth = (int(n) for n in shape)
    self.capacity = capacity
    self.shape = (capacity, num_steps, height, width, depth)
    self.dtype = np.dtype(np.uint8)
    self.budget = num_steps + depth - 1
    planes_shape = (capacity, self.budget, height, width)
    if path is None:
      self._planes = np.zeros(planes_shape, np.uint8)
    else:
      self._planes = open_memmap(path, np.uint8, planes_shape)
    # Plane j of a slot is _planes[slot, j] for j < budget, else
    # _spill[slot][j - budget].
    table_dtype = np.min_scalar_type(num_steps * depth - 1)
    self._table = np.zeros([capacity, num_steps, depth], table_dtype)
    self._regular = np.zeros([capacity], bool)
    self._spill: Dict[int, np.ndarray] = {}
    self._regular_table = regular_table(num_steps, depth)

  @staticmethod
  def planned_nbytes(capacity: int, shape: Sequence[int]) -> Tuple[int, int]:
    """What a store of `capacity` unrolls of stacks `shape` (`(T + 1, H, W,
    K)`) allocates, without allocating it: (bytes of the planes, which a
    path puts on disk; bytes of the tables and flags, always in memory).
    Spilled planes (never for Atari) come on top."""
    num_steps, height, width, depth = (int(n) for n in shape)
    planes = capacity * (num_steps + depth - 1) * height * width
    table_item = np.min_scalar_type(num_steps * depth - 1).itemsize
    return planes, capacity * (num_steps * depth * table_item + 1)

  @staticmethod
  def subset_arrays(arrays: Dict[str, np.ndarray], keep) -> Dict[
      str, np.ndarray]:
    """The `arrays` (as `arrays(size)` gives) of the slots `keep` (int
    `[k]`, ascending or not), renumbered 0..k-1 in that order; memory-mapped
    planes are read only where kept."""
    keep = np.asarray(keep, np.int64)
    owners = np.asarray(arrays['spill_slots'])
    new_slot = np.full([len(arrays['table'])], -1, np.int64)
    new_slot[keep] = np.arange(len(keep))
    rows = [np.flatnonzero(owners == old) for old in keep.tolist()]
    rows = np.concatenate(rows) if rows else np.zeros([0], np.int64)
    return {'planes': np.asarray(arrays['planes'][keep]),
            'table': np.asarray(arrays['table'])[keep],
            'spill': np.asarray(arrays['spill'])[rows],
            'spill_slots': new_slot[owners[rows]].astype(np.int64)}

  @property
  def nbytes(self) -> int:
    """Bytes held: plane budget, tables, flags and spilled planes."""
    return (self._planes.nbytes + self._table.nbytes + self._regular.nbytes +
            sum(p.nbytes for p in self._spill.values()))

  @property
  def num_spilled(self) -> int:
    """Slots whose unroll needed more planes than the budget."""
    return len(self._spill)

  def write(self, slot: int, stacks):
    """Stores one unroll's stacks (uint8 `[T + 1, H, W, K]`) in `slot`."""
    stacks = np.asarray(stacks)
    if stacks.shape != self.shape[1:] or stacks.dtype != self.dtype:
      raise ValueError(f'FrameStore.write: stacks are {stacks.dtype}'
                       f'{list(stacks.shape)}, the store holds uint8'
                       f'{list(self.shape[1:])}.')
    self._put(slot, encode(stacks))

  def _put(self, slot: int, encoded: Encoded):
    planes, table = encoded
    kept = min(len(planes), self.budget)
    self._planes[slot, :kept] = planes[:kept]
    self._table[slot] = table
    self._regular[slot] = np.array_equal(table, self._regular_table)
    if len(planes) > self.budget:
      self._spill[slot] = planes[self.budget:].copy()
    else:
      self._spill.pop(slot, None)

  def encoded(self, slot: int) -> Encoded:
    """The planes and table stored in `slot`."""
    table = self._table[slot].astype(np.int64)
    count = int(table.max()) + 1
    planes = np.asarray(self._planes[slot, :min(count, self.budget)])
    if slot in self._spill:
      planes = np.concatenate([planes, self._spill[slot]])
    return Encoded(planes, table)

  def read(self, slots, starts=None, length: Optional[int] = None
           ) -> np.ndarray:
    """The stacks of `slots`, whole or cut to windows.

    Args:
      slots: int `[n]`.
      starts: int `[n]`, the first step of each window (default 0).
      length: steps per window (default T + 1).

    Returns:
      uint8 `[n, length, H, W, K]`.
    """
    _, num_steps, height, width, depth = self.shape
    slots = np.asarray(slots, np.int64).reshape(-1)
    length = num_steps if length is None else int(length)
    starts = (np.zeros_like(slots) if starts is None else
              np.asarray(starts, np.int64).reshape(-1))
    if slots.size and (starts.min() < 0 or
                       starts.max() + length > num_steps or length < 1):
      raise ValueError(
          f'FrameStore.read: windows of {length} steps starting at '
          f'{starts.min()}..{starts.max()} leave unrolls of {num_steps} '
          'steps.')
    out = np.empty((len(slots), length, height, width, depth), np.uint8)
    rows = out.reshape(len(slots), length * height, width, depth)
    # [slot, budget * H, W]: a regular slot's channel c over steps
    # [a, a + L) is the contiguous run of planes a + c .. a + c + L - 1.
    plane_rows = self._planes.reshape(self.capacity, -1, width)
    regular = self._regular[slots]
    for b in np.flatnonzero(regular):
      first = (starts[b] + np.arange(depth)) * height
      _interleave([plane_rows[slots[b], r:r + length * height]
                   for r in first], rows[b])
    others = np.flatnonzero(~regular)
    if others.size:
      steps = starts[others, None] + np.arange(length)[None]
      self._gather(slots[others], steps, out, others)
    return out

  def _gather(self, slots, steps, out, rows_of_out):
    """Fills `out[rows_of_out]` with the stacks at `steps` (`[m, L]`)."""
    _, _, height, width, depth = self.shape
    length = steps.shape[1]
    table = self._table[slots[:, None], steps].astype(np.int64)  # [m, L, K]
    spilled = np.array([s in self._spill for s in slots.tolist()], bool)
    plain = np.flatnonzero(~spilled)
    if plain.size:
      # [K, m, L, H, W]: each channel contiguous, merged in one call.
      planes = self._planes[slots[plain][None, :, None],
                            table[plain].transpose(2, 0, 1)]
      merged = np.empty((plain.size, length, height, width, depth), np.uint8)
      _interleave([p.reshape(-1, width) for p in planes],
                  merged.reshape(-1, width, depth))
      out[rows_of_out[plain]] = merged
    for k in np.flatnonzero(spilled):
      planes, _ = self.encoded(int(slots[k]))
      out[rows_of_out[k]] = decode(planes, table[k])

  # --- State -----------------------------------------------------------------

  def arrays(self, size: int) -> Dict[str, np.ndarray]:
    """Slots [0, size) as plain arrays: `planes` `[size, T + K, H, W]`,
    `table` `[size, T + 1, K]`, the spilled planes `spill` `[E, H, W]` and
    the slot each belongs to, `spill_slots` int64 `[E]` (ascending)."""
    spilled = sorted(s for s in self._spill if s < size)
    _, _, height, width, _ = self.shape
    spill = [self._spill[s] for s in spilled]
    return {
        'planes': self._planes[:size],
        'table': self._table[:size],
        'spill': (np.concatenate(spill) if spill else
                  np.zeros([0, height, width], np.uint8)),
        'spill_slots': np.repeat(np.array(spilled, np.int64),
                                 [len(p) for p in spill]).astype(np.int64),
    }

  def load_arrays(self, arrays: Dict[str, np.ndarray], size: int):
    """Reads back what `arrays(size)` gave.

    Raises:
      ValueError: an array is missing or has another shape or dtype, or a
        table names a plane that is not there.
    """
    _, num_steps, height, width, depth = self.shape
    expected = {
        'planes': ((size, self.budget, height, width), np.uint8),
        'table': ((size, num_steps, depth), None),
        'spill': ((None, height, width), np.uint8),
        'spill_slots': ((None,), np.int64),
    }
    for name, (shape, dtype) in expected.items():
      if name not in arrays:
        raise ValueError(f'FrameStore: saved {name!r} is missing.')
      got = arrays[name]
      same_shape = len(got.shape) == len(shape) and all(
          e is None or e == g for e, g in zip(shape, got.shape))
      if (not same_shape or (dtype is not None and got.dtype != dtype) or
          got.dtype.kind not in 'iu'):
        raise ValueError(
            f'FrameStore: saved {name!r} is {got.dtype}{list(got.shape)}, '
            f'expected {np.dtype(dtype or np.int64)}'
            f'{[("?" if e is None else e) for e in shape]}.')
    table, spill, owners = (arrays['table'], arrays['spill'],
                            arrays['spill_slots'])
    if len(owners) != len(spill) or (owners.size and (
        owners.min() < 0 or owners.max() >= size or
        np.any(np.diff(owners) < 0))):
      raise ValueError('FrameStore: saved spill_slots do not match the '
                       f'{len(spill)} spilled planes of {size} slots.')
    counts = np.bincount(owners, minlength=size)
    limits = self.budget + counts
    if size and (table.min() < 0 or table.max() >= num_steps * depth or
                 np.any(table.reshape(size, -1).max(axis=1) >= limits)):
      raise ValueError('FrameStore: a saved table names a plane that was '
                       'not saved.')
    self._planes[:size] = arrays['planes']
    self._table[:size] = table
    self._table[size:] = 0
    self._regular[:] = False
    self._regular[:size] = np.all(table == self._regular_table[None],
                                  axis=(1, 2))
    self._spill = {}
    ends = np.cumsum(counts)
    for slot in np.flatnonzero(counts).tolist():
      self._spill[slot] = spill[ends[slot] - counts[slot]:ends[slot]].copy()
