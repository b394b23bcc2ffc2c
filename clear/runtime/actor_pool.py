"""Actor pools: many actors feeding one learner, locally or on Ray.

Every pool runs the same `actor_worker.ActorWorker` (an env per task plus
an acting copy of the policy) and offers the learner the same four calls:
`publish(weights, num_updates)` after each update, `get(timeout)` for the next
`Trajectories`, `switch_task(task, seed)` when a task sequence moves on, and
`close()`.

A switch keeps every actor's process, TensorFlow runtime and policy: each
worker switches in place (`ActorWorker.switch_task`). Unrolls of the task
before, still on their way, are dropped.

- `local_actors.LocalActorPool`: one process per actor on this machine,
  fed weights through shared memory; a dead actor is restarted, a hung one
  (stopped, deadlocked, swapped out) reported and replaced.
- `InlineActorPool`: the actors step in the learner's own process, taking
  turns with the updates. No parallelism, but one TensorFlow runtime (less
  memory) and a fixed order of acting and learning, so a seeded run is
  reproducible step for step.
- `ray_actors.RayActorPool`: the actors are Ray actors (an existing engine;
  point `address` at a cluster), the learner stays in the driver.
"""

from typing import Optional

import numpy as np

from clear import snapshot
from clear.runtime import actor as actor_lib
from clear.runtime import actor_worker
from clear.runtime import local_actors
from clear.runtime import ray_actors

BACKENDS = ('local', 'inline', 'ray')


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

  def publish(self, weights, num_updates):
    self._weights, self._version = weights, num_updates

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


def make_pool(backend: str, config: actor_worker.ActorPoolConfig,
              weight_shapes, ray_address: Optional[str] = None,
              ray_actor_resource: str = ''):
  if backend == 'local':
    return local_actors.LocalActorPool(config, weight_shapes)
  if backend == 'inline':
    return InlineActorPool(config)
  if backend == 'ray':
    return ray_actors.RayActorPool(config, ray_address, ray_actor_resource)
  raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}.')
