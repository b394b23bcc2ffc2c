"""Checkpoints: `tf.train.Checkpoint` files, written atomically, restored
strictly.

A run's checkpoint holds every trackable the algorithm names (weights,
optimizer slots, counters, learning rate, the agent's sampling RNG) plus the
run phase. `tf.train.CheckpointManager` writes the data files first and then
replaces the small `checkpoint` index file, so a kill during a write leaves
the previous checkpoint as the latest readable one.

A checkpoint that cannot be read (a truncated or damaged data file, a
missing index) is skipped with a warning that names it, and the newest
readable one is restored instead, together with its companion folder
`state-N` (where the run loop keeps the replay and run state of checkpoint
N); the saves that follow take the numbers after it and so write over the
bad files. Only when no checkpoint can be read does restoring fail, with
one message saying what to do.

Next to the checkpoints, `run.json` records what the checkpoint was made
for (env, algorithm, network); resuming into something else fails with one
clear message instead of a shape error deep in TensorFlow. Test mode and
`--init_from` read it to rebuild the same network. It is checked
(`verify_run_identity`) before anything is restored and written
(`write_run_identity`, atomically) only once a start is accepted, so a
refused command never changes it. Nothing in a logdir is
ever unpickled: checkpoints are TF's own format and the rest JSON.

A write that fails (a full disk, no permission) leaves nothing half-made:
`Checkpointer.save` removes what it wrote of the failed checkpoint, and
`write_failure` says what went wrong in words for the one message the run
stops with (`WriteError`).
"""

import errno
import glob
import json
import logging
import os
import re
import shutil
from typing import Dict, List, Optional, Tuple

import tensorflow as tf

RUN_FILE = 'run.json'
# run.json's key for the learner settings a run last ran with; not part of
# the identity a resume must match.
SETTINGS_KEY = 'settings'
CHECKPOINT_NAME = 'ckpt'  # tf.train.CheckpointManager's file prefix.
# Errors that reading a damaged checkpoint raises: TF's own, and IndexError
# ("Read less bytes than requested") for a truncated data file.
_READ_ERRORS = (tf.errors.OpError, IndexError, ValueError, OSError)
MAX_TO_KEEP = 3  # Checkpoints a run keeps on disk.
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
NOT_WRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)


class CheckpointError(ValueError):
  """A checkpoint cannot be restored into this run."""


class WriteError(OSError):
  """A file of the run could not be written; the message names it, says
  why and what is intact."""


def write_errno(error: BaseException) -> Optional[int]:
  """The errno of a failed write: an `OSError`'s, or for a TensorFlow
  error the one of `NO_SPACE` or `NOT_WRITABLE` its message names."""
  if isinstance(error, OSError):
    return error.errno
  text = str(error)
  return next((code for code in NO_SPACE + NOT_WRITABLE
               if os.strerror(code) in text), None)


def write_failure(error: BaseException) -> Tuple[str, str]:
  """What a failed write's `error` means, and what to do before trying
  again: ('no space left on the device', 'free space') for ENOSPC, the
  path cannot be written for a permission or a read-only file system, else
  the error itself."""
  code = write_errno(error)
  if code in NO_SPACE:
    return ('no space left on the device' + (
        ' (the disk quota is exceeded)' if code == errno.EDQUOT else ''),
            'free space')
  if code in NOT_WRITABLE:
    return (f'the path cannot be written ({os.strerror(code)}: no '
            'permission there, or a file system mounted read-only)',
            'make it writable')
  text = (error.message if isinstance(error, tf.errors.OpError)
          else str(error))
  text = re.sub(r'\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]', '', text).strip()
  return (text.splitlines()[0] if text else type(error).__name__), 'fix that'


