"""Soft Actor-Critic (Haarnoja et al. 2018, 1812.05905) for clear's runtime.

T is time, B is batch, N is the number of critics, A the number of discrete
actions, C the number of continuous action entries.

Action types (as in ALF's SAC):
- continuous: a tanh-squashed Gaussian actor, reparameterised samples, and
  critics Q_i(s, a) on [observation; action scaled to [-1, 1]];
- discrete (one head): no actor network. Critics are Q networks Q_i(s, .)
  with one output per action and the policy is p(a|s) proportional to
  exp(min_i Q_i(s, a) / alpha_d);
- mixed (one discrete head and continuous heads): the actor samples the
  continuous part; the critics take [observation; continuous action] and
  output one value per discrete action; the discrete part is then drawn
  from exp(min_i Q_i(s, a_c, .) / alpha_d). Each part has its own
  temperature and target entropy.

Learning (every update, on K replayed segments of L transitions):
- the policy is evaluated at every observation of the segment (one sample
  per observation, reused by the actor, alpha and critic terms);
- critic targets: "values" are the target critics' min_i Q at the policy's
  actions (expected under the discrete policy), and the entropy bonus
  -alpha (log pi - w log prior) of the next observation is added to the
  reward, times the discount, so that multi-step estimators (td1,
  td_lambda) collect it at every step. Terminations zero the discount (and
  with it the bonus); truncated transitions are masked out (see
  `clear.off_policy`). The estimator is `value_estimator` from
  `clear.value_estimators`;
- actor: alpha_c reg - min_i Q_i(s, a~pi) (mixed: the Q expected under the
  discrete policy, probabilities held fixed);
- temperatures: log_alpha (-reg - target_entropy), reg held fixed, alpha
  clipped at exp(max_log_alpha) when given;
- reg = log pi(a|s) - w log prior(a|s) (w = prior_kl_weight with a prior,
  else 0): with a prior actor the policy is regularised towards it by
  KL(pi || prior) instead of maximising its entropy ('uniform': uniform over
  the bounds / choices; 'same_action': half uniform, half a Gaussian of
  std 0.1 x range at the previous action, or the previous discrete action).

Where this differs from ALF's SAC: a transition whose episode was truncated
is left out of the critic loss (ALF keeps its discount and bootstraps from
the episode's last observation, which clear's auto-resetting environments
do not keep; see `clear.off_policy`); the discrete part's entropy is an
exact sum over the actions instead of the log-probability of one sampled
action; the actor and temperature losses use the transitions' start
states.

Config fields (`SACConfig`, defaults in brackets; the run loop reads the
first seven). The defaults are the ones checked on gym:Pendulum-v1 and
gym:CartPole-v1 with 64-unit MLPs (see the report of the learning checks):
against the usual SAC settings (Haarnoja et al.: learning rates 3e-4,
batches of 256) they use learning rates of 1e-3 and batches of 128, which
learn these small tasks in fewer updates; ALF's log alpha starts at 0 as
here.
  batch_size [4]: fresh unrolls per `learn` call (e.g. envs_per_actor).
  num_replay [0]: must stay 0; the policy owns its replay buffer.
  unroll_length [8]: T of the actors' unrolls.
  total_environment_frames [100_000]: run length (anneals the importance
    exponent to 1).
  fixed_step_mul [True], step_mul [1]: frames per agent step (dynamic
    multipliers are not supported).
  discounting [0.99]: gamma.
  reward_scaling [1.0]: rewards are multiplied by this.
  actor_learning_rate [1e-3]: Adam learning rate of the actor.
  critic_learning_rate [1e-3]: Adam learning rate of the critics.
  alpha_learning_rate [1e-3]: Adam learning rate of the temperature(s).
  tau [0.005]: how far the target networks move towards the critics at
    each target update (1 copies them).
  target_update_period [1]: updates between two target-network moves.
  num_critics [2]: critics in the ensemble (min over them).
  target_entropy [None]: None derives it from the action spec (continuous:
    -1 per entry of the [-1, 1]-scaled action, i.e. sum(log half range - 1)
    in the env's units; discrete: 0.3 log A; with a prior actor
    -target_kld_per_dim per entry); a float; a callable of each head's spec
    (summed per part); for mixed actions a (discrete, continuous) pair.
  initial_alpha [1.0]: initial temperature(s).
  max_log_alpha [None]: cap on log alpha.
  prior_actor ['']: the prior the policy is regularised towards by KL
    instead of maximising its entropy: '' (none), 'uniform' or
    'same_action'.
  prior_kl_weight [1.0]: w, the weight of log prior in the regulariser
    log pi - w log prior (with a prior actor).
  target_kld_per_dim [3.0]: with a prior actor, the default target
    entropy is -target_kld_per_dim per action entry.
  value_estimator ['td0']: Q-target estimator over a segment ('td0',
    'td1', 'td_lambda', 'gae').
  td_lambda [0.95]: lambda of the 'td_lambda' and 'gae' estimators.
  sample_length [1]: L, transitions per replayed segment (raise it with
    td1/td_lambda for n-step-like targets).
  sample_batch_size [128]: transitions per update (ceil(this / L)
    segments).
  replay_capacity [1_000_000]: transitions kept (FIFO).
  prioritized [False]: sample segments by priority, the RMS TD error of
    the segment, instead of uniformly.
  priority_exponent [0.6]: alpha of prioritized replay: segments are drawn
    in proportion to priority^alpha (0 = uniform).
  importance_exponent [0.4]: beta of prioritized replay's importance
    weights, annealed linearly to 1 over the run.
  learning_starts [1000]: stored transitions before the first update.
  random_actions_until_start [True]: actors act uniformly at random until
    then.
  updates_per_step [1.0]: gradient updates per new transition.
  clip_grad_norm [0.0]: global-norm clipping of each part's gradients
    (0 = off).
  jit_compile [True]: compile the updates with XLA (about 3x faster for
    small networks on CPU; each new number of updates per call compiles
    once).
"""

