"""Actor pools: many actors feeding one learner, locally or on Ray.

Every pool runs the same `actor_worker.ActorWorker` (an env per task plus
an acting copy of the policy) and offers the learner the same four calls:
`publish(weights, version)` after each update, `get(timeout)` for the next
`Trajectories`, `switch_task(task, seed)` when a task sequence moves on, and
`close()`.

A switch keeps every actor's process, TensorFlow runtime and policy: each
worker switches in place (`ActorWorker.switch_task`). Unrolls of the task
before, still on their way, are dropped.

- `LocalActorPool`: one process per actor on this machine. Unrolls come back
  through one pipe per actor, served in turn as they are ready, so the
  learner never waits on the slowest actor and no actor runs more than one
  unroll batch ahead; weights go out through one shared-memory array with a
  version counter. A dead actor is restarted with fresh episodes and a fresh
  core state; its partial unroll is simply dropped.
- `InlineActorPool`: the actors step in the learner's own process, taking
  turns with the updates. No parallelism, but one TensorFlow runtime (less
  memory) and a fixed order of acting and learning, so a seeded run is
  reproducible step for step.
- `RayActorPool`: the actors are Ray actors (an existing engine; point
  `address` at a cluster), the learner stays in the driver.
"""

import contextlib
import logging
import multiprocessing as mp
import multiprocessing.connection  # pylint: disable=unused-import
import os
import signal
import time
import warnings
from typing import NamedTuple, Optional

import numpy as np

from clear import snapshot
from clear.runtime import actor as actor_lib
from clear.runtime import actor_worker
from clear.runtime import devices

BACKENDS = ('local', 'inline', 'ray')


class ActorFailure(RuntimeError):
  """Actors keep dying beyond the allowed number of restarts, or an
  environment failed for good (e.g. too many consecutive crashes)."""


class _FatalActorError(NamedTuple):
  """Sent by an actor process whose environment failed for good."""
  actor_id: int
  message: str


class _LastWords(NamedTuple):
  """Sent by an actor process as an exception ends it: what it said."""
  actor_id: int
  message: str


# A dead actor that had delivered nothing since it started waits this long
# before it starts again, doubled with each such death in a row, up to
# `MAX_BACKOFF_S`: an actor that cannot start does not spin.
BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


def _last_words(error: BaseException) -> str:
  """The exception's type and message, on one line."""
  text = ' '.join(str(error).split())
  return f'{type(error).__name__}: {text}' if text else type(error).__name__


