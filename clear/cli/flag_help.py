"""What a binary's user sees about its flags: help grouped by purpose, and
flag errors as one short message.

absl's own `--help` and `--helpfull` list every flag of every imported
module (absl's, TensorFlow's TPU and test-framework flags among them) in
one alphabetical run, and a bad flag value is printed after the whole flag
list. Here a binary names its groups while it defines its flags:

  groups = flag_help.FlagGroups(flags.FLAGS)
  groups.heading('Actors')
  flags.DEFINE_integer('num_actors', ...)   # listed under 'Actors'

and `install_help_flags` makes `--help` (alias `--helpshort`, `-?`) print
the groups with their flag names and `--helpfull` each flag's description,
both for this binary's flags only; `--helpxml` still lists every flag.
`parse_flags_or_exit` and `print_flag_error` turn a flag error into the
error itself plus a pointer to `--helpfull`.
"""

import os
import sys
from typing import Callable, List, NamedTuple, Optional, Tuple

from absl import app
from absl import flags

# Exit status of a program stopped by a flag error (also a UsageError).
USAGE_EXIT_CODE = 2


class FlagGroup(NamedTuple):
  """A heading and the flags defined under it, in definition order."""
  title: str
  names: List[str]


class FlagGroups:
  """Records which flags a binary defines under which heading.

  Every flag defined into `flag_values` after `heading(title)` and before
  the next heading (or `end()`) belongs to `title`.
  """

  def __init__(self, flag_values: flags.FlagValues):
    self._flag_values = flag_values
    self._starts = []  # (title, names defined before the heading)
    self._end = None  # Names defined when `end` was called.

  def heading(self, title: str):
    self._starts.append((title, set(self._flag_values)))

  def end(self):
    """Closes the last group: flags defined later (absl's help flags, other
    modules') are not listed."""
    self._end = set(self._flag_values)

  def groups(self) -> List[FlagGroup]:
    """The groups that hold at least one flag, in heading order."""
    defined = list(self._flag_values)  # Definition order.
    last = set(defined) if self._end is None else self._end
    ends = [before for _, before in self._starts[1:]] + [last]
    found = []
    for (title, before), end in zip(self._starts, ends):
      names = [n for n in defined if n in end and n not in before and
               self._flag_values[n].name == n]  # Not short names.
      if names:
        found.append(FlagGroup(title, names))
    return found


def _flag_name(flag: flags.Flag) -> str:
  if isinstance(flag, flags.BooleanFlag):
    return f'--[no]{flag.name}'
  return f'--{flag.name}'


def _default_text(default) -> str:
  """A default as it would be typed: 'text', 0.5, true."""
  if isinstance(default, bool):
    return 'true' if default else 'false'
  if isinstance(default, str):
    return repr(default)
  return str(default)


def describe_flag(flag: flags.Flag) -> str:
  """Name, help text (absl puts an enum's choices first) and default of
  one flag, wrapped to 80 columns: what `--helpfull` shows for it."""
  lines = [flags.text_wrap(f'{_flag_name(flag)}: {flag.help or ""}',
                           length=80, indent='    ', firstline_indent='  ')]
  if flag.default is not None:
    lines.append(flags.text_wrap(
        f'(default: {_default_text(flag.default)})', length=80,
        indent='    '))
  return '\n'.join(lines)


def full_help(doc: str, groups: List[FlagGroup],
              flag_values: flags.FlagValues) -> str:
  """`doc`, then every group's flags with their descriptions."""
  parts = [doc.strip(), '']
  for group in groups:
    parts.append(f'{group.title}:')
    parts.extend(describe_flag(flag_values[n]) for n in group.names)
    parts.append('')
  parts.append(flags.text_wrap(
      'Flags of absl and TensorFlow (logging, --flagfile, ...) are not '
      'listed here; --helpxml lists every flag.', length=80))
  return '\n'.join(parts) + '\n'


def short_help(doc: str, groups: List[FlagGroup]) -> str:
  """`doc`, then each group's flag names; `--helpfull` describes them."""
  parts = [doc.strip(), '']
  for group in groups:
    parts.append(flags.text_wrap(
        f'{group.title}: ' + ' '.join(f'--{n}' for n in group.names),
        length=80, indent='      ', firstline_indent='  '))
  parts.extend(['', '--helpfull describes every flag.'])
  return '\n'.join(parts) + '\n'


class _PrintAndExitFlag(flags.BooleanFlag):
  """A boolean flag that, when given, prints a text and exits with 0."""

  def __init__(self, name: str, short_name: Optional[str], help_text: str,
               render: Callable[[], str]):
    super().__init__(name, False, help_text, short_name=short_name,
                     allow_hide_cpp=True)
    self._render = render

  def parse(self, argument):
    if self._parse(argument):
      try:
        sys.stdout.write(self._render())
        sys.stdout.flush()
      except BrokenPipeError:  # E.g. `--helpfull | head`.
        pass
      sys.exit(0)


