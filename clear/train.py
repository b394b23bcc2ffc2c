r"""Train or test an IMPALA-CLEAR agent from the command line.

  python -m clear.train                                  # CartPole default
  python -m clear.train --env=atari:Pong --logdir=runs/pong
  python -m clear.train --mode=test --logdir=runs/pong --test_num_episodes=30

Running the same command again resumes from the latest checkpoint in
--logdir. Ctrl-C or SIGTERM stops the actors, writes a final checkpoint and
exits with status 0 (130 / 143 when interrupted before the end).
"""

import json
import logging as py_logging
import os
import re
import signal
import sys
from typing import NamedTuple

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging

from clear import algorithms
from clear import learner as learner_lib
from clear import policy as policy_lib
from clear import replay as replay_lib
from clear import run_loop

FLAGS = flags.FLAGS

# --- What to run --------------------------------------------------------------
flags.DEFINE_string('env', 'gym:CartPole-v1',
                    'Environment: atari:<Game>, sc2:<Map>, gym:<id>, or a '
                    'comma-separated sequence of one family trained one '
                    'after another (see --frames_per_task).')
flags.DEFINE_enum('algorithm', 'impala', sorted(algorithms.ALGORITHMS),
                  '; '.join(f'{name}: {entry.description}' for name, entry
                            in sorted(algorithms.ALGORITHMS.items())) +
                  '. The flags below apply to impala unless their group '
                  'says otherwise; batch_size, unroll_length, '
                  'learning_rate, discounting, reward_scaling, '
                  'reward_clipping, clip_grad_norm, entropy_cost and '
                  'jit_compile apply to every algorithm that has them, and '
                  'when left unset the others use their own defaults.')
flags.DEFINE_enum('mode', 'train', ['train', 'test'],
                  'train, or test the latest checkpoint.')
flags.DEFINE_string('logdir', '/tmp/clear/cartpole',
                    'Checkpoints, TensorBoard events and results go here.')
flags.DEFINE_integer('seed', 0, 'Base random seed.')
flags.DEFINE_integer('total_environment_frames', None,
                     'Environment frames to train for, replay excluded; the '
                     'learning rate decays to 0 over them (default per env '
                     'family: 400k for gym, 40M for Atari and SC2).')

# --- Actors ---------------------------------------------------------------------
flags.DEFINE_enum('backend', 'local', ['local', 'inline', 'ray'],
                  'Actors as local processes, inside the learner process '
                  '(acting and learning take turns: reproducible, less '
                  'memory), or as Ray actors.')
flags.DEFINE_string('ray_address', '',
                    'Ray cluster address for --backend=ray (empty: a local '
                    'Ray on the loopback address).')
flags.DEFINE_integer('num_actors', 1, 'Actor processes.')
flags.DEFINE_integer('envs_per_actor', None,
                     'Environments each actor steps as one batch (default: 64 '
                     'for gym, 32 for Atari, 1 for SC2 with impala; the '
                     'batch size with ppg, sac and ddpg).')
flags.DEFINE_integer('unroll_length', 20, 'Agent steps per unroll.')

# --- Network --------------------------------------------------------------------
flags.DEFINE_enum('network', 'auto',
                  ['auto', 'impala_shallow', 'impala_deep', 'mlp',
                   'fullyconv'], 'Agent torso.')
flags.DEFINE_integer('core_size', None,
                     'LSTM size (default: 256 for pixels, 64 for gym); 0 '
                     'makes the impala agent feed-forward.')
flags.DEFINE_bool('separate_critic', False,
                  'Give the critic its own network (needed to pretrain a '
                  'critic without a shared torso).')

# --- Learner --------------------------------------------------------------------
flags.DEFINE_integer('batch_size', 32, 'Unrolls per learner batch.')
flags.DEFINE_float('learning_rate', None,
                   'Initial learning rate (default: per env family, see '
                   'FAMILY_DEFAULTS).')
flags.DEFINE_enum('optimizer', None, list(learner_lib.OPTIMIZERS),
                  'Optimizer (default per env family: rmsprop, as IMPALA, '
                  'for Atari; adam otherwise; see FAMILY_DEFAULTS).')
