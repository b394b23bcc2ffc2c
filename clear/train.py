r"""Train or test an IMPALA-CLEAR agent from the command line.

  python -m clear.train                                  # CartPole default
  python -m clear.train --env=atari:Pong --logdir=runs/pong
  python -m clear.train --mode=test --logdir=runs/pong --test_num_episodes=30

Running the same command again resumes from the latest checkpoint in
--logdir; a logdir holds one live training run at a time
(clear.runtime.run_lock), and a refused command leaves it as it found it. Test
mode (and --init_from) take the env, algorithm and network from the run's
run.json. Ctrl-C or SIGTERM stops the actors, writes a final checkpoint and
exits with status 0 (130 / 143 when interrupted before the end); a second one
while that checkpoint is written only says so, a third stops at once and says
what was not saved. Bad flags or files exit with status 2 and one message.
"""

import atexit
import json
import logging as py_logging
import math
import os
import re
import signal
import sys
import tempfile
import time
from typing import Dict, NamedTuple, Optional

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def _interrupted_while_loading(signum, frame):
  del frame
  os.write(2, b'Interrupted before the run started.\n')
  os._exit(128 + signum)  # pylint: disable=protected-access


def _ignore_late_signals():
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)


if __name__ == '__main__':
  # Exit hooks run last-registered first: this one, registered before the
  # imports below register theirs, runs after them (see `_exit_now`).
  atexit.register(_ignore_late_signals)
  # A Ctrl-C while the imports below load TensorFlow (seconds) ends the
  # program at once and quietly: nothing has started yet. `main` installs
  # the handlers of the run itself.
  signal.signal(signal.SIGINT, _interrupted_while_loading)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl import logging

import agents as agents_lib
from clear import checkpoint as checkpoint_lib
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import config as impala_config
from clear.cli import flag_help
from clear.continual import methods as continual_methods
from clear.replay import buffer as replay_lib
from clear.runtime import evaluation as evaluation_lib
from clear.runtime import progress
from clear.runtime import record as record_lib
from clear.runtime import run_config as run_config_lib
from clear.runtime import run_lock
from clear.runtime import run_loop

FLAGS = flags.FLAGS
PROGRAM = 'python -m clear.train'
# `--help` and `--helpfull` list the flags under these headings (see
# clear.cli.flag_help); each flag belongs to the heading above its definition.
FLAG_GROUPS = flag_help.FlagGroups(FLAGS)

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
flags.DEFINE_integer('num_actors', 1, 'Actor processes.')
flags.DEFINE_integer('envs_per_actor', None,
                     'Environments each actor steps as one batch (default: 64 '
                     'for gym and MinAtar, 32 for Atari, 1 for SC2 with '
                     'impala; the '
                     'batch size with ppg, sac and ddpg).')
flags.DEFINE_integer('unroll_length', 20, 'Agent steps per unroll.')

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
flags.DEFINE_enum('lstm_init', 'fan_in', list(agents_lib.LSTM_INITS),
                  'LSTM kernels: fan_in (std 1/sqrt(fan-in) per block, '
                  "Sonnet's) or glorot (uniform over the concatenated "
                  "[input, hidden] kernel, TF1's and scalable_agent's).")
flags.DEFINE_float('torso_grad_scale', 1.0,
                   'Multiplies the gradient the core sends back into the '
                   'torso (forward pass unchanged).')
flags.DEFINE_enum('torso_activation', 'relu',
                  list(agents_lib.TORSO_ACTIVATIONS),
                  "The torso's hidden-layer activation: relu (the papers'), "
                  'leaky_relu (slope 0.01 below zero) or elu; the latter two '
                  'keep a gradient in units a ReLU would leave dead.')