def write_error(what: str, error: BaseException, intact: List[int],
                kept: str = '') -> WriteError:
  """The one message a run stops with when writing `what` failed with
  `error`: the cause, `kept` (what of `what` was kept, if it says), and
  the latest checkpoint of the numbers `intact`, which the same command
  resumes from."""
  cause, fix = write_failure(error)
  last = (f'{CHECKPOINT_NAME}-{max(intact)} with its state is intact: {fix} '
          'and rerun the same command to resume from there' if intact else
          f'there is no earlier checkpoint: {fix} and rerun the same command '
          'to start again')
  return WriteError(f'Could not write {what}: {cause}. {kept}{last}.')


def run_directory(location: str) -> str:
  """The logdir of a checkpoint location: a run's logdir, its
  `checkpoints/` folder or a `.../checkpoints/ckpt-N` prefix."""
  location = os.path.normpath(location)
  folder = location if os.path.isdir(location) else os.path.dirname(location)
  if os.path.basename(folder) == 'checkpoints':
    return os.path.dirname(folder)
  return folder


def read_run_identity(location: str) -> Optional[Dict[str, object]]:
  """The `run.json` of the run at `location` (see `run_directory`), or
  None when there is none.

  Raises:
    CheckpointError: the file is there but cannot be read.
  """
  path = os.path.join(run_directory(location), RUN_FILE)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as f:
      saved = json.load(f)
  except (OSError, ValueError) as e:
    raise CheckpointError(f'{path} is unreadable ({e}); move it away or '
                          'use a new --logdir.') from e
  if not isinstance(saved, dict):
    raise CheckpointError(f'{path} does not hold a JSON object; move it '
                          'away or use a new --logdir.')
  return saved


def as_json(value):
  """`value` as JSON would read it back; values JSON cannot hold (e.g. an
  injected env factory) compare by repr."""
  return json.loads(json.dumps(value, default=repr, sort_keys=True))


def verify_run_identity(directory: str, identity: Dict[str, object]
                        ) -> Optional[Dict[str, object]]:
  """Checks that the run.json in `directory`, if any, records `identity`;
  writes nothing.

  Returns:
    The run.json's contents, or None when there is none.

  Raises:
    CheckpointError: naming the fields that differ, or an unreadable file.
  """
  identity = as_json(identity)
  saved = read_run_identity(directory)
  if saved is None:
    return None
  diffs = {k: (saved.get(k), v) for k, v in identity.items()
           if saved.get(k) != v}
  if diffs:
    described = ', '.join(f'{k}: checkpoint has {a!r}, flags say {b!r}'
                          for k, (a, b) in sorted(diffs.items()))
    raise CheckpointError(
        f'The logdir {directory} holds a run made with other settings '
        f'({described}). Use a new --logdir or the original flags.')
  return saved


def write_run_identity(directory: str, identity: Dict[str, object],
                       settings: Optional[Dict[str, object]] = None,
                       extra: Optional[Dict[str, object]] = None):
  """Records `identity` (and `settings`, and `extra`) in the run.json of
  `directory`.

  `settings` (learner settings a resume may change, such as the batch size)
  go under SETTINGS_KEY, and each key of `extra` at the top level, replaced
  on every start, so the file holds the ones the run last ran with; an
  identity already recorded is kept as it is. The file is replaced
  atomically (a temporary file, then a rename), and not rewritten when
  nothing changes.

  Raises:
    CheckpointError: run.json records another identity.
  """
  saved = verify_run_identity(directory, identity)
  identity, settings, extra = as_json((identity, settings, extra or {}))
  if saved is not None:
    if ((settings is None or saved.get(SETTINGS_KEY) == settings) and
        all(saved.get(k) == v for k, v in extra.items())):
      return
    identity = saved  # Keeps what the run recorded beside its identity.
  record = ({**identity, **extra} if settings is None
            else {**identity, **extra, SETTINGS_KEY: settings})
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, RUN_FILE)
  tmp = f'{path}.{os.getpid()}.tmp'
  try:
    with open(tmp, 'w') as f:
      json.dump(record, f, indent=2, sort_keys=True)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException as e:
    if os.path.exists(tmp):
      os.remove(tmp)
    if isinstance(e, OSError):
      cause, fix = write_failure(e)
      raise WriteError(f'Could not write {path}: {cause}. It is as it was; '
                       f'{fix} and rerun the same command.') from e
    raise


