r"""Soak run of `clear.train`: memory stays bounded over a long run.

Launches the real binary (CLEAR on CartPole, several actor processes, a
small replay buffer that fills within the first minute) with a frame budget
it never reaches, samples the memory of its process tree every few seconds,
stops it with SIGTERM after `--duration_s` and prints one JSON object:

  * the learner's (main process's) RSS at the end of the warm-up, at the end,
    its maximum, its growth after the warm-up (MB and %) and the slope of a
    least-squares line through the post-warm-up samples (MB per minute);
  * each actor's RSS (at the end of the warm-up and at the end), the peak
    PSS of the whole tree (the memory it really holds) and the peak RSS sum;
  * the replay fill, parsed from the binary's log, and when it reached
    capacity; actor restarts; frames done;
  * the exit status after SIGTERM (the binary answers 143) and any process
    of the tree still alive afterwards (orphans);
  * the stated margin and whether the run kept within it.

The warm-up ends at `--warmup_s` or when the replay buffer reached capacity,
whichever is later: until the buffer is full its preallocated pages are
still being touched, which is growth by design, not a leak.

The margin (defaults): after the warm-up the learner's RSS may grow by at
most 50 MB (end minus warm-up, and no sample above warm-up + 50 MB), and
the regression slope must stay at or below 5 MB/min: several times what a
run without a leak grows, and far below what a leak of one learner batch per
update adds (the measurements: docs/reliability.md#long-runs-the-soak).
The JSON gives that leak's slope for the update rate of the run itself,
and `--inject_leak_batches_per_update=1` runs the binary with such a leak
to check that the margin catches it.

  python -m benchmarks.soak                        # 10 minutes, 4 actors
  python -m benchmarks.soak --duration_s=120 --warmup_s=60   # a quick look
"""

import dataclasses
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

import numpy as np
import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 1e6

# The stated margin for the learner's RSS after the warm-up.
DEFAULT_MARGIN_MB = 50.0
DEFAULT_MARGIN_MB_PER_MIN = 5.0

_PROGRESS = re.compile(
    r'\[(?P<phase>\w+)\] frames (?P<frames>[\d,]+)/(?P<total>[\d,]+) .*?\| '
    r'(?P<fps>[\d,.]+) env fps \| (?P<ups>[\d.]+) updates/s')
_REPLAY = re.compile(
    r'replay: (?P<size>\d+)/(?P<capacity>\d+) unrolls .*?, '
    r'(?P<mb>[\d.]+) MB')
_RESTART = re.compile(r'actor \d+ died \(.*?\); restart (?P<n>\d+)',
                      re.IGNORECASE)
_DONE_FRAMES = re.compile(
    r"Done: .*?'(?:num_env_frames|frames)': (?P<frames>\d+)")


@dataclasses.dataclass
class SoakConfig:
  """What to run and how to judge it."""
  duration_s: float = 600.0
  warmup_s: float = 120.0
  sample_interval_s: float = 5.0
  num_actors: int = 4
  envs_per_actor: Optional[int] = None  # None: the binary's default.
  replay_buffer_size: int = 2000
  replay_proportion: float = 0.5
  batch_size: int = 32
  env: str = 'gym:CartPole-v1'
  log_interval_s: int = 5
  total_environment_frames: int = 10**12  # Never reached.
  margin_mb: float = DEFAULT_MARGIN_MB
  margin_mb_per_min: float = DEFAULT_MARGIN_MB_PER_MIN
  stop_timeout_s: float = 180.0
  logdir: str = ''  # Default: a new temporary folder.
  extra_args: Sequence[str] = ()
  # A deliberate leak, to check that the margin catches one: the learner
  # keeps a copy of this many of its batches per update.
  inject_leak_batches_per_update: int = 0


# --- Pure helpers -------------------------------------------------------------


def _int(text: str) -> int:
  return int(text.replace(',', ''))


def parse_log(text: str) -> Dict:
  """What the binary's stderr says about progress, replay and restarts.

  Returns a dict with `progress` (list of dicts: phase, frames, total, fps,
  updates_per_s), `replay` (list of dicts: size, capacity, mb), `restarts`
  (the highest restart count logged, 0 if none) and `done_frames` (frames
  from the final 'Done:' line, or None).
  """
  progress, replay = [], []
  restarts = 0
  done_frames = None
  for line in text.splitlines():
    match = _PROGRESS.search(line)
    if match:
      progress.append({'phase': match['phase'],
                       'frames': _int(match['frames']),
                       'total': _int(match['total']),
                       'fps': float(match['fps'].replace(',', '')),
                       'updates_per_s': float(match['ups'])})
      continue
    match = _REPLAY.search(line)
    if match:
      replay.append({'size': int(match['size']),
                     'capacity': int(match['capacity']),
                     'mb': float(match['mb'])})
      continue
    match = _RESTART.search(line)
    if match:
      restarts = max(restarts, int(match['n']))
      continue
    match = _DONE_FRAMES.search(line)
    if match:
      done_frames = int(match['frames'])
  return {'progress': progress, 'replay': replay, 'restarts': restarts,
          'done_frames': done_frames}