# --- Local processes ---------------------------------------------------------


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
                   connection, stop, entered):
  """Body of an actor process: collect unrolls until told to stop.

  `config` is of the pool's switch `switch_number`. Before each unroll the
  actor checks `task` (a `_SharedTask`) and switches in place when the pool
  has moved on; each unroll is sent with the number
  of the switch it was played under, so the pool can drop the task
  before's. SIGINT is ignored (see `children_ignore_sigint`): the learner
  decides when the actors stop. `entered` (a shared byte) is set first
  thing, so the learner knows whether the process is still starting up.
  An actor told to stop before it has started exits quietly.
  """
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  entered.value = 1
  if stop.is_set():
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  devices.hide_accelerators()  # Born without GPUs too; see `_start`.
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    worker = actor_worker.ActorWorker(config, actor_id, generation)
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
      switch = task.read()
      if switch.number != worker.switch_number:
        worker.switch_task(switch)
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
  """Actors as processes on this machine (see module docstring).

  Each actor owns one pipe to the learner: at most one finished unroll batch
  waits in it, which bounds both memory and policy lag, and an actor that
  dies mid-send can only break its own pipe.
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
    self._processes = [None] * config.num_actors
    self._entered = [None] * config.num_actors  # See `_actor_process`.
    self._connections = [None] * config.num_actors
    self._next = 0
    for actor_id in range(config.num_actors):
      self._start(actor_id)

  def _start(self, actor_id):
    reader, writer = self._ctx.Pipe(duplex=False)
    self._entered[actor_id] = self._ctx.RawValue('b', 0)
    process = self._ctx.Process(
        target=_actor_process, name=f'clear-actor-{actor_id}', daemon=True,
        args=(self.config, self._switch.number, actor_id,
              self._generations[actor_id],
              self._shared, self._task, writer, self._stop,
              self._entered[actor_id]))
    # Started without GPUs in its environment: an actor's TensorFlow must
    # never claim the learner's accelerator memory.
    with children_ignore_sigint(), devices.children_see_no_gpu():
      process.start()
    writer.close()  # The child holds its own copy.
    self._processes[actor_id] = process
    self._connections[actor_id] = reader
    self._delivered[actor_id] = False
    self._last_words[actor_id] = ''

  def publish(self, weights, version):
    self._shared.write(weights, version)

  def switch_task(self, task: int, seed: int):
    """Every actor plays task `task` (seeded from `seed`) from its next
    unroll on, in its own process; actors started later (restarts) start
    with it. Publish the weights to act with first."""
    self._switch = actor_worker.TaskSwitch(self._switch.number + 1,
                                           int(task), int(seed))
    self.config = actor_worker.switched_config(self.config, self._switch)
    self._task.write(self._switch)

  def _restart(self, actor_id, reason):
    """Counts a dead actor and starts it again: at once if it had delivered
    an unroll since its start, else after a back-off (`BACKOFF_S`)."""
    process = self._processes[actor_id]
    if process.is_alive():
      process.kill()
    process.join(5)
    self._connections[actor_id].close()
    if self._last_words[actor_id]:
      reason += f'; it said: {self._last_words[actor_id]}'
    self.num_restarts += 1
    logging.warning('Actor %d (PID %s) died (%s); restart %d of at most %d.',
                    actor_id, process.pid, reason, self.num_restarts,
                    self.config.max_restarts)
    if self.num_restarts > self.config.max_restarts:
      raise ActorFailure(
          f'Actors died {self.num_restarts} times, more than '
          f'max_restarts={self.config.max_restarts} (last: actor {actor_id}, '
          f'{reason}).')
    self._generations[actor_id] += 1
    if self._delivered[actor_id]:
      self._quick_deaths[actor_id] = 0
      self._start(actor_id)
      return
    self._quick_deaths[actor_id] += 1
    delay = min(MAX_BACKOFF_S,
                BACKOFF_S * 2 ** (self._quick_deaths[actor_id] - 1))
    logging.warning('Actor %d died before delivering an unroll; it starts '
                    'again in %.1f s.', actor_id, delay)
    self._waiting[actor_id] = time.monotonic() + delay

  def restart_dead_actors(self):
    """Restarts actors that died (and starts those whose back-off is over);
    raises ActorFailure past the limit."""
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
      if not process.is_alive() and not self._connections[actor_id].poll():
        self._restart(actor_id, f'exit code {process.exitcode}')

  def _live_connections(self):
    return [c for i, c in enumerate(self._connections)
            if i not in self._waiting]

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
    connections = self._live_connections()
    if not connections:  # Every actor waits out a back-off.
      time.sleep(min(timeout, 0.1))
      return None
    ready = mp.connection.wait(connections, timeout)
    if not ready:
      return None
    # Serve actors in turn so that none starves.
    order = sorted(ready, key=lambda c: (self._connections.index(c) -
                                         self._next) % len(self._connections))
    connection = order[0]
    actor_id = self._connections.index(connection)
    self._next = actor_id + 1
    try:
      received = connection.recv()
    except (EOFError, OSError) as e:  # Died mid-send: drop the partial unroll.
      self._restart(actor_id, f'{type(e).__name__} while receiving')
      return None
    if isinstance(received, _FatalActorError):
      raise ActorFailure(f'Actor {received.actor_id}: {received.message}')
    if isinstance(received, _LastWords):  # Its death is seen next.
      self._last_words[actor_id] = received.message
      return None
    self._delivered[actor_id] = True
    return received

  @property
  def pids(self):
    return [p.pid for p in self._processes]

  def close(self, timeout: float = 10.0):
    """Stops every actor process; none is left behind.

    Actors still starting up (loading their modules, nothing built yet) are
    terminated at once; any that gets past its start from now on sees the
    stop flag and returns. The others get `timeout` seconds to close their
    envs.
    """
    self._stop.set()
    for connection in self._connections:
      connection.close()  # Unblocks actors waiting in send.
    for process, entered in zip(self._processes, self._entered):
      if not entered.value:
        process.terminate()
    deadline = time.time() + timeout
    for process in self._processes:
      process.join(max(0.0, deadline - time.time()))
      if process.is_alive():
        process.terminate()
        process.join(2)
      if process.is_alive():
        process.kill()
        process.join()


# --- Inline ------------------------------------------------------------------


class InlineActorPool:
  """Actors in the learner's process; each `get` collects one unroll batch.

  Actors take turns, and each collects with the newest published weights,
  so the data a seeded run sees depends on nothing but the seed.
  """

  def __init__(self, config: actor_worker.ActorPoolConfig):
    self.config = config
    self._workers = [actor_worker.ActorWorker(config, i)
                     for i in range(config.num_actors)]
    self._weights = None
    self._version = -1
    self._next = 0
    self._switches = 0
    self.num_restarts = 0

  def publish(self, weights, version):
    self._weights, self._version = weights, version

  def switch_task(self, task: int, seed: int):
    """Every actor plays task `task` (seeded from `seed`) from now on, and
    actor 0 collects next: as a pool built for the task would."""
    self._switches += 1
    switch = actor_worker.TaskSwitch(self._switches, int(task), int(seed))
    for worker in self._workers:
      worker.switch_task(switch)
    self.config = actor_worker.switched_config(self.config, switch)
    self._next = 0

  def get(self, timeout: float = 1.0) -> Optional[actor_lib.Trajectories]:
    del timeout  # Collecting is synchronous.
    if self._weights is None:
      raise RuntimeError('InlineActorPool.get: publish weights first.')
    worker = self._workers[self._next]
    self._next = (self._next + 1) % len(self._workers)
    return worker.collect(self._weights, self._version)

  @property
  def pids(self):
    return []

  def get_state(self) -> snapshot.Arrays:
    """Every actor's state and whose turn is next (see `Actor.get_state`).

    Raises:
      envs.SnapshotUnsupported: an env cannot save its state.
    """
    state = {'next': np.array(self._next),
             'num_actors': np.array(len(self._workers))}
    for i, worker in enumerate(self._workers):
      state.update(snapshot.prefixed(f'actor{i}', worker.get_state()))
    return state

  def set_state(self, state: snapshot.Arrays):
    """Continues every actor from `get_state` of a pool built the same way."""
    if int(state['num_actors']) != len(self._workers):
      raise ValueError(f'The saved actor state holds {int(state["num_actors"])}'
                       f' actors, this pool {len(self._workers)}.')
    for i, worker in enumerate(self._workers):
      worker.set_state(snapshot.subset(f'actor{i}', state))
    self._next = int(state['next'])

  def close(self):
    for worker in self._workers:
      worker.close()


# --- Ray ---------------------------------------------------------------------


class RayActorWorker(actor_worker.ActorWorker):
  """`actor_worker.ActorWorker` as a Ray actor: no GPU, and fresh seeds after
  a restart.

  Ray recreates an actor whose process or node died (up to its
  `max_restarts`) by running `__init__` again. Each life draws a random
  `incarnation`, returned with every unroll, so the pool can count the
  restarts whatever error (or none) it saw; a recreated actor also draws a
  fresh generation of seeds, so it does not replay its first life's
  episodes.
  """

  def __init__(self, config: actor_worker.ActorPoolConfig, actor_id: int):
    devices.hide_accelerators()
    import ray  # pylint: disable=g-import-not-at-top
    with warnings.catch_warnings():  # Ray's own use of a deprecated API.
      warnings.simplefilter('ignore', DeprecationWarning)
      reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
    self.incarnation = int.from_bytes(os.urandom(8), 'little')
    generation = 1 + self.incarnation % 50_000 if reconstructed else 0
    super().__init__(config, actor_id, generation)

  def collect_with_incarnation(self, weights=None, version=-1,
                               switch: Optional[
                                   actor_worker.TaskSwitch] = None):
    """(incarnation, trajectories) of the next unroll, played on
    `switch`'s task (switched to first when it is new to this actor, also
    after Ray recreated it with the task it was first built for)."""
    if switch is not None and switch.number != self.switch_number:
      self.switch_task(switch)
    return self.incarnation, self.collect(weights, version)

  def where(self) -> dict:
    """This actor's node, process and what its TensorFlow sees."""
    import ray  # pylint: disable=g-import-not-at-top
    return {'node_id': ray.get_runtime_context().get_node_id(),
            'pid': os.getpid(), 'incarnation': self.incarnation,
            'cuda_visible_devices': os.environ.get(
                devices.CUDA_VISIBLE_DEVICES),
            'gpus': devices.visible_gpus()}