flags.DEFINE_enum('torso_norm', None, list(agents_lib.TORSO_NORMS),
                  "Normalisation of the pre-activations of the torso's final "
                  'linear layer (each hidden layer of the mlp torso): none '
                  "(the papers'), layer_norm (across units, with a "
                  "learnable gain and offset). Without it the shallow "
                  "torso's linear layer lost most of its ReLU units on "
                  'some Pong seeds at learning rates >= 8e-4; normalised '
                  'across units, they cannot all fall below zero together. '
                  'layer_norm_all also normalises each conv layer over the '
                  "whole map of a frame (a gain and offset per channel). "
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
flags.DEFINE_integer('learning_rate_warmup_frames', 0,
                     'Frames over which the learning rate ramps linearly '
                     'from 0 up to --learning_rate before its linear decay '
                     'to 0 at --total_environment_frames (0 = no ramp).')
flags.DEFINE_enum('optimizer', None, list(impala_config.OPTIMIZERS),
                  'Optimizer (default per env family: rmsprop, as IMPALA, '
                  'for Atari; adam otherwise; see FAMILY_DEFAULTS).')
flags.DEFINE_float('rmsprop_epsilon', 1e-5,
                   "RMSProp's epsilon; see --rmsprop_epsilon_outside for "
                   "where it is added. IMPALA's 0.01 under the root leaves "
                   "the LSTM's kernels, whose gradients are about 1e-3, at "
                   'a few percent of the normalised step; 1e-5 learned '
                   'Pong about 10M frames sooner (README).')
flags.DEFINE_bool('rmsprop_epsilon_outside', False,
                  "Add RMSProp's epsilon after the square root, "
                  "lr g / (sqrt(ms) + eps), as PyTorch and TorchBeast, "
                  'instead of under it as TF1 and IMPALA.')
flags.DEFINE_float('rmsprop_initial_mean_square', 1.0,
                   "Where RMSProp's mean of squared gradients starts: 1 as "
                   "in TF1's RMSPropOptimizer (IMPALA's), 0 as in Sonnet's.")
flags.DEFINE_integer('rmsprop_fan_in_reference', 0,
                     'With N > 0, every kernel whose fan-in F exceeds N '
                     "(the shallow torso's linear layer: 3,872) moves at "
                     'lr N / F: RMSProp moves each weight by about lr, so a '
                     "wide layer's units move F / N times further per "
                     'update than the rest. 0 = one rate for all.')
flags.DEFINE_float('clip_grad_norm', 40.0,
                   'Global gradient-norm clip (0 disables).')
flags.DEFINE_float('discounting', 0.99,
                   'Discount factor per agent step (per default-multiplier '
                   'step with --discount_per=frame).')
flags.DEFINE_enum('discount_per', None, list(impala_config.DISCOUNT_PER),
                  'step: every agent step is discounted by --discounting; '
                  'frame: a step of k frames by discounting^(k / the '
                  "family's default step multiplier), the semi-Markov "
                  'discount (default: frame with --nofixed_step_mul, else '
                  'step).')
flags.DEFINE_enum('reward_clipping', 'abs_one',
                  ['abs_one', 'soft_asymmetric', 'none'], 'Reward clipping.')
flags.DEFINE_float('reward_scaling', None,
                   'Rewards are scaled before clipping (default: 0.1 for gym, '
                   'whose dense rewards make values large, else 1).')
flags.DEFINE_float('baseline_cost', 0.5, 'Weight of the baseline loss.')
flags.DEFINE_float('entropy_cost', 0.01, 'Weight of the entropy term.')
flags.DEFINE_float('entropy_cost_end', None,
                   'Weight of the entropy term at the end of the run: set, '
                   'the weight moves linearly from --entropy_cost to it over '
                   '--total_environment_frames (as the learning rate '
                   'decays); unset, --entropy_cost holds throughout.')
flags.DEFINE_bool('clip_advantage', False,
                  'Zero negative advantages in the policy gradient.')
flags.DEFINE_bool('jit_compile', False, 'Compile the learner step with XLA.')
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

FLAG_GROUPS.heading('Continual-learning methods (impala)')
_LEARNER_DEFAULTS = impala_config.LearnerConfig._field_defaults
flags.DEFINE_enum('continual_method', 'none',
                  list(continual_methods.CONTINUAL_METHODS),
                  'With a sequence --env: ewc keeps, for every task trained, '
                  'its final weights (anchor) and the diagonal Fisher of its '
                  'policy-gradient and baseline loss, and adds lambda/2 sum '
                  'F (theta - anchor)^2 to the loss (loss/ewc); online_ewc '
                  'keeps one anchor, the latest, and one running Fisher, '
                  'decayed by --ewc_gamma at each task switch. Both combine '
                  'with CLEAR replay.')
flags.DEFINE_float('ewc_lambda', _LEARNER_DEFAULTS['ewc_lambda'],
                   'lambda, the weight of the EWC penalty.')
flags.DEFINE_float('ewc_gamma', _LEARNER_DEFAULTS['ewc_gamma'],
                   'online_ewc: the running Fisher becomes gamma F + the new '
                   "task's at each switch (in (0, 1]).")
flags.DEFINE_integer('ewc_fisher_batches',
                     _LEARNER_DEFAULTS['ewc_fisher_batches'],
                     'Batches of --batch_size unrolls of the finished task '
                     'its Fisher is the mean squared gradient over.')
flags.DEFINE_integer('ewc_fisher_frames',
                     _LEARNER_DEFAULTS['ewc_fisher_frames'],
                     "Frames of the current task's latest unrolls kept "
                     '(in memory, and beside each checkpoint) to draw those '
                     'batches from.')

FLAG_GROUPS.heading('Task sequences, evaluation and test mode')
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
flags.DEFINE_bool('fixed_step_mul', True,
                  'Use a constant step multiplier (else the agent picks one).')
flags.DEFINE_integer('step_mul', None,
                     'Frames per agent step when fixed (default: 4 Atari, '
                     '8 SC2, 1 gym).')
flags.DEFINE_integer('max_step_mul', 8,
                     'Number of choices of the dynamic step multiplier.')

FLAG_GROUPS.heading('Checkpoints and progress')
flags.DEFINE_integer('checkpoint_interval_s', 600, 'Seconds between checkpoints.')
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
# The flags of --continual_method=ewc / online_ewc.
EWC_FLAGS = ('ewc_lambda', 'ewc_gamma', 'ewc_fisher_batches',
             'ewc_fisher_frames')
# Flags that only IMPALA-CLEAR reads.
IMPALA_ONLY_FLAGS = ('discount_per', 'replay_proportion', 'replay_buffer_size',
                     'replay_sampling', 'replay_storage',
                     'replay_prefill_unrolls', 'policy_cloning_cost',
                     'value_cloning_cost', 'baseline_cost', 'clip_advantage',
                     'optimizer', 'learning_rate_warmup_frames',
                     'entropy_cost_end', 'rmsprop_initial_mean_square',
                     'rmsprop_epsilon', 'rmsprop_epsilon_outside',
                     'rmsprop_fan_in_reference', 'num_critic_pretrain_frames',
                     'separate_critic', 'core', 'lstm_init',
                     'torso_grad_scale', 'torso_activation', 'torso_norm',
                     'continual_method') + EWC_FLAGS


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
  for name, entry in sorted(registry.ALGORITHMS.items()):
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
FLAG_GROUPS.end()


class FamilyDefaults(NamedTuple):
  """Flag defaults that depend on the env family."""
  step_mul: int
  learning_rate: float
  reward_scaling: float
  core_size: int
  envs_per_actor: int
  optimizer: str
  total_environment_frames: int
  batch_size: int
  torso_norm: str


# gym: dense rewards (CartPole pays 1 a step) make values ~100, whose squared
# baseline error would swamp the policy gradient; scaling by 0.1 fixes that.
# atari: IMPALA's Atari settings (RMSProp, decay 0.99) but with epsilon 1e-5
# (--rmsprop_epsilon; IMPALA's 0.01 reached +18 on Pong at 25M frames, 1e-5
# at 15M: see the README); 400k frames would decay the learning rate to 0
# before anything is learned. The rate is 1e-3 with the torso's linear layer
# layer-normalised (--torso_norm): one rate of 1e-3 without the norm learned
# Pong sooner on seed 0 but killed that layer's ReLU units on seed 1, as did
# 8e-4; with the norm both seeds reached +18 sooner than 6e-4 without it
# (8.1M and 12.2M frames against 15.2M and 14.4M; the README's Pong
# results). Atari batches hold 64 unrolls, decayed over 80M frames: batches
# of 32 plateaued at +20.0 on 40M frames, and on 80M frames killed the
# torso's convolutions on one seed of two; with 64 both seeds reached +18 by
# 12M frames and settled above +20. Batches of 32 for the other families;
# 16 on Atari learned Pong sooner on one seed and not at all in 10M frames
# on another (the README's Pong results).
# minatar: MinAtar's network (an LSTM of 128 after its 128-unit layer) and
# its 5M-frame budget. MinAtar's own actor-critic updates on every single
# transition with bias-corrected RMSProp (decay 0.999) at 2^-11 = 4.9e-4,
# in effect Adam without momentum; a batch of 32 x 20 steps averages far
# more noise away, so Adam at a slightly larger 6e-4 (decayed to 0, as in
# every family). Rewards are small integers: no scaling. 64 envs per actor:
# one inference call costs about as much for 64 boards as for 32, so the
# actor's frames per second nearly double.
FAMILY_DEFAULTS = {
    'gym': FamilyDefaults(step_mul=1, learning_rate=3e-3, reward_scaling=0.1,
                          core_size=64, envs_per_actor=64, optimizer='adam',
                          total_environment_frames=400_000,
                          batch_size=32, torso_norm='none'),
    'atari': FamilyDefaults(step_mul=4, learning_rate=1e-3,
                            reward_scaling=1.0, core_size=256,
                            envs_per_actor=32, optimizer='rmsprop',
                            total_environment_frames=80_000_000,
                            batch_size=64, torso_norm='layer_norm'),
    'sc2': FamilyDefaults(step_mul=8, learning_rate=3e-4, reward_scaling=1.0,
                          core_size=256, envs_per_actor=1, optimizer='adam',
                          total_environment_frames=40_000_000,
                          batch_size=32, torso_norm='none'),
    'minatar': FamilyDefaults(step_mul=1, learning_rate=6e-4,
                              reward_scaling=1.0, core_size=128,
                              envs_per_actor=64, optimizer='adam',
                              total_environment_frames=5_000_000,
                              batch_size=32, torso_norm='none'),
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
  # An unknown family is reported by validate; its batch size is the flag's.
  batch_size = (family_default(f, 'batch_size')
                if env_family(f.env) in FAMILY_DEFAULTS else f.batch_size)
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
  if f.learning_rate_warmup_frames < 0:
    problems.append('--learning_rate_warmup_frames must be >= 0.')
  elif (env_family(f.env) in FAMILY_DEFAULTS and
        f.learning_rate_warmup_frames >= total_frames(f) > 0):
    problems.append(
        f'--learning_rate_warmup_frames ({f.learning_rate_warmup_frames:,}) '
        'must be below --total_environment_frames '
        f'({total_frames(f):,}): the rate would never reach its peak.')
  for name in ('entropy_cost', 'entropy_cost_end'):
    if f[name].value is not None and not f[name].value >= 0:
      problems.append(f'--{name} must be >= 0.')
  if f.rmsprop_initial_mean_square < 0:
    problems.append('--rmsprop_initial_mean_square must be >= 0.')
  if not (math.isfinite(f.rmsprop_epsilon) and f.rmsprop_epsilon > 0):
    problems.append('--rmsprop_epsilon must be a finite number > 0.')
  if f.rmsprop_fan_in_reference < 0:
    problems.append('--rmsprop_fan_in_reference must be >= 0.')
  for name in ('rmsprop_initial_mean_square', 'rmsprop_epsilon',
               'rmsprop_epsilon_outside', 'rmsprop_fan_in_reference'):
    if f[name].present and family_default(f, 'optimizer') != 'rmsprop':
      problems.append(f'--{name} needs --optimizer=rmsprop.')
  return problems + _continual_problems(f)


def _continual_problems(f):
  """What is wrong with --continual_method and its flags."""
  method = f.continual_method
  if method == 'none':
    return [f'--{name} needs --continual_method=ewc or online_ewc.'
            for name in EWC_FLAGS if f[name].present]
  problems = []
  if ',' not in f.env:
    problems.append(f'--continual_method={method} needs a task sequence '
                    '--env (comma-separated tasks).')
  if not (math.isfinite(f.ewc_lambda) and f.ewc_lambda >= 0):
    problems.append(f'--ewc_lambda must be a finite number >= 0 (got '
                    f'{f.ewc_lambda}).')
  if not 0 < f.ewc_gamma <= 1:
    problems.append(f'--ewc_gamma must be in (0, 1] (got {f.ewc_gamma}).')
  elif f['ewc_gamma'].present and method != 'online_ewc':
    problems.append('--ewc_gamma applies to --continual_method=online_ewc.')
  for name in ('ewc_fisher_batches', 'ewc_fisher_frames'):
    if getattr(f, name) < 1:
      problems.append(f'--{name} must be >= 1 (got {getattr(f, name)}).')
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
      registry.ALGORITHMS[f.algorithm].validate(
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
  config_class = registry.ALGORITHMS[f.algorithm].config
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
  if f.batch_size is not None and f.batch_size < 1:
    problems.append(f'--batch_size must be >= 1 (got {f.batch_size}).')
  if not (math.isfinite(f.torso_grad_scale) and f.torso_grad_scale >= 0):
    problems.append(f'--torso_grad_scale must be a finite number >= 0 (got '
                    f'{f.torso_grad_scale}).')
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
  if f.record and f.mode != 'test':
    problems.append('--record applies to --mode=test.')
  elif f.record:
    problem = record_lib.path_problem(f.record, f.record_overwrite)
    if problem:
      problems.append(f'--record={f.record}: {problem}.')
  if f.record_overwrite and not f.record:
    problems.append('--record_overwrite needs --record.')
  if not known_family:
    problems.append(f'--env={f.env!r}: unknown family; use atari:<Game>, '
                    'sc2:<Map>, gym:<id> or minatar:<Game>.')
  if problems:
    raise app.UsageError('\n'.join(problems))


def discount_per(f) -> str:
  """--discount_per, else per frame with dynamic multipliers (a step of k
  frames then lasts k frames of discounting), per step with fixed ones."""
  if f.discount_per is not None:
    return f.discount_per
  return 'step' if f.fixed_step_mul else 'frame'


def envs_per_actor(f, learner_config) -> int:
  """--envs_per_actor, else IMPALA's family default, else (PPG, SAC, DDPG)
  the batch size: one collect of one actor then feeds exactly one update."""
  if f.envs_per_actor is not None or f.algorithm == 'impala':
    return family_default(f, 'envs_per_actor')
  return learner_config.batch_size


def torso_norm(f) -> str:
  """--torso_norm, else IMPALA's family default; the ports' agents have no
  torso norm."""
  if f.torso_norm is not None or f.algorithm == 'impala':
    return family_default(f, 'torso_norm')
  return 'none'


def config_from_flags(f) -> run_config_lib.RunConfig:
  env_options = env_options_from_flags(f)
  if f.algorithm != 'impala':
    learner_config = port_config(f, env_options)
  else:
    batch_size = family_default(f, 'batch_size')
    num_replay = replay_lib.replay_batch_size(batch_size, f.replay_proportion)
    learner_config = impala_config.LearnerConfig(
        batch_size=batch_size, num_replay=num_replay,
        unroll_length=f.unroll_length,
        total_environment_frames=total_frames(f),
        discounting=f.discounting, discount_per=discount_per(f),
        discounting_step_mul=FAMILY_DEFAULTS[env_family(f.env)].step_mul,
        reward_clipping=f.reward_clipping,
        reward_scaling=family_default(f, 'reward_scaling'),
        baseline_cost=f.baseline_cost,
        entropy_cost=f.entropy_cost, entropy_cost_end=f.entropy_cost_end,
        policy_cloning_cost=f.policy_cloning_cost if num_replay else 0.0,
        value_cloning_cost=f.value_cloning_cost if num_replay else 0.0,
        clip_grad_norm=f.clip_grad_norm, clip_advantage=f.clip_advantage,
        learning_rate=family_default(f, 'learning_rate'),
        learning_rate_warmup_frames=f.learning_rate_warmup_frames,
        optimizer=family_default(f, 'optimizer'),
        rmsprop_initial_mean_square=f.rmsprop_initial_mean_square,
        rmsprop_epsilon=f.rmsprop_epsilon,
        rmsprop_epsilon_outside=f.rmsprop_epsilon_outside,
        rmsprop_fan_in_reference=f.rmsprop_fan_in_reference,
        fixed_step_mul=f.fixed_step_mul,
        step_mul=env_options.get('step_mul', 1),
        jit_compile=f.jit_compile, continual_method=f.continual_method,
        ewc_lambda=f.ewc_lambda, ewc_gamma=f.ewc_gamma,
        ewc_fisher_batches=f.ewc_fisher_batches,
        ewc_fisher_frames=f.ewc_fisher_frames)
  core_size = family_default(f, 'core_size')
  return run_config_lib.RunConfig(
      env_name=f.env, env_options=env_options, algorithm=f.algorithm,
      agent_config=policy_lib.AgentConfig(
          f.network, core_size, f.separate_critic, core=f.core,
          lstm_init=f.lstm_init, torso_grad_scale=f.torso_grad_scale,
          torso_activation=f.torso_activation, torso_norm=torso_norm(f)),
      learner_config=learner_config, logdir=f.logdir, seed=f.seed,
      num_actors=f.num_actors,
      envs_per_actor=envs_per_actor(f, learner_config),
      replay_buffer_size=f.replay_buffer_size,
      replay_sampling=f.replay_sampling, replay_storage=f.replay_storage,
      replay_prefill_unrolls=f.replay_prefill_unrolls,
      num_critic_pretrain_frames=f.num_critic_pretrain_frames,
      backend=f.backend, ray_address=f.ray_address,
      ray_actor_resource=f.ray_actor_resource,
      max_actor_restarts=f.max_actor_restarts,
      learner_device=f.learner_device,
      checkpoint_interval_s=f.checkpoint_interval_s,
      log_interval_s=f.log_interval_s,
      allow_empty_replay_on_resume=f.allow_empty_replay_on_resume,
      stop_on_nonfinite=f.stop_on_nonfinite, init_from=f.init_from,
      init_scope=f.init_scope, frames_per_task=f.frames_per_task,
      num_task_cycles=f.num_task_cycles,
      eval_interval_frames=f.eval_interval_frames,
      eval_episodes=f.eval_episodes, eval_max_steps=f.eval_max_steps)


# --- Settings from a run's run.json -------------------------------------------
# Test mode and --init_from load a checkpoint whose network must be rebuilt
# exactly, so they take the env, algorithm and network from the run.json
# beside it (see clear.checkpoint) instead of the flags' defaults.

# run.json fields that decide the network, each set by the flag of that
# name: a flag given with another value is refused.
NETWORK_FIELDS = ('algorithm', 'network', 'core_size', 'separate_critic',
                  'core', 'lstm_init', 'torso_grad_scale', 'torso_activation',
                  'torso_norm')
# Keys of run.json's env_options that `env_options_from_flags` sets, each
# from the flag of that name. Given with other values (or with --env), they
# pick another env, allowed when its spaces are the same.
ENV_OPTION_FLAGS = ('fixed_step_mul', 'step_mul', 'max_step_mul')
# A task sequence's schedule, taken when the flags are not given.
SEQUENCE_FIELDS = ('frames_per_task', 'num_task_cycles')


class RunSettings(NamedTuple):
  """What a run's run.json recorded, and which flags asked for another env.

  Attributes:
    source: the logdir whose run.json was read.
    env_name, env_options: the env the run was made for.
    changed_env_flags: {name: value} of the flags among --env and
      ENV_OPTION_FLAGS given with other values (see `check_env_change`).
  """
  source: str
  env_name: str
  env_options: dict
  changed_env_flags: Dict[str, object]


def settings_source(f) -> Optional[str]:
  """Whose run.json decides the env, algorithm and network: test mode's
  --logdir; with --init_from, the run it starts from (or --logdir, once it
  holds a checkpoint of its own, which is resumed); else None: the flags."""
  if f.mode == 'test':
    return f.logdir
  if f.init_from:
    if checkpoint_lib.find_checkpoints(f.logdir):
      return f.logdir
    return f.init_from
  return None


def _flag_kind(flag) -> str:
  """What values a flag takes, for messages: 'an integer', ..."""
  parser = flag.parser
  if isinstance(parser, flags.BooleanParser):
    return 'true or false'
  if isinstance(parser, flags.IntegerParser):
    return 'an integer'
  if isinstance(parser, flags.FloatParser):
    return 'a number'
  if isinstance(parser, flags.EnumParser):
    return 'one of ' + ', '.join(repr(v) for v in parser.enum_values)
  return 'a string'


def recorded_value(f, name: str, value, path: str):
  """`value`, as run.json at `path` records it for the flag `name`, if it
  is of the flag's type (a hand-edited file may hold anything).

  Raises:
    CheckpointError: naming the file, the field and what it should be.
  """
  parser = f[name].parser
  if value is None:
    ok = f[name].default is None
  elif isinstance(parser, flags.BooleanParser):
    ok = isinstance(value, bool)
  elif isinstance(parser, flags.IntegerParser):
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif isinstance(parser, flags.FloatParser):
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))
  elif isinstance(parser, flags.EnumParser):
    ok = isinstance(value, str) and value in parser.enum_values
  else:
    ok = isinstance(value, str)
  if not ok:
    raise checkpoint_lib.CheckpointError(
        f'{path}: {name} is {value!r}, but --{name} takes '
        f'{_flag_kind(f[name])}. Put back the value the run was made with, '
        'or move the file away (or use a new --logdir).')
  return value


def adopt_run_settings(f, saved: dict, source: str) -> RunSettings:
  """Sets every flag not given to the value `saved` (a run.json) records.

  Args:
    f: the flag values, changed in place.
    saved: the run.json's contents.
    source: the run's logdir, for messages.

  Raises:
    app.UsageError: naming each flag given with another network.
  """
  problems, adopted = [], []
  path = os.path.join(source, checkpoint_lib.RUN_FILE)

  def take(name, value):
    recorded_value(f, name, value, path)
    if not f[name].present:
      setattr(f, name, value)
      adopted.append(f'{name}={value!r}')

  for name in NETWORK_FIELDS:
    if name in saved:
      value = recorded_value(f, name, saved[name], path)
    elif name in policy_lib.CORE_OPTION_FIELDS:  # Recorded when not default.
      value = policy_lib.AgentConfig._field_defaults[name]
    else:
      continue
    if f[name].present and getattr(f, name) != value:
      problems.append(
          f'--{name}={getattr(f, name)!r}: the run in {source} was made '
          f'with {name}={value!r}, and its checkpoint holds that '
          f'network; leave --{name} out.')
    take(name, value)
  env_name = saved.get('env', f.env)
  env_options = saved.get('env_options') or {}
  if not isinstance(env_options, dict):
    raise checkpoint_lib.CheckpointError(
        f'{path}: env_options is {env_options!r}, not an object. Put back '
        'what the run was made with, or move the file away (or use a new '
        '--logdir).')
  env_options = dict(env_options)
  changed = {}
  if f['env'].present and f.env != env_name:
    changed['env'] = f.env
  if 'env' in saved:
    take('env', env_name)
  for name in ENV_OPTION_FLAGS:
    if name in env_options:
      recorded_value(f, name, env_options[name], path)
      if f[name].present and getattr(f, name) != env_options[name]:
        changed[name] = getattr(f, name)
      take(name, env_options[name])
  for name in SEQUENCE_FIELDS:
    if name in saved:
      take(name, saved[name])
  if problems:
    raise app.UsageError('\n'.join(problems))
  if adopted:
    logging.info('Settings from %s: %s.',
                 os.path.join(source, checkpoint_lib.RUN_FILE),
                 ', '.join(adopted))
  return RunSettings(source, env_name, env_options, changed)


def keep_run_settings(f) -> None:
  """Training in a logdir that holds a run: each IMPALA flag left unset that
  defaults per env family (batch size, schedule, learning rate, ...) takes
  the value the run last ran with, from its run.json, so a change of the
  family defaults does not change a run in progress. A run.json written
  before runs recorded them gets a warning naming the values used now.
  Call it before `validate`, so that the values kept are checked against
  the flags given."""
  if (f.mode != 'train' or f.algorithm != 'impala' or
      env_family(f.env) not in FAMILY_DEFAULTS):  # validate names it.
    return
  saved = checkpoint_lib.read_run_identity(f.logdir)
  if saved is None or saved.get('env', f.env) != f.env:
    return  # A new run, or another env: refused with the identity check.
  unset = [name for name in run_config_lib.RECORDED_SETTINGS
           if not f[name].present and not (
               name == 'total_environment_frames' and ',' in f.env)]
  path = os.path.join(f.logdir, checkpoint_lib.RUN_FILE)
  recorded = saved.get(checkpoint_lib.SETTINGS_KEY)
  if recorded is None:
    if unset:
      earlier = (' (the Atari defaults before 2026-11-28 were '
                 'batch_size=32 and total_environment_frames=40000000)'
                 if env_family(f.env) == 'atari' else '')
      logging.warning(
          '%s predates recorded learner settings: this run continues with '
          '%s. If it was started with other values%s, stop it and give '
          'them as flags.', path, ', '.join(
              f'{name}={family_default(f, name)!r}' for name in unset),
          earlier)
    return
  if not isinstance(recorded, dict):
    raise checkpoint_lib.CheckpointError(
        f'{path}: {checkpoint_lib.SETTINGS_KEY} is {recorded!r}, not an '
        'object. Put back what the run last ran with, or move the file away '
        '(or use a new --logdir).')
  kept = []
  for name in unset:
    if name in recorded:
      recorded_value(f, name, recorded[name], path)
    if name in recorded and recorded[name] != family_default(f, name):
      kept.append(f'{name}={recorded[name]!r} (default '
                  f'{family_default(f, name)!r})')
      setattr(f, name, recorded[name])
  if kept:
    logging.info('Resuming with the settings %s records: %s. Give the '
                 'flags to change them.', path, ', '.join(kept))


def read_run_settings(f) -> Optional[RunSettings]:
  """Applies the run.json `settings_source` names, if any (see
  `adopt_run_settings`).

  Raises:
    app.UsageError: a flag contradicts the run's network.
    CheckpointError: test mode without a run to test, or an unreadable
      run.json.
  """
  source = settings_source(f)
  if source is None:
    return None
  if source == f.init_from and not checkpoint_lib.find_checkpoints(source):
    raise checkpoint_lib.CheckpointError(
        f'--init_from={source}: ' + (
            'no checkpoint there' if os.path.exists(source) else
            'no such folder or checkpoint') +
        '. Give a run\'s logdir or one of its checkpoints/ckpt-N.')
  saved = checkpoint_lib.read_run_identity(source)
  run_dir = checkpoint_lib.run_directory(source)
  path = os.path.join(run_dir, checkpoint_lib.RUN_FILE)
  if saved is not None:
    return adopt_run_settings(f, saved, run_dir)
  if f.mode == 'test' and not checkpoint_lib.find_checkpoints(source):
    raise checkpoint_lib.CheckpointError(
        f'--logdir={source} holds no run to test (no run.json, no '
        'checkpoint): train there first, or point --logdir at a run.')
  logging.warning('%s is missing: the env, algorithm and network come from '
                  'the flags.', path)
  return None


def same_spaces(a, b) -> bool:
  """Whether two `types.EnvSpec`s have the same observations and actions,
  so that one network plays both."""
  spaces = lambda spec: (list(spec.observation_spec.items()),
                         list(spec.action_spec.items()),
                         tuple(spec.stacked_frames))
  return spaces(a) == spaces(b)


def describe_spaces(spec) -> str:
  """E.g. 'observations vector [4]; actions action (2 choices)'."""
  observations = ', '.join(f'{name} {list(s.shape)}' for name, s
                           in spec.observation_spec.items())
  actions = ', '.join(
      f'{name} ({head.num_values} choices)' if hasattr(head, 'num_values')
      else f'{name} {list(head.shape)}'
      for name, head in spec.action_spec.items())
  return f'observations {observations}; actions {actions}'


def check_env_change(config: run_config_lib.RunConfig, settings: RunSettings):
  """Lets flags pick another env than the run's only when its observation
  and action spaces are the same (e.g. gym:CartPole-v0 for a gym:CartPole-v1
  run), and says so in the log.

  Raises:
    app.UsageError: naming the flags, when the spaces differ.
  """
  if not settings.changed_env_flags:
    return
  given = ' '.join(f'--{name}={value}' for name, value
                   in settings.changed_env_flags.items())
  given_names = ' '.join(f'--{name}' for name in settings.changed_env_flags)
  same_options = config.env_options == settings.env_options
  describe = lambda name, options: name if same_options else (
      f'{name} with ' + ', '.join(f'{k}={v}' for k, v in
                                  sorted(options.items())))
  ours = describe(config.env_name, config.env_options)
  theirs = describe(settings.env_name, settings.env_options)
  spec = run_config_lib.env_spec(config)
  saved_spec = run_config_lib.env_spec(config._replace(
      env_name=settings.env_name, env_options=settings.env_options))
  if same_spaces(spec, saved_spec):
    logging.warning('%s: using %s, not %s that the run in %s was made with '
                    '(the observation and action spaces are the same).',
                    given, ours, theirs, settings.source)
    return
  raise app.UsageError(
      f'{given}: the run in {settings.source} was made with {theirs} '
      f'({describe_spaces(saved_spec)}); {ours} has '
      f'{describe_spaces(spec)}, which its network cannot play. Leave '
      f'{given_names} out to use the run\'s env.')


def logdir_problem(logdir: str, create: bool) -> Optional[str]:
  """Why files cannot be written in `logdir` (and its `checkpoints/`
  folder, if there is one), or None. Creates nothing.

  Args:
    logdir: the folder.
    create: the run may create it (and its parents): a missing folder is a
      problem only when its nearest existing parent cannot be written.
  """
  path = os.path.abspath(logdir)
  while True:  # A file where a folder should be.
    if os.path.lexists(path) and not os.path.isdir(path):
      return f'{path} is a file, not a folder'
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  existing = os.path.abspath(logdir)
  while not os.path.isdir(existing):
    existing = os.path.dirname(existing)
  if existing != os.path.abspath(logdir) and not create:
    return f'No such file or directory: {logdir}'
  try:
    for folder in (existing, os.path.join(logdir, 'checkpoints')):
      if folder == existing or os.path.isdir(folder):
        with tempfile.TemporaryFile(dir=folder):
          pass
  except OSError as e:
    return f'{e.strerror or type(e).__name__}: {existing}'
  return None


def _say_if_live(logdir: str, what: str):
  """Warns when a live training run holds `logdir` (test mode reads it)."""
  holder = run_lock.live_holder(logdir)
  if holder is not None:
    logging.warning('%s is in use by a live training run (%s): %s',
                    logdir, holder.describe(), what)


def run_test(config: run_config_lib.RunConfig, num_episodes: int,
             record_path: str = '') -> int:
  """Test mode: plays the episodes, prints the results, then writes them to
  test_results.json; the printed results stay if the write fails. With
  `record_path`, one more episode is then written there (GIF or MP4)."""
  _say_if_live(config.logdir, 'testing its newest checkpoint as of now; '
               'the run goes on writing new ones.')
  spec = run_config_lib.env_spec(config)  # Imports the env's packages.
  _STOP.raise_if_interrupted()  # MinAtar's import swallows a Ctrl-C.
  if record_path:  # Before the episodes: an env with no picture fails now.
    record_lib.image_key(spec)
  problem = logdir_problem(config.logdir, create=False)
  if problem:
    logging.warning('%s cannot be written (%s): the results will only be '
                    'printed.', evaluation_lib.TEST_RESULTS_FILE, problem)
  summary = evaluation_lib.evaluate(config, num_episodes)
  print(json.dumps({k: v for k, v in summary.items() if k != 'returns'},
                   indent=2), flush=True)
  try:
    path = evaluation_lib.write_test_results(config.logdir, summary)
  except OSError as e:
    print(f'warning: the results above were not written to '
          f'{os.path.join(config.logdir, evaluation_lib.TEST_RESULTS_FILE)} '
          f'({e.strerror or e}).', file=sys.stderr)
  else:
    logging.info('Test results written to %s.', path)
  if record_path:
    recording = evaluation_lib.record_episode(config, record_path)
    print(f'Recorded {recording.num_frames} frames (return '
          f'{recording.episode_return:g}'
          f'{"" if recording.finished else ", cut at --eval_max_steps"}) '
          f'to {recording.path}.', flush=True)
  return 0


class StopSignal:
  """What SIGTERM and SIGINT do.

  Until `started` is called (flag checks, restores, test mode: nothing of
  the run written yet), a signal stops the program at once
  (KeyboardInterrupt). Once the run has started, the first asks it to stop
  after the current update and write a final checkpoint; a second only says
  that the checkpoint is being written; a third stops at once
  (KeyboardInterrupt), and `main` says what was not saved.

  Attributes:
    signum: the first signal received, or None.
    first_at: when it came (time.time()).
  """

  def __init__(self, install: bool = True):
    self.signum = None
    self.first_at = None
    self.count = 0
    self.running = False
    if install:
      for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, self._handle)

  def started(self):
    """The run is accepted and writes from now on: stop politely.

    Raises:
      KeyboardInterrupt: a signal came before, and was swallowed (as
        MinAtar's import swallows one).
    """
    self.raise_if_interrupted()
    self.running = True

  def _handle(self, signum, frame):
    del frame
    self.count += 1
    if self.signum is None:
      self.signum, self.first_at = signum, time.time()
    if not self.running or self.count >= 3:
      raise KeyboardInterrupt
    if self.count == 1:
      logging.warning('Signal %d: stopping after the current update and '
                      'writing a final checkpoint.', signum)
    else:
      logging.warning('Signal %d again: still stopping, and the final '
                      'checkpoint is being written (a large replay takes a '
                      'while). A third signal stops at once without it.',
                      signum)

  def raise_if_interrupted(self):
    """Raises KeyboardInterrupt when a signal came (and was swallowed)."""
    if self.signum is not None:
      raise KeyboardInterrupt

  def __call__(self) -> bool:
    return self.signum is not None


