"""The CLEAR replay buffer: whole unrolls, reservoir or FIFO, uniform or
prioritized sampling.

An item is one `types.Unroll` for a single trajectory (`[T + 1, ...]`
leaves, no batch dim), behaviour logits and baselines included. Storage is
one preallocated array per leaf (`[capacity, ...]`, the leaf's own dtype, so
uint8 frames stay uint8), in memory or memory-mapped on disk so a buffer can
exceed RAM. Memory-mapped files get all their disk blocks when the storage
is allocated (`allocate`, or the first insert): a full disk is an `OSError`
then, never a crash at a later write.

Reservoir insertion keeps every unroll ever offered with equal probability
capacity / num_seen (CLEAR, Rolnick et al. 2019); FIFO overwrites the oldest.
Sampling is uniform with replacement over the stored unrolls.

Frame-stacked observations (`stacked_observations`, the entries an
`EnvSpec` lists in `stacked_frames`, e.g. Atari's `frame`) are kept with
each distinct frame once per unroll (`clear/replay/frame_store.py`) and
rebuilt bit for bit when read: about T + K frames per unroll instead of
(T + 1) K. Every other leaf, and every other observation, is stored as it
arrives.

Off-policy learners that train on pieces of unrolls address them as
(item, slot) pairs: an item has `slots_per_item` slots (e.g. the start
positions of the windows cut from it), drawn with `sample_slots` and read
with `get_windows`. A prioritized buffer (Schaul et al. 2016) draws a slot
with probability p^alpha / sum p^alpha, where p is the slot's priority (new
items get the largest priority seen so far, every slot of them), and returns
the importance weights (N P)^-beta / max (N P)^-beta that undo the bias;
`update_priorities` sets p from the learner's TD errors. The sampler is a
sum tree, so draws and updates cost O(log N) each.

The state (contents, counters, sampler RNG, priorities) saves to `.npy` files
plus a JSON description, read back with `allow_pickle=False`, so nothing on
disk can execute code. A stacked leaf saves as its planes and tables
(`frames_<leaf>_*.npy`); a state that holds the leaf as whole stacks
(`contents_<leaf>.npy`, as a buffer that stores them as they arrive saves
them) is converted when restored.
"""

import json
import os
from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np
import tree

from clear.replay import frame_store

SAMPLING_MODES = ('reservoir', 'fifo')
STORAGE_MODES = ('memory', 'memmap')
_STATE_FILE = 'replay.json'


class SlotSample(NamedTuple):
  """Slots drawn by `ReplayBuffer.sample_slots`, n of each.

  Attributes:
    indices: int64 `[n]`, the items (buffer positions).
    slots: int64 `[n]`, the slot within each item.
    probabilities: float64 `[n]`, the chance each draw had.
    weights: float32 `[n]`, importance weights, at most 1 (all 1 when
      uniform or beta = 0).
  """
  indices: np.ndarray
  slots: np.ndarray
  probabilities: np.ndarray
  weights: np.ndarray


