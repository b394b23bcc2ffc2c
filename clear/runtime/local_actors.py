"""Actors as processes on this machine: `LocalActorPool`.

One process per actor. Unrolls come back through one pipe per actor,
served in turn as they are ready, so the learner never waits on the slowest
actor and no actor runs more than one unroll batch ahead; weights go out
through one shared-memory array with a version counter. Nothing the actors
touch holds a lock, and each pipe is read on a thread of its own, so an
actor killed or stopped at any point cannot block the learner. A dead actor
is restarted with fresh episodes and a fresh core state (its partial unroll
is dropped); a hung one (stopped, deadlocked, swapped out) is reported and
replaced after `ActorPoolConfig.hang_timeout_s`.
"""

import contextlib
import logging
import multiprocessing as mp
import multiprocessing.connection  # pylint: disable=unused-import
import os
import queue
import signal
import socket
import threading
import time
from typing import NamedTuple, Optional

import numpy as np

from clear.runtime import actor as actor_lib
from clear.runtime import actor_worker
from clear.runtime import devices


class _FatalActorError(NamedTuple):
  """Sent by an actor process whose environment failed for good."""
  actor_id: int
  message: str


class _LastWords(NamedTuple):
  """Sent by an actor process as an exception ends it: what it said."""
  actor_id: int
  message: str


class _Broken(NamedTuple):
  """Put by a `_Receiver` whose pipe broke (its actor died mid-send)."""
  reason: str


# A dead actor that had delivered nothing since it started waits this long
# before it starts again, doubled with each such death in a row, up to
# `MAX_BACKOFF_S`: an actor that cannot start does not spin.
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


def _last_words(error: BaseException) -> str:
  """The exception's type and message, on one line."""
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text}' if text else type(error).__name__


class _SharedWeights:
  """Weights in one shared float32 array, published without locks.

  The learner is the only writer. A seqlock keeps readers consistent: the
  counter is odd while a write is under way, and a reader retries when the
  counter changed during its copy. No lock is ever held, so an actor killed
  mid-read cannot block the learner.
  """

  def __init__(self, ctx, shapes):
    self.shapes = [tuple(s) for s in shapes]
    self.size = int(sum(np.prod(s) for s in self.shapes))
    self.array = ctx.RawArray('f', max(1, self.size))
    self.sequence = ctx.RawValue('q', 0)
    self.version = ctx.RawValue('q', -1)

  def write(self, weights, version):
    flat = np.concatenate([np.ravel(w).astype(np.float32) for w in weights])
    self.sequence.value += 1  # Odd: writing.
    np.frombuffer(self.array, np.float32)[:self.size] = flat
    self.version.value = version
    self.sequence.value += 1  # Even: consistent.

  def read_if_newer(self, version):
    """(weights, version) when newer than `version`, else (None, version)."""
    while True:
      before = self.sequence.value
      if before % 2:
        time.sleep(0.0005)
        continue
      new_version = self.version.value
      if new_version <= version:
        return None, version
      flat = np.frombuffer(self.array, np.float32)[:self.size].copy()
      if self.sequence.value == before:
        break
    weights, offset = [], 0
    for shape in self.shapes:
      n = int(np.prod(shape))
      weights.append(flat[offset:offset + n].reshape(shape))
      offset += n
    return weights, new_version


class _SharedTask:
  """The pool's latest `actor_worker.TaskSwitch`, in shared memory, read
  without locks (a seqlock, as `_SharedWeights`)."""

  def __init__(self, ctx, switch: actor_worker.TaskSwitch):
    self._sequence = ctx.RawValue('q', 0)
    self._values = ctx.RawArray('q', 3)
    self.write(switch)

  def write(self, switch: actor_worker.TaskSwitch):
    self._sequence.value += 1  # Odd: writing.
    self._values[:] = list(switch)
    self._sequence.value += 1

  def read(self) -> actor_worker.TaskSwitch:
    while True:
      before = self._sequence.value
      if before % 2:
        time.sleep(0.0005)
        continue
      values = list(self._values)
      if self._sequence.value == before:
        return actor_worker.TaskSwitch(*values)


class _StopFlag:
  """A shared stop flag without locks.

  `multiprocessing.Event` takes a lock even in `is_set()`; an actor killed
  while holding it would block the learner and every other actor forever.
  One shared byte, written only by the learner, has no such failure.
  """

  def __init__(self, ctx):
    self._value = ctx.RawValue('b', 0)

  def set(self):
    self._value.value = 1

  def is_set(self) -> bool:
    return bool(self._value.value)