def check_run_identity(directory: str, identity: Dict[str, object],
                       settings: Optional[Dict[str, object]] = None):
  """Writes `identity` on a new run; on resume checks it did not change
  (`verify_run_identity`, then `write_run_identity`).

  Raises:
    CheckpointError: naming the fields that differ.
  """
  write_run_identity(directory, identity, settings)


def check_fresh_start(logdir: str, saved_identity) -> None:
  """Called when `logdir` has no checkpoint to resume: refuses to start
  over a `checkpoints/state-N` left without its checkpoint (the first save
  would delete it), and warns when run.json (`saved_identity`, or None)
  says a run started there before.

  Raises:
    CheckpointError: naming the orphaned folders and what to do.
  """
  directory = os.path.join(logdir, 'checkpoints')
  orphans = sorted(
      (name for name in (os.listdir(directory) if os.path.isdir(directory)
                         else ())
       if re.fullmatch(r'state-\d+', name) and
       os.path.isdir(os.path.join(directory, name))),
      key=lambda name: int(name.split('-')[1]))
  if orphans:
    raise CheckpointError(
        f'{directory} holds {", ".join(orphans)} (replay and run state) but '
        'no checkpoint: the ckpt-N files are gone, so the run cannot be '
        'resumed, and starting over would delete that state. Put the '
        'checkpoint files back to resume it; to start again from frame 0, '
        f'move {directory} away first (or use a new --logdir).')
  if saved_identity is not None:
    logging.warning(
        '%s holds the run.json of an earlier start but no checkpoint (none '
        'was written, or they were removed): this run starts from frame 0, '
        'beside the earlier event files.', logdir)


def checkpoint_number(path: str) -> int:
  """'.../ckpt-12' -> 12."""
  return int(path.rsplit('-', 1)[1])


def state_dir(directory: str, number: int) -> str:
  """The folder the run loop writes beside checkpoint `number` (replay,
  unrolls not yet learned from, run and actor state)."""
  return os.path.join(directory, f'state-{number}')


def checkpoint_candidates(directory: str) -> List[str]:
  """The checkpoints in `directory`, newest first.

  The one the `checkpoint` index file names as the latest comes first, then
  every other one it lists or that has files on disk (`ckpt-N.index` or
  `ckpt-N.data-*`), highest number first: a damaged or lost index file
  hides none of them.
  """
  pattern = re.compile(rf'^{CHECKPOINT_NAME}-(\d+)'
                       r'(?:\.index|\.data-\d+-of-\d+)?$')
  numbers, latest = set(), None
  state = tf.train.get_checkpoint_state(directory)  # None if unreadable.
  if state is not None:
    for path in [state.model_checkpoint_path,
                 *state.all_model_checkpoint_paths]:
      match = pattern.match(os.path.basename(path))
      if match:
        numbers.add(int(match.group(1)))
        if latest is None:
          latest = int(match.group(1))
  for path in glob.glob(os.path.join(glob.escape(directory),
                                     f'{CHECKPOINT_NAME}-*')):
    match = pattern.match(os.path.basename(path))
    if match:
      numbers.add(int(match.group(1)))
  order = sorted(numbers, key=lambda n: (n != latest, -n))
  return [os.path.join(directory, f'{CHECKPOINT_NAME}-{n}') for n in order]


def _first_line(error: BaseException) -> str:
  text = str(error).strip().splitlines()
  return f'{type(error).__name__}: {text[0][:300] if text else ""}'.rstrip(
      ': ')


