"""Soft Actor-Critic (Haarnoja et al. 2018, 1812.05905) for clear's runtime.

T is time, B is batch, N is the number of critics, A the number of discrete
actions, C the number of continuous action entries. The maths (losses,
tanh-squashed Gaussian, target entropies) is in `clear.algorithms.sac.losses`;
the machinery SAC shares with DDPG in `clear.algorithms.off_policy.policy` and
the modules it names.

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
  `clear.algorithms.off_policy.segments`). The estimator is `value_estimator`
  from `clear.ops.value_estimators`;
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
do not keep; see `clear.algorithms.off_policy.segments`); the discrete part's
entropy is an exact sum over the actions instead of the log-probability of one
sampled action; the actor and temperature losses use the transitions' start
states.

Config (`SACConfig`, declared by `SETTINGS`): the fields SAC shares with
DDPG (`clear.algorithms.off_policy.config`; SAC's num_critics defaults to
2) and SAC's own. The defaults are the ones checked on gym:Pendulum-v1 and
gym:CartPole-v1 with 64-unit MLPs (docs/algorithms.md#sac): against the
usual SAC settings (Haarnoja et al.: learning rates 3e-4, batches of 256)
they use learning rates of 1e-3 and batches of 128, which learn these small
tasks in fewer updates; ALF's log alpha starts at 0 as here. With
sample_length raised, td1 and td_lambda give n-step-like targets.
"""

import math
from typing import Dict, NamedTuple, Optional

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import heads
from agents import initializers
from clear import settings as settings_lib
from clear import types
from clear.algorithms.off_policy import config as off_policy_config
from clear.algorithms.off_policy import losses as off_policy_losses
from clear.algorithms.off_policy import networks
from clear.algorithms.off_policy import policy as off_policy
from clear.algorithms.sac import losses as sac_losses
from clear.ops import guards

PRIORS = ('', 'uniform', 'same_action')
# 'same_action' prior: weight of its uniform part, std of its Gaussian part
# (fraction of the range).
SAME_ACTION_UNIFORM_WEIGHT = 0.5
SAME_ACTION_STD = 0.1

_Setting = settings_lib.Setting
_shared = off_policy_config.shared
# SACConfig's fields, in order: the shared ones with SAC's own among them.
SETTINGS = (
    *_shared('batch_size', 'num_replay', 'unroll_length',
             'total_environment_frames', 'fixed_step_mul', 'step_mul',
             'discounting', 'reward_scaling', 'actor_learning_rate',
             'critic_learning_rate'),
    _Setting('alpha_learning_rate', 1e-3,
             'Adam learning rate of the temperature(s).'),
    *_shared('tau', 'target_update_period'),
    off_policy_config.SHARED['num_critics']._replace(default=2),
    _Setting('target_entropy', None,
             'None derives it from the action spec (continuous: -1 per '
             'entry of the [-1, 1]-scaled action, i.e. sum(log half range '
             "- 1) in the env's units; discrete: 0.3 log A; with a prior "
             'actor -target_kld_per_dim per entry); a float; a callable of '
             "each head's spec (summed per part); for mixed actions a "
             '(discrete, continuous) pair.', kind=float),
    _Setting('initial_alpha', 1.0, 'initial temperature(s).'),
    _Setting('max_log_alpha', None, 'cap on log alpha.', kind=float),
    _Setting('prior_actor', '',
             'the prior the policy is regularised towards by KL instead of '
             "maximising its entropy: '' (none), 'uniform' or "
             "'same_action'."),
    _Setting('prior_kl_weight', 1.0,
             'w, the weight of log prior in the regulariser log pi - w log '
             'prior (with a prior actor).'),
    _Setting('target_kld_per_dim', 3.0,
             'with a prior actor, the default target entropy is '
             '-target_kld_per_dim per action entry.'),
    *_shared('value_estimator', 'td_lambda', 'sample_length',
             'sample_batch_size', 'replay_capacity', 'prioritized',
             'priority_exponent', 'importance_exponent', 'learning_starts',
             'random_actions_until_start', 'updates_per_step',
             'clip_grad_norm', 'jit_compile'),
)
SACConfig = settings_lib.settings_class('SACConfig', SETTINGS,
                                        summary='SAC hyperparameters.')


