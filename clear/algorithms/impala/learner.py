"""The IMPALA-CLEAR train step and the critic-pretraining step.

A learner owns an agent, its optimizers and the run's counters. Its `step`
takes a batch of unrolls (`clear.types.Unroll` with `[T + 1, B, ...]`
entries), re-unrolls the agent over it, aligns the agent's outputs with the
actor's (shift by one, bootstrap from the last baseline), discounts each
step (per step, or per frame under dynamic step multipliers), cuts the
targets at truncated episode ends (`losses.cut_at_truncations`), computes
`losses.impala_clear_loss`, clips gradients by global norm and applies them.
`critic_step` fits the critic alone to discounted returns.

With a `continual_method`, the loss adds `clear.continual.ewc`'s penalty
(`loss/ewc`) and `consolidate` ends a task: its Fisher and the weights as its
anchor.

The first `num_replay` batch columns are replayed unrolls: they contribute to
the loss like fresh ones and to the cloning terms, but never to the frame
count. Non-finite losses or gradients skip the update (counted in
`num_skipped_steps`), so a poisoned batch never reaches the weights.
"""

import math
from typing import NamedTuple, Optional, Sequence

import sonnet as snt
import tensorflow as tf
import tree

from clear import types
from clear.continual import ewc
from clear.continual import methods as continual_methods
from clear.ops import losses

OPTIMIZERS = ('adam', 'rmsprop')
DISCOUNT_PER = ('step', 'frame')


