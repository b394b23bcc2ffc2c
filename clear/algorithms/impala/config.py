"""The IMPALA-CLEAR learner's config (`LearnerConfig`) and its checks.

The defaults are the CLEAR paper's; `clear.train` sets the env-family ones
(`clear.cli.defaults`). The learner that reads it is
`clear.algorithms.impala.learner`, its optimizers
`clear.algorithms.impala.optimizers`.
"""

import math

from clear import settings as settings_lib

OPTIMIZERS = ('adam', 'rmsprop')
DISCOUNT_PER = ('step', 'frame')
# `clear.ops.losses.clip_rewards` modes.
REWARD_CLIPPING = ('abs_one', 'soft_asymmetric', 'none')

_Setting = settings_lib.Setting
# LearnerConfig's fields, in order. Where a `clear.train` flag of the same
# name and default sets a field, the help is that flag's
# (`clear.cli.flags.IMPALA_DECLARED_FLAGS`).
SETTINGS = (
    _Setting('batch_size', 32, 'Unrolls per batch, replayed ones included.'),
    _Setting('num_replay', 16, 'Leading batch columns that come from replay.'),
    _Setting('unroll_length', 20, 'Agent steps per unroll.'),
    _Setting('total_environment_frames', int(1e9),
             'Frames over which the learning rate decays linearly to zero.'),
    _Setting('discounting', 0.99,
             'Discount factor per agent step (per default-multiplier step '
             'with --discount_per=frame).'),
    _Setting('discount_per', 'step',
             "'step' discounts every agent step by `discounting`; 'frame' "
             'discounts a step of k frames by discounting ** (k / '
             'discounting_step_mul), the semi-Markov discount for dynamic '
             'step multipliers (k read from the multipliers the actors '
             'executed), so that a step of `discounting_step_mul` frames '
             'keeps `discounting`.', enum_values=DISCOUNT_PER),
    _Setting('discounting_step_mul', 1,
             "The frames per step at which 'frame' discounting equals "
             "`discounting` (the env family's default multiplier)."),
    _Setting('reward_clipping', 'abs_one', 'Reward clipping.',
             enum_values=REWARD_CLIPPING),
    _Setting('reward_scaling', 1.0,
             'Rewards are multiplied by this before clipping.'),
    _Setting('baseline_cost', 0.5, 'Weight of the baseline loss.'),
    _Setting('entropy_cost', 0.01, 'Weight of the entropy term.'),
    _Setting('entropy_cost_end', None,
             'Weight of the entropy term at the end of the run: set, the '
             'weight moves linearly from --entropy_cost to it over '
             '--total_environment_frames (as the learning rate decays); '
             'unset, --entropy_cost holds throughout.', kind=float),
    _Setting('policy_cloning_cost', 0.01,
             'Weight of the CLEAR policy-cloning KL.'),
    _Setting('value_cloning_cost', 0.005,
             'Weight of the CLEAR value-cloning loss.'),
    _Setting('clip_grad_norm', 40.0,
             'Global gradient-norm clip (0 disables).'),
    _Setting('clip_advantage', False,
             'Zero negative advantages in the policy gradient.'),
    _Setting('learning_rate', 6e-4,
             'The peak learning rate, decayed linearly to 0 over '
             '`total_environment_frames` (see `learner.learning_rate_at`).'),
    _Setting('learning_rate_warmup_frames', 0,
             'Frames over which the learning rate ramps linearly from 0 up '
             'to --learning_rate before its linear decay to 0 at '
             '--total_environment_frames (0 = no ramp).'),
    _Setting('optimizer', 'adam', "'adam' or 'rmsprop' (IMPALA's choice).",
             enum_values=OPTIMIZERS),
    _Setting('adam_beta1', 0.9, "Adam's beta1."),
    _Setting('adam_beta2', 0.999, "Adam's beta2."),
    _Setting('adam_epsilon', 1e-8, "Adam's epsilon."),
    _Setting('rmsprop_decay', 0.99, "RMSProp's decay (IMPALA's Atari one)."),
    _Setting('rmsprop_momentum', 0.0,
             "RMSProp's momentum (IMPALA's Atari one)."),
    _Setting('rmsprop_epsilon', 1e-5,
             "RMSProp's epsilon, added under the square root as in TF1 and "
             "IMPALA. IMPALA's 0.01 there leaves the LSTM's kernels, whose "
             'gradients are about 1e-3, at a few percent of the normalised '
             'step; 1e-5 does not (docs/training.md).'),
    _Setting('rmsprop_initial_mean_square', 1.0,
             "Where RMSProp's mean of squared gradients starts: 1 as in "
             "TF1's RMSPropOptimizer (IMPALA's), 0 as in Sonnet's."),
    _Setting('fixed_step_mul', True,
             'Use a constant step multiplier (else the agent picks one).'),
    _Setting('step_mul', 1, 'Frames per agent step when `fixed_step_mul`.'),
    _Setting('jit_compile', False, 'Compile the learner step with XLA.'),
)
LearnerConfig = settings_lib.settings_class(
    'LearnerConfig', SETTINGS,
    summary='Hyperparameters of the IMPALA-CLEAR learner (defaults: CLEAR '
    'paper).\n\nWhy each default: docs/training.md#why-these-defaults.')
