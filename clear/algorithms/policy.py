"""The small interface between the runtime and an algorithm.

In the spirit of RLlib's policy API: the actors, the replay and the binary
only ever call `initial_state`, `act`, `get_weights` and `set_weights`, and
the learner side `learn` (and `learn_critic` where the algorithm pretrains a
critic). All inputs and outputs are numpy nests in the `clear.types`
structures, batched `[B, ...]` for acting and `[T + 1, B, ...]` for learning.

`clear.algorithms.registry.make_policy(algorithm, ...)` builds a policy by name.
"""

import abc
import logging
import time
from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf
import tree

import agents
from clear import checkpoint as checkpoint_lib
from clear import types
from clear.algorithms.impala import learner as learner_lib
from clear.continual import ewc
from clear.replay import buffer as replay_lib


INIT_SCOPES = ('all', 'critic', 'policy')


class AgentConfig(NamedTuple):
  """Network choices, shared by the learner's agent and the actors' copies.

  `core`, `lstm_init`, `torso_grad_scale`, `torso_activation` and
  `torso_norm` are the IMPALA agent's (see `agents.make_agent`); the other
  algorithms' networks take the defaults.
  """
  network: str = 'auto'
  core_size: int = 256
  separate_critic: bool = False
  core: str = 'lstm'
  lstm_init: str = 'fan_in'
  torso_grad_scale: float = 1.0
  torso_activation: str = 'relu'
  torso_norm: str = 'none'


# The IMPALA agent's core and torso options in `AgentConfig`; run.json
# records them only when they differ from the defaults.
CORE_OPTION_FIELDS = ('core', 'lstm_init', 'torso_grad_scale',
                      'torso_activation', 'torso_norm')


def to_numpy(nest):
  return tree.map_structure(np.asarray, nest)


def zero_step_output(spec: types.EnvSpec, batch_size: int) -> types.StepOutput:
  """A `StepOutput` of zeros shaped like `spec`'s observations."""
  zeros = lambda dtype: np.zeros([batch_size], dtype)
  return types.StepOutput(
      reward=zeros(np.float32),
      info=types.EpisodeInfo(zeros(np.float32), zeros(np.int32),
                             zeros(np.int32)),
      done=zeros(bool), truncated=zeros(bool),
      observation={k: np.zeros((batch_size,) + tuple(s.shape), s.dtype)
                   for k, s in spec.observation_spec.items()})


def example_batch(policy, unroll_length: int, batch_size: int):
  """A zero `Unroll` batch `[T + 1, B]` shaped like real learner batches."""
  time_major = lambda x: np.zeros((unroll_length + 1,) + x.shape, x.dtype)
  return types.Unroll(
      policy.initial_state(batch_size),
      tree.map_structure(time_major, zero_step_output(policy.spec,
                                                      batch_size)),
      tree.map_structure(time_major, zero_agent_output(policy.spec,
                                                       batch_size)))


def zero_agent_output(spec: types.EnvSpec, batch_size: int):
  """The agent output that stands before the first step of an episode."""
  action, logits = {}, {}
  for name, head in spec.action_spec.items():
    if isinstance(head, types.DiscreteSpec):
      action[name] = np.zeros([batch_size], np.int32)
      logits[name] = np.zeros([batch_size, head.num_values], np.float32)
    else:
      action[name] = np.zeros((batch_size,) + tuple(head.shape), np.float32)
  return types.AgentOutput(action, logits, np.zeros([batch_size], np.float32))