flags.DEFINE_float('rmsprop_initial_mean_square', 1.0,
                   "Where RMSProp's mean of squared gradients starts: 1 as "
                   "in TF1's RMSPropOptimizer (IMPALA's), 0 as in Sonnet's.")
flags.DEFINE_float('clip_grad_norm', 40.0,
                   'Global gradient-norm clip (0 disables).')
flags.DEFINE_float('discounting', 0.99, 'Discount factor.')
flags.DEFINE_enum('reward_clipping', 'abs_one',
                  ['abs_one', 'soft_asymmetric', 'none'], 'Reward clipping.')
flags.DEFINE_float('reward_scaling', None,
                   'Rewards are scaled before clipping (default: 0.1 for gym, '
                   'whose dense rewards make values large, else 1).')
flags.DEFINE_float('baseline_cost', 0.5, 'Weight of the baseline loss.')
flags.DEFINE_float('entropy_cost', 0.01, 'Weight of the entropy term.')
flags.DEFINE_bool('clip_advantage', False,
                  'Zero negative advantages in the policy gradient.')
flags.DEFINE_bool('jit_compile', False, 'Compile the learner step with XLA.')

# --- CLEAR replay ---------------------------------------------------------------
flags.DEFINE_float('replay_proportion', 0.5,
                   'Share of each batch taken from replay (0: plain IMPALA).')
flags.DEFINE_integer('replay_buffer_size', 10_000, 'Replay capacity, unrolls.')
flags.DEFINE_enum('replay_sampling', 'reservoir', list(replay_lib.SAMPLING_MODES),
                  'reservoir (CLEAR) or fifo insertion.')
flags.DEFINE_enum('replay_storage', 'memory', list(replay_lib.STORAGE_MODES),
                  'Keep replay in memory or memory-mapped under --logdir.')
flags.DEFINE_integer('replay_prefill_unrolls', 0,
                     'Unrolls stored in replay before the first update.')
flags.DEFINE_bool('allow_empty_replay_on_resume', False,
                  'Resume even if the replay saved with the checkpoint is '
                  'missing or unreadable, starting with an empty buffer.')
flags.DEFINE_float('policy_cloning_cost', 0.01,
                   'Weight of the CLEAR policy-cloning KL.')
flags.DEFINE_float('value_cloning_cost', 0.005,
                   'Weight of the CLEAR value-cloning loss.')

# --- Task sequences and evaluation ----------------------------------------------
flags.DEFINE_integer('frames_per_task', 0,
                     'With a sequence --env: frames each task trains for '
                     'before the next (total = this x tasks x cycles).')
flags.DEFINE_integer('num_task_cycles', 1,
                     'How many times a task sequence is trained through.')
flags.DEFINE_integer('eval_interval_frames', 0,
                     'Evaluate every task every this many frames (0: only '
                     'task sequences evaluate, at the start and at each task '
                     'switch and the end).')
flags.DEFINE_integer('eval_episodes', 10, 'Episodes per task and evaluation.')
flags.DEFINE_integer('eval_max_steps', 27_000,
                     'Agent steps after which an evaluation episode is cut.')

# --- Starting from another run ---------------------------------------------------
flags.DEFINE_string('init_from', '',
                    'Start a NEW run from the weights of another run (its '
                    'logdir or a checkpoint path); ignored when --logdir '
                    'already holds a checkpoint, which is resumed.')
flags.DEFINE_enum('init_scope', 'all', list(policy_lib.INIT_SCOPES),
                  'Which weights --init_from loads: all, only the critic '
                  '(e.g. from a critic-pretraining run) or only the policy.')

# --- Critic pretraining ---------------------------------------------------------
flags.DEFINE_integer('num_critic_pretrain_frames', 0,
                     'Frames of critic-only training before the main phase.')

# --- Step multipliers ---------------------------------------------------------
flags.DEFINE_bool('fixed_step_mul', True,
                  'Use a constant step multiplier (else the agent picks one).')
flags.DEFINE_integer('step_mul', None,
                     'Frames per agent step when fixed (default: 4 Atari, '
                     '8 SC2, 1 gym).')
