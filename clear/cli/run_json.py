"""What a run's run.json decides for `python -m clear.train`.

Test mode and --init_from load a checkpoint whose network must be rebuilt
exactly, so they take the env, algorithm and network from the run.json
beside it (see clear.checkpoint) instead of the flags' defaults
(`read_run_settings`); a resume keeps the learner settings the run last ran
with (`keep_run_settings`); a flag may pick another env only when its spaces
are the same (`check_env_change`). A run.json that names a setting this
version no longer has, at another value than the one it runs, is refused
(`run_config.check_removed_settings`).
"""

import math
import os
from typing import Dict, NamedTuple, Optional

from absl import app
from absl import flags
from absl import logging

from clear import checkpoint as checkpoint_lib
from clear.algorithms import policy as policy_lib
from clear.cli import defaults
from clear.runtime import run_config as run_config_lib



# run.json fields that decide the network, each set by the flag of that
# name: a flag given with another value is refused.
NETWORK_FIELDS = ('algorithm', 'network', 'core_size', 'separate_critic',
                  'core', 'torso_norm')
# Keys of run.json's env_options that `env_options_from_flags` sets, each
# from the flag of that name. Given with other values (or with --env), they
# pick another env, allowed when its spaces are the same.
ENV_OPTION_FLAGS = ('fixed_step_mul', 'step_mul', 'max_step_mul')
# A task sequence's schedule, taken when the flags are not given (a
# run.json records segment_lengths only when it is not 'equal').
SEQUENCE_FIELDS = ('frames_per_task', 'num_task_cycles', 'segment_lengths')


class RunSettings(NamedTuple):
  """What a run's run.json recorded, and which flags asked for another env.

  Attributes:
    source: the logdir whose run.json was read.
    env_name, env_options: the env the run was made for.
    changed_env_flags: {name: value} of the flags among --env and
      ENV_OPTION_FLAGS given with other values (see `check_env_change`).
  """
  source: str
  env_name: str
  env_options: dict
  changed_env_flags: Dict[str, object]


def settings_source(f) -> Optional[str]:
  """Whose run.json decides the env, algorithm and network: test mode's
  --logdir; with --init_from, the run it starts from (or --logdir, once it
  holds a checkpoint of its own, which is resumed); else None: the flags."""
  if f.mode == 'test':
    return f.logdir
  if f.init_from:
    if checkpoint_lib.find_checkpoints(f.logdir):
      return f.logdir
    return f.init_from
  return None


def _flag_kind(flag) -> str:
  """What values a flag takes, for messages: 'an integer', ..."""
  parser = flag.parser
  if isinstance(parser, flags.BooleanParser):
    return 'true or false'
  if isinstance(parser, flags.IntegerParser):
    return 'an integer'
  if isinstance(parser, flags.FloatParser):
    return 'a number'
  if isinstance(parser, flags.EnumParser):
    return 'one of ' + ', '.join(repr(v) for v in parser.enum_values)
  return 'a string'


def recorded_value(f, name: str, value, path: str):
  """`value`, as run.json at `path` records it for the flag `name`, if it
  is of the flag's type (a hand-edited file may hold anything).

  Raises:
    CheckpointError: naming the file, the field and what it should be.
  """
  parser = f[name].parser
  if value is None:
    ok = f[name].default is None
  elif isinstance(parser, flags.BooleanParser):
    ok = isinstance(value, bool)
  elif isinstance(parser, flags.IntegerParser):
    ok = isinstance(value, int) and not isinstance(value, bool)
  elif isinstance(parser, flags.FloatParser):
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)
          and math.isfinite(value))
  elif isinstance(parser, flags.EnumParser):
    ok = isinstance(value, str) and value in parser.enum_values
  else:
    ok = isinstance(value, str)
  if not ok:
    raise checkpoint_lib.CheckpointError(
        f'{path}: {name} is {value!r}, but --{name} takes '
        f'{_flag_kind(f[name])}. Put back the value the run was made with, '
        'or move the file away (or use a new --logdir).')
  return value


