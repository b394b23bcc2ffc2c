"""Step multipliers: how many raw frames one agent step consumes.

Fixed mode: every agent step consumes `step_mul` raw frames.
Dynamic mode: the action spec gains a `'step_mul'` head with
`max_step_mul` values; an action with `action['step_mul'] = m` consumes
`m + 1` raw frames (fewer if the episode ends first).

Shared by all families: `StepMul` turns an action into a repeat count and
extends the action spec, `repeat` runs a one-frame step function several
times (families with cheaper ways to repeat, Atari and SC2, do their own
repeating but still take the count from `StepMul`).
"""

import collections
from typing import Callable, Tuple

from clear import types

OPTION_NAMES = ('fixed_step_mul', 'step_mul', 'max_step_mul')


class StepMul:
  """Fixed or agent-chosen number of raw frames per agent step."""

  def __init__(self, fixed: bool = True, step_mul: int = 1,
               max_step_mul: int = 1):
    """Args:
      fixed: True for a constant `step_mul`; False to let the agent choose.
      step_mul: raw frames per agent step in fixed mode (>= 1).
      max_step_mul: number of choices in dynamic mode (>= 1); the agent
        picks m in [0, max_step_mul) and the env runs m + 1 frames.
    """
    for name, value in (('step_mul', step_mul),
                        ('max_step_mul', max_step_mul)):
      if int(value) != value or value < 1:
        raise ValueError(f'{name} must be an integer >= 1, got {value!r}.')
    self.fixed = bool(fixed)
    self.step_mul = int(step_mul)
    self.max_step_mul = int(max_step_mul)

  @classmethod
  def from_options(cls, options: dict) -> 'StepMul':
    """Builds from an options dict holding the keys in `OPTION_NAMES`."""
    return cls(fixed=options['fixed_step_mul'], step_mul=options['step_mul'],
               max_step_mul=options['max_step_mul'])

  def extend_action_spec(
      self, action_spec: collections.OrderedDict) -> collections.OrderedDict:
    """Returns `action_spec`, plus the `'step_mul'` head in dynamic mode."""
    spec = collections.OrderedDict(action_spec)
    if not self.fixed:
      spec[types.STEP_MUL_KEY] = types.DiscreteSpec(self.max_step_mul)
    return spec

  def repeats(self, action: dict) -> int:
    """Raw frames requested by `action` (m + 1 in dynamic mode)."""
    if self.fixed:
      return self.step_mul
    m = int(action[types.STEP_MUL_KEY])
    if not 0 <= m < self.max_step_mul:
      raise ValueError(f'action[{types.STEP_MUL_KEY!r}] = {m} is outside '
                       f'[0, {self.max_step_mul}).')
    return m + 1


def repeat(step_once: Callable[[], Tuple[object, float, bool, bool]],
           num_frames: int) -> Tuple[object, float, bool, bool, int]:
  """Calls `step_once` up to `num_frames` times, stopping at episode end.

  Args:
    step_once: advances one raw frame, returns
      `(observation, reward, terminated, truncated)`.
    num_frames: requested raw frames.

  Returns:
    `(last observation, summed reward, terminated, truncated, frames run)`.
  """
  total = 0.0
  for frame in range(1, num_frames + 1):
    observation, reward, terminated, truncated = step_once()
    total += reward
    if terminated or truncated:
      break
  return observation, total, terminated, truncated, frame
