"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016, 1509.02971).

T is time, B is batch, N is the number of critics, C the number of
continuous action entries.

A deterministic actor mu(s) (tanh, scaled to the action bounds), critics
Q_i(s, a) on [observation; action scaled to [-1, 1]], a target actor and
target critics moved by soft updates, Gaussian exploration noise clipped to
the bounds. It shares SAC's machinery (`clear.algorithms.off_policy.policy`
and the modules it names: config fields, critic ensemble, target updates,
replayed segments, Q targets from `clear.ops.value_estimators`,
episode-end handling, prioritized replay). With `num_critics` = 2,
`target_noise` > 0 and `actor_update_period` = 2 it becomes TD3 (Fujimoto et
al. 2018).

The loss is one module-like function, `ddpg_loss`, returning the named terms
together (`DDPGLoss`: loss_actor, loss_value, pred_value, target_value,
td_error), as TorchRL loss modules do; the learner logs them and turns the
TD errors into replay priorities.

Config (`DDPGConfig`, declared by `SETTINGS`): the fields DDPG shares with
SAC (`clear.algorithms.off_policy.config`; DDPG's num_critics defaults to
1) and DDPG's own. The defaults are the ones checked on gym:Pendulum-v1
with 64-unit MLPs (learning rates 1e-3 and noise 0.1 as in the usual
DDPG/TD3 settings; batches of 128 instead of 256; docs/algorithms.md#ddpg).
"""

from typing import NamedTuple, Optional

import numpy as np
import sonnet as snt
import tensorflow as tf

from agents import initializers
from clear import settings as settings_lib
from clear import types
from clear.algorithms.off_policy import config as off_policy_config
from clear.algorithms.off_policy import losses as off_policy_losses
from clear.algorithms.off_policy import networks
from clear.algorithms.off_policy import policy as off_policy
from clear.ops import guards

_Setting = settings_lib.Setting
_shared = off_policy_config.shared
# DDPGConfig's fields, in order: the shared ones with DDPG's own among them.
SETTINGS = (
    *_shared('batch_size', 'num_replay', 'unroll_length',
             'total_environment_frames', 'fixed_step_mul', 'step_mul',
             'discounting', 'reward_scaling', 'actor_learning_rate',
             'critic_learning_rate', 'tau', 'target_update_period'),
    off_policy_config.SHARED['num_critics']._replace(default=1),
    _Setting('exploration_noise', 0.1,
             'std of the Gaussian acting noise, as a fraction of the half '
             'range of each action entry (shipped to actors with the '
             'weights).'),
    _Setting('target_noise', 0.0,
             "std of TD3's target smoothing noise, as a fraction of the "
             'half range of each action entry (0 = off).'),
    _Setting('target_noise_clip', 0.5,
             'the smoothing noise is clipped to +-this (a fraction of the '
             'half range).'),
    _Setting('actor_update_period', 1,
             'the actor learns every this many updates.'),
    *_shared('value_estimator', 'td_lambda', 'sample_length',
             'sample_batch_size', 'replay_capacity', 'prioritized',
             'priority_exponent', 'importance_exponent', 'learning_starts',
             'random_actions_until_start', 'updates_per_step',
             'clip_grad_norm', 'jit_compile'),
)
DDPGConfig = settings_lib.settings_class('DDPGConfig', SETTINGS,
                                         summary='DDPG hyperparameters.')


def validate_config(config: DDPGConfig,
                    spec: Optional[types.EnvSpec] = None):
  """Raises ValueError with one clear message for an impossible setting."""
  off_policy_config.validate_common(config, spec, 'DDPG')
  if config.exploration_noise < 0:
    raise ValueError('exploration_noise must be >= 0, got '
                     f'{config.exploration_noise}.')
  if config.target_noise < 0 or config.target_noise_clip < 0:
    raise ValueError('target_noise and target_noise_clip must be >= 0, got '
                     f'{config.target_noise} and {config.target_noise_clip}.')
  if config.actor_update_period < 1:
    raise ValueError('actor_update_period must be >= 1, got '
                     f'{config.actor_update_period}.')
  if spec is not None:
    discrete = [k for k, s in spec.action_spec.items()
                if isinstance(s, types.DiscreteSpec)]
    if discrete:
      raise ValueError(
          f'DDPG needs continuous actions only; the env has discrete action '
          f'heads {discrete} (use SAC for discrete or mixed actions).')
    if not spec.action_spec:
      raise ValueError('DDPG needs at least one continuous action head.')


# --- Loss ---------------------------------------------------------------------


class DDPGLoss(NamedTuple):
  """The named terms of `ddpg_loss`, float32 `[T, B]` each.

  Attributes:
    loss_actor: -min_i Q_i(x_t, mu(x_t)).
    loss_value: masked, importance-weighted sum over critics of
      0.5 (G_t - Q_i(x_t, a_t))^2.
    pred_value: mean over critics of Q_i(x_t, a_t) (no gradient).
    target_value: G_t.
    td_error: G_t - pred_value (no gradient; priorities come from it).
  """
  loss_actor: tf.Tensor
  loss_value: tf.Tensor
  pred_value: tf.Tensor
  target_value: tf.Tensor
  td_error: tf.Tensor


def ddpg_loss(q_taken, q_policy, targets, mask, importance_weights=None):
  """DDPG's actor and value losses and diagnostics, per element.

  T is time, B is batch, N critics.

  Args:
    q_taken: float32 `[N, T, B]`, Q_i(x_t, a_t) of the replayed actions.
    q_policy: float32 `[N, T, B]`, Q_i(x_t, mu(x_t)); carries the actor's
      gradient (the caller applies it to the actor only).
    targets: float32 `[T, B]`, G_t (gradients stopped).
    mask: float32 `[T, B]`, 0 for transitions left out of the value loss.
    importance_weights: float32 `[B]` or `[T, B]`, or None.

  Returns:
    `DDPGLoss`.

  Raises:
    ValueError: wrong ranks.
  """
  q_policy = tf.convert_to_tensor(q_policy, tf.float32)
  if q_policy.shape.rank != 3:
    raise ValueError('ddpg_loss: q_policy must be [N, T, B], got shape '
                     f'{q_policy.shape}.')
  loss_value, extra = off_policy_losses.critic_ensemble_loss(
      q_taken, targets, mask, importance_weights)
  pred = tf.stop_gradient(tf.reduce_mean(q_taken, axis=0))
  targets = tf.stop_gradient(tf.convert_to_tensor(targets, tf.float32))
  del extra
  return DDPGLoss(loss_actor=-tf.reduce_min(q_policy, axis=0),
                  loss_value=loss_value, pred_value=pred,
                  target_value=targets, td_error=targets - pred)


# --- Networks and policy ------------------------------------------------------


class DDPGAgent(snt.Module):
  """What DDPG acts with (and what `get_weights` ships to actors).

  Attributes:
    actor: MLP observation -> pre-tanh action `[C]`.
    exploration_noise: float32 variable, noise std / half range.
    random_actions: float32 variable, 1 while actors act uniformly.
    rng: the sampling Generator.
  """

  def __init__(self, spec, layout: networks.ActionLayout, hidden_sizes,
               init_rng: np.random.Generator, seed: int,
               exploration_noise: float, name='agent'):
    super().__init__(name=name)
    with self.name_scope:
      self.rng = tf.random.Generator.from_seed(seed)
      self.random_actions = tf.Variable(1.0, trainable=False,
                                        name='random_actions')
      self.exploration_noise = tf.Variable(exploration_noise,
                                           dtype=tf.float32, trainable=False,
                                           name='exploration_noise')
    self.actor = networks.MLP(hidden_sizes, layout.continuous_size,
                                initializers.SeededFanIn(init_rng),
                                name='actor')
    self.actor(tf.zeros([1, networks.observation_size(spec)]))


class DDPGPolicy(off_policy.OffPolicyPolicy):
  """DDPG over an MLP; see the module docstring.

  Args:
    spec: the environment spec (continuous actions only).
    agent_config: `policy.AgentConfig` (network 'mlp' or 'auto'; two hidden
      layers of `core_size` units for actor and critics).
    learner_config: `DDPGConfig`, or None for an acting-only copy.
    seed: seeds the initialisation, the sampling and the replay.
  """

  algorithm = 'DDPG'

  def __init__(self, spec, agent_config, learner_config=None, seed=0):
    validate_config(DDPGConfig() if learner_config is None
                    else learner_config, spec)
    super().__init__(spec, agent_config, learner_config, seed)

  def _validate(self, config, spec):
    validate_config(config, spec)

  def _build_agent(self, seed):
    noise = (self.config.exploration_noise if self.config is not None
             else DDPGConfig().exploration_noise)
    return DDPGAgent(self.spec, self.layout, self._hidden_sizes,
                     self._init_rng, seed, noise)

  def _build_learner(self):
    c, layout = self.config, self.layout
    self.critics = self._make_critics('critics')
    self.target_critics = self._make_critics('target_critics')
    self.target_actor = networks.MLP(
        self._hidden_sizes, layout.continuous_size,
        initializers.SeededFanIn(self._init_rng), name='target_actor')
    self.target_actor(tf.zeros([1, networks.observation_size(self.spec)]))
    online = (list(self.critics.trainable_variables) +
              list(self.agent.actor.trainable_variables))
    target = (list(self.target_critics.trainable_variables) +
              list(self.target_actor.trainable_variables))
    self.target_updater = networks.TargetUpdater(
        online, target, c.tau, c.target_update_period)
    self.critic_optimizer = off_policy.make_adam(
        c.critic_learning_rate, self.critics.trainable_variables)
    self.actor_optimizer = off_policy.make_adam(
        c.actor_learning_rate, self.agent.actor.trainable_variables)
    self.metric_names = ['loss/actor', 'loss/value', 'value/pred_mean',
                         'value/target_mean', 'value/abs_td_error',
                         'grad_norm/actor', 'grad_norm/critic']

  def _learner_checkpointables(self):
    return {'critics': self.critics, 'target_critics': self.target_critics,
            'target_actor': self.target_actor,
            'target_updates': self.target_updater.num_calls,
            'critic_optimizer': self.critic_optimizer,
            'actor_optimizer': self.actor_optimizer}

  def _scope_variables(self, scope):
    policy = (list(self.agent.actor.trainable_variables) +
              list(self.target_actor.trainable_variables))
    critic = (list(self.critics.trainable_variables) +
              list(self.target_critics.trainable_variables))
    return {'policy': policy, 'critic': critic,
            'all': policy + critic}[scope]

  # --- Acting -----------------------------------------------------------------

  def _act(self, observation):
    layout, agent = self.layout, self.agent
    features = self._features(observation)
    batch = tf.shape(features)[0]
    size = layout.continuous_size
    unit = tf.tanh(agent.actor(features))
    unit += agent.exploration_noise * agent.rng.normal([batch, size])
    uniform = agent.rng.uniform([batch, size], -1.0, 1.0)
    unit = tf.where(agent.random_actions > 0.5, uniform, unit)
    action = layout.unit_to_env(tf.clip_by_value(unit, -1.0, 1.0))
    return types.AgentOutput({k: action[k] for k in self.spec.action_spec},
                             {}, tf.zeros([batch], tf.float32))

  # --- Learning ---------------------------------------------------------------

  def _update(self, tr, weights):
    c, layout, agent = self.config, self.layout, self.agent
    merge = networks.merge_leading
    steps_p1, num_segments = tr.first.shape  # L + 1, K (static).
    taken_rows = (steps_p1 - 1) * num_segments
    features = self._segment_features(tr)
    now, after = features[:taken_rows], features[num_segments:]
    time_major = lambda q: tf.reshape(
        q, q.shape[:-1].as_list() + [steps_p1 - 1, num_segments])
    critic_vars = self.critics.trainable_variables
    actor_vars = agent.actor.trainable_variables

    with tf.GradientTape(persistent=True) as tape:
      policy_unit = tf.tanh(agent.actor(now))
      taken_unit = merge(layout.env_to_unit(tr.action))
      q_both = self.critics(tf.concat(
          [tf.concat([now, policy_unit], -1),
           tf.concat([now, taken_unit], -1)], 0))[..., 0]
      q_policy, q_taken = q_both[:, :taken_rows], q_both[:, taken_rows:]

      target_unit = tf.tanh(self.target_actor(after))
      if c.target_noise > 0:
        noise = c.target_noise * agent.rng.normal(tf.shape(target_unit))
        target_unit += tf.clip_by_value(noise, -c.target_noise_clip,
                                        c.target_noise_clip)
        target_unit = tf.clip_by_value(target_unit, -1.0, 1.0)
      q_target = self.target_critics(tf.concat([after, target_unit],
                                               -1))[..., 0]
      next_values = time_major(tf.reduce_min(q_target, axis=0))
      targets = off_policy_losses.next_state_targets(
          tr.reward, tr.discount, tr.truncated, next_values,
          c.value_estimator, c.td_lambda)
      terms = ddpg_loss(time_major(q_taken), time_major(q_policy),
                        targets.targets, targets.mask, weights)
      actor_loss = tf.reduce_mean(terms.loss_actor)
      critic_loss = tf.reduce_mean(terms.loss_value)

    critic_grads, critic_norm = guards.clipped_gradients(
        tape, critic_loss, critic_vars, c.clip_grad_norm)
    actor_grads, actor_norm = guards.clipped_gradients(
        tape, actor_loss, actor_vars, c.clip_grad_norm)
    del tape

    def apply():
      self.critic_optimizer.apply(critic_grads, critic_vars)
      step = self.counters.num_updates
      tf.cond(tf.equal(step % c.actor_update_period, 0),
              lambda: self._apply_actor(actor_grads, actor_vars),
              lambda: tf.constant(False))
      self.target_updater()

    applied = self._apply_if_finite(
        [critic_loss, actor_loss, critic_norm, actor_norm], apply)
    mask = targets.mask
    squared = tf.square(terms.td_error)
    metrics = {
        'loss/actor': actor_loss,
        'loss/value': critic_loss,
        'value/pred_mean': tf.reduce_mean(terms.pred_value),
        'value/target_mean': tf.reduce_mean(terms.target_value),
        'value/abs_td_error': off_policy_losses.masked_mean(
            tf.abs(terms.td_error), mask),
        'grad_norm/actor': actor_norm,
        'grad_norm/critic': critic_norm,
    }
    return metrics, applied, off_policy_losses.segment_priorities(squared,
                                                                  mask)

  def _apply_actor(self, grads, variables):
    self.actor_optimizer.apply(grads, variables)
    return tf.constant(True)
