"""Makes `import pysc2` work from a plain pip install on this stack.

Two things break pysc2 4.0.0 here:

1. Its dependency `s2clientprotocol` ships old protoc output
   (`_descriptor.FileDescriptor(serialized_pb=...)` and hand-built
   descriptors) that the protobuf 4+ runtime (upb / C++) refuses with
   "Descriptors cannot be created directly".
2. `pysc2.lib.colors` calls `random.shuffle(x, random_fn)`; Python 3.11
   removed the second argument.

`install()` fixes both without touching site-packages and without switching
protobuf to its pure-Python backend:

1. For every `s2clientprotocol.*_pb2` module it reads the serialized
   `FileDescriptorProto` embedded in the generated source (located with
   `ast`; the old module is never executed), adds it to the default
   descriptor pool, builds the message classes and enums with the current
   protobuf builder (what today's protoc output does) and registers the
   resulting module in `sys.modules`.
2. It gives `pysc2.lib.colors` (and only it) a `random` whose `shuffle`
   accepts the removed argument, with the old, deterministic algorithm.

Import this module (or call `install()`) before importing pysc2;
`envs/sc2.py` does so. `install()` is idempotent.
"""

import ast
import importlib
import importlib.util
import os
import random
import sys
import types

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf.internal import builder

_PROTO_PACKAGE = 's2clientprotocol'
_PROTO_MODULES = ('common', 'data', 'debug', 'error', 'query', 'raw',
                  'sc2api', 'score', 'spatial', 'ui')

_installed = False

# pysc2 imports pygame, which otherwise prints a banner on import.
os.environ.setdefault('PYGAME_HIDE_SUPPORT_PROMPT', '1')


def install():
  """Registers rebuilt `s2clientprotocol` modules and patches pysc2 colors."""
  global _installed
  if _installed:
    return
  for name in _PROTO_MODULES:
    _load_proto_module(f'{_PROTO_PACKAGE}.{name}_pb2')
  _patch_colors_shuffle()
  _installed = True


def _load_proto_module(module_name):
  """Returns the module `module_name`, rebuilding it from its descriptor."""
  if module_name in sys.modules:
    return sys.modules[module_name]
  spec = importlib.util.find_spec(module_name)
  if spec is None or spec.origin is None:
    raise ImportError(f'pysc2_compat: cannot find {module_name}; is the '
                      '`s2clientprotocol` package installed?')
  with open(spec.origin, encoding='utf-8') as f:
    source = f.read()
  serialized = _find_serialized_descriptor(source)
  if serialized is None:
    # Modern generated code: the normal import works as is.
    return importlib.import_module(module_name)

  file_proto = descriptor_pb2.FileDescriptorProto.FromString(serialized)
  for dependency in file_proto.dependency:
    _load_proto_module(dependency[:-len('.proto')].replace('/', '.') + '_pb2')

  pool = descriptor_pool.Default()
  try:
    file_descriptor = pool.FindFileByName(file_proto.name)
  except KeyError:
    file_descriptor = pool.AddSerializedFile(serialized)

  module = types.ModuleType(module_name)
  module.__file__ = spec.origin
  namespace = module.__dict__
  namespace['DESCRIPTOR'] = file_descriptor
  builder.BuildMessageAndEnumDescriptors(file_descriptor, namespace)
  builder.BuildTopDescriptorsAndMessages(file_descriptor, module_name,
                                         namespace)
  sys.modules[module_name] = module
  package_name, _, short_name = module_name.rpartition('.')
  setattr(importlib.import_module(package_name), short_name, module)
  return module


def _find_serialized_descriptor(source):
  """Returns the bytes of `serialized_pb=...` in old protoc output, or None.

  Old generated code writes `serialized_pb=_b('...')` (a latin-1 str passed
  through a helper) or `serialized_pb=b'...'`; only literals are accepted.
  """
  for node in ast.walk(ast.parse(source)):
    if not isinstance(node, ast.Call):
      continue
    for keyword in node.keywords:
      if keyword.arg != 'serialized_pb':
        continue
      value = keyword.value
      if (isinstance(value, ast.Call) and len(value.args) == 1 and
          not value.keywords):
        value = value.args[0]
      if isinstance(value, ast.Constant):
        if isinstance(value.value, bytes):
          return value.value
        if isinstance(value.value, str):
          return value.value.encode('latin1')
      raise ImportError('pysc2_compat: unexpected serialized_pb expression '
                        'in generated protobuf code.')
  return None


class _RandomWithOldShuffle(types.ModuleType):
  """The `random` module, but `shuffle` still takes a `random` argument."""

  def __init__(self):
    super().__init__('random')

  def __getattr__(self, name):
    return getattr(random, name)

  @staticmethod
  def shuffle(x, random_fn=None):
    if random_fn is None:
      random.shuffle(x)
      return
    # Python <= 3.10's algorithm for an explicit `random` function.
    for i in reversed(range(1, len(x))):
      j = int(random_fn() * (i + 1))
      x[i], x[j] = x[j], x[i]


def _patch_colors_shuffle():
  colors = importlib.import_module('pysc2.lib.colors')
  if not isinstance(colors.random, _RandomWithOldShuffle):
    colors.random = _RandomWithOldShuffle()


install()
