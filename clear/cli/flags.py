"""The flags of `python -m clear.train`, in groups by purpose.

Each `FLAG_GROUPS.heading` opens a group that `--help` and `--helpfull` list
under that heading (`clear.cli.flag_help`); every flag belongs to the heading
above its definition, in definition order. The flags of PPG, SAC and DDPG
(`ALGORITHM_FLAGS`), the IMPALA flags that set a `LearnerConfig` field of
their name (`IMPALA_DECLARED_FLAGS`) and the continual methods' flags are
defined from the settings their configs declare (`clear.settings`), so the
two never drift apart.
Importing this module defines the flags in absl's `flags.FLAGS`; nothing
else of clear reads them: `clear.cli.configs` turns them into configs.
`removed_in_flagfiles` names the lines of a flagfile that set a flag of an
earlier version that this one no longer has.
"""

from typing import Optional

from absl import flags

import agents as agents_lib
from clear import settings as settings_lib
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import config as impala_config
from clear.cli import flag_help
from clear.continual import methods as continual_methods
from clear.continual import schedule as schedule_lib
from clear.replay import buffer as replay_lib
from clear.runtime import run_config as run_config_lib

FLAGS = flags.FLAGS
# `--help` and `--helpfull` list the flags under these headings (see
# clear.cli.flag_help); each flag belongs to the heading above its definition.
FLAG_GROUPS = flag_help.FlagGroups(FLAGS)

# The IMPALA flags that set the `LearnerConfig` field of their name, at its
# default: each is defined from the field's declaration
# (`impala_config.SETTINGS`) where its group lists it, and
# `clear.cli.configs` passes its value on as it is.
IMPALA_DECLARED_FLAGS = (
    'unroll_length', 'learning_rate_warmup_frames', 'rmsprop_epsilon',
    'rmsprop_initial_mean_square', 'clip_grad_norm', 'discounting',
    'reward_clipping', 'baseline_cost', 'entropy_cost', 'entropy_cost_end',
    'clip_advantage', 'jit_compile', 'policy_cloning_cost',
    'value_cloning_cost', 'fixed_step_mul')
# The flags `clear.cli.configs` derives LearnerConfig fields from, defined
# by hand below: their default is None, the env family's
# (`clear.cli.defaults`), or the field is computed from them (num_replay
# from replay_proportion and the batch size; discount_per from
# fixed_step_mul when unset; step_mul only with fixed multipliers).
IMPALA_DERIVED_FLAGS = (
    'batch_size', 'learning_rate', 'optimizer', 'reward_scaling',
    'total_environment_frames', 'replay_proportion', 'discount_per',
    'step_mul')


def _declare(name: str):
  """Defines the IMPALA flag `name` from its `LearnerConfig` setting."""
  assert name in IMPALA_DECLARED_FLAGS, name
  settings_lib.define_flag(impala_config.SETTING[name])


FLAG_GROUPS.heading('What to run')
flags.DEFINE_string('env', 'gym:CartPole-v1',
                    'Environment: atari:<Game>, sc2:<Map>, gym:<id>, '
                    'minatar:<Game> (Asterix, Breakout, Freeway, Seaquest, '
                    'SpaceInvaders), or a comma-separated sequence of one '
                    'family trained one after another (see '
                    '--frames_per_task).')
flags.DEFINE_enum('algorithm', 'impala', sorted(registry.ALGORITHMS),
                  '; '.join(f'{name}: {entry.description}' for name, entry
                            in sorted(registry.ALGORITHMS.items())) +
                  '. The flags below apply to impala unless their group '
                  'says otherwise; batch_size, unroll_length, '
                  'learning_rate, discounting, reward_scaling, '
                  'reward_clipping, clip_grad_norm, entropy_cost and '
                  'jit_compile apply to every algorithm that has them, and '
                  'when left unset the others use their own defaults.')
flags.DEFINE_enum('mode', 'train', ['train', 'test'],
                  'train; or test: play --test_num_episodes episodes with '
                  'the newest readable checkpoint in --logdir, on the env '
                  'and with the algorithm and network its run.json records, '
                  'print the returns and write them to test_results.json.')
flags.DEFINE_string('logdir', '/tmp/clear/cartpole',
                    'Checkpoints, TensorBoard events and results go here.')
