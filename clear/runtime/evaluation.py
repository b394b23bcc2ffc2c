"""Evaluation: the tasks played with the current weights, or a checkpoint's.

  * `Evaluator`: plays a few episodes of *every* task of a sequence (or of a
    single env) with an acting policy; `write_eval_summaries` logs them as
    `eval/<task>/return`;
  * `PeriodicEvaluation`: a training run's evaluations (every
    `eval_interval_frames`, and at each task switch of a sequence) into its
    `clear.continual.history.EvalHistory`, and the continual-learning
    metrics written at the end;
  * test mode (`evaluate`, `write_test_results`, `record_episodes`): a run's
    newest readable checkpoint played for `--test_num_episodes` episodes, or
    recorded as a GIF or an MP4.
"""

import fcntl
import json
import logging
import os
import time
import zipfile
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tree

from clear import checkpoint as checkpoint_lib
from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.continual import history as history_lib
from clear.continual import metrics as continual_metrics
from clear.continual import schedule as schedule_lib
from clear.runtime import evaluation_envs
from clear.runtime import record as record_lib
from clear.runtime import run_config as run_config_lib
import envs
from envs import multitask


class TaskEvaluation(NamedTuple):
  """One task's evaluation.

  Attributes:
    returns: float64 `[num_episodes]`, one episode per env: the first
      episode each env finished (so short episodes are not favoured), or
      the partial return of an episode cut by `max_steps`.
    num_unfinished: how many of them `max_steps` cut.
    num_steps: agent steps taken per env.
  """
  returns: np.ndarray
  num_unfinished: int
  num_steps: int

  @property
  def mean_return(self) -> float:
    return float(np.mean(self.returns))

  @property
  def ci95_half_width(self) -> float:
    """`ci95_half_width` of `returns`: the evaluation's own noise."""
    return ci95_half_width(self.returns)


def ci95_half_width(returns) -> float:
  """Half the width of the normal 95% interval of the mean of `returns`
  (float `[N]`): 1.96 * sample std (ddof 1) / sqrt(N); 0 for one return."""
  returns = np.asarray(returns, np.float64)
  if len(returns) < 2:
    return 0.0
  return float(1.96 * returns.std(ddof=1) / np.sqrt(len(returns)))


