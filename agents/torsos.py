"""Observation encoders ("torsos"): observation dict -> feature vector.

N is the (merged) batch: the agent applies a torso once to `[T * B, ...]`.
Every torso maps a dict of `[N, ...]` observations to a `TorsoOutput`:
a float32 `[N, D]` feature vector for the recurrent core, and, for the
FullyConv torso only, the fused spatial feature maps that its spatial
action heads read, keyed by `(height, width)`.

Preprocessing (`to_float`): uint8 arrays are divided by 255, everything else
(bool boards, float vectors) is cast to float32.

Every hidden layer is followed by the torso's `activation` (`ACTIVATIONS`):
ReLU, as in the papers, by default. A ReLU unit whose input is negative on
every observation gets no gradient and stays dead; 'leaky_relu' and 'elu'
keep a gradient there.

With `norm='layer_norm'` (`NORMS`), the pre-activation of the image torsos'
final linear layer and of each MLP hidden layer is layer-normalised across
its units (`snt.LayerNorm` over the last axis, with a learnable gain and
offset) before the activation: `act(norm(linear(x)))`. It keeps the ReLU
units of a wide layer (the shallow torso's linear one has fan-in 3,872) from
dying together at high learning rates: normalised across units, the
pre-activations of a frame have zero mean and unit variance before the gain
and offset, so they cannot all drop below zero together.

`norm='layer_norm_all'` also normalises the image torsos' convolutions: each
conv layer's `[H, W, C]` pre-activation is normalised over the whole map of a
frame, with a learnable gain and offset per channel, before the activation
(for the deep torso, each section's first conv, before its max-pool; the
residual blocks keep their skip path). On Pong at 1e-3 the shallow torso's
convolutions have lost every unit on one seed with only the linear layer
normalised. With the default 'none' the torsos are unchanged (no norm
modules, no new variables).
"""

import functools
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import sonnet as snt
import tensorflow as tf


# Name -> elementwise function. Leaky ReLU's slope is Maas et al.'s 0.01.
ACTIVATIONS: Dict[str, Callable[[tf.Tensor], tf.Tensor]] = {
    'relu': tf.nn.relu,
    'leaky_relu': functools.partial(tf.nn.leaky_relu, alpha=0.01),
    'elu': tf.nn.elu,
}


# Normalisations of the layers' pre-activations (see the docstring).
NORMS = ('none', 'layer_norm', 'layer_norm_all')


def activation_fn(name: str) -> Callable[[tf.Tensor], tf.Tensor]:
  """The `ACTIVATIONS` entry `name`; ValueError naming the choices if none."""
  if name not in ACTIVATIONS:
    raise ValueError(f'activation must be one of {sorted(ACTIVATIONS)}, got '
                     f'{name!r}')
  return ACTIVATIONS[name]


def check_norm(norm: str) -> None:
  """ValueError naming the choices unless `norm` is in `NORMS`."""
  if norm not in NORMS:
    raise ValueError(f'norm must be one of {NORMS}, got {norm!r}')