class LearnerConfig(NamedTuple):
  """Hyperparameters of the IMPALA-CLEAR learner (defaults: CLEAR paper).

  Attributes:
    batch_size: unrolls per batch, replayed ones included.
    num_replay: leading batch columns that come from replay.
    unroll_length: T, agent steps per unroll.
    total_environment_frames: frames over which the learning rate decays
      linearly to zero.
    discounting: discount factor gamma, per agent step (`discount_per`
      'step'), or per `discounting_step_mul` frames ('frame').
    discount_per: 'step' discounts every agent step by `discounting`;
      'frame' discounts a step of k frames by
      discounting ** (k / discounting_step_mul), the semi-Markov discount
      for dynamic step multipliers (k read from the multipliers the actors
      executed), so that a step of `discounting_step_mul` frames keeps
      `discounting`.
    discounting_step_mul: the frames per step at which 'frame' discounting
      equals `discounting` (the env family's default multiplier).
    reward_clipping: a `losses.clip_rewards` mode.
    reward_scaling: rewards are multiplied by this before clipping.
    baseline_cost, entropy_cost, policy_cloning_cost, value_cloning_cost:
      loss weights.
    entropy_cost_end: None keeps `entropy_cost` throughout; a float moves
      the entropy weight linearly from `entropy_cost` to it over
      `total_environment_frames` (see `entropy_cost_at`), as RLlib's
      `entropy_coeff_schedule` does.
    clip_grad_norm: global-norm threshold for the gradients (0 = off).
    clip_advantage: zero negative advantages in the policy gradient.
    learning_rate: the peak learning rate, decayed linearly to 0 over
      `total_environment_frames` (see `learning_rate_at`).
    learning_rate_warmup_frames: frames over which the learning rate ramps
      linearly up from 0 (0 = no ramp; see `learning_rate_at`).
    optimizer: 'adam' or 'rmsprop' (IMPALA's choice).
    adam_beta1, adam_beta2, adam_epsilon: Adam parameters.
    rmsprop_decay, rmsprop_momentum, rmsprop_epsilon: RMSProp parameters
      (IMPALA's Atari decay and momentum; epsilon 1e-5, not IMPALA's 0.01:
      under the root, 0.01 scales the step of every weight whose gradient
      RMS is well below 0.1 down by RMS / 0.1, which on Pong held the LSTM's
      kernels to a few percent of the normalised step).
    rmsprop_epsilon_outside: where RMSProp's epsilon goes. False: under the
      square root, lr g / sqrt(ms + epsilon), as TF1 (IMPALA) and Sonnet;
      True: after it, lr g / (sqrt(ms) + epsilon), as PyTorch (TorchBeast).
      At epsilon 0.01 a weight whose gradients are much smaller than 0.1
      then moves up to 10 times further per step.
    rmsprop_fan_in_reference: 0, or a fan-in N above which RMSProp slows a
      kernel down: a kernel (rank >= 2) with fan-in F > N (the product of
      all its dimensions but the last) moves at lr N / F, biases and smaller
      kernels at lr (see `fan_in_scale`). RMSProp moves every weight by
      about lr per update whatever its gradient's scale, so a unit's
      pre-activation moves by up to lr times the sum of its F inputs: a
      wide layer (the shallow torso's linear layer, F = 3,872 against 256
      to 263 for every other kernel) moves its units an order of magnitude
      further per update than the rest.
    rmsprop_initial_mean_square: where RMSProp's running mean of squared
      gradients starts. 1 is TF1's `RMSPropOptimizer`, which IMPALA used:
      the first updates are about lr x gradient and grow as the mean decays
      towards the gradients' scale. Sonnet starts at 0, which makes the
      first updates about lr / sqrt(epsilon) x sign(gradient) (10 lr at
      epsilon 0.01) on every weight at once.
    fixed_step_mul: whether the step multiplier is constant.
    step_mul: frames per agent step when `fixed_step_mul`.
    jit_compile: compile the forward and backward pass with XLA.
    continual_method: a `continual_methods.CONTINUAL_METHODS` name. 'none'
      (the default) leaves every update and checkpoint as without it;
      'ewc' keeps an anchor and a Fisher per task, 'online_ewc' one anchor
      and a running Fisher (see `clear.continual.ewc`).
    ewc_lambda: lambda, the weight of the EWC penalty
      lambda / 2 * sum_k sum_i F_k,i (theta_i - theta*_k,i)^2.
    ewc_gamma: online EWC's decay of the running Fisher, F <- gamma F +
      F_new at each task boundary (unused by 'ewc').
    ewc_fisher_batches: batches of `batch_size` unrolls of the finished
      task the Fisher is estimated from.
    ewc_fisher_frames: frames of each task's latest fresh unrolls kept to
      draw those batches from (agent steps with dynamic multipliers).
    ewc_num_tasks: the distinct tasks of the sequence, one EWC slot each
      (the run loop sets it from the task sequence).
  """
  batch_size: int = 32
  num_replay: int = 16
  unroll_length: int = 20
  total_environment_frames: int = int(1e9)
  discounting: float = 0.99
  discount_per: str = 'step'
  discounting_step_mul: int = 1
  reward_clipping: str = 'abs_one'
  reward_scaling: float = 1.0
  baseline_cost: float = 0.5
  entropy_cost: float = 0.01
  entropy_cost_end: Optional[float] = None
  policy_cloning_cost: float = 0.01
  value_cloning_cost: float = 0.005
  clip_grad_norm: float = 40.0
  clip_advantage: bool = False
  learning_rate: float = 6e-4
  learning_rate_warmup_frames: int = 0
  optimizer: str = 'adam'
  adam_beta1: float = 0.9
  adam_beta2: float = 0.999
  adam_epsilon: float = 1e-8
  rmsprop_decay: float = 0.99
  rmsprop_momentum: float = 0.0
  rmsprop_epsilon: float = 1e-5
  rmsprop_initial_mean_square: float = 1.0
  rmsprop_epsilon_outside: bool = False
  rmsprop_fan_in_reference: int = 0
  fixed_step_mul: bool = True
  step_mul: int = 1
  jit_compile: bool = False
  continual_method: str = 'none'
  ewc_lambda: float = 1000.0
  ewc_gamma: float = 0.99
  ewc_fisher_batches: int = 100
  ewc_fisher_frames: int = 100_000
  ewc_num_tasks: int = 1


