"""Checks the documentation: links resolve, and the README stays a short door.

* Every relative link and image in `README.md`, `docs/*.md` and
  `results/**/README.md` points at a file or folder that exists inside the
  repository. A link's `#anchor` must match a heading of the page it points
  at, spelled as GitHub spells heading anchors (for a folder, its
  README.md). Text inside code (fenced blocks, inline code spans) holds no
  links, and absolute URLs (`https:`, `mailto:`, ...) are not checked.
* `README.md` has at most 300 lines and starts with the two commands a fresh
  machine runs: the install that `.ci/run` does (with `python -m
  clear.train`), then `.ci/run`'s test command.
"""

import glob
import os
import re
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MAX_README_LINES = 300

_FENCE = re.compile(r'^\s*(```|~~~)')
_INLINE_CODE = re.compile(r'(`+).*?\1')
# The target of an inline link or image: `](target)` or `](<target> "title")`.
_INLINE_TARGET = re.compile(r'(?<!\\)\]\(\s*(<[^>]*>|[^)\s]+)')
# A reference definition: `[label]: target`.
_REFERENCE_TARGET = re.compile(r'^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)')
_HTML_TARGET = re.compile(r'''\b(?:src|href)\s*=\s*["']([^"']+)["']''')
_HTML_ANCHOR = re.compile(r'''\b(?:id|name)\s*=\s*["']([^"']+)["']''')
_HEADING = re.compile(r'^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$')
_SCHEME = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*:')
_MARKDOWN_LINK = re.compile(r'!?\[([^\]]*)\]\([^)]*\)')


def markdown_files(root=ROOT):
  """The pages whose links are checked, relative to `root`."""
  files = ['README.md']
  files += sorted(os.path.relpath(p, root)
                  for p in glob.glob(os.path.join(root, 'docs', '*.md')))
  files += sorted(os.path.relpath(p, root) for p in glob.glob(
      os.path.join(root, 'results', '**', 'README.md'), recursive=True))
  return [f for f in files if os.path.isfile(os.path.join(root, f))]


def prose_lines(text):
  """(line number, line) outside fenced code, with inline code removed."""
  in_fence = None
  for number, line in enumerate(text.splitlines(), 1):
    fence = _FENCE.match(line)
    if fence:
      if in_fence is None:
        in_fence = fence.group(1)
      elif fence.group(1) == in_fence:
        in_fence = None
      continue
    if in_fence is None:
      yield number, _INLINE_CODE.sub('', line)


def link_targets(text):
  """(line number, target) of every link, image and HTML src/href."""
  for number, line in prose_lines(text):
    targets = [m.group(1) for m in _INLINE_TARGET.finditer(line)]
    targets += [m.group(1) for m in _REFERENCE_TARGET.finditer(line)]
    targets += [m.group(1) for m in _HTML_TARGET.finditer(line)]
    for target in targets:
      if target.startswith('<') and target.endswith('>'):
        target = target[1:-1]
      yield number, target


def github_slug(heading):
  """The anchor GitHub gives a heading: lower case, links reduced to their
  text, punctuation other than '-' and '_' dropped, spaces to '-'."""
  text = _MARKDOWN_LINK.sub(r'\1', heading).replace('`', '').lower()
  kept = ''.join(c for c in text if c.isalnum() or c in '-_ ')
  return kept.replace(' ', '-')


def anchors(text):
  """Every anchor a page offers: its headings' slugs (a repeated slug gets
  -1, -2, ... as on GitHub) and explicit HTML ids and names."""
  found, counts = set(), {}
  for _, line in prose_lines(text):
    heading = _HEADING.match(line)
    if heading:
      slug = github_slug(heading.group(2))
      n = counts.get(slug, 0)
      counts[slug] = n + 1
      found.add(slug if n == 0 else f'{slug}-{n}')
    found.update(m.group(1) for m in _HTML_ANCHOR.finditer(line))
  return found


def _read(path):
  with open(path, encoding='utf-8') as f:
    return f.read()


def link_problems(root=ROOT, files=None):
  """'file:line: target: what is wrong' for every link that does not
  resolve."""
  root = os.path.realpath(root)
  problems = []
  for name in markdown_files(root) if files is None else files:
    page = os.path.join(root, name)
    for number, target in link_targets(_read(page)):
      if _SCHEME.match(target) or target.startswith('//'):
        continue  # An absolute URL.
      path, _, anchor = target.partition('#')
      path = urllib.parse.unquote(path)
      where = f'{name}:{number}: {target}'
      resolved = (os.path.realpath(os.path.join(os.path.dirname(page), path))
                  if path else page)
      if os.path.commonpath([root, resolved]) != root:
        problems.append(f'{where}: points outside the repository')
        continue
      if not os.path.exists(resolved):
        problems.append(f'{where}: no such file or folder')
        continue
      if not anchor:
        continue
      if os.path.isdir(resolved):
        resolved = os.path.join(resolved, 'README.md')
      if not resolved.endswith('.md') or not os.path.isfile(resolved):
        problems.append(f'{where}: an anchor into a file that is not '
                        f'Markdown')
      elif urllib.parse.unquote(anchor) not in anchors(_read(resolved)):
        problems.append(f'{where}: no heading with the anchor #{anchor}')
  return problems


