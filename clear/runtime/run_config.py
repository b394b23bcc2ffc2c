"""What a run is: its config, the identity and settings run.json records,
and the task schedule of a sequence.

`RunConfig` holds everything a run needs besides the learner's
hyperparameters (`clear.train` makes it from the flags). `run_identity` is
what a checkpoint must have been made for to be resumed by a config, and
`run_settings` what a resume may change; `clear.checkpoint` writes both to
run.json and checks them. `check_removed_settings` refuses a run.json that
names a setting of an earlier version at a value this one cannot run.
"""

from typing import Dict, List, NamedTuple, Optional, Tuple

from clear import checkpoint as checkpoint_lib
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import config as impala_config
from clear.continual import methods as continual_methods
from clear.continual import schedule as schedule_lib
from envs import multitask


class RunConfig(NamedTuple):
  """Everything a run needs besides the learner's hyperparameters.

  Attributes:
    env_name, env_options: what `envs.make` builds.
    algorithm: a `registry.ALGORITHMS` key.
    agent_config: `policy.AgentConfig`.
    learner_config: `impala_config.LearnerConfig`, or the config of another
      algorithm (its num_replay is the replayed share of each batch).
    logdir: where everything is written.
    seed: base seed.
    num_actors, envs_per_actor: actor layout.
    replay_buffer_size: capacity in unrolls.
    replay_sampling: 'reservoir' or 'fifo'.
    replay_storage: 'memory' or 'memmap' (under logdir/replay_memmap).
    replay_prefill_unrolls: unrolls put in replay before the first update.
    num_critic_pretrain_frames: frames of critic pretraining.
    backend: 'local', 'inline' or 'ray'; ray_address: a Ray cluster, or ''
      for a local Ray; ray_actor_resource: a custom Ray resource each actor
      needs one unit of (only nodes started with it run actors), or ''.
    learner_device: 'auto', 'cpu', 'gpu' or a TensorFlow device such as
      '/GPU:1' (see `devices.learner_device`); actors never use a GPU.
    checkpoint_interval_s, log_interval_s: periods of those writes.
    max_actor_restarts: dead-actor restarts before the run fails.
    actor_timeout_s: seconds of silence after which an actor counts as hung
      and is replaced.
    allow_empty_replay_on_resume: resume even when the checkpoint's replay
      contents are missing, with an empty buffer (logged as a warning).
    keep_final_replay: False deletes the replay from the checkpoints of a
      run that reaches `total_environment_frames` (only training it
      further needs it), freeing the disk a long study's finished runs
      would hold.
    stop_on_nonfinite: stop the run at the first update skipped for
      non-finite numbers (by default such updates are skipped and counted).
    init_from: a run (logdir or checkpoint) whose weights start this one;
      only used when the logdir holds no checkpoint of its own.
    init_scope: which weights `init_from` loads: 'all', 'critic' (e.g. a
      critic-pretraining run) or 'policy'.
    frames_per_task, num_task_cycles: for a task sequence (`env_name`
      'gym:A,gym:B'): frames each task trains for before the next one, and
      how often the sequence repeats (`total_environment_frames` must be
      their product times the number of tasks).
    segment_lengths: for a task sequence, 'equal' (every segment
      `frames_per_task` frames) or 'random' (lengths drawn around it from
      `seed`, summing to the same total; see
      `clear.continual.schedule.random_segment_frames`).
    eval_interval_frames: evaluate every task of the env every this many
      frames (0: only sequences evaluate, at each task's end).
    eval_episodes: episodes per task and evaluation.
    eval_max_steps: agent steps after which an evaluation episode is cut.
    eval_workers: processes that step an evaluation's envs (0: the
      evaluator's own; `clear.runtime.evaluation_envs`).
    evaluator: where evaluations are played: 'learner', 'process' (one of
      their own, beside the learner) or 'auto' (the learner with inline
      actors, else a process; `clear.runtime.evaluation_process`).
    continual: the IMPALA run's continual-learning method, its settings
      and task boundaries (`continual_methods.ContinualConfig`).
    flags: the `clear.train` flag values the config was made from, by
      name, recorded in run.json (None for a config made otherwise).
  """
  env_name: str
  env_options: dict
  algorithm: str
  agent_config: policy_lib.AgentConfig
  learner_config: impala_config.LearnerConfig
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
  ray_actor_resource: str = ''
  learner_device: str = 'auto'
  checkpoint_interval_s: float = 600.0
  log_interval_s: float = 10.0
  max_actor_restarts: int = 20
  actor_timeout_s: float = 300.0
  allow_empty_replay_on_resume: bool = False
  keep_final_replay: bool = True
  stop_on_nonfinite: bool = False
  init_from: str = ''
  init_scope: str = 'all'
  frames_per_task: int = 0
  num_task_cycles: int = 1
  segment_lengths: str = 'equal'
  eval_interval_frames: int = 0
  eval_episodes: int = 10
  eval_max_steps: int = 27_000
  evaluator: str = 'auto'
  eval_workers: int = 0
  continual: continual_methods.ContinualConfig = (
      continual_methods.ContinualConfig())
  flags: Optional[Dict[str, object]] = None


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
  identity = {'env': config.env_name, 'algorithm': config.algorithm,
              'network': config.agent_config.network,
              'core_size': config.agent_config.core_size,
              'separate_critic': config.agent_config.separate_critic,
              'env_options': {k: config.env_options[k]
                              for k in sorted(config.env_options)}}
  # Core options only when they are not the defaults, so that a run.json
  # without them stands for the defaults.
  for name in policy_lib.CORE_OPTION_FIELDS:
    value = getattr(config.agent_config, name)
    if value != policy_lib.AgentConfig._field_defaults[name]:
      identity[name] = value
  if multitask.is_sequence(config.env_name):
    identity.update(frames_per_task=config.frames_per_task,
                    num_task_cycles=config.num_task_cycles)
    # Only for random lengths (with the seed they are drawn from), so that
    # a run.json without them stands for equal ones.
    if config.segment_lengths != 'equal':
      identity.update(segment_lengths=config.segment_lengths,
                      segment_seed=config.seed)
  identity.update(continual_methods.identity(config.continual))
  return identity


