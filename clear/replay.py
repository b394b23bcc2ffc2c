"""The CLEAR replay buffer: whole unrolls, reservoir or FIFO, uniform sampling.

An item is one `types.Unroll` for a single trajectory (`[T + 1, ...]`
leaves, no batch dim), behaviour logits and baselines included. Storage is
one preallocated array per leaf (`[capacity, ...]`, the leaf's own dtype, so
uint8 frames stay uint8), in memory or memory-mapped on disk so a buffer can
exceed RAM.

Reservoir insertion keeps every unroll ever offered with equal probability
capacity / num_seen (CLEAR, Rolnick et al. 2019); FIFO overwrites the oldest.
Sampling is uniform with replacement over the stored unrolls.

The state (contents, counters, sampler RNG) saves to `.npy` files plus a
JSON description, read back with `allow_pickle=False`, so nothing on disk can
execute code.
"""

import json
import os
from typing import NamedTuple, Optional

import numpy as np
import tree

SAMPLING_MODES = ('reservoir', 'fifo')
STORAGE_MODES = ('memory', 'memmap')
_STATE_FILE = 'replay.json'


class ReplayStats(NamedTuple):
  """Counters worth logging: fill, insertions, bytes held."""
  size: int
  capacity: int
  num_seen: int
  num_stored: int
  nbytes: int


class ReplayBuffer:
  """A fixed-capacity store of unrolls with uniform sampling.

  Args:
    capacity: maximum number of unrolls held.
    sampling: 'reservoir' (every unroll seen is kept with equal chance) or
      'fifo' (the newest `capacity` are kept).
    seed: seed of the buffer's own RNG (insertion and sampling).
    storage: 'memory' or 'memmap' (arrays in `.npy` files under `directory`).
    directory: folder of the memory-mapped arrays (memmap storage only).
  """

  def __init__(self, capacity: int, sampling: str = 'reservoir',
               seed: int = 0, storage: str = 'memory',
               directory: Optional[str] = None):
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
    self.capacity = capacity
    self.sampling = sampling
    self.storage = storage
    self.directory = directory
    self._rng = np.random.RandomState(seed)
    self._structure = None
    self._leaves = None  # List of [capacity, ...] arrays.
    self._size = 0
    self._num_seen = 0
    self._num_stored = 0

  # --- Properties ------------------------------------------------------------

  def __len__(self):
    return self._size

  @property
  def num_seen(self) -> int:
    """Unrolls offered to the buffer so far."""
    return self._num_seen

  @property
  def nbytes(self) -> int:
    """Bytes of the preallocated storage (0 before the first insert)."""
    return sum(leaf.nbytes for leaf in self._leaves or ())

  def stats(self) -> ReplayStats:
    return ReplayStats(self._size, self.capacity, self._num_seen,
                       self._num_stored, self.nbytes)

  # --- Insertion and sampling ------------------------------------------------

  def _allocate(self, item):
    self._structure = tree.map_structure(lambda _: None, item)
    leaves = [np.asarray(x) for x in tree.flatten(item)]
    if self.storage == 'memmap':
      os.makedirs(self.directory, exist_ok=True)
      self._leaves = [
          np.lib.format.open_memmap(
              os.path.join(self.directory, f'leaf_{i:03d}.npy'), mode='w+',
              dtype=x.dtype, shape=(self.capacity,) + x.shape)
          for i, x in enumerate(leaves)]
    else:
      self._leaves = [np.zeros((self.capacity,) + x.shape, x.dtype)
                      for x in leaves]

  def _slot(self) -> Optional[int]:
    """The slot the next offered unroll goes to, or None to drop it."""
    if self._size < self.capacity:
      return self._size
    if self.sampling == 'fifo':
      return (self._num_seen - 1) % self.capacity
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
      store[slot] = x
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
    indices = self.sample_indices(n)
    return tree.unflatten_as(self._structure,
                             [leaf[indices] for leaf in self._leaves])

  # --- State -------------------------------------------------------------------

  def save(self, directory: str):
    """Writes contents, counters and RNG state to `directory` (no pickle)."""
    os.makedirs(directory, exist_ok=True)
    rng_state = self._rng.get_state()
    np.save(os.path.join(directory, 'rng_keys.npy'), rng_state[1])
    for i, leaf in enumerate(self._leaves or ()):
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
    }
    tmp = os.path.join(directory, _STATE_FILE + '.tmp')
    with open(tmp, 'w') as f:
      json.dump(meta, f)
    os.replace(tmp, os.path.join(directory, _STATE_FILE))

  def restore(self, directory: str, template):
    """Reads a `save`d state back; `template` is one unroll of the same form.

    Raises:
      ValueError: the saved buffer does not match this one or the template.
    """
    with open(os.path.join(directory, _STATE_FILE)) as f:
      meta = json.load(f)
    if meta['capacity'] != self.capacity or meta['sampling'] != self.sampling:
      raise ValueError(
          f'ReplayBuffer.restore: saved buffer has capacity '
          f'{meta["capacity"]} and sampling {meta["sampling"]!r}, this one '
          f'{self.capacity} and {self.sampling!r}.')
    self._allocate(template)
    if meta['size'] and meta['num_leaves'] != len(self._leaves):
      raise ValueError('ReplayBuffer.restore: saved unrolls have a different '
                       'structure from this agent\'s.')
    size = meta['size']
    for i, leaf in enumerate(self._leaves if size else ()):
      saved = np.load(os.path.join(directory, f'contents_{i:03d}.npy'),
                      allow_pickle=False)
      if saved.shape[1:] != leaf.shape[1:] or saved.dtype != leaf.dtype:
        raise ValueError('ReplayBuffer.restore: saved leaf '
                         f'{saved.shape[1:]} {saved.dtype} does not match '
                         f'{leaf.shape[1:]} {leaf.dtype}.')
      leaf[:size] = saved
    keys = np.load(os.path.join(directory, 'rng_keys.npy'), allow_pickle=False)
    name, pos, has_gauss, cached = meta['rng']
    self._rng.set_state((name, keys, pos, has_gauss, cached))
    self._size = size
    self._num_seen = meta['num_seen']
    self._num_stored = meta['num_stored']


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
