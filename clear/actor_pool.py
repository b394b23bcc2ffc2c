"""Actor pools: many actors feeding one learner, locally or on Ray.

Both pools run the same `ActorWorker` (an env plus an acting copy of the
policy) and offer the learner the same three calls: `publish(weights,
version)` after each update, `get(timeout)` for the next `Trajectories`, and
`close()`.

- `LocalActorPool`: one process per actor on this machine. Unrolls come back
  through a bounded queue, so the learner never waits on the slowest actor
  for long and actors cannot run arbitrarily far ahead; weights go out
  through one shared-memory array with a version counter. A dead actor is
  restarted with fresh episodes and a fresh core state; its partial unroll is
  simply never delivered.
- `RayActorPool`: the actors are Ray actors (an existing engine; point
  `address` at a cluster), the learner stays in the driver.
"""

import logging
import multiprocessing as mp
import os
import queue as queue_lib
import time
from typing import NamedTuple, Optional

import numpy as np

from clear import actor as actor_lib
from clear import policy as policy_lib

BACKENDS = ('local', 'ray')


class ActorPoolConfig(NamedTuple):
  """How to build each actor; picklable, so child processes rebuild them.

  Attributes:
    env_name: `envs.make` name.
    env_options: dict of `envs.make` options.
    envs_per_actor: environments each actor steps in one batch.
    algorithm: `policy.POLICIES` key.
    agent_config: `policy.AgentConfig`.
    unroll_length: T.
    num_actors: actor count.
    seed: base seed; actor i seeds its envs and policy from it.
    queue_size: bound of the unroll queue (local pool).
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
  queue_size: int = 1
  max_restarts: int = 20


class ActorFailure(RuntimeError):
  """Actors keep dying beyond the allowed number of restarts."""


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
    policy = policy_lib.make_policy(config.algorithm, env.spec,
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
  """Weights in one shared float32 array, guarded by a lock and a version."""

  def __init__(self, ctx, shapes):
    self.shapes = [tuple(s) for s in shapes]
    self.size = int(sum(np.prod(s) for s in self.shapes))
    self.array = ctx.Array('f', max(1, self.size), lock=True)
    self.version = ctx.Value('q', -1, lock=False)

  def write(self, weights, version):
    flat = np.concatenate([np.ravel(w).astype(np.float32) for w in weights])
    with self.array.get_lock():
      np.frombuffer(self.array.get_obj(), np.float32)[:self.size] = flat
      self.version.value = version

  def read_if_newer(self, version):
    """(weights, version) when newer than `version`, else (None, version)."""
    if self.version.value <= version:
      return None, version
    with self.array.get_lock():
      flat = np.frombuffer(self.array.get_obj(), np.float32)[:self.size].copy()
      version = self.version.value
    weights, offset = [], 0
    for shape in self.shapes:
      n = int(np.prod(shape))
      weights.append(flat[offset:offset + n].reshape(shape))
      offset += n
    return weights, version


def _actor_process(config, actor_id, generation, shared, out_queue, stop):
  """Body of an actor process: collect unrolls until told to stop."""
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
      trajectories = worker.collect(weights, new_version)
      version = new_version
      while not stop.is_set():
        try:
          out_queue.put(trajectories, timeout=0.5)
          break
        except queue_lib.Full:
          continue
  except KeyboardInterrupt:
    pass
  finally:
    worker.close()


class LocalActorPool:
  """Actors as processes on this machine (see module docstring)."""

  def __init__(self, config: ActorPoolConfig, weight_shapes):
    self.config = config
    self._ctx = mp.get_context('spawn')
    self._shared = _SharedWeights(self._ctx, weight_shapes)
    self._queue = self._ctx.Queue(maxsize=config.queue_size)
    self._stop = self._ctx.Event()
    self._generations = [0] * config.num_actors
    self.num_restarts = 0
    self._processes = [self._start(i) for i in range(config.num_actors)]

  def _start(self, actor_id):
    process = self._ctx.Process(
        target=_actor_process, name=f'clear-actor-{actor_id}', daemon=True,
        args=(self.config, actor_id, self._generations[actor_id],
              self._shared, self._queue, self._stop))
    process.start()
    return process

  def publish(self, weights, version):
    self._shared.write(weights, version)

  def restart_dead_actors(self):
    """Restarts actors that died; raises ActorFailure past the limit."""
    for actor_id, process in enumerate(self._processes):
      if process.is_alive() or self._stop.is_set():
        continue
      self.num_restarts += 1
      logging.warning('Actor %d died (exit code %s); restart %d of at most '
                      '%d.', actor_id, process.exitcode, self.num_restarts,
                      self.config.max_restarts)
      if self.num_restarts > self.config.max_restarts:
        raise ActorFailure(
            f'Actors died {self.num_restarts} times, more than '
            f'max_restarts={self.config.max_restarts}; last exit code '
            f'{process.exitcode}. See the actor logs above.')
      self._generations[actor_id] += 1
      self._processes[actor_id] = self._start(actor_id)

  def get(self, timeout: float = 1.0) -> Optional[actor_lib.Trajectories]:
    """The next trajectories, or None if none came within `timeout`."""
    try:
      return self._queue.get(timeout=timeout)
    except queue_lib.Empty:
      self.restart_dead_actors()
      return None

  @property
  def pids(self):
    return [p.pid for p in self._processes]

  def close(self, timeout: float = 10.0):
    """Stops every actor process; none is left behind."""
    self._stop.set()
    deadline = time.time() + timeout
    while any(p.is_alive() for p in self._processes) and (
        time.time() < deadline):
      try:  # Unblock actors waiting on a full queue.
        while True:
          self._queue.get_nowait()
      except queue_lib.Empty:
        pass
      time.sleep(0.05)
    for process in self._processes:
      if process.is_alive():
        process.terminate()
        process.join(2)
      if process.is_alive():
        process.kill()
        process.join()
    self._queue.cancel_join_thread()
    self._queue.close()


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
  if backend == 'ray':
    return RayActorPool(config, ray_address)
  raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}.')
