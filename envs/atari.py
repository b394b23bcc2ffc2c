"""Atari 2600 games through `ale_py.ALEInterface`, with IMPALA preprocessing.

Preprocessing (the usual DQN / IMPALA one):
  * up to `noop_max` random no-op actions after each game reset;
  * each agent step repeats the action for the step multiplier's number of
    raw frames (fixed default 4) and summing the rewards; the observation
    is the pixel-wise max over the last two raw frames (one frame when the
    step ran a single frame or the episode ended early);
  * grayscale, resized to 84x84 (bilinear by default, `resize='area'` for
    OpenCV's area averaging), uint8;
  * the last `frame_stack` such frames stacked on the channel axis:
    observation `{'frame': uint8 [84, 84, frame_stack]}`, newest last;
  * optional sticky actions (`repeat_action_probability`: on each raw frame
    the previous raw frame's action is repeated with that probability, as
    the ALE does; done here so the choice is part of `get_state`) and
    terminal-on-life-loss;
  * the episode is truncated once the ALE has run `max_episode_frames` raw
    frames since the game reset (no-op starts included).

Screens are fetched (grayscale, into preallocated buffers) only for the
last two raw frames of each step. Seeded: the ALE's own seed and the no-op
generator both derive from `seed`, so equal seeds give equal episodes.
`get_state` captures the emulator, the generator of no-ops and sticky
actions, the last action and the frame buffers, so a resumed run continues
the same episodes.
"""

import collections
import difflib
import re

import ale_py
from ale_py import roms
import cv2
import numpy as np

from clear import snapshot
from clear import types
from envs import single
from envs import step_mul as step_mul_lib

FRAME_SIZE = 84

DEFAULT_OPTIONS = {
    'frame_stack': 4,
    'noop_max': 30,
    'terminal_on_life_loss': False,
    'repeat_action_probability': 0.0,
    'max_episode_frames': 108_000,
    'full_action_space': False,
    'fixed_step_mul': True,
    'step_mul': 4,
    'max_step_mul': 8,
    # 'linear' (bilinear, as in the Nature DQN preprocessing) or 'area'
    # (gymnasium's AtariPreprocessing). Area resizing of 210x160 to 84x84
    # has no fast path in OpenCV and costs ~7x more per frame.
    'resize': 'linear',
}

RESIZE_MODES = {'linear': cv2.INTER_LINEAR, 'area': cv2.INTER_AREA}

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
# OpenCV's thread pool only adds overhead for one 210x160 resize, and actors
# run one env loop per process. (Process-wide OpenCV setting.)
cv2.setNumThreads(1)


def _camel_case(rom_id: str) -> str:
  return ''.join(part.capitalize() for part in rom_id.split('_'))


def rom_id(game: str) -> str:
  """Maps a game name ('Pong', 'SpaceInvaders' or 'space_invaders') to the
  ALE ROM id; raises ValueError with close names for unknown games."""
  all_ids = roms.get_all_rom_ids()
  candidate = game if game in all_ids else re.sub(
      r'(?<=[a-z0-9])(?=[A-Z])', '_', game).lower()
  if candidate in all_ids:
    return candidate
  names = sorted(_camel_case(i) for i in all_ids)
  close = difflib.get_close_matches(game, names, n=5, cutoff=0.5)
  hint = f' Did you mean {close}?' if close else ''
  raise ValueError(f'Unknown Atari game {game!r}.{hint} Known games: '
                   f'{", ".join(names)}.')


def check_game(game: str):
  """Raises ValueError (with close names) for an unknown game."""
  rom_id(game)


