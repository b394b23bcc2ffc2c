"""Tests of the MinAtar family (envs.minatar) on the real games.

`MinAtarEnv` plays through a `minatar.Environment`; the reference is a
second one built and driven here by hand, so the comparisons check the
wrapper's plumbing: options and seed passed on, boards converted, rewards
summed over repeated frames, episode ends and resets, action indices.
"""

import json
import os
import re
import subprocess
import sys

import minatar
import numpy as np
import pytest

from clear import plot
from clear import snapshot
from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.impala import learner as learner_lib
from clear.runtime import run_config
from clear.runtime import run_loop
import envs
from envs import minatar as minatar_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHANNELS = {'Asterix': 4, 'Breakout': 4, 'Freeway': 7, 'Seaquest': 10,
            'SpaceInvaders': 6}
# MinAtar's full action set: no-op, left, up, right, down, fire.
_LEFT, _UP, _RIGHT = 1, 2, 3
_BREAKOUT_PADDLE = 0  # Breakout's channel of the paddle (row 9).


def _random_actions(num_steps, num_envs, seed=0, num_actions=6):
  return np.random.default_rng(seed).integers(num_actions,
                                              size=(num_steps, num_envs))


@pytest.mark.parametrize('game', sorted(CHANNELS))
def test_spec_reset_and_step_shapes_and_dtypes(game):
  env = envs.make(f'minatar:{game}', num_envs=3, seed=0)
  spec = env.spec
  board = (10, 10, CHANNELS[game])
  assert spec.name == f'minatar:{game}'
  assert dict(spec.observation_spec) == {
      'board': types.ArraySpec(board, np.bool_)}
  assert dict(spec.action_spec) == {'action': types.DiscreteSpec(6)}
  first = env.reset()
  assert first.observation['board'].shape == (3,) + board
  assert first.observation['board'].dtype == np.bool_
  assert first.observation['board'].any()  # The player is on the board.
  for actions in _random_actions(50, 3):
    out = env.step({'action': actions})
    assert out.observation['board'].shape == (3,) + board
    assert out.observation['board'].dtype == np.bool_
    assert out.reward.dtype == np.float32 and out.reward.shape == (3,)
    assert out.done.dtype == bool and out.truncated.dtype == bool
    assert np.all(out.reward >= 0)  # MinAtar only ever pays.


def _compare_with_reference(game, options, reference_args, seed,
                            num_steps, frames_per_step=None):
  """Plays `MinAtarEnv(game, seed, **options)` and a hand-driven
  `minatar.Environment(game_id, *reference_args)` seeded alike with the
  same random actions, and checks every agent step. `frames_per_step`:
  a fixed step_mul, or None for a dynamic one (the action's 'step_mul'
  head + 1 frames). Returns the number of episodes that ended."""
  reference = minatar.Environment(minatar_env.game_id(game), *reference_args)
  reference.seed(seed % 2**32)
  reference.reset()
  env = minatar_env.MinAtarEnv(game, seed=seed, **options)
  # The env's action index i is MinAtar's action `action_ids[i]`.
  action_ids = (reference.minimal_action_set()
                if options.get('minimal_action_set') else list(range(6)))
  first = env.reset()['board']
  assert first.dtype == np.bool_ and first.shape == (10, 10, CHANNELS[game])
  np.testing.assert_array_equal(first, reference.state())
  rng = np.random.default_rng(1)
  episodes = 0
  for i in range(num_steps):
    action = {'action': rng.integers(len(action_ids))}
    repeats = frames_per_step
    if repeats is None:
      action['step_mul'] = rng.integers(options['max_step_mul'])
      repeats = action['step_mul'] + 1
    reward, terminal, frames = 0.0, False, 0
    while frames < repeats and not terminal:
      r, terminal = reference.act(action_ids[action['action']])
      reward += r
      frames += 1
    transition = env.step(action)
    assert transition.reward == reward, i
    assert transition.terminated == terminal, i
    assert not transition.truncated and transition.frames == frames, i
    assert transition.observation['board'].dtype == np.bool_
    np.testing.assert_array_equal(transition.observation['board'],
                                  reference.state(), err_msg=f'step {i}')
    if terminal:
      episodes += 1
      reference.reset()
      np.testing.assert_array_equal(env.reset()['board'], reference.state())
  return episodes


