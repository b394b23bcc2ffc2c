"""The soak harness: its helpers (fast) and the 10-minute soak run (slow)."""

import json

import numpy as np
import pytest

from benchmarks import soak

LOG = """\
I0512 16:40:01.000000 140 run_loop.py:287] First update 21.3 s after launch.
I0512 16:40:05.000000 140 run_loop.py:306] [main] frames 57,680/1,000,000,000,000 (0.0%) | 3,009 env fps | 2.4 updates/s | lag 1.9 | return 21.5 (last 100) | ETA 9h59m
I0512 16:40:05.000100 140 run_loop.py:312] replay: 529/2000 unrolls (10,580/40,000 env frames), 3.1 MB
W0512 16:40:07.000000 140 actor_pool.py:200] Actor 2 died (exit code -9); restart 1 of at most 20.
W0512 16:40:08.000000 140 actor_pool.py:380] Ray actor 0 died (RayActorError()); restart 2.
I0512 16:40:10.000000 140 run_loop.py:306] [main] frames 75,000/1,000,000,000,000 (0.0%) | 3,464 env fps | 11.2 updates/s | lag 2.0 | return 30.1 (last 100) | ETA 9h59m
I0512 16:40:10.000100 140 run_loop.py:312] replay: 2000/2000 unrolls (40,000/40,000 env frames), 3.1 MB
W0512 16:40:12.000000 140 signals.py:57] Signal 15: stopping after the current update and writing a final checkpoint.
I0512 16:40:13.000000 140 train.py:177] Done: {'num_env_frames': 75800, 'num_updates': 160, 'phase': 'main', 'mean_return': 30.1, 'stopped_early': True}
"""  # noqa: E501


def test_parse_log_reads_progress_replay_restarts_and_done():
  parsed = soak.parse_log(LOG)
  assert [p['frames'] for p in parsed['progress']] == [57_680, 75_000]
  assert parsed['progress'][0]['total'] == 10**12
  assert parsed['progress'][1]['fps'] == 3464.0
  assert parsed['progress'][1]['updates_per_s'] == 11.2
  assert parsed['replay'] == [{'size': 529, 'capacity': 2000, 'mb': 3.1},
                              {'size': 2000, 'capacity': 2000, 'mb': 3.1}]
  assert parsed['restarts'] == 2
  assert parsed['done_frames'] == 75_800
  empty = soak.parse_log('')
  assert empty == {'progress': [], 'replay': [], 'restarts': 0,
                   'done_frames': None}


def test_slope_and_margin_pass_flat_noise_and_fail_leaks():
  assert soak.slope_per_minute([0, 60, 120], [100, 110, 120]) == \
      pytest.approx(10.0)
  assert np.isnan(soak.slope_per_minute([5], [1]))
  rng = np.random.RandomState(0)
  times = np.arange(0, 600, 5.0)
  # Start-up growth during the warm-up, then flat with +-10 MB noise.
  flat = np.where(times < 120, 4 + times * 6.6, 800 + rng.uniform(-10, 10,
                                                                  times.size))
  summary = soak.summarize_learner(times, flat, 120.0, 100.0, 10.0)
  assert summary['within_margin']
  assert summary['rss_at_warmup_mb'] == flat[24]
  assert summary['num_samples_after_warmup'] == times.size - 24
  assert abs(summary['slope_mb_per_min']) < 3
  # A steady leak of 20 MB/min: slope and growth both past the margin.
  leak = flat + np.maximum(times - 120, 0) / 60 * 20
  summary = soak.summarize_learner(times, leak, 120.0, 100.0, 10.0)
  assert not summary['within_margin']
  assert summary['slope_mb_per_min'] == pytest.approx(20, abs=2)
  assert summary['growth_mb'] > 100
  assert summary['growth_pct'] == pytest.approx(
      100 * summary['growth_mb'] / summary['rss_at_warmup_mb'])
  # A one-off jump past the margin fails even if RSS comes back down.
  spike = flat.copy()
  spike[60] += 150
  assert not soak.summarize_learner(times, spike, 120.0, 100.0,
                                    10.0)['within_margin']
  # With the default margin, even a slow leak of 7 MB/min (one batch per
  # update at 2.4 updates/s) fails.
  slow_leak = flat + np.maximum(times - 120, 0) / 60 * 7
  assert not soak.summarize_learner(times, slow_leak, 120.0,
                                    soak.DEFAULT_MARGIN_MB,
                                    soak.DEFAULT_MARGIN_MB_PER_MIN)[
                                        'within_margin']
  assert soak.summarize_learner(times, flat, 120.0, soak.DEFAULT_MARGIN_MB,
                                soak.DEFAULT_MARGIN_MB_PER_MIN)[
                                    'within_margin']
  # Too few samples after the warm-up: not judged as passing.
  assert not soak.summarize_learner([0, 5], [1, 1], 120.0, 100.0,
                                    10.0)['within_margin']


def test_actor_detection_and_command():
  assert soak.is_actor(['python', '-c', 'from multiprocessing.spawn import '
                        'spawn_main; spawn_main(tracker_fd=9, pipe_handle=13)',
                        '--multiprocessing-fork'])
  assert not soak.is_actor(['python', '-c', 'from multiprocessing.'
                            'resource_tracker import main;main(8)'])
  config = soak.SoakConfig(num_actors=6, envs_per_actor=3)
  cmd = soak.command(config, '/tmp/x')
  assert cmd[1:3] == ['-m', 'clear.train']
  for arg in ('--num_actors=6', '--envs_per_actor=3', '--logdir=/tmp/x',
              '--replay_buffer_size=2000', '--replay_proportion=0.5'):
    assert arg in cmd
  leaky = soak.command(soak.SoakConfig(inject_leak_batches_per_update=1), 'x')
  assert leaky[1] == '-c' and 'assemble_batch' in leaky[2]
  compile(leaky[2], '<prelude>', 'exec')


@pytest.mark.slow
def test_ten_minute_soak_keeps_memory_bounded(tmp_path):
  result = soak.run_soak(soak.SoakConfig(logdir=str(tmp_path)))
  print(json.dumps(result, indent=2))
  assert result['duration_s'] >= 600
  assert result['replay']['reached_capacity'], result['replay']
  assert result['replay']['reached_capacity_at_s'] < result['warmup_s']
  learner = result['learner_rss']
  assert learner['num_samples_after_warmup'] >= 60
  assert result['within_margin'], learner
  assert learner['growth_mb'] <= result['margin_mb']
  assert result['margin']['leak_of_one_batch_per_update_fails_margin']
  assert not result['exited_before_sigterm']
  assert not result['killed_after_stop_timeout']
  assert result['exit_status'] == 143
  assert result['orphans'] == []
  assert result['actor_restarts'] == 0
  assert result['passed']
