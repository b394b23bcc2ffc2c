r"""Which layers does RMSProp's epsilon slow down? Read off a checkpoint.

RMSProp moves a weight by lr g / sqrt(ms + eps) (TF1, IMPALA; the default)
or lr g / (sqrt(ms) + eps) (`--rmsprop_epsilon_outside`), ms the running
mean of g^2. Where sqrt(ms) is well above sqrt(eps) (or eps), the step is
about lr per update whatever the gradient's scale; where it is below, the
step shrinks in proportion: the weight is trained by plain SGD at lr /
sqrt(eps). This reads the mean squares a run's newest checkpoint (or
`--checkpoint`) holds and prints JSON: per variable, percentiles of sqrt(ms) (the gradient's RMS) and
of the step's fraction of the normalised step, sqrt(ms) / sqrt(ms + eps)
(or sqrt(ms) / (sqrt(ms) + eps)), and the share of weights whose gradient
never moved from zero (sqrt(ms) below 1e-9: e.g. ReLU units dead on every
input); and the variable's share of all the summed mean squares, the
(clipped) gradient's expected squared global norm.

  python results/pong/rmsprop_regime.py --logdir=runs/pong
  python results/pong/rmsprop_regime.py --logdir=runs/pong_eps0.01 --epsilon=0.01
  python results/pong/rmsprop_regime.py --logdir=runs/pong_eps_outside \
      --epsilon=0.01 --outside
"""

from absl import app
from absl import flags
import numpy as np
import tensorflow as tf

from clear.algorithms.impala import learner as learner_lib
import run_files  # results/pong/run_files.py, beside this script.

flags.DEFINE_string('logdir', None, 'The run (its checkpoints/ folder).')
flags.DEFINE_float('epsilon', learner_lib.LearnerConfig().rmsprop_epsilon,
                   "The run's --rmsprop_epsilon (default: the learner's).")
flags.DEFINE_bool('outside', False, "The run's --rmsprop_epsilon_outside.")
flags.DEFINE_string('checkpoint', '', 'A checkpoint path (default: the '
                    "logdir's latest).")
flags.DEFINE_string('out', '', 'Also write the JSON here.')
FLAGS = flags.FLAGS

_SUFFIX = run_files.SUFFIX


def step_fraction(rms, epsilon, outside):
  """The step's fraction of RMSProp's normalised step lr * sign(g)."""
  if outside:
    return rms / (rms + epsilon)
  return rms / np.sqrt(np.square(rms) + epsilon)


def regime(reader, epsilon: float, outside: bool) -> dict:
  """Per agent variable (in the optimizer's slot order), gradient RMS and
  step-fraction percentiles, never-moved share and share of the summed mean
  squares."""
  shapes = reader.get_variable_to_shape_map()
  # The optimizer's slots follow the agent's trainable variables, which
  # Sonnet lists sorted by their attribute path: the checkpoint's order.
  names = sorted(k[:-len(_SUFFIX)] for k in shapes
                 if k.startswith('agent/') and k.endswith(_SUFFIX)
                 and '/rng/' not in k)
  slots = sorted((int(k.split('/')[2]), k) for k in shapes
                 if k.startswith('optimizer/ms/') and k.endswith(_SUFFIX))
  if len(slots) != len(names):
    raise SystemExit(f'{len(slots)} RMSProp slots for {len(names)} agent '
                     'variables: not an RMSProp checkpoint of this agent?')
  result = {}
  square_sums = {}
  for name, (_, slot) in zip(names, slots):
    if shapes[name + _SUFFIX] != shapes[slot]:
      raise SystemExit(f'{slot} {shapes[slot]} does not match {name} '
                       f'{shapes[name + _SUFFIX]}.')
    mean_square = reader.get_tensor(slot).astype(np.float64).ravel()
    rms = np.sqrt(mean_square)
    fraction = step_fraction(rms, epsilon, outside)
    key = name[len('agent/'):]
    square_sums[key] = float(np.sum(mean_square))
    result[key] = {
        'size': int(rms.size),
        'grad_rms_p10_p50_p90': [float(f'{v:.3g}') for v in
                                 np.percentile(rms, [10, 50, 90])],
        'step_fraction_p10_p50_p90': [float(f'{v:.3g}') for v in
                                      np.percentile(fraction, [10, 50, 90])],
        'never_moved': round(float(np.mean(rms < 1e-9)), 3),
    }
  # Summed mean squares: each variable's share of the (clipped) gradient's
  # expected squared global norm.
  total = sum(square_sums.values())
  for key, square_sum in square_sums.items():
    result[key]['share_of_squared_norm'] = float(
        f'{square_sum / total:.3g}')
  return result


def main(argv):
  del argv
  if not FLAGS.logdir:
    raise app.UsageError('--logdir is required.')
  path = run_files.checkpoint_path(FLAGS.logdir, FLAGS.checkpoint)
  reader = tf.train.load_checkpoint(path)
  run_files.emit({
      'checkpoint': path,
      'env_frames': run_files.env_frames(reader),
      'epsilon': FLAGS.epsilon,
      'epsilon_outside': FLAGS.outside,
      'variables': regime(reader, FLAGS.epsilon, FLAGS.outside),
  }, FLAGS.out)


if __name__ == '__main__':
  app.run(main)
