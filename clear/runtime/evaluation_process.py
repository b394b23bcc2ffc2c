"""Where a training run's evaluations are played: in the learner, or in a
process of their own beside it.

The run loop starts one of two kinds with `start`, and
`clear.runtime.evaluation.PeriodicEvaluation` makes the same calls of each:
`request(frames, weights)` asks for an evaluation of `weights` (the
learner's at `frames`), `results(wait, stop_requested)` returns the finished
ones in the order asked, `num_pending` counts the unfinished, and `close()`
ends it.

- `LearnerEvaluations`: the learner plays the evaluation at once, while the
  actors wait. One TensorFlow runtime, and a seeded inline run stays
  reproducible step for step, its checkpoints included.
- `EvaluationProcess`: one process (spawned like the actors, without GPUs
  and ignoring SIGINT) plays the evaluations, one after another, at the
  lowest CPU priority (`lower_cpu_priority`), while the learner and the
  actors go on training. Each evaluation plays the weights it was asked
  with, so its returns are those `LearnerEvaluations` would give; only the
  wall-clock time they arrive at differs. It costs one more TensorFlow
  runtime (a few hundred MB). The learner never waits on the process
  unless it asks to: requests are sent from a thread of their own, and a
  wait for results ends when the run is asked to stop, so a stopped or hung
  evaluation process cannot keep a run from its final checkpoint.

Training leaves CPU idle that evaluations can use: on the 2-core machine a
MinAtar run's actor and learner keep about 1.5 cores busy, and an
evaluation is a single-threaded loop of env steps and small forward
passes. docs/performance.md has the measured cost of each kind.
"""

import collections
import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from typing import Callable, Dict, List, NamedTuple

from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import devices
from clear.runtime import evaluation
from clear.runtime import local_actors

KINDS = ('auto', 'learner', 'process')
# Restarts of a dead evaluation process before the run stops.
MAX_RESTARTS = 3
# The evaluation process's `nice` increment where Linux's idle scheduling
# class is not available.
NICENESS = 19
# Seconds between the log lines of a wait for an evaluation.
WAIT_LOG_S = 60.0
# Seconds the evaluation process may take no step while the learner waits
# on it (to start up: to build its evaluator); past them it counts as hung
# and is restarted. An Atari step of 180 envs takes well under a second,
# and starting up under a minute.
HANG_TIMEOUT_S = 300.0
STARTUP_TIMEOUT_S = 600.0


class EvaluatorConfig(NamedTuple):
  """How to build the evaluation policy and its `Evaluator`; picklable.

  Attributes:
    algorithm: `registry.ALGORITHMS` key.
    spec: the env's (or sequence's union) `EnvSpec`.
    agent_config: `policy.AgentConfig` of the acting policy.
    policy_seed: seeds the policy's sampling.
    env_name, env_options, num_episodes, seed, max_steps, num_workers: the
      `Evaluator`'s.
  """
  algorithm: str
  spec: types.EnvSpec
  agent_config: policy_lib.AgentConfig
  policy_seed: int
  env_name: str
  env_options: dict
  num_episodes: int
  seed: int
  max_steps: int
  num_workers: int = 0


class Finished(NamedTuple):
  """A finished evaluation: the frames it was asked at, each task's
  `evaluation.TaskEvaluation`, and the seconds it took to play."""
  frames: int
  tasks: Dict[str, object]
  seconds: float


def make_evaluator(config: EvaluatorConfig) -> evaluation.Evaluator:
  """The `evaluation.Evaluator` of `config`, with its own acting policy."""
  policy = registry.make_policy(config.algorithm, config.spec,
                                config.agent_config,
                                seed=config.policy_seed)
  return evaluation.Evaluator(
      config.env_name, config.env_options, policy,
      num_episodes=config.num_episodes, seed=config.seed,
      max_steps=config.max_steps, num_workers=config.num_workers)


def lower_cpu_priority():
  """Puts every thread of this process (and the threads it starts after)
  in Linux's idle scheduling class, which runs only on a core nothing else
  wants and yields at once when training wakes; elsewhere, `nice` 19.

  Returns:
    'idle' or 'nice'.
  """
  if hasattr(os, 'SCHED_IDLE') and os.path.isdir('/proc/self/task'):
    try:
      for thread in os.listdir('/proc/self/task'):  # Imports start threads.
        try:
          os.sched_setscheduler(int(thread), os.SCHED_IDLE,
                                os.sched_param(0))
        except ProcessLookupError:
          pass  # Ended since the listing.
      return 'idle'
    except OSError:
      pass
  os.nice(NICENESS)
  return 'nice'


