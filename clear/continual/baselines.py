"""The baselines a task sequence's returns are normalised by.

A continual run's return on a task means little alone: `clear.continual.
metrics` normalises it to 0 at a random policy and 1 at the return of a run
trained on that task alone (`metrics.Baselines`), and measures forward
transfer against that run's learning curve. `make_baselines` computes, per
game:

  * low: the mean return of a uniformly random policy over
    `random_episodes` episodes (the first episodes that `random_envs` envs,
    seeded from `seed`, finish), with the env's defaults as in training
    (MinAtar's sticky actions and difficulty ramping; Atari's 4 frames an
    action, no-op starts and episode cap);
  * high: the single-task run's mean evaluation return at the evaluations
    within `window` frames of `frames` (the frames each game trains for in
    the sequence, over all its visits), so that a normalised return of 1
    means "as good as training on that game alone for as long";
  * curve: the single-task run's whole evaluation curve
    (`eval/<game>/return`), the reference for forward transfer.

`write_baselines` writes them as the JSON that `metrics.read_baselines`
(and `clear.plot --baselines`) reads:

    baselines, table, notes = make_baselines(
        ['minatar:Breakout', 'minatar:Asterix'],
        {'minatar:Breakout': 'runs/minatar/Breakout',
         'minatar:Asterix': 'runs/minatar/Asterix'},
        frames=3_000_000, window=300_000)
    write_baselines('results/minatar/baselines.json', baselines, notes)
"""

import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from clear.analysis import events
from clear.continual import metrics as continual_metrics
from clear.continual import schedule as schedule_lib
import envs


def random_return(name: str, episodes: int, num_envs: int,
                  seed: int) -> float:
  """Mean return of a uniformly random policy over `episodes` episodes.

  Args:
    name: the env, as `envs.make` names it ('minatar:Breakout').
    episodes: episodes averaged: the first that finish, over all envs.
    num_envs: envs played at once.
    seed: seed of the envs and of the policy.

  Returns:
    The mean return.

  Raises:
    ValueError: an unknown env, or `episodes` or `num_envs` below 1.
  """
  if episodes < 1 or num_envs < 1:
    raise ValueError(f'{name}: the random policy needs at least 1 episode '
                     f'and 1 env, got {episodes} and {num_envs}.')
  env = envs.make(name, num_envs=num_envs, seed=seed)
  try:
    rng = np.random.default_rng(seed)
    num_actions = env.spec.action_spec['action'].num_values
    returns = []
    env.reset()
    while len(returns) < episodes:
      out = env.step({'action': rng.integers(0, num_actions, num_envs)})
      returns.extend(out.info.episode_return[out.done].tolist())
  finally:
    env.close()
  return float(np.mean(returns[:episodes]))


def _eval_curve(name: str, logdir: str, frames: int,
                window: int) -> Tuple[events.Series, np.ndarray]:
  """The evaluation curve of `name` in its single-task run `logdir`, and
  the mask of its evaluations within `window` frames of `frames`."""
  try:
    scalars = events.read_scalars(logdir)
  except ValueError as e:
    raise ValueError(f'--games={name}: its single-task run: {e}') from None
  curve = events.curves(scalars, 'eval/').get(name)
  if curve is None:
    raise ValueError(f'{logdir} has no eval/{name}/return: run it with '
                     f'--eval_interval_frames.')
  near = np.abs(curve.steps - frames) <= window
  if not near.any():
    raise ValueError(f'{logdir}: no evaluation within {window} frames of '
                     f'{frames}.')
  return curve, near


def _where(logdirs: Sequence[str]) -> str:
  """The folder holding all of `logdirs`, or the logdirs themselves."""
  parents = {os.path.dirname(os.path.normpath(d)) for d in logdirs}
  if len(parents) == 1 and '' not in parents:
    return parents.pop()
  return ', '.join(logdirs)


def make_baselines(
    games: Sequence[str], single_task_logdirs: Dict[str, str], frames: int,
    window: int, random_episodes: int = 100, random_envs: int = 20,
    seed: int = 12345
) -> Tuple[continual_metrics.Baselines, dict, List[str]]:
  """The baselines of `games` from their single-task runs.

  Every run is read and checked before any random policy plays.

  Args:
    games: the sequence's games, as `envs.make` names them
      ('minatar:Breakout').
    single_task_logdirs: {game: the logdir of its single-task run}, which
      logs `eval/<game>/return`.
    frames: env frames at which the single-task return is read (the frames
      the game trains for in the sequence).
    window: evaluations within this many frames of `frames` are averaged.
    random_episodes: episodes of the random policy, per game.
    random_envs: envs the random policy plays.
    seed: seed of the random policy and its envs.

  Returns:
    (baselines, table, notes): the `continual_metrics.Baselines` (low and
    high per game, and the reference curve rounded to 4 decimals); per game
    {'random': low, 'single_task': high, 'single_task_evaluations': the
    evaluations averaged}; and the notes saying how they were made (for
    `write_baselines`).

  Raises:
    ValueError: a game without a logdir, a missing or empty single-task
      run, one without the game's evaluations, or without any within
      `window` frames of `frames`; an unknown game.
  """
  runs = {}
  for name in games:
    if name not in single_task_logdirs:
      raise ValueError(f'--games={name}: no single-task run given.')
    runs[name] = _eval_curve(name, single_task_logdirs[name], frames, window)
  normalization, reference, table = {}, {}, {}
  for name, (curve, near) in runs.items():
    low = random_return(name, random_episodes, random_envs, seed)
    high = round(float(np.mean(curve.values[near])), 4)
    normalization[name] = (low, high)
    reference[name] = [(int(step), round(float(value), 4))
                       for step, value in zip(curve.steps, curve.values)]
    table[name] = {'random': low, 'single_task': high,
                   'single_task_evaluations': int(near.sum())}
  notes = [
      f'low: a uniformly random policy, mean of {random_episodes} '
      f'episodes on {random_envs} envs (seed {seed}).',
      f'high: the single-task run\'s mean evaluation return over its '
      f'evaluations within {window:,} frames of {frames:,} frames.',
      f'curve: the single-task run\'s evaluations '
      f'({_where([single_task_logdirs[name] for name in games])}).']
  return (continual_metrics.Baselines(normalization, reference), table,
          notes)


def write_baselines(path: str, baselines: continual_metrics.Baselines,
                    notes: Sequence[str] = ()) -> str:
  """Writes `baselines` and `notes` as JSON to `path` (atomically, creating
  its folder), in the form `continual_metrics.read_baselines` reads.

  Returns:
    `path`.
  """
  schedule_lib.write_json(path, continual_metrics.baselines_json(
      baselines, notes))
  return path
