"""IMPALA-CLEAR behind the `clear.algorithms.policy.Policy` interface.

`ImpalaPolicy` acts with an `agents` recurrent agent and learns with
`clear.algorithms.impala.learner.ImpalaClearLearner`; with a continual
method (`--continual_method`), it also keeps the unrolls each task's EWC
Fisher is drawn from and consolidates at every task boundary (`end_task`).
"""

import logging
import time
from typing import Optional

import numpy as np
import tensorflow as tf
import tree

import agents
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import learner as learner_lib
from clear.continual import ewc
from clear.replay import buffer as replay_lib


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
  """

  supports_critic_pretraining = True

  def __init__(self, spec: types.EnvSpec, agent_config: policy_lib.AgentConfig,
               learner_config: Optional[learner_lib.LearnerConfig] = None,
               seed: int = 0):
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
    self.fisher_buffer = None  # The unrolls EWC's next Fisher is drawn from.
    self._seed = seed
    if learner_config is not None:
      if learner_config.continual_method == 'pnc':  # Not one column's EWC.
        raise ValueError("ImpalaPolicy: continual_method='pnc' needs two "
                         'columns: build it with registry.make_policy.')
      self.learner = learner_lib.ImpalaClearLearner(self.agent,
                                                    learner_config)
      if self.learner.continual is not None:
        self.fisher_buffer = self._new_fisher_buffer(0)

  def _new_fisher_buffer(self, segment: int) -> replay_lib.ReplayBuffer:
    """An empty FIFO of `ewc_fisher_frames` frames of fresh unrolls."""
    lc = self.learner.config
    capacity = ewc.fisher_buffer_unrolls(
        lc.ewc_fisher_frames, lc.unroll_length,
        lc.step_mul if lc.fixed_step_mul else 1)
    return replay_lib.ReplayBuffer(
        capacity, 'fifo', seed=self._seed + 7_907 * (segment + 1),
        stacked_observations=self.spec.stacked_frames)

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
    if learner.continual is not None:
      checkpointables['continual'] = learner.continual
    return checkpointables

  def replay_buffers(self):
    if self.fisher_buffer is None:
      return {}
    return {'ewc_fisher': self.fisher_buffer}

  def observe(self, unrolls):
    if self.fisher_buffer is not None:
      for unroll in unrolls:
        self.fisher_buffer.insert(unroll)

  def end_task(self, segment, task, task_name):
    """EWC's task boundary: the finished task's Fisher from
    `ewc_fisher_batches` batches drawn from its kept unrolls, the weights as
    its anchor; then the kept unrolls make way for the next task's."""
    state = self.learner.continual if self.learner is not None else None
    if state is None or int(state.num_boundaries.numpy()) >= segment:
      return {}
    lc = self.learner.config
    start = time.monotonic()
    buffer = self.fisher_buffer
    stats = {}
    if len(buffer):
      batches = (replay_lib.swap_time_and_batch(buffer.sample(lc.batch_size))
                 for _ in range(lc.ewc_fisher_batches))
      summary = self.learner.consolidate(batches, task)
      stats = {'fisher_mean': summary.mean, 'fisher_max': summary.max,
               'fisher_batches': summary.num_batches}
      logging.info(
          '%s: task %s ended (segment %d): Fisher from %d batches of %d '
          'unrolls drawn from its last %d, mean %.3g, max %.3g; %d anchors '
          '(%.1f s).', lc.continual_method, task_name, segment - 1,
          summary.num_batches, lc.batch_size, len(buffer), summary.mean,
          summary.max, state.num_anchors, time.monotonic() - start)
    else:
      logging.warning('%s: task %s ended (segment %d) with none of its '
                      'unrolls kept (a resume with an empty buffer?): it '
                      'gets no anchor.', lc.continual_method, task_name,
                      segment - 1)
    state.num_boundaries.assign(segment)
    self.fisher_buffer = self._new_fisher_buffer(segment)
    stats.update(num_anchors=state.num_anchors,
                 seconds=time.monotonic() - start)
    return stats