SETTING = {s.name: s for s in SETTINGS}


def validate_config(config: LearnerConfig):
  """Raises ValueError with one clear message for impossible settings."""
  if config.batch_size < 1:
    raise ValueError(f'batch_size must be >= 1, got {config.batch_size}.')
  if not 0 <= config.num_replay < config.batch_size:
    raise ValueError(
        f'num_replay must be in [0, batch_size={config.batch_size}) so that '
        f'every batch holds fresh unrolls, got {config.num_replay}.')
  if config.unroll_length < 1:
    raise ValueError(
        f'unroll_length must be >= 1, got {config.unroll_length}.')
  if config.total_environment_frames < 1:
    raise ValueError('total_environment_frames must be >= 1, got '
                     f'{config.total_environment_frames}.')
  if config.learning_rate_warmup_frames < 0:
    raise ValueError('learning_rate_warmup_frames must be >= 0, got '
                     f'{config.learning_rate_warmup_frames}.')
  if config.learning_rate_warmup_frames >= config.total_environment_frames:
    raise ValueError(
        'learning_rate_warmup_frames must be below total_environment_frames '
        f'({config.total_environment_frames}), got '
        f'{config.learning_rate_warmup_frames}: the rate would never reach '
        'its peak.')
  for name in ('entropy_cost', 'entropy_cost_end'):
    value = getattr(config, name)
    if value is not None and not value >= 0:  # NaN fails too.
      raise ValueError(f'{name} must be >= 0, got {value}.')
  if config.optimizer not in OPTIMIZERS:
    raise ValueError(f'optimizer must be one of {OPTIMIZERS}, got '
                     f'{config.optimizer!r}.')
  if config.step_mul < 1:
    raise ValueError(f'step_mul must be >= 1, got {config.step_mul}.')
  if not (math.isfinite(config.rmsprop_epsilon) and
          config.rmsprop_epsilon > 0):
    raise ValueError('rmsprop_epsilon must be a finite number > 0, got '
                     f'{config.rmsprop_epsilon}.')
  if config.rmsprop_initial_mean_square < 0:
    raise ValueError('rmsprop_initial_mean_square must be >= 0, got '
                     f'{config.rmsprop_initial_mean_square}.')
  if not 0.0 <= config.discounting <= 1.0:
    raise ValueError(
        f'discounting must be in [0, 1], got {config.discounting}.')
  if config.discount_per not in DISCOUNT_PER:
    raise ValueError(f'discount_per must be one of {DISCOUNT_PER}, got '
                     f'{config.discount_per!r}.')
  if config.discounting_step_mul < 1:
    raise ValueError('discounting_step_mul must be >= 1, got '
                     f'{config.discounting_step_mul}.')
