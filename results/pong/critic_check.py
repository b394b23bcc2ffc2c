r"""Can the agent's networks learn Pong's value from pixels? A supervised check.

Plays 16 Pong envs with uniformly random actions for 2,700 agent steps,
takes the discounted returns (gamma 0.99) as targets, and fits them with
the IMPALA shallow torso followed either by a linear head or by an LSTM and
a linear head (as in `agents`), with IMPALA's RMSProp and a summed squared
error. Envs 0-11 train, envs 12-15 are held out. Prints JSON: the held-out
explained variance and the torso's feature statistics along the way.

  python results/pong/critic_check.py --core=none
  python results/pong/critic_check.py --core=lstm
  python results/pong/critic_check.py --core=lstm --target_scale=0.1
  python results/pong/critic_check.py --core=lstm --updates=1000 \
      --optimizer=rmsprop_ones
  python results/pong/critic_check.py --core=lstm --updates=1000 \
      --optimizer=adam --learning_rate=1e-4
  python results/pong/critic_check.py --core=lstm_skip --updates=1000
"""

import json
import os
import sys
import time

from absl import app
from absl import flags
import numpy as np
import sonnet as snt
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
# pylint: disable=g-import-not-at-top,wrong-import-position
from agents import initializers
from agents import torsos
from clear import types
from clear.algorithms.impala import optimizers
import envs

flags.DEFINE_enum('core', 'lstm', ['none', 'lstm', 'lstm_skip'],
                  'What sits between the torso and the value head '
                  '(lstm_skip: the head sees the LSTM output and the torso '
                  'features).')
flags.DEFINE_float('target_scale', 1.0, 'Targets are multiplied by this.')
flags.DEFINE_enum('optimizer', 'rmsprop', ['rmsprop', 'rmsprop_ones', 'adam'],
                  "rmsprop: Sonnet's, mean square starting at 0; "
                  "rmsprop_ones: mean square starting at 1, as TF1's "
                  "RMSPropOptimizer that IMPALA used; adam.")
flags.DEFINE_float('torso_gain', 1.0, 'Scale of the torso initialiser '
                   '(sqrt(2) is He initialisation).')
flags.DEFINE_float('learning_rate', 6e-4, 'Learning rate.')
flags.DEFINE_integer('updates', 2000, 'Gradient steps.')
flags.DEFINE_integer('eval_every', 500, 'Steps between evaluations.')
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS

NUM_ENVS, STEPS, CUT, TRAIN_ENVS, LENGTH = 16, 2700, 300, 12, 20


def collect(rng):
  """Frames uint8 `[STEPS, NUM_ENVS, 84, 84, 4]` and discounted returns."""
  env = envs.make('atari:Pong', num_envs=NUM_ENVS, seed=7)
  out = env.reset()
  frames, rewards, dones = [], [], []
  for _ in range(STEPS + CUT):
    frames.append(out.observation['frame'])
    out = env.step({'action': rng.integers(0, 6, NUM_ENVS)})
    rewards.append(out.reward)
    dones.append(out.done)
  env.close()
  rewards, dones = np.array(rewards), np.array(dones)
  returns = np.zeros_like(rewards)
  acc = np.zeros(NUM_ENVS)
  for t in reversed(range(len(rewards))):
    acc = rewards[t] + 0.99 * acc * (1 - dones[t])
    returns[t] = acc
  # The last CUT steps' returns are cut off by the end of the data.
  return np.array(frames[:STEPS]), returns[:STEPS].astype(np.float32)


def main(argv):
  del argv
  rng = np.random.default_rng(0)
  start = time.time()
  frames, returns = collect(rng)
  returns = returns * FLAGS.target_scale
  spec = {'frame': types.ArraySpec((84, 84, 4), np.uint8)}
  # One generator for all weights, so --torso_gain=1 gives the same start
  # as the runs before the flag existed.
  init_rng = np.random.default_rng(1)
  w_init = initializers.SeededFanIn(init_rng)
  torso = torsos.ImpalaShallowTorso(
      spec, initializers.SeededFanIn(init_rng, FLAGS.torso_gain))
  head = snt.Linear(1, w_init=w_init)
  core = snt.LSTM(256, w_i_init=w_init, w_h_init=w_init)
  if FLAGS.optimizer == 'adam':
    optimizer = snt.optimizers.Adam(FLAGS.learning_rate)
  else:
    optimizer = optimizers.RMSProp(
        FLAGS.learning_rate, decay=0.99, momentum=0.0, epsilon=0.01,
        initial_mean_square=float(FLAGS.optimizer == 'rmsprop_ones'))

  def values(x):
    """`[B, L]` values of `[B, L, 84, 84, 4]` sequences (state reset)."""
    batch, length = x.shape[0], x.shape[1]
    features = torso({'frame': tf.reshape(x, (-1, 84, 84, 4))}).features
    if FLAGS.core == 'none':
      return tf.reshape(head(features)[:, 0], (batch, length))
    features = tf.reshape(features, (batch, length, -1))
    state = core.initial_state(batch)
    outputs = []
    for t in range(length):
      output, state = core(features[:, t], state)
      if FLAGS.core == 'lstm_skip':
        output = tf.concat([output, features[:, t]], -1)
      outputs.append(head(output)[:, 0])
    return tf.stack(outputs, 1)

  values_fn = tf.function(values)

  @tf.function
  def update(x, y):
    with tf.GradientTape() as tape:
      loss = 0.5 * tf.reduce_sum(tf.square(values(x) - y))
    variables = torso.trainable_variables + head.trainable_variables
    if FLAGS.core != 'none':
      variables += core.trainable_variables
    grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), 40.0)
    optimizer.apply(grads, variables)

  def sequences(env_ids, starts):
    x = np.stack([frames[s:s + LENGTH, e] for e, s in zip(env_ids, starts)])
    y = np.stack([returns[s:s + LENGTH, e] for e, s in zip(env_ids, starts)])
    return x, y

  held_out = [(e, s) for e in range(TRAIN_ENVS, NUM_ENVS)
              for s in range(0, STEPS - LENGTH, 100)]
  test_x, test_y = sequences(*zip(*held_out))
  history = []
  for step in range(FLAGS.updates + 1):
    if step % FLAGS.eval_every == 0:
      predicted = np.concatenate([values_fn(test_x[i:i + 16]).numpy()
                                  for i in range(0, len(test_x), 16)])
      features = torso({'frame': test_x[:13, 0]}).features.numpy()
      history.append({
          'updates': step,
          'held_out_explained_variance': float(
              1 - np.var(test_y - predicted) / np.var(test_y)),
          'active_feature_fraction': float((features > 0).mean()),
          'mean_feature': float(features.mean()),
          'max_feature': float(features.max()),
          'seconds': time.time() - start})
      print(json.dumps(history[-1]), file=sys.stderr)
    # 8 sequences of 20 steps: 160 frames an update, as the learner's batch.
    x, y = sequences(rng.integers(0, TRAIN_ENVS, 8),
                     rng.integers(0, STEPS - LENGTH, 8))
    update(x, y)
  result = {'core': FLAGS.core, 'target_scale': FLAGS.target_scale,
            'optimizer': FLAGS.optimizer,
            'learning_rate': FLAGS.learning_rate,
            'torso_gain': FLAGS.torso_gain,
            'target_std': float(returns.std()),
            'target_mean': float(returns.mean()), 'history': history}
  print(json.dumps(result, indent=1))
  if FLAGS.out:
    with open(FLAGS.out, 'w') as f:
      json.dump(result, f, indent=1)


if __name__ == '__main__':
  app.run(main)
