r"""End-to-end benchmark of `clear.train`: speed, time to a return, memory.

Runs the real binary as a subprocess for each case, samples the memory of
its whole process tree, then reads the run's TensorBoard events back.
Prints one JSON object with, per case: env frames per second (from the first
update, and over the second half of the run), learner updates per second,
seconds from launch to the first update, seconds and frames to the return
threshold (100-episode mean), the final 100-episode mean, peak memory of the
process tree, CPU time of the run, mean policy lag and the replay share.

  python -m benchmarks.train                  # CartPole and Pong, replay 0/50%
  python -m benchmarks.train --cases=cartpole_clear --quick
  python -m benchmarks.train --cases=ppg_cartpole,sac_pendulum,ddpg_pendulum
  python -m benchmarks.train \
      --cases=minatar_breakout_clear,minatar_space_invaders_clear
  python -m benchmarks.train --cases=pong_clear_5m_buffer  # 62,500 unrolls
  python -m benchmarks.train --cases=pong_clear --frames=1200000  # 800k full
  python -m benchmarks.train --cases=minatar_sequence  # and each game alone
  python -m benchmarks.train --cases=atari_sequence    # and each game alone

A sequence case (`SEQUENCES`) runs each of its games alone for the frames
the sequence gives it, without evaluation, then the sequence with its
flagfile's evaluation settings, twice: evaluating in a process of its own
(the default) and in the learner. For each sequence run it reports the env
frames per second as a ratio to the games' alone (all their frames over
all their seconds, each from its first update), measured in the same
invocation, and the seconds spent evaluating and switching tasks (from
each switch to the new task's first unroll).

The MinAtar cases run the family's defaults (64 envs on one actor process,
LSTM 128; the target is at least 10,000 env frames per second on the
2-core machine); Breakout is the cheapest game to step and SpaceInvaders
the dearest (`python -m benchmarks.envs --families=minatar`).
"""

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags
import numpy as np
import psutil

from clear import plot
from clear.analysis import curve_summary

FLAGS = flags.FLAGS
flags.DEFINE_list('cases', ['cartpole_impala', 'cartpole_clear',
                            'pong_impala', 'pong_clear'], 'Cases to run.')