def validate_config(config: SACConfig,
                    spec: Optional[types.EnvSpec] = None):
  """Raises ValueError with one clear message for an impossible setting."""
  off_policy_config.validate_common(config, spec, 'SAC')
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
    layout = networks.ActionLayout(spec.action_spec, 'SAC')
    if layout.discrete_key is None and not layout.continuous_size:
      raise ValueError('SAC needs at least one action head.')
    if layout.discrete_key is not None and config.num_critics != 2:
      raise ValueError(
          'SAC with discrete actions acts with its critics, and actors build '
          f'2 of them: num_critics must be 2, got {config.num_critics}.')
    sac_losses.target_entropies(config, spec.action_spec)  # Its form.


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

  def __init__(self, spec, layout: networks.ActionLayout, hidden_sizes,
               num_critics: int, init_rng: np.random.Generator, seed: int,
               initial_alpha: float, name='agent'):
    super().__init__(name=name)
    w_init = initializers.SeededFanIn(init_rng)
    obs_size = networks.observation_size(spec)
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
      self.actor = networks.MLP(hidden_sizes, 2 * layout.continuous_size,
                                w_init, name='actor')
      self.actor(tf.zeros([1, obs_size]))
    self.critics = None
    if layout.discrete_key is not None:
      self.critics = networks.make_critics(
          num_critics, spec, layout, hidden_sizes, init_rng, 'critics')


class _Rows(NamedTuple):
  """How an update lays out K replayed segments of L transitions: every
  observation x_0..x_L of every segment as a row, time-major (`all`
  = (L + 1) K rows); the transitions' start states x_0..x_{L-1} are the
  first L K rows (`starts`), their next states x_1..x_L the last L K
  (`nexts`)."""
  num_steps: int  # L
  num_segments: int  # K

  @property
  def all(self) -> int:
    return (self.num_steps + 1) * self.num_segments

  @property
  def transitions(self) -> int:
    return self.num_steps * self.num_segments

  def starts(self, x):
    return x[:self.transitions]

  def nexts(self, x):
    return x[self.num_segments:]

  def time_major(self, x):
    """`[L K, ...]` -> `[L, K, ...]`."""
    return tf.reshape(x, [self.num_steps, self.num_segments] +
                      x.shape[1:].as_list())

  def critics_time_major(self, q):
    """`[N, L K, ...]` -> `[N, L, K, ...]` (N critics)."""
    return tf.reshape(q, [q.shape[0], self.num_steps, self.num_segments] +
                      q.shape[2:].as_list())