import math
from typing import Callable, NamedTuple, Optional, Tuple, Union

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import heads
from agents import initializers
from clear import learner as learner_lib
from clear import off_policy
from clear import types

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
PRIORS = ('', 'uniform', 'same_action')
DISCRETE_ENTROPY_RATIO = 0.3
# 'same_action' prior: weight of its uniform part, std of its Gaussian part
# (fraction of the range).
SAME_ACTION_UNIFORM_WEIGHT = 0.5
SAME_ACTION_STD = 0.1


class SACConfig(NamedTuple):
  """SAC hyperparameters; see the module docstring for each field."""
  batch_size: int = 4
  num_replay: int = 0
  unroll_length: int = 8
  total_environment_frames: int = 100_000
  fixed_step_mul: bool = True
  step_mul: int = 1
  discounting: float = 0.99
  reward_scaling: float = 1.0
  actor_learning_rate: float = 1e-3
  critic_learning_rate: float = 1e-3
  alpha_learning_rate: float = 1e-3
  tau: float = 0.005
  target_update_period: int = 1
  num_critics: int = 2
  target_entropy: Union[None, float, Callable, Tuple[float, float]] = None
  initial_alpha: float = 1.0
  max_log_alpha: Optional[float] = None
  prior_actor: str = ''
  prior_kl_weight: float = 1.0
  target_kld_per_dim: float = 3.0
  value_estimator: str = 'td0'
  td_lambda: float = 0.95
  sample_length: int = 1
  sample_batch_size: int = 128
  replay_capacity: int = 1_000_000
  prioritized: bool = False
  priority_exponent: float = 0.6
  importance_exponent: float = 0.4
  learning_starts: int = 1000
  random_actions_until_start: bool = True
  updates_per_step: float = 1.0
  clip_grad_norm: float = 0.0
  jit_compile: bool = True


def validate_config(config: SACConfig, spec: Optional[types.EnvSpec] = None):
  """Raises ValueError with one clear message for an impossible setting."""
  off_policy.validate_common(config, spec, 'SAC')
  if config.alpha_learning_rate <= 0:
    raise ValueError('alpha_learning_rate must be > 0, got '
                     f'{config.alpha_learning_rate}.')
  if not config.initial_alpha > 0:
    raise ValueError(
        f'initial_alpha must be > 0, got {config.initial_alpha}.')
  if config.prior_actor not in PRIORS:
    raise ValueError(f'prior_actor must be one of {PRIORS}, got '
                     f'{config.prior_actor!r}.')
  if config.prior_kl_weight < 0:
    raise ValueError(
        f'prior_kl_weight must be >= 0, got {config.prior_kl_weight}.')
  if spec is not None:
    layout = off_policy.ActionLayout(spec.action_spec, 'SAC')
    if layout.discrete_key is None and not layout.continuous_size:
      raise ValueError('SAC needs at least one action head.')
    if layout.discrete_key is not None and config.num_critics != 2:
      raise ValueError(
          'SAC with discrete actions acts with its critics, and actors build '
          f'2 of them: num_critics must be 2, got {config.num_critics}.')
    target_entropies(config, spec.action_spec)  # Checks its form.


# --- Maths --------------------------------------------------------------------


def tanh_gaussian_sample(mean, log_std, noise):
  """Reparameterised sample of a tanh-squashed diagonal Gaussian.

  Args:
    mean: float32 `[..., C]`.
    log_std: float32 `[..., C]`.
    noise: float32 `[..., C]`, standard normal draws.

  Returns:
    (pre_tanh float32 `[..., C]` u = mean + exp(log_std) noise,
     action float32 `[..., C]` tanh(u) in (-1, 1)).
  """
  pre_tanh = mean + tf.exp(log_std) * noise
  return pre_tanh, tf.tanh(pre_tanh)


