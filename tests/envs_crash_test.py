"""Tests for envs.recovery: relaunch on crash, truncation, failure limits."""

from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.

import collections
import os
import subprocess
import sys

import numpy as np
import pytest
from pysc2.env import mock_sc2_env
from pysc2.lib import protocol
from pysc2.lib import remote_controller

import envs
from clear import types
from envs import recovery
from envs import sc2
from envs import single

STEP_MUL = 8  # sc2's default; the mock's game loop never advances.


class CrashPlan:
  """Which launch / reset / agent step of which env raises what.

  `crashes` maps (seed, event, index) -> exception, event one of 'launch',
  'reset', 'step'; index counts that event for that seed over the plan's
  life (across relaunches), from 0. Launch 0 is the first construction.
  """

  def __init__(self, crashes=None):
    self.crashes = dict(crashes or {})
    self.counts = collections.Counter()

  def tick(self, seed, event):
    index = self.counts[seed, event]
    self.counts[seed, event] += 1
    error = self.crashes.get((seed, event, index))
    if error is not None:
      raise error

  def factory(self, **kwargs):
    return CrashingMockEnvForTest(self, **kwargs)


class CrashingMockEnvForTest(mock_sc2_env.SC2TestEnv):
  """pysc2's mock env (reward 1 per step) that crashes as planned.

  Once crashed it stays dead: every later call raises, like a dead game.
  """

  def __init__(self, plan, **kwargs):
    self.seed = kwargs['random_seed']
    self._plan = plan
    self.dead = False
    self.closed = False
    plan.tick(self.seed, 'launch')
    super().__init__(**kwargs)
    self.next_timestep = [t._replace(reward=1.0) for t in self.next_timestep]

  def _tick(self, event):
    if self.dead:
      raise protocol.ConnectionError('Connection already closed. SC2 '
                                     'probably crashed.')
    try:
      self._plan.tick(self.seed, event)
    except Exception:
      self.dead = True
      raise

  def reset(self):
    self._tick('reset')
    return super().reset()

  def step(self, actions_, step_mul=None):
    if actions_[0] is not None:  # The mock's reset steps with [None].
      self._tick('step')
    return super().step(actions_, step_mul)

  def close(self):
    self.closed = True
    if self.dead:
      raise protocol.ConnectionError('Socket error: broken pipe')

  def __del__(self):
    pass  # pysc2's closes, and closing a dead game raises.


def _make(plan, num_envs=2, **options):
  return envs.make('sc2:MoveToBeacon', num_envs=num_envs,
                   env_factory=plan.factory, screen_size=8, minimap_size=8,
                   **options)


def _noop(env):
  return {key: np.zeros(env.num_envs, np.int64)
          for key in env.spec.action_spec}


@pytest.mark.parametrize('error', [
    protocol.ConnectionError('Connection already closed. SC2 probably '
                             'crashed. Check the error log.'),
    protocol.ProtocolError('Game has already ended'),
    BrokenPipeError('Broken pipe'),
])
def test_step_crash_truncates_and_relaunches(error):
  plan = CrashPlan({(0, 'step', 2): error})
  env = _make(plan)
  assert isinstance(env.envs[0], recovery.CrashRecoveryEnv)
  env.reset()
  first_game = env.envs[0].env
  for _ in range(2):
    out = env.step(_noop(env))
    assert not out.done.any()
  assert env.num_env_restarts == 0

  out = env.step(_noop(env))  # Row 0's game dies.
  np.testing.assert_array_equal(out.done, [True, False])
  np.testing.assert_array_equal(out.truncated, [True, False])
  np.testing.assert_array_equal(out.reward, [0.0, 1.0])
  # The finished (cut) episode: 3 steps, the crashed one worth nothing.
  np.testing.assert_array_equal(out.info.episode_step, [3, 3])
  np.testing.assert_array_equal(out.info.episode_return, [2.0, 3.0])
  np.testing.assert_array_equal(out.info.episode_frames,
                                [2 * STEP_MUL, 3 * STEP_MUL])
  assert env.num_env_restarts == 1
  assert env.envs[0].num_restarts == 1 and env.envs[1].num_restarts == 0
  assert env.envs[0].env is not first_game and first_game.closed
  # One relaunch and one reset of the new game: BatchedEnv's reset after
  # the done row did not reset (or relaunch) again.
  assert plan.counts[0, 'launch'] == 2 and plan.counts[0, 'reset'] == 2
  assert plan.counts[1, 'launch'] == 1 and plan.counts[1, 'reset'] == 1
  for key, spec in env.spec.observation_spec.items():
    assert out.observation[key].shape == (2,) + spec.shape

  out = env.step(_noop(env))  # A fresh episode in row 0.
  assert not out.done.any()
  np.testing.assert_array_equal(out.info.episode_step, [1, 4])
  np.testing.assert_array_equal(out.info.episode_return, [1.0, 4.0])
  np.testing.assert_array_equal(out.info.episode_frames,
                                [STEP_MUL, 4 * STEP_MUL])
  assert env.envs[0].consecutive_failures == 0
  # The mock's episodes last 10 steps: row 1 ends first, then row 0's
  # relaunched episode 10 steps after it began.
  done_at = {0: [], 1: []}
  for step in range(5, 14):
    out = env.step(_noop(env))
    for i in (0, 1):
      if out.done[i]:
        done_at[i].append(step)
        assert not out.truncated[i]
  assert done_at == {0: [13], 1: [10]}
  assert env.num_env_restarts == 1
  env.close()


