"""MinAtar (Young and Tian, 2019): five Atari-like games on a 10x10 board.

`envs.make('minatar:Breakout', num_envs=..., seed=...)`; the games are
Asterix, Breakout, Freeway, Seaquest and SpaceInvaders (MinAtar's own
module names, e.g. 'space_invaders', work too).

  * Observation: `{'board': bool [10, 10, C]}`, one channel per kind of
    object: C = 4 (Asterix, Breakout), 7 (Freeway), 10 (Seaquest),
    6 (SpaceInvaders). The board stays bool: `agents.torsos.to_float`
    divides only uint8 by 255 (pixels) and casts anything else, so every
    torso reads it as 0/1, and replay stores one byte per cell, as it would
    for uint8.
  * Actions: MinAtar's full set of 6 (no-op, left, up, right, down, fire),
    the same in every game, so a task sequence of MinAtar games needs no
    mask. With `minimal_action_set=True` each game keeps only the actions
    that do something in it (3 to 6); `MinAtarEnv.action_ids` maps them into
    the full set, which `envs.multitask` uses for the union.
  * Dynamics and defaults are MinAtar's: sticky actions with probability 0.1
    (`sticky_action_prob`: each frame, the previous frame's action is
    repeated with that probability) and difficulty ramping on
    (`difficulty_ramping`; Breakout and Freeway never ramp). One agent step
    is one frame (a fixed `step_mul` repeats the action, summing rewards,
    as in the gym family). Episodes have no time limit, apart from
    Freeway's own 2,500 frames, unless `max_episode_frames` truncates them.

The `minatar` package is an extra (`pip install 'clear-rl[minatar]'`).
Each env is MinAtar's own `minatar.Environment`, which owns the game, the
sticky actions and the seeding (`Environment.seed`: one `RandomState(seed)`
for the game and the stickiness); this module converts observations and
actions, repeats steps, truncates and snapshots around it.
`minatar` is imported only when a MinAtar env is built, and that import
pulls in matplotlib and seaborn (so pandas and scipy) for MinAtar's board
drawing, about 2 s and 130 MB per process that builds one; `import envs`
alone stays free of them.

A game's state is plain Python and numpy attributes; `get_state` captures
them (as typed JSON), the `Environment`'s `RandomState` and its last action
(for sticky actions), so a resumed run continues the same episodes exactly.
"""

import collections
import importlib
import importlib.metadata
import types as py_types
from typing import Dict

import numpy as np

from clear import snapshot
from clear import types
from envs import single
from envs import step_mul as step_mul_lib

# Display name -> MinAtar's module name.
GAMES = collections.OrderedDict([
    ('Asterix', 'asterix'),
    ('Breakout', 'breakout'),
    ('Freeway', 'freeway'),
    ('Seaquest', 'seaquest'),
    ('SpaceInvaders', 'space_invaders'),
])

# MinAtar's full action set, shared by every game.
ACTION_NAMES = ('noop', 'left', 'up', 'right', 'down', 'fire')
BOARD_SIZE = 10
OBSERVATION_KEY = 'board'

DEFAULT_OPTIONS = {
    'sticky_action_prob': 0.1,
    'difficulty_ramping': True,
    'minimal_action_set': False,
    'max_episode_frames': None,  # None: no limit (MinAtar's own).
    'fixed_step_mul': True,
    'step_mul': 1,
    'max_step_mul': 4,
}

# The versions whose `Environment` and game state this file was written and
# tested against.
SUPPORTED_VERSIONS = '>=1.0.15,<1.1'

INSTALL_INSTRUCTIONS = (
    'Install the extra: pip install "clear-rl[minatar]" (or pip install '
    f'"minatar{SUPPORTED_VERSIONS}"; from a checkout, pip install -e '
    '".[minatar]").')


class MinAtarNotInstalledError(RuntimeError):
  """The `minatar` package is missing or of an unsupported version."""


def game_id(game: str) -> str:
  """'SpaceInvaders' or 'space_invaders' -> MinAtar's 'space_invaders'.

  Raises:
    ValueError: not one of the five games (the message lists them).
  """
  if game in GAMES:
    return GAMES[game]
  if game in GAMES.values():
    return game
  raise ValueError(f'Unknown MinAtar game {game!r}; the MinAtar games are '
                   f'{", ".join(GAMES)} (e.g. "minatar:Breakout").')


def check_game(game: str):
  """Raises ValueError, listing the five games, for an unknown game."""
  game_id(game)


def display_name(game: str) -> str:
  """'space_invaders' or 'SpaceInvaders' -> 'SpaceInvaders'."""
  gid = game_id(game)
  return next(name for name, module in GAMES.items() if module == gid)


