r"""Evaluation benchmark: one evaluation of an Atari sequence with its envs
stepped by the evaluator itself and by worker processes.

Plays evaluations of the 10M-frame Atari study's games (SpaceInvaders,
BeamRider, MsPacman; `results/atari_sequence/study_10m.toml`) with the
Atari agent at its initial (seeded) weights, `--episodes` episodes a game
and at most `--max_steps` agent steps an episode, through
`clear.runtime.evaluation.Evaluator` with `num_workers` 0 (the evaluator
steps every env) and each of `--workers`, in interleaved rounds. This is
what a learner waiting on an evaluation waits for: the evaluation alone
on the machine. Prints one JSON object with, per worker count, the
seconds of each round and the best; `ratio` is 0 workers' best over each
count's (the speed-up), and `same_returns` checks that every count played
the same returns. Building the envs (and starting the workers) is not
timed: a run builds them once.

  python -m benchmarks.evaluation            # 60 episodes a game, 400 steps
  python -m benchmarks.evaluation --quick    # a short smoke run
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

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

FLAGS = flags.FLAGS
flags.DEFINE_bool('quick', False, 'Short run (smoke test).')
flags.DEFINE_string('env', 'atari:SpaceInvaders,atari:BeamRider,'
                    'atari:MsPacman', 'The sequence to evaluate.')
flags.DEFINE_integer('episodes', 60, 'Episodes (envs) a game.')
flags.DEFINE_integer('max_steps', 400, 'Agent steps after which an episode '
                     'is cut.')
flags.DEFINE_list('workers', ['2'], 'Worker counts to measure against 0.')
flags.DEFINE_integer('rounds', 3, 'Interleaved rounds of each count.')


def make_evaluator(num_workers: int, episodes: int, max_steps: int):
  """The study's evaluator at seeded initial weights, `num_workers`."""
  import envs  # pylint: disable=g-import-not-at-top
  from clear.algorithms import policy as policy_lib  # pylint: disable=g-import-not-at-top
  from clear.algorithms import registry  # pylint: disable=g-import-not-at-top
  from clear.runtime import evaluation  # pylint: disable=g-import-not-at-top
  env = envs.make(FLAGS.env, task=0)
  spec = env.spec
  env.close()
  policy = registry.make_policy(
      'impala', spec, policy_lib.AgentConfig('impala_shallow', 256,
                                             torso_norm='layer_norm'),
      seed=1)
  return evaluation.Evaluator(FLAGS.env, {}, policy, num_episodes=episodes,
                              seed=104_729, max_steps=max_steps,
                              unroll_length=max_steps,
                              num_workers=num_workers)


def main(argv):
  del argv
  quick = FLAGS.quick
  episodes = 4 if quick else FLAGS.episodes
  max_steps = 20 if quick else FLAGS.max_steps
  rounds = 1 if quick else FLAGS.rounds
  counts = [0] + [int(w) for w in FLAGS.workers]
  evaluators = {n: make_evaluator(n, episodes, max_steps) for n in counts}
  seconds = {n: [] for n in counts}
  returns = {n: [] for n in counts}
  try:
    for _ in range(rounds):
      for n in counts:
        start = time.perf_counter()
        tasks = evaluators[n].evaluate_tasks()
        seconds[n].append(time.perf_counter() - start)
        returns[n].append({name: t.returns.tolist()
                           for name, t in tasks.items()})
  finally:
    for evaluator in evaluators.values():
      evaluator.close()
  figures = {str(n): {'seconds': [round(s, 2) for s in seconds[n]],
                      'best_s': round(min(seconds[n]), 2)} for n in counts}
  result = {
      'benchmark': 'evaluation',
      'quick': quick,
      'host': {'cpu_count': os.cpu_count(), 'machine': platform.machine(),
               'python': platform.python_version()},
      'setup': {'env': FLAGS.env, 'episodes_per_game': episodes,
                'max_steps': max_steps, 'rounds': rounds},
      'workers': figures,
      'ratio': {str(n): round(min(seconds[0]) / min(seconds[n]), 3)
                for n in counts[1:]},
      'same_returns': all(returns[n] == returns[0] for n in counts),
  }
  print(json.dumps(result, indent=2))


if __name__ == '__main__':
  app.run(main)
