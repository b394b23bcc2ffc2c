"""Tests for envs.multitask: the union spec, masks, padding and errors."""

import numpy as np
import pytest

import agents
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import actor as actor_lib
import envs
from envs import multitask
from envs import single

GYM = 'gym:CartPole-v1,gym:Acrobot-v1'


# ALE action ids.
_NOOP, _FIRE, _RIGHT, _LEFT, _RIGHTFIRE, _LEFTFIRE = 0, 1, 3, 4, 11, 12


class RecordingEnvForTest(single.SingleEnv):
  """Delegates to a task env, recording the actions it receives."""

  def __init__(self, env):
    self.inner = env
    self.actions = []

  @property
  def spec(self):
    return self.inner.spec

  def reset(self):
    return self.inner.reset()

  def step(self, action):
    self.actions.append(dict(action))
    return self.inner.step(action)


def test_split_and_is_sequence():
  assert multitask.split_sequence('gym:A-v0, gym:B-v0,gym:A-v0') == [
      'gym:A-v0', 'gym:B-v0', 'gym:A-v0']
  assert multitask.split_sequence('gym:A-v0') == ['gym:A-v0']
  assert multitask.is_sequence(GYM)
  assert not multitask.is_sequence('gym:CartPole-v1')
  with pytest.raises(ValueError, match='empty entry'):
    multitask.split_sequence('gym:CartPole-v1,')


def test_gym_union_spec_masks_and_padding():
  env0 = envs.make(GYM, num_envs=2, seed=3, task=0)
  env1 = envs.make(GYM, num_envs=2, seed=3, task=1)
  assert isinstance(env0, multitask.MultiTaskBatchedEnv)
  for env in (env0, env1):
    assert env.spec.name == GYM
    assert env.spec.observation_spec['vector'] == types.ArraySpec(
        (6,), np.float32)
    assert env.spec.observation_spec['action_mask'] == types.ArraySpec(
        (3,), np.float32)
    assert env.spec.action_spec['action'] == types.DiscreteSpec(
        3, mask_key='action_mask')
    assert env.task_names == ('gym:CartPole-v1', 'gym:Acrobot-v1')
    assert env.num_tasks == 2
  assert (env0.task, env0.task_name) == (0, 'gym:CartPole-v1')
  assert (env1.task, env1.task_name) == (1, 'gym:Acrobot-v1')

  plain0 = envs.make('gym:CartPole-v1', num_envs=2, seed=3)
  plain1 = envs.make('gym:Acrobot-v1', num_envs=2, seed=3)
  for env, plain, size, mask in ((env0, plain0, 4, [True, True, False]),
                                 (env1, plain1, 6, [True, True, True])):
    outputs = [(env.reset(), plain.reset())]
    action = np.array([1, 0])
    outputs.append((env.step({'action': action}),
                    plain.step({'action': action})))
    for out, expected in outputs:
      vector = out.observation['vector']
      assert vector.shape == (2, 6) and vector.dtype == np.float32
      np.testing.assert_array_equal(vector[:, :size],
                                    expected.observation['vector'])
      np.testing.assert_array_equal(vector[:, size:], 0)
      np.testing.assert_array_equal(out.observation['action_mask'],
                                    [mask, mask])
      np.testing.assert_array_equal(out.reward, expected.reward)


def test_masked_action_is_an_error():
  env = envs.make(GYM, task=0)
  env.reset()
  with pytest.raises(ValueError, match='not available'):
    env.step({'action': np.array([2])})


def _check_mapping(env, union):
  """Steps every available union action through a spy on the task env and
  checks the game receives its own index of the same ALE action."""
  task_env = env.envs[0]
  spy = RecordingEnvForTest(task_env.env)
  wrapped = multitask.MultiTaskEnv(spy, env.spec, task_env.layout,
                                   task_env.task)
  available = np.flatnonzero(wrapped.reset()['action_mask'])
  for u in available:
    wrapped.step({'action': np.int64(u)})
    own = spy.actions[-1]['action']
    game_action = spy.inner.ale.getMinimalActionSet()[own]
    assert int(game_action.value) == union[u]
  return available.tolist()


def test_atari_union_of_minimal_action_sets():
  union = [_NOOP, _FIRE, _RIGHT, _LEFT, _RIGHTFIRE, _LEFTFIRE]  # Pong's.
  for task, mask in ((0, [1, 1, 1, 1, 1, 1]), (1, [1, 1, 1, 1, 0, 0])):
    env = envs.make('atari:Pong,atari:Breakout', seed=1, task=task,
                    noop_max=0)
    assert env.spec.action_spec['action'] == types.DiscreteSpec(
        6, mask_key='action_mask')
    assert env.spec.observation_spec['frame'].shape == (84, 84, 4)
    assert env.spec.observation_spec['action_mask'] == types.ArraySpec(
        (6,), np.float32)
    np.testing.assert_array_equal(
        env.reset().observation['action_mask'][0], mask)
    assert _check_mapping(env, union) == np.flatnonzero(mask).tolist()
    env.close()


