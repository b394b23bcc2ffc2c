r"""Train or test an IMPALA-CLEAR agent from the command line.

  python -m clear.train                                  # CartPole default
  python -m clear.train --env=atari:Pong --logdir=runs/pong
  python -m clear.train --mode=test --logdir=runs/pong --test_num_episodes=30

Running the same command again resumes from the latest checkpoint in
--logdir; a logdir holds one live training run at a time (its .run.lock),
and a refused command leaves it as it found it. Test mode (and --init_from)
take the env, algorithm and network from the run's run.json. Ctrl-C or
SIGTERM stops the actors, writes a final checkpoint and exits with status 0
(130 / 143 when interrupted before the end); a second one while that
checkpoint is written only says so, a third stops at once and says what was
not saved. Bad flags or files exit with status 2 and one message; so does
a write that fails while the run goes on (a full disk: the message names
the path and the checkpoint the same command resumes from, once there is
space).
"""

import atexit
import json
import logging as py_logging
import os
import signal
import sys
import tempfile
from typing import Optional

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


def _interrupted_while_loading(signum, frame):
  del frame
  os.write(2, b'Interrupted before the run started.\n')
  os._exit(128 + signum)  # pylint: disable=protected-access


def _ignore_late_signals():
  for sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)


if __name__ == '__main__':
  # Exit hooks run last-registered first: this one, registered before the
  # imports below register theirs, runs after them (see
  # `clear.cli.signals.exit_now`).
  atexit.register(_ignore_late_signals)
  # A Ctrl-C while the imports below load TensorFlow (seconds) ends the
  # program at once and quietly: nothing has started yet. `main` installs
  # the handlers of the run itself.
  signal.signal(signal.SIGINT, _interrupted_while_loading)

from absl import app  # pylint: disable=g-import-not-at-top
from absl import logging

from clear.cli import configs
from clear.cli import flag_help
from clear.cli import flags as cli_flags
from clear.cli import run_json
from clear.cli import signals
from clear.cli import validation
from clear.runtime import evaluation as evaluation_lib
from clear.runtime import record as record_lib
from clear.runtime import run_config as run_config_lib
from clear.runtime import run_lock
from clear.runtime import run_loop

FLAGS = cli_flags.FLAGS
PROGRAM = 'python -m clear.train'
# The program's handler, installed by `main` (a stand-in before).
_STOP = signals.StopSignal(install=False)


def logdir_problem(logdir: str, create: bool) -> Optional[str]:
  """Why files cannot be written in `logdir` (and its `checkpoints/`
  folder, if there is one), or None. Creates nothing.

  Args:
    logdir: the folder.
    create: the run may create it (and its parents): a missing folder is a
      problem only when its nearest existing parent cannot be written.
  """
  path = os.path.abspath(logdir)
  while True:  # A file where a folder should be.
    if os.path.lexists(path) and not os.path.isdir(path):
      return f'{path} is a file, not a folder'
    parent = os.path.dirname(path)
    if parent == path:
      break
    path = parent
  existing = os.path.abspath(logdir)
  while not os.path.isdir(existing):
    existing = os.path.dirname(existing)
  if existing != os.path.abspath(logdir) and not create:
    return f'No such file or directory: {logdir}'
  try:
    for folder in (existing, os.path.join(logdir, 'checkpoints')):
      if folder == existing or os.path.isdir(folder):
        with tempfile.TemporaryFile(dir=folder):
          pass
  except OSError as e:
    return f'{e.strerror or type(e).__name__}: {existing}'
  return None


def _say_if_live(logdir: str, what: str):
  """Warns when a live training run holds `logdir` (test mode reads it)."""
  holder = run_lock.live_holder(logdir)
  if holder is not None:
    logging.warning('%s is in use by a live training run (%s): %s',
                    logdir, holder.describe(), what)


