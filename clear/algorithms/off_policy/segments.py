"""Replayed segments of the off-policy learners (SAC, DDPG).

T is time, B is batch, K the number of segments, L their length in
transitions. The policy's `clear.replay.buffer.ReplayBuffer` holds whole
unrolls `[T + 1]`; a learner samples windows of L + 1 steps (L transitions) out
of them, uniformly or by priority (`sample_segments`), and `transitions` lines
a window up into time-major transitions.

Transitions and episode ends. In a window, transition t goes from
observation t to observation t + 1 with the action `agent_outputs.action[t +
1]`, and the reward, `done` and `truncated` of `env_outputs[t + 1]`. After a
`done` the environment has already reset, so observation t + 1 belongs to
the next episode and is never bootstrapped from:
- termination: the discount is 0
  (`clear.ops.transitions.transition_discounts`);
- truncation (time limit): the last observation of the episode is lost, so
  the transition cannot be learnt from. It is masked out of the critic loss
  (weight 0), and for the estimator its target is replaced by the target
  value of its own start state, V(x_t) (reward V(x_t), discount 0), so
  multi-step targets of earlier transitions stop there with a one-step
  bootstrap from V(x_t) instead of running into the next episode (see
  `clear.algorithms.off_policy.losses.q_targets`).
"""

from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tree

from clear import types
from clear.ops import transitions as transitions_lib
from clear.replay import buffer as replay_lib


class Segments(NamedTuple):
  """Windows of L + 1 steps cut from stored unrolls, batch-major `[K, L + 1]`.

  Attributes:
    observation: dict of `[K, L + 1, ...]`.
    action: dict of `[K, L + 1, ...]`, `agent_outputs.action` (entry t + 1
      was taken at observation t; entry t led to observation t).
    reward: float32 `[K, L + 1]`, `env_outputs.reward`.
    done: bool `[K, L + 1]`.
    truncated: bool `[K, L + 1]`.
  """
  observation: dict
  action: dict
  reward: np.ndarray
  done: np.ndarray
  truncated: np.ndarray


def segments_from_unrolls(unrolls: types.Unroll) -> Segments:
  """The parts of batch-major unrolls `[K, L + 1]` that learners read."""
  env = unrolls.env_outputs
  return Segments(env.observation, unrolls.agent_outputs.action, env.reward,
                  env.done, env.truncated)


def sample_segments(buffer: replay_lib.ReplayBuffer, num_segments: int,
                    length: int, importance_exponent: float = 0.0):
  """Draws `num_segments` windows of `length` transitions from `buffer`.

  The buffer's slots are the window starts (`slots_per_item` = T - length
  + 1), drawn uniformly or by priority.

  Returns:
    (`Segments` `[K, length + 1]`, `replay.SlotSample` of the draws).
  """
  draw = buffer.sample_slots(num_segments, importance_exponent)
  windows = buffer.get_windows(draw.indices, draw.slots, length + 1)
  return segments_from_unrolls(windows), draw


class Transitions(NamedTuple):
  """A segment lined up as time-major transitions (L of them, K segments).

  Attributes:
    observation: dict of `[L + 1, K, ...]`, x_0 .. x_L.
    prev_action: dict of `[L + 1, K, ...]`, the action that led to x_t.
    first: bool `[L + 1, K]`, x_t is the first observation of an episode.
    action: dict of `[L, K, ...]`, a_t taken at x_t.
    reward: float32 `[L, K]`, r_t (scaled).
    discount: float32 `[L, K]`, gamma, or 0 where transition t terminated.
    truncated: bool `[L, K]`, transition t ended its episode by truncation.
  """
  observation: dict
  prev_action: dict
  first: tf.Tensor
  action: dict
  reward: tf.Tensor
  discount: tf.Tensor
  truncated: tf.Tensor


def transitions(segments: Segments, discounting: float,
                reward_scaling: float = 1.0) -> Transitions:
  """Batch-major segments `[K, L + 1]` -> time-major `Transitions`."""
  time_major = lambda x: tf.transpose(
      x, [1, 0] + list(range(2, x.shape.rank)))
  seg = tree.map_structure(lambda x: time_major(tf.convert_to_tensor(x)),
                           segments)
  done = tf.cast(seg.done, tf.bool)
  truncated = tf.cast(seg.truncated, tf.bool)
  return Transitions(
      observation=seg.observation,
      prev_action=seg.action,
      first=done,
      action=tree.map_structure(lambda a: a[1:], seg.action),
      reward=tf.cast(seg.reward[1:], tf.float32) * reward_scaling,
      discount=transitions_lib.transition_discounts(done[1:], truncated[1:],
                                                    discounting),
      truncated=truncated[1:])