def slope_per_minute(times_s: Sequence[float],
                     values: Sequence[float]) -> float:
  """Least-squares slope of values over time, per minute (nan if < 2)."""
  t = np.asarray(times_s, dtype=np.float64)
  v = np.asarray(values, dtype=np.float64)
  if t.size < 2 or np.ptp(t) == 0:
    return float('nan')
  t = t - t.mean()
  return float(60.0 * np.dot(t, v - v.mean()) / np.dot(t, t))


def summarize_learner(times_s: Sequence[float], rss_mb: Sequence[float],
                      baseline_s: float, margin_mb: float,
                      margin_mb_per_min: float) -> Dict:
  """Growth of the learner's RSS after `baseline_s` against the margin.

  The warm-up value is the first sample at or after `baseline_s`; growth is
  the last sample minus it, max growth the highest sample minus it, and the
  slope is fitted to the samples from the warm-up value on. The run is
  within the margin when growth and max growth are <= margin_mb and the
  slope is <= margin_mb_per_min.
  """
  times_s, rss_mb = list(times_s), list(rss_mb)
  after = [i for i, t in enumerate(times_s) if t >= baseline_s]
  result = {'baseline_s': baseline_s, 'num_samples_after_warmup': len(after),
            'rss_max_mb': max(rss_mb) if rss_mb else float('nan')}
  if len(after) < 2:
    result.update(rss_at_warmup_mb=None, rss_end_mb=rss_mb[-1] if rss_mb else
                  None, growth_mb=None, growth_pct=None, max_growth_mb=None,
                  slope_mb_per_min=None, within_margin=False)
    return result
  t = [times_s[i] for i in after]
  v = [rss_mb[i] for i in after]
  growth = v[-1] - v[0]
  max_growth = max(v) - v[0]
  slope = slope_per_minute(t, v)
  result.update(
      rss_at_warmup_mb=v[0], rss_end_mb=v[-1], rss_max_after_warmup_mb=max(v),
      growth_mb=growth, growth_pct=100.0 * growth / v[0],
      max_growth_mb=max_growth, slope_mb_per_min=slope,
      within_margin=bool(growth <= margin_mb and max_growth <= margin_mb and
                         slope <= margin_mb_per_min))
  return result


def is_actor(cmdline: Sequence[str]) -> bool:
  """Whether a child's command line is a multiprocessing (spawn) worker."""
  text = ' '.join(cmdline)
  return 'spawn_main' in text and 'resource_tracker' not in text


# --- Sampling the process tree ------------------------------------------------


def sample_tree(learner: psutil.Process, seen: Dict[int, float]) -> Dict:
  """RSS of the learner and each actor, PSS and RSS sums of the tree, bytes.

  Adds every process of the tree to `seen` (pid -> create time) so that
  survivors can be found after the learner exits.
  """
  learner_info = learner.memory_full_info()
  tree_rss, tree_pss = learner_info.rss, learner_info.pss
  actors = {}
  for child in learner.children(recursive=True):
    try:
      seen.setdefault(child.pid, child.create_time())
      info = child.memory_full_info()
      cmdline = child.cmdline()
    except psutil.Error:
      continue
    tree_rss += info.rss
    tree_pss += info.pss
    if is_actor(cmdline):
      actors[child.pid] = info.rss
  return {'learner_rss': learner_info.rss, 'actor_rss': actors,
          'tree_rss': tree_rss, 'tree_pss': tree_pss}


def survivors(seen: Dict[int, float]) -> List[Dict]:
  """Processes of `seen` (pid -> create time) that are still alive."""
  alive = []
  for pid, created in seen.items():
    try:
      process = psutil.Process(pid)
      if abs(process.create_time() - created) > 1e-3:
        continue  # The pid was reused by an unrelated process.
      if process.status() == psutil.STATUS_ZOMBIE:
        continue
      alive.append({'pid': pid, 'cmdline': ' '.join(process.cmdline())[:200]})
    except psutil.Error:
      continue
  return alive