flags.DEFINE_integer('seed', 0, 'Base random seed.')
flags.DEFINE_integer('total_environment_frames', None,
                     'Environment frames to train for, replay excluded; the '
                     'learning rate decays to 0 over them (default per env '
                     'family: 400k for gym, 5M for MinAtar, 40M for SC2 '
                     'and 80M for Atari).')

FLAG_GROUPS.heading('Actors')
flags.DEFINE_enum('backend', 'local', ['local', 'inline', 'ray'],
                  'Actors as local processes, inside the learner process '
                  '(acting and learning take turns: reproducible, less '
                  'memory), or as Ray actors.')
flags.DEFINE_string('ray_address', '',
                    'Ray cluster address for --backend=ray (empty: a local '
                    'Ray on the loopback address).')
flags.DEFINE_string('ray_actor_resource', '',
                    'Custom Ray resource each actor needs one unit of, so '
                    'actors run only on nodes started with ray start '
                    '--resources=\'{"NAME": N}\' (never beside the '
                    'learner); empty: any node with a free CPU.')
flags.DEFINE_integer('max_actor_restarts', 20,
                     'Deaths of actors (processes, Ray actors, Ray nodes) '
                     'tolerated, in all, before the run stops with an '
                     'error.', lower_bound=0)
flags.DEFINE_float('actor_timeout_s', 300.0,
                   'Seconds an actor may give no sign of life (no unroll, no '
                   'step of its loop, or half an unroll sent) before it is '
                   'reported by id and PID, killed and replaced (a restart); '
                   'a warning comes at half of it, at most a minute.')
flags.DEFINE_integer('num_actors', 1, 'Actor processes.')
flags.DEFINE_integer('envs_per_actor', None,
                     'Environments each actor steps as one batch (default: 64 '
                     'for gym and MinAtar, 32 for Atari, 1 for SC2 with '
                     'impala; the '
                     'batch size with ppg, sac and ddpg).')
_declare('unroll_length')

FLAG_GROUPS.heading('Network')
flags.DEFINE_enum('network', 'auto',
                  ['auto', 'impala_shallow', 'impala_deep', 'mlp',
                   'fullyconv', 'minatar'],
                  'Agent torso (auto: fullyconv for SC2, minatar for '
                  "MinAtar's 10x10 boards, impala_shallow for other "
                  'images, mlp for vectors).')
flags.DEFINE_integer('core_size', None,
                     'LSTM size (default: 256 for Atari and SC2, 128 for '
                     'MinAtar, 64 for gym); 0 '
                     'makes the impala agent feed-forward.')
flags.DEFINE_bool('separate_critic', False,
                  'Give the critic its own network (needed to pretrain a '
                  'critic without a shared torso).')
flags.DEFINE_enum('core', 'lstm', list(agents_lib.CORES),
                  'Recurrent core: lstm (Sonnet\'s) or layer_norm_lstm (gates '
                  'and cell layer-normalised, Ba et al. 2016).')
flags.DEFINE_enum('torso_norm', None, list(agents_lib.TORSO_NORMS),
                  "Normalisation of the pre-activations of the torso's final "
                  'linear layer (each hidden layer of the mlp torso): none '
                  "(the papers'), layer_norm (across units, with a "
                  "learnable gain and offset), which keeps a wide layer's "
                  'ReLU units from dying together at high learning rates: '
                  'normalised '
                  'across units, they cannot all fall below zero together. '
                  'Default per env family: layer_norm for Atari, none '
                  'otherwise and for the PPG, SAC and DDPG ports (see '
                  'FAMILY_DEFAULTS).')

FLAG_GROUPS.heading('Learner')
flags.DEFINE_integer('batch_size', None,
                     'Unrolls per learner batch (default: per env family, '
                     '64 for Atari and 32 for the others; see '
                     'FAMILY_DEFAULTS).')
flags.DEFINE_float('learning_rate', None,
                   'Learning rate at the start (after any '
                   '--learning_rate_warmup_frames), decayed linearly to 0 '
                   'at --total_environment_frames (default: per env '
                   'family, see FAMILY_DEFAULTS).')
_declare('learning_rate_warmup_frames')
flags.DEFINE_enum('optimizer', None, list(impala_config.OPTIMIZERS),
                  'Optimizer (default per env family: rmsprop, as IMPALA, '
                  'for Atari; adam otherwise; see FAMILY_DEFAULTS).')