class RayActorPool:
  """Actors as Ray actors, the learner in the driver.

  Weights go out through Ray's object store (one `ray.put` per update,
  fetched by each actor with its next `collect`), trajectories come back as
  task results. Actors are spread over the nodes that can hold them. An
  actor whose process or node dies is recreated by Ray on a node with room
  (its unfinished unroll is lost; everything already returned was accepted
  by the learner); each death counts as a restart, and past
  `config.max_restarts` the run stops with `ActorFailure`.

  Args:
    config: `actor_worker.ActorPoolConfig`.
    address: a Ray cluster address; None starts a local Ray bound to the
      loopback address.
    actor_resource: a custom Ray resource each actor needs one unit of, so
      actors run only on the nodes started with it (`ray start
      --resources='{"NAME": N}'`), never beside the learner; '' for any
      node with a free CPU.
  """

  def __init__(self, config: actor_worker.ActorPoolConfig,
               address: Optional[str] = None, actor_resource: str = ''):
    try:
      import ray  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ValueError('--backend=ray needs Ray: pip install '
                       '"clear-rl[ray]" (or "ray>=2.60,<2.61").') from e
    self._ray = ray
    if not ray.is_initialized():
      if address:
        ray.init(address=address, log_to_driver=True,
                 configure_logging=False)
      else:
        # 'local': a new Ray of our own, even where another cluster on this
        # machine left its address behind (/tmp/ray/ray_current_cluster).
        ray.init(address='local', include_dashboard=False,
                 _node_ip_address='127.0.0.1',
                 num_cpus=max(2, config.num_actors + 1),
                 log_to_driver=True, configure_logging=False)
      self._owns_ray = True
    else:
      self._owns_ray = False
    self.config = config
    if actor_resource:
      available = ray.cluster_resources().get(actor_resource, 0)
      if available < config.num_actors:
        if self._owns_ray:
          ray.shutdown()
        raise ValueError(
            f'--ray_actor_resource={actor_resource}: the Ray cluster has '
            f'{available:g} of it for {config.num_actors} actors; start '
            f'worker nodes with ray start --resources=\'{{"{actor_resource}"'
            f': N}}\'.')
    options = dict(num_cpus=1, num_gpus=0, max_restarts=config.max_restarts,
                   max_task_retries=0, scheduling_strategy='SPREAD')
    if actor_resource:
      options['resources'] = {actor_resource: 1}
    remote = ray.remote(**options)(RayActorWorker)
    self._workers = [remote.remote(config, i)
                     for i in range(config.num_actors)]
    self._weights_ref = None
    self._version = -1
    self._switch = actor_worker.TaskSwitch(
        0, int(config.env_options.get('task', 0)), config.seed)
    self._in_flight = {}  # Object ref -> (actor index, switch number).
    self.num_restarts = 0
    num = config.num_actors
    self._incarnations = [None] * num  # Of each actor's last unroll.
    self._died = [False] * num  # Death counted, new life not yet seen.
    self._unavailable = [False] * num  # Warned about already.
    self._retry_at = [0.0] * num  # Monotonic time of the next submit.

  def publish(self, weights, version):
    self._weights_ref = self._ray.put(weights)
    self._version = version

  def switch_task(self, task: int, seed: int):
    """Every actor plays task `task` (seeded from `seed`) from its next
    unroll on; the unrolls asked for before are dropped when they come.
    Publish the weights to act with first."""
    self._switch = actor_worker.TaskSwitch(self._switch.number + 1,
                                           int(task), int(seed))
    self.config = actor_worker.switched_config(self.config, self._switch)

  def _submit(self, index):
    ref = self._workers[index].collect_with_incarnation.remote(
        self._weights_ref, self._version, self._switch)
    self._in_flight[ref] = (index, self._switch.number)

  def _count_restart(self, index, what):
    self.num_restarts += 1
    logging.warning('Ray actor %d %s; restart %d of at most %d.', index, what,
                    self.num_restarts, self.config.max_restarts)
    if self.num_restarts > self.config.max_restarts:
      raise ActorFailure(
          f'Ray actors died {self.num_restarts} times, more than '
          f'--max_actor_restarts={self.config.max_restarts} (last: actor '
          f'{index} {what}). Replace the lost nodes, or allow more restarts.')

  def get(self, timeout: float = 1.0) -> Optional[actor_lib.Trajectories]:
    """The next trajectories, or None if none came within `timeout`.

    Restarts are counted when an actor's unroll comes from a new life, or
    when Ray reports the actor died; an actor Ray is still recreating
    (`ActorUnavailableError`, e.g. its node was lost), or whose finished
    unroll was lost with its node's object store (`ObjectLostError`), is
    asked again after a second.
    """
    if self._weights_ref is None:
      raise RuntimeError('RayActorPool.get: publish weights first.')
    busy = {index for index, _ in self._in_flight.values()}
    now = time.monotonic()
    for index in range(len(self._workers)):
      if index not in busy and now >= self._retry_at[index]:
        self._submit(index)
    if not self._in_flight:
      time.sleep(min(timeout, 0.1))
      return None
    ready, _ = self._ray.wait(list(self._in_flight), num_returns=1,
                              timeout=timeout)
    if not ready:
      return None
    index, number = self._in_flight.pop(ready[0])
    try:
      incarnation, result = self._ray.get(ready[0])
    except self._ray.exceptions.RayTaskError as e:
      raise ActorFailure(f'Ray actor {index} failed: {e}') from e
    except self._ray.exceptions.ActorUnavailableError as e:
      if not self._unavailable[index]:
        logging.warning('Ray actor %d unavailable, retrying: %s', index, e)
      self._unavailable[index] = True
      self._retry_at[index] = time.monotonic() + 1.0
      return None
    except self._ray.exceptions.ObjectLostError as e:
      # The unroll was finished, but it sat in the object store of a node
      # that was lost before the learner fetched it: it was never accepted,
      # so nothing is lost but its frames. The actor's death is counted
      # when Ray reports it, or when its next life returns an unroll.
      logging.warning('Ray actor %d: its last unroll was lost with its '
                      'node; asking again: %s', index,
                      str(e).splitlines()[0])
      self._retry_at[index] = time.monotonic() + 1.0
      return None
    except self._ray.exceptions.ActorDiedError as e:
      if e.actor_init_failed:
        raise ActorFailure(f'Ray actor {index} failed to start: {e}') from e
      # Counted now; its next life's first unroll is not counted again. A
      # task sent to an actor Ray gave up on fails at once with this error,
      # so such an actor soon exhausts the restarts.
      self._died[index] = True
      self._retry_at[index] = time.monotonic() + 1.0
      self._count_restart(index, f'died ({e})')
      return None
    known = self._incarnations[index]
    if known is not None and known != incarnation and not self._died[index]:
      self._count_restart(index, 'came back in a new process (its process '
                          'or node was lost)')
    self._incarnations[index] = incarnation
    self._died[index] = self._unavailable[index] = False
    self._submit(index)
    if number != self._switch.number:
      return None  # Played before the last switch: dropped.
    return result

  def where(self, timeout: float = 300.0) -> list:
    """`RayActorWorker.where()` of every actor, waiting for actors that
    are starting or being recreated (up to `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
      try:
        return self._ray.get([w.where.remote() for w in self._workers])
      except self._ray.exceptions.ActorUnavailableError:
        if time.monotonic() > deadline:
          raise
        time.sleep(1.0)

  @property
  def pids(self):
    return []

  def close(self):
    for worker in self._workers:
      self._ray.kill(worker)
    if self._owns_ray:
      self._ray.shutdown()


def make_pool(backend: str, config: actor_worker.ActorPoolConfig,
              weight_shapes, ray_address: Optional[str] = None,
              ray_actor_resource: str = ''):
  if backend == 'local':
    return LocalActorPool(config, weight_shapes)
  if backend == 'inline':
    return InlineActorPool(config)
  if backend == 'ray':
    return RayActorPool(config, ray_address, ray_actor_resource)
  raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}.')
