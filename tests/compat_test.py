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

A run.json may name settings that this version no longer has
(`run_config.REMOVED_SETTINGS`): at the values this version runs, as the
kept runs under results/ record them, the run tests and resumes without a
word about them; at another value (in run.json, or in a flagfile) the
binary stops with one message naming the setting, its value and the commit
that last ran it, and leaves every file as it was.
"""

import glob
import hashlib
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

from clear import checkpoint as checkpoint_lib
from clear.cli import configs
from clear.cli import run_json
from clear.cli import validation
from clear.continual import methods as continual_methods
from clear.runtime import evaluation
from clear.runtime import run_config
from clear.runtime import run_loop
from tests import train_flags

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
  return train_flags.parse(f'--logdir={logdir}', '--log_interval_s=1000',
                           *COMMON, *args)


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
    # envs of the tasks they had not visited, built at their start, and
    # gym envs keep the seed of their first reset.
    resaved = state_arrays(os.path.join(logdir, 'checkpoints', 'state-2'))
    added = [k for k in resaved if k not in saved_state]
    assert all(k.startswith('actors.npz:') and (
        '/held/task' in k or k.endswith('/seed')) for k in added), added
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


def test_a_sequence_of_an_earlier_version_has_equal_segments(tmp_path):
  # Its run.json and tasks.json name no segment lengths: they are equal, its
  # identity is this version's with --segment_lengths=equal, and a resume
  # with random lengths is refused before anything is written.
  logdir = str(tmp_path / 'impala_sequence')
  shutil.copytree(os.path.join(FIXTURES, 'impala_sequence'), logdir)
  run_flags = RUNS['impala_sequence'][0]
  equal = config_from(logdir, *run_flags)
  assert run_config.task_schedule(equal).boundaries() == [
      (0, 1500, 0), (1500, 3000, 1)]
  with open(os.path.join(logdir, 'tasks.json')) as f:
    assert run_config.task_schedule(equal).to_json() == json.load(f)
  checkpoint_lib.verify_run_identity(logdir, run_config.run_identity(equal))
  before = files_of(logdir)
  random = config_from(logdir, *run_flags, '--segment_lengths=random')
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match="made with segment_lengths='equal', not "
                           "'random'.*--segment_lengths=equal"):
    run_loop.train(random)
  assert files_of(logdir) == before


# The settings of earlier versions that this one no longer has, at the
# values every run had unless they were set (the ones this version runs),
# as run.json's `flags` records them.
REMOVED_AT_DEFAULTS = {'lstm_init': 'fan_in', 'torso_grad_scale': 1.0,
                       'torso_activation': 'relu',
                       'rmsprop_epsilon_outside': False,
                       'rmsprop_fan_in_reference': 0}
IMPALA_CARTPOLE = ('--backend=inline', '--seed=1', '--envs_per_actor=4',
                   '--batch_size=4', *RUNS['impala_cartpole'][0])
KEPT_RUNS = sorted(glob.glob(os.path.join(ROOT, 'results', '*', 'runs', '*',
                                          'run.json')))


def run_binary(*args):
  """Starts `python -m clear.train` with `args` (see `finish`)."""
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen([sys.executable, '-m', 'clear.train', *args],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)


def finish(process):
  """(exit status, stdout, stderr) of a `run_binary` process."""
  out, err = process.communicate(timeout=300)
  return process.returncode, out, err


def files_of(folder):
  """{path under `folder`: sha256 of its bytes, or 'folder'}, for every
  file and folder under it ({} when it does not exist)."""
  found = {}
  for parent, folders, files in os.walk(folder):
    for name in folders:
      found[os.path.relpath(os.path.join(parent, name), folder)] = 'folder'
    for name in files:
      path = os.path.join(parent, name)
      with open(path, 'rb') as f:
        found[os.path.relpath(path, folder)] = hashlib.sha256(
            f.read()).hexdigest()
  return found


def fixture_copy(tmp_path, name, **changes):
  """A copy of the impala_cartpole fixture at tmp_path/name whose run.json
  has the top-level keys `changes` too."""
  logdir = str(tmp_path / name)
  shutil.copytree(os.path.join(FIXTURES, 'impala_cartpole'), logdir)
  path = os.path.join(logdir, 'run.json')
  with open(path) as f:
    saved = json.load(f)
  with open(path, 'w') as f:
    json.dump({**saved, **changes}, f, indent=2, sort_keys=True)
  return logdir


def recorded_flags(logdir, *args):
  """run.json's `flags` of a run made with `args` by an earlier version:
  this version's record and the removed settings at their defaults."""
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', f'--logdir={logdir}', *args])
    return {**configs.recorded_flags(flags.FLAGS), **REMOVED_AT_DEFAULTS}