_declare('rmsprop_epsilon')
_declare('rmsprop_initial_mean_square')
_declare('clip_grad_norm')
_declare('discounting')
flags.DEFINE_enum('discount_per', None, list(impala_config.DISCOUNT_PER),
                  'step: every agent step is discounted by --discounting; '
                  'frame: a step of k frames by discounting^(k / the '
                  "family's default step multiplier), the semi-Markov "
                  'discount (default: frame with --nofixed_step_mul, else '
                  'step).')
_declare('reward_clipping')
flags.DEFINE_float('reward_scaling', None,
                   'Rewards are scaled before clipping (default: 0.1 for gym, '
                   'whose dense rewards make values large, else 1).')
_declare('baseline_cost')
_declare('entropy_cost')
_declare('entropy_cost_end')
_declare('clip_advantage')
_declare('jit_compile')
flags.DEFINE_string('learner_device', 'auto',
                    "The learner's TensorFlow device: auto (the first GPU "
                    'if one is visible, else the CPU), cpu, gpu, or e.g. '
                    '/GPU:1. Actors never use a GPU.')
flags.DEFINE_bool('stop_on_nonfinite', False,
                  'Stop at the first update with a non-finite loss or '
                  'gradient (default: skip it, count it and go on).')

FLAG_GROUPS.heading('CLEAR replay (impala)')
flags.DEFINE_float('replay_proportion', 0.5,
                   'Share of each batch taken from replay (0: plain IMPALA).')
flags.DEFINE_integer('replay_buffer_size', 10_000, 'Replay capacity, unrolls.')
flags.DEFINE_enum('replay_sampling', 'reservoir',
                  list(replay_lib.SAMPLING_MODES),
                  'reservoir (CLEAR) or fifo insertion.')
flags.DEFINE_enum('replay_storage', 'memory', list(replay_lib.STORAGE_MODES),
                  'Keep replay in memory or memory-mapped under --logdir.')
flags.DEFINE_integer('replay_prefill_unrolls', 0,
                     'Unrolls stored in replay before the first update.')
flags.DEFINE_bool('allow_empty_replay_on_resume', False,
                  'Resume even if the replay saved with the checkpoint is '
                  'missing or unreadable, starting with an empty buffer.')
flags.DEFINE_bool('keep_final_replay', True,
                  'Keep the replay in the checkpoints of a run that reaches '
                  'its frames. false deletes it then (only training the run '
                  'further needs it; that takes '
                  '--allow_empty_replay_on_resume), freeing the disk of '
                  "a study's finished runs.")
_declare('policy_cloning_cost')
_declare('value_cloning_cost')

FLAG_GROUPS.heading('Continual-learning methods (impala)')
flags.DEFINE_enum('continual_method', 'none',
                  list(continual_methods.CONTINUAL_METHODS),
                  'With a sequence --env, consolidate at the end of each '
                  'period (a task, or --consolidation_interval_frames with '
                  '--task_boundaries=hidden): ewc keeps, for every period '
                  "(task) trained, its final weights (anchor) and the "
                  'diagonal Fisher of its policy-gradient and baseline loss, '
                  'and adds lambda/2 sum F (theta - anchor)^2 to the loss '
                  '(loss/ewc); online_ewc keeps one anchor, the latest, and '
                  'one running Fisher, decayed by --ewc_gamma at each '
                  'consolidation; l2 adds lambda/2 sum (theta - anchor)^2 '
                  'toward the latest anchor (loss/l2). All combine with CLEAR '
                  'replay. pnc is Progress & Compress: an active column with '
                  'lateral connections from a knowledge base learns '
                  '(progress), then the knowledge base distils it (KL, '
                  'loss/distillation) under online EWC (--ewc_* flags, '
                  'loss/ewc) for the rest of the period (compress); the '
                  'knowledge base plays in evaluation.')
flags.DEFINE_enum('task_boundaries', 'given',
                  list(continual_methods.TASK_BOUNDARIES),
                  'given: a method consolidates at each task switch; hidden: '
                  'it is told nothing of the switches and consolidates every '
                  '--consolidation_interval_frames (evaluation and the '
                  'metrics still know the tasks).')
flags.DEFINE_integer(
    'consolidation_interval_frames',
    continual_methods.DEFAULT_CONSOLIDATION_INTERVAL_FRAMES,
    'With --task_boundaries=hidden: frames between consolidations (the '
    'default comes from the methods, not the schedule: '
    'docs/continual.md#hidden-task-boundaries).')
for _setting in continual_methods.all_settings().values():
  settings_lib.define_flag(_setting)