@pytest.mark.parametrize('game', sorted(CHANNELS))
def test_frames_match_minatar_environment(game):
  # The reference with MinAtar's own defaults (sticky 0.1, ramping on) and
  # the env with none: equal boards, rewards and terminals over several
  # episodes also show that the family's defaults are MinAtar's.
  num_steps = 6000 if game == 'Freeway' else 3000
  assert _compare_with_reference(game, {}, (), 7, num_steps, 1) >= 2


@pytest.mark.parametrize('game,options,reference_args,frames_per_step', [
    ('Asterix', {'sticky_action_prob': 0.5, 'difficulty_ramping': False},
     (0.5, False), 1),
    ('Seaquest', {'step_mul': 3}, (), 3),
    ('SpaceInvaders', {'fixed_step_mul': False, 'max_step_mul': 4}, (),
     None),
    ('Breakout', {'minimal_action_set': True, 'step_mul': 2,
                  'sticky_action_prob': 0.0}, (0.0,), 2),
], ids=['sticky_no_ramping', 'step_mul_3', 'dynamic_step_mul',
        'minimal_step_mul_2'])
def test_options_match_minatar_environment(game, options, reference_args,
                                           frames_per_step):
  # A seed above 2**32 is taken modulo 2**32 (RandomState's range).
  episodes = _compare_with_reference(game, options, reference_args,
                                     2**32 + 11, 1500, frames_per_step)
  assert episodes >= 2


def _paddle(board):
  return int(np.flatnonzero(board[9, :, _BREAKOUT_PADDLE])[0])


@pytest.mark.parametrize('options,low,high', [
    ({}, 0.06, 0.12),  # MinAtar's default, 0.1.
    ({'sticky_action_prob': 0.0}, 0.0, 0.0),
])
def test_sticky_actions_are_on_by_default(options, low, high):
  # The agent alternates left and right; where the paddle moved against
  # the chosen direction, the previous frame's action was repeated. With
  # probability p of repeating, that is p * 1 / (1 + p) of the frames
  # (0.091 for p = 0.1): a repeat of an action that was itself repeated
  # goes the chosen way.
  env = minatar_env.MinAtarEnv('Breakout', seed=3, **options)
  position = _paddle(env.reset()['board'])
  against = counted = 0
  for t in range(4000):
    chosen = _LEFT if t % 2 else _RIGHT
    transition = env.step({'action': chosen})
    if transition.terminated:
      position = _paddle(env.reset()['board'])
      continue
    new = _paddle(transition.observation['board'])
    if 0 < position < 9:  # At a wall one direction cannot move.
      counted += 1
      against += (new - position) != (-1 if chosen == _LEFT else 1)
    position = new
  assert counted > 2000
  assert low <= against / counted <= high


@pytest.mark.parametrize('options,ramps', [({}, True),
                                           ({'difficulty_ramping': False},
                                            False)])
def test_difficulty_ramping_is_on_by_default(options, ramps):
  # Asterix speeds up every 100 frames an episode lasts; MinAtar's
  # `difficulty_ramp()` counts the steps.
  env = minatar_env.MinAtarEnv('Asterix', seed=0, **options)
  env.reset()
  highest = 0
  for action in _random_actions(5000, 1)[:, 0]:
    transition = env.step({'action': action})
    highest = max(highest, env.game.difficulty_ramp())
    if transition.terminated:
      env.reset()
  assert (highest > 0) == ramps


def test_seeding_is_reproducible():
  def play(seed):
    env = envs.make('minatar:Seaquest', num_envs=2, seed=seed)
    boards, rewards, dones = [env.reset().observation['board']], [], []
    for actions in _random_actions(400, 2):
      out = env.step({'action': actions})
      boards.append(out.observation['board'])
      rewards.append(out.reward)
      dones.append(out.done)
    return np.array(boards), np.array(rewards), np.array(dones)

  first, again, other = play(5), play(5), play(6)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a, b)
  assert first[2].any()  # Episodes ended (and restarted) within the run.
  assert not np.array_equal(first[0], other[0])
  # The envs of a batch have seeds seed, seed + 1: they differ too.
  assert not np.array_equal(first[0][:, 0], first[0][:, 1])


