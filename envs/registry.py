"""Single-task envs: parsing names, and `make(name, num_envs, seed,
**options)` for one task.

`envs.make` is what users call: it hands a task sequence to
`envs.multitask` and one task to this module (imports run one way:
`envs` -> `envs.multitask` -> `envs.registry` -> the families).

Names are `<family>:<game>`: `atari:Pong`, `gym:CartPole-v1`,
`minatar:Breakout`, `sc2:MoveToBeacon`. Each family module (imported
lazily, so Atari users never import pysc2) provides `DEFAULT_OPTIONS`,
`check_game(game)` and `make(game, seed, **options) -> SingleEnv`.

Families whose game runs in another process (sc2) also provide
`CRASH_EXCEPTIONS`; `make` then wraps each env in
`envs.recovery.CrashRecoveryEnv` (relaunch on crash, the episode ends as
truncated) unless `max_env_failures=0`. `max_env_failures` is accepted by
every family (it has no effect where the family declares no crash
exceptions) and is not passed on to the family.

A comma-separated name (`SEQUENCE_SEPARATOR`) is a task sequence for
continual learning (`gym:CartPole-v1,gym:Acrobot-v1`), which
`envs.multitask` builds from single tasks made here.
"""

import functools
import importlib
import numbers

from envs import batched
from envs import recovery

_FAMILIES = {
    'atari': 'envs.atari',
    'gym': 'envs.gym_env',
    'minatar': 'envs.minatar',
    'sc2': 'envs.sc2',
}

# Separates the names of a task sequence (continual learning).
SEQUENCE_SEPARATOR = ','

# Options every family accepts; the registry handles them itself.
COMMON_OPTIONS = {
    # The N-th consecutive crash of one env raises `recovery.EnvCrashError`;
    # 0 disables crash recovery (crashes propagate as they are).
    'max_env_failures': 5,
}


def parse_name(name: str):
  """Splits '<family>:<game>' and imports the family's module.

  Returns:
    (family, game, module).

  Raises:
    ValueError: the name has no known family prefix or no game.
  """
  family, sep, game = name.partition(':')
  if not sep or family not in _FAMILIES or not game:
    raise ValueError(f'Unknown environment name {name!r}: expected '
                     f'"<prefix>:<game>" with prefix one of '
                     f'{sorted(_FAMILIES)}, e.g. "atari:Pong", '
                     f'"gym:CartPole-v1", "minatar:Breakout", '
                     f'"sc2:MoveToBeacon".')
  return family, game, importlib.import_module(_FAMILIES[family])


def make(name: str, num_envs: int = 1, seed: int = 0,
         **options) -> batched.BatchedEnv:
  """Builds `num_envs` environments of one task (seeds seed, seed + 1,
  ...), batched.

  Args:
    name: '<family>:<game>', family one of 'atari', 'gym', 'minatar',
      'sc2' (task sequences: `envs.make`).
    num_envs: batch size B.
    seed: seed of the first environment.
    **options: family options (see each family's `DEFAULT_OPTIONS`) and
      `COMMON_OPTIONS`.

  Returns:
    A `BatchedEnv` whose `reset`/`step` return `[B, ...]` StepOutputs.

  Raises:
    ValueError: a task sequence, an unknown family, game or option keys.
  """
  if SEQUENCE_SEPARATOR in name:
    raise ValueError(f'{name!r} is a task sequence: envs.make builds '
                     'sequences, envs.registry.make one task.')
  family, game, module = parse_name(name)
  if int(num_envs) < 1:
    raise ValueError(f'num_envs must be >= 1, got {num_envs}.')
  valid = set(module.DEFAULT_OPTIONS) | set(COMMON_OPTIONS)
  unknown = sorted(set(options) - valid)
  if unknown:
    raise ValueError(f'Unknown options {unknown} for {family!r} '
                     f'environments; valid: {sorted(valid)}.')
  common = {k: options.pop(k, v) for k, v in COMMON_OPTIONS.items()}
  max_failures = common['max_env_failures']
  if (isinstance(max_failures, bool) or
      not isinstance(max_failures, numbers.Integral) or max_failures < 0):
    raise ValueError(f'max_env_failures must be an int >= 0, got '
                     f'{max_failures!r}.')
  max_failures = int(max_failures)
  crash_exceptions = getattr(module, 'CRASH_EXCEPTIONS', ())
  module.check_game(game)
  envs = []
  try:
    for i in range(int(num_envs)):
      build = functools.partial(module.make, game, seed + i, **options)
      env = build()
      if max_failures and crash_exceptions:
        env = recovery.CrashRecoveryEnv(
            env, crash_exceptions, max_consecutive_failures=max_failures,
            factory=None if callable(getattr(env, 'relaunch', None))
            else build,
            name=f'{name}[{i}]')
      envs.append(env)
  except BaseException:
    for env in envs:
      env.close()
    raise
  return batched.BatchedEnv(envs, name=name)