FLAG_GROUPS.heading('Task sequences, evaluation and test mode')
flags.DEFINE_integer('frames_per_task', 0,
                     'With a sequence --env: frames each task trains for '
                     'before the next (total = this x tasks x cycles).')
flags.DEFINE_integer('num_task_cycles', 1,
                     'How many times a task sequence is trained through.')
flags.DEFINE_enum('segment_lengths', 'equal',
                  list(schedule_lib.SEGMENT_LENGTHS),
                  'With a sequence --env: equal gives every segment (one '
                  'visit of a task) --frames_per_task frames; random draws '
                  'each length as u x --frames_per_task, u uniform in '
                  '[0.5, 1.5] and seeded from --seed, scaled so the total '
                  'is the same (docs/continual.md), so that switches do not '
                  'fall on a fixed clock of frames.')
flags.DEFINE_integer('eval_interval_frames', 0,
                     'Evaluate every task every this many frames (0: only '
                     'task sequences evaluate, at the start and at each task '
                     'switch and the end).')
flags.DEFINE_integer('eval_episodes', 10, 'Episodes per task and evaluation.')
flags.DEFINE_integer('eval_max_steps', 27_000,
                     'Agent steps after which an evaluation episode is cut.')
flags.DEFINE_enum('evaluator', 'auto', ['auto', 'learner', 'process'],
                  'Where a training run plays its evaluations: in the '
                  'learner, which pauses for them, or in a process of their '
                  'own beside it, which trains on; auto: the learner with '
                  '--backend=inline (one process, reproducible), else a '
                  'process.')
flags.DEFINE_integer('eval_workers', 0,
                     'Processes that step the envs of an evaluation (and of '
                     '--mode=test), each a block of every task\'s episodes, '
                     'in parallel while the evaluator waits: the same '
                     'episodes and returns, sooner when a core is free. 0: '
                     'the evaluator steps them itself, which suits envs '
                     'cheaper than the pipes (MinAtar, gym).')
flags.DEFINE_integer('test_num_episodes', 10, 'Episodes played by --mode=test.')
flags.DEFINE_string('record', '',
                    'With --mode=test: after the test episodes, play one '
                    'more and write what the agent saw (Atari frames, '
                    'MinAtar boards) to this path, in the format its '
                    'extension names: .gif (needs Pillow, in the plot '
                    'extra) or .mp4 (needs imageio and imageio-ffmpeg). An '
                    'existing file is refused unless --record_overwrite.')
flags.DEFINE_bool('record_overwrite', False,
                  'Let --record replace an existing file.')

FLAG_GROUPS.heading('Starting from another run')
flags.DEFINE_string('init_from', '',
                    'Start a NEW run from the weights of another run (its '
                    'logdir or a checkpoint path), with the env, algorithm '
                    'and network its run.json records; ignored when --logdir '
                    'already holds a checkpoint, which is resumed.')
flags.DEFINE_enum('init_scope', 'all', list(policy_lib.INIT_SCOPES),
                  'Which weights --init_from loads: all, only the critic '
                  '(e.g. from a critic-pretraining run) or only the policy.')

FLAG_GROUPS.heading('Critic pretraining (impala)')
flags.DEFINE_integer('num_critic_pretrain_frames', 0,
                     'Frames of critic-only training before the main phase.')

FLAG_GROUPS.heading('Step multipliers')
_declare('fixed_step_mul')
flags.DEFINE_integer('step_mul', None,
                     'Frames per agent step when fixed (default: 4 Atari, '
                     '8 SC2, 1 gym).')
flags.DEFINE_integer('max_step_mul', 8,
                     'Number of choices of the dynamic step multiplier.')

FLAG_GROUPS.heading('Checkpoints and progress')
flags.DEFINE_integer('checkpoint_interval_s', 600,
                     'Seconds between checkpoints.')
flags.DEFINE_integer('log_interval_s', 10, 'Seconds between progress lines.')

FLAG_GROUPS.heading("PPG, SAC and DDPG (with each algorithm's default)")
# One flag per field of their configs that the flags above do not cover,
# defined from the configs themselves so the two never drift apart. Unset
# (None) means the algorithm's own default.

# Config fields that the shared flags above set (or the run derives).
SHARED_FIELDS = ('batch_size', 'num_replay', 'unroll_length',
                 'total_environment_frames', 'fixed_step_mul', 'step_mul',
                 'discounting', 'reward_scaling', 'reward_clipping',
                 'learning_rate', 'clip_grad_norm', 'entropy_cost',
                 'jit_compile')
