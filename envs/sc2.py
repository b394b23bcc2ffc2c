"""StarCraft II mini-games and ladder maps through pysc2's feature layers.

Observations: see `envs.sc2_features` (`screen`, `minimap`, `player`,
`available_actions`). Actions: see `envs.sc2_actions` (a `function` head
masked by `available_actions`, plus one head per argument type). An
unavailable function id is replaced by `no_op` (agents should mask it).

Step multiplier: fixed mode passes `step_mul` game steps (default 8) to
pysc2 each agent step; dynamic mode passes `step_mul=m + 1` to
`SC2Env.step(actions, step_mul=...)`. `frames` counts the game loops that
really passed (from the observation's `game_loop`; the requested count
when the game loop does not advance, as in pysc2's mock env).

Construction goes through an `env_factory(**sc2_env_kwargs)`; the default
launches the real game via `pysc2.env.sc2_env.SC2Env` and raises
`SC2NotInstalledError` with install instructions when the game is missing.
For tests pass `env_factory=pysc2.env.mock_sc2_env.SC2TestEnv`.
`SC2Env.relaunch()` rebuilds the underlying env; `envs.make` wraps each
`SC2Env` in `envs.recovery.CrashRecoveryEnv`, which calls it when the game
raises one of `CRASH_EXCEPTIONS` (option `max_env_failures`).
"""

import difflib
import os

from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.
from absl import flags
from pysc2 import maps
from pysc2.env import sc2_env
from pysc2.lib import actions
from pysc2.lib import protocol
from pysc2.lib import remote_controller
from pysc2.lib import sc_process
import websocket

from clear import types
from envs import sc2_actions
from envs import sc2_features
from envs import single
from envs import step_mul as step_mul_lib

DEFAULT_OPTIONS = {
    'screen_size': 32,
    'minimap_size': 32,
    'race': 'random',  # Agent race: random, terran, protoss or zerg.
    'bot_race': 'random',  # Opponent on two-player (ladder) maps.
    'bot_difficulty': 'very_easy',
    'game_steps_per_episode': None,  # None: the map's default.
    'visualize': False,
    'env_factory': None,  # None: launch the real game.
    'fixed_step_mul': True,
    'step_mul': 8,
    'max_step_mul': 16,
}

# What a dead or unreachable game raises (envs.recovery relaunches on these):
# socket / pipe errors, pysc2's protocol errors (a closed websocket becomes
# `protocol.ConnectionError`; a game in a bad state answers with a
# `ProtocolError`), a relaunch that cannot connect or start the binary, and
# raw websocket errors.
CRASH_EXCEPTIONS = (
    ConnectionError,
    OSError,
    protocol.ConnectionError,
    protocol.ProtocolError,
    remote_controller.ConnectError,
    sc_process.SC2LaunchError,
    websocket.WebSocketException,
)

INSTALL_INSTRUCTIONS = (
    'StarCraft II is not installed (looked in {path}). To install it: '
    'download Blizzard\'s Linux package from '
    'https://github.com/Blizzard/s2client-proto#downloads and unzip it into '
    '~/StarCraftII (the archive password is "iagreetotheeula"); download '
    'the map packs listed in pysc2\'s README (mini-games: '
    'https://github.com/deepmind/pysc2/releases/download/v1.2/'
    'mini_games.zip) and unzip them into ~/StarCraftII/Maps; then set '
    'SC2PATH to the install folder if it is not ~/StarCraftII. (For tests '
    'without the game, pass env_factory=pysc2.env.mock_sc2_env.SC2TestEnv.)')


class SC2NotInstalledError(RuntimeError):
  """The StarCraft II game (binary or maps) is missing."""


def check_game(map_name: str):
  """Raises ValueError (with close names) for an unknown map."""
  known = maps.get_maps()
  if map_name in known:
    return
  close = difflib.get_close_matches(map_name, sorted(known), n=5, cutoff=0.5)
  hint = f' Did you mean {close}?' if close else ''
  raise ValueError(f'Unknown StarCraft II map {map_name!r}.{hint} Mini-games: '
                   f'{sorted(n for n, m in known.items() if m.players == 1)}.')


def _install_dir() -> str:
  return os.path.expanduser(os.environ.get('SC2PATH', '~/StarCraftII'))