def _check_version():
  try:
    version = importlib.metadata.version('minatar')
  except importlib.metadata.PackageNotFoundError:
    return  # Importable but not installed as a distribution: trust it.
  parts = tuple(int(p) for p in version.split('.')[:3] if p.isdigit())
  if not (1, 0, 15) <= parts < (1, 1):
    raise MinAtarNotInstalledError(
        f'minatar {version} is installed; clear supports minatar'
        f'{SUPPORTED_VERSIONS} (its Environment and game state). '
        + INSTALL_INSTRUCTIONS)


def minatar_package() -> py_types.ModuleType:
  """The `minatar` package, imported on first use (with matplotlib and
  seaborn; see the module docstring) and version-checked.

  Raises:
    MinAtarNotInstalledError: no supported `minatar` package.
  """
  try:
    import minatar  # pylint: disable=g-import-not-at-top
  except ModuleNotFoundError as e:
    if e.name != 'minatar':
      raise  # minatar is there but something it imports is not.
    raise MinAtarNotInstalledError(
        'MinAtar is not installed. ' + INSTALL_INSTRUCTIONS) from None
  _check_version()
  return minatar


def game_module(gid: str) -> py_types.ModuleType:
  """MinAtar's module for game `gid` (`minatar.environments.<gid>`), whose
  `Env` is the bare game that `minatar.Environment` wraps (for benchmarks
  that time the game alone).

  Raises:
    ValueError: an unknown game.
    MinAtarNotInstalledError: no supported `minatar` package.
  """
  package = minatar_package()
  return importlib.import_module(f'{package.__name__}.environments.'
                                 f'{game_id(gid)}')


# --- Snapshots: a game's attributes as typed JSON ---------------------------


def _encode(value, where: str):
  """A JSON form of a plain value that `_decode` turns back into an equal
  value of the same type (numpy scalars and arrays keep their dtype)."""
  if value is None:
    return {'none': None}
  if isinstance(value, bool):
    return {'bool': value}
  if isinstance(value, int):
    return {'int': value}
  if isinstance(value, float):
    return {'float': value}
  if isinstance(value, str):
    return {'str': value}
  if isinstance(value, np.ndarray) and value.dtype.kind in 'biuf':
    return {'array': value.tolist(), 'dtype': value.dtype.str,
            'shape': list(value.shape)}
  if isinstance(value, np.generic) and value.dtype.kind in 'biuf':
    return {'scalar': value.item(), 'dtype': value.dtype.str}
  if isinstance(value, (list, tuple)):
    kind = 'list' if isinstance(value, list) else 'tuple'
    return {kind: [_encode(x, f'{where}[{i}]') for i, x in enumerate(value)]}
  if isinstance(value, dict) and all(isinstance(k, str) for k in value):
    return {'dict': {k: _encode(v, f'{where}[{k!r}]')
                     for k, v in value.items()}}
  raise single.SnapshotUnsupported(
      f'MinAtar game attribute {where} holds a {type(value).__name__}, '
      'which the snapshot cannot capture; a resumed run starts fresh '
      'episodes.')


def _decode(encoded):
  (kind, payload), = ((k, v) for k, v in encoded.items()
                      if k not in ('dtype', 'shape'))
  if kind in ('none', 'bool', 'int', 'float', 'str'):
    return payload
  if kind == 'array':
    return np.array(payload, np.dtype(encoded['dtype'])).reshape(
        encoded['shape'])
  if kind == 'scalar':
    return np.dtype(encoded['dtype']).type(payload)
  if kind == 'list':
    return [_decode(x) for x in payload]
  if kind == 'tuple':
    return tuple(_decode(x) for x in payload)
  if kind == 'dict':
    return {k: _decode(v) for k, v in payload.items()}
  raise ValueError(f'Unknown encoded MinAtar value kind {kind!r}.')


