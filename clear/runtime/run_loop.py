"""The training run: actors feed unrolls, replay mixes them, the learner learns.

A run is made from a `clear.runtime.run_config.RunConfig`; its evaluations
and test mode are `clear.runtime.evaluation`.

Phases, in order, recorded in the checkpoint so a resumed run continues in
the right one:
  0 `prefill`: fresh unrolls only fill the replay buffer (when replay is on
    and `replay_prefill_unrolls` > 0); no update.
  1 `critic`: critic-only updates until `num_critic_pretrain_frames`.
  2 `main`: IMPALA-CLEAR updates until `total_environment_frames`.

Everything the run writes lives under `logdir`: TensorBoard event files,
`checkpoints/`, `run.json` and, in test mode, `test_results.json`; while it
runs, `.run.lock` keeps a second run out (`clear.runtime.run_lock`).
Checkpoint N (`checkpoints/ckpt-N`) has a folder `checkpoints/state-N` with
the replay buffers, the unrolls not yet learned from, the episode
statistics and, for inline actors, the actors themselves (env states, last
outputs, recurrent states, sampling RNGs), so a resumed inline run
continues exactly where the interrupted one stopped. A run that reaches its
frames with `keep_final_replay` off deletes the replay from every state
folder it keeps (`clear.runtime.final_replay`). A write that fails (a
full disk, a read-only file system) stops the run with one message
(`checkpoint_lib.WriteError`) naming the path and the checkpoint the same
command resumes from; nothing of the checkpoint being written is left.
"""

import collections
import glob
import logging
import os
import shutil
import time
from typing import Callable, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tree

from clear import checkpoint as checkpoint_lib
from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.continual import history as history_lib
from clear.continual import methods as continual_methods
from clear.ops import transitions
from clear.replay import buffer as replay_lib
from clear.runtime import actor as actor_lib
from clear.runtime import actor_pool as pool_lib
from clear.runtime import actor_worker
from clear.runtime import devices
from clear.runtime import evaluation as evaluation_lib
from clear.runtime import evaluation_process
from clear.runtime import final_replay
from clear.runtime import progress
from clear.runtime import resources
from clear.runtime import run_config as run_config_lib
from clear.runtime import run_lock

PHASES = ('prefill', 'critic', 'main')
PREFILL, CRITIC, MAIN = range(3)


class NonFiniteUpdate(RuntimeError):
  """A batch produced a non-finite loss or gradient (run asked to stop)."""


class RunResult(NamedTuple):
  """What `train` reports when it returns."""
  num_env_frames: int
  num_updates: int
  phase: str
  mean_return: float
  num_episodes: int
  wall_time_s: float
  first_update_s: float
  stopped_early: bool
  peak_memory_mb: float = float('nan')  # PSS of the process tree.


def split_batch_major(nest, batch_size: int):
  """A nest of `[B, ...]` arrays -> B nests of `[...]`."""
  return [tree.map_structure(lambda x, i=i: x[i], nest)
          for i in range(batch_size)]


def split_unrolls(unroll):
  """A time-major `[T + 1, B]` unroll batch -> B batch-major items."""
  batch_size = np.shape(unroll.env_outputs.reward)[1]
  # [B, T + 1, ...]
  return split_batch_major(replay_lib.swap_time_and_batch(unroll),
                           batch_size)


