"""A small copy of a run's logdir: the part its figures and tables need.

A run's logdir holds checkpoints, replay and event files of hundreds of MB;
a results page needs only its evaluation curves and its schedule. `keep`
writes a small logdir that `clear.plot` reads like the original: one event
file with the scalar tags that start with the given prefixes (each point
with its step and wall time), and the run's JSON files (`JSON_FILES`,
whichever exist). Committed under `results/<experiment>/runs/<label>/`, they
outlive the machine the run was made on.

    from clear.analysis import keep
    points = keep.keep('runs/minatar_seq/clear_s0',
                       'results/minatar/runs/clear_s0')

The copy is written into a sibling folder (`<out>.tmp`) and renamed into
place (an earlier copy is moved aside to `<out>.old` meanwhile), so `out` is
either the complete copy or left as it was. An existing
`out` is replaced only when it holds nothing but files `keep` writes (an
earlier copy); anything else in it is refused. No TensorFlow: the event file
is written with TensorBoard's protos and record framing.
"""

import os
import shutil
import socket
import time
from typing import Dict, Sequence

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.proto import summary_pb2
from tensorboard.summary.writer import record_writer

from clear.analysis import events

# The JSON files of a run that are copied when they exist.
JSON_FILES = ('run.json', 'tasks.json', 'continual_metrics.json',
              'test_results.json')
# Evaluations (means and their intervals), the clock and frames (for env
# frames/s), the seconds evaluations took and training waited for them,
# the process tree's memory and the replay's bytes.
DEFAULT_PREFIXES = ('eval/', 'runtime/run_time_s', 'runtime/num_env_frames',
                    'runtime/eval_', 'runtime/memory_', 'replay/bytes')
EVENT_FILE_PREFIX = 'events.out.tfevents.'
# Sibling folders of `out` that `keep` writes into and moves aside.
TMP_SUFFIX = '.tmp'
OLD_SUFFIX = '.old'


def kept_scalars(logdir: str, prefixes: Sequence[str]
                 ) -> Dict[str, events.Series]:
  """The scalar tags of `logdir` that start with one of `prefixes`.

  Args:
    logdir: a run's logdir (its event files are read recursively).
    prefixes: tag prefixes, e.g. `DEFAULT_PREFIXES`.

  Returns:
    {tag: `events.Series`} of the kept tags.

  Raises:
    ValueError: `logdir` is missing or holds no event files.
  """
  prefixes = tuple(prefixes)
  return {tag: series for tag, series in events.read_scalars(logdir).items()
          if tag.startswith(prefixes)}


def _event_file_name() -> str:
  """A new event file's name, as TensorBoard's writers name them."""
  return (f'{EVENT_FILE_PREFIX}{int(time.time()):010d}.'
          f'{socket.gethostname()}.{os.getpid()}.0')


def write_scalars(out: str, scalars: Dict[str, events.Series]) -> str:
  """Writes `scalars` as one event file in `out`, each point at its step and
  wall time (in wall-time order).

  Args:
    out: the folder to write into (created if missing).
    scalars: {tag: `events.Series`}, e.g. from `kept_scalars`.

  Returns:
    The path of the event file written.
  """
  os.makedirs(out, exist_ok=True)
  path = os.path.join(out, _event_file_name())
  points = sorted((float(wall), int(step), tag, float(value))
                  for tag, series in scalars.items()
                  for step, value, wall in zip(series.steps, series.values,
                                               series.wall_times))
  writer = record_writer.RecordWriter(open(path, 'wb'))
  try:
    writer.write(event_pb2.Event(
        wall_time=time.time(),
        file_version='brain.Event:2').SerializeToString())
    for wall, step, tag, value in points:
      summary = summary_pb2.Summary(
          value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
      writer.write(event_pb2.Event(wall_time=wall, step=step,
                                   summary=summary).SerializeToString())
  finally:
    writer.close()
  return path


def _is_kept_file(folder: str, name: str) -> bool:
  """Whether `folder/name` is a file that `keep` writes."""
  return (not os.path.isdir(os.path.join(folder, name)) and
          (name.startswith(EVENT_FILE_PREFIX) or name in JSON_FILES))


def _check_replaceable(folder: str, what: str):
  """Raises ValueError (naming the folder as `what`) unless `folder` is
  missing or holds only files that `keep` writes, so that replacing it
  loses nothing else."""
  if not os.path.lexists(folder):
    return
  if os.path.islink(folder) or not os.path.isdir(folder):
    raise ValueError(f'{what} is not a folder: choose an empty or new '
                     'folder.')
  for name in sorted(os.listdir(folder)):
    if not _is_kept_file(folder, name):
      raise ValueError(f'{what} holds {name}, which this script did not '
                       'write: choose an empty or new folder.')


def _move_into_place(new: str, out: str):
  """Renames the folder `new` to `out`, replacing an earlier `out` (moved
  aside to `<out>.old` first, and moved back if the rename fails)."""
  if not os.path.lexists(out):
    os.rename(new, out)
    return
  old = out + OLD_SUFFIX
  os.rename(out, old)
  try:
    os.rename(new, out)
  except BaseException:
    os.rename(old, out)
    raise
  shutil.rmtree(old, ignore_errors=True)


def keep(logdir: str, out: str,
         prefixes: Sequence[str] = DEFAULT_PREFIXES) -> int:
  """Writes the small copy of `logdir` to `out`.

  The copy is written into `<out>.tmp` (removed if anything fails) and
  renamed to `out`, so `out` never holds a partial copy.

  Args:
    logdir: the run's logdir.
    out: the folder of the copy. It must not exist, or hold only files that
      `keep` writes (an earlier copy, which is replaced).
    prefixes: scalar tags starting with any of these are kept.

  Returns:
    The number of points kept (over all tags).

  Raises:
    ValueError: `logdir` is missing, holds no event files or no tag
      starting with a prefix; or `out`, or one of its working folders
      (`<out>.tmp`, `<out>.old`, left by an interrupted call), is not a
      folder or holds a file `keep` does not write.
    OSError: writing failed (`out` is then left as it was).
  """
  prefixes = tuple(prefixes)
  scalars = kept_scalars(logdir, prefixes)
  if not scalars:
    raise ValueError(f'--logdir={logdir}: no scalar tag starts with '
                     f'{", ".join(prefixes)}.')
  _check_replaceable(out, f'--out={out}')
  folder = os.path.normpath(out)
  tmp = folder + TMP_SUFFIX
  for sibling in (tmp, folder + OLD_SUFFIX):
    _check_replaceable(sibling, f'{sibling} (a working folder of --out={out})')
  for sibling in (tmp, folder + OLD_SUFFIX):
    if os.path.lexists(sibling):  # Left by an interrupted keep.
      shutil.rmtree(sibling)
  parent = os.path.dirname(folder)
  if parent:
    os.makedirs(parent, exist_ok=True)
  os.makedirs(tmp)
  try:
    write_scalars(tmp, scalars)
    for name in JSON_FILES:
      if os.path.isfile(os.path.join(logdir, name)):
        shutil.copyfile(os.path.join(logdir, name), os.path.join(tmp, name))
    _move_into_place(tmp, folder)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise
  return sum(len(s.steps) for s in scalars.values())