def test_a_run_json_with_removed_settings_at_their_defaults_tests_and_resumes(
    tmp_path):
  # As the MinAtar runs record them: `flags` names every removed setting
  # at its default, and `history` an earlier change of one.
  history = [{'time': '2026-12-01 10:00:00', 'frames': 1000,
              'changes': {'rmsprop_fan_in_reference': [256, 0]}}]
  record = recorded_flags(str(tmp_path / 'train'), *IMPALA_CARTPOLE,
                          '--log_interval_s=1000')
  logdirs = {name: fixture_copy(tmp_path, name, history=history, flags=record)
             for name in ('train', 'test')}
  resumed = run_binary(f'--logdir={logdirs["train"]}', *IMPALA_CARTPOLE,
                       '--total_environment_frames=3200',
                       '--log_interval_s=1000')
  tested = start_test_mode(logdirs['test'])
  results = {'train': finish(resumed), 'test': finish(tested)}
  for name, (code, _, err) in results.items():
    assert code == 0, (name, err[-3000:])
    assert 'Traceback' not in err
    said = [line for line in err.splitlines()
            if any(setting in line for setting in (*REMOVED_AT_DEFAULTS,
                                                   'layer_norm_all'))]
    assert not said, (name, said)
  assert json.loads(results['test'][1])['num_episodes'] == 2
  assert os.path.exists(os.path.join(logdirs['train'], 'checkpoints',
                                     'ckpt-2.index'))
  with open(os.path.join(logdirs['train'], 'run.json')) as f:
    saved = json.load(f)
  # This start's record of the flags names none of them; the history keeps
  # its entries and adds this start's one change, the identity is kept.
  assert not set(REMOVED_AT_DEFAULTS) & set(saved['flags'])
  assert saved['history'][:1] == history
  assert [entry['changes'] for entry in saved['history'][1:]] == [
      {'total_environment_frames': [3000, 3200]}]
  assert (saved['core_size'], saved['network']) == (16, 'auto')


