"""The envs an `evaluation.Evaluator` plays, stepped in its own process or
in worker processes.

Every distinct task of the sequence has `num_episodes` envs, env i seeded
`seed + i` as `envs.make` seeds a batch. `make` builds one of two kinds with
the same calls:

- `tasks`, `specs`: the distinct task names in sequence order, and the
  spec of each one's envs;
- `reset()`: starts a fresh episode in every env; one `[num_episodes, ...]`
  `StepOutput` a task;
- `step(requests)`: steps env i of task k with `action` for each
  `(k, i, action)` of `requests` (each env at most once) and returns their
  `Transition`s in that order;
- `close()`.

`LocalEnvs` steps the envs one after another in the calling process.
`WorkerEnvs` splits each task's envs into contiguous blocks, one a worker
process, and sends a step's requests to every worker before reading any
reply, so the workers step their envs in parallel while the caller waits.
The ALE holds Python's GIL while it emulates, so threads would not run two
emulators at once; processes do. The envs are the same envs with the same
seeds either way, so an evaluation's returns do not depend on the kind.
Only actions, rewards, ends and observations cross the sockets (an Atari
observation is 28 KB).

Workers are plain subprocesses (an evaluation process is a daemonic
`multiprocessing` process, which may not start `multiprocessing` children)
without TensorFlow, in a session of their own so that a Ctrl-C at the
terminal reaches only their owner. They inherit its CPU priority (Linux
keeps a process's scheduling class and nice value across fork and exec),
and each exits when its socket closes, so they end with their owner however
it ends.
"""

from multiprocessing import connection as connection_lib
import signal
import socket
import subprocess
import sys
from typing import Dict, List, Sequence, Tuple

import numpy as np

from clear import types
from clear.continual import schedule as schedule_lib
import envs
from envs import multitask
from envs import single

# Seconds `WorkerEnvs.close` waits for a worker to exit before killing it.
CLOSE_TIMEOUT_S = 10.0


class WorkerError(RuntimeError):
  """A worker process died, or failed to build its envs with an error that
  does not pickle (one that does is raised as it is)."""


def _build(env_name: str, env_options: dict, num_envs: int,
           seed: int) -> Dict[str, object]:
  """`num_envs` envs of each distinct task of `env_name` (seeds seed,
  seed + 1, ...), each started once; by task name, in sequence order."""
  names = multitask.split_sequence(env_name)
  built = {}
  try:
    for name in schedule_lib.unique_names(names):
      options = dict(env_options)
      if len(names) > 1:
        options['task'] = names.index(name)
      built[name] = envs.make(env_name, num_envs=num_envs, seed=seed,
                              **options)
      # Started once here; every evaluation then starts fresh episodes
      # (each env's second and later ones).
      built[name].reset()
  except BaseException:
    for env in built.values():
      env.close()
    raise
  return built


class LocalEnvs:
  """Every task's envs, stepped in this process."""

  def __init__(self, env_name: str, env_options: dict, num_episodes: int,
               seed: int):
    built = _build(env_name, env_options, num_episodes, seed)
    self._tasks = list(built)
    self._batched = list(built.values())  # Task k's envs at position k.

  @property
  def tasks(self) -> List[str]:
    return list(self._tasks)

  @property
  def specs(self) -> List[types.EnvSpec]:
    return [env.spec for env in self._batched]

  def reset(self) -> List[types.StepOutput]:
    return [env.reset() for env in self._batched]

  def step(self, requests: Sequence[Tuple[int, int, dict]]
           ) -> List[single.Transition]:
    return [self._batched[k].envs[i].step(action)
            for k, i, action in requests]

  def close(self):
    for env in self._batched:
      env.close()
    self._batched = []


def _stack(transitions: Sequence[single.Transition]):
  """Transitions -> (rewards, terminated, truncated, frames, observations
  stacked by key), copies that outlive the envs' buffers."""
  observations = {key: np.stack([t.observation[key] for t in transitions])
                  for key in transitions[0].observation}
  return (np.array([t.reward for t in transitions], np.float64),
          np.array([t.terminated for t in transitions], bool),
          np.array([t.truncated for t in transitions], bool),
          np.array([t.frames for t in transitions], np.int64),
          observations)


def _unstack(stacked) -> List[single.Transition]:
  rewards, terminated, truncated, frames, observations = stacked
  return [single.Transition(
      {key: value[j] for key, value in observations.items()},
      float(rewards[j]), bool(terminated[j]), bool(truncated[j]),
      int(frames[j])) for j in range(len(rewards))]


# A worker process's start: a connection on the socket whose descriptor is
# its argument, the owner's module path, then `_worker`'s arguments.
_BOOTSTRAP = """
import sys
from multiprocessing import connection
owner = connection.Connection(int(sys.argv[1]))
path, args = owner.recv()
sys.path[:] = path
from clear.runtime import evaluation_envs
evaluation_envs._worker(*args, owner)
"""


