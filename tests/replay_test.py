"""Tests of the CLEAR replay buffer: sampling statistics, splits, state."""

import os

import numpy as np
import pytest
import tree

from clear import replay
from clear import types


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
    (32, 0.5, 16), (32, 0.0, 0), (10, 0.25, 3), (10, 0.24, 2), (8, 0.875, 7), (3, 0.5, 2)])
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
  with pytest.raises(ValueError, match='capacity'):
    replay.ReplayBuffer(3).restore(str(tmp_path), unroll(0))


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
