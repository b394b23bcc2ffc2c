"""Tests of clear.replay.frame_store: each frame once, stacks rebuilt bit for
bit."""

import numpy as np
import pytest

from clear.replay import frame_store
from tests import frame_stacking

RESET_STYLES = frame_stacking.RESET_STYLES
random_unroll = frame_stacking.random_unroll

# Tables of small unrolls: frames named by letters, the stacks the env shows
# and the planes / table the encoding must give.
def lettered(rows, letters='abcdefghijklmnop'):
  value = {ch: np.full([2, 2], 10 * (i + 1), np.uint8)
           for i, ch in enumerate(letters)}
  value['0'] = np.zeros([2, 2], np.uint8)
  return np.stack([np.stack([value[ch] for ch in row], -1) for row in rows])


@pytest.mark.parametrize('rows,planes,table', [
    # Pure shifts: T + K planes, table[t, c] = t + c.
    (['abc', 'bcd', 'cde'], 'abcde', [[0, 1, 2], [1, 2, 3], [2, 3, 4]]),
    # Atari reset at step 2: the stack is three copies of e, one plane.
    (['abc', 'bcd', 'eee', 'eef'], 'abcdef',
     [[0, 1, 2], [1, 2, 3], [4, 4, 4], [4, 4, 5]]),
    # Reset at step 0: stored as it comes (K planes), then shifts.
    (['aaa', 'aab', 'abc'], 'aaabc', [[0, 1, 2], [1, 2, 3], [2, 3, 4]]),
    # Zero-filled reset: the zero plane and the new frame.
    (['abc', '00d', '0de'], 'abc0de', [[0, 1, 2], [3, 3, 4], [3, 4, 5]]),
    # Step 1 keeps c where a shift would have it and shows d twice; step 2
    # shares nothing: a plane per distinct new frame.
    (['abc', 'dcd', 'fgh'], 'abcdfgh',
     [[0, 1, 2], [3, 2, 3], [4, 5, 6]]),
])
def test_encode_splits_stacks_into_planes_and_a_table(rows, planes, table):
  stacks = lettered(rows)
  encoded = frame_store.encode(stacks)
  np.testing.assert_array_equal(encoded.table, table)
  np.testing.assert_array_equal(encoded.planes,
                                np.moveaxis(lettered([planes])[0], -1, 0))
  np.testing.assert_array_equal(frame_store.decode(*encoded), stacks)


def test_encode_round_trips_random_episode_boundaries():
  rng = np.random.default_rng(0)
  for case in range(300):
    style = RESET_STYLES[case % 3]
    stacks, starts = random_unroll(rng, depth=2 + case % 4, style=style,
                                   reset_rate=rng.uniform(0, 0.6),
                                   palette=3 if case % 5 == 0 else None)
    planes, table = frame_store.encode(stacks)
    np.testing.assert_array_equal(frame_store.decode(planes, table), stacks)
    num_steps, depth = table.shape
    if style == 'repeat':
      # Atari's stacking: one new frame per step whatever the resets.
      assert len(planes) <= num_steps + depth - 1, (case, starts)
    if not starts[1:].any():
      assert len(planes) <= num_steps + depth - 1


@pytest.mark.parametrize('storage', ['memory', 'memmap'])
def test_store_reads_back_what_was_written(tmp_path, storage):
  rng = np.random.default_rng(1)
  path = str(tmp_path / 'planes.npy') if storage == 'memmap' else None
  store = frame_store.FrameStore(40, (11, 5, 3, 4), path)
  written = []
  for slot in range(40):
    style = RESET_STYLES[slot % 3]
    stacks, _ = random_unroll(rng, style=style, reset_rate=0.3 * (slot % 2))
    store.write(slot, stacks)
    written.append(stacks)
  assert store.num_spilled > 0  # Zero and noise resets exceed the budget.
  slots = rng.integers(40, size=200)
  got = store.read(slots)
  assert got.shape == (200, 11, 5, 3, 4) and got.dtype == np.uint8
  for row, slot in enumerate(slots):
    np.testing.assert_array_equal(got[row], written[slot])
  starts = rng.integers(0, 11 - 4 + 1, size=200)
  windows = store.read(slots, starts, 4)
  for row, (slot, start) in enumerate(zip(slots, starts)):
    np.testing.assert_array_equal(windows[row],
                                  written[slot][start:start + 4])


