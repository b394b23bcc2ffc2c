"""The continual-learning methods `--continual_method` names, and how a run
records and checks its method.

Each method is a `base.Method` in a module of its own: 'ewc' and
'online_ewc' (`ewc`), 'l2' (`l2`), 'pnc', Progress & Compress (`pnc`).
'none' adds nothing to the IMPALA-CLEAR learner's loss or checkpoints.
`METHODS` registers them; a new method is one module plus one line there
(docs/continual.md#adding-a-method).

A run's method is a `ContinualConfig`: the method's name and settings, and
where its periods end (`--task_boundaries`: the task switches, or every
`--consolidation_interval_frames` frames with hidden boundaries;
`clear.continual.clock`). A method changes what a checkpoint holds, so the
method, its `IDENTITY` settings and hidden boundaries with their interval
are part of the identity run.json records, and a resume with another is
refused; its `RECORDED` settings are settings a resume may change.

The interval's default, 500,000 frames, comes from the methods, not from
any schedule: five times the frames a Fisher is drawn from (100,000 by
default), so each Fisher comes from data no earlier one used, and P&C's
phases (half of a period each) last 250,000 frames, long enough for the
active column to learn and the knowledge base to distil it on MinAtar and
Atari alike.
"""

from typing import Dict, NamedTuple, Optional, Tuple

from clear import checkpoint as checkpoint_lib
from clear.continual import clock as clock_lib
from clear.continual.methods import base
from clear.continual.methods import ewc
from clear.continual.methods import l2
from clear.continual.methods import pnc

METHODS = {
    'ewc': ewc.Ewc,
    'online_ewc': ewc.OnlineEwc,
    'l2': l2.L2,
    'pnc': pnc.Pnc,
}
CONTINUAL_METHODS = ('none',) + tuple(METHODS)
TASK_BOUNDARIES = clock_lib.TASK_BOUNDARIES
DEFAULT_CONSOLIDATION_INTERVAL_FRAMES = 500_000


def all_settings() -> Dict[str, base.Setting]:
  """Every method's settings by name (methods that share one, as P&C
  shares EWC's, declare the same `Setting`).

  Raises:
    ValueError: two methods declare one name differently.
  """
  found = {}
  for method in METHODS.values():
    for setting in method.SETTINGS:
      if found.setdefault(setting.name, setting) != setting:
        raise ValueError(f'The setting {setting.name} is declared twice, '
                         'differently.')
  return found


def users_of(name: str):
  """The methods that take setting `name`."""
  return [key for key, method in METHODS.items()
          if any(s.name == name for s in method.SETTINGS)]


RECORDED_SETTINGS = tuple(dict.fromkeys(
    name for method in METHODS.values() for name in method.RECORDED))


class ContinualConfig(NamedTuple):
  """A run's continual-learning method.

  Attributes:
    method: a `CONTINUAL_METHODS` name.
    settings: its `Settings` NamedTuple (None for 'none': then the method's
      defaults).
    task_boundaries: 'given' (periods end at task switches) or 'hidden'
      (every `consolidation_interval_frames`).
    consolidation_interval_frames: the period under hidden boundaries.
  """
  method: str = 'none'
  settings: Optional[NamedTuple] = None
  task_boundaries: str = 'given'
  consolidation_interval_frames: int = DEFAULT_CONSOLIDATION_INTERVAL_FRAMES


def method_class(config: ContinualConfig):
  """The `base.Method` subclass of `config` (None for 'none').

  Raises:
    ValueError: an unknown method.
  """
  if config.method == 'none':
    return None
  if config.method not in METHODS:
    raise ValueError(f'continual_method must be one of {CONTINUAL_METHODS}, '
                     f'got {config.method!r}.')
  return METHODS[config.method]


def make_config(method: str = 'none', task_boundaries: str = 'given',
                consolidation_interval_frames: int = (
                    DEFAULT_CONSOLIDATION_INTERVAL_FRAMES),
                **settings) -> ContinualConfig:
  """A `ContinualConfig` whose settings are the method's defaults but
  `settings` (names a method does not take are left out)."""
  config = ContinualConfig(method, None, task_boundaries,
                           consolidation_interval_frames)
  cls = method_class(config)
  if cls is not None:
    known = {s.name for s in cls.SETTINGS}
    config = config._replace(settings=cls.Settings(
        **{k: v for k, v in settings.items() if k in known}))
  return config


