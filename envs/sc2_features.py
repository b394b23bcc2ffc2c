"""Encodes pysc2 feature-layer observations into clear's observation dict.

Output entries (S = screen size, M = minimap size):
  screen: float16 [S, S, C] and minimap: float16 [M, M, C'], channels in
    pysc2's layer order, each layer encoded as
      * categorical with 2 values: one 0/1 channel;
      * categorical with at most `MAX_ONE_HOT` values: one-hot channels;
      * categorical with more (unit_type: 1962, buffs: 290): the id in
        binary, ceil(log2(scale)) 0/1 channels (lossless and compact; a
        one-hot unit_type would be ~2000 channels);
      * scalar: log(1 + x) / log(1 + scale), about [0, 1].
    float16 holds all of these exactly enough and halves the memory of
    float32 (uint8 cannot hold the scalar layers without quantising).
  player: float32 [11], log(1 + x) of pysc2's `player` vector.
  available_actions: float32 [len(actions.FUNCTIONS)], 1 where available.
"""

import collections
import math

from envs import pysc2_compat  # noqa: F401  # pylint: disable=unused-import  # Before pysc2.
import numpy as np
from pysc2.lib import actions
from pysc2.lib import features

from clear import types

MAX_ONE_HOT = 32
SPATIAL_DTYPE = np.float16
NUM_PLAYER_FEATURES = len(features.Player)


def _layer_plan(layer):
  """Returns (kind, channels) for one pysc2 feature layer."""
  if layer.type == features.FeatureType.SCALAR:
    return 'scalar', 1
  if layer.scale <= 2:
    return 'flag', 1
  if layer.scale <= MAX_ONE_HOT:
    return 'one_hot', layer.scale
  return 'binary', max(1, math.ceil(math.log2(layer.scale)))


class _SpatialEncoder:
  """Encodes one pysc2 feature stack `[C, H, W]` into `[H, W, C']`."""

  def __init__(self, layers, size):
    self._size = size
    self._plan = []
    offset = 0
    for layer in layers:
      kind, channels = _layer_plan(layer)
      self._plan.append((layer, kind, offset, channels))
      offset += channels
    self.num_channels = offset

  def __call__(self, stack):
    stack = np.asarray(stack)
    out = np.zeros([self._size, self._size, self.num_channels], np.float32)
    for (layer, kind, offset, channels), values in zip(self._plan, stack):
      values = values.astype(np.int64)
      if kind == 'scalar':
        out[..., offset] = (np.log1p(np.maximum(values, 0)) /
                            math.log1p(layer.scale))
      elif kind == 'flag':
        out[..., offset] = values > 0
      elif kind == 'one_hot':
        out[..., offset:offset + channels] = (
            values[..., None] == np.arange(channels))
      else:
        out[..., offset:offset + channels] = (
            (values[..., None] >> np.arange(channels)) & 1)
    return out.astype(SPATIAL_DTYPE)


class FeatureEncoder:
  """pysc2 observation -> clear observation dict (see module docstring)."""

  def __init__(self, screen_size: int, minimap_size: int):
    self._screen = _SpatialEncoder(features.SCREEN_FEATURES, screen_size)
    self._minimap = _SpatialEncoder(features.MINIMAP_FEATURES, minimap_size)
    self.spec = collections.OrderedDict(
        screen=types.ArraySpec(
            (screen_size, screen_size, self._screen.num_channels),
            SPATIAL_DTYPE),
        minimap=types.ArraySpec(
            (minimap_size, minimap_size, self._minimap.num_channels),
            SPATIAL_DTYPE),
        player=types.ArraySpec((NUM_PLAYER_FEATURES,), np.float32),
        available_actions=types.ArraySpec((len(actions.FUNCTIONS),),
                                          np.float32),
    )

  def __call__(self, obs) -> dict:
    """Encodes a pysc2 observation (`TimeStep.observation`)."""
    available = np.zeros([len(actions.FUNCTIONS)], np.float32)
    available[np.asarray(obs['available_actions'], np.int64)] = 1
    player = np.asarray(obs['player'], np.float32)
    return {
        'screen': self._screen(obs['feature_screen']),
        'minimap': self._minimap(obs['feature_minimap']),
        'player': np.log1p(np.maximum(player, 0)),
        'available_actions': available,
    }
