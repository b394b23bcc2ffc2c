"""Tests for clear.plot: reading real event files and rendering PNGs."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from clear import plot
from clear.analysis import curve_summary
from clear.continual import history as history_lib
from clear.continual import metrics as continual_metrics
from clear.continual import schedule as schedule_lib
from clear.continual import seed_stats
from clear.runtime import evaluation

TASKS = ['gym:CartPole-v1', 'gym:Acrobot-v1']
SEQUENCE = ','.join(TASKS)
PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_run(logdir, offset, with_schedule):
  """Evaluations every 50 frames over 2 tasks of 100 frames, and training
  returns twice per evaluation; values shifted by `offset`."""
  expected = {task: ([], []) for task in TASKS}
  writer = tf.summary.create_file_writer(logdir)
  with writer.as_default():
    for i, frames in enumerate(range(0, 250, 50)):
      results = {TASKS[0]: 10.0 * i + offset, TASKS[1]: -100.0 + i + offset}
      evaluation.write_eval_summaries(results, frames)
      for task, value in results.items():
        expected[task][0].append(frames)
        expected[task][1].append(value)
      for step in (frames, frames + 25):
        tf.summary.scalar(f'episode/{SEQUENCE}/return', step / 10 + offset,
                          step=step)
  writer.close()
  if with_schedule:
    schedule_lib.write_tasks_json(logdir, schedule_lib.TaskSchedule(TASKS, 100))
  return expected


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  root = tmp_path_factory.mktemp('runs')
  logdirs = [str(root / 'replay50'), str(root / 'replay0')]
  expected = [_write_run(logdirs[0], 0.0, True),
              _write_run(logdirs[1], 0.5, False)]
  return logdirs, expected


def _png_size(path):
  with open(path, 'rb') as f:
    data = f.read(24)
  assert data[:8] == PNG_SIGNATURE
  return struct.unpack('>II', data[16:24])  # IHDR width, height.


def test_extraction_returns_the_written_values(runs):
  logdirs, expected = runs
  scalars = plot.read_scalars(logdirs[0])
  curves = plot.curves(scalars, 'eval/')
  assert sorted(curves) == sorted(TASKS)
  for task in TASKS:
    np.testing.assert_array_equal(curves[task].steps, expected[0][task][0])
    np.testing.assert_array_equal(curves[task].values, expected[0][task][1])
  assert scalars['eval/mean_return'].values[1] == pytest.approx(
      (10.0 - 99.0) / 2)
  training = plot.curves(scalars, 'episode/')
  assert list(training) == [SEQUENCE]
  np.testing.assert_array_equal(training[SEQUENCE].steps,
                                np.arange(0, 250, 25))
  np.testing.assert_allclose(training[SEQUENCE].values,
                             np.arange(0, 250, 25) / 10)

  run = plot.load_run(logdirs[0])
  assert run.label == 'replay50'
  assert run.schedule == schedule_lib.TaskSchedule(TASKS, 100)
  assert plot.load_run(logdirs[1], 'b').schedule is None


def test_render_two_runs(runs, tmp_path):
  logdirs, _ = runs
  out = str(tmp_path / 'figs' / 'compare.png')
  assert plot.plot_runs(plot.load_runs(
      logdirs, ['replay 50%', 'replay 0%']), out) == out
  # Two task panels and the training panel: 3 columns of 4.2 x 3.0 inches.
  assert _png_size(out) == (420 * 3, 300)
  with pytest.raises(ValueError, match='2 names for 1 logdirs'):
    plot.load_runs(logdirs[:1], ['a', 'b'])


def test_unequal_segments_are_drawn_at_their_boundaries(tmp_path,
                                                       monkeypatch):
  # Two runs of random lengths: a's segments [0, 60), [60, 200) shade the
  # panels; b's switch (at 130) is marked in b's colour.
  logdirs = [str(tmp_path / 'a'), str(tmp_path / 'b')]
  for logdir, lengths in zip(logdirs, ([60, 140], [130, 70])):
    _write_run(logdir, 0.0, False)
    schedule_lib.write_tasks_json(logdir, schedule_lib.TaskSchedule(
        TASKS, 100, segment_frames=lengths))
  figures = []
  plt = plot._pyplot()
  monkeypatch.setattr(plt, 'close', figures.append)
  plot.plot_runs(plot.load_runs(logdirs), str(tmp_path / 'fig.png'))
  [figure] = figures
  colors = plt.rcParams['axes.prop_cycle'].by_key()['color']
  for ax in figure.axes[:2]:
    spans = [(p.get_x(), p.get_x() + p.get_width()) for p in ax.patches]
    # CartPole's panel shades its segment, Acrobot's its own.
    assert spans == ([(0, 60)] if ax.get_title() == TASKS[0] else
                     [(60, 200)]), (ax.get_title(), spans)
    lines = {(line.get_xdata()[0], line.get_color()) for line in ax.lines
             if line.get_linestyle() == ':'}
    assert lines == {(0, '0.6'), (60, '0.6'), (130, colors[1])}
  monkeypatch.undo()
  plt.close(figure)


def test_eval_history_and_normalised_curve_from_event_files(runs):
  logdirs, expected = runs
  run = plot.load_run(logdirs[0])
  history = plot.eval_history(run)
  assert [r.frames for r in history.records] == [0, 50, 100, 150, 200]
  for task in TASKS:
    frames, returns = history.curve(task)
    np.testing.assert_array_equal(frames, expected[0][task][0])
    np.testing.assert_array_equal(returns, expected[0][task][1])
  # CartPole i * 10 on (0, 40), Acrobot i - 100 on (-100, -96).
  normalization = {TASKS[0]: (0.0, 40.0), TASKS[1]: (-100.0, -96.0),
                   'gym:MountainCar-v0': (-200.0, -100.0)}
  curve = plot.normalized_mean_curve(run, normalization)
  np.testing.assert_array_equal(curve.steps, [0, 50, 100, 150, 200])
  np.testing.assert_allclose(curve.values,
                             [(i / 4 + i / 4) / 2 for i in range(5)])


def test_continual_metrics_from_event_files(runs):
  logdirs, expected = runs
  loaded = plot.load_runs(logdirs, ['a', 'b'])
  baselines = continual_metrics.Baselines(
      {TASKS[0]: (0.0, 40.0), TASKS[1]: (-100.0, -96.0)},
      {TASKS[0]: [(0, 0.0), (100, 20.0)]})
  metrics = plot.continual_metrics(loaded, baselines)
  # Only 'a' has a tasks.json.
  assert list(metrics) == ['a']
  history = history_lib.EvalHistory()
  for i, frames in enumerate(expected[0][TASKS[0]][0]):
    history.append(frames, {task: expected[0][task][1][i] for task in TASKS})
  assert metrics['a'] == continual_metrics.forgetting_metrics(
      history, schedule_lib.TaskSchedule(TASKS, 100), baselines.reference,
      baselines.normalization)
  # CartPole's normalised returns 0, .25, .5 over its segment [0, 100]
  # against the reference's 0 to .5: no transfer.
  assert metrics['a']['forward_transfer'][TASKS[0]] == pytest.approx(0.0)
  with pytest.raises(ValueError, match='no continual-learning metrics'):
    plot.continual_metrics(loaded[1:])


def test_eval_noise_is_read_and_summarised_per_task(tmp_path):
  logdir = str(tmp_path / 'noisy')
  half_widths = {TASKS[0]: [3.0, 1.0, 2.0], TASKS[1]: [0.5, 0.5, 4.0]}
  writer = tf.summary.create_file_writer(logdir)
  with writer.as_default():
    for i, frames in enumerate((0, 100, 200)):
      evaluation.write_eval_summaries(
          {TASKS[0]: float(i), TASKS[1]: -float(i)}, frames,
          {task: widths[i] for task, widths in half_widths.items()})
  writer.close()
  schedule_lib.write_tasks_json(logdir, schedule_lib.TaskSchedule(TASKS, 100))
  run = plot.load_run(logdir)
  # The half-widths are not taken for tasks' return curves...
  assert sorted(run.eval_curves) == sorted(TASKS)
  np.testing.assert_array_equal(run.eval_curves[TASKS[0]].values, [0, 1, 2])
  np.testing.assert_array_equal(run.eval_noise[TASKS[1]].values,
                                [0.5, 0.5, 4.0])
  noise = {TASKS[0]: {'median_ci95_half_width': 2.0,
                      'max_ci95_half_width': 3.0, 'num_evaluations': 3},
           TASKS[1]: {'median_ci95_half_width': 0.5,
                      'max_ci95_half_width': 4.0, 'num_evaluations': 3}}
  assert plot.eval_noise(run) == noise
  # On the normalised scale of a task with baselines: the median over the
  # random-to-single-task range, 2.0 / (5.0 - 1.0).
  scaled = plot.eval_noise(run, {TASKS[0]: (1.0, 5.0)})
  assert scaled[TASKS[0]] == {**noise[TASKS[0]],
                              'normalized_median_ci95_half_width': 0.5}
  assert scaled[TASKS[1]] == noise[TASKS[1]]
  metrics = plot.continual_metrics([run])['noisy']
  assert metrics['eval_noise'] == noise
  assert metrics['per_task'][TASKS[0]]['final_return'] == 2.0


def test_render_with_baselines_adds_the_summary_panel(runs, tmp_path):
  logdirs, _ = runs
  loaded = plot.load_runs(logdirs)
  baselines = continual_metrics.Baselines(
      {TASKS[0]: (0.0, 40.0), TASKS[1]: (-100.0, -96.0)}, {})
  out = str(tmp_path / 'summary.png')
  plot.plot_runs(loaded, out, baselines=baselines)
  # Two task panels, the summary and the training panel: 3 x 2.
  assert _png_size(out) == (420 * 3, 600)
  plot.plot_runs(loaded, out, baselines=baselines, training_panel=False)
  assert _png_size(out) == (420 * 3, 300)


def test_missing_logdir_and_empty_logdir(tmp_path):
  missing = str(tmp_path / 'nope')
  with pytest.raises(ValueError, match=r"--logdir '.*nope' does not exist"):
    plot.load_runs([missing])
  with pytest.raises(ValueError, match='No TensorBoard event files'):
    plot.load_runs([str(tmp_path)])


def test_missing_matplotlib_says_how_to_install(runs, tmp_path, monkeypatch):
  monkeypatch.setitem(sys.modules, 'matplotlib', None)
  with pytest.raises(ImportError, match=r'pip install "clear-rl\[plot\]"'):
    plot.plot_runs(plot.load_runs(runs[0][:1]), str(tmp_path / 'x.png'))


def test_resumed_run_drops_overwritten_points(tmp_path):
  logdir = str(tmp_path)
  for values in ({0: 1.0, 10: 2.0, 20: 3.0, 30: 4.0}, {20: -3.0, 30: -4.0}):
    writer = tf.summary.create_file_writer(logdir, filename_suffix=str(
        len(values)))
    with writer.as_default():
      for step, value in values.items():
        tf.summary.scalar('eval/A/return', value, step=step)
    writer.close()
  series = plot.curves(plot.read_scalars(logdir), 'eval/')['A']
  np.testing.assert_array_equal(series.steps, [0, 10, 20, 30])
  np.testing.assert_array_equal(series.values, [1.0, 2.0, -3.0, -4.0])


def test_a_step_written_again_at_a_resume_keeps_the_later_value(tmp_path):
  # A stop logs its last step and checkpoints it; the resumed run logs that
  # step again first.
  logdir = str(tmp_path)
  for suffix, values in (('a', {0: 1.0, 10: 2.0, 20: 3.0}),
                         ('b', {20: 5.0, 30: 6.0})):
    writer = tf.summary.create_file_writer(logdir, filename_suffix=suffix)
    with writer.as_default():
      for step, value in values.items():
        tf.summary.scalar('runtime/run_time_s', value, step=step)
    writer.close()
  series = plot.read_scalars(logdir)['runtime/run_time_s']
  np.testing.assert_array_equal(series.steps, [0, 10, 20, 30])
  np.testing.assert_array_equal(series.values, [1.0, 2.0, 5.0, 6.0])
  assert np.all(np.diff(series.wall_times) >= 0)


def test_points_at_one_step_of_one_file_are_all_kept(tmp_path):
  # Episodes of several envs that end in the same unroll share its step.
  writer = tf.summary.create_file_writer(str(tmp_path))
  with writer.as_default():
    for step, value in ((10, 1.0), (20, 2.0), (20, 3.0), (20, 4.0),
                        (30, 5.0)):
      tf.summary.scalar('episode/A/return', value, step=step)
  writer.close()
  series = plot.read_scalars(str(tmp_path))['episode/A/return']
  np.testing.assert_array_equal(series.steps, [10, 20, 20, 20, 30])
  np.testing.assert_array_equal(series.values, [1.0, 2.0, 3.0, 4.0, 5.0])


def test_smooth():
  np.testing.assert_array_equal(plot.smooth([1.0, 5.0], 0.0), [1.0, 5.0])
  np.testing.assert_allclose(plot.smooth([2.0, 2.0, 2.0], 0.9), 2.0)
  np.testing.assert_allclose(plot.smooth([1.0, 0.0], 0.5), [1.0, 1 / 3])
  with pytest.raises(ValueError, match='smoothing'):
    plot.smooth([1.0], 1.0)


def test_trailing_means_match_a_loop():
  values = np.random.RandomState(0).randn(30)
  expected = [np.mean(values[i - 6:i]) for i in range(6, 31)]
  np.testing.assert_allclose(curve_summary.trailing_means(values, 6), expected)
  assert curve_summary.trailing_means(values[:5], 6).shape == (0,)
  with pytest.raises(ValueError, match='window'):
    curve_summary.trailing_means(values, 0)


def test_summarize_curve_by_hand():
  series = plot.Series(np.array([10, 20, 30, 40, 50]),
                       np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
                       np.array([100.0, 101.0, 103.0, 107.0, 115.0]))
  # Trailing means of 2: 0.5, 1.5, 2.5, 3.5; 2.5 first at the 4th episode.
  summary = curve_summary.summarize_curve(series, window=2, threshold=2.5)
  assert summary == curve_summary.CurveSummary(
      episodes=5, frames=50, final_mean=3.5, best_mean=3.5, threshold=2.5,
      frames_to_threshold=40, seconds_to_threshold=7.0,
      min_mean_after_threshold=2.5)
  assert curve_summary.summarize_curve(series, 2, 2.5, start_time=90.0) \
      .seconds_to_threshold == 17.0
  # Run time 0 s at frame 0 and 60 s at frame 60: 40 s at frame 40.
  run_time = plot.Series(np.array([0, 60]), np.array([0.0, 60.0]),
                         np.array([0.0, 1.0]))
  assert curve_summary.summarize_curve(series, 2, 2.5, run_time=run_time) \
      .run_seconds_to_threshold == 40.0
  never = curve_summary.summarize_curve(series, window=2, threshold=3.6)
  assert never.frames_to_threshold is None
  assert never.seconds_to_threshold is None
  short = curve_summary.summarize_curve(series, window=10, threshold=0.0)
  assert (short.final_mean, short.best_mean, short.frames_to_threshold) == (
      2.0, None, None)
  # Episodes ended by frame 35: returns 0, 1, 2 -> last two average 1.5.
  # By frame 10 only one episode ended; frame 60 is past the curve's end.
  at = curve_summary.summarize_curve(series, window=2,
                                     at_frames=[35, 10, 50, 60])
  assert at.means_at_frames == {35: 1.5, 10: None, 50: 3.5, 60: None}
  assert summary.means_at_frames is None


def test_summary_reports_the_lowest_mean_after_the_threshold():
  # Returns 0, 4, 4, 1, 1, 4: trailing means of 2 are 2, 4, 2.5, 1, 2.5.
  # 4 is first reached at the 3rd episode; the lowest mean after is 1.
  returns = np.array([0.0, 4.0, 4.0, 1.0, 1.0, 4.0])
  series = plot.Series(np.arange(1, 7) * 10, returns,
                       np.arange(6, dtype=float))
  summary = curve_summary.summarize_curve(series, window=2, threshold=4.0)
  assert (summary.frames_to_threshold, summary.min_mean_after_threshold) == (
      30, 1.0)
  # Never reached: nothing to report; no threshold: nothing either.
  summarize = curve_summary.summarize_curve
  assert summarize(series, 2, 4.5).min_mean_after_threshold is None
  assert summarize(series, 2).min_mean_after_threshold is None
  # A curve that stays up reports its threshold-or-better low.
  steady = plot.Series(np.arange(1, 5) * 10, np.array([5.0, 5.0, 6.0, 5.0]),
                       np.arange(4, dtype=float))
  assert summarize(steady, 2, 4.0).min_mean_after_threshold == 5.0


def test_references_come_from_a_written_summary(runs, tmp_path):
  logdirs, _ = runs
  loaded = plot.load_runs(logdirs, ['a', 'b'])
  path = str(tmp_path / 'summary.json')
  schedule_lib.write_json(path, plot.summarize(loaded, window=4, threshold=10,
                                            at_frames=[100, 50]))
  # Run a: returns step / 10 at steps 0, 25, ..., 225, trailing means of 4.
  # By frame 50 only 3 episodes ended (no mean, no point); by 100 the mean
  # is 6.25; 10 is first reached at 150 (drawn at 10); the last 4 average
  # 18.75.
  with open(path) as f:
    curve = json.load(f)['a']['training'][SEQUENCE]
  one = plot.load_references(path + ':a')
  assert [r.label for r in one] == ['a']
  expected = {int(k): v for k, v in curve['means_at_frames'].items()
              if v is not None}
  expected[curve['frames_to_threshold']] = 10.0
  expected[curve['frames']] = curve['final_mean']
  np.testing.assert_array_equal(one[0].steps, sorted(expected))
  np.testing.assert_allclose(one[0].means,
                             [expected[k] for k in sorted(expected)])
  assert one[0].steps.tolist() == [100, 150, 225]
  assert one[0].means.tolist() == [6.25, 10.0, 18.75]
  assert [r.label for r in plot.load_references(path)] == ['a', 'b']
  out = plot.plot_runs(loaded[:1], str(tmp_path / 'ref.png'),
                       references=one)
  assert _png_size(out)[0] > 0
  # References alone are enough for a figure.
  assert _png_size(plot.plot_runs([], str(tmp_path / 'only.png'),
                                  references=one))[0] > 0
  with pytest.raises(ValueError, match="no run 'c'"):
    plot.load_references(path + ':c')
  with pytest.raises(ValueError, match='cannot read'):
    plot.load_references(str(tmp_path / 'missing.json'))
  bare = str(tmp_path / 'bare.json')
  schedule_lib.write_json(bare, {'a': {'training': {'x': {'frames': 5}}}})
  with pytest.raises(ValueError, match='no trailing means'):
    plot.load_references(bare)


def test_frame_counts_parse_or_say_what_is_wrong():
  assert plot._frame_counts(['5000000', '1e7', '2_500_000']) == [
      5000000, 10000000, 2500000]
  for bad in (['-1'], ['1.5'], ['ten'], ['inf'], ['nan']):
    with pytest.raises(ValueError, match='--at_frames'):
      plot._frame_counts(bad)
  with pytest.raises(ValueError, match='--max_frames takes'):
    plot._frame_counts(['-5'], '--max_frames')


def test_max_frames_keeps_the_points_up_to_it(runs, tmp_path, monkeypatch):
  steps, values = np.array([0, 25, 50, 75]), np.array([1., 2., 3., 4.])
  for limit, kept in ((None, 4), (50, 3), (49, 2), (-1, 0)):
    s, v = plot.up_to(steps, values, limit)
    assert s.tolist() == steps[:kept].tolist()
    assert v.tolist() == values[:kept].tolist()
  # Every curve and reference drawn stops at max_frames.
  logdirs, _ = runs
  loaded = plot.load_runs(logdirs, ['a', 'b'])
  path = str(tmp_path / 'summary.json')
  schedule_lib.write_json(path, plot.summarize(loaded, window=4,
                                            at_frames=[100, 200]))
  references = plot.load_references(path)
  assert max(r.steps.max() for r in references) > 100
  drawn = []
  import matplotlib.axes  # pylint: disable=g-import-not-at-top
  real_plot = matplotlib.axes.Axes.plot
  def recording_plot(ax, x, *args, **kwargs):
    drawn.append(np.asarray(x))
    return real_plot(ax, x, *args, **kwargs)
  monkeypatch.setattr(matplotlib.axes.Axes, 'plot', recording_plot)
  plot.plot_runs(loaded, str(tmp_path / 'cut.png'), references=references,
                 max_frames=100)
  # Per run: eval curves, the raw and smoothed training curve; references.
  assert len(drawn) >= 2 * 2 + 2
  assert all(len(x) == 0 or x.max() <= 100 for x in drawn)
  assert any(len(x) and x.max() == 100 for x in drawn)
  drawn.clear()
  plot.plot_runs(loaded, str(tmp_path / 'all.png'), references=references)
  assert max(x.max() for x in drawn if len(x)) > 100


def test_command_line(runs, tmp_path):
  logdirs, _ = runs
  out = str(tmp_path / 'cli.png')
  command = [sys.executable, '-m', 'clear.plot', f'--logdir={logdirs[0]}',
             f'--logdir={logdirs[1]}', '--labels=a,b', f'--out={out}']
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr
  assert _png_size(out)[0] > 0
  # The summary: training returns step / 10 (+ 0.5 for b) at steps 0, 25,
  # ..., 225; trailing means of 4 first reach 10 at step 150 for a.
  summary_path = str(tmp_path / 'summary' / 'runs.json')
  result = subprocess.run(command[:-1] + ['--out=', '--window=4',
                                          '--threshold=10',
                                          '--at_frames=100,300',
                                          f'--summary_out={summary_path}'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr
  with open(summary_path) as f:
    summary = json.load(f)
  for label, offset in (('a', 0.0), ('b', 0.5)):
    returns = [step / 10 + offset for step in range(0, 250, 25)]
    means = [np.mean(returns[i - 4:i]) for i in range(4, 11)]
    first = next(i for i, m in enumerate(means) if m >= 10) + 3
    curve = summary[label]['training'][SEQUENCE]
    assert curve['episodes'] == 10
    assert curve['frames_to_threshold'] == 25 * first
    assert curve['final_mean'] == pytest.approx(means[-1])
    assert curve['best_mean'] == pytest.approx(max(means))
    # Episodes ended by step 100 are the first five; 300 is past the end.
    assert curve['means_at_frames'] == {
        '100': pytest.approx(np.mean(returns[1:5])), '300': None}
  # A figure named other than .png is refused, and nothing is written.
  result = subprocess.run(command[:-1] + [f'--out={tmp_path / "x.txt"}'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 1
  assert 'the figure is a PNG' in result.stderr
  assert not (tmp_path / 'x.txt').exists()
  # Baselines for only some of a run's tasks are refused, naming the rest.
  baselines_path = str(tmp_path / 'baselines.json')
  metrics_path = str(tmp_path / 'metrics.json')
  schedule_lib.write_json(baselines_path, continual_metrics.baselines_json(
      continual_metrics.Baselines({TASKS[0]: (0.0, 40.0)}, {})))
  result = subprocess.run(command + [f'--baselines={baselines_path}',
                                     f'--metrics_out={metrics_path}'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 1
  assert f'the baselines have no {TASKS[1]} (tasks of a)' in result.stderr
  assert not os.path.exists(metrics_path)
  # Metrics and the summary panel with a baselines file.
  schedule_lib.write_json(baselines_path, continual_metrics.baselines_json(
      continual_metrics.Baselines(NORMALIZATION, {})))
  result = subprocess.run(command + [f'--baselines={baselines_path}',
                                     f'--metrics_out={metrics_path}',
                                     '--notraining_panel'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr
  with open(metrics_path) as f:
    metrics = json.load(f)
  assert list(metrics) == ['a']
  assert metrics['a']['per_task'][TASKS[0]]['normalized_final_return'] == 1.0
  # Two task panels and the summary: one row of three.
  assert _png_size(out) == (420 * 3, 300)
  with open(baselines_path, 'w') as f:
    f.write('{"tasks": 3}')
  result = subprocess.run(command + [f'--baselines={baselines_path}'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 1
  assert 'is not a baselines JSON' in result.stderr
  missing = str(tmp_path / 'missing')
  result = subprocess.run(command[:3] + [f'--logdir={missing}',
                                         f'--out={out}'],
                          cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 1
  assert f"--logdir '{missing}' does not exist" in result.stderr


# --- Seeds of a method --------------------------------------------------------

SEEDS = {'clear_s0': 0.0, 'clear_s1': 2.0, 'impala_s0': 5.0}
NORMALIZATION = {TASKS[0]: (0.0, 40.0), TASKS[1]: (-100.0, -96.0)}


@pytest.fixture(scope='module')
def seed_runs(tmp_path_factory):
  """Three sequence runs named <method>_s<seed>: CartPole's evaluation
  return 10 i + offset and Acrobot's i - 100 + offset at frames 50 i."""
  root = tmp_path_factory.mktemp('seeds')
  logdirs = []
  for label, offset in SEEDS.items():
    logdirs.append(str(root / label))
    _write_run(logdirs[-1], offset, True)
  return logdirs