@pytest.mark.parametrize('game', sorted(CHANNELS))
def test_a_restored_game_continues_exactly_across_episode_ends(tmp_path,
                                                                game):
  # Each round, `copy` first plays other actions, so only the restored
  # state (game attributes, generator, last action for sticky actions) can
  # make the two agree afterwards; episode ends fall inside the compared
  # steps.
  options = {'max_episode_frames': 300} if game == 'Freeway' else {}
  original = envs.make(f'minatar:{game}', num_envs=2, seed=1, **options)
  copy = envs.make(f'minatar:{game}', num_envs=2, seed=2, **options)
  original.reset()
  copy.reset()
  rng = np.random.default_rng(0)
  path = str(tmp_path / 'env.npz')
  ends = 0
  for _ in range(12):
    for _ in range(20):
      original.step({'action': rng.integers(6, size=2)})
      copy.step({'action': rng.integers(6, size=2)})
    snapshot.save(path, original.get_state())  # Through a real file.
    copy.set_state(snapshot.load(path))
    for _ in range(120):
      actions = rng.integers(6, size=2)
      expected = original.step({'action': actions})
      got = copy.step({'action': actions})
      np.testing.assert_array_equal(got.observation['board'],
                                    expected.observation['board'])
      np.testing.assert_array_equal(got.reward, expected.reward)
      np.testing.assert_array_equal(got.done, expected.done)
      np.testing.assert_array_equal(got.info.episode_return,
                                    expected.info.episode_return)
      ends += int(expected.done.sum())
  assert ends >= 2


def test_a_state_of_another_game_is_rejected():
  state = envs.make('minatar:Breakout').get_state()
  with pytest.raises(ValueError, match="game 'breakout'.*'asterix'"):
    envs.make('minatar:Asterix').set_state(state)


@pytest.mark.parametrize('name', ['minatar:Pong', 'minatar:breakout2',
                                  'minatar:Breakout,minatar:Pacman'])
def test_an_unknown_game_lists_the_five(name):
  with pytest.raises(ValueError, match='Unknown MinAtar game') as info:
    envs.make(name)
  for game in CHANNELS:
    assert game in str(info.value)


def test_snake_case_names_are_minatars_modules():
  env = envs.make('minatar:space_invaders')
  assert env.envs[0].spec.name == 'minatar:SpaceInvaders'


def test_a_missing_package_says_how_to_install_it(monkeypatch):
  monkeypatch.setitem(sys.modules, 'minatar', None)  # `import` now fails.
  with pytest.raises(minatar_env.MinAtarNotInstalledError,
                     match=r'^MinAtar is not installed\. Install the extra: '
                     r'pip install "clear-rl\[minatar\]"') as info:
    envs.make('minatar:Breakout')
  # One message: no ImportError chained behind it.
  assert info.value.__cause__ is None and info.value.__suppress_context__


def test_an_unsupported_version_is_named(monkeypatch):
  monkeypatch.setattr(minatar_env.importlib.metadata, 'version',
                      lambda name: '1.1.0')
  with pytest.raises(minatar_env.MinAtarNotInstalledError,
                     match=r'minatar 1\.1\.0 is installed; clear supports '
                     r'minatar>=1\.0\.15,<1\.1') as info:
    envs.make('minatar:Breakout')
  assert 'not installed' not in str(info.value)


