"""A reference frame stacker for the frame-once replay tests.

A plain loop, written like an env's stacking, with three ways of filling a
stack at an episode start, so the tests check the storage against stacks it
did not make itself.
"""

import numpy as np

RESET_STYLES = ('repeat', 'zeros', 'noise')


def stack_episode(frames, starts, depth, style, rng):
  """A plain-loop frame stacker, the reference the store must reproduce.

  Args:
    frames: uint8 `[N, H, W]`, the frame each step observes.
    starts: bool `[N]`, the step is the first of an episode (a reset).
    depth: K.
    style: what fills the stack's older channels at a reset: 'repeat' the
      first frame (Atari), 'zeros', or 'noise' (anything at all).
    rng: draws the noise.

  Returns:
    uint8 `[N, H, W, K]`, oldest frame first.
  """
  num_steps, height, width = frames.shape
  stacks = np.zeros([num_steps, height, width, depth], np.uint8)
  window = [frames[0]] * depth
  for t in range(num_steps):
    if t == 0 or starts[t]:
      if style == 'repeat':
        window = [frames[t]] * depth
      elif style == 'zeros':
        window = [np.zeros_like(frames[t])] * (depth - 1) + [frames[t]]
      else:
        window = [rng.integers(0, 256, frames[t].shape, dtype=np.uint8)
                  for _ in range(depth - 1)] + [frames[t]]
    else:
      window = window[1:] + [frames[t]]
    for c in range(depth):
      stacks[t, :, :, c] = window[c]
  return stacks


def random_unroll(rng, num_steps=11, depth=4, shape=(5, 3), style='repeat',
                  reset_rate=0.2, palette=None):
  """Stacks of one unroll with episode starts at random steps.

  A small `palette` makes distinct steps show identical frames (as a black
  screen would), which the encoding may share but must rebuild exactly.
  """
  if palette:
    choices = rng.integers(0, 256, (palette,) + shape, dtype=np.uint8)
    frames = choices[rng.integers(palette, size=num_steps)]
  else:
    frames = rng.integers(0, 256, (num_steps,) + shape, dtype=np.uint8)
  starts = rng.uniform(size=num_steps) < reset_rate
  return stack_episode(frames, starts, depth, style, rng), starts