def make_norm(norm: str, name: str,
              spatial: bool = False) -> Optional[snt.Module]:
  """The `NORMS` entry `norm` as a module named `name`, or None where it
  normalises nothing.

  Args:
    norm: a `NORMS` name.
    name: the module's name.
    spatial: whether the module is for a conv layer's `[N, H, W, C]`
      pre-activation (normalised by 'layer_norm_all' only, over H, W and C,
      with a gain and offset per channel) rather than a linear layer's
      `[N, D]` one (normalised over D by both 'layer_norm' and
      'layer_norm_all').

  Returns:
    None for 'none' (and for 'layer_norm' where `spatial`), an
    `snt.LayerNorm` with a learnable gain and offset otherwise.

  Raises:
    ValueError: naming the choices if `norm` is not in `NORMS`.
  """
  check_norm(norm)
  if norm == 'none' or (spatial and norm != 'layer_norm_all'):
    return None
  return snt.LayerNorm(axis=[1, 2, 3] if spatial else -1, create_scale=True,
                       create_offset=True, name=name)


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

  def __init__(self, observation_spec, name, activation='relu',
               norm='none'):
    super().__init__(name=name)
    self._act = activation_fn(activation)
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

  All layers are followed by a ReLU (or `activation`); with
  `norm='layer_norm'` the linear layer's pre-activation is layer-normalised,
  with 'layer_norm_all' the convolutions' too.
  """

  def __init__(self, observation_spec, w_init, output_size: int = 256,
               name: str = 'impala_shallow_torso', activation: str = 'relu',
               norm: str = 'none'):
    super().__init__(observation_spec, name=name, activation=activation,
                     norm=norm)
    self._conv1 = snt.Conv2D(16, 8, stride=4, w_init=w_init, name='conv1')
    self._conv2 = snt.Conv2D(32, 4, stride=2, w_init=w_init, name='conv2')
    self._conv1_norm = make_norm(norm, 'conv1_norm', spatial=True)
    self._conv2_norm = make_norm(norm, 'conv2_norm', spatial=True)
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  def _encode(self, image):
    x = self._act(_normed(self._conv1_norm, self._conv1(image)))
    x = self._act(_normed(self._conv2_norm, self._conv2(x)))
    return self._act(_normed(self._linear_norm,
                             self._linear(snt.flatten(x))))


class MinAtarTorso(_ImageTorso):
  """The torso of MinAtar's reference networks for 10x10 boards (Young and
  Tian, 2019): conv 16 3x3 stride 1 'VALID' (10x10 -> 8x8), linear 128,
  each followed by a ReLU (as in its DQN; its actor-critic used SiLU). With
  `norm='layer_norm'` the linear layer's pre-activation is layer-normalised,
  with 'layer_norm_all' the conv layer's too.

  IMPALA's torsos are built for 84x84 frames: the shallow one's first
  stride-4 layer leaves 3x3 of a 10x10 board, so small boards get this one.
  """

  def __init__(self, observation_spec, w_init, output_size: int = 128,
               channels: int = 16, name: str = 'minatar_torso',
               activation: str = 'relu', norm: str = 'none'):
    super().__init__(observation_spec, name=name, activation=activation,
                     norm=norm)
    self._conv = snt.Conv2D(channels, 3, padding='VALID', w_init=w_init,
                            name='conv')
    self._conv_norm = make_norm(norm, 'conv_norm', spatial=True)
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  def _encode(self, image):
    x = self._act(_normed(self._conv_norm, self._conv(image)))
    return self._act(_normed(self._linear_norm,
                             self._linear(snt.flatten(x))))


class _ResidualBlock(snt.Module):
  """x + conv(act(conv(act(x)))), 3x3 convs keeping the channel count."""

  def __init__(self, channels, w_init, name, act=tf.nn.relu):
    super().__init__(name=name)
    self._act = act
    self._conv1 = snt.Conv2D(channels, 3, w_init=w_init, name='conv1')
    self._conv2 = snt.Conv2D(channels, 3, w_init=w_init, name='conv2')

  def __call__(self, x):
    y = self._conv1(self._act(x))
    y = self._conv2(self._act(y))
    return x + y


class ImpalaDeepTorso(_ImageTorso):
  """The IMPALA deep ResNet: 3 sections of 16/32/32 channels, linear 256.

  A section is conv 3x3, max-pool 3x3 stride 2, and two residual blocks. The
  last section is followed by ReLU, flatten, linear 256, ReLU (the linear
  layer's pre-activation layer-normalised with `norm='layer_norm'`; with
  'layer_norm_all' each section's conv output is too, before the max-pool).
  """

  def __init__(self, observation_spec, w_init, output_size: int = 256,
               channels: Sequence[int] = (16, 32, 32),
               name: str = 'impala_deep_torso', activation: str = 'relu',
               norm: str = 'none'):
    super().__init__(observation_spec, name=name, activation=activation,
                     norm=norm)
    self._sections = []
    for i, c in enumerate(channels):
      self._sections.append((
          snt.Conv2D(c, 3, w_init=w_init, name=f'section{i}_conv'),
          make_norm(norm, f'section{i}_conv_norm', spatial=True),
          _ResidualBlock(c, w_init, f'section{i}_block0', self._act),
          _ResidualBlock(c, w_init, f'section{i}_block1', self._act),
      ))
    self._linear = snt.Linear(output_size, w_init=w_init, name='linear')

  def _encode(self, image):
    x = image
    for conv, conv_norm, block0, block1 in self._sections:
      x = _normed(conv_norm, conv(x))
      x = tf.nn.max_pool2d(x, 3, strides=2, padding='SAME')
      x = block1(block0(x))
    x = self._act(x)
    return self._act(_normed(self._linear_norm,
                             self._linear(snt.flatten(x))))


class MLPTorso(snt.Module):
  """Concatenated vector observations through ReLU (or `activation`) linear
  layers, each layer's pre-activation layer-normalised with
  `norm='layer_norm'`."""

  def __init__(self, observation_spec, w_init,
               hidden_sizes: Sequence[int] = (256, 256),
               name: str = 'mlp_torso', activation: str = 'relu',
               norm: str = 'none'):
    super().__init__(name=name)
    self._act = activation_fn(activation)
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
      x = self._act(_normed(norm, layer(x)))
    return TorsoOutput(x, {})


class FullyConvTorso(snt.Module):
  """The SC2LE FullyConv state encoder (Vinyals et al. 2017), recurrent-ready.

  - Every `[H, W, C]` observation (screen, minimap) goes through its own
    conv 16 5x5 and conv 32 3x3 ('SAME', ReLU or `activation`), keeping its
    resolution.
  - The rank-1 observations that are not action masks (player, ...) are
    squashed with `signed_log1p` and broadcast as planes.
  - The fused map of a resolution concatenates the conv outputs of that
    resolution and the broadcast planes; it is what the spatial heads read.
  - The feature vector is linear 256 + ReLU over all flattened fused maps
    (the linear layer's pre-activation layer-normalised with
    `norm='layer_norm'`, the convolutions' too with 'layer_norm_all'), with
    the action-mask observations (available_actions) appended so that the
    core knows which functions it may call.
  """

  def __init__(self, observation_spec, w_init, mask_keys=(),
               output_size: int = 256, name: str = 'fullyconv_torso',
               activation: str = 'relu', norm: str = 'none'):
    super().__init__(name=name)
    self._act = activation_fn(activation)
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
            snt.Conv2D(32, 3, w_init=w_init, name=f'{k}_conv2'),
            make_norm(norm, f'{k}_conv1_norm', spatial=True),
            make_norm(norm, f'{k}_conv2_norm', spatial=True))
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
      conv1, conv2, norm1, norm2 = self._convs[k]
      x = self._act(_normed(norm1, conv1(to_float(observation[k]))))
      x = self._act(_normed(norm2, conv2(x)))
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
    features = self._act(_normed(self._linear_norm, self._linear(flat)))
    masks = _concat_vectors(observation, self._mask_keys)
    if masks is not None:
      features = tf.concat([features, masks], axis=-1)
    return TorsoOutput(features, fused)
