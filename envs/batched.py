"""In-process batching and auto-reset over a list of `SingleEnv`s.

B is the number of environments. `BatchedEnv.step` steps each environment
in turn and returns one `clear.types.StepOutput` of `[B, ...]` numpy arrays.

Auto-reset: when environment i's episode ends in `step`, row i holds the
last reward, `done=True`, the finished episode's totals in `info`, and the
*first observation of the next episode*; the next step's info for that row
counts from zero again.

A crash-recovery wrapper (`envs.recovery`) reports a crashed step as a
truncated transition carrying the relaunched env's first observation; the
`reset()` that follows returns that observation without resetting again.
`num_env_restarts` exports the relaunch count.
"""

from typing import Dict, Sequence

import numpy as np

from clear import snapshot
from clear import types
from envs import single


class BatchedEnv:
  """B single environments stepped together, with auto-reset."""

  def __init__(self, envs: Sequence[single.SingleEnv], name: str = ''):
    if not envs:
      raise ValueError('BatchedEnv needs at least one environment.')
    self._envs = list(envs)
    spec = self._envs[0].spec
    self._spec = spec._replace(name=name or spec.name)
    n = len(self._envs)
    self._episode_return = np.zeros([n], np.float32)
    self._episode_step = np.zeros([n], np.int32)
    self._episode_frames = np.zeros([n], np.int32)

  @property
  def spec(self) -> types.EnvSpec:
    return self._spec

  @property
  def num_envs(self) -> int:
    return len(self._envs)

  @property
  def num_env_restarts(self) -> int:
    """Crash relaunches so far, summed over the envs (see `envs.recovery`);
    0 for envs without crash recovery."""
    return sum(int(getattr(env, 'num_restarts', 0)) for env in self._envs)

  @property
  def envs(self):
    """The underlying single environments (e.g. to relaunch one)."""
    return tuple(self._envs)

  def reset(self) -> types.StepOutput:
    """Starts a new episode in every environment; reward 0, done False."""
    n = self.num_envs
    observations = [env.reset() for env in self._envs]
    self._episode_return[:] = 0
    self._episode_step[:] = 0
    self._episode_frames[:] = 0
    return types.StepOutput(
        reward=np.zeros([n], np.float32),
        info=self._info(),
        done=np.zeros([n], bool),
        truncated=np.zeros([n], bool),
        observation=self._stack(observations))

  def step(self, action: dict) -> types.StepOutput:
    """Steps every environment.

    Args:
      action: dict name -> `[B]` (discrete heads) or `[B, ...]` (continuous)
        arrays, with the keys of `spec.action_spec`.

    Returns:
      `StepOutput` of `[B, ...]` arrays (see the module docstring).
    """
    n = self.num_envs
    action = self._check_action(action)
    reward = np.zeros([n], np.float32)
    done = np.zeros([n], bool)
    truncated = np.zeros([n], bool)
    observation = self._empty_observation()
    finished = []
    for i, env in enumerate(self._envs):
      t = env.step({k: v[i] for k, v in action.items()})
      reward[i] = t.reward
      if t.terminated or t.truncated:
        done[i] = True
        truncated[i] = t.truncated and not t.terminated
        finished.append(i)
        obs = env.reset()
      else:
        obs = t.observation
      for key, value in observation.items():
        value[i] = obs[key]
      self._episode_frames[i] += t.frames
    self._episode_return += reward
    self._episode_step += 1
    info = self._info()
    for i in finished:
      self._episode_return[i] = 0
      self._episode_step[i] = 0
      self._episode_frames[i] = 0
    return types.StepOutput(reward=reward, info=info, done=done,
                            truncated=truncated, observation=observation)

  def get_state(self) -> Dict[str, np.ndarray]:
    """Every env's state plus the running episode totals (see
    `SingleEnv.get_state`; raises `SnapshotUnsupported` like it)."""
    state = {'episode_return': self._episode_return.copy(),
             'episode_step': self._episode_step.copy(),
             'episode_frames': self._episode_frames.copy()}
    for i, env in enumerate(self._envs):
      state.update(snapshot.prefixed(f'env{i}', env.get_state()))
    return state

  def set_state(self, state: Dict[str, np.ndarray]):
    if state['episode_return'].shape != (self.num_envs,):
      raise ValueError(f'The saved state holds '
                       f'{state["episode_return"].shape[0]} envs, this '
                       f'batch {self.num_envs}.')
    for i, env in enumerate(self._envs):
      env.set_state(snapshot.subset(f'env{i}', state))
    self._episode_return[:] = state['episode_return']
    self._episode_step[:] = state['episode_step']
    self._episode_frames[:] = state['episode_frames']

  def close(self):
    for env in self._envs:
      env.close()

  def _info(self) -> types.EpisodeInfo:
    return types.EpisodeInfo(episode_return=self._episode_return.copy(),
                             episode_step=self._episode_step.copy(),
                             episode_frames=self._episode_frames.copy())

  def _stack(self, observations) -> dict:
    observation = self._empty_observation()
    for key, value in observation.items():
      for i, obs in enumerate(observations):
        value[i] = obs[key]
    return observation

  def _empty_observation(self) -> dict:
    n = self.num_envs
    return {key: np.empty((n,) + tuple(spec.shape), spec.dtype)
            for key, spec in self._spec.observation_spec.items()}

  def _check_action(self, action: dict) -> dict:
    """Returns the action heads as arrays; raises ValueError if malformed."""
    try:
      action = {k: np.asarray(action[k]) for k in self._spec.action_spec}
    except KeyError:
      missing = [k for k in self._spec.action_spec if k not in action]
      raise ValueError(f'Action is missing heads {missing}; expected keys '
                       f'{list(self._spec.action_spec)}.') from None
    for key, value in action.items():
      if value.shape[:1] != (self.num_envs,):
        raise ValueError(f'action[{key!r}] has shape {value.shape}; '
                         f'expected a leading batch dimension of '
                         f'{self.num_envs}.')
    return action

  def __enter__(self):
    return self

  def __exit__(self, *unused_exc):
    self.close()