def unreadable_reason(path: str) -> Optional[str]:
  """Why the checkpoint `path` (a `ckpt-N` prefix) cannot be read, or None.

  Every value in it is read back, which makes TF check each against its
  checksum: a truncated or damaged file is found here, before anything is
  restored from it.
  """
  name = os.path.basename(path)
  if not tf.io.gfile.exists(path + '.index'):
    return f'{name}.index is missing'
  try:
    reader = tf.train.load_checkpoint(path)
    for key in reader.get_variable_to_dtype_map():
      reader.get_tensor(key)
  except _READ_ERRORS as e:
    return _first_line(e)
  return None


def _described(path: str) -> str:
  """'ckpt-3', or 'ckpt-3 (with state-3)' where that folder exists."""
  name = os.path.basename(path)
  try:
    state = state_dir(os.path.dirname(path), checkpoint_number(path))
  except ValueError:
    return name
  if os.path.isdir(state):
    return f'{name} (with {os.path.basename(state)})'
  return name


def newest_readable(paths: List[str], where: str) -> Optional[str]:
  """The first of `paths` (newest first) that reads back; a warning names
  each checkpoint skipped on the way.

  Returns:
    The checkpoint, or None when `paths` is empty.

  Raises:
    CheckpointError: there are checkpoints, but none can be read.
  """
  skipped = []
  for path in paths:
    reason = unreadable_reason(path)
    if reason is None:
      if skipped:
        logging.warning(
            'Skipping unreadable checkpoint%s in %s: %s. Restoring %s '
            'instead.', 's' if len(skipped) > 1 else '', where,
            '; '.join(skipped), _described(path))
      return path
    skipped.append(f'{_described(path)}: {reason}')
  if skipped:
    raise CheckpointError(
        f'No checkpoint in {where} can be read ({"; ".join(skipped)}). '
        'Put the files back from a backup; to start the run afresh, move '
        'them away (or use a new --logdir).')
  return None


class _UnrestoredValuesFilter(logging.Filter):
  """Drops TensorFlow's list of values a failed restore left unmatched,
  printed when the objects are collected; the CheckpointError raised says
  what went wrong in one line."""

  def filter(self, record):
    message = record.getMessage()
    return not message.startswith((
        'Detecting that an object or model or tf.train.Checkpoint',
        'Value in checkpoint could not be found',
        'An attribute in the restored object could not be found'))


def _silence_unrestored_values():
  logger = tf.get_logger()
  if not any(isinstance(f, _UnrestoredValuesFilter) for f in logger.filters):
    logger.addFilter(_UnrestoredValuesFilter())


