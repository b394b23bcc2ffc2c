"""Tests of the observation encoders (agents.torsos)."""

import numpy as np
import pytest
import tensorflow as tf

import agents
import envs
from agents import initializers
from agents import testing
from agents import torsos
from clear import types

N = 4


def _w_init(seed=0):
  return initializers.SeededFanIn(np.random.default_rng(seed))


def test_to_float_scales_uint8_only():
  np.testing.assert_allclose(torsos.to_float(np.array([0, 255], np.uint8)),
                             [0., 1.])
  x = torsos.to_float(np.array([300.], np.float16))
  assert x.dtype == tf.float32 and float(x[0]) == 300.


@pytest.mark.parametrize('torso_cls,size', [
    (torsos.ImpalaShallowTorso, 256), (torsos.ImpalaDeepTorso, 256)])
def test_image_torsos(torso_cls, size):
  spec = testing.atari_spec()
  torso = torso_cls(spec.observation_spec, _w_init())
  obs = testing.random_observation(spec, (N,), np.random.default_rng(0))
  out = torso(obs)
  assert out.features.shape == [N, size] and out.spatial == {}
  assert np.all(out.features.numpy() >= 0)  # ends with a ReLU
  # uint8 frames are scaled inside: feeding x / 255 as float32 is the same.
  same = torso({'frame': obs['frame'].astype(np.float32) / 255.})
  np.testing.assert_allclose(out.features, same.features, atol=1e-5)


def test_impala_shallow_layer_shapes():
  spec = testing.atari_spec()
  torso = torsos.ImpalaShallowTorso(spec.observation_spec, _w_init())
  torso(testing.random_observation(spec, (1,), np.random.default_rng(0)))
  shapes = {v.name.split('/', 1)[1]: v.shape.as_list()
            for v in torso.trainable_variables}
  assert shapes['conv1/w:0'] == [8, 8, 4, 16]
  assert shapes['conv2/w:0'] == [4, 4, 16, 32]
  assert shapes['linear/w:0'] == [11 * 11 * 32, 256]


def test_deep_torso_checkpoint_keys(tmp_path):
  # A checkpoint names each module of a section by its index in the
  # section's tuple: the conv at 0, the residual blocks at 2 and 3, as in
  # the checkpoints of earlier versions.
  spec = testing.atari_spec(frame_shape=(36, 36, 4))
  torso = torsos.ImpalaDeepTorso(spec.observation_spec, _w_init())
  torso(testing.random_observation(spec, (1,), np.random.default_rng(0)))
  path = tf.train.Checkpoint(torso=torso).write(str(tmp_path / 'ckpt'))
  keys = sorted(name.split('/.ATTRIBUTES/')[0]
                for name, _ in tf.train.list_variables(path)
                if name != '_CHECKPOINTABLE_OBJECT_GRAPH')
  assert keys == sorted(
      ['torso/_linear/b', 'torso/_linear/w'] +
      [f'torso/_sections/{i}/0/{v}' for i in range(3) for v in 'bw'] +
      [f'torso/_sections/{i}/{j}/_conv{k}/{v}' for i in range(3)
       for j in (2, 3) for k in (1, 2) for v in 'bw'])


def test_mlp_torso_matches_numpy():
  spec = testing.control_spec(obs_size=5)
  torso = torsos.MLPTorso(spec.observation_spec, _w_init(), (7, 3))
  obs = testing.random_observation(spec, (N,), np.random.default_rng(0))
  x = np.concatenate([np.asarray(obs[k], np.float32).reshape(N, -1)
                      for k in spec.observation_spec], axis=-1)
  features = torso(obs).features.numpy()
  for layer in torso._layers:
    x = np.maximum(x @ layer.w.numpy() + layer.b.numpy(), 0.)
  np.testing.assert_allclose(features, x, rtol=1e-5, atol=1e-6)


def _layer_norm_relu(h, scale, offset):
  """relu(snt.LayerNorm(-1)(h)) in float64: eps 1e-5, Sonnet's default."""
  h = np.asarray(h, np.float64)
  mean = h.mean(axis=-1, keepdims=True)
  var = h.var(axis=-1, keepdims=True)
  return np.maximum((h - mean) / np.sqrt(var + 1e-5) * scale + offset, 0.)


def _image_torso(torso_cls, norm):
  """A small instance of `torso_cls` and its observation spec."""
  if torso_cls is torsos.MinAtarTorso:
    spec = _minatar_spec(4)
    return spec, torso_cls(spec.observation_spec, _w_init(), norm=norm)
  if torso_cls is torsos.FullyConvTorso:
    spec = testing.sc2_spec(screen=8, minimap=6, num_functions=10)
    return spec, torso_cls(spec.observation_spec, _w_init(),
                           mask_keys={'available_actions'}, output_size=20,
                           norm=norm)
  spec = testing.atari_spec(frame_shape=(36, 36, 4))
  return spec, torso_cls(spec.observation_spec, _w_init(), norm=norm)


