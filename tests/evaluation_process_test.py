"""Evaluations in a process of their own give the returns the learner's
would, in the order asked, and survive the process's death; those a
stopped run had not finished are kept for its resume."""

import logging
import os
import signal
import threading

import numpy as np
import psutil
import pytest

from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import evaluation
from clear.runtime import evaluation_process
import envs

SEQUENCE = 'gym:CartPole-v1,gym:Acrobot-v1'


def evaluator_config(**kwargs):
  env = envs.make(SEQUENCE, task=0)
  spec = env.spec
  env.close()
  return evaluation_process.EvaluatorConfig(**{
      'algorithm': 'impala', 'spec': spec,
      'agent_config': policy_lib.AgentConfig('mlp', 8), 'policy_seed': 4,
      'env_name': SEQUENCE, 'env_options': {}, 'num_episodes': 3, 'seed': 9,
      'max_steps': 60, **kwargs})


def pong_config():
  """One Pong episode with the Atari agent, whose weights (several MB) are
  more than a pipe holds."""
  env = envs.make('atari:Pong')
  spec = env.spec
  env.close()
  return evaluator_config(
      env_name='atari:Pong', spec=spec, num_episodes=1, max_steps=27000,
      agent_config=policy_lib.AgentConfig('impala_shallow', 256))


def weights_list(config, count):
  """`count` different sets of acting weights for `config`'s policy."""
  policy = registry.make_policy('impala', config.spec, config.agent_config,
                                seed=1)
  return [[w * (1.0 + 0.5 * i) for w in policy.get_weights()]
          for i in range(count)]


def returns_of(finished):
  return [(f.frames, {name: task.returns.tolist()
                      for name, task in f.tasks.items()}) for f in finished]


def fresh_returns(config, frames, weights):
  """What a fresh evaluator in the learner gives for `weights` alone."""
  learner = evaluation_process.LearnerEvaluations(config)
  learner.request(frames, weights)
  returns = returns_of(learner.results())
  learner.close()
  return returns


def test_a_process_evaluates_as_the_learner_would_in_the_order_asked():
  config = evaluator_config()
  weights = weights_list(config, 3)
  learner = evaluation_process.LearnerEvaluations(config)
  for frames, w in zip((0, 100, 250), weights):
    learner.request(frames, w)
  expected = returns_of(learner.results())
  learner.close()
  process = evaluation_process.EvaluationProcess(config)
  try:
    for frames, w in zip((0, 100, 250), weights):
      process.request(frames, w)
    assert process.num_pending == 3
    finished = process.results(wait=3)
    assert process.num_pending == 0 and process.results() == []
  finally:
    process.close()
  assert [f for f, _ in expected] == [0, 100, 250]
  assert returns_of(finished) == expected
  assert all(f.seconds > 0 for f in finished)


@pytest.mark.skipif(not hasattr(os, 'SCHED_IDLE'), reason='Linux only')
@pytest.mark.parametrize('num_workers', [0, 2])
def test_the_evaluation_process_runs_only_on_idle_cpu(num_workers):
  config = evaluator_config(num_workers=num_workers)
  process = evaluation_process.EvaluationProcess(config)
  try:
    process.request(0, weights_list(config, 1)[0])
    process.results(wait=1)  # Built and played: its threads exist.
    evaluator = psutil.Process(process.pid)
    threads = evaluator.threads()
    assert len(threads) > 1
    # Every thread, TensorFlow's included, is in the idle class, and so
    # are the processes that step its envs.
    workers = evaluator.children()
    assert len(workers) == num_workers
    threads += [t for worker in workers for t in worker.threads()]
    assert {os.sched_getscheduler(t.id) for t in threads} == {os.SCHED_IDLE}
  finally:
    process.close()
  assert os.sched_getscheduler(0) == os.SCHED_OTHER  # Not the learner.