flags.DEFINE_integer('max_step_mul', 8,
                     'Number of choices of the dynamic step multiplier.')

flags.DEFINE_bool('stop_on_nonfinite', False,
                  'Stop at the first update with a non-finite loss or '
                  'gradient (default: skip it, count it and go on).')

# --- Bookkeeping ----------------------------------------------------------------
flags.DEFINE_integer('checkpoint_interval_s', 600, 'Seconds between checkpoints.')
flags.DEFINE_integer('log_interval_s', 10, 'Seconds between progress lines.')
flags.DEFINE_integer('test_num_episodes', 10, 'Episodes played by --mode=test.')

# --- PPG, SAC and DDPG -------------------------------------------------------------
# One flag per field of their configs that the flags above do not cover,
# defined from the configs themselves so the two never drift apart. Unset
# (None) means the algorithm's own default.

# Config fields that the shared flags above set (or the run derives).
SHARED_FIELDS = ('batch_size', 'num_replay', 'unroll_length',
                 'total_environment_frames', 'fixed_step_mul', 'step_mul',
                 'discounting', 'reward_scaling', 'reward_clipping',
                 'learning_rate', 'clip_grad_norm', 'entropy_cost',
                 'jit_compile')
# Flags that only IMPALA-CLEAR reads.
IMPALA_ONLY_FLAGS = ('replay_proportion', 'replay_buffer_size',
                     'replay_sampling', 'replay_storage',
                     'replay_prefill_unrolls', 'policy_cloning_cost',
                     'value_cloning_cost', 'baseline_cost', 'clip_advantage',
                     'optimizer', 'rmsprop_initial_mean_square',
                     'num_critic_pretrain_frames',
                     'separate_critic')


def _field_help(entry, field: str) -> str:
  """The field's description from its module's or its class's docstring,
  where fields are listed as `name [default]: text` or `a, b: text`."""
  module = sys.modules[entry.config.__module__]
  lines = ((module.__doc__ or '') + '\n' +
           (entry.config.__doc__ or '')).splitlines()
  header = re.compile(r'^(\s+)([\w ,]+(?:\[[^\]]*\][\w ,]*)*):\s*(.*)$')
  for i, line in enumerate(lines):
    match = header.match(line)
    if not match:
      continue
    names = [n.strip() for n in re.sub(r'\[[^\]]*\]', '',
                                       match.group(2)).split(',')]
    if field not in names:
      continue
    indent, text = len(match.group(1)), [match.group(3)]
    for follow in lines[i + 1:]:  # Continuation lines are indented more.
      if not follow.strip() or len(follow) - len(follow.lstrip()) <= indent:
        break
      text.append(follow.strip())
    return ' '.join(t for t in text if t)
  return ''


def _define_algorithm_flags():
  """Defines `--<field>` for every port-specific config field.

  Returns:
    {field: [algorithm names that have it]}.
  """
  owners = {}
  for name, entry in sorted(algorithms.ALGORITHMS.items()):
    if name == 'impala':
      continue
    for field, default in entry.config._field_defaults.items():
      if field not in SHARED_FIELDS:
        owners.setdefault(field, []).append((name, entry, default))
  for field, entries in sorted(owners.items()):
    defaults = [d for _, _, d in entries if d is not None]
    described = next((h for h in (_field_help(e, field) for _, e, _ in entries)
                      if h), '')
    help_text = (f'{described} ' if described else '') + '(' + ', '.join(
        f'{name}: {default!r}' for name, _, default in entries) + ')'
    if defaults and all(isinstance(d, bool) for d in defaults):
      flags.DEFINE_bool(field, None, help_text)
    elif defaults and all(isinstance(d, int) and not isinstance(d, bool)
                          for d in defaults):
      flags.DEFINE_integer(field, None, help_text)
    elif defaults and all(isinstance(d, str) for d in defaults):
      flags.DEFINE_string(field, None, help_text)
    else:  # Floats, and optional numbers whose default is None.
      flags.DEFINE_float(field, None, help_text)
  return {field: [name for name, _, _ in entries]
          for field, entries in owners.items()}


