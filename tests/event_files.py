"""What a logdir's TensorBoard event files and latest checkpoint hold, read
with TensorFlow's own readers, for tests of what a run writes."""

import glob
import os
from typing import Dict, List, Set, Tuple

import numpy as np
import tensorflow as tf


def _event_files(logdir) -> List[str]:
  return sorted(glob.glob(os.path.join(str(logdir), 'events.*')))


def scalar_series(logdir, tag: str) -> List[Tuple[int, float]]:
  """(step, value) of every scalar summary `tag` in `logdir`'s event files,
  file by file in name order (so in the order written)."""
  found = []
  for path in _event_files(logdir):
    for event in tf.compat.v1.train.summary_iterator(path):
      found += [(event.step, float(tf.make_ndarray(v.tensor)))
                for v in event.summary.value if v.tag == tag]
  return found


def tags(logdir) -> Set[str]:
  """Every summary tag in `logdir`'s event files."""
  found = set()
  for path in _event_files(logdir):
    for event in tf.compat.v1.train.summary_iterator(path):
      found.update(v.tag for v in event.summary.value)
  return found


def saved_tensors(logdir, prefix: str = '') -> Dict[str, np.ndarray]:
  """The tensors of `logdir`'s latest checkpoint whose keys start with
  `prefix`, by key."""
  path = tf.train.latest_checkpoint(os.path.join(str(logdir), 'checkpoints'))
  reader = tf.train.load_checkpoint(path)
  return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
          if k.startswith(prefix)}
