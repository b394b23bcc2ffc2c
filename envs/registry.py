"""`make(name, num_envs, seed, **options)`: the one way to build an env.

Names are `<family>:<game>`: `atari:Pong`, `gym:CartPole-v1`,
`sc2:MoveToBeacon`. Each family module (imported lazily, so Atari users
never import pysc2) provides `DEFAULT_OPTIONS`, `check_game(game)` and
`make(game, seed, **options) -> SingleEnv`.
"""

import importlib

from envs import batched

_FAMILIES = {
    'atari': 'envs.atari',
    'gym': 'envs.gym_env',
    'sc2': 'envs.sc2',
}


def make(name: str, num_envs: int = 1, seed: int = 0,
         **options) -> batched.BatchedEnv:
  """Builds `num_envs` environments (seeds seed, seed + 1, ...), batched.

  Args:
    name: '<family>:<game>', family one of 'atari', 'gym', 'sc2'.
    num_envs: batch size B.
    seed: seed of the first environment.
    **options: family options (see each family's `DEFAULT_OPTIONS`).

  Returns:
    A `BatchedEnv` whose `reset`/`step` return `[B, ...]` StepOutputs.

  Raises:
    ValueError: unknown family, game or option keys.
  """
  family, sep, game = name.partition(':')
  if not sep or family not in _FAMILIES or not game:
    raise ValueError(f'Unknown environment name {name!r}: expected '
                     f'"<prefix>:<game>" with prefix one of '
                     f'{sorted(_FAMILIES)}, e.g. "atari:Pong", '
                     f'"gym:CartPole-v1", "sc2:MoveToBeacon".')
  if int(num_envs) < 1:
    raise ValueError(f'num_envs must be >= 1, got {num_envs}.')
  module = importlib.import_module(_FAMILIES[family])
  unknown = sorted(set(options) - set(module.DEFAULT_OPTIONS))
  if unknown:
    raise ValueError(f'Unknown options {unknown} for {family!r} '
                     f'environments; valid: {sorted(module.DEFAULT_OPTIONS)}.')
  module.check_game(game)
  envs = []
  try:
    for i in range(int(num_envs)):
      envs.append(module.make(game, seed + i, **options))
  except BaseException:
    for env in envs:
      env.close()
    raise
  return batched.BatchedEnv(envs, name=name)
