"""The runtime side the off-policy learners (SAC, DDPG) share.

`OffPolicyPolicy` is the `clear.algorithms.policy.Policy` both algorithms build
on: inserting fresh unrolls into the policy's own replay, learning_starts,
updates per step, many gradient updates per `tf.function` call, skipped
non-finite updates, counters, summaries, checkpointables and acting
weights. The rest of their shared machinery sits beside it:

- `clear.algorithms.off_policy.config`: the config fields they share and their
  checks;
- `clear.algorithms.off_policy.networks`: observations, MLPs, the critic
  ensemble, the action layout and target networks;
- `clear.algorithms.off_policy.segments`: replayed segments and the transitions
  (and episode ends) they hold;
- `clear.algorithms.off_policy.losses`: Q targets, the critic-ensemble loss and
  replay priorities.
"""

import abc
import math
from typing import Dict, List

import numpy as np
import sonnet as snt
import tensorflow as tf
import tree

from clear import types
from clear.algorithms import policy as policy_lib
from clear.algorithms.off_policy import networks
from clear.algorithms.off_policy import segments as off_policy_replay
from clear.ops import guards
from clear.ops import transitions
from clear.replay import buffer as replay_lib

# Bytes of sampled segments sent to one tf.function call at most; more
# updates than fit are split over several calls (priorities are refreshed
# between calls).
SAMPLE_BYTES_PER_CALL = 32 * 2**20


def make_adam(learning_rate: float, variables) -> snt.optimizers.Adam:
  """Adam whose slots exist already (so updates can run in a while loop)."""
  optimizer = snt.optimizers.Adam(learning_rate)
  variables = list(variables)
  # A zero update creates the slots and changes nothing (m = v = 0 give a
  # zero step); the step counter is then reset.
  optimizer.apply([tf.zeros_like(v) for v in variables], variables)
  optimizer.step.assign(0)
  return optimizer



class Counters(tf.Module):
  """The learner's counters (int64) and its fractional update credit."""

  def __init__(self):
    super().__init__(name='counters')
    self.num_env_frames = guards.step_counter('num_env_frames')
    self.num_updates = guards.step_counter('num_updates')
    self.num_skipped_steps = guards.step_counter('num_skipped_steps')
    # Updates owed but not yet made (updates_per_step x new transitions
    # accumulates here; whole updates are taken out).
    self.update_credit = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                     name='update_credit')

  def checkpointable(self) -> tf.Module:
    """The counters under their names in checkpoints (the update count's
    is `num_steps`)."""
    saved = tf.Module(name='counters')
    saved.num_env_frames = self.num_env_frames
    saved.num_steps = self.num_updates
    saved.num_skipped_steps = self.num_skipped_steps
    saved.update_credit = self.update_credit
    return saved