def launch_game(**sc2_env_kwargs):
  """The default factory: the real `SC2Env`, or one clear install error."""
  path = _install_dir()
  versions = os.path.join(path, 'Versions')
  if not os.path.isdir(versions) or not os.listdir(versions):
    raise SC2NotInstalledError(INSTALL_INSTRUCTIONS.format(path=path))
  if not flags.FLAGS.is_parsed():
    # pysc2 reads absl flags (e.g. --sc2_run_config); use their defaults
    # when the binary did not parse flags itself.
    flags.FLAGS.mark_as_parsed()
  try:
    return sc2_env.SC2Env(**sc2_env_kwargs)
  except (FileNotFoundError, maps.lib.NoMapError) as e:
    raise SC2NotInstalledError(
        INSTALL_INSTRUCTIONS.format(path=path) + f' ({e})') from e


class SC2Env(single.SingleEnv):
  """One pysc2 environment with a single learning agent."""

  def __init__(self, map_name: str, seed: int = 0, **options):
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
      raise ValueError(f'Unknown sc2 options {unknown}; valid: '
                       f'{sorted(DEFAULT_OPTIONS)}.')
    o = {**DEFAULT_OPTIONS, **options}
    check_game(map_name)
    self._screen_size = int(o['screen_size'])
    self._minimap_size = int(o['minimap_size'])
    self._step_mul = step_mul_lib.StepMul.from_options(o)
    self._factory = o['env_factory'] or launch_game

    players = [sc2_env.Agent(sc2_env.Race[o['race']])]
    if maps.get(map_name).players >= 2:
      players.append(sc2_env.Bot(sc2_env.Race[o['bot_race']],
                                 sc2_env.Difficulty[o['bot_difficulty']]))
    self._env_kwargs = dict(
        map_name=map_name,
        players=players,
        agent_interface_format=sc2_env.AgentInterfaceFormat(
            feature_dimensions=sc2_env.Dimensions(
                screen=self._screen_size, minimap=self._minimap_size)),
        step_mul=self._step_mul.step_mul,
        game_steps_per_episode=o['game_steps_per_episode'],
        random_seed=int(seed) % (2**31 - 1),
        visualize=bool(o['visualize']))

    self._encode = sc2_features.FeatureEncoder(self._screen_size,
                                               self._minimap_size)
    self._spec = types.EnvSpec(
        observation_spec=self._encode.spec,
        action_spec=self._step_mul.extend_action_spec(
            sc2_actions.action_spec(self._screen_size, self._minimap_size)),
        name=f'sc2:{map_name}')
    self._available = frozenset()
    self._game_loop = 0
    self._env = self._factory(**self._env_kwargs)

  @property
  def spec(self) -> types.EnvSpec:
    return self._spec

  @property
  def env(self):
    """The underlying pysc2 environment."""
    return self._env

  def relaunch(self):
    """Closes the underlying pysc2 env (ignoring errors) and builds a new
    one; call `reset` next. The hook for crash recovery."""
    try:
      self._env.close()
    except Exception:  # pylint: disable=broad-except  # It may have crashed.
      pass
    self._env = self._factory(**self._env_kwargs)

  def reset(self) -> dict:
    return self._observe(self._env.reset()[0])

  def step(self, action: dict) -> single.Transition:
    num_frames = self._step_mul.repeats(action)
    call = sc2_actions.function_call(action, self._screen_size,
                                     self._minimap_size)
    if call.function not in self._available:
      call = actions.FunctionCall(actions.FUNCTIONS.no_op.id, [])
    game_loop = self._game_loop
    timestep = self._env.step([call], step_mul=num_frames)[0]
    observation = self._observe(timestep)
    frames = self._game_loop - game_loop
    return single.Transition(
        observation=observation, reward=float(timestep.reward or 0.0),
        terminated=bool(timestep.last()), truncated=False,
        frames=frames if frames > 0 else num_frames)

  def close(self):
    self._env.close()

  def _observe(self, timestep) -> dict:
    obs = timestep.observation
    self._available = frozenset(int(a) for a in obs['available_actions'])
    self._game_loop = int(obs['game_loop'][0])
    return self._encode(obs)


def make(map_name: str, seed: int = 0, **options) -> SC2Env:
  return SC2Env(map_name, seed, **options)
