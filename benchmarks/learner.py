r"""Learner benchmark: V-trace against numpy, and IMPALA-CLEAR step throughput.

Prints one JSON object. Figures are ratios against baselines measured in the
same run where a baseline exists (numpy V-trace), and batch frames per
second (T x B / step time) for the learner step, with XLA off and on.

  python -m benchmarks.learner            # full: [80, 32] Atari batch
  python -m benchmarks.learner --quick    # a short smoke run
"""

import json
import os
import platform
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np
import tensorflow as tf
import tree

import agents
from clear import types
from clear.algorithms.impala import learner as learner_lib
from clear.ops import vtrace
from clear.runtime import devices as devices_lib

FLAGS = flags.FLAGS
flags.DEFINE_bool('quick', False, 'Few repetitions, for a smoke run.')
flags.DEFINE_integer('unroll_length', 80, 'T of the benchmark batch.')
flags.DEFINE_integer('batch_size', 32, 'B of the benchmark batch.')
flags.DEFINE_string('network', 'impala_shallow', 'Agent torso.')
flags.DEFINE_integer('core_size', 256, 'LSTM size.')
flags.DEFINE_list('xla', ['off', 'on'], 'XLA settings to measure.')
flags.DEFINE_string('device', 'auto',
                    "The learner's device, as clear.train's "
                    '--learner_device: auto, cpu, gpu or e.g. /GPU:1.')

NUM_ACTIONS = 6


def numpy_vtrace(log_rhos, discounts, rewards, values, bootstrap_value):
  """A plain vectorised numpy V-trace (clip thresholds 1), the baseline."""
  rhos = np.exp(log_rhos)
  clipped = np.minimum(1.0, rhos)
  cs = np.minimum(1.0, rhos)
  next_values = np.concatenate([values[1:], bootstrap_value[None]], 0)
  deltas = clipped * (rewards + discounts * next_values - values)
  acc = np.zeros_like(bootstrap_value)
  vs_minus_v = np.empty_like(values)
  for t in reversed(range(values.shape[0])):
    acc = deltas[t] + discounts[t] * cs[t] * acc
    vs_minus_v[t] = acc
  vs = vs_minus_v + values
  next_vs = np.concatenate([vs[1:], bootstrap_value[None]], 0)
  pg_advantages = clipped * (rewards + discounts * next_vs - values)
  return vs, pg_advantages


def time_per_call(fn, repeats, warmup=3):
  for _ in range(warmup):
    fn()
  start = time.perf_counter()
  for _ in range(repeats):
    fn()
  return (time.perf_counter() - start) / repeats