def test_importing_envs_does_not_import_minatar():
  # The family imports `minatar` (and with it matplotlib) only when it
  # builds an env.
  code = ('import sys, envs, envs.minatar\n'
          'assert "minatar" not in sys.modules\n'
          'envs.make("minatar:Seaquest")\n'
          'assert "minatar" in sys.modules\n')
  result = subprocess.run([sys.executable, '-c', code], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr


def test_minimal_action_sets_map_into_the_full_set():
  env = minatar_env.MinAtarEnv('Breakout', seed=0, minimal_action_set=True,
                               sticky_action_prob=0.0)
  assert env.spec.action_spec['action'] == types.DiscreteSpec(3)
  assert env.action_ids == [0, _LEFT, _RIGHT]
  position = _paddle(env.reset()['board'])
  transition = env.step({'action': 2})  # Index 2 is MinAtar's 'right'.
  assert _paddle(transition.observation['board']) == position + 1
  with pytest.raises(ValueError, match=r'outside \[0, 3\)'):
    env.step({'action': 3})


def test_max_episode_frames_truncates():
  env = envs.make('minatar:Freeway', num_envs=1, max_episode_frames=25)
  env.reset()
  dones = []
  for t in range(60):
    out = env.step({'action': np.array([_UP])})
    dones.append(out.done[0])
    if out.done[0]:
      assert out.truncated[0] and out.info.episode_frames[0] == 25
  assert np.flatnonzero(dones).tolist() == [24, 49]
  with pytest.raises(ValueError, match='max_episode_frames'):
    envs.make('minatar:Freeway', max_episode_frames=0)


def test_a_sequence_shares_the_six_actions_and_pads_channels():
  name = 'minatar:Breakout,minatar:Freeway'
  breakout = envs.make(name, num_envs=2, seed=4, task=0)
  freeway = envs.make(name, num_envs=2, seed=4, task=1)
  plain = envs.make('minatar:Freeway', num_envs=2, seed=4)
  for env in (breakout, freeway):
    assert env.spec.observation_spec['board'] == types.ArraySpec(
        (10, 10, 7), np.bool_)
    assert env.spec.action_spec['action'] == types.DiscreteSpec(
        6, mask_key='action_mask')
  first = breakout.reset().observation
  np.testing.assert_array_equal(first['action_mask'], np.ones([2, 6]))
  assert first['board'][..., :4].any() and not first['board'][..., 4:].any()
  np.testing.assert_array_equal(freeway.reset().observation['board'],
                                plain.reset().observation['board'])
  for actions in _random_actions(100, 2):
    out = freeway.step({'action': actions})
    expected = plain.step({'action': actions})
    np.testing.assert_array_equal(out.observation['board'],
                                  expected.observation['board'])
    np.testing.assert_array_equal(out.reward, expected.reward)
    assert not breakout.step({'action': actions}).observation['board'][
        ..., 4:].any()


def test_a_sequence_of_minimal_sets_masks_per_game():
  # Breakout's minimal set is (no-op, left, right), Freeway's (no-op, up,
  # down): the union is the first five actions, each masked where its game
  # lacks it.
  name = 'minatar:Breakout,minatar:Freeway'
  breakout = envs.make(name, task=0, minimal_action_set=True)
  freeway = envs.make(name, task=1, minimal_action_set=True)
  assert breakout.spec.action_spec['action'].num_values == 5
  np.testing.assert_array_equal(
      breakout.reset().observation['action_mask'][0], [1, 1, 0, 1, 0])
  np.testing.assert_array_equal(
      freeway.reset().observation['action_mask'][0], [1, 0, 1, 0, 1])
  with pytest.raises(ValueError, match='not available'):
    breakout.step({'action': np.array([_UP])})


def test_a_minatar_sequence_trains_and_evaluates_every_game(tmp_path):
  # Through the run loop (inline): Breakout then Freeway, each evaluated at
  # the start, at the switch and at the end.
  name = 'minatar:Breakout,minatar:Freeway'
  config = run_config.RunConfig(
      env_name=name, env_options={}, algorithm='impala',
      agent_config=policy_lib.AgentConfig('auto', 16),
      learner_config=learner_lib.LearnerConfig(
          batch_size=2, num_replay=1, unroll_length=5,
          total_environment_frames=200),
      logdir=str(tmp_path), backend='inline', envs_per_actor=2,
      frames_per_task=100, num_task_cycles=1, eval_episodes=1,
      eval_max_steps=20, log_interval_s=0.0)
  result = run_loop.train(config)
  assert result.num_env_frames >= 200
  scalars = plot.read_scalars(str(tmp_path))
  for task in name.split(','):
    steps = [int(s) for s in scalars[f'eval/{task}/return'].steps]
    assert len(steps) == 3 and steps[0] == 0, steps
  with open(os.path.join(str(tmp_path), 'continual_metrics.json')) as f:
    assert set(json.load(f)['per_task']) == set(name.split(','))


def _run_binary(*args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run([sys.executable, '-m', 'clear.train', *args],
                        cwd=ROOT, env=env, timeout=timeout,
                        capture_output=True, text=True)


def test_clear_train_runs_a_minatar_game(tmp_path):
  logdir = str(tmp_path / 'run')
  result = _run_binary('--env=minatar:Breakout', '--backend=inline',
                       f'--logdir={logdir}', '--total_environment_frames=1000',
                       '--batch_size=4', '--unroll_length=10',
                       '--envs_per_actor=4', '--log_interval_s=1')
  assert result.returncode == 0, result.stderr[-3000:]
  frames = re.findall(r"'num_env_frames': (\d+)", result.stderr)
  assert frames and int(frames[-1]) >= 1000, result.stderr[-3000:]
  with open(os.path.join(logdir, 'run.json')) as f:
    assert json.load(f)['env'] == 'minatar:Breakout'
  assert os.path.exists(os.path.join(logdir, 'checkpoints', 'checkpoint'))


def test_clear_train_names_an_unknown_minatar_game(tmp_path):
  result = _run_binary('--env=minatar:Pong', f'--logdir={tmp_path}',
                       timeout=300)
  assert result.returncode == 2
  assert 'Unknown MinAtar game' in result.stderr
  assert 'SpaceInvaders' in result.stderr
  assert 'Traceback' not in result.stderr
