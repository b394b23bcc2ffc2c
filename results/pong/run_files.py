"""What the results scripts here read from a run and how they write JSON."""

import json

import tensorflow as tf

SUFFIX = '/.ATTRIBUTES/VARIABLE_VALUE'


def checkpoint_path(logdir: str, checkpoint: str = '') -> str:
  """`checkpoint`, or the newest one in `logdir`/checkpoints; exits if none."""
  path = checkpoint or tf.train.latest_checkpoint(f'{logdir}/checkpoints')
  if path is None:
    raise SystemExit(f'no checkpoint in {logdir}/checkpoints')
  return path


def env_frames(reader) -> int:
  """The env frame count a checkpoint (a `tf.train.load_checkpoint`) holds."""
  return int(reader.get_tensor('num_env_frames' + SUFFIX))


def emit(summary: dict, out: str = ''):
  """Prints `summary` as JSON and, given `out`, writes it there too."""
  text = json.dumps(summary, indent=1)
  print(text)
  if out:
    with open(out, 'w') as f:
      f.write(text + '\n')
