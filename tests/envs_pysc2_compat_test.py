"""Tests for envs.pysc2_compat: pysc2 imports on the upb protobuf backend."""

import os
import subprocess
import sys

from envs import pysc2_compat


def test_fresh_interpreter_imports_pysc2():
  """Only the compat module comes before pysc2; no env tricks."""
  code = (
      'import envs.pysc2_compat\n'
      'from pysc2.env import sc2_env, mock_sc2_env\n'
      'from pysc2.lib import colors\n'
      'from google.protobuf.internal import api_implementation\n'
      'assert colors.unit_type().shape[1] == 3\n'
      'print(api_implementation.Type())\n')
  env = dict(os.environ)
  env.pop('PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION', None)
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  result = subprocess.run([sys.executable, '-c', code], cwd=root, env=env,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() != 'python'


def test_messages_round_trip():
  from s2clientprotocol import common_pb2
  from s2clientprotocol import sc2api_pb2 as sc_pb
  from s2clientprotocol import spatial_pb2

  request = sc_pb.RequestAction(actions=[sc_pb.Action(
      action_feature_layer=spatial_pb2.ActionSpatial(
          unit_command=spatial_pb2.ActionSpatialUnitCommand(
              ability_id=16,
              target_screen_coord=common_pb2.PointI(x=3, y=4))))])
  parsed = sc_pb.RequestAction.FromString(request.SerializeToString())
  assert parsed == request
  coord = parsed.actions[0].action_feature_layer.unit_command
  assert coord.target_screen_coord.y == 4
  assert common_pb2.Race.Name(common_pb2.Terran) == 'Terran'
  assert sc_pb.Status.Value('in_game') == sc_pb.in_game


def test_backend_is_not_pure_python():
  from google.protobuf.internal import api_implementation
  assert api_implementation.Type() != 'python'


def test_old_shuffle_signature_and_install_is_idempotent():
  from pysc2.lib import colors
  pysc2_compat.install()
  first = colors.shuffled_hue(50)
  assert (first == colors.shuffled_hue(50)).all()  # Fixed shuffle.
  x = list(range(5))
  colors.random.shuffle(x, lambda: 0.5)
  assert sorted(x) == list(range(5)) and x != list(range(5))
  assert colors.random.randint(0, 0) == 0  # Other functions pass through.


def test_find_serialized_descriptor():
  assert pysc2_compat._find_serialized_descriptor(  # pylint: disable=protected-access
      "X = f(name='a', serialized_pb=_b('\\n\\x01a'))") == b'\n\x01a'
  assert pysc2_compat._find_serialized_descriptor(  # pylint: disable=protected-access
      "X = f(serialized_pb=b'\\x00')") == b'\x00'
  assert pysc2_compat._find_serialized_descriptor('X = 1') is None  # pylint: disable=protected-access