def use_process(kind: str, backend: str) -> bool:
  """Whether evaluations of `kind` ('auto' picks from the actors'
  `backend`) run in their own process: 'auto' keeps an inline run in one
  process, and moves them out of the learner for the others."""
  if kind not in KINDS:
    raise ValueError(f'evaluator must be one of {KINDS}, got {kind!r}.')
  if kind == 'auto':
    return backend != 'inline'
  return kind == 'process'


class LearnerEvaluations:
  """Evaluations played by the learner as they are asked for."""

  def __init__(self, config: EvaluatorConfig):
    self._evaluator = make_evaluator(config)
    self._finished = collections.deque()

  @property
  def num_pending(self) -> int:
    return 0

  def request(self, frames: int, weights):
    start = time.monotonic()
    tasks = self._evaluator.evaluate_tasks(weights)
    self._finished.append(Finished(frames, tasks, time.monotonic() - start))

  def results(self, wait: int = 0,
              stop_requested: Callable[[], bool] = lambda: False
              ) -> List[Finished]:
    del wait, stop_requested  # Each finished when it was asked for.
    finished = list(self._finished)
    self._finished.clear()
    return finished

  def close(self):
    self._evaluator.close()


def _receive(connection, requests):
  """Puts each message of `connection` on `requests`, then None once the
  learner says stop or the pipe closes."""
  try:
    while True:
      message = connection.recv()
      requests.put(message)
      if message is None:
        return
  except (EOFError, OSError):
    requests.put(None)


