"""The training run: actors feed unrolls, replay mixes them, the learner learns.

Phases, in order, recorded in the checkpoint so a resumed run continues in
the right one:
  0 `prefill`: fresh unrolls only fill the replay buffer (when replay is on
    and `replay_prefill_unrolls` > 0); no update.
  1 `critic`: critic-only updates until `num_critic_pretrain_frames`.
  2 `main`: IMPALA-CLEAR updates until `total_environment_frames`.

Everything the run writes lives under `logdir`: TensorBoard event files,
`checkpoints/`, `run.json` and, in test mode, `test_results.json`.
"""

import collections
import glob
import json
import logging
import os
import shutil
import time
from typing import Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tree

from clear import actor as actor_lib
from clear import actor_pool as pool_lib
from clear import checkpoint as checkpoint_lib
from clear import learner as learner_lib
from clear import policy as policy_lib
from clear import progress
from clear import replay as replay_lib

PHASES = ('prefill', 'critic', 'main')
PREFILL, CRITIC, MAIN = range(3)


class RunConfig(NamedTuple):
  """Everything a run needs besides the learner's hyperparameters.

  Attributes:
    env_name, env_options: what `envs.make` builds.
    algorithm: a `policy.POLICIES` key.
    agent_config: `policy.AgentConfig`.
    learner_config: `learner.LearnerConfig` (its num_replay is the replayed
      share of each batch).
    logdir: where everything is written.
    seed: base seed.
    num_actors, envs_per_actor: actor layout.
    replay_buffer_size: capacity in unrolls.
    replay_sampling: 'reservoir' or 'fifo'.
    replay_storage: 'memory' or 'memmap' (under logdir/replay_memmap).
    replay_prefill_unrolls: unrolls put in replay before the first update.
    num_critic_pretrain_frames: frames of critic pretraining.
    backend: 'local', 'inline' or 'ray'; ray_address: a Ray cluster, or ''
      for a local Ray.
    checkpoint_interval_s, log_interval_s: periods of those writes.
    max_actor_restarts: dead-actor restarts before the run fails.
    allow_empty_replay_on_resume: resume even when the checkpoint's replay
      contents are missing, with an empty buffer (logged as a warning).
    stop_on_nonfinite: stop the run at the first update skipped for
      non-finite numbers (by default such updates are skipped and counted).
  """
  env_name: str
  env_options: dict
  algorithm: str
  agent_config: policy_lib.AgentConfig
  learner_config: learner_lib.LearnerConfig
  logdir: str
  seed: int = 0
  num_actors: int = 1
  envs_per_actor: int = 16
  replay_buffer_size: int = 10000
  replay_sampling: str = 'reservoir'
  replay_storage: str = 'memory'
  replay_prefill_unrolls: int = 0
  num_critic_pretrain_frames: int = 0
  backend: str = 'local'
  ray_address: str = ''
  checkpoint_interval_s: float = 600.0
  log_interval_s: float = 10.0
  max_actor_restarts: int = 20
  allow_empty_replay_on_resume: bool = False
  stop_on_nonfinite: bool = False


class NonFiniteUpdate(RuntimeError):
  """A batch produced a non-finite loss or gradient (run asked to stop)."""


class RunResult(NamedTuple):
  """What `train` reports when it returns."""
  num_env_frames: int
  num_steps: int
  phase: str
  mean_return: float
  num_episodes: int
  wall_time_s: float
  first_update_s: float
  stopped_early: bool


def env_spec(config: RunConfig):
  """The env's spec, from a throwaway single env."""
  import envs  # pylint: disable=g-import-not-at-top
  env = envs.make(config.env_name, num_envs=1, seed=config.seed,
                  **config.env_options)
  try:
    return env.spec
  finally:
    env.close()


def run_identity(config: RunConfig):
  """What a checkpoint must have been made for to be resumed by `config`."""
  return {'env': config.env_name, 'algorithm': config.algorithm,
          'network': config.agent_config.network,
          'core_size': config.agent_config.core_size,
          'separate_critic': config.agent_config.separate_critic,
          'env_options': {k: config.env_options[k]
                          for k in sorted(config.env_options)}}


def split_unrolls(unroll):
  """A time-major `[T + 1, B]` unroll batch -> B batch-major items."""
  batch_size = np.shape(unroll.env_outputs.reward)[1]
  major = replay_lib.swap_time_and_batch(unroll)  # [B, T + 1, ...]
  return [tree.map_structure(lambda x, i=i: x[i], major)
          for i in range(batch_size)]


