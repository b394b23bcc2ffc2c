"""Tests that clear.train's flags come from the configs' declared settings."""

import pytest
from absl import flags

from clear.algorithms.ddpg import policy as ddpg
from clear.algorithms.ppg import config as ppg_config
from clear.algorithms.sac import policy as sac
from clear.cli import flags as cli_flags

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