class _SignsOfLife:
  """When an actor process last showed it was running, and whether it is
  sending: two shared values written by the actor, read by the learner
  without locks.

  `time.monotonic` is the system-wide monotonic clock on Linux, so the
  actor's readings compare with the learner's.
  """

  def __init__(self, ctx):
    self._beat = ctx.RawValue('d', time.monotonic())
    self._sending = ctx.RawValue('b', 0)
    self._started = ctx.RawValue('b', 0)

  def beat(self, sending: bool = False):
    self._beat.value = time.monotonic()
    self._sending.value = int(sending)

  def started(self):
    """Says the actor has built its envs and policy."""
    self._started.value = 1
    self.beat()

  @property
  def has_started(self) -> bool:
    return bool(self._started.value)

  def silent_s(self) -> float:
    """Seconds since the last `beat`."""
    return time.monotonic() - self._beat.value

  @property
  def sending(self) -> bool:
    return bool(self._sending.value)


class _Receiver:
  """Takes one actor's messages off its pipe on a thread of its own, one
  each time it is asked.

  An actor stopped halfway through a send (SIGSTOP, a swap-out, a
  deadlock) leaves a partial message in its pipe; reading it blocks until
  the rest comes. Here that blocks this thread, never the learner, which
  sees how long the message has been awaited (`asked_at`). Each message is
  put in `inbox` with its receiver, and a byte is sent on `wake` (one end
  of a socket pair) so the learner can wait on it beside the pipes.
  """

  def __init__(self, actor_id: int, connection, inbox: queue.SimpleQueue,
               wake: socket.socket):
    self.actor_id = actor_id
    self.connection = connection
    self.asked_at = None  # Monotonic time of the request not yet answered.
    self._inbox = inbox
    self._wake = wake
    self._go = threading.Semaphore(0)
    self._closed = False
    self._thread = threading.Thread(target=self._run, daemon=True,
                                    name=f'clear-receiver-{actor_id}')
    self._thread.start()

  def ask(self):
    """Receives the next message (the pipe has at least part of one)."""
    self.asked_at = time.monotonic()
    self._go.release()

  def _run(self):
    while True:
      self._go.acquire()
      if self._closed:
        return
      try:
        message = self.connection.recv()
      except Exception as e:  # pylint: disable=broad-except
        # The pipe broke (the actor died mid-send) or was closed under us.
        message = _Broken(f'{type(e).__name__} while receiving')
      self.asked_at = None
      self._inbox.put((self, message))
      try:
        self._wake.send(b'.')
      except BlockingIOError:
        pass  # Wake-ups are pending already.
      except OSError:
        return  # The pool is closed.
      if isinstance(message, _Broken):
        return

  def close(self, timeout: float = 5.0):
    """Ends the thread: at once when it waits to be asked, and when the
    actor's process is gone when it is receiving."""
    self._closed = True
    self._go.release()
    self._thread.join(timeout)


@contextlib.contextmanager
def children_ignore_sigint():
  """Ignores SIGINT while actor processes are started, so they start with
  it ignored.

  A terminal sends Ctrl-C to the whole process group. An actor still
  starting up (its interpreter importing TensorFlow, seconds) would die of
  it with a KeyboardInterrupt traceback; started with SIGINT ignored (which
  exec keeps, and Python then leaves alone), it is stopped by the learner
  instead. The learner itself ignores a Ctrl-C only during the few
  milliseconds a start takes. Outside the main thread, where signal
  handlers cannot be set, this does nothing.
  """
  try:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  except ValueError:  # Not the main thread.
    yield
    return
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)


