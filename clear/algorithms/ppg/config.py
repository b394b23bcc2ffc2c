"""PPG's config (`PPGConfig`) and its checks (the algorithm:
`clear.algorithms.ppg.policy`).

`PPGConfig` fields and defaults:
  batch_size=8, num_replay=0, unroll_length=64,
  total_environment_frames=1_000_000, fixed_step_mul=True, step_mul=1,
  discounting=0.99, reward_clipping='none', reward_scaling=1.0,
  learning_rate=1e-3, decay_learning_rate=True, adam_epsilon=1e-8,
  clip_grad_norm=10.0, clip_ratio=0.2, value_clip=0.0, entropy_cost=0.001,
  value_cost=0.5, value_estimator='gae', gae_lambda=0.95,
  normalize_advantage=True, normalize_value=True, target_kl=0.02,
  policy_epochs=1,
  num_minibatches=8, aux_freq=8, aux_train_epoch=6, aux_bc_weight=1.0,
  aux_num_minibatches=0 (0: the policy phase's minibatch size).

They follow DI-engine's PPG config (learning rate, loss weights, clip ratio,
aux_freq, aux_train_epoch, aux_bc_weight, gamma, GAE lambda, gradient norm
clipping, one epoch per phase, 64-sample minibatches: 8 x 64 steps split in
8), with five differences: no value clipping, values and advantages
normalised, a KL limit per policy phase, a learning rate decayed linearly to
0, and an entropy bonus of 0.001 instead of 0.01. Rewards are not clipped,
as in DI-engine (clear's IMPALA learner clips them to [-1, 1]). Why each
default: docs/algorithms.md#ppg.
"""

from clear import settings as settings_lib
from clear.ops import losses
from clear.ops import value_estimators


_Setting = settings_lib.Setting
# PPGConfig's fields, in order, each with its default and help.
SETTINGS = (
    _Setting('batch_size', 8,
             "unrolls per `learn` call (the run loop's batch)."),
    _Setting('num_replay', 0,
             'must be 0 (PPG is on-policy; kept for the run loop).'),
    _Setting('unroll_length', 64, 'T, agent steps per unroll.'),
    _Setting('total_environment_frames', 1_000_000,
             'when the run stops (and over which the learning rate decays '
             'when `decay_learning_rate`).'),
    _Setting('fixed_step_mul', True,
             "the environment's step multiplier, for the frame count (see "
             '`clear.ops.transitions.frames_in_batch`).'),
    _Setting('step_mul', 1,
             "the environment's step multiplier, for the frame count (see "
             '`clear.ops.transitions.frames_in_batch`).'),
    _Setting('discounting', 0.99, 'gamma.'),
    _Setting('reward_clipping', 'none',
             'a `clear.ops.losses.clip_rewards` mode.'),
    _Setting('reward_scaling', 1.0,
             'rewards are multiplied by this before clipping.'),
    _Setting('learning_rate', 1e-3, 'Adam learning rate of both networks.'),
    _Setting('decay_learning_rate', True,
             'decay it linearly to 0 over the total frames.'),
    _Setting('adam_epsilon', 1e-8, "Adam's epsilon."),
    _Setting('clip_grad_norm', 10.0,
             "global-norm clipping of each network's gradients (0 = off)."),
    _Setting('clip_ratio', 0.2,
             "PPO's epsilon: the ratio pi / pi_old is clipped to "
             '[1 - clip_ratio, 1 + clip_ratio].'),
    _Setting('value_clip', 0.0,
             'value-loss clipping radius around the old value (0 = off).'),
    _Setting('entropy_cost', 0.001, 'weight of the entropy bonus.'),
    _Setting('value_cost', 0.5,
             "weight of the value network's policy-phase loss."),
    _Setting('value_estimator', 'gae',
             'one of `clear.ops.value_estimators.ESTIMATORS`.'),
    _Setting('gae_lambda', 0.95, "lambda of 'gae' and 'td_lambda'."),
    _Setting('normalize_advantage', True,
             'standardise advantages in each minibatch.'),
    _Setting('normalize_value', True,
             'the value network and auxiliary head predict returns '
             'standardised by a running mean and std (`ValueNormalizer`).'),
    _Setting('target_kl', 0.02,
             "once a minibatch's mean approximate KL between the policy "
             "and the phase's old policy exceeds 1.5 x target_kl, the "
             'policy network takes no more steps in that policy phase (the '
             'value network goes on); 0 turns this off.'),
    _Setting('policy_epochs', 1, 'passes over each batch in the policy phase.'),
    _Setting('num_minibatches', 8,
             'minibatches per pass (of the T * B samples).'),
    _Setting('aux_freq', 8, 'policy iterations between auxiliary phases.'),
    _Setting('aux_train_epoch', 6,
             'passes over the memory in an auxiliary phase.'),
    _Setting('aux_bc_weight', 1.0, 'weight of the behaviour-cloning KL.'),
    _Setting('aux_num_minibatches', 0,
             "minibatches per auxiliary pass; 0 keeps the policy phase's "
             'minibatch size (num_minibatches per stored iteration).'),
)
PPGConfig = settings_lib.settings_class(
    'PPGConfig', SETTINGS,
    summary='Hyperparameters of PPG (see the module docstring for the '
    'defaults).')


