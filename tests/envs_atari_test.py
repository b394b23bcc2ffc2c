"""Tests for envs.atari on real ALE games (Pong, Breakout)."""

import ale_py
from ale_py import roms
import cv2
import numpy as np
import pytest

import envs
from clear import types
from envs import atari


def _random_actions(env, rng):
  return {key: rng.integers(spec.num_values, size=env.num_envs)
          for key, spec in env.spec.action_spec.items()}


def _check_structure(env, out):
  b = env.num_envs
  assert out.reward.shape == (b,) and out.reward.dtype == np.float32
  assert out.done.shape == (b,) and out.done.dtype == bool
  assert out.truncated.shape == (b,) and out.truncated.dtype == bool
  for field in out.info:
    assert field.shape == (b,)
  assert out.info.episode_return.dtype == np.float32
  assert out.info.episode_step.dtype == np.int32
  assert out.info.episode_frames.dtype == np.int32
  assert list(out.observation) == list(env.spec.observation_spec)
  for key, spec in env.spec.observation_spec.items():
    assert out.observation[key].shape == (b,) + spec.shape
    assert out.observation[key].dtype == spec.dtype


def test_spec_and_structure():
  env = envs.make('atari:Pong', num_envs=2, seed=1)
  assert env.spec.name == 'atari:Pong'
  assert env.spec.observation_spec['frame'] == types.ArraySpec(
      (84, 84, 4), np.uint8)
  assert env.spec.action_spec['action'] == types.DiscreteSpec(6)
  out = env.reset()
  _check_structure(env, out)
  assert not out.done.any() and (out.reward == 0).all()
  rng = np.random.default_rng(0)
  for _ in range(5):
    out = env.step(_random_actions(env, rng))
    _check_structure(env, out)
  np.testing.assert_array_equal(out.info.episode_frames, [20, 20])
  env.close()


def test_options():
  env = envs.make('atari:Breakout', frame_stack=1, full_action_space=True)
  assert env.spec.observation_spec['frame'].shape == (84, 84, 1)
  assert env.spec.action_spec['action'].num_values == 18
  assert env.reset().observation['frame'].shape == (1, 84, 84, 1)
  assert envs.make('atari:SpaceInvaders').spec.name == 'atari:SpaceInvaders'


def test_same_seed_is_reproducible():
  runs = []
  for _ in range(2):
    env = envs.make('atari:Breakout', num_envs=2, seed=3,
                    repeat_action_probability=0.25)
    rng = np.random.default_rng(0)
    outs = [env.reset()]
    for _ in range(60):
      outs.append(env.step(_random_actions(env, rng)))
    runs.append(outs)
  for a, b in zip(*runs):
    np.testing.assert_array_equal(a.observation['frame'],
                                  b.observation['frame'])
    np.testing.assert_array_equal(a.reward, b.reward)
    np.testing.assert_array_equal(a.info.episode_frames,
                                  b.info.episode_frames)


@pytest.mark.parametrize('mode,interpolation', [
    ('linear', cv2.INTER_LINEAR), ('area', cv2.INTER_AREA)])
def test_max_pool_and_resize_match_reference(mode, interpolation):
  """Compares against a plain ALE, max-pooled and resized here."""
  env = atari.AtariEnv('Pong', seed=5, noop_max=0, frame_stack=2,
                       resize=mode)
  ale = ale_py.ALEInterface()
  ale.setInt('random_seed', 5)
  ale.setFloat('repeat_action_probability', 0.0)
  ale.loadROM(roms.get_rom_path('pong'))
  actions = ale.getMinimalActionSet()
  ale.reset_game()

  def reference(screen):
    return cv2.resize(screen, (84, 84), interpolation=interpolation)

  first = env.reset()['frame']
  expected_prev = reference(ale.getScreenGrayscale())
  np.testing.assert_array_equal(first[..., 1], expected_prev)
  rng = np.random.default_rng(0)
  for _ in range(40):
    a = int(rng.integers(len(actions)))
    screens = []
    for _ in range(4):
      ale.act(actions[a])
      screens.append(ale.getScreenGrayscale().astype(np.int32))
    pooled = np.max(np.stack(screens[-2:]), axis=0).astype(np.uint8)
    expected = reference(pooled)
    frame = env.step({'action': a}).observation['frame']
    np.testing.assert_array_equal(frame[..., 1], expected)
    np.testing.assert_array_equal(frame[..., 0], expected_prev)
    expected_prev = expected
  # Some steps must actually differ between the two pooled frames.
  assert not np.array_equal(screens[-1], screens[-2])