def tanh_gaussian_log_prob(pre_tanh, mean, log_std, log_half_range=0.0):
  """Log density of y = m + h tanh(u), u ~ N(mean, exp(log_std)^2).

  log p(y) = sum_c [log N(u_c; mean_c, std_c) - log(1 - tanh(u_c)^2)]
             - log_half_range,
  with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), which stays
  finite where tanh(u) rounds to +-1.

  Args:
    pre_tanh: float32 `[..., C]`, u.
    mean: float32 `[..., C]`.
    log_std: float32 `[..., C]`.
    log_half_range: sum over c of log h_c (0 for actions in [-1, 1]).

  Returns:
    float32 `[...]`.
  """
  pre_tanh = tf.convert_to_tensor(pre_tanh, tf.float32)
  if pre_tanh.shape.rank is not None and pre_tanh.shape.rank < 1:
    raise ValueError('tanh_gaussian_log_prob: pre_tanh must be [..., C], '
                     f'got shape {pre_tanh.shape}.')
  z = (pre_tanh - mean) * tf.exp(-log_std)
  gaussian = -0.5 * tf.square(z) - log_std - 0.5 * math.log(2.0 * math.pi)
  log_det = 2.0 * (math.log(2.0) - pre_tanh - tf.nn.softplus(-2.0 * pre_tanh))
  return tf.reduce_sum(gaussian - log_det, axis=-1) - log_half_range


def bounded_log_std(raw):
  """Maps an unbounded output to log_std in [LOG_STD_MIN, LOG_STD_MAX]."""
  return LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (tf.tanh(raw) + 1)


def soft_policy_logits(q_values, alpha, mask=None):
  """Logits of p(a|s) proportional to exp(min_i Q_i(s, a) / alpha).

  Args:
    q_values: float32 `[N, ..., A]`.
    alpha: float32 scalar (gradients stopped).
    mask: optional `[..., A]`, nonzero where the action is available.

  Returns:
    float32 `[..., A]` (masked entries at `heads.MASKED_LOGIT`).
  """
  logits = tf.reduce_min(q_values, axis=0) / tf.stop_gradient(alpha)
  if mask is not None:
    logits = heads.mask_logits(logits, mask)
  return logits


def entropy_bonus_rewards(rewards, discounts, next_regulariser, alpha):
  """Rewards with the next state's entropy bonus: r_t - d_t alpha reg_{t+1}.

  T is time, B is batch.

  Args:
    rewards: float32 `[T, B]`.
    discounts: float32 `[T, B]`.
    next_regulariser: float32 `[T, B]`, log pi - w log prior at x_{t+1}
      (expected under pi for discrete actions), already weighted by the
      part's alpha when `alpha` is 1.
    alpha: float32 scalar, the temperature.

  Returns:
    float32 `[T, B]`, gradients stopped through the bonus.
  """
  for name, x in (('rewards', rewards), ('discounts', discounts),
                  ('next_regulariser', next_regulariser)):
    if tf.convert_to_tensor(x).shape.rank != 2:
      raise ValueError(f'entropy_bonus_rewards: {name} must be [T, B], got '
                       f'shape {tf.convert_to_tensor(x).shape}.')
  bonus = -tf.stop_gradient(alpha * next_regulariser)
  return rewards + discounts * bonus


class CriticLossExtra(NamedTuple):
  """Pieces of `sac_critic_loss`.

  Attributes:
    targets: float32 `[T, B]`, the soft Q targets G_t.
    mask: float32 `[T, B]`, 0 for truncated transitions.
    td_errors: float32 `[N, T, B]`, G_t - Q_i(x_t, a_t).
    squared_errors: float32 `[T, B]`, mean over critics of the squared TD
      errors (what priorities are made of).
  """
  targets: tf.Tensor
  mask: tf.Tensor
  td_errors: tf.Tensor
  squared_errors: tf.Tensor