flags.DEFINE_bool('quick', False, 'Short runs (a smoke test of the script).')
flags.DEFINE_string('logdir', '', 'Where runs go (default: a temp folder).')
flags.DEFINE_integer('frames', 0, 'Env frames for every case, instead of '
                     'each case\'s own count (0: the case\'s own).')

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> (flags, full frames, quick frames, return threshold)
CASES = {
    'cartpole_impala': (['--env=gym:CartPole-v1', '--replay_proportion=0'],
                        400_000, 40_000, 475.0),
    'cartpole_clear': (['--env=gym:CartPole-v1', '--replay_proportion=0.5'],
                       400_000, 40_000, 475.0),
    'cartpole_impala_inline': (['--env=gym:CartPole-v1',
                                '--replay_proportion=0', '--backend=inline'],
                               400_000, 40_000, 475.0),
    'pong_impala': (['--env=atari:Pong', '--replay_proportion=0'],
                    300_000, 20_000, 18.0),
    'pong_clear': (['--env=atari:Pong', '--replay_proportion=0.5'],
                   300_000, 20_000, 18.0),
    # Learning rate 6e-4 without the torso's layer norm, to time the
    # defaults (1e-3 with it) against.
    'pong_clear_before_layer_norm': (
        ['--env=atari:Pong', '--replay_proportion=0.5', '--learning_rate=6e-4',
         '--torso_norm=none'], 300_000, 20_000, 18.0),
    # Batches of 16 (four times the updates per frame of the default 64).
    'pong_clear_batch16': (['--env=atari:Pong', '--replay_proportion=0.5',
                            '--batch_size=16'], 300_000, 20_000, 18.0),
    # Batches of 64 (half the updates per frame, each twice as large): the
    # Atari default, so the same run as pong_clear.
    'pong_clear_batch64': (['--env=atari:Pong', '--replay_proportion=0.5',
                            '--batch_size=64'], 300_000, 20_000, 18.0),
    # Batches of 32 (twice the updates per frame of the default 64), to time
    # the defaults against.
    'pong_clear_batch32': (['--env=atari:Pong', '--replay_proportion=0.5',
                            '--batch_size=32'], 300_000, 20_000, 18.0),
    # The CLEAR paper's 5M-frame buffer (62,500 Pong unrolls of 80 frames),
    # run until it is full and then some: its speed and peak memory.
    'pong_clear_5m_buffer': (['--env=atari:Pong', '--replay_proportion=0.5',
                              '--replay_buffer_size=62500'],
                             5_600_000, 20_000, 18.0),
    # The ports, inline (one process: CPU time is the run's whole cost).
    'ppg_cartpole': (['--algorithm=ppg', '--env=gym:CartPole-v1',
                      '--backend=inline'], 150_000, 20_000, 475.0),
    'sac_pendulum': (['--algorithm=sac', '--env=gym:Pendulum-v1',
                      '--backend=inline'], 32_000, 4_000, -250.0),
    'ddpg_pendulum': (['--algorithm=ddpg', '--env=gym:Pendulum-v1',
                       '--backend=inline'], 32_000, 4_000, -300.0),
    'sac_discrete_cartpole': (['--algorithm=sac', '--env=gym:CartPole-v1',
                               '--backend=inline'], 100_000, 4_000, 475.0),
    # MinAtar with the family's defaults; thresholds are about 4x what a
    # random policy scores (Breakout ~0.5, SpaceInvaders ~3).
    'minatar_breakout_clear': (['--env=minatar:Breakout',
                                '--replay_proportion=0.5'],
                               1_000_000, 30_000, 2.0),
    'minatar_breakout_impala': (['--env=minatar:Breakout',
                                 '--replay_proportion=0'],
                                1_000_000, 30_000, 2.0),
    'minatar_space_invaders_clear': (['--env=minatar:SpaceInvaders',
                                      '--replay_proportion=0.5'],
                                     1_000_000, 30_000, 12.0),
}


MINATAR_GAMES = ('Asterix', 'Breakout', 'Freeway', 'Seaquest',
                 'SpaceInvaders')
ATARI_GAMES = ('SpaceInvaders', 'BeamRider', 'MsPacman')
# The Atari flagfile's settings (results/atari_sequence/flags/clear.flags)
# besides the sequence, its frames and its evaluations.
ATARI_SEQUENCE_FLAGS = [
    '--replay_proportion=0.5', '--replay_buffer_size=25000',
    '--batch_size=64', '--learning_rate=1e-3', '--optimizer=rmsprop',
    '--rmsprop_epsilon=1e-5', '--rmsprop_initial_mean_square=1',
    '--reward_scaling=1', '--envs_per_actor=32', '--network=impala_shallow',
    '--core_size=256', '--torso_norm=layer_norm']

# name -> (family, games, flags of every run, frames per game, quick frames
# per game, flags of the sequence run alone: its flagfile's evaluations,
# every task evaluated at the start, every interval, at each switch and at
# the end). The visits are shorter than the flagfiles' (1M and 2M frames).
# MinAtar's are a multiple of its evaluation interval, as the flagfile's
# are, so that it evaluates as often per frame as the flagfile does.
SEQUENCES = {
    'minatar_sequence': (
        'minatar', MINATAR_GAMES, ['--replay_proportion=0.5'], 500_000,
        20_000, ['--eval_interval_frames=250000', '--eval_episodes=20']),
    'atari_sequence': (
        'atari', ATARI_GAMES, ATARI_SEQUENCE_FLAGS, 300_000, 20_000,
        ['--eval_interval_frames=1000000', '--eval_episodes=20',
         '--eval_max_steps=27000']),
}


# The sequence runs of a `SEQUENCES` case: name -> their extra flags.
SEQUENCE_RUNS = {'sequence': [],
                 'sequence_eval_in_learner': ['--evaluator=learner']}


