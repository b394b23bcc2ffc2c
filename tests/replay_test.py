"""Tests of the CLEAR replay buffer: sampling statistics, splits, state."""

import json
import os

import numpy as np
import pytest
import tree

from clear import types
from clear.replay import buffer as replay
from clear.replay import frame_store
import envs
from tests import frame_stacking


def unroll(uid, t=3, rng=None):
  """A small single-trajectory unroll whose every leaf encodes `uid`."""
  rng = rng or np.random.RandomState(uid)
  return types.Unroll(
      agent_state=(np.full([4], uid, np.float32),),
      env_outputs=types.StepOutput(
          reward=np.full([t + 1], uid, np.float32),
          info=types.EpisodeInfo(np.zeros([t + 1], np.float32),
                                 np.zeros([t + 1], np.int32),
                                 np.zeros([t + 1], np.int32)),
          done=np.zeros([t + 1], bool), truncated=np.zeros([t + 1], bool),
          observation={'frame': np.full([t + 1, 6, 6, 2], uid % 256,
                                        np.uint8)}),
      agent_outputs=types.AgentOutput(
          action={'action': np.full([t + 1], uid, np.int32)},
          logits={'action': rng.randn(t + 1, 5).astype(np.float32)},
          baseline=rng.randn(t + 1).astype(np.float32)))


def stored_ids(buffer):
  return sorted(int(x) for x in
                buffer._leaves[0][:len(buffer), 0])  # agent_state leaf.


def test_reservoir_keeps_an_unbiased_sample():
  capacity, offered, trials = 10, 60, 1500
  counts = np.zeros(offered)
  template = unroll(0)
  for trial in range(trials):
    buffer = replay.ReplayBuffer(capacity, 'reservoir', seed=trial)
    for uid in range(offered):
      buffer.insert(template._replace(agent_state=(np.full([4], uid,
                                                            np.float32),)))
    counts[stored_ids(buffer)] += 1
  frequency = counts / trials
  # Each unroll is kept with probability capacity / offered = 1/6; the
  # binomial standard deviation over 1500 trials is about 0.0096.
  np.testing.assert_allclose(frequency, capacity / offered, atol=0.045)
  # Early and late halves are kept equally often (FIFO would keep only late).
  assert abs(frequency[:30].mean() - frequency[30:].mean()) < 0.02


def test_fifo_keeps_the_newest():
  buffer = replay.ReplayBuffer(4, 'fifo')
  for uid in range(11):
    buffer.insert(unroll(uid))
  assert stored_ids(buffer) == [7, 8, 9, 10]
  assert buffer.num_seen == 11 and len(buffer) == 4


def test_sampling_is_uniform_over_stored_unrolls():
  buffer = replay.ReplayBuffer(5, seed=3)
  for uid in range(5):
    buffer.insert(unroll(uid))
  ids = buffer.sample(20000).agent_state[0][:, 0].astype(int)
  frequency = np.bincount(ids, minlength=5) / 20000
  np.testing.assert_allclose(frequency, 0.2, atol=0.015)


def test_behaviour_logits_come_back_bit_exact():
  buffer = replay.ReplayBuffer(3)
  items = [unroll(uid) for uid in range(3)]
  for item in items:
    buffer.insert(item)
  sampled = buffer.sample(30)
  for i in range(30):
    uid = int(sampled.agent_state[0][i, 0])
    got = tree.map_structure(lambda x, i=i: x[i], sampled)
    tree.map_structure(np.testing.assert_array_equal, got, items[uid])
    assert got.agent_outputs.logits['action'].tobytes() == items[
        uid].agent_outputs.logits['action'].tobytes()


def test_frames_are_stored_as_uint8_and_bytes_reported():
  buffer = replay.ReplayBuffer(7)
  buffer.insert(unroll(1))
  dtypes = [leaf.dtype for leaf in buffer._leaves]
  assert np.dtype(np.uint8) in dtypes
  expected = sum(7 * np.asarray(x).nbytes for x in tree.flatten(unroll(1)))
  assert buffer.nbytes == expected
  assert buffer.stats().nbytes == expected


@pytest.mark.parametrize('batch_size,proportion,expected', [
    (32, 0.5, 16), (32, 0.0, 0), (10, 0.25, 3), (10, 0.24, 2), (8, 0.875, 7),
    (3, 0.5, 2)])
def test_replay_batch_size(batch_size, proportion, expected):
  assert replay.replay_batch_size(batch_size, proportion) == expected


@pytest.mark.parametrize('batch_size,proportion', [
    (32, 1.0), (32, -0.1), (4, 0.9), (1, 0.5)])