class MinAtarEnv(single.SingleEnv):
  """One MinAtar game; see the module docstring."""

  def __init__(self, game: str, seed: int = 0, **options):
    """Args:
      game: 'Breakout', 'space_invaders', ... (see `game_id`).
      seed: seeds the game and the sticky actions (`Environment.seed`).
      **options: keys of `DEFAULT_OPTIONS`.
    """
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
      raise ValueError(f'Unknown minatar options {unknown}; valid: '
                       f'{sorted(DEFAULT_OPTIONS)}.')
    o = {**DEFAULT_OPTIONS, **options}
    self._game_id = game_id(game)
    sticky = float(o['sticky_action_prob'])
    if not 0.0 <= sticky <= 1.0:
      raise ValueError('minatar option sticky_action_prob must be in [0, 1], '
                       f'got {o["sticky_action_prob"]!r}.')
    max_frames = o['max_episode_frames']
    if max_frames is not None and (isinstance(max_frames, bool) or
                                   int(max_frames) != max_frames or
                                   max_frames < 1):
      raise ValueError('minatar option max_episode_frames must be None (no '
                       f'limit) or an int >= 1, got {max_frames!r}.')
    self._max_frames = None if max_frames is None else int(max_frames)
    self._step_mul = step_mul_lib.StepMul.from_options(o)

    self._environment = minatar_package().Environment(
        self._game_id, sticky_action_prob=sticky,
        difficulty_ramping=bool(o['difficulty_ramping']))
    # One RandomState(seed) for the game and the sticky actions. (`seed`
    # ignores None, and RandomState takes seeds below 2**32.)
    self._environment.seed(int(seed) % 2**32)
    self._episode_frames = 0
    self._action_ids = (
        [int(a) for a in self._environment.minimal_action_set()]
        if o['minimal_action_set'] else list(range(len(ACTION_NAMES))))
    channels = int(self._environment.state_shape()[2])
    action_spec = collections.OrderedDict(
        action=types.DiscreteSpec(len(self._action_ids)))
    self._spec = types.EnvSpec(
        observation_spec=collections.OrderedDict([
            (OBSERVATION_KEY, types.ArraySpec(
                (BOARD_SIZE, BOARD_SIZE, channels), np.bool_))]),
        action_spec=self._step_mul.extend_action_spec(action_spec),
        name=f'minatar:{display_name(self._game_id)}')

  @property
  def spec(self) -> types.EnvSpec:
    return self._spec

  @property
  def action_ids(self):
    """Each of this env's actions as an index into MinAtar's full set of 6
    (`ACTION_NAMES`): `range(6)`, or the game's minimal set."""
    return list(self._action_ids)

  @property
  def environment(self):
    """The `minatar.Environment` that plays (read-only use, e.g. tests)."""
    return self._environment

  @property
  def game(self):
    """The bare MinAtar game, `environment.env` (read-only use)."""
    return self._environment.env

  def reset(self) -> dict:
    # The last action (for sticky actions) carries over, as in MinAtar.
    self._environment.reset()
    self._episode_frames = 0
    return {OBSERVATION_KEY: self._environment.state()}

  def step(self, action: dict) -> single.Transition:
    index = int(action['action'])
    if not 0 <= index < len(self._action_ids):
      raise ValueError(f'{self._spec.name}: action {index} is outside '
                       f'[0, {len(self._action_ids)}).')
    chosen = self._action_ids[index]
    num_frames = self._step_mul.repeats(action)
    reward = 0.0
    terminated = truncated = False
    frames = 0
    while frames < num_frames:
      r, terminal = self._environment.act(chosen)
      reward += float(r)
      frames += 1
      self._episode_frames += 1
      terminated = bool(terminal)
      truncated = (not terminated and self._max_frames is not None and
                   self._episode_frames >= self._max_frames)
      if terminated or truncated:
        break
    return single.Transition(
        observation={OBSERVATION_KEY: self._environment.state()},
        reward=reward, terminated=terminated, truncated=truncated,
        frames=frames)

  def _attributes(self) -> dict:
    """The game's attributes, less its generator (the `Environment`'s,
    saved once as 'rng')."""
    return {name: value for name, value in vars(self.game).items()
            if name != 'random'}

  def get_state(self) -> Dict[str, np.ndarray]:
    attributes = {name: _encode(value, name)
                  for name, value in self._attributes().items()}
    rng = self._environment.random.get_state(legacy=False)
    return {
        'game': np.array(self._game_id),
        'attributes': snapshot.to_json_array(attributes),
        'rng_key': np.asarray(rng['state']['key'], np.uint32).copy(),
        'rng': snapshot.to_json_array({
            'pos': int(rng['state']['pos']),
            'has_gauss': int(rng['has_gauss']),
            'gauss': float(rng['gauss'])}),
        'last_action': np.array(int(self._environment.last_action),
                                np.int64),
        'episode_frames': np.array(self._episode_frames, np.int64),
    }

  def set_state(self, state: Dict[str, np.ndarray]):
    saved = str(state['game'])
    if saved != self._game_id:
      raise ValueError(f'{self._spec.name}: the saved state is of MinAtar '
                       f'game {saved!r}, this env plays {self._game_id!r}.')
    attributes = snapshot.from_json_array(state['attributes'])
    if set(attributes) != set(self._attributes()):
      raise ValueError(
          f'{self._spec.name}: the saved game attributes '
          f'{sorted(attributes)} differ from this game\'s '
          f'{sorted(self._attributes())} (another minatar version?).')
    for name, encoded in attributes.items():
      setattr(self.game, name, _decode(encoded))
    rng = snapshot.from_json_array(state['rng'])
    # In place: the game shares this generator (`Environment.seed`).
    self._environment.random.set_state({
        'bit_generator': 'MT19937',
        'state': {'key': np.asarray(state['rng_key'], np.uint32),
                  'pos': rng['pos']},
        'has_gauss': rng['has_gauss'], 'gauss': rng['gauss']})
    self._environment.last_action = int(state['last_action'])
    self._episode_frames = int(state['episode_frames'])


def make(game: str, seed: int = 0, **options) -> MinAtarEnv:
  return MinAtarEnv(game, seed, **options)