class _Run:
  """The state of one training run (see `train`)."""

  def __init__(self, config: RunConfig):
    self.config = config
    lc = config.learner_config
    self.num_replay = lc.num_replay
    self.num_fresh = lc.batch_size - lc.num_replay
    spec = env_spec(config)
    checkpoint_lib.check_run_identity(config.logdir, run_identity(config))
    self.policy = policy_lib.make_policy(config.algorithm, spec,
                                         config.agent_config, lc,
                                         seed=config.seed)
    self.phase = tf.Variable(PREFILL, dtype=tf.int64, trainable=False,
                             name='phase')
    self.checkpointer = checkpoint_lib.Checkpointer(
        os.path.join(config.logdir, 'checkpoints'),
        {**self.policy.checkpointables(), 'phase': self.phase})
    self.restored = self.checkpointer.restore_latest()
    self.buffer = None
    if self.num_replay or config.replay_prefill_unrolls:
      self.buffer = replay_lib.ReplayBuffer(
          config.replay_buffer_size, config.replay_sampling,
          seed=config.seed, storage=config.replay_storage,
          directory=os.path.join(config.logdir, 'replay_memmap'))
      if self.restored:
        self._restore_replay()
    self._advance_phase()
    self.version = self.policy.num_updates
    self.episodes = progress.EpisodeStats()
    self.lags = collections.deque(maxlen=100)
    self.env_restarts = {}  # Actor id -> its cumulative env relaunches.
    self.pending = collections.deque()

  def _replay_dir(self, number):
    return os.path.join(self.checkpointer.directory, f'replay-{number}')

  def _restore_replay(self):
    """Loads the replay saved with the restored checkpoint.

    Raises:
      CheckpointError: the contents are missing or unreadable, unless the
        run allows starting with an empty buffer.
    """
    directory = self._replay_dir(
        checkpoint_lib.checkpoint_number(self.restored))
    template = split_unrolls(policy_lib.example_batch(
        self.policy, self.config.learner_config.unroll_length, 1))[0]
    try:
      self.buffer.restore(directory, template)
    except (OSError, ValueError, KeyError) as e:
      if not self.config.allow_empty_replay_on_resume:
        raise checkpoint_lib.CheckpointError(
            f'The replay buffer saved with {self.restored} cannot be read '
            f'({type(e).__name__}: {e}). Pass '
            '--allow_empty_replay_on_resume to resume with an empty buffer.'
        ) from e
      logging.warning('Resuming with an EMPTY replay buffer (%s: %s); it '
                      'refills from fresh unrolls.', type(e).__name__, e)
      return
    logging.info('Restored %d replayed unrolls (%d seen) from %s.',
                 len(self.buffer), self.buffer.num_seen, directory)

  def save(self):
    """Writes the replay (if any), then the checkpoint that points to it.

    The replay folder is complete under its final name before the
    checkpoint index moves, so the latest checkpoint always has its replay.
    """
    number = self.checkpointer.next_number
    if self.buffer is not None:
      final = self._replay_dir(number)
      partial = final + '.partial'
      for stale in (partial, final):
        shutil.rmtree(stale, ignore_errors=True)
      self.buffer.save(partial)
      os.replace(partial, final)
    self.checkpointer.save()
    kept = set(self.checkpointer.kept_numbers)
    for path in glob.glob(os.path.join(self.checkpointer.directory,
                                       'replay-*')):
      suffix = path.rsplit('-', 1)[1]
      if not suffix.isdigit() or int(suffix) not in kept:
        shutil.rmtree(path, ignore_errors=True)

  @property
  def frames(self) -> int:
    return self.policy.num_env_frames

  @property
  def phase_name(self) -> str:
    return PHASES[int(self.phase.numpy())]

  def _advance_phase(self):
    """Moves past phases whose goals are met."""
    stored = len(self.buffer) if self.buffer is not None else 0
    if self.phase.numpy() == PREFILL and (
        stored >= self.config.replay_prefill_unrolls):
      self.phase.assign(CRITIC)
    if self.phase.numpy() == CRITIC and (
        self.frames >= self.config.num_critic_pretrain_frames):
      self.phase.assign(MAIN)

  def accept(self, trajectories):
    self.episodes.add(trajectories.episodes)
    self.lags.append(self.version - trajectories.weights_version)
    self.env_restarts[trajectories.actor_id] = trajectories.env_restarts
    self.pending.extend(split_unrolls(trajectories.unroll))
    return trajectories.episodes

  def ready(self) -> bool:
    if self.phase.numpy() == PREFILL:
      return bool(self.pending)
    if self.num_replay and not len(self.buffer):
      # Nothing to replay yet: the first fresh unrolls seed the buffer.
      return bool(self.pending)
    return len(self.pending) >= self.num_fresh

  def update(self):
    """Consumes pending unrolls for one phase-dependent step.

    Returns:
      The learner's stats, or None when the unrolls only filled replay.
    """
    lc = self.config.learner_config
    if self.phase.numpy() == PREFILL or (
        self.num_replay and len(self.buffer) == 0):
      item = self.pending.popleft()
      self.buffer.insert(item)
      frames = learner_lib.frames_in_batch(
          replay_lib.swap_time_and_batch(actor_lib.stack_nests([item])), 0,
          lc)
      self.policy.add_env_frames(int(frames))
      self._advance_phase()
      return None
    fresh = actor_lib.stack_nests([self.pending.popleft()
                                   for _ in range(self.num_fresh)])
    batch = replay_lib.assemble_batch(self.buffer, fresh, self.num_fresh,
                                      self.num_replay)
    if self.phase.numpy() == CRITIC:
      stats = self.policy.learn_critic(batch)
    else:
      stats = self.policy.learn(batch)
    self.version += 1
    self._advance_phase()
    return stats