def validate_config(config: LearnerConfig):
  """Raises ValueError with one clear message for impossible settings."""
  if config.batch_size < 1:
    raise ValueError(f'batch_size must be >= 1, got {config.batch_size}.')
  if not 0 <= config.num_replay < config.batch_size:
    raise ValueError(
        f'num_replay must be in [0, batch_size={config.batch_size}) so that '
        f'every batch holds fresh unrolls, got {config.num_replay}.')
  if config.unroll_length < 1:
    raise ValueError(
        f'unroll_length must be >= 1, got {config.unroll_length}.')
  if config.total_environment_frames < 1:
    raise ValueError('total_environment_frames must be >= 1, got '
                     f'{config.total_environment_frames}.')
  if config.learning_rate_warmup_frames < 0:
    raise ValueError('learning_rate_warmup_frames must be >= 0, got '
                     f'{config.learning_rate_warmup_frames}.')
  if config.learning_rate_warmup_frames >= config.total_environment_frames:
    raise ValueError(
        'learning_rate_warmup_frames must be below total_environment_frames '
        f'({config.total_environment_frames}), got '
        f'{config.learning_rate_warmup_frames}: the rate would never reach '
        'its peak.')
  for name in ('entropy_cost', 'entropy_cost_end'):
    value = getattr(config, name)
    if value is not None and not value >= 0:  # NaN fails too.
      raise ValueError(f'{name} must be >= 0, got {value}.')
  if config.optimizer not in OPTIMIZERS:
    raise ValueError(f'optimizer must be one of {OPTIMIZERS}, got '
                     f'{config.optimizer!r}.')
  if config.step_mul < 1:
    raise ValueError(f'step_mul must be >= 1, got {config.step_mul}.')
  if config.rmsprop_fan_in_reference < 0:
    raise ValueError('rmsprop_fan_in_reference must be >= 0, got '
                     f'{config.rmsprop_fan_in_reference}.')
  if config.rmsprop_initial_mean_square < 0:
    raise ValueError('rmsprop_initial_mean_square must be >= 0, got '
                     f'{config.rmsprop_initial_mean_square}.')
  if not 0.0 <= config.discounting <= 1.0:
    raise ValueError(
        f'discounting must be in [0, 1], got {config.discounting}.')
  if config.discount_per not in DISCOUNT_PER:
    raise ValueError(f'discount_per must be one of {DISCOUNT_PER}, got '
                     f'{config.discount_per!r}.')
  if config.discounting_step_mul < 1:
    raise ValueError('discounting_step_mul must be >= 1, got '
                     f'{config.discounting_step_mul}.')
  if config.continual_method not in continual_methods.CONTINUAL_METHODS:
    raise ValueError(f'continual_method must be one of '
                     f'{continual_methods.CONTINUAL_METHODS}, got '
                     f'{config.continual_method!r}.')
  if not (math.isfinite(config.ewc_lambda) and config.ewc_lambda >= 0):
    raise ValueError(f'ewc_lambda must be a finite number >= 0, got '
                     f'{config.ewc_lambda}.')
  if not 0.0 < config.ewc_gamma <= 1.0:
    raise ValueError(f'ewc_gamma must be in (0, 1], got {config.ewc_gamma}.')
  for name in ('ewc_fisher_batches', 'ewc_fisher_frames', 'ewc_num_tasks'):
    if getattr(config, name) < 1:
      raise ValueError(f'{name} must be >= 1, got {getattr(config, name)}.')


def fan_in_scale(shape, reference: int) -> float:
  """min(1, reference / fan-in) for a kernel of `shape`, 1 otherwise.

  The fan-in is the product of all dimensions but the last (`[in, out]`
  matrices, `[h, w, in, out]` convolutions); a vector (a bias) and a
  `reference` of 0 give 1.
  """
  if reference <= 0 or len(shape) < 2:
    return 1.0
  fan_in = math.prod(shape[:-1])
  return min(1.0, reference / fan_in)


