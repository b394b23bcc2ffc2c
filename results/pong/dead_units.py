r"""How many of the shallow torso's units are dead on Pong? Read off a run.

A ReLU unit whose pre-activation is below zero on every input outputs 0 and
gets no gradient: it is dead, and a first-layer unit, whose input (the
frames) never changes, stays dead. This plays Pong with random actions (a
fixed seed, so every run is probed on the same frames), feeds those frames
through the torso of a run's newest checkpoint (or `--checkpoint`) and, with
`--init`, of the freshly initialised agent of each `--seeds` entry, and
prints JSON: per layer (conv1, conv2 channels; linear units), how many units
are never above zero on any frame or position, and the median share of
(frame, position) pairs on which a unit is above zero. For a leaky
activation "dead" reads "in the negative regime on every frame". With
a `--torso_norm` each normalised layer is probed after its norm, where the
activation reads it.

  python results/pong/dead_units.py --logdir=runs/pong --out=dead.json
  python results/pong/dead_units.py --init --seeds=0,1
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

import agents
from clear.algorithms.impala import policy as impala_policy
import envs
import run_files  # results/pong/run_files.py, beside this script.

flags.DEFINE_string('logdir', None, 'A Pong run (run.json, checkpoints/).')
flags.DEFINE_string('checkpoint', '', 'A checkpoint path (default: the '
                    "logdir's latest).")
flags.DEFINE_bool('init', False, 'Also probe freshly initialised agents.')
flags.DEFINE_list('seeds', ['0', '1'], 'Agent seeds for --init.')
flags.DEFINE_integer('num_frames', 400, 'Frames to probe (4 envs).')
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS

NUM_ENVS, FRAME_SEED, ACTION_SEED, EVERY = 4, 7, 0, 4


def collect(env, num_frames: int) -> np.ndarray:
  """uint8 `[num_frames, 84, 84, 4]` stacks from random play, every
  `EVERY`-th step of `NUM_ENVS` envs."""
  rng = np.random.default_rng(ACTION_SEED)
  env.reset()
  frames = []
  while len(frames) * NUM_ENVS < num_frames:
    for _ in range(EVERY):
      out = env.step({'action': rng.integers(0, 6, NUM_ENVS)})
    frames.append(out.observation['frame'])
  return np.concatenate(frames)[:num_frames]


def probe(torso, frames: np.ndarray) -> dict:
  """Per layer: units never above zero, and the median active share."""
  if not isinstance(torso, agents.torsos.ImpalaShallowTorso):
    raise SystemExit(f'{type(torso).__name__}: this probe reads the IMPALA '
                     'shallow torso (conv1, conv2, linear).')
  # pylint: disable=protected-access
  act = torso._act
  normed = agents.torsos._normed  # The activation reads norm(pre), if any.
  x = tf.cast(frames, tf.float32) / 255.
  pre1 = normed(torso._conv1_norm, torso._conv1(x))
  pre2 = normed(torso._conv2_norm, torso._conv2(act(pre1)))
  pre3 = normed(torso._linear_norm, torso._linear(
      tf.reshape(act(pre2), [len(frames), -1])))
  # pylint: enable=protected-access
  result = {}
  for name, pre in (('conv1', pre1), ('conv2', pre2), ('linear', pre3)):
    pre = pre.numpy().reshape(-1, pre.shape[-1])
    active = np.mean(pre > 0, axis=0)
    result[name] = {'units': int(pre.shape[-1]),
                    'dead': int(np.sum(active == 0)),
                    'median_active_share': round(float(np.median(active)), 3)}
  return result


def main(argv):
  del argv
  if not FLAGS.logdir and not FLAGS.init:
    raise app.UsageError('Give --logdir, --init, or both.')
  env = envs.make('atari:Pong', num_envs=NUM_ENVS, seed=FRAME_SEED)
  frames = collect(env, FLAGS.num_frames)
  env.close()
  summary = {'num_frames': int(len(frames))}
  if FLAGS.init:
    summary['init'] = {seed: probe(agents.make_agent(
        env.spec, seed=int(seed))._torso, frames)  # pylint: disable=protected-access
                       for seed in FLAGS.seeds}
  if FLAGS.logdir:
    path = run_files.checkpoint_path(FLAGS.logdir, FLAGS.checkpoint)
    config, _ = run_files.pong_agent_config(FLAGS.logdir)
    agent = impala_policy.ImpalaPolicy(env.spec, config).agent
    tf.train.Checkpoint(agent=agent).restore(
        path).expect_partial().assert_existing_objects_matched()
    summary.update(
        checkpoint=path,
        env_frames=run_files.env_frames(tf.train.load_checkpoint(path)),
        torso_activation=config.torso_activation,
        torso_norm=config.torso_norm,
        layers=probe(agent._torso, frames))  # pylint: disable=protected-access
  run_files.emit(summary, FLAGS.out)


if __name__ == '__main__':
  app.run(main)
