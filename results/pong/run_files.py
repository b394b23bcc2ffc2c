"""What the results scripts here read from a run and how they write JSON."""

import json

import tensorflow as tf

from clear import checkpoint as checkpoint_lib
from clear.algorithms import policy as policy_lib

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


def pong_agent_config(logdir: str):
  """(AgentConfig, run.json dict) of an IMPALA Pong run; exits otherwise.

  The network run.json records, with AgentConfig's defaults for the options
  it leaves out: what the run built.
  """
  saved = checkpoint_lib.read_run_identity(logdir) or {}
  if saved.get('env') != 'atari:Pong' or saved.get('algorithm') != 'impala':
    raise SystemExit(f'{logdir} is not an IMPALA Pong run.')
  config = policy_lib.AgentConfig(**{
      k: saved[k] for k in policy_lib.AgentConfig._fields if k in saved})
  return config, saved
