"""The config fields SAC and DDPG share, and their checks.

SAC's and DDPG's configs are NamedTuples made by `config_class` from the
shared fields below plus each algorithm's own (its module docstring
describes those), in one order: the shared fields up to
`critic_learning_rate`, the algorithm's own learning rates, `tau`,
`target_update_period`, `num_critics`, the algorithm's other fields, then
the remaining shared ones. `validate_common` checks the shared fields.

Raising `sample_length` with the td1 or td_lambda estimator gives
n-step-like targets. The defaults are the ones checked on gym:Pendulum-v1
and gym:CartPole-v1 with 64-unit MLPs (see each algorithm's module).
"""

import collections
import math
from typing import Dict, NamedTuple, Optional, Sequence

from clear import types
from clear.algorithms.off_policy import networks as off_policy_networks

# Estimators that give Q-value targets from (rewards, discounts, values).
# V-trace targets estimate V(x_t) and need behaviour log-probabilities, which
# continuous heads do not store, so it is not offered here.
Q_ESTIMATORS = ('td0', 'td1', 'td_lambda', 'gae')


class Field(NamedTuple):
  """One config field: its name, type and default."""
  name: str
  type: object
  default: object


SHARED_FIELDS = (
    Field('batch_size', int, 4),
    Field('num_replay', int, 0),
    Field('unroll_length', int, 8),
    Field('total_environment_frames', int, 100_000),
    Field('fixed_step_mul', bool, True),
    Field('step_mul', int, 1),
    Field('discounting', float, 0.99),
    Field('reward_scaling', float, 1.0),
    Field('actor_learning_rate', float, 1e-3),
    Field('critic_learning_rate', float, 1e-3),
    Field('tau', float, 0.005),
    Field('target_update_period', int, 1),
    Field('num_critics', int, 2),
    Field('value_estimator', str, 'td0'),
    Field('td_lambda', float, 0.95),
    Field('sample_length', int, 1),
    Field('sample_batch_size', int, 128),
    Field('replay_capacity', int, 1_000_000),
    Field('prioritized', bool, False),
    Field('priority_exponent', float, 0.6),
    Field('importance_exponent', float, 0.4),
    Field('learning_starts', int, 1000),
    Field('random_actions_until_start', bool, True),
    Field('updates_per_step', float, 1.0),
    Field('clip_grad_norm', float, 0.0),
    Field('jit_compile', bool, True),
)

# What each shared field means (`clear.train` makes the flags' help from
# these lines, `name [default]: text`).
SHARED_FIELDS_DOC = """\
Fields shared by SAC and DDPG (defaults in brackets; the run loop reads the
first six):
  batch_size [4]: fresh unrolls per `learn` call (e.g. envs_per_actor).
  num_replay [0]: must stay 0; the policy owns its replay buffer.
  unroll_length [8]: T of the actors' unrolls.
  total_environment_frames [100_000]: run length (anneals the importance
    exponent to 1).
  fixed_step_mul [True], step_mul [1]: frames per agent step (dynamic
    multipliers are not supported).
  discounting [0.99]: gamma.
  reward_scaling [1.0]: rewards are multiplied by this.
  actor_learning_rate [1e-3]: Adam learning rate of the actor.
  critic_learning_rate [1e-3]: Adam learning rate of the critics.
  tau [0.005]: how far the target networks move towards the online ones
    at each target update (1 copies them).
  target_update_period [1]: updates between two target-network moves.
  num_critics [SAC 2, DDPG 1]: critics (targets and the actor use their
    minimum).
  value_estimator ['td0']: Q-target estimator over a segment ('td0',
    'td1', 'td_lambda', 'gae').
  td_lambda [0.95]: lambda of the 'td_lambda' and 'gae' estimators.
  sample_length [1]: L, transitions per replayed segment.
  sample_batch_size [128]: transitions per update (ceil(this / L)
    segments).
  replay_capacity [1_000_000]: transitions kept (FIFO).
  prioritized [False]: sample segments by priority, the RMS TD error of
    the segment, instead of uniformly.
  priority_exponent [0.6]: alpha of prioritized replay: segments are drawn
    in proportion to priority^alpha (0 = uniform).
  importance_exponent [0.4]: beta of prioritized replay's importance
    weights, annealed linearly to 1 over the run.
  learning_starts [1000]: stored transitions before the first update.
  random_actions_until_start [True]: actors act uniformly at random until
    then.
  updates_per_step [1.0]: gradient updates per new transition.
  clip_grad_norm [0.0]: global-norm clipping of each part's gradients
    (actor, critics and, in SAC, temperatures; 0 = off).
  jit_compile [True]: compile the updates with XLA (about 3x faster for
    small networks on CPU; each new number of updates per call compiles
    once).
"""


def config_class(class_name: str, module: str, summary: str,
                 own_fields: Dict[str, Sequence[Field]],
                 defaults: Optional[Dict[str, object]] = None) -> type:
  """A NamedTuple class of the shared fields and an algorithm's own.

  Args:
    class_name: e.g. 'SACConfig'.
    module: the module that defines it (`__name__`), whose docstring
      describes the algorithm's own fields.
    summary: the first lines of the class docstring; the shared fields'
      descriptions follow.
    own_fields: {shared field name: the algorithm's fields that come right
      after it}; only 'critic_learning_rate' and 'num_critics' are used.
    defaults: {shared field name: the algorithm's default}, where it
      differs.

  Returns:
    The class; its `_field_defaults` hold every default.
  """
  defaults = defaults or {}
  unknown = set(own_fields) - {'critic_learning_rate', 'num_critics'}
  unknown |= set(defaults) - {f.name for f in SHARED_FIELDS}
  if unknown:
    raise ValueError(f'config_class: no shared field {sorted(unknown)} to '
                     'place or override.')
  fields = []
  for field in SHARED_FIELDS:
    fields.append(field._replace(default=defaults.get(field.name,
                                                      field.default)))
    fields.extend(own_fields.get(field.name, ()))
  cls = collections.namedtuple(class_name, [f.name for f in fields],
                               defaults=[f.default for f in fields],
                               module=module)
  cls.__annotations__ = {f.name: f.type for f in fields}
  cls.__doc__ = f'{summary}\n\n{SHARED_FIELDS_DOC}'
  return cls


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
