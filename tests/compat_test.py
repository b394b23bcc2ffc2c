"""Logdirs written by earlier code still load: test mode plays them, and
training resumes them where they stopped.

tests/testdata/logdirs_v1 holds tiny real runs of every algorithm made with
`python -m clear.train` (see the README.md there for the commands and the
commit). For each, on a copy:
  (a) test mode plays a couple of episodes through the real binary;
  (b) a run stopped at once restores the checkpoint and writes it again:
      every variable (weights, optimizer slots, counters, random states)
      and the state beside it (replay, pending unrolls, episode statistics,
      evaluation history, actors) come out as they went in, so the weights
      before the first update are the checkpoint's;
  (c) training then goes on for two updates, counting on from the saved
      frames and updates.

Checkpoint keys follow the attribute names of the tf.Module objects a
policy saves, so renaming such an attribute, or moving state elsewhere,
fails here.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from absl.testing import flagsaver

from clear.cli import configs
from clear.cli import run_json
from clear.cli import validation
from clear.runtime import evaluation
from clear.runtime import run_loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, 'tests', 'testdata', 'logdirs_v1')

COMMON = ('--backend=inline', '--seed=1', '--envs_per_actor=4',
          '--batch_size=4')
SINGLE = ('--total_environment_frames=3000',)
OFF_POLICY = ('--core_size=16', '--learning_starts=1000',
              '--replay_capacity=1000')
# The flags each run was made with (README.md), and the flags its resume
# adds: the single-env runs ended at 3000 frames and train longer; the
# sequence was stopped in its second task and goes on with the same flags.
# SAC and DDPG resume without XLA (a setting a resume may change), which
# would compile their updates for seconds.
RUNS = {
    'impala_cartpole': (
        ('--env=gym:CartPole-v1', '--algorithm=impala', *SINGLE,
         '--core_size=16', '--replay_proportion=0.5',
         '--replay_buffer_size=40'),
        ('--total_environment_frames=4000',)),
    'impala_sequence': (
        ('--env=gym:CartPole-v1,gym:Acrobot-v1', '--algorithm=impala',
         '--frames_per_task=1500', '--core_size=0', '--replay_buffer_size=40',
         '--eval_episodes=2', '--eval_max_steps=100'),
        ()),
    'ppg_cartpole': (
        ('--env=gym:CartPole-v1', '--algorithm=ppg', *SINGLE,
         '--core_size=16'),
        ('--total_environment_frames=4000',)),
    'sac_cartpole': (
        ('--env=gym:CartPole-v1', '--algorithm=sac', *SINGLE, *OFF_POLICY),
        ('--total_environment_frames=4000', '--nojit_compile')),
    'sac_pendulum': (
        ('--env=gym:Pendulum-v1', '--algorithm=sac', *SINGLE, *OFF_POLICY),
        ('--total_environment_frames=4000', '--nojit_compile')),
    'ddpg_pendulum': (
        ('--env=gym:Pendulum-v1', '--algorithm=ddpg', *SINGLE, *OFF_POLICY),
        ('--total_environment_frames=4000', '--nojit_compile')),
}


def test_every_fixture_is_tested():
  assert sorted(os.listdir(FIXTURES)) == sorted(['README.md', *RUNS])


def start_test_mode(logdir):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen(
      [sys.executable, '-m', 'clear.train', '--mode=test',
       f'--logdir={logdir}', '--test_num_episodes=2',
       '--eval_max_steps=100'],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True)


def config_from(logdir, *args):
  """The RunConfig the binary makes from these flags (as `train._main`)."""
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', f'--logdir={logdir}', '--log_interval_s=1000',
                 *COMMON, *args])
    run_json.keep_run_settings(flags.FLAGS)
    validation.validate(flags.FLAGS)
    return configs.config_from_flags(flags.FLAGS)


def checkpoint_values(path):
  """Every value a checkpoint holds but its save counter, by key."""
  reader = tf.train.load_checkpoint(path)
  return {key: reader.get_tensor(key)
          for key in reader.get_variable_to_shape_map()
          if not key.startswith(('save_counter/',
                                 '_CHECKPOINTABLE_OBJECT_GRAPH'))}


def state_arrays(state_dir):
  """The arrays of a state-N folder, by relative path and key (the run's
  running time excepted, which a resume extends)."""
  arrays = {}
  for path in sorted(glob.glob(os.path.join(state_dir, '**', '*.np[yz]'),
                               recursive=True)):
    name = os.path.relpath(path, state_dir)
    if path.endswith('.npy'):
      arrays[name] = np.load(path, allow_pickle=False)
    else:
      with np.load(path, allow_pickle=False) as loaded:
        arrays.update({f'{name}:{k}': loaded[k] for k in loaded.files
                       if k != 'run_time_s'})
  return arrays


def assert_same(a, b, what):
  assert sorted(a) == sorted(b), what
  different = [k for k in a if not (a[k].dtype == b[k].dtype and
                                    np.array_equal(a[k], b[k]))]
  assert not different, f'{what} differ: {different}'


def counter(values, name):
  """The one counter `name` of a checkpoint, wherever its owner keeps it."""
  found = [v for k, v in values.items()
           if k.endswith(f'{name}/.ATTRIBUTES/VARIABLE_VALUE')]
  assert len(found) == 1, (name, sorted(values))
  return int(found[0])


@pytest.mark.parametrize('name', sorted(RUNS))
def test_logdir_of_an_earlier_version_tests_and_resumes(name, tmp_path):
  run_flags, resume_flags = RUNS[name]
  fixture = os.path.join(FIXTURES, name)
  logdir = str(tmp_path / name)
  shutil.copytree(fixture, logdir)
  saved = checkpoint_values(os.path.join(logdir, 'checkpoints', 'ckpt-1'))
  saved_state = state_arrays(os.path.join(logdir, 'checkpoints', 'state-1'))
  frames = counter(saved, 'num_env_frames')
  # (a) runs beside (b) and (c), on a copy of its own.
  test_logdir = str(tmp_path / 'test_mode')
  shutil.copytree(fixture, test_logdir)
  tested = start_test_mode(test_logdir)
  try:
    config = config_from(logdir, *run_flags, *resume_flags)
    # (b) Restored and stopped at once, before the learner traces its
    # updates: saved again, nothing lost or changed (optimizer slots too).
    stopped = run_loop.train(config, stop_requested=lambda: True)
    assert stopped.stopped_early
    assert stopped.num_env_frames == frames
    assert_same(saved, checkpoint_values(
        os.path.join(logdir, 'checkpoints', 'ckpt-2')), 'checkpoint values')
    # Every array comes back unchanged; inline actors now also hold the
    # envs of the tasks they had not visited, built at their start.
    resaved = state_arrays(os.path.join(logdir, 'checkpoints', 'state-2'))
    added = [k for k in resaved if k not in saved_state]
    assert all(k.startswith('actors.npz:') and '/held/task' in k
               for k in added), added
    assert_same(saved_state, {k: v for k, v in resaved.items()
                              if k in saved_state}, 'saved state')
    # (c) Two more updates, counted on from the saved ones.
    resumed = run_loop.train(config, max_updates=2)
    assert resumed.num_env_frames > frames
    assert resumed.num_updates > stopped.num_updates > 0
    if config.algorithm == 'impala':
      assert resumed.num_updates == stopped.num_updates + 2
    after = checkpoint_values(os.path.join(logdir, 'checkpoints', 'ckpt-3'))
    assert counter(after, 'num_env_frames') == resumed.num_env_frames
  finally:
    out, err = tested.communicate(timeout=300)
  assert tested.returncode == 0, err[-3000:]
  assert 'Traceback' not in err
  printed = json.loads(out)
  [written] = evaluation.read_test_results(test_logdir)
  assert printed['checkpoint'].endswith(os.path.join('checkpoints', 'ckpt-1'))
  if ',' in printed['env']:  # A sequence plays every task.
    assert sorted(printed['tasks']) == sorted(printed['env'].split(','))
    counts = [t['num_episodes'] for t in written['tasks'].values()]
    assert counts == [2] * len(counts)
  else:
    assert printed['num_episodes'] == written['num_episodes'] == 2
