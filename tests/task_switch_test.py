"""A task sequence switches tasks inside the actors it has, and evaluates
every task in one batch.

Switching: an actor holds every task's envs from its start (a switch builds
none), each seeded apart; switched in place it acts exactly as one that
played nothing before (sampling seed, fresh episodes and core state); it
keeps its process, and its envs for a later visit; unrolls of the task
before are dropped; a restarted actor starts on the current task; inline
actors save the envs they hold, so a resume goes on as an uninterrupted run.

Evaluation: the returns of the evaluator that played tasks one after
another, recorded on fixed checkpoints (tests/testdata/evaluation_v1), and
one forward pass a step over the envs still playing.
"""

import json
import os
import signal
import time

import numpy as np
import psutil
import pytest
import tree

from clear import checkpoint as checkpoint_lib
from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import actor_pool
from clear.runtime import actor_worker
from clear.runtime import evaluation
from clear.runtime import local_actors
import envs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, 'tests', 'testdata')
SEQUENCE = 'gym:CartPole-v1,gym:Acrobot-v1'
# The union spec's action mask: CartPole has 2 of the 3 actions.
MASKS = {0: [1.0, 1.0, 0.0], 1: [1.0, 1.0, 1.0]}


def sequence_config(task=0, seed=0, **kwargs):
  return actor_worker.ActorPoolConfig(
      env_name=SEQUENCE, env_options={'task': task}, envs_per_actor=3,
      algorithm='impala', agent_config=policy_lib.AgentConfig('mlp', 8),
      unroll_length=6, seed=seed, **{'num_actors': 2, **kwargs})


def learner_weights(seed=3):
  env = envs.make(SEQUENCE, task=0)
  policy = registry.make_policy('impala', env.spec,
                                policy_lib.AgentConfig('mlp', 8), seed=seed)
  env.close()
  return policy.get_weights()


def task_of(trajectories) -> int:
  """The task an unroll was played on, read from its action masks."""
  masks = trajectories.unroll.env_outputs.observation['action_mask']
  tasks = {task for task, mask in MASKS.items() if np.all(masks == mask)}
  assert len(tasks) == 1, masks
  return tasks.pop()


def assert_same_unrolls(a, b):
  tree.map_structure(np.testing.assert_array_equal, a.unroll, b.unroll)


# --- Workers -----------------------------------------------------------------


def test_a_switched_worker_acts_as_one_that_played_nothing_before():
  # Nothing of the task played before (episodes, core state, weights,
  # sampling stream) reaches the task switched to.
  weights = learner_weights()
  switched = actor_worker.ActorWorker(sequence_config(seed=5), actor_id=1)
  try:
    for _ in range(3):
      switched.collect(weights, 0)
    switch = actor_worker.TaskSwitch(number=1, task=1, seed=11)
    switched.switch_task(switch)
    assert switched.switch_number == 1
    fresh = actor_worker.ActorWorker(sequence_config(seed=5), actor_id=1)
    fresh.switch_task(switch)
    try:
      # Same version as before the switch: the switch alone makes the
      # worker load the published weights again.
      newer = [w + 0.5 for w in weights]
      for _ in range(4):
        a, b = switched.collect(newer, 0), fresh.collect(newer, 0)
        assert task_of(a) == 1
        assert_same_unrolls(a, b)
    finally:
      fresh.close()
  finally:
    switched.close()


def test_a_worker_builds_every_tasks_envs_at_its_start_each_seeded_apart(
    monkeypatch):
  weights = learner_weights()
  config = sequence_config(seed=4)._replace(
      env_name='gym:CartPole-v1,gym:Acrobot-v1,gym:CartPole-v1')
  worker = actor_worker.ActorWorker(config, actor_id=0)
  try:
    held = dict(worker._envs)  # pylint: disable=protected-access
    assert sorted(held) == [0, 1, 2]
    # A switch builds nothing: it plays the envs built at the start.
    monkeypatch.setattr(envs, 'make', None)
    starts = {}
    for number, task in enumerate([2, 1, 0], start=1):
      worker.switch_task(actor_worker.TaskSwitch(number, task, 9))
      assert worker.actor._env is held[task]  # pylint: disable=protected-access
      starts[task] = worker.collect(weights, 0).unroll.env_outputs.observation
    # CartPole twice: the two tasks' envs are seeded apart, so their first
    # episodes start from other states.
    assert not np.array_equal(starts[0]['vector'][0], starts[2]['vector'][0])
  finally:
    worker.close()
  assert envs.multitask.held_from_the_start('minatar:Breakout,minatar:Asterix')
  assert not envs.multitask.held_from_the_start('sc2:MoveToBeacon,'
                                                'sc2:CollectMineralShards')