def test_consecutive_failures_raise_a_clear_error():
  last = remote_controller.ConnectError('Failed to connect to the SC2 '
                                        'websocket. Is it up?')
  plan = CrashPlan({
      (0, 'step', 0): protocol.ConnectionError('game died'),  # Failure 1.
      (0, 'step', 1): protocol.ProtocolError('bad state'),  # Failure 2.
      (0, 'launch', 2): last,  # Failure 3: the relaunch cannot connect.
  })
  env = _make(plan, max_env_failures=3)
  env.reset()
  out = env.step(_noop(env))
  assert out.truncated[0] and env.envs[0].consecutive_failures == 1
  with pytest.raises(envs.EnvCrashError) as info:
    env.step(_noop(env))
  assert isinstance(info.value, RuntimeError)
  message = str(info.value)
  assert "'sc2:MoveToBeacon[0]'" in message
  assert '3 times in a row' in message
  assert 'ConnectError' in message and 'Is it up?' in message
  assert info.value.__cause__ is last and info.value.last_error is last
  assert info.value.failures == 3
  assert env.num_env_restarts == 2  # The second relaunch's launch failed.


def test_a_successful_step_resets_the_consecutive_count():
  crashes = {(0, 'step', i): protocol.ConnectionError(f'died at {i}')
             for i in (1, 3, 5, 6)}
  env = _make(CrashPlan(crashes), num_envs=1, max_env_failures=2)
  wrapper = env.envs[0]
  env.reset()
  expected = [  # (truncated, consecutive failures) after steps 0..4.
      (False, 0), (True, 1), (False, 0), (True, 1), (False, 0)]
  for truncated, failures in expected:
    out = env.step(_noop(env))
    assert out.truncated[0] == truncated
    assert wrapper.consecutive_failures == failures
  assert env.num_env_restarts == 2
  out = env.step(_noop(env))  # Step 5 crashes: failure 1 of 2.
  assert out.truncated[0]
  with pytest.raises(envs.EnvCrashError, match='2 times in a row.*died at 6'):
    env.step(_noop(env))


def test_reset_crash_relaunches():
  plan = CrashPlan({(1, 'reset', 0): OSError('Connection reset by peer')})
  env = _make(plan)
  out = env.reset()
  assert not out.done.any()
  assert env.num_env_restarts == 1
  assert plan.counts[1, 'launch'] == 2 and plan.counts[1, 'reset'] == 2
  out = env.step(_noop(env))
  np.testing.assert_array_equal(out.info.episode_step, [1, 1])


def test_zero_disables_recovery():
  plan = CrashPlan({(0, 'step', 0): protocol.ConnectionError('game died')})
  env = _make(plan, num_envs=1, max_env_failures=0)
  assert isinstance(env.envs[0], sc2.SC2Env)
  env.reset()
  with pytest.raises(protocol.ConnectionError):
    env.step(_noop(env))
  assert env.num_env_restarts == 0