def test_replay_batch_size_rejects_impossible_splits(batch_size, proportion):
  with pytest.raises(ValueError, match='replay_proportion'):
    replay.replay_batch_size(batch_size, proportion)


def stack(items):
  return tree.map_structure(lambda *x: np.stack(x), *items)


def test_assemble_batch_puts_replay_first_and_never_its_own_fresh():
  buffer = replay.ReplayBuffer(100, seed=0)
  for uid in range(5):
    buffer.insert(unroll(uid))
  fresh = stack([unroll(uid) for uid in (100, 101, 102)])
  batch = replay.assemble_batch(buffer, fresh, 3, 4)
  ids = batch.agent_state[0][:, 0].astype(int)
  assert ids.shape == (7,)
  assert all(i < 5 for i in ids[:4]), ids
  assert list(ids[4:]) == [100, 101, 102]
  # Time-major: rewards are [T + 1, B].
  assert batch.env_outputs.reward.shape == (4, 7)
  np.testing.assert_array_equal(batch.env_outputs.reward[:, 4], 100)
  assert batch.env_outputs.observation['frame'].shape == (4, 7, 6, 6, 2)
  # The fresh unrolls were inserted after sampling.
  assert len(buffer) == 8


def test_assemble_batch_without_replay():
  fresh = stack([unroll(uid) for uid in (1, 2)])
  batch = replay.assemble_batch(None, fresh, 2, 0)
  assert batch.agent_outputs.baseline.shape == (4, 2)


@pytest.mark.parametrize('storage', ['memory', 'memmap'])
def test_save_and_restore_are_identical_and_continue_the_sampler(
    tmp_path, storage):
  kwargs = dict(storage=storage, directory=str(tmp_path / 'mm'))
  buffer = replay.ReplayBuffer(6, 'reservoir', seed=5, **kwargs)
  for uid in range(20):
    buffer.insert(unroll(uid))
  buffer.save(str(tmp_path / 'state'))
  restored = replay.ReplayBuffer(6, 'reservoir', seed=99,
                                 storage=storage,
                                 directory=str(tmp_path / 'mm2'))
  restored.restore(str(tmp_path / 'state'), unroll(0))
  assert restored.stats() == buffer.stats()
  for a, b in zip(buffer._leaves, restored._leaves):
    np.testing.assert_array_equal(a, b)
  # Same RNG state: the next insertions and samples agree.
  for uid in range(20, 30):
    assert buffer.insert(unroll(uid)) == restored.insert(unroll(uid))
  tree.map_structure(np.testing.assert_array_equal, buffer.sample(8),
                     restored.sample(8))
  if storage == 'memmap':
    assert os.path.exists(tmp_path / 'mm' / 'leaf_000.npy')


def test_restore_loads_no_pickles(tmp_path):
  buffer = replay.ReplayBuffer(2)
  buffer.insert(unroll(1))
  buffer.save(str(tmp_path))
  # Replace a contents file with a pickled object array.
  np.save(str(tmp_path / 'contents_000.npy'), np.array([object()]),
          allow_pickle=True)
  with pytest.raises(ValueError, match='allow_pickle'):
    replay.ReplayBuffer(2).restore(str(tmp_path), unroll(0))


def test_restore_rejects_a_different_buffer(tmp_path):
  buffer = replay.ReplayBuffer(2)
  buffer.insert(unroll(1))
  buffer.save(str(tmp_path))
  with pytest.raises(ValueError, match='sampling'):
    replay.ReplayBuffer(2, 'fifo').restore(str(tmp_path), unroll(0))


def ids_in_slots(buffer):
  """The uid of each stored unroll, by slot."""
  return [int(x) for x in buffer._leaves[0][:len(buffer), 0]]


def assert_items_are_their_originals(buffer):
  """Every stored unroll is, leaf for leaf, the `unroll(uid)` it was."""
  for slot, uid in enumerate(ids_in_slots(buffer)):
    got = tree.map_structure(lambda x: x[0], buffer.get([slot]))
    tree.map_structure(np.testing.assert_array_equal, got, unroll(uid))