# Settings of earlier versions of clear that this one no longer has, each
# with the value every run had unless it was set: a run.json records them
# (in its identity, or in its record of the flags) at that value, which is
# how this version runs.
REMOVED_SETTINGS = {'lstm_init': 'fan_in', 'torso_grad_scale': 1.0,
                    'torso_activation': 'relu',
                    'rmsprop_epsilon_outside': False,
                    'rmsprop_fan_in_reference': 0}
# Values of settings this version has that it no longer takes.
REMOVED_VALUES = {'torso_norm': ('layer_norm_all',)}
# The last commit of clear that runs every removed setting and value.
LAST_COMMIT_WITH_REMOVED = 'dfafcdd'


def removed_settings(values: Dict[str, object]) -> List[Tuple[str, object]]:
  """(name, value) of each setting in `values` (a run.json's identity or
  record of the flags, by name) that this version cannot run: a
  `REMOVED_SETTINGS` one at another value than its own, or a
  `REMOVED_VALUES` value."""
  return [(name, value) for name, value in values.items()
          if (name in REMOVED_SETTINGS and value != REMOVED_SETTINGS[name])
          or value in REMOVED_VALUES.get(name, ())]


def check_removed_settings(saved: Optional[Dict[str, object]], path: str):
  """Refuses a run.json (`saved`, read from `path`; None: there is none)
  whose identity or record of the flags names a setting this version no
  longer has at another value than the one it runs (`removed_settings`).

  Raises:
    CheckpointError: naming each such setting, its value, and the commit
      of clear that last ran it.
  """
  if saved is None:
    return
  found = dict(removed_settings(saved))
  flags = saved.get('flags')
  if isinstance(flags, dict):
    for name, value in removed_settings(flags):
      found.setdefault(name, value)
  if not found:
    return
  described = '; '.join(
      f'{name}={value!r} (this version no longer has {name}: it always runs '
      f'as with {name}={REMOVED_SETTINGS[name]!r})' if name in REMOVED_SETTINGS
      else f'{name}={value!r} (this version no longer has that value of '
      f'{name})' for name, value in found.items())
  raise checkpoint_lib.CheckpointError(
      f'{path}: the run was made with {described}. Use it with clear at '
      f'commit {LAST_COMMIT_WITH_REMOVED} or earlier, the last version that '
      f'has {"it" if len(found) == 1 else "them"}.')


