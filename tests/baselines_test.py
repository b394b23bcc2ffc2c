"""Tests for clear.continual.baselines: a sequence's normalisation from
single-task runs."""

import json

import numpy as np
import pytest
import tensorflow as tf

from clear.continual import baselines
from clear.continual import metrics as continual_metrics

CURVES = {'minatar:Breakout': [(0, 0.5), (250, 2.0), (500, 4.0),
                               (750, 9.0), (1000, 12.0)],
          'minatar:Asterix': [(0, 0.0), (400, 3.0), (600, 5.0)]}


def write_single_task_run(logdir, name, values):
  writer = tf.summary.create_file_writer(str(logdir))
  with writer.as_default():
    for step, value in values:
      tf.summary.scalar(f'eval/{name}/return', value, step=step)
  writer.close()


def single_task_runs(root):
  """Writes the runs of CURVES under `root`; returns {game: logdir}."""
  logdirs = {}
  for name, values in CURVES.items():
    logdirs[name] = str(root / name.split(':')[1])
    write_single_task_run(logdirs[name], name, values)
  return logdirs


def test_the_baselines_of_two_games_from_their_single_task_runs(tmp_path):
  logdirs = single_task_runs(tmp_path / 'runs')
  games = ['minatar:Breakout', 'minatar:Asterix']
  made, table, notes = baselines.make_baselines(
      games, logdirs, frames=500, window=250, random_episodes=6,
      random_envs=3)
  out = tmp_path / 'baselines.json'
  assert baselines.write_baselines(str(out), made, notes) == str(out)
  written = json.loads(out.read_text())
  tasks = written['tasks']
  assert list(tasks) == games
  # The evaluations within 250 frames of 500: (2 + 4 + 9) / 3, (3 + 5) / 2.
  assert tasks['minatar:Breakout']['high'] == 5.0
  assert tasks['minatar:Asterix']['high'] == 4.0
  assert tasks['minatar:Breakout']['curve'] == [
      [step, value] for step, value in CURVES['minatar:Breakout']]
  for task in tasks.values():  # A random policy scores little, >= 0 here.
    assert 0.0 <= task['low'] < 2.0
  assert np.isfinite([t['low'] for t in tasks.values()]).all()
  assert table['minatar:Breakout'] == {
      'random': made.normalization['minatar:Breakout'][0],
      'single_task': 5.0, 'single_task_evaluations': 3}
  assert table['minatar:Asterix']['single_task_evaluations'] == 2
  assert written['notes'] == notes
  assert notes[2].endswith(f'({tmp_path / "runs"}).')
  # What it wrote reads back as the Baselines it returned.
  assert continual_metrics.read_baselines(str(out)) == made
  # The same seed gives the same random returns.
  again, _, _ = baselines.make_baselines(
      games, logdirs, frames=500, window=250, random_episodes=6,
      random_envs=3)
  assert again == made


def test_the_random_return_is_seeded():
  first = baselines.random_return('minatar:Breakout', 4, 2, seed=3)
  assert first == baselines.random_return('minatar:Breakout', 4, 2, seed=3)
  assert 0.0 <= first < 2.0
  with pytest.raises(ValueError, match='at least 1 episode'):
    baselines.random_return('minatar:Breakout', 0, 2, seed=3)


def test_a_missing_single_task_run_names_the_game(tmp_path):
  with pytest.raises(ValueError,
                     match='--games=atari:MsPacman: its single-task run'):
    baselines.make_baselines(['atari:MsPacman'],
                             {'atari:MsPacman': str(tmp_path / 'MsPacman')},
                             frames=10, window=5)
  with pytest.raises(ValueError,
                     match='--games=atari:MsPacman: no single-task run'):
    baselines.make_baselines(['atari:MsPacman'], {}, frames=10, window=5)


def test_a_run_without_the_game_names_the_missing_tag(tmp_path):
  logdirs = single_task_runs(tmp_path)
  with pytest.raises(ValueError, match=(
      'Breakout has no eval/minatar:Asterix/return: run it with '
      '--eval_interval_frames')):
    baselines.make_baselines(['minatar:Asterix'],
                             {'minatar:Asterix': logdirs['minatar:Breakout']},
                             frames=500, window=250)


def test_a_run_without_evaluations_near_the_frames_is_refused(tmp_path):
  logdirs = single_task_runs(tmp_path)
  with pytest.raises(ValueError,
                     match='no evaluation within 100 frames of 2000'):
    baselines.make_baselines(['minatar:Breakout'], logdirs, frames=2000,
                             window=100)
