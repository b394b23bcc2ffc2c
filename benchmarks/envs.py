r"""Environment benchmark: Atari preprocessing cost, MinAtar frames per second
and actor inference latency.

Prints one JSON object:
  * atari: raw emulator frames per second on Pong, with this project's
    preprocessing (`envs.make('atari:Pong')`: fixed step_mul 4 with
    max-pooling, 84x84 grayscale, frame_stack 4, batching and auto-reset)
    and with plain `ALEInterface.act` (no screens fetched: the limit), on 1
    and 2 processes each stepping its own env with random actions (best of
    a few interleaved rounds); `ratio` is preprocessed / plain (target
    >= 0.8).
  * minatar: frames per second (one process, random actions) of each
    MinAtar game through `envs.make('minatar:<Game>', num_envs=32)`
    (sticky actions, batching, auto-reset: what an actor steps) and of the
    bare game (`act` and `state` only: the limit); `ratio` is the first
    over the second. CPU time rather than wall time, so a loaded host
    skews it less; or the reason it was skipped without `minatar`.
  * agent: `agents.make_agent(spec).step` under `tf.function`, milliseconds
    per call at batch 1, 8 and 32 (median), for the Pong spec and for
    MinAtar's Breakout (`minatar_agent`, the MinAtar torso and LSTM 128);
    or the reason it was skipped when `agents` is not importable.

  python -m benchmarks.envs                       # full run
  python -m benchmarks.envs --quick               # a short smoke run
  python -m benchmarks.envs --families=minatar    # MinAtar only
"""

import json
import multiprocessing
import os
import platform
import sys
import time

if __package__ in (None, ''):
  # Run as a script: `benchmarks/` must not shadow the `envs` package.
  _ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  sys.path[:] = [p for p in sys.path
                 if os.path.abspath(p or '.') != os.path.dirname(
                     os.path.abspath(__file__))]
  sys.path.insert(0, _ROOT)

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags
import numpy as np

FLAGS = flags.FLAGS
flags.DEFINE_bool('quick', False, 'Short run (smoke test).')
flags.DEFINE_string('game', 'Pong', 'Atari game.')
flags.DEFINE_list('processes', ['1', '2'], 'Process counts to measure.')
flags.DEFINE_list('batch_sizes', ['1', '8', '32'], 'Agent batch sizes.')
flags.DEFINE_list('families', ['atari', 'minatar'],
                  'Env families to measure: atari, minatar.')
flags.DEFINE_list('minatar_games', ['Asterix', 'Breakout', 'Freeway',
                                    'Seaquest', 'SpaceInvaders'],
                  'MinAtar games to measure.')

_STEP_MUL = 4
_FRAME_STACK = 4


def _preprocessed_worker(game, seed, num_steps, barrier, results):
  import envs  # pylint: disable=g-import-not-at-top
  env = envs.make(f'atari:{game}', seed=seed, step_mul=_STEP_MUL,
                  frame_stack=_FRAME_STACK)
  ale = env.envs[0].ale
  num_actions = env.spec.action_spec['action'].num_values
  actions = np.random.default_rng(seed).integers(
      num_actions, size=(num_steps, 1))
  env.reset()
  barrier.wait()
  frames_before = ale.getFrameNumber()
  start = time.perf_counter()
  for action in actions:
    env.step({'action': action})
  elapsed = time.perf_counter() - start
  results.put((ale.getFrameNumber() - frames_before, elapsed))


def _plain_ale_worker(game, seed, num_steps, barrier, results):
  import ale_py  # pylint: disable=g-import-not-at-top
  from envs import atari  # pylint: disable=g-import-not-at-top
  ale = ale_py.ALEInterface()
  ale.setInt('random_seed', seed)
  ale.setFloat('repeat_action_probability', 0.0)
  ale.loadROM(ale_py.roms.get_rom_path(atari.rom_id(game)))
  legal = ale.getMinimalActionSet()
  actions = np.random.default_rng(seed).integers(len(legal), size=num_steps)
  ale.reset_game()
  barrier.wait()
  start = time.perf_counter()
  for action in actions:
    a = legal[action]
    for _ in range(_STEP_MUL):
      ale.act(a)
    if ale.game_over():
      ale.reset_game()
  elapsed = time.perf_counter() - start
  results.put((num_steps * _STEP_MUL, elapsed))


def _frames_per_second(worker, game, num_processes, num_steps):
  """Runs `num_processes` workers together; total frames / slowest time."""
  ctx = multiprocessing.get_context('spawn')
  barrier = ctx.Barrier(num_processes)
  results = ctx.Queue()
  procs = [ctx.Process(target=worker,
                       args=(game, seed, num_steps, barrier, results))
           for seed in range(num_processes)]
  for p in procs:
    p.start()
  outcomes = [results.get() for _ in procs]
  for p in procs:
    p.join()
  frames = sum(f for f, _ in outcomes)
  return frames / max(t for _, t in outcomes)


