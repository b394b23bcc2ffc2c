"""The algorithms `--algorithm` names: each a policy class and its config.

Every algorithm trains through the same runtime (actors, run loop,
checkpoints, summaries): its policy implements `clear.algorithms.policy.Policy`,
and its config is a NamedTuple holding at least the fields the run loop reads
(`batch_size`, `num_replay`, `unroll_length`, `total_environment_frames`,
`fixed_step_mul`, `step_mul`).
"""

from typing import Callable, NamedTuple, Optional

from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.ddpg import policy as ddpg
from clear.algorithms.impala import config as impala_config
from clear.algorithms.impala import policy as impala
from clear.algorithms.pnc import policy as pnc
from clear.algorithms.ppg import policy as ppg
from clear.algorithms.sac import policy as sac


class Algorithm(NamedTuple):
  """A trainable algorithm.

  Attributes:
    policy: its `clear.algorithms.policy.Policy` subclass, built as
      `policy(spec, agent_config, config_or_None, seed=seed)`.
    config: its config NamedTuple class (defaults are the algorithm's).
    validate: raises ValueError for an impossible config.
    description: one line for `--help`.
  """
  policy: type
  config: type
  validate: Callable[[NamedTuple], None]
  description: str


ALGORITHMS = {
    'impala': Algorithm(impala.ImpalaPolicy, impala_config.LearnerConfig,
                        impala_config.validate_config,
                        'IMPALA with CLEAR replay (V-trace, policy and '
                        'value cloning)'),
    'ppg': Algorithm(ppg.PPGPolicy, ppg.PPGConfig, ppg.validate_config,
                     'Phasic Policy Gradient'),
    'sac': Algorithm(sac.SACPolicy, sac.SACConfig, sac.validate_config,
                     'Soft Actor-Critic (discrete, continuous or mixed)'),
    'ddpg': Algorithm(ddpg.DDPGPolicy, ddpg.DDPGConfig, ddpg.validate_config,
                      'Deep Deterministic Policy Gradient'),
}


def make_policy(algorithm: str, spec: types.EnvSpec,
                agent_config: policy_lib.AgentConfig,
                learner_config: Optional[NamedTuple] = None,
                seed: int = 0, method=None) -> policy_lib.Policy:
  """Builds the named algorithm's policy (acting-only without a config).

  Args:
    algorithm: an `ALGORITHMS` name.
    spec: the env spec.
    agent_config: the networks.
    learner_config: the algorithm's config, or None for an acting-only copy.
    seed: the policy's seed.
    method: IMPALA's continual-learning method
      (`clear.continual.methods.base.Method`), or None; it may choose the
      policy class.

  Raises:
    ValueError: an unknown algorithm, a config of another algorithm, or a
      method with another algorithm.
  """
  if algorithm not in ALGORITHMS:
    raise ValueError(f'Unknown algorithm {algorithm!r}; available: '
                     f'{sorted(ALGORITHMS)}.')
  entry = ALGORITHMS[algorithm]
  if learner_config is not None and not isinstance(learner_config,
                                                   entry.config):
    raise ValueError(f'--algorithm={algorithm} needs a '
                     f'{entry.config.__name__}, got '
                     f'{type(learner_config).__name__}.')
  policy = entry.policy
  if method is not None:
    if algorithm != 'impala':
      raise ValueError(f'continual_method={method.NAME!r} needs '
                       f'--algorithm=impala, not {algorithm}.')
    return method.policy_class(policy)(spec, agent_config, learner_config,
                                       seed=seed, method=method)
  if algorithm == 'impala' and agent_config.pnc_columns:
    policy = pnc.PncPolicy  # The actors' copy of Progress & Compress.
  return policy(spec, agent_config, learner_config, seed=seed)