def test_a_dead_evaluation_process_is_restarted_and_asked_again():
  config = evaluator_config()
  weights = weights_list(config, 2)
  expected = fresh_returns(config, 100, weights[1])
  process = evaluation_process.EvaluationProcess(config)
  try:
    process.request(0, weights[0])
    assert [f.frames for f in process.results(wait=1)] == [0]
    first = process.pid
    process.request(100, weights[1])
    # Killed as it starts to play (an evaluation takes a good part of a
    # second): the next process plays it again, seeded as the first was.
    os.kill(first, signal.SIGKILL)
    psutil.Process(first).wait(10)
    finished = process.results(wait=1)
    assert process.num_restarts == 1 and process.pid != first
  finally:
    process.close()
  assert returns_of(finished) == expected


def test_a_dead_env_worker_restarts_the_evaluation_process():
  config = evaluator_config(num_workers=2)
  weights = weights_list(config, 2)
  expected = fresh_returns(config._replace(num_workers=0), 100, weights[1])
  process = evaluation_process.EvaluationProcess(config)
  try:
    process.request(0, weights[0])
    assert [f.frames for f in process.results(wait=1)] == [0]
    first = process.pid
    worker = psutil.Process(first).children()[1]
    worker.kill()  # Its socket closes at once; its owner reaps it later.
    # The next evaluation finds the worker dead: its process exits, and a
    # new one, with new workers, plays it as a fresh evaluator would.
    process.request(100, weights[1])
    finished = process.results(wait=1)
    assert process.num_restarts == 1 and process.pid != first
    assert len(psutil.Process(process.pid).children()) == 2
  finally:
    process.close()
  assert returns_of(finished) == expected
  assert not psutil.pid_exists(worker.pid)


def test_a_hung_evaluation_process_is_restarted_and_asked_again(
    monkeypatch, caplog):
  config = evaluator_config()
  weights = weights_list(config, 2)
  expected = []
  for frames, w in zip((0, 100), weights):  # Each by a fresh evaluator.
    learner = evaluation_process.LearnerEvaluations(config)
    learner.request(frames, w)
    expected += returns_of(learner.results())
    learner.close()
  monkeypatch.setattr(evaluation_process, 'STARTUP_TIMEOUT_S', 3.0)
  monkeypatch.setattr(evaluation_process, 'HANG_TIMEOUT_S', 3.0)
  process = evaluation_process.EvaluationProcess(config)
  try:
    # Held as it starts: past 3 s of the learner's wait, a new process.
    first = psutil.Process(process.pid)
    first.suspend()
    process.request(0, weights[0])
    with caplog.at_level(logging.WARNING):
      assert process.results(
          wait=1, stop_requested=lambda: process.num_restarts > 0) == []
    assert 'The evaluation process hung (not started up after' in caplog.text
    assert not first.is_running()
    monkeypatch.setattr(evaluation_process, 'STARTUP_TIMEOUT_S', 600.0)
    finished = process.results(wait=1)
    # Held between evaluations, it takes no step of the next: past 3 s of
    # the learner's wait, a new process (given its start-up) plays it.
    second = psutil.Process(process.pid)
    second.suspend()
    process.request(100, weights[1])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
      finished += process.results(wait=1)
    assert 'The evaluation process hung (no step for' in caplog.text
    assert "s of the learner's wait; killed" in caplog.text
    assert process.num_restarts == 2 and not second.is_running()
  finally:
    process.close()
  assert returns_of(finished) == expected


def test_a_request_returns_while_an_evaluation_plays():
  # The Atari agent's weights (several MB) are more than a pipe holds, so
  # a request is read off it only while the process listens: it must
  # listen while it plays, or the learner waits out a whole evaluation.
  config = pong_config()
  weights = weights_list(config, 3)
  assert sum(np.asarray(w).nbytes for w in weights[0]) > 4_000_000
  process = evaluation_process.EvaluationProcess(config)
  try:
    process.request(0, weights[0])  # Read once the evaluator is built.
    # Played for seconds: a random Pong episode lasts about 800 steps.
    process.request(100, weights[1])
    process.request(200, weights[2])
    assert process.results() == [] and process.num_pending == 3
    finished = process.results(wait=3)
  finally:
    process.close()
  assert [f.frames for f in finished] == [0, 100, 200]
  assert all(f.tasks['atari:Pong'].returns[0] <= -10 for f in finished)


