"""Tests of the `clear.train` binary, run as users run it (subprocesses)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from absl import flags
from absl.testing import flagsaver

from clear import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(*args):
  return [sys.executable, '-m', 'clear.train', *args]


def run_binary(*args, timeout=300):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run(command(*args), cwd=ROOT, env=env, timeout=timeout,
                        capture_output=True, text=True)


def frames_done(output):
  found = re.findall(r"'num_env_frames': (\d+)", output)
  assert found, output[-3000:]
  return int(found[-1])


def test_cartpole_learns_stops_on_sigterm_resumes_and_tests(tmp_path):
  logdir = str(tmp_path / 'run')
  common = ['--logdir=' + logdir, '--log_interval_s=2', '--seed=1']
  # 1. Start training and stop it with SIGTERM after some progress.
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  process = subprocess.Popen(
      command(*common, '--total_environment_frames=160000'), cwd=ROOT,
      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines = []
  deadline = time.time() + 240
  for line in process.stdout:
    lines.append(line)
    match = re.search(r'frames ([\d,]+)/', line)
    if match and int(match.group(1).replace(',', '')) > 20000:
      process.send_signal(signal.SIGTERM)
      break
    assert time.time() < deadline, ''.join(lines[-20:])
  output, _ = process.communicate(timeout=120)
  output = ''.join(lines) + output
  assert process.returncode == 128 + signal.SIGTERM, output[-3000:]
  assert 'Saved checkpoint' in output
  stopped_at = frames_done(output)
  assert 20000 < stopped_at < 160000
  # 2. The same command resumes from the checkpoint and finishes.
  resumed = run_binary(*common, '--total_environment_frames=160000')
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert re.search(rf'Resuming at {stopped_at} frames', resumed.stderr), (
      resumed.stderr[-3000:])
  assert frames_done(resumed.stderr) >= 160000
  # 3. Test mode plays episodes with the trained agent: clearly above the
  # ~22 a random CartPole policy scores.
  tested = run_binary('--mode=test', '--logdir=' + logdir,
                      '--test_num_episodes=10')
  assert tested.returncode == 0, tested.stderr[-3000:]
  with open(os.path.join(logdir, 'test_results.json')) as f:
    results = json.load(f)
  assert results['num_episodes'] == 10
  assert results['mean'] > 100, results


def test_ray_backend_trains(tmp_path):
  result = run_binary('--backend=ray', '--logdir=' + str(tmp_path),
                      '--total_environment_frames=4000', '--num_actors=1',
                      '--envs_per_actor=8', timeout=400)
  assert result.returncode == 0, result.stderr[-3000:]
  assert frames_done(result.stderr) >= 4000
  assert os.path.exists(os.path.join(str(tmp_path), 'checkpoints',
                                     'checkpoint'))


@pytest.mark.parametrize('args,message', [
    (['--replay_proportion=1.0'], '--replay_proportion'),
    (['--env=mujoco:Ant'], '--env'),
])
def test_bad_flags_give_one_message_and_no_traceback(args, message):
  result = run_binary(*args, timeout=120)
  assert result.returncode != 0
  assert message in result.stderr
  assert 'Traceback' not in result.stderr


def test_sc2_without_the_game_says_how_to_install_it(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2',
             SC2PATH=str(tmp_path / 'no_game_here'))
  result = subprocess.run(
      command('--env=sc2:MoveToBeacon', '--logdir=' + str(tmp_path / 'run')),
      cwd=ROOT, env=env, timeout=120, capture_output=True, text=True)
  assert result.returncode == 2
  assert 'SC2PATH' in result.stderr and 'StarCraft II' in result.stderr
  assert 'Traceback' not in result.stderr


def test_unknown_game_gives_one_message_and_no_traceback(tmp_path):
  result = run_binary('--env=atari:NotAGame', '--logdir=' + str(tmp_path),
                      timeout=120)
  assert result.returncode == 2
  assert 'NotAGame' in result.stderr
  assert 'Traceback' not in result.stderr


@pytest.mark.parametrize('args,message', [
    (['--replay_proportion=0.99', '--batch_size=8'], 'leaving no fresh'),
    (['--replay_proportion=-0.1'], '--replay_proportion'),
    (['--replay_proportion=0', '--policy_cloning_cost=0.1'],
     '--policy_cloning_cost'),
    (['--num_critic_pretrain_frames=10', '--total_environment_frames=5'],
     '--num_critic_pretrain_frames'),
    (['--unroll_length=0'], '--unroll_length'),
    (['--nofixed_step_mul', '--step_mul=4'], '--step_mul'),
    (['--nofixed_step_mul', '--max_step_mul=0'], '--max_step_mul'),
    (['--discounting=1.5'], '--discounting'),
    (['--core_size=-1'], '--core_size must be >= 1, or 0'),
    (['--rmsprop_initial_mean_square=-1', '--optimizer=rmsprop'],
     '--rmsprop_initial_mean_square must be >= 0'),
    (['--rmsprop_initial_mean_square=0'], 'needs --optimizer=rmsprop'),
    (['--algorithm=sac', '--core_size=0'], '0 (feed-forward) with '
     '--algorithm=impala'),
    (['--env=Pong'], '--env'),
    (['--init_scope=critic'], '--init_scope needs --init_from'),
    (['--algorithm=ppg', '--tau=0.1'], '--tau applies to --algorithm=ddpg/sac'),
    (['--algorithm=sac', '--replay_proportion=0.3'],
     '--replay_proportion applies to --algorithm=impala only'),
    (['--tau=0.1'], '--tau applies to --algorithm=ddpg/sac, not impala'),
    (['--algorithm=ppg', '--clip_ratio=-1'], 'clip_ratio must be > 0'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1'], '--frames_per_task >= 1'),
    (['--frames_per_task=100'], 'need a sequence --env'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1', '--frames_per_task=100',
      '--total_environment_frames=150'], 'leave it unset for a sequence'),
])
def test_validate_rejects_impossible_combinations(args, message):
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train'] + args)
    with pytest.raises(train.app.UsageError, match=re.escape(message)):
      train.validate(flags.FLAGS)


def test_validate_accepts_the_defaults_and_fills_family_defaults():
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong'])
    train.validate(flags.FLAGS)
    config = train.config_from_flags(flags.FLAGS)
  assert config.learner_config.step_mul == 4
  assert config.learner_config.num_replay == 16
  assert config.learner_config.learning_rate == 6e-4
  assert config.learner_config.optimizer == 'rmsprop'
  assert config.agent_config.core_size == 256
  # Long enough to learn a game; the learning rate decays over it.
  assert config.learner_config.total_environment_frames == 40_000_000
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=gym:CartPole-v1'])
    gym_config = train.config_from_flags(flags.FLAGS)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--optimizer=adam'])
    chosen = train.config_from_flags(flags.FLAGS)
  assert gym_config.learner_config.optimizer == 'adam'
  assert gym_config.learner_config.total_environment_frames == 400_000
  assert chosen.learner_config.optimizer == 'adam'


def test_port_flags_override_only_what_is_set():
  from clear import sac  # pylint: disable=g-import-not-at-top
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--algorithm=sac', '--env=gym:Pendulum-v1',
                 '--tau=0.01', '--batch_size=2', '--num_critics=3'])
    train.validate(flags.FLAGS)
    config = train.config_from_flags(flags.FLAGS)
  expected = sac.SACConfig(tau=0.01, batch_size=2, num_critics=3,
                           total_environment_frames=400_000)
  assert config.learner_config == expected
  # IMPALA's family defaults (gym: learning rate 3e-3, reward scale 0.1) do
  # not leak into the port; one collect feeds one update.
  assert config.envs_per_actor == 2
