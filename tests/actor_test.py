"""Tests of unroll cutting, and of the local actor pool's processes."""

import collections
import os
import re
import signal
import time

import numpy as np
import psutil
import pytest
import tree

from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import learner as learner_lib
from clear.runtime import actor as actor_lib
from clear.runtime import actor_worker
from clear.runtime import local_actors
from clear.runtime import ray_actors
import envs


class FakeEchoEnvForTest:
  """A batched env whose observation echoes the last action taken.

  Episodes last `length` steps; reward is the action. Lets the test see which
  action led to which env output.
  """

  def __init__(self, num_envs=3, length=4):
    self.num_envs = num_envs
    self._length = length
    self.spec = types.EnvSpec(
        observation_spec=collections.OrderedDict(
            vector=types.ArraySpec((2,), np.float32)),
        action_spec=collections.OrderedDict(action=types.DiscreteSpec(5)),
        name='fake:echo')
    self._t = np.zeros(num_envs, np.int32)
    self._ret = np.zeros(num_envs, np.float32)

  def _output(self, action, reward, done):
    obs = np.stack([action.astype(np.float32), self._t.astype(np.float32)],
                   -1)
    info = types.EpisodeInfo(self._ret.copy(), self._t.copy(), self._t.copy())
    return types.StepOutput(reward, info, done, np.zeros_like(done),
                            {'vector': obs})

  def reset(self):
    self._t[:] = 0
    zeros = np.zeros(self.num_envs)
    return self._output(zeros, zeros.astype(np.float32),
                        np.zeros(self.num_envs, bool))

  def step(self, action):
    action = np.asarray(action['action'])
    self._t += 1
    reward = action.astype(np.float32)
    self._ret += reward
    done = self._t >= self._length
    out = self._output(action, reward, done)
    self._t[done] = 0
    self._ret[done] = 0
    return out

  def close(self):
    pass


def make_actor(unroll_length=5):
  env = FakeEchoEnvForTest()
  policy = registry.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8), seed=1)
  return actor_lib.Actor(env, policy, unroll_length)


def test_unrolls_overlap_by_one_step_and_are_aligned():
  actor = make_actor(unroll_length=5)
  first = actor.collect().unroll
  second = actor.collect().unroll
  assert first.env_outputs.reward.shape == (6, 3)
  assert first.agent_outputs.logits['action'].shape == (6, 3, 5)
  # The first step of an unroll repeats the last step of the previous one.
  for a, b in zip(np.asarray(first.env_outputs.observation['vector'][-1]),
                  np.asarray(second.env_outputs.observation['vector'][0])):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(first.agent_outputs.action['action'][-1],
                                second.agent_outputs.action['action'][0])
  # agent_outputs[t].action is the action that led to env_outputs[t].
  for unroll in (first, second):
    np.testing.assert_array_equal(
        unroll.env_outputs.observation['vector'][1:, :, 0],
        unroll.agent_outputs.action['action'][1:])
    np.testing.assert_array_equal(unroll.env_outputs.reward[1:],
                                  unroll.agent_outputs.action['action'][1:])


def assert_reunroll_matches(agent, unroll, atol):
  """Re-unrolling `unroll` from its stored state gives the actor's own
  logits and baselines (the learner's outputs at step t are the actor's at
  t + 1)."""
  outputs, _ = agent.unroll(unroll.agent_outputs.action, unroll.env_outputs,
                            unroll.agent_state)
  np.testing.assert_allclose(outputs.logits['action'][:-1],
                             unroll.agent_outputs.logits['action'][1:],
                             atol=atol)
  np.testing.assert_allclose(outputs.baseline[:-1],
                             unroll.agent_outputs.baseline[1:], atol=atol)


def test_agent_state_at_unroll_start_reproduces_the_behaviour():
  """Re-unrolling from the stored state gives the actor's own logits."""
  actor = make_actor(unroll_length=6)
  actor.collect()
  unroll = actor.collect().unroll
  assert_reunroll_matches(actor._policy.agent, unroll, atol=1e-5)