def sac_critic_loss(q_values, next_target_q, next_penalty, rewards, discounts,
                    truncated, next_discrete_probs=None,
                    importance_weights=None, estimator='td0', lambda_=0.95):
  """Soft Q regression of every critic, per element.

  T is time, B is batch, N critics, A discrete actions. Transition t goes
  from x_t to x_{t+1}. The value of x_{t+1} is V(x_{t+1}) = min_i
  Qtarget_i(x_{t+1}, a') at the policy's a' (expected under the discrete
  policy when `next_discrete_probs` is given); the entropy bonus -penalty
  of x_{t+1} goes into the reward (times the discount), so the one-step
  target is r_t + d_t (V(x_{t+1}) - penalty_{t+1}), and multi-step
  estimators collect the bonus at every step. See `off_policy.q_targets`
  for the estimator and the masking of truncated transitions.

  Args:
    q_values: float32 `[N, T, B]`, Q_i(x_t, a_t) of the replayed actions.
    next_target_q: float32 `[N, T, B]` (or `[N, T, B, A]` with discrete
      probabilities), target critics at x_{t+1} and the policy's actions.
    next_penalty: float32 `[T, B]`, sum over action parts of alpha (log pi
      - w log prior) at x_{t+1} (for discrete parts, expected under pi).
    rewards: float32 `[T, B]`.
    discounts: float32 `[T, B]`, 0 where transition t terminated.
    truncated: bool `[T, B]`.
    next_discrete_probs: float32 `[T, B, A]` or None.
    importance_weights: float32 `[B]` or `[T, B]`, or None.
    estimator: one of `off_policy.Q_ESTIMATORS`.
    lambda_: lambda of 'td_lambda' / 'gae'.

  Returns:
    (loss float32 `[T, B]`, `CriticLossExtra`); no gradient reaches the
    targets, target critics, penalties or temperatures.

  Raises:
    ValueError: wrong ranks or estimator.
  """
  name = 'sac_critic_loss'
  next_target_q = tf.convert_to_tensor(next_target_q, tf.float32)
  rank = 3 if next_discrete_probs is None else 4
  if next_target_q.shape.rank != rank:
    raise ValueError(f'{name}: next_target_q must have rank {rank}, got '
                     f'shape {next_target_q.shape}.')
  next_values = policy_values(next_target_q, next_discrete_probs)
  rewards = entropy_bonus_rewards(rewards, discounts, next_penalty, 1.0)
  # V(x_0) only enters the (masked) target of a truncated first transition,
  # so zeros stand in for it.
  values = tf.concat([tf.zeros_like(next_values[:1]), next_values[:-1]], 0)
  targets = off_policy.q_targets(rewards, discounts, truncated, values,
                                 next_values[-1], estimator, lambda_)
  loss, extra = off_policy.critic_ensemble_loss(
      q_values, targets.targets, targets.mask, importance_weights)
  return loss, CriticLossExtra(targets.targets, targets.mask, extra.td_errors,
                               extra.squared_errors)


class ActorLossExtra(NamedTuple):
  """Pieces of `sac_actor_loss`, `[T, B]` each.

  Attributes:
    policy_q: the Q value the actor climbs (min over critics).
    regulariser: log pi - w log prior of the sampled actions.
  """
  policy_q: tf.Tensor
  regulariser: tf.Tensor


def sac_actor_loss(q_values, regulariser, alpha, discrete_probs=None):
  """The SAC actor loss alpha reg - min_i Q_i, per element.

  T is time, B is batch, N critics, A discrete actions.

  Args:
    q_values: float32 `[N, T, B]`, Q_i(x_t, a_t) at reparameterised policy
      actions, or `[N, T, B, A]` with `discrete_probs` (mixed actions).
    regulariser: float32 `[T, B]`, log pi(a_t|x_t) - w log prior(a_t|x_t)
      of the same actions (carries the actor's gradient).
    alpha: float32 scalar temperature (gradients stopped).
    discrete_probs: float32 `[T, B, A]`, the discrete policy (gradients
      stopped); the Q taken is sum_a p(a) min_i Q_i(., a).

  Returns:
    (loss float32 `[T, B]`, `ActorLossExtra`).
  """
  q_values = tf.convert_to_tensor(q_values, tf.float32)
  rank = 4 if discrete_probs is not None else 3
  if q_values.shape.rank != rank:
    raise ValueError(f'sac_actor_loss: q_values must have rank {rank}, got '
                     f'shape {q_values.shape}.')
  if tf.convert_to_tensor(regulariser).shape.rank != 2:
    raise ValueError('sac_actor_loss: regulariser must be [T, B].')
  q = tf.reduce_min(q_values, axis=0)
  if discrete_probs is not None:
    q = tf.reduce_sum(tf.stop_gradient(discrete_probs) * q, axis=-1)
  loss = tf.stop_gradient(alpha) * regulariser - q
  return loss, ActorLossExtra(q, regulariser)


class AlphaLossExtra(NamedTuple):
  """Pieces of `sac_alpha_loss`, `[T, B]`.

  Attributes:
    entropy_gap: -reg - target, positive when the policy is more random
      than the target (alpha then falls).
  """
  entropy_gap: tf.Tensor


def sac_alpha_loss(log_alpha, regulariser, target_entropy):
  """Temperature loss log_alpha (-reg - target), per element.

  Its gradient lowers alpha while the entropy (or -KL to the prior) exceeds
  the target and raises it otherwise.

  Args:
    log_alpha: float32 scalar variable or tensor.
    regulariser: float32 `[T, B]`, log pi - w log prior (gradients
      stopped here).
    target_entropy: python float.

  Returns:
    (loss float32 `[T, B]`, `AlphaLossExtra`).
  """
  regulariser = tf.convert_to_tensor(regulariser, tf.float32)
  if regulariser.shape.rank != 2:
    raise ValueError('sac_alpha_loss: regulariser must be [T, B], got shape '
                     f'{regulariser.shape}.')
  gap = tf.stop_gradient(-regulariser - target_entropy)
  return log_alpha * gap, AlphaLossExtra(gap)


def policy_values(target_q_values, discrete_probs=None):
  """Target value of the policy's actions: min_i Q_i, expected under the
  discrete policy when given.

  Args:
    target_q_values: float32 `[N, T, B]` or `[N, T, B, A]`.
    discrete_probs: float32 `[T, B, A]` (with 4-d q values).

  Returns:
    float32 `[T, B]`, gradients stopped.
  """
  q = tf.reduce_min(target_q_values, axis=0)
  if discrete_probs is not None:
    q = tf.reduce_sum(discrete_probs * q, axis=-1)
  return tf.stop_gradient(q)