def test_a_held_evaluation_process_keeps_no_one_waiting(monkeypatch, caplog):
  # Held from its start (SIGSTOP), the process reads nothing: a request of
  # more than a pipe holds must still return, a wait must end when the run
  # is asked to stop, and closing must not wait for it.
  config = pong_config()
  weights = weights_list(config, 2)
  assert sum(np.asarray(w).nbytes for w in weights[0]) > 4_000_000
  monkeypatch.setattr(evaluation_process, 'WAIT_LOG_S', 0.5)
  process = evaluation_process.EvaluationProcess(config)
  held = psutil.Process(process.pid)
  held.suspend()
  try:
    requests = threading.Thread(
        target=lambda: [process.request(f, w) for f, w in
                        zip((0, 100), weights)], daemon=True)
    requests.start()
    requests.join(30)
    assert not requests.is_alive() and process.num_pending == 2
    calls = []
    with caplog.at_level(logging.INFO):
      assert process.results(
          wait=1, stop_requested=lambda: len(calls) > 2 or calls.append(1)
          ) == []
    assert len(calls) == 3 and process.num_pending == 2
    assert 'for the evaluation at 0 frames' in caplog.text
  finally:
    closing = threading.Thread(target=process.close, daemon=True)
    closing.start()
    closing.join(30)
    if held.is_running():
      held.kill()
  assert not closing.is_alive()
  assert not held.is_running() or held.status() == psutil.STATUS_ZOMBIE


def test_an_evaluator_that_cannot_be_built_is_one_clear_error():
  config = evaluator_config(env_name='gym:Pendulum-v1')
  process = evaluation_process.EvaluationProcess(config)
  try:
    process.request(0, weights_list(config, 1)[0])
    with pytest.raises(RuntimeError, match='cannot be built.*spec differs'):
      process.results(wait=1)
  finally:
    process.close()


@pytest.mark.parametrize('kind,backend,expected', [
    ('auto', 'inline', False), ('auto', 'local', True), ('auto', 'ray', True),
    ('learner', 'local', False), ('process', 'inline', True)])
def test_where_evaluations_run(kind, backend, expected):
  assert evaluation_process.use_process(kind, backend) is expected


def test_learner_evaluations_are_played_when_asked():
  config = evaluator_config()
  learner = evaluation_process.LearnerEvaluations(config)
  try:
    learner.request(7, weights_list(config, 1)[0])
    assert learner.num_pending == 0
    (finished,) = learner.results()
    assert finished.frames == 7 and set(finished.tasks) == set(
        SEQUENCE.split(','))
    assert np.all(finished.tasks['gym:Acrobot-v1'].returns == -60.0)
  finally:
    learner.close()


def test_pending_evaluations_are_read_back_within_the_restored_frames(
    tmp_path, caplog):
  path = str(tmp_path / evaluation.PENDING_EVALUATIONS_FILE)
  pending = [(frames, [np.full((2, 3), frames, np.float32),
                       np.arange(frames, dtype=np.int32)])
             for frames in (10, 20, 30)]
  evaluation.write_pending_evaluations(path, pending)
  assert os.listdir(tmp_path) == [evaluation.PENDING_EVALUATIONS_FILE]
  # After the last recorded, up to the checkpoint's frames.
  ((frames, read),) = evaluation.read_pending_evaluations(path, 10, 25)
  assert frames == 20 and len(read) == 2
  for got, want in zip(read, pending[1][1]):
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
  assert [f for f, _ in evaluation.read_pending_evaluations(
      path, None, 30)] == [10, 20, 30]
  assert evaluation.read_pending_evaluations(
      str(tmp_path / 'none.npz'), None, 30) == []
  with open(path, 'wb') as f:
    f.write(b'not a snapshot')
  assert evaluation.read_pending_evaluations(path, None, 30) == []
  assert 'cannot be read' in caplog.text
