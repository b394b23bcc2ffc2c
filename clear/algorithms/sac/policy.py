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

Config (`SACConfig`): the fields SAC shares with DDPG (`SACConfig`'s
docstring and `clear.algorithms.off_policy.config` describe them; SAC's
num_critics defaults to 2) and SAC's own, below (defaults in brackets). The
defaults are the ones checked on gym:Pendulum-v1 and gym:CartPole-v1 with
64-unit MLPs (see the report of the learning checks): against the usual SAC
settings (Haarnoja et al.: learning rates 3e-4, batches of 256) they use
learning rates of 1e-3 and batches of 128, which learn these small tasks in
fewer updates; ALF's log alpha starts at 0 as here. With sample_length
raised, td1 and td_lambda give n-step-like targets.
  alpha_learning_rate [1e-3]: Adam learning rate of the temperature(s).
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
"""

import math
from typing import Callable, Optional, Tuple, Union

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import heads
from agents import initializers
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

_Field = off_policy_config.Field
SACConfig = off_policy_config.config_class(
    'SACConfig', __name__,
    'SAC hyperparameters; the module docstring describes SAC\'s own fields.',
    own_fields={
        'critic_learning_rate': [_Field('alpha_learning_rate', float, 1e-3)],
        'num_critics': [
            _Field('target_entropy',
                   Union[None, float, Callable, Tuple[float, float]], None),
            _Field('initial_alpha', float, 1.0),
            _Field('max_log_alpha', Optional[float], None),
            _Field('prior_actor', str, ''),
            _Field('prior_kl_weight', float, 1.0),
            _Field('target_kld_per_dim', float, 3.0),
        ]},
    defaults={'num_critics': 2})


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

  def _update(self, tr, weights):
    c, layout, agent = self.config, self.layout, self.agent
    merge = networks.merge_leading
    steps_p1, num_segments = tr.first.shape  # L + 1, K (static).
    rows = steps_p1 * num_segments  # M1: every observation.
    taken_rows = (steps_p1 - 1) * num_segments  # M0: every transition.
    features = self._segment_features(tr)
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
        log_pi = sac_losses.tanh_gaussian_log_prob(pre_tanh, mean, log_std,
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
        logits = tf.stop_gradient(sac_losses.soft_policy_logits(
            q_new, self._alpha('discrete'), mask))
        log_prior = None
        if c.prior_actor:
          log_prior = self._discrete_log_prior(merge(tr.prev_action[key]),
                                               first, rows)
        reg_d, probs = sac_losses.discrete_regulariser(logits, log_prior,
                                                       w_prior)
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
        actor_losses, _ = sac_losses.sac_actor_loss(
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
      critic_losses, critic_extra = sac_losses.sac_critic_loss(
          critics_time_major(q_taken, steps_p1 - 1),
          critics_time_major(q_target, steps_p1 - 1),
          time_major(after(penalty), steps_p1 - 1), tr.reward, tr.discount,
          tr.truncated, next_probs, weights, c.value_estimator, c.td_lambda)
      critic_loss = tf.reduce_mean(critic_losses)

      # Temperatures.
      alpha_loss = tf.constant(0.0)
      for part, reg in regularisers.items():
        losses, _ = sac_losses.sac_alpha_loss(
            agent.log_alpha[part], time_major(now(reg), steps_p1 - 1),
            self.target_entropy[part])
        alpha_loss += tf.reduce_mean(losses)

    critic_grads, critic_norm = guards.clipped_gradients(
        tape, critic_loss, critic_vars, c.clip_grad_norm)
    alpha_grads, alpha_norm = guards.clipped_gradients(
        tape, alpha_loss, self.alpha_variables, c.clip_grad_norm)
    checks = [critic_loss, alpha_loss, critic_norm, alpha_norm]
    actor_grads = []
    if agent.actor is not None:
      actor_grads, actor_norm = guards.clipped_gradients(
          tape, actor_loss, actor_vars, c.clip_grad_norm)
      checks += [actor_loss, actor_norm]
    del tape

    def apply():
      self.critic_optimizer.apply(critic_grads, critic_vars)
      if agent.actor is not None:
        self.actor_optimizer.apply(actor_grads, actor_vars)
      self.alpha_optimizer.apply(alpha_grads, self.alpha_variables)
      if c.max_log_alpha is not None:
        for v in self.alpha_variables:
          v.assign(tf.minimum(v, c.max_log_alpha))
      self.target_updater()

    applied = self._apply_if_finite(checks, apply)
    mask = critic_extra.mask
    metrics = {
        'loss/critic': critic_loss,
        'loss/alpha': alpha_loss,
        'value/q_mean': tf.reduce_mean(q_taken),
        'value/target_mean': tf.reduce_mean(critic_extra.targets),
        'value/abs_td_error': off_policy_losses.masked_mean(
            tf.reduce_mean(tf.abs(critic_extra.td_errors), 0), mask),
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
    priorities = off_policy_losses.segment_priorities(
        critic_extra.squared_errors, mask)
    return metrics, applied, priorities
