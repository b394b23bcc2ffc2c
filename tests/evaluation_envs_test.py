"""An evaluation's envs stepped in worker processes play the episodes they
play in the evaluator's own process, and the workers end with their owner:
a worker that cannot build its envs, or dies, is one clear error."""

import multiprocessing as mp
import os
import signal

import psutil
import pytest

from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import evaluation
from clear.runtime import evaluation_envs
import envs

GYM = 'gym:CartPole-v1,gym:Acrobot-v1'
ATARI = 'atari:SpaceInvaders,atari:Breakout'


def evaluator(env_name, agent_config, num_workers, num_episodes, max_steps):
  env = envs.make(env_name, task=0)
  spec = env.spec
  env.close()
  policy = registry.make_policy('impala', spec, agent_config, seed=3)
  return evaluation.Evaluator(env_name, {}, policy,
                              num_episodes=num_episodes, seed=7,
                              max_steps=max_steps, unroll_length=10,
                              num_workers=num_workers)


def played(evaluator_, times=2):
  """Returns, unfinished counts and steps of `times` evaluations in a row
  (the envs' random streams go on from one to the next)."""
  try:
    return [{name: (task.returns.tolist(), task.num_unfinished,
                    task.num_steps)
             for name, task in evaluator_.evaluate_tasks().items()}
            for _ in range(times)]
  finally:
    evaluator_.close()


@pytest.mark.parametrize('num_workers', [2, 3])
def test_workers_play_the_episodes_the_evaluator_plays_itself(num_workers):
  # 5 episodes over 3 workers: blocks of 2, 2 and 1.
  mlp = policy_lib.AgentConfig('mlp', 8)
  expected = played(evaluator(GYM, mlp, 0, 5, 60))
  assert played(evaluator(GYM, mlp, num_workers, 5, 60)) == expected
  # Episodes of different lengths (CartPole's) and ones cut at max_steps
  # (Acrobot's): both ends are covered.
  first = expected[0]
  assert len(set(first['gym:CartPole-v1'][0])) > 1
  assert first['gym:Acrobot-v1'][1] == 5


def test_atari_workers_play_the_episodes_the_evaluator_plays_itself():
  atari = policy_lib.AgentConfig('impala_shallow', 256)
  expected = played(evaluator(ATARI, atari, 0, 3, 120))
  assert played(evaluator(ATARI, atari, 2, 3, 120)) == expected
  assert expected[0] != expected[1]  # The no-op starts go on.


def _live_children_not_in(before):
  return [p for p in psutil.Process().children(recursive=True)
          if p not in before and p.is_running() and
          p.status() != psutil.STATUS_ZOMBIE]


def test_a_worker_that_cannot_build_its_envs_raises_its_error():
  before = set(psutil.Process().children(recursive=True))
  with pytest.raises(ValueError, match='Unknown options'):
    evaluation_envs.WorkerEnvs(GYM, {'bogus': 1}, 2, 0, 2)
  assert _live_children_not_in(before) == []


def test_a_worker_that_cannot_start_leaves_no_process_or_socket(
    monkeypatch):
  real_popen = evaluation_envs.subprocess.Popen
  calls = []

  def fake_popen_failing_on_second_call(*args, **kwargs):
    calls.append(args)
    if len(calls) == 2:
      raise OSError('fake: no more processes')
    return real_popen(*args, **kwargs)

  before_fds = set(os.listdir('/proc/self/fd'))
  before = set(psutil.Process().children(recursive=True))
  monkeypatch.setattr(evaluation_envs.subprocess, 'Popen',
                      fake_popen_failing_on_second_call)
  with pytest.raises(OSError, match='no more processes') as raised:
    evaluation_envs.WorkerEnvs(GYM, {}, 4, 0, 2)
  assert len(calls) == 2
  # Closed at once, not when the error's traceback (still held here, as a
  # caller that reports the error holds it) lets its frame go.
  assert set(os.listdir('/proc/self/fd')) == before_fds
  del raised
  assert _live_children_not_in(before) == []


def test_a_dead_worker_is_one_clear_error():
  worker_envs = evaluation_envs.WorkerEnvs(GYM, {}, 4, 0, 2)
  try:
    worker_envs.reset()
    os.kill(worker_envs.pids[1], signal.SIGKILL)
    psutil.Process(worker_envs.pids[1]).wait(10)
    with pytest.raises(evaluation_envs.WorkerError,
                       match=r'worker 1 \(pid \d+\) died'):
      worker_envs.reset()
  finally:
    pids = worker_envs.pids
    worker_envs.close()
  # close() ends the live one and reaps both.
  assert [pid for pid in pids if psutil.pid_exists(pid)] == []


def _own_workers(connection):
  """A process that starts workers, says their pids, and waits."""
  worker_envs = evaluation_envs.WorkerEnvs(GYM, {}, 2, 0, 2)
  connection.send(worker_envs.pids)
  connection.recv()


def test_workers_end_with_a_killed_owner():
  context = mp.get_context('spawn')
  ours, theirs = context.Pipe()
  owner = context.Process(target=_own_workers, args=(theirs,))
  owner.start()
  try:
    assert ours.poll(120)
    pids = ours.recv()
    workers = [psutil.Process(pid) for pid in pids]
    assert [w.ppid() for w in workers] == [owner.pid] * 2
    os.kill(owner.pid, signal.SIGKILL)
    owner.join()
    _, alive = psutil.wait_procs(workers, timeout=20)
    assert alive == []
  finally:
    if owner.is_alive():
      owner.kill()