# The flags of the continual-learning methods' settings.
METHOD_FLAGS = tuple(continual_methods.all_settings())
# Flags that only IMPALA-CLEAR reads.
IMPALA_ONLY_FLAGS = ('discount_per', 'replay_proportion', 'replay_buffer_size',
                     'replay_sampling', 'replay_storage',
                     'replay_prefill_unrolls', 'policy_cloning_cost',
                     'value_cloning_cost', 'baseline_cost', 'clip_advantage',
                     'optimizer', 'learning_rate_warmup_frames',
                     'entropy_cost_end', 'rmsprop_initial_mean_square',
                     'rmsprop_epsilon', 'num_critic_pretrain_frames',
                     'separate_critic', 'core', 'torso_norm',
                     'continual_method', 'task_boundaries',
                     'consolidation_interval_frames') + METHOD_FLAGS


def _define_algorithm_flags():
  """Defines `--<field>` for every port-specific config field, from the
  config's declared settings (`SETTINGS`): the help of the first algorithm
  (by name) that declares the field, then each algorithm's default. The
  flag's default is None, the algorithm's own.

  Returns:
    {field: [algorithm names that have it]}.
  """
  owners = {}
  for name, entry in sorted(registry.ALGORITHMS.items()):
    if name == 'impala':
      continue
    for setting in entry.config.SETTINGS:
      if setting.name not in SHARED_FIELDS:
        owners.setdefault(setting.name, []).append((name, setting))
  for field, entries in sorted(owners.items()):
    help_text = entries[0][1].help + ' (' + ', '.join(
        f'{name}: {setting.default!r}' for name, setting in entries) + ')'
    settings_lib.define_flag(entries[0][1], help_text=help_text,
                             default=None)
  return {field: [name for name, _ in entries]
          for field, entries in owners.items()}


ALGORITHM_FLAGS = _define_algorithm_flags()
FLAG_GROUPS.end()


def _flagfile_value(line: str):
  """(name, value) that a flagfile line sets a `run_config.REMOVED_SETTINGS`
  flag or a `REMOVED_VALUES` value to, typed as the flag's default (the
  text as it is where it is not of that type); None for other lines."""
  name, has_value, text = line[2:].partition('=')
  removed = run_config_lib.REMOVED_SETTINGS
  if not has_value and name.startswith('no') and isinstance(
      removed.get(name[2:]), bool):
    return name[2:], False
  if name in run_config_lib.REMOVED_VALUES:
    return (name, text) if text in run_config_lib.REMOVED_VALUES[name] else None
  if name not in removed:
    return None
  default = removed[name]
  if isinstance(default, bool):
    words = {'true': True, 't': True, '1': True, 'false': False, 'f': False,
             '0': False}
    return name, words.get(text.lower(), text) if has_value else True
  try:
    return name, type(default)(text)
  except ValueError:
    return name, text


def removed_in_flagfiles(argv) -> Optional[str]:
  """What is wrong with the flagfiles of `argv` (see
  `flag_help.flagfile_lines`) that set a flag this version no longer has
  (`run_config.REMOVED_SETTINGS`) or a value it no longer takes
  (`run_config.REMOVED_VALUES`), one line each; None when they set none.
  A flag given on the command line instead is an unknown flag to absl."""
  problems = []
  for path, line in flag_help.flagfile_lines(argv):
    found = _flagfile_value(line)
    if found is None:
      continue
    name, value = found
    default = run_config_lib.REMOVED_SETTINGS.get(name)
    if name in run_config_lib.REMOVED_SETTINGS and value == default:
      problems.append(
          f'--flagfile={path} sets {line}, a flag this version of clear no '
          'longer has; it always runs that way: delete the line.')
      continue
    default = str(default).lower() if isinstance(default, bool) else default
    what = (f'a flag this version of clear no longer has (it always runs as '
            f'with --{name}={default})' if name in
            run_config_lib.REMOVED_SETTINGS else
            f'a value this version of clear no longer takes for --{name}')
    problems.append(
        f'--flagfile={path} sets {line}, {what}. Run it with clear at commit '
        f'{run_config_lib.LAST_COMMIT_WITH_REMOVED} or earlier, the last '
        'version that has it.')
  return '\n'.join(problems) or None