def test_group_seeds_draws_the_mean_and_interval(seed_runs, tmp_path,
                                                 monkeypatch):
  import matplotlib.axes  # pylint: disable=g-import-not-at-top
  lines, bands = [], []
  real_plot, real_fill = (matplotlib.axes.Axes.plot,
                          matplotlib.axes.Axes.fill_between)
  def recording_plot(ax, x, y, *args, **kwargs):
    lines.append((ax, kwargs.get('label'), np.asarray(x), np.asarray(y)))
    return real_plot(ax, x, y, *args, **kwargs)
  def recording_fill(ax, x, low, high, **kwargs):
    bands.append((ax, np.asarray(x), np.asarray(low), np.asarray(high)))
    return real_fill(ax, x, low, high, **kwargs)
  monkeypatch.setattr(matplotlib.axes.Axes, 'plot', recording_plot)
  monkeypatch.setattr(matplotlib.axes.Axes, 'fill_between', recording_fill)
  import matplotlib.figure  # pylint: disable=g-import-not-at-top
  y_ranges = {}
  real_savefig = matplotlib.figure.Figure.savefig
  def recording_savefig(fig, *args, **kwargs):
    y_ranges.update({ax.get_title(): ax.get_ylim() for ax in fig.axes})
    return real_savefig(fig, *args, **kwargs)
  monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', recording_savefig)
  loaded = plot.load_runs(seed_runs)
  out = plot.plot_runs(loaded, str(tmp_path / 'seeds.png'),
                       baselines=continual_metrics.Baselines(NORMALIZATION,
                                                             {}),
                       training_panel=False, group_seeds=True)
  assert _png_size(out) == (420 * 3, 300)
  by_title = {}
  for ax, label, x, y in lines:
    if label is not None and not label.startswith('_'):
      by_title.setdefault(ax.get_title(), {})[label] = (x, y)
  cartpole = by_title[TASKS[0]]
  # One line per method, no line per run.
  assert sorted(cartpole) == ['clear (2 seeds)', 'impala (1 seed)']
  i = np.arange(5)
  np.testing.assert_array_equal(cartpole['clear (2 seeds)'][0], 50 * i)
  # The mean of offsets 0 and 2, and impala's own curve.
  np.testing.assert_allclose(cartpole['clear (2 seeds)'][1], 10.0 * i + 1)
  np.testing.assert_allclose(cartpole['impala (1 seed)'][1], 10.0 * i + 5)
  np.testing.assert_allclose(by_title[TASKS[1]]['clear (2 seeds)'][1],
                             i - 99.0)
  # The normalised panel: ((10 i + o) / 40 + (i + o) / 4) / 2 averaged
  # over o = 0, 2.
  normalized = next(v for t, v in by_title.items() if 'normalised' in t)
  np.testing.assert_allclose(normalized['clear (2 seeds)'][1],
                             ((10 * i + 1) / 40 + (i + 1) / 4) / 2)
  # Shaded: clear only (impala has one seed), in the three panels; the
  # seeds differ by 2 everywhere: s = sqrt(2), half-width
  # t_{.975, 1} sqrt(2) / sqrt(2) = 12.706 returns.
  assert len(bands) == 3
  ax, x, low, high = bands[0]
  assert ax.get_title() == TASKS[0]
  np.testing.assert_allclose(high - low, 2 * 12.7062, atol=1e-3)
  np.testing.assert_allclose((high + low) / 2, 10.0 * i + 1)
  # The y range spans the means (1 to 45) and the levels 0 and 40, with 5%
  # margins, not the band (-11.7 to 53.7), which it clips.
  np.testing.assert_allclose(y_ranges[TASKS[0]], (-2.25, 47.25))
  # Acrobot: means -99 to -91, levels -100 and -96.
  np.testing.assert_allclose(y_ranges[TASKS[1]], (-100.45, -90.55))
  # Without the flag: one line per run.
  lines.clear()
  plot.plot_runs(loaded, str(tmp_path / 'runs.png'), training_panel=False)
  labels = {label for ax, label, _, _ in lines
            if ax.get_title() == TASKS[0]}
  assert labels == set(SEEDS)