class Policy(abc.ABC):
  """What the runtime needs of an algorithm.

  Attributes:
    spec: the environment's `EnvSpec`.
    supports_critic_pretraining: whether `learn_critic` exists.
  """

  supports_critic_pretraining = False

  def __init__(self, spec: types.EnvSpec):
    self.spec = spec

  @abc.abstractmethod
  def initial_state(self, batch_size: int):
    """The recurrent state at the start of acting, numpy nest `[B, ...]`."""

  @abc.abstractmethod
  def act(self, env_output: types.StepOutput, prev_action, state):
    """Acts on a batch: returns (`AgentOutput` `[B]`, new state)."""

  @abc.abstractmethod
  def acting_variables(self) -> Sequence[tf.Variable]:
    """The variables actors need, in a fixed order."""

  def sampling_rng(self) -> Optional[tf.random.Generator]:
    """The generator acting samples with, if any (see `get_rng_state`)."""
    return None

  def get_weights(self):
    """The acting weights, a list of numpy arrays."""
    return [v.numpy() for v in self.acting_variables()]

  def set_weights(self, weights):
    """Loads weights from `get_weights`."""
    variables = self.acting_variables()
    if len(weights) != len(variables):
      raise ValueError(f'{type(self).__name__}.set_weights: got '
                       f'{len(weights)} arrays for {len(variables)} '
                       'variables.')
    for v, w in zip(variables, weights):
      v.assign(w)

  def learn(self, batch: types.Unroll) -> Dict[str, np.ndarray]:
    """One update on a time-major batch; returns scalar stats."""
    raise NotImplementedError(f'{type(self).__name__} only acts.')

  def learn_critic(self, batch: types.Unroll) -> Dict[str, np.ndarray]:
    raise ValueError(f'{type(self).__name__} has no critic pretraining.')

  def trace(self, example_batch: types.Unroll, critic: bool = False):
    """Builds the learning graphs for batches like `example_batch` ahead of
    time (e.g. while actors start), without updating anything."""
    del example_batch, critic

  @property
  def num_env_frames(self) -> int:
    raise NotImplementedError

  @property
  def num_updates(self) -> int:
    """Updates applied so far (skipped ones not counted)."""
    raise NotImplementedError

  def add_env_frames(self, frames: int):
    """Counts frames consumed outside `learn` (e.g. replay pre-fill)."""
    raise NotImplementedError

  def checkpointables(self) -> Dict[str, tf.Module]:
    """Everything a checkpoint must hold, by name."""
    raise NotImplementedError

  def init_from(self, location: str, scope: str) -> str:
    """Loads some of another run's weights into this fresh policy.

    The checkpoint is read into a twin first, then the chosen part is
    copied: a checkpoint of another network fails before anything here is
    overwritten.

    Args:
      location: a run's logdir, checkpoints folder or checkpoint path.
      scope: one of `INIT_SCOPES`: 'all' weights, only the 'critic' (e.g.
        from a critic-pretraining run) or only the 'policy'.

    Returns:
      The checkpoint read.
    """
    if scope not in INIT_SCOPES:
      raise ValueError(f'init scope must be one of {INIT_SCOPES}, got '
                       f'{scope!r}.')
    # pylint: disable=protected-access
    twin = self._init_twin()
    path = checkpoint_lib.restore_part(location,
                                       twin._weight_checkpointables())
    for target, source in zip(self._scope_variables(scope),
                              twin._scope_variables(scope)):
      target.assign(source)
    return path

  def _init_twin(self) -> 'Policy':
    """A fresh policy with the same networks, for `init_from` to read into."""
    raise ValueError(f'--init_from is not supported by '
                     f'{type(self).__name__}.')

  def _weight_checkpointables(self) -> Dict[str, tf.Module]:
    """The checkpoint entries holding every weight `_scope_variables`
    names (default: what acting needs)."""
    return self.acting_checkpointables()

  @abc.abstractmethod
  def _scope_variables(self, scope: str) -> Sequence[tf.Variable]:
    """The variables `init_from` loads for an `INIT_SCOPES` scope."""

  def get_rng_state(self) -> Dict[str, np.ndarray]:
    """The state of `sampling_rng`, so a resumed actor samples the same
    actions (a policy without one resumes correctly, just not bit-exactly).
    """
    rng = self.sampling_rng()
    return {} if rng is None else {'rng': rng.state.numpy()}

  def set_rng_state(self, state: Dict[str, np.ndarray]):
    rng = self.sampling_rng()
    if rng is not None:
      rng.state.assign(state['rng'])

  def acting_checkpointables(self) -> Dict[str, tf.Module]:
    """What acting needs from a checkpoint, named as in `checkpointables`
    (test mode restores only these into an acting-only policy)."""
    raise NotImplementedError

  def replay_buffers(self) -> Dict[str, replay_lib.ReplayBuffer]:
    """Replay buffers the policy owns (off-policy algorithms), by name.

    The run loop saves them next to every checkpoint and restores them on
    resume, like the CLEAR buffer. Names must be valid folder names.
    """
    return {}

  def observe(self, unrolls: Sequence[types.Unroll]):
    """Sees the fresh unrolls (batch-major `[T + 1, ...]` items) as they
    arrive from the actors of the task being trained; default: nothing."""
    del unrolls

  def end_task(self, segment: int, task: int,
               task_name: str) -> Dict[str, float]:
    """The run trains segment `segment` of a task sequence: the segment
    before it, of task `task` (an index among the sequence's distinct tasks,
    named `task_name`), has ended. Called before the actors play the next
    task, and again after a resume: a policy acts once per segment.

    Returns:
      Scalars to summarise under `continual/` (empty: nothing done).
    """
    del segment, task, task_name
    return {}


