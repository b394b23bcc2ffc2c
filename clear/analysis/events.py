"""Scalar summaries read from TensorBoard event files, without TensorFlow.

`read_scalars(logdir)` reads every scalar tag of the event files under a
logdir (TensorBoard's protos, TFRecord framing parsed here) as `Series`;
`curves` picks the tags of one family (`eval/<task>/return`). A resumed
run's points that a later restart went back over are dropped, as
TensorBoard does. `clear.plot` draws from these; scripts and tests read
runs with them.
"""

import glob
import os
import re
import struct
from typing import Dict, List, NamedTuple, Optional

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util


class Series(NamedTuple):
  """One scalar tag: int64 `[N]` steps (env frames), float64 `[N]` values
  and float64 `[N]` wall times (seconds since the epoch), ordered by step."""
  steps: np.ndarray
  values: np.ndarray
  wall_times: np.ndarray



def _records(path: str):
  """The records of a TFRecord file; stops at a truncated last record (a
  file still being written)."""
  with open(path, 'rb') as f:
    while True:
      header = f.read(12)  # uint64 length, uint32 masked CRC of it.
      if len(header) < 12:
        return
      length, = struct.unpack('<Q', header[:8])
      data = f.read(length)
      if len(data) < length or len(f.read(4)) < 4:  # Then the data's CRC.
        return
      yield data


def _scalar(value) -> Optional[float]:
  """The number in a summary value (TF1 simple_value or TF2 tensor)."""
  if value.HasField('simple_value'):
    return float(value.simple_value)
  if value.HasField('tensor'):
    array = tensor_util.make_ndarray(value.tensor)
    if array.size == 1 and array.dtype.kind in 'biuf':
      return float(array.reshape(()))
  return None


def event_files(logdir: str) -> List[str]:
  """The event files under `logdir` (recursively), sorted.

  Raises:
    ValueError: `logdir` does not exist.
  """
  if not os.path.isdir(logdir):
    raise ValueError(f'--logdir {logdir!r} does not exist or is not a '
                     f'folder.')
  return sorted(glob.glob(os.path.join(logdir, '**', 'events.out.tfevents*'),
                          recursive=True))


def read_scalars(logdir: str) -> Dict[str, Series]:
  """Every scalar tag in the event files under `logdir`.

  Points are taken in wall-time order. A point whose step is below the
  previous one (a run resumed from an earlier checkpoint), or equal to it
  but written to another event file (a resumed run logging again the step
  its stop logged), drops the earlier points of the tag at that step or
  later. Points at one step in one file (episodes that end together) are
  all kept.

  Raises:
    ValueError: `logdir` is missing or holds no event files.
  """
  files = event_files(logdir)
  if not files:
    raise ValueError(f'No TensorBoard event files (events.out.tfevents*) '
                     f'under {logdir!r}.')
  points = {}  # tag -> [(wall_time, step, value, file index)]
  for index, path in enumerate(files):
    for record in _records(path):
      event = event_pb2.Event.FromString(record)
      if not event.HasField('summary'):
        continue
      for value in event.summary.value:
        number = _scalar(value)
        if number is not None:
          points.setdefault(value.tag, []).append(
              (event.wall_time, event.step, number, index))
  scalars = {}
  for tag, tag_points in points.items():
    tag_points.sort(key=lambda p: p[0])
    kept = []  # [(step, value, wall_time)]
    last_file = None
    for wall_time, step, number, index in tag_points:
      if kept and (step < kept[-1][0] or
                   (step == kept[-1][0] and index != last_file)):
        kept = [p for p in kept if p[0] < step]
      kept.append((step, number, wall_time))
      last_file = index
    kept.sort(key=lambda p: p[0])
    scalars[tag] = Series(np.array([p[0] for p in kept], np.int64),
                          np.array([p[1] for p in kept], np.float64),
                          np.array([p[2] for p in kept], np.float64))
  return scalars


def curves(scalars: Dict[str, Series], prefix: str,
           suffix: str = '/return') -> Dict[str, Series]:
  """The tags `<prefix><name><suffix>`, keyed by name.

  E.g. `curves(scalars, 'eval/')` maps 'atari:Pong' to the series of
  'eval/atari:Pong/return'.
  """
  pattern = re.compile(re.escape(prefix) + '(.+)' + re.escape(suffix) + '$')
  found = {}
  for tag, series in scalars.items():
    match = pattern.match(tag)
    if match:
      found[match.group(1)] = series
  return found
