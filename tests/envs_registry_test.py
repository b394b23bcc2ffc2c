"""Tests for envs.make: name parsing and the clear ValueErrors."""

import ast
import os
import subprocess
import sys

import pytest

import envs
from envs import registry


@pytest.mark.parametrize('name', ['Pong', 'atary:Pong', 'atari:', ':Pong',
                                  'doom:E1M1'])
def test_unknown_prefix_lists_prefixes(name):
  with pytest.raises(ValueError) as info:
    envs.make(name)
  message = str(info.value)
  assert repr(name) in message
  for prefix in ('atari', 'gym', 'minatar', 'sc2'):
    assert repr(prefix) in message


@pytest.mark.parametrize('name, close', [
    ('atari:Breakuot', 'Breakout'),
    ('atari:SpaceInvader', 'SpaceInvaders'),
    ('gym:Cartpole-v1', 'CartPole-v1'),
])
def test_unknown_game_suggests_close_names(name, close):
  with pytest.raises(ValueError, match='Unknown') as info:
    envs.make(name)
  assert repr(close) in str(info.value)


@pytest.mark.parametrize('name', ['atari:Pong', 'gym:CartPole-v1',
                                  'minatar:Breakout'])
def test_unknown_options_are_named(name):
  with pytest.raises(ValueError) as info:
    envs.make(name, frame_skip=4, colour=True)
  message = str(info.value)
  assert "'colour'" in message and "'frame_skip'" in message
  assert "'step_mul'" in message  # Lists the valid ones.


def test_game_names_map_to_rom_ids():
  env = envs.make('atari:MontezumaRevenge')
  assert env.spec.name == 'atari:MontezumaRevenge'
  assert envs.make('atari:pong').spec.name == 'atari:pong'


def test_seeds_and_num_envs():
  env = envs.make('gym:CartPole-v1', num_envs=3, seed=10)
  assert env.num_envs == 3
  with pytest.raises(ValueError, match='num_envs'):
    envs.make('gym:CartPole-v1', num_envs=0)


def test_minatar_games_are_named_and_listed():
  assert envs.make('minatar:Seaquest').spec.name == 'minatar:Seaquest'
  with pytest.raises(ValueError, match='Unknown MinAtar game') as info:
    envs.make('minatar:Pong')
  assert ('Asterix, Breakout, Freeway, Seaquest, SpaceInvaders' in
          str(info.value))


def test_atari_does_not_import_pysc2():
  code = ('import sys, envs\n'
          'envs.make("atari:Pong")\n'
          'assert "pysc2" not in sys.modules\n')
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  result = subprocess.run([sys.executable, '-c', code], cwd=root,
                          capture_output=True, text=True, timeout=60)
  assert result.returncode == 0, result.stderr


def test_registry_makes_one_task_and_sequences_go_through_envs_make():
  with pytest.raises(ValueError, match='task sequence: envs.make builds'):
    registry.make('gym:CartPole-v1,gym:Acrobot-v1')
  env = envs.make('gym:CartPole-v1,gym:Acrobot-v1', num_envs=2, task=1)
  try:
    assert env.task_name == 'gym:Acrobot-v1'
    assert env.spec.name == 'gym:CartPole-v1,gym:Acrobot-v1'
  finally:
    env.close()


def _envs_imports(module_name):
  """The envs modules a module of envs imports (read from its source)."""
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  path = os.path.join(root, 'envs', module_name + '.py')
  with open(path) as f:
    tree = ast.parse(f.read(), filename=path)
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found |= {a.name for a in node.names if a.name.startswith('envs')}
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.module.split('.')[0] == 'envs'):
      found |= {f'{node.module}.{a.name}' if node.module == 'envs' else
                node.module for a in node.names}
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value.startswith('envs.')):
      found.add(node.value)  # importlib.import_module('envs.x')
  return found


def test_imports_run_one_way_envs_multitask_registry_families():
  registry_imports = _envs_imports('registry')
  assert 'envs.multitask' not in registry_imports
  assert 'envs.multitask' in _envs_imports('__init__')
  assert 'envs.registry' in _envs_imports('multitask')
  # The families' modules, imported by name when a name asks for them.
  assert {'envs.atari', 'envs.gym_env', 'envs.minatar',
          'envs.sc2'} <= registry_imports