ALGORITHM_FLAGS = _define_algorithm_flags()


class FamilyDefaults(NamedTuple):
  """Flag defaults that depend on the env family."""
  step_mul: int
  learning_rate: float
  reward_scaling: float
  core_size: int
  envs_per_actor: int
  optimizer: str
  total_environment_frames: int


# gym: dense rewards (CartPole pays 1 a step) make values ~100, whose squared
# baseline error would swamp the policy gradient; scaling by 0.1 fixes that.
# atari: IMPALA's Atari settings (RMSProp, decay 0.99, epsilon 0.01); 40M
# frames let the recurrent agent learn Pong (+18 near 25M, see the README),
# where 400k would decay the learning rate to 0 before anything is learned.
FAMILY_DEFAULTS = {
    'gym': FamilyDefaults(step_mul=1, learning_rate=3e-3, reward_scaling=0.1,
                          core_size=64, envs_per_actor=64, optimizer='adam',
                          total_environment_frames=400_000),
    'atari': FamilyDefaults(step_mul=4, learning_rate=6e-4,
                            reward_scaling=1.0, core_size=256,
                            envs_per_actor=32, optimizer='rmsprop',
                            total_environment_frames=40_000_000),
    'sc2': FamilyDefaults(step_mul=8, learning_rate=3e-4, reward_scaling=1.0,
                          core_size=256, envs_per_actor=1, optimizer='adam',
                          total_environment_frames=40_000_000),
}


def env_family(name: str) -> str:
  return name.split(':', 1)[0]


def family_default(f, name):
  """The flag's value, or its env-family default when left unset."""
  value = getattr(f, name)
  if value is None:
    return getattr(FAMILY_DEFAULTS[env_family(f.env)], name)
  return value


def sequence_frames(f) -> int:
  """Total frames of a task sequence: frames per task x tasks x cycles."""
  return f.frames_per_task * len(f.env.split(',')) * f.num_task_cycles


def total_frames(f) -> int:
  """Frames the run trains for: a sequence's, else the flag or the family
  default."""
  if ',' in f.env:
    return sequence_frames(f)
  return family_default(f, 'total_environment_frames')


def _impala_problems(f):
  """What is wrong with the IMPALA-CLEAR flags."""
  problems = [f'--{name} applies to --algorithm='
              f'{"/".join(ALGORITHM_FLAGS[name])}, not impala.'
              for name in sorted(ALGORITHM_FLAGS) if f[name].present]
  try:
    num_replay = replay_lib.replay_batch_size(f.batch_size,
                                              f.replay_proportion)
  except ValueError as e:
    problems.append(f'--replay_proportion / --batch_size: {e}')
    num_replay = 0
  if num_replay == 0 and f.replay_proportion == 0 and (
      (f['policy_cloning_cost'].present and f.policy_cloning_cost) or
      (f['value_cloning_cost'].present and f.value_cloning_cost)):
    problems.append('--policy_cloning_cost / --value_cloning_cost need '
                    'replay: set --replay_proportion > 0 or drop them.')
  if num_replay and f.replay_buffer_size < 1:
    problems.append('--replay_buffer_size must be >= 1 with replay on.')
  if f.rmsprop_initial_mean_square < 0:
    problems.append('--rmsprop_initial_mean_square must be >= 0.')
  if (f['rmsprop_initial_mean_square'].present and
      family_default(f, 'optimizer') != 'rmsprop'):
    problems.append('--rmsprop_initial_mean_square needs --optimizer=rmsprop.')
  return problems


def _port_problems(f):
  """What is wrong with the flags of PPG, SAC or DDPG."""
  problems = [f'--{name} applies to --algorithm=impala only.'
              for name in IMPALA_ONLY_FLAGS if f[name].present]
  problems += [f'--{name} applies to --algorithm='
               f'{"/".join(ALGORITHM_FLAGS[name])}, not {f.algorithm}.'
               for name in sorted(ALGORITHM_FLAGS)
               if f[name].present and f.algorithm not in ALGORITHM_FLAGS[name]]
  if not problems:
    try:
      algorithms.ALGORITHMS[f.algorithm].validate(
          port_config(f, env_options_from_flags(f)))
    except (ValueError, TypeError) as e:
      problems.append(f'--algorithm={f.algorithm}: {e}')
  return problems


