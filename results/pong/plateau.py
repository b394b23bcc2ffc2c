r"""Where a run's training returns settle: per window of env frames, as JSON.

Reads a run's training episode returns (`clear.plot.load_run`) and prints,
per consecutive window of `--window` frames from `--start` on: the
episodes that ended in it, their mean return, the share that scored
`--best` (21 in Pong: a 21-0 game), and the range of the trailing
100-episode mean over the window, with the share of its points above
`--above`:

  python results/pong/plateau.py --logdir=runs/pong --start=24e6 \
      --window=4e6 --out=plateau.json
"""

from absl import app
from absl import flags
import numpy as np

from clear import plot
import run_files  # results/pong/run_files.py, beside this script.

flags.DEFINE_string('logdir', None, 'A run.')
flags.DEFINE_string('env', 'atari:Pong', 'Which training curve.')
flags.DEFINE_float('start', 24e6, 'First window starts here.')
flags.DEFINE_float('window', 4e6, 'Env frames per window.')
flags.DEFINE_float('best', 21, 'The best score of a game.')
flags.DEFINE_float('above', 20, 'Trailing-mean level to count points above.')
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS

WINDOW = 100  # Episodes in the trailing mean, as `clear.plot`'s summaries.


def main(argv):
  del argv
  if not FLAGS.logdir:
    raise app.UsageError('Give --logdir.')
  series = plot.load_run(FLAGS.logdir).train_curves.get(FLAGS.env)
  if series is None:
    raise SystemExit(f'{FLAGS.logdir} has no {FLAGS.env} training returns.')
  frames, returns = series.steps, series.values
  # trailing[i] is the mean of the 100 episodes ending at episode i + 99.
  trailing = plot.trailing_means(returns, WINDOW)
  trailing_frames = frames[WINDOW - 1:]
  windows = []
  lo = FLAGS.start
  while lo < frames[-1]:
    hi = lo + FLAGS.window
    ended = (frames >= lo) & (frames < hi)
    points = trailing[(trailing_frames >= lo) & (trailing_frames < hi)]
    if ended.any():
      windows.append({
          'frames': [int(lo), int(hi)],
          'episodes': int(ended.sum()),
          'mean_return': round(float(returns[ended].mean()), 3),
          'share_best': round(float(np.mean(returns[ended] == FLAGS.best)),
                              3),
          'trailing_mean_range': [round(float(points.min()), 2),
                                  round(float(points.max()), 2)]
                                 if len(points) else None,
          'trailing_share_above': round(float(np.mean(
              points > FLAGS.above)), 3) if len(points) else None})
    lo = hi
  run_files.emit({'logdir': FLAGS.logdir, 'env': FLAGS.env,
                  'best': FLAGS.best, 'above': FLAGS.above,
                  'windows': windows}, FLAGS.out)


if __name__ == '__main__':
  app.run(main)