def test_learner_reunroll_matches_the_actor_at_atari_scale():
  """Real Pong frames through the Atari agent (IMPALA shallow torso, LSTM
  256), with episode ends inside unrolls (short episodes) and one unroll
  of an earlier collect in the batch as a replayed column: with the actor's
  weights, the learner's re-unrolled logits and baselines equal the
  actor's, so every log-rho of the batch is 0."""
  env = envs.make('atari:Pong', num_envs=2, seed=3, max_episode_frames=160)
  policy = registry.make_policy(
      'impala', env.spec, policy_lib.AgentConfig('impala_shallow', 256),
      seed=1)
  assert policy.agent.env_spec.observation_spec['frame'].shape == (84, 84, 4)
  actor = actor_lib.Actor(env, policy, unroll_length=20)
  unrolls = [actor.collect().unroll for _ in range(4)]
  env.close()
  dones = np.stack([u.env_outputs.done[1:-1] for u in unrolls])
  assert dones.any(), 'no episode end inside an unroll'
  # Columns of an earlier collect (replayed) beside the newest (fresh).
  old, new = unrolls[0], unrolls[3]
  in_time = lambda a, b: np.concatenate([a, b], axis=1)
  batch = types.Unroll(
      tree.map_structure(lambda a, b: np.concatenate([a, b]),
                         old.agent_state, new.agent_state),
      tree.map_structure(in_time, old.env_outputs, new.env_outputs),
      tree.map_structure(in_time, old.agent_outputs, new.agent_outputs))
  agent = policy.agent
  assert_reunroll_matches(agent, batch, atol=2e-5)
  learner = learner_lib.ImpalaClearLearner(agent, learner_lib.LearnerConfig(
      batch_size=4, num_replay=2, unroll_length=20))
  _, metrics = learner._grads_fn(batch)  # pylint: disable=protected-access
  assert abs(float(metrics['policy/mean_log_rho'])) < 1e-5


def test_finished_episodes_are_reported():
  actor = make_actor(unroll_length=8)  # Episodes last 4 steps.
  trajectories = actor.collect()
  assert len(trajectories.episodes) == 2 * 3
  for episode in trajectories.episodes:
    assert episode.episode_step == 4
  unroll = trajectories.unroll
  rewards = unroll.env_outputs.reward[1:5, 0]
  np.testing.assert_allclose(trajectories.episodes[0].episode_return,
                             rewards.sum())


def test_unroll_length_must_be_positive():
  env = FakeEchoEnvForTest()
  policy = registry.make_policy('impala', env.spec,
                                  policy_lib.AgentConfig('mlp', 8))
  with pytest.raises(ValueError, match='unroll_length'):
    actor_lib.Actor(env, policy, 0)


def pool_config(**kwargs):
  return actor_worker.ActorPoolConfig(**{
      'env_name': 'gym:CartPole-v1', 'env_options': {}, 'envs_per_actor': 4,
      'algorithm': 'impala', 'agent_config': policy_lib.AgentConfig('mlp', 8),
      'unroll_length': 5, 'num_actors': 2, **kwargs})


def wait_for(pool, predicate, timeout=60.0):
  deadline = time.time() + timeout
  while time.time() < deadline:
    trajectories = pool.get(timeout=0.5)
    if trajectories is not None and predicate(trajectories):
      return trajectories
  raise AssertionError('no matching trajectories in time')


def test_local_pool_delivers_versioned_unrolls_restarts_and_cleans_up():
  env = envs.make('gym:CartPole-v1')
  learner_policy = registry.make_policy(
      'impala', env.spec, policy_lib.AgentConfig('mlp', 8), seed=3)
  env.close()
  weights = learner_policy.get_weights()
  before = {p.pid for p in psutil.Process().children(recursive=True)}
  pool = local_actors.LocalActorPool(pool_config(max_restarts=1),
                                   [w.shape for w in weights])
  children = []
  try:
    pool.publish(weights, 0)
    got = wait_for(pool, lambda t: True)
    assert got.unroll.env_outputs.reward.shape == (6, 4)
    assert got.weights_version == 0
    pool.publish([w + 1.0 for w in weights], 7)
    wait_for(pool, lambda t: t.weights_version == 7)
    children = [psutil.Process(pid) for pid in pool.pids]
    # An actor dies mid-unroll: the pool restarts it and keeps delivering.
    os.kill(pool.pids[0], signal.SIGKILL)
    children[0].wait(10)
    wait_for(pool, lambda t: pool.num_restarts == 1 and t.actor_id == 0)
    children = [psutil.Process(pid) for pid in pool.pids]
    # Past max_restarts the pool fails loudly instead of hanging.
    os.kill(pool.pids[1], signal.SIGKILL)
    children[1].wait(10)
    with pytest.raises(actor_worker.ActorFailure, match='max_restarts'):
      for _ in range(200):
        pool.get(timeout=0.05)
    # Killed mid-send, an actor leaves its sending flag up; `psutil.wait`
    # reaped it, so multiprocessing still takes it for alive. Closing must
    # not read the pipe the failed restart closed.
    pool._lives[1].beat(sending=True)  # pylint: disable=protected-access
  finally:
    pool.close()
  # No actor process is left behind (multiprocessing's resource tracker,
  # shared by the whole test process, may stay).
  left = [p for p in psutil.Process().children(recursive=True)
          if p.pid not in before and p.status() != psutil.STATUS_ZOMBIE and
          'resource_tracker' not in ' '.join(p.cmdline())]
  assert not left, [p.cmdline() for p in left]
  assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                 for c in children)


