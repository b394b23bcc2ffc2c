r"""Replay benchmark: Atari unrolls stored as they arrive against frame-once.

Fills two `clear.replay.buffer.ReplayBuffer`s of the same capacity with
the same real Pong unrolls (random actions, the Atari defaults: 84x84 frames,
stack of 4, step multiplier 4, unrolls of 20 steps, an LSTM-256 agent state and
behaviour logits beside them): one stores the frame stacks as they arrive
(`as_is`, as a buffer without `stacked_observations` does), the other each
distinct frame once (`frame_once`, `stacked_observations=('frame',)`).
Prints one JSON object with, per buffer:
  * bytes held, per unroll and per env frame (an unroll is
    unroll_length x step_mul env frames); `bytes_ratio` is frame_once /
    as_is (target <= 0.30);
  * insertion rate (unrolls/s, filling the buffer);
  * sampling rate: unrolls/s drawn in batches of 32 by `sample`, the
    median of interleaved rounds; `sample_ratio` is frame_once / as_is
    (target >= 0.9).
Both buffers draw the same indices (same seed); the sampled batches are
checked to be equal.

  python -m benchmarks.replay            # full run (about 1.6 GB of buffers)
  python -m benchmarks.replay --quick    # a short smoke run
"""

import json
import os
import platform
import sys
import time

if __package__ in (None, ''):
  # Run as a script: `benchmarks/envs.py` must not shadow the `envs` package.
  _HERE = os.path.dirname(os.path.abspath(__file__))
  sys.path[:] = [p for p in sys.path if os.path.abspath(p or '.') != _HERE]
  sys.path.insert(0, os.path.dirname(_HERE))

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import tree

from clear import types
from clear.replay import buffer as replay
import envs

FLAGS = flags.FLAGS
flags.DEFINE_bool('quick', False, 'Short run (smoke test).')
flags.DEFINE_string('game', 'Pong', 'Atari game.')
flags.DEFINE_integer('capacity', 2000, 'Unrolls per buffer (full run).')
flags.DEFINE_integer('unique_unrolls', 200,
                     'Distinct unrolls collected from the game (full run); '
                     'the buffers cycle through them.')
flags.DEFINE_integer('batch_size', 32, 'Unrolls per sample.')
flags.DEFINE_integer('unroll_length', 20, 'Agent steps per unroll.')
flags.DEFINE_integer('core_size', 256, 'LSTM size of the stored state.')
flags.DEFINE_integer('rounds', 7, 'Interleaved timing rounds (full run).')
flags.DEFINE_enum('storage', 'memory', list(replay.STORAGE_MODES),
                  'Replay storage of both buffers.')
flags.DEFINE_string('memmap_dir', '/tmp/clear_replay_benchmark',
                    'Folder of the memory-mapped buffers (memmap only).')

_STEP_MUL = 4
_NUM_ENVS = 4


