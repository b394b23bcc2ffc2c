"""What each step of a time-major batch of unrolls stands for: its discount
and the env frames it ran.

T is time, B is batch. Every learner (IMPALA-CLEAR, PPG, SAC, DDPG) discounts
and counts frames the same way. `config` arguments are any config with the
fields read (`discount_per`, `fixed_step_mul`, `step_mul`, `unroll_length`),
e.g. a `clear.algorithms.impala.config.LearnerConfig`.
"""

import tensorflow as tf

from clear import types


def transition_discounts(done, truncated, discounting, step_frames=None,
                         discounting_step_mul=1):
  """`[T, B]` discounts: 0 after a termination, gamma otherwise.

  T is time, B is batch. A truncated episode (time limit, env crash) keeps
  its discount: zeroing it would teach the critic that the episode really
  ended there (`losses.cut_at_truncations` then keeps the next episode out
  of the targets).

  Args:
    done, truncated: bool `[T, B]`, how row t's transition ended.
    discounting: gamma, a python float.
    step_frames: None (every step is discounted by gamma), or `[T, B]`
      frames each step ran: row t is then discounted by
      gamma ** (step_frames_t / discounting_step_mul).
    discounting_step_mul: frames per step that are discounted by exactly
      gamma when `step_frames` is given.

  Returns:
    float32 `[T, B]`.
  """
  terminated = tf.logical_and(done, tf.logical_not(truncated))
  alive = tf.cast(tf.logical_not(terminated), tf.float32)
  if step_frames is None:
    return alive * discounting
  exponent = tf.cast(step_frames, tf.float32) / float(discounting_step_mul)
  return alive * tf.pow(tf.constant(discounting, tf.float32), exponent)


def executed_step_frames(batch: types.Unroll, config):
  """`[T, B]` frames each aligned step ran, or None with per-step discounts.

  With dynamic multipliers they are the executed ones (the behaviour
  actions m, m + 1 frames each), read for every column, replayed ones
  included; with a fixed multiplier every step ran `config.step_mul`.
  """
  if config.discount_per == 'step':
    return None
  if config.fixed_step_mul:
    reward = batch.env_outputs.reward[1:]
    return tf.fill(tf.shape(reward), config.step_mul)
  return batch.agent_outputs.action[types.STEP_MUL_KEY][1:] + 1


def frames_in_batch(batch: types.Unroll, num_replay: int, config):
  """Environment frames the fresh (non-replay) columns of `batch` consumed.

  T is the unroll length, B the batch size; `batch` entries are
  `[T + 1, B, ...]` and the first `num_replay` columns are replayed. With a
  fixed multiplier: T x fresh columns x step_mul. With dynamic ones: the sum
  of (m + 1) over the multipliers m the actors actually executed, read from
  the behaviour actions, never from the learner's re-sampling.
  """
  if config.fixed_step_mul:
    reward = batch.env_outputs.reward
    fresh = (reward.shape[1] or tf.shape(reward)[1]) - num_replay
    return tf.cast(config.unroll_length * fresh * config.step_mul, tf.int64)
  executed = batch.agent_outputs.action[types.STEP_MUL_KEY][1:, num_replay:]
  return tf.reduce_sum(tf.cast(executed, tf.int64) + 1)
