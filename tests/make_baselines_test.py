"""results/make_baselines.py: a sequence's normalisation from single-task runs."""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'results', 'make_baselines.py')


def run_script(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='3')
  return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=env,
                        capture_output=True, text=True, timeout=300)


def write_single_task_run(logdir, name, values):
  writer = tf.summary.create_file_writer(str(logdir))
  with writer.as_default():
    for step, value in values:
      tf.summary.scalar(f'eval/{name}/return', value, step=step)
  writer.close()


def test_the_baselines_of_two_games_from_their_single_task_runs(tmp_path):
  curves = {'minatar:Breakout': [(0, 0.5), (250, 2.0), (500, 4.0),
                                 (750, 9.0), (1000, 12.0)],
            'minatar:Asterix': [(0, 0.0), (400, 3.0), (600, 5.0)]}
  for name, values in curves.items():
    write_single_task_run(tmp_path / 'runs' / name.split(':')[1], name,
                          values)
  out = tmp_path / 'baselines.json'
  args = ['--games=minatar:Breakout,minatar:Asterix',
          f'--single_task_root={tmp_path / "runs"}', '--frames=500',
          '--window=250', '--random_episodes=6', '--random_envs=3',
          f'--out={out}']
  result = run_script(*args)
  assert result.returncode == 0, result.stderr[-3000:]
  tasks = json.loads(out.read_text())['tasks']
  assert list(tasks) == ['minatar:Breakout', 'minatar:Asterix']
  # The evaluations within 250 frames of 500: (2 + 4 + 9) / 3, (3 + 5) / 2.
  assert tasks['minatar:Breakout']['high'] == 5.0
  assert tasks['minatar:Asterix']['high'] == 4.0
  assert tasks['minatar:Breakout']['curve'] == [
      [step, value] for step, value in curves['minatar:Breakout']]
  for task in tasks.values():  # A random policy scores little, >= 0 here.
    assert 0.0 <= task['low'] < 2.0
  # The same seed gives the same random returns.
  out.unlink()
  assert run_script(*args).returncode == 0
  again = json.loads(out.read_text())['tasks']
  assert [t['low'] for t in again.values()] == [
      t['low'] for t in tasks.values()]
  assert np.isfinite([t['low'] for t in tasks.values()]).all()


def test_a_missing_single_task_run_is_one_message(tmp_path):
  result = run_script('--games=atari:MsPacman',
                      f'--single_task_root={tmp_path}', '--frames=10',
                      f'--out={tmp_path / "b.json"}')
  assert result.returncode != 0
  assert 'Traceback' not in result.stderr
  assert 'error: --games=atari:MsPacman: its single-task run' in (
      result.stderr)
  assert not os.path.exists(tmp_path / 'b.json')