class _SumTree:
  """Sums over a fixed array of non-negative leaves, with vectorised updates.

  Leaf i lives at node `size + i` of a complete binary tree of `2 * size`
  nodes (size a power of two); node k holds the sum of nodes 2k and 2k + 1,
  node 1 the total.
  """

  def __init__(self, num_leaves: int):
    self.size = 1
    while self.size < num_leaves:
      self.size *= 2
    self.nodes = np.zeros([2 * self.size], np.float64)

  @property
  def total(self) -> float:
    return float(self.nodes[1])

  def leaves(self, count: int) -> np.ndarray:
    return self.nodes[self.size:self.size + count]

  def set(self, leaves: np.ndarray, values: np.ndarray):
    nodes = np.asarray(leaves, np.int64) + self.size
    self.nodes[nodes] = values
    while nodes.size and nodes[0] > 1:
      nodes = np.unique(nodes // 2)
      self.nodes[nodes] = self.nodes[2 * nodes] + self.nodes[2 * nodes + 1]

  def find(self, mass: np.ndarray) -> np.ndarray:
    """The leaf where each cumulative `mass` (in [0, total)) falls."""
    mass = np.array(mass, np.float64)
    nodes = np.ones(mass.shape, np.int64)
    for _ in range(self.size.bit_length() - 1):
      left = self.nodes[2 * nodes]
      right = mass >= left
      mass -= left * right
      nodes = 2 * nodes + right
    return nodes - self.size


class ReplayStats(NamedTuple):
  """Counters worth logging: fill, insertions, bytes held."""
  size: int
  capacity: int
  num_seen: int
  num_stored: int
  nbytes: int


class StoragePlan(NamedTuple):
  """What a buffer will allocate at its first insert (`storage_plan`).

  Attributes:
    memory_bytes: bytes in memory.
    disk_bytes: bytes in `.npy` files under its directory (memmap storage).
    capacity: unrolls it holds.
  """
  memory_bytes: int
  disk_bytes: int
  capacity: int

  @property
  def item_bytes(self) -> int:
    """Bytes per unroll, memory and disk together."""
    return -(-(self.memory_bytes + self.disk_bytes) // self.capacity)


class Restored(NamedTuple):
  """What `ReplayBuffer.restore` read.

  Attributes:
    saved_capacity: the capacity the buffer was saved with.
    saved_size: unrolls it held.
    size: unrolls kept (fewer when the capacity shrank).
  """
  saved_capacity: int
  saved_size: int
  size: int


class ReplayBuffer:
  """A fixed-capacity store of unrolls with uniform sampling.

  Args:
    capacity: maximum number of unrolls held.
    sampling: 'reservoir' (every unroll seen is kept with equal chance) or
      'fifo' (the newest `capacity` are kept).
    seed: seed of the buffer's own RNG (insertion and sampling).
    storage: 'memory' or 'memmap' (arrays in `.npy` files under `directory`).
    directory: folder of the memory-mapped arrays (memmap storage only).
    prioritized: `sample_slots` draws slots by priority instead of
      uniformly (`sample` and `sample_indices` stay uniform over items).
    priority_exponent: alpha, how much priorities count (0 = uniform).
    slots_per_item: the slots of an item that `sample_slots` draws from.
    min_priority: floor added to every priority, so no slot becomes
      impossible to draw.
    stacked_observations: names of `env_outputs.observation` entries that
      are frame stacks (uint8 `[T + 1, H, W, K]` per unroll, K >= 2, oldest
      frame first); they are stored with each distinct frame once. Items
      must then be `types.Unroll`s.
  """

  def __init__(self, capacity: int, sampling: str = 'reservoir',
               seed: int = 0, storage: str = 'memory',
               directory: Optional[str] = None, prioritized: bool = False,
               priority_exponent: float = 0.6, slots_per_item: int = 1,
               min_priority: float = 1e-6,
               stacked_observations: Sequence[str] = ()):
    if capacity < 1:
      raise ValueError(f'ReplayBuffer: capacity must be >= 1, got {capacity}.')
    if sampling not in SAMPLING_MODES:
      raise ValueError(f'ReplayBuffer: sampling must be one of '
                       f'{SAMPLING_MODES}, got {sampling!r}.')
    if storage not in STORAGE_MODES:
      raise ValueError(f'ReplayBuffer: storage must be one of '
                       f'{STORAGE_MODES}, got {storage!r}.')
    if storage == 'memmap' and not directory:
      raise ValueError('ReplayBuffer: memmap storage needs a directory.')
    if slots_per_item < 1:
      raise ValueError('ReplayBuffer: slots_per_item must be >= 1, got '
                       f'{slots_per_item}.')
    if priority_exponent < 0:
      raise ValueError('ReplayBuffer: priority_exponent must be >= 0, got '
                       f'{priority_exponent}.')
    if min_priority <= 0:
      raise ValueError('ReplayBuffer: min_priority must be > 0, got '
                       f'{min_priority}.')
    self.capacity = capacity
    self.sampling = sampling
    self.storage = storage
    self.directory = directory
    self._rng = np.random.RandomState(seed)
    self.stacked_observations = tuple(stacked_observations)
    self._structure = None
    # One [capacity, ...] array per leaf; a `frame_store.FrameStore` for a
    # stacked observation.
    self._leaves = None
    self._frame_stores = {}
    self._size = 0
    self._num_seen = 0
    self._num_stored = 0
    # FIFO: when full, the next unroll goes to (num_seen - offset) % capacity
    # (not 0 only after a restore into another capacity).
    self._fifo_offset = 0
    self.prioritized = prioritized
    self.priority_exponent = priority_exponent
    self.slots_per_item = slots_per_item
    self.min_priority = min_priority
    self._max_priority = 1.0
    self._priorities = None  # [capacity, slots_per_item] float64, raw p.
    self._tree = None  # p^alpha of every slot.
    if prioritized:
      self._priorities = np.zeros([capacity, slots_per_item], np.float64)
      self._tree = _SumTree(capacity * slots_per_item)

  # --- Properties ------------------------------------------------------------

  def __len__(self):
    return self._size

  @property
  def num_seen(self) -> int:
    """Unrolls offered to the buffer so far."""
    return self._num_seen

  @property
  def nbytes(self) -> int:
    """Bytes of the storage (0 before the first insert): the preallocated
    arrays, and for stacked observations their frames, tables and spill."""
    return sum(leaf.nbytes for leaf in self._leaves or ())

  @property
  def frame_stores(self) -> Dict[str, frame_store.FrameStore]:
    """The stores of the stacked observations, by name (empty before the
    first insert)."""
    return dict(self._frame_stores)

  @property
  def max_priority(self) -> float:
    """The priority new items get: the largest set so far (at least 1)."""
    return self._max_priority

  @property
  def priorities(self) -> np.ndarray:
    """A copy of the stored items' priorities, `[len(self), slots]`."""
    if not self.prioritized:
      raise ValueError('ReplayBuffer.priorities: the buffer is uniform.')
    return self._priorities[:self._size].copy()

  def storage_plan(self, item) -> StoragePlan:
    """What the buffer will allocate for unrolls like `item` (one unroll,
    as `insert` takes), computed without allocating: the numbers `nbytes`
    then reports (frame stores' spilled planes aside), split by where
    they live.

    Raises:
      ValueError: `item` does not fit `stacked_observations`.
    """
    memory = disk = 0
    on_disk = self.storage == 'memmap'
    for x, name in zip(tree.flatten(item), self._stacked_leaves(item)):
      x = np.asarray(x)
      if name:
        planes, tables = frame_store.FrameStore.planned_nbytes(
            self.capacity, x.shape)
      else:
        planes, tables = self.capacity * x.nbytes, 0
      memory += tables + (0 if on_disk else planes)
      disk += planes if on_disk else 0
    return StoragePlan(memory, disk, self.capacity)

  def stats(self) -> ReplayStats:
    return ReplayStats(self._size, self.capacity, self._num_seen,
                       self._num_stored, self.nbytes)

  # --- Insertion and sampling ------------------------------------------------

  def _stacked_leaves(self, item) -> list:
    """Per leaf of `item`, its observation name if stacked, else ''.

    Raises:
      ValueError: a name in `stacked_observations` is not an observation
        entry, or the entry is not uint8 `[T + 1, H, W, K]`.
    """
    flags = tree.map_structure(lambda _: '', item)
    if not self.stacked_observations:
      return tree.flatten(flags)
    observation = getattr(getattr(item, 'env_outputs', None), 'observation',
                          None)
    if not isinstance(observation, dict):
      raise ValueError('ReplayBuffer: stacked_observations needs items that '
                       'are types.Unroll with an observation dict.')
    missing = [k for k in self.stacked_observations if k not in observation]
    if missing:
      raise ValueError(f'ReplayBuffer: stacked_observations {missing} are '
                       'not observation entries of the unrolls '
                       f'({sorted(observation)}).')
    for key in self.stacked_observations:
      frame_store.check_stacks(observation[key],
                               f'ReplayBuffer: observation {key!r}')
    marked = {k: k if k in self.stacked_observations else ''
              for k in observation}
    return tree.flatten(flags._replace(env_outputs=flags.env_outputs._replace(
        observation=marked)))

  def allocate(self, item):
    """Allocates the storage for unrolls like `item` now, unless it is
    allocated (the first insert does it otherwise). Memory-mapped files get
    their disk blocks at once (`frame_store.open_memmap`): a disk that
    cannot hold them fails here, not at a later write.

    Raises:
      OSError: a memory-mapped file cannot be allocated (ENOSPC or EDQUOT
        on a full disk); none of the buffer's files is left.
    """
    if self._leaves is None:
      self._allocate(item)

  def _allocate(self, item):
    stacked = self._stacked_leaves(item)
    self._structure = tree.map_structure(lambda _: None, item)
    leaves = [np.asarray(x) for x in tree.flatten(item)]
    made_folder = (self.storage == 'memmap' and
                   not os.path.isdir(self.directory))
    if self.storage == 'memmap':
      os.makedirs(self.directory, exist_ok=True)
    self._leaves = []
    self._frame_stores = {}
    made = []  # Memory-mapped files, as they are made.
    try:
      for i, (x, name) in enumerate(zip(leaves, stacked)):
        path = self._memmap_path(i, bool(name))
        if path:
          made.append(path)
        if name:
          self._frame_stores[name] = frame_store.FrameStore(self.capacity,
                                                            x.shape, path)
          self._leaves.append(self._frame_stores[name])
        elif path:
          self._leaves.append(frame_store.open_memmap(
              path, x.dtype, (self.capacity,) + x.shape))
        else:
          self._leaves.append(np.zeros((self.capacity,) + x.shape, x.dtype))
    except OSError:  # A full disk, for one: the files made so far go.
      self._structure, self._leaves, self._frame_stores = None, None, {}
      for path in made:
        if os.path.exists(path):
          os.remove(path)
      if made_folder and not os.listdir(self.directory):
        os.rmdir(self.directory)
      raise

  def _memmap_path(self, leaf: int, is_stacked: bool) -> Optional[str]:
    """The file of memory-mapped leaf `leaf` (None in memory); the file of
    the other kind, from a run that stored the leaf the other way, goes."""
    if self.storage != 'memmap':
      return None
    names = [f'frames_{leaf:03d}.npy', f'leaf_{leaf:03d}.npy']
    if not is_stacked:
      names.reverse()
    stale = os.path.join(self.directory, names[1])
    if os.path.exists(stale):
      os.remove(stale)
    return os.path.join(self.directory, names[0])

  def _slot(self) -> Optional[int]:
    """The slot the next offered unroll goes to, or None to drop it."""
    if self._size < self.capacity:
      return self._size
    if self.sampling == 'fifo':
      return (self._num_seen - 1 - self._fifo_offset) % self.capacity
    j = self._rng.randint(self._num_seen)
    return j if j < self.capacity else None

  def insert(self, item) -> Optional[int]:
    """Offers one unroll; returns the slot it went to, or None if dropped."""
    if self._leaves is None:
      self._allocate(item)
    leaves = tree.flatten(item)
    if len(leaves) != len(self._leaves):
      raise ValueError('ReplayBuffer.insert: the unroll structure differs '
                       'from the stored ones.')
    self._num_seen += 1
    slot = self._slot()
    if slot is None:
      return None
    for store, x in zip(self._leaves, leaves):
      x = np.asarray(x)
      if x.shape != store.shape[1:]:
        raise ValueError(f'ReplayBuffer.insert: leaf shape {x.shape} differs '
                         f'from the stored {store.shape[1:]}.')
    for store, x in zip(self._leaves, leaves):
      if isinstance(store, frame_store.FrameStore):
        store.write(slot, x)
      else:
        store[slot] = x
    if self.prioritized:
      self._set_priorities(np.full([self.slots_per_item], slot),
                           np.arange(self.slots_per_item),
                           np.full([self.slots_per_item], self._max_priority))
    self._size = min(self._size + 1, self.capacity)
    self._num_stored += 1
    return slot

  def insert_batch(self, batch, batch_size: int):
    """Offers the `batch_size` unrolls of a batch-major nest `[B, ...]`."""
    for i in range(batch_size):
      self.insert(tree.map_structure(lambda x, i=i: x[i], batch))

  def sample_indices(self, n: int) -> np.ndarray:
    if self._size == 0:
      raise ValueError('ReplayBuffer.sample: the buffer is empty.')
    return self._rng.randint(self._size, size=n)

  def sample(self, n: int):
    """`n` unrolls drawn uniformly with replacement, batch-major `[n, ...]`."""
    return self.get(self.sample_indices(n))

  def get(self, indices):
    """The items at `indices` (int `[n]`), batch-major `[n, ...]`."""
    indices = np.asarray(indices)
    return tree.unflatten_as(self._structure,
                             [leaf.read(indices)
                              if isinstance(leaf, frame_store.FrameStore)
                              else leaf[indices] for leaf in self._leaves])

  def get_windows(self, indices, starts, length: int):
    """Windows of `length` steps cut from stored unrolls.

    The items must be `types.Unroll`s: their `env_outputs` and
    `agent_outputs` leaves are cut to steps `[start, start + length)`, their
    `agent_state` (no time axis) is returned whole.

    Args:
      indices: int `[n]`, the items.
      starts: int `[n]`, first step of each window.
      length: steps per window; `start + length` must not pass the end.

    Returns:
      A batch-major `Unroll` of `[n, length, ...]` leaves (`[n, ...]` state).
    """
    indices = np.asarray(indices, np.int64)
    starts = np.asarray(starts, np.int64)
    if self._size == 0:
      raise ValueError('ReplayBuffer.get_windows: the buffer is empty.')
    timed = tree.flatten(self._structure._replace(
        agent_state=tree.map_structure(lambda _: False,
                                       self._structure.agent_state),
        env_outputs=tree.map_structure(lambda _: True,
                                       self._structure.env_outputs),
        agent_outputs=tree.map_structure(lambda _: True,
                                         self._structure.agent_outputs)))
    steps = starts[:, None] + np.arange(length)[None]
    leaves = []
    for leaf, has_time in zip(self._leaves, timed):
      if not has_time:
        leaves.append(leaf[indices])
        continue
      if np.any(steps[:, -1] >= leaf.shape[1]) or np.any(starts < 0):
        raise ValueError(
            f'ReplayBuffer.get_windows: windows of {length} steps starting '
            f'at {starts.min()}..{starts.max()} leave unrolls of '
            f'{leaf.shape[1]} steps.')
      if isinstance(leaf, frame_store.FrameStore):
        leaves.append(leaf.read(indices, starts, length))
      else:
        leaves.append(leaf[indices[:, None], steps])
    return tree.unflatten_as(self._structure, leaves)

  # --- Slots and priorities --------------------------------------------------

  def sample_slots(self, n: int, importance_exponent: float = 0.0
                   ) -> SlotSample:
    """Draws `n` (item, slot) pairs with replacement.

    Uniform over all slots of the stored items, or proportional to
    priority^alpha when the buffer is prioritized.

    Args:
      n: number of draws.
      importance_exponent: beta of the importance weights (N P)^-beta,
        normalised by their largest possible value (prioritized only).
    """
    if self._size == 0:
      raise ValueError('ReplayBuffer.sample_slots: the buffer is empty.')
    num_slots = self._size * self.slots_per_item
    if not self.prioritized:
      flat = self._rng.randint(num_slots, size=n)
      probabilities = np.full([n], 1.0 / num_slots)
      weights = np.ones([n], np.float32)
    else:
      total = self._tree.total
      flat = self._tree.find(self._rng.uniform(size=n) * total)
      flat = np.minimum(flat, num_slots - 1)  # Round-off at the top end.
      probabilities = self._tree.nodes[flat + self._tree.size] / total
      smallest = self._tree.leaves(num_slots).min() / total
      weights = ((num_slots * probabilities) /
                 (num_slots * smallest))**-importance_exponent
      weights = weights.astype(np.float32)
    indices, slots = np.divmod(flat.astype(np.int64), self.slots_per_item)
    return SlotSample(indices, slots, probabilities, weights)

  def update_priorities(self, indices, slots, priorities):
    """Sets the priorities (e.g. |TD error|) of the given (item, slot) pairs.

    Raises:
      ValueError: the buffer is uniform, or a priority is negative or not
        finite.
    """
    if not self.prioritized:
      raise ValueError('ReplayBuffer.update_priorities: the buffer is '
                       'uniform (prioritized=False).')
    priorities = np.asarray(priorities, np.float64)
    if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
      raise ValueError('ReplayBuffer.update_priorities: priorities must be '
                       f'finite and >= 0, got {priorities}.')
    self._set_priorities(np.asarray(indices), np.asarray(slots), priorities)
    if priorities.size:
      self._max_priority = max(self._max_priority, float(priorities.max()))

  def _set_priorities(self, indices, slots, priorities):
    self._priorities[indices, slots] = priorities
    self._tree.set(indices * self.slots_per_item + slots,
                   (priorities + self.min_priority)**self.priority_exponent)

  # --- State ----------------------------------------------------------------

  def save(self, directory: str):
    """Writes contents, counters and RNG state to `directory` (no pickle)."""
    os.makedirs(directory, exist_ok=True)
    rng_state = self._rng.get_state()
    np.save(os.path.join(directory, 'rng_keys.npy'), rng_state[1])
    stacked = []
    for i, leaf in enumerate(self._leaves or ()):
      if isinstance(leaf, frame_store.FrameStore):
        stacked.append(i)
        for name, array in leaf.arrays(self._size).items():
          np.save(_frames_path(directory, i, name), array)
      else:
        np.save(os.path.join(directory, f'contents_{i:03d}.npy'),
                leaf[:self._size])
    paths = tree.flatten_with_path(self._structure) if self._structure else []
    meta = {
        'capacity': self.capacity, 'sampling': self.sampling,
        'size': self._size, 'num_seen': self._num_seen,
        'num_stored': self._num_stored,
        'rng': [rng_state[0], int(rng_state[2]), int(rng_state[3]),
                float(rng_state[4])],
        'num_leaves': len(self._leaves or ()),
        'paths': [[str(p) for p in path] for path, _ in paths],
        'prioritized': self.prioritized,
        'slots_per_item': self.slots_per_item,
        'max_priority': self._max_priority,
        'stacked_leaves': stacked,
    }
    if self._fifo_offset:
      meta['fifo_offset'] = self._fifo_offset
    if self.prioritized:
      np.save(os.path.join(directory, 'priorities.npy'),
              self._priorities[:self._size])
    tmp = os.path.join(directory, _STATE_FILE + '.tmp')
    with open(tmp, 'w') as f:
      json.dump(meta, f)
    os.replace(tmp, os.path.join(directory, _STATE_FILE))

  def restore(self, directory: str, template) -> Restored:
    """Reads a `save`d state back; `template` is one unroll of the same form.

    A buffer saved with another capacity is resized: growing keeps every
    unroll; shrinking keeps a uniform sample of them (reservoir: each unroll
    seen then stays with chance capacity / seen, as if the buffer had always
    had this capacity) or the newest (FIFO).

    Returns:
      `Restored`: the saved capacity and size, and the unrolls kept.

    Raises:
      ValueError: the saved buffer does not match this one or the template.
    """
    with open(os.path.join(directory, _STATE_FILE)) as f:
      meta = json.load(f)
    if meta['sampling'] != self.sampling:
      raise ValueError(
          f'ReplayBuffer.restore: saved buffer has sampling '
          f'{meta["sampling"]!r}, this one {self.sampling!r}.')
    self._allocate(template)
    if meta['size'] and meta['num_leaves'] != len(self._leaves):
      raise ValueError('ReplayBuffer.restore: saved unrolls have a different '
                       'structure from this agent\'s.')
    saved_size = meta['size']
    keys = np.load(os.path.join(directory, 'rng_keys.npy'), allow_pickle=False)
    name, pos, has_gauss, cached = meta['rng']
    self._rng.set_state((name, keys, pos, has_gauss, cached))
    resized = meta['capacity'] != self.capacity
    keep = self._kept_slots(meta) if resized else None
    size = saved_size if keep is None else len(keep)
    saved_stacked = set(meta.get('stacked_leaves', ()))
    for i, leaf in enumerate(self._leaves if size else ()):
      is_store = isinstance(leaf, frame_store.FrameStore)
      if i in saved_stacked:
        if not is_store:
          raise ValueError(
              f'ReplayBuffer.restore: leaf {i} was saved as frame-once '
              'stacks, but this buffer stores it as it arrives '
              f'(stacked_observations={list(self.stacked_observations)}).')
        arrays = {name: np.load(_frames_path(directory, i, name),
                                mmap_mode='r' if name == 'planes' else None,
                                allow_pickle=False)
                  for name in _FRAME_ARRAYS}
        if keep is not None:
          if len(arrays['table']) != saved_size:
            raise ValueError(f'ReplayBuffer.restore: saved leaf {i} holds '
                             f'{len(arrays["table"])} unrolls, not '
                             f'{saved_size}.')
          arrays = frame_store.FrameStore.subset_arrays(arrays, keep)
        leaf.load_arrays(arrays, size)
        continue
      # Stacks saved whole (by a buffer that stores them as they arrive) are
      # read lazily and encoded slot by slot.
      saved = np.load(os.path.join(directory, f'contents_{i:03d}.npy'),
                      mmap_mode='r' if is_store or keep is not None else None,
                      allow_pickle=False)
      if (saved.shape != (saved_size,) + leaf.shape[1:] or
          saved.dtype != leaf.dtype):
        raise ValueError('ReplayBuffer.restore: saved leaf '
                         f'{saved.dtype}{list(saved.shape)} does not match '
                         f'{saved_size} unrolls of {leaf.dtype}'
                         f'{list(leaf.shape[1:])}.')
      rows = range(size) if keep is None else keep
      if is_store:
        for slot, row in enumerate(rows):
          leaf.write(slot, saved[row])
      else:
        leaf[:size] = saved if keep is None else saved[keep]
    self._size = size
    self._num_seen = meta['num_seen']
    self._num_stored = meta['num_stored']
    self._fifo_offset = int(meta.get('fifo_offset', 0))
    if keep is not None and self.sampling == 'fifo':
      # The oldest kept unroll is overwritten first once the buffer is full.
      self._fifo_offset = (self._num_seen - size) % self.capacity
    if self.prioritized:
      self._restore_priorities(directory, meta, keep)
    return Restored(meta['capacity'], saved_size, size)

  def _kept_slots(self, meta) -> np.ndarray:
    """The saved slots a buffer of another capacity keeps, in the order
    they go into slots 0, 1, ... (oldest first for FIFO)."""
    size, capacity = meta['size'], meta['capacity']
    if self.sampling == 'fifo':
      if size < capacity:
        order = np.arange(size)  # Never wrapped: slots in insertion order.
      else:
        oldest = (meta['num_seen'] - meta.get('fifo_offset', 0)) % capacity
        order = (oldest + np.arange(capacity)) % capacity
      return order[max(0, size - self.capacity):]
    if size <= self.capacity:
      return np.arange(size)
    return np.sort(self._rng.choice(size, self.capacity, replace=False))

  def _restore_priorities(self, directory, meta, keep=None):
    """Priorities from a prioritized save (of the saved slots `keep`, when
    resized); a uniform save gives all 1."""
    self._priorities[:] = 0.0
    self._tree = _SumTree(self.capacity * self.slots_per_item)
    size = self._size
    self._max_priority = 1.0
    saved = np.ones([size, self.slots_per_item])
    if meta.get('prioritized', False):
      if meta['slots_per_item'] != self.slots_per_item:
        raise ValueError(
            f'ReplayBuffer.restore: saved priorities have '
            f'{meta["slots_per_item"]} slots per item, this buffer '
            f'{self.slots_per_item}.')
      saved = np.load(os.path.join(directory, 'priorities.npy'),
                      allow_pickle=False)
      if keep is not None and saved.shape[0] == meta['size']:
        saved = saved[keep]
      if saved.shape != (size, self.slots_per_item):
        raise ValueError('ReplayBuffer.restore: saved priorities have shape '
                         f'{saved.shape}, expected '
                         f'{(size, self.slots_per_item)}.')
      self._max_priority = float(meta['max_priority'])
    if size:
      items = np.repeat(np.arange(size), self.slots_per_item)
      slots = np.tile(np.arange(self.slots_per_item), size)
      self._set_priorities(items, slots, saved.reshape(-1).astype(np.float64))


_FRAME_ARRAYS = ('planes', 'table', 'spill', 'spill_slots')


def _frames_path(directory: str, leaf: int, name: str) -> str:
  return os.path.join(directory, f'frames_{leaf:03d}_{name}.npy')


def swap_time_and_batch(batch):
  """Swaps the batch and time axes of an unroll batch's time-indexed parts.

  `[B, T + 1, ...]` (as stored) <-> `[T + 1, B, ...]` (as learners take).

  `Unroll.agent_state` has no time axis and stays `[B, ...]`.
  """
  swap = lambda x: np.swapaxes(x, 0, 1)
  return batch._replace(env_outputs=tree.map_structure(swap,
                                                       batch.env_outputs),
                        agent_outputs=tree.map_structure(swap,
                                                         batch.agent_outputs))


def concat_batches(first, second):
  """Concatenates two batch-major nests along the batch axis."""
  return tree.map_structure(lambda a, b: np.concatenate([a, b], 0), first,
                            second)


def replay_batch_size(batch_size: int, replay_proportion: float) -> int:
  """Number of replayed unrolls in a batch: batch * proportion, rounded.

  Halves round up (Python's `round` would send 0.5 to 0 and 2.5 to 2).

  Raises:
    ValueError: the proportion is outside [0, 1) or leaves no fresh unroll.
  """
  if not 0.0 <= replay_proportion < 1.0:
    raise ValueError('replay_proportion must be in [0, 1), got '
                     f'{replay_proportion}.')
  num_replay = int(np.floor(batch_size * replay_proportion + 0.5))
  if num_replay >= batch_size:
    raise ValueError(
        f'replay_proportion={replay_proportion} rounds to {num_replay} of '
        f'batch_size={batch_size} unrolls, leaving no fresh unroll.')
  return num_replay


def assemble_batch(buffer: Optional[ReplayBuffer], fresh, num_fresh: int,
                   num_replay: int):
  """Builds a learner batch: `num_replay` replayed unrolls, then fresh ones.

  Replayed unrolls are sampled *before* the fresh ones are inserted, so a
  fresh unroll never also appears as its own replay in the same batch.

  Args:
    buffer: the replay buffer (must hold an unroll when num_replay > 0), or
      None for plain IMPALA (then num_replay must be 0).
    fresh: batch-major nest `[num_fresh, ...]` of new unrolls.
    num_fresh: number of fresh unrolls.
    num_replay: number of replayed unrolls, placed in the first columns.

  Returns:
    The time-major batch (`[T + 1, num_replay + num_fresh, ...]`).
  """
  batch = fresh
  if num_replay:
    batch = concat_batches(buffer.sample(num_replay), fresh)
  if buffer is not None:
    buffer.insert_batch(fresh, num_fresh)
  return swap_time_and_batch(batch)
