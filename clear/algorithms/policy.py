"""The small interface between the runtime and an algorithm.

In the spirit of RLlib's policy API: the actors, the replay and the binary
only ever call `initial_state`, `act`, `get_weights` and `set_weights`, and
the learner side `learn` (and `learn_critic` where the algorithm pretrains a
critic). All inputs and outputs are numpy nests in the `clear.types`
structures, batched `[B, ...]` for acting and `[T + 1, B, ...]` for learning.

`clear.algorithms.registry.make_policy(algorithm, ...)` builds a policy by
name; each algorithm's package implements `Policy` in its `policy.py`
(`clear.algorithms.impala.policy.ImpalaPolicy`, ...).
"""

import abc
from typing import Dict, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf
import tree

from clear import checkpoint as checkpoint_lib
from clear import types
from clear.replay import buffer as replay_lib


INIT_SCOPES = ('all', 'critic', 'policy')


class AgentConfig(NamedTuple):
  """Network choices, shared by the learner's agent and the actors' copies.

  `core` and `torso_norm` are the IMPALA agent's (see
  `agents.make_agent`); the other algorithms' networks take the defaults.
  `pnc_columns` gives IMPALA Progress & Compress's two columns of that
  network (`clear.algorithms.pnc.policy`): the run sets it for the actors
  of `continual_method='pnc'`, not a flag.
  """
  network: str = 'auto'
  core_size: int = 256
  separate_critic: bool = False
  core: str = 'lstm'
  torso_norm: str = 'none'
  pnc_columns: bool = False


# The IMPALA agent's core and torso options in `AgentConfig`; run.json
# records them only when they differ from the defaults.
CORE_OPTION_FIELDS = ('core', 'torso_norm')


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

  def evaluation_weights(self):
    """The weights evaluation plays, with an acting-only policy built from
    the run's agent config (default: `get_weights`)."""
    return self.get_weights()

  def set_weights(self, weights):
    """Loads weights from `get_weights`."""
    variables = self.acting_variables()
    if len(weights) != len(variables):
      raise ValueError(f'{type(self).__name__}.set_weights: got '
                       f'{len(weights)} arrays for {len(variables)} '
                       'variables.')
    for v, w in zip(variables, weights):
      v.assign(w)

  @abc.abstractmethod
  def learn(self, batch: types.Unroll) -> Dict[str, np.ndarray]:
    """One update on a time-major batch; returns scalar stats."""

  def learn_critic(self, batch: types.Unroll) -> Dict[str, np.ndarray]:
    raise ValueError(f'{type(self).__name__} has no critic pretraining.')

  def trace(self, example_batch: types.Unroll, critic: bool = False):
    """Builds the learning graphs for batches like `example_batch` ahead of
    time (e.g. while actors start), without updating anything."""
    del example_batch, critic

  def create_slots(self, critic: bool = False):
    """Makes the optimizers' slots now, without tracing (`trace` makes them
    too), so that a checkpoint restored before fills them and one saved
    before any update keeps them. Policies whose optimizers make their slots
    when built have nothing to do."""
    del critic

  @property
  @abc.abstractmethod
  def num_env_frames(self) -> int:
    """Env frames trained on so far."""

  @property
  @abc.abstractmethod
  def num_updates(self) -> int:
    """Updates applied so far (skipped ones not counted)."""

  @abc.abstractmethod
  def add_env_frames(self, frames: int):
    """Counts frames consumed outside `learn` (e.g. replay pre-fill)."""

  @abc.abstractmethod
  def checkpointables(self) -> Dict[str, tf.Module]:
    """Everything a checkpoint must hold, by name."""

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

  def reseed_sampling(self, seed: int):
    """Puts `sampling_rng` where it starts in a policy built with `seed`
    (default: `tf.random.Generator.from_seed(seed)`)."""
    rng = self.sampling_rng()
    if rng is not None:
      rng.reset_from_seed(seed)

  @abc.abstractmethod
  def acting_checkpointables(self) -> Dict[str, tf.Module]:
    """What acting needs from a checkpoint, named as in `checkpointables`
    (test mode restores only these into an acting-only policy)."""

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

  def consolidate(self, ended) -> Dict[str, float]:
    """The period `ended` (a `clear.continual.clock.Period`: a segment of
    the task sequence, or an interval under hidden boundaries) is over.
    Called before the actors play on, and again after a resume: a policy
    acts once per period. Default: nothing.

    Returns:
      Scalars to summarise under `continual/` (empty: nothing done).
    """
    del ended
    return {}
