"""The checks of `python -m clear.train`'s flags, before anything runs.

`validate` raises one `app.UsageError` that names every flag (combination)
that is wrong: IMPALA-CLEAR's, the continual methods', the ports' (a port's
config is built and checked by its algorithm), the task sequence's, test
mode's and the env's. Once the flags agree with each other, IMPALA-CLEAR's
learner config is built and checked by `impala_config.validate_config`, the
one check of its values.
"""

import os

from absl import app
from absl import logging

from clear.algorithms import registry
from clear.algorithms.impala import config as impala_config
from clear.cli import configs
from clear.cli import defaults
from clear.cli import flags as cli_flags
from clear.continual import methods as continual_methods
from clear.replay import buffer as replay_lib
from clear.runtime import record as record_lib


def _impala_problems(f):
  """What is wrong with the IMPALA-CLEAR flags together (the values of the
  learner config they make are checked by `_impala_config_problems`)."""
  problems = [f'--{name} applies to --algorithm='
              f'{"/".join(cli_flags.ALGORITHM_FLAGS[name])}, not impala.'
              for name in sorted(cli_flags.ALGORITHM_FLAGS) if f[name].present]
  # An unknown family is reported by validate; its batch size is the flag's.
  known_family = defaults.env_family(f.env) in defaults.FAMILY_DEFAULTS
  batch_size = (defaults.family_default(f, 'batch_size') if known_family
                else f.batch_size)
  num_replay = 0
  if batch_size is not None:
    try:
      num_replay = replay_lib.replay_batch_size(batch_size,
                                                f.replay_proportion)
    except ValueError as e:
      problems.append(f'--replay_proportion / --batch_size: {e}')
  if num_replay == 0 and f.replay_proportion == 0 and (
      (f['policy_cloning_cost'].present and f.policy_cloning_cost) or
      (f['value_cloning_cost'].present and f.value_cloning_cost)):
    problems.append('--policy_cloning_cost / --value_cloning_cost need '
                    'replay: set --replay_proportion > 0 or drop them.')
  if num_replay and f.replay_buffer_size < 1:
    problems.append('--replay_buffer_size must be >= 1 with replay on.')
  elif num_replay > f.replay_buffer_size:
    problems.append(
        f'--replay_buffer_size={f.replay_buffer_size} holds fewer unrolls '
        f'than the {num_replay} replayed in each batch (--batch_size='
        f'{batch_size} x --replay_proportion={f.replay_proportion:g}); give '
        f'--replay_buffer_size >= {num_replay}.')
  if f.replay_prefill_unrolls > f.replay_buffer_size:
    problems.append(
        f'--replay_prefill_unrolls={f.replay_prefill_unrolls} exceeds '
        f'--replay_buffer_size={f.replay_buffer_size}: the buffer could '
        'never fill that far, and no update would ever be made.')
  for name in ('rmsprop_initial_mean_square', 'rmsprop_epsilon'):
    if f[name].present and defaults.family_default(f, 'optimizer') != 'rmsprop':
      problems.append(f'--{name} needs --optimizer=rmsprop.')
  return problems + _continual_problems(f)


# LearnerConfig fields that no flag of their name sets, and the flag each
# comes from.
_FLAG_OF_FIELD = {'num_replay': 'replay_proportion',
                  'discounting_step_mul': 'env'}


def _impala_config_problems(f):
  """What `impala_config.validate_config` finds wrong with the learner config
  the flags make, naming the flag: the one check of its values."""
  try:
    impala_config.validate_config(configs.impala_learner_config(
        f, configs.env_options_from_flags(f)))
  except ValueError as e:
    field = str(e).split()[0]
    if field in _FLAG_OF_FIELD:
      return [f'--{_FLAG_OF_FIELD[field]}: {e}']
    return [f'--{e}']
  return []