class _Run:
  """The state of one training run (see `train`)."""

  def __init__(self, config: run_config_lib.RunConfig):
    self.config = config
    lc = config.learner_config
    self.num_replay = lc.num_replay
    self.num_fresh = lc.batch_size - lc.num_replay
    # Nothing is written before every check and restore has passed: run.json
    # is written by `record_identity`.
    self.accepted = False
    spec = run_config_lib.env_spec(config)
    self.schedule = run_config_lib.task_schedule(config)
    saved = checkpoint_lib.read_run_identity(config.logdir)
    run_json = os.path.join(config.logdir, checkpoint_lib.RUN_FILE)
    run_config_lib.check_removed_settings(saved, run_json)
    run_config_lib.check_segment_lengths(config, saved, run_json)
    self.method = continual_methods.make_method(config, self.schedule,
                                                spec.stacked_frames)
    saved_identity = checkpoint_lib.verify_run_identity(
        config.logdir, run_config_lib.run_identity(config))
    self.policy = registry.make_policy(config.algorithm, spec,
                                       config.agent_config, lc,
                                       seed=config.seed, method=self.method)
    self.phase = tf.Variable(PREFILL, dtype=tf.int64, trainable=False,
                             name='phase')
    self.buffer = None
    if self.num_replay or config.replay_prefill_unrolls:
      self.buffer = replay_lib.ReplayBuffer(
          config.replay_buffer_size, config.replay_sampling,
          seed=config.seed, storage=config.replay_storage,
          directory=os.path.join(config.logdir, 'replay_memmap'),
          stacked_observations=spec.stacked_frames)
    item = self._item_template()
    needs = resources.replay_needs(
        self.buffer, config.replay_buffer_size, self.policy.replay_buffers(),
        lc, item)
    checkpoints = os.path.join(config.logdir, 'checkpoints')
    # Each checkpoint kept, and one being written, copies the replay.
    resources.check_replay_fits(
        needs, checkpoints=checkpoints,
        checkpoint_copies=checkpoint_lib.MAX_TO_KEEP + 1)
    self.checkpointer = checkpoint_lib.Checkpointer(
        checkpoints, {**self.policy.checkpointables(), 'phase': self.phase})
    self.restored = self.checkpointer.restore_latest()
    if not self.restored:
      checkpoint_lib.check_fresh_start(config.logdir, saved_identity)
    if config.init_from and self.restored:
      logging.info('Resuming %s: --init_from=%s is not used.', self.restored,
                   config.init_from)
    elif config.init_from:
      source = self.policy.init_from(config.init_from, config.init_scope)
      logging.info('Initialised the %s weights from %s.', config.init_scope,
                   source)
    self.episodes = progress.EpisodeStats()
    self.lags = collections.deque(maxlen=100)
    self.env_restarts = {}  # Actor id -> its cumulative env relaunches.
    self.pending = collections.deque()
    self.actor_state = None  # Saved actors to continue, if any.
    self._period = None  # The method's period `consolidate` last saw.
    self.eval_history = history_lib.EvalHistory()
    # Seconds this run has spent running, summed over its resumes.
    self._run_time_before = 0.0
    self._started = time.monotonic()
    if self.buffer is not None and self.buffer.storage == 'memmap':
      resources.allocate_replay(self.buffer, needs[0], item)
    if self.restored:
      self._restore_state()
    self._advance_phase()
    self.num_updates = self.policy.num_updates

  def record_identity(self):
    """Records the run in run.json, once its start is accepted (every check
    and restore passed); a refused start writes nothing."""
    if not self.accepted:
      checkpoint_lib.write_run_identity(
          self.config.logdir, run_config_lib.run_identity(self.config),
          run_config_lib.run_settings(self.config), self._flag_record())
      self.accepted = True

  def _flag_record(self) -> dict:
    """run.json's `flags` (what `clear.train` ran with, this start) and
    `history` (each resume that changed some: when, at what frames, from
    what to what), said in the log."""
    flags = self.config.flags
    if not flags:
      return {}
    saved = checkpoint_lib.read_run_identity(self.config.logdir) or {}
    history = saved.get('history')
    history = list(history) if isinstance(history, list) else []
    before = saved.get('flags')
    if isinstance(before, dict):
      changes = {name: [before[name], value]
                 for name, value in checkpoint_lib.as_json(flags).items()
                 if name in before and before[name] != value}
      if changes:
        logging.warning(
            'This resume changes %s (the run ran with the flags before; '
            'run.json keeps the history).', ', '.join(
                f'--{name} from {old!r} to {new!r}'
                for name, (old, new) in changes.items()))
        history.append({'time': time.strftime('%Y-%m-%d %H:%M:%S'),
                        'frames': self.frames, 'changes': changes})
    record = {'flags': flags}
    if history:
      record['history'] = history
    return record

  @property
  def run_time_s(self) -> float:
    """Seconds spent running so far, over all resumes (downtime excluded)."""
    return self._run_time_before + time.monotonic() - self._started

  def _state_dir(self, number):
    return checkpoint_lib.state_dir(self.checkpointer.directory, number)

  def _item_template(self):
    """One batch-major unroll `[T + 1, ...]`, as replay stores them."""
    return split_unrolls(policy_lib.example_batch(
        self.policy, self.config.learner_config.unroll_length, 1))[0]

  def _buffers(self):
    """Replay buffers to save, by folder under state-N."""
    buffers = {os.path.join('policy', name): buffer
               for name, buffer in self.policy.replay_buffers().items()}
    if self.buffer is not None:
      buffers['replay'] = self.buffer
    return buffers

  def _restore_state(self):
    """Loads the state saved with the restored checkpoint.

    Raises:
      CheckpointError: replay contents are missing or unreadable, unless
        the run allows starting with an empty buffer.
    """
    directory = self._state_dir(
        checkpoint_lib.checkpoint_number(self.restored))
    item = self._item_template()
    buffers = self._buffers()
    if buffers and final_replay.is_dropped(directory):
      final_replay.check_resume(
          self.config.logdir, self.restored,
          self.frames >= self.config.learner_config.total_environment_frames,
          self.config.allow_empty_replay_on_resume)
      buffers = {}
    for name, buffer in buffers.items():
      try:
        restored = buffer.restore(os.path.join(directory, name), item)
      except (OSError, ValueError, KeyError) as e:
        if not self.config.allow_empty_replay_on_resume:
          raise checkpoint_lib.CheckpointError(
              f'The replay buffer saved with {self.restored} cannot be read '
              f'({type(e).__name__}: {e}). Pass '
              '--allow_empty_replay_on_resume to resume with an empty '
              'buffer.') from e
        logging.warning('Resuming with an EMPTY replay buffer %r (%s: %s); '
                        'it refills from fresh unrolls.', name,
                        type(e).__name__, e)
        continue
      logging.info('Restored %d replayed unrolls (%d seen) from %s.',
                   len(buffer), buffer.num_seen, directory)
      if restored.saved_capacity != buffer.capacity:
        logging.warning(
            'Replay %r resized from %s to %s unrolls: kept %s of the %s it '
            'held (%s).', name, f'{restored.saved_capacity:,}',
            f'{buffer.capacity:,}', f'{restored.size:,}',
            f'{restored.saved_size:,}',
            'the newest' if buffer.sampling == 'fifo' else
            'a uniform sample, as a reservoir of this size keeps')
    try:
      state = snapshot.load(os.path.join(directory, 'run.npz'))
      num_pending = int(state['num_pending'])
      pending = []
      if num_pending:
        template = actor_lib.stack_nests([item] * num_pending)
        pending = split_batch_major(
            snapshot.unflatten_nest('pending', state, template), num_pending)
    except (OSError, ValueError, KeyError) as e:
      logging.warning('The run state saved with %s cannot be read (%s: %s): '
                      'unconsumed unrolls and episode statistics are lost; '
                      'actors start fresh episodes.', self.restored,
                      type(e).__name__, e)
      return
    self.pending.extend(pending)
    self.episodes.returns.extend(state['episode_returns'].tolist())
    self.episodes.lengths.extend(state['episode_lengths'].tolist())
    self.episodes.total = int(state['num_episodes'])
    self.lags.extend(state['lags'].tolist())
    self._run_time_before = float(state.get('run_time_s', 0.0))
    if 'eval_history/frames' in state:
      self.eval_history = history_lib.EvalHistory.from_arrays(
          snapshot.subset('eval_history', state))
    try:
      self.actor_state = snapshot.load(os.path.join(directory, 'actors.npz'))
    except OSError:
      logging.info('No actor state saved with %s: actors start fresh '
                   'episodes.', self.restored)

  def save(self, actor_state: Optional[snapshot.Arrays] = None,
           with_replay: bool = True):
    """Writes state-N (replay, run state, actors), then checkpoint N.

    The state folder is complete under its final name before the
    checkpoint index moves, so the latest checkpoint always has its state.

    Args:
      actor_state: the actors' `get_state`, when they can be continued.
      with_replay: False writes no replay, and deletes that of the other
        checkpoints kept (`final_replay`: the run has finished).

    Raises:
      checkpoint_lib.WriteError: a write failed (a full disk, say);
        nothing of checkpoint N is left, and the message names the path,
        the cause and what is intact.
    """
    self.record_identity()
    number = self.checkpointer.next_number
    final = self._state_dir(number)
    partial = final + '.partial'
    for stale in (partial, final):
      shutil.rmtree(stale, ignore_errors=True)
    writing = final
    try:
      self._write_state(partial, actor_state, with_replay)
      os.replace(partial, final)
      writing = os.path.join(self.checkpointer.directory,
                             f'{checkpoint_lib.CHECKPOINT_NAME}-{number}')
      self.checkpointer.save()  # Leaves nothing of N when it fails.
    except (OSError, tf.errors.OpError) as e:
      for path in (partial, final):
        shutil.rmtree(path, ignore_errors=True)
      raise checkpoint_lib.write_error(
          f'checkpoint {number} ({writing})', e,
          [n for n in self.checkpointer.kept_numbers if n < number],
          'Nothing of it was kept, and ') from e
    kept = set(self.checkpointer.kept_numbers)
    for path in glob.glob(os.path.join(self.checkpointer.directory,
                                       'state-*')):
      suffix = path.rsplit('-', 1)[1]
      if not suffix.isdigit() or int(suffix) not in kept:
        shutil.rmtree(path, ignore_errors=True)
    if not with_replay:
      final_replay.drop(map(self._state_dir, kept), self._buffers(),
                        self.frames)

  def _write_state(self, partial: str, actor_state: Optional[snapshot.Arrays],
                   with_replay: bool = True) -> None:
    """Writes the replay (or `final_replay`'s note), run state and actors
    of a checkpoint under `partial`."""
    os.makedirs(partial)
    if with_replay:
      for name, buffer in self._buffers().items():
        buffer.save(os.path.join(partial, name))
    else:
      final_replay.write_note(partial, self.frames)
    state = {
        'num_pending': np.array(len(self.pending)),
        'episode_returns': np.asarray(self.episodes.returns, np.float64),
        'episode_lengths': np.asarray(self.episodes.lengths, np.int64),
        'num_episodes': np.array(self.episodes.total),
        'lags': np.asarray(self.lags, np.int64),
        'run_time_s': np.array(self.run_time_s)}
    if len(self.eval_history):
      state.update(snapshot.prefixed('eval_history',
                                     self.eval_history.to_arrays()))
    if self.pending:
      state.update(snapshot.flatten_nest(
          'pending', actor_lib.stack_nests(list(self.pending))))
    snapshot.save(os.path.join(partial, 'run.npz'), state)
    if actor_state is not None:
      snapshot.save(os.path.join(partial, 'actors.npz'), actor_state)

  @property
  def frames(self) -> int:
    return self.policy.num_env_frames

  @property
  def task_name(self) -> str:
    """The env (or the task of a sequence) the actors play now."""
    if self.schedule is None:
      return self.config.env_name
    return self.schedule.task_name_at(self.frames)

  def eval_due(self, last: Optional[int]) -> bool:
    """Whether the evaluation schedule asks for an evaluation now, the
    last one having been at `last` frames (None: none yet): first at the
    start, then every `eval_interval_frames` and at each task end."""
    if last is None:
      return True
    due = []
    if self.config.eval_interval_frames:
      due.append(last + self.config.eval_interval_frames)
    if self.schedule is not None:
      due.append(self.schedule.segment_end(last))
    return bool(due) and self.frames >= min(due)

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
    self.lags.append(self.num_updates - trajectories.weights_version)
    self.env_restarts[trajectories.actor_id] = trajectories.env_restarts
    unrolls = split_unrolls(trajectories.unroll)
    self.policy.observe(unrolls)
    self.pending.extend(unrolls)
    return trajectories.episodes

  def consolidate(self) -> bool:
    """Tells the method, once per period of its clock (a task segment, or
    an interval under hidden boundaries), that the period before has ended;
    a resume past an end not yet consolidated does so first.

    Returns:
      Whether the method acted (it may have changed the acting weights:
      P&C's new active column).
    """
    if self.method is None:
      return False
    period = self.method.context.clock.period_at(self.frames)
    if period.index == self._period:
      return False
    self._period = period.index
    if not period.index:
      return False
    ended = self.method.context.clock.period_at(period.start - 1)
    stats = self.policy.consolidate(ended)
    for key, value in stats.items():
      tf.summary.scalar(f'continual/{key}', value, step=self.frames)
    return bool(stats)

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
      frames = transitions.frames_in_batch(
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
    self.num_updates += 1
    self._advance_phase()
    return stats


def write_episode_summaries(env_name, episodes, frames):
  for episode in episodes:
    tf.summary.scalar(f'episode/{env_name}/return', episode.episode_return,
                      step=frames)
    tf.summary.scalar(f'episode/{env_name}/length', episode.episode_step,
                      step=frames)


def _actor_state(pool) -> Optional[snapshot.Arrays]:
  """The actors' state when the pool can save it (inline actors), else None."""
  import envs  # pylint: disable=g-import-not-at-top
  if not hasattr(pool, 'get_state'):
    return None
  try:
    return pool.get_state()
  except envs.SnapshotUnsupported as e:
    logging.info('%s', e)
    return None


def _continue_actors(pool, actor_state: Optional[snapshot.Arrays]):
  """Puts saved actors back where they were, when the pool can."""
  if actor_state is None:
    return
  if not hasattr(pool, 'set_state'):
    logging.info('Continuing saved actors needs --backend=inline; actors '
                 'start fresh episodes.')
    return
  try:
    pool.set_state(actor_state)
  except (ValueError, KeyError) as e:
    logging.warning('The saved actors cannot be continued (%s: %s); they '
                    'start fresh episodes.', type(e).__name__, e)
    return
  logging.info('Actors continue their saved episodes.')


def _check_finite(stats, config: run_config_lib.RunConfig):
  """Logs a skipped non-finite update; raises if the run must stop."""
  if not bool(stats.get('skipped', False)):
    return
  logging.warning('Update skipped: non-finite loss or gradient (%d skipped '
                  'so far). Weights are unchanged.',
                  int(stats['num_skipped_steps']))
  if config.stop_on_nonfinite:
    raise NonFiniteUpdate(
        'A batch produced a non-finite loss or gradient; stopping as '
        '--stop_on_nonfinite asks. The weights were not updated, and the '
        'final checkpoint holds the last finite model.')


def _log_progress(run: _Run, pool, frame_rate, step_rate, total,
                  memory) -> bool:
  """Writes the runtime summaries and the progress lines (with `memory`, a
  `resources.MemoryWatch`, the process tree's memory about once a minute);
  returns whether it logged the memory."""
  lc = run.config.learner_config
  fps = frame_rate.measure(run.frames)
  ups = step_rate.measure(run.num_updates)
  step = run.frames
  tf.summary.scalar('runtime/num_env_frames', run.frames, step=step)
  tf.summary.scalar('runtime/num_updates', run.num_updates, step=step)
  tf.summary.scalar('runtime/run_time_s', run.run_time_s, step=step)
  tf.summary.scalar('runtime/env_frames_per_s', fps, step=step)
  tf.summary.scalar('runtime/updates_per_s', ups, step=step)
  lag = float(np.mean(run.lags)) if run.lags else 0.0
  tf.summary.scalar('runtime/policy_lag', lag, step=step)
  tf.summary.scalar('runtime/phase', int(run.phase.numpy()), step=step)
  tf.summary.scalar('runtime/actor_restarts', pool.num_restarts, step=step)
  tf.summary.scalar('runtime/env_restarts', sum(run.env_restarts.values()),
                    step=step)
  logging.info(progress.progress_line(
      run.phase_name, run.frames, total, fps, ups, run.episodes.mean_return,
      len(run.episodes.returns), lag))
  if run.buffer is not None:
    replay_stats = run.buffer.stats()
    tf.summary.scalar('replay/size', replay_stats.size, step=step)
    tf.summary.scalar('replay/bytes', replay_stats.nbytes, step=step)
    # A dynamic multiplier makes frames per step vary: count agent steps.
    per_unroll, unit = ((lc.unroll_length * lc.step_mul, 'env frames')
                        if lc.fixed_step_mul
                        else (lc.unroll_length, 'agent steps'))
    logging.info('replay: %d/%d unrolls (%s/%s %s), %.1f MB',
                 len(run.buffer), run.buffer.capacity,
                 f'{len(run.buffer) * per_unroll:,}',
                 f'{run.buffer.capacity * per_unroll:,}', unit,
                 run.buffer.nbytes / 1e6)
  return memory.summarise(step)


def train(config: run_config_lib.RunConfig,
          stop_requested: Callable[[], bool] = lambda: False,
          max_updates: Optional[int] = None,
          on_start: Callable[[], None] = lambda: None) -> RunResult:
  """Trains until `total_environment_frames`, a stop request or max_updates.

  Writes a checkpoint every `checkpoint_interval_s` and at the end (also
  when stopped early), so running the same config again resumes. A task
  sequence switches the actors to the next task at each segment's end
  and evaluates every task at each switch. The learner's variables and
  updates live on `config.learner_device`.

  The run holds the logdir's lock (`clear.runtime.run_lock`) from start to end:
  a second run on the logdir is refused. Nothing is written to the logdir
  until every check and restore has passed and the actors have started;
  then `on_start` is called (it may still refuse, by raising) and run.json
  is written. A run whose restored
  checkpoint has reached `total_environment_frames` writes nothing and
  returns at once.

  Raises:
    run_lock.LogdirInUse: another live run holds the logdir.
  """
  device = devices.learner_device(config.learner_device)
  logging.info('Logdir %s; learner on %s.', os.path.abspath(config.logdir),
               device)
  with tf.device(device):
    lock = run_lock.RunLock.acquire(config.logdir)
    try:
      return _train(config, stop_requested, max_updates, on_start, lock)
    finally:
      lock.release()


def evaluator_config(run: _Run) -> evaluation_process.EvaluatorConfig:
  """The run's evaluations: their own policy, seeded apart from the
  actors', and envs."""
  config = run.config
  return evaluation_process.EvaluatorConfig(
      algorithm=config.algorithm, spec=run.policy.spec,
      agent_config=config.agent_config, policy_seed=config.seed + 1,
      env_name=config.env_name, env_options=config.env_options,
      num_episodes=config.eval_episodes, seed=config.seed + 104_729,
      max_steps=config.eval_max_steps, num_workers=config.eval_workers)


def actor_seed_base(config: run_config_lib.RunConfig, version: int) -> int:
  """The actors' base seed when they start (or switch task) after
  `version` updates."""
  return config.seed + 7919 * version


def _train(config, stop_requested, max_updates, on_start, lock):
  """`train` on the learner's device, holding the logdir's `lock`."""
  start = time.monotonic()
  lc = config.learner_config
  total = lc.total_environment_frames
  memmap = os.path.join(config.logdir, 'replay_memmap')
  memmap_existed = os.path.exists(memmap)

  def make_pool():
    pool_config = actor_worker.ActorPoolConfig(
        env_name=config.env_name,
        env_options=run_config_lib.env_options_at(config, run.schedule,
                                                  run.frames),
        envs_per_actor=config.envs_per_actor, algorithm=config.algorithm,
        agent_config=continual_methods.actor_agent_config(config),
        unroll_length=lc.unroll_length,
        num_actors=config.num_actors,
        seed=actor_seed_base(config, run.num_updates),
        max_restarts=config.max_actor_restarts,
        hang_timeout_s=config.actor_timeout_s)
    if run.schedule is not None:
      logging.info('Task %s from %s frames.', run.task_name,
                   f'{run.frames:,}')
    return pool_lib.make_pool(config.backend, pool_config,
                              [w.shape for w in weights],
                              config.ray_address or None,
                              config.ray_actor_resource)

  pool = None
  try:
    run = _Run(config)
    if run.restored:
      logging.info('Resuming at %d frames, %d updates, phase %s.',
                   run.frames, run.num_updates, run.phase_name)
    unplayed = os.path.exists(os.path.join(
        config.logdir, evaluation_lib.PENDING_EVALUATIONS_FILE))
    if run.restored and run.frames >= total and unplayed:
      logging.info('The run is complete; the evaluations it stopped before '
                   'finishing are played now.')
    elif run.restored and run.frames >= total:
      logging.warning(
          'The run in %s is complete (%s of %s frames, %s): nothing to do, '
          'and nothing was written. Give a larger --total_environment_frames '
          'to train on, or --mode=test to play it.', config.logdir,
          f'{run.frames:,}', f'{total:,}', os.path.basename(run.restored))
      run.checkpointer.expect_partial()
      return RunResult(run.frames, run.policy.num_updates, run.phase_name,
                       run.episodes.mean_return, run.episodes.total,
                       time.monotonic() - start, float('nan'), False)
    weights = run.policy.get_weights()
    pool = make_pool()
    on_start()
    run.record_identity()
  except BaseException:
    # A refused start leaves the logdir as it found it.
    if pool is not None:
      pool.close()
    if not memmap_existed:
      shutil.rmtree(memmap, ignore_errors=True)
    lock.abandon()
    raise
  writer = tf.summary.create_file_writer(config.logdir)
  critic = run.frames < config.num_critic_pretrain_frames
  if not stop_requested():  # A run stopped at once skips it: seconds.
    with writer.as_default():  # Summary ops bind to the writer when traced.
      # Build the learner's graphs while the actors start up.
      run.policy.trace(policy_lib.example_batch(run.policy, lc.unroll_length,
                                                lc.batch_size), critic=critic)
  else:  # The slots a restored checkpoint holds must be in the next one.
    run.policy.create_slots(critic=critic)
  first_update_s = float('nan')
  updates = 0
  stopped_early = False
  evaluation = None
  memory = resources.MemoryWatch()
  failed = None  # The write error that stopped the run, if one did.
  try:
    if run.schedule is not None or config.eval_interval_frames:
      evaluation = evaluation_lib.PeriodicEvaluation(
          run, evaluation_process.start(config.evaluator, config.backend,
                                        evaluator_config(run)),
          stop_requested)
    _continue_actors(pool, run.actor_state)
    pool.publish(weights, run.num_updates)
    frame_rate = progress.Rate(run.frames)
    step_rate = progress.Rate(run.num_updates)
    last_log = last_checkpoint = time.monotonic()
    logged_at = None  # (frames, updates) of the last progress line.
    task = run.task_name
    # Seconds from each switch to the new task's first unroll, summed over
    # this session's switches; when the last one was made, until then.
    switch_s, switched_at = 0.0, None
    with writer.as_default():
      while run.frames < total:
        if evaluation is not None:
          evaluation.maybe_evaluate()
        ended = run.consolidate()  # Before the next period's unrolls arrive.
        if run.task_name != task:  # The sequence moves on.
          switched_at = time.monotonic()
          # The weights first: an actor loads them as it switches.
          pool.publish(run.policy.get_weights(), run.num_updates)
          pool.switch_task(run.schedule.task_at(run.frames),
                           actor_seed_base(config, run.num_updates))
          task = run.task_name
          logging.info('Task %s from %s frames.', task, f'{run.frames:,}')
        elif ended:  # The method acted: acting weights it may change.
          pool.publish(run.policy.get_weights(), run.num_updates)
        if stop_requested() or (max_updates is not None and
                                updates >= max_updates):
          stopped_early = True
          break
        # Learn from what is pending before acting again, so the data a
        # seeded inline run sees does not depend on where it was resumed.
        if not run.ready():
          trajectories = pool.get(timeout=1.0)
          if trajectories is None:
            continue  # Nothing new to log or save.
          episodes = run.accept(trajectories)
          write_episode_summaries(task, episodes, run.frames)
          if switched_at is not None:  # The new task's first unroll.
            switch_s += time.monotonic() - switched_at
            switched_at = None
            tf.summary.scalar('runtime/task_switch_s', switch_s,
                              step=run.frames)
        else:
          stats = run.update()
          if stats is not None:
            updates += 1
            _check_finite(stats, config)
            if updates == 1:
              first_update_s = time.monotonic() - start
              logging.info('First update %.1f s after launch.',
                           first_update_s)
              tf.summary.scalar('runtime/first_update_s', first_update_s,
                                step=run.frames)
            pool.publish(run.policy.get_weights(), run.num_updates)
        now = time.monotonic()
        if now - last_log >= config.log_interval_s:
          _log_progress(run, pool, frame_rate, step_rate, total, memory)
          last_log, logged_at = now, (run.frames, run.num_updates)
        if now - last_checkpoint >= config.checkpoint_interval_s:
          run.save(_actor_state(pool))
          last_checkpoint = now
      if evaluation is not None and not stopped_early:
        # The final performance; a stop during its wait keeps it for the
        # resume, as any unfinished evaluation.
        stopped_early = not evaluation.maybe_evaluate(force=True)
      # Every run ends with a progress line and its runtime summaries, also
      # one shorter than the log interval.
      memory_logged = False
      if logged_at != (run.frames, run.num_updates):
        memory_logged = _log_progress(run, pool, frame_rate, step_rate, total,
                                      memory)
      if not memory_logged:  # The peak includes the end.
        memory.summarise(run.frames, force=True)
  except tf.errors.OpError as e:  # An event file on a full disk, say.
    if checkpoint_lib.write_errno(e) is None:
      raise
    failed = checkpoint_lib.write_error(f'the event file in {config.logdir}',
                                        e, run.checkpointer.kept_numbers)
    raise failed from e
  except checkpoint_lib.WriteError as e:
    failed = e
    raise
  finally:
    actor_state = _actor_state(pool)
    pool.close()
    try:
      if failed is None:  # After a failed write, the next would fail too.
        run.save(actor_state, with_replay=config.keep_final_replay or
                 run.frames < total)
    finally:
      if evaluation is not None:
        evaluation.finish()
      try:
        writer.flush()
      except tf.errors.OpError as e:  # Events lost; the checkpoint is not.
        logging.warning('Could not write the event file in %s: %s.',
                        config.logdir, checkpoint_lib.write_failure(e)[0])
  return RunResult(run.frames, run.policy.num_updates, run.phase_name,
                   run.episodes.mean_return, run.episodes.total,
                   time.monotonic() - start, first_update_s, stopped_early,
                   memory.peak.pss / 1e6 if memory.last else float('nan'))