def bench_vtrace(t, b, repeats):
  rng = np.random.RandomState(0)
  args = [rng.randn(t, b).astype(np.float32) * 0.3,
          (rng.rand(t, b) > 0.05).astype(np.float32) * 0.99,
          rng.randn(t, b).astype(np.float32),
          rng.randn(t, b).astype(np.float32),
          rng.randn(b).astype(np.float32)]
  tensors = [tf.constant(a) for a in args]
  compiled = tf.function(vtrace.from_importance_weights)
  np_time = time_per_call(lambda: numpy_vtrace(*args), repeats)
  tf_time = time_per_call(lambda: compiled(*tensors).vs.numpy(), repeats)
  eager_time = time_per_call(
      lambda: vtrace.from_importance_weights(*tensors).vs.numpy(),
      max(1, repeats // 4))
  # Inside a graph, as in the learner step: K V-traces on distinct inputs in
  # one tf.function, so the per-call dispatch overhead is amortised.
  k = 32
  many = [tf.constant(np.stack([np.roll(a, i, axis=-1) for i in range(k)]))
          for a in args]

  @tf.function
  def in_graph(log_rhos, discounts, rewards, values, bootstrap):
    total = 0.0
    for i in range(k):
      total += tf.reduce_sum(vtrace.from_importance_weights(
          log_rhos[i], discounts[i], rewards[i], values[i], bootstrap[i]).vs)
    return total

  graph_time = time_per_call(lambda: in_graph(*many).numpy(),
                             max(2, repeats // 20)) / k
  expected_vs, _ = numpy_vtrace(*args)
  np.testing.assert_allclose(compiled(*tensors).vs, expected_vs, rtol=1e-4,
                             atol=1e-4)
  return {'shape': [t, b], 'numpy_ms': 1e3 * np_time,
          'tf_function_ms': 1e3 * tf_time, 'eager_ms': 1e3 * eager_time,
          'in_graph_ms': 1e3 * graph_time,
          'tf_function_over_numpy': tf_time / np_time,
          'in_graph_over_numpy': graph_time / np_time,
          'target_over_numpy_max': 2.0}


def atari_batch(spec, agent, t, b, seed=0):
  rng = np.random.RandomState(seed)
  frames = rng.randint(0, 256, size=(t + 1, b, 84, 84, 4), dtype=np.uint8)
  done = rng.rand(t + 1, b) < 0.01
  env_outputs = types.StepOutput(
      reward=rng.randn(t + 1, b).astype(np.float32),
      info=types.EpisodeInfo(np.zeros((t + 1, b), np.float32),
                             np.zeros((t + 1, b), np.int32),
                             np.zeros((t + 1, b), np.int32)),
      done=done, truncated=np.zeros_like(done),
      observation={'frame': frames})
  agent_outputs = types.AgentOutput(
      action={'action': rng.randint(NUM_ACTIONS, size=(t + 1, b)).astype(
          np.int32)},
      logits={'action': rng.randn(t + 1, b, NUM_ACTIONS).astype(np.float32)},
      baseline=rng.randn(t + 1, b).astype(np.float32))
  state = tree.map_structure(lambda s: s.numpy(), agent.initial_state(b))
  batch = types.Unroll(state, env_outputs, agent_outputs)
  return tree.map_structure(tf.constant, batch)


def bench_learner(t, b, jit, repeats):
  spec = types.EnvSpec(
      observation_spec={'frame': types.ArraySpec((84, 84, 4), np.uint8)},
      action_spec={'action': types.DiscreteSpec(NUM_ACTIONS)},
      name='benchmark:atari')
  agent = agents.make_agent(spec, network=FLAGS.network,
                            core_size=FLAGS.core_size, seed=0)
  config = learner_lib.LearnerConfig(
      batch_size=b, num_replay=b // 2, unroll_length=t, jit_compile=jit,
      total_environment_frames=10**12, step_mul=4)
  learner = learner_lib.ImpalaClearLearner(agent, config)
  batch = atari_batch(spec, agent, t, b)
  start = time.perf_counter()
  learner.step(batch)['loss/total'].numpy()
  first_step_s = time.perf_counter() - start
  placed = sorted({v.device.split('device:')[-1]
                   for v in agent.trainable_variables})
  step_s = time_per_call(lambda: learner.step(batch)['loss/total'].numpy(),
                         repeats, warmup=1)
  return {'xla': jit, 'variables_on': placed,
          'first_step_s_incl_tracing': first_step_s,
          'step_s': step_s, 'batch_frames_per_s': t * b / step_s,
          'env_frames_per_s_at_frame_skip_4': 4 * t * b / step_s,
          'target_batch_frames_per_s_min': 700}


def main(argv):
  del argv
  t, b = FLAGS.unroll_length, FLAGS.batch_size
  quick = FLAGS.quick
  try:
    device = devices_lib.learner_device(FLAGS.device, flag='--device')
  except ValueError as e:
    sys.exit(f'error: {e}')
  found = [d.device_type for d in tf.config.list_physical_devices()]
  with tf.device(device):
    result = {
        'benchmark': 'learner',
        'machine': {'cpus': os.cpu_count(), 'devices': found,
                    'python': platform.python_version(),
                    'tensorflow': tf.__version__},
        'device': device,
        'vtrace': bench_vtrace(80, 32, 20 if quick else 200),
        'learner': [bench_learner(t, b, setting == 'on', 2 if quick else 8)
                    for setting in FLAGS.xla],
    }
  print(json.dumps(result, indent=2))


if __name__ == '__main__':
  app.run(main)