def discrete_regulariser(logits, log_prior=None, prior_weight=0.0):
  """Exact E_pi[log pi - w log prior] of a categorical policy.

  Args:
    logits: float32 `[..., A]`.
    log_prior: float32 `[..., A]` or None.
    prior_weight: w.

  Returns:
    (regulariser float32 `[...]`, probabilities `[..., A]`).
  """
  log_probs = tf.nn.log_softmax(logits)
  probs = tf.exp(log_probs)
  inner = log_probs
  if log_prior is not None:
    inner = inner - prior_weight * log_prior
  return tf.reduce_sum(probs * inner, axis=-1), probs


def default_target_entropy(head) -> float:
  """-1 per [-1, 1]-scaled continuous entry (in env units: log h - 1 each);
  DISCRETE_ENTROPY_RATIO x log A for a discrete head."""
  if isinstance(head, types.DiscreteSpec):
    return DISCRETE_ENTROPY_RATIO * math.log(head.num_values)
  size = int(np.prod(head.shape, dtype=np.int64))
  return size * (math.log((head.maximum - head.minimum) / 2.0) - 1.0)


def target_entropies(config: SACConfig, action_spec):
  """{'discrete': float, 'continuous': float} for the parts that exist.

  Raises:
    ValueError: a pair for non-mixed actions, or a malformed value.
  """
  layout = off_policy.ActionLayout(action_spec, 'SAC')
  parts = {}
  if layout.discrete_key is not None:
    parts['discrete'] = [layout.discrete_spec]
  if layout.continuous_size:
    parts['continuous'] = list(layout.specs.values())
  value = config.target_entropy
  if value is None and config.prior_actor:
    dims = lambda specs: sum(
        1 if isinstance(s, types.DiscreteSpec) else int(np.prod(s.shape))
        for s in specs)
    return {k: -config.target_kld_per_dim * dims(v) for k, v in parts.items()}
  if value is None or callable(value):
    fn = value or default_target_entropy
    return {k: float(sum(fn(s) for s in v)) for k, v in parts.items()}
  if isinstance(value, (tuple, list)):
    if len(parts) != 2 or len(value) != 2:
      raise ValueError(
          'target_entropy: a (discrete, continuous) pair needs mixed '
          f'actions, got {value!r} for parts {sorted(parts)}.')
    return {'discrete': float(value[0]), 'continuous': float(value[1])}
  try:
    return {k: float(value) for k in parts}
  except (TypeError, ValueError) as e:
    raise ValueError('target_entropy must be None, a float, a callable or '
                     f'a pair, got {value!r}.') from e


# --- Networks and policy ------------------------------------------------------


class SACAgent(snt.Module):
  """Everything SAC acts with (and what `get_weights` ships to actors).

  Attributes:
    actor: MLP observation -> [mean; raw log std] of the continuous part
      (None without continuous heads).
    critics: the Q-network ensemble for discrete / mixed actions (None for
      continuous-only actions, whose critics stay in the learner).
    log_alpha: dict part -> float32 scalar variable.
    random_actions: float32 variable, 1 while actors act uniformly.
    rng: the sampling Generator.
  """

  def __init__(self, spec, layout: off_policy.ActionLayout, hidden_sizes,
               num_critics: int, init_rng: np.random.Generator, seed: int,
               initial_alpha: float, name='agent'):
    super().__init__(name=name)
    w_init = initializers.SeededFanIn(init_rng)
    obs_size = off_policy.observation_size(spec)
    with self.name_scope:
      self.rng = tf.random.Generator.from_seed(seed)
      self.random_actions = tf.Variable(1.0, trainable=False,
                                        name='random_actions')
      self.log_alpha = {}
      if layout.discrete_key is not None:
        self.log_alpha['discrete'] = tf.Variable(
            math.log(initial_alpha), name='log_alpha_discrete')
      if layout.continuous_size:
        self.log_alpha['continuous'] = tf.Variable(
            math.log(initial_alpha), name='log_alpha_continuous')
    self.actor = None
    if layout.continuous_size:
      self.actor = off_policy.MLP(hidden_sizes, 2 * layout.continuous_size,
                                  w_init, name='actor')
      self.actor(tf.zeros([1, obs_size]))
    self.critics = None
    if layout.discrete_key is not None:
      self.critics = off_policy.CriticEnsemble(
          num_critics, obs_size + layout.continuous_size, hidden_sizes,
          layout.num_discrete, init_rng, name='critics')