def run_test(config: run_config_lib.RunConfig, num_episodes: int,
             record_path: str = '') -> int:
  """Test mode: plays the episodes, prints the results, then writes them to
  test_results.json; the printed results stay if the write fails. With
  `record_path`, one more episode is then written there (GIF or MP4; one
  file per distinct task of a sequence)."""
  _say_if_live(config.logdir, 'testing its newest checkpoint as of now; '
               'the run goes on writing new ones.')
  spec = run_config_lib.env_spec(config)  # Imports the env's packages.
  _STOP.raise_if_interrupted()  # MinAtar's import swallows a Ctrl-C.
  if record_path:  # Before the episodes: an env with no picture fails now.
    record_lib.image_key(spec)
  problem = logdir_problem(config.logdir, create=False)
  if problem:
    logging.warning('%s cannot be written (%s): the results will only be '
                    'printed.', evaluation_lib.TEST_RESULTS_FILE, problem)
  summary = evaluation_lib.evaluate(config, num_episodes)
  print(json.dumps({k: v for k, v in summary.items() if k != 'returns'},
                   indent=2), flush=True)
  try:
    path = evaluation_lib.write_test_results(config.logdir, summary)
  except (OSError, ValueError) as e:
    reason = e.strerror if isinstance(e, OSError) and e.strerror else e
    print(f'warning: the results above were not written to '
          f'{os.path.join(config.logdir, evaluation_lib.TEST_RESULTS_FILE)} '
          f'({reason}).', file=sys.stderr)
  else:
    logging.info('Test results written to %s.', path)
  if record_path:
    for recording in evaluation_lib.record_episodes(config, record_path):
      print(f'Recorded {recording.num_frames} frames (return '
            f'{recording.episode_return:g}'
            f'{"" if recording.finished else ", cut at --eval_max_steps"}) '
            f'to {recording.path}.', flush=True)
  return 0


def _main(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])} '
                         '(flags start with --).')
  for warning in flag_help.overridden_by_flagfiles(sys.argv, FLAGS):
    logging.warning(warning)
  for name in ('logdir', 'init_from', 'record'):  # --logdir=~/x: no shell
    value = getattr(FLAGS, name)                  # expands that ~.
    if value.startswith('~'):
      setattr(FLAGS, name, os.path.expanduser(value))
  if FLAGS.mode == 'train':  # Said at once; run_loop's lock decides.
    holder = run_lock.live_holder(FLAGS.logdir)
    if holder is not None:
      raise run_lock.LogdirInUse(FLAGS.logdir, holder)
  settings = run_json.read_run_settings(FLAGS)
  # Before validate, which then checks what it kept.
  run_json.keep_run_settings(FLAGS)
  validation.validate(FLAGS)
  config = configs.config_from_flags(FLAGS)
  if settings is not None:
    # Options run.json holds that no flag sets stay as they were.
    kept = {k: v for k, v in settings.env_options.items()
            if k not in run_json.ENV_OPTION_FLAGS}
    config = config._replace(env_options={**kept, **config.env_options})
    run_json.check_env_change(config, settings)
  if FLAGS.mode == 'test':
    return run_test(config, FLAGS.test_num_episodes, FLAGS.record)
  problem = logdir_problem(FLAGS.logdir, create=True)
  if problem:
    raise ValueError(f'--logdir={FLAGS.logdir}: cannot write there '
                     f'({problem}). Choose another --logdir.')
  result = run_loop.train(config, stop_requested=_STOP,
                          on_start=_STOP.started)
  logging.info('Done: %s', result._asdict())
  if result.stopped_early and _STOP.signum is not None:
    return 128 + _STOP.signum
  return 0


def main(argv):
  """Runs the binary; every expected failure ends in one message."""
  code = _main_once(argv)
  signals.exit_now(code)
  return code


def _main_once(argv):
  global _STOP
  _STOP = signals.StopSignal()
  py_logging.getLogger().setLevel(py_logging.INFO)
  try:
    code = _main(argv)
    if not _STOP.running:  # A signal swallowed on the way still counts.
      _STOP.raise_if_interrupted()
    return code
  except app.UsageError as e:
    flag_help.print_flag_error(str(e), PROGRAM)
    return flag_help.USAGE_EXIT_CODE
  except KeyboardInterrupt:
    signum = _STOP.signum or signal.SIGINT
    if _STOP.running:  # A third signal.
      print(f'Stopped at once by signal {signum} (three signals): '
            f'{signals.unsaved(FLAGS.logdir, _STOP.first_at)}',
            file=sys.stderr)
    elif FLAGS.mode == 'train':
      print('Interrupted before the run started: nothing was written.',
            file=sys.stderr)
    else:
      print('Interrupted.', file=sys.stderr)
    return 128 + signum
  except (ValueError, RuntimeError, OSError) as e:  # Files, env, no SC2...
    print(f'error: {e}', file=sys.stderr)
    return 2
  except MemoryError as e:
    print(f'error: out of memory ({type(e).__name__}: {e}); see the replay '
          'line of the log for what the buffer takes.', file=sys.stderr)
    return 2


if __name__ == '__main__':
  flag_help.install_help_flags(FLAGS, __doc__, cli_flags.FLAG_GROUPS)
  app.run(main, flags_parser=flag_help.parse_flags_or_exit(
      FLAGS, PROGRAM, cli_flags.removed_in_flagfiles))
