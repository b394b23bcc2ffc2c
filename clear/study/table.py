"""`clear.study status`: one table of a study's runs and where they stand."""

from typing import Sequence

from clear.study import spec as spec_lib
from clear.study import state as state_lib

HEADER = ('run', 'state', 'frames', 'return', 'ETA', 'last error')


def row(status: state_lib.RunStatus) -> tuple:
  """The table's cells for one run (a failed one's with its error line)."""
  progress = status.progress
  frames = '' if progress.frames is None else f'{progress.frames:,}'
  if frames and progress.total:
    frames += f'/{progress.total:,}'
  ret = ('' if progress.latest_return is None
         else f'{progress.latest_return:.1f}')
  eta = progress.eta if status.state == state_lib.RUNNING else ''
  return (status.run.label, status.state, frames, ret, eta, status.error)


def format_rows(rows: Sequence[tuple]) -> str:
  """Rows of cells as aligned columns under `HEADER` (the last column of a
  row may run long)."""
  rows = [HEADER, *rows]
  widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER) - 1)]
  lines = []
  for r in rows:
    cells = [cell.ljust(width) for cell, width in zip(r, widths)]
    lines.append('  '.join(cells + [r[-1]]).rstrip())
  return '\n'.join(lines)


def status_table(runs: Sequence[spec_lib.Run]) -> str:
  """The status table of `runs`, with a count of runs by state."""
  statuses = [state_lib.status(run) for run in runs]
  counts = {}
  for status in statuses:
    counts[status.state] = counts.get(status.state, 0) + 1
  summary = ', '.join(f'{n} {state}' for state, n in counts.items())
  return (format_rows([row(s) for s in statuses]) +
          f'\n{len(statuses)} runs: {summary}')
