"""Which accelerator each process uses: the learner's, and none for actors.

TensorFlow claims all the memory of every GPU it can see, in every process
that initialises it. On a GPU machine, eight actor processes would each
grab the whole card before the learner starts. So actor processes hide
every GPU before TensorFlow looks for devices (`hide_accelerators`), and the
learner turns on memory growth and runs on the device `--learner_device`
names (`learner_device`).

`CUDA_VISIBLE_DEVICES` is read by the CUDA driver once, when TensorFlow
first lists devices (not at import), so setting it in a process that has
imported TensorFlow but run nothing yet still works; `tf.config.
set_visible_devices([], 'GPU')` then covers a process whose CUDA was already
initialised by someone else's setting.
"""

import contextlib
import os
from typing import Iterator

# What actor processes see: no GPU. An empty value hides them all (Ray sets
# the same for tasks given no GPU).
NO_GPU = ''
CUDA_VISIBLE_DEVICES = 'CUDA_VISIBLE_DEVICES'
LEARNER_DEVICES = ('auto', 'cpu', 'gpu')


def hide_accelerators():
  """Makes this process's TensorFlow see no GPU (call before any TF op).

  Raises:
    RuntimeError: TensorFlow already placed something on a GPU here, so
      hiding it now is impossible (a bug in the caller's ordering).
  """
  os.environ[CUDA_VISIBLE_DEVICES] = NO_GPU
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    tf.config.set_visible_devices([], 'GPU')
  except RuntimeError as e:  # The runtime is already initialised.
    if tf.config.get_visible_devices('GPU'):
      raise RuntimeError('An actor process initialised TensorFlow on a GPU '
                         'before hiding it.') from e


@contextlib.contextmanager
def children_see_no_gpu() -> Iterator[None]:
  """Processes started inside this context inherit an environment without
  GPUs (`CUDA_VISIBLE_DEVICES` empty), whatever this process's says."""
  previous = os.environ.get(CUDA_VISIBLE_DEVICES)
  os.environ[CUDA_VISIBLE_DEVICES] = NO_GPU
  try:
    yield
  finally:
    if previous is None:
      del os.environ[CUDA_VISIBLE_DEVICES]
    else:
      os.environ[CUDA_VISIBLE_DEVICES] = previous


def visible_gpus() -> list:
  """Names of the GPUs this process's TensorFlow can use."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return [d.name for d in tf.config.get_visible_devices('GPU')]


def learner_device(name: str = 'auto', flag: str = '--learner_device') -> str:
  """The TensorFlow device the learner runs on, with GPU memory growth on.

  Call before the learner builds anything: memory growth can only be set
  while the runtime is not yet initialised (afterwards it is left as is).

  Args:
    name: 'auto' (the first GPU if TensorFlow sees one, else the CPU),
      'cpu', 'gpu' (the first GPU; an error without one), or a TensorFlow
      device such as '/GPU:1'.
    flag: the flag `name` came from, for the error message.

  Returns:
    A device string for `tf.device`, e.g. '/GPU:0' or '/CPU:0'.

  Raises:
    ValueError: no such device, with what TensorFlow does see.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices('GPU')
  for gpu in gpus:
    try:
      tf.config.experimental.set_memory_growth(gpu, True)
    except RuntimeError:  # Already initialised: keep what was set.
      pass
  lowered = name.strip().lower()
  if lowered == 'auto':
    return '/GPU:0' if gpus else '/CPU:0'
  if lowered == 'cpu':
    return '/CPU:0'
  if lowered == 'gpu':
    lowered = '/gpu:0'
  device = tf.config.list_logical_devices()
  known = {d.name.split('device:')[-1].lower(): d.name for d in device}
  key = lowered.lstrip('/').split('device:')[-1]
  if key in known:
    return '/' + known[key].split('device:')[-1]
  seen = ', '.join(sorted(known.values())) or 'none'
  hint = (' No GPU is visible: the default install is tensorflow-cpu; see '
          'the README for the GPU install.' if not gpus else '')
  raise ValueError(f'{flag}={name}: TensorFlow has no such device '
                   f'(it sees {seen}).{hint}')
