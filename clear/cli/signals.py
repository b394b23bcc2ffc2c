"""What SIGTERM and SIGINT do to `python -m clear.train`, and what a run
stopped at once leaves on disk.
"""

import os
import signal
import time

from absl import logging

from clear import checkpoint as checkpoint_lib
from clear.runtime import progress


class StopSignal:
  """What SIGTERM and SIGINT do.

  Until `started` is called (flag checks, restores, test mode: nothing of
  the run written yet), a signal stops the program at once
  (KeyboardInterrupt). Once the run has started, the first asks it to stop
  after the current update and write a final checkpoint; a second only says
  that the checkpoint is being written; a third stops at once
  (KeyboardInterrupt), and `main` says what was not saved.

  Attributes:
    signum: the first signal received, or None.
    first_at: when it came (time.time()).
  """

  def __init__(self, install: bool = True):
    self.signum = None
    self.first_at = None
    self.count = 0
    self.running = False
    if install:
      for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, self._handle)

  def started(self):
    """The run is accepted and writes from now on: stop politely.

    Raises:
      KeyboardInterrupt: a signal came before, and was swallowed (as
        MinAtar's import swallows one).
    """
    self.raise_if_interrupted()
    self.running = True

  def _handle(self, signum, frame):
    del frame
    self.count += 1
    if self.signum is None:
      self.signum, self.first_at = signum, time.time()
    if not self.running or self.count >= 3:
      raise KeyboardInterrupt
    if self.count == 1:
      logging.warning('Signal %d: stopping after the current update and '
                      'writing a final checkpoint.', signum)
    else:
      logging.warning('Signal %d again: still stopping, and the final '
                      'checkpoint is being written (a large replay takes a '
                      'while). A third signal stops at once without it.',
                      signum)

  def raise_if_interrupted(self):
    """Raises KeyboardInterrupt when a signal came (and was swallowed)."""
    if self.signum is not None:
      raise KeyboardInterrupt

  def __call__(self) -> bool:
    return self.signum is not None


def unsaved(logdir: str, since: float) -> str:
  """What a run stopped at once left on disk, for its last message."""
  directory = os.path.join(logdir, 'checkpoints')
  found = (checkpoint_lib.checkpoint_candidates(directory)
           if os.path.isdir(directory) else [])
  if not found:
    return ('no checkpoint was written, so its training is lost; the same '
            'command starts it again.')
  latest = found[0]
  try:
    saved_at = os.path.getmtime(latest + '.index')
  except OSError:
    saved_at = 0.0
  name = os.path.basename(latest)
  if saved_at >= since:
    return (f'the final checkpoint {name} had been written; the same '
            'command resumes from it.')
  ago = progress.format_duration(time.time() - saved_at)
  return (f'the final checkpoint was NOT written, so the training since '
          f'{name} (saved {ago} ago) is lost; the same command resumes from '
          f'{name}.')


def exit_now(code: int):
  """Late signals, once the work is done, must not change the exit status.

  While Python code still runs (threads joining, exit hooks), a signal ends
  the program at once with `code`. Python puts the default handlers back
  late in its shutdown, where a signal would kill the process (status -15);
  the last exit hook (`clear/train.py` registers it before its imports
  register theirs) makes the kernel ignore both signals before that.

  Nor may an interrupt that was caught: CPython remembers a
  KeyboardInterrupt that left `exec` of a string (namedtuple and
  dataclasses build their methods so, many times while matplotlib is
  imported), even one caught later, and then ends a `python -m` program by
  SIGINT (status -2) instead of `code`. Running any string forgets it.
  """
  def handle(signum, frame):
    del signum, frame
    os._exit(code)  # pylint: disable=protected-access
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, handle)
  exec('pass')  # pylint: disable=exec-used
