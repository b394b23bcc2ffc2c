"""Tests for envs.batched (auto-reset, episode info) and envs.step_mul."""

import collections

import numpy as np
import pytest

from clear import types
from envs import batched
from envs import single
from envs import step_mul as step_mul_lib


class ScriptedEnv(single.SingleEnv):
  """Plays a fixed table of (reward, terminated, truncated, frames) rows.

  The observation counts calls: {'count': [reset index, step in episode]}.
  """

  def __init__(self, script):
    self._script = list(script)
    self._resets = -1
    self._steps = 0
    self.actions = []

  @property
  def spec(self):
    return types.EnvSpec(
        observation_spec=collections.OrderedDict(
            count=types.ArraySpec((2,), np.int32)),
        action_spec=collections.OrderedDict(action=types.DiscreteSpec(3)),
        name='scripted')

  def reset(self):
    self._resets += 1
    self._steps = 0
    return {'count': np.array([self._resets, 0], np.int32)}

  def step(self, action):
    self.actions.append(int(action['action']))
    reward, terminated, truncated, frames = self._script.pop(0)
    self._steps += 1
    return single.Transition(
        observation={'count': np.array([self._resets, self._steps], np.int32)},
        reward=reward, terminated=terminated, truncated=truncated,
        frames=frames)


# Each row: the scripted transition, then the expected batched row
# (reward, done, truncated, return, step, frames, observation).
_TABLE = [
    ((1.0, False, False, 4), (1.0, False, False, 1.0, 1, 4, [0, 1])),
    ((2.0, False, False, 4), (2.0, False, False, 3.0, 2, 8, [0, 2])),
    ((3.0, True, False, 2), (3.0, True, False, 6.0, 3, 10, [1, 0])),
    ((0.5, False, False, 4), (0.5, False, False, 0.5, 1, 4, [1, 1])),
    ((0.0, False, True, 4), (0.0, True, True, 0.5, 2, 8, [2, 0])),
    ((1.0, True, True, 1), (1.0, True, False, 1.0, 1, 1, [3, 0])),
]


def test_auto_reset_table():
  env = batched.BatchedEnv([ScriptedEnv([row for row, _ in _TABLE])])
  first = env.reset()
  np.testing.assert_array_equal(first.observation['count'], [[0, 0]])
  assert first.reward.dtype == np.float32 and first.reward[0] == 0
  assert not first.done[0] and not first.truncated[0]
  for _, expected in _TABLE:
    reward, done, truncated, ret, step, frames, obs = expected
    out = env.step({'action': np.array([1])})
    assert out.reward.dtype == np.float32
    assert out.done.dtype == bool and out.truncated.dtype == bool
    assert out.info.episode_return.dtype == np.float32
    assert out.info.episode_step.dtype == np.int32
    assert out.info.episode_frames.dtype == np.int32
    assert out.reward[0] == reward
    assert out.done[0] == done and out.truncated[0] == truncated
    assert out.info.episode_return[0] == ret
    assert out.info.episode_step[0] == step
    assert out.info.episode_frames[0] == frames
    np.testing.assert_array_equal(out.observation['count'][0], obs)


def test_rows_are_independent():
  env = batched.BatchedEnv([
      ScriptedEnv([(1.0, True, False, 1), (1.0, False, False, 1)]),
      ScriptedEnv([(2.0, False, False, 1), (2.0, False, False, 1)]),
  ], name='pair')
  assert env.num_envs == 2 and env.spec.name == 'pair'
  env.reset()
  out = env.step({'action': np.array([0, 2])})
  np.testing.assert_array_equal(out.done, [True, False])
  np.testing.assert_array_equal(out.info.episode_step, [1, 1])
  out = env.step({'action': np.array([1, 2])})
  np.testing.assert_array_equal(out.info.episode_step, [1, 2])
  np.testing.assert_array_equal(out.info.episode_return, [1.0, 4.0])
  assert env.envs[0].actions == [0, 1] and env.envs[1].actions == [2, 2]


def test_returned_info_is_not_aliased():
  env = batched.BatchedEnv([ScriptedEnv([(1.0, False, False, 1)] * 2)])
  env.reset()
  first = env.step({'action': np.array([0])})
  env.step({'action': np.array([0])})
  assert first.info.episode_step[0] == 1


def test_bad_actions():
  env = batched.BatchedEnv([ScriptedEnv([]), ScriptedEnv([])])
  env.reset()
  with pytest.raises(ValueError, match='missing heads'):
    env.step({})
  with pytest.raises(ValueError, match='batch dimension'):
    env.step({'action': np.array([0])})


def test_step_mul_fixed_and_dynamic():
  fixed = step_mul_lib.StepMul(fixed=True, step_mul=4, max_step_mul=8)
  assert fixed.repeats({}) == 4
  spec = collections.OrderedDict(action=types.DiscreteSpec(3))
  assert list(fixed.extend_action_spec(spec)) == ['action']
  dynamic = step_mul_lib.StepMul(fixed=False, step_mul=4, max_step_mul=8)
  extended = dynamic.extend_action_spec(spec)
  assert extended[types.STEP_MUL_KEY] == types.DiscreteSpec(8)
  assert list(spec) == ['action']  # Not modified in place.
  assert dynamic.repeats({types.STEP_MUL_KEY: np.int64(0)}) == 1
  assert dynamic.repeats({types.STEP_MUL_KEY: 7}) == 8
  with pytest.raises(ValueError, match='outside'):
    dynamic.repeats({types.STEP_MUL_KEY: 8})
  with pytest.raises(ValueError, match='step_mul'):
    step_mul_lib.StepMul(step_mul=0)


def test_repeat_stops_at_episode_end():
  rewards = iter([1.0, 2.0, 3.0, 4.0])
  ends = iter([False, False, True, False])

  def step_once():
    return 'obs', next(rewards), next(ends), False

  assert step_mul_lib.repeat(step_once, 4) == ('obs', 6.0, True, False, 3)
