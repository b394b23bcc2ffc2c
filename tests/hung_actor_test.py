"""A hung actor (a real process stopped with SIGSTOP) never stalls the
learner: through the real binary, with local and Ray actors."""

import os
import re
import signal
import subprocess
import sys
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRESS = r'\[\w+\] frames ([\d,]+)/'


def start(*args):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.Popen(
      [sys.executable, '-m', 'clear.train', '--env=gym:CartPole-v1',
       '--network=mlp', '--core_size=16', '--envs_per_actor=4',
       '--batch_size=4', '--total_environment_frames=100000000',
       '--log_interval_s=1', '--checkpoint_interval_s=3600', *args],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
      text=True, start_new_session=True)


class Output:
  """Reads a process's output lines as they come, keeping them all."""

  def __init__(self, process):
    self.process = process
    self.lines = []

  def until(self, pattern, timeout=180):
    """The match of the first line from now on that matches `pattern`."""
    deadline = time.time() + timeout
    for line in self.process.stdout:
      self.lines.append(line)
      found = re.search(pattern, line)
      if found:
        return found
      assert time.time() < deadline, self.tail()
    raise AssertionError('process ended early:\n' + self.tail())

  def tail(self, n=40):
    return ''.join(self.lines[-n:])


def frames(match):
  return int(match.group(1).replace(',', ''))


def actor_processes(process, marker, count):
  """The `count` descendants of `process` whose command line holds
  `marker`, once there are that many."""
  deadline = time.time() + 120
  while True:
    found = []
    for child in psutil.Process(process.pid).children(recursive=True):
      try:
        if marker in ' '.join(child.cmdline()):
          found.append(child)
      except psutil.NoSuchProcess:
        pass
    if len(found) == count or time.time() > deadline:
      return found
    time.sleep(0.5)


def check_replaced_and_stops(process, victim, hung_pattern):
  """With `victim` stopped: the learner goes on training, warns of the
  silence, reports the victim by PID and replaces it; SIGTERM then stops
  the run within a bounded time with its final checkpoint."""
  output = Output(process)
  before = frames(output.until(PROGRESS))
  victim.send_signal(signal.SIGSTOP)
  stopped_at = time.time()
  # The other actor's unrolls are taken while the victim is silent.
  during = frames(output.until(PROGRESS))
  during = frames(output.until(PROGRESS))
  assert during > before
  output.until(rf'[Aa]ctor \d \(PID {victim.pid}\) .*it is replaced if this '
               'lasts 6 s')
  output.until(hung_pattern.format(pid=victim.pid))
  # Silence counts from its last sign of life, just before the stop.
  assert 4 <= time.time() - stopped_at < 60
  after = frames(output.until(PROGRESS))
  assert after > during
  assert victim.wait(10) is not None or not victim.is_running()
  return output


def stop_and_check_final_checkpoint(process, output, logdir):
  sent = time.time()
  process.send_signal(signal.SIGTERM)
  rest, _ = process.communicate(timeout=120)
  took = time.time() - sent
  text = ''.join(output.lines) + rest
  assert process.returncode == 128 + signal.SIGTERM, text[-3000:]
  assert took < 40, took
  assert 'Saved checkpoint ' + os.path.join(logdir, 'checkpoints',
                                            'ckpt-1') in rest
  assert 'Traceback' not in text
  return text


@pytest.mark.slow  # About 30 s on 2 cores: run by .ci/run's slow step.
def test_a_stopped_local_actor_is_replaced_and_sigterm_still_checkpoints(
    tmp_path):
  logdir = str(tmp_path)
  process = start(f'--logdir={logdir}', '--num_actors=2',
                  '--actor_timeout_s=6')
  try:
    output = Output(process)
    started = {int(output.until(r'Actor \d \(PID (\d+)\) delivered its '
                                'first unroll').group(1)) for _ in range(2)}
    actors = actor_processes(process, 'spawn_main', 2)
    assert {a.pid for a in actors} == started
    assert len(actors) == 2, [a.cmdline() for a in actors]
    output = check_replaced_and_stops(
        process, actors[0],
        r'Actor \d \(PID {pid}\) hung \((gave no sign of life|sent part of '
        r'an unroll and then nothing) for \d+ s, more than '
        r'--actor_timeout_s=6; killed\); restart 1 of at most 20\.')
    survivors = [a for a in actor_processes(process, 'spawn_main', 2)
                 if a.pid != actors[0].pid]
    assert len(survivors) == 2  # The other and the replacement.
    survivors[0].send_signal(signal.SIGSTOP)
    text = stop_and_check_final_checkpoint(process, output, logdir)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
  # No actor is left behind, the stopped one included.
  assert not [a for a in survivors if a.is_running() and
              a.status() != psutil.STATUS_ZOMBIE]
  assert 'final checkpoint' not in text or 'is being written' not in text


@pytest.mark.slow  # A local Ray takes about a minute to start and stop.
def test_a_stopped_ray_actor_is_replaced_and_sigterm_still_checkpoints(
    tmp_path):
  logdir = str(tmp_path)
  process = start(f'--logdir={logdir}', '--num_actors=2', '--backend=ray',
                  '--actor_timeout_s=6')
  try:
    output = Output(process)
    started = {int(output.until(r'Ray actor \d \(PID (\d+)\) delivered '
                                'its first unroll').group(1))
               for _ in range(2)}
    actors = actor_processes(process, 'ray::RayActorWorker', 2)
    assert {a.pid for a in actors} == started
    assert len(actors) == 2, [a.cmdline() for a in actors]
    output = check_replaced_and_stops(
        process, actors[0],
        r'Ray actor \d \(PID {pid}\) returned nothing for \d+ s, more than '
        r'--actor_timeout_s=6; killed')
    output.until(r'Ray actor \d \(PID \d+\) hung: returned nothing .*; '
                 r'restart 1 of at most 20\.')
    text = stop_and_check_final_checkpoint(process, output, logdir)
  finally:
    if process.poll() is None:
      os.killpg(process.pid, signal.SIGKILL)
  assert 'Traceback' not in text