def atari_throughput(game, process_counts, num_steps, rounds):
  """Best of `rounds` interleaved plain / preprocessed runs (shared hosts
  are noisy; interleaving exposes both to the same load)."""
  figures = {}
  for n in process_counts:
    plain = preprocessed = 0.0
    for _ in range(rounds):
      plain = max(plain, _frames_per_second(_plain_ale_worker, game, n,
                                            num_steps))
      preprocessed = max(preprocessed, _frames_per_second(
          _preprocessed_worker, game, n, num_steps))
    figures[f'{n}_processes'] = {
        'preprocessed_fps': round(preprocessed),
        'plain_ale_fps': round(plain),
        'ratio': round(preprocessed / plain, 3),
    }
  return figures


def minatar_throughput(games, num_steps, num_envs=32):
  """Frames per CPU second of MinAtar games: batched envs and bare games."""
  import envs  # pylint: disable=g-import-not-at-top
  from envs import minatar  # pylint: disable=g-import-not-at-top
  figures = {'num_envs': num_envs}
  for game in games:
    try:
      env = envs.make(f'minatar:{game}', num_envs=num_envs, seed=0)
    except minatar.MinAtarNotInstalledError as e:
      return {'skipped': str(e)}
    actions = np.random.default_rng(0).integers(
        env.spec.action_spec['action'].num_values,
        size=(num_steps, num_envs))
    env.reset()
    start = time.process_time()
    for action in actions:
      env.step({'action': action})
    batched = num_steps * num_envs / (time.process_time() - start)
    bare = minatar.game_module(minatar.game_id(game)).Env(ramping=True)
    bare.random = np.random.RandomState(0)
    bare.reset()
    flat = actions.reshape(-1).tolist()
    start = time.process_time()
    for action in flat:
      _, terminal = bare.act(action)
      bare.state()
      if terminal:
        bare.reset()
    plain = len(flat) / (time.process_time() - start)
    figures[game] = {'frames_per_s': round(batched),
                     'bare_game_frames_per_s': round(plain),
                     'ratio': round(batched / plain, 3)}
  return figures


def agent_latency(env_name, batch_sizes, repeats, core_size=256):
  """Median ms per `tf.function(agent.step)` call, per batch size."""
  try:
    import agents  # pylint: disable=g-import-not-at-top
    make_agent = agents.make_agent
  except (ImportError, AttributeError) as e:
    return {'skipped': f'agents.make_agent is not importable: {e!r}'}
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import envs  # pylint: disable=g-import-not-at-top

  try:
    env = envs.make(env_name)
  except RuntimeError as e:  # A missing optional package (minatar).
    return {'skipped': str(e)}
  spec = env.spec
  agent = make_agent(spec, network='auto', core_size=core_size, seed=0)
  step = tf.function(agent.step)
  figures = {}
  for b in batch_sizes:
    env = envs.make(env_name, num_envs=b)
    env_output = tf.nest.map_structure(tf.convert_to_tensor, env.reset())
    prev_action = {k: tf.zeros([b], tf.int32) for k in spec.action_spec}
    state = agent.initial_state(b)
    for _ in range(3):
      step(env_output, prev_action, state)
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      output, state = step(env_output, prev_action, state)
      tf.nest.map_structure(lambda t: t.numpy(), output)
      times.append(time.perf_counter() - start)
    figures[f'batch_{b}_ms'] = round(1000 * float(np.median(times)), 3)
  figures['network'] = agents.resolve_network(spec, 'auto')
  figures['core_size'] = core_size
  figures['tf_devices'] = [d.name for d in tf.config.list_logical_devices()]
  return figures


def main(argv):
  del argv
  unknown = sorted(set(FLAGS.families) - {'atari', 'minatar'})
  if unknown:
    raise app.UsageError(f'--families: unknown {unknown}; use atari, '
                         'minatar.')
  num_steps = 500 if FLAGS.quick else 5000
  rounds = 1 if FLAGS.quick else 3
  repeats = 10 if FLAGS.quick else 100
  batch_sizes = [int(b) for b in FLAGS.batch_sizes]
  result = {
      'benchmark': 'envs',
      'quick': FLAGS.quick,
      'host': {'cpu_count': os.cpu_count(), 'machine': platform.machine(),
               'python': platform.python_version()},
  }
  if 'atari' in FLAGS.families:
    result['atari'] = {
        'game': FLAGS.game,
        'step_mul': _STEP_MUL,
        'frame_stack': _FRAME_STACK,
        'agent_steps_per_process': num_steps,
        'rounds': rounds,
        **atari_throughput(FLAGS.game, [int(n) for n in FLAGS.processes],
                           num_steps, rounds),
    }
    result['agent'] = agent_latency(f'atari:{FLAGS.game}', batch_sizes,
                                    repeats)
  if 'minatar' in FLAGS.families:
    result['minatar'] = {
        'agent_steps': num_steps,
        **minatar_throughput(FLAGS.minatar_games, num_steps),
    }
    result['minatar_agent'] = agent_latency('minatar:Breakout', batch_sizes,
                                            repeats, core_size=128)
  print(json.dumps(result, indent=2))


if __name__ == '__main__':
  app.run(main)