def _worker(env_name: str, env_options: dict, num_envs: int, seed: int,
            connection):
  """Body of a worker process: builds its block of every task's envs, then
  resets and steps them as asked until its socket closes or says None."""
  signal.signal(signal.SIGINT, signal.SIG_IGN)  # Its owner decides.
  try:
    built = list(_build(env_name, env_options, num_envs, seed).values())
  except Exception as e:  # pylint: disable=broad-except
    try:  # The error itself (a bad option is a ValueError), if it pickles.
      connection.send(('error', e))
    except Exception:  # pylint: disable=broad-except
      connection.send(('error', WorkerError(f'{type(e).__name__}: {e}')))
    return
  try:
    connection.send(('ready', [env.spec for env in built]))
    while True:
      message = connection.recv()
      if message is None:
        break
      if message == 'reset':
        connection.send([env.reset() for env in built])
      else:
        connection.send(_stack([built[k].envs[i].step(action)
                                for k, i, action in message]))
  except (EOFError, OSError):
    pass  # The owner is gone.
  finally:
    for env in built:
      env.close()


class WorkerEnvs:
  """Every task's envs, split over `num_workers` worker processes."""

  def __init__(self, env_name: str, env_options: dict, num_episodes: int,
               seed: int, num_workers: int):
    num_workers = min(int(num_workers), num_episodes)
    if num_workers < 1:
      raise ValueError(f'WorkerEnvs: num_workers must be >= 1, got '
                       f'{num_workers}.')
    self._tasks = schedule_lib.unique_names(
        multitask.split_sequence(env_name))
    blocks = np.array_split(np.arange(num_episodes), num_workers)
    self._starts = [int(block[0]) for block in blocks]
    # Env i of every task lives in worker `self._owner[i]`, at row
    # i - self._starts[worker] of its block.
    self._owner = np.concatenate([np.full(len(block), w)
                                  for w, block in enumerate(blocks)])
    self._connections, self._processes = [], []
    try:
      for block in blocks:
        ours, theirs = socket.socketpair()
        try:
          self._processes.append(subprocess.Popen(
              [sys.executable, '-c', _BOOTSTRAP, str(theirs.fileno())],
              pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
              start_new_session=True))
        except BaseException:
          ours.close()
          raise
        finally:
          theirs.close()
        self._connections.append(connection_lib.Connection(ours.detach()))
        self._connections[-1].send(
            (list(sys.path), (env_name, env_options, len(block),
                              seed + int(block[0]))))
      specs = []
      for w in range(num_workers):
        kind, payload = self._receive(w)
        if kind == 'error':
          raise payload
        specs.append(payload)
      self._specs = specs[0]
    except BaseException:
      self.close()
      raise

  @property
  def tasks(self) -> List[str]:
    return list(self._tasks)

  @property
  def specs(self) -> List[types.EnvSpec]:
    return list(self._specs)

  @property
  def pids(self) -> List[int]:
    return [process.pid for process in self._processes]

  def _receive(self, w: int):
    try:
      return self._connections[w].recv()
    except (EOFError, OSError) as e:
      process = self._processes[w]
      try:
        process.wait(1.0)
      except subprocess.TimeoutExpired:
        pass
      raise WorkerError(f'Evaluation env worker {w} (pid {process.pid}) '
                        f'died (exit code {process.returncode}).') from e

  def _send(self, w: int, message):
    try:
      self._connections[w].send(message)
    except OSError as e:
      raise WorkerError(f'Evaluation env worker {w} (pid '
                        f'{self._processes[w].pid}) died.') from e

  def reset(self) -> List[types.StepOutput]:
    for w in range(len(self._processes)):
      self._send(w, 'reset')
    blocks = [self._receive(w) for w in range(len(self._processes))]
    return [_merge(list(outputs)) for outputs in zip(*blocks)]

  def step(self, requests: Sequence[Tuple[int, int, dict]]
           ) -> List[single.Transition]:
    by_worker = [[] for _ in self._processes]
    where = []  # (worker, position in its reply) of each request.
    for k, i, action in requests:
      w = int(self._owner[i])
      where.append((w, len(by_worker[w])))
      by_worker[w].append((k, i - self._starts[w], action))
    asked = [w for w, batch in enumerate(by_worker) if batch]
    for w in asked:
      self._send(w, by_worker[w])
    replies = {w: _unstack(self._receive(w)) for w in asked}
    return [replies[w][j] for w, j in where]

  def close(self):
    for connection in self._connections:
      try:
        connection.send(None)
      except OSError:
        pass
    for process in self._processes:
      try:
        process.wait(CLOSE_TIMEOUT_S)
      except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for connection in self._connections:
      connection.close()
    self._connections, self._processes = [], []


def _merge(parts):
  """Per-worker values of one `StepOutput` field -> the whole batch's:
  arrays concatenated, dicts (observations, infos) key by key."""
  if isinstance(parts[0], dict):
    return {key: _merge([part[key] for part in parts]) for key in parts[0]}
  if hasattr(parts[0], '_fields'):
    return type(parts[0])(*(_merge(list(field)) for field in zip(*parts)))
  return np.concatenate(parts)


def make(env_name: str, env_options: dict, num_episodes: int, seed: int,
         num_workers: int = 0):
  """`LocalEnvs` for `num_workers` 0, else `WorkerEnvs` over that many
  worker processes (at most one an episode)."""
  if num_workers:
    return WorkerEnvs(env_name, env_options, num_episodes, seed, num_workers)
  return LocalEnvs(env_name, env_options, num_episodes, seed)