class AtariEnv(single.SingleEnv):
  """One preprocessed Atari game; see the module docstring."""

  def __init__(self, game: str, seed: int = 0, **options):
    """Args:
      game: game name, e.g. 'Pong' (see `rom_id`).
      seed: seeds the ALE and the no-op starts.
      **options: keys of `DEFAULT_OPTIONS`.
    """
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
      raise ValueError(f'Unknown Atari options {unknown}; valid: '
                       f'{sorted(DEFAULT_OPTIONS)}.')
    o = {**DEFAULT_OPTIONS, **options}
    self._game = rom_id(game)
    self._frame_stack = int(o['frame_stack'])
    self._noop_max = int(o['noop_max'])
    self._life_loss = bool(o['terminal_on_life_loss'])
    self._max_frames = int(o['max_episode_frames'])
    if self._frame_stack < 1 or self._noop_max < 0 or self._max_frames < 1:
      raise ValueError('Need frame_stack >= 1, noop_max >= 0 and '
                       f'max_episode_frames >= 1, got {o}.')
    if o['resize'] not in RESIZE_MODES:
      raise ValueError(f'Atari option resize must be one of '
                       f'{sorted(RESIZE_MODES)}, got {o["resize"]!r}.')
    self._interpolation = RESIZE_MODES[o['resize']]
    self._step_mul = step_mul_lib.StepMul.from_options(o)

    self._ale = ale_py.ALEInterface()
    self._ale.setInt('random_seed', int(seed) % (2**31 - 1))
    # Sticky actions are drawn here: the ALE's state omits its last action.
    self._ale.setFloat('repeat_action_probability', 0.0)
    self._sticky = float(o['repeat_action_probability'])
    if not 0.0 <= self._sticky <= 1.0:
      raise ValueError('Atari option repeat_action_probability must be in '
                       f'[0, 1], got {self._sticky}.')
    self._ale.loadROM(roms.get_rom_path(self._game))
    self._actions = list(self._ale.getLegalActionSet()
                         if o['full_action_space'] else
                         self._ale.getMinimalActionSet())
    self._rng = np.random.default_rng(seed)

    height, width = self._ale.getScreenDims()
    self._screens = np.zeros([2, height, width], np.uint8)
    self._pooled = np.zeros([height, width], np.uint8)
    # Ring buffer of the last frames, oldest at self._oldest.
    self._frames = np.zeros([self._frame_stack, FRAME_SIZE, FRAME_SIZE],
                            np.uint8)
    self._oldest = 0
    self._stack = np.zeros([FRAME_SIZE, FRAME_SIZE, self._frame_stack],
                           np.uint8)
    self._lives = 0
    self._soft_reset = False  # Life lost, game not over: keep playing.
    self._last_action = self._actions[0]  # NOOP, as after a game reset.

    action_spec = collections.OrderedDict(
        action=types.DiscreteSpec(len(self._actions)))
    self._spec = types.EnvSpec(
        observation_spec=collections.OrderedDict(
            frame=types.ArraySpec(
                (FRAME_SIZE, FRAME_SIZE, self._frame_stack), np.uint8)),
        action_spec=self._step_mul.extend_action_spec(action_spec),
        name=f'atari:{_camel_case(self._game)}',
        stacked_frames=('frame',) if self._frame_stack > 1 else ())

  @property
  def spec(self) -> types.EnvSpec:
    return self._spec

  @property
  def ale(self) -> ale_py.ALEInterface:
    """The underlying emulator (read-only use, e.g. for tests)."""
    return self._ale

  def reset(self) -> dict:
    if not self._soft_reset:
      self._ale.reset_game()
      noop = self._actions[0]
      self._last_action = noop
      num_noops = (self._rng.integers(1, self._noop_max + 1)
                   if self._noop_max else 0)
      for _ in range(num_noops):
        self._ale.act(noop)
        if self._ale.game_over(with_truncation=False):
          self._ale.reset_game()
    self._soft_reset = False
    self._lives = self._ale.lives()
    self._ale.getScreenGrayscale(self._screens[1])
    self._push(self._screens[1])
    self._frames[:] = self._frames[self._oldest - 1]
    return {'frame': self._stacked()}

  def step(self, action: dict) -> single.Transition:
    num_frames = self._step_mul.repeats(action)
    ale_action = self._actions[int(action['action'])]
    ale = self._ale
    reward = 0.0
    terminated = truncated = False
    frames = 0
    while frames < num_frames:
      if self._sticky and self._rng.random() < self._sticky:
        reward += ale.act(self._last_action)
      else:
        reward += ale.act(ale_action)
        self._last_action = ale_action
      frames += 1
      game_over = ale.game_over(with_truncation=False)
      lives = ale.lives()
      life_lost = self._life_loss and lives < self._lives
      self._lives = lives
      terminated = game_over or life_lost
      truncated = (not terminated and
                   ale.getEpisodeFrameNumber() >= self._max_frames)
      if terminated or truncated:
        break
      if frames == num_frames - 1:
        ale.getScreenGrayscale(self._screens[0])
    ale.getScreenGrayscale(self._screens[1])

    if frames == num_frames and num_frames >= 2:
      screen = np.maximum(self._screens[0], self._screens[1],
                          out=self._pooled)
    else:
      screen = self._screens[1]
    self._push(screen)
    self._soft_reset = terminated and not game_over
    return single.Transition(observation={'frame': self._stacked()},
                             reward=reward, terminated=terminated,
                             truncated=truncated, frames=frames)

  def get_state(self):
    emulator = self._ale.cloneState(include_rng=True).serialize()
    return {'emulator': np.frombuffer(emulator, np.uint8).copy(),
            'noop_rng': snapshot.to_json_array(self._rng.bit_generator.state),
            'screens': self._screens.copy(), 'frames': self._frames.copy(),
            'oldest': np.array(self._oldest), 'lives': np.array(self._lives),
            'soft_reset': np.array(self._soft_reset),
            'last_action': np.array(int(self._last_action.value))}

  def set_state(self, state):
    if state['frames'].shape != self._frames.shape:
      raise ValueError(f'{self._spec.name}: the saved frame stack is '
                       f'{state["frames"].shape}, this env has '
                       f'{self._frames.shape}.')
    self._ale.restoreState(ale_py.ALEState(state['emulator'].tobytes()))
    self._rng.bit_generator.state = snapshot.from_json_array(
        state['noop_rng'])
    self._screens[:] = state['screens']
    self._frames[:] = state['frames']
    self._oldest = int(state['oldest'])
    self._lives = int(state['lives'])
    self._soft_reset = bool(state['soft_reset'])
    self._last_action = ale_py.Action(int(state['last_action']))

  def _push(self, screen: np.ndarray):
    """Resizes `screen` into the ring buffer as the newest frame."""
    cv2.resize(screen, (FRAME_SIZE, FRAME_SIZE),
               dst=self._frames[self._oldest],
               interpolation=self._interpolation)
    self._oldest = (self._oldest + 1) % self._frame_stack

  def _stacked(self) -> np.ndarray:
    """The ring buffer as `[84, 84, frame_stack]`, oldest first."""
    k = self._frame_stack
    planes = [self._frames[(self._oldest + i) % k] for i in range(k)]
    if k == 1:
      self._stack[..., 0] = planes[0]
    else:
      cv2.merge(planes, self._stack)
    return self._stack


def make(game: str, seed: int = 0, **options) -> AtariEnv:
  return AtariEnv(game, seed, **options)
