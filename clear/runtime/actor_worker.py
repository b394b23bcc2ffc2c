"""The unit every actor pool runs: an env per task plus an acting policy.

`ActorWorker` steps a batched env of the task its pool plays with a copy of
the policy, cutting unrolls (`clear.runtime.actor.Actor`). When a task
sequence moves on, `switch_task` makes it play the next task in place,
exactly as a worker built for that task with that seed would
(`switched_config`); `clear.runtime.actor_pool` says how each pool tells
its workers.
"""

from typing import NamedTuple, Tuple

import numpy as np

from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.runtime import actor as actor_lib


class ActorPoolConfig(NamedTuple):
  """How to build each actor; picklable, so child processes rebuild them.

  Attributes:
    env_name: `envs.make` name.
    env_options: dict of `envs.make` options.
    envs_per_actor: environments each actor steps in one batch.
    algorithm: `registry.ALGORITHMS` key.
    agent_config: `policy.AgentConfig`.
    unroll_length: T.
    num_actors: actor count.
    seed: base seed; actor i seeds its envs and policy from it.
    max_restarts: restarts of dead actors tolerated before the run fails.
    hang_timeout_s: seconds of silence after which an actor is replaced.
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
  hang_timeout_s: float = 300.0


class ActorFailure(RuntimeError):
  """Actors keep dying or hanging beyond the allowed number of restarts, or
  an environment failed for good (e.g. too many consecutive crashes)."""


# An actor starting up (a new process importing TensorFlow, building its
# envs: an SC2 launch takes minutes) counts as hung only after this long,
# or the hang timeout if that is longer.
STARTUP_TIMEOUT_S = 600.0


def hang_limit(config: ActorPoolConfig, started: bool) -> Tuple[float, str]:
  """(seconds, name for messages) of silence after which an actor counts
  as hung: `config.hang_timeout_s`, or for one not yet `started`, at least
  `STARTUP_TIMEOUT_S`."""
  if started or config.hang_timeout_s >= STARTUP_TIMEOUT_S:
    timeout = config.hang_timeout_s
    return timeout, f'--actor_timeout_s={timeout:g}'
  return STARTUP_TIMEOUT_S, f'the {STARTUP_TIMEOUT_S:g} s allowed for a start'


def actor_seed(config: ActorPoolConfig, actor_id: int, generation: int):
  return config.seed + 1000 * (actor_id + 1) + 100_000 * generation


def task_seed(seed: int, task: int) -> int:
  """The seed of task `task`'s envs in a worker seeded with `seed` that
  builds them at its start: drawn from both, so no two tasks (a game
  named twice, say) and no two workers share one."""
  return int(np.random.SeedSequence([seed, task]).generate_state(1)[0])


class TaskSwitch(NamedTuple):
  """The task the actors play: the `number`-th switch of the pool (0: the
  task it was built with), the task's index in the sequence (the `task`
  env option) and the pool's base seed for it."""
  number: int
  task: int
  seed: int


def switched_config(config: ActorPoolConfig,
                    switch: TaskSwitch) -> ActorPoolConfig:
  """`config` as a pool built for `switch`'s task would have it."""
  return config._replace(env_options={**config.env_options,
                                      'task': switch.task},
                         seed=switch.seed)


class ActorWorker:
  """An env per task plus an acting policy copy; the unit every pool runs.

  The envs of every task of a sequence are built when the worker starts
  (building Atari envs costs about 0.1 s each, which a switch would
  otherwise pay on a task's first visit): the active task's seeded with
  `actor_seed`, each other task's with a seed drawn from it and the task's
  index (`task_seed`). A visit starts fresh episodes in them, their random
  streams going on from where the visit before left them (resetting costs
  a few milliseconds). Sequences whose envs are game processes of their
  own (sc2) build a task's envs on its first visit instead, seeded with
  `actor_seed` of the pool's seed at that visit.
  """

  def __init__(self, config: ActorPoolConfig, actor_id: int,
               generation: int = 0):
    self._config = config
    self._actor_id = actor_id
    self._generation = generation
    self.switch_number = 0
    self._envs = {}  # Task index -> its batched env.
    seed = actor_seed(config, actor_id, generation)
    env = self._make_env(config, seed)
    try:
      self._build_other_tasks(seed)
      policy = registry.make_policy(config.algorithm, env.spec,
                                      config.agent_config, seed=seed)
    except BaseException:
      self.close()
      raise
    self.actor = actor_lib.Actor(env, policy, config.unroll_length, actor_id)

  def _build_other_tasks(self, seed: int):
    """Builds the envs of every task but the active one, when the
    sequence's envs are held from the start."""
    import envs  # pylint: disable=g-import-not-at-top
    name = self._config.env_name
    if not (envs.multitask.is_sequence(name) and
            envs.multitask.held_from_the_start(name)):
      return
    for task in range(len(envs.multitask.split_sequence(name))):
      if task not in self._envs:
        self._make_env(switched_config(self._config, TaskSwitch(0, task, 0)),
                       task_seed(seed, task))

  def _make_env(self, config: ActorPoolConfig, seed: int):
    import envs  # pylint: disable=g-import-not-at-top
    env = envs.make(config.env_name, num_envs=config.envs_per_actor,
                    seed=seed, **config.env_options)
    self._envs[config.env_options.get('task', 0)] = env
    return env

  def switch_task(self, switch: TaskSwitch):
    """Plays `switch`'s task from now on: its envs (built now on a first
    visit), the sampling seed of a worker built for it, fresh episodes and
    a fresh core state. The weights stay; the next `collect` loads the
    newest published ones."""
    config = switched_config(self._config, switch)
    seed = actor_seed(config, self._actor_id, self._generation)
    env = self._envs.get(switch.task)
    if env is None:
      env = self._make_env(config, seed)
    self.actor.use_env(env, seed)
    self._config = config
    self.switch_number = switch.number

  def collect(self, weights=None, version=-1) -> actor_lib.Trajectories:
    if weights is not None and version > self.actor.weights_version:
      self.actor.set_weights(weights, version)
    return self.actor.collect()

  def get_state(self) -> snapshot.Arrays:
    """The actor's state (`Actor.get_state`) and that of the envs it holds
    for the other tasks, so that a resumed worker goes on as this one would.

    Raises:
      envs.SnapshotUnsupported: an env cannot save its state.
    """
    state = self.actor.get_state()
    active = self._config.env_options.get('task', 0)
    for task, env in self._envs.items():
      if task != active:
        state.update(snapshot.prefixed(f'held/task{task}', env.get_state()))
    return state

  def set_state(self, state: snapshot.Arrays):
    """Continues from `get_state` of a worker of the same task and config
    (the envs of the other tasks it held are built and restored)."""
    self.actor.set_state(state)
    held = sorted({int(key.split('/')[1][len('task'):]) for key in state
                   if key.startswith('held/')})
    for task in held:
      env = self._envs.get(task)
      if env is None:
        config = switched_config(self._config, TaskSwitch(0, task, 0))
        env = self._make_env(config, actor_seed(self._config, self._actor_id,
                                                self._generation))
      env.set_state(snapshot.subset(f'held/task{task}', state))

  def close(self):
    for env in self._envs.values():
      env.close()
    self._envs = {}
