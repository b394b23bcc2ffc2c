"""What a continual-learning method may do: the `Method` interface.

A method works beside the IMPALA-CLEAR learner
(`clear.algorithms.impala`), which calls it through this interface and
knows no method by name. A method may:

  - add loss terms, each summarised as `loss/<name>` (`loss_terms`);
  - keep some of the fresh unrolls it sees (`observe`, `replay_buffers`);
  - act at the end of each period of its clock (`consolidate`): a task
    boundary under `--task_boundaries=given`, every
    `--consolidation_interval_frames` under `hidden`
    (`clear.continual.clock`);
  - choose the policy, and so which network acts and which plays in
    evaluation (`policy_class`, `actor_agent_config`);
  - hold state in the checkpoint (`checkpointables`);
  - name its settings (`SETTINGS`: each a flag of `clear.train`), those a
    resume may not change (`IDENTITY`: recorded in run.json's identity),
    and check them (`problems`).

Adding a method is one module with a `Method` subclass, registered in
`clear.continual.methods.METHODS` (docs/continual.md#adding-a-method).
"""

import abc
from typing import Any, ClassVar, Dict, List, NamedTuple, Tuple

from clear import settings as settings_lib
from clear.continual import clock as clock_lib

# A method declares its settings with these (`clear.settings`).
Setting = settings_lib.Setting
settings_class = settings_lib.settings_class


class Context(NamedTuple):
  """What a method may read of the run it is part of.

  Attributes:
    clock: the `clock_lib.Clock` of its periods.
    num_tasks: the sequence's distinct tasks (under hidden boundaries too:
      evaluation knows them; a method that keeps a slot per task reads it).
    seed: the run's seed.
    stacked_frames: the env spec's stacked observations, by name (for
      kept unrolls).
  """
  clock: clock_lib.Clock
  num_tasks: int
  seed: int
  stacked_frames: Tuple[str, ...] = ()


def consolidated(counter, ended: clock_lib.Period) -> bool:
  """Whether period `ended` is consolidated already.

  Args:
    counter: an int64 variable of the method's checkpoint holding how many
      periods it has consolidated (so a resume redoes none).
    ended: the period that ended.
  """
  return int(counter.numpy()) > ended.index


def mark_consolidated(counter, ended: clock_lib.Period):
  """Records in `counter` that periods up to `ended` are consolidated."""
  counter.assign(ended.index + 1)


class Method(abc.ABC):
  """A continual-learning method (see the module docstring).

  Build it with its settings and the run's `Context`; the policy then calls
  `attach` with its learner before any update. Methods hold TensorFlow
  state only from `attach` on, so an acting-only policy needs none.

  Attributes:
    settings: its settings NamedTuple (`Settings`).
    context: the `Context`.
  """

  NAME: ClassVar[str]
  SETTINGS: ClassVar[Tuple[Setting, ...]] = ()
  # Settings a resume may not change: run.json's identity records them.
  IDENTITY: ClassVar[Tuple[str, ...]] = ()
  # Settings a resume may change, recorded among run.json's settings.
  RECORDED: ClassVar[Tuple[str, ...]] = ()
  Settings: ClassVar[type]

  def __init__(self, settings, context: Context):
    self.settings = settings
    self.context = context

  @classmethod
  def problems(cls, settings) -> List[str]:
    """What is wrong with `settings`, each naming its flag (default:
    nothing)."""
    del settings
    return []

  @classmethod
  def agent_problems(cls, agent_config) -> List[str]:
    """What keeps the method from working with `agent_config` (a
    `clear.algorithms.policy.AgentConfig`)."""
    del agent_config
    return []

  @classmethod
  def actor_agent_config(cls, agent_config):
    """The agent config actors act with (default: the run's)."""
    return agent_config

  @classmethod
  def policy_class(cls, default: type) -> type:
    """The policy class that trains with the method (default: the
    algorithm's, `default`)."""
    return default

  def identity(self) -> Dict[str, object]:
    """run.json identity fields: the method and its `IDENTITY` settings."""
    return {'continual_method': self.NAME,
            **{name: getattr(self.settings, name) for name in self.IDENTITY}}

  @abc.abstractmethod
  def attach(self, learner):
    """Builds the method's state over `learner` (an IMPALA-CLEAR learner:
    `agent`, `config`), before its first update."""

  def loss_terms(self) -> Dict[str, Any]:
    """Terms added to the loss of every main update, by name (each
    summarised as `loss/<name>`), computed from the learner's variables
    inside its gradient tape. Default: none."""
    return {}

  def observe(self, unrolls):
    """Sees the fresh unrolls (batch-major `[T + 1, ...]` items) as they
    arrive. Default: nothing."""
    del unrolls

  @abc.abstractmethod
  def consolidate(self, ended: clock_lib.Period) -> Dict[str, float]:
    """The period `ended` is over. Called once per period, also after a
    resume (a method keeps in its checkpoint which it has done).

    Returns:
      Scalars to summarise under `continual/` (empty: nothing done).
    """

  def checkpointables(self) -> Dict[str, Any]:
    """Its `tf.Module`s and variables, by checkpoint key."""
    return {}

  def replay_buffers(self) -> Dict[str, Any]:
    """Replay buffers it owns, saved beside each checkpoint, by name."""
    return {}
