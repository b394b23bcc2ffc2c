"""The flagfiles behind the published results still mean what they meant.

Every result a results page shows is one command,
`python -m clear.train --flagfile=results/<experiment>/.../flags/<run>.flags`
plus a seed and a logdir. Each flagfile found under `results/` is parsed
here with `clear.train`'s own flags (absl's `--flagfile=`), alone and with
every flag back at its default first, then checked by `validation.validate` and
turned into a run config, as the binary does before it starts. A flag that
was renamed or removed, a value that no longer parses, and a combination
the binary refuses all fail here rather than for a user.
"""

import glob
import os
import re

import pytest
from absl import flags
from absl.testing import flagsaver

from clear import train
from clear.cli import configs
from clear.cli import defaults
from clear.cli import validation
from clear.study import spec as study_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, 'results')
FLAGFILES = sorted(glob.glob(os.path.join(RESULTS, '**', 'flags', '*.flags'),
                             recursive=True))
PAGES = sorted(glob.glob(os.path.join(RESULTS, '**', 'README.md'),
                         recursive=True))


def check_flagfile(path):
  """Parses one flagfile as `python -m clear.train --flagfile=<path>` does.

  Every flag is reset to its default first and restored afterwards, so no
  value of one file reaches the next.

  Args:
    path: the flagfile.

  Returns:
    The `clear.runtime.run_config.RunConfig` the binary would build from it.

  Raises:
    flags.Error: a flag clear.train does not define, or a bad value.
    app.UsageError: a line that is not a flag, or flags `validate` refuses.
  """
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    rest = flags.FLAGS(['train', '--flagfile=' + path])
    if rest[1:]:
      raise train.app.UsageError(
          f'{path}: not flags: {" ".join(rest[1:])} (each line is '
          '--name=value or a # comment).')
    validation.validate(flags.FLAGS)
    return configs.config_from_flags(flags.FLAGS)


def relative(path):
  return os.path.relpath(path, ROOT)


def test_the_published_runs_have_flagfiles():
  found = {relative(p) for p in FLAGFILES}
  for path in ('results/pong/flags/defaults.flags',
               'results/cartpole/flags/clear.flags',
               'results/minatar/flags/clear.flags',
               'results/ppg/flags/ppg_cartpole.flags'):
    assert path in found, f'{path} is missing'


@pytest.mark.parametrize('path', FLAGFILES, ids=relative)
def test_flagfile_parses_and_validates(path):
  with open(path) as f:
    first = f.readline()
  assert first.startswith('#'), (
      f'{relative(path)}: the first line should be a comment saying which '
      'result the file reproduces.')
  config = check_flagfile(path)
  assert config.env_name, relative(path)


def test_every_flagfile_is_on_a_page_and_every_page_names_real_ones():
  cited = set()
  for page in PAGES:
    with open(page) as f:
      text = f.read()
    for name in re.findall(r'--flagfile=(results/[\w./-]+\.flags)', text):
      assert os.path.isfile(os.path.join(ROOT, name)), (
          f'{relative(page)} names {name}, which does not exist.')
      cited.add(name)
    # A study file on the page gives the commands of its flagfiles.
    for name in re.findall(r'clear\.study run (results/[\w./-]+\.toml)',
                           text):
      study = study_spec.load(os.path.join(ROOT, name))  # Files exist.
      for run in study.runs:
        for flag in run.flags:
          if flag.startswith('--flagfile='):
            cited.add(relative(flag[len('--flagfile='):]))
  unused = {relative(p) for p in FLAGFILES} - cited
  assert not unused, f'no results page gives the command of {sorted(unused)}'


@pytest.mark.parametrize('lines, error, message', [
    (['--env=atari:Pong', '--batch_sise=64'], flags.UnrecognizedFlagError,
     'batch_sise'),
    (['--env=atari:Pong', '--batch_size=sixty-four'],
     flags.IllegalFlagValueError, 'batch_size'),
    (['--env=atari:Pong', 'batch_size=64'], train.app.UsageError,
     'not flags: batch_size=64'),
    (['--env=gym:CartPole-v1', '--replay_proportion=0',
      '--policy_cloning_cost=0.01'], train.app.UsageError, 'need replay'),
    (['--env=gym:CartPole-v1', '--rmsprop_epsilon=1e-5'], train.app.UsageError,
     '--rmsprop_epsilon needs --optimizer=rmsprop'),
])
def test_a_bad_flagfile_fails(tmp_path, lines, error, message):
  path = tmp_path / 'bad.flags'
  path.write_text('# A bad flagfile.\n' + '\n'.join(lines) + '\n')
  with pytest.raises(error, match=re.escape(message)):
    check_flagfile(str(path))


def test_one_flagfile_does_not_leak_into_the_next(tmp_path):
  first = tmp_path / 'first.flags'
  first.write_text('# Batches of 16.\n--env=atari:Pong\n--batch_size=16\n'
                   '--core=layer_norm_lstm\n')
  second = tmp_path / 'second.flags'
  second.write_text('# The Atari defaults.\n--env=atari:Pong\n')
  assert check_flagfile(str(first)).learner_config.batch_size == 16
  config = check_flagfile(str(second))
  assert config.learner_config.batch_size == (
      defaults.FAMILY_DEFAULTS['atari'].batch_size)
  assert config.agent_config.core == 'lstm'
