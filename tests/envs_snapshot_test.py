"""Tests of env snapshots: `get_state` then `set_state` continues exactly."""

from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.

import numpy as np
import pytest
from pysc2.env import mock_sc2_env
import tree

import envs
from clear import snapshot
from clear import types


def _random_action(env, rng):
  action = {}
  for name, head in env.spec.action_spec.items():
    if isinstance(head, types.DiscreteSpec):
      action[name] = rng.integers(0, head.num_values, env.num_envs)
    else:
      action[name] = rng.uniform(head.minimum, head.maximum,
                                 (env.num_envs,) + head.shape).astype(
                                     np.float32)
  return action


def _equal(a, b):
  return all(np.array_equal(x, y) for x, y in zip(tree.flatten(a),
                                                  tree.flatten(b)))


@pytest.mark.parametrize('name,options', [
    ('gym:CartPole-v1', {}),
    ('gym:Pendulum-v1', {'max_episode_steps': 30}),
    ('gym:FrozenLake-v1', {}),
    ('atari:Pong', {'repeat_action_probability': 0.25, 'noop_max': 5}),
    ('atari:Breakout', {'terminal_on_life_loss': True,
                        'max_episode_frames': 400}),
    ('minatar:SpaceInvaders', {}),
    ('minatar:Freeway', {'max_episode_frames': 40}),
    ('minatar:Breakout,minatar:Seaquest', {'task': 1}),
])
def test_a_restored_env_continues_exactly(tmp_path, name, options):
  # `copy` and `original` play different actions first, so nothing but the
  # restored state can make them agree afterwards (e.g. sticky actions
  # repeat the last action, which the ALE's own state omits). Episode ends
  # and auto-resets happen within the steps compared.
  original = envs.make(name, num_envs=3, seed=1, **options)
  copy = envs.make(name, num_envs=3, seed=2, **options)
  original.reset()
  copy.reset()
  rng = np.random.default_rng(0)
  mismatches = 0
  for _ in range(20):
    for _ in range(5):
      original.step(_random_action(original, rng))
      copy.step(_random_action(copy, rng))
    path = str(tmp_path / 'env.npz')
    snapshot.save(path, original.get_state())  # Through a real file.
    copy.set_state(snapshot.load(path))
    for _ in range(5):
      action = _random_action(original, rng)
      mismatches += not _equal(original.step(action), copy.step(action))
  assert mismatches == 0


def test_an_env_without_snapshots_says_so():
  env = envs.make('sc2:MoveToBeacon', env_factory=mock_sc2_env.SC2TestEnv,
                  screen_size=16, minimap_size=12)
  env.reset()
  with pytest.raises(envs.SnapshotUnsupported, match='fresh episodes'):
    env.get_state()


def test_a_state_for_another_batch_is_rejected():
  state = envs.make('gym:CartPole-v1', num_envs=2).get_state()
  with pytest.raises(ValueError, match='2 envs, this batch 3'):
    envs.make('gym:CartPole-v1', num_envs=3).set_state(state)