def env_options_from_flags(f) -> dict:
  options = {'fixed_step_mul': f.fixed_step_mul}
  if f.fixed_step_mul:
    options['step_mul'] = family_default(f, 'step_mul')
  else:
    options['max_step_mul'] = f.max_step_mul
  return options


def port_config(f, env_options):
  """The PPG / SAC / DDPG config: its own defaults, overridden by the
  shared flags the user set and by the algorithm flags."""
  config_class = algorithms.ALGORITHMS[f.algorithm].config
  values = {'total_environment_frames': total_frames(f),
            'fixed_step_mul': env_options['fixed_step_mul'],
            'step_mul': env_options.get('step_mul', 1)}
  for field in config_class._fields:
    if field in values or field == 'num_replay':
      continue
    if field in SHARED_FIELDS:
      if f[field].present:
        values[field] = getattr(f, field)
    elif getattr(f, field) is not None:
      values[field] = getattr(f, field)
  return config_class(**{k: v for k, v in values.items()
                         if k in config_class._fields})


def validate(f) -> None:
  """Checks flag combinations; raises app.UsageError naming the flags."""
  problems = []
  if f.unroll_length < 1:
    problems.append(f'--unroll_length must be >= 1 (got {f.unroll_length}).')
  if f.batch_size < 1:
    problems.append(f'--batch_size must be >= 1 (got {f.batch_size}).')
  if f.core_size is not None and (
      f.core_size < 0 or f.core_size == 0 and f.algorithm != 'impala'):
    problems.append(f'--core_size must be >= 1, or 0 (feed-forward) with '
                    f'--algorithm=impala (got {f.core_size}).')
  if f.algorithm == 'impala':
    problems.extend(_impala_problems(f))
  else:
    problems.extend(_port_problems(f))
  known_family = env_family(f.env) in FAMILY_DEFAULTS
  if f.total_environment_frames is not None and f.total_environment_frames < 1:
    problems.append('--total_environment_frames must be >= 1.')
  elif known_family and f.num_critic_pretrain_frames > total_frames(f):
    problems.append(
        f'--num_critic_pretrain_frames ({f.num_critic_pretrain_frames:,}) '
        'exceeds --total_environment_frames '
        f'({total_frames(f):,}).')
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
  if ',' in f.env:
    if f.frames_per_task < 1:
      problems.append('A sequence --env needs --frames_per_task >= 1.')
    elif f['total_environment_frames'].present and (
        f.total_environment_frames != sequence_frames(f)):
      problems.append(
          f'--total_environment_frames ({f.total_environment_frames:,}) '
          'differs from --frames_per_task x tasks x --num_task_cycles '
          f'({sequence_frames(f):,}); leave it unset for a sequence.')
    if f.num_task_cycles < 1:
      problems.append('--num_task_cycles must be >= 1.')
  elif f['frames_per_task'].present or f['num_task_cycles'].present:
    problems.append('--frames_per_task / --num_task_cycles need a sequence '
                    '--env (comma-separated tasks).')
  if f.eval_interval_frames < 0 or f.eval_episodes < 1 or (
      f.eval_max_steps < 1):
    problems.append('--eval_interval_frames must be >= 0, --eval_episodes '
                    'and --eval_max_steps >= 1.')
  if f['init_scope'].present and not f.init_from:
    problems.append('--init_scope needs --init_from.')
  if f.test_num_episodes < 1:
    problems.append('--test_num_episodes must be >= 1.')
  if not known_family:
    problems.append(f'--env={f.env!r}: unknown family; use atari:<Game>, '
                    'sc2:<Map> or gym:<id>.')
  if problems:
    raise app.UsageError('\n'.join(problems))


def envs_per_actor(f, learner_config) -> int:
  """--envs_per_actor, else IMPALA's family default, else (PPG, SAC, DDPG)
  the batch size: one collect of one actor then feeds exactly one update."""
  if f.envs_per_actor is not None or f.algorithm == 'impala':
    return family_default(f, 'envs_per_actor')
  return learner_config.batch_size


