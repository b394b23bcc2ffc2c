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

from typing import NamedTuple

from clear.ops import losses
from clear.ops import value_estimators


class PPGConfig(NamedTuple):
  """Hyperparameters of PPG (see the module docstring for the defaults).

  Attributes:
    batch_size: unrolls per `learn` call (the run loop's batch).
    num_replay: must be 0 (PPG is on-policy; kept for the run loop).
    unroll_length: T, agent steps per unroll.
    total_environment_frames: when the run stops (and over which the
      learning rate decays when `decay_learning_rate`).
    fixed_step_mul, step_mul: the environment's step multiplier, for the
      frame count (see `clear.ops.transitions.frames_in_batch`).
    discounting: gamma.
    reward_clipping: a `clear.ops.losses.clip_rewards` mode.
    reward_scaling: rewards are multiplied by this before clipping.
    learning_rate: Adam learning rate of both networks.
    decay_learning_rate: decay it linearly to 0 over the total frames.
    adam_epsilon: Adam's epsilon.
    clip_grad_norm: global-norm clipping of each network's gradients
      (0 = off).
    clip_ratio: PPO's epsilon: the ratio pi / pi_old is clipped to
      [1 - clip_ratio, 1 + clip_ratio].
    value_clip: value-loss clipping radius around the old value (0 = off).
    entropy_cost: weight of the entropy bonus.
    value_cost: weight of the value network's policy-phase loss.
    value_estimator: one of `clear.ops.value_estimators.ESTIMATORS`.
    gae_lambda: lambda of 'gae' and 'td_lambda'.
    normalize_advantage: standardise advantages in each minibatch.
    target_kl: once a minibatch's mean approximate KL between the policy
      and the phase's old policy exceeds 1.5 x target_kl, the policy
      network takes no more steps in that policy phase (the value network
      goes on); 0 turns this off.
    normalize_value: the value network and auxiliary head predict returns
      standardised by a running mean and std (`ValueNormalizer`).
    policy_epochs: passes over each batch in the policy phase.
    num_minibatches: minibatches per pass (of the T * B samples).
    aux_freq: policy iterations between auxiliary phases.
    aux_train_epoch: passes over the memory in an auxiliary phase.
    aux_bc_weight: weight of the behaviour-cloning KL.
    aux_num_minibatches: minibatches per auxiliary pass; 0 keeps the policy
      phase's minibatch size (num_minibatches per stored iteration).
  """
  batch_size: int = 8
  num_replay: int = 0
  unroll_length: int = 64
  total_environment_frames: int = 1_000_000
  fixed_step_mul: bool = True
  step_mul: int = 1
  discounting: float = 0.99
  reward_clipping: str = 'none'
  reward_scaling: float = 1.0
  learning_rate: float = 1e-3
  decay_learning_rate: bool = True
  adam_epsilon: float = 1e-8
  clip_grad_norm: float = 10.0
  clip_ratio: float = 0.2
  value_clip: float = 0.0
  entropy_cost: float = 0.001
  value_cost: float = 0.5
  value_estimator: str = 'gae'
  gae_lambda: float = 0.95
  normalize_advantage: bool = True
  normalize_value: bool = True
  target_kl: float = 0.02
  policy_epochs: int = 1
  num_minibatches: int = 8
  aux_freq: int = 8
  aux_train_epoch: int = 6
  aux_bc_weight: float = 1.0
  aux_num_minibatches: int = 0


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