def collect_unrolls(game, num_unrolls, unroll_length, core_size, seed=0):
  """Unrolls of real frames cut as an actor cuts them.

  Consecutive unrolls of one env share a step (the first repeats the
  previous last); everything but the frames, rewards and done flags is
  random.
  """
  env = envs.make(f'atari:{game}', num_envs=_NUM_ENVS, seed=seed,
                  step_mul=_STEP_MUL)
  num_actions = env.spec.action_spec['action'].num_values
  rng = np.random.default_rng(seed)
  per_env = -(-num_unrolls // _NUM_ENVS)
  out = env.reset()
  steps = [out]
  for _ in range(per_env * unroll_length):
    out = env.step({'action': rng.integers(num_actions, size=_NUM_ENVS)})
    steps.append(tree.map_structure(np.copy, out))
  env.close()
  steps = tree.map_structure(lambda *x: np.stack(x, 1), *steps)  # [B, N]
  unrolls = []
  for b in range(_NUM_ENVS):
    for k in range(per_env):
      cut = slice(k * unroll_length, (k + 1) * unroll_length + 1)
      env_outputs = tree.map_structure(lambda x, b=b, cut=cut: x[b, cut],
                                       steps)
      t1 = unroll_length + 1
      unrolls.append(types.Unroll(
          agent_state={'hidden': rng.standard_normal(
              core_size, np.float32), 'cell': rng.standard_normal(
                  core_size, np.float32)},
          env_outputs=env_outputs,
          agent_outputs=types.AgentOutput(
              action={'action': rng.integers(num_actions, size=t1,
                                             dtype=np.int32)},
              logits={'action': rng.standard_normal(
                  (t1, num_actions), np.float32)},
              baseline=rng.standard_normal(t1, np.float32))))
  return unrolls[:num_unrolls]


def fill(buffer, unrolls, capacity):
  """Inserts `capacity` unrolls (cycling); returns unrolls per second."""
  start = time.perf_counter()
  for i in range(capacity):
    buffer.insert(unrolls[i % len(unrolls)])
  return capacity / (time.perf_counter() - start)


def sampling_rates(buffers, batch_size, samples_per_round, rounds):
  """Median unrolls/s of `sample(batch_size)`, per buffer, over rounds that
  alternate which buffer goes first (both see the same load)."""
  rates = {name: [] for name in buffers}
  names = list(buffers)
  for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
      start = time.perf_counter()
      for _ in range(samples_per_round):
        buffers[name].sample(batch_size)
      elapsed = time.perf_counter() - start
      rates[name].append(batch_size * samples_per_round / elapsed)
  return {name: float(np.median(v)) for name, v in rates.items()}


def main(argv):
  del argv
  quick = FLAGS.quick
  capacity = 100 if quick else FLAGS.capacity
  num_unique = 24 if quick else FLAGS.unique_unrolls
  rounds = 2 if quick else FLAGS.rounds
  samples_per_round = 3 if quick else 30
  unrolls = collect_unrolls(FLAGS.game, num_unique, FLAGS.unroll_length,
                            FLAGS.core_size)
  kwargs = lambda name: dict(
      seed=0, storage=FLAGS.storage,
      directory=os.path.join(FLAGS.memmap_dir, name))
  buffers = {
      'as_is': replay.ReplayBuffer(capacity, 'reservoir', **kwargs('as_is')),
      'frame_once': replay.ReplayBuffer(
          capacity, 'reservoir', stacked_observations=('frame',),
          **kwargs('frame_once')),
  }
  inserts = {name: fill(b, unrolls, capacity) for name, b in buffers.items()}
  first, second = (b.sample(FLAGS.batch_size) for b in buffers.values())
  tree.map_structure(np.testing.assert_array_equal, first, second)
  rates = sampling_rates(buffers, FLAGS.batch_size, samples_per_round, rounds)
  frames_per_unroll = FLAGS.unroll_length * _STEP_MUL
  figures = {}
  for name, buffer in buffers.items():
    figures[name] = {
        'bytes': buffer.nbytes,
        'bytes_per_unroll': round(buffer.nbytes / capacity),
        'bytes_per_env_frame': round(
            buffer.nbytes / (capacity * frames_per_unroll), 1),
        'insert_unrolls_per_s': round(inserts[name], 1),
        'sample_unrolls_per_s': round(rates[name], 1),
    }
  store = buffers['frame_once'].frame_stores['frame']
  result = {
      'benchmark': 'replay',
      'quick': quick,
      'host': {'cpu_count': os.cpu_count(), 'machine': platform.machine(),
               'python': platform.python_version()},
      'setup': {
          'game': FLAGS.game, 'capacity_unrolls': capacity,
          'unique_unrolls': len(unrolls),
          'unrolls_with_an_episode_start': sum(
              bool(u.env_outputs.done.any()) for u in unrolls),
          'unroll_length': FLAGS.unroll_length, 'step_mul': _STEP_MUL,
          'frame_stack': int(unrolls[0].env_outputs.observation[
              'frame'].shape[-1]),
          'batch_size': FLAGS.batch_size, 'storage': FLAGS.storage,
          'rounds': rounds, 'samples_per_round': samples_per_round,
          'env_frames_per_unroll': frames_per_unroll,
      },
      **figures,
      'frame_once_spilled_slots': store.num_spilled,
      'samples_equal': True,
      'bytes_ratio': round(figures['frame_once']['bytes'] /
                           figures['as_is']['bytes'], 4),
      'sample_ratio': round(rates['frame_once'] / rates['as_is'], 3),
  }
  print(json.dumps(result, indent=2))


if __name__ == '__main__':
  app.run(main)