class RMSProp(snt.optimizers.RMSProp):
  """Sonnet's RMSProp with the mean squares starting at `initial_mean_square`.

  Sonnet starts them at 0; TF1's `RMSPropOptimizer`, which IMPALA used,
  at 1. The slots are created on the first `apply`, as in Sonnet, so a
  checkpoint restored earlier fills them (delayed restoration). With
  `epsilon_outside` the update is lr g / (sqrt(ms) + epsilon), PyTorch's
  form, instead of lr g / sqrt(ms + epsilon) (the slots are the same).
  With `fan_in_reference` N > 0 each parameter's learning rate is
  lr x `fan_in_scale(shape, N)`.
  """

  def __init__(self, learning_rate, decay, momentum, epsilon,
               initial_mean_square: float, epsilon_outside: bool = False,
               fan_in_reference: int = 0, name: str = 'rms_prop'):
    super().__init__(learning_rate, decay=decay, momentum=momentum,
                     epsilon=epsilon, name=name)
    self._initial_mean_square = float(initial_mean_square)
    self._epsilon_outside = bool(epsilon_outside)
    self._fan_in_reference = int(fan_in_reference)

  def apply(self, updates, parameters):
    if not self._epsilon_outside and not self._fan_in_reference:
      return super().apply(updates, parameters)
    self._initialize(parameters)
    for update, parameter, mom_var, ms_var in zip(updates, parameters,
                                                  self.mom, self.ms):
      if update is None:
        continue
      update = tf.convert_to_tensor(update)  # IndexedSlices -> dense.
      dtype = update.dtype
      decay = tf.cast(self.decay, dtype)
      epsilon = tf.cast(self.epsilon, dtype)
      ms = tf.square(update) * (1. - decay) + ms_var * decay
      if self._epsilon_outside:
        normalised = update / (tf.sqrt(ms) + epsilon)
      else:
        normalised = update * tf.math.rsqrt(ms + epsilon)
      scale = fan_in_scale(parameter.shape.as_list(), self._fan_in_reference)
      mom = (tf.cast(self.momentum, dtype) * mom_var +
             tf.cast(self.learning_rate, dtype) * scale * normalised)
      parameter.assign_sub(mom)
      mom_var.assign(mom)
      ms_var.assign(ms)

  def _initialize(self, parameters: Sequence[tf.Variable]):
    if self.mom:
      return
    def like(p, value, scope):
      with tf.name_scope(scope), tf.device(p.device):
        return tf.Variable(tf.fill(p.shape, tf.cast(value, p.dtype)),
                           trainable=False, name=p.name.split(':')[0])
    self.mom.extend(like(p, 0., 'momentum') for p in parameters)
    self.ms.extend(like(p, self._initial_mean_square, 'rms')
                   for p in parameters)


def make_optimizer(config: LearnerConfig, learning_rate: tf.Variable):
  """The optimizer named by `config.optimizer`."""
  if config.optimizer == 'adam':
    return snt.optimizers.Adam(learning_rate, beta1=config.adam_beta1,
                               beta2=config.adam_beta2,
                               epsilon=config.adam_epsilon)
  return RMSProp(learning_rate, decay=config.rmsprop_decay,
                 momentum=config.rmsprop_momentum,
                 epsilon=config.rmsprop_epsilon,
                 initial_mean_square=config.rmsprop_initial_mean_square,
                 epsilon_outside=config.rmsprop_epsilon_outside,
                 fan_in_reference=config.rmsprop_fan_in_reference)


class AlignedBatch(NamedTuple):
  """A batch with learner and actor outputs aligned, all `[T, B]` nests.

  `target` are the learner's outputs at `env_outputs[t]`; `behaviour` the
  actor's outputs at the same observations; `rewards`, `done`, `truncated`
  describe the transition that followed. `bootstrap_value` is `[B]`.
  """
  target: types.AgentOutput
  behaviour: types.AgentOutput
  rewards: tf.Tensor
  done: tf.Tensor
  truncated: tf.Tensor
  bootstrap_value: tf.Tensor


def align(learner_outputs, batch: types.Unroll) -> AlignedBatch:
  """Shifts a re-unrolled batch so every `[t]` entry describes one transition.

  T is the unroll length, B the batch size. `learner_outputs[t]` were computed
  at `env_outputs[t]`; the actor's `agent_outputs[t + 1]` hold the behaviour
  policy's outputs at that same observation and the action taken there, and
  `env_outputs[t + 1]` the reward and episode end that followed.

  Args:
    learner_outputs: `AgentOutput` of `[T + 1, B, ...]` from `agent.unroll`.
    batch: `Unroll` of `[T + 1, B, ...]`.

  Returns:
    `AlignedBatch` of `[T, B, ...]` entries; bootstrap value `[B]`.
  """
  shift = lambda t: t[1:]
  env = tree.map_structure(shift, batch.env_outputs)
  return AlignedBatch(
      target=tree.map_structure(lambda t: t[:-1], learner_outputs),
      behaviour=tree.map_structure(shift, batch.agent_outputs),
      rewards=tf.cast(env.reward, tf.float32),
      done=tf.cast(env.done, tf.bool),
      truncated=tf.cast(env.truncated, tf.bool),
      bootstrap_value=learner_outputs.baseline[-1])


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