def validate(config: ContinualConfig):
  """Raises ValueError with every problem of `config`, one message."""
  cls = method_class(config)
  problems = []
  if config.task_boundaries not in TASK_BOUNDARIES:
    problems.append(f'task_boundaries must be one of {TASK_BOUNDARIES}, got '
                    f'{config.task_boundaries!r}.')
  if config.consolidation_interval_frames < 1:
    problems.append('consolidation_interval_frames must be >= 1, got '
                    f'{config.consolidation_interval_frames}.')
  if cls is not None:
    problems += cls.problems(config.settings)
  if problems:
    raise ValueError(' '.join(problems))


def identity(config: ContinualConfig) -> Dict[str, object]:
  """run.json identity fields of the method: none for 'none', so a run.json
  without `continual_method` is that of a run without a method; hidden
  boundaries with their interval."""
  cls = method_class(config)
  if cls is None:
    return {}
  found = {'continual_method': config.method,
           **{name: getattr(config.settings, name) for name in cls.IDENTITY}}
  if config.task_boundaries == 'hidden':
    found.update(
        task_boundaries='hidden',
        consolidation_interval_frames=config.consolidation_interval_frames)
  return found


def recorded_settings(config: ContinualConfig) -> Dict[str, object]:
  """The method's settings a resume may change, for run.json."""
  cls = method_class(config)
  if cls is None:
    return {}
  return {name: getattr(config.settings, name) for name in cls.RECORDED}


def actor_agent_config(config):
  """The agent config the actors of run config `config` act with."""
  cls = method_class(config.continual)
  if cls is None:
    return config.agent_config
  return cls.actor_agent_config(config.agent_config)


def make_clock(config: ContinualConfig, schedule) -> clock_lib.Clock:
  """The method's clock: the schedule's segments, or the interval."""
  if config.task_boundaries == 'hidden':
    return clock_lib.Clock.hidden(config.consolidation_interval_frames)
  return clock_lib.Clock.given(schedule)


def make_method(config, schedule, stacked_frames: Tuple[str, ...] = ()
                ) -> Optional[base.Method]:
  """The method of run config `config` (None for 'none').

  Args:
    config: the run's `clear.runtime.run_config.RunConfig`.
    schedule: its `clear.continual.schedule.TaskSchedule`, or None for a
      single env.
    stacked_frames: the env spec's stacked observations, by name.

  Raises:
    CheckpointError: the logdir holds a run of another method (also 'none'
      against one, which the identity check alone would let through), or
      with other task boundaries.
    ValueError: a method without a task sequence.
  """
  continual = config.continual
  saved = checkpoint_lib.read_run_identity(config.logdir)
  recorded = (saved or {}).get('continual_method', 'none')
  if saved is not None and recorded != continual.method:
    raise checkpoint_lib.CheckpointError(
        f'The logdir {config.logdir} holds a run made with continual_method='
        f'{recorded!r}, not {continual.method!r}. Use a new --logdir or the '
        'original flags.')
  boundaries = (saved or {}).get('task_boundaries', 'given')
  if saved is not None and boundaries != continual.task_boundaries:
    # The identity check alone would let a given-boundary resume through:
    # run.json names the boundaries only when they are hidden.
    raise checkpoint_lib.CheckpointError(
        f'The logdir {config.logdir} holds a run made with task_boundaries='
        f'{boundaries!r}, not {continual.task_boundaries!r}. Resume with '
        f'--task_boundaries={boundaries}, or use a new --logdir.')
  cls = method_class(continual)
  if cls is None:
    return None
  if schedule is None:
    raise ValueError(f'continual_method={continual.method!r} needs a task '
                     'sequence (a comma-separated env).')
  context = base.Context(make_clock(continual, schedule),
                         len(schedule.unique_task_names), config.seed,
                         tuple(stacked_frames))
  return cls(continual.settings, context)