class _Terms(NamedTuple):
  """What one update computes from the policy and the critics.

  Attributes:
    regularisers: action part ('continuous', 'discrete') -> `[all]`
      log pi - w log prior.
    unit: the actor's continuous actions in [-1, 1], `[all, C]` (None
      without an actor).
    log_pi: their log-probabilities `[all]` (None without an actor).
    probs, logits: the discrete policy `[all, A]` (None without a
      discrete head).
    q_new: the critics `[N, rows]` at the policy's actions (discrete: per
      action, `[N, rows, A]`).
    q_taken: the critics `[N, transitions]` at the replayed actions.
  """
  regularisers: Dict[str, tf.Tensor]
  unit: Optional[tf.Tensor]
  log_pi: Optional[tf.Tensor]
  probs: Optional[tf.Tensor]
  logits: Optional[tf.Tensor]
  q_new: tf.Tensor
  q_taken: tf.Tensor


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
    c = self.config
    if self.agent.critics is not None:
      self.critics = self.agent.critics
    else:
      self.critics = self._make_critics('critics')
    self.target_critics = self._make_critics('target_critics')
    self.target_updater = networks.TargetUpdater(
        self.critics.trainable_variables,
        self.target_critics.trainable_variables, c.tau,
        c.target_update_period)
    self.target_entropy = sac_losses.target_entropies(c,
                                                      self.spec.action_spec)
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
    log_std = sac_losses.bounded_log_std(raw)
    noise = self.agent.rng.normal([num_rows, self.layout.continuous_size])
    pre_tanh, unit = sac_losses.tanh_gaussian_sample(mean, log_std, noise)
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
    features = self._features(observation)
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
      head_logits = sac_losses.soft_policy_logits(q, self._alpha('discrete'))
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

  def _update(self, segments, weights):
    """One update on K replayed segments of L transitions (see the module
    docstring); returns (metrics, applied, priorities `[K]`)."""
    config = self.config
    rows = _Rows(segments.first.shape[0] - 1, segments.first.shape[1])
    features = self._segment_features(segments)
    with tf.GradientTape(persistent=True) as tape:
      terms = self._policy_terms(segments, features, rows)
      actor_loss = self._actor_loss(terms, rows)
      critic_loss, critic_extra = self._critic_loss(segments, features, terms,
                                                    rows, weights)
      alpha_loss = self._alpha_loss(terms, rows)

    critic_variables = self.critics.trainable_variables
    critic_grads, critic_norm = guards.clipped_gradients(
        tape, critic_loss, critic_variables, config.clip_grad_norm)
    alpha_grads, alpha_norm = guards.clipped_gradients(
        tape, alpha_loss, self.alpha_variables, config.clip_grad_norm)
    checks = [critic_loss, alpha_loss, critic_norm, alpha_norm]
    actor = self.agent.actor
    if actor is not None:
      actor_grads, actor_norm = guards.clipped_gradients(
          tape, actor_loss, actor.trainable_variables, config.clip_grad_norm)
      checks += [actor_loss, actor_norm]
    del tape

    def apply():
      self.critic_optimizer.apply(critic_grads, critic_variables)
      if actor is not None:
        self.actor_optimizer.apply(actor_grads, actor.trainable_variables)
      self.alpha_optimizer.apply(alpha_grads, self.alpha_variables)
      if config.max_log_alpha is not None:
        for v in self.alpha_variables:
          v.assign(tf.minimum(v, config.max_log_alpha))
      self.target_updater()

    applied = self._apply_if_finite(checks, apply)
    metrics = {
        'loss/critic': critic_loss,
        'loss/alpha': alpha_loss,
        'value/q_mean': tf.reduce_mean(terms.q_taken),
        'value/target_mean': tf.reduce_mean(critic_extra.targets),
        'value/abs_td_error': off_policy_losses.masked_mean(
            tf.reduce_mean(tf.abs(critic_extra.td_errors), 0),
            critic_extra.mask),
        'grad_norm/critic': critic_norm,
    }
    metrics.update(self._policy_metrics(terms, rows))
    if actor is not None:
      metrics['loss/actor'] = actor_loss
      metrics['grad_norm/actor'] = actor_norm
    if config.prior_actor:
      metrics['policy/regulariser'] = tf.add_n(
          [tf.reduce_mean(rows.starts(r))
           for r in terms.regularisers.values()])
    priorities = off_policy_losses.segment_priorities(
        critic_extra.squared_errors, critic_extra.mask)
    return metrics, applied, priorities

  # --- The update's terms, per action type ----------------------------------

  def _prior_weight(self) -> float:
    """w of the regulariser log pi - w log prior (0 without a prior)."""
    return self.config.prior_kl_weight if self.config.prior_actor else 0.0

  def _policy_terms(self, segments, features, rows: '_Rows') -> '_Terms':
    """The policy's regularisers and the critics' Q-values at every row:
    the continuous part's (with an actor), then the discrete head's."""
    if self.agent.actor is not None:
      terms = self._continuous_terms(segments, features, rows)
    else:  # Discrete only: Q(x, .) at every observation.
      q_all = self.critics(features)
      terms = _Terms({}, None, None, None, None, q_all,
                     q_all[:, :rows.transitions])
    if self.layout.discrete_key is not None:
      return self._discrete_terms(segments, terms, rows)
    return terms._replace(q_new=terms.q_new[..., 0],
                          q_taken=terms.q_taken[..., 0])

  def _continuous_terms(self, segments, features, rows: '_Rows') -> '_Terms':
    """The actor's sample at every observation, its regulariser, and the
    critics at the policy's actions and at the replayed ones."""
    layout, merge = self.layout, networks.merge_leading
    pre_tanh, unit, mean, log_std = self._continuous_policy(features,
                                                            rows.all)
    log_pi = sac_losses.tanh_gaussian_log_prob(pre_tanh, mean, log_std,
                                               layout.log_half_range)
    regulariser = log_pi
    if self.config.prior_actor:
      previous_unit = merge(layout.env_to_unit(segments.prev_action))
      regulariser = regulariser - self._prior_weight() * (
          self._continuous_log_prior(unit, previous_unit,
                                     merge(segments.first)))
    taken_unit = merge(layout.env_to_unit(segments.action))
    # The policy's actions where the critics need them (every row when the
    # discrete policy of the next states depends on them), then the
    # replayed actions.
    every_row = bool(layout.discrete_key)
    policy_features = features if every_row else rows.starts(features)
    policy_unit = unit if every_row else rows.starts(unit)
    q_both = self.critics(tf.concat(
        [self._critic_input(policy_features, policy_unit),
         self._critic_input(rows.starts(features), taken_unit)], 0))
    num_policy_rows = rows.all if every_row else rows.transitions
    return _Terms({'continuous': regulariser}, unit, log_pi, None, None,
                  q_both[:, :num_policy_rows], q_both[:, num_policy_rows:])

  def _discrete_terms(self, segments, terms: '_Terms',
                      rows: '_Rows') -> '_Terms':
    """The discrete head's soft policy from the critics' values, its
    regulariser, and the Q-values of the replayed discrete actions."""
    key, merge = self.layout.discrete_key, networks.merge_leading
    mask = self._mask({k: merge(v) for k, v in
                       segments.observation.items()})
    logits = tf.stop_gradient(sac_losses.soft_policy_logits(
        terms.q_new, self._alpha('discrete'), mask))
    log_prior = None
    if self.config.prior_actor:
      log_prior = self._discrete_log_prior(merge(segments.prev_action[key]),
                                           merge(segments.first), rows.all)
    regulariser, probs = sac_losses.discrete_regulariser(
        logits, log_prior, self._prior_weight())
    taken = tf.cast(merge(segments.action[key]), tf.int32)
    q_taken = tf.reduce_sum(
        terms.q_taken * tf.one_hot(taken, self.layout.num_discrete), axis=-1)
    return terms._replace(
        regularisers={**terms.regularisers, 'discrete': regulariser},
        probs=probs, logits=logits, q_taken=q_taken)

  def _actor_loss(self, terms: '_Terms', rows: '_Rows'):
    """The actor's loss at the transitions' start states (0 without one)."""
    if self.agent.actor is None:
      return tf.constant(0.0)
    probs = terms.probs
    q_policy = terms.q_new if probs is None else terms.q_new[
        :, :rows.transitions]
    losses, _ = sac_losses.sac_actor_loss(
        rows.critics_time_major(q_policy),
        rows.time_major(rows.starts(terms.regularisers['continuous'])),
        self._alpha('continuous'),
        None if probs is None else rows.time_major(rows.starts(probs)))
    return tf.reduce_mean(losses)

  def _critic_loss(self, segments, features, terms: '_Terms', rows: '_Rows',
                   weights):
    """The critics' loss against the target critics at the next states,
    with the temperatures' entropy bonus; returns (loss, its extras)."""
    unit = terms.unit
    q_target = self.target_critics(self._critic_input(
        rows.nexts(features),
        None if unit is None else tf.stop_gradient(rows.nexts(unit))))
    next_probs = None
    if terms.probs is None:
      q_target = q_target[..., 0]
    else:
      next_probs = rows.time_major(rows.nexts(terms.probs))
    penalty = tf.add_n([self._alpha(part) * regulariser
                        for part, regulariser in terms.regularisers.items()])
    losses, extra = sac_losses.sac_critic_loss(
        rows.critics_time_major(terms.q_taken),
        rows.critics_time_major(q_target),
        rows.time_major(rows.nexts(penalty)), segments.reward,
        segments.discount, segments.truncated, next_probs, weights,
        self.config.value_estimator, self.config.td_lambda)
    return tf.reduce_mean(losses), extra

  def _alpha_loss(self, terms: '_Terms', rows: '_Rows'):
    """The temperatures' loss, summed over the action parts."""
    loss = tf.constant(0.0)
    for part, regulariser in terms.regularisers.items():
      losses, _ = sac_losses.sac_alpha_loss(
          self.agent.log_alpha[part],
          rows.time_major(rows.starts(regulariser)), self.target_entropy[part])
      loss += tf.reduce_mean(losses)
    return loss

  def _policy_metrics(self, terms: '_Terms', rows: '_Rows'):
    """The temperatures and the policy's entropies."""
    metrics = {f'alpha/{part}': self._alpha(part)
               for part in self.agent.log_alpha}
    if terms.log_pi is not None:
      metrics['policy/entropy_continuous'] = -tf.reduce_mean(
          rows.starts(terms.log_pi))
    if terms.probs is not None:
      metrics['policy/entropy_discrete'] = -tf.reduce_mean(rows.starts(
          tf.reduce_sum(terms.probs * tf.nn.log_softmax(terms.logits), -1)))
    return metrics