class SACPolicy(off_policy.OffPolicyPolicy):
  """Soft Actor-Critic over an MLP; see the module docstring.

  Args:
    spec: the environment spec.
    agent_config: `policy.AgentConfig` (network 'mlp' or 'auto'; two hidden
      layers of `core_size` units for actor and critics).
    learner_config: `SACConfig`, or None for an acting-only copy.
    seed: seeds the initialisation, the sampling and the replay.
  """

  algorithm = 'SAC'

  def _validate(self, config, spec):
    validate_config(config, spec)

  def _build_agent(self, seed):
    # With discrete actions the critics act. Acting copies get no config, so
    # they build the default ensemble of 2, and learners must match it (see
    # `_build_learner`).
    num = self.config.num_critics if self.config is not None else 2
    initial_alpha = (self.config.initial_alpha if self.config is not None
                     else 1.0)
    return SACAgent(self.spec, self.layout, self._hidden_sizes, num,
                    self._init_rng, seed, initial_alpha)

  def _build_learner(self):
    c, layout = self.config, self.layout
    self.agent.random_actions.assign(
        1.0 if c.random_actions_until_start else 0.0)
    obs_size = off_policy.observation_size(self.spec)
    in_size = obs_size + layout.continuous_size
    out_size = layout.num_discrete or 1
    if self.agent.critics is not None:
      self.critics = self.agent.critics
    else:
      self.critics = off_policy.CriticEnsemble(
          c.num_critics, in_size, self._hidden_sizes, out_size,
          self._init_rng, name='critics')
    self.target_critics = off_policy.CriticEnsemble(
        c.num_critics, in_size, self._hidden_sizes, out_size, self._init_rng,
        name='target_critics')
    self.target_updater = off_policy.TargetUpdater(
        self.critics.trainable_variables,
        self.target_critics.trainable_variables, c.tau,
        c.target_update_period)
    self.target_entropy = target_entropies(c, self.spec.action_spec)
    self.critic_optimizer = off_policy.make_adam(
        c.critic_learning_rate, self.critics.trainable_variables)
    self.actor_optimizer = None
    if self.agent.actor is not None:
      self.actor_optimizer = off_policy.make_adam(
          c.actor_learning_rate, self.agent.actor.trainable_variables)
    self.alpha_variables = [self.agent.log_alpha[k]
                            for k in sorted(self.agent.log_alpha)]
    self.alpha_optimizer = off_policy.make_adam(c.alpha_learning_rate,
                                                self.alpha_variables)
    names = ['loss/critic', 'loss/alpha', 'value/q_mean',
             'value/target_mean', 'value/abs_td_error', 'grad_norm/critic']
    for part in self.agent.log_alpha:
      names += [f'alpha/{part}', f'policy/entropy_{part}']
    if self.agent.actor is not None:
      names += ['loss/actor', 'grad_norm/actor']
    if c.prior_actor:
      names += ['policy/regulariser']
    self.metric_names = names

  def _learner_checkpointables(self):
    out = {'target_critics': self.target_critics,
           'target_updates': self.target_updater.num_calls,
           'critic_optimizer': self.critic_optimizer,
           'alpha_optimizer': self.alpha_optimizer}
    if self.agent.critics is None:
      out['critics'] = self.critics
    if self.actor_optimizer is not None:
      out['actor_optimizer'] = self.actor_optimizer
    return out

  def _scope_variables(self, scope):
    acting = list(self.agent.trainable_variables)
    if self.agent.critics is not None:  # Discrete: the critics act.
      critics = {v.ref() for v in self.agent.critics.variables}
      acting = [v for v in acting if v.ref() not in critics]
    critic = (list(self.critics.trainable_variables) +
              list(self.target_critics.trainable_variables))
    return {'policy': acting, 'critic': critic,
            'all': acting + critic}[scope]

  # --- Shared forward pieces --------------------------------------------------

  def _alpha(self, part):
    return tf.exp(self.agent.log_alpha[part])

  def _continuous_policy(self, features, num_rows):
    """(pre_tanh, unit action, mean, log_std) for `[M, D]` features."""
    out = self.agent.actor(features)
    mean, raw = tf.split(out, 2, axis=-1)
    log_std = bounded_log_std(raw)
    noise = self.agent.rng.normal([num_rows, self.layout.continuous_size])
    pre_tanh, unit = tanh_gaussian_sample(mean, log_std, noise)
    return pre_tanh, unit, mean, log_std

  def _critic_input(self, features, unit_action):
    if unit_action is None:
      return features
    return tf.concat([features, unit_action], axis=-1)

  def _mask(self, observation):
    spec = self.layout.discrete_spec
    if spec is None or spec.mask_key is None:
      return None
    return observation[spec.mask_key]

  # --- Acting -----------------------------------------------------------------

  def _act(self, observation):
    layout, agent = self.layout, self.agent
    features = off_policy.flat_observation(observation,
                                           self._observation_keys)
    batch = tf.shape(features)[0]
    random = agent.random_actions > 0.5
    action, logits = {}, {}
    unit = None
    if agent.actor is not None:
      _, unit, _, _ = self._continuous_policy(features, batch)
      uniform = agent.rng.uniform([batch, layout.continuous_size], -1.0, 1.0)
      unit = tf.where(random, uniform, unit)
      action.update(layout.unit_to_env(unit))
    baseline = tf.zeros([batch], tf.float32)
    if agent.critics is not None:
      q = agent.critics(self._critic_input(features, unit))
      head_logits = soft_policy_logits(q, self._alpha('discrete'))
      head_logits = tf.where(random, tf.zeros_like(head_logits), head_logits)
      mask = self._mask(observation)
      if mask is not None:
        head_logits = heads.mask_logits(head_logits, mask)
      key = layout.discrete_key
      logits[key] = head_logits
      action[key] = heads.sample_actions({key: head_logits}, agent.rng)[key]
      baseline = tf.reduce_sum(tf.nn.softmax(head_logits) *
                               tf.reduce_min(q, axis=0), axis=-1)
    ordered = {k: action[k] for k in self.spec.action_spec}
    return types.AgentOutput(ordered, logits, baseline)

  # --- Priors -----------------------------------------------------------------

  def _continuous_log_prior(self, unit, prev_unit, first):
    """log prior density of `[M, C]` unit actions, in env units."""
    layout = self.layout
    uniform = -layout.continuous_size * math.log(2.0)
    if self.config.prior_actor == 'uniform':
      log_unit = tf.fill(tf.shape(unit)[:1], uniform)
    else:
      std = SAME_ACTION_STD * 2.0
      w = SAME_ACTION_UNIFORM_WEIGHT
      gauss = (-0.5 * tf.square((unit - prev_unit) / std) - math.log(std) -
               0.5 * math.log(2 * math.pi))
      per_dim = tf.math.log(w * 0.5 + (1 - w) * tf.exp(gauss))
      log_unit = tf.where(first, uniform, tf.reduce_sum(per_dim, axis=-1))
    return log_unit - layout.log_half_range

  def _discrete_log_prior(self, prev_action, first, num_rows):
    """log prior `[M, A]` over the discrete choices."""
    n = self.layout.num_discrete
    uniform = tf.fill([num_rows, n], -math.log(n))
    if self.config.prior_actor == 'uniform':
      return uniform
    w = SAME_ACTION_UNIFORM_WEIGHT
    same = tf.one_hot(tf.cast(prev_action, tf.int32), n)
    log_same = tf.math.log(w / n + (1 - w) * same)
    return tf.where(first[:, None], uniform, log_same)

  # --- Learning ---------------------------------------------------------------

  def _update(self, tr: off_policy.Transitions, weights):
    c, layout, agent = self.config, self.layout, self.agent
    merge = off_policy.merge_leading
    steps_p1, num_segments = tr.first.shape  # L + 1, K (static).
    rows = steps_p1 * num_segments  # M1: every observation.
    taken_rows = (steps_p1 - 1) * num_segments  # M0: every transition.
    features = off_policy.flat_observation(
        {k: merge(tr.observation[k]) for k in self._observation_keys},
        self._observation_keys)
    first = merge(tr.first)
    w_prior = c.prior_kl_weight if c.prior_actor else 0.0
    critic_vars = self.critics.trainable_variables
    actor_vars = agent.actor.trainable_variables if agent.actor else ()
    time_major = lambda x, steps: tf.reshape(
        x, [steps, num_segments] + x.shape[1:].as_list())
    critics_time_major = lambda q, steps: tf.reshape(
        q, [q.shape[0], steps, num_segments] + q.shape[2:].as_list())

    # Rows of `features`: all observations x_0..x_L (M1 rows, time-major),
    # `now` = x_0..x_{L-1} (the transitions' start states), `after` =
    # x_1..x_L (their next states).
    now = lambda x: x[:taken_rows]
    after = lambda x: x[num_segments:]
    with tf.GradientTape(persistent=True) as tape:
      regularisers = {}  # part -> [M1] log pi - w log prior.
      unit = None
      if agent.actor is not None:
        pre_tanh, unit, mean, log_std = self._continuous_policy(features,
                                                                rows)
        log_pi = tanh_gaussian_log_prob(pre_tanh, mean, log_std,
                                        layout.log_half_range)
        reg = log_pi
        if c.prior_actor:
          prev_unit = merge(layout.env_to_unit(tr.prev_action))
          reg = reg - w_prior * self._continuous_log_prior(unit, prev_unit,
                                                           first)
        regularisers['continuous'] = reg
        taken_unit = merge(layout.env_to_unit(tr.action))
        # Policy actions where the actor needs them (every row when the
        # discrete policy of the next states depends on them), then the
        # replayed actions.
        new_rows = features if layout.discrete_key else now(features)
        new_unit = unit if layout.discrete_key else now(unit)
        q_both = self.critics(tf.concat(
            [self._critic_input(new_rows, new_unit),
             self._critic_input(now(features), taken_unit)], 0))
        num_new = rows if layout.discrete_key else taken_rows
        q_new, q_taken = q_both[:, :num_new], q_both[:, num_new:]
      else:
        q_new = self.critics(features)  # Discrete only: Q(x, .) everywhere.
        q_taken = q_new[:, :taken_rows]
      probs = None
      if layout.discrete_key is not None:
        key = layout.discrete_key
        mask = self._mask({k: merge(v) for k, v in tr.observation.items()})
        logits = tf.stop_gradient(soft_policy_logits(
            q_new, self._alpha('discrete'), mask))
        log_prior = None
        if c.prior_actor:
          log_prior = self._discrete_log_prior(merge(tr.prev_action[key]),
                                               first, rows)
        reg_d, probs = discrete_regulariser(logits, log_prior, w_prior)
        regularisers['discrete'] = reg_d
        taken = tf.cast(merge(tr.action[key]), tf.int32)
        q_taken = tf.reduce_sum(
            q_taken * tf.one_hot(taken, layout.num_discrete), axis=-1)
      else:
        q_new, q_taken = q_new[..., 0], q_taken[..., 0]

      # Actor: at the start states.
      actor_loss = tf.constant(0.0)
      if agent.actor is not None:
        q_actor = q_new if probs is None else q_new[:, :taken_rows]
        actor_losses, _ = sac_actor_loss(
            critics_time_major(q_actor, steps_p1 - 1),
            time_major(now(regularisers['continuous']), steps_p1 - 1),
            self._alpha('continuous'),
            None if probs is None else time_major(now(probs), steps_p1 - 1))
        actor_loss = tf.reduce_mean(actor_losses)

      # Critic: target critics at the next states.
      q_target = self.target_critics(self._critic_input(
          after(features),
          None if unit is None else tf.stop_gradient(after(unit))))
      next_probs = None
      if probs is None:
        q_target = q_target[..., 0]
      else:
        next_probs = time_major(after(probs), steps_p1 - 1)
      penalty = tf.add_n([self._alpha(part) * reg
                          for part, reg in regularisers.items()])
      critic_losses, critic_extra = sac_critic_loss(
          critics_time_major(q_taken, steps_p1 - 1),
          critics_time_major(q_target, steps_p1 - 1),
          time_major(after(penalty), steps_p1 - 1), tr.reward, tr.discount,
          tr.truncated, next_probs, weights, c.value_estimator, c.td_lambda)
      critic_loss = tf.reduce_mean(critic_losses)

      # Temperatures.
      alpha_loss = tf.constant(0.0)
      for part, reg in regularisers.items():
        losses, _ = sac_alpha_loss(agent.log_alpha[part],
                                   time_major(now(reg), steps_p1 - 1),
                                   self.target_entropy[part])
        alpha_loss += tf.reduce_mean(losses)

    critic_grads, critic_norm = learner_lib.clipped_gradients(
        tape, critic_loss, critic_vars, c.clip_grad_norm)
    alpha_grads, alpha_norm = learner_lib.clipped_gradients(
        tape, alpha_loss, self.alpha_variables, c.clip_grad_norm)
    checks = [critic_loss, alpha_loss, critic_norm, alpha_norm]
    actor_grads = []
    if agent.actor is not None:
      actor_grads, actor_norm = learner_lib.clipped_gradients(
          tape, actor_loss, actor_vars, c.clip_grad_norm)
      checks += [actor_loss, actor_norm]
    del tape
    finite = off_policy.all_finite(checks)

    def apply():
      self.critic_optimizer.apply(critic_grads, critic_vars)
      if agent.actor is not None:
        self.actor_optimizer.apply(actor_grads, actor_vars)
      self.alpha_optimizer.apply(alpha_grads, self.alpha_variables)
      if c.max_log_alpha is not None:
        for v in self.alpha_variables:
          v.assign(tf.minimum(v, c.max_log_alpha))
      self.target_updater()

    finite = self._apply_if_finite(finite, apply)
    mask = critic_extra.mask
    metrics = {
        'loss/critic': critic_loss,
        'loss/alpha': alpha_loss,
        'value/q_mean': tf.reduce_mean(q_taken),
        'value/target_mean': tf.reduce_mean(critic_extra.targets),
        'value/abs_td_error': tf.reduce_sum(
            tf.reduce_mean(tf.abs(critic_extra.td_errors), 0) * mask) /
                              tf.maximum(tf.reduce_sum(mask), 1.0),
        'grad_norm/critic': critic_norm,
    }
    for part in agent.log_alpha:
      metrics[f'alpha/{part}'] = self._alpha(part)
    if 'continuous' in regularisers:
      metrics['policy/entropy_continuous'] = -tf.reduce_mean(now(log_pi))
    if 'discrete' in regularisers:
      metrics['policy/entropy_discrete'] = -tf.reduce_mean(now(
          tf.reduce_sum(probs * tf.nn.log_softmax(logits), -1)))
    if agent.actor is not None:
      metrics['loss/actor'] = actor_loss
      metrics['grad_norm/actor'] = actor_norm
    if c.prior_actor:
      metrics['policy/regulariser'] = tf.add_n(
          [tf.reduce_mean(now(r)) for r in regularisers.values()])
    priorities = off_policy.segment_priorities(critic_extra.squared_errors,
                                               mask)
    return metrics, finite, priorities