def test_other_errors_are_not_crashes():
  plan = CrashPlan({(0, 'step', 0): ValueError('a bug, not a crash')})
  env = _make(plan, num_envs=1)
  env.reset()
  with pytest.raises(ValueError, match='a bug'):
    env.step(_noop(env))
  assert env.num_env_restarts == 0


def test_option_validation():
  plan = CrashPlan()
  for bad in (-1, 1.5, True, 'x'):
    with pytest.raises(ValueError, match='max_env_failures'):
      _make(plan, max_env_failures=bad)
  with pytest.raises(ValueError, match=r"\['max_env_failurez'\].*"
                     "max_env_failures"):
    _make(plan, max_env_failurez=3)
  with pytest.raises(ValueError, match=r"\['frame_stak'\]"):
    envs.make('gym:CartPole-v1', frame_stak=3)


def test_gym_accepts_the_option_and_is_not_wrapped():
  for options in ({}, {'max_env_failures': 0}, {'max_env_failures': 3}):
    env = envs.make('gym:CartPole-v1', num_envs=2, **options)
    assert not isinstance(env.envs[0], recovery.CrashRecoveryEnv)
    env.reset()
    env.step({'action': np.zeros(2, np.int64)})
    assert env.num_env_restarts == 0
    env.close()


def test_atari_and_gym_do_not_import_pysc2():
  code = ('import sys, envs\n'
          'envs.make("atari:Pong", max_env_failures=0).close()\n'
          'e = envs.make("atari:Pong")\n'
          'assert e.num_env_restarts == 0\n'
          'envs.make("gym:CartPole-v1", max_env_failures=2).close()\n'
          'assert "pysc2" not in sys.modules, "pysc2 imported"\n'
          'assert "websocket" not in sys.modules, "websocket imported"\n')
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  result = subprocess.run([sys.executable, '-c', code], cwd=root,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr


class CountingEnv(single.SingleEnv):
  """A pysc2-free env whose n-th step raises `errors[n]` when set."""

  instances = []

  def __init__(self, errors):
    self._errors = errors
    self.closed = False
    self.resets = 0
    CountingEnv.instances.append(self)

  @property
  def spec(self):
    return types.EnvSpec(
        observation_spec=collections.OrderedDict(
            x=types.ArraySpec((), np.int64)),
        action_spec=collections.OrderedDict(a=types.DiscreteSpec(2)),
        name='test:counting')

  def reset(self):
    self.resets += 1
    return {'x': np.int64(len(CountingEnv.instances))}

  def step(self, action):
    error = self._errors.pop(0) if self._errors else None
    if error is not None:
      raise error
    return single.Transition({'x': np.int64(-1)}, 1.0, False, False, 1)

  def close(self):
    self.closed = True


def test_factory_relaunch_without_relaunch_method():
  CountingEnv.instances = []
  errors = [None, ConnectionResetError('reset'), None]
  factory = lambda: CountingEnv(errors)
  wrapper = recovery.CrashRecoveryEnv(factory(), (ConnectionError,),
                                      max_consecutive_failures=2,
                                      factory=factory)
  env = envs.BatchedEnv([wrapper], name='test:counting')
  env.reset()
  assert not env.step({'a': np.zeros(1)}).done[0]
  out = env.step({'a': np.zeros(1)})
  assert out.done[0] and out.truncated[0] and out.reward[0] == 0
  assert out.observation['x'][0] == 2  # The replacement's first observation.
  assert CountingEnv.instances[0].closed
  assert wrapper.wrapped is CountingEnv.instances[1]
  assert CountingEnv.instances[1].resets == 1
  assert env.num_env_restarts == 1
  with pytest.raises(ValueError, match='relaunch'):
    recovery.CrashRecoveryEnv(CountingEnv([]), (ConnectionError,))
  with pytest.raises(ValueError, match='max_consecutive_failures'):
    recovery.CrashRecoveryEnv(CountingEnv([]), (ConnectionError,), 0,
                              factory=factory)