def install_help_flags(flag_values: flags.FlagValues, doc: str,
                       groups: FlagGroups):
  """Replaces absl's `--help`, `--helpshort` and `--helpfull` with grouped
  help for the flags `groups` recorded. Call before `app.run`."""
  app.define_help_flags()  # absl's first, so that app.run keeps these.
  for name in ('help', '?', 'helpshort', 'helpfull'):
    if name in flag_values:
      delattr(flag_values, name)
  short = lambda: short_help(doc, groups.groups())
  full = lambda: full_help(doc, groups.groups(), flag_values)
  for name, short_name, help_text, render in (
      ('help', '?', 'show the flag groups and their flags', short),
      ('helpshort', None, 'the same as --help', short),
      ('helpfull', None, "describe every one of this program's flags",
       full)):
    flags.DEFINE_flag(_PrintAndExitFlag(name, short_name, help_text, render),
                      flag_values)


def print_flag_error(message: str, program: str):
  """Prints a flag error, one `error:` line per line of `message`, and
  where to find the flags, to stderr."""
  for line in str(message).strip().splitlines():
    # absl's own prefix on a flagfile it cannot open.
    line = line.replace('ERROR:: Unable to open flagfile: ',
                        '--flagfile: cannot open it: ')
    sys.stderr.write(f'error: {line}\n')
  sys.stderr.write(f'Run `{program} --helpfull` for the flags, grouped by '
                   'purpose.\n')


def _arg_flag_name(arg: str) -> Optional[str]:
  """'--name=value' and '--name' -> 'name' (None for other arguments)."""
  if not arg.startswith('--') or arg == '--':
    return None
  return arg[2:].split('=', 1)[0]


def _flagfile_lines(path: str, seen=()) -> List[Tuple[str, str]]:
  """(file, line) of each flag line of a flagfile and of the flagfiles it
  names, in order; none for a file that cannot be read (absl says so)."""
  if path in seen:
    return []
  try:
    with open(os.path.expanduser(path)) as f:
      lines = [line.strip() for line in f]
  except OSError:
    return []
  found = []
  for line in lines:
    name = _arg_flag_name(line)
    if name == 'flagfile':
      if '=' in line:
        found.extend(_flagfile_lines(line.split('=', 1)[1], (*seen, path)))
    elif name:
      found.append((path, line))
  return found


def _flagfile_settings(path: str) -> dict:
  """{flag name: its last line} that a flagfile (and the flagfiles it
  names) sets; {} for one that cannot be read (absl says so)."""
  return {_arg_flag_name(line): line for _, line in _flagfile_lines(path)}


def flagfile_lines(argv: List[str]) -> List[Tuple[str, str]]:
  """(file, line) of each flag line that the `--flagfile=` arguments of
  `argv` read (see `_flagfile_lines`), in order."""
  return [found for arg in argv[1:]
          if _arg_flag_name(arg) == 'flagfile' and '=' in arg
          for found in _flagfile_lines(arg.split('=', 1)[1])]


def overridden_by_flagfiles(argv: List[str],
                            flag_values: flags.FlagValues) -> List[str]:
  """Warnings for flags given before a `--flagfile` that sets them too:
  absl applies flags in order, so the file's value wins."""
  warnings = []
  for i, arg in enumerate(argv):
    if _arg_flag_name(arg) != 'flagfile' or '=' not in arg:
      continue
    path = arg.split('=', 1)[1]
    settings = _flagfile_settings(path)
    for earlier in argv[1:i]:
      name = _arg_flag_name(earlier)
      if name is None or name == 'flagfile':
        continue
      # --noname sets the boolean flag name.
      base = name[2:] if (name.startswith('no') and name not in flag_values
                          and name[2:] in flag_values) else name
      for key in (base, 'no' + base):
        if key in settings:
          warnings.append(f'{earlier} comes before --flagfile={path}, which '
                          f'sets {settings[key]}: the later one wins. Put '
                          f'{earlier} after --flagfile to use it.')
          break
  return warnings


def parse_flags_or_exit(
    flag_values: flags.FlagValues, program: str,
    check: Optional[Callable[[List[str]], Optional[str]]] = None):
  """A `flags_parser` for `app.run`: parses argv, and on a flag error
  prints just the error (see `print_flag_error`) and exits with
  USAGE_EXIT_CODE. `check(argv)`, if given, runs first and returns such an
  error (one absl would not say as well), or None."""

  def parse(argv):
    problem = check(argv) if check is not None else None
    if problem:
      print_flag_error(problem, program)
      sys.exit(USAGE_EXIT_CODE)
    try:
      return flag_values(argv)
    except flags.Error as e:
      print_flag_error(str(e), program)
      sys.exit(USAGE_EXIT_CODE)

  return parse