def kill_tree(process: psutil.Process):
  try:
    children = process.children(recursive=True)
  except psutil.Error:
    children = []
  for p in children + [process]:
    try:
      p.kill()
    except psutil.Error:
      pass


# --- The soak run -------------------------------------------------------------

# Runs `clear.train` with `replay.assemble_batch` wrapped so that every
# learner batch is also copied into a list that is never freed.
_LEAK_PRELUDE = '''
import numpy as np
import tree
from clear.replay import buffer as replay
_leaked = []
_assemble_batch = replay.assemble_batch
def _leaky_assemble_batch(*args, **kwargs):
  batch = _assemble_batch(*args, **kwargs)
  for _ in range({copies}):
    _leaked.append(tree.map_structure(np.copy, batch))
  return batch
replay.assemble_batch = _leaky_assemble_batch
from absl import app
from clear import train
app.run(train.main)
'''


def command(config: SoakConfig, logdir: str) -> List[str]:
  if config.inject_leak_batches_per_update:
    launcher = ['-c', _LEAK_PRELUDE.format(
        copies=config.inject_leak_batches_per_update)]
  else:
    launcher = ['-m', 'clear.train']
  args = [sys.executable, *launcher, f'--env={config.env}',
          f'--logdir={logdir}',
          f'--total_environment_frames={config.total_environment_frames}',
          f'--num_actors={config.num_actors}',
          f'--replay_proportion={config.replay_proportion}',
          f'--replay_buffer_size={config.replay_buffer_size}',
          f'--batch_size={config.batch_size}',
          f'--log_interval_s={config.log_interval_s}',
          # One checkpoint mid-run at most: the soak measures steady state.
          f'--checkpoint_interval_s={max(600, int(config.duration_s) // 2)}']
  if config.envs_per_actor is not None:
    args.append(f'--envs_per_actor={config.envs_per_actor}')
  return args + list(config.extra_args)


def run_soak(config: SoakConfig, verbose: bool = True) -> Dict:
  """Runs the binary for `config.duration_s`, returns the figures (a dict)."""
  logdir = config.logdir or tempfile.mkdtemp(prefix='clear_soak_')
  os.makedirs(logdir, exist_ok=True)
  stderr_path = os.path.join(logdir, 'stderr.log')
  cmd = command(config, logdir)
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2',
             CUDA_VISIBLE_DEVICES='')

  def log(message):
    if verbose:
      print(f'[soak {time.monotonic() - launch:6.0f}s] {message}',
            file=sys.stderr, flush=True)

  def read_log():
    with open(stderr_path, errors='replace') as f:
      return parse_log(f.read())

  launch = time.monotonic()
  with open(stderr_path, 'w') as stderr:
    process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=stderr)
  learner = psutil.Process(process.pid)
  seen = {learner.pid: learner.create_time()}
  samples = []
  full_at_s = None
  actor_pids = set()
  exited_early = False
  next_sample = launch
  while True:
    now = time.monotonic()
    elapsed = now - launch
    if process.poll() is not None:
      exited_early = True
      log(f'the binary exited by itself with status {process.returncode}')
      break
    if elapsed >= config.duration_s:
      break
    if now >= next_sample:
      next_sample += config.sample_interval_s
      try:
        sample = sample_tree(learner, seen)
      except psutil.Error:
        continue  # Exiting; the poll above notices.
      parsed = read_log()
      replay = parsed['replay'][-1] if parsed['replay'] else None
      if (full_at_s is None and replay and
          replay['size'] >= replay['capacity']):
        full_at_s = elapsed
        log(f'replay at capacity ({replay["size"]} unrolls)')
      actor_pids.update(sample['actor_rss'])
      sample.update(t=elapsed, replay_size=replay['size'] if replay else 0)
      samples.append(sample)
      if verbose and len(samples) % max(1, int(60 / config.sample_interval_s)) \
          == 1:
        log(f'learner RSS {sample["learner_rss"] / MB:.0f} MB, tree PSS '
            f'{sample["tree_pss"] / MB:.0f} MB, replay '
            f'{sample["replay_size"]}, actors {len(sample["actor_rss"])}')
    time.sleep(max(0.0, min(next_sample, launch + config.duration_s) -
                   time.monotonic()))

  # Stop it the way an operator would, then look for leftovers.
  stopped_s = time.monotonic() - launch
  exit_status = process.returncode
  stop_to_exit_s = None
  killed = False
  if not exited_early:
    try:  # The tree as it is at the stop.
      for child in learner.children(recursive=True):
        seen.setdefault(child.pid, child.create_time())
    except psutil.Error:
      pass
    process.send_signal(signal.SIGTERM)
    try:
      exit_status = process.wait(config.stop_timeout_s)
    except subprocess.TimeoutExpired:
      killed = True
      kill_tree(learner)
      exit_status = process.wait()
    stop_to_exit_s = time.monotonic() - launch - stopped_s
    log(f'exit status {exit_status} {stop_to_exit_s:.1f} s after SIGTERM')
  left = survivors(seen)
  deadline = time.monotonic() + 15.0
  while left and time.monotonic() < deadline:  # Let stragglers finish.
    time.sleep(0.5)
    left = survivors(seen)
  for item in left:  # Clean up, after recording them.
    try:
      psutil.Process(item['pid']).kill()
    except psutil.Error:
      pass

  parsed = read_log()
  with open(os.path.join(logdir, 'soak_samples.json'), 'w') as f:
    json.dump(samples, f, default=str)
  return summarize_run(config, cmd, logdir, samples, parsed, full_at_s,
                       stopped_s, exit_status, stop_to_exit_s, killed,
                       exited_early, left, actor_pids)