def write_episode_summaries(env_name, episodes, frames):
  for episode in episodes:
    tf.summary.scalar(f'episode/{env_name}/return', episode.episode_return,
                      step=frames)
    tf.summary.scalar(f'episode/{env_name}/length', episode.episode_step,
                      step=frames)


def train(config: RunConfig,
          stop_requested: Callable[[], bool] = lambda: False,
          max_updates: Optional[int] = None) -> RunResult:
  """Trains until `total_environment_frames`, a stop request or max_updates.

  Writes a checkpoint every `checkpoint_interval_s` and at the end (also
  when stopped early), so running the same config again resumes.
  """
  start = time.monotonic()
  os.makedirs(config.logdir, exist_ok=True)
  run = _Run(config)
  lc = config.learner_config
  total = lc.total_environment_frames
  if run.restored:
    logging.info('Resuming at %d frames, %d updates, phase %s.', run.frames,
                 run.version, run.phase_name)
  pool_config = pool_lib.ActorPoolConfig(
      env_name=config.env_name, env_options=config.env_options,
      envs_per_actor=config.envs_per_actor, algorithm=config.algorithm,
      agent_config=config.agent_config, unroll_length=lc.unroll_length,
      num_actors=config.num_actors, seed=config.seed + 7919 * run.version,
      max_restarts=config.max_actor_restarts)
  weights = run.policy.get_weights()
  pool = pool_lib.make_pool(config.backend, pool_config,
                            [w.shape for w in weights],
                            config.ray_address or None)
  writer = tf.summary.create_file_writer(config.logdir)
  with writer.as_default():  # Summary ops bind to the writer when traced.
    # Build the learner's graphs while the actors start up.
    run.policy.trace(policy_lib.example_batch(run.policy, lc.unroll_length,
                                              lc.batch_size),
                     critic=run.frames < config.num_critic_pretrain_frames)
  first_update_s = float('nan')
  updates = 0
  stopped_early = False
  try:
    pool.publish(weights, run.version)
    frame_rate = progress.Rate(run.frames)
    step_rate = progress.Rate(run.version)
    last_log = last_checkpoint = time.monotonic()
    with writer.as_default():
      while run.frames < total:
        if stop_requested() or (max_updates is not None and
                                updates >= max_updates):
          stopped_early = True
          break
        trajectories = pool.get(timeout=1.0)
        if trajectories is None:
          continue
        episodes = run.accept(trajectories)
        write_episode_summaries(config.env_name, episodes, run.frames)
        while run.ready() and run.frames < total and (
            max_updates is None or updates < max_updates):
          stats = run.update()
          if stats is None:
            continue
          updates += 1
          if bool(stats.get('skipped', False)):
            skipped = int(stats['num_skipped_steps'])
            logging.warning('Update skipped: non-finite loss or gradient '
                            '(%d skipped so far). Weights are unchanged.',
                            skipped)
            if config.stop_on_nonfinite:
              raise NonFiniteUpdate(
                  'A batch produced a non-finite loss or gradient; stopping '
                  'as --stop_on_nonfinite asks. The weights were not '
                  'updated, and the final checkpoint holds the last finite '
                  'model.')
          if updates == 1:
            first_update_s = time.monotonic() - start
            logging.info('First update %.1f s after launch.', first_update_s)
          pool.publish(run.policy.get_weights(), run.version)
        now = time.monotonic()
        if now - last_log >= config.log_interval_s:
          fps = frame_rate.measure(run.frames)
          ups = step_rate.measure(run.version)
          step = run.frames
          tf.summary.scalar('runtime/env_frames_per_s', fps, step=step)
          tf.summary.scalar('runtime/updates_per_s', ups, step=step)
          tf.summary.scalar('runtime/policy_lag', np.mean(run.lags),
                            step=step)
          tf.summary.scalar('runtime/phase', int(run.phase.numpy()),
                            step=step)
          tf.summary.scalar('runtime/actor_restarts', pool.num_restarts,
                            step=step)
          tf.summary.scalar('runtime/env_restarts',
                            sum(run.env_restarts.values()), step=step)
          if run.buffer is not None:
            replay_stats = run.buffer.stats()
            tf.summary.scalar('replay/size', replay_stats.size, step=step)
            tf.summary.scalar('replay/bytes', replay_stats.nbytes, step=step)
          logging.info(progress.progress_line(
              run.phase_name, run.frames, total, fps, ups,
              run.episodes.mean_return, len(run.episodes.returns),
              float(np.mean(run.lags)) if run.lags else 0.0))
          if run.buffer is not None:
            frames_per_unroll = lc.unroll_length * lc.step_mul
            logging.info(
                'replay: %d/%d unrolls (%s/%s env frames), %.1f MB',
                len(run.buffer), run.buffer.capacity,
                f'{len(run.buffer) * frames_per_unroll:,}',
                f'{run.buffer.capacity * frames_per_unroll:,}',
                run.buffer.nbytes / 1e6)
          last_log = now
        if now - last_checkpoint >= config.checkpoint_interval_s:
          run.save()
          last_checkpoint = now
  finally:
    pool.close()
    run.save()
    writer.flush()
  return RunResult(run.frames, run.policy.num_updates, run.phase_name,
                   run.episodes.mean_return, run.episodes.total,
                   time.monotonic() - start, first_update_s, stopped_early)


