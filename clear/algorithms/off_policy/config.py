"""The config fields SAC and DDPG share, and their checks.

`SHARED_SETTINGS` declares the fields SAC's and DDPG's configs share, each
with its default and help (`clear.settings.Setting`); each algorithm's
policy module declares its config as one ordered tuple of these and its own
settings. `validate_common` checks the shared fields.

Raising `sample_length` with the td1 or td_lambda estimator gives
n-step-like targets. The defaults are the ones checked on gym:Pendulum-v1
and gym:CartPole-v1 with 64-unit MLPs (see each algorithm's module).
"""

import math
from typing import Dict, Optional, Tuple

from clear import settings as settings_lib
from clear import types
from clear.algorithms.off_policy import networks as off_policy_networks

# Estimators that give Q-value targets from (rewards, discounts, values).
# V-trace targets estimate V(x_t) and need behaviour log-probabilities, which
# continuous heads do not store, so it is not offered here.
Q_ESTIMATORS = ('td0', 'td1', 'td_lambda', 'gae')

_Setting = settings_lib.Setting

# The fields SAC and DDPG share (the run loop reads the first six). Their
# `num_critics` default differs: each algorithm sets its own.
SHARED_SETTINGS = (
    _Setting('batch_size', 4,
             'fresh unrolls per `learn` call (e.g. envs_per_actor).'),
    _Setting('num_replay', 0,
             'must stay 0; the policy owns its replay buffer.'),
    _Setting('unroll_length', 8, "T of the actors' unrolls."),
    _Setting('total_environment_frames', 100_000,
             'run length (anneals the importance exponent to 1).'),
    _Setting('fixed_step_mul', True,
             'frames per agent step (dynamic multipliers are not '
             'supported).'),
    _Setting('step_mul', 1,
             'frames per agent step (dynamic multipliers are not '
             'supported).'),
    _Setting('discounting', 0.99, 'gamma.'),
    _Setting('reward_scaling', 1.0, 'rewards are multiplied by this.'),
    _Setting('actor_learning_rate', 1e-3,
             'Adam learning rate of the actor.'),
    _Setting('critic_learning_rate', 1e-3,
             'Adam learning rate of the critics.'),
    _Setting('tau', 0.005,
             'how far the target networks move towards the online ones at '
             'each target update (1 copies them).'),
    _Setting('target_update_period', 1,
             'updates between two target-network moves.'),
    _Setting('num_critics', 2,
             'critics (targets and the actor use their minimum).'),
    _Setting('value_estimator', 'td0',
             "Q-target estimator over a segment ('td0', 'td1', "
             "'td_lambda', 'gae')."),
    _Setting('td_lambda', 0.95,
             "lambda of the 'td_lambda' and 'gae' estimators."),
    _Setting('sample_length', 1, 'L, transitions per replayed segment.'),
    _Setting('sample_batch_size', 128,
             'transitions per update (ceil(this / L) segments).'),
    _Setting('replay_capacity', 1_000_000, 'transitions kept (FIFO).'),
    _Setting('prioritized', False,
             'sample segments by priority, the RMS TD error of the '
             'segment, instead of uniformly.'),
    _Setting('priority_exponent', 0.6,
             'alpha of prioritized replay: segments are drawn in '
             'proportion to priority^alpha (0 = uniform).'),
    _Setting('importance_exponent', 0.4,
             "beta of prioritized replay's importance weights, annealed "
             'linearly to 1 over the run.'),
    _Setting('learning_starts', 1000,
             'stored transitions before the first update.'),
    _Setting('random_actions_until_start', True,
             'actors act uniformly at random until then.'),
    _Setting('updates_per_step', 1.0,
             'gradient updates per new transition.'),
    _Setting('clip_grad_norm', 0.0,
             "global-norm clipping of each part's gradients (actor, "
             'critics and, in SAC, temperatures; 0 = off).'),
    _Setting('jit_compile', True,
             'compile the updates with XLA (about 3x faster for small '
             'networks on CPU; each new number of updates per call '
             'compiles once).'),
)
SHARED: Dict[str, settings_lib.Setting] = {s.name: s for s in SHARED_SETTINGS}


def shared(*names: str) -> Tuple[settings_lib.Setting, ...]:
  """The shared settings of `names`, in that order (KeyError for a name
  that is not shared)."""
  return tuple(SHARED[name] for name in names)