def summarize_run(config, cmd, logdir, samples, parsed, full_at_s, stopped_s,
                  exit_status, stop_to_exit_s, killed, exited_early, left,
                  actor_pids) -> Dict:
  """The JSON figures of one soak run."""
  times = [s['t'] for s in samples]
  learner_mb = [s['learner_rss'] / MB for s in samples]
  baseline_s = max(config.warmup_s, full_at_s if full_at_s is not None else
                   float('inf'))
  learner = summarize_learner(times, learner_mb, baseline_s, config.margin_mb,
                              config.margin_mb_per_min)
  # Actors: RSS at the warm-up sample and at the end, per pid.
  base = next((s for s in samples if s['t'] >= baseline_s), None)
  end = samples[-1] if samples else None
  actor_max = max((rss for s in samples for rss in s['actor_rss'].values()),
                  default=0)
  actors = {
      'num_actor_processes_seen': len(actor_pids),
      'rss_at_warmup_mb': sorted(round(v / MB, 1) for v in
                                 base['actor_rss'].values()) if base else None,
      'rss_end_mb': sorted(round(v / MB, 1) for v in end['actor_rss'].values())
                    if end else None,
      'rss_max_mb': actor_max / MB,
  }
  if base and end:
    common = set(base['actor_rss']) & set(end['actor_rss'])
    actors['max_growth_after_warmup_mb'] = max(
        ((end['actor_rss'][p] - base['actor_rss'][p]) / MB for p in common),
        default=None)
  # Progress and replay, from the log.
  progress, replay = parsed['progress'], parsed['replay']
  frames = parsed['done_frames']
  if frames is None and progress:
    frames = progress[-1]['frames']
  rates = [p['updates_per_s'] for p in progress if p['updates_per_s'] > 0]
  updates_per_s = float(np.median(rates)) if rates else None
  replay_last = replay[-1] if replay else None
  unroll_mb = (replay_last['mb'] / replay_last['capacity'] if replay_last
               else None)
  # What a leak of one learner batch of unrolls per update would add.
  leak_batch = (unroll_mb * config.batch_size * updates_per_s * 60.0 if
                unroll_mb and updates_per_s else None)
  leak_unroll = (unroll_mb * updates_per_s * 60.0 if unroll_mb and
                 updates_per_s else None)
  pss = [s['tree_pss'] / MB for s in samples]
  rss_sum = [s['tree_rss'] / MB for s in samples]
  timeline = [{'t_s': round(s['t']), 'learner_rss_mb': round(s['learner_rss'] /
                                                              MB, 1),
               'tree_pss_mb': round(s['tree_pss'] / MB, 1),
               'replay_size': s['replay_size']}
              for s in samples[::max(1, int(60 / config.sample_interval_s))]]
  stopped_ok = (not exited_early and not killed and exit_status == 143)
  return {
      'benchmark': 'soak',
      'command': ' '.join(cmd[1:]) if not
                 config.inject_leak_batches_per_update else
                 'python -c <clear.train with an injected leak> ' +
                 ' '.join(cmd[3:]),
      'injected_leak_batches_per_update':
          config.inject_leak_batches_per_update,
      'logdir': logdir,
      'machine': {'cpus': os.cpu_count(),
                  'memory_gb': round(psutil.virtual_memory().total / 1e9, 1),
                  'python': platform.python_version()},
      'duration_s': stopped_s,
      'warmup_s': config.warmup_s,
      'sample_interval_s': config.sample_interval_s,
      'num_samples': len(samples),
      'frames_done': frames,
      'env_fps_mean': (frames / stopped_s if frames else None),
      'updates_per_s_median': updates_per_s,
      'replay': {
          'capacity_unrolls': replay_last['capacity'] if replay_last else None,
          'final_size_unrolls': replay_last['size'] if replay_last else None,
          'preallocated_mb': replay_last['mb'] if replay_last else None,
          'reached_capacity': full_at_s is not None,
          'reached_capacity_at_s': full_at_s,
      },
      'learner_rss': learner,
      'actors': actors,
      'tree_pss_peak_mb': max(pss) if pss else None,
      'tree_pss_end_mb': pss[-1] if pss else None,
      'tree_rss_sum_peak_mb': max(rss_sum) if rss_sum else None,
      'actor_restarts': parsed['restarts'],
      'exit_status': exit_status,
      'exited_before_sigterm': exited_early,
      'killed_after_stop_timeout': killed,
      'stop_to_exit_s': stop_to_exit_s,
      'orphans': left,
      'margin': {
          'rule': ('after the warm-up (the later of warmup_s and replay at '
                   'capacity): learner RSS end - warm-up <= margin_mb, every '
                   'sample <= warm-up + margin_mb, and least-squares slope '
                   '<= margin_mb_per_min'),
          'margin_mb': config.margin_mb,
          'margin_mb_per_min': config.margin_mb_per_min,
          'leak_of_one_batch_per_update_mb_per_min': leak_batch,
          'leak_of_one_unroll_per_update_mb_per_min': leak_unroll,
          'leak_of_one_batch_per_update_fails_margin': bool(
              leak_batch is not None and
              leak_batch > config.margin_mb_per_min),
      },
      'margin_mb': config.margin_mb,
      'within_margin': bool(learner['within_margin']),
      'passed': bool(learner['within_margin'] and full_at_s is not None and
                     stopped_ok and not left),
      'timeline_per_minute': timeline,
  }


