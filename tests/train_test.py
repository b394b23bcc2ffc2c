"""Tests of the `clear.train` binary, run as users run it (subprocesses)."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from absl import flags
from absl.testing import flagsaver

from clear import checkpoint as checkpoint_lib
from clear import plot
from clear.analysis import curve_summary
from clear import train
from clear.algorithms import policy as policy_lib
from clear.cli import configs
from clear.cli import flags as cli_flags
from clear.cli import run_json
from clear.cli import validation
from clear.continual import schedule as schedule_lib
from clear.runtime import run_config
from clear.runtime import run_loop
from tests import train_flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(*args):
  return [sys.executable, '-m', 'clear.train', *args]


# TensorFlow's native log lines: absl's pre-initialisation warning and
# glog-style records such as 'I0000 00:00:1795523814.594992 5383 port.cc:153]'.
NATIVE_LOG_LINE = re.compile(
    r'WARNING: All log messages before absl::InitializeLog\(\)|'
    r'[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w.]+:\d+\]')


def run_binary(*args, timeout=300):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run(command(*args), cwd=ROOT, env=env, timeout=timeout,
                        capture_output=True, text=True)


def frames_done(output):
  found = re.findall(r"'num_env_frames': (\d+)", output)
  assert found, output[-3000:]
  return int(found[-1])


@pytest.mark.slow  # Minutes on 2 cores: run by .ci/run's slow step.
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
    [results] = json.load(f)['runs']
  assert results['num_episodes'] == 10
  assert results['mean'] > 100, results


@pytest.mark.parametrize('backend', [
    'local',
    # Ray's start and stop take most of its half minute: in the slow step.
    pytest.param('ray', marks=pytest.mark.slow)])
def test_a_sequence_trains_each_task_on_its_own_envs(tmp_path, backend):
  # CartPole pays +1 a step, MountainCar -1 until its 200-step limit: the
  # episodes the run logs for each task (tagged with the task it trains)
  # show which envs the actors really played, so an actor that missed the
  # switch, or an unroll of CartPole kept after it, would show here.
  result = run_binary(f'--backend={backend}', '--logdir=' + str(tmp_path),
                      '--env=gym:CartPole-v1,gym:MountainCar-v0',
                      '--frames_per_task=3000', '--eval_episodes=1',
                      '--eval_max_steps=10', '--num_actors=1',
                      '--envs_per_actor=8', timeout=400)
  assert result.returncode == 0, result.stderr[-3000:]
  assert frames_done(result.stderr) >= 6000
  assert os.path.exists(os.path.join(str(tmp_path), 'checkpoints',
                                     'checkpoint'))
  events = plot.read_scalars(str(tmp_path))
  cartpole = events['episode/gym:CartPole-v1/return'].values
  mountain_car = events['episode/gym:MountainCar-v0/return'].values
  assert len(cartpole) and np.all(cartpole > 0)
  assert len(mountain_car) >= 8 and np.all(mountain_car < 0)


@pytest.mark.parametrize('args,message', [
    (['--replay_proportion=1.0'], '--replay_proportion'),
    (['--env=mujoco:Ant'], '--env'),
    (['--batch_size=abc'], 'flag --batch_size=abc:'),  # Fails to parse.
    (['--flagfile=/no/such.flags'], '--flagfile: cannot open it:'),
    (['--log_dir=/tmp/x'], "--log_dir=/tmp/x is absl's folder for log files"),
    (['--checkpoint_interval_s=0'], '--checkpoint_interval_s must be > 0'),
    (['--log_interval_s=0'], '--log_interval_s must be > 0'),
    (['--actor_timeout_s=-1'], '--actor_timeout_s must be > 0 (got -1.0)'),
    (['--num_actors=500'], '--num_actors=500 would start that many'),
    (['--env=atari:Pong,'], 'entry 2 of the sequence is empty'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1', '--frames_per_task=10',
      '--num_task_cycles=-1'], '--num_task_cycles must be >= 1 (got -1)'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1', '--frames_per_task=-5'],
     '--frames_per_task must be >= 1 for a sequence --env (got -5)'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1', '--frames_per_task=10',
      '--segment_lengths=sometimes'], 'flag --segment_lengths=sometimes:'),
])
def test_bad_flags_give_one_message_and_no_traceback(args, message):
  result = run_binary(*args, timeout=120)
  assert result.returncode == 2
  # TensorFlow's C++ runtime may log on import before absl's logging is set
  # up (on CPUs where oneDNN's custom ops are on, whatever
  # TF_CPP_MIN_LOG_LEVEL says); those lines are not the binary's.
  lines = [line for line in result.stderr.strip().splitlines()
           if not NATIVE_LOG_LINE.match(line)]
  # The error alone (absl would print the whole flag list before it),
  # then where the flags are described.
  assert lines[0].startswith('error: ') and message in lines[0], lines
  assert lines[-1] == ('Run `python -m clear.train --helpfull` for the '
                       'flags, grouped by purpose.')
  assert len(lines) <= 3, lines
  assert 'Traceback' not in result.stderr


def test_a_resume_that_changes_settings_says_so_and_keeps_the_seed(
    tmp_path):
  logdir = tmp_path / 'run'
  common = ['--env=gym:CartPole-v1', '--backend=inline', f'--logdir={logdir}',
            '--envs_per_actor=4']
  result = run_binary(*common, '--total_environment_frames=1000', '--seed=3',
                      timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  first = json.loads((logdir / 'run.json').read_text())
  assert first['flags']['seed'] == 3 and 'history' not in first
  assert first['flags']['replay_proportion'] == 0.5
  result = run_binary(*common, '--total_environment_frames=2000', '--seed=5',
                      '--replay_proportion=0', timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert (f'--seed=5: the run in {logdir} was started with --seed=3, which '
          'a resume keeps') in result.stderr
  assert ('This resume changes --replay_proportion from 0.5 to 0.0, '
          '--total_environment_frames from 1000 to 2000') in result.stderr
  second = json.loads((logdir / 'run.json').read_text())
  assert second['flags']['seed'] == 3
  assert second['flags']['replay_proportion'] == 0.0
  [change] = second['history']
  assert change['changes'] == {'replay_proportion': [0.5, 0.0],
                               'total_environment_frames': [1000, 2000]}
  assert change['frames'] >= 1000


def test_a_flag_overridden_by_a_later_flagfile_is_warned_about(tmp_path):
  flagfile = tmp_path / 'run.flags'
  flagfile.write_text('--batch_size=32\n')
  # Refused afterwards (--log_interval_s), so that nothing trains.
  result = run_binary('--batch_size=64', f'--flagfile={flagfile}',
                      '--log_interval_s=0', timeout=120)
  assert result.returncode == 2
  assert (f'--batch_size=64 comes before --flagfile={flagfile}, which sets '
          '--batch_size=32: the later one wins.') in result.stderr


def test_impala_on_continuous_actions_points_to_sac_and_ddpg(tmp_path):
  logdir = tmp_path / 'run'
  result = run_binary('--env=gym:Pendulum-v1', f'--logdir={logdir}',
                      timeout=120)
  assert result.returncode == 2
  lines = [line for line in result.stderr.strip().splitlines()
           if line.startswith('error:')]
  assert lines == ['error: gym:Pendulum-v1 has continuous actions (action), '
                   'and the IMPALA agent acts on discrete ones: use '
                   '--algorithm=sac or --algorithm=ddpg.']
  assert 'Traceback' not in result.stderr
  assert not logdir.exists()  # A refused start writes nothing.


def test_sc2_without_the_game_says_how_to_install_it(tmp_path):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2',
             SC2PATH=str(tmp_path / 'no_game_here'))
  result = subprocess.run(
      command('--env=sc2:MoveToBeacon', '--logdir=' + str(tmp_path / 'run')),
      cwd=ROOT, env=env, timeout=120, capture_output=True, text=True)
  assert result.returncode == 2
  assert 'SC2PATH' in result.stderr and 'StarCraft II' in result.stderr
  assert 'Traceback' not in result.stderr
  assert sorted(os.listdir(tmp_path)) == []  # A refused run writes nothing.


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
    (['--rmsprop_epsilon=1e-3'], '--rmsprop_epsilon needs '
     '--optimizer=rmsprop'),
    (['--rmsprop_epsilon=0', '--optimizer=rmsprop'],
     '--rmsprop_epsilon must be a finite number > 0'),
    (['--learning_rate_warmup_frames=-1'],
     '--learning_rate_warmup_frames must be >= 0'),
    (['--learning_rate_warmup_frames=500', '--total_environment_frames=500'],
     'the rate would never reach its peak'),
    (['--algorithm=ppg', '--learning_rate_warmup_frames=10'],
     '--learning_rate_warmup_frames applies to --algorithm=impala only'),
    (['--entropy_cost_end=-0.001'], '--entropy_cost_end must be >= 0'),
    (['--algorithm=ppg', '--entropy_cost_end=0.001'],
     '--entropy_cost_end applies to --algorithm=impala only'),
    (['--algorithm=ppg', '--core=layer_norm_lstm'],
     '--core applies to --algorithm=impala only'),
    (['--algorithm=ppg', '--torso_norm=layer_norm'],
     '--torso_norm applies to --algorithm=impala only'),
    (['--algorithm=sac', '--core_size=0'], '0 (feed-forward) with '
     '--algorithm=impala'),
    (['--env=Pong'], '--env'),
    (['--init_scope=critic'], '--init_scope needs --init_from'),
    (['--algorithm=ppg', '--tau=0.1'], '--tau applies to --algorithm=ddpg/sac'),
    (['--algorithm=sac', '--replay_proportion=0.3'],
     '--replay_proportion applies to --algorithm=impala only'),
    (['--tau=0.1'], '--tau applies to --algorithm=ddpg/sac, not impala'),
    (['--algorithm=ppg', '--clip_ratio=-1'], 'clip_ratio must be > 0'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1'],
     '--frames_per_task must be >= 1'),
    (['--frames_per_task=100'], 'need a sequence --env'),
    (['--segment_lengths=random'], '--segment_lengths=random needs a '
     'sequence --env (comma-separated tasks).'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1', '--frames_per_task=100',
      '--segment_lengths=random', '--seed=-1'], '--segment_lengths=random '
     'draws the lengths from --seed, which must then be >= 0 (got -1).'),
    (['--env=gym:CartPole-v1,gym:Acrobot-v1', '--frames_per_task=100',
      '--total_environment_frames=150'], 'leave it unset for a sequence'),
    (['--replay_buffer_size=8'], '--replay_buffer_size=8 holds fewer '
     'unrolls than the 16 replayed in each batch (--batch_size=32 x '
     '--replay_proportion=0.5); give --replay_buffer_size >= 16.'),
    (['--replay_prefill_unrolls=200', '--replay_buffer_size=100'],
     '--replay_prefill_unrolls=200 exceeds --replay_buffer_size=100'),
    (['--algorithm=sac', '--env=gym:Pendulum-v1', '--replay_capacity=100'],
     'learning_starts (1000 transitions) exceeds the 96 that '
     'replay_capacity=100 holds (whole unrolls of 8)'),
    (['--mode=test', '--record=/nonexistent/clear/x.gif'],
     '--record=/nonexistent/clear/x.gif: its folder does not exist.'),
    (['--mode=test', '--record=/tmp/x.txt'], '--record=/tmp/x.txt: the '
     'format is taken from the extension, which must be .gif or .mp4'),
    (['--record_overwrite'], '--record_overwrite needs --record.'),
])
def test_validate_rejects_impossible_combinations(args, message):
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train'] + args)
    with pytest.raises(train.app.UsageError, match=re.escape(message)):
      validation.validate(flags.FLAGS)


def test_a_task_named_twice_in_a_sequence_is_said_to_be_one_task(caplog):
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=minatar:Breakout,minatar:Asterix,'
                 'minatar:Breakout', '--frames_per_task=200'])
    validation.validate(flags.FLAGS)
  assert ('--env names minatar:Breakout 2 times: they are one task (one set '
          'of envs, one evaluation curve, one set of metrics), trained in '
          'segments 1, 3 of each cycle.') in caplog.text


def test_validate_accepts_the_defaults_and_fills_family_defaults():
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong'])
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
  assert config.learner_config.step_mul == 4
  # Batches of 64 on an 80M schedule: both Pong seeds settled above +20.
  assert config.learner_config.batch_size == 64
  assert config.learner_config.num_replay == 32
  assert config.learner_config.learning_rate == 1e-3
  assert config.learner_config.optimizer == 'rmsprop'
  assert config.agent_config.core_size == 256
  # 1e-3 kills the torso's linear layer on some seeds without its norm.
  assert config.agent_config.torso_norm == 'layer_norm'
  # Long enough to learn a game; the learning rate decays over it.
  assert config.learner_config.total_environment_frames == 80_000_000
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=gym:CartPole-v1'])
    gym_config = configs.config_from_flags(flags.FLAGS)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--optimizer=adam',
                 '--batch_size=16'])
    chosen = configs.config_from_flags(flags.FLAGS)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--algorithm=ppg'])
    ppg_config = configs.config_from_flags(flags.FLAGS)
  assert gym_config.learner_config.optimizer == 'adam'
  assert gym_config.agent_config.torso_norm == 'none'
  assert chosen.agent_config.torso_norm == 'layer_norm'
  # The ports' agents have no torso norm, whatever the family.
  assert ppg_config.agent_config.torso_norm == 'none'
  assert (gym_config.learner_config.batch_size,
          gym_config.learner_config.num_replay) == (32, 16)
  assert (chosen.learner_config.batch_size,
          chosen.learner_config.num_replay) == (16, 8)
  assert gym_config.learner_config.total_environment_frames == 400_000
  assert chosen.learner_config.optimizer == 'adam'


def test_dynamic_multipliers_discount_per_frame_by_default():
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--nofixed_step_mul'])
    dynamic = configs.config_from_flags(flags.FLAGS).learner_config
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--nofixed_step_mul',
                 '--discount_per=step'])
    chosen = configs.config_from_flags(flags.FLAGS).learner_config
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong'])
    fixed = configs.config_from_flags(flags.FLAGS).learner_config
  # A step of Atari's default 4 frames keeps --discounting.
  assert (dynamic.discount_per, dynamic.discounting_step_mul) == ('frame', 4)
  assert chosen.discount_per == 'step'
  assert fixed.discount_per == 'step'


def test_port_flags_override_only_what_is_set():
  # pylint: disable-next=g-import-not-at-top
  from clear.algorithms.sac import policy as sac
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--algorithm=sac', '--env=gym:Pendulum-v1',
                 '--tau=0.01', '--batch_size=2', '--num_critics=3'])
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
  expected = sac.SACConfig(tau=0.01, batch_size=2, num_critics=3,
                           total_environment_frames=400_000)
  assert config.learner_config == expected
  # IMPALA's family defaults (gym: learning rate 3e-3, reward scale 0.1) do
  # not leak into the port; one collect feeds one update.
  assert config.envs_per_actor == 2


# --- What a user sees when something goes wrong ------------------------------


def train_in_process(logdir, *args, calls=2):
  """A tiny run made the way the binary makes it (flags -> config), in this
  process; each call trains 2 updates and writes one checkpoint."""
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', f'--logdir={logdir}', '--backend=inline',
                 '--envs_per_actor=4', '--batch_size=4', '--unroll_length=5',
                 *args])
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
  for _ in range(calls):
    run_loop.train(config, max_updates=2)
  return config


# Not the defaults (gym:CartPole-v1, LSTM 64): a binary that rebuilt the
# network from its own flags could not restore these runs.
RUN_FLAGS = ('--env=gym:CartPole-v0', '--core_size=16')


@pytest.fixture(scope='module')
def cartpole_v0_run(tmp_path_factory):
  logdir = str(tmp_path_factory.mktemp('cartpole_v0'))
  train_in_process(logdir, *RUN_FLAGS)
  return logdir


def test_test_mode_refuses_flags_that_contradict_the_run(cartpole_v0_run):
  # Another network: refused by name, before anything is built.
  result = run_binary('--mode=test', f'--logdir={cartpole_v0_run}',
                      '--core_size=32', '--algorithm=sac', timeout=120)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  errors = [line for line in result.stderr.splitlines()
            if line.startswith('error:')]
  assert len(errors) == 2, result.stderr[-3000:]
  assert errors[0].startswith("error: --algorithm='sac': the run in ")
  assert "made with algorithm='impala'" in errors[0]
  assert errors[1].startswith('error: --core_size=32: ')
  assert 'made with core_size=16' in errors[1]
  # An env of other observation and action spaces: refused by name.
  result = run_binary('--mode=test', f'--logdir={cartpole_v0_run}',
                      '--env=gym:Acrobot-v1', timeout=120)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert 'error: --env=gym:Acrobot-v1: the run in' in result.stderr
  assert 'observations vector [4]; actions action (2 choices)' in (
      result.stderr)
  assert 'cannot play' in result.stderr
  assert 'Value in checkpoint could not be found' not in result.stderr


def test_test_mode_on_an_env_of_the_same_spaces_says_so(cartpole_v0_run):
  result = run_binary('--mode=test', f'--logdir={cartpole_v0_run}',
                      '--env=gym:CartPole-v1', '--test_num_episodes=2',
                      timeout=180)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert re.search(r'--env=gym:CartPole-v1: using gym:CartPole-v1, not '
                   r'gym:CartPole-v0 .*the observation and action spaces '
                   r'are the same', result.stderr), result.stderr[-3000:]
  printed = json.loads(result.stdout)
  assert printed['env'] == 'gym:CartPole-v1'
  assert printed['num_episodes'] == 2


def test_init_from_takes_the_env_and_network_of_its_source(cartpole_v0_run,
                                                         tmp_path):
  logdir = str(tmp_path / 'new')
  result = run_binary(f'--init_from={cartpole_v0_run}', f'--logdir={logdir}',
                      '--backend=inline', '--envs_per_actor=4',
                      '--batch_size=4', '--total_environment_frames=200',
                      timeout=240)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert 'Initialised the all weights from' in result.stderr
  with open(os.path.join(cartpole_v0_run, 'run.json')) as f:
    source = json.load(f)
  with open(os.path.join(logdir, 'run.json')) as f:
    made = json.load(f)
  # The same env and network; the learner settings and the flags are the
  # new run's own.
  settings = made.pop('settings')
  source.pop('settings')
  assert made.pop('flags')['init_from'] == cartpole_v0_run
  source.pop('flags', None)
  assert made == source
  assert (settings['batch_size'], settings['total_environment_frames'],
          settings['envs_per_actor']) == (4, 200, 4)
  # A network flag that contradicts the source is refused by name.
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', f'--init_from={cartpole_v0_run}',
                 f'--logdir={tmp_path / "other"}', '--separate_critic'])
    with pytest.raises(train.app.UsageError, match='--separate_critic=True'):
      run_json.read_run_settings(flags.FLAGS)


def test_run_settings_fill_the_flags_left_unset():
  saved = {'algorithm': 'impala', 'core_size': 16, 'env': 'gym:CartPole-v0',
           'env_options': {'fixed_step_mul': True, 'step_mul': 2},
           'network': 'mlp', 'separate_critic': True}
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--mode=test', '--core_size=16'])
    settings = run_json.adopt_run_settings(flags.FLAGS, saved, '/runs/x')
    taken = (flags.FLAGS.env, flags.FLAGS.core_size, flags.FLAGS.network,
             flags.FLAGS.separate_critic, flags.FLAGS.step_mul)
    config = configs.config_from_flags(flags.FLAGS)
  assert taken == ('gym:CartPole-v0', 16, 'mlp', True, 2)
  assert settings.changed_env_flags == {}
  assert config.agent_config == policy_lib.AgentConfig('mlp', 16, True)
  assert config.env_options == {'fixed_step_mul': True, 'step_mul': 2}
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--mode=test', '--env=gym:CartPole-v1',
                 '--step_mul=1'])
    settings = run_json.adopt_run_settings(flags.FLAGS, saved, '/runs/x')
  assert settings.changed_env_flags == {'env': 'gym:CartPole-v1',
                                        'step_mul': 1}
  assert (settings.env_name, settings.env_options) == (
      'gym:CartPole-v0', saved['env_options'])


def _sequence_config(*args):
  return train_flags.parse('--env=gym:CartPole-v1,gym:Acrobot-v1',
                           '--frames_per_task=100', '--num_task_cycles=2',
                           *args)


def test_random_segment_lengths_are_part_of_the_run_identity(tmp_path):
  equal = _sequence_config('--seed=3')
  random = _sequence_config('--seed=3', '--segment_lengths=random')
  assert (equal.segment_lengths, random.segment_lengths) == ('equal',
                                                             'random')
  # The same total as the equal schedule; the schedule a function of the
  # config alone, so a resume rebuilds it.
  assert random.learner_config.total_environment_frames == 400
  schedule = run_config.task_schedule(random)
  assert schedule == run_config.task_schedule(random)
  assert schedule == schedule_lib.TaskSchedule.with_random_lengths(
      ['gym:CartPole-v1', 'gym:Acrobot-v1'], 100, 2, 3)
  assert schedule.total_frames == 400 and schedule.segment_frames != (
      100,) * 4
  assert run_config.task_schedule(equal) == schedule_lib.TaskSchedule(
      ['gym:CartPole-v1', 'gym:Acrobot-v1'], 100, 2)
  # run.json: an equal run's identity is the one it had before the flag
  # existed; a random one names it and the seed of its lengths.
  identity = run_config.run_identity(equal)
  assert not {'segment_lengths', 'segment_seed'} & set(identity)
  assert run_config.run_identity(random) == {
      **identity, 'segment_lengths': 'random', 'segment_seed': 3}
  # The same for its record of the flags.
  assert 'segment_lengths' not in equal.flags
  assert random.flags == {**equal.flags, 'segment_lengths': 'random'}
  # A resume with the other mode is refused, either way, with the flag to
  # give.
  for made, other, recorded in ((random, equal, 'random'),
                                (equal, random, 'equal')):
    logdir = str(tmp_path / recorded)
    checkpoint_lib.check_run_identity(logdir, run_config.run_identity(made))
    path = os.path.join(logdir, 'run.json')
    with open(path) as f:
      saved = json.load(f)
    run_config.check_segment_lengths(made, saved, path)
    with pytest.raises(checkpoint_lib.CheckpointError, match=re.escape(
        f'{path}: the run was made with segment_lengths={recorded!r}, not '
        f'{other.segment_lengths!r}: its segments would move. Resume with '
        f'--segment_lengths={recorded}, or use a new --logdir.')):
      run_config.check_segment_lengths(other, saved, path)
  # Test mode takes the lengths from run.json, as it takes the schedule.
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--mode=test', f'--logdir={tmp_path / "random"}'])
    run_json.read_run_settings(flags.FLAGS)
    assert (flags.FLAGS.env, flags.FLAGS.frames_per_task,
            flags.FLAGS.segment_lengths) == (
                'gym:CartPole-v1,gym:Acrobot-v1', 100, 'random')


def _atari_config(*args):
  return train_flags.parse('--env=atari:Pong', *args)


def test_a_resume_keeps_the_settings_its_run_json_records(tmp_path, caplog,
                                                         monkeypatch):
  logdir = str(tmp_path / 'run')
  # A run started with batches of 32 over 40M frames.
  old = _atari_config(f'--logdir={logdir}', '--batch_size=32',
                      '--total_environment_frames=40000000')
  checkpoint_lib.check_run_identity(
      logdir, run_config.run_identity(old), run_config.run_settings(old))
  with open(os.path.join(logdir, 'run.json')) as f:
    recorded = json.load(f)['settings']
  assert recorded == {'batch_size': 32,
                      'total_environment_frames': 40_000_000,
                      'learning_rate': 1e-3, 'optimizer': 'rmsprop',
                      'reward_scaling': 1.0, 'envs_per_actor': 32,
                      'replay_buffer_size': 10_000}
  # Its command without the flags resumes it unchanged...
  # Parsing the flags sets absl's logger to WARNING: catch its INFO here.
  infos = []
  with monkeypatch.context() as patch:
    patch.setattr(run_json.logging, 'info',
                  lambda message, *args: infos.append(message % args))
    resumed = _atari_config(f'--logdir={logdir}')
  assert resumed.learner_config.batch_size == 32
  assert resumed.learner_config.num_replay == 16
  assert resumed.learner_config.total_environment_frames == 40_000_000
  assert len(infos) == 1
  assert 'batch_size=32 (default 64)' in infos[0]
  assert 'total_environment_frames=40000000 (default 80000000)' in infos[0]
  assert 'learning_rate' not in infos[0]  # The same as today's default.
  # ... while a flag given changes it, and run.json then records that.
  longer = _atari_config(f'--logdir={logdir}',
                         '--total_environment_frames=60000000')
  assert longer.learner_config.total_environment_frames == 60_000_000
  assert longer.learner_config.batch_size == 32
  checkpoint_lib.check_run_identity(
      logdir, run_config.run_identity(longer), run_config.run_settings(longer))
  again = _atari_config(f'--logdir={logdir}')
  assert again.learner_config.total_environment_frames == 60_000_000
  with open(os.path.join(logdir, 'run.json')) as f:
    saved = json.load(f)
  assert saved['settings']['total_environment_frames'] == 60_000_000
  assert saved['core_size'] == 256  # The identity is kept as it was.
  # A new logdir takes today's defaults.
  fresh = _atari_config(f'--logdir={tmp_path / "new"}')
  assert fresh.learner_config.batch_size == 64
  # A run.json from before runs recorded their settings: today's defaults,
  # with a warning that names them.
  older = str(tmp_path / 'older')
  checkpoint_lib.check_run_identity(older, run_config.run_identity(old))
  caplog.clear()
  with caplog.at_level('WARNING'):
    legacy = _atari_config(f'--logdir={older}', '--batch_size=32')
  assert legacy.learner_config.batch_size == 32
  assert legacy.learner_config.total_environment_frames == 80_000_000
  warnings = [r.getMessage() for r in caplog.records
              if r.levelname == 'WARNING']
  assert len(warnings) == 1
  assert 'total_environment_frames=80000000' in warnings[0]
  assert 'batch_size=' not in warnings[0].split('continues with')[1].split(
      '. If')[0]


def test_a_resume_keeps_its_replay_size_and_checks_what_run_json_holds(
    tmp_path):
  logdir = str(tmp_path / 'run')
  big = _atari_config(f'--logdir={logdir}', '--replay_buffer_size=20000')
  checkpoint_lib.check_run_identity(
      logdir, run_config.run_identity(big), run_config.run_settings(big))
  assert _atari_config(f'--logdir={logdir}').replay_buffer_size == 20_000
  assert _atari_config(f'--logdir={logdir}', '--replay_buffer_size=5000'
                      ).replay_buffer_size == 5000
  # A value of the wrong type (a hand edit) is one message, not a
  # TypeError in validate.
  path = os.path.join(logdir, 'run.json')
  with open(path) as f:
    saved = json.load(f)
  saved['settings']['batch_size'] = '32'
  with open(path, 'w') as f:
    json.dump(saved, f)
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match=re.escape(f"{path}: batch_size is '32', but "
                                     '--batch_size takes an integer.')):
    _atari_config(f'--logdir={logdir}')


def test_a_kept_setting_is_validated_against_the_flags_given(tmp_path):
  # run.json records a 40M-frame schedule; a resume that leaves the schedule
  # to it but asks for 50M frames of critic pretraining is refused at once,
  # naming the kept schedule (Atari's default, 80M, would have allowed it).
  logdir = str(tmp_path / 'run')
  old = _atari_config(f'--logdir={logdir}',
                      '--total_environment_frames=40000000')
  checkpoint_lib.check_run_identity(
      logdir, run_config.run_identity(old), run_config.run_settings(old))
  result = run_binary('--env=atari:Pong', f'--logdir={logdir}',
                      '--num_critic_pretrain_frames=50000000', timeout=120)
  assert result.returncode == 2, result.stderr[-3000:]
  assert ('--num_critic_pretrain_frames (50,000,000) exceeds '
          '--total_environment_frames (40,000,000)') in result.stderr
  assert 'Traceback' not in result.stderr
  assert not checkpoint_lib.find_checkpoints(logdir)


def test_core_options_reach_the_agent_and_run_json(tmp_path):
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--core=layer_norm_lstm',
                 '--torso_norm=layer_norm', '--rmsprop_epsilon=1e-3',
                 '--learning_rate_warmup_frames=2000000',
                 '--entropy_cost_end=0.002'])
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong', '--torso_norm=none'])
    default = configs.config_from_flags(flags.FLAGS)
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--env=atari:Pong'])
    atari_default = configs.config_from_flags(flags.FLAGS)
  assert config.agent_config == policy_lib.AgentConfig(
      'auto', 256, False, 'layer_norm_lstm', 'layer_norm')
  assert default.agent_config.torso_norm == 'none'
  assert atari_default.agent_config.torso_norm == 'layer_norm'
  assert config.learner_config.rmsprop_epsilon == 1e-3
  assert default.learner_config.rmsprop_epsilon == 1e-5
  assert config.learner_config.learning_rate_warmup_frames == 2_000_000
  assert default.learner_config.learning_rate_warmup_frames == 0
  assert config.learner_config.entropy_cost_end == 0.002
  assert default.learner_config.entropy_cost_end is None
  # run.json records core options only when they are not the defaults, so
  # runs made before the options existed resume unchanged.
  identity = run_config.run_identity(config)
  assert (identity['core'], identity['torso_norm']) == (
      'layer_norm_lstm', 'layer_norm')
  assert not {'core', 'torso_norm'} & set(run_config.run_identity(default))
  # Atari's default norm is recorded, so a run made before it became the
  # default (no torso_norm in run.json) is refused to the new defaults and
  # resumes with --torso_norm=none.
  assert run_config.run_identity(atari_default)['torso_norm'] == (
      'layer_norm')
  checkpoint_lib.check_run_identity(
      str(tmp_path), run_config.run_identity(default))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match="torso_norm: checkpoint has None, flags say "
                           "'layer_norm'"):
    checkpoint_lib.check_run_identity(
        str(tmp_path), run_config.run_identity(atari_default))
  checkpoint_lib.check_run_identity(
      str(tmp_path), run_config.run_identity(default))
  # Test mode takes a saved core; a run.json without one had Sonnet's LSTM,
  # and a flag for another core is refused by name.
  saved = {'algorithm': 'impala', 'core_size': 256, 'env': 'atari:Pong',
           'network': 'auto', 'separate_critic': False}
  # The same for the torso's norm (none when run.json has none).
  for name, saved_value, other, default in (
      ('core', 'layer_norm_lstm', 'layer_norm_lstm', 'lstm'),
      ('torso_norm', 'layer_norm', 'layer_norm', 'none')):
    with flagsaver.flagsaver():
      flags.FLAGS.unparse_flags()
      flags.FLAGS(['train', '--mode=test'])
      run_json.adopt_run_settings(flags.FLAGS,
                                  dict(saved, **{name: saved_value}), '/x')
      assert getattr(flags.FLAGS, name) == saved_value
      flags.FLAGS.unparse_flags()
      flags.FLAGS(['train', '--mode=test', f'--{name}={other}'])
      with pytest.raises(train.app.UsageError,
                         match=f"--{name}='{other}': the run in /x was made "
                               f"with {name}='{default}'"):
        run_json.adopt_run_settings(flags.FLAGS, saved, '/x')
  # Test mode on such a run builds it without the norm.
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--mode=test', '--logdir=/x'])
    run_json.adopt_run_settings(flags.FLAGS, saved, '/x')
    assert configs.config_from_flags(
        flags.FLAGS).agent_config.torso_norm == 'none'
  # A layer-normalised run's checkpoint is refused to a norm-free network.
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--mode=test', '--torso_norm=none'])
    with pytest.raises(train.app.UsageError,
                       match="--torso_norm='none': the run in /x was made "
                             "with torso_norm='layer_norm'"):
      run_json.adopt_run_settings(flags.FLAGS,
                               dict(saved, torso_norm='layer_norm'), '/x')


def project_flags():
  return [name for name in flags.FLAGS if flags.FLAGS[name].name == name
          and flags.FLAGS.find_module_defining_flag(name) == cli_flags.__name__]


def test_every_flag_is_listed_once_under_a_purpose():
  listed = [n for group in cli_flags.FLAG_GROUPS.groups() for n in group.names]
  assert len(listed) == len(set(listed))
  assert sorted(listed) == sorted(project_flags())
  assert len(cli_flags.FLAG_GROUPS.groups()) >= 10


def test_no_two_flags_share_a_help_text():
  # The port flags end with their algorithms' defaults, e.g. '(ddpg: 0.95,
  # sac: 0.95)'; what comes before must still describe that flag alone.
  described = {}
  for name in project_flags():
    text = re.sub(r'\s*\((?:ddpg|ppg|sac): .*\)$', '',
                  flags.FLAGS[name].help)
    assert text, f'--{name} has no description'
    described.setdefault(text, []).append(name)
  shared = {text: names for text, names in described.items()
            if len(names) > 1}
  assert not shared, shared


def test_helpfull_lists_only_this_programs_flags_by_purpose():
  result = run_binary('--helpfull', timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  lines = result.stdout.splitlines()
  headings = [g.title + ':' for g in cli_flags.FLAG_GROUPS.groups()]
  positions = [lines.index(h) for h in headings]
  assert positions == sorted(positions)
  for group in cli_flags.FLAG_GROUPS.groups():
    for name in group.names:
      assert (f'  --{name}:' in result.stdout or
              f'  --[no]{name}:' in result.stdout), name
  listed = re.findall(r'^  --(?:\[no\])?(\w+):', result.stdout, re.M)
  assert sorted(listed) == sorted(project_flags())
  for foreign in ('tpu', 'test_srcdir', 'verbosity', 'only_check_args'):
    assert f'--{foreign}' not in result.stdout


@pytest.mark.parametrize('kind', [
    'parent_is_a_file', 'logdir_is_a_file',
    pytest.param('read_only', marks=pytest.mark.skipif(
        os.geteuid() == 0, reason='root may write anywhere'))])
def test_an_unwritable_logdir_is_refused_before_anything_starts(tmp_path,
                                                                kind):
  blocker = tmp_path / 'blocker'
  if kind == 'read_only':
    blocker.mkdir()
    blocker.chmod(0o500)
    logdir, expected = blocker / 'run', 'Permission denied'
  else:
    blocker.write_text('a file')
    logdir = blocker / 'run' if kind == 'parent_is_a_file' else blocker
    expected = f'{blocker} is a file, not a folder'
  result = run_binary(f'--logdir={logdir}', timeout=120)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert f'error: --logdir={logdir}: cannot write there' in result.stderr
  assert expected in result.stderr
  assert 'Choose another --logdir' in result.stderr
  assert 'Restored' not in result.stderr


def test_logdir_problem(tmp_path):
  assert train.logdir_problem(os.path.abspath(__file__), create=False) == (
      f'{os.path.abspath(__file__)} is a file, not a folder')
  assert train.logdir_problem(os.path.join(os.path.abspath(__file__), 'x'),
                              create=True).endswith('is a file, not a folder')
  assert 'No such file' in train.logdir_problem('/nonexistent/clear/run',
                                                create=False)
  # A folder that may be made is checked where it would be, not made.
  assert train.logdir_problem(str(tmp_path / 'a' / 'b'), create=True) is None
  assert os.listdir(tmp_path) == []


def test_a_short_run_ends_with_progress_and_runtime_summaries(tmp_path):
  # Far shorter than the 10 s log interval after its first update.
  logdir = str(tmp_path)
  result = run_binary(f'--logdir={logdir}', '--backend=inline',
                      '--envs_per_actor=4', '--batch_size=4',
                      '--unroll_length=5', '--total_environment_frames=300',
                      timeout=240)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  progress_lines = re.findall(r'\[main\] frames ([\d,]+)/300 ', result.stderr)
  assert progress_lines, result.stderr[-3000:]
  frames = frames_done(result.stderr)
  assert int(progress_lines[-1].replace(',', '')) == frames >= 300
  scalars = plot.read_scalars(logdir)
  for tag in ('runtime/env_frames_per_s', 'runtime/run_time_s',
              'runtime/num_updates', 'replay/size'):
    assert scalars[tag].steps[-1] == frames, tag
  # Losses and returns share the env-frame axis.
  assert scalars['loss/total'].steps[-1] == frames
  assert (scalars['num_env_frames'].steps ==
          scalars['num_env_frames'].values).all()


def test_test_mode_records_an_episode_as_a_gif(tmp_path, cartpole_v0_run):
  logdir = str(tmp_path / 'breakout')
  train_in_process(logdir, '--env=minatar:Breakout', '--core_size=16')
  gif = str(tmp_path / 'breakout.gif')
  result = run_binary('--mode=test', f'--logdir={logdir}',
                      '--test_num_episodes=2', f'--record={gif}',
                      timeout=180)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  match = re.search(r'Recorded (\d+) frames \(return [-\d.]+\) to (.+)\.',
                    result.stdout)
  assert match and match.group(2) == gif, result.stdout[-2000:]
  from PIL import Image  # pylint: disable=g-import-not-at-top
  with Image.open(gif) as image:
    assert image.size == (160, 160)  # MinAtar's 10x10 board, x16.
  assert json.loads(result.stdout[:result.stdout.index('Recorded')])[
      'num_episodes'] == 2
  # Asked again, it refuses the file it wrote, before playing anything.
  with open(gif, 'rb') as f:
    recorded = f.read()
  result = run_binary('--mode=test', f'--logdir={logdir}', f'--record={gif}',
                      timeout=120)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert (f'error: --record={gif}: the file exists; pass --record_overwrite '
          'to replace it, or choose another path.') in result.stderr
  assert 'num_episodes' not in result.stdout
  with open(gif, 'rb') as f:
    assert f.read() == recorded
  # A run without pictures is refused before any episode is played.
  result = run_binary('--mode=test', f'--logdir={cartpole_v0_run}',
                      f'--record={tmp_path / "cartpole.gif"}', timeout=120)
  assert result.returncode == 2, result.stderr[-3000:]
  assert 'Traceback' not in result.stderr
  assert "error: --record draws an image observation, and " in result.stderr
  assert "'gym:CartPole-v0' has none" in result.stderr
  assert not os.path.exists(tmp_path / 'cartpole.gif')


def test_test_mode_records_each_game_of_a_sequence(tmp_path):
  logdir = str(tmp_path / 'sequence')
  train_in_process(logdir, '--env=minatar:Breakout,minatar:Asterix,'
                   'minatar:Breakout', '--frames_per_task=200',
                   '--core_size=8', calls=1)
  gif = str(tmp_path / 'final.gif')
  paths = {game: str(tmp_path / f'final_{game}.gif')
           for game in ('Breakout', 'Asterix')}
  # One file of the two exists: refused by its name, nothing played.
  with open(paths['Asterix'], 'wb') as f:
    f.write(b'kept')
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--mode=test', f'--logdir={logdir}',
                 f'--record={gif}', '--env=minatar:Breakout,minatar:Asterix,'
                 'minatar:Breakout', '--frames_per_task=200'])
    with pytest.raises(train.app.UsageError, match=re.escape(
        f'--record={gif} (the recording {paths["Asterix"]}): the file '
        'exists')):
      validation.validate(flags.FLAGS)
  os.remove(paths['Asterix'])
  result = run_binary('--mode=test', f'--logdir={logdir}', f'--record={gif}',
                      '--test_num_episodes=1', '--eval_max_steps=300',
                      timeout=180)
  assert result.returncode == 0, result.stderr[-3000:]
  written = re.findall(r'Recorded \d+ frames \(return [-\d.]+(?:, cut at '
                       r'--eval_max_steps)?\) to (.+)\.', result.stdout)
  assert written == [paths['Breakout'], paths['Asterix']], result.stdout
  assert not os.path.exists(gif)
  from PIL import Image  # pylint: disable=g-import-not-at-top
  first = {}
  for game, path in paths.items():
    with Image.open(path) as image:
      first[game] = np.asarray(image.convert('RGB'))
  # Asterix's board and Breakout's bricks: two games, two pictures.
  assert not np.array_equal(first['Breakout'], first['Asterix'])


@pytest.mark.slow  # About 30 s on 2 cores: run by .ci/run's slow step.
def test_ppg_solves_cartpole_and_stays_solved(tmp_path):
  # PPG's defaults keep a solved CartPole solved (DI-engine's reach 475 and
  # then collapse, with dips between 90k and 120k frames: results/ppg).
  logdir = str(tmp_path / 'ppg')
  result = run_binary('--algorithm=ppg', '--env=gym:CartPole-v1',
                      '--backend=inline', '--total_environment_frames=200000',
                      '--seed=3', '--logdir=' + logdir, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  run = plot.load_run(logdir)
  summary = curve_summary.summarize_curve(run.train_curves['gym:CartPole-v1'],
                                 threshold=475.0)
  assert summary.frames_to_threshold is not None, summary
  assert summary.min_mean_after_threshold >= 450.0, summary