def sequence_parts(name):
  """[(part name, flags, frames)] of a `SEQUENCES` case: each game alone,
  then the sequence with its evaluations in their own process (the
  default) and in the learner."""
  family, games, common, frames, quick_frames, evaluation = SEQUENCES[name]
  per_game = FLAGS.frames or (quick_frames if FLAGS.quick else frames)
  parts = [(f'{game}_alone', [f'--env={family}:{game}', *common], per_game)
           for game in games]
  sequence = ','.join(f'{family}:{game}' for game in games)
  for run, extra in SEQUENCE_RUNS.items():
    parts.append((run, [f'--env={sequence}', *common,
                        f'--frames_per_task={per_game}',
                        '--num_task_cycles=1', *evaluation, *extra],
                  per_game * len(games)))
  return parts


def run_sequence_case(name, base):
  """Runs a `SEQUENCES` case's parts; the sequence's rate against its
  games' alone, with its evaluation and switch seconds."""
  parts = {}
  for part, args, frames in sequence_parts(name):
    logdir = os.path.join(base, part)
    os.makedirs(logdir, exist_ok=True)
    parts[part] = run_training(args, frames, None, logdir)
  alone = [result for part, result in parts.items()
           if part not in SEQUENCE_RUNS]
  frames_alone = sum(r['env_frames_trained'] for r in alone)
  seconds_alone = sum(r['seconds_from_first_update'] for r in alone)
  rate_alone = frames_alone / seconds_alone
  summary = {'parts': parts, 'env_frames_per_s_alone': rate_alone,
             'num_task_switches': len(SEQUENCES[name][1]) - 1}
  for run in SEQUENCE_RUNS:
    result = parts[run]
    rate = result['env_frames_trained'] / result['seconds_from_first_update']
    summary[run] = {
        'env_frames_per_s': rate,
        'ratio_to_alone': rate / rate_alone,
        'seconds_from_first_update': result['seconds_from_first_update'],
        'eval_s': result['eval_s'],
        'num_evaluations': result['num_evaluations'],
        'task_switch_s': result['task_switch_s'],
        'peak_memory_process_tree_pss_mb': result[
            'peak_memory_process_tree_pss_mb'],
    }
  return summary


def tree_memory(process: psutil.Process):
  """(RSS sum, PSS sum) of a process and all its descendants, bytes.

  RSS counts pages shared between the processes (TensorFlow's libraries)
  once per process; PSS splits each shared page among its sharers, so the
  PSS sum is the memory the tree really holds.
  """
  rss = pss = 0
  for p in [process] + process.children(recursive=True):
    try:
      info = p.memory_full_info()
    except psutil.Error:
      continue
    rss += info.rss
    pss += info.pss
  return rss, pss


def tree_cpu(process: psutil.Process) -> float:
  """CPU seconds (user + system) used so far by a process and its
  descendants, including their finished children."""
  total = 0.0
  for p in [process] + process.children(recursive=True):
    try:
      times = p.cpu_times()
    except psutil.Error:
      continue
    total += times.user + times.system + times.children_user + (
        times.children_system)
  return total


def increase(series, start_time):
  """(increase, seconds) of a counter `plot.Series` between its first and
  last samples after `start_time`; (nan, nan) with fewer than two."""
  after = series.wall_times >= start_time
  times, values = series.wall_times[after], series.values[after]
  if len(times) < 2 or times[-1] <= times[0]:
    return float('nan'), float('nan')
  return float(values[-1] - values[0]), float(times[-1] - times[0])


def rate(series, start_time):
  """Increase per second of a counter `plot.Series` after `start_time`."""
  amount, seconds = increase(series, start_time)
  return amount / seconds


def run_case(name, logdir):
  args, frames, quick_frames, threshold = CASES[name]
  total = FLAGS.frames or (quick_frames if FLAGS.quick else frames)
  return run_training(args, total, threshold, logdir)


def last_value(events, tag, default=0.0):
  series = events.get(tag)
  return float(series.values[-1]) if series is not None else default


