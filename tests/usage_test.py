"""Tests for clear.analysis.usage: what a run cost, read from real event
files."""

import numpy as np
import tensorflow as tf

from clear import plot
from clear.analysis import events
from clear.analysis import usage
from clear.continual import schedule as schedule_lib
from clear.runtime import evaluation

TASKS = ['gym:CartPole-v1', 'gym:Acrobot-v1']


def test_run_usage_is_read_across_a_resume(tmp_path):
  logdir = str(tmp_path / 'resumed')
  # First process: 3 logs; it stops after 300 frames and 30 s of running.
  first = tf.summary.create_file_writer(logdir)
  with first.as_default():
    for frames, seconds, peak in ((100, 10.0, 500.0), (200, 20.0, 900.0),
                                  (300, 30.0, 950.0)):
      tf.summary.scalar('runtime/num_env_frames', frames, step=frames)
      tf.summary.scalar('runtime/run_time_s', seconds, step=frames)
      tf.summary.scalar('runtime/memory_peak_pss_mb', peak, step=frames)
      tf.summary.scalar('replay/bytes', 1000 * frames, step=frames)
  first.close()
  # The resume goes back to its checkpoint at 200 frames; its own peak starts
  # again lower.
  second = tf.summary.create_file_writer(logdir, filename_suffix='.resumed')
  with second.as_default():
    for frames, seconds, peak in ((200, 20.0, 600.0), (400, 50.0, 700.0)):
      tf.summary.scalar('runtime/num_env_frames', frames, step=frames)
      tf.summary.scalar('runtime/run_time_s', seconds, step=frames)
      tf.summary.scalar('runtime/memory_peak_pss_mb', peak, step=frames)
      tf.summary.scalar('replay/bytes', 500 * frames, step=frames)
  second.close()
  schedule_lib.write_tasks_json(logdir, schedule_lib.TaskSchedule(TASKS, 200))
  evals = tf.summary.create_file_writer(logdir, filename_suffix='.eval')
  with evals.as_default():
    evaluation.write_eval_summaries({TASKS[0]: 1.0, TASKS[1]: 2.0}, 400)
  evals.close()
  run = plot.load_run(logdir)
  # 400 frames in 50 s of running. The resume went back over the first
  # process's points from 200 frames on, so they are not the run's (as for
  # every curve): its peak is 700 MB and its replay's most 200 kB.
  expected = usage.RunUsage(env_frames=400, run_time_s=50.0,
                            env_frames_per_s=8.0, peak_memory_pss_mb=700.0,
                            replay_bytes=200000)
  assert run.usage == expected
  assert plot.continual_metrics([run])['resumed']['usage'] == (
      expected._asdict())
  # A run that logged no frames has no usage; one without the other tags
  # has None for each.
  assert usage.run_usage({}) is None
  no_replay = usage.run_usage({
      'runtime/num_env_frames': events.Series(
          np.array([10]), np.array([10.0]), np.array([0.0]))})
  assert no_replay == usage.RunUsage(10, None, None, None, None)
