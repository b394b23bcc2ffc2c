"""Runs the unfinished runs of a study as Ray tasks, here or on a cluster.

Each run is one `clear.train` process, started by a Ray task that asks for
the CPUs (and GPUs) the run needs; Ray places the tasks and starts a task
again on another node when its node is lost (`max_retries`), and the new
process resumes from the run's last checkpoint. `--parallel=N` on one
machine is the same path with a local Ray of N CPUs, one a run.

Ray core tasks, not Ray Tune: a run already checkpoints, resumes and
stops itself cleanly, and Tune would wrap each one in a trainable whose
checkpoints and restore duplicate the run's own. What a study needs from
Ray is placement, resource requests and retry on node loss, which plain
tasks give.

A task:
  * waits for the logdir's lock (a process of a lost node may still hold
    it for a moment), then starts `clear.train` in a session of its own,
    its output appended to `<root>/.study/<label>.log`, and killed with
    the task's worker if that dies (the node is lost);
  * polls the study's stop flag: when `run` is interrupted (Ctrl-C, SIGINT
    or SIGTERM), it sends the process one SIGINT, so the run writes its
    final checkpoint, and waits for it to end;
  * records how the process ended (`clear.study.state.record_exit`).
"""

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List, Sequence

from clear.analysis import keep as keep_lib
from clear.runtime import run_lock
from clear.study import spec as spec_lib
from clear.study import state as state_lib

# Seconds a task waits for a logdir's lock held by another process.
LOCK_WAIT_S = 120.0
# A task that ends without starting its run (the study was stopped first).
NOT_STARTED = -1
# Starts of a run's task after its node is lost.
MAX_RETRIES = 3

_PR_SET_PDEATHSIG = 1


def run_command(run: spec_lib.Run, extra: Sequence[str] = ()) -> List[str]:
  """The `clear.train` command line of `run`, with `extra` flags last."""
  return [sys.executable, '-m', 'clear.train', *run.flags, *extra]


def _prepare_child():
  """In the child, before exec: SIGKILL when the task's worker dies, and
  SIGINT unblocked and at its default, so a run stopped while it starts up
  stops then (a Ray worker blocks SIGINT, and a study started in the
  background ignores it; a child would inherit either)."""
  signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.signal.restype = ctypes.c_void_p
    libc.signal(signal.SIGINT, None)  # SIG_DFL.
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
  except (OSError, AttributeError):
    pass  # Not Linux: the process outlives a lost worker.


def _wait_for_lock(logdir: str, stop_requested: Callable[[], bool]) -> bool:
  """Waits up to `LOCK_WAIT_S` for no live process to hold `logdir`;
  False if the study was stopped meanwhile."""
  deadline = time.monotonic() + LOCK_WAIT_S
  while (run_lock.live_holder(logdir) is not None and
         time.monotonic() < deadline):
    if stop_requested():
      return False
    time.sleep(1.0)
  return True


def play_run(run: spec_lib.Run, extra: Sequence[str], cwd: str,
             stop_requested: Callable[[], bool], poll_s: float = 1.0) -> int:
  """Runs `run`'s process to its end; returns its exit status.

  Returns `NOT_STARTED` if `stop_requested()` before it started. When
  `stop_requested()` turns true while it runs, the process gets one SIGINT
  and is waited for (it writes its final checkpoint).
  """
  if stop_requested() or not _wait_for_lock(run.logdir, stop_requested):
    return NOT_STARTED
  os.makedirs(state_lib.state_dir(run), exist_ok=True)
  state_lib.clear_exit(run)
  command = run_command(run, extra)
  started = time.time()
  with open(state_lib.log_path(run), 'ab') as log:
    log.write((f'\n=== clear.study: {run.label} starts on '
               f'{socket.gethostname()} at '
               f'{time.strftime("%Y-%m-%d %H:%M:%S")}: '
               f'{subprocess.list2cmdline(command)}\n').encode())
    log.flush()
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log,
        stderr=subprocess.STDOUT, cwd=cwd if os.path.isdir(cwd) else '/',
        start_new_session=True, preexec_fn=_prepare_child)
    interrupted = False
    while True:
      try:
        code = process.wait(timeout=poll_s)
        break
      except subprocess.TimeoutExpired:
        pass
      if not interrupted and stop_requested():
        process.send_signal(signal.SIGINT)
        interrupted = True
  state_lib.record_exit(run, code, started)
  return code


