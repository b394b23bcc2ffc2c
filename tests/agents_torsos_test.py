"""Tests of the observation encoders (agents.torsos)."""

import numpy as np
import pytest
import tensorflow as tf

from agents import initializers
from agents import testing
from agents import torsos

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
