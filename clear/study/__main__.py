r"""A study (methods x seeds of `clear.train` runs) as one command.

  python -m clear.study run STUDY [--parallel=N | --ray_address=ADDR] \
      [--root=DIR] [--methods=a,b] [--seeds=0,1] [-- clear.train flags]
  python -m clear.study status STUDY [--root=DIR]
  python -m clear.study report STUDY [--root=DIR]

STUDY is a TOML study file (`clear.study.spec` describes it; the pages under
results/ have theirs). `run` runs every run of the study that has not
finished: each is one `clear.train` process with its own logdir
`<root>/<method>_s<seed>`, so it checkpoints, resumes and stops as any run
does. Finished runs are skipped and unfinished ones resume. Ctrl-C stops
every run with its final checkpoint; the same command continues the study.
Flags after `--` go to every run, last (e.g. `-- --num_task_cycles=1
--frames_per_task=20000` for a smoke test). `status` prints where each run
stands; `report` writes the study's metrics, tables, figures and aggregate
statistics from its finished (and, marked, its partial) runs.
"""

import os
import sys

from absl import app
from absl import flags

from clear.cli import flag_help
from clear.study import spec as spec_lib

PROGRAM = 'clear.study'
COMMANDS = ('run', 'status', 'report')

FLAGS = flags.FLAGS
_GROUPS = flag_help.FlagGroups(FLAGS)
_GROUPS.heading('Which runs')
flags.DEFINE_string('root', None, 'Put the runs\' logdirs under this folder '
                    'instead of the study file\'s root.')
flags.DEFINE_list('methods', [], 'Only these methods (keys of the study '
                  'file\'s [methods], or "reference"); default: all.')
flags.DEFINE_list('seeds', [], 'Only these seeds; default: all.')
_GROUPS.heading('Where runs go (run)')
flags.DEFINE_integer('parallel', 0, 'Runs at once: on this machine (a local '
                     'Ray of this many CPUs, default 1), or at most this '
                     'many on a --ray_address cluster (default: as many as '
                     'it places).')
flags.DEFINE_string('ray_address', '', 'Run them as tasks on this Ray '
                    'cluster (e.g. auto, or head-ip:6379); each asks for the '
                    'study file\'s cpus_per_run and gpus_per_run. The '
                    'logdirs must be on storage every node reaches '
                    '(docs/studies.md).')
flags.DEFINE_float('progress_interval_s', 60.0, 'Seconds between the '
                   'study\'s progress lines.')
_GROUPS.end()


def split_extra(argv):
  """(argv before the first '--', the `clear.train` flags after it)."""
  if '--' in argv:
    i = argv.index('--')
    return argv[:i], argv[i + 1:]
  return argv, []


def _seeds(texts):
  seeds = []
  for text in texts:
    try:
      seeds.append(int(text))
    except ValueError:
      raise spec_lib.StudyError(f'--seeds takes integers, got {text!r}.')
  return seeds


def main(argv, extra):
  if len(argv) != 3 or argv[1] not in COMMANDS:
    print(f'{PROGRAM}: give a command and a study file: '
          f'{PROGRAM} {{{",".join(COMMANDS)}}} STUDY (got '
          f'{" ".join(argv[1:]) or "nothing"}).', file=sys.stderr)
    return flag_help.USAGE_EXIT_CODE
  command, path = argv[1], argv[2]
  if extra and command != 'run':
    print(f'{PROGRAM} {command}: flags after -- go to the runs of `run` '
          'only.', file=sys.stderr)
    return flag_help.USAGE_EXIT_CODE
  for flag in extra:
    if flag.split('=', 1)[0] in ('--seed', '--logdir'):
      print(f'{PROGRAM}: {flag} after --: the study sets each run\'s --seed '
            'and --logdir; use --seeds and --root.', file=sys.stderr)
      return flag_help.USAGE_EXIT_CODE
  try:
    study = spec_lib.load(path, FLAGS.root)
    runs = study.select(FLAGS.methods, _seeds(FLAGS.seeds))
    if command == 'run':
      from clear.study import runner  # pylint: disable=g-import-not-at-top
      if FLAGS.parallel < 0:
        raise spec_lib.StudyError('--parallel must be >= 0, got '
                                  f'{FLAGS.parallel}.')
      return runner.run_study(study, runs, extra, FLAGS.parallel,
                              FLAGS.ray_address, FLAGS.progress_interval_s)
    if command == 'status':
      from clear.study import table  # pylint: disable=g-import-not-at-top
      print(table.status_table(runs))
      return 0
    from clear.study import report  # pylint: disable=g-import-not-at-top
    return report.write_report(study, runs)
  except (spec_lib.StudyError, ValueError, OSError, ImportError) as e:
    print(f'{PROGRAM}: {e}', file=sys.stderr)
    return 2


def run():
  flag_help.install_help_flags(FLAGS, __doc__, _GROUPS)
  argv, extra = split_extra(sys.argv)
  parse = flag_help.parse_flags_or_exit(FLAGS, PROGRAM)
  app.run(lambda args: main(args, extra),
          argv=argv, flags_parser=parse)


if __name__ == '__main__':
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  run()
