"""Checkpoints: `tf.train.Checkpoint` files, written atomically, restored strictly.

A run's checkpoint holds every trackable the algorithm names (weights,
optimizer slots, counters, learning rate, the agent's sampling RNG) plus the
run phase. `tf.train.CheckpointManager` writes the data files first and then
replaces the small `checkpoint` index file, so a kill during a write leaves
the previous checkpoint as the latest readable one.

Next to the checkpoints, `run.json` records what the checkpoint was made
for (env, algorithm, network); resuming into something else fails with one
clear message instead of a shape error deep in TensorFlow. Nothing in a
logdir is ever unpickled: checkpoints are TF's own format and the rest JSON.
"""

import json
import logging
import os
from typing import Dict, Optional

import tensorflow as tf

RUN_FILE = 'run.json'


class CheckpointError(ValueError):
  """A checkpoint cannot be restored into this run."""


def check_run_identity(directory: str, identity: Dict[str, object]):
  """Writes `identity` on a new run; on resume checks it did not change.

  Raises:
    CheckpointError: naming the fields that differ.
  """
  os.makedirs(directory, exist_ok=True)
  # Values JSON cannot hold (e.g. an injected env factory) compare by repr.
  identity = json.loads(json.dumps(identity, default=repr, sort_keys=True))
  path = os.path.join(directory, RUN_FILE)
  if os.path.exists(path):
    try:
      with open(path) as f:
        saved = json.load(f)
    except (OSError, ValueError) as e:
      raise CheckpointError(f'{path} is unreadable ({e}); move it away or '
                            'use a new --logdir.') from e
    diffs = {k: (saved.get(k), v) for k, v in identity.items()
             if saved.get(k) != v}
    if diffs:
      described = ', '.join(f'{k}: checkpoint has {a!r}, flags say {b!r}'
                            for k, (a, b) in sorted(diffs.items()))
      raise CheckpointError(
          f'The logdir {directory} holds a run made with other settings '
          f'({described}). Use a new --logdir or the original flags.')
    return
  tmp = path + '.tmp'
  with open(tmp, 'w') as f:
    json.dump(identity, f, indent=2, sort_keys=True)
  os.replace(tmp, path)


class Checkpointer:
  """Saves and restores a dict of trackables under `directory`.

  Args:
    directory: where checkpoint files go.
    trackables: name -> `tf.Module` / `tf.Variable` / optimizer.
    max_to_keep: checkpoints kept on disk.
  """

  def __init__(self, directory: str, trackables: Dict[str, object],
               max_to_keep: int = 3):
    self.directory = directory
    self._checkpoint = tf.train.Checkpoint(**trackables)
    self._manager = tf.train.CheckpointManager(
        self._checkpoint, directory, max_to_keep=max_to_keep)

  @property
  def latest(self) -> Optional[str]:
    return self._manager.latest_checkpoint

  def restore_latest(self) -> Optional[str]:
    """Restores the latest checkpoint, if any; returns its path.

    Every object that exists now must find its values in the checkpoint
    (objects created later, such as optimizer slots, are restored when they
    are created).

    Raises:
      CheckpointError: the checkpoint is corrupt or belongs to another model.
    """
    path = self._manager.latest_checkpoint
    if path is None:
      return None
    try:
      status = self._checkpoint.restore(path)
      status.assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError) as e:
      raise CheckpointError(
          f'Cannot restore {path}: it is corrupt or was written for a '
          f'different network or algorithm ({type(e).__name__}: '
          f'{str(e).splitlines()[0][:300]}).') from e
    logging.info('Restored checkpoint %s', path)
    return path

  @property
  def next_number(self) -> int:
    """The number the next `save` will carry (ckpt-<number>)."""
    return int(self._checkpoint.save_counter.numpy()) + 1

  @property
  def kept_numbers(self):
    """Numbers of the checkpoints still on disk."""
    return [checkpoint_number(p) for p in self._manager.checkpoints]

  def save(self) -> str:
    path = self._manager.save(checkpoint_number=self.next_number)
    logging.info('Saved checkpoint %s', path)
    return path


def checkpoint_number(path: str) -> int:
  """'.../ckpt-12' -> 12."""
  return int(path.rsplit('-', 1)[1])


def find_checkpoint(location: str) -> str:
  """The checkpoint a user named: a run's logdir, its `checkpoints/` folder
  (the latest in either) or one `.../ckpt-N` prefix.

  Raises:
    CheckpointError: nothing readable there.
  """
  for directory in (os.path.join(location, 'checkpoints'), location):
    if os.path.isdir(directory):
      path = tf.train.latest_checkpoint(directory)
      if path is not None:
        return path
  if tf.io.gfile.exists(location + '.index'):
    return location
  raise CheckpointError(f'No checkpoint in {location}; train first.')


def restore_part(location: str, trackables: Dict[str, object]) -> str:
  """Restores some named objects from a checkpoint (see `find_checkpoint`
  for `location`), e.g. just what acting needs.

  Used by test mode and for explicit partial restores; other objects in the
  checkpoint (optimizers, counters) are ignored on purpose.

  Args:
    location: a run's logdir, checkpoints folder or checkpoint path.
    trackables: name -> object, named as in the full checkpoint.

  Returns:
    The checkpoint's path.

  Raises:
    CheckpointError: no checkpoint, or one for a different network.
  """
  path = find_checkpoint(location)
  try:
    status = tf.train.Checkpoint(**trackables).restore(path)
    status.assert_existing_objects_matched()
    status.expect_partial()
  except (tf.errors.OpError, AssertionError, ValueError) as e:
    raise CheckpointError(
        f'Cannot restore {sorted(trackables)} from {path}: it was written '
        f'for a different network ({type(e).__name__}: '
        f'{str(e).splitlines()[0][:300]}).') from e
  return path