@pytest.mark.parametrize('storage', ['memory', 'memmap'])
def test_a_fifo_restored_into_another_capacity_keeps_the_newest(tmp_path,
                                                                storage):
  def buffer(capacity, name):
    return replay.ReplayBuffer(capacity, 'fifo', storage=storage,
                               directory=str(tmp_path / name))

  for old, new, offered in ((6, 4, 20), (4, 6, 10), (4, 9, 3), (6, 4, 5)):
    saved = buffer(old, 'a')
    for uid in range(offered):
      saved.insert(unroll(uid))
    saved.save(str(tmp_path / f'{old}_{new}_{offered}'))
    restored = buffer(new, 'b')
    info = restored.restore(str(tmp_path / f'{old}_{new}_{offered}'),
                            unroll(0))
    kept = min(new, offered, old)
    assert info == replay.Restored(old, min(old, offered), kept)
    assert sorted(ids_in_slots(restored)) == list(range(
        min(old, offered) - kept + max(0, offered - old),
        max(0, offered - old) + min(old, offered)))
    assert_items_are_their_originals(restored)
    # From here on, once full, it holds what a FIFO of the new capacity
    # that had seen every unroll holds: each insert drops the oldest.
    reference = buffer(new, 'c')
    for uid in range(offered):
      reference.insert(unroll(uid))
    for uid in range(offered, offered + 2 * new):
      reference.insert(unroll(uid))
      restored.insert(unroll(uid))
      got, want = set(ids_in_slots(restored)), set(ids_in_slots(reference))
      assert got <= want
      assert got == want or len(restored) < new
    assert sorted(ids_in_slots(restored)) == list(range(
        offered + new, offered + 2 * new))
    # Saved and restored again at the new size, it goes on the same way.
    restored.save(str(tmp_path / 'again'))
    again = buffer(new, 'd')
    again.restore(str(tmp_path / 'again'), unroll(0))
    for uid in range(offered + 2 * new, offered + 3 * new - 1):
      assert again.insert(unroll(uid)) == restored.insert(unroll(uid))
    assert ids_in_slots(again) == ids_in_slots(restored)


def test_a_reservoir_shrunk_on_restore_keeps_a_uniform_sample(tmp_path):
  # 10 of 40 unrolls stored; restored into 4, each of the 40 must then be
  # kept with chance 4 / 40, as by a reservoir that always had 4.
  counts = np.zeros(40)
  trials = 200
  for trial in range(trials):
    saved = replay.ReplayBuffer(10, 'reservoir', seed=trial)
    for uid in range(40):
      saved.insert(unroll(uid))
    saved.save(str(tmp_path / 'state'))
    restored = replay.ReplayBuffer(4, 'reservoir', seed=0)
    info = restored.restore(str(tmp_path / 'state'), unroll(0))
    assert info == replay.Restored(10, 10, 4) and len(restored) == 4
    assert set(ids_in_slots(restored)) <= set(ids_in_slots(saved))
    counts[ids_in_slots(restored)] += 1
    if trial == 0:
      assert_items_are_their_originals(restored)
      assert restored.num_seen == 40
  # Binomial sd of a frequency of 0.1 over 200 trials: 0.021.
  np.testing.assert_allclose(counts / trials, 4 / 40, atol=0.08)
  # Early and late unrolls alike.
  assert abs((counts[:20] - counts[20:]).mean()) / trials < 0.03
  # Grown, it keeps everything it held.
  restored = replay.ReplayBuffer(16, 'reservoir')
  assert restored.restore(str(tmp_path / 'state'), unroll(0)) == (
      replay.Restored(10, 10, 10))
  assert sorted(ids_in_slots(restored)) == sorted(ids_in_slots(saved))