def evaluate(config: RunConfig, num_episodes: int) -> dict:
  """Plays `num_episodes` with the latest checkpoint; writes the summary JSON.

  Returns:
    Dict with the returns' mean, median, std, min, max and the 95% interval
    of the mean (normal approximation), also written to
    `logdir/test_results.json`.
  """
  import envs  # pylint: disable=g-import-not-at-top
  if num_episodes < 1:
    raise ValueError(f'test_num_episodes must be >= 1, got {num_episodes}.')
  num_envs = min(num_episodes, config.envs_per_actor)
  env = envs.make(config.env_name, num_envs=num_envs, seed=config.seed + 1,
                  **config.env_options)
  policy = policy_lib.make_policy(config.algorithm, env.spec,
                                  config.agent_config, seed=config.seed)
  path = checkpoint_lib.restore_agent_only(
      os.path.join(config.logdir, 'checkpoints'), policy.agent)
  actor = actor_lib.Actor(env, policy, unroll_length=100)
  returns = []
  try:
    while len(returns) < num_episodes:
      returns.extend(e.episode_return for e in actor.collect().episodes)
  finally:
    actor.close()
  returns = np.asarray(returns[:num_episodes], np.float64)
  half_width = 1.96 * returns.std(ddof=1) / np.sqrt(len(returns)) if len(
      returns) > 1 else 0.0
  summary = {
      'env': config.env_name, 'checkpoint': path,
      'num_episodes': int(len(returns)), 'mean': float(returns.mean()),
      'median': float(np.median(returns)), 'std': float(returns.std()),
      'min': float(returns.min()), 'max': float(returns.max()),
      'ci95': [float(returns.mean() - half_width),
               float(returns.mean() + half_width)],
      'returns': returns.tolist(),
  }
  out = os.path.join(config.logdir, 'test_results.json')
  with open(out + '.tmp', 'w') as f:
    json.dump(summary, f, indent=2)
  os.replace(out + '.tmp', out)
  return summary
