"""Tests of clear.runtime.record: pictures of observations and GIFs of
episodes."""

import collections
import os

import numpy as np
import pytest
from PIL import Image

from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import record
import envs


def test_to_rgb_by_hand():
  stack = np.zeros([84, 84, 4], np.uint8)
  stack[..., 3] = 200  # The newest frame.
  stack[0, 0, 3] = 7
  rgb = record.to_rgb(stack)
  assert rgb.shape == (168, 168, 3)  # 84 is scaled x2 to reach 160.
  np.testing.assert_array_equal(rgb[0, 0], [7, 7, 7])
  np.testing.assert_array_equal(rgb[1, 1], [7, 7, 7])
  np.testing.assert_array_equal(rgb[2, 2], [200, 200, 200])

  board = np.zeros([10, 10, 2], bool)
  board[1, 2, 0] = True
  board[3, 4, 1] = True
  rgb = record.to_rgb(board)
  assert rgb.shape == (160, 160, 3)  # x16.
  palette = record._palette(2)  # pylint: disable=protected-access
  np.testing.assert_array_equal(rgb[16:32, 32:48], np.broadcast_to(
      palette[0], (16, 16, 3)))
  np.testing.assert_array_equal(rgb[48, 64], palette[1])
  np.testing.assert_array_equal(rgb[0, 0], [0, 0, 0])
  assert not np.array_equal(palette[0], palette[1])
  with pytest.raises(ValueError, match='float32'):
    record.to_rgb(np.zeros([4, 4, 1], np.float32))


@pytest.mark.parametrize('name,options', [
    ('minatar:Breakout', {}),
    ('atari:Pong', {'max_episode_frames': 200}),
])
def test_a_recorded_episode_is_the_gif_of_what_the_agent_saw(tmp_path, name,
                                                             options):
  env = envs.make(name, num_envs=1, seed=2, **options)
  policy = registry.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('auto', 16), seed=0)
  first = envs.make(name, num_envs=1, seed=2, **options)
  key = record.image_key(env.spec)
  first_picture = record.to_rgb(first.reset().observation[key][0])
  first.close()
  path = str(tmp_path / 'episode.gif')
  try:
    result = record.record_episode(env, policy, path, max_steps=3000)
  finally:
    env.close()
  assert result.finished and result.num_frames > 2
  with Image.open(path) as gif:
    assert gif.size == first_picture.shape[1::-1]
    np.testing.assert_array_equal(np.asarray(gif.convert('RGB')),
                                  first_picture)
    # Pillow merges identical consecutive frames and adds up their
    # durations: the GIF lasts a frame's time per recorded frame.
    total_ms = 0
    for index in range(gif.n_frames):
      gif.seek(index)
      total_ms += gif.info['duration']
      assert np.asarray(gif.convert('RGB')).any()
  assert total_ms == 40 * result.num_frames


def test_vector_observations_are_refused_by_name():
  spec = types.EnvSpec(
      collections.OrderedDict(vector=types.ArraySpec((4,), np.float32)),
      collections.OrderedDict(action=types.DiscreteSpec(2)),
      'gym:CartPole-v1')
  with pytest.raises(ValueError, match="'gym:CartPole-v1' has none"):
    record.image_key(spec)


def test_a_sequence_records_each_distinct_task_in_its_own_file():
  assert record.task_paths('out/final.gif', ['atari:Pong']) == [
      (0, 'out/final.gif')]
  assert record.task_paths('out/final.gif', [
      'atari:SpaceInvaders', 'atari:BeamRider', 'atari:SpaceInvaders',
      'gym:MountainCar-v0 x']) == [
          (0, 'out/final_SpaceInvaders.gif'), (1, 'out/final_BeamRider.gif'),
          (3, 'out/final_MountainCar-v0_x.gif')]


def test_a_path_is_checked_before_anything_is_played(tmp_path):
  gif = tmp_path / 'episode.gif'
  assert record.path_problem(str(gif)) is None
  for name in ('run.json', 'episode.txt', 'episode'):
    assert record.path_problem(str(tmp_path / name)).startswith(
        'the format is taken from the extension, which must be .gif or .mp4')
  assert record.path_problem(str(tmp_path / 'no' / 'x.gif')) == (
      'its folder does not exist')
  gif.write_bytes(b'someone else\'s file')
  assert record.path_problem(str(gif)) == (
      'the file exists; pass --record_overwrite to replace it, or choose '
      'another path')
  assert record.path_problem(str(gif), overwrite=True) is None
  (tmp_path / 'folder.gif').mkdir()
  assert record.path_problem(str(tmp_path / 'folder.gif'), True) == (
      'it is a folder')
  assert not (tmp_path / 'no').exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == ['episode.gif',
                                                         'folder.gif']


def frames_of(values, size=(10, 14)):
  return [np.full(size + (3,), v, np.uint8) for v in values]


def test_write_frames_replaces_a_file_only_when_written_whole(tmp_path,
                                                              monkeypatch):
  gif = tmp_path / 'episode.gif'
  gif.write_bytes(b'earlier')
  record.write_frames(frames_of([0, 90, 200]), str(gif))
  with Image.open(gif) as image:
    assert image.n_frames == 3
    image.seek(2)
    np.testing.assert_array_equal(np.asarray(image.convert('RGB'))[0, 0],
                                  [200, 200, 200])
  # A write that fails half-way leaves the file as it was, and no temporary.
  written = gif.read_bytes()

  def failing_save(self, *args, **kwargs):
    del self, args, kwargs
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(Image.Image, 'save', failing_save)
  with pytest.raises(OSError, match='No space'):
    record.write_frames(frames_of([1, 2]), str(gif))
  assert gif.read_bytes() == written
  assert sorted(p.name for p in tmp_path.iterdir()) == ['episode.gif']


def test_mp4_needs_imageio_or_says_what_to_install(tmp_path):
  path = str(tmp_path / 'episode.mp4')
  try:
    import imageio  # pylint: disable=g-import-not-at-top,unused-import
    import imageio_ffmpeg  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    problem = record.path_problem(path)
    assert problem.startswith('writing .mp4 needs ') and (
        'pip install imageio' in problem), problem
    with pytest.raises(ImportError, match='pip install imageio'):
      record.write_frames(frames_of([0, 1]), path)
    assert not os.listdir(tmp_path)
    return
  assert record.path_problem(path) is None
  values = [0, 60, 120, 180, 240]
  record.write_frames(frames_of(values, (84, 84)), path, frame_ms=40)
  reader = imageio.v2.get_reader(path, format='FFMPEG')
  try:
    assert reader.get_meta_data()['fps'] == 25
    read = [frame for frame in reader]
  finally:
    reader.close()
  assert len(read) == len(values)
  for frame, value in zip(read, values):  # Lossy, but close.
    assert abs(float(frame.mean()) - value) < 8
