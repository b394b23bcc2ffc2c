"""Tests for envs.make: name parsing and the clear ValueErrors."""

import os
import subprocess
import sys

import pytest

import envs


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