def _ray():
  try:
    import ray  # pylint: disable=g-import-not-at-top
    import ray.util.scheduling_strategies  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    raise ValueError('clear.study runs its runs on Ray: pip install '
                     '"clear-rl[study]" (or "ray>=2.60,<2.61").') from None
  return ray


class RunReport:
  """Lines `run_study` prints: a run's start and end, and the study's
  progress."""

  def __init__(self, out: Callable[[str], None] = print):
    self._out = out

  def __call__(self, line: str):
    self._out(f'[clear.study {time.strftime("%H:%M:%S")}] {line}')


def progress_line(statuses: Sequence[state_lib.RunStatus]) -> str:
  """One line for the study: runs by state, frames and an ETA from the
  running runs' own ETAs (the longest)."""
  counts = {}
  for status in statuses:
    counts[status.state] = counts.get(status.state, 0) + 1
  states = ', '.join(f'{counts[s]} {s}' for s in (
      state_lib.FINISHED, state_lib.RUNNING, state_lib.STOPPED,
      state_lib.FAILED, state_lib.PENDING) if counts.get(s))
  frames = sum(s.progress.frames or 0 for s in statuses
               if s.state == state_lib.RUNNING)
  etas = [s.progress.eta for s in statuses
          if s.state == state_lib.RUNNING and s.progress.eta]
  line = f'{len(statuses)} runs: {states}'
  if frames:
    line += f' | running runs at {frames:,} frames'
  if etas:
    line += f' | running runs end in {max(etas, key=_eta_seconds)}'
  return line


def _eta_seconds(text: str) -> float:
  """Seconds of a `progress.format_duration` text ('1h02m', '3m07s')."""
  try:
    if 'h' in text:
      hours, minutes = text.rstrip('m').split('h')
      return int(hours) * 3600 + int(minutes) * 60
    minutes, seconds = text.rstrip('s').split('m')
    return int(minutes) * 60 + int(seconds)
  except ValueError:
    return float('inf')


def keep_finished(run: spec_lib.Run, say: Callable[[str], None]):
  """Keeps a finished run's scalars and JSON in its `keep` folder."""
  if not run.keep or not os.path.isdir(run.logdir):
    return
  try:
    points = keep_lib.keep(run.logdir, run.keep)
    say(f'{run.label}: kept {points} points in {run.keep}')
  except (OSError, ValueError) as e:
    say(f'{run.label}: its scalars could not be kept: {e}')


def run_study(study: spec_lib.Study, runs: Sequence[spec_lib.Run],
              extra: Sequence[str] = (), parallel: int = 0,
              ray_address: str = '', progress_interval_s: float = 60.0,
              out: Callable[[str], None] = print) -> int:
  """Runs every run of `runs` that has not finished; returns an exit status
  (0: all finished; 1: some failed; 130: stopped by Ctrl-C).

  Args:
    study: the study.
    runs: the runs to run (`study.select`).
    extra: `clear.train` flags given to every run, last.
    parallel: runs at once (0: 1 on this machine, no limit on a cluster).
    ray_address: a Ray cluster's address; '' for a local Ray of `parallel`
      CPUs.
    progress_interval_s: seconds between the study's progress lines.
    out: prints a line.
  """
  say = RunReport(out)
  statuses = [state_lib.status(run, with_progress=False) for run in runs]
  todo = []
  for status in statuses:
    run = status.run
    if status.state == state_lib.FINISHED:
      if not state_lib.is_kept(run):
        keep_finished(run, say)
    elif status.state == state_lib.RUNNING:
      say(f'{run.label}: already running ({run.logdir}); left to it.')
    else:
      todo.append(run)
  done = len(runs) - len(todo)
  say(f'{len(runs)} runs, {done} finished or running elsewhere, '
      f'{len(todo)} to run.')
  if not todo:
    return 0
  ray = _ray()
  if parallel <= 0:
    parallel = 0 if ray_address else 1
  if ray_address:
    ray.init(address=ray_address, log_to_driver=False,
             logging_level=logging.ERROR)
    cpus, gpus = study.cpus_per_run, study.gpus_per_run
  else:
    # Ray starts its workers, and so the runs, at `nice` 15 unless told.
    os.environ.setdefault('RAY_worker_niceness', '0')
    ray.init(address='local', include_dashboard=False,
             _node_ip_address='127.0.0.1', num_cpus=parallel, num_gpus=0,
             log_to_driver=False, logging_level=logging.ERROR)
    cpus, gpus = 1, 0
  _stop_on_signals()  # After ray.init, which sets handlers of its own.
  try:
    return _schedule(ray, todo, extra, parallel, cpus, gpus,
                     progress_interval_s, say)
  finally:
    ray.shutdown()


