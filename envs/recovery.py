"""Crash recovery for environments that run in another process (StarCraft II).

`CrashRecoveryEnv` wraps a `SingleEnv`. When the wrapped env's `step` or
`reset` raises one of the given crash exceptions (e.g. pysc2's
`protocol.ConnectionError` when the game process dies), the wrapper logs a
warning, relaunches the env (its `relaunch()` when it has one, else `close()`
and a new one from `factory()`), resets it, and:

  * from `step`: returns a `Transition` with `truncated=True`,
    `terminated=False`, reward 0.0, frames 0 and the new episode's first
    observation. The episode was cut, not ended: learners keep the discount
    (a terminal would bias value targets towards 0). `BatchedEnv` then ends
    the row's episode as truncated and calls `reset()`, which hands back
    that same first observation without resetting (or relaunching) again;
  * from `reset`: returns the first observation of the relaunched env.

Failures are counted: `num_restarts` (relaunches over the wrapper's life)
and `consecutive_failures` (crashes since the last successful `step`). The
`max_consecutive_failures`-th crash in a row raises `EnvCrashError` instead
of relaunching again, so a game that cannot come back fails the run loudly.

This module never imports pysc2: each env family passes the exception types
it treats as crashes (see `envs.sc2.CRASH_EXCEPTIONS`).
"""

import logging
from typing import Callable, Optional, Sequence, Type

from clear import types
from envs import single

# Crash types any out-of-process env may raise: a dead socket or pipe
# (`ConnectionError`, `BrokenPipeError`) or another OS-level I/O failure.
BASE_CRASH_EXCEPTIONS = (ConnectionError, OSError)


class EnvCrashError(RuntimeError):
  """An environment kept crashing: `failures` crashes in a row.

  Attributes:
    env_name: the env's name (e.g. 'sc2:MoveToBeacon[3]').
    failures: the number of consecutive crashes.
    last_error: the last crash exception (also the `__cause__`).
  """

  def __init__(self, env_name: str, failures: int, last_error: BaseException):
    super().__init__(
        f'Environment {env_name!r} crashed {failures} times in a row '
        f'(max_env_failures={failures}); giving up. Last error: '
        f'{type(last_error).__name__}: {last_error}')
    self.env_name = env_name
    self.failures = failures
    self.last_error = last_error


class CrashRecoveryEnv(single.SingleEnv):
  """A `SingleEnv` that relaunches its env when it crashes (see module doc).

  Attributes other than the wrapper's own are looked up on the wrapped env,
  so e.g. `wrapper.env` is still `SC2Env.env`.
  """

  def __init__(self, env: single.SingleEnv,
               crash_exceptions: Sequence[Type[BaseException]],
               max_consecutive_failures: int = 5,
               factory: Optional[Callable[[], single.SingleEnv]] = None,
               name: str = ''):
    """Wraps `env`.

    Args:
      env: the env to protect.
      crash_exceptions: exception types that mean "the env crashed".
      max_consecutive_failures: N >= 1; the N-th crash without a successful
        step in between raises `EnvCrashError` (N = 1: never relaunch).
      factory: builds a replacement env; needed when `env` has no
        `relaunch()` method.
      name: for log messages and errors; defaults to the env's spec name.
    """
    max_consecutive_failures = int(max_consecutive_failures)
    if max_consecutive_failures < 1:
      raise ValueError(f'max_consecutive_failures must be >= 1, got '
                       f'{max_consecutive_failures}.')
    crash_exceptions = tuple(crash_exceptions)
    if not crash_exceptions:
      raise ValueError('crash_exceptions is empty.')
    if factory is None and not callable(getattr(env, 'relaunch', None)):
      raise ValueError(f'{type(env).__name__} has no relaunch(); pass a '
                       'factory.')
    self._env = env
    self._crash_exceptions = crash_exceptions
    self._max_failures = max_consecutive_failures
    self._factory = factory
    self._name = name or env.spec.name
    self._num_restarts = 0
    self._consecutive_failures = 0
    # First observation of the episode started by a recovery in `step`,
    # returned by the next `reset` instead of resetting again.
    self._pending_first_observation = None

  @property
  def spec(self) -> types.EnvSpec:
    return self._env.spec

  @property
  def wrapped(self) -> single.SingleEnv:
    """The current wrapped env (a new object after a factory relaunch)."""
    return self._env

  @property
  def num_restarts(self) -> int:
    """Relaunches so far (including ones whose relaunch itself crashed)."""
    return self._num_restarts

  @property
  def consecutive_failures(self) -> int:
    """Crashes since the last successful `step`."""
    return self._consecutive_failures

  @property
  def max_consecutive_failures(self) -> int:
    return self._max_failures

  def reset(self) -> dict:
    if self._pending_first_observation is not None:
      observation = self._pending_first_observation
      self._pending_first_observation = None
      return observation
    try:
      return self._env.reset()
    except self._crash_exceptions as e:
      return self._recover(e, 'reset')

  def step(self, action: dict) -> single.Transition:
    # Stepping without `reset` after a recovery continues the new episode.
    self._pending_first_observation = None
    try:
      transition = self._env.step(action)
    except self._crash_exceptions as e:
      observation = self._recover(e, 'step')
      self._pending_first_observation = observation
      return single.Transition(observation=observation, reward=0.0,
                               terminated=False, truncated=True, frames=0)
    self._consecutive_failures = 0
    return transition

  def relaunch(self):
    """Relaunches the wrapped env now (counted); call `reset` next."""
    self._pending_first_observation = None
    self._num_restarts += 1
    if self._factory is None:
      self._env.relaunch()
      return
    try:
      self._env.close()
    except Exception as e:  # pylint: disable=broad-except  # It crashed.
      logging.info('Closing crashed environment %r failed: %r', self._name,
                   e)
    self._env = self._factory()

  def close(self):
    self._pending_first_observation = None
    try:
      self._env.close()
    except self._crash_exceptions as e:
      logging.warning('Closing environment %r failed: %r', self._name, e)

  def _recover(self, error: BaseException, where: str) -> dict:
    """Relaunches and resets until it works; returns the first observation.

    Raises:
      EnvCrashError: on the `max_consecutive_failures`-th consecutive crash.
    """
    while True:
      self._consecutive_failures += 1
      if self._consecutive_failures >= self._max_failures:
        raise EnvCrashError(self._name, self._consecutive_failures,
                            error) from error
      logging.warning(
          'Environment %r crashed in %s (%s: %s); relaunching (failure %d '
          'in a row, the run fails at %d; restart #%d).', self._name, where,
          type(error).__name__, error, self._consecutive_failures,
          self._max_failures, self._num_restarts + 1)
      try:
        self.relaunch()
        return self._env.reset()
      except self._crash_exceptions as e:
        error, where = e, 'relaunch'

  def __getattr__(self, name):
    # Only called for names the wrapper lacks; guard against recursion
    # before `_env` is set (e.g. while unpickling).
    env = self.__dict__.get('_env')
    if env is None:
      raise AttributeError(name)
    return getattr(env, name)
