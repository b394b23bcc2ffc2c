"""Observation encoders ("torsos"): observation dict -> feature vector.

N is the (merged) batch: the agent applies a torso once to `[T * B, ...]`.
Every torso maps a dict of `[N, ...]` observations to a `TorsoOutput`:
a float32 `[N, D]` feature vector for the recurrent core, and, for the
FullyConv torso only, the fused spatial feature maps that its spatial
action heads read, keyed by `(height, width)`.

Preprocessing (`to_float`): uint8 arrays are divided by 255, everything else
(bool boards, float vectors) is cast to float32.

Every hidden layer is followed by a ReLU, as in the papers.

With `norm='layer_norm'` (`NORMS`), the pre-activation of the image torsos'
final linear layer and of each MLP hidden layer is layer-normalised across
its units (`snt.LayerNorm` over the last axis, with a learnable gain and
offset) before the ReLU: `relu(norm(linear(x)))`. It keeps the ReLU
units of a wide layer (the shallow torso's linear one has fan-in 3,872) from
dying together at high learning rates: normalised across units, the
pre-activations of a frame have zero mean and unit variance before the gain
and offset, so they cannot all drop below zero together. With the default
'none' the torsos have no norm modules and no norm variables.
"""

from typing import Dict, NamedTuple, Optional, Sequence, Tuple

import sonnet as snt
import tensorflow as tf


# Normalisations of the layers' pre-activations (see the docstring).
NORMS = ('none', 'layer_norm')


def check_norm(norm: str) -> None:
  """ValueError naming the choices unless `norm` is in `NORMS`."""
  if norm not in NORMS:
    raise ValueError(f'norm must be one of {NORMS}, got {norm!r}')


def make_norm(norm: str, name: str) -> Optional[snt.Module]:
  """The `NORMS` entry `norm` for a linear layer's `[N, D]` pre-activation,
  as a module named `name`, or None where it normalises nothing.

  Args:
    norm: a `NORMS` name.
    name: the module's name.

  Returns:
    None for 'none'; for 'layer_norm' an `snt.LayerNorm` over D with a
    learnable gain and offset.

  Raises:
    ValueError: naming the choices if `norm` is not in `NORMS`.
  """
  check_norm(norm)
  if norm == 'none':
    return None
  return snt.LayerNorm(axis=-1, create_scale=True, create_offset=True,
                       name=name)


def _normed(norm: Optional[snt.Module], x: tf.Tensor) -> tf.Tensor:
  """`norm(x)`, or `x` where there is no norm."""
  return x if norm is None else norm(x)


class TorsoOutput(NamedTuple):
  """What a torso returns.

  Attributes:
    features: float32 `[N, D]`, the input to the recurrent core.
    spatial: dict `(height, width)` -> float32 `[N, height, width, C]` fused
      feature maps for spatial action heads (empty except for FullyConv).
  """
  features: tf.Tensor
  spatial: Dict[Tuple[int, int], tf.Tensor]


def to_float(x) -> tf.Tensor:
  """uint8 -> float32 in [0, 1]; any other dtype -> float32."""
  x = tf.convert_to_tensor(x)
  if x.dtype == tf.uint8:
    return tf.cast(x, tf.float32) / 255.
  return tf.cast(x, tf.float32)


def signed_log1p(x: tf.Tensor) -> tf.Tensor:
  """sign(x) * log(1 + |x|): squashes unbounded counts (minerals, supply)."""
  return tf.sign(x) * tf.math.log1p(tf.abs(x))


def image_keys(observation_spec) -> Sequence[str]:
  """Names of the rank-3 `[H, W, C]` observations, in spec order."""
  return [k for k, s in observation_spec.items() if len(s.shape) == 3]


def vector_keys(observation_spec) -> Sequence[str]:
  """Names of the rank-0 and rank-1 observations, in spec order."""
  return [k for k, s in observation_spec.items() if len(s.shape) <= 1]


def _concat_vectors(observation, keys) -> Optional[tf.Tensor]:
  """Concatenates `[N]` / `[N, d]` entries into float32 `[N, sum d]`."""
  if not keys:
    return None
  parts = []
  for k in keys:
    x = to_float(observation[k])
    if x.shape.rank == 1:
      x = x[:, None]
    parts.append(x)
  return tf.concat(parts, axis=-1)


