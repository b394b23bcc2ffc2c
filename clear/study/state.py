"""Where each run of a study stands, from what its runs leave on disk.

A study keeps no database: a run's state is read from its logdir, its
kept copy and two files the study writes beside the logdirs, in
`<root>/.study/`: `<label>.log` (what `clear.train` printed, appended at
each start) and `<label>.json` (how its last process ended). So `status`
works from any machine that sees the files, while `run` works or not.

  * finished: its last process exited 0 (the run reached its frames), or
    its kept copy exists (kept only once finished);
  * running: a live process holds its logdir's lock
    (`clear.runtime.run_lock`);
  * failed: its last process exited with an error; the state keeps the
    last error line of its log;
  * stopped: its last process was stopped (Ctrl-C, SIGTERM) with a final
    checkpoint, so the next `run` resumes it;
  * pending: none of these (never started, or started by hand).

Frames, the latest training return and the ETA come from the newest
progress line of its log (`clear.runtime.progress.progress_line`), or, for
a run started by hand, from its event files.
"""

import json
import os
import re
import time
from typing import NamedTuple, Optional

from clear.analysis import events
from clear.runtime import run_lock
from clear.study import spec as spec_lib

STATE_DIR = '.study'
FINISHED, RUNNING, FAILED, STOPPED, PENDING = (
    'finished', 'running', 'failed', 'stopped', 'pending')
# clear.train's exit statuses when a signal stopped it after its final
# checkpoint (128 + SIGINT, 128 + SIGTERM).
STOPPED_EXITS = (130, 143)

_PROGRESS = re.compile(
    r'frames (?P<frames>[\d,]+)/(?P<total>[\d,]+) .*\| return (?P<ret>\S+) '
    r'.*\| ETA (?P<eta>\S+)')


def state_dir(run: spec_lib.Run) -> str:
  return os.path.join(os.path.dirname(run.logdir), STATE_DIR)


def log_path(run: spec_lib.Run) -> str:
  return os.path.join(state_dir(run), f'{run.label}.log')


def _exit_path(run: spec_lib.Run) -> str:
  return os.path.join(state_dir(run), f'{run.label}.json')


def last_error_line(log: str) -> str:
  """The line of `log` (a run's output) that says why it ended: the last
  'error:' or exception line, else the last line."""
  lines = [line.strip() for line in log.splitlines() if line.strip()]
  for line in reversed(lines):
    if (line.startswith(('error:', 'FATAL')) or 'Error:' in line or
        line.startswith(('E1', 'E0'))):
      return line
  return lines[-1] if lines else ''


def _tail(path: str, size: int = 65536) -> str:
  try:
    with open(path, 'rb') as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - size))
      return f.read().decode('utf-8', errors='replace')
  except OSError:
    return ''


def stopped_before_start(run: spec_lib.Run) -> bool:
  """Whether the run's last process was interrupted before its run
  started (it then wrote nothing)."""
  return 'Interrupted before the run started' in _tail(log_path(run), 1024)


def record_exit(run: spec_lib.Run, code: int, started: float):
  """Writes how the run's process ended (atomically)."""
  os.makedirs(state_dir(run), exist_ok=True)
  if code == 0:
    state, error = FINISHED, ''
  elif code in STOPPED_EXITS:
    state, error = STOPPED, ''
  else:
    state, error = FAILED, last_error_line(_tail(log_path(run)))
  record = {'state': state, 'exit_code': code, 'error': error,
            'started': started, 'ended': time.time()}
  path = _exit_path(run)
  with open(path + '.tmp', 'w') as f:
    json.dump(record, f, indent=1)
  os.replace(path + '.tmp', path)


def clear_exit(run: spec_lib.Run):
  """Forgets how the run's last process ended (it is starting again)."""
  try:
    os.remove(_exit_path(run))
  except FileNotFoundError:
    pass


def _last_exit(run: spec_lib.Run) -> dict:
  try:
    with open(_exit_path(run)) as f:
      record = json.load(f)
    return record if isinstance(record, dict) else {}
  except (OSError, ValueError):
    return {}


def is_kept(run: spec_lib.Run) -> bool:
  return bool(run.keep) and os.path.isfile(os.path.join(run.keep,
                                                        'run.json'))


class Progress(NamedTuple):
  frames: Optional[int]
  total: Optional[int]
  latest_return: Optional[float]
  eta: str


NO_PROGRESS = Progress(None, None, None, '')


def progress(run: spec_lib.Run) -> Progress:
  """The run's frames, total frames, latest training return and ETA."""
  for line in reversed(_tail(log_path(run)).splitlines()):
    match = _PROGRESS.search(line)
    if match:
      ret = match.group('ret')
      return Progress(int(match.group('frames').replace(',', '')),
                      int(match.group('total').replace(',', '')),
                      None if ret == 'n/a' else float(ret),
                      match.group('eta'))
  for logdir in (run.logdir, run.keep):  # Started by hand, or kept.
    if logdir and os.path.isdir(logdir):
      try:
        frames = events.read_scalars(logdir).get('runtime/num_env_frames')
      except (OSError, ValueError):  # No event file yet, or unreadable.
        continue
      if frames is not None and len(frames.values):
        return Progress(int(frames.values[-1]), None, None, '')
  return NO_PROGRESS


class RunStatus(NamedTuple):
  """A run's state (`FINISHED`, ...), the error line of a failed one, and
  its `Progress`."""
  run: spec_lib.Run
  state: str
  error: str
  progress: Progress


def status(run: spec_lib.Run, with_progress: bool = True) -> RunStatus:
  """Where `run` stands now."""
  holder = run_lock.live_holder(run.logdir) if os.path.isdir(
      run.logdir) else None
  last = _last_exit(run)
  if holder is not None:
    state = RUNNING
  elif last.get('state') == FINISHED and os.path.isdir(run.logdir):
    state = FINISHED
  elif is_kept(run):
    state = FINISHED
  elif last.get('state') in (FAILED, STOPPED):
    state = last['state']
  else:
    state = PENDING
  error = last.get('error', '') if state == FAILED else ''
  return RunStatus(run, state, error,
                   progress(run) if with_progress else NO_PROGRESS)