def executed_step_frames(batch: types.Unroll, config: LearnerConfig):
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


def frames_in_batch(batch: types.Unroll, num_replay: int,
                    config: LearnerConfig):
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


def _discrete_heads(aligned: AlignedBatch):
  """Target logits, behaviour logits and actions for every discrete head."""
  names = sorted(aligned.target.logits)
  return ({k: aligned.target.logits[k] for k in names},
          {k: aligned.behaviour.logits[k] for k in names},
          {k: aligned.behaviour.action[k] for k in names})


def clipped_gradients(tape, loss, variables, clip_norm: float):
  """Gradients of `loss` (zeros where unused), clipped by global norm
  (`clip_norm` 0: not clipped).

  Returns:
    (gradients, global norm before clipping).
  """
  grads = tape.gradient(loss, variables)
  grads = [tf.zeros_like(v) if g is None else g
           for g, v in zip(grads, variables)]
  norm = tf.linalg.global_norm(grads)
  if clip_norm > 0:
    grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
  return grads, norm


def learning_rate_at(frames, peak, total_frames, warmup_frames=0):
  """The learning rate after `frames` environment frames.

  A linear decay from `peak` to 0 at `total_frames`, multiplied, while
  `frames < warmup_frames`, by a linear ramp `frames / warmup_frames`:

    peak * min(1, frames / warmup_frames) * max(0, 1 - frames / total_frames)

  Args:
    frames: scalar (float32 tensor or number), frames trained on so far.
    peak: the learning rate the decay starts from.
    total_frames: frames at which the rate reaches 0.
    warmup_frames: length of the ramp; 0 = none.

  Returns:
    Scalar float32 tensor.
  """
  frames = tf.cast(frames, tf.float32)
  rate = peak * tf.maximum(0.0, 1.0 - frames / float(total_frames))
  if warmup_frames > 0:
    rate *= tf.minimum(1.0, frames / float(warmup_frames))
  return rate


def entropy_cost_at(frames, start, end, total_frames):
  """The entropy weight after `frames` environment frames.

  Linear from `start` at 0 frames to `end` at `total_frames`, then `end`:

    start + (end - start) * min(1, frames / total_frames)

  Args:
    frames: scalar (float32 tensor or number), frames trained on so far.
    start, end: the weights at 0 and at `total_frames` frames.
    total_frames: frames at which the weight reaches `end`.

  Returns:
    Scalar float32 tensor.
  """
  progress = tf.minimum(1.0, tf.cast(frames, tf.float32) / float(total_frames))
  return start + (end - start) * progress


def _all_finite(loss, grad_norm):
  return tf.logical_and(tf.math.is_finite(loss), tf.math.is_finite(grad_norm))


def _create_slots(optimizer, variables_fn, graph):
  """Creates `optimizer`'s slots for `variables_fn()` before `graph` is traced.

  Nothing to do (and no variable list to gather, on every update) once
  `graph`, the `tf.function` that applies `optimizer`, has been traced.

  A `tf.function` that creates variables on its first call is traced
  twice; with the slots made before, each update graph is traced once.
  They are made when the first update is built, as before, so a
  checkpoint restored earlier still fills them (delayed restoration) and
  a checkpoint holds the same objects. An agent that builds its weights on
  its first call (Sonnet raises ValueError for its variables until then)
  leaves them to that first trace.
  """
  if graph.experimental_get_tracing_count():
    return
  try:
    variables = list(variables_fn())
  except ValueError:
    return
  optimizer._initialize(variables)  # pylint: disable=protected-access


