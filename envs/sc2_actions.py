"""The StarCraft II action nest and its conversion to a pysc2 FunctionCall.

The action spec has one head for the function id and one per pysc2
argument type (`actions.TYPES`): `function` (masked by the
`available_actions` observation), the spatial heads `screen`, `minimap`,
`screen2` (flattened index y * size + x), and the categorical ones
(`queued`, `control_group_act`, ..., `unload_id`) with pysc2's sizes.
Every head is sampled each step; `function_call` keeps only the arguments
the chosen function takes.
"""

import collections

from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.
from pysc2.lib import actions

from clear import types

FUNCTION_KEY = 'function'
AVAILABLE_ACTIONS_KEY = 'available_actions'
_SPATIAL = ('screen', 'minimap', 'screen2')


def action_spec(screen_size: int,
                minimap_size: int) -> collections.OrderedDict:
  """Returns the ordered action nest (without any step multiplier head)."""
  spec = collections.OrderedDict()
  spec[FUNCTION_KEY] = types.DiscreteSpec(len(actions.FUNCTIONS),
                                          mask_key=AVAILABLE_ACTIONS_KEY)
  for arg_type in actions.TYPES:
    if arg_type.name in _SPATIAL:
      size = minimap_size if arg_type.name == 'minimap' else screen_size
      spec[arg_type.name] = types.DiscreteSpec(size * size,
                                               spatial=(size, size))
    else:
      spec[arg_type.name] = types.DiscreteSpec(int(arg_type.sizes[0]))
  return spec


def function_call(action: dict, screen_size: int,
                  minimap_size: int) -> actions.FunctionCall:
  """Builds the FunctionCall for one (unbatched) action nest.

  Args:
    action: dict head name -> int; must hold `function` and every argument
      head the chosen function needs.
    screen_size: width of the screen heads (`screen`, `screen2`).
    minimap_size: width of the `minimap` head.

  Returns:
    `actions.FunctionCall(function, args)` with only that function's
    arguments; spatial ones as `[x, y]`, the others as `[value]`.
  """
  function_id = int(action[FUNCTION_KEY])
  args = []
  for arg_type in actions.FUNCTIONS[function_id].args:
    value = int(action[arg_type.name])
    if arg_type.name in _SPATIAL:
      size = minimap_size if arg_type.name == 'minimap' else screen_size
      args.append([value % size, value // size])
    else:
      args.append([value])
  return actions.FunctionCall(function_id, args)
