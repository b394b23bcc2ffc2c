r"""Medians of a run's learner scalars per window of env frames, as JSON.

Reads the TensorBoard event files of each `--logdir`, pairs every logged
update's scalars (policy entropy, gradient norm, baseline loss, ...) with
the env frames logged at the same step, and prints the median of each tag
over consecutive windows of `--window` frames up to `--max_frames`:

  python results/pong/scalar_windows.py --logdir=runs/a --logdir=runs/b \
      --labels=a,b --out=windows.json
"""

import json

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import event_accumulator

flags.DEFINE_multi_string('logdir', [], 'Runs to read.')
flags.DEFINE_list('labels', [], 'One label per --logdir (default: the path).')
flags.DEFINE_list('tags', ['policy/entropy', 'grad_norm', 'loss/baseline',
                           'value/mean_baseline'], 'Scalar tags.')
flags.DEFINE_float('window', 5e5, 'Env frames per window.')
flags.DEFINE_float('max_frames', 5e6, 'Last window ends here.')
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS


def _series(accumulator, tag):
  events = accumulator.Tensors(tag)
  return (np.array([e.step for e in events]),
          np.array([float(tf.make_ndarray(e.tensor_proto)) for e in events]))


def window_medians(steps, values, frame_steps, frames, window, max_frames):
  """Median of `values` per window of env frames.

  Args:
    steps, values: [N] the tag's learner steps and values.
    frame_steps, frames: [M] learner steps and the env frames at each.
    window, max_frames: window width and end, in env frames.

  Returns:
    [ceil(max_frames / window)] medians, None for a window without values.
  """
  at = dict(zip(frame_steps.tolist(), frames.tolist()))
  f = np.array([at.get(s, np.nan) for s in steps.tolist()])
  out = []
  for lo in np.arange(0.0, max_frames, window):
    inside = (f >= lo) & (f < lo + window)
    out.append(round(float(np.median(values[inside])), 4)
               if inside.any() else None)
  return out


def main(argv):
  del argv
  labels = FLAGS.labels or FLAGS.logdir
  if len(labels) != len(FLAGS.logdir):
    raise app.UsageError('Give one --labels entry per --logdir.')
  result = {'window_frames': FLAGS.window, 'max_frames': FLAGS.max_frames,
            'statistic': 'median over the updates logged in each window',
            'runs': {}}
  for label, logdir in zip(labels, FLAGS.logdir):
    accumulator = event_accumulator.EventAccumulator(
        logdir, size_guidance={event_accumulator.TENSORS: 0})
    accumulator.Reload()
    frame_steps, frames = _series(accumulator, 'num_env_frames')
    result['runs'][label] = {'logdir': logdir, 'tags': {
        tag: window_medians(*_series(accumulator, tag), frame_steps, frames,
                            FLAGS.window, FLAGS.max_frames)
        for tag in FLAGS.tags}}
  text = json.dumps(result, indent=1)
  print(text)
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      f.write(text + '\n')


if __name__ == '__main__':
  app.run(main)
