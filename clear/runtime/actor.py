"""An actor: steps a batched environment with a policy and cuts unrolls.

T is the unroll length, B the number of environments the actor steps
together. Each `collect` returns B unrolls of T + 1 steps, time-major
`[T + 1, B, ...]`, whose first step repeats the previous unroll's last one,
together with the recurrent state the policy had before that first step and
the episodes that finished meanwhile.
"""

from typing import List, NamedTuple

import numpy as np
import tree

from clear import snapshot
from clear import types
from clear.algorithms import policy as policy_lib


class Episode(NamedTuple):
  """A finished episode, for logging."""
  episode_return: float
  episode_step: int
  episode_frames: int
  truncated: bool


class Trajectories(NamedTuple):
  """What one `collect` returns.

  Attributes:
    unroll: `types.Unroll`, time-major `[T + 1, B, ...]`; agent state `[B]`.
    episodes: `Episode`s that finished during the unroll.
    weights_version: the update count (`num_updates`) of the weights the
      policy acted with.
    actor_id: which actor produced it.
    env_restarts: environment relaunches after crashes so far (cumulative,
      this actor).
  """
  unroll: types.Unroll
  episodes: List[Episode]
  weights_version: int
  actor_id: int
  env_restarts: int = 0


def finished_episodes(env_output: types.StepOutput) -> List[Episode]:
  """Episodes whose last transition is in `env_output` (done rows)."""
  info = env_output.info
  return [Episode(float(info.episode_return[i]), int(info.episode_step[i]),
                  int(info.episode_frames[i]), bool(env_output.truncated[i]))
          for i in np.flatnonzero(env_output.done)]


def stack_nests(nests):
  """A list of nests of arrays -> one nest with a new leading axis.

  E.g. T steps of `[B, ...]` -> `[T, B, ...]`, or B unrolls -> a batch.
  """
  return tree.map_structure(lambda *x: np.stack(x), *nests)


class Actor:
  """Cuts overlapping unrolls of `unroll_length` steps from a batched env.

  Args:
    env: a batched environment from `envs.make`.
    policy: a `policy.Policy` (acting side).
    unroll_length: T.
    actor_id: identifies the actor in its `Trajectories`.
  """

  def __init__(self, env, policy: policy_lib.Policy, unroll_length: int,
               actor_id: int = 0):
    if unroll_length < 1:
      raise ValueError(f'Actor: unroll_length must be >= 1, got '
                       f'{unroll_length}.')
    self._env = env
    self._policy = policy
    self._unroll_length = unroll_length
    self.actor_id = actor_id
    self.weights_version = -1
    self.reset()

  def reset(self):
    """Starts fresh episodes with a fresh recurrent state."""
    batch_size = self._env.num_envs
    self._env_output = self._env.reset()
    self._agent_output = policy_lib.zero_agent_output(self._policy.spec,
                                                      batch_size)
    self._state = self._policy.initial_state(batch_size)

  def use_env(self, env, seed: int):
    """Acts in `env` (of the same spec and batch) from now on, sampling as
    a policy built with `seed` starts to: fresh episodes, a fresh core
    state, and the weights reloaded at the next `set_weights`. The env it
    used before stays open (its owner closes it)."""
    if env.spec != self._env.spec or env.num_envs != self._env.num_envs:
      raise ValueError(f'Actor.use_env: {env.spec.name!r} with '
                       f'{env.num_envs} envs does not match '
                       f'{self._env.spec.name!r} with {self._env.num_envs}.')
    self._env = env
    self._policy.reseed_sampling(seed)
    self.weights_version = -1
    self.reset()

  def set_weights(self, weights, version: int):
    self._policy.set_weights(weights)
    self.weights_version = version

  def collect(self) -> Trajectories:
    """Acts T steps and returns the unroll that covers them."""
    initial_state = self._state
    env_outputs = [self._env_output]
    agent_outputs = [self._agent_output]
    episodes = []
    for _ in range(self._unroll_length):
      agent_output, self._state = self._policy.act(
          self._env_output, self._agent_output.action, self._state)
      self._env_output = self._env.step(agent_output.action)
      self._agent_output = agent_output
      env_outputs.append(self._env_output)
      agent_outputs.append(agent_output)
      if self._env_output.done.any():
        episodes.extend(finished_episodes(self._env_output))
    unroll = types.Unroll(initial_state, stack_nests(env_outputs),
                          stack_nests(agent_outputs))
    return Trajectories(unroll, episodes, self.weights_version, self.actor_id,
                        getattr(self._env, 'num_env_restarts', 0))

  def get_state(self) -> snapshot.Arrays:
    """What decides the actor's next unrolls besides the weights: the env's
    state, the last env and agent outputs, the recurrent state and the
    policy's sampling RNG.

    Raises:
      envs.SnapshotUnsupported: the env cannot save its state.
    """
    return {**snapshot.prefixed('env', self._env.get_state()),
            **snapshot.flatten_nest('env_output', self._env_output),
            **snapshot.flatten_nest('agent_output', self._agent_output),
            **snapshot.flatten_nest('agent_state', self._state),
            **snapshot.prefixed('policy', self._policy.get_rng_state())}

  def set_state(self, state: snapshot.Arrays):
    """Continues from `get_state` (same env, batch and policy kind).

    The weights are not part of it: the actor loads the next published ones.
    """
    self._env.set_state(snapshot.subset('env', state))
    self._env_output = snapshot.unflatten_nest('env_output', state,
                                               self._env_output)
    self._agent_output = snapshot.unflatten_nest('agent_output', state,
                                                 self._agent_output)
    self._state = snapshot.unflatten_nest('agent_state', state, self._state)
    self._policy.set_rng_state(snapshot.subset('policy', state))
    self.weights_version = -1

  def close(self):
    self._env.close()