class _ImageTorso(snt.Module):
  """Shared plumbing: one image through a conv stack, plus vector extras.

  Rank-1 observations (if any) are concatenated to the image features.
  """

  def __init__(self, observation_spec, name, norm='none'):
    super().__init__(name=name)
    # Applied to the final linear layer's pre-activation (None: nothing).
    self._linear_norm = make_norm(norm, 'linear_norm')
    keys = image_keys(observation_spec)
    if len(keys) != 1:
      raise ValueError(
          f'{name} needs exactly one [H, W, C] image observation, '
          f'got {list(keys)} in observation_spec')
    self._image_key = keys[0]
    self._extra_keys = vector_keys(observation_spec)

  def _encode(self, image: tf.Tensor) -> tf.Tensor:
    raise NotImplementedError

  def __call__(self, observation) -> TorsoOutput:
    features = self._encode(to_float(observation[self._image_key]))
    extra = _concat_vectors(observation, self._extra_keys)
    if extra is not None:
      features = tf.concat([features, extra], axis=-1)
    return TorsoOutput(features, {})


class ImpalaShallowTorso(_ImageTorso):
  """The IMPALA shallow network: conv 16 8x8/4, conv 32 4x4/2, linear 256.

  All layers are followed by a ReLU; with `norm='layer_norm'` the linear
  layer's pre-activation is layer-normalised.
  """

  def __init__(self, observation_spec, w_init, output_size: int = 256,
               name: str = 'impala_shallow_torso', norm: str = 'none'):
    super().__init__(observation_spec, name=name, norm=norm)
    self._conv1 = snt.Conv2D(16, 8, stride=4, w_init=w_init, name='conv1')
    self._conv2 = snt.Conv2D(32, 4, stride=2, w_init=w_init, name='conv2')
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  def _encode(self, image):
    x = tf.nn.relu(self._conv1(image))
    x = tf.nn.relu(self._conv2(x))
    return tf.nn.relu(_normed(self._linear_norm,
                              self._linear(snt.flatten(x))))


class MinAtarTorso(_ImageTorso):
  """The torso of MinAtar's reference networks for 10x10 boards (Young and
  Tian, 2019): conv 16 3x3 stride 1 'VALID' (10x10 -> 8x8), linear 128,
  each followed by a ReLU (as in its DQN; its actor-critic used SiLU). With
  `norm='layer_norm'` the linear layer's pre-activation is layer-normalised.

  IMPALA's torsos are built for 84x84 frames: the shallow one's first
  stride-4 layer leaves 3x3 of a 10x10 board, so small boards get this one.
  """

  def __init__(self, observation_spec, w_init, output_size: int = 128,
               channels: int = 16, name: str = 'minatar_torso',
               norm: str = 'none'):
    super().__init__(observation_spec, name=name, norm=norm)
    self._conv = snt.Conv2D(channels, 3, padding='VALID', w_init=w_init,
                            name='conv')
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  def _encode(self, image):
    x = tf.nn.relu(self._conv(image))
    return tf.nn.relu(_normed(self._linear_norm,
                              self._linear(snt.flatten(x))))


class _ResidualBlock(snt.Module):
  """x + conv(relu(conv(relu(x)))), 3x3 convs keeping the channel count."""

  def __init__(self, channels, w_init, name):
    super().__init__(name=name)
    self._conv1 = snt.Conv2D(channels, 3, w_init=w_init, name='conv1')
    self._conv2 = snt.Conv2D(channels, 3, w_init=w_init, name='conv2')

  def __call__(self, x):
    y = self._conv1(tf.nn.relu(x))
    y = self._conv2(tf.nn.relu(y))
    return x + y


class ImpalaDeepTorso(_ImageTorso):
  """The IMPALA deep ResNet: 3 sections of 16/32/32 channels, linear 256.

  A section is conv 3x3, max-pool 3x3 stride 2, and two residual blocks. The
  last section is followed by ReLU, flatten, linear 256, ReLU (the linear
  layer's pre-activation layer-normalised with `norm='layer_norm'`).
  """

  def __init__(self, observation_spec, w_init, output_size: int = 256,
               channels: Sequence[int] = (16, 32, 32),
               name: str = 'impala_deep_torso', norm: str = 'none'):
    super().__init__(observation_spec, name=name, norm=norm)
    self._sections = []
    for i, c in enumerate(channels):
      # (conv, None, block0, block1): a checkpoint names each module by its
      # index in this tuple, so the blocks stay at 2 and 3.
      self._sections.append((
          snt.Conv2D(c, 3, w_init=w_init, name=f'section{i}_conv'),
          None,
          _ResidualBlock(c, w_init, f'section{i}_block0'),
          _ResidualBlock(c, w_init, f'section{i}_block1'),
      ))
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  def _encode(self, image):
    x = image
    for conv, _, block0, block1 in self._sections:
      x = tf.nn.max_pool2d(conv(x), 3, strides=2, padding='SAME')
      x = block1(block0(x))
    x = tf.nn.relu(x)
    return tf.nn.relu(_normed(self._linear_norm,
                              self._linear(snt.flatten(x))))