def adopt_run_settings(f, saved: dict, source: str) -> RunSettings:
  """Sets every flag not given to the value `saved` (a run.json) records.

  Args:
    f: the flag values, changed in place.
    saved: the run.json's contents.
    source: the run's logdir, for messages.

  Raises:
    app.UsageError: naming each flag given with another network.
  """
  problems, adopted = [], []
  path = os.path.join(source, checkpoint_lib.RUN_FILE)

  def take(name, value):
    recorded_value(f, name, value, path)
    if not f[name].present:
      setattr(f, name, value)
      adopted.append(f'{name}={value!r}')

  for name in NETWORK_FIELDS:
    if name in saved:
      value = recorded_value(f, name, saved[name], path)
    elif name in policy_lib.CORE_OPTION_FIELDS:  # Recorded when not default.
      value = policy_lib.AgentConfig._field_defaults[name]
    else:
      continue
    if f[name].present and getattr(f, name) != value:
      problems.append(
          f'--{name}={getattr(f, name)!r}: the run in {source} was made '
          f'with {name}={value!r}, and its checkpoint holds that '
          f'network; leave --{name} out.')
    take(name, value)
  env_name = saved.get('env', f.env)
  env_options = saved.get('env_options') or {}
  if not isinstance(env_options, dict):
    raise checkpoint_lib.CheckpointError(
        f'{path}: env_options is {env_options!r}, not an object. Put back '
        'what the run was made with, or move the file away (or use a new '
        '--logdir).')
  env_options = dict(env_options)
  changed = {}
  if f['env'].present and f.env != env_name:
    changed['env'] = f.env
  if 'env' in saved:
    take('env', env_name)
  for name in ENV_OPTION_FLAGS:
    if name in env_options:
      recorded_value(f, name, env_options[name], path)
      if f[name].present and getattr(f, name) != env_options[name]:
        changed[name] = getattr(f, name)
      take(name, env_options[name])
  for name in SEQUENCE_FIELDS:
    if name in saved:
      take(name, saved[name])
  if problems:
    raise app.UsageError('\n'.join(problems))
  if adopted:
    logging.info('Settings from %s: %s.',
                 os.path.join(source, checkpoint_lib.RUN_FILE),
                 ', '.join(adopted))
  return RunSettings(source, env_name, env_options, changed)


def keep_run_settings(f) -> None:
  """Training in a logdir that holds a run: each IMPALA flag left unset that
  defaults per env family (batch size, schedule, learning rate, ...) takes
  the value the run last ran with, from its run.json, so a change of the
  family defaults does not change a run in progress. A run.json written
  before runs recorded them gets a warning naming the values used now.
  Call it before `validate`, so that the values kept are checked against
  the flags given.

  Raises:
    CheckpointError: the run.json is unreadable, holds a value of the wrong
      type, or names a setting this version no longer has at another value
      (`run_config.check_removed_settings`).
  """
  if f.mode != 'train':
    return
  saved = checkpoint_lib.read_run_identity(f.logdir)
  run_config_lib.check_removed_settings(
      saved, os.path.join(f.logdir, checkpoint_lib.RUN_FILE))
  if saved is None or saved.get('env', f.env) != f.env:
    return  # A new run, or another env: refused with the identity check.
  keep_seed(f, saved)
  known_family = defaults.env_family(f.env) in defaults.FAMILY_DEFAULTS
  if f.algorithm != 'impala' or not known_family:
    return  # An unknown family: validate names it.
  unset = [name for name in run_config_lib.RECORDED_SETTINGS
           if not f[name].present and not (
               name == 'total_environment_frames' and ',' in f.env)]
  path = os.path.join(f.logdir, checkpoint_lib.RUN_FILE)
  recorded = saved.get(checkpoint_lib.SETTINGS_KEY)
  if recorded is None:
    if unset:
      earlier = (' (the Atari defaults before 2026-11-28 were '
                 'batch_size=32 and total_environment_frames=40000000)'
                 if defaults.env_family(f.env) == 'atari' else '')
      logging.warning(
          '%s predates recorded learner settings: this run continues with '
          '%s. If it was started with other values%s, stop it and give '
          'them as flags.', path, ', '.join(
              f'{name}={defaults.family_default(f, name)!r}' for name in unset),
          earlier)
    return
  if not isinstance(recorded, dict):
    raise checkpoint_lib.CheckpointError(
        f'{path}: {checkpoint_lib.SETTINGS_KEY} is {recorded!r}, not an '
        'object. Put back what the run last ran with, or move the file away '
        '(or use a new --logdir).')
  kept = []
  for name in unset:
    if name in recorded:
      recorded_value(f, name, recorded[name], path)
    if name in recorded and recorded[name] != defaults.family_default(f, name):
      kept.append(f'{name}={recorded[name]!r} (default '
                  f'{defaults.family_default(f, name)!r})')
      setattr(f, name, recorded[name])
  if kept:
    logging.info('Resuming with the settings %s records: %s. Give the '
                 'flags to change them.', path, ', '.join(kept))