IMAGE_TORSOS = [torsos.ImpalaShallowTorso, torsos.ImpalaDeepTorso,
                torsos.MinAtarTorso, torsos.FullyConvTorso]


@pytest.mark.parametrize('torso_cls', IMAGE_TORSOS)
@pytest.mark.parametrize('at_init', [True, False])
def test_image_torso_layer_norm_matches_numpy(torso_cls, at_init):
  # relu(layer_norm(linear(x))), with the linear layer's input recorded.
  spec, torso = _image_torso(torso_cls, 'layer_norm')
  obs = testing.random_observation(spec, (N,), np.random.default_rng(0))
  torso(obs)
  norm = torso._linear_norm
  assert norm.name == 'linear_norm'
  assert sorted(v.name.split('/', 1)[1] for v in norm.trainable_variables) == [
      'linear_norm/offset:0', 'linear_norm/scale:0']
  size = norm.scale.shape[0]
  scale, offset = np.ones(size), np.zeros(size)  # Sonnet's initial gain, offset
  np.testing.assert_array_equal(norm.scale.numpy(), scale)
  np.testing.assert_array_equal(norm.offset.numpy(), offset)
  if not at_init:  # A trained gain and offset are applied too.
    rng = np.random.default_rng(1)
    scale, offset = rng.uniform(0.5, 2., size), rng.normal(size=size)
    norm.scale.assign(scale.astype(np.float32))
    norm.offset.assign(offset.astype(np.float32))
  linear, inputs = torso._linear, []

  def recording_linear(x):
    inputs.append(x.numpy())
    return linear(x)

  torso._linear = recording_linear
  features = torso(obs).features.numpy()[:, :size]
  (x,) = inputs
  h = x.astype(np.float64) @ linear.w.numpy() + linear.b.numpy()
  expected = _layer_norm_relu(h, scale, offset)
  np.testing.assert_allclose(features, expected, rtol=1e-4, atol=1e-4)
  # Without the norm this would be relu(h): the norm is what is applied.
  assert not np.allclose(features, np.maximum(h, 0.), atol=1e-2)
  # Normalised across units, no observation has every unit below zero.
  assert np.all((features > 0).any(axis=-1))


@pytest.mark.parametrize('torso_cls', IMAGE_TORSOS + [torsos.MLPTorso])
def test_torso_norm_none_adds_no_variables(torso_cls):
  # 'none' builds no norm variables, and the 'layer_norm' torso's other
  # layers have the same seeded values as its own.
  def variables(norm):
    if torso_cls is torsos.MLPTorso:
      spec = testing.control_spec(obs_size=5)
      torso = torso_cls(spec.observation_spec, _w_init(), (7, 3), norm=norm)
    else:
      spec, torso = _image_torso(torso_cls, norm)
    torso(testing.random_observation(spec, (N,), np.random.default_rng(0)))
    return {v.name.split('/', 1)[1]: v.numpy() for v in torso.variables}

  none, normed = variables('none'), variables('layer_norm')
  assert not [name for name in none if 'norm' in name]
  added = sorted(set(normed) - set(none))
  if torso_cls is torsos.MLPTorso:
    assert added == ['linear0_norm/offset:0', 'linear0_norm/scale:0',
                     'linear1_norm/offset:0', 'linear1_norm/scale:0']
  else:
    assert added == ['linear_norm/offset:0', 'linear_norm/scale:0']
  assert set(none) <= set(normed)
  for name, value in none.items():
    np.testing.assert_array_equal(normed[name], value, err_msg=name)