def test_group_seeds_table_and_metrics_on_the_command_line(seed_runs,
                                                            tmp_path):
  baselines = str(tmp_path / 'baselines.json')
  schedule_lib.write_json(baselines, continual_metrics.baselines_json(
      continual_metrics.Baselines(NORMALIZATION, {})))
  out, table, table_json, metrics = (
      str(tmp_path / name) for name in ('fig.png', 'report/table.md',
                                        'report/table.json', 'metrics.json'))
  command = ([sys.executable, '-m', 'clear.plot'] +
             [f'--logdir={d}' for d in seed_runs] +
             ['--group_seeds', f'--baselines={baselines}', f'--out={out}',
              f'--table_out={table}', f'--table_json={table_json}',
              f'--metrics_out={metrics}'])
  result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr
  # Two task panels, the summary and the training panel.
  assert _png_size(out) == (420 * 3, 600)
  with open(metrics) as f:
    per_run = json.load(f)
  assert list(per_run) == list(SEEDS)
  # CartPole rises 10 per evaluation: from 20 + o at 100 to 40 + o at 200
  # while segment 1 (Acrobot) trains, so its isolated forgetting by
  # segment 1 is -20 / (40 + o), its largest |return| 40 + o.
  for label, offset in SEEDS.items():
    entry = per_run[label]['per_task'][TASKS[0]]
    assert entry['cora_return_scale'] == 40.0 + offset
    assert entry['cora_isolated_forgetting_by_segment'] == {
        '1': pytest.approx(-20 / (40 + offset))}
    # Acrobot, first trained in segment 1, from segment 0: -98 + o from
    # -100 + o, over its largest |return| 100 - o.
    assert per_run[label]['cora_zero_shot_transfer'] == pytest.approx(
        2 / (100 - offset))
  with open(table_json) as f:
    numbers = json.load(f)
  assert numbers == json.loads(json.dumps(seed_stats.seed_table(per_run)))
  clear = numbers['methods']['clear']
  # Over both clear seeds, CartPole's scale is 42: -20 / 42 each.
  assert clear['isolated_forgetting']['values'] == pytest.approx(
      [-20 / 42, -20 / 42])
  assert clear['zero_shot_transfer']['values'] == pytest.approx(
      [2 / 100, 2 / 100])
  # Normalised final returns (40 + o) / 40 and (4 + o) / 4, averaged.
  finals = [((40 + o) / 40 + (4 + o) / 4) / 2 for o in (0.0, 2.0)]
  assert clear['final_return']['values'] == pytest.approx(finals)
  assert clear['final_return']['half_width'] == pytest.approx(
      12.7062 * np.std(finals, ddof=1) / np.sqrt(2), rel=1e-5)
  with open(table) as f:
    text = f.read()
  assert text == seed_stats.table_markdown(seed_stats.seed_table(per_run))
  assert text.splitlines()[2].startswith('| clear | 2 | ')
  assert text.splitlines()[3].startswith('| impala | 1 | ')


def test_a_bad_label_is_refused_before_anything_is_written(seed_runs,
                                                           tmp_path):
  bad = str(tmp_path / 'clear')  # No _s<seed>.
  _write_run(bad, 0.0, True)
  out, table = str(tmp_path / 'fig.png'), str(tmp_path / 'table.md')
  metrics = str(tmp_path / 'metrics.json')
  for flag in ('--group_seeds', f'--table_out={table}'):
    command = [sys.executable, '-m', 'clear.plot', f'--logdir={seed_runs[0]}',
               f'--logdir={bad}', flag, f'--out={out}',
               f'--metrics_out={metrics}']
    result = subprocess.run(command, cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    name = flag.partition('=')[0]
    assert (f'clear.plot: {name} needs run labels <method>_s<seed>' in
            result.stderr), result.stderr
    assert "got 'clear'" in result.stderr
    assert not os.path.exists(out) and not os.path.exists(metrics)
    assert not os.path.exists(table)