def run_training(args, total, threshold, logdir):
  """Runs `clear.train` with `args` for `total` frames in `logdir`."""
  cmd = [sys.executable, '-m', 'clear.train', *args, f'--logdir={logdir}',
         f'--total_environment_frames={total}', '--log_interval_s=5']
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  launch = time.time()
  cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
  process = subprocess.Popen(cmd, cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(logdir, 'stderr.log'),
                                         'w'))
  watched = psutil.Process(process.pid)
  peak_rss = peak_pss = 0
  cpu_samples = []  # (wall time, CPU seconds of the process tree so far)
  while process.poll() is None:
    rss, pss = tree_memory(watched)
    peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
    cpu_samples.append((time.time(), tree_cpu(watched)))
    time.sleep(0.5)
  wall = time.time() - launch
  cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (cpu_after.ru_utime - cpu_before.ru_utime +
         cpu_after.ru_stime - cpu_before.ru_stime)
  if process.returncode:
    raise RuntimeError(f'{args} failed; see {logdir}/stderr.log')
  events = plot.read_scalars(logdir)
  steps = events['runtime/num_updates']
  frames_series = events['runtime/num_env_frames']
  first_update = events['runtime/first_update_s'].wall_times[0]
  end = frames_series.wall_times[-1]
  return_tags = [t for t in events if t.startswith('episode/') and
                 t.endswith('/return')]
  summary = None  # No episode ended: a short case of a long game.
  if return_tags and threshold is not None:
    summary = curve_summary.summarize_curve(
        events[return_tags[0]], 100, threshold, start_time=launch)
  seconds = summary.seconds_to_threshold if summary else None
  cpu_at = None
  if seconds is not None:
    cpu_at = next((c for t, c in cpu_samples if t >= launch + seconds),
                  cpu)
  lags = events['runtime/policy_lag'].values
  num_replay = 0.5 if '--replay_proportion=0.5' in args else 0.0
  eval_series = events.get('eval/mean_return')
  trained, trained_s = increase(frames_series, first_update)
  return {
      'flags': args, 'total_environment_frames': total,
      'env_frames_trained': trained,
      'seconds_from_first_update': trained_s,
      'eval_s': last_value(events, 'runtime/eval_s'),
      'num_evaluations': len(eval_series.values) if eval_series else 0,
      'task_switch_s': last_value(events, 'runtime/task_switch_s'),
      'wall_time_s': wall, 'cpu_time_s': cpu,
      'launch_to_first_update_s': first_update - launch,
      'env_frames_per_s_from_first_update': rate(frames_series, first_update),
      'env_frames_per_s_second_half': rate(
          frames_series, first_update + (end - first_update) / 2),
      'updates_per_s': rate(steps, first_update),
      'return_threshold': threshold,
      'time_to_threshold_s': seconds,
      'frames_to_threshold': summary.frames_to_threshold if summary else None,
      'cpu_time_to_threshold_s': cpu_at,
      'final_100_episode_mean_return': summary.final_mean if summary else None,
      'episodes': summary.episodes if summary else 0,
      'peak_memory_process_tree_pss_mb': peak_pss / 1e6,
      'peak_memory_process_tree_rss_sum_mb': peak_rss / 1e6,
      'mean_policy_lag_updates': float(np.mean(lags)) if len(lags) else None,
      'replay_share': num_replay,
  }


def main(argv):
  del argv
  base = FLAGS.logdir or tempfile.mkdtemp(prefix='clear_bench_')
  results = {}
  for name in FLAGS.cases:
    logdir = os.path.join(base, name)
    os.makedirs(logdir, exist_ok=True)
    if name in SEQUENCES:
      results[name] = run_sequence_case(name, logdir)
    else:
      results[name] = run_case(name, logdir)
  print(json.dumps({
      'benchmark': 'train', 'quick': FLAGS.quick,
      'machine': {'cpus': os.cpu_count(),
                  'memory_gb': psutil.virtual_memory().total / 1e9,
                  'python': platform.python_version()},
      'baselines_same_machine_rllib_2_60_impala': {
          'cartpole_env_frames_per_s': 1480,
          'cartpole_time_to_475_s': [171, 286],
          'cartpole_peak_memory_mb': 1900,
          'pong_env_frames_per_s_64x64_cnn_no_lstm': 910},
      'cases': results}, indent=2))


if __name__ == '__main__':
  app.run(main)