@pytest.mark.parametrize('path', KEPT_RUNS,
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_the_kept_runs_still_resume_as_they_are(path, tmp_path, caplog):
  # Each kept run.json, in a logdir of its own, with the flags its identity
  # and its record of the flags name (those this version has, where they
  # are not the flags' defaults): read, validated, and of the same
  # identity, without a word about the removed settings some of them
  # record.
  logdir = str(tmp_path / 'run')
  os.makedirs(logdir)
  shutil.copy(path, os.path.join(logdir, 'run.json'))
  with open(path) as f:
    saved = json.load(f)
  given = {name: value for name, value in
           [*saved.items(), *saved['env_options'].items()]
           if name in flags.FLAGS and name != 'flags'}
  # The record of the flags names the settings of every method, as earlier
  # versions recorded them, at the defaults of their time; only the run's
  # own method's are flags of the run.
  method = saved.get('continual_method', 'none')
  given.update({name: value for name, value in saved.get('flags', {}).items()
                if (name not in flags.FLAGS or
                    value != flags.FLAGS[name].default) and
                (name not in continual_methods.all_settings() or
                 method in continual_methods.users_of(name))})
  if ',' in saved['env']:  # A sequence's frames follow from its schedule.
    given.pop('total_environment_frames', None)
  args = []
  for name, value in sorted(given.items()):
    if name in REMOVED_AT_DEFAULTS:
      assert value == REMOVED_AT_DEFAULTS[name], name
    elif isinstance(value, bool):
      args.append(f'--{name}' if value else f'--no{name}')
    elif value is not None:
      args.append(f'--{name}={value}')
  with flagsaver.flagsaver(), caplog.at_level('INFO'):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', *args, f'--logdir={logdir}'])
    run_json.read_run_settings(flags.FLAGS)
    run_json.keep_run_settings(flags.FLAGS)
    validation.validate(flags.FLAGS)
    config = configs.config_from_flags(flags.FLAGS)
  checkpoint_lib.verify_run_identity(logdir, run_config.run_identity(config))
  run_config.check_removed_settings(saved, path)
  run_config.check_segment_lengths(config, saved, path)
  said = [r.getMessage() for r in caplog.records
          if any(name in r.getMessage() for name in REMOVED_AT_DEFAULTS)]
  assert not said


# name -> (what the old run.json records besides the fixture's, the command:
# a resume, test mode or --init_from it, what the message names): each is
# refused with one message naming the setting and its value.
REFUSED = {
    'resume_flags': (
        {'flags': {'rmsprop_fan_in_reference': 256, 'lstm_init': 'fan_in'}},
        'train', 'rmsprop_fan_in_reference=256'),
    'resume_identity': (
        {'lstm_init': 'glorot', 'torso_grad_scale': 0.5},
        'train', "lstm_init='glorot'"),
    'test_torso_norm': (
        {'torso_norm': 'layer_norm_all'}, 'test',
        "torso_norm='layer_norm_all'"),
    'init_from_activation': (
        {'torso_activation': 'elu'}, 'init_from', "torso_activation='elu'"),
}


def test_a_run_json_with_a_removed_setting_at_another_value_is_refused(
    tmp_path):
  # Through the binary: one `error:` line naming the setting, its value
  # and the commit that last ran it; exit status 2; every file of the
  # logdir (and of an --init_from source) as it was, nothing made.
  started, before = {}, {}
  for name, (changes, mode, _) in REFUSED.items():
    logdir = fixture_copy(tmp_path, name, **changes)
    before[name] = files_of(logdir)
    if mode == 'train':
      args = [f'--logdir={logdir}', *IMPALA_CARTPOLE,
              '--total_environment_frames=4000']
    elif mode == 'test':
      args = ['--mode=test', f'--logdir={logdir}', '--test_num_episodes=1']
    else:
      args = [f'--logdir={tmp_path / "new_run"}', f'--init_from={logdir}',
              '--backend=inline', '--total_environment_frames=4000']
    started[name] = run_binary(*args)
  flagfile = tmp_path / 'old.flags'
  flagfile.write_text('--env=gym:CartPole-v1\n--normsprop_epsilon_outside\n'
                      '--torso_grad_scale=0.5\n--torso_norm=layer_norm_all\n')
  started['flagfile'] = run_binary(f'--flagfile={flagfile}',
                                   f'--logdir={tmp_path / "flagfile_run"}')
  for name, process in started.items():
    code, out, err = finish(process)
    assert code == 2, (name, err[-3000:])
    assert 'Traceback' not in err
    errors = [line for line in err.splitlines() if line.startswith('error:')]
    if name == 'flagfile':
      assert errors == [
          f'error: --flagfile={flagfile} sets --normsprop_epsilon_outside, a '
          'flag this version of clear no longer has; it always runs that '
          'way: delete the line.',
          f'error: --flagfile={flagfile} sets --torso_grad_scale=0.5, a flag '
          'this version of clear no longer has (it always runs as with '
          '--torso_grad_scale=1.0). Run it with clear at commit dfafcdd or '
          'earlier, the last version that has it.',
          f'error: --flagfile={flagfile} sets --torso_norm=layer_norm_all, a '
          'value this version of clear no longer takes for --torso_norm. Run '
          'it with clear at commit dfafcdd or earlier, the last version that '
          'has it.'], err[-3000:]
      continue
    assert len(errors) == 1, (name, err[-3000:])
    [error] = errors
    run_file = os.path.join(str(tmp_path / name), 'run.json')
    assert error.startswith(f'error: {run_file}: the run was made with '), (
        name, error)
    assert REFUSED[name][2] in error, (name, error)
    assert 'this version no longer has' in error, (name, error)
    assert error.endswith(' Use it with clear at commit dfafcdd or earlier, '
                          f'the last version that has '
                          f'{"them" if name == "resume_identity" else "it"}.')
    assert files_of(str(tmp_path / name)) == before[name], name
  assert not os.path.exists(tmp_path / 'new_run')
  assert not os.path.exists(tmp_path / 'flagfile_run')


# Sequence runs of the continual methods, made before the methods became
# modules (tests/testdata/logdirs_methods/README.md): the flags each was
# made with, and what its resume must give.
METHOD_FIXTURES = os.path.join(ROOT, 'tests', 'testdata', 'logdirs_methods')
METHOD_SEQUENCE = ('--env=gym:CartPole-v1,gym:Acrobot-v1',
                   '--algorithm=impala', '--frames_per_task=1500',
                   '--core_size=0', '--replay_buffer_size=40',
                   '--eval_episodes=2', '--eval_max_steps=100',
                   '--ewc_fisher_frames=400', '--ewc_fisher_batches=2')
METHOD_RUNS = {
    'ewc_sequence': ('--continual_method=ewc',),
    'pnc_sequence': ('--continual_method=pnc', '--noseparate_critic'),
}


def test_every_method_fixture_is_tested():
  assert sorted(os.listdir(METHOD_FIXTURES)) == sorted(
      ['README.md', 'resumed', *METHOD_RUNS])
  assert sorted(os.listdir(os.path.join(METHOD_FIXTURES, 'resumed'))) == (
      sorted(f'{name}.npz' for name in METHOD_RUNS))


@pytest.mark.parametrize('name', sorted(METHOD_RUNS))
def test_a_method_run_of_an_earlier_version_resumes_with_its_updates(
    name, tmp_path):
  # Restored and saved again unchanged; then two updates give the weights,
  # the method's state (anchors, Fishers, merged penalty, boundary count)
  # and the counters the earlier version gave from the same checkpoint.
  logdir = str(tmp_path / name)
  shutil.copytree(os.path.join(METHOD_FIXTURES, name), logdir)
  saved = checkpoint_values(os.path.join(logdir, 'checkpoints', 'ckpt-1'))
  config = config_from(logdir, *METHOD_SEQUENCE, *METHOD_RUNS[name])
  assert run_loop.train(config, stop_requested=lambda: True).stopped_early
  assert_same(saved, checkpoint_values(
      os.path.join(logdir, 'checkpoints', 'ckpt-2')), 'checkpoint values')
  run_loop.train(config, max_updates=2)
  after = checkpoint_values(os.path.join(logdir, 'checkpoints', 'ckpt-3'))
  with np.load(os.path.join(METHOD_FIXTURES, 'resumed', f'{name}.npz')) as f:
    expected = {key.replace('|', '/'): f[key] for key in f.files}
  assert set(expected) <= set(after), sorted(set(expected) - set(after))
  assert_same_updates(expected, {k: after[k] for k in expected}, saved)


# How far a float the two updates changed may lie from the earlier
# version's, as a fraction of that value's largest change. Another CPU
# (one with AVX2 only, against the fixtures' machine) picks other kernels
# that sum in another order and change the last bits of each update (up to
# 1.2e-7, against changes of 1e-3); a change in what an update computes
# moves them by far more.
UPDATE_TOLERANCE = 1e-3


def assert_same_updates(expected, after, saved):
  """Integers, and every value the updates left alone, exactly as expected;
  the floats they changed to within UPDATE_TOLERANCE of their change."""
  different = []
  for key, want in expected.items():
    got, before = after[key], saved.get(key)
    if got.dtype != want.dtype or got.shape != want.shape:
      different.append(key)
      continue
    change = 0.0
    if (np.issubdtype(want.dtype, np.floating) and before is not None and
        before.shape == want.shape):
      change = float(np.max(np.abs(want - before), initial=0.0))
    error = np.abs(got.astype(np.float64) - want.astype(np.float64))
    if np.max(error, initial=0.0) > UPDATE_TOLERANCE * change:
      different.append(key)
  assert not different, f'resumed values differ: {different}'