def test_a_revisited_task_starts_fresh_episodes_in_the_envs_it_kept():
  weights = learner_weights()
  worker = actor_worker.ActorWorker(sequence_config(), actor_id=0)
  try:
    first_env = worker.actor._env  # pylint: disable=protected-access
    for _ in range(4):
      worker.collect(weights, 0)
    worker.switch_task(actor_worker.TaskSwitch(1, 1, 7))
    worker.collect(weights, 0)
    worker.switch_task(actor_worker.TaskSwitch(2, 0, 9))
    assert worker.actor._env is first_env  # pylint: disable=protected-access
    got = worker.collect(weights, 0)
    assert task_of(got) == 0
    outputs = got.unroll.env_outputs
    # Step 0 of the first unroll after a switch is a fresh start in every
    # env, with a zero core state.
    np.testing.assert_array_equal(outputs.info.episode_step[0], 0)
    assert not outputs.done[0].any()
  finally:
    worker.close()


def test_inline_actors_save_the_envs_of_other_tasks_and_resume_exactly():
  weights = learner_weights()
  switch = actor_worker.TaskSwitch(1, 1, 13)
  pool = actor_pool.InlineActorPool(sequence_config())
  pool.publish(weights, 0)
  for _ in range(3):
    pool.get()
  pool.switch_task(1, 13)
  assert pool.config == actor_worker.switched_config(sequence_config(), switch)
  pool.get()
  state = pool.get_state()
  assert any(key.startswith('actor0/held/task0/') for key in state)
  # A pool built for the task it was on, as a resumed run builds it.
  resumed = actor_pool.InlineActorPool(pool.config)
  resumed.set_state(snapshot.subset('', {'/' + k: v for k, v in
                                         state.items()}))
  resumed.publish(weights, 0)
  try:
    for _ in range(3):
      assert_same_unrolls(pool.get(), resumed.get())
    # Back on the first task, the kept envs go on alike.
    pool.switch_task(0, 17)
    resumed.switch_task(0, 17)
    for _ in range(4):
      a, b = pool.get(), resumed.get()
      assert task_of(a) == 0
      assert_same_unrolls(a, b)
  finally:
    pool.close()
    resumed.close()


# --- Local processes ---------------------------------------------------------


def test_local_pool_switches_in_its_processes_and_drops_the_task_before():
  weights = learner_weights()
  pool = local_actors.LocalActorPool(sequence_config(max_restarts=1),
                                   [w.shape for w in weights])
  try:
    pool.publish(weights, 0)
    got = [pool.get(timeout=60.0) for _ in range(4)]
    assert {task_of(t) for t in got if t is not None} == {0}
    pids = list(pool.pids)
    pool.publish(weights, 0)
    pool.switch_task(1, 21)
    # Every unroll from now on is of the new task, some from each actor,
    # and the actors are the same processes.
    after = []
    while len({t.actor_id for t in after}) < 2 or len(after) < 6:
      trajectories = pool.get(timeout=60.0)
      assert trajectories is not None
      after.append(trajectories)
    assert {task_of(t) for t in after} == {1}
    assert pool.pids == pids
    # An actor restarted after the switch starts on the current task.
    os.kill(pids[0], signal.SIGKILL)
    psutil.Process(pids[0]).wait(10)
    restarted, deadline = None, time.monotonic() + 120
    while time.monotonic() < deadline:
      trajectories = pool.get(timeout=0.5)
      if trajectories is not None and pool.num_restarts == 1 and (
          trajectories.actor_id == 0):
        restarted = trajectories
        break
    assert restarted is not None and task_of(restarted) == 1
    assert pool.pids[0] != pids[0] and pool.pids[1] == pids[1]
  finally:
    pool.close()


# --- Evaluation --------------------------------------------------------------


