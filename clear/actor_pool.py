"""Actor pools: many actors feeding one learner, locally or on Ray.

Both pools run the same `ActorWorker` (an env plus an acting copy of the
policy) and offer the learner the same three calls: `publish(weights,
version)` after each update, `get(timeout)` for the next `Trajectories`, and
`close()`.

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
from typing import NamedTuple, Optional

import numpy as np

from clear import actor as actor_lib
from clear import algorithms
from clear import policy as policy_lib
from clear import snapshot

BACKENDS = ('local', 'inline', 'ray')


class ActorPoolConfig(NamedTuple):
  """How to build each actor; picklable, so child processes rebuild them.

  Attributes:
    env_name: `envs.make` name.
    env_options: dict of `envs.make` options.
    envs_per_actor: environments each actor steps in one batch.
    algorithm: `algorithms.ALGORITHMS` key.
    agent_config: `policy.AgentConfig`.
    unroll_length: T.
    num_actors: actor count.
    seed: base seed; actor i seeds its envs and policy from it.
    max_restarts: restarts of dead actors tolerated before the run fails.
  """
  env_name: str
  env_options: dict
  envs_per_actor: int
  algorithm: str
  agent_config: policy_lib.AgentConfig
  unroll_length: int
  num_actors: int = 1
  seed: int = 0
  max_restarts: int = 20


class ActorFailure(RuntimeError):
  """Actors keep dying beyond the allowed number of restarts, or an
  environment failed for good (e.g. too many consecutive crashes)."""


class _FatalActorError(NamedTuple):
  """Sent by an actor process whose environment failed for good."""
  actor_id: int
  message: str


def actor_seed(config: ActorPoolConfig, actor_id: int, generation: int):
  return config.seed + 1000 * (actor_id + 1) + 100_000 * generation


class ActorWorker:
  """An env plus an acting policy copy; the unit both pools run."""

  def __init__(self, config: ActorPoolConfig, actor_id: int,
               generation: int = 0):
    import envs  # pylint: disable=g-import-not-at-top
    seed = actor_seed(config, actor_id, generation)
    env = envs.make(config.env_name, num_envs=config.envs_per_actor,
                    seed=seed, **config.env_options)
    policy = algorithms.make_policy(config.algorithm, env.spec,
                                    config.agent_config, seed=seed)
    self.actor = actor_lib.Actor(env, policy, config.unroll_length, actor_id)

  def collect(self, weights=None, version=-1) -> actor_lib.Trajectories:
    if weights is not None and version > self.actor.weights_version:
      self.actor.set_weights(weights, version)
    return self.actor.collect()

  def close(self):
    self.actor.close()


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
def _children_ignore_sigint():
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


def _actor_process(config, actor_id, generation, shared, connection, stop,
                   entered):
  """Body of an actor process: collect unrolls until told to stop.

  SIGINT is ignored (see `_children_ignore_sigint`): the learner decides
  when the actors stop. `entered` (a shared byte) is set first thing, so
  the learner knows whether the process is still starting up. An actor
  told to stop before it has started exits quietly.
  """
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  entered.value = 1
  if stop.is_set():
    return
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(1)
  tf.config.threading.set_inter_op_parallelism_threads(1)
  worker = ActorWorker(config, actor_id, generation)
  version = -1
  try:
    while not stop.is_set():
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
      connection.send(trajectories)  # Blocks while the learner is busy.
  except (KeyboardInterrupt, BrokenPipeError, EOFError, OSError):
    pass  # The learner closed the pipe or the user interrupted.
  finally:
    worker.close()


class LocalActorPool:
  """Actors as processes on this machine (see module docstring).

  Each actor owns one pipe to the learner: at most one finished unroll batch
  waits in it, which bounds both memory and policy lag, and an actor that
  dies mid-send can only break its own pipe.
  """

  def __init__(self, config: ActorPoolConfig, weight_shapes):
    self.config = config
    self._ctx = mp.get_context('spawn')
    self._shared = _SharedWeights(self._ctx, weight_shapes)
    self._stop = _StopFlag(self._ctx)
    self._generations = [0] * config.num_actors
    self.num_restarts = 0
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
        args=(self.config, actor_id, self._generations[actor_id],
              self._shared, writer, self._stop, self._entered[actor_id]))
    with _children_ignore_sigint():
      process.start()
    writer.close()  # The child holds its own copy.
    self._processes[actor_id] = process
    self._connections[actor_id] = reader

  def publish(self, weights, version):
    self._shared.write(weights, version)

  def _restart(self, actor_id, reason):
    process = self._processes[actor_id]
    if process.is_alive():
      process.kill()
    process.join(5)
    self._connections[actor_id].close()
    self.num_restarts += 1
    logging.warning('Actor %d died (%s); restart %d of at most %d.', actor_id,
                    reason, self.num_restarts, self.config.max_restarts)
    if self.num_restarts > self.config.max_restarts:
      raise ActorFailure(
          f'Actors died {self.num_restarts} times, more than '
          f'max_restarts={self.config.max_restarts} (last: {reason}). See '
          'the actor logs above.')
    self._generations[actor_id] += 1
    self._start(actor_id)

  def restart_dead_actors(self):
    """Restarts actors that died; raises ActorFailure past the limit."""
    if self._stop.is_set():
      return
    for actor_id, process in enumerate(self._processes):
      if not process.is_alive() and not self._connections[actor_id].poll():
        self._restart(actor_id, f'exit code {process.exitcode}')

  def get(self, timeout: float = 1.0) -> Optional[actor_lib.Trajectories]:
    """The next trajectories, or None if none came within `timeout`."""
    self.restart_dead_actors()
    ready = mp.connection.wait(self._connections, timeout)
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

  def __init__(self, config: ActorPoolConfig):
    self.config = config
    self._workers = [ActorWorker(config, i) for i in range(config.num_actors)]
    self._weights = None
    self._version = -1
    self._next = 0
    self.num_restarts = 0

  def publish(self, weights, version):
    self._weights, self._version = weights, version

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
      state.update(snapshot.prefixed(f'actor{i}', worker.actor.get_state()))
    return state

  def set_state(self, state: snapshot.Arrays):
    """Continues every actor from `get_state` of a pool built the same way."""
    if int(state['num_actors']) != len(self._workers):
      raise ValueError(f'The saved actor state holds {int(state["num_actors"])}'
                       f' actors, this pool {len(self._workers)}.')
    for i, worker in enumerate(self._workers):
      worker.actor.set_state(snapshot.subset(f'actor{i}', state))
    self._next = int(state['next'])

  def close(self):
    for worker in self._workers:
      worker.close()


# --- Ray -----------------------------------------------------------------------


class RayActorPool:
  """Actors as Ray actors, the learner in the driver.

  Args:
    config: `ActorPoolConfig`.
    address: a Ray cluster address; None starts a local Ray bound to the
      loopback address.
  """

  def __init__(self, config: ActorPoolConfig, address: Optional[str] = None):
    try:
      import ray  # pylint: disable=g-import-not-at-top
    except ImportError as e:
      raise ValueError('--backend=ray needs Ray: pip install '
                       '"clear-rl[ray]" (or "ray>=2.60,<2.61").') from e
    self._ray = ray
    if not ray.is_initialized():
      if address:
        ray.init(address=address, log_to_driver=True)
      else:
        ray.init(include_dashboard=False, _node_ip_address='127.0.0.1',
                 num_cpus=max(2, config.num_actors + 1),
                 log_to_driver=True, configure_logging=False)
      self._owns_ray = True
    else:
      self._owns_ray = False
    self.config = config
    remote = ray.remote(num_cpus=1, max_restarts=config.max_restarts,
                        max_task_retries=0)(ActorWorker)
    self._workers = [remote.remote(config, i) for i in range(
        config.num_actors)]
    self._weights_ref = None
    self._version = -1
    self._in_flight = {}
    self.num_restarts = 0

  def publish(self, weights, version):
    self._weights_ref = self._ray.put(weights)
    self._version = version

  def _submit(self, index):
    ref = self._workers[index].collect.remote(self._weights_ref, self._version)
    self._in_flight[ref] = index

  def get(self, timeout: float = 1.0) -> Optional[actor_lib.Trajectories]:
    if self._weights_ref is None:
      raise RuntimeError('RayActorPool.get: publish weights first.')
    for index in range(len(self._workers)):
      if index not in self._in_flight.values():
        self._submit(index)
    ready, _ = self._ray.wait(list(self._in_flight), num_returns=1,
                              timeout=timeout)
    if not ready:
      return None
    index = self._in_flight.pop(ready[0])
    try:
      result = self._ray.get(ready[0])
    except self._ray.exceptions.RayTaskError as e:
      raise ActorFailure(f'Ray actor {index} failed: {e}') from e
    except self._ray.exceptions.RayActorError as e:
      self.num_restarts += 1
      logging.warning('Ray actor %d died (%s); restart %d.', index, e,
                      self.num_restarts)
      if self.num_restarts > self.config.max_restarts:
        raise ActorFailure(f'Ray actors died {self.num_restarts} times.') from e
      return None
    self._submit(index)
    return result

  @property
  def pids(self):
    return []

  def close(self):
    for worker in self._workers:
      self._ray.kill(worker)
    if self._owns_ray:
      self._ray.shutdown()


def make_pool(backend: str, config: ActorPoolConfig, weight_shapes,
              ray_address: Optional[str] = None):
  if backend == 'local':
    return LocalActorPool(config, weight_shapes)
  if backend == 'inline':
    return InlineActorPool(config)
  if backend == 'ray':
    return RayActorPool(config, ray_address)
  raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}.')