# Learner settings a run records in its run.json (see `run_settings`).
# Each is a RunConfig field or one of its learner config's; those of
# those of `continual_methods.RECORDED_SETTINGS` only with a method that
# takes them (and held in `RunConfig.continual.settings`).
RECORDED_SETTINGS = ('batch_size', 'total_environment_frames',
                     'learning_rate', 'optimizer', 'reward_scaling',
                     'envs_per_actor',
                     'replay_buffer_size') + continual_methods.RECORDED_SETTINGS


def run_settings(config: RunConfig) -> Dict[str, object]:
  """The settings of `config` that a resume may change (the batch size, the
  schedule, ...): run.json records the ones a run last ran with, and
  `clear.train` keeps them when a resume leaves their flags unset."""
  settings = {}
  method = continual_methods.recorded_settings(config.continual)
  for name in RECORDED_SETTINGS:
    if name in continual_methods.RECORDED_SETTINGS:
      if name in method:
        settings[name] = method[name]
      continue
    holder = config if name in RunConfig._fields else config.learner_config
    if hasattr(holder, name):  # The ports' configs lack some.
      settings[name] = getattr(holder, name)
  return settings


def task_schedule(config: RunConfig
                  ) -> Optional[schedule_lib.TaskSchedule]:
  """The schedule of a task-sequence run, None for a single env: a pure
  function of its tasks, frames_per_task, num_task_cycles,
  segment_lengths and (for random lengths) seed, so a resume rebuilds it.

  Raises:
    ValueError: an unknown `segment_lengths`, or a schedule that does not
      cover `total_environment_frames`.
  """
  if config.segment_lengths not in schedule_lib.SEGMENT_LENGTHS:
    raise ValueError(f'segment_lengths must be one of '
                     f'{list(schedule_lib.SEGMENT_LENGTHS)}, got '
                     f'{config.segment_lengths!r}.')
  if not multitask.is_sequence(config.env_name):
    return None
  tasks = multitask.split_sequence(config.env_name)
  if config.segment_lengths == 'random':
    schedule = schedule_lib.TaskSchedule.with_random_lengths(
        tasks, config.frames_per_task, config.num_task_cycles, config.seed)
  else:
    schedule = schedule_lib.TaskSchedule(tasks, config.frames_per_task,
                                         config.num_task_cycles)
  total = config.learner_config.total_environment_frames
  if schedule.total_frames != total:
    raise ValueError(
        f'A task sequence trains for frames_per_task x tasks x cycles = '
        f'{schedule.total_frames:,} frames, but total_environment_frames is '
        f'{total:,}.')
  return schedule


def check_segment_lengths(config: RunConfig,
                          saved: Optional[Dict[str, object]], path: str):
  """Refuses to resume a sequence run (run.json `saved`, read from `path`;
  None: a new run) with other segment lengths than it was made with. A
  run.json records `segment_lengths` only when it is not 'equal', so the
  identity check alone would let 'equal' through against a random run.

  Raises:
    CheckpointError: naming the recorded value and the flag to give.
  """
  if saved is None or not multitask.is_sequence(config.env_name) or (
      saved.get('env') != config.env_name):
    return  # A new run, or another env: refused by the identity check.
  recorded = saved.get('segment_lengths', 'equal')
  if recorded != config.segment_lengths:
    raise checkpoint_lib.CheckpointError(
        f'{path}: the run was made with segment_lengths={recorded!r}, not '
        f'{config.segment_lengths!r}: its segments would move. Resume with '
        f'--segment_lengths={recorded}, or use a new --logdir.')


def env_options_at(config: RunConfig, schedule, frames: int) -> dict:
  """The env options of the task trained at `frames`."""
  if schedule is None:
    return dict(config.env_options)
  return {**config.env_options, 'task': schedule.task_at(frames)}