def test_mlp_torso_layer_norm_matches_numpy():
  spec = testing.control_spec(obs_size=5)
  torso = torsos.MLPTorso(spec.observation_spec, _w_init(), (7, 3),
                          norm='layer_norm')
  obs = testing.random_observation(spec, (N,), np.random.default_rng(0))
  x = np.concatenate([np.asarray(obs[k], np.float32).reshape(N, -1)
                      for k in spec.observation_spec], axis=-1)
  features = torso(obs).features.numpy()
  assert [n.name for n in torso._norms] == ['linear0_norm', 'linear1_norm']
  for layer, norm in zip(torso._layers, torso._norms):
    x = _layer_norm_relu(x @ layer.w.numpy() + layer.b.numpy(),
                         norm.scale.numpy(), norm.offset.numpy())
  np.testing.assert_allclose(features, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('torso_cls', IMAGE_TORSOS + [torsos.MLPTorso])
def test_unknown_norm_is_refused(torso_cls):
  with pytest.raises(ValueError,
                     match=r"norm must be one of \('none', 'layer_norm'\), "
                           r"got 'batch_norm'"):
    if torso_cls is torsos.MLPTorso:
      torso_cls(testing.control_spec().observation_spec, _w_init(),
                norm='batch_norm')
    else:
      _image_torso(torso_cls, 'batch_norm')


def test_mlp_torso_concatenates_vectors():
  spec = testing.control_spec(obs_size=5)
  torso = torsos.MLPTorso(spec.observation_spec, _w_init(), (7, 3))
  out = torso(testing.random_observation(spec, (N,), np.random.default_rng(0)))
  assert out.features.shape == [N, 3]


def test_fullyconv_torso_maps_per_resolution():
  spec = testing.sc2_spec(screen=8, minimap=6, num_functions=10)
  torso = torsos.FullyConvTorso(spec.observation_spec, _w_init(),
                                mask_keys={'available_actions'},
                                output_size=20)
  obs = testing.random_observation(spec, (N,), np.random.default_rng(0))
  out = torso(obs)
  # 20 features + the 10 availability bits appended for the core.
  assert out.features.shape == [N, 30]
  np.testing.assert_array_equal(out.features[:, 20:],
                                obs['available_actions'])
  # 32 conv channels + 11 broadcast player planes at each resolution.
  assert set(out.spatial) == {(8, 8), (6, 6)}
  assert out.spatial[(8, 8)].shape == [N, 8, 8, 43]
  assert out.spatial[(6, 6)].shape == [N, 6, 6, 43]
  np.testing.assert_allclose(
      out.spatial[(6, 6)][:, 3, 4, 32:],
      torsos.signed_log1p(tf.constant(obs['player'])), rtol=1e-6)
  assert torso.resolutions == [(8, 8), (6, 6)]


def test_seeded_initializer_is_reproducible():
  a = _w_init(3)([5, 7], tf.float32)
  b = _w_init(3)([5, 7], tf.float32)
  c = _w_init(4)([5, 7], tf.float32)
  np.testing.assert_array_equal(a, b)
  assert np.any(a.numpy() != c.numpy())
  assert np.all(np.abs(a) <= 2. / np.sqrt(5) + 1e-6)  # truncated at 2 std


def _minatar_spec(channels):
  return types.EnvSpec(
      {'board': types.ArraySpec((10, 10, channels), np.bool_)},
      {'action': types.DiscreteSpec(6)}, 'minatar:Test')


def test_minatar_torso_matches_a_numpy_convolution():
  spec = _minatar_spec(4)
  torso = torsos.MinAtarTorso(spec.observation_spec, _w_init())
  board = np.random.default_rng(0).random((N, 10, 10, 4)) < 0.3
  out = torso({'board': board})
  assert out.features.shape == [N, 128] and out.spatial == {}
  variables = {v.name.split('/', 1)[1]: v.numpy()
               for v in torso.trainable_variables}
  w, b = variables['conv/w:0'], variables['conv/b:0']
  assert w.shape == (3, 3, 4, 16)
  assert variables['linear/w:0'].shape == (8 * 8 * 16, 128)
  # Unpadded ('VALID') 3x3 convolution, written out: 10x10 -> 8x8.
  x = board.astype(np.float64)  # bool cells are 0 / 1, not / 255.
  conv = np.zeros((N, 8, 8, 16))
  for i in range(8):
    for j in range(8):
      conv[:, i, j] = np.einsum('nhwc,hwck->nk', x[:, i:i + 3, j:j + 3], w)
  hidden = np.maximum(conv + b, 0).reshape(N, -1)
  expected = np.maximum(hidden @ variables['linear/w:0'] +
                        variables['linear/b:0'], 0)
  np.testing.assert_allclose(out.features, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('game,channels', [
    ('Asterix', 4), ('Breakout', 4), ('Freeway', 7), ('Seaquest', 10),
    ('SpaceInvaders', 6)])
def test_auto_picks_the_minatar_torso_for_minatar_boards(game, channels):
  env = envs.make(f'minatar:{game}', num_envs=2)
  assert env.spec.observation_spec['board'].shape == (10, 10, channels)
  assert agents.resolve_network(env.spec, 'auto') == 'minatar'
  agent = agents.make_agent(env.spec, core_size=128, seed=0)
  shapes = {v.name.split('/', 1)[1]: v.shape.as_list()
            for v in agent.trainable_variables}
  assert shapes['torso/conv/w:0'] == [3, 3, channels, 16]
  assert shapes['torso/linear/w:0'] == [8 * 8 * 16, 128]
  output, _ = agent.step(env.reset(), {'action': np.zeros([2], np.int32)},
                         agent.initial_state(2))
  assert output.logits['action'].shape == [2, 6]


def test_auto_keeps_impala_shallow_for_atari_frames():
  assert agents.resolve_network(testing.atari_spec(), 'auto') == (
      'impala_shallow')
  with pytest.raises(ValueError, match='at least 3x3'):
    agents.resolve_network(types.EnvSpec(
        {'board': types.ArraySpec((2, 2, 1), np.bool_)},
        {'action': types.DiscreteSpec(2)}), 'minatar')
