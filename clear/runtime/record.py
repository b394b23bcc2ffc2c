"""Records an agent playing one episode as an animated GIF or an MP4 video.

`python -m clear.train --mode=test --logdir=... --record=pong.gif` plays one
more episode after the test episodes and writes what the agent saw: for a
frame stack (Atari's `frame`, uint8 `[H, W, K]`) the newest frame of each
stack, in grey; for a board of object channels (MinAtar's `board`, bool
`[H, W, C]`) each channel in its own colour. Small images are scaled up by
a whole factor (nearest neighbour) so that the GIF is at least
`MIN_SIZE` pixels on its shorter side. Vector observations (gym's classic
control) have no picture and are refused with a message.

The format is the path's extension: `.gif` needs Pillow (it comes with
matplotlib: `pip install "clear-rl[plot]"`); `.mp4` (H.264) needs imageio
with its ffmpeg plugin (`pip install imageio imageio-ffmpeg`), which the
project does not require. `path_problem` checks a path before any episode
is played: the extension, a writer for it, the folder, and an existing
file, which is replaced only when asked. A task sequence is recorded once
per distinct task, each in its own file (`task_paths`: `final.gif` becomes
`final_SpaceInvaders.gif`, `final_BeamRider.gif`, ...). The file is written
under a temporary name beside it and then renamed, so an episode that fails
leaves whatever was there untouched.
"""

import colorsys
import importlib
import os
import tempfile
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from clear import types
from clear.algorithms import policy as policy_lib

MIN_SIZE = 160
FORMATS = ('.gif', '.mp4')


class Recording(NamedTuple):
  """What `record_episode` wrote.

  Attributes:
    path: the GIF or MP4.
    num_frames: frames in it (the first observation, then one per step).
    episode_return: the undiscounted return of the episode (of the steps
      played, when it was cut at `max_steps`).
    finished: the episode ended before `max_steps`.
  """
  path: str
  num_frames: int
  episode_return: float
  finished: bool


def image_key(spec: types.EnvSpec) -> str:
  """The observation entry a recording draws: the one `[H, W, C]` entry.

  Raises:
    ValueError: none, or several (the message names the env).
  """
  keys = [k for k, s in spec.observation_spec.items() if len(s.shape) == 3]
  if len(keys) != 1:
    raise ValueError(
        f'--record draws an image observation, and {spec.name!r} has '
        f'{"none" if not keys else "several: " + ", ".join(keys)} '
        f'(observations: {", ".join(spec.observation_spec)}).')
  return keys[0]


def writer_problem(path: str) -> Optional[str]:
  """Why this Python cannot write the format of `path`'s extension (what to
  install), or None."""
  extension = os.path.splitext(path)[1].lower()
  needs = {'.gif': [('PIL', 'Pillow: pip install "clear-rl[plot]" (or pip '
                     'install pillow)')],
           '.mp4': [('imageio', 'imageio with its ffmpeg plugin: pip install '
                     'imageio imageio-ffmpeg (or record a .gif)'),
                    ('imageio_ffmpeg', 'the ffmpeg plugin of imageio: pip '
                     'install imageio-ffmpeg (or record a .gif)')]}
  for module, what in needs.get(extension, ()):
    try:
      importlib.import_module(module)
    except ImportError:
      return f'writing {extension} needs {what}'
  return None


def task_paths(path: str, tasks: Sequence[str]) -> List[Tuple[int, str]]:
  """(task index, file) of each recording `--record=path` makes.

  One task: `path` itself. A sequence (`tasks`, its names in order, with
  repeats): one file per distinct task, at the index of its first visit,
  named `<stem>_<game><extension>` with the game's name without its family
  (`atari:MsPacman` -> `MsPacman`; characters other than letters, digits,
  `-` and `.` become `_`).
  """
  if len(tasks) <= 1:
    return [(0, path)]
  stem, extension = os.path.splitext(path)
  out, seen = [], set()
  for index, name in enumerate(tasks):
    if name in seen:
      continue
    seen.add(name)
    game = name.split(':', 1)[-1]
    game = ''.join(c if c.isalnum() or c in '-.' else '_' for c in game)
    out.append((index, f'{stem}_{game}{extension}'))
  return out


def path_problem(path: str, overwrite: bool = False) -> Optional[str]:
  """Why a recording cannot be written to `path`, or None: checked before
  any episode is played. Creates nothing.

  Args:
    path: the file to write; its extension picks the format (FORMATS).
    overwrite: an existing file may be replaced.
  """
  extension = os.path.splitext(path)[1].lower()
  if extension not in FORMATS:
    return ('the format is taken from the extension, which must be .gif or '
            f'.mp4 (got {extension or "none"!r})')
  folder = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(folder):
    return 'its folder does not exist'
  if os.path.isdir(path):
    return 'it is a folder'
  if os.path.lexists(path) and not overwrite:
    return ('the file exists; pass --record_overwrite to replace it, or '
            'choose another path')
  try:
    with tempfile.TemporaryFile(dir=folder):
      pass
  except OSError as e:
    return f'cannot write in {folder} ({e.strerror or type(e).__name__})'
  return writer_problem(path)