def config_from_flags(f) -> run_loop.RunConfig:
  env_options = env_options_from_flags(f)
  if f.algorithm != 'impala':
    learner_config = port_config(f, env_options)
  else:
    num_replay = replay_lib.replay_batch_size(f.batch_size,
                                              f.replay_proportion)
    learner_config = learner_lib.LearnerConfig(
        batch_size=f.batch_size, num_replay=num_replay,
        unroll_length=f.unroll_length,
        total_environment_frames=total_frames(f),
        discounting=f.discounting, reward_clipping=f.reward_clipping,
        reward_scaling=family_default(f, 'reward_scaling'),
        baseline_cost=f.baseline_cost,
        entropy_cost=f.entropy_cost,
        policy_cloning_cost=f.policy_cloning_cost if num_replay else 0.0,
        value_cloning_cost=f.value_cloning_cost if num_replay else 0.0,
        clip_grad_norm=f.clip_grad_norm, clip_advantage=f.clip_advantage,
        learning_rate=family_default(f, 'learning_rate'),
        optimizer=family_default(f, 'optimizer'),
        rmsprop_initial_mean_square=f.rmsprop_initial_mean_square,
        fixed_step_mul=f.fixed_step_mul,
        step_mul=env_options.get('step_mul', 1),
        jit_compile=f.jit_compile)
  core_size = family_default(f, 'core_size')
  return run_loop.RunConfig(
      env_name=f.env, env_options=env_options, algorithm=f.algorithm,
      agent_config=policy_lib.AgentConfig(f.network, core_size,
                                          f.separate_critic),
      learner_config=learner_config, logdir=f.logdir, seed=f.seed,
      num_actors=f.num_actors,
      envs_per_actor=envs_per_actor(f, learner_config),
      replay_buffer_size=f.replay_buffer_size,
      replay_sampling=f.replay_sampling, replay_storage=f.replay_storage,
      replay_prefill_unrolls=f.replay_prefill_unrolls,
      num_critic_pretrain_frames=f.num_critic_pretrain_frames,
      backend=f.backend, ray_address=f.ray_address,
      checkpoint_interval_s=f.checkpoint_interval_s,
      log_interval_s=f.log_interval_s,
      allow_empty_replay_on_resume=f.allow_empty_replay_on_resume,
      stop_on_nonfinite=f.stop_on_nonfinite, init_from=f.init_from,
      init_scope=f.init_scope, frames_per_task=f.frames_per_task,
      num_task_cycles=f.num_task_cycles,
      eval_interval_frames=f.eval_interval_frames,
      eval_episodes=f.eval_episodes, eval_max_steps=f.eval_max_steps)


class StopSignal:
  """Turns SIGTERM / SIGINT into a polite stop request."""

  def __init__(self):
    self.signum = None
    for sig in (signal.SIGTERM, signal.SIGINT):
      signal.signal(sig, self._handle)

  def _handle(self, signum, frame):
    del frame
    if self.signum is not None:  # A second signal: stop right away.
      raise KeyboardInterrupt
    self.signum = signum
    logging.warning('Signal %d: stopping after the current update and '
                    'writing a final checkpoint.', signum)

  def __call__(self) -> bool:
    return self.signum is not None


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  validate(FLAGS)
  py_logging.getLogger().setLevel(py_logging.INFO)
  config = config_from_flags(FLAGS)
  try:
    if FLAGS.mode == 'test':
      summary = run_loop.evaluate(config, FLAGS.test_num_episodes)
      print(json.dumps({k: v for k, v in summary.items() if k != 'returns'},
                       indent=2))
      return 0
    stop = StopSignal()
    result = run_loop.train(config, stop_requested=stop)
  except (ValueError, RuntimeError) as e:  # Bad env, checkpoint, no SC2...
    logging.error('%s', e)
    print(f'error: {e}', file=sys.stderr)
    return 2
  logging.info('Done: %s', result._asdict())
  if result.stopped_early and stop.signum is not None:
    return 128 + stop.signum
  return 0


if __name__ == '__main__':
  app.run(main)
