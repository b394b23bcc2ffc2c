"""Checks that the Bazel BUILD files cover every module and test correctly.

BUILD files are Starlark, whose syntax is a subset of Python's, so they are
parsed with `ast` (never executed). The test fails when a module or test has
no target, a dep names a target that does not exist, or a module imports a
project module that its target does not list as a dep.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ('clear', 'agents', 'envs', 'tests', 'benchmarks')
LIBRARY_PACKAGES = ('clear', 'agents', 'envs', 'benchmarks')
RULES = ('py_library', 'py_test', 'py_binary')


def _string(node):
  """A string literal, or `requirement("pkg")` as the label '@pypi//pkg'."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value
  if (isinstance(node, ast.Call) and getattr(node.func, 'id', '') ==
      'requirement' and len(node.args) == 1):
    return '@pypi//' + _string(node.args[0])
  raise ValueError(f'non-literal value in BUILD file: {ast.dump(node)}')


def parse_build(package, root=ROOT):
  """Returns {target name: dict(rule, srcs, deps)} for one package."""
  path = os.path.join(root, package, 'BUILD')
  with open(path) as f:
    module = ast.parse(f.read(), filename=path)
  targets = {}
  for statement in module.body:
    if not (isinstance(statement, ast.Expr) and
            isinstance(statement.value, ast.Call)):
      continue
    call = statement.value
    rule = getattr(call.func, 'id', None)
    if rule not in RULES:
      continue
    kwargs = {k.arg: k.value for k in call.keywords}
    name = _string(kwargs['name'])
    listed = lambda key: [_string(e) for e in kwargs[key].elts] if (
        key in kwargs) else []
    assert name not in targets, f'{package}/BUILD defines {name} twice'
    targets[name] = {'rule': rule, 'srcs': listed('srcs'),
                     'deps': listed('deps')}
  return targets


def all_targets(root=ROOT, packages=PACKAGES):
  return {package: parse_build(package, root) for package in packages}


def resolve(label, package):
  """'//clear:vtrace' or ':vtrace' -> ('clear', 'vtrace'); None if external."""
  if label.startswith('@'):
    return None
  if label.startswith(':'):
    return package, label[1:]
  if label.startswith('//'):
    pkg, _, name = label[2:].partition(':')
    return pkg, name or pkg.rsplit('/', 1)[-1]
  raise AssertionError(f'unexpected label {label!r} in {package}/BUILD')


def python_files(package):
  folder = os.path.join(ROOT, package)
  return sorted(f for f in os.listdir(folder) if f.endswith('.py'))


def project_imports(path):
  """Project modules ('clear.vtrace', 'envs', ...) a Python file imports."""
  with open(path) as f:
    module = ast.parse(f.read(), filename=path)
  found = set()
  for node in ast.walk(module):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split('.')[0] in LIBRARY_PACKAGES:
          found.add(alias.name)
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.level == 0 and node.module.split('.')[0] in LIBRARY_PACKAGES):
      for alias in node.names:
        candidate = f'{node.module}.{alias.name}'
        pkg_dir = os.path.join(ROOT, *node.module.split('.'))
        if os.path.exists(os.path.join(pkg_dir, alias.name + '.py')):
          found.add(candidate)
        else:
          found.add(node.module)
  return found


def target_of_module(module_name, targets):
  """The (package, target) whose srcs hold a dotted project module."""
  parts = module_name.split('.')
  package = parts[0]
  filename = (parts[1] if len(parts) > 1 else '__init__') + '.py'
  for name, target in targets[package].items():
    if filename in target['srcs']:
      return package, name
  return None


def test_every_module_and_test_has_a_target():
  targets = all_targets()
  for package in PACKAGES:
    covered = {src for t in targets[package].values() for src in t['srcs']}
    for filename in python_files(package):
      if package == 'tests' and filename in ('__init__.py',):
        continue
      assert filename in covered, f'{package}/{filename} has no BUILD target'
    if package == 'tests':
      for filename in python_files(package):
        if filename.endswith('_test.py'):
          rules = [t['rule'] for t in targets[package].values()
                   if filename in t['srcs']]
          assert rules == ['py_test'], f'tests/{filename} needs a py_test'


def check_deps_exist(targets):
  for package, package_targets in targets.items():
    for name, target in package_targets.items():
      for label in target['deps']:
        resolved = resolve(label, package)
        if resolved is None:
          continue
        dep_package, dep_name = resolved
        assert dep_package in targets and dep_name in targets[dep_package], (
            f'{package}:{name} depends on missing target {label}')


def test_every_dep_names_an_existing_target():
  check_deps_exist(all_targets())


def test_project_imports_are_declared_deps():
  targets = all_targets()
  for package, package_targets in targets.items():
    for name, target in package_targets.items():
      declared = {resolve(label, package) for label in target['deps']}
      for src in target['srcs']:
        for module in project_imports(os.path.join(ROOT, package, src)):
          owner = target_of_module(module, targets)
          assert owner is not None, f'no target holds {module}'
          if owner == (package, name):
            continue
          assert owner in declared, (
              f'{package}:{name} imports {module} but does not depend on '
              f'//{owner[0]}:{owner[1]}')


def test_a_dangling_dep_is_caught(tmp_path):
  """The checks can fail: a BUILD naming a missing target is rejected."""
  (tmp_path / 'clear').mkdir()
  (tmp_path / 'clear' / 'BUILD').write_text(
      'py_library(\n    name = "a",\n    srcs = ["a.py"],\n'
      '    deps = [":missing", requirement("numpy")],\n)\n')
  targets = all_targets(str(tmp_path), ('clear',))
  assert targets['clear']['a']['deps'] == [':missing', '@pypi//numpy']
  with pytest.raises(AssertionError, match='missing target :missing'):
    check_deps_exist(targets)