@pytest.mark.slow  # Three actor processes start: about 30 s on 2 cores.
def test_an_actor_that_cannot_start_backs_off_and_says_why(caplog):
  env = envs.make('gym:CartPole-v1')
  weights = registry.make_policy(
      'impala', env.spec, policy_lib.AgentConfig('mlp', 8)).get_weights()
  env.close()
  # The learner's env is fine; the actor's cannot be built.
  config = pool_config(num_actors=1, max_restarts=2,
                       env_options={'no_such_option': 1})
  pool = local_actors.LocalActorPool(config, [w.shape for w in weights])
  try:
    pool.publish(weights, 0)
    with pytest.raises(actor_worker.ActorFailure) as failure:
      deadline = time.time() + 120
      while time.time() < deadline:
        assert pool.get(timeout=0.2) is None
  finally:
    pool.close()
  # The last death names what the actor said.
  message = str(failure.value)
  assert 'more than max_restarts=2 (last: actor 0, ' in message
  assert '; it said: ValueError: Unknown' in message
  assert 'no_such_option' in message
  # Each death before a first unroll waits twice as long as the one before.
  waits = re.findall(r'it starts again in ([\d.]+) s', caplog.text)
  assert waits == ['0.5', '1.0']


class FakeRayForTest:
  """Just enough of the `ray` module for `RayActorPool`, with Ray's real
  exception classes: each actor's tasks finish, in order, with the outcomes
  scripted for it (a (incarnation, result) pair, returned with a made-up
  PID, or an exception)."""

  def __init__(self, scripts):
    import ray.exceptions  # pylint: disable=g-import-not-at-top
    self.exceptions = ray.exceptions
    self.scripts = scripts
    self.submitted = collections.Counter()
    self._outcomes = {}

  def is_initialized(self):
    return True

  def put(self, value):
    return ('weights', value)

  def remote(self, **options):
    del options
    fake = self

    class Handle:

      def __init__(self, index):
        self.index = index
        self.collect_with_incarnation = self

      def remote(self, weights_ref, version, switch):
        del weights_ref, version, switch
        fake.submitted[self.index] += 1
        ref = object()
        outcome = fake.scripts[self.index].pop(0)
        if isinstance(outcome, tuple):
          outcome = (outcome[0], 1000 + self.index, outcome[1])
        fake._outcomes[ref] = outcome
        return ref

    class Remote:

      @staticmethod
      def remote(config, index):
        del config
        return Handle(index)

    return lambda cls: Remote

  def wait(self, refs, num_returns, timeout):
    del num_returns, timeout
    return refs[:1], refs[1:]

  def get(self, ref):
    outcome = self._outcomes.pop(ref)
    if isinstance(outcome, Exception):
      raise outcome
    return outcome


def ray_pool_with_fake(monkeypatch, scripts, **config):
  import sys  # pylint: disable=g-import-not-at-top
  fake = FakeRayForTest(scripts)
  monkeypatch.setitem(sys.modules, 'ray', fake)
  pool = ray_actors.RayActorPool(pool_config(**config))
  pool.publish([np.zeros(2)], 0)
  return fake, pool


def lost_unroll():
  import ray.exceptions  # pylint: disable=g-import-not-at-top
  return ray.exceptions.ObjectReconstructionFailedError('ab' * 14)


def test_ray_pool_asks_again_for_an_unroll_lost_with_its_node(monkeypatch):
  # Actor 0's second unroll is lost with its node's object store; its next
  # one comes from a new life, which counts as the one restart.
  fake, pool = ray_pool_with_fake(monkeypatch, {
      0: [(1, 'a'), lost_unroll(), (2, 'c'), (2, 'd')],
      1: [(5, 'b'), (5, 'e'), (5, 'f'), (5, 'g')]}, max_restarts=1)
  assert pool.get() == 'a'
  assert pool.get() == 'b'
  assert pool.get() is None  # The lost unroll: nothing to train on.
  assert pool.num_restarts == 0
  assert pool.get() == 'e'  # Actor 0 waits a second before it is asked.
  assert fake.submitted[0] == 2
  time.sleep(1.1)
  results = [pool.get(), pool.get()]
  assert 'c' in results and pool.num_restarts == 1
  assert fake.submitted[0] == 4  # 'c' came, and the actor was asked again.


def test_ray_pool_stops_when_a_lost_node_took_more_actors_than_allowed(
    monkeypatch):
  import ray.exceptions  # pylint: disable=g-import-not-at-top
  _, pool = ray_pool_with_fake(monkeypatch, {
      0: [lost_unroll(), ray.exceptions.ActorDiedError()],
      1: [(5, 'b'), (5, 'c'), (5, 'd')]}, max_restarts=0)
  assert pool.get() is None
  assert pool.num_restarts == 0
  time.sleep(1.1)
  with pytest.raises(actor_worker.ActorFailure, match='max_actor_restarts=0'):
    for _ in range(3):
      pool.get()
