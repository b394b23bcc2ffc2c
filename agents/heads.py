"""Action heads: core output (and spatial maps) -> logits; masking; sampling.

N is the (merged) batch. Every head of an `action_spec` is categorical
(`DiscreteSpec`). A spatial head whose `(height, width)` matches a fused map
of the torso reads that map (FullyConv); every other head is a linear layer
on the core output. Spatial logits are flattened in `y * width + x` order.
"""

from typing import Dict

import sonnet as snt
import tensorflow as tf


# Logit given to unavailable choices: finite so that entropies and KLs stay
# finite (0 * -1e9 = 0), low enough that softmax gives them exactly 0.
MASKED_LOGIT = -1e9


class SpatialHead(snt.Module):
  """Logits over the pixels of a fused map, conditioned on the core output.

  Computes 1x1 conv (C) over [map; core output broadcast to every pixel],
  ReLU, 1x1 conv (1). The concatenation is implemented as a conv of the map
  plus a per-channel bias from a linear layer of the core output, which is
  the same function without materialising the broadcast.
  """

  def __init__(self, hidden_channels: int, w_init, name: str):
    super().__init__(name=name)
    self._map_conv = snt.Conv2D(hidden_channels, 1, w_init=w_init,
                                name='map_conv')
    self._core_linear = snt.Linear(hidden_channels, with_bias=False,
                                   w_init=w_init, name='core_linear')
    self._out_conv = snt.Conv2D(1, 1, w_init=w_init, name='out_conv')

  def __call__(self, core_output: tf.Tensor, spatial_map: tf.Tensor):
    """core_output: `[N, D]`; spatial_map `[N, H, W, C]` -> `[N, H * W]`."""
    x = self._map_conv(spatial_map)
    x += self._core_linear(core_output)[:, None, None, :]
    x = self._out_conv(tf.nn.relu(x))
    return snt.flatten(x)


class PolicyHeads(snt.Module):
  """One categorical head per `DiscreteSpec` of the action spec."""

  def __init__(self, action_spec, w_init, spatial_resolutions=(),
               spatial_hidden_channels: int = 16,
               name: str = 'policy_heads'):
    super().__init__(name=name)
    self._action_spec = action_spec
    self._heads = {}
    self._spatial_inputs = {}
    for key, spec in action_spec.items():
      if spec.spatial is not None and tuple(spec.spatial) in set(
          map(tuple, spatial_resolutions)):
        self._spatial_inputs[key] = tuple(spec.spatial)
        self._heads[key] = SpatialHead(spatial_hidden_channels, w_init,
                                       name=f'{key}_head')
      else:
        self._heads[key] = snt.Linear(spec.num_values, w_init=w_init,
                                      name=f'{key}_head')

  def __call__(self, core_output: tf.Tensor,
               spatial_maps: Dict) -> Dict[str, tf.Tensor]:
    """Unmasked logits, dict name -> float32 `[N, num_values]`."""
    logits = {}
    for key in self._action_spec:
      head = self._heads[key]
      if key in self._spatial_inputs:
        logits[key] = head(core_output, spatial_maps[self._spatial_inputs[key]])
      else:
        logits[key] = head(core_output)
    return logits


def mask_logits(logits: tf.Tensor, mask) -> tf.Tensor:
  """Sets logits where `mask == 0` to `MASKED_LOGIT`.

  Args:
    logits: float32 `[..., A]`.
    mask: `[..., A]` of any numeric dtype; nonzero marks available choices.

  Returns:
    float32 `[..., A]`.
  """
  available = tf.not_equal(tf.convert_to_tensor(mask), 0)
  return tf.where(available, logits, tf.constant(MASKED_LOGIT, logits.dtype))


def apply_masks(logits: Dict[str, tf.Tensor], observation,
                action_spec) -> Dict[str, tf.Tensor]:
  """Masks every head whose spec names a `mask_key` in the observation."""
  out = {}
  for key, spec in action_spec.items():
    out[key] = logits[key]
    if spec.mask_key is not None:
      out[key] = mask_logits(logits[key], observation[spec.mask_key])
  return out


def sample_actions(logits: Dict[str, tf.Tensor],
                   rng: tf.random.Generator) -> Dict[str, tf.Tensor]:
  """Samples every head from its (masked) logits; dict of int32 `[N]`.

  Draws one stateless seed per head from `rng` (advancing its state once).
  Seeds are int32, the only kind XLA compiles `stateless_categorical` for.
  """
  keys = list(logits)
  seeds = rng.uniform_full_int([len(keys), 2], dtype=tf.int32)
  actions = {}
  for i, key in enumerate(keys):
    actions[key] = tf.random.stateless_categorical(
        logits[key], 1, seed=seeds[i], dtype=tf.int32)[:, 0]
  return actions


def greedy_actions(logits: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
  """The argmax of every head; dict of int32 `[...]`."""
  return {k: tf.argmax(v, axis=-1, output_type=tf.int32)
          for k, v in logits.items()}
