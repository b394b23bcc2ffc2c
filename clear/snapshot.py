"""Run state saved beside a checkpoint as plain numpy arrays, never pickled.

A snapshot is a flat dict name -> numpy array of a non-object dtype. It is
written to one `.npz` file (atomically: a temporary file, then a rename) and
read back with `allow_pickle=False`, so a crafted file can fail to load but
never run code. Nests (an actor's last outputs, unrolls waiting for the
learner) are stored leaf by leaf and rebuilt against a template structure;
RNG states and other JSON values travel as 0-d unicode arrays.
"""

import json
import os
from typing import Dict

import numpy as np
import tree

Arrays = Dict[str, np.ndarray]


def save(path: str, arrays: Arrays):
  """Writes `arrays` to `path` (an `.npz` file), replacing it atomically.

  Raises:
    ValueError: an entry is not a plain numeric, bool or unicode array.
    OSError: the write failed; `path` is as it was, and no temporary file
      is left.
  """
  for name, value in arrays.items():
    if not isinstance(value, np.ndarray) or value.dtype.kind not in 'biufU':
      raise ValueError(f'snapshot.save: {name!r} is not a plain numpy array '
                       f'({type(value).__name__}, dtype '
                       f'{getattr(value, "dtype", None)}).')
  tmp = path + '.tmp'
  try:
    with open(tmp, 'wb') as f:
      np.savez(f, **arrays)
    os.replace(tmp, path)
  except OSError:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise


def load(path: str) -> Arrays:
  """Reads a snapshot written by `save` (no pickle is ever loaded).

  Raises:
    OSError: the file is missing. ValueError: it is not a clean snapshot.
  """
  with np.load(path, allow_pickle=False) as data:
    return {name: data[name] for name in data.files}


def to_json_array(value) -> np.ndarray:
  """A JSON-serializable value as a 0-d unicode array."""
  return np.array(json.dumps(value))


def from_json_array(array: np.ndarray):
  return json.loads(str(array))


def prefixed(prefix: str, arrays: Arrays) -> Arrays:
  """`arrays` with every name under `prefix/`."""
  return {f'{prefix}/{name}': value for name, value in arrays.items()}


def subset(prefix: str, arrays: Arrays) -> Arrays:
  """The entries under `prefix/`, with the prefix removed."""
  start = prefix + '/'
  return {name[len(start):]: value for name, value in arrays.items()
          if name.startswith(start)}


def flatten_nest(prefix: str, nest) -> Arrays:
  """A nest of arrays as `{prefix/<leaf index>: array}`."""
  return {f'{prefix}/{i}': np.asarray(leaf)
          for i, leaf in enumerate(tree.flatten(nest))}


def unflatten_nest(prefix: str, arrays: Arrays, template):
  """Rebuilds the nest saved by `flatten_nest` with `template`'s structure.

  Each leaf must have the template leaf's dtype and shape.

  Raises:
    ValueError: a leaf is missing or does not match the template.
  """
  leaves = []
  for i, expected in enumerate(tree.flatten(template)):
    name = f'{prefix}/{i}'
    if name not in arrays:
      raise ValueError(f'snapshot: {name!r} is missing.')
    value, expected = arrays[name], np.asarray(expected)
    if value.dtype != expected.dtype or value.shape != expected.shape:
      raise ValueError(
          f'snapshot: {name!r} is {value.dtype}{list(value.shape)}, '
          f'expected {expected.dtype}{list(expected.shape)}.')
    leaves.append(value)
  return tree.unflatten_as(template, leaves)
