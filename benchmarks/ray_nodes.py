r"""Ray benchmark: actors on two worker nodes against the same on the head.

Starts a Ray cluster on this host with `ray.cluster_utils.Cluster`: a head
node (where this process, the learner's side, runs) and two worker nodes,
each a raylet with its own object store as on separate machines. The same
actors then collect for a fixed time twice per round, once placed on the
head node (unrolls reach the driver through the local object store) and
once on the worker nodes (unrolls cross node boundaries: the multi-machine
path). Each phase publishes new weights after every unroll it receives, as
a learner does after its updates. Phases alternate, so both settings see
the same machine state on average.

Prints one JSON object: env frames per second per phase, their means, and
the ratio worker nodes / head node (1.0: the object-store path costs
nothing; below 1: what crossing nodes costs on this host).

  python -m benchmarks.ray_nodes                       # Pong, 2 actors
  python -m benchmarks.ray_nodes --env=gym:CartPole-v1 --quick
"""

import json
import os
import platform
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
from absl.testing import flagsaver
import numpy as np
import tree

from clear.algorithms import registry
from clear.cli import configs
from clear.runtime import actor_worker
from clear.runtime import ray_actors

FLAGS = flags.FLAGS
flags.DEFINE_string('bench_env', 'atari:Pong', 'Env of the actors.')
flags.DEFINE_integer('bench_actors', 2, 'Actors (one CPU each).')
flags.DEFINE_integer('bench_envs_per_actor', 0,
                     'Envs per actor (0: the family default).')
flags.DEFINE_float('seconds', 60.0, 'Measured seconds per phase.')
flags.DEFINE_integer('rounds', 2, 'Rounds of (head, workers) phases.')
flags.DEFINE_bool('quick', False, 'Short phases, one round (a smoke run).')

HEAD, WORKERS = 'head_actor', 'worker_actor'


def pool_config(num_actors):
  """Actor settings exactly as `clear.train` builds them for the env."""
  args = ['bench', f'--env={FLAGS.bench_env}', '--logdir=/tmp/unused',
          f'--num_actors={num_actors}']
  if FLAGS.bench_envs_per_actor:
    args.append(f'--envs_per_actor={FLAGS.bench_envs_per_actor}')
  with flagsaver.flagsaver():
    FLAGS(args, known_only=True)
    config = configs.config_from_flags(FLAGS)
  lc = config.learner_config
  step_mul = config.env_options.get('step_mul', 1)
  return actor_worker.ActorPoolConfig(
      env_name=config.env_name, env_options=config.env_options,
      envs_per_actor=config.envs_per_actor, algorithm=config.algorithm,
      agent_config=config.agent_config, unroll_length=lc.unroll_length,
      num_actors=num_actors), lc.unroll_length * config.envs_per_actor * (
          step_mul)


def initial_weights(config):
  import envs  # pylint: disable=g-import-not-at-top
  env = envs.make(config.env_name, num_envs=1, **config.env_options)
  policy = registry.make_policy(config.algorithm, env.spec,
                                  config.agent_config)
  env.close()
  return policy.get_weights()


def measure(address, resource, config, weights, frames_per_unroll, seconds):
  """Env frames/s of actors needing `resource`, after one warm-up unroll
  from each."""
  pool = ray_actors.RayActorPool(config, address, resource)
  try:
    version = 0
    pool.publish(weights, version)
    warm, unroll_bytes = 0, 0
    while warm < config.num_actors:
      result = pool.get(timeout=5.0)
      if result is not None:
        warm += 1
        unroll_bytes = sum(np.asarray(leaf).nbytes
                           for leaf in tree.flatten(result))
    nodes = sorted({actor['node_id'][:8] for actor in pool.where()})
    unrolls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
      if pool.get(timeout=1.0) is not None:
        unrolls += 1
        version += 1
        pool.publish(weights, version)
    elapsed = time.perf_counter() - start
  finally:
    pool.close()
  return {'placement': resource, 'nodes': nodes, 'unrolls': unrolls,
          'unroll_bytes': unroll_bytes,
          'seconds': elapsed,
          'env_frames_per_s': unrolls * frames_per_unroll / elapsed}


def main(argv):
  del argv
  import ray  # pylint: disable=g-import-not-at-top
  from ray import cluster_utils  # pylint: disable=g-import-not-at-top
  num = FLAGS.bench_actors
  seconds = 10.0 if FLAGS.quick else FLAGS.seconds
  rounds = 1 if FLAGS.quick else FLAGS.rounds
  config, frames_per_unroll = pool_config(num)
  weights = initial_weights(config)
  store = 500 * 1024 * 1024
  cluster = cluster_utils.Cluster(
      initialize_head=True,
      head_node_args=dict(num_cpus=num, resources={HEAD: num},
                          object_store_memory=store))
  per_node = (num + 1) // 2
  for _ in range(2):
    cluster.add_node(num_cpus=per_node, resources={WORKERS: per_node},
                     object_store_memory=store)
  cluster.wait_for_nodes()
  phases = []
  try:
    ray.init(address=cluster.address, log_to_driver=False,
             configure_logging=False)
    for _ in range(rounds):
      for resource in (HEAD, WORKERS):
        phases.append(measure(cluster.address, resource, config, weights,
                              frames_per_unroll, seconds))
  finally:
    ray.shutdown()
    cluster.shutdown()
  mean = {r: float(np.mean([p['env_frames_per_s'] for p in phases
                            if p['placement'] == r])) for r in (HEAD, WORKERS)}
  print(json.dumps({
      'benchmark': 'ray_nodes',
      'machine': {'cpus': os.cpu_count(), 'python': platform.python_version(),
                  'ray': ray.__version__},
      'env': config.env_name, 'actors': num,
      'envs_per_actor': config.envs_per_actor,
      'unroll_length': config.unroll_length,
      'frames_per_unroll': frames_per_unroll,
      'unroll_bytes': phases[0]['unroll_bytes'],
      'phases': phases,
      'head_env_frames_per_s': mean[HEAD],
      'workers_env_frames_per_s': mean[WORKERS],
      'workers_over_head': mean[WORKERS] / mean[HEAD],
  }, indent=2))


if __name__ == '__main__':
  app.run(main)
