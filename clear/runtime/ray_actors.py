"""Actors as Ray actors, the learner in the driver: `RayActorPool`.

Ray is an existing engine for this: it places the actors on the nodes of a
cluster (or a local Ray of this machine), recreates those whose process or
node dies, and carries weights and unrolls through its object store.
"""

import contextlib
import logging
import os
import signal
import threading
import time
import warnings
from typing import Optional

from clear.runtime import actor as actor_lib
from clear.runtime import actor_worker
from clear.runtime import devices


@contextlib.contextmanager
def _keeping_signal_handlers():
  """Puts back this process's SIGINT and SIGTERM handlers after the block.

  `ray.init` installs handlers of its own in the driver, which print a stack
  and end the process; the run's handlers stop it with a final checkpoint.
  Outside the main thread, where handlers cannot be set, this does nothing.
  """
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
  try:
    yield
  finally:
    for signum, handler in handlers.items():
      if handler is not None:
        signal.signal(signum, handler)


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
    """(incarnation, PID, trajectories) of the next unroll, played on
    `switch`'s task (switched to first when it is new to this actor, also
    after Ray recreated it with the task it was first built for)."""
    if switch is not None and switch.number != self.switch_number:
      self.switch_task(switch)
    return self.incarnation, os.getpid(), self.collect(weights, version)

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
  `config.max_restarts` the run stops with
  `actor_worker.ActorFailure`. An actor asked
  for an unroll `config.hang_timeout_s` seconds ago that has not returned
  it is hung: it is reported by id and PID and killed, and Ray starts it
  again (a restart). Half that time (at most a minute) gets a warning.

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
      with _keeping_signal_handlers():
        self._init_ray(config, address)
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
    self._asked_at = [0.0] * num  # Monotonic time of the last submit.
    self._pids = [None] * num  # Of each actor's last unroll.
    self._warned_silent = [False] * num  # Since the last submit.
    self._killed = [False] * num  # Since the last submit.
    self._started = [False] * num  # Returned an unroll in this life.
    self._hung = [''] * num  # Why it was killed, until its death is seen.

  def _init_ray(self, config: actor_worker.ActorPoolConfig,
                address: Optional[str]):
    if address:
      self._ray.init(address=address, log_to_driver=True,
                     configure_logging=False)
    else:
      # 'local': a new Ray of our own, even where another cluster on this
      # machine left its address behind (/tmp/ray/ray_current_cluster).
      self._ray.init(address='local', include_dashboard=False,
                     _node_ip_address='127.0.0.1',
                     num_cpus=max(2, config.num_actors + 1),
                     log_to_driver=True, configure_logging=False)

  def publish(self, weights, num_updates):
    self._weights_ref = self._ray.put(weights)
    self._version = num_updates

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
    self._asked_at[index] = time.monotonic()
    self._warned_silent[index] = self._killed[index] = False

  def _check_hung(self):
    """Warns of actors slow to return their unroll, and kills those slower
    than `hang_timeout_s` (Ray starts them again)."""
    now = time.monotonic()
    for index, _ in list(self._in_flight.values()):
      waited = now - self._asked_at[index]
      pid = self._pids[index] or 'not yet known'
      # An actor's first unroll includes its start.
      timeout, limit = actor_worker.hang_limit(self.config,
                                               self._started[index])
      if waited > timeout and not self._killed[index]:
        self._killed[index] = True
        self._hung[index] = (f'returned nothing for {waited:.0f} s, more '
                             f'than {limit}; killed')
        logging.warning('Ray actor %d (PID %s) %s.', index, pid,
                        self._hung[index])
        self._ray.kill(self._workers[index], no_restart=False)
      elif waited > min(60.0, timeout / 2) and not self._warned_silent[index]:
        self._warned_silent[index] = True
        logging.warning('Ray actor %d (PID %s) has returned nothing for %.0f '
                        's; it is replaced if this lasts %g s.', index, pid,
                        waited, timeout)

  def _death(self, index, what: str) -> str:
    """`what` happened to the actor, or the hang it was killed for."""
    self._started[index] = False
    hung, self._hung[index] = self._hung[index], ''
    return f'(PID {self._pids[index]}) hung: {hung}' if hung else what

  def _count_restart(self, index, what):
    self.num_restarts += 1
    logging.warning('Ray actor %d %s; restart %d of at most %d.', index, what,
                    self.num_restarts, self.config.max_restarts)
    if self.num_restarts > self.config.max_restarts:
      raise actor_worker.ActorFailure(
          f'Ray actors died or hung {self.num_restarts} times, more than '
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
    self._check_hung()
    ready, _ = self._ray.wait(list(self._in_flight), num_returns=1,
                              timeout=timeout)
    if not ready:
      return None
    index, number = self._in_flight.pop(ready[0])
    try:
      incarnation, pid, result = self._ray.get(ready[0])
    except self._ray.exceptions.RayTaskError as e:
      raise actor_worker.ActorFailure(f'Ray actor {index} failed: {e}') from e
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
        raise actor_worker.ActorFailure(
            f'Ray actor {index} failed to start: {e}') from e
      # Counted now; its next life's first unroll is not counted again. A
      # task sent to an actor Ray gave up on fails at once with this error,
      # so such an actor soon exhausts the restarts.
      self._died[index] = True
      self._retry_at[index] = time.monotonic() + 1.0
      self._count_restart(index, self._death(index, f'died ({e})'))
      return None
    known = self._incarnations[index]
    if known is not None and known != incarnation and not self._died[index]:
      self._count_restart(index, self._death(
          index, 'came back in a new process (its process or node was '
          'lost)'))
    self._incarnations[index] = incarnation
    self._pids[index] = pid
    if not self._started[index]:
      logging.info('Ray actor %d (PID %s) delivered its first unroll.', index,
                   pid)
    self._started[index] = True
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