class Checkpointer:
  """Saves and restores a dict of trackables under `directory`.

  Args:
    directory: where checkpoint files go.
    trackables: name -> `tf.Module` / `tf.Variable` / optimizer.
    max_to_keep: checkpoints kept on disk.
  """

  def __init__(self, directory: str, trackables: Dict[str, object],
               max_to_keep: int = MAX_TO_KEEP):
    self.directory = directory
    self._checkpoint = tf.train.Checkpoint(**trackables)
    self._manager = tf.train.CheckpointManager(
        self._checkpoint, directory, max_to_keep=max_to_keep,
        checkpoint_name=CHECKPOINT_NAME)

  def restore_latest(self) -> Optional[str]:
    """Restores the newest readable checkpoint, if any; returns its path.

    Unreadable newer ones are skipped with a warning (see
    `newest_readable`); the saves that follow take the numbers after the
    restored one's and so write over them. Every object that exists now
    must find its values in the checkpoint (objects created later, such as
    optimizer slots, are restored when they are created).

    Raises:
      CheckpointError: no checkpoint can be read, or the newest readable
        one belongs to another model.
    """
    path = newest_readable(checkpoint_candidates(self.directory),
                           self.directory)
    if path is None:
      return None
    try:
      status = self._checkpoint.restore(path)
      status.assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError) as e:
      _silence_unrestored_values()
      raise CheckpointError(
          f'Cannot restore {path}: it was written for a different network '
          f'or algorithm ({_first_line(e)}).') from e
    logging.info('Restored checkpoint %s', path)
    self._status = status
    return path

  def expect_partial(self):
    """The restored checkpoint's values for objects never created (e.g.
    optimizer slots of a run that makes no update) are not needed: TF then
    does not list them when the objects are collected."""
    if getattr(self, '_status', None) is not None:
      self._status.expect_partial()

  @property
  def next_number(self) -> int:
    """The number the next `save` will carry (ckpt-<number>)."""
    return int(self._checkpoint.save_counter.numpy()) + 1

  @property
  def kept_numbers(self):
    """Numbers of the checkpoints still on disk."""
    return [checkpoint_number(p) for p in self._manager.checkpoints]

  def save(self) -> str:
    """Writes checkpoint `next_number`; returns its path.

    Raises:
      tf.errors.OpError, OSError: the write failed (a full disk, say).
        Nothing of the checkpoint is left (no `ckpt-N.*`, no temporary
        folder), the index still names the checkpoint before, and the next
        save takes the same number.
    """
    number = self.next_number
    path = os.path.join(self.directory, f'{CHECKPOINT_NAME}-{number}')
    try:
      self._manager.save(checkpoint_number=number)
    except (tf.errors.OpError, OSError) as e:
      state = tf.train.get_checkpoint_state(self.directory)
      if (state is None or os.path.basename(state.model_checkpoint_path) !=
          os.path.basename(path) or unreadable_reason(path) is not None):
        self._remove(number)
        raise
      # Written and recorded as the latest; only the rest failed (e.g.
      # rewriting the index after deleting the oldest).
      logging.warning('Checkpoint %s was written, but then: %s', path,
                      _first_line(e))
    logging.info('Saved checkpoint %s', path)
    return path

  def _remove(self, number: int):
    """Removes what a failed save of checkpoint `number` left: its files,
    the temporary folder and index file TF writes them through."""
    self._checkpoint.save_counter.assign(number - 1)
    prefix = os.path.join(glob.escape(self.directory),
                          f'{CHECKPOINT_NAME}-{number}')
    for path in (glob.glob(prefix + '.*') + glob.glob(prefix + '_temp*') +
                 glob.glob(os.path.join(glob.escape(self.directory),
                                        'checkpoint.tmp*'))):
      if os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)
      elif os.path.exists(path):
        os.remove(path)


def find_checkpoints(location: str) -> List[str]:
  """The checkpoints a user named, newest first: those of a run's logdir
  or of its `checkpoints/` folder, or the one `.../ckpt-N` prefix given."""
  for directory in (os.path.join(location, 'checkpoints'), location):
    if os.path.isdir(directory):
      found = checkpoint_candidates(directory)
      if found:
        return found
  if tf.io.gfile.glob(location + '.index') or tf.io.gfile.glob(
      location + '.data-*'):
    return [location]
  return []


def restore_part(location: str, trackables: Dict[str, object]) -> str:
  """Restores some named objects from a checkpoint (see `find_checkpoints`
  for `location`), e.g. just what acting needs.

  Used by test mode and for explicit partial restores; other objects in the
  checkpoint (optimizers, counters) are ignored on purpose. In a folder,
  the newest readable checkpoint is used (see `newest_readable`).

  Args:
    location: a run's logdir, checkpoints folder or checkpoint path.
    trackables: name -> object, named as in the full checkpoint.

  Returns:
    The checkpoint's path.

  Raises:
    CheckpointError: no (readable) checkpoint, or one for a different
      network.
  """
  path = newest_readable(find_checkpoints(location), location)
  if path is None:
    raise CheckpointError(f'No checkpoint in {location}; train first.')
  try:
    status = tf.train.Checkpoint(**trackables).restore(path)
    status.assert_existing_objects_matched()
    status.expect_partial()
  except (tf.errors.OpError, AssertionError, ValueError) as e:
    _silence_unrestored_values()
    raise CheckpointError(
        f'Cannot restore {sorted(trackables)} from {path}: it was written '
        f'for a different network ({_first_line(e)}).') from e
  return path
