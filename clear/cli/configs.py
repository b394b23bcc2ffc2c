"""The configs of a run, made from `python -m clear.train`'s flags.

`config_from_flags` builds the `clear.runtime.run_config.RunConfig` (with
the IMPALA-CLEAR `LearnerConfig`, or a port's config from `port_config`) that
`clear.runtime.run_loop.train` and test mode take. Flags left unset take
their env family's default (`clear.cli.defaults`).
"""

from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import config as impala_config
from clear.cli import defaults
from clear.cli import flags as cli_flags
from clear.continual import methods as continual_methods
from clear.replay import buffer as replay_lib
from clear.runtime import run_config as run_config_lib


def env_options_from_flags(f) -> dict:
  options = {'fixed_step_mul': f.fixed_step_mul}
  if f.fixed_step_mul:
    options['step_mul'] = defaults.family_default(f, 'step_mul')
  else:
    options['max_step_mul'] = f.max_step_mul
  return options


def port_config(f, env_options):
  """The PPG / SAC / DDPG config: its own defaults, overridden by the
  shared flags the user set and by the algorithm flags."""
  config_class = registry.ALGORITHMS[f.algorithm].config
  values = {'total_environment_frames': defaults.total_frames(f),
            'fixed_step_mul': env_options['fixed_step_mul'],
            'step_mul': env_options.get('step_mul', 1)}
  for field in config_class._fields:
    if field in values or field == 'num_replay':
      continue
    if field in cli_flags.SHARED_FIELDS:
      if f[field].present:
        values[field] = getattr(f, field)
    elif getattr(f, field) is not None:
      values[field] = getattr(f, field)
  return config_class(**{k: v for k, v in values.items()
                         if k in config_class._fields})


def discount_per(f) -> str:
  """--discount_per, else per frame with dynamic multipliers (a step of k
  frames then lasts k frames of discounting), per step with fixed ones."""
  if f.discount_per is not None:
    return f.discount_per
  return 'step' if f.fixed_step_mul else 'frame'


def envs_per_actor(f, learner_config) -> int:
  """--envs_per_actor, else IMPALA's family default, else (PPG, SAC, DDPG)
  the batch size: one collect of one actor then feeds exactly one update."""
  if f.envs_per_actor is not None or f.algorithm == 'impala':
    return defaults.family_default(f, 'envs_per_actor')
  return learner_config.batch_size


def torso_norm(f) -> str:
  """--torso_norm, else IMPALA's family default; the ports' agents have no
  torso norm."""
  if f.torso_norm is not None or f.algorithm == 'impala':
    return defaults.family_default(f, 'torso_norm')
  return 'none'


# clear.train flags that do not shape the run (where it is, what test mode
# plays): left out of run.json's record of the flags.
UNRECORDED_FLAGS = ('mode', 'logdir', 'record', 'record_overwrite',
                    'test_num_episodes')
# clear.train flags recorded only when not at these values, so that a
# record of the flags without them stands for those values.
RECORDED_WHEN_NOT = {'segment_lengths': 'equal'}


def unused_method_flags(f) -> set:
  """The continual-method flags that do not shape this run: the settings
  of other methods than its own, and the boundaries without a method (the
  interval without hidden boundaries)."""
  unused = {name for name in cli_flags.METHOD_FLAGS
            if f.continual_method not in continual_methods.users_of(name)}
  if f.continual_method == 'none':
    unused |= {'task_boundaries', 'consolidation_interval_frames'}
  elif f.task_boundaries != 'hidden':
    unused.add('consolidation_interval_frames')
  return unused


def recorded_flags(f) -> dict:
  """The values of clear.train's own flags (`cli_flags.FLAG_GROUPS`) that
  shape the run, by name, after the run's recorded settings were kept
  (those of `RECORDED_WHEN_NOT` only when not at its value; no setting of
  a continual method the run does not use, `unused_method_flags`)."""
  unused = unused_method_flags(f)
  names = [name for group in cli_flags.FLAG_GROUPS.groups()
           for name in group.names
           if name not in UNRECORDED_FLAGS and name not in unused]
  family = defaults.FAMILY_DEFAULTS.get(defaults.env_family(f.env))
  values = {}
  for name in names:
    value = f[name].value
    if value is None and family is not None and name in family._fields:
      value = defaults.family_default(f, name)  # What the run uses.
    if name in RECORDED_WHEN_NOT and value == RECORDED_WHEN_NOT[name]:
      continue
    values[name] = value
  return values


