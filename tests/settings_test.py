"""Tests of clear.settings: declared settings, their classes and flags."""

import pickle

import pytest
from absl import flags

from clear import settings as settings_lib

Setting = settings_lib.Setting
DECLARED = (Setting('rate', 0.5, 'How fast.'),
            Setting('steps', 3, 'How many steps.'),
            Setting('on', True, 'Whether it runs.'),
            Setting('mode', 'a', 'Which mode.', enum_values=('a', 'b')),
            Setting('cap', None, 'An optional cap.', kind=float))
Example = settings_lib.settings_class('Example', DECLARED,
                                      summary='An example config.')


def test_the_class_has_one_field_per_setting_at_its_default():
  assert Example._fields == ('rate', 'steps', 'on', 'mode', 'cap')
  assert Example._field_defaults == {'rate': 0.5, 'steps': 3, 'on': True,
                                     'mode': 'a', 'cap': None}
  assert Example.SETTINGS == DECLARED
  assert Example().steps == 3 and Example(steps=4)._replace(on=False) == (
      0.5, 4, False, 'a', None)
  assert Example.__module__ == __name__
  assert pickle.loads(pickle.dumps(Example(rate=2.0))) == Example(rate=2.0)


def test_the_class_doc_lists_each_field_with_its_help():
  doc = Example.__doc__
  assert doc.startswith('An example config.\n\nAttributes:\n')
  assert '  rate: How fast. (default 0.5)' in doc
  assert '  cap: An optional cap. (default None)' in doc
  untitled = settings_lib.settings_class('Untitled', DECLARED[:1])
  assert untitled.__doc__ == 'Settings: rate (default 0.5): How fast.'


def test_define_flag_types_the_flag_by_default_kind_or_enum():
  values = flags.FlagValues()
  for setting in DECLARED:
    settings_lib.define_flag(setting, flag_values=values)
  settings_lib.define_flag(Setting('other', 1, 'Its own help.'),
                           help_text='Another help.', default=None,
                           flag_values=values)
  values(['prog', '--rate=0.25', '--steps=5', '--noon', '--mode=b',
          '--cap=2', '--other=7'])
  assert (values.rate, values.steps, values.on, values.mode, values.cap,
          values.other) == (0.25, 5, False, 'b', 2.0, 7)
  assert values['cap'].default is None and values['other'].default is None
  assert values['mode'].flag_type() == 'string enum'
  assert values['rate'].help == 'How fast.'
  assert values['other'].help == 'Another help.'
  assert values.find_module_defining_flag('rate') == __name__
  with pytest.raises(flags.IllegalFlagValueError):
    values['mode'].parse('c')
