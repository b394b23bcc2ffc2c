"""Run progress: recent episode statistics, rates and the terminal line."""

import collections
import time
from typing import Iterable

import numpy as np

from clear.runtime import actor as actor_lib


class EpisodeStats:
  """The last `window` finished episodes."""

  def __init__(self, window: int = 100):
    self.returns = collections.deque(maxlen=window)
    self.lengths = collections.deque(maxlen=window)
    self.total = 0

  def add(self, episodes: Iterable[actor_lib.Episode]):
    for episode in episodes:
      self.returns.append(episode.episode_return)
      self.lengths.append(episode.episode_step)
      self.total += 1

  @property
  def mean_return(self) -> float:
    return float(np.mean(self.returns)) if self.returns else float('nan')

  @property
  def full(self) -> bool:
    return len(self.returns) == self.returns.maxlen


class Rate:
  """Events per second since the previous `measure` call."""

  def __init__(self, count: float = 0.0):
    self._count = count
    self._time = time.monotonic()

  def measure(self, count: float) -> float:
    now = time.monotonic()
    rate = (count - self._count) / max(now - self._time, 1e-9)
    self._count, self._time = count, now
    return rate


def format_duration(seconds: float) -> str:
  if not np.isfinite(seconds):
    return '?'
  seconds = int(seconds)
  hours, rest = divmod(seconds, 3600)
  minutes, seconds = divmod(rest, 60)
  if hours:
    return f'{hours}h{minutes:02d}m'
  return f'{minutes}m{seconds:02d}s'


def progress_line(phase: str, frames: int, total: int, fps: float,
                  steps_per_s: float, mean_return: float,
                  num_episodes: int, policy_lag: float) -> str:
  """One terminal line: frames done/total, rates, return, phase and ETA."""
  eta = max(0, total - frames) / fps if fps > 0 else float('inf')
  ret = 'n/a' if np.isnan(mean_return) else f'{mean_return:.1f}'
  return (f'[{phase}] frames {frames:,}/{total:,} '
          f'({100.0 * frames / total:.1f}%) | {fps:,.0f} env fps | '
          f'{steps_per_s:.1f} updates/s | lag {policy_lag:.1f} | return '
          f'{ret} (last {num_episodes}) | ETA {format_duration(eta)}')
