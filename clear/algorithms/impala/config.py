"""The IMPALA-CLEAR learner's config (`LearnerConfig`) and its checks.

The defaults are the CLEAR paper's; `clear.train` sets the env-family ones
(`clear.cli.defaults`). The learner that reads it is
`clear.algorithms.impala.learner`, its optimizers
`clear.algorithms.impala.optimizers`.
"""

from typing import NamedTuple, Optional


OPTIMIZERS = ('adam', 'rmsprop')
DISCOUNT_PER = ('step', 'frame')


class LearnerConfig(NamedTuple):
  """Hyperparameters of the IMPALA-CLEAR learner (defaults: CLEAR paper).

  Why each default: docs/training.md#why-these-defaults.

  Attributes:
    batch_size: unrolls per batch, replayed ones included.
    num_replay: leading batch columns that come from replay.
    unroll_length: T, agent steps per unroll.
    total_environment_frames: frames over which the learning rate decays
      linearly to zero.
    discounting: discount factor gamma, per agent step (`discount_per`
      'step'), or per `discounting_step_mul` frames ('frame').
    discount_per: 'step' discounts every agent step by `discounting`;
      'frame' discounts a step of k frames by
      discounting ** (k / discounting_step_mul), the semi-Markov discount
      for dynamic step multipliers (k read from the multipliers the actors
      executed), so that a step of `discounting_step_mul` frames keeps
      `discounting`.
    discounting_step_mul: the frames per step at which 'frame' discounting
      equals `discounting` (the env family's default multiplier).
    reward_clipping: a `clear.ops.losses.clip_rewards` mode.
    reward_scaling: rewards are multiplied by this before clipping.
    baseline_cost, entropy_cost, policy_cloning_cost, value_cloning_cost:
      loss weights.
    entropy_cost_end: None keeps `entropy_cost` throughout; a float moves
      the entropy weight linearly from `entropy_cost` to it over
      `total_environment_frames` (see `learner.entropy_cost_at`), as RLlib's
      `entropy_coeff_schedule` does.
    clip_grad_norm: global-norm threshold for the gradients (0 = off).
    clip_advantage: zero negative advantages in the policy gradient.
    learning_rate: the peak learning rate, decayed linearly to 0 over
      `total_environment_frames` (see `learner.learning_rate_at`).
    learning_rate_warmup_frames: frames over which the learning rate ramps
      linearly up from 0 (0 = no ramp; see
      `learner.learning_rate_at`).
    optimizer: 'adam' or 'rmsprop' (IMPALA's choice).
    adam_beta1, adam_beta2, adam_epsilon: Adam parameters.
    rmsprop_decay, rmsprop_momentum, rmsprop_epsilon: RMSProp parameters
      (IMPALA's Atari decay and momentum; epsilon 1e-5, not IMPALA's 0.01,
      which under the root would slow every weight with small gradients
      and hold the LSTM's
      kernels to a few percent of the normalised step).
    rmsprop_initial_mean_square: where RMSProp's running mean of squared
      gradients starts: 1 as in TF1's `RMSPropOptimizer`, which IMPALA
      used; 0 as in Sonnet's.
    fixed_step_mul: whether the step multiplier is constant.
    step_mul: frames per agent step when `fixed_step_mul`.
    jit_compile: compile the forward and backward pass with XLA.
  """
  batch_size: int = 32
  num_replay: int = 16
  unroll_length: int = 20
  total_environment_frames: int = int(1e9)
  discounting: float = 0.99
  discount_per: str = 'step'
  discounting_step_mul: int = 1
  reward_clipping: str = 'abs_one'
  reward_scaling: float = 1.0
  baseline_cost: float = 0.5
  entropy_cost: float = 0.01
  entropy_cost_end: Optional[float] = None
  policy_cloning_cost: float = 0.01
  value_cloning_cost: float = 0.005
  clip_grad_norm: float = 40.0
  clip_advantage: bool = False
  learning_rate: float = 6e-4
  learning_rate_warmup_frames: int = 0
  optimizer: str = 'adam'
  adam_beta1: float = 0.9
  adam_beta2: float = 0.999
  adam_epsilon: float = 1e-8
  rmsprop_decay: float = 0.99
  rmsprop_momentum: float = 0.0
  rmsprop_epsilon: float = 1e-5
  rmsprop_initial_mean_square: float = 1.0
  fixed_step_mul: bool = True
  step_mul: int = 1
  jit_compile: bool = False


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