class ImpalaClearLearner(snt.Module):
  """IMPALA with CLEAR replay: V-trace plus policy and value cloning.

  Attributes:
    agent: the agent being trained (an `agents.Agent`-like module with
      `unroll`, `critic_variables` and `trainable_variables`).
    config: `LearnerConfig`.
    learning_rate: variable, `learning_rate_at` the frames trained on
      before the update being applied.
    num_env_frames, num_steps, num_skipped_steps: int64 counters.
    optimizer, critic_optimizer: Sonnet optimizers of the main phase and of
      critic pretraining.
    continual: `ewc.EwcState` over the agent's trainable variables, or None
      (always None with `continual_method` 'none').
  """

  def __init__(self, agent, config: LearnerConfig, name='impala_clear'):
    super().__init__(name=name)
    validate_config(config)
    self.agent = agent
    self.config = config
    self.learning_rate = tf.Variable(config.learning_rate, dtype=tf.float32,
                                     trainable=False, name='learning_rate')
    self.num_env_frames = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name='num_env_frames')
    self.num_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                 name='num_steps')
    self.num_skipped_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name='num_skipped_steps')
    self.optimizer = make_optimizer(config, self.learning_rate)
    self.critic_optimizer = make_optimizer(config, self.learning_rate)
    self._grads_fn = tf.function(self._loss_and_grads, autograph=False,
                                 jit_compile=config.jit_compile)
    self._critic_grads_fn = tf.function(self._critic_loss_and_grads,
                                        autograph=False,
                                        jit_compile=config.jit_compile)
    self._step_fn = tf.function(self._step, autograph=False)
    self._critic_step_fn = tf.function(self._critic_step, autograph=False)
    self.continual = None
    if config.continual_method != 'none':
      self.continual = ewc.EwcState(
          agent.trainable_variables, config.ewc_num_tasks,
          online=config.continual_method == 'online_ewc')
      self._fisher_grads_fn = tf.function(self._fisher_gradients,
                                          autograph=False,
                                          jit_compile=config.jit_compile)

  # --- Entry points ----------------------------------------------------------

  @snt.no_name_scope
  def step(self, batch: types.Unroll):
    """One IMPALA-CLEAR update on a batch of `[T + 1, B]` unrolls.

    Returns:
      Dict of scalar metric tensors (loss terms, grad norm, learning rate,
      counters, `skipped` when the update was dropped for non-finite
      numbers).
    """
    _create_slots(self.optimizer, lambda: self.agent.trainable_variables,
                  self._step_fn)
    return self._step_fn(batch)

  @snt.no_name_scope
  def critic_step(self, batch: types.Unroll):
    """One critic-pretraining update: baseline loss on discounted returns.

    Only `agent.critic_variables` change; the policy is left untouched.
    """
    _create_slots(self.critic_optimizer, lambda: self.agent.critic_variables,
                  self._critic_step_fn)
    return self._critic_step_fn(batch)

  @snt.no_name_scope
  def trace(self, signature, critic: bool = False):
    """Builds the graph of `step` (and of `critic_step`) without running it.

    Args:
      signature: nest of `tf.TensorSpec` of a batch (an `Unroll`).
      critic: also build `critic_step`'s graph.
    """
    _create_slots(self.optimizer, lambda: self.agent.trainable_variables,
                  self._step_fn)
    self._step_fn.get_concrete_function(signature)
    if critic:
      _create_slots(self.critic_optimizer,
                    lambda: self.agent.critic_variables, self._critic_step_fn)
      self._critic_step_fn.get_concrete_function(signature)

  def consolidate(self, batches, slot: int) -> ewc.FisherSummary:
    """Ends a task for EWC: its Fisher from `batches` (an iterable of
    `[T + 1, B]` `Unroll` batches of its own unrolls), the current weights
    as the anchor of `slot` (its index among the sequence's distinct tasks;
    online EWC uses slot 0 and merges the Fisher into the running one).

    Returns:
      `ewc.FisherSummary` of the new task's Fisher.
    """
    if self.continual is None:
      raise ValueError('consolidate needs a continual_method other than '
                       "'none'.")
    count = [0]

    def gradients():
      for batch in batches:
        count[0] += 1
        yield self._fisher_grads_fn(batch)

    fisher = ewc.fisher_diagonal(gradients())
    self.continual.consolidate(
        0 if self.continual.online else slot,
        self.agent.trainable_variables, fisher, self.config.ewc_gamma)
    return ewc.summarize_fisher(fisher, count[0])

  # --- Shared pieces -------------------------------------------------------

  def _prepare(self, batch: types.Unroll):
    learner_outputs, _ = self.agent.unroll(batch.agent_outputs.action,
                                           batch.env_outputs,
                                           batch.agent_state)
    aligned = align(learner_outputs, batch)
    rewards = losses.clip_rewards(aligned.rewards * self.config.reward_scaling,
                                  self.config.reward_clipping)
    discounts = transition_discounts(
        aligned.done, aligned.truncated, self.config.discounting,
        executed_step_frames(batch, self.config),
        self.config.discounting_step_mul)
    rewards, discounts = losses.cut_at_truncations(
        rewards, discounts, aligned.target.baseline, aligned.truncated)
    return aligned, rewards, discounts

  def _decay_learning_rate(self):
    # The rate at the frames before the update (a warm-up's first is 0).
    self.learning_rate.assign(learning_rate_at(
        self.num_env_frames, self.config.learning_rate,
        self.config.total_environment_frames,
        self.config.learning_rate_warmup_frames))

  @snt.no_name_scope
  def _update(self, batch, grads_fn, optimizer, variables, loss_key, prefix):
    """Computes gradients, applies them if finite, counts, summarises."""
    grads, metrics = grads_fn(batch)
    skipped = self._apply_if_finite(
        optimizer, grads, variables(), metrics[loss_key],
        metrics['grad_norm'],
        frames_in_batch(batch, self.config.num_replay, self.config))
    metrics.update(self._counters(skipped))
    self._write_summaries(metrics, batch, prefix=prefix)
    return metrics

  @snt.no_name_scope
  def _apply_if_finite(self, optimizer, grads, variables, loss, grad_norm,
                       frames):
    """Applies `grads` and counts frames, or skips a non-finite update."""
    finite = _all_finite(loss, grad_norm)

    def apply():
      self._decay_learning_rate()
      optimizer.apply(grads, variables)
      self.num_env_frames.assign_add(frames)
      self.num_steps.assign_add(1)
      return tf.constant(False)

    def skip():
      self.num_skipped_steps.assign_add(1)
      return tf.constant(True)

    return tf.cond(finite, apply, skip)

  # --- Main IMPALA-CLEAR phase --------------------------------------------

  def _entropy_cost(self):
    """The entropy weight at the frames before this update."""
    config = self.config
    if config.entropy_cost_end is None:
      return tf.constant(config.entropy_cost, tf.float32)
    return entropy_cost_at(self.num_env_frames, config.entropy_cost,
                           config.entropy_cost_end,
                           config.total_environment_frames)

  def _clear_loss(self, batch, num_replay, entropy_cost, policy_cloning_cost,
                  value_cloning_cost):
    """`losses.impala_clear_loss` of a re-unrolled batch.

    Returns:
      (aligned batch, rewards, loss, `losses.ImpalaClearLossExtra`).
    """
    aligned, rewards, discounts = self._prepare(batch)
    target_logits, behaviour_logits, actions = _discrete_heads(aligned)
    loss, extra = losses.impala_clear_loss(
        target_logits=target_logits,
        behaviour_logits=behaviour_logits,
        actions=actions,
        values=aligned.target.baseline,
        bootstrap_value=aligned.bootstrap_value,
        behaviour_values=aligned.behaviour.baseline,
        rewards=rewards,
        discounts=discounts,
        num_replay=num_replay,
        baseline_cost=self.config.baseline_cost,
        entropy_cost=entropy_cost,
        policy_cloning_cost=policy_cloning_cost,
        value_cloning_cost=value_cloning_cost,
        clip_advantage=self.config.clip_advantage)
    return aligned, rewards, loss, extra

  def _loss_and_grads(self, batch: types.Unroll):
    entropy_cost = self._entropy_cost()
    with tf.GradientTape() as tape:
      aligned, rewards, loss, extra = self._clear_loss(
          batch, self.config.num_replay, entropy_cost,
          self.config.policy_cloning_cost, self.config.value_cloning_cost)
      if self.continual is not None:
        penalty = self.continual.penalty(self.agent.trainable_variables,
                                         self.config.ewc_lambda)
        loss = loss + penalty
    grads, grad_norm = clipped_gradients(tape, loss, self.agent.trainable_variables,
                                         self.config.clip_grad_norm)
    steps = tf.cast(tf.size(rewards), tf.float32)
    metrics = {
        'loss/total': loss,
        'loss/policy_gradient': extra.policy_gradient,
        'loss/baseline': extra.baseline,
        'loss/entropy': extra.entropy,
        'loss/policy_cloning': extra.policy_cloning,
        'loss/value_cloning': extra.value_cloning,
        'grad_norm': grad_norm,
        # Mean policy entropy per step, summed over heads (entropy term is
        # sum p log p, i.e. minus the entropy).
        'policy/entropy': -extra.entropy / steps,
        'policy/entropy_cost': entropy_cost,
        'policy/mean_log_rho': tf.reduce_mean(extra.log_rhos),
        'value/mean_baseline': tf.reduce_mean(aligned.target.baseline),
        'value/mean_vtrace_target': tf.reduce_mean(extra.vs),
    }
    if self.continual is not None:
      metrics['loss/ewc'] = penalty
    return grads, metrics

  def _fisher_gradients(self, batch: types.Unroll):
    """Gradients of the policy-gradient plus baseline loss of a batch of
    fresh unrolls (no entropy, no cloning), through the same re-unroll,
    alignment and V-trace as `_loss_and_grads`: one term of the Fisher."""
    variables = self.agent.trainable_variables
    with tf.GradientTape() as tape:
      _, _, _, extra = self._clear_loss(batch, 0, 0.0, 0.0, 0.0)
      loss = extra.policy_gradient + self.config.baseline_cost * extra.baseline
    grads = tape.gradient(loss, variables)
    return [tf.zeros_like(v) if g is None else g
            for g, v in zip(grads, variables)]

  @snt.no_name_scope
  def _step(self, batch: types.Unroll):
    """`step`'s graph."""
    return self._update(batch, self._grads_fn, self.optimizer,
                        lambda: self.agent.trainable_variables, 'loss/total',
                        prefix='')

  # --- Critic pretraining ---------------------------------------------------

  def _critic_loss_and_grads(self, batch: types.Unroll):
    with tf.GradientTape() as tape:
      aligned, rewards, discounts = self._prepare(batch)
      returns = losses.discounted_returns(rewards, discounts,
                                          aligned.bootstrap_value)
      loss = 0.5 * tf.reduce_sum(
          tf.square(returns - aligned.target.baseline))
    grads, grad_norm = clipped_gradients(tape, loss, self.agent.critic_variables,
                                         self.config.clip_grad_norm)
    return grads, {'loss/baseline': loss, 'grad_norm': grad_norm,
                   'value/mean_baseline': tf.reduce_mean(
                       aligned.target.baseline),
                   'value/mean_return': tf.reduce_mean(returns)}

  @snt.no_name_scope
  def _critic_step(self, batch: types.Unroll):
    """`critic_step`'s graph."""
    return self._update(batch, self._critic_grads_fn, self.critic_optimizer,
                        lambda: self.agent.critic_variables, 'loss/baseline',
                        prefix='critic_pretrain/')

  # --- Bookkeeping ----------------------------------------------------------

  def _counters(self, skipped):
    return {'learning_rate': tf.identity(self.learning_rate),
            'num_env_frames': tf.identity(self.num_env_frames),
            'num_steps': tf.identity(self.num_steps),
            'num_skipped_steps': tf.identity(self.num_skipped_steps),
            'skipped': skipped}

  @snt.no_name_scope
  def _write_summaries(self, metrics, batch, prefix):
    """Writes scalars and action histograms to the default summary writer,
    stepped by env frames like every other summary of a run (the update
    count is the `num_steps` scalar)."""
    step = self.num_env_frames
    for name, value in metrics.items():
      if name != 'skipped':
        tf.summary.scalar(prefix + name, value, step=step)
    if not prefix:
      for name, action in batch.agent_outputs.action.items():
        tf.summary.histogram(f'action/{name}', action[1:], step=step)