class Evaluator:
  """Plays `num_episodes` episodes of every task of a sequence, together.

  Each distinct task has a batched env of `num_episodes` envs, built once
  and kept. An evaluation starts a fresh episode in every env of every task
  and steps them all together: one call of `policy.act` a step, on a batch
  of every task's envs still playing their first episode, in sequence
  order. An env stops once its first episode has ended (so short episodes
  are not favoured, and no step is spent past it), and a task's rows leave
  the batch once all its envs have stopped. The envs continue their seeded
  random streams (Atari no-op starts, gym initial states) from one
  evaluation to the next and the policy samples with its own seeded
  generator, one draw a step, so the evaluations of a run are
  deterministic given `seed`, the policy's seed and the weights.

  Args:
    env_name: the sequence name (or a single task's name).
    env_options: options for `envs.make` (as for training).
    policy: an acting `clear.algorithms.policy.Policy` for the sequence's spec
      (e.g. `registry.make_policy(algorithm, spec, agent_config,
      seed=...)`), used only by the evaluator.
    num_episodes: episodes (and envs) per task.
    seed: seed of the first env of each task (envs seed, seed + 1, ...).
    max_steps: agent steps per env and evaluation after which unfinished
      episodes are cut and count with their partial return (a stuck
      policy cannot hang the run); rounded up to a multiple of
      `unroll_length`. The default is Atari's episode cap (108,000 frames
      at 4 frames a step).
    unroll_length: the step cap's granularity (see `max_steps`).
    num_workers: 0 steps the envs in this process; N > 0 in N worker
      processes (`clear.runtime.evaluation_envs`), which play the same
      episodes, N envs at once.
  """

  def __init__(self, env_name: str, env_options: dict, policy,
               num_episodes: int = 10, seed: int = 0,
               max_steps: int = 27_000, unroll_length: int = 100,
               num_workers: int = 0):
    positive_int = schedule_lib.positive_int
    self._num_episodes = positive_int('Evaluator: num_episodes',
                                      num_episodes)
    max_steps = positive_int('Evaluator: max_steps', max_steps)
    unroll_length = min(max_steps, positive_int('Evaluator: unroll_length',
                                                unroll_length))
    if (isinstance(num_workers, bool) or not isinstance(num_workers, int) or
        num_workers < 0):
      raise ValueError(f'Evaluator: num_workers must be an int >= 0, got '
                       f'{num_workers!r}.')
    self._max_steps = -(-max_steps // unroll_length) * unroll_length
    self._policy = policy
    self._envs = evaluation_envs.make(env_name, env_options,
                                      self._num_episodes, seed, num_workers)
    for name, spec in zip(self._envs.tasks, self._envs.specs):
      if (spec.observation_spec != policy.spec.observation_spec or
          spec.action_spec != policy.spec.action_spec):
        self.close()
        raise ValueError(f'Evaluator: the policy was built for '
                         f'{policy.spec.name!r}, whose spec differs from '
                         f'{env_name!r} task {name!r}.')

  @property
  def task_names(self) -> List[str]:
    """The distinct tasks, in sequence order."""
    return self._envs.tasks

  def evaluate_tasks(self, weights=None,
                     on_step: Optional[Callable[[], None]] = None
                     ) -> Dict[str, TaskEvaluation]:
    """Evaluates every task (after loading `weights` when given), calling
    `on_step()` after each step of the batch."""
    if weights is not None:
      self._policy.set_weights(weights)
    names = self.task_names
    n = self._num_episodes
    # [K * n] rows: task k's envs at k * n ... (k + 1) * n - 1.
    env_output = _concatenate(self._envs.reset())
    prev_action = policy_lib.zero_agent_output(self._policy.spec,
                                               len(names) * n).action
    state = self._policy.initial_state(len(names) * n)
    returns = np.zeros([len(names), n], np.float32)
    finished = np.zeros([len(names), n], bool)
    num_steps = np.zeros([len(names)], np.int64)
    playing = list(range(len(names)))  # Tasks in the batch, in row order.
    steps = 0
    while playing and steps < self._max_steps:
      agent_output, state = self._policy.act(env_output, prev_action, state)
      prev_action = agent_output.action
      env_output = env_output._replace(
          reward=np.zeros_like(env_output.reward))
      rows = [(block * n + i, k, i) for block, k in enumerate(playing)
              for i in np.flatnonzero(~finished[k])]
      transitions = self._envs.step(
          [(k, i, {key: value[row] for key, value in prev_action.items()})
           for row, k, i in rows])
      for (row, k, i), transition in zip(rows, transitions):
        env_output.reward[row] = transition.reward
        returns[k, i] += np.float32(transition.reward)
        if transition.terminated or transition.truncated:
          finished[k, i] = True
        else:
          for key, value in env_output.observation.items():
            value[row] = transition.observation[key]
      steps += 1
      num_steps[playing] = steps
      if on_step is not None:
        on_step()
      done = [block for block, k in enumerate(playing) if finished[k].all()]
      if done:  # Whole tasks leave the batch.
        keep = np.concatenate([np.arange(block * n, (block + 1) * n)
                               for block in range(len(playing))
                               if block not in done] or
                              [np.zeros([0], np.int64)])
        take = lambda x: x[keep]
        env_output = tree.map_structure(take, env_output)
        prev_action = tree.map_structure(take, prev_action)
        state = tree.map_structure(take, state)
        playing = [k for block, k in enumerate(playing) if block not in done]
    results = {}
    for k, name in enumerate(names):
      unfinished = int((~finished[k]).sum())
      if unfinished:
        logging.warning('Evaluator: %d of %d episodes of %s were cut after '
                        '%d steps (max_steps); their partial returns count.',
                        unfinished, n, name, int(num_steps[k]))
      results[name] = TaskEvaluation(returns[k].astype(np.float64),
                                     unfinished, int(num_steps[k]))
    return results

  def close(self):
    self._envs.close()


def _concatenate(outputs):
  """`StepOutput`s of `[n, ...]` -> one of `[sum n, ...]` (new arrays)."""
  return tree.map_structure(lambda *x: np.concatenate(x), *outputs)


def write_eval_summaries(results: Dict[str, float], frames: int,
                         half_widths: Optional[Dict[str, float]] = None):
  """Writes `eval/<task>/return` per task and `eval/mean_return` (their
  mean) at step `frames` to the default `tf.summary` writer, and
  `eval/<task>/return_ci95` (`ci95_half_width` of its episodes) per task of
  `half_widths` when given."""
  for name, value in results.items():
    tf.summary.scalar(f'eval/{name}/return', float(value), step=int(frames))
  for name, value in (half_widths or {}).items():
    tf.summary.scalar(f'eval/{name}/{history_lib.CI95_SUFFIX}', float(value),
                      step=int(frames))
  if results:
    tf.summary.scalar('eval/mean_return', float(np.mean(list(
        results.values()))), step=int(frames))


class PeriodicEvaluation:
  """Periodic evaluation of every task with the learner's current weights.

  Evaluation uses its own acting policy and envs (seeded apart from the
  actors'), so it never changes what training sees. Where it is played is
  `evaluations`' choice (`clear.runtime.evaluation_process`): each
  evaluation is asked for with the weights of the frames it is due at, and
  recorded at those frames when it finishes. The final one is waited for;
  those unfinished when a run stops are played first when it resumes. A
  wait for an evaluation ends when the run is asked to stop.

  Args:
    run: the run (`clear.runtime.run_loop`'s state of one run): its config,
      policy, schedule, frames, `eval_history` and `eval_due`.
    evaluations: a `LearnerEvaluations` or an `EvaluationProcess`, made
      from `evaluator_config(run)`; closed by `finish`.
    stop_requested: says whether the run is asked to stop.
  """

  # Evaluations asked for and not finished, past which the learner waits.
  MAX_PENDING = 2

  def __init__(self, run, evaluations,
               stop_requested: Callable[[], bool] = lambda: False):
    self._run = run
    self._evaluations = evaluations
    self._stop_requested = stop_requested
    self._path = os.path.join(run.config.logdir, PENDING_EVALUATIONS_FILE)
    records = run.eval_history.records
    self._asked = records[-1].frames if records else None
    # (frames, weights) asked for and not yet recorded, oldest first.
    self._unrecorded = []
    self.seconds = 0.0  # Spent playing evaluations, this session.
    self.wait_seconds = 0.0  # Training waited for them, this session.
    if run.schedule is not None:
      schedule_lib.write_tasks_json(run.config.logdir, run.schedule)
    for frames, weights in read_pending_evaluations(
        self._path, after=self._asked, until=run.frames):
      self._request(frames, weights)
    if not self._unrecorded and os.path.exists(self._path):
      os.remove(self._path)  # All recorded, or past the restored frames.

  def maybe_evaluate(self, force: bool = False) -> bool:
    """Records the evaluations that finished, and asks for one if it is
    due (or `force`, for the final one: then waits for every one).

    Returns:
      False if a wait ended because the run is asked to stop (the due
      evaluation is then not asked for, or not all are recorded), else
      True.
    """
    run = self._run
    self._record(self._evaluations.results())
    if self._asked != run.frames and (force or run.eval_due(self._asked)):
      if self._evaluations.num_pending >= self.MAX_PENDING:
        self._wait(1)
        if self._evaluations.num_pending >= self.MAX_PENDING:
          return False
      self._request(run.frames, run.policy.evaluation_weights())
    if force:
      self._wait(self._evaluations.num_pending)
      return not self._evaluations.num_pending
    return True

  def _wait(self, count: int):
    """Records the finished evaluations, waiting until `count` have
    finished (or the run is asked to stop); the time a wait takes goes to
    `runtime/eval_wait_s`."""
    start = time.monotonic()
    finished = self._evaluations.results(
        wait=count, stop_requested=self._stop_requested)
    if count:
      self.wait_seconds += time.monotonic() - start
      tf.summary.scalar('runtime/eval_wait_s', self.wait_seconds,
                        step=self._run.frames)
    self._record(finished)

  def _request(self, frames, weights):
    self._evaluations.request(frames, weights)
    self._unrecorded.append((frames, weights))
    self._asked = frames

  def _record(self, finished):
    run = self._run
    for evaluation in finished:
      self._unrecorded = [(frames, weights) for frames, weights
                          in self._unrecorded if frames != evaluation.frames]
      self.seconds += evaluation.seconds
      tasks = evaluation.tasks
      results = {name: task.mean_return for name, task in tasks.items()}
      half_widths = {name: task.ci95_half_width
                     for name, task in tasks.items()}
      run.eval_history.append(evaluation.frames, results)
      write_eval_summaries(results, evaluation.frames, half_widths)
      tf.summary.scalar('runtime/eval_s', self.seconds,
                        step=evaluation.frames)
      logging.info('eval at %s frames (%.1f s): %s',
                   f'{evaluation.frames:,}', evaluation.seconds, ', '.join(
                       f'{name} {results[name]:.1f} ± '
                       f'{half_widths[name]:.1f}' for name in results))

  def finish(self):
    """Ends the evaluations and writes the continual-learning metrics of a
    task sequence. Those asked for and not recorded are written, with their
    weights, to `PENDING_EVALUATIONS_FILE`: the resumed run plays them
    first and records them at the frames they were asked at."""
    run = self._run
    self._evaluations.close()
    if self._unrecorded:
      try:
        write_pending_evaluations(self._path, self._unrecorded)
        logging.info('%d evaluation(s) not finished (at %s frames) are kept '
                     'in %s; the resumed run plays them first.',
                     len(self._unrecorded), ', '.join(
                         f'{frames:,}' for frames, _ in self._unrecorded),
                     self._path)
      except OSError as e:
        logging.warning('%d evaluation(s) not finished are lost: could not '
                        'write %s: %s.', len(self._unrecorded), self._path,
                        checkpoint_lib.write_failure(e)[0])
    elif os.path.exists(self._path):
      os.remove(self._path)
    if run.schedule is None or not len(run.eval_history):
      return
    metrics = continual_metrics.forgetting_metrics(run.eval_history,
                                                   run.schedule)
    path = os.path.join(run.config.logdir, 'continual_metrics.json')
    continual_metrics.write_metrics_json(path, metrics)
    logging.info('Continual-learning metrics written to %s.', path)


PENDING_EVALUATIONS_FILE = 'pending_evaluations.npz'


def write_pending_evaluations(path: str, pending):
  """Writes evaluations asked for and not recorded to `path` (atomically).

  Args:
    path: the `.npz` file (a `clear.snapshot`).
    pending: (frames, weights) pairs, weights a list of numpy arrays.

  Raises:
    OSError: the file could not be written (no partial file is left).
  """
  arrays = {'frames': np.array([frames for frames, _ in pending], np.int64)}
  for i, (_, weights) in enumerate(pending):
    arrays.update({f'weights/{i}/{j}': np.asarray(w)
                   for j, w in enumerate(weights)})
  snapshot.save(path, arrays)


def read_pending_evaluations(path: str, after: Optional[int],
                             until: int) -> List[tuple]:
  """The (frames, weights) pairs `write_pending_evaluations` wrote to
  `path`, oldest first, of those asked for after `after` frames (None:
  all) and at most `until` frames (the frames of the restored checkpoint:
  later ones belong to a checkpoint that was not kept). No file: none; an
  unreadable one is said so, and gives none."""
  if not os.path.exists(path):
    return []
  try:
    arrays = snapshot.load(path)
    pending = []
    for i, frames in enumerate(arrays['frames'].tolist()):
      prefix = f'weights/{i}/'
      count = sum(name.startswith(prefix) for name in arrays)
      pending.append((int(frames), [arrays[f'{prefix}{j}']
                                    for j in range(count)]))
  except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
    logging.warning('The evaluations not finished when the run last '
                    'stopped are lost: %s cannot be read (%s).', path, e)
    return []
  return [(frames, weights) for frames, weights in pending
          if (after is None or frames > after) and frames <= until]


def summarize_returns(returns) -> dict:
  """Mean, median, spread and the normal 95% interval of the mean."""
  returns = np.asarray(returns, np.float64)
  half_width = ci95_half_width(returns)
  return {
      'num_episodes': int(len(returns)), 'mean': float(returns.mean()),
      'median': float(np.median(returns)), 'std': float(returns.std()),
      'min': float(returns.min()), 'max': float(returns.max()),
      'ci95': [float(returns.mean() - half_width),
               float(returns.mean() + half_width)],
      'returns': returns.tolist(),
  }


TEST_RESULTS_FILE = 'test_results.json'


def evaluate(config: run_config_lib.RunConfig, num_episodes: int) -> dict:
  """Plays `num_episodes` with the newest readable checkpoint.

  Returns:
    Dict with the env, the checkpoint, the returns and their mean, median,
    std, min, max and the 95% interval of the mean (normal approximation);
    for a task sequence, one such summary per task under 'tasks'. See
    `write_test_results`.

  Raises:
    CheckpointError: no readable checkpoint, or one of another network.
  """
  if num_episodes < 1:
    raise ValueError(f'test_num_episodes must be >= 1, got {num_episodes}.')
  policy, path = restored_acting_policy(config)
  evaluator = Evaluator(
      config.env_name, config.env_options, policy,
      num_episodes=num_episodes, seed=config.seed + 1,
      max_steps=config.eval_max_steps, num_workers=config.eval_workers)
  try:
    results = evaluator.evaluate_tasks()
  finally:
    evaluator.close()
  summary = {'env': config.env_name, 'checkpoint': path}
  if multitask.is_sequence(config.env_name):
    summary['tasks'] = {name: summarize_returns(result.returns)
                        for name, result in results.items()}
  else:
    summary.update(summarize_returns(results[config.env_name].returns))
  return summary


def restored_acting_policy(config: run_config_lib.RunConfig):
  """The run's policy with the newest readable checkpoint's acting weights.

  Returns:
    (policy, checkpoint path).
  """
  policy = registry.make_policy(config.algorithm,
                                run_config_lib.env_spec(config),
                                  config.agent_config, seed=config.seed)
  path = checkpoint_lib.restore_part(
      os.path.join(config.logdir, 'checkpoints'),
      policy.acting_checkpointables())
  return policy, path


def record_episodes(config: run_config_lib.RunConfig,
                    path: str) -> List[record_lib.Recording]:
  """Plays one episode (seed `config.seed + 2`) with the newest readable
  checkpoint and writes it to `path`, a GIF or an MP4 of what the agent saw
  (`clear.runtime.record`); a task sequence, one episode of each distinct
  task, each to its own file (`record.task_paths`)."""
  policy, _ = restored_acting_policy(config)
  tasks = multitask.split_sequence(config.env_name)
  recordings = []
  for task, task_path in record_lib.task_paths(path, tasks):
    options = dict(config.env_options)
    if multitask.is_sequence(config.env_name):
      options['task'] = task
    env = envs.make(config.env_name, num_envs=1, seed=config.seed + 2,
                    **options)
    try:
      recordings.append(record_lib.record_episode(
          env, policy, task_path, max_steps=config.eval_max_steps))
    finally:
      env.close()
  return recordings


def write_test_results(logdir: str, summary: dict) -> str:
  """Adds `evaluate`'s summary, with the time, to the list of test runs in
  `logdir/test_results.json` (`{"runs": [...]}`, oldest first; a file
  holding a single summary instead of the list becomes the list's first
  entry). Test runs at the same time take turns (an OS lock on the logdir),
  and the file is replaced atomically (a temporary file, then a rename), so
  no result is lost or half-written. Returns the path.

  Raises:
    OSError: the file cannot be written.
  """
  out = os.path.join(logdir, TEST_RESULTS_FILE)
  entry = {'time': time.strftime('%Y-%m-%d %H:%M:%S'), **summary}
  directory = os.open(logdir, os.O_RDONLY)
  try:
    fcntl.flock(directory, fcntl.LOCK_EX)
    runs = read_test_results(logdir)
    tmp = f'{out}.{os.getpid()}.tmp'
    try:
      with open(tmp, 'w') as f:
        json.dump({'runs': runs + [entry]}, f, indent=2)
      os.replace(tmp, out)
    except BaseException:
      if os.path.exists(tmp):
        os.remove(tmp)
      raise
  finally:
    os.close(directory)  # Releases the lock.
  return out


def read_test_results(logdir: str) -> List[dict]:
  """The test runs recorded in `logdir/test_results.json`, oldest first
  ([] without the file; one entry for a file holding a single summary).

  Raises:
    OSError: the file cannot be read.
    ValueError: it is not a test results JSON.
  """
  path = os.path.join(logdir, TEST_RESULTS_FILE)
  if not os.path.exists(path):
    return []
  with open(path) as f:
    try:
      value = json.load(f)
    except ValueError as e:
      raise ValueError(f'{path} is not JSON ({e}); move it away.') from None
  if isinstance(value, dict) and isinstance(value.get('runs'), list):
    return value['runs']
  if isinstance(value, dict) and 'env' in value:
    return [value]  # A single summary: one test run.
  raise ValueError(f'{path} holds no test runs; move it away.')
