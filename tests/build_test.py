"""Checks that the Bazel BUILD files cover every module and test correctly.

BUILD files are Starlark, whose syntax is a subset of Python's, so they are
parsed with `ast` (never executed). Every folder of the project's packages
that holds Python files has a BUILD file (`clear/ops/BUILD` for
`clear.ops`). The test fails when a module or test has no target, a dep names
a target that does not exist, or a module imports a project module that its
target does not list as a dep; it also fails on an import cycle among the
library modules, and on a module of clear/, agents/ or envs/ above 800
lines.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOP_PACKAGES = ('clear', 'agents', 'envs', 'tests', 'benchmarks')
LIBRARY_PACKAGES = ('clear', 'agents', 'envs', 'benchmarks')
RULES = ('py_library', 'py_test', 'py_binary')


def find_packages(root=ROOT, tops=TOP_PACKAGES):
  """Every folder under `tops` that holds Python files, as 'clear/ops'."""
  found = []
  for top in tops:
    for folder, subfolders, files in os.walk(os.path.join(root, top)):
      subfolders[:] = sorted(d for d in subfolders
                             if not d.startswith(('.', '__')) and
                             d != 'testdata')
      if any(f.endswith('.py') for f in files):
        found.append(os.path.relpath(folder, root))
  return tuple(found)


PACKAGES = find_packages()


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
  """'//clear/ops:vtrace' or ':vtrace' -> ('clear/ops', 'vtrace'); None if
  external."""
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


def _is_module(dotted, root=ROOT):
  """Whether a dotted name is a module or a package of the project."""
  path = os.path.join(root, *dotted.split('.'))
  return os.path.isfile(path + '.py') or os.path.isfile(
      os.path.join(path, '__init__.py'))


def project_imports(path, root=ROOT):
  """Project modules ('clear.ops.vtrace', 'envs',
  'tests.random_batches', ...) a Python file imports
  (`from clear.ops import vtrace` imports 'clear.ops.vtrace'; `from envs
  import make` imports 'envs')."""
  with open(path) as f:
    module = ast.parse(f.read(), filename=path)
  found = set()
  for node in ast.walk(module):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split('.')[0] in TOP_PACKAGES:
          found.add(alias.name)
    elif isinstance(node, ast.ImportFrom) and node.module and (
        node.level == 0 and node.module.split('.')[0] in TOP_PACKAGES):
      for alias in node.names:
        candidate = f'{node.module}.{alias.name}'
        found.add(candidate if _is_module(candidate, root) else node.module)
  return found


def module_location(module_name, root=ROOT):
  """'clear.ops.vtrace' -> ('clear/ops', 'vtrace.py'); a package's own
  name ('clear.ops') -> ('clear/ops', '__init__.py')."""
  parts = module_name.split('.')
  if os.path.isdir(os.path.join(root, *parts)):
    return '/'.join(parts), '__init__.py'
  return '/'.join(parts[:-1]), parts[-1] + '.py'


def target_of_module(module_name, targets):
  """The (package, target) whose srcs hold a dotted project module."""
  package, filename = module_location(module_name)
  for name, target in targets.get(package, {}).items():
    if filename in target['srcs']:
      return package, name
  return None


def test_every_package_folder_has_a_build_file():
  assert 'clear' in PACKAGES and 'tests' in PACKAGES
  for package in PACKAGES:
    assert os.path.isfile(os.path.join(ROOT, package, 'BUILD')), (
        f'{package}/ holds Python files but no BUILD file')


def test_every_module_and_test_has_a_target():
  targets = all_targets()
  for package in PACKAGES:
    covered = {src for t in targets[package].values() for src in t['srcs']}
    for filename in python_files(package):
      if package.split('/')[0] == 'tests' and filename in ('__init__.py',):
        continue
      assert filename in covered, f'{package}/{filename} has no BUILD target'
    if package.split('/')[0] == 'tests':
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


def test_imports_of_sub_packages_are_resolved(tmp_path):
  """`from clear.ops import vtrace` names the module clear/ops/vtrace.py,
  `from clear.ops import check` a name of the package clear/ops."""
  ops = tmp_path / 'clear' / 'ops'
  ops.mkdir(parents=True)
  for path in (tmp_path / 'clear' / '__init__.py', ops / '__init__.py',
               ops / 'vtrace.py'):
    path.write_text('')
  user = tmp_path / 'clear' / 'user.py'
  user.write_text('from clear.ops import vtrace\nfrom clear.ops import check\n'
                  'import numpy\n')
  assert project_imports(str(user), str(tmp_path)) == {'clear.ops.vtrace',
                                                       'clear.ops'}
  assert module_location('clear.ops.vtrace', str(tmp_path)) == (
      'clear/ops', 'vtrace.py')
  assert module_location('clear.ops', str(tmp_path)) == (
      'clear/ops', '__init__.py')


def module_name(package, filename):
  """('clear/ops', 'vtrace.py') -> 'clear.ops.vtrace'; a package's
  __init__.py -> its own name."""
  parts = package.split('/')
  if filename != '__init__.py':
    parts.append(filename[:-len('.py')])
  return '.'.join(parts)


def import_graph(root=ROOT, packages=None):
  """{module: project modules it imports} for the library packages."""
  if packages is None:
    packages = find_packages(root, LIBRARY_PACKAGES)
  graph = {}
  for package in packages:
    folder = os.path.join(root, package)
    for filename in sorted(os.listdir(folder)):
      if filename.endswith('.py'):
        graph[module_name(package, filename)] = project_imports(
            os.path.join(folder, filename), root)
  return graph


def find_cycle(graph):
  """One import cycle of `graph` as [a, b, ..., a], or None."""
  state, path = {}, []  # state: 1 on the current path, 2 done.

  def visit(node):
    state[node] = 1
    path.append(node)
    for other in sorted(graph.get(node, ())):
      if state.get(other) == 1:
        return path[path.index(other):] + [other]
      if other not in state:
        found = visit(other)
        if found:
          return found
    path.pop()
    state[node] = 2
    return None

  for node in sorted(graph):
    if node not in state:
      found = visit(node)
      if found:
        return found
  return None


def test_no_import_cycle():
  graph = import_graph()
  assert 'clear.ops.vtrace' in graph and 'clear.train' in graph
  cycle = find_cycle(graph)
  assert cycle is None, 'import cycle: ' + ' -> '.join(cycle)


def test_an_import_cycle_is_found(tmp_path):
  """The check can fail: a -> b -> c -> a is reported, a -> b alone not."""
  folder = tmp_path / 'clear'
  folder.mkdir()
  (folder / '__init__.py').write_text('')
  (folder / 'a.py').write_text('from clear import b\n')
  (folder / 'b.py').write_text('import clear.c\n')
  (folder / 'c.py').write_text('')
  graph = import_graph(str(tmp_path), ['clear'])
  assert graph['clear.a'] == {'clear.b'} and find_cycle(graph) is None
  (folder / 'c.py').write_text('def f():\n  from clear import a\n')
  assert find_cycle(import_graph(str(tmp_path), ['clear'])) == [
      'clear.a', 'clear.b', 'clear.c', 'clear.a']


def test_no_module_is_above_800_lines():
  for package in find_packages(ROOT, ('clear', 'agents', 'envs')):
    for filename in python_files(package):
      with open(os.path.join(ROOT, package, filename)) as f:
        lines = sum(1 for _ in f)
      assert lines <= 800, f'{package}/{filename} has {lines} lines (> 800)'
