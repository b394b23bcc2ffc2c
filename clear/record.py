"""Records an agent playing one episode as an animated GIF.

`python -m clear.train --mode=test --logdir=... --record=pong.gif` plays one
more episode after the test episodes and writes what the agent saw: for a
frame stack (Atari's `frame`, uint8 `[H, W, K]`) the newest frame of each
stack, in grey; for a board of object channels (MinAtar's `board`, bool
`[H, W, C]`) each channel in its own colour. Small images are scaled up by
a whole factor (nearest neighbour) so that the GIF is at least
`MIN_SIZE` pixels on its shorter side. Vector observations (gym's classic
control) have no picture and are refused with a message.

Needs Pillow (it comes with matplotlib: `pip install "clear-rl[plot]"`).
"""

import colorsys
from typing import NamedTuple

import numpy as np

from clear import policy as policy_lib
from clear import types

MIN_SIZE = 160


class Recording(NamedTuple):
  """What `record_episode` wrote.

  Attributes:
    path: the GIF.
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
  """Plays one episode of `env` (a batched env of 1) and writes it as a GIF.

  Args:
    env: from `envs.make(..., num_envs=1)`, of the policy's spec.
    policy: an acting policy with its weights loaded.
    path: where the GIF goes.
    max_steps: agent steps after which the episode is cut.
    frame_ms: display time of each frame.

  Returns:
    `Recording`.

  Raises:
    ValueError: the env has no image observation or is not of one env.
    ImportError: Pillow is missing (the message says what to install).
  """
  if env.num_envs != 1:
    raise ValueError(f'record_episode: needs an env of 1, got '
                     f'{env.num_envs}.')
  key = image_key(env.spec)
  try:
    from PIL import Image  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError('--record needs Pillow: pip install '
                      '"clear-rl[plot]" (or pip install pillow).') from e
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
  images = [Image.fromarray(frame) for frame in frames]
  images[0].save(path, format='GIF', save_all=True, append_images=images[1:],
                 duration=frame_ms, loop=0)
  return Recording(path, len(frames), episode_return, finished)