def _continual_problems(f):
  """What is wrong with --continual_method, its settings' flags and the
  task boundaries."""
  method = f.continual_method
  problems = []
  for name in cli_flags.METHOD_FLAGS:
    users = continual_methods.users_of(name)
    if name == 'ewc_gamma':  # Offline EWC records it but never uses it.
      users = [user for user in users if user != 'ewc']
    if f[name].present and method not in users:
      problems.append(f'--{name} needs --continual_method='
                      f'{" or ".join(users)}.')
  for name in ('task_boundaries', 'consolidation_interval_frames'):
    if f[name].present and method == 'none':
      problems.append(f'--{name} needs a --continual_method.')
  if f['consolidation_interval_frames'].present and (
      f.task_boundaries != 'hidden'):
    problems.append('--consolidation_interval_frames needs '
                    '--task_boundaries=hidden.')
  if f.consolidation_interval_frames < 1:
    problems.append('--consolidation_interval_frames must be >= 1 (got '
                    f'{f.consolidation_interval_frames}).')
  if method == 'none':
    return problems
  if ',' not in f.env:
    problems.append(f'--continual_method={method} needs a task sequence '
                    '--env (comma-separated tasks).')
  cls = continual_methods.METHODS[method]
  problems += cls.problems(configs.continual_config(f).settings)
  problems += cls.agent_problems(configs.agent_config(f))
  return problems


def _port_problems(f):
  """What is wrong with the flags of PPG, SAC or DDPG."""
  problems = [f'--{name} applies to --algorithm=impala only.'
              for name in cli_flags.IMPALA_ONLY_FLAGS if f[name].present]
  owners = cli_flags.ALGORITHM_FLAGS
  problems += [f'--{name} applies to --algorithm='
               f'{"/".join(owners[name])}, not {f.algorithm}.'
               for name in sorted(owners)
               if f[name].present and f.algorithm not in owners[name]]
  if not problems:
    try:
      registry.ALGORITHMS[f.algorithm].validate(
          configs.port_config(f, configs.env_options_from_flags(f)))
    except (ValueError, TypeError) as e:
      problems.append(f'--algorithm={f.algorithm}: {e}')
  return problems


# Local actor processes per CPU past which a run is refused: each is a
# process with its own TensorFlow runtime and envs.
MAX_LOCAL_ACTORS_PER_CPU = 4


def _sequence_problems(f):
  """A comma-separated --env: its entries, then its schedule flags."""
  problems = []
  entries = [name.strip() for name in f.env.split(',')]
  empty = [i + 1 for i, name in enumerate(entries) if not name]
  if empty:
    return [f'--env={f.env!r}: entry {empty[0]} of the sequence is empty; '
            'name a task between every two commas.']
  for name in sorted({name for name in entries if entries.count(name) > 1}):
    visits = [str(i + 1) for i, entry in enumerate(entries) if entry == name]
    logging.warning(
        '--env names %s %d times: they are one task (one set of envs, one '
        'evaluation curve, one set of metrics), trained in segments %s of '
        'each cycle.', name, len(visits), ', '.join(visits))
  if f.frames_per_task < 1:
    problems.append(f'--frames_per_task must be >= 1 for a sequence --env '
                    f'(got {f.frames_per_task}).')
  if f.num_task_cycles < 1:
    problems.append(f'--num_task_cycles must be >= 1 (got '
                    f'{f.num_task_cycles}).')
  if f.segment_lengths == 'random' and f.seed < 0:
    problems.append(f'--segment_lengths=random draws the lengths from '
                    f'--seed, which must then be >= 0 (got {f.seed}).')
  if not problems and f['total_environment_frames'].present and (
      f.total_environment_frames != defaults.sequence_frames(f)):
    problems.append(
        f'--total_environment_frames ({f.total_environment_frames:,}) '
        'differs from --frames_per_task x tasks x --num_task_cycles '
        f'({defaults.sequence_frames(f):,}); leave it unset for a sequence.')
  return problems


def _runtime_problems(f):
  """The logdir, the log and checkpoint clocks and the actor count."""
  problems = []
  if f['log_dir'].present:
    problems.append(f'--log_dir={f.log_dir} is absl\'s folder for log files, '
                    'not the run\'s: the run\'s folder is --logdir.')
  if f.checkpoint_interval_s <= 0:
    problems.append(f'--checkpoint_interval_s must be > 0 (got '
                    f'{f.checkpoint_interval_s}): each checkpoint writes '
                    'the whole replay (a Pong one is about 1.7 GB).')
  if f.actor_timeout_s <= 0:
    problems.append(f'--actor_timeout_s must be > 0 (got '
                    f'{f.actor_timeout_s}).')
  if f.log_interval_s <= 0:
    problems.append(f'--log_interval_s must be > 0 (got {f.log_interval_s}).')
  cpus = os.cpu_count() or 1
  if f.backend == 'local' and (
      f.num_actors > MAX_LOCAL_ACTORS_PER_CPU * cpus):
    problems.append(
        f'--num_actors={f.num_actors} would start that many processes on a '
        f'machine with {cpus} CPUs; use at most '
        f'{MAX_LOCAL_ACTORS_PER_CPU * cpus} here (one per CPU is the '
        'usual), or --backend=ray on a cluster.')
  return problems


