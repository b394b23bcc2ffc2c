"""Keeps the part of a run's logdir that its published figures and tables need.

A run's logdir holds checkpoints, replay and event files of hundreds of MB;
a results page needs only its evaluation curves and its schedule. This
script writes a small logdir that `clear.plot` reads like the original:
one event file with the scalar tags that start with the given prefixes
(each point with its step and wall time), and the run's JSON files
(`run.json`, `tasks.json`, `continual_metrics.json`, `test_results.json`,
whichever exist). Committed under `results/<experiment>/runs/<label>/`,
they outlive the machine the run was made on.

    python results/keep_scalars.py --logdir=runs/minatar_seq/clear_s0 \\
        --out=results/minatar/runs/clear_s0

The output folder must not exist yet, or hold only what an earlier call
wrote for the same run (its files are replaced).
"""

import os
import shutil
import sys

from absl import app
from absl import flags
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.summary.writer import event_file_writer

from clear.analysis import events

JSON_FILES = ('run.json', 'tasks.json', 'continual_metrics.json',
              'test_results.json')
# Evaluations (means and their intervals), the clock and frames (for env
# frames/s), the process tree's memory and the replay's bytes.
DEFAULT_PREFIXES = ('eval/', 'runtime/run_time_s', 'runtime/num_env_frames',
                    'runtime/memory_', 'replay/bytes')



def define_flags():
  """The script's flags, defined only when it runs as a program: other
  programs (clear.train, a test session) have flags of the same names."""
  flags.DEFINE_string('logdir', None, 'The run to keep.')
  flags.DEFINE_string('out', None, 'The small logdir to write.')
  flags.DEFINE_list('keep', list(DEFAULT_PREFIXES),
                    'Scalar tags starting with any of these are kept.')


def kept_scalars(logdir: str, prefixes) -> dict:
  """{tag: events.Series} of the tags of `logdir` that start with a prefix."""
  return {tag: series for tag, series in events.read_scalars(logdir).items()
          if tag.startswith(tuple(prefixes))}


def write_scalars(out: str, scalars: dict) -> str:
  """Writes `scalars` ({tag: Series}) as one event file in `out`, each point
  at its step and wall time; returns the file's path."""
  writer = event_file_writer.EventFileWriter(out)
  points = sorted((float(wall), int(step), tag, float(value))
                  for tag, series in scalars.items()
                  for step, value, wall in zip(series.steps, series.values,
                                               series.wall_times))
  for wall, step, tag, value in points:
    summary = summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    writer.add_event(event_pb2.Event(wall_time=wall, step=step,
                                     summary=summary))
  writer.close()
  return writer.get_logdir()


def keep(logdir: str, out: str, prefixes) -> int:
  """Writes the small copy of `logdir` to `out`; returns the points kept."""
  scalars = kept_scalars(logdir, prefixes)
  if not scalars:
    raise ValueError(f'--logdir={logdir}: no scalar tag starts with '
                     f'{", ".join(prefixes)}.')
  if os.path.isdir(out):
    for name in os.listdir(out):
      if not (name.startswith('events.out.tfevents.') or name in JSON_FILES):
        raise ValueError(f'--out={out} holds {name}, which this script did '
                         'not write: choose an empty or new folder.')
      os.remove(os.path.join(out, name))
  os.makedirs(out, exist_ok=True)
  write_scalars(out, scalars)
  for name in JSON_FILES:
    if os.path.isfile(os.path.join(logdir, name)):
      shutil.copyfile(os.path.join(logdir, name), os.path.join(out, name))
  return sum(len(s.steps) for s in scalars.values())


def main(argv):
  del argv
  f = flags.FLAGS
  if not f.logdir or not f.out:
    print('error: give --logdir and --out.', file=sys.stderr)
    return 2
  try:
    points = keep(os.path.expanduser(f.logdir), os.path.expanduser(f.out),
                  f.keep)
  except (OSError, ValueError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(f'Kept {points} points of {f.logdir} in {f.out}.')
  return 0


if __name__ == '__main__':
  define_flags()
  app.run(main)
