r"""Does a Pong run lose points to its own sampling? Greedy against sampled.

Test mode samples actions from the policy, as the actors do, so its scores
include what the policy's randomness costs. This plays the same episodes
(the same env seed) with a run's newest checkpoint (or `--checkpoint`)
twice: sampling, and taking the argmax of the logits. It also reports what
the sampled play's policy looked like: its mean entropy per step, and the
mean entropy over Pong's three distinct moves (the six actions are NOOP,
FIRE, RIGHT, LEFT, RIGHTFIRE and LEFTFIRE; FIRE only serves, so NOOP/FIRE,
RIGHT/RIGHTFIRE and LEFT/LEFTFIRE move the paddle alike), averaged over
`policy_steps`: every step of the `--num_episodes` envs, which play side
by side until the last of their first episodes ends. Prints JSON.

  python results/pong/greedy_check.py --logdir=runs/pong --out=greedy.json
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from agents import heads
from clear.algorithms.impala import policy as impala_policy
from clear.runtime import evaluation
import envs
import run_files  # results/pong/run_files.py, beside this script.

flags.DEFINE_string('logdir', None, 'A Pong run (run.json, checkpoints/).')
flags.DEFINE_string('checkpoint', '', 'A checkpoint path (default: the '
                    "logdir's latest).")
flags.DEFINE_integer('num_episodes', 10, 'Episodes per way of acting.')
flags.DEFINE_integer('seed', 1, 'Env seed (test mode uses the run seed + 1).')
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS

MOVES = ((0, 1), (2, 4), (3, 5))  # Stay, right, left: indices into the six.


def _entropy(p: np.ndarray) -> np.ndarray:
  return -np.sum(p * np.log(np.maximum(p, 1e-30)), axis=-1)


class Acting:
  """Wraps a policy: optionally acts greedily; keeps its probabilities."""

  def __init__(self, policy, greedy: bool):
    self._policy, self._greedy = policy, greedy
    self.probs = []

  def __getattr__(self, name):
    return getattr(self._policy, name)

  def act(self, env_output, prev_action, state):
    output, state = self._policy.act(env_output, prev_action, state)
    logits = output.logits['action']
    self.probs.append(tf.nn.softmax(logits).numpy())
    if self._greedy:
      output = output._replace(action={
          k: v.numpy() for k, v in heads.greedy_actions(output.logits).items()})
    return output, state


def play(policy, greedy: bool) -> dict:
  acting = Acting(policy, greedy)
  evaluator = evaluation.Evaluator('atari:Pong', {}, acting,
                                  num_episodes=FLAGS.num_episodes,
                                  seed=FLAGS.seed)
  try:
    returns = evaluator.evaluate_tasks()['atari:Pong'].returns
  finally:
    evaluator.close()
  probs = np.concatenate(acting.probs)
  moves = np.stack([probs[:, list(m)].sum(-1) for m in MOVES], -1)
  summary = evaluation.summarize_returns(returns)
  summary.update(
      policy_steps=int(len(probs)),
      mean_entropy=round(float(_entropy(probs).mean()), 3),
      mean_move_entropy=round(float(_entropy(moves).mean()), 3),
      mean_top_move_probability=round(float(moves.max(-1).mean()), 3))
  return summary


def main(argv):
  del argv
  if not FLAGS.logdir:
    raise app.UsageError('Give --logdir.')
  path = run_files.checkpoint_path(FLAGS.logdir, FLAGS.checkpoint)
  config, _ = run_files.pong_agent_config(FLAGS.logdir)
  env = envs.make('atari:Pong', num_envs=1, seed=FLAGS.seed)
  spec = env.spec
  env.close()
  # Sampling seed 0, as test mode's with the default --seed (run.json
  # records no seed).
  policy = impala_policy.ImpalaPolicy(spec, config)
  tf.train.Checkpoint(agent=policy.agent).restore(
      path).expect_partial().assert_existing_objects_matched()
  summary = {
      'checkpoint': path,
      'env_frames': run_files.env_frames(tf.train.load_checkpoint(path)),
      'env_seed': FLAGS.seed,
      'ln_6': round(float(np.log(6)), 3), 'ln_3': round(float(np.log(3)), 3),
      'sampled': play(policy, greedy=False),
      'greedy': play(policy, greedy=True)}
  run_files.emit(summary, FLAGS.out)


if __name__ == '__main__':
  app.run(main)