def _actor_process(config, switch_number, actor_id, generation, shared, task,
                   connection, stop, entered, life):
  """Body of an actor process: collect unrolls until told to stop.

  `config` is of the pool's switch `switch_number`. Before each unroll the
  actor checks `task` (a `_SharedTask`) and switches in place when the pool
  has moved on; each unroll is sent with the number
  of the switch it was played under, so the pool can drop the task
  before's. SIGINT is ignored (see `children_ignore_sigint`): the learner
  decides when the actors stop. `entered` (a shared byte) is set first
  thing, so the learner knows whether the process is still starting up.
  `life` (`_SignsOfLife`) beats between the steps of the loop, and says
  when the actor is sending. An actor told to stop before it has started
  exits quietly.
  """
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  entered.value = 1
  life.beat()
  if stop.is_set():
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  devices.hide_accelerators()  # Born without GPUs too; see `_start`.
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    worker = actor_worker.ActorWorker(config, actor_id, generation)
    life.started()
  except Exception as e:  # Said to the learner, then raised (exit 1).
    try:
      connection.send(_LastWords(actor_id, _last_words(e)))
    except (BrokenPipeError, EOFError, OSError):
      pass
    raise
  worker.switch_number = switch_number
  version = -1
  try:
    while not stop.is_set():
      life.beat()
      switch = task.read()
      if switch.number != worker.switch_number:
        worker.switch_task(switch)
        life.beat()
        version = -1  # Load the weights published before the switch.
      weights, new_version = shared.read_if_newer(version)
      if weights is None and version < 0:
        time.sleep(0.01)  # No weights published yet.
        continue
      try:
        trajectories = worker.collect(weights, new_version)
      except Exception as e:  # pylint: disable=broad-except
        import envs  # pylint: disable=g-import-not-at-top
        if not isinstance(e, envs.EnvCrashError):
          raise
        # Restarting the actor would not help: report and stop.
        connection.send(_FatalActorError(actor_id, str(e)))
        return
      version = new_version
      life.beat(sending=True)
      # Blocks while the learner is busy.
      connection.send((worker.switch_number, trajectories))
  except (KeyboardInterrupt, BrokenPipeError, EOFError):
    pass  # The learner closed the pipe or the user interrupted.
  except Exception as e:  # Said to the learner, then raised (exit 1).
    try:
      connection.send(_LastWords(actor_id, _last_words(e)))
    except (BrokenPipeError, EOFError, OSError):
      return  # The learner closed the pipe: nothing to say.
    raise
  finally:
    worker.close()


