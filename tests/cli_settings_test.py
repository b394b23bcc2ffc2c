"""Tests that clear.train's flags come from the configs' declared settings."""

import pytest
from absl import app
from absl import flags
from absl.testing import flagsaver

from clear.algorithms.ddpg import policy as ddpg
from clear.algorithms.impala import config as impala_config
from clear.algorithms.ppg import config as ppg_config
from clear.algorithms.sac import policy as sac
from clear.cli import configs
from clear.cli import flags as cli_flags
from clear.cli import validation

FLAGS = flags.FLAGS


@pytest.mark.parametrize('name,setting', [
    ('tau', ddpg.DDPGConfig.SETTINGS[ddpg.DDPGConfig._fields.index('tau')]),
    ('alpha_learning_rate', sac.SETTINGS[sac.SACConfig._fields.index(
        'alpha_learning_rate')]),
    ('exploration_noise', ddpg.SETTINGS[ddpg.DDPGConfig._fields.index(
        'exploration_noise')]),
    ('clip_ratio', ppg_config.SETTINGS[ppg_config.PPGConfig._fields.index(
        'clip_ratio')]),
])
def test_a_port_flag_takes_its_help_from_the_setting(name, setting):
  assert setting.name == name
  help_text = FLAGS[name].help
  assert help_text.startswith(setting.help + ' (')
  assert FLAGS[name].default is None


def test_a_port_flag_lists_each_algorithms_default():
  assert FLAGS['num_critics'].help.endswith('(ddpg: 1, sac: 2)')
  assert FLAGS['value_estimator'].help.endswith(
      "(ddpg: 'td0', ppg: 'gae', sac: 'td0')")
  assert cli_flags.ALGORITHM_FLAGS['num_critics'] == ['ddpg', 'sac']


def test_port_flags_are_typed_by_their_settings():
  assert FLAGS['max_log_alpha'].flag_type() == 'float'  # Default None.
  assert FLAGS['prioritized'].flag_type() == 'bool'
  assert FLAGS['actor_update_period'].flag_type() == 'int'
  assert FLAGS['prior_actor'].flag_type() == 'string'


# --- IMPALA-CLEAR ------------------------------------------------------------


def test_every_learner_config_field_is_declared_once_with_help():
  names = [s.name for s in impala_config.SETTINGS]
  assert tuple(names) == impala_config.LearnerConfig._fields
  assert len(set(names)) == len(names)
  for setting in impala_config.SETTINGS:
    assert setting.help.strip(), setting.name
    assert impala_config.LearnerConfig._field_defaults[setting.name] == (
        setting.default)
  assert impala_config.LearnerConfig.__module__ == impala_config.__name__
  assert 'entropy_cost_end: Weight of the entropy term at the end' in (
      impala_config.LearnerConfig.__doc__)


@pytest.mark.parametrize('name', cli_flags.IMPALA_DECLARED_FLAGS)
def test_each_declared_impala_flag_is_its_config_setting(name):
  setting = impala_config.SETTING[name]
  flag = FLAGS[name]
  assert flag.default == setting.default
  # absl puts an enum's values before its help.
  assert flag.help.split('>: ')[-1] == setting.help
  assert flag.default == impala_config.LearnerConfig._field_defaults[name]
  expected_type = {bool: 'bool', int: 'int', float: 'float', str: 'string'}[
      setting.flag_type()]
  if setting.enum_values:
    assert list(flag.parser.enum_values) == list(setting.enum_values)
  else:
    assert flag.flag_type() == expected_type


def test_derived_impala_flags_are_learner_fields_or_their_sources():
  declared = set(cli_flags.IMPALA_DECLARED_FLAGS)
  derived = set(cli_flags.IMPALA_DERIVED_FLAGS)
  assert not declared & derived
  fields = set(impala_config.LearnerConfig._fields)
  # Every field is set by a declared flag or derived.
  assert declared <= fields
  for name in derived:
    assert name in FLAGS, name


def test_config_from_flags_passes_the_declared_flags_on():
  values = {'unroll_length': 7, 'entropy_cost': 0.02, 'jit_compile': True,
            'reward_clipping': 'none', 'entropy_cost_end': 0.001,
            'clip_grad_norm': 3.0, 'policy_cloning_cost': 0.2}
  args = [f'--{k}={v}' for k, v in values.items()]
  with flagsaver.flagsaver():
    FLAGS.unparse_flags()
    FLAGS(['train'] + args)
    validation.validate(FLAGS)
    config = configs.config_from_flags(FLAGS).learner_config
    FLAGS.unparse_flags()
    FLAGS(['train', '--replay_proportion=0'])
    plain = configs.config_from_flags(FLAGS).learner_config
  for name, value in values.items():
    assert getattr(config, name) == value, name
  assert config.num_replay == 16  # CartPole: batches of 32, half replayed.
  # Without replay there is nothing to clone.
  assert plain.num_replay == 0 and plain.policy_cloning_cost == 0.0
  assert plain.value_cloning_cost == 0.0


@pytest.mark.parametrize('args,message', [
    (['--entropy_cost=-1'], '--entropy_cost must be >= 0, got -1.0.'),
    (['--rmsprop_epsilon=nan', '--optimizer=rmsprop'],
     '--rmsprop_epsilon must be a finite number > 0, got nan.'),
    (['--learning_rate_warmup_frames=10', '--total_environment_frames=10'],
     '--learning_rate_warmup_frames must be below total_environment_frames '
     '(10), got 10'),
    (['--eval_workers=-2'], '--eval_workers must be >= 0, got -2.'),
])
def test_learner_config_problems_name_the_flag(args, message):
  with flagsaver.flagsaver():
    FLAGS.unparse_flags()
    FLAGS(['train'] + args)
    with pytest.raises(app.UsageError) as raised:
      validation.validate(FLAGS)
  assert str(raised.value).splitlines() == [
      line for line in str(raised.value).splitlines() if message in line]
  assert message in str(raised.value)