class OffPolicyPolicy(policy_lib.Policy, abc.ABC):
  """The runtime side of an off-policy learner with its own replay.

  Subclasses build `self.agent` (a `snt.Module` with every acting variable
  and an `rng` Generator) in `_build_agent`, the learner's other networks
  in `_build_learner`, and implement `_act` (one acting step) and
  `_update` (one gradient update on time-major transitions).

  `learn(batch)` (time-major `Unroll` `[T + 1, B]`):
    1. inserts the B unrolls into the replay buffer and counts their frames;
    2. until `learning_starts` transitions are stored, stops there (actors
       act uniformly at random meanwhile, when `random_actions_until_start`);
    3. adds updates_per_step x B x T to an update credit and makes as many
       whole updates as the credit holds. Each update samples
       ceil(sample_batch_size / sample_length) segments of `sample_length`
       transitions and learns from all of them. All updates of one call run
       inside one `tf.function` (a while loop), their segments sampled up
       front (in chunks of at most `SAMPLE_BYTES_PER_CALL`), so priorities
       set by an update reach the sampler at the next chunk.
  An update whose losses or gradients are not finite changes nothing and is
  counted in `num_skipped_steps`.
  """

  algorithm = 'off-policy'

  def __init__(self, spec: types.EnvSpec,
               agent_config: policy_lib.AgentConfig, learner_config=None,
               seed: int = 0):
    super().__init__(spec)
    self.agent_config = agent_config
    self.config = learner_config
    self._observation_keys = networks.observation_keys(spec)
    self._hidden_sizes = networks.hidden_sizes(agent_config)
    self.layout = networks.ActionLayout(spec.action_spec, self.algorithm)
    self._init_rng = np.random.default_rng(seed)
    self.agent = self._build_agent(seed)
    self._act_fn = tf.function(self._act, autograph=False)
    self.learning = learner_config is not None
    if not self.learning:
      return
    self._validate(learner_config, spec)
    c = learner_config
    self.counters = Counters()
    self.num_segments = int(math.ceil(c.sample_batch_size / c.sample_length))
    self.buffer = replay_lib.ReplayBuffer(
        max(1, c.replay_capacity // c.unroll_length), 'fifo',
        seed=seed, prioritized=c.prioritized,
        priority_exponent=c.priority_exponent,
        slots_per_item=c.unroll_length - c.sample_length + 1)
    self.agent.random_actions.assign(
        1.0 if c.random_actions_until_start else 0.0)
    self._build_learner()
    self._update_fn = None

  # --- To implement -----------------------------------------------------------

  @abc.abstractmethod
  def _validate(self, config, spec):
    """Raises ValueError for impossible settings."""

  @abc.abstractmethod
  def _build_agent(self, seed: int) -> snt.Module:
    """The acting networks and variables, with an `rng` Generator."""

  @abc.abstractmethod
  def _build_learner(self):
    """Learner-only networks, optimizers, target updaters, and the list
    `self.metric_names` of what `_update` reports."""

  @abc.abstractmethod
  def _act(self, observation):
    """One acting step on `[B]` observations -> `types.AgentOutput`."""

  @abc.abstractmethod
  def _update(self, transitions_: off_policy_replay.Transitions,
              weights: tf.Tensor):
    """One update; returns (metrics dict of scalars, applied bool,
    priorities float32 `[K]`), applying nothing when not finite (see
    `_apply_if_finite`).

    The metric names must be those of `self.metric_names`.
    """

  @abc.abstractmethod
  def _learner_checkpointables(self) -> Dict[str, object]:
    """Learner-only trackables, by name."""

  # --- Acting -----------------------------------------------------------------

  def initial_state(self, batch_size):
    del batch_size
    return {}  # Feed-forward networks.

  def act(self, env_output, prev_action, state):
    del prev_action
    observation = {k: env_output.observation[k]
                   for k in self._observation_keys}
    output = self._act_fn(observation)
    return policy_lib.to_numpy(output), state

  def acting_variables(self) -> List[tf.Variable]:
    return list(self.agent.variables)

  def sampling_rng(self):
    return self.agent.rng

  # --- Learning ---------------------------------------------------------------

  def _segment_signature(self):
    """TensorSpecs of `[n_updates, K, L + 1, ...]` segments."""
    L, K = self.config.sample_length, self.num_segments
    lead = [None, K, L + 1]
    obs = {k: tf.TensorSpec(lead + list(s.shape), s.dtype)
           for k, s in self.spec.observation_spec.items()
           if k in self._observation_keys}
    zero = policy_lib.zero_agent_output(self.spec, 1).action
    action = {k: tf.TensorSpec(lead + list(v.shape[1:]), v.dtype)
              for k, v in zero.items()}
    return (off_policy_replay.Segments(
        obs, action, tf.TensorSpec(lead, tf.float32),
        tf.TensorSpec(lead, tf.bool), tf.TensorSpec(lead, tf.bool)),
            tf.TensorSpec([None, K], tf.float32))

  def _get_update_fn(self):
    if self._update_fn is None:
      signature = self._segment_signature()
      # With XLA the whole loop of updates is one compiled program (about
      # 3x faster than compiling single updates for small networks); each
      # new number of updates per call compiles once.
      self._loop_fn = tf.function(self._update_loop, autograph=False,
                                  jit_compile=self.config.jit_compile)
      self._update_fn = tf.function(
          self._update_many, input_signature=signature, autograph=False)
    return self._update_fn

  def _update_many(self, segments: off_policy_replay.Segments, weights):
    """`_update_loop`, then summaries of the averaged metrics."""
    metrics, applied, priorities = self._loop_fn(segments, weights)
    step = self.counters.num_env_frames  # As every summary of a run.
    for name, value in metrics.items():
      tf.summary.scalar(name, value, step=step)
    return metrics, applied, priorities

  def _update_transitions(self, segments: off_policy_replay.Segments, weights):
    """One update on `[K, L + 1]` segments (see `_update`)."""
    c = self.config
    return self._update(off_policy_replay.transitions(
        segments, c.discounting, c.reward_scaling), weights)

  def _update_loop(self, segments: off_policy_replay.Segments, weights):
    """Runs one update per leading entry of `segments` in a while loop.

    Returns:
      (dict of metrics averaged over the finite updates, applied bool
      `[n]`, priorities float32 `[n, K]`).
    """
    n = tf.shape(weights)[0]
    metric_names = sorted(self.metric_names)
    applied_ta = tf.TensorArray(tf.bool, size=n)
    priorities_ta = tf.TensorArray(tf.float32, size=n)

    def body(i, sums, applied_ta, priorities_ta):
      metrics, finite, priorities = self._update_transitions(
          tree.map_structure(lambda x: x[i], segments), weights[i])
      sums = [s + tf.where(finite, tf.cast(metrics[k], tf.float32), 0.0)
              for s, k in zip(sums, metric_names)]
      with tf.control_dependencies([finite]):
        return (i + 1, sums, applied_ta.write(i, finite),
                priorities_ta.write(i, priorities))

    zeros = [tf.constant(0.0)] * len(metric_names)
    _, sums, applied_ta, priorities_ta = tf.while_loop(
        lambda i, *_: i < n, body,
        (tf.constant(0), zeros, applied_ta, priorities_ta),
        parallel_iterations=1)
    applied = applied_ta.stack()
    count = tf.maximum(tf.reduce_sum(tf.cast(applied, tf.float32)), 1.0)
    metrics = {k: s / count for k, s in zip(metric_names, sums)}
    return metrics, applied, priorities_ta.stack()

  def trace(self, example_batch, critic=False):
    del example_batch, critic
    self._get_update_fn().get_concrete_function()

  def _importance_exponent(self) -> float:
    """beta, annealed linearly from importance_exponent to 1 over the run."""
    c = self.config
    progress = min(1.0, self.num_env_frames / c.total_environment_frames)
    return c.importance_exponent + (1.0 - c.importance_exponent) * progress

  def _bytes_per_update(self) -> int:
    sig, _ = self._segment_signature()
    total = 0
    for spec in tree.flatten(sig):
      total += int(np.prod(spec.shape[1:])) * spec.dtype.size
    return max(1, total)

  def learn(self, batch: types.Unroll) -> Dict[str, np.ndarray]:
    """Stores the batch's unrolls, then makes the updates they pay for.

    Args:
      batch: time-major `Unroll` `[T + 1, B]` of fresh unrolls.

    Returns:
      Dict of numpy scalars: the update metrics averaged over this call's
      finite updates (none before learning starts), `updates` (made in this
      call), `skipped` (one was not finite), `num_skipped_steps`,
      `num_updates`, `num_env_frames` and `replay/size` (unrolls stored).
    """
    if not self.learning:
      raise NotImplementedError(f'{type(self).__name__} was built without a '
                                'learner config: it only acts.')
    c = self.config
    frames = int(transitions.frames_in_batch(batch, 0, c))
    self.counters.num_env_frames.assign_add(frames)
    num_unrolls = np.shape(batch.env_outputs.reward)[1]
    self.buffer.insert_batch(replay_lib.swap_time_and_batch(batch),
                             num_unrolls)
    stats = {}
    num_updates = 0
    skipped = False
    if len(self.buffer) * c.unroll_length >= c.learning_starts:
      self.agent.random_actions.assign(0.0)
      credit = (float(self.counters.update_credit.numpy()) +
                c.updates_per_step * num_unrolls * c.unroll_length)
      num_updates = int(credit)
      self.counters.update_credit.assign(credit - num_updates)
      chunk = max(1, SAMPLE_BYTES_PER_CALL // self._bytes_per_update())
      done = 0
      sums, count = {}, 0
      while done < num_updates:
        m = min(chunk, num_updates - done)
        metrics, applied = self._learn_chunk(m)
        num_applied = int(np.sum(applied))
        skipped = skipped or num_applied < m
        for k, v in metrics.items():
          sums[k] = sums.get(k, 0.0) + float(v) * num_applied
        count += num_applied
        done += m
      stats = {k: np.float32(v / max(count, 1)) for k, v in sums.items()}
    stats.update({
        'num_env_frames': np.int64(self.num_env_frames),
        'num_updates': np.int64(self.num_updates),
        'num_skipped_steps': np.int64(
            self.counters.num_skipped_steps.numpy()),
        'skipped': np.bool_(skipped),
        'updates': np.int64(num_updates),
        'replay/size': np.int64(len(self.buffer)),
    })
    return stats

  def _learn_chunk(self, m: int):
    """Samples and runs m updates; returns (metrics, applied `[m]`)."""
    c = self.config
    beta = self._importance_exponent() if c.prioritized else 0.0
    segments, draw = off_policy_replay.sample_segments(
        self.buffer, m * self.num_segments, c.sample_length, beta)
    segments = tree.map_structure(
        lambda x: x.reshape((m, self.num_segments) + x.shape[1:]), segments)
    segments = segments._replace(
        observation={k: segments.observation[k]
                     for k in self._observation_keys})
    weights = draw.weights.reshape(m, self.num_segments)
    metrics, applied, priorities = self._get_update_fn()(segments, weights)
    applied = applied.numpy()
    if c.prioritized and applied.any():
      rows = np.repeat(applied, self.num_segments)
      values = priorities.numpy().reshape(-1)
      rows &= np.isfinite(values)
      self.buffer.update_priorities(draw.indices[rows], draw.slots[rows],
                                    values[rows])
    return {k: v.numpy() for k, v in metrics.items()}, applied

  def _apply_if_finite(self, checks, apply_fn):
    """Runs `apply_fn` and counts a step when every tensor in `checks`
    (losses, gradient norms) is finite, else counts a skipped one; returns
    whether it applied (bool scalar)."""
    return guards.apply_if_finite(guards.all_finite(checks), apply_fn,
                                  self.counters.num_updates,
                                  self.counters.num_skipped_steps)

  # --- Pieces both updates use ------------------------------------------------

  def _make_critics(self, name: str) -> networks.CriticEnsemble:
    """A `num_critics` ensemble for this spec (see `make_critics`)."""
    return networks.make_critics(self.config.num_critics, self.spec,
                                 self.layout, self._hidden_sizes,
                                 self._init_rng, name)

  def _features(self, observation):
    """float32 `[B, D]` of `[B]` observations."""
    return networks.flat_observation(observation, self._observation_keys)

  def _segment_features(self, tr: off_policy_replay.Transitions):
    """float32 `[(L + 1) K, D]`: every observation of `[L + 1, K]`
    transitions, time-major rows."""
    return networks.flat_observation(
        {k: networks.merge_leading(tr.observation[k])
         for k in self._observation_keys}, self._observation_keys)

  # --- Bookkeeping ------------------------------------------------------------

  @property
  def num_env_frames(self):
    return int(self.counters.num_env_frames.numpy())

  @property
  def num_updates(self):
    return int(self.counters.num_updates.numpy())

  def add_env_frames(self, frames):
    self.counters.num_env_frames.assign_add(int(frames))

  def checkpointables(self):
    return {'agent': self.agent, 'counters': self.counters.checkpointable(),
            **self._learner_checkpointables()}

  def acting_checkpointables(self):
    return {'agent': self.agent}

  def _init_twin(self):
    return type(self)(self.spec, self.agent_config, self.config)

  def _weight_checkpointables(self):
    return {k: v for k, v in self.checkpointables().items()
            if k == 'agent' or k.endswith(('critics', 'actor'))}

  def replay_buffers(self):
    return {'transitions': self.buffer}
