"""Tests of clear.cli.flag_help: grouped help and one-message flag errors."""

import pytest
from absl import flags

from clear.cli import flag_help


def grouped_flags():
  """A fresh FlagValues with two headings, a flag defined before any
  heading and one after `end()`."""
  values = flags.FlagValues()
  flags.DEFINE_integer('before_any_heading', 1, 'Not listed.',
                       flag_values=values)
  groups = flag_help.FlagGroups(values)
  groups.heading('Actors')
  flags.DEFINE_integer('num_actors', 2, 'Actor processes.',
                       flag_values=values)
  flags.DEFINE_bool('inline', False, 'Act in the learner.', short_name='i',
                    flag_values=values)
  groups.heading('Empty')
  groups.heading('Learner')
  flags.DEFINE_enum('optimizer', 'adam', ['adam', 'rmsprop'], 'Optimizer.',
                    flag_values=values)
  flags.DEFINE_float('learning_rate', None, 'Step size (default per env).',
                     flag_values=values)
  groups.end()
  flags.DEFINE_string('after_end', 'x', 'Not listed.', flag_values=values)
  return values, groups


def test_groups_hold_the_flags_defined_under_each_heading_in_order():
  _, groups = grouped_flags()
  assert groups.groups() == [
      flag_help.FlagGroup('Actors', ['num_actors', 'inline']),
      flag_help.FlagGroup('Learner', ['optimizer', 'learning_rate'])]


def test_full_help_describes_each_listed_flag_under_its_heading():
  values, groups = grouped_flags()
  text = flag_help.full_help('The doc.', groups.groups(), values)
  lines = text.splitlines()
  assert lines[0] == 'The doc.'
  assert lines.index('Actors:') < lines.index(
      '  --num_actors: Actor processes.') < lines.index('Learner:')
  # Booleans show --[no], enums their choices, defaults as typed.
  assert '  --[no]inline: Act in the learner.' in lines
  assert '    (default: false)' in lines
  assert '  --optimizer: <adam|rmsprop>: Optimizer.' in lines
  assert "    (default: 'adam')" in lines
  assert '    (default: 2)' in lines
  # No default line for a flag whose default is unset.
  after = lines[lines.index('  --learning_rate: Step size (default per '
                            'env).') + 1]
  assert not after.startswith('    (default')
  assert 'before_any_heading' not in text and 'after_end' not in text
  assert 'Empty' not in text
  assert all(len(line) <= 80 for line in lines)


def test_short_help_lists_the_names_by_group():
  _, groups = grouped_flags()
  text = flag_help.short_help('The doc.', groups.groups())
  assert '  Actors: --num_actors --inline' in text.splitlines()
  assert '  Learner: --optimizer --learning_rate' in text.splitlines()
  assert '--helpfull' in text


@pytest.mark.parametrize('argument,expected,absent', [
    ('--helpfull', '--num_actors: Actor processes.', 'after_end'),
    ('--help', 'Actors: --num_actors --inline', 'Actor processes.'),
    ('-?', 'Actors: --num_actors --inline', 'Actor processes.'),
    ('--helpshort', 'Learner: --optimizer --learning_rate', 'after_end'),
])
def test_installed_help_flags_print_the_groups_and_exit_0(capsys, argument,
                                                         expected, absent):
  values, groups = grouped_flags()
  flag_help.install_help_flags(values, 'The doc.', groups)
  with pytest.raises(SystemExit) as exit_info:
    values(['program', argument])
  assert exit_info.value.code == 0
  out = capsys.readouterr().out
  assert out.startswith('The doc.')
  assert expected in out and absent not in out


def test_a_flag_error_is_one_message_and_a_pointer(capsys):
  values, _ = grouped_flags()
  parse = flag_help.parse_flags_or_exit(values, 'python -m prog')
  with pytest.raises(SystemExit) as exit_info:
    parse(['program', '--num_actors=many'])
  assert exit_info.value.code == flag_help.USAGE_EXIT_CODE
  err = capsys.readouterr().err.splitlines()
  assert len(err) == 2, err
  assert err[0].startswith('error: flag --num_actors=many:')
  assert err[1] == ('Run `python -m prog --helpfull` for the flags, grouped '
                    'by purpose.')
  assert parse(['program', '--num_actors=3']) == ['program']
  assert values.num_actors == 3


def test_print_flag_error_prefixes_every_line(capsys):
  flag_help.print_flag_error('--a is bad.\n--b is bad too.', 'prog')
  assert capsys.readouterr().err.splitlines() == [
      'error: --a is bad.', 'error: --b is bad too.',
      'Run `prog --helpfull` for the flags, grouped by purpose.']


def test_a_flag_before_a_flagfile_that_sets_it_is_warned_about(tmp_path):
  values, _ = grouped_flags()
  nested = tmp_path / 'nested.flags'
  nested.write_text('--noinline\n')
  flagfile = tmp_path / 'run.flags'
  flagfile.write_text(f'# A comment.\n--num_actors=4\n--flagfile={nested}\n')
  argv = ['train', '--num_actors=8', '--inline', '--optimizer=rmsprop',
          f'--flagfile={flagfile}', '--learning_rate=0.1']
  warnings = flag_help.overridden_by_flagfiles(argv, values)
  assert warnings == [
      f'--num_actors=8 comes before --flagfile={flagfile}, which sets '
      '--num_actors=4: the later one wins. Put --num_actors=8 after '
      '--flagfile to use it.',
      f'--inline comes before --flagfile={flagfile}, which sets '
      '--noinline: the later one wins. Put --inline after --flagfile to use '
      'it.']
  # Flags after the file, or that it does not set, and no file: nothing.
  assert flag_help.overridden_by_flagfiles(
      ['train', f'--flagfile={flagfile}', '--num_actors=8'], values) == []
  assert flag_help.overridden_by_flagfiles(
      ['train', '--optimizer=adam', f'--flagfile={flagfile}'], values) == []
  assert flag_help.overridden_by_flagfiles(
      ['train', '--num_actors=8', '--flagfile=/no/such.flags'], values) == []
  # absl itself: the file's value is the one that holds.
  values(argv)
  assert values.num_actors == 4 and not values.inline


def test_flagfile_lines_follow_nested_flagfiles_in_order(tmp_path):
  nested = tmp_path / 'nested.flags'
  nested.write_text('--noinline\n# A comment.\n')
  flagfile = tmp_path / 'run.flags'
  flagfile.write_text(f'--num_actors=4\n--flagfile={nested}\n'
                      f'--flagfile={flagfile}\n--optimizer=adam\n')
  argv = ['train', '--num_actors=8', f'--flagfile={flagfile}',
          '--flagfile=/no/such.flags']
  assert flag_help.flagfile_lines(argv) == [
      (str(flagfile), '--num_actors=4'), (str(nested), '--noinline'),
      (str(flagfile), '--optimizer=adam')]


def test_a_check_before_parsing_is_a_flag_error(capsys):
  values, _ = grouped_flags()
  parse = flag_help.parse_flags_or_exit(
      values, 'python -m prog',
      check=lambda argv: 'two.\nproblems.' if '--inline' in argv else None)
  with pytest.raises(SystemExit) as exit_info:
    parse(['program', '--inline', '--num_actors=3'])
  assert exit_info.value.code == flag_help.USAGE_EXIT_CODE
  assert capsys.readouterr().err.splitlines() == [
      'error: two.', 'error: problems.',
      'Run `python -m prog --helpfull` for the flags, grouped by purpose.']
  assert not values.is_parsed()
  assert parse(['program', '--num_actors=3']) == ['program']
  assert values.num_actors == 3
