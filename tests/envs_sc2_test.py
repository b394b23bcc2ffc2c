"""Tests for envs.sc2 with pysc2's mock env (the game is not installed)."""

from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.

import numpy as np
import pytest
from pysc2.env import mock_sc2_env
from pysc2.lib import actions

import envs
from clear import types
from envs import sc2
from envs import sc2_actions

S, M = 16, 12  # Different sizes catch screen/minimap mix-ups.
_MOVE_SCREEN = actions.FUNCTIONS.Move_screen.id
_SELECT_ARMY = actions.FUNCTIONS.select_army.id


class RecordingEnv(mock_sc2_env.SC2TestEnv):
  """The mock env, recording what `step` receives."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.kwargs = kwargs
    self.calls = []

  def step(self, actions_, step_mul=None):
    if actions_[0] is not None:  # The mock's reset steps with [None].
      self.calls.append((list(actions_), step_mul))
    return super().step(actions_, step_mul)


def _make(num_envs=1, **options):
  return envs.make('sc2:MoveToBeacon', num_envs=num_envs,
                   env_factory=RecordingEnv, screen_size=S, minimap_size=M,
                   **options)


def _noop_action(env):
  return {key: np.zeros(env.num_envs, np.int64)
          for key in env.spec.action_spec}


def test_spec_and_structure():
  env = _make(num_envs=2)
  obs_spec, act_spec = env.spec.observation_spec, env.spec.action_spec
  assert list(obs_spec) == ['screen', 'minimap', 'player',
                            'available_actions']
  assert obs_spec['screen'].shape[:2] == (S, S)
  assert obs_spec['minimap'].shape[:2] == (M, M)
  assert obs_spec['player'] == types.ArraySpec((11,), np.float32)
  assert obs_spec['available_actions'] == types.ArraySpec(
      (len(actions.FUNCTIONS),), np.float32)
  assert act_spec['function'] == types.DiscreteSpec(
      len(actions.FUNCTIONS), mask_key='available_actions')
  assert act_spec['screen'] == types.DiscreteSpec(S * S, spatial=(S, S))
  assert act_spec['screen2'] == types.DiscreteSpec(S * S, spatial=(S, S))
  assert act_spec['minimap'] == types.DiscreteSpec(M * M, spatial=(M, M))
  for arg_type in actions.TYPES:
    if arg_type.name not in ('screen', 'minimap', 'screen2'):
      assert act_spec[arg_type.name].num_values == arg_type.sizes[0]
  assert types.STEP_MUL_KEY not in act_spec

  for out in (env.reset(), env.step(_noop_action(env))):
    assert out.reward.dtype == np.float32 and out.reward.shape == (2,)
    assert out.done.dtype == bool and out.truncated.dtype == bool
    for key, spec in obs_spec.items():
      assert out.observation[key].shape == (2,) + spec.shape
      assert out.observation[key].dtype == spec.dtype
    screen = out.observation['screen']
    assert np.isfinite(screen).all() and screen.min() >= 0


def test_available_actions_mask():
  env = _make()
  out = env.reset()
  mock = env.envs[0].env
  raw = mock.next_timestep[0].observation['available_actions']
  expected = np.zeros(len(actions.FUNCTIONS), np.float32)
  expected[raw] = 1
  np.testing.assert_array_equal(out.observation['available_actions'][0],
                                expected)
  assert out.observation['available_actions'][0, _MOVE_SCREEN] == 0
  assert out.observation['available_actions'][0, _SELECT_ARMY] == 1


def test_function_call_keeps_only_needed_arguments():
  action = {'function': _MOVE_SCREEN, 'queued': 1, 'screen': 3 * S + 5,
            'minimap': 7, 'screen2': 9, 'select_add': 1}
  call = sc2_actions.function_call(action, S, M)
  assert call.function == _MOVE_SCREEN
  assert call.arguments == [[1], [5, 3]]  # queued, then screen as [x, y].
  action['function'] = actions.FUNCTIONS.Move_minimap.id
  assert sc2_actions.function_call(action, S, M).arguments == [[1], [7, 0]]
  action['function'] = _SELECT_ARMY
  assert sc2_actions.function_call(action, S, M).arguments == [[1]]
  action['function'] = actions.FUNCTIONS.no_op.id
  assert sc2_actions.function_call(action, S, M).arguments == []
  action['function'] = actions.FUNCTIONS.select_rect.id
  assert sc2_actions.function_call(action, S, M).arguments == [
      [1], [5, 3], [9, 0]]


def test_env_sends_function_calls_and_step_mul():
  env = _make()
  env.reset()
  action = _noop_action(env)
  action['function'][:] = _SELECT_ARMY
  action['select_add'][:] = 1
  env.step(action)
  action['function'][:] = _MOVE_SCREEN  # Unavailable in the mock: no_op.
  env.step(action)
  calls = env.envs[0].env.calls
  assert calls[0] == ([actions.FunctionCall(_SELECT_ARMY, [[1]])], 8)
  assert calls[1] == ([actions.FunctionCall(actions.FUNCTIONS.no_op.id, [])],
                      8)
  kwargs = env.envs[0].env.kwargs
  assert kwargs['map_name'] == 'MoveToBeacon' and kwargs['step_mul'] == 8


def test_dynamic_step_mul_and_auto_reset():
  env = _make(fixed_step_mul=False, max_step_mul=5)
  assert env.spec.action_spec[types.STEP_MUL_KEY] == types.DiscreteSpec(5)
  env.reset()
  frames = 0
  multipliers = [0, 4, 2, 1, 3, 0, 4, 2, 1, 3]  # The mock's episode: 10.
  for step, m in enumerate(multipliers, start=1):
    action = _noop_action(env)
    action[types.STEP_MUL_KEY][:] = m
    out = env.step(action)
    frames += m + 1
    assert env.envs[0].env.calls[-1][1] == m + 1
    assert out.info.episode_frames[0] == frames
    assert out.info.episode_step[0] == step
    assert out.done[0] == (step == len(multipliers))
  assert not out.truncated[0]
  out = env.step(_noop_action(env))
  assert out.info.episode_step[0] == 1 and out.info.episode_frames[0] == 1


def test_relaunch_builds_a_new_env():
  env = sc2.SC2Env('DefeatRoaches', env_factory=RecordingEnv)
  first = env.env
  env.relaunch()
  assert env.env is not first
  assert env.reset()['screen'].shape == env.spec.observation_spec[
      'screen'].shape


def test_not_installed_gives_install_instructions(tmp_path, monkeypatch):
  monkeypatch.setenv('SC2PATH', str(tmp_path))
  with pytest.raises(sc2.SC2NotInstalledError) as info:
    envs.make('sc2:MoveToBeacon')
  message = str(info.value)
  assert str(tmp_path) in message
  assert 'github.com/Blizzard/s2client-proto#downloads' in message
  assert 'StarCraftII/Maps' in message and 'SC2PATH' in message


def test_unknown_map_and_options():
  with pytest.raises(ValueError, match="Unknown StarCraft II map.*"
                     "'MoveToBeacon'"):
    envs.make('sc2:MoveToBeecon', env_factory=RecordingEnv)
  with pytest.raises(ValueError, match=r"\['screen_sise'\]"):
    envs.make('sc2:MoveToBeacon', env_factory=RecordingEnv, screen_sise=8)
