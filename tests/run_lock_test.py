"""Tests of clear.runtime.run_lock: one live run per logdir, nothing left
behind."""

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from clear.runtime import run_lock

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listing(folder):
  return sorted(os.listdir(folder))


def test_a_second_lock_is_refused_naming_the_first(tmp_path):
  logdir = str(tmp_path / 'a' / 'b' / 'run')
  first = run_lock.RunLock.acquire(logdir)
  try:
    with open(run_lock.lock_path(logdir)) as f:
      recorded = json.load(f)
    assert recorded['pid'] == os.getpid()
    assert recorded['host'] == socket.gethostname()
    assert abs(recorded['started'] - time.time()) < 60
    # Another open file description conflicts, even in this process.
    with pytest.raises(run_lock.LogdirInUse) as raised:
      run_lock.RunLock.acquire(logdir, retry_s=0.2)
    message = str(raised.value)
    assert f'--logdir={logdir} is in use by a live training run (PID ' \
           f'{os.getpid()} on host {socket.gethostname()}, started ' in message
    assert 'choose another --logdir' in message
    holder = run_lock.live_holder(logdir)
    assert (holder.pid, holder.host) == (os.getpid(), socket.gethostname())
    assert listing(logdir) == [run_lock.LOCK_FILE]
  finally:
    first.release()
  # Released: the lock file is gone, and the next run takes the logdir.
  assert listing(logdir) == []
  assert run_lock.live_holder(logdir) is None
  second = run_lock.RunLock.acquire(logdir)
  second.release()


def test_a_refused_start_removes_what_it_created(tmp_path):
  existing = tmp_path / 'existing'
  existing.mkdir()
  (existing / 'keep.txt').write_text('mine')
  logdir = str(existing / 'new' / 'deeper' / 'run')
  lock = run_lock.RunLock.acquire(logdir)
  assert os.path.isdir(logdir)
  lock.abandon()
  assert listing(existing) == ['keep.txt']
  # A logdir that existed stays, only the lock file goes.
  lock = run_lock.RunLock.acquire(str(existing))
  lock.abandon()
  assert listing(existing) == ['keep.txt']


def test_a_killed_holder_leaves_no_lock(tmp_path):
  logdir = str(tmp_path / 'run')
  # A real process takes the lock and is killed with SIGKILL.
  holder = subprocess.Popen(
      [sys.executable, '-c',
       'import sys, time; from clear.runtime import run_lock; '
       'run_lock.RunLock.acquire(sys.argv[1]); print("held", flush=True); '
       'time.sleep(600)', logdir],
      cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
      stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    assert run_lock.live_holder(logdir).pid == holder.pid
    with pytest.raises(run_lock.LogdirInUse, match=f'PID {holder.pid} '):
      run_lock.RunLock.acquire(logdir, retry_s=0.1)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait(30)
  # Its file stays, holding nothing: no stale lock to clean by hand.
  assert os.path.exists(run_lock.lock_path(logdir))
  assert run_lock.live_holder(logdir) is None
  lock = run_lock.RunLock.acquire(logdir)
  with open(run_lock.lock_path(logdir)) as f:
    assert json.load(f)['pid'] == os.getpid()
  lock.release()


def test_a_readers_probe_does_not_refuse_a_start(tmp_path):
  logdir = str(tmp_path)
  stale = run_lock.RunLock.acquire(logdir)
  stale.release()
  open(run_lock.lock_path(logdir), 'w').close()  # A killed run's file.
  probe = os.open(run_lock.lock_path(logdir), os.O_RDONLY)
  fcntl.flock(probe, fcntl.LOCK_SH)  # A reader, in the middle of its probe.
  timer = threading.Timer(0.3, lambda: os.close(probe))
  timer.start()
  started = time.monotonic()
  lock = run_lock.RunLock.acquire(logdir, retry_s=5.0)
  assert 0.2 < time.monotonic() - started < 5.0
  lock.release()
  timer.join()


def test_a_lock_file_replaced_while_locking_is_not_taken(tmp_path,
                                                         monkeypatch):
  # The holder removes its file and a newcomer creates another between our
  # open and our lock: the lock on the removed file must not count.
  logdir = str(tmp_path)
  path = run_lock.lock_path(logdir)
  real_flock = fcntl.flock
  calls = []

  def flock_after_a_replacement(fd, operation):
    calls.append(operation)
    if len(calls) == 1:
      os.remove(path)
      open(path, 'w').close()
    return real_flock(fd, operation)

  monkeypatch.setattr(run_lock.fcntl, 'flock', flock_after_a_replacement)
  lock = run_lock.RunLock.acquire(logdir)
  monkeypatch.undo()
  assert len(calls) == 2  # Locked the removed file, then the real one.
  assert run_lock.live_holder(logdir).pid == os.getpid()
  lock.release()
  assert run_lock.live_holder(logdir) is None
