"""IMPALA-CLEAR behind the `clear.algorithms.policy.Policy` interface.

`ImpalaPolicy` acts with an `agents` recurrent agent and learns with
`clear.algorithms.impala.learner.ImpalaClearLearner`, beside a
continual-learning method if the run has one
(`clear.continual.methods.base.Method`), which sees the fresh unrolls,
adds its loss terms, consolidates at the end of each period and keeps its
state in the checkpoint.
"""

from typing import Optional

import numpy as np
import tensorflow as tf
import tree

import agents
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import learner as learner_lib


def _tensor_spec(x):
  return None if x is None else tf.TensorSpec(np.shape(x),
                                              tf.as_dtype(np.asarray(x).dtype))


class ImpalaPolicy(policy_lib.Policy):
  """IMPALA with CLEAR replay over an `agents` recurrent agent.

  Args:
    spec: the environment spec.
    agent_config: `clear.algorithms.policy.AgentConfig`.
    learner_config: `LearnerConfig`, or None for an acting-only copy.
    seed: seeds the agent's initialisation and its sampling RNG.
    method: the run's continual-learning method, or None (always None in
      an acting-only copy).
  """

  supports_critic_pretraining = True

  def __init__(self, spec: types.EnvSpec, agent_config: policy_lib.AgentConfig,
               learner_config: Optional[learner_lib.LearnerConfig] = None,
               seed: int = 0, method=None):
    super().__init__(spec)
    continuous = [key for key, head in spec.action_spec.items()
                  if not isinstance(head, types.DiscreteSpec)]
    if continuous:
      raise ValueError(
          f'{spec.name} has continuous actions ({", ".join(continuous)}), '
          'and the IMPALA agent acts on discrete ones: use '
          '--algorithm=sac or --algorithm=ddpg.')
    self._agent_config = agent_config
    self.agent = agents.make_agent(spec, network=agent_config.network,
                                   core_size=agent_config.core_size,
                                   separate_critic=agent_config.separate_critic,
                                   seed=seed, core=agent_config.core,
                                   torso_norm=agent_config.torso_norm)
    # make_agent built the weights. The agent's maths has no Python control
    # flow on tensors, so AutoGraph has nothing to convert.
    self._step = tf.function(self.agent.step, autograph=False)
    self._acting_steps = {}  # Batch size -> `_step`'s concrete function.
    self.learner = None
    self.method = None
    if learner_config is not None:
      if method is not None and method.policy_class(type(self)) is not type(
          self):
        raise ValueError(f'ImpalaPolicy: the method {method.NAME!r} trains '
                         'its own policy: build it with '
                         'registry.make_policy.')
      self.method = method
      self.learner = learner_lib.ImpalaClearLearner(self.agent,
                                                    learner_config, method)

  def initial_state(self, batch_size):
    return policy_lib.to_numpy(self.agent.initial_state(batch_size))

  def act(self, env_output, prev_action, state):
    # The agent reads neither `info` nor `truncated`: fewer inputs make
    # each call cheaper, and so does calling the step's concrete function
    # for this batch size (traced once) rather than matching the inputs'
    # types at every call.
    inputs = (env_output._replace(info=None, truncated=None), prev_action,
              state)
    batch_size = np.shape(env_output.reward)[0]
    step = self._acting_steps.get(batch_size)
    if step is None:
      step = self._step.get_concrete_function(
          *tree.map_structure(_tensor_spec, inputs))
      self._acting_steps[batch_size] = step
    output, state = step(*inputs)
    return policy_lib.to_numpy(output), policy_lib.to_numpy(state)

  def acting_variables(self):
    return self.agent.trainable_variables

  def sampling_rng(self):
    return self.agent.rng

  def _init_twin(self):
    return type(self)(self.spec, self._agent_config)

  def _scope_variables(self, scope):
    agent = self.agent
    return {'all': agent.trainable_variables,
            'critic': agent.critic_variables,
            'policy': agent.policy_variables}[scope]

  def acting_checkpointables(self):
    return {'agent': self.agent}

  def learn(self, batch):
    return policy_lib.to_numpy(self.learner.step(batch))

  def learn_critic(self, batch):
    return policy_lib.to_numpy(self.learner.critic_step(batch))

  def trace(self, example_batch, critic=False):
    signature = tree.map_structure(
        lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype)),
        example_batch)
    self.learner.trace(signature, critic=critic)

  def create_slots(self, critic=False):
    self.learner.create_slots(critic)

  @property
  def num_env_frames(self):
    return int(self.learner.num_env_frames.numpy())

  @property
  def num_updates(self):
    return int(self.learner.num_updates.numpy())

  def add_env_frames(self, frames):
    self.learner.num_env_frames.assign_add(int(frames))

  def checkpointables(self):
    learner = self.learner
    checkpointables = {'agent': self.agent, 'optimizer': learner.optimizer,
                       'critic_optimizer': learner.critic_optimizer,
                       'learning_rate': learner.learning_rate,
                       'num_env_frames': learner.num_env_frames,
                       # The update count's name in checkpoints.
                       'num_steps': learner.num_updates,
                       'num_skipped_steps': learner.num_skipped_steps}
    if self.method is not None:
      checkpointables.update(self.method.checkpointables())
    return checkpointables

  def replay_buffers(self):
    return {} if self.method is None else self.method.replay_buffers()

  def observe(self, unrolls):
    if self.method is not None:
      self.method.observe(unrolls)

  def consolidate(self, ended):
    return {} if self.method is None else self.method.consolidate(ended)