class ImpalaPolicy(Policy):
  """IMPALA with CLEAR replay over an `agents` recurrent agent.

  Args:
    spec: the environment spec.
    agent_config: `AgentConfig`.
    learner_config: `learner.LearnerConfig`, or None for an acting-only copy.
    seed: seeds the agent's initialisation and its sampling RNG.
  """

  supports_critic_pretraining = True

  def __init__(self, spec: types.EnvSpec, agent_config: AgentConfig,
               learner_config: Optional[learner_lib.LearnerConfig] = None,
               seed: int = 0):
    super().__init__(spec)
    self._agent_config = agent_config
    self.agent = agents.make_agent(spec, network=agent_config.network,
                                   core_size=agent_config.core_size,
                                   separate_critic=agent_config.separate_critic,
                                   seed=seed, core=agent_config.core,
                                   lstm_init=agent_config.lstm_init,
                                   torso_grad_scale=(
                                       agent_config.torso_grad_scale),
                                   torso_activation=(
                                       agent_config.torso_activation),
                                   torso_norm=agent_config.torso_norm)
    # make_agent built the weights. The agent's maths has no Python control
    # flow on tensors, so AutoGraph has nothing to convert.
    self._step = tf.function(self.agent.step, autograph=False)
    self.learner = None
    self.fisher_buffer = None  # The unrolls EWC's next Fisher is drawn from.
    self._seed = seed
    if learner_config is not None:
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
    return to_numpy(self.agent.initial_state(batch_size))

  def act(self, env_output, prev_action, state):
    output, state = self._step(env_output, prev_action, state)
    return to_numpy(output), to_numpy(state)

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
    return to_numpy(self.learner.step(batch))

  def learn_critic(self, batch):
    return to_numpy(self.learner.critic_step(batch))

  def trace(self, example_batch, critic=False):
    signature = tree.map_structure(
        lambda x: tf.TensorSpec(np.shape(x), tf.as_dtype(np.asarray(x).dtype)),
        example_batch)
    self.learner.trace(signature, critic=critic)

  @property
  def num_env_frames(self):
    return int(self.learner.num_env_frames.numpy())

  @property
  def num_updates(self):
    return int(self.learner.num_steps.numpy())

  def add_env_frames(self, frames):
    self.learner.num_env_frames.assign_add(int(frames))

  def checkpointables(self):
    learner = self.learner
    checkpointables = {'agent': self.agent, 'optimizer': learner.optimizer,
                       'critic_optimizer': learner.critic_optimizer,
                       'learning_rate': learner.learning_rate,
                       'num_env_frames': learner.num_env_frames,
                       'num_steps': learner.num_steps,
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