class FakeGreedyPolicyForTest(policy_lib.Policy):
  """A real policy acting on the argmax of its logits (no sampling), which
  counts the batches it is called on."""

  def __init__(self, inner):
    super().__init__(inner.spec)
    self._inner = inner
    self.batch_sizes = []

  def initial_state(self, batch_size):
    return self._inner.initial_state(batch_size)

  def act(self, env_output, prev_action, state):
    self.batch_sizes.append(len(env_output.reward))
    output, state = self._inner.act(env_output, prev_action, state)
    action = {key: np.argmax(logits, -1).astype(np.int32)
              for key, logits in output.logits.items()}
    return output._replace(action=action), state

  def acting_variables(self):
    return self._inner.acting_variables()

  def _scope_variables(self, scope):
    # pylint: disable-next=protected-access
    return self._inner._scope_variables(scope)

  def learn(self, batch):
    return self._inner.learn(batch)

  @property
  def num_env_frames(self):
    return self._inner.num_env_frames

  @property
  def num_updates(self):
    return self._inner.num_updates

  def add_env_frames(self, frames):
    self._inner.add_env_frames(frames)

  def checkpointables(self):
    return self._inner.checkpointables()

  def acting_checkpointables(self):
    return self._inner.acting_checkpointables()


def fixture_policy(logdir, env_name, core_size):
  """The acting policy of a run in tests/testdata/logdirs_v1."""
  env = envs.make(env_name, task=0) if ',' in env_name else envs.make(
      env_name)
  spec = env.spec
  env.close()
  policy = registry.make_policy('impala', spec,
                                policy_lib.AgentConfig(core_size=core_size),
                                seed=5)
  checkpoint_lib.restore_part(
      os.path.join(TESTDATA, 'logdirs_v1', logdir, 'checkpoints'),
      policy.acting_checkpointables())
  return policy


# name -> (logdir, env, core size, greedy, max_steps). Reversed, CartPole is
# the second task of the batch and leaves it first.
EVALUATIONS = {
    'impala_cartpole': ('impala_cartpole', 'gym:CartPole-v1', 16, False,
                        600),
    'impala_cartpole_cut': ('impala_cartpole', 'gym:CartPole-v1', 16, False,
                            60),
    'impala_sequence': ('impala_sequence', SEQUENCE, 0, False, 600),
    'impala_sequence_greedy': ('impala_sequence', SEQUENCE, 0, True, 600),
    'impala_sequence_reversed_greedy': (
        'impala_sequence', 'gym:Acrobot-v1,gym:CartPole-v1', 0, True, 600),
}


@pytest.mark.parametrize('name', sorted(EVALUATIONS))
def test_evaluation_returns_match_the_evaluator_that_played_tasks_in_turn(
    name):
  # The earlier evaluator played each task's envs alone, in unrolls of 50
  # steps; its first evaluation of each checkpoint is recorded. Sampling
  # draws one seed a step for the whole batch, so the first task, whose
  # rows lead the batch, samples as it did; with greedy actions every
  # task's returns must be the same.
  with open(os.path.join(TESTDATA, 'evaluation_v1', 'returns.json')) as f:
    expected = json.load(f)
  logdir, env_name, core_size, greedy, max_steps = EVALUATIONS[name]
  policy = fixture_policy(logdir, env_name, core_size)
  if greedy:
    policy = FakeGreedyPolicyForTest(policy)
  evaluator = evaluation.Evaluator(env_name, {}, policy, num_episodes=4,
                                   seed=11, max_steps=max_steps,
                                   unroll_length=50)
  try:
    results = evaluator.evaluate_tasks()
  finally:
    evaluator.close()
  checked = list(results) if greedy else list(results)[:1]
  for task in checked:
    np.testing.assert_array_equal(results[task].returns,
                                  expected[name][task], err_msg=task)
  if name == 'impala_cartpole_cut':
    # Cut at 100 steps (60 rounded up to whole unrolls of 50).
    assert results['gym:CartPole-v1'].num_unfinished == expected[
        'impala_cartpole_cut_unfinished'] == 1
    assert results['gym:CartPole-v1'].num_steps == 100


def test_an_evaluation_is_one_forward_pass_a_step_over_the_envs_playing():
  policy = FakeGreedyPolicyForTest(
      fixture_policy('impala_sequence', SEQUENCE, 0))
  evaluator = evaluation.Evaluator(SEQUENCE, {}, policy, num_episodes=4,
                                   seed=11, max_steps=600)
  try:
    results = evaluator.evaluate_tasks()
  finally:
    evaluator.close()
  cartpole, acrobot = results['gym:CartPole-v1'], results['gym:Acrobot-v1']
  # CartPole pays 1 a step: it played as many steps as its longest first
  # episode, no more; Acrobot's episodes end at its 500-step limit.
  assert cartpole.num_steps == max(cartpole.returns) == 29
  assert acrobot.num_steps == 500
  # One call a step: both tasks' 8 envs while CartPole plays, then
  # Acrobot's 4.
  assert policy.batch_sizes == [8] * 29 + [4] * (500 - 29)