def test_priorities_follow_their_unrolls_into_another_capacity(tmp_path):
  kwargs = dict(prioritized=True, slots_per_item=2)
  saved = replay.ReplayBuffer(5, 'fifo', **kwargs)
  for uid in range(8):
    saved.insert(unroll(uid))
  ids = ids_in_slots(saved)
  saved.update_priorities(np.repeat(np.arange(5), 2), np.tile([0, 1], 5),
                          [10 * ids[i // 2] + i % 2 for i in range(10)])
  saved.save(str(tmp_path))
  restored = replay.ReplayBuffer(3, 'fifo', **kwargs)
  restored.restore(str(tmp_path), unroll(0))
  expected = [[10 * uid, 10 * uid + 1] for uid in ids_in_slots(restored)]
  np.testing.assert_array_equal(restored.priorities, expected)
  assert sorted(ids_in_slots(restored)) == [5, 6, 7]


def test_the_storage_plan_is_what_the_first_insert_allocates(tmp_path):
  for storage in ('memory', 'memmap'):
    plain = replay.ReplayBuffer(7, storage=storage,
                                directory=str(tmp_path / f'p{storage}'))
    plan = plain.storage_plan(unroll(1))
    # An independent count: every leaf of an unroll, 7 times.
    expected = sum(7 * np.asarray(x).nbytes for x in tree.flatten(unroll(1)))
    assert plan.memory_bytes + plan.disk_bytes == expected
    assert plan.disk_bytes == (expected if storage == 'memmap' else 0)
    assert plan.item_bytes == -(-expected // 7) and plan.capacity == 7
    plain.insert(unroll(1))
    assert plain.nbytes == expected
    stacked = replay.ReplayBuffer(7, storage=storage,
                                  directory=str(tmp_path / f's{storage}'),
                                  stacked_observations=('frame',))
    plan = stacked.storage_plan(unroll(1))
    stacked.insert(unroll(1))
    assert plan.memory_bytes + plan.disk_bytes == stacked.nbytes
    # Frames: T + K = 5 planes of 6 x 6 per unroll instead of 4 stacks of
    # 6 x 6 x 2; the table (4 x 2 uint8) and a flag stay in memory.
    frames = 7 * 5 * 6 * 6
    assert expected - stacked.nbytes == 7 * 4 * 6 * 6 * 2 - frames - 7 * 9
    assert plan.disk_bytes == (stacked.nbytes - 7 * 9 if storage == 'memmap'
                               else 0)


def test_memmap_files_get_their_disk_blocks_when_allocated(tmp_path):
  buffer = replay.ReplayBuffer(300, storage='memmap',
                               directory=str(tmp_path / 'mm'),
                               stacked_observations=('frame',))
  buffer.allocate(unroll(1))
  leaves = list(buffer._leaves)
  buffer.allocate(unroll(2))  # Allocated already: nothing changes.
  assert all(a is b for a, b in zip(buffer._leaves, leaves))
  assert len(buffer) == 0 and buffer.nbytes == sum(
      buffer.storage_plan(unroll(1))[:2])
  names = sorted(os.listdir(tmp_path / 'mm'))
  assert 'frames_007.npy' in names and len(names) == len(leaves)
  for name in names:
    stat = os.stat(tmp_path / 'mm' / name)
    assert stat.st_size > 0 and stat.st_blocks * 512 >= stat.st_size, name
  # NumPy alone makes a sparse file, whose blocks a full disk would deny
  # at some later write.
  sparse = np.lib.format.open_memmap(str(tmp_path / 'sparse.npy'), 'w+',
                                     np.uint8, (1 << 20,))
  assert os.stat(tmp_path / 'sparse.npy').st_blocks * 512 < sparse.nbytes
  buffer.insert(unroll(3))
  assert stored_ids(buffer) == [3]


@pytest.mark.parametrize('kwargs,match', [
    ({'capacity': 0}, 'capacity'),
    ({'capacity': 2, 'sampling': 'lifo'}, 'sampling'),
    ({'capacity': 2, 'storage': 'disk'}, 'storage'),
    ({'capacity': 2, 'storage': 'memmap'}, 'directory'),
])
def test_bad_arguments(kwargs, match):
  with pytest.raises(ValueError, match=match):
    replay.ReplayBuffer(**kwargs)


def test_sampling_an_empty_buffer_fails_clearly():
  with pytest.raises(ValueError, match='empty'):
    replay.ReplayBuffer(2).sample(1)


# --- Slots, windows and prioritized sampling ----------------------------------


def filled(capacity, num_items, **kwargs):
  buffer = replay.ReplayBuffer(capacity, 'fifo', **kwargs)
  for uid in range(num_items):
    buffer.insert(unroll(uid))
  return buffer


def test_sum_tree_finds_the_leaf_of_a_cumulative_mass():
  rng = np.random.RandomState(0)
  for num_leaves in (1, 2, 5, 16, 37):
    sums = replay._SumTree(num_leaves)
    values = rng.uniform(0.1, 2.0, size=num_leaves)
    sums.set(np.arange(num_leaves), values)
    values[[0, num_leaves // 2]] = [3.0, 0.5]  # Overwrite two leaves.
    sums.set(np.array([0, num_leaves // 2]), values[[0, num_leaves // 2]])
    np.testing.assert_allclose(sums.total, values.sum())
    masses = rng.uniform(size=200) * values.sum()
    expected = np.searchsorted(np.cumsum(values), masses, side='right')
    np.testing.assert_array_equal(sums.find(masses), expected)


def test_uniform_slots_cover_every_slot_equally():
  buffer = filled(4, 4, seed=1, slots_per_item=3)
  draw = buffer.sample_slots(24000, importance_exponent=0.4)
  counts = np.bincount(draw.indices * 3 + draw.slots, minlength=12) / 24000
  np.testing.assert_allclose(counts, 1 / 12, atol=0.008)
  np.testing.assert_array_equal(draw.weights, 1.0)
  np.testing.assert_allclose(draw.probabilities, 1 / 12)


def test_prioritized_sampling_is_proportional_to_priority_power_alpha():
  alpha = 0.7
  buffer = filled(6, 5, seed=2, prioritized=True, priority_exponent=alpha,
                  slots_per_item=2, min_priority=1e-9)
  priorities = np.array([[0.5, 1.0], [2.0, 0.1], [4.0, 3.0], [0.0, 1.5],
                         [0.25, 8.0]])
  items, slots = np.divmod(np.arange(10), 2)
  buffer.update_priorities(items, slots, priorities.reshape(-1))
  n = 40000
  draw = buffer.sample_slots(n)
  expected = priorities.reshape(-1)**alpha
  expected /= expected.sum()
  frequency = np.bincount(draw.indices * 2 + draw.slots, minlength=10) / n
  # Binomial standard deviations are below 0.0025 here.
  np.testing.assert_allclose(frequency, expected, atol=0.008)
  assert frequency[6] == 0.0  # Priority 0 (plus a 1e-9 floor).
  np.testing.assert_allclose(draw.probabilities,
                             expected[draw.indices * 2 + draw.slots])


def test_importance_weights_follow_the_formula():
  alpha, beta = 0.6, 0.4
  buffer = filled(8, 3, seed=3, prioritized=True, priority_exponent=alpha,
                  min_priority=0.01)
  raw = np.array([0.2, 1.0, 3.0])
  buffer.update_priorities(np.arange(3), np.zeros(3, int), raw)
  draw = buffer.sample_slots(50, importance_exponent=beta)
  p = (raw + 0.01)**alpha
  probability = p / p.sum()
  weights = (3 * probability)**-beta
  weights /= weights.max()
  np.testing.assert_allclose(draw.weights, weights[draw.indices], rtol=1e-5)
  assert draw.weights.dtype == np.float32 and draw.weights.max() <= 1.0


def test_new_items_get_the_largest_priority_so_far():
  buffer = filled(4, 2, prioritized=True, slots_per_item=2)
  np.testing.assert_array_equal(buffer.priorities, 1.0)
  buffer.update_priorities([0, 1], [1, 0], [5.0, 0.5])
  assert buffer.max_priority == 5.0
  buffer.insert(unroll(9))
  np.testing.assert_array_equal(buffer.priorities,
                                [[1.0, 5.0], [0.5, 1.0], [5.0, 5.0]])
  # FIFO overwrites item 0 with fresh, maximal priorities.
  buffer.insert(unroll(10))
  buffer.insert(unroll(11))
  np.testing.assert_array_equal(buffer.priorities[0], [5.0, 5.0])


def test_priority_updates_move_the_sampling():
  buffer = filled(4, 4, seed=4, prioritized=True, priority_exponent=1.0)
  buffer.update_priorities(np.arange(4), np.zeros(4, int), [1., 1., 1., 97.])
  draw = buffer.sample_slots(2000)
  assert 0.94 < np.mean(draw.indices == 3) < 0.99
  buffer.update_priorities([3], [0], [1.0])
  draw = buffer.sample_slots(4000)
  np.testing.assert_allclose(np.bincount(draw.indices) / 4000, 0.25,
                             atol=0.03)


@pytest.mark.parametrize('priorities', [[np.nan], [-1.0], [np.inf]])
def test_bad_priorities_are_rejected(priorities):
  buffer = filled(2, 1, prioritized=True)
  with pytest.raises(ValueError, match='finite'):
    buffer.update_priorities([0], [0], priorities)


def test_uniform_buffer_has_no_priorities():
  buffer = filled(2, 1)
  with pytest.raises(ValueError, match='uniform'):
    buffer.update_priorities([0], [0], [1.0])


def test_get_windows_cuts_time_but_keeps_the_state():
  buffer = replay.ReplayBuffer(4)
  items = [unroll(uid, t=5) for uid in range(3)]
  for item in items:
    buffer.insert(item)
  windows = buffer.get_windows([2, 0, 2], [1, 0, 4], 2)
  assert windows.env_outputs.reward.shape == (3, 2)
  assert windows.agent_outputs.logits['action'].shape == (3, 2, 5)
  assert windows.agent_state[0].shape == (3, 4)
  for row, (uid, start) in enumerate([(2, 1), (0, 0), (2, 4)]):
    np.testing.assert_array_equal(
        windows.agent_outputs.logits['action'][row],
        items[uid].agent_outputs.logits['action'][start:start + 2])
    np.testing.assert_array_equal(windows.agent_state[0][row],
                                  items[uid].agent_state[0])
  with pytest.raises(ValueError, match='leave'):
    buffer.get_windows([0], [5], 2)
  tree.map_structure(np.testing.assert_array_equal, buffer.get([1]),
                     stack([items[1]]))


def test_prioritized_save_and_restore_round_trip(tmp_path):
  kwargs = dict(prioritized=True, priority_exponent=0.5, slots_per_item=3)
  buffer = replay.ReplayBuffer(5, 'fifo', seed=6, **kwargs)
  for uid in range(7):
    buffer.insert(unroll(uid))
  rng = np.random.RandomState(0)
  buffer.update_priorities(np.repeat(np.arange(5), 3), np.tile(np.arange(3), 5),
                           rng.uniform(0, 9, size=15))
  buffer.save(str(tmp_path))
  restored = replay.ReplayBuffer(5, 'fifo', seed=7, **kwargs)
  restored.restore(str(tmp_path), unroll(0))
  np.testing.assert_array_equal(restored.priorities, buffer.priorities)
  assert restored.max_priority == buffer.max_priority
  np.testing.assert_allclose(restored._tree.nodes, buffer._tree.nodes)
  a, b = buffer.sample_slots(64, 0.4), restored.sample_slots(64, 0.4)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  # No pickles: a pickled priorities file is refused.
  np.save(str(tmp_path / 'priorities.npy'), np.array([object()]),
          allow_pickle=True)
  with pytest.raises(ValueError, match='allow_pickle'):
    replay.ReplayBuffer(5, 'fifo', **kwargs).restore(str(tmp_path),
                                                    unroll(0))


def test_uniform_save_restores_into_a_prioritized_buffer(tmp_path):
  filled(4, 3, slots_per_item=2).save(str(tmp_path))
  restored = replay.ReplayBuffer(4, 'fifo', prioritized=True,
                                 slots_per_item=2)
  restored.restore(str(tmp_path), unroll(0))
  np.testing.assert_array_equal(restored.priorities, np.ones([3, 2]))
  with pytest.raises(ValueError, match='slots'):
    filled(4, 3, prioritized=True, slots_per_item=2).save(str(tmp_path))
    replay.ReplayBuffer(4, 'fifo', prioritized=True,
                        slots_per_item=3).restore(str(tmp_path), unroll(0))


# --- Frame-stacked observations stored once per frame -------------------------


def stacked_buffer(capacity, sampling='fifo', **kwargs):
  return replay.ReplayBuffer(capacity, sampling,
                             stacked_observations=('frame',), **kwargs)


def assert_nests_equal(a, b):
  tree.map_structure(np.testing.assert_array_equal, a, b)


def unroll_with_frames(uid, stacks, done):
  """`unroll(uid)` with the given frame stacks `[T + 1, H, W, K]`."""
  base = unroll(uid, t=len(stacks) - 1)
  return base._replace(env_outputs=base.env_outputs._replace(
      done=np.asarray(done, bool), observation={'frame': stacks}))


@pytest.fixture(scope='module')
def atari_unrolls():
  """Unrolls of real Pong stacks, cut at every start as an actor could.

  Episodes are truncated after 160 raw frames (about 30 agent steps after
  the no-op start), so some unrolls begin with an episode's first step and
  others have one inside.
  """
  env = envs.make('atari:Pong', num_envs=2, seed=7, max_episode_frames=160)
  rng = np.random.default_rng(0)
  out = env.reset()
  frames, dones = [out.observation['frame'].copy()], [out.done.copy()]
  for _ in range(90):
    out = env.step({'action': rng.integers(6, size=2)})
    frames.append(out.observation['frame'].copy())
    dones.append(out.done.copy())
  env.close()
  frames, dones = np.stack(frames, 1), np.stack(dones, 1)  # [B, N, ...]
  t = 8
  items = []
  for b in range(2):
    for start in range(frames.shape[1] - t):
      items.append(unroll_with_frames(len(items),
                                      frames[b, start:start + t + 1],
                                      dones[b, start:start + t + 1]))
  return items


def test_atari_unrolls_need_no_more_than_t_plus_k_frames(atari_unrolls):
  starts = sum(bool(u.env_outputs.done[0]) for u in atari_unrolls)
  inside = sum(bool(u.env_outputs.done[1:].any()) for u in atari_unrolls)
  assert starts >= 4 and inside >= 20  # Both cases are covered.
  for item in atari_unrolls:
    stacks = item.env_outputs.observation['frame']
    planes, _ = frame_store.encode(stacks)
    assert len(planes) <= len(stacks) + stacks.shape[-1] - 1


@pytest.mark.parametrize('storage', ['memory', 'memmap'])
def test_atari_unrolls_come_back_as_stored_as_is(tmp_path, atari_unrolls,
                                                 storage):
  capacity = len(atari_unrolls)
  kwargs = lambda name: dict(seed=3, storage=storage,
                             directory=str(tmp_path / name))
  as_is = replay.ReplayBuffer(capacity, 'fifo', **kwargs('as_is'))
  once = stacked_buffer(capacity, **kwargs('once'))
  for item in atari_unrolls:
    assert as_is.insert(item) == once.insert(item)
  assert once.frame_stores['frame'].num_spilled == 0  # Atari fits.
  assert not as_is.frame_stores
  everything = np.arange(capacity)
  assert_nests_equal(once.get(everything), as_is.get(everything))
  assert_nests_equal(once.sample(64), as_is.sample(64))
  starts = np.random.default_rng(1).integers(0, 5, size=capacity)
  assert_nests_equal(once.get_windows(everything, starts, 4),
                     as_is.get_windows(everything, starts, 4))
  # [T + K] = 12 frames instead of 9 stacks of 4, plus the same other leaves.
  frames = capacity * (12 * 84 * 84 + 9 * 4 + 1)
  others = as_is.nbytes - capacity * 9 * 84 * 84 * 4
  assert once.nbytes == once.stats().nbytes == frames + others


def test_random_episode_boundaries_come_back_bit_exact():
  rng = np.random.default_rng(5)
  items = []
  for uid in range(60):
    style = frame_stacking.RESET_STYLES[uid % 3]
    stacks, starts = frame_stacking.random_unroll(
        rng, num_steps=7, depth=3, shape=(6, 6), style=style,
        reset_rate=rng.uniform(0, 0.5))
    items.append(unroll_with_frames(uid, stacks, starts))
  as_is = replay.ReplayBuffer(25, 'reservoir', seed=9)
  once = stacked_buffer(25, 'reservoir', seed=9)
  for item in items:
    assert as_is.insert(item) == once.insert(item)
  assert_nests_equal(once.sample(100), as_is.sample(100))
  starts = rng.integers(0, 5, size=25)
  assert_nests_equal(once.get_windows(np.arange(25), starts, 3),
                     as_is.get_windows(np.arange(25), starts, 3))


@pytest.mark.parametrize('sampling', ['reservoir', 'fifo'])
def test_frame_once_storage_keeps_the_same_unrolls_and_draws(sampling):
  as_is = replay.ReplayBuffer(10, sampling, seed=4)
  once = stacked_buffer(10, sampling, seed=4)
  for uid in range(200):
    assert as_is.insert(unroll(uid)) == once.insert(unroll(uid))
    if uid % 20 == 19:
      assert_nests_equal(once.sample(7), as_is.sample(7))
  assert once.stats()._replace(nbytes=0) == as_is.stats()._replace(nbytes=0)
  assert stored_ids(once) == stored_ids(as_is)


def directory_bytes(path):
  return sum(os.path.getsize(os.path.join(path, name))
             for name in os.listdir(path))


@pytest.mark.parametrize('storage,sampling', [
    ('memory', 'reservoir'), ('memmap', 'fifo'), ('memmap', 'reservoir')])
def test_frame_once_save_and_restore_round_trip(tmp_path, atari_unrolls,
                                                storage, sampling):
  mixed = list(atari_unrolls[:40])
  rng = np.random.default_rng(2)
  for uid in range(40, 50):  # Unrolls that spill past the budget.
    noise = rng.integers(0, 256, (9, 84, 84, 4), dtype=np.uint8)
    mixed.append(unroll_with_frames(uid, noise, np.zeros(9)))
  rng.shuffle(mixed)
  kwargs = lambda name: dict(seed=6, storage=storage,
                             directory=str(tmp_path / name))
  buffer = stacked_buffer(30, sampling, **kwargs('mm'))
  as_is = replay.ReplayBuffer(30, sampling, **kwargs('mm_as_is'))
  for item in mixed:
    buffer.insert(item)
    as_is.insert(item)
  assert buffer.frame_stores['frame'].num_spilled > 0
  buffer.save(str(tmp_path / 'state'))
  as_is.save(str(tmp_path / 'state_as_is'))
  assert not os.path.exists(tmp_path / 'state' / 'contents_007.npy')
  assert (directory_bytes(tmp_path / 'state') <
          0.6 * directory_bytes(tmp_path / 'state_as_is'))
  restored = stacked_buffer(30, sampling, **kwargs('mm2'))
  restored.restore(str(tmp_path / 'state'), mixed[0])
  assert restored.stats() == buffer.stats()
  assert_nests_equal(restored.get(np.arange(30)), buffer.get(np.arange(30)))
  for item in atari_unrolls[40:60]:
    assert buffer.insert(item) == restored.insert(item)
  assert_nests_equal(restored.sample(16), buffer.sample(16))


@pytest.mark.parametrize('storage,sampling', [('memory', 'reservoir'),
                                              ('memmap', 'fifo')])
def test_frame_once_stores_restored_into_another_capacity(
    tmp_path, atari_unrolls, storage, sampling):
  mixed = list(atari_unrolls[:20])
  rng = np.random.default_rng(3)
  for uid in range(20, 26):  # Unrolls that spill past the budget.
    noise = rng.integers(0, 256, (9, 84, 84, 4), dtype=np.uint8)
    mixed.append(unroll_with_frames(uid, noise, np.zeros(9)))
  rng.shuffle(mixed)
  by_uid = {int(item.agent_state[0][0]): item for item in mixed}
  kwargs = lambda name: dict(seed=4, storage=storage,
                             directory=str(tmp_path / name))
  buffer = stacked_buffer(20, sampling, **kwargs('mm'))
  for item in mixed:
    buffer.insert(item)
  assert buffer.frame_stores['frame'].num_spilled > 0
  buffer.save(str(tmp_path / 'state'))
  for capacity in (7, 30):
    restored = stacked_buffer(capacity, sampling,
                              **kwargs(f'mm{capacity}'))
    info = restored.restore(str(tmp_path / 'state'), mixed[0])
    assert info == replay.Restored(20, 20, min(20, capacity))
    ids = ids_in_slots(restored)
    assert set(ids) <= set(ids_in_slots(buffer))
    if sampling == 'fifo':  # The newest of the 26, all distinct.
      newest = [int(item.agent_state[0][0]) for item in mixed[-len(ids):]]
      assert sorted(ids) == sorted(newest)
    for slot, uid in enumerate(ids):
      assert_nests_equal(tree.map_structure(lambda x: x[0],
                                            restored.get([slot])),
                         by_uid[uid])


@pytest.mark.parametrize('storage', ['memory', 'memmap'])
def test_a_state_saved_as_is_is_converted_on_restore(tmp_path, atari_unrolls,
                                                     storage):
  # The layout of the buffer before frame-once storage: every leaf as
  # contents_NNN.npy and no 'stacked_leaves' in replay.json.
  old = replay.ReplayBuffer(20, 'reservoir', seed=8)
  for item in atari_unrolls[:50]:
    old.insert(item)
  old.save(str(tmp_path / 'old'))
  with open(tmp_path / 'old' / 'replay.json') as f:
    meta = json.load(f)
  del meta['stacked_leaves']
  with open(tmp_path / 'old' / 'replay.json', 'w') as f:
    json.dump(meta, f)
  assert os.path.exists(tmp_path / 'old' / 'contents_007.npy')
  new = stacked_buffer(20, 'reservoir', seed=0, storage=storage,
                       directory=str(tmp_path / 'mm'))
  new.restore(str(tmp_path / 'old'), atari_unrolls[0])
  assert new.stats()._replace(nbytes=0) == old.stats()._replace(nbytes=0)
  assert new.nbytes < 0.5 * old.nbytes
  assert_nests_equal(new.get(np.arange(20)), old.get(np.arange(20)))
  for item in atari_unrolls[50:70]:
    assert new.insert(item) == old.insert(item)
  assert_nests_equal(new.sample(8), old.sample(8))
  # Saved again, it is in the new layout.
  new.save(str(tmp_path / 'new'))
  again = stacked_buffer(20, 'reservoir')
  again.restore(str(tmp_path / 'new'), atari_unrolls[0])
  assert_nests_equal(again.get(np.arange(20)), old.get(np.arange(20)))


def test_a_frame_once_state_is_refused_by_an_as_is_buffer(tmp_path):
  buffer = stacked_buffer(3)
  buffer.insert(unroll(1))
  buffer.save(str(tmp_path))
  with pytest.raises(ValueError, match='saved as frame-once'):
    replay.ReplayBuffer(3, 'fifo').restore(str(tmp_path), unroll(0))


def test_a_corrupt_frame_table_is_refused(tmp_path):
  buffer = stacked_buffer(3)
  buffer.insert(unroll(1))
  buffer.save(str(tmp_path))
  table = np.load(str(tmp_path / 'frames_007_table.npy'))
  np.save(str(tmp_path / 'frames_007_table.npy'), table + 9)
  with pytest.raises(ValueError, match='names a plane'):
    stacked_buffer(3).restore(str(tmp_path), unroll(0))


def test_stacked_observations_must_name_uint8_stacks():
  with pytest.raises(ValueError, match=r"\['pixels'\] are not observation"):
    replay.ReplayBuffer(2, stacked_observations=('pixels',)).insert(
        unroll(0))
  item = unroll(0)
  item = item._replace(env_outputs=item.env_outputs._replace(
      observation={'frame': np.zeros([4, 6, 6, 2], np.float32)}))
  with pytest.raises(ValueError, match="observation 'frame'.*uint8"):
    stacked_buffer(2).insert(item)
