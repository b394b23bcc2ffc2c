"""Tests for envs.gym_env on real gymnasium CartPole and Pendulum."""

import numpy as np
import pytest

import envs
from clear import types


def test_cartpole_spec_and_auto_reset():
  env = envs.make('gym:CartPole-v1', num_envs=3, seed=0)
  assert env.spec.observation_spec['vector'] == types.ArraySpec(
      (4,), np.float32)
  assert env.spec.action_spec['action'] == types.DiscreteSpec(2)
  out = env.reset()
  assert out.observation['vector'].shape == (3, 4)
  assert out.observation['vector'].dtype == np.float32
  steps = np.zeros(3, np.int32)
  returns = np.zeros(3, np.float32)
  seen_done = 0
  for _ in range(100):
    out = env.step({'action': np.zeros(3, np.int64)})  # Always push left.
    steps += 1
    returns += out.reward
    np.testing.assert_array_equal(out.info.episode_step, steps)
    np.testing.assert_array_equal(out.info.episode_return, returns)
    np.testing.assert_array_equal(out.info.episode_frames, steps)
    assert not out.truncated.any()
    seen_done += out.done.sum()
    steps[out.done] = 0
    returns[out.done] = 0
  assert seen_done >= 3


def test_cartpole_reset_observation_after_done():
  env = envs.make('gym:CartPole-v1', seed=0)
  env.reset()
  while True:
    out = env.step({'action': np.array([0])})
    if out.done[0]:
      break
  # The returned observation starts a new episode: small initial state.
  assert np.all(np.abs(out.observation['vector'][0]) <= 0.05)


def test_time_limit_is_truncation():
  env = envs.make('gym:Pendulum-v1', num_envs=2, max_episode_steps=5)
  assert env.spec.action_spec['action'] == types.ContinuousSpec(
      (1,), -2.0, 2.0)
  env.reset()
  for step in range(1, 6):
    out = env.step({'action': np.full((2, 1), 5.0, np.float32)})  # Clipped.
    assert out.done.all() == (step == 5)
  assert out.truncated.all()
  assert out.reward.dtype == np.float32
  np.testing.assert_array_equal(out.info.episode_step, [5, 5])


def test_same_seed_is_reproducible():
  def run(seed):
    env = envs.make('gym:CartPole-v1', num_envs=2, seed=seed)
    obs = [env.reset().observation['vector']]
    rng = np.random.default_rng(0)
    for _ in range(30):
      obs.append(env.step(
          {'action': rng.integers(2, size=2)}).observation['vector'])
    return np.stack(obs)

  np.testing.assert_array_equal(run(4), run(4))
  assert not np.array_equal(run(4), run(5))


def test_a_state_saved_before_the_first_reset_keeps_its_seed():
  # An env restored into one built with another seed (as a resume builds
  # the envs of a task not visited yet) starts the episodes the saved one
  # would have.
  saved = envs.make('gym:CartPole-v1', num_envs=2, seed=4)
  restored = envs.make('gym:CartPole-v1', num_envs=2, seed=5)
  other = envs.make('gym:CartPole-v1', num_envs=2, seed=5)
  restored.set_state(saved.get_state())
  first = saved.reset().observation['vector']
  np.testing.assert_array_equal(restored.reset().observation['vector'], first)
  assert not np.array_equal(other.reset().observation['vector'], first)


def test_dynamic_step_mul_repeats_action():
  env = envs.make('gym:Pendulum-v1', fixed_step_mul=False, max_step_mul=4)
  assert env.spec.action_spec[types.STEP_MUL_KEY] == types.DiscreteSpec(4)
  env.reset()
  frames = 0
  for step, m in enumerate([0, 3, 1, 2], start=1):
    out = env.step({'action': np.zeros((1, 1)),
                    types.STEP_MUL_KEY: np.array([m])})
    frames += m + 1
    assert out.info.episode_frames[0] == frames
    assert out.info.episode_step[0] == step
  # Pendulum's 200-step limit counts raw steps: 50 agent steps of 4.
  env.reset()
  for step in range(1, 51):
    out = env.step({'action': np.zeros((1, 1)),
                    types.STEP_MUL_KEY: np.array([3])})
    assert out.done[0] == (step == 50)
  assert out.truncated[0] and out.info.episode_frames[0] == 200


def test_fixed_step_mul():
  env = envs.make('gym:CartPole-v1', step_mul=2, seed=0)
  env.reset()
  out = env.step({'action': np.array([1])})
  assert out.info.episode_frames[0] == 2 and out.reward[0] == 2.0


def test_unknown_id():
  with pytest.raises(ValueError, match="Unknown gymnasium.*'CartPole-v1'"):
    envs.make('gym:CartPole-v9')