def ci_commands(root=ROOT):
  """(install extras, test command) that `.ci/run` uses."""
  lines = _read(os.path.join(root, '.ci', 'run')).splitlines()
  install = next(line for line in lines
                 if 'pip install' in line and ' -e ' in line)
  extras = re.search(r'\s-e\s+("[^"]+"|\S+)', install).group(1)
  # The last comment naming it sits right above the command (the file's
  # header names it too).
  marker = max(i for i, line in enumerate(lines)
               if "README's test command" in line)
  test = next(line.strip() for line in lines[marker + 1:]
              if line.strip() and not line.lstrip().startswith('#'))
  return extras, test


def readme_problems(root=ROOT):
  """What is wrong with the README's length and its first commands."""
  lines = _read(os.path.join(root, 'README.md')).splitlines()
  problems = []
  if len(lines) > MAX_README_LINES:
    problems.append(f'README.md has {len(lines)} lines; at most '
                    f'{MAX_README_LINES}.')
  extras, test = ci_commands(root)
  head = lines[:4] + [''] * (4 - len(lines[:4]))
  if not head[0].startswith('```') or not head[3].startswith('```'):
    problems.append('README.md must open with a code block of the two '
                    'commands a fresh machine runs.')
  if f'pip install -e {extras}' not in head[1] or (
      'python -m clear.train' not in head[1]):
    problems.append(f'README.md line 2 must install with `pip install -e '
                    f'{extras}` (as .ci/run does) and run `python -m '
                    f'clear.train`; it is {head[1]!r}.')
  if not head[2].rstrip().endswith(test):
    problems.append(f'README.md line 3 must end with .ci/run\'s test '
                    f'command `{test}`; it is {head[2]!r}.')
  return problems


# --- The checker itself ------------------------------------------------------


def _write(root, name, text):
  path = os.path.join(root, name)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    f.write(text)


def test_github_slugs():
  assert github_slug('Long runs: the soak') == 'long-runs-the-soak'
  assert github_slug('`--torso_norm` and the LSTM') == (
      '--torso_norm-and-the-lstm')
  assert github_slug('IMPALA-CLEAR') == 'impala-clear'
  assert github_slug('See [the docs](docs/README.md)') == 'see-the-docs'
  text = '# Setup\n\n## Setup\n\n```sh\n# not a heading\n```\n'
  assert anchors(text) == {'setup', 'setup-1'}


def test_broken_links_and_anchors_are_reported(tmp_path):
  root = str(tmp_path)
  _write(root, 'docs/guide.md', '# Guide\n\n## Two words\n')
  _write(root, 'results/exp/README.md', '# Exp\n[up](../../docs/guide.md)\n')
  _write(root, 'results/exp/figure.png', '')
  _write(root, 'README.md', '\n'.join([
      '[ok](docs/guide.md) ![fig](results/exp/figure.png) [dir](results/exp/)',
      '[anchor](docs/guide.md#two-words) [self](#top-heading)',
      '[missing](docs/nowhere.md)',
      '[bad anchor](docs/guide.md#three-words)',
      '[web](https://example.com/x.md) [mail](mailto:a@b.c)',
      '`[in code](not/a/link.md)`',
      '```sh',
      'echo "[in a block](not/a/link.md)"',
      '```',
      '[outside](../elsewhere.md)',
      '[png anchor](results/exp/figure.png#x)',
      '# Top heading',
  ]))
  assert link_problems(root) == [
      'README.md:3: docs/nowhere.md: no such file or folder',
      'README.md:4: docs/guide.md#three-words: no heading with the anchor '
      '#three-words',
      'README.md:10: ../elsewhere.md: points outside the repository',
      'README.md:11: results/exp/figure.png#x: an anchor into a file that is '
      'not Markdown',
  ]


def test_readme_checks_catch_a_long_readme_and_other_commands(tmp_path):
  root = str(tmp_path)
  _write(root, '.ci/run', '\n'.join([
      "# CI: install and run the README's test command.",
      'set -euo pipefail',
      'python -m pip install --quiet -e ".[test,ray]"',
      "# The README's test command (keep the two in sync):",
      'python -m pytest -n 2',
  ]))
  good = ['```sh',
          'pip install -e ".[test,ray]" && python -m clear.train',
          '. .venv/bin/activate && python -m pytest -n 2', '```']
  _write(root, 'README.md', '\n'.join(good))
  assert readme_problems(root) == []
  _write(root, 'README.md', '\n'.join(good[:2] + ['python -m pytest'] +
                                      good[3:] + ['x'] * 300))
  problems = readme_problems(root)
  assert len(problems) == 2, problems
  assert 'at most 300' in problems[0] and 'pytest -n 2' in problems[1]


# --- The repository's own documents ------------------------------------------


def test_every_relative_link_resolves():
  problems = link_problems()
  assert not problems, 'Broken links:\n' + '\n'.join(problems)


def test_readme_is_short_and_starts_with_the_ci_commands():
  problems = readme_problems()
  assert not problems, '\n'.join(problems)
