"""One live training run per logdir: an OS file lock in the logdir.

A training run holds an exclusive `flock` on `<logdir>/.run.lock` from the
moment it starts checking the logdir until it ends. The lock belongs to
the open file, so the OS drops it when the process ends in any way
(SIGKILL, a power cut): there is never a stale lock to clean up. The file
holds who took it (host, PID, start time, command line), read by the
messages of anyone who finds the logdir busy, and is removed when the run
releases it; a file left by a killed run holds no lock and is simply taken
over by the next one.

A refused start leaves the logdir as it found it: `RunLock.abandon` removes
the lock file and every folder that `RunLock.acquire` had to create.
Readers (test mode, `clear.plot`) only ask `live_holder`, which never
creates anything and takes a shared lock for an instant; a training run
that starts at that instant retries for a moment before it gives up.

Pure Python (fcntl, POSIX): `clear.plot` uses it without TensorFlow.
"""

import errno
import fcntl
import json
import os
import socket
import sys
import time
from typing import List, NamedTuple, Optional

LOCK_FILE = '.run.lock'
# How long a start waits for a lock held by a reader's probe (an instant)
# before it takes the holder for a live run.
RETRY_S = 1.0


class Holder(NamedTuple):
  """Who holds a logdir's lock.

  Attributes:
    host: the machine's name.
    pid: the process id there.
    started: seconds since the epoch when it took the lock.
    command: its command line.
  """
  host: str
  pid: int
  started: float
  command: str

  def describe(self) -> str:
    """E.g. 'PID 4121 on host vm, started 2026-11-29 02:16:44'."""
    when = time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(self.started))
    return f'PID {self.pid} on host {self.host}, started {when}'


UNKNOWN_HOLDER = Holder('?', 0, 0.0, '')


class LogdirInUse(RuntimeError):
  """Another live run holds the logdir."""

  def __init__(self, logdir: str, holder: Holder):
    self.logdir = logdir
    self.holder = holder
    who = (holder.describe() if holder != UNKNOWN_HOLDER
           else 'a process that is still starting')
    super().__init__(
        f'--logdir={logdir} is in use by a live training run ({who}). '
        'Stop that run first (running its command again then resumes it), '
        'or choose another --logdir.')


def lock_path(logdir: str) -> str:
  return os.path.join(logdir, LOCK_FILE)


def _read_holder(fd: int) -> Holder:
  """The holder recorded in an open lock file (UNKNOWN_HOLDER if it is
  empty or garbled, e.g. while its owner is still writing it)."""
  try:
    os.lseek(fd, 0, os.SEEK_SET)
    data = json.loads(os.read(fd, 65536).decode('utf-8'))
    return Holder(str(data['host']), int(data['pid']),
                  float(data['started']), str(data.get('command', '')))
  except (OSError, ValueError, KeyError, TypeError):
    return UNKNOWN_HOLDER


def _busy(error: OSError) -> bool:
  return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def live_holder(logdir: str) -> Optional[Holder]:
  """The live run holding `logdir`, or None. Creates nothing."""
  try:
    fd = os.open(lock_path(logdir), os.O_RDONLY | os.O_CLOEXEC)
  except OSError:
    return None  # No lock file (or none readable): no live run.
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
      if _busy(e):
        return _read_holder(fd)
      return None
    fcntl.flock(fd, fcntl.LOCK_UN)
    return None
  finally:
    os.close(fd)


def _missing_folders(logdir: str) -> List[str]:
  """`logdir` and its ancestors that do not exist yet, deepest first."""
  missing = []
  path = os.path.abspath(logdir)
  while not os.path.exists(path):
    missing.append(path)
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  return missing


class RunLock:
  """The exclusive lock of a logdir, held by one training run.

  Use `acquire`; then `release` when the run ends, or `abandon` when the
  start is refused (which also removes the folders `acquire` created).
  """

  def __init__(self, logdir: str, fd: int, created: List[str]):
    self.logdir = logdir
    self._fd = fd
    self._created = created

  @classmethod
  def acquire(cls, logdir: str, retry_s: float = RETRY_S) -> 'RunLock':
    """Takes the logdir's lock, creating the logdir if needed.

    Raises:
      LogdirInUse: a live run holds it (its holder is named).
      OSError: the logdir or the lock file cannot be created.
    """
    created = _missing_folders(logdir)
    os.makedirs(logdir, exist_ok=True)
    path = lock_path(logdir)
    deadline = time.monotonic() + retry_s
    try:
      while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
          fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
          if not _busy(e):
            os.close(fd)
            raise
          if time.monotonic() < deadline:  # Perhaps a reader's probe.
            os.close(fd)
            time.sleep(0.05)
            continue
          holder = _read_holder(fd)
          os.close(fd)
          raise LogdirInUse(logdir, holder) from None
        # The file may have been removed (or replaced) by the run that held
        # it between our open and our lock: then ours is not the lock file.
        try:
          same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
          same = False
        if same:
          break
        os.close(fd)
      record = {'host': socket.gethostname(), 'pid': os.getpid(),
                'started': time.time(), 'command': ' '.join(sys.argv)}
      os.ftruncate(fd, 0)
      os.pwrite(fd, json.dumps(record).encode('utf-8'), 0)
    except BaseException:
      _remove_empty(created)
      raise
    return cls(logdir, fd, created)

  @property
  def held(self) -> bool:
    return self._fd is not None

  def release(self):
    """Ends the run's hold: removes the lock file, then drops the lock."""
    if self._fd is None:
      return
    try:
      os.remove(lock_path(self.logdir))
    except OSError:
      pass  # Gone with its folder, or a read-only logdir: the lock drops.
    os.close(self._fd)
    self._fd = None

  def abandon(self):
    """A refused start: releases and removes the folders `acquire` made,
    so the logdir is left as it was found."""
    self.release()
    _remove_empty(self._created)
    self._created = []


def _remove_empty(folders: List[str]):
  """Removes each folder (deepest first) that is empty."""
  for folder in folders:
    try:
      os.rmdir(folder)
    except OSError:
      return  # Not empty (or gone): its parents are not empty either.