def _evaluation_process(config: EvaluatorConfig, connection, beat=None):
  """Body of the evaluation process: plays each evaluation asked for, in
  order, until told to stop or its pipe closes, setting the shared `beat`
  to the time of each step."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # The learner decides.
  lower_cpu_priority()
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  devices.hide_accelerators()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  try:
    evaluator = make_evaluator(config)
  except Exception as e:  # pylint: disable=broad-except
    connection.send(('error', f'{type(e).__name__}: {e}'))
    try:  # Until the learner, told, closes the pipe.
      while connection.recv() is not None:
        pass
    except (EOFError, OSError):
      pass
    return
  def on_step():
    if beat is not None:
      beat.value = time.monotonic()

  on_step()
  # A thread takes each request off the pipe as it comes, so the learner's
  # send of a request (weights of several MB, more than a pipe holds)
  # returns while an evaluation plays rather than when it ends.
  requests = queue.SimpleQueue()
  threading.Thread(target=_receive, args=(connection, requests),
                   name='clear-evaluator-receiver', daemon=True).start()
  try:
    while True:
      message = requests.get()
      if message is None:
        break
      frames, weights = message
      start = time.monotonic()
      tasks = evaluator.evaluate_tasks(weights, on_step=on_step)
      connection.send(('finished', Finished(frames, tasks,
                                            time.monotonic() - start)))
  except (KeyboardInterrupt, BrokenPipeError, EOFError, OSError):
    pass  # The learner closed the pipe.
  finally:
    evaluator.close()


class _Sender:
  """Sends messages on a pipe, in order, from a thread of its own, so the
  caller never waits for the reader: a request's weights can be more than
  a pipe holds, and a process starting up, stopped or hung reads nothing.
  A send that fails (the process died) ends the thread; the process's
  owner finds the death on the pipe."""

  _END = object()

  def __init__(self, connection):
    self._connection = connection
    self._messages = queue.SimpleQueue()
    self._thread = threading.Thread(target=self._run, daemon=True,
                                    name='clear-evaluation-sender')
    self._thread.start()

  def send(self, message):
    self._messages.put(message)

  def _run(self):
    while True:
      message = self._messages.get()
      if message is self._END:
        return
      try:
        self._connection.send(message)
      except (BrokenPipeError, OSError):
        return

  def end(self, timeout: float):
    """Ends the thread once what was given before is sent (or the pipe
    breaks); waits for it at most `timeout` seconds."""
    self._messages.put(self._END)
    self._thread.join(timeout)

  @property
  def is_alive(self) -> bool:
    return self._thread.is_alive()


class EvaluationProcess:
  """Evaluations played by a process of their own (see the module
  docstring). A process that dies, or takes no step for `HANG_TIMEOUT_S`
  while the learner waits on it (`STARTUP_TIMEOUT_S` to start up), is
  started again, and the evaluations it
  had not finished are asked for again, up to `MAX_RESTARTS` times.

  Raises (from any call):
    RuntimeError: the evaluator cannot be built (a message naming why), or
      the process died or hung more than `MAX_RESTARTS` times.
  """

  def __init__(self, config: EvaluatorConfig):
    self._config = config
    self._ctx = mp.get_context('spawn')
    self._pending = collections.deque()  # (frames, weights) asked, unplayed.
    # The monotonic time of its process's last step (set by the process),
    # and of its start.
    self._beat = self._ctx.RawValue('d', 0.0)
    self._started_at = 0.0
    self.num_restarts = 0
    self._process = self._connection = self._sender = None
    self._start()

  def _start(self):
    parent, child = self._ctx.Pipe()
    self._started_at = time.monotonic()
    self._process = self._ctx.Process(
        target=_evaluation_process, args=(self._config, child, self._beat),
        name='clear-evaluator', daemon=True)
    with local_actors.children_ignore_sigint(), devices.children_see_no_gpu():
      self._process.start()
    child.close()
    self._connection = parent
    self._sender = _Sender(parent)
    for frames, weights in self._pending:
      self._sender.send((frames, weights))

  @property
  def num_pending(self) -> int:
    return len(self._pending)

  @property
  def pid(self) -> int:
    return self._process.pid

  def request(self, frames: int, weights):
    """Asks for an evaluation; returns at once."""
    self._pending.append((frames, weights))
    self._sender.send((frames, weights))

  def _end_pipe(self):
    """Closes the pipe of a process that has ended: its sender's send
    fails, and the thread ends, first."""
    self._sender.end(timeout=10.0)
    if self._sender.is_alive:
      logging.warning('The evaluation sender thread did not end; its pipe '
                      'is left open.')
      return
    self._connection.close()

  def _restart(self, reason: str, what: str = 'died'):
    self._process.join(1)
    if self._process.is_alive():
      self._process.kill()
      self._process.join()
    self._end_pipe()
    self.num_restarts += 1
    if self.num_restarts > MAX_RESTARTS:
      raise RuntimeError(
          f'The evaluation process died or hung {self.num_restarts} times '
          f'(last: {what}, {reason}, exit code {self._process.exitcode}); '
          'see the log above.')
    logging.warning('The evaluation process %s (%s, exit code %s); '
                    'restarted, %d evaluations asked again.', what, reason,
                    self._process.exitcode, len(self._pending))
    self._start()

  def _hung(self, since: float) -> bool:
    """Restarts the process if it has taken no step (or not started up)
    for longer than its timeout since `since`; returns whether it did."""
    beat = self._beat.value
    if beat < self._started_at:  # Still starting up.
      silent = time.monotonic() - max(self._started_at, since)
      if silent > STARTUP_TIMEOUT_S:
        self._restart(f'not started up after {silent:.0f} s of the '
                      "learner's wait; killed", what='hung')
        return True
      return False
    silent = time.monotonic() - max(beat, since)
    if silent > HANG_TIMEOUT_S:
      self._restart(f"no step for {silent:.0f} s of the learner's wait; "
                    'killed', what='hung')
      return True
    return False

  def results(self, wait: int = 0,
              stop_requested: Callable[[], bool] = lambda: False
              ) -> List[Finished]:
    """The finished evaluations, in the order asked; waits until at least
    `wait` have finished, none is pending or `stop_requested()`, saying
    every `WAIT_LOG_S` seconds what it waits for. A process that takes no
    step for `HANG_TIMEOUT_S` of the wait (or does not start up in
    `STARTUP_TIMEOUT_S`) is killed and started again."""
    finished = []
    started = last_said = time.monotonic()
    while self._pending:
      must_wait = len(finished) < wait
      try:
        if not self._connection.poll(1.0 if must_wait else 0):
          if not self._process.is_alive() and not self._connection.poll():
            self._restart('it exited')
          if not must_wait or stop_requested():
            break
          if self._hung(since=started):
            continue
          if time.monotonic() - last_said >= WAIT_LOG_S:
            last_said = time.monotonic()
            logging.info('Waiting %.0f s so far for the evaluation at %s '
                         'frames (evaluation process PID %s).',
                         last_said - started, f'{self._pending[0][0]:,}',
                         self._process.pid)
          continue
        kind, payload = self._connection.recv()
      except (EOFError, OSError):
        self._restart('its pipe closed')
        continue
      if kind == 'error':
        raise RuntimeError(f'The evaluator cannot be built: {payload}')
      self._pending.popleft()
      finished.append(payload)
    return finished

  def close(self):
    """Ends the process; evaluations not finished are abandoned (one being
    played is not waited for, nor a stopped or hung process)."""
    if self._pending:
      self._process.kill()
    else:
      self._sender.send(None)
    self._process.join(10)
    if self._process.is_alive():
      self._process.kill()
      self._process.join()
    self._end_pipe()


def start(kind: str, backend: str, config: EvaluatorConfig):
  """`EvaluationProcess` or `LearnerEvaluations`, as `use_process` says."""
  if use_process(kind, backend):
    return EvaluationProcess(config)
  return LearnerEvaluations(config)