def test_atari_mapping_is_not_the_identity():
  # Breakout [NOOP, FIRE, RIGHT, LEFT] + MsPacman [NOOP, UP, RIGHT, LEFT,
  # DOWN, UPRIGHT, UPLEFT, DOWNRIGHT, DOWNLEFT]: ALE ids 0..9.
  union = list(range(10))
  env = envs.make('atari:Breakout,atari:MsPacman', task=1, noop_max=0)
  layout = env.envs[0].layout
  assert layout.action_map.tolist() == [0, -1, 1, 2, 3, 4, 5, 6, 7, 8]
  assert env.spec.action_spec['action'].num_values == 10
  assert _check_mapping(env, union) == [0] + list(range(2, 10))
  env.close()


@pytest.mark.parametrize('name, match', [
    ('gym:CartPole-v1,atari:Pong', 'mixes environment families'),
    ('gym:CartPole-v1,gym:NoSuchEnv-v0', r"task 1 \('gym:NoSuchEnv-v0'\)"),
    ('atari:Pong,atari:Pongg', 'Unknown Atari game'),
    ('gym:CartPole-v1,doom:E1M1', 'Unknown environment name'),
    ('gym:CartPole-v1,,gym:Acrobot-v1', 'empty entry'),
    ('gym:CartPole-v1,gym:Pendulum-v1', 'discrete actions'),
])
def test_bad_sequences(name, match):
  with pytest.raises(ValueError, match=match) as info:
    envs.make(name)
  assert repr(name) in str(info.value) or 'Pendulum' in str(info.value)


@pytest.mark.parametrize('task', [-1, 2, 1.0, True])
def test_bad_task_index(task):
  with pytest.raises(ValueError, match='task must be an int'):
    envs.make(GYM, task=task)


def test_unknown_options_are_still_named():
  with pytest.raises(ValueError, match="'colour'"):
    envs.make(GYM, colour=True)


def test_other_heads_pass_through():
  env = envs.make(GYM, fixed_step_mul=False, max_step_mul=3)
  assert env.spec.action_spec[types.STEP_MUL_KEY] == types.DiscreteSpec(3)
  env.reset()
  out = env.step({'action': np.array([1]),
                  types.STEP_MUL_KEY: np.array([2])})
  assert out.info.episode_frames[0] == 3


def test_union_spec_rejects_different_observations():
  a = types.EnvSpec({'vector': types.ArraySpec((4,), np.float32)},
                    {'action': types.DiscreteSpec(2)}, 'gym:A')
  b = types.EnvSpec({'frame': types.ArraySpec((4, 4, 1), np.uint8)},
                    {'action': types.DiscreteSpec(2)}, 'gym:B')
  with pytest.raises(ValueError, match='different observation entries'):
    multitask.union_spec('gym:A,gym:B', ['gym:A', 'gym:B'], [a, b],
                         [[0, 1], [0, 1]])
  c = types.EnvSpec({'vector': types.ArraySpec((2, 2), np.float32)},
                    {'action': types.DiscreteSpec(2)}, 'gym:C')
  with pytest.raises(ValueError, match='differ in their last axis alone'):
    multitask.union_spec('gym:A,gym:C', ['gym:A', 'gym:C'], [a, c],
                         [[0, 1], [0, 1]])


def test_repeated_task_and_snapshot():
  env = envs.make('gym:CartPole-v1,gym:Acrobot-v1,gym:CartPole-v1',
                  num_envs=2, seed=5, task=2)
  assert env.task_name == 'gym:CartPole-v1' and env.num_tasks == 3
  env.reset()
  state = env.get_state()
  action = {'action': np.array([0, 1])}
  first = env.step(action).observation['vector'].copy()
  env.set_state(state)
  np.testing.assert_array_equal(env.step(action).observation['vector'],
                                first)
  other = envs.make('gym:CartPole-v1,gym:Acrobot-v1,gym:CartPole-v1',
                    num_envs=2, seed=5, task=0)
  with pytest.raises(ValueError, match='task 2'):
    other.set_state(state)


def test_agent_never_samples_a_masked_action():
  env = envs.make(GYM, num_envs=8, seed=0, task=0)
  # ImpalaPolicy acts with agents.make_agent(spec, network='mlp',
  # core_size=8).
  policy = registry.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8))
  actor = actor_lib.Actor(env, policy, unroll_length=40)
  unroll = actor.collect().unroll  # The env raises on a masked action.
  actions = unroll.agent_outputs.action['action'][1:]
  assert actions.shape == (40, 8)
  assert set(np.unique(actions)) == {0, 1}
  logits = unroll.agent_outputs.logits['action'][1:]
  np.testing.assert_array_equal(logits[..., 2], agents.MASKED_LOGIT)
