"""The structures that flow between environments, agents, actors, replay and
learner.

Every component uses these exact types, so data moves one way without
repacking. All arrays are batched: an environment step returns `[B, ...]`
arrays, an unroll stores `[T + 1, B, ...]` arrays (time-major).

Alignment convention (the IMPALA one): in an unroll, `agent_output[t].action`
is the action that *led to* `env_output[t]`; it is also the "previous action"
the agent sees when it processes `env_output[t]`. The first entry of an unroll
repeats the last entry of the previous unroll.
"""

import collections
from typing import NamedTuple, Optional, Tuple

import numpy as np


class EpisodeInfo(NamedTuple):
  """Running statistics of the current episode, `[B]` each.

  When `StepOutput.done` is set these hold the *finished* episode's totals
  (the observation already belongs to the next episode).

  Attributes:
    episode_return: float32, undiscounted return so far (unclipped, unscaled).
    episode_step: int32, agent steps taken in the episode so far.
    episode_frames: int32, environment frames consumed in the episode so far
      (agent steps times the frame skip / step multiplier actually executed).
  """
  episode_return: np.ndarray
  episode_step: np.ndarray
  episode_frames: np.ndarray


class StepOutput(NamedTuple):
  """What every environment returns from `reset` and `step`, batched `[B]`.

  Attributes:
    reward: float32 `[B]`, reward of the transition that led here.
    info: `EpisodeInfo`.
    done: bool `[B]`, the episode ended with this transition (termination or
      truncation); the observation is then the first one of a new episode.
    truncated: bool `[B]`, the episode was cut (time limit, env crash) rather
      than terminated; `truncated` implies `done`. Learners keep the discount
      of truncated transitions instead of zeroing it.
    observation: dict of `[B, ...]` arrays, keys and shapes from the
      environment's `observation_spec`.
  """
  reward: np.ndarray
  info: EpisodeInfo
  done: np.ndarray
  truncated: np.ndarray
  observation: dict


class AgentOutput(NamedTuple):
  """What every agent returns from `step` (`[B]`) and `unroll` (`[T, B]`).

  Attributes:
    action: dict name -> int32 `[B]` (discrete heads; spatial heads are the
      flattened index y * width + x) or float32 `[B, ...]` (continuous heads).
      With dynamic step multipliers, `action['step_mul']` is the multiplier
      index m in [0, max_step_mul); the env repeats the action m + 1 times.
    logits: dict name -> float32 `[B, num_values]`, same keys as the discrete
      entries of `action` (masked entries hold a large negative number).
    baseline: float32 `[B]`, the critic's value estimate.
  """
  action: dict
  logits: dict
  baseline: np.ndarray


class ArraySpec(NamedTuple):
  """Shape (without batch dim) and dtype of one observation entry."""
  shape: Tuple[int, ...]
  dtype: np.dtype


class DiscreteSpec(NamedTuple):
  """A categorical action head.

  Attributes:
    num_values: number of choices.
    spatial: `(height, width)` when the head picks a point on a feature map
      (then num_values == height * width), else None.
    mask_key: name of a `[num_values]` observation entry whose nonzero
      values mark the available choices, or None when all are available.
  """
  num_values: int
  spatial: Optional[Tuple[int, int]] = None
  mask_key: Optional[str] = None


class ContinuousSpec(NamedTuple):
  """A bounded real-valued action head of the given shape."""
  shape: Tuple[int, ...]
  minimum: float
  maximum: float


class EnvSpec(NamedTuple):
  """Everything an agent needs to know about an environment family.

  Attributes:
    observation_spec: ordered dict name -> `ArraySpec`.
    action_spec: ordered dict name -> `DiscreteSpec` or `ContinuousSpec`.
      A dynamic step multiplier appears as the `'step_mul'` DiscreteSpec.
    name: the `envs.make` name, e.g. 'atari:Pong'.
    stacked_frames: names of observation entries that are frame stacks:
      uint8 `[H, W, K]`, the last K frames on the last axis, oldest first
      (Atari's `frame`). Replay stores each of their frames once per unroll.
  """
  observation_spec: collections.OrderedDict
  action_spec: collections.OrderedDict
  name: str = ''
  stacked_frames: Tuple[str, ...] = ()


STEP_MUL_KEY = 'step_mul'


class Unroll(NamedTuple):
  """A trajectory cut by an actor, as stored in replay and fed to learners.

  T is the unroll length; entries are `[T + 1, ...]` for one trajectory or
  `[T + 1, B, ...]` for a batch (time-major), the first step repeating the
  previous unroll's last one.

  Attributes:
    agent_state: the agent's recurrent state before it processed
      `env_outputs[0]` (`[...]` or `[B, ...]` nest, no time dim).
    env_outputs: `StepOutput` over time.
    agent_outputs: `AgentOutput` over time, as the actor's behaviour policy
      produced them (behaviour logits, baselines, executed actions).
  """
  agent_state: object
  env_outputs: StepOutput
  agent_outputs: AgentOutput
