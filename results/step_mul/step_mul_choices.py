"""Which step multipliers a dynamic-multiplier run chose, from TensorBoard.

Reads the `action/step_mul` histograms a run's learner wrote (action m runs
m + 1 frames; half of each batch is replayed under CLEAR's defaults) and
prints, as JSON, per window of env frames: the mean frames per agent step
and the share of each multiplier.

  python results/step_mul/step_mul_choices.py --logdir=runs/pong_ff_dynamic \
      --window=1000000 --out=choices.json
"""

import json
import sys

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from clear import plot

flags.DEFINE_string('logdir', None, 'A run directory with event files.')
flags.DEFINE_integer('window', 1_000_000, 'Env frames per reported window.')
flags.DEFINE_integer('max_step_mul', 8, 'The run\'s --max_step_mul.')
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS


def read_counts(logdir, max_step_mul):
  """{env frame step: counts of actions 0 .. max_step_mul - 1}."""
  counts = {}
  for path in plot.event_files(logdir):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        if value.tag != 'action/step_mul':
          continue
        buckets = tf.make_ndarray(value.tensor)  # [k, 3]: left, right, count.
        row = np.zeros(max_step_mul)
        for left, right, count in buckets:
          # Buckets narrower than 1 hold at most one integer action, which
          # gets all of the bucket's count.
          if right - left >= 1:
            raise ValueError(f'bucket [{left}, {right}] spans several actions')
          action = int(np.ceil(left - 1e-6))
          if count and 0 <= action < max_step_mul:
            row[action] += count
        counts[event.step] = row
  return counts


def main(argv):
  del argv
  try:
    counts = read_counts(FLAGS.logdir, FLAGS.max_step_mul)
  except ValueError as e:  # A missing logdir, or buckets it cannot read.
    sys.exit(f'error: {e}')
  windows = {}
  for step, row in counts.items():
    windows.setdefault(step // FLAGS.window, []).append(row)
  frames = np.arange(1, FLAGS.max_step_mul + 1)
  result = {}
  for index in sorted(windows):
    total = np.sum(windows[index], axis=0)
    share = total / total.sum()
    result[str((index + 1) * FLAGS.window)] = {
        'mean_frames_per_step': round(float(share @ frames), 3),
        'share': [round(float(x), 4) for x in share]}
  text = json.dumps({'logdir': FLAGS.logdir, 'window': FLAGS.window,
                     'windows_end_at_frames': result}, indent=1)
  print(text)
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  flags.mark_flag_as_required('logdir')
  app.run(main)