def validate(f) -> None:
  """Checks flag combinations; raises app.UsageError naming the flags."""
  problems = _runtime_problems(f)
  sequence = ',' in f.env
  sequence_problems = _sequence_problems(f) if sequence else []
  if f.unroll_length < 1:
    problems.append(f'--unroll_length must be >= 1 (got {f.unroll_length}).')
  if f.batch_size is not None and f.batch_size < 1:
    problems.append(f'--batch_size must be >= 1 (got {f.batch_size}).')
  if f.core_size is not None and (
      f.core_size < 0 or f.core_size == 0 and f.algorithm != 'impala'):
    problems.append(f'--core_size must be >= 1, or 0 (feed-forward) with '
                    f'--algorithm=impala (got {f.core_size}).')
  if f.algorithm == 'impala':
    problems.extend(_impala_problems(f))
  else:
    problems.extend(_port_problems(f))
  known_family = defaults.env_family(f.env) in defaults.FAMILY_DEFAULTS
  if f.total_environment_frames is not None and f.total_environment_frames < 1:
    problems.append('--total_environment_frames must be >= 1.')
  elif (known_family and not sequence_problems and
        f.num_critic_pretrain_frames > defaults.total_frames(f)):
    problems.append(
        f'--num_critic_pretrain_frames ({f.num_critic_pretrain_frames:,}) '
        'exceeds --total_environment_frames '
        f'({defaults.total_frames(f):,}).')
  if f.num_actors < 1 or (f.envs_per_actor is not None and
                          f.envs_per_actor < 1):
    problems.append('--num_actors and --envs_per_actor must be >= 1.')
  if f.step_mul is not None and f.step_mul < 1:
    problems.append(f'--step_mul must be >= 1 (got {f.step_mul}).')
  if not f.fixed_step_mul and f.max_step_mul < 1:
    problems.append('--max_step_mul must be >= 1 with --nofixed_step_mul.')
  if not f.fixed_step_mul and f['step_mul'].present:
    problems.append('--step_mul applies to fixed multipliers only; with '
                    '--nofixed_step_mul set --max_step_mul instead.')
  if not 0.0 <= f.discounting <= 1.0:
    problems.append(f'--discounting must be in [0, 1] (got {f.discounting}).')
  if f.learning_rate is not None and f.learning_rate <= 0:
    problems.append('--learning_rate must be > 0.')
  if sequence:
    problems.extend(sequence_problems)
  elif f['frames_per_task'].present or f['num_task_cycles'].present:
    problems.append('--frames_per_task / --num_task_cycles need a sequence '
                    '--env (comma-separated tasks).')
  if not sequence and f.segment_lengths != 'equal':
    problems.append(f'--segment_lengths={f.segment_lengths} needs a sequence '
                    '--env (comma-separated tasks).')
  if f.eval_interval_frames < 0 or f.eval_episodes < 1 or (
      f.eval_max_steps < 1):
    problems.append('--eval_interval_frames must be >= 0, --eval_episodes '
                    'and --eval_max_steps >= 1.')
  if f.eval_workers < 0:
    problems.append(f'--eval_workers must be >= 0, got {f.eval_workers}.')
  if f['init_scope'].present and not f.init_from:
    problems.append('--init_scope needs --init_from.')
  if f.test_num_episodes < 1:
    problems.append('--test_num_episodes must be >= 1.')
  if f.record and f.mode != 'test':
    problems.append('--record applies to --mode=test.')
  elif f.record:
    tasks = [name.strip() for name in f.env.split(',')]
    for _, path in record_lib.task_paths(f.record, tasks):
      problem = record_lib.path_problem(path, f.record_overwrite)
      if problem:
        where = '' if path == f.record else f' (the recording {path})'
        problems.append(f'--record={f.record}{where}: {problem}.')
  if f.record_overwrite and not f.record:
    problems.append('--record_overwrite needs --record.')
  if not known_family:
    problems.append(f'--env={f.env!r}: unknown family; use atari:<Game>, '
                    'sc2:<Map>, gym:<id> or minatar:<Game>.')
  if f.algorithm == 'impala' and not problems:
    # The config is built once the flags agree with each other.
    problems.extend(_impala_config_problems(f))
  if problems:
    raise app.UsageError('\n'.join(problems))