def validate_config(config: PPGConfig):
  """Raises ValueError with one clear message for an impossible setting."""
  positive_ints = ('batch_size', 'unroll_length', 'total_environment_frames',
                   'step_mul', 'policy_epochs', 'num_minibatches', 'aux_freq')
  for name in positive_ints:
    if getattr(config, name) < 1:
      raise ValueError(f'PPGConfig.{name} must be >= 1, got '
                       f'{getattr(config, name)}.')
  if config.num_replay != 0:
    raise ValueError('PPGConfig.num_replay must be 0: PPG learns from fresh '
                     f'unrolls only, got {config.num_replay}.')
  if config.aux_train_epoch < 0 or config.aux_num_minibatches < 0:
    raise ValueError('PPGConfig.aux_train_epoch and aux_num_minibatches must '
                     f'be >= 0, got {config.aux_train_epoch} and '
                     f'{config.aux_num_minibatches}.')
  samples = config.batch_size * config.unroll_length
  if config.num_minibatches > samples:
    raise ValueError(
        f'PPGConfig.num_minibatches={config.num_minibatches} exceeds the '
        f'{samples} samples of a batch (batch_size * unroll_length).')
  if config.aux_num_minibatches > samples * config.aux_freq:
    raise ValueError(
        f'PPGConfig.aux_num_minibatches={config.aux_num_minibatches} exceeds '
        f'the {samples * config.aux_freq} samples of the auxiliary memory.')
  if not 0.0 <= config.discounting <= 1.0:
    raise ValueError('PPGConfig.discounting must be in [0, 1], got '
                     f'{config.discounting}.')
  if config.target_kl < 0:
    raise ValueError('PPGConfig.target_kl must be >= 0 (0: off), got '
                     f'{config.target_kl}.')
  if not 0.0 <= config.gae_lambda <= 1.0:
    raise ValueError('PPGConfig.gae_lambda must be in [0, 1], got '
                     f'{config.gae_lambda}.')
  if config.value_estimator not in value_estimators.ESTIMATORS:
    raise ValueError('PPGConfig.value_estimator must be one of '
                     f'{value_estimators.ESTIMATORS}, got '
                     f'{config.value_estimator!r}.')
  if config.reward_clipping not in losses.REWARD_CLIPPING_MODES:
    raise ValueError('PPGConfig.reward_clipping must be one of '
                     f'{losses.REWARD_CLIPPING_MODES}, got '
                     f'{config.reward_clipping!r}.')
  if config.learning_rate <= 0:
    raise ValueError('PPGConfig.learning_rate must be > 0, got '
                     f'{config.learning_rate}.')
  if config.clip_ratio <= 0:
    raise ValueError('PPGConfig.clip_ratio must be > 0, got '
                     f'{config.clip_ratio}.')
  for name in ('value_clip', 'clip_grad_norm', 'entropy_cost', 'value_cost',
               'aux_bc_weight'):
    if getattr(config, name) < 0:
      raise ValueError(f'PPGConfig.{name} must be >= 0, got '
                       f'{getattr(config, name)}.')