def impala_learner_config(f, env_options) -> impala_config.LearnerConfig:
  """IMPALA-CLEAR's `LearnerConfig`: the declared flags' values as they are
  (`cli_flags.IMPALA_DECLARED_FLAGS`), the other fields derived from the
  flags and the env family's defaults.

  Raises:
    ValueError: --replay_proportion leaves no fresh unroll in a batch.
  """
  batch_size = defaults.family_default(f, 'batch_size')
  num_replay = replay_lib.replay_batch_size(batch_size, f.replay_proportion)
  declared = {name: f[name].value for name in cli_flags.IMPALA_DECLARED_FLAGS}
  if not num_replay:  # Nothing replayed, nothing to clone.
    declared.update(policy_cloning_cost=0.0, value_cloning_cost=0.0)
  return impala_config.LearnerConfig(
      **declared, batch_size=batch_size, num_replay=num_replay,
      total_environment_frames=defaults.total_frames(f),
      discount_per=discount_per(f),
      discounting_step_mul=defaults.FAMILY_DEFAULTS[
          defaults.env_family(f.env)].step_mul,
      reward_scaling=defaults.family_default(f, 'reward_scaling'),
      learning_rate=defaults.family_default(f, 'learning_rate'),
      optimizer=defaults.family_default(f, 'optimizer'),
      step_mul=env_options.get('step_mul', 1))


def config_from_flags(f) -> run_config_lib.RunConfig:
  env_options = env_options_from_flags(f)
  if f.algorithm != 'impala':
    learner_config = port_config(f, env_options)
  else:
    learner_config = impala_learner_config(f, env_options)
  return run_config_lib.RunConfig(
      env_name=f.env, env_options=env_options, algorithm=f.algorithm,
      agent_config=agent_config(f),
      learner_config=learner_config, logdir=f.logdir, seed=f.seed,
      num_actors=f.num_actors,
      envs_per_actor=envs_per_actor(f, learner_config),
      replay_buffer_size=f.replay_buffer_size,
      replay_sampling=f.replay_sampling, replay_storage=f.replay_storage,
      replay_prefill_unrolls=f.replay_prefill_unrolls,
      num_critic_pretrain_frames=f.num_critic_pretrain_frames,
      backend=f.backend, ray_address=f.ray_address,
      ray_actor_resource=f.ray_actor_resource,
      max_actor_restarts=f.max_actor_restarts,
      actor_timeout_s=f.actor_timeout_s,
      learner_device=f.learner_device,
      checkpoint_interval_s=f.checkpoint_interval_s,
      log_interval_s=f.log_interval_s,
      allow_empty_replay_on_resume=f.allow_empty_replay_on_resume,
      keep_final_replay=f.keep_final_replay,
      stop_on_nonfinite=f.stop_on_nonfinite, init_from=f.init_from,
      init_scope=f.init_scope, frames_per_task=f.frames_per_task,
      num_task_cycles=f.num_task_cycles, segment_lengths=f.segment_lengths,
      eval_interval_frames=f.eval_interval_frames,
      eval_episodes=f.eval_episodes, eval_max_steps=f.eval_max_steps,
      evaluator=f.evaluator, eval_workers=f.eval_workers,
      continual=continual_config(f),
      flags=recorded_flags(f))


def agent_config(f) -> policy_lib.AgentConfig:
  """The networks the flags choose."""
  return policy_lib.AgentConfig(
      f.network, defaults.family_default(f, 'core_size'), f.separate_critic,
      core=f.core, torso_norm=torso_norm(f))


def continual_config(f) -> continual_methods.ContinualConfig:
  """The continual-learning method the flags choose, with its settings."""
  return continual_methods.make_config(
      f.continual_method, f.task_boundaries, f.consolidation_interval_frames,
      **{name: f[name].value for name in continual_methods.all_settings()})