def _interrupt(signum, frame):
  del signum, frame
  raise KeyboardInterrupt


def _stop_on_signals():
  """SIGINT and SIGTERM both stop the study as Ctrl-C does, also when it
  was started in the background (where SIGINT comes ignored)."""
  for signum in (signal.SIGINT, signal.SIGTERM):
    try:
      signal.signal(signum, _interrupt)
    except ValueError:  # Not the main thread: the caller decides.
      pass


def _make_remote(ray):
  @ray.remote
  class StopFlag:
    """Set when the study is stopped; polled by every task."""

    def __init__(self):
      self._stop = False

    def set(self):
      self._stop = True

    def get(self) -> bool:
      return self._stop

  def task(run, extra, cwd, stop_flag):
    def stop_requested():
      try:
        return ray.get(stop_flag.get.remote(), timeout=30)
      except Exception:  # pylint: disable=broad-except
        return False  # Unreachable for now: the study's driver decides.
    return play_run(run, extra, cwd, stop_requested)

  return StopFlag, ray.remote(task)


def _collect(ray, ref, run, failed, say):
  """Reports how `run`'s finished task `ref` ended; a failed run is added
  to `failed`."""
  try:
    code = ray.get(ref)
  except Exception as e:  # pylint: disable=broad-except
    failed.append(run)
    first = str(e).splitlines()[0] if str(e) else ''
    say(f'{run.label}: failed: its task was lost ({type(e).__name__}: '
        f'{first})')
    return
  if code == 0:
    say(f'{run.label}: finished')
    keep_finished(run, say)
  elif code in state_lib.STOPPED_EXITS:
    say(f'{run.label}: stopped before it started, nothing written'
        if state_lib.stopped_before_start(run) else
        f'{run.label}: stopped with its final checkpoint')
  elif code != NOT_STARTED:
    failed.append(run)
    error = state_lib.status(run, with_progress=False).error
    say(f'{run.label}: failed (exit {code}): {error}')


def _schedule(ray, todo, extra, parallel, cpus, gpus, progress_interval_s,
              say) -> int:
  stop_flag_class, task = _make_remote(ray)
  # On the driver's node, which a study cannot lose and go on.
  here = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
      ray.get_runtime_context().get_node_id(), soft=True)
  stop_flag = stop_flag_class.options(num_cpus=0,
                                      scheduling_strategy=here).remote()
  waiting = list(todo)
  in_flight: Dict[object, spec_lib.Run] = {}
  failed = []
  cwd = os.getcwd()
  last_line = time.monotonic()
  try:
    while waiting or in_flight:
      while waiting and (not parallel or len(in_flight) < parallel):
        run = waiting.pop(0)
        ref = task.options(num_cpus=cpus, num_gpus=gpus,
                           max_retries=MAX_RETRIES,
                           retry_exceptions=False).remote(
                               run, list(extra), cwd, stop_flag)
        in_flight[ref] = run
        say(f'{run.label}: started ({run.logdir})')
      ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
      for ref in ready:
        _collect(ray, ref, in_flight.pop(ref), failed, say)
      if time.monotonic() - last_line >= progress_interval_s:
        last_line = time.monotonic()
        try:
          say(progress_line([state_lib.status(run) for run in todo]))
        except (OSError, ValueError) as e:  # A file being written.
          say(f'(no progress line this time: {e})')
  except KeyboardInterrupt:
    say('Stopping: each running run writes its final checkpoint; the same '
        'command continues the study. (Ctrl-C again exits at once.)')
    try:
      ray.get(stop_flag.set.remote())
      while in_flight:
        ready, _ = ray.wait(list(in_flight), num_returns=1)
        for ref in ready:
          _collect(ray, ref, in_flight.pop(ref), failed, say)
    except KeyboardInterrupt:
      say('Exiting now: runs still writing a checkpoint resume from their '
          'previous one.')
    return 130
  if failed:
    labels = [r.label for r in todo if r in failed]  # In the study's order.
    say(f'{len(failed)} run(s) failed: {", ".join(labels)}; '
        '`clear.study status` shows why, and `run` tries them again.')
    return 1
  say('Every run finished.')
  return 0