# --- The binary ---------------------------------------------------------------


def _define_flags():
  """Flags, defined only when run as a program: `clear.train` uses some of
  the same names, and tests import both modules into one process."""
  from absl import flags  # pylint: disable=g-import-not-at-top
  flags.DEFINE_float('duration_s', 600.0, 'Seconds before the SIGTERM.')
  flags.DEFINE_float('warmup_s', 120.0, 'Seconds not judged (start-up, '
                     'replay filling); also at least until replay is full.')
  flags.DEFINE_float('sample_interval_s', 5.0, 'Seconds between samples.')
  flags.DEFINE_integer('num_actors', 4, 'Actor processes.')
  flags.DEFINE_integer('envs_per_actor', None,
                       'Environments per actor (default: the binary\'s).')
  flags.DEFINE_integer('replay_buffer_size', 2000, 'Replay capacity, unrolls '
                       '(small enough to fill within the first minute).')
  flags.DEFINE_float('replay_proportion', 0.5, 'Replayed share of a batch.')
  flags.DEFINE_integer('batch_size', 32, 'Unrolls per learner batch.')
  flags.DEFINE_string('env', 'gym:CartPole-v1', 'Environment.')
  flags.DEFINE_float('margin_mb', DEFAULT_MARGIN_MB,
                     'Allowed learner RSS growth after the warm-up, MB.')
  flags.DEFINE_float('margin_mb_per_min', DEFAULT_MARGIN_MB_PER_MIN,
                     'Allowed slope of the learner RSS after the warm-up.')
  flags.DEFINE_string('logdir', '', 'Run folder (default: a temp folder).')
  flags.DEFINE_integer('inject_leak_batches_per_update', 0,
                       'Make the learner leak copies of this many batches '
                       'per update (checks that the margin catches a leak).')
  return flags.FLAGS


def main(argv):
  del argv
  f = FLAGS
  config = SoakConfig(
      duration_s=f.duration_s, warmup_s=f.warmup_s,
      sample_interval_s=f.sample_interval_s, num_actors=f.num_actors,
      envs_per_actor=f.envs_per_actor,
      replay_buffer_size=f.replay_buffer_size,
      replay_proportion=f.replay_proportion, batch_size=f.batch_size,
      env=f.env, margin_mb=f.margin_mb,
      margin_mb_per_min=f.margin_mb_per_min, logdir=f.logdir,
      inject_leak_batches_per_update=f.inject_leak_batches_per_update)
  result = run_soak(config)
  print(json.dumps(result, indent=2))
  return 0 if result['passed'] else 1


if __name__ == '__main__':
  from absl import app  # pylint: disable=g-import-not-at-top
  FLAGS = _define_flags()
  app.run(main)