class LocalActorPool:
  """Actors as processes on this machine (see the module docstring).

  Each actor owns one pipe to the learner: at most one finished unroll batch
  waits in it, which bounds both memory and policy lag, and an actor that
  dies mid-send can only break its own pipe. Messages are read off the
  pipes by one `_Receiver` thread per actor, so one that stops mid-send
  cannot block the learner either.

  An actor is hung when it has given no sign of life (`_SignsOfLife`) for
  `config.hang_timeout_s` seconds while not waiting for the learner to take
  its unroll, or when the learner has waited that long for the rest of a
  message it began. It is reported by its id and PID and replaced (a
  restart). Half that time (at most a minute) of silence gets a warning.
  """

  def __init__(self, config: actor_worker.ActorPoolConfig, weight_shapes):
    self.config = config
    self._ctx = mp.get_context('spawn')
    self._shared = _SharedWeights(self._ctx, weight_shapes)
    self._switch = actor_worker.TaskSwitch(
        0, int(config.env_options.get('task', 0)), config.seed)
    self._task = _SharedTask(self._ctx, self._switch)
    self._stop = _StopFlag(self._ctx)
    self._generations = [0] * config.num_actors
    self.num_restarts = 0
    self._last_words = [''] * config.num_actors  # What each said as it died.
    self._delivered = [False] * config.num_actors  # Since its last start.
    self._quick_deaths = [0] * config.num_actors  # Such deaths in a row.
    self._waiting = {}  # Dead actor -> monotonic time it may start again.
    self._warned_silent = [False] * config.num_actors  # This life.
    self._processes = [None] * config.num_actors
    self._entered = [None] * config.num_actors  # See `_actor_process`.
    self._lives = [None] * config.num_actors  # `_SignsOfLife` of each.
    self._connections = [None] * config.num_actors
    self._receivers = [None] * config.num_actors
    self._inbox = queue.SimpleQueue()  # (receiver, message) pairs.
    self._wake_read, self._wake = socket.socketpair()
    self._wake_read.setblocking(False)
    self._wake.setblocking(False)
    self._next = 0
    for actor_id in range(config.num_actors):
      self._start(actor_id)

  def _start(self, actor_id):
    reader, writer = self._ctx.Pipe(duplex=False)
    self._entered[actor_id] = self._ctx.RawValue('b', 0)
    self._lives[actor_id] = _SignsOfLife(self._ctx)
    process = self._ctx.Process(
        target=_actor_process, name=f'clear-actor-{actor_id}', daemon=True,
        args=(self.config, self._switch.number, actor_id,
              self._generations[actor_id],
              self._shared, self._task, writer, self._stop,
              self._entered[actor_id], self._lives[actor_id]))
    # Started without GPUs in its environment: an actor's TensorFlow must
    # never claim the learner's accelerator memory.
    with children_ignore_sigint(), devices.children_see_no_gpu():
      process.start()
    writer.close()  # The child holds its own copy.
    self._processes[actor_id] = process
    self._connections[actor_id] = reader
    self._receivers[actor_id] = _Receiver(actor_id, reader, self._inbox,
                                          self._wake)
    self._delivered[actor_id] = False
    self._last_words[actor_id] = ''
    self._warned_silent[actor_id] = False

  def publish(self, weights, num_updates):
    self._shared.write(weights, num_updates)

  def switch_task(self, task: int, seed: int):
    """Every actor plays task `task` (seeded from `seed`) from its next
    unroll on, in its own process; actors started later (restarts) start
    with it. Publish the weights to act with first."""
    self._switch = actor_worker.TaskSwitch(self._switch.number + 1,
                                           int(task), int(seed))
    self.config = actor_worker.switched_config(self.config, self._switch)
    self._task.write(self._switch)

  def _stop_actor(self, actor_id):
    """Kills the actor's process (a stopped one too) and ends its pipe."""
    process = self._processes[actor_id]
    if process.is_alive():
      process.kill()
    process.join(5)
    # The process is gone, so a receiver blocked in a read sees the end.
    self._receivers[actor_id].close()
    self._connections[actor_id].close()

  def _restart(self, actor_id, reason, what='died'):
    """Counts a dead (or hung, killed) actor and starts it again: at once if
    it had delivered an unroll since its start, else after a back-off
    (`BACKOFF_S`)."""
    pid = self._processes[actor_id].pid
    self._stop_actor(actor_id)
    if self._last_words[actor_id]:
      reason += f'; it said: {self._last_words[actor_id]}'
    self.num_restarts += 1
    logging.warning('Actor %d (PID %s) %s (%s); restart %d of at most %d.',
                    actor_id, pid, what, reason, self.num_restarts,
                    self.config.max_restarts)
    if self.num_restarts > self.config.max_restarts:
      raise actor_worker.ActorFailure(
          f'Actors died or hung {self.num_restarts} times, more than '
          f'max_restarts={self.config.max_restarts} (last: actor {actor_id}, '
          f'PID {pid}, {what}: {reason}).')
    self._generations[actor_id] += 1
    if self._delivered[actor_id]:
      self._quick_deaths[actor_id] = 0
      self._start(actor_id)
      return
    self._quick_deaths[actor_id] += 1
    delay = min(MAX_BACKOFF_S,
                BACKOFF_S * 2 ** (self._quick_deaths[actor_id] - 1))
    logging.warning('Actor %d %s before delivering an unroll; it starts '
                    'again in %.1f s.', actor_id, what, delay)
    self._waiting[actor_id] = time.monotonic() + delay

  def _silence(self, actor_id) -> Optional[tuple]:
    """(seconds, what) of the actor's silence that counts towards a hang,
    or None while it is waiting for the learner to take its unroll."""
    receiver = self._receivers[actor_id]
    asked_at = receiver.asked_at
    if asked_at is not None:
      return (time.monotonic() - asked_at,
              'sent part of an unroll and then nothing')
    life = self._lives[actor_id]
    connection = self._connections[actor_id]
    # A closed pipe (an actor stopped for good) holds nothing waiting.
    if life.sending and not connection.closed and connection.poll():
      return None  # Its unroll waits for the learner.
    return life.silent_s(), 'gave no sign of life'

  def _check_hung(self, actor_id) -> bool:
    """Warns of a silent actor, and replaces one silent for longer than
    `hang_timeout_s`; returns whether it did."""
    silence = self._silence(actor_id)
    if silence is None:
      return False
    seconds, what = silence
    started = self._lives[actor_id].has_started
    timeout, limit = actor_worker.hang_limit(self.config, started)
    if not started:
      what += ' while starting up'
    if seconds > timeout:
      self._restart(actor_id, f'{what} for {seconds:.0f} s, more than '
                    f'{limit}; killed', what='hung')
      return True
    if seconds > min(60.0, timeout / 2) and not self._warned_silent[actor_id]:
      self._warned_silent[actor_id] = True
      logging.warning('Actor %d (PID %s) %s for %.0f s; it is replaced if '
                      'this lasts %g s.', actor_id,
                      self._processes[actor_id].pid, what, seconds, timeout)
    return False

  def restart_dead_actors(self):
    """Restarts actors that died or hung (and starts those whose back-off is
    over); raises ActorFailure past the limit."""
    if self._stop.is_set():
      return
    now = time.monotonic()
    for actor_id, due in list(self._waiting.items()):
      if now >= due:
        del self._waiting[actor_id]
        self._start(actor_id)
    for actor_id, process in enumerate(self._processes):
      if actor_id in self._waiting:
        continue
      if self._check_hung(actor_id):
        continue
      if self._receivers[actor_id].asked_at is not None:
        continue  # What it sent decides.
      if not process.is_alive() and not self._connections[actor_id].poll():
        self._restart(actor_id, f'exit code {process.exitcode}')

  def get(self, timeout: float = 1.0) -> Optional[actor_lib.Trajectories]:
    """The next trajectories of the current task, or None if none came
    within `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
      received = self._receive(max(0.0, deadline - time.monotonic()))
      if received is None:
        return None
      number, trajectories = received
      if number == self._switch.number:
        return trajectories
      # Played before the last switch: dropped, as the task's unrolls are.

  def _receive(self, timeout: float):
    """The next (switch number, trajectories) from any actor, or None."""
    self.restart_dead_actors()
    deadline = time.monotonic() + timeout
    while True:
      try:
        receiver, message = self._inbox.get_nowait()
      except queue.Empty:
        pass
      else:
        return self._take(receiver, message)
      # Pipes with a message, not yet asked for: served in turn, so that
      # none starves.
      idle = [c for i, c in enumerate(self._connections)
              if i not in self._waiting and
              self._receivers[i].asked_at is None]
      remaining = deadline - time.monotonic()
      if remaining <= 0:
        return None
      ready = mp.connection.wait(idle + [self._wake_read], remaining)
      if not ready:
        return None
      if self._wake_read in ready:
        try:
          self._wake_read.recv(4096)
        except BlockingIOError:
          pass
        continue
      connection = min(ready, key=lambda c: (self._connections.index(c) -
                                             self._next) %
                       len(self._connections))
      actor_id = self._connections.index(connection)
      self._next = actor_id + 1
      self._receivers[actor_id].ask()

  def _take(self, receiver, message):
    """Acts on one received message; the (switch number, trajectories) it
    holds, or None."""
    actor_id = receiver.actor_id
    if self._receivers[actor_id] is not receiver:
      return None  # From an actor since replaced.
    if isinstance(message, _Broken):  # Died mid-send: drop the partial unroll.
      self._restart(actor_id, message.reason)
      return None
    if isinstance(message, _FatalActorError):
      raise actor_worker.ActorFailure(
          f'Actor {message.actor_id}: {message.message}')
    if isinstance(message, _LastWords):  # Its death is seen next.
      self._last_words[actor_id] = message.message
      return None
    if not self._delivered[actor_id]:
      logging.info('Actor %d (PID %s) delivered its first unroll.', actor_id,
                   self._processes[actor_id].pid)
    self._delivered[actor_id] = True
    self._warned_silent[actor_id] = False
    return message

  @property
  def pids(self):
    return [p.pid for p in self._processes]

  def close(self, timeout: float = 10.0):
    """Stops every actor process; none is left behind.

    Actors still starting up (loading their modules, nothing built yet) are
    terminated at once, and hung ones killed; any that gets past its start
    from now on sees the stop flag and returns. The others get `timeout`
    seconds to close their envs.
    """
    self._stop.set()
    for actor_id, process in enumerate(self._processes):
      if not self._entered[actor_id].value:
        process.terminate()
      elif (actor_id not in self._waiting and process.is_alive() and
            self._lives[actor_id].has_started and
            (self._silence(actor_id) or (0.0,))[0] > min(
                5.0, self.config.hang_timeout_s)):
        process.kill()  # Stopped or stuck: it would not see the flag.
    for receiver in self._receivers:
      receiver.close(timeout=0.0)
    for connection in self._connections:
      connection.close()  # Unblocks actors waiting in send.
    deadline = time.time() + timeout
    for process in self._processes:
      process.join(max(0.0, deadline - time.time()))
      if process.is_alive():
        process.terminate()
        process.join(2)
      if process.is_alive():
        process.kill()
        process.join()
    self._wake.close()
    self._wake_read.close()