def test_regular_slots_take_the_contiguous_path_and_agree_with_the_other():
  rng = np.random.default_rng(2)
  store = frame_store.FrameStore(2, (9, 4, 4, 3))
  shifts, _ = random_unroll(rng, 9, 3, (4, 4), reset_rate=0.0)
  store.write(0, shifts)
  store.write(1, shifts)
  assert store._regular.tolist() == [True, True]
  store._regular[1] = False  # Force the gathering path on slot 1.
  both = store.read([0, 1, 1, 0], [0, 0, 2, 3], 6)
  np.testing.assert_array_equal(both[0], shifts[:6])
  np.testing.assert_array_equal(both[1], shifts[:6])
  np.testing.assert_array_equal(both[2], shifts[2:8])
  np.testing.assert_array_equal(both[3], shifts[3:9])


def test_overwriting_a_spilled_slot_frees_its_spill():
  rng = np.random.default_rng(3)
  store = frame_store.FrameStore(1, (6, 2, 2, 4))
  base = store.nbytes
  unrelated = rng.integers(0, 256, (6, 2, 2, 4), dtype=np.uint8)
  store.write(0, unrelated)
  # 24 distinct frames against a budget of 6 + 3.
  assert store.num_spilled == 1 and store.nbytes == base + 15 * 4
  np.testing.assert_array_equal(store.read([0])[0], unrelated)
  shifts, _ = random_unroll(rng, 6, 4, (2, 2), reset_rate=0.0)
  store.write(0, shifts)
  assert store.num_spilled == 0 and store.nbytes == base
  np.testing.assert_array_equal(store.read([0])[0], shifts)


def test_bytes_are_the_planes_tables_and_flags():
  store = frame_store.FrameStore(10, (21, 84, 84, 4))
  # T + K = 24 planes of 84 x 84, a uint8 table of 21 x 4, a flag.
  assert store.nbytes == 10 * (24 * 84 * 84 + 21 * 4 + 1)
  as_is = 10 * 21 * 84 * 84 * 4
  assert store.nbytes / as_is < 0.29


def test_arrays_round_trip_and_bad_arrays_are_refused():
  rng = np.random.default_rng(4)
  store = frame_store.FrameStore(5, (7, 3, 3, 2))
  written = [random_unroll(rng, 7, 2, (3, 3), style=RESET_STYLES[i % 3],
                           reset_rate=0.4)[0] for i in range(5)]
  for slot, stacks in enumerate(written):
    store.write(slot, stacks)
  arrays = store.arrays(4)
  assert arrays['planes'].shape == (4, 8, 3, 3)
  copy = frame_store.FrameStore(5, (7, 3, 3, 2))
  copy.load_arrays(arrays, 4)
  got = copy.read(np.arange(4))
  for slot in range(4):
    np.testing.assert_array_equal(got[slot], written[slot])
  assert copy.nbytes <= store.nbytes
  bad_table = dict(arrays, table=arrays['table'] + 20)
  with pytest.raises(ValueError, match='names a plane'):
    copy.load_arrays(bad_table, 4)
  with pytest.raises(ValueError, match="'planes'"):
    copy.load_arrays(dict(arrays, planes=arrays['planes'][:, :3]), 4)
  with pytest.raises(ValueError, match="'spill' is missing"):
    copy.load_arrays({k: v for k, v in arrays.items() if k != 'spill'}, 4)


@pytest.mark.parametrize('stacks', [
    np.zeros([3, 4, 4, 1], np.uint8),     # One frame: nothing to share.
    np.zeros([3, 4, 4, 2], np.float32),   # Not uint8.
    np.zeros([3, 16, 2], np.uint8),       # Not [T + 1, H, W, K].
])
def test_what_is_not_a_frame_stack_is_refused_by_name(stacks):
  with pytest.raises(ValueError, match='uint8 \\[T \\+ 1, H, W, K\\]'):
    frame_store.encode(stacks)


def test_store_refuses_other_shapes_and_windows_past_the_end():
  with pytest.raises(ValueError, match='K >= 2'):
    frame_store.FrameStore(2, (5, 4, 4, 1))
  store = frame_store.FrameStore(2, (5, 4, 4, 2))
  with pytest.raises(ValueError, match='store holds'):
    store.write(0, np.zeros([5, 4, 4, 3], np.uint8))
  with pytest.raises(ValueError, match='leave unrolls of 5'):
    store.read([0], [3], 3)
