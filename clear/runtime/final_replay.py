"""A finished run's replay, dropped from its checkpoints to free the disk.

A run's checkpoints each keep a copy of the replay in their `state-N`
folders (`clear.runtime.run_loop`), which only training the run further
reads. With `RunConfig.keep_final_replay` off, a run that reaches
`total_environment_frames` writes its final state folder without replay
and deletes the replay of the others it keeps, leaving in each a note
(`REPLAY_DROPPED`, the frames the run finished at): a study of long Atari
runs would otherwise keep three copies of an 11 GB replay per finished
run. Restoring such a checkpoint skips the replay while the run stays
finished, and otherwise needs `allow_empty_replay_on_resume`.
"""

import json
import logging
import os
import shutil
from typing import Iterable

from clear import checkpoint as checkpoint_lib

REPLAY_DROPPED = 'replay_dropped.json'


def write_note(state_dir: str, frames: int):
  """Marks `state_dir` as holding no replay, dropped at `frames`."""
  with open(os.path.join(state_dir, REPLAY_DROPPED), 'w') as f:
    json.dump({'frames': int(frames)}, f)


def is_dropped(state_dir: str) -> bool:
  return os.path.exists(os.path.join(state_dir, REPLAY_DROPPED))


def drop(state_dirs: Iterable[str], buffer_names: Iterable[str],
         frames: int):
  """Deletes the buffers `buffer_names` (folders, e.g. 'replay') from each
  existing folder of `state_dirs`, after writing its note."""
  buffer_names = list(buffer_names)
  for state_dir in state_dirs:
    if not os.path.isdir(state_dir):
      continue
    write_note(state_dir, frames)
    for name in buffer_names:
      shutil.rmtree(os.path.join(state_dir, name), ignore_errors=True)


def check_resume(logdir: str, checkpoint: str, finished: bool,
                 allow_empty: bool):
  """Checks that a run may restore `checkpoint`, whose replay was dropped:
  it may when it is `finished` (logged), or with `allow_empty` (warned:
  its replay starts empty).

  Raises:
    checkpoint_lib.CheckpointError: it is to train on, without
      `allow_empty`.
  """
  if finished:
    logging.info('%s holds no replay: the run finished with '
                 '--keep_final_replay=false.', checkpoint)
  elif allow_empty:
    logging.warning('Resuming with an EMPTY replay: the run finished with '
                    '--keep_final_replay=false; it refills from fresh '
                    'unrolls.')
  else:
    raise checkpoint_lib.CheckpointError(
        f'The run in {logdir} finished with --keep_final_replay=false, so '
        f'{checkpoint} holds no replay. Pass --allow_empty_replay_on_resume '
        'to train it further with an empty buffer.')