class MLPTorso(snt.Module):
  """Concatenated vector observations through ReLU linear layers, each
  layer's pre-activation layer-normalised with `norm='layer_norm'`."""

  def __init__(self, observation_spec, w_init,
               hidden_sizes: Sequence[int] = (256, 256),
               name: str = 'mlp_torso', norm: str = 'none'):
    super().__init__(name=name)
    check_norm(norm)
    bad = [k for k, s in observation_spec.items() if len(s.shape) > 1]
    if bad:
      raise ValueError(
          f'{name} takes only rank-0/1 observations; got {bad} in '
          'observation_spec (use an image network)')
    self._keys = list(observation_spec)
    self._layers = [
        snt.Linear(h, w_init=w_init, name=f'linear{i}')
        for i, h in enumerate(hidden_sizes)
    ]
    # One norm per layer; None (nothing a checkpoint tracks) for 'none'.
    self._norms = None if norm == 'none' else [
        make_norm(norm, f'linear{i}_norm') for i in range(len(hidden_sizes))]

  def __call__(self, observation) -> TorsoOutput:
    x = _concat_vectors(observation, self._keys)
    norms = self._norms or [None] * len(self._layers)
    for layer, norm in zip(self._layers, norms):
      x = tf.nn.relu(_normed(norm, layer(x)))
    return TorsoOutput(x, {})


class FullyConvTorso(snt.Module):
  """The SC2LE FullyConv state encoder (Vinyals et al. 2017), recurrent-ready.

  - Every `[H, W, C]` observation (screen, minimap) goes through its own
    conv 16 5x5 and conv 32 3x3 ('SAME', ReLU), keeping its resolution.
  - The rank-1 observations that are not action masks (player, ...) are
    squashed with `signed_log1p` and broadcast as planes.
  - The fused map of a resolution concatenates the conv outputs of that
    resolution and the broadcast planes; it is what the spatial heads read.
  - The feature vector is linear 256 + ReLU over all flattened fused maps
    (the linear layer's pre-activation layer-normalised with
    `norm='layer_norm'`), with the action-mask observations
    (available_actions) appended so that the core knows which functions it
    may call.
  """

  def __init__(self, observation_spec, w_init, mask_keys=(),
               output_size: int = 256, name: str = 'fullyconv_torso',
               norm: str = 'none'):
    super().__init__(name=name)
    self._linear_norm = make_norm(norm, 'linear_norm')
    self._spatial_keys = image_keys(observation_spec)
    if not self._spatial_keys:
      raise ValueError(
          f'{name} needs at least one [H, W, C] observation in '
          'observation_spec')
    self._resolutions = {
        k: tuple(observation_spec[k].shape[:2]) for k in self._spatial_keys}
    self._mask_keys = [k for k in vector_keys(observation_spec)
                       if k in mask_keys]
    self._plane_keys = [k for k in vector_keys(observation_spec)
                        if k not in mask_keys]
    self._convs = {
        k: (snt.Conv2D(16, 5, w_init=w_init, name=f'{k}_conv1'),
            snt.Conv2D(32, 3, w_init=w_init, name=f'{k}_conv2'))
        for k in self._spatial_keys
    }
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  @property
  def resolutions(self) -> Sequence[Tuple[int, int]]:
    """The `(height, width)` of the fused maps, in first-seen order."""
    return list(dict.fromkeys(self._resolutions.values()))

  def __call__(self, observation) -> TorsoOutput:
    maps = {}
    for k in self._spatial_keys:
      conv1, conv2 = self._convs[k]
      x = tf.nn.relu(conv1(to_float(observation[k])))
      x = tf.nn.relu(conv2(x))
      maps.setdefault(self._resolutions[k], []).append(x)
    planes = _concat_vectors(observation, self._plane_keys)
    if planes is not None:
      planes = signed_log1p(planes)
    fused = {}
    for (h, w), xs in maps.items():
      if planes is not None:
        xs = xs + [planes[:, None, None, :] * tf.ones([1, h, w, 1])]
      fused[(h, w)] = tf.concat(xs, axis=-1)
    flat = tf.concat([snt.flatten(m) for m in fused.values()], axis=-1)
    features = tf.nn.relu(_normed(self._linear_norm, self._linear(flat)))
    masks = _concat_vectors(observation, self._mask_keys)
    if masks is not None:
      features = tf.concat([features, masks], axis=-1)
    return TorsoOutput(features, fused)