def test_dynamic_step_mul_frames():
  env = envs.make('atari:Pong', fixed_step_mul=False, max_step_mul=6,
                  num_envs=2)
  assert env.spec.action_spec[types.STEP_MUL_KEY] == types.DiscreteSpec(6)
  env.reset()
  rng = np.random.default_rng(1)
  frames = np.zeros(2, np.int64)
  for _ in range(50):
    action = _random_actions(env, rng)
    out = env.step(action)
    assert not out.done.any()
    frames += action[types.STEP_MUL_KEY] + 1
    np.testing.assert_array_equal(out.info.episode_frames, frames)


def test_dynamic_step_mul_single_frame_has_no_pooling():
  env = atari.AtariEnv('Pong', seed=0, noop_max=0, frame_stack=1,
                       fixed_step_mul=False)
  ale = ale_py.ALEInterface()
  ale.setInt('random_seed', 0)
  ale.loadROM(roms.get_rom_path('pong'))
  ale.reset_game()
  env.reset()
  for _ in range(30):
    ale.act(ale.getMinimalActionSet()[0])
    t = env.step({'action': 0, types.STEP_MUL_KEY: 0})
    assert t.frames == 1
  expected = cv2.resize(ale.getScreenGrayscale(), (84, 84),
                        interpolation=cv2.INTER_LINEAR)
  np.testing.assert_array_equal(t.observation['frame'][..., 0], expected)


def test_truncation_at_max_episode_frames():
  env = envs.make('atari:Pong', noop_max=0, max_episode_frames=100)
  env.reset()
  for step in range(1, 26):
    out = env.step({'action': np.array([0])})
    assert out.done[0] == (step == 25)
    assert out.truncated[0] == (step == 25)
  assert out.info.episode_frames[0] == 100
  assert out.info.episode_step[0] == 25
  out = env.step({'action': np.array([0])})
  assert not out.done[0] and out.info.episode_step[0] == 1


def test_episode_end_and_auto_reset():
  env = envs.make('atari:Pong', seed=2)
  env.reset()
  total = 0.0
  for _ in range(3000):
    out = env.step({'action': np.array([0])})
    total += out.reward[0]
    if out.done[0]:
      break
  assert out.done[0] and not out.truncated[0]
  assert out.info.episode_return[0] == total == -21.0
  assert out.info.episode_frames[0] <= 4 * out.info.episode_step[0]
  out = env.step({'action': np.array([0])})
  assert out.info.episode_step[0] == 1 and not out.done[0]


def test_terminal_on_life_loss():
  env = atari.AtariEnv('Breakout', seed=0, terminal_on_life_loss=True)
  env.reset()
  lives = env.ale.lives()
  fire = 1
  for _ in range(2000):
    t = env.step({'action': fire})
    if t.terminated:
      break
  assert t.terminated and not env.ale.game_over()
  assert env.ale.lives() == lives - 1
  frame_before = env.ale.getEpisodeFrameNumber()
  env.reset()  # Soft reset: the game continues.
  assert env.ale.getEpisodeFrameNumber() == frame_before
  assert env.ale.lives() == lives - 1


def test_unknown_game():
  with pytest.raises(ValueError, match=r"Unknown Atari game 'Pongg'.*'Pong'"):
    envs.make('atari:Pongg')


def test_unknown_resize_mode_is_rejected():
  with pytest.raises(ValueError, match='resize'):
    atari.AtariEnv('Pong', resize='cubic')
