"""Flags parsed into a `RunConfig` as `clear.train` parses them, for tests
of flags and their validation."""

from absl import flags
from absl.testing import flagsaver

from clear.cli import configs
from clear.cli import run_json
from clear.cli import validation


def parse(*args):
  """The `RunConfig` of `clear.train <args>` (a resume's kept settings,
  validation, the config), with the flags restored after.

  The logdir is /nonexistent/logdir unless `args` name one.

  Raises:
    app.UsageError: flags `validate` refuses.
  """
  with flagsaver.flagsaver():
    flags.FLAGS.unparse_flags()
    flags.FLAGS(['train', '--logdir=/nonexistent/logdir', *args])
    run_json.keep_run_settings(flags.FLAGS)
    validation.validate(flags.FLAGS)
    return configs.config_from_flags(flags.FLAGS)
