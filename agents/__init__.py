"""IMPALA agents (TF2 / Sonnet 2): torsos, LSTM core, policy heads.

Public API:
  make_agent(env_spec, network='auto', core_size=256, separate_critic=False,
             seed=0, ...) -> Agent
  Agent.initial_state(batch_size), Agent.step(env_output, prev_action, state),
  Agent.unroll(prev_actions, env_outputs, state), Agent.critic_variables,
  Agent.policy_variables, Agent.rng.
  NETWORKS, CORES, TORSO_NORMS, MASKED_LOGIT.

Modules: `agent` (Agent, make_agent), `torsos` (observation encoders),
`heads` (policy heads, masking, sampling), `cores` (resetting core,
layer-normalised LSTM),
`initializers` (seeded weight init).
"""

from agents.agent import Agent
from agents.agent import CORES
from agents.agent import make_agent
from agents.agent import NETWORKS
from agents.agent import resolve_network
from agents.agent import TORSO_NORMS
from agents.heads import MASKED_LOGIT

__all__ = ['Agent', 'make_agent', 'NETWORKS', 'CORES', 'TORSO_NORMS',
           'resolve_network', 'MASKED_LOGIT']