def validate_common(config, spec: Optional[types.EnvSpec], algorithm: str):
  """Checks the fields SAC and DDPG share; raises ValueError for the first
  impossible one."""
  c = config
  if c.batch_size < 1:
    raise ValueError(f'batch_size must be >= 1, got {c.batch_size}.')
  if c.num_replay != 0:
    raise ValueError(
        f'num_replay must be 0 for {algorithm}: the policy keeps its own '
        f'replay buffer (replay_capacity), got {c.num_replay}.')
  if c.unroll_length < 1:
    raise ValueError(f'unroll_length must be >= 1, got {c.unroll_length}.')
  if c.total_environment_frames < 1:
    raise ValueError('total_environment_frames must be >= 1, got '
                     f'{c.total_environment_frames}.')
  if not c.fixed_step_mul:
    raise ValueError(f'{algorithm} does not support dynamic step '
                     'multipliers: set fixed_step_mul=True.')
  if c.step_mul < 1:
    raise ValueError(f'step_mul must be >= 1, got {c.step_mul}.')
  if not 0.0 <= c.discounting <= 1.0:
    raise ValueError(f'discounting must be in [0, 1], got {c.discounting}.')
  for field in ('actor_learning_rate', 'critic_learning_rate'):
    if not getattr(c, field) > 0:
      raise ValueError(f'{field} must be > 0, got {getattr(c, field)}.')
  if not 0.0 < c.tau <= 1.0:
    raise ValueError(f'tau must be in (0, 1], got {c.tau}.')
  if c.target_update_period < 1:
    raise ValueError('target_update_period must be >= 1, got '
                     f'{c.target_update_period}.')
  if c.num_critics < 1:
    raise ValueError(f'num_critics must be >= 1, got {c.num_critics}.')
  if c.value_estimator == 'vtrace':
    raise ValueError(
        f'value_estimator=vtrace is not available for {algorithm}: V-trace '
        'estimates V(x_t) from behaviour log-probabilities, which replay '
        f'does not keep for continuous actions; use one of {Q_ESTIMATORS}.')
  if c.value_estimator not in Q_ESTIMATORS:
    raise ValueError(f'value_estimator must be one of {Q_ESTIMATORS}, got '
                     f'{c.value_estimator!r}.')
  if not 0.0 <= c.td_lambda <= 1.0:
    raise ValueError(f'td_lambda must be in [0, 1], got {c.td_lambda}.')
  if not 1 <= c.sample_length <= c.unroll_length:
    raise ValueError(
        f'sample_length must be in [1, unroll_length={c.unroll_length}], '
        f'got {c.sample_length}.')
  if c.replay_capacity < c.unroll_length:
    raise ValueError(
        f'replay_capacity ({c.replay_capacity} transitions) must hold at '
        f'least one unroll of unroll_length={c.unroll_length}.')
  if c.priority_exponent < 0:
    raise ValueError('priority_exponent must be >= 0, got '
                     f'{c.priority_exponent}.')
  if not 0.0 <= c.importance_exponent <= 1.0:
    raise ValueError('importance_exponent must be in [0, 1], got '
                     f'{c.importance_exponent}.')
  if c.learning_starts < 0:
    raise ValueError(
        f'learning_starts must be >= 0, got {c.learning_starts}.')
  held = max(1, c.replay_capacity // c.unroll_length) * c.unroll_length
  if c.learning_starts > held:
    raise ValueError(
        f'learning_starts ({c.learning_starts} transitions) exceeds the '
        f'{held} that replay_capacity={c.replay_capacity} holds (whole '
        f'unrolls of {c.unroll_length}): learning would never start.')
  if not c.updates_per_step > 0:
    raise ValueError(
        f'updates_per_step must be > 0, got {c.updates_per_step}.')
  if c.sample_batch_size < 1:
    raise ValueError(
        f'sample_batch_size must be >= 1, got {c.sample_batch_size}.')
  if c.clip_grad_norm < 0:
    raise ValueError(f'clip_grad_norm must be >= 0 (0 = off), got '
                     f'{c.clip_grad_norm}.')
  if not math.isfinite(c.reward_scaling):
    raise ValueError(f'reward_scaling must be finite, got '
                     f'{c.reward_scaling}.')
  if spec is not None:
    off_policy_networks.observation_keys(spec)
    if types.STEP_MUL_KEY in spec.action_spec:
      raise ValueError(f'{algorithm} does not support dynamic step '
                       'multipliers (the env spec has a step_mul action '
                       'head): use fixed_step_mul.')
