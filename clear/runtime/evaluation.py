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

import json
import logging
import os
from typing import Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from clear import checkpoint as checkpoint_lib
from clear.algorithms import registry
from clear.continual import history as history_lib
from clear.continual import metrics as continual_metrics
from clear.continual import schedule as schedule_lib
from clear.runtime import actor as actor_lib
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
  """Plays `num_episodes` episodes of every task of a sequence.

  One batched env of `num_episodes` envs per distinct task (built once,
  kept), each stepped by a `clear.runtime.actor.Actor` sharing `policy`. Every
  evaluation starts fresh episodes (`Actor.reset`) and takes the first
  episode of each env. The envs continue their seeded random streams
  (Atari no-op starts, gym initial states) from one evaluation to the next
  and the policy samples with its own seeded RNG, so the evaluations of a
  run are deterministic given `seed`, the policy's seed and the weights.

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
      policy cannot hang the run); rounded up to whole unrolls. The
      default is Atari's episode cap (108,000 frames at 4 frames a step).
    unroll_length: T, steps per `Actor.collect`.
  """

  def __init__(self, env_name: str, env_options: dict, policy,
               num_episodes: int = 10, seed: int = 0,
               max_steps: int = 27_000, unroll_length: int = 100):
    positive_int = schedule_lib.positive_int
    self._num_episodes = positive_int('Evaluator: num_episodes',
                                      num_episodes)
    self._max_steps = positive_int('Evaluator: max_steps', max_steps)
    unroll_length = positive_int('Evaluator: unroll_length', unroll_length)
    self._policy = policy
    names = multitask.split_sequence(env_name)
    self._actors = {}
    try:
      for name in schedule_lib.unique_names(names):
        options = dict(env_options)
        if len(names) > 1:
          options['task'] = names.index(name)
        env = envs.make(env_name, num_envs=self._num_episodes, seed=seed,
                        **options)
        if (env.spec.observation_spec != policy.spec.observation_spec or
            env.spec.action_spec != policy.spec.action_spec):
          env.close()
          raise ValueError(f'Evaluator: the policy was built for '
                           f'{policy.spec.name!r}, whose spec differs from '
                           f'{env_name!r} task {name!r}.')
        self._actors[name] = actor_lib.Actor(
            env, policy, min(unroll_length, self._max_steps))
    except BaseException:
      self.close()
      raise

  @property
  def task_names(self) -> List[str]:
    """The distinct tasks, in sequence order."""
    return list(self._actors)

  def evaluate_tasks(self, weights=None) -> Dict[str, TaskEvaluation]:
    """Evaluates every task (after loading `weights` when given)."""
    if weights is not None:
      self._policy.set_weights(weights)
    return {name: self._evaluate(name, actor)
            for name, actor in self._actors.items()}

  def _evaluate(self, name: str, actor) -> TaskEvaluation:
    actor.reset()
    n = self._num_episodes
    returns = np.zeros([n], np.float64)
    finished = np.zeros([n], bool)
    steps = 0
    last_return = np.zeros([n], np.float64)
    while not finished.all() and steps < self._max_steps:
      outputs = actor.collect().unroll.env_outputs
      done = outputs.done[1:]  # [T, B]; step 0 repeats the last unroll's.
      episode_return = outputs.info.episode_return[1:]
      for t in range(done.shape[0]):
        first = done[t] & ~finished
        returns[first] = episode_return[t, first]
        finished |= first
      last_return = episode_return[-1]
      steps += done.shape[0]
    unfinished = ~finished
    returns[unfinished] = last_return[unfinished]
    if unfinished.any():
      logging.warning('Evaluator: %d of %d episodes of %s were cut after '
                      '%d steps (max_steps); their partial returns count.',
                      int(unfinished.sum()), n, name, steps)
    return TaskEvaluation(returns, int(unfinished.sum()), steps)

  def close(self):
    for actor in self._actors.values():
      actor.close()
    self._actors = {}


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
  actors'), so it never changes what training sees.

  Args:
    run: the run (`clear.runtime.run_loop`'s state of one run): its config,
      policy, schedule, frames, `eval_history` and `eval_due`.
  """

  def __init__(self, run):
    config = run.config
    self._run = run
    policy = registry.make_policy(config.algorithm, run.policy.spec,
                                    config.agent_config,
                                    seed=config.seed + 1)
    self._evaluator = Evaluator(
        config.env_name, config.env_options, policy,
        num_episodes=config.eval_episodes, seed=config.seed + 104_729,
        max_steps=config.eval_max_steps)
    if run.schedule is not None:
      schedule_lib.write_tasks_json(config.logdir, run.schedule)

  def maybe_evaluate(self, force: bool = False):
    run = self._run
    done = len(run.eval_history) and (
        run.eval_history.records[-1].frames == run.frames)
    if done or not (force or run.eval_due()):
      return
    tasks = self._evaluator.evaluate_tasks(run.policy.evaluation_weights())
    results = {name: task.mean_return for name, task in tasks.items()}
    half_widths = {name: task.ci95_half_width for name, task in tasks.items()}
    run.eval_history.append(run.frames, results)
    write_eval_summaries(results, run.frames, half_widths)
    logging.info('eval at %s frames: %s', f'{run.frames:,}', ', '.join(
        f'{name} {results[name]:.1f} ± {half_widths[name]:.1f}'
        for name in results))

  def finish(self):
    """Writes the continual-learning metrics of a task sequence."""
    run = self._run
    self._evaluator.close()
    if run.schedule is None or not len(run.eval_history):
      return
    metrics = continual_metrics.forgetting_metrics(run.eval_history,
                                                   run.schedule)
    path = os.path.join(run.config.logdir, 'continual_metrics.json')
    continual_metrics.write_metrics_json(path, metrics)
    logging.info('Continual-learning metrics written to %s.', path)


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
      max_steps=config.eval_max_steps)
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
  """Writes `evaluate`'s summary to `logdir/test_results.json` (atomically:
  a temporary file, then a rename); returns the path.

  Raises:
    OSError: the file cannot be written.
  """
  out = os.path.join(logdir, TEST_RESULTS_FILE)
  with open(out + '.tmp', 'w') as f:
    json.dump(summary, f, indent=2)
  os.replace(out + '.tmp', out)
  return out