# The program's handler, installed by `main` (a stand-in before).
_STOP = StopSignal(install=False)


def _unsaved(logdir: str, since: float) -> str:
  """What a run stopped at once left on disk, for its last message."""
  directory = os.path.join(logdir, 'checkpoints')
  found = (checkpoint_lib.checkpoint_candidates(directory)
           if os.path.isdir(directory) else [])
  if not found:
    return ('no checkpoint was written, so its training is lost; the same '
            'command starts it again.')
  latest = found[0]
  try:
    saved_at = os.path.getmtime(latest + '.index')
  except OSError:
    saved_at = 0.0
  name = os.path.basename(latest)
  if saved_at >= since:
    return (f'the final checkpoint {name} had been written; the same '
            'command resumes from it.')
  ago = progress.format_duration(time.time() - saved_at)
  return (f'the final checkpoint was NOT written, so the training since '
          f'{name} (saved {ago} ago) is lost; the same command resumes from '
          f'{name}.')


def _main(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])} '
                         '(flags start with --).')
  for name in ('logdir', 'init_from', 'record'):  # --logdir=~/x: no shell
    value = getattr(FLAGS, name)                  # expands that ~.
    if value.startswith('~'):
      setattr(FLAGS, name, os.path.expanduser(value))
  if FLAGS.mode == 'train':  # Said at once; run_loop's lock decides.
    holder = run_lock.live_holder(FLAGS.logdir)
    if holder is not None:
      raise run_lock.LogdirInUse(FLAGS.logdir, holder)
  settings = read_run_settings(FLAGS)
  keep_run_settings(FLAGS)  # Before validate, which then checks what it kept.
  validate(FLAGS)
  config = config_from_flags(FLAGS)
  if settings is not None:
    # Options run.json holds that no flag sets stay as they were.
    kept = {k: v for k, v in settings.env_options.items()
            if k not in ENV_OPTION_FLAGS}
    config = config._replace(env_options={**kept, **config.env_options})
    check_env_change(config, settings)
  if FLAGS.mode == 'test':
    return run_test(config, FLAGS.test_num_episodes, FLAGS.record)
  problem = logdir_problem(FLAGS.logdir, create=True)
  if problem:
    raise ValueError(f'--logdir={FLAGS.logdir}: cannot write there '
                     f'({problem}). Choose another --logdir.')
  result = run_loop.train(config, stop_requested=_STOP,
                          on_start=_STOP.started)
  logging.info('Done: %s', result._asdict())
  if result.stopped_early and _STOP.signum is not None:
    return 128 + _STOP.signum
  return 0