def keep_seed(f, saved: dict):
  """A resume keeps the seed its run.json records (its random streams go
  on), saying so when --seed names another."""
  recorded = saved.get('flags', {}).get('seed') if isinstance(
      saved.get('flags'), dict) else None
  if not isinstance(recorded, int) or recorded == f.seed:
    return
  if f['seed'].present:
    logging.warning('--seed=%d: the run in %s was started with --seed=%d, '
                    'which a resume keeps; use a new --logdir for another '
                    'seed.', f.seed, f.logdir, recorded)
  f.seed = recorded


def read_run_settings(f) -> Optional[RunSettings]:
  """Applies the run.json `settings_source` names, if any (see
  `adopt_run_settings`).

  Raises:
    app.UsageError: a flag contradicts the run's network.
    CheckpointError: test mode without a run to test, an unreadable
      run.json, or one that names a setting this version no longer has at
      another value (`run_config.check_removed_settings`).
  """
  source = settings_source(f)
  if source is None:
    return None
  if source == f.init_from and not checkpoint_lib.find_checkpoints(source):
    raise checkpoint_lib.CheckpointError(
        f'--init_from={source}: ' + (
            'no checkpoint there' if os.path.exists(source) else
            'no such folder or checkpoint') +
        '. Give a run\'s logdir or one of its checkpoints/ckpt-N.')
  saved = checkpoint_lib.read_run_identity(source)
  run_dir = checkpoint_lib.run_directory(source)
  path = os.path.join(run_dir, checkpoint_lib.RUN_FILE)
  run_config_lib.check_removed_settings(saved, path)
  if saved is not None:
    return adopt_run_settings(f, saved, run_dir)
  if f.mode == 'test' and not checkpoint_lib.find_checkpoints(source):
    raise checkpoint_lib.CheckpointError(
        f'--logdir={source} holds no run to test (no run.json, no '
        'checkpoint): train there first, or point --logdir at a run.')
  logging.warning('%s is missing: the env, algorithm and network come from '
                  'the flags.', path)
  return None


def same_spaces(a, b) -> bool:
  """Whether two `types.EnvSpec`s have the same observations and actions,
  so that one network plays both."""
  spaces = lambda spec: (list(spec.observation_spec.items()),
                         list(spec.action_spec.items()),
                         tuple(spec.stacked_frames))
  return spaces(a) == spaces(b)


def describe_spaces(spec) -> str:
  """E.g. 'observations vector [4]; actions action (2 choices)'."""
  observations = ', '.join(f'{name} {list(s.shape)}' for name, s
                           in spec.observation_spec.items())
  actions = ', '.join(
      f'{name} ({head.num_values} choices)' if hasattr(head, 'num_values')
      else f'{name} {list(head.shape)}'
      for name, head in spec.action_spec.items())
  return f'observations {observations}; actions {actions}'


def check_env_change(config: run_config_lib.RunConfig, settings: RunSettings):
  """Lets flags pick another env than the run's only when its observation
  and action spaces are the same (e.g. gym:CartPole-v0 for a gym:CartPole-v1
  run), and says so in the log.

  Raises:
    app.UsageError: naming the flags, when the spaces differ.
  """
  if not settings.changed_env_flags:
    return
  given = ' '.join(f'--{name}={value}' for name, value
                   in settings.changed_env_flags.items())
  given_names = ' '.join(f'--{name}' for name in settings.changed_env_flags)
  same_options = config.env_options == settings.env_options
  describe = lambda name, options: name if same_options else (
      f'{name} with ' + ', '.join(f'{k}={v}' for k, v in
                                  sorted(options.items())))
  ours = describe(config.env_name, config.env_options)
  theirs = describe(settings.env_name, settings.env_options)
  spec = run_config_lib.env_spec(config)
  saved_spec = run_config_lib.env_spec(config._replace(
      env_name=settings.env_name, env_options=settings.env_options))
  if same_spaces(spec, saved_spec):
    logging.warning('%s: using %s, not %s that the run in %s was made with '
                    '(the observation and action spaces are the same).',
                    given, ours, theirs, settings.source)
    return
  raise app.UsageError(
      f'{given}: the run in {settings.source} was made with {theirs} '
      f'({describe_spaces(saved_spec)}); {ours} has '
      f'{describe_spaces(spec)}, which its network cannot play. Leave '
      f'{given_names} out to use the run\'s env.')