def write_frames(frames: List[np.ndarray], path: str, frame_ms: int = 40):
  """Writes RGB frames (uint8 `[H, W, 3]`, one size) to `path` as its
  extension says, atomically: a temporary file beside it, then a rename.

  Raises:
    ValueError: another extension.
    ImportError: the format's writer is missing (the message says what to
      install).
  """
  extension = os.path.splitext(path)[1].lower()
  if extension not in FORMATS:
    raise ValueError(f'write_frames: {path} does not end in .gif or .mp4.')
  problem = writer_problem(path)
  if problem:
    raise ImportError(f'--record: {problem}.')
  folder = os.path.dirname(os.path.abspath(path))
  handle, tmp = tempfile.mkstemp(dir=folder, suffix=extension,
                                 prefix='.' + os.path.basename(path) + '.')
  os.close(handle)
  try:
    if extension == '.gif':
      from PIL import Image  # pylint: disable=g-import-not-at-top
      images = [Image.fromarray(frame) for frame in frames]
      images[0].save(tmp, format='GIF', save_all=True,
                     append_images=images[1:], duration=frame_ms, loop=0)
    else:
      import imageio  # pylint: disable=g-import-not-at-top
      # H.264 in yuv420p needs even sides: imageio pads to a multiple of 2.
      imageio.v2.mimwrite(tmp, frames, format='FFMPEG', fps=1000 / frame_ms,
                          codec='libx264', macro_block_size=2)
    os.chmod(tmp, 0o644)  # mkstemp's 0o600 would hide it from others.
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def _palette(num_channels: int) -> np.ndarray:
  """`[C, 3]` uint8 colours, evenly spaced in hue."""
  return np.array([[int(255 * v) for v in colorsys.hsv_to_rgb(
      c / num_channels, 0.75, 1.0)] for c in range(num_channels)], np.uint8)


def to_rgb(image) -> np.ndarray:
  """One observation `[H, W, C]` as a uint8 RGB picture `[H', W', 3]`.

  uint8 with 3 channels: as it is; other uint8: the last channel (a frame
  stack's newest frame) in grey; bool: each set channel in its colour (the
  last set channel of a cell wins; empty cells black). Scaled up to at
  least `MIN_SIZE` pixels on the shorter side.

  Raises:
    ValueError: another rank or dtype.
  """
  image = np.asarray(image)
  if image.ndim != 3:
    raise ValueError(f'to_rgb: expected an [H, W, C] image, got shape '
                     f'{image.shape}.')
  if image.dtype == np.uint8:
    rgb = image if image.shape[-1] == 3 else np.repeat(image[..., -1:], 3, -1)
  elif image.dtype == np.bool_:
    rgb = np.zeros(image.shape[:2] + (3,), np.uint8)
    for channel, colour in enumerate(_palette(image.shape[-1])):
      rgb[image[..., channel]] = colour
  else:
    raise ValueError(f'to_rgb: cannot draw {image.dtype} observations.')
  scale = max(1, -(-MIN_SIZE // min(rgb.shape[:2])))
  return np.repeat(np.repeat(rgb, scale, axis=0), scale, axis=1)


def record_episode(env, policy: policy_lib.Policy, path: str,
                   max_steps: int = 27_000,
                   frame_ms: int = 40) -> Recording:
  """Plays one episode of `env` (a batched env of 1) and writes it to
  `path`, a GIF or an MP4 as its extension says (`write_frames`).

  Args:
    env: from `envs.make(..., num_envs=1)`, of the policy's spec.
    policy: an acting policy with its weights loaded.
    path: where the recording goes (.gif or .mp4).
    max_steps: agent steps after which the episode is cut.
    frame_ms: display time of each frame.

  Returns:
    `Recording`.

  Raises:
    ValueError: the env has no image observation or is not of one env, or
      `path` has another extension.
    ImportError: the writer is missing (the message says what to install).
  """
  if env.num_envs != 1:
    raise ValueError(f'record_episode: needs an env of 1, got '
                     f'{env.num_envs}.')
  key = image_key(env.spec)
  problem = writer_problem(path)
  if problem:
    raise ImportError(f'--record: {problem}.')
  env_output = env.reset()
  agent_output = policy_lib.zero_agent_output(policy.spec, 1)
  state = policy.initial_state(1)
  frames = [to_rgb(env_output.observation[key][0])]
  episode_return, finished = 0.0, False
  for _ in range(max_steps):
    agent_output, state = policy.act(env_output, agent_output.action, state)
    env_output = env.step(agent_output.action)
    episode_return = float(env_output.info.episode_return[0])
    if env_output.done[0]:  # The observation is the next episode's first.
      finished = True
      break
    frames.append(to_rgb(env_output.observation[key][0]))
  write_frames(frames, path, frame_ms)
  return Recording(path, len(frames), episode_return, finished)