def _exit_now(code: int):
  """Late signals, once the work is done, must not change the exit status.

  While Python code still runs (threads joining, exit hooks), a signal ends
  the program at once with `code`. Python puts the default handlers back
  late in its shutdown, where a signal would kill the process (status -15);
  the last exit hook makes the kernel ignore both signals before that.
  """
  def handle(signum, frame):
    del signum, frame
    os._exit(code)  # pylint: disable=protected-access
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, handle)


def main(argv):
  """Runs the binary; every expected failure ends in one message."""
  code = _main_once(argv)
  _exit_now(code)
  return code


def _main_once(argv):
  global _STOP
  _STOP = StopSignal()
  py_logging.getLogger().setLevel(py_logging.INFO)
  try:
    code = _main(argv)
    if not _STOP.running:  # A signal swallowed on the way still counts.
      _STOP.raise_if_interrupted()
    return code
  except app.UsageError as e:
    flag_help.print_flag_error(str(e), PROGRAM)
    return flag_help.USAGE_EXIT_CODE
  except KeyboardInterrupt:
    signum = _STOP.signum or signal.SIGINT
    if _STOP.running:  # A third signal.
      print(f'Stopped at once by signal {signum} (three signals): '
            f'{_unsaved(FLAGS.logdir, _STOP.first_at)}', file=sys.stderr)
    elif FLAGS.mode == 'train':
      print('Interrupted before the run started: nothing was written.',
            file=sys.stderr)
    else:
      print('Interrupted.', file=sys.stderr)
    return 128 + signum
  except (ValueError, RuntimeError, OSError) as e:  # Files, env, no SC2...
    print(f'error: {e}', file=sys.stderr)
    return 2
  except MemoryError as e:
    print(f'error: out of memory ({type(e).__name__}: {e}); see the replay '
          'line of the log for what the buffer takes.', file=sys.stderr)
    return 2


if __name__ == '__main__':
  flag_help.install_help_flags(FLAGS, __doc__, FLAG_GROUPS)
  app.run(main, flags_parser=flag_help.parse_flags_or_exit(FLAGS, PROGRAM))
