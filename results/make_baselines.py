r"""Writes the baselines a task sequence's returns are normalised by.

  python results/make_baselines.py --single_task_root=runs/minatar \
      --frames=3000000 --out=results/minatar/baselines.json
  python results/make_baselines.py \
      --games=atari:SpaceInvaders,atari:BeamRider,atari:MsPacman \
      --single_task_root=runs/atari_single --frames=6000000 --window=1000000 \
      --out=results/atari_sequence/baselines.json

Per game of `--games` (`clear.continual.metrics.baselines_json`), whose
single-task run is the logdir `<single_task_root>/<Game>` (the name without
its family: `atari:MsPacman` -> `MsPacman`):
  * low: the mean return of a uniformly random policy over
    `--random_episodes` episodes (the first episodes that
    `--random_envs` envs, seeded from `--seed`, finish), with the env's
    defaults as in training (MinAtar's sticky actions and difficulty
    ramping; Atari's 4 frames an action, no-op starts and episode cap);
  * high: the single-task run's mean evaluation return at the
    evaluations within `--window` frames of `--frames` (the frames each
    game trains for in the sequence, over all its visits), so that a
    normalised return of 1 means "as good as training on that game alone
    for as long";
  * curve: the single-task run's whole evaluation curve
    (`eval/<game>/return`), the reference for forward transfer.

It also prints the per-game numbers as JSON.
"""

import json
import sys

from absl import app
from absl import flags
import numpy as np

from clear import plot
from clear.continual import metrics as continual_metrics
from clear.continual import schedule as schedule_lib
import envs
from envs import minatar

MINATAR_GAMES = ','.join(f'minatar:{game}' for game in minatar.GAMES)

flags.DEFINE_list('games', MINATAR_GAMES,
                  'The sequence\'s games, as --env names them.')
flags.DEFINE_string('single_task_root', 'runs/minatar',
                    'Folder holding one single-task logdir per game, named '
                    'by the game without its family (Asterix, MsPacman, ...).')
flags.DEFINE_integer('frames', 3_000_000,
                     'Frames at which the single-task return is read.')
flags.DEFINE_integer('window', 300_000, 'Evaluations within this many frames '
                     'of --frames are averaged.')
flags.DEFINE_integer('random_episodes', 100, 'Episodes of the random policy.')
flags.DEFINE_integer('random_envs', 20, 'Envs the random policy plays.')
flags.DEFINE_integer('seed', 12345, 'Seed of the random policy and its envs.')
flags.DEFINE_string('out', 'results/minatar/baselines.json', 'Output JSON.')


def random_return(name: str, episodes: int, num_envs: int, seed: int):
  """Mean return of a uniformly random policy over `episodes` episodes."""
  env = envs.make(name, num_envs=num_envs, seed=seed)
  rng = np.random.default_rng(seed)
  num_actions = env.spec.action_spec['action'].num_values
  returns = []
  env.reset()
  while len(returns) < episodes:
    out = env.step({'action': rng.integers(0, num_actions, num_envs)})
    returns.extend(out.info.episode_return[out.done].tolist())
  env.close()
  return float(np.mean(returns[:episodes]))


def main(argv):
  del argv
  f = flags.FLAGS
  normalization, reference, table = {}, {}, {}
  for name in f.games:
    game = name.split(':', 1)[-1]
    try:
      run = plot.load_run(f'{f.single_task_root}/{game}')
    except ValueError as e:
      sys.exit(f'error: --games={name}: its single-task run: {e}')
    if name not in run.eval_curves:
      sys.exit(f'{run.logdir} has no eval/{name}/return: run it with '
               f'--eval_interval_frames.')
    curve = run.eval_curves[name]
    near = np.abs(curve.steps - f.frames) <= f.window
    if not near.any():
      sys.exit(f'{run.logdir}: no evaluation within {f.window} frames of '
               f'{f.frames}.')
    low = random_return(name, f.random_episodes, f.random_envs, f.seed)
    high = round(float(np.mean(curve.values[near])), 4)
    normalization[name] = (low, high)
    reference[name] = [(int(step), round(float(value), 4))
                       for step, value in zip(curve.steps, curve.values)]
    table[name] = {'random': low, 'single_task': high,
                   'single_task_evaluations': int(near.sum())}
  notes = [
      f'low: a uniformly random policy, mean of {f.random_episodes} '
      f'episodes on {f.random_envs} envs (seed {f.seed}).',
      f'high: the single-task run\'s mean evaluation return over its '
      f'evaluations within {f.window:,} frames of {f.frames:,} frames.',
      f'curve: the single-task run\'s evaluations ({f.single_task_root}).']
  schedule_lib.write_json(f.out, continual_metrics.baselines_json(
      continual_metrics.Baselines(normalization, reference), notes))
  print(json.dumps(table, indent=1))
  print(f'Wrote {f.out}')


if __name__ == '__main__':
  app.run(main)
