"""Settings declared once: a name, a default and its help side by side.

A `Setting` declares one field of a config and, where a `clear.train` flag
sets it, that flag. `settings_class` builds the config's NamedTuple class
from an ordered tuple of them (its docstring lists each field with its
help), and `define_flag` defines the absl flag of one, so a field's
default and help are written in one place.
"""

import collections
import sys
import textwrap
from typing import Any, NamedTuple, Optional, Sequence, Tuple

from absl import flags

# The absl definers by the type a flag's value has.
_DEFINERS = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
             float: flags.DEFINE_float, str: flags.DEFINE_string}


class Setting(NamedTuple):
  """One setting: a config field and the flag of the same name.

  Attributes:
    name: the field's and the flag's name.
    default: its default; its type (bool, int, float, str) is the flag's
      unless `kind` says otherwise.
    help: what it means (the flag's help).
    kind: the flag's type (bool, int, float or str) where the default does
      not tell it (a None default); None: the default's type.
    enum_values: the values an enum flag takes; empty: not an enum.
  """
  name: str
  default: Any
  help: str
  kind: Optional[type] = None
  enum_values: Tuple[str, ...] = ()

  def flag_type(self) -> type:
    """The type of the flag's value: `kind`, else the default's."""
    return self.kind or type(self.default)


def settings_class(class_name: str, settings: Sequence[Setting],
                   summary: Optional[str] = None,
                   module: Optional[str] = None) -> type:
  """A NamedTuple class with one field per setting, at its default.

  Args:
    class_name: the class's name.
    settings: its fields, in order.
    summary: the docstring's first lines; its `Attributes:` section then
      lists each field with its help and default. None: a one-line
      docstring of the settings.
    module: the module that defines the class (for pickling); None: the
      caller's.

  Returns:
    The class; `SETTINGS` holds `settings` as a tuple.
  """
  if module is None:
    module = sys._getframe(1).f_globals.get('__name__', __name__)  # pylint: disable=protected-access
  cls = collections.namedtuple(class_name, [s.name for s in settings],
                               defaults=[s.default for s in settings],
                               module=module)
  cls.SETTINGS = tuple(settings)
  cls.__annotations__ = {s.name: s.flag_type() for s in settings}
  if summary is None:
    cls.__doc__ = 'Settings: ' + '; '.join(
        f'{s.name} (default {s.default!r}): {s.help}' for s in settings)
  else:
    lines = [summary.rstrip(), '', 'Attributes:']
    for s in settings:
      lines += textwrap.wrap(f'{s.name}: {s.help} (default {s.default!r})',
                             78, initial_indent='  ',
                             subsequent_indent='    ')
    cls.__doc__ = '\n'.join(lines) + '\n'
  return cls


def define_flag(setting: Setting, help_text: Optional[str] = None,
                flag_values: flags.FlagValues = flags.FLAGS, **kwargs):
  """Defines the absl flag `--<setting.name>` at the setting's default.

  Args:
    setting: the `Setting`; an enum if it has `enum_values`, else a bool,
      int, float or string flag by `Setting.flag_type`.
    help_text: the flag's help; None: the setting's.
    flag_values: where to define it.
    **kwargs: passed to the absl definer (e.g. `default` to override the
      setting's).

  Returns:
    The absl `FlagHolder`; absl records the caller's module as the one
    that defines the flag.
  """
  kwargs.setdefault('default', setting.default)
  kwargs.setdefault('module_name',
                    sys._getframe(1).f_globals.get('__name__'))  # pylint: disable=protected-access
  help_text = setting.help if help_text is None else help_text
  if setting.enum_values:
    return flags.DEFINE_enum(setting.name, enum_values=list(
        setting.enum_values), help=help_text, flag_values=flag_values,
                             **kwargs)
  definer = _DEFINERS[setting.flag_type()]
  return definer(setting.name, help=help_text, flag_values=flag_values,
                 **kwargs)
