"""How a run names, records and checks its continual-learning method.

`--continual_method` picks one of `CONTINUAL_METHODS` for the IMPALA-CLEAR
learner: 'none' (nothing added to its loss or its checkpoints), 'ewc' or
'online_ewc' (`clear.continual.ewc`), or 'pnc', Progress & Compress
(`clear.continual.pnc`, `clear.algorithms.pnc`: two columns, online EWC on
the knowledge base in its compress phases). A method changes what a
checkpoint holds (anchors, Fishers and the unrolls kept for the next
Fisher), so a run's method and the size of its kept unrolls (and, for
'pnc', where its phases fall and whether a switch re-draws the active
column) are part of the identity its run.json records, and a resume with
another method is refused; the penalty's weight, online EWC's decay and the
number of Fisher batches are settings a resume may change (kept from
run.json when their flags are left unset, like the batch size).

Defaults (`impala.config.LearnerConfig`): 100 Fisher batches of `batch_size`
unrolls and gamma 0.99, as CORA (Powers et al. 2022) used; the Fisher drawn
from the task's last 100,000 frames (5,000 MinAtar unrolls, about 100 MB),
where CORA kept 1M frames on disk; lambda 1, for P&C's compress phases
too. This project's losses are sums over the T x B steps of a batch, as
TorchBeast's and so CORA's, so lambda is in CORA's units, where CORA ran EWC
at 10,000 and Progress & Compress searched 500 to 3,000. Why lambda is 1:
docs/continual.md#methods-built-for-forgetting.
"""

from typing import Dict

from clear import checkpoint as checkpoint_lib

CONTINUAL_METHODS = ('none', 'ewc', 'online_ewc', 'pnc')

# Learner-config fields a run with a method records among its settings.
SETTINGS = ('ewc_lambda', 'ewc_gamma', 'ewc_fisher_batches')


def method_of(learner_config) -> str:
  """The config's method ('none' for configs without one: the ports')."""
  return getattr(learner_config, 'continual_method', 'none')


def identity(learner_config) -> Dict[str, object]:
  """run.json identity fields of the method: none for 'none', so a run.json
  without `continual_method` is that of a run without a method."""
  method = method_of(learner_config)
  if method == 'none':
    return {}
  identity = {'continual_method': method,
              'ewc_fisher_frames': learner_config.ewc_fisher_frames}
  if method == 'pnc':  # Where the phases fall, and what a switch does.
    identity.update(
        pnc_progress_fraction=learner_config.pnc_progress_fraction,
        pnc_reset_active_column=learner_config.pnc_reset_active_column)
  return identity


def actor_agent_config(config):
  """The agent config the actors build their policy from: with 'pnc',
  both columns (the active column acts); otherwise the run's."""
  if method_of(config.learner_config) == 'pnc':
    return config.agent_config._replace(pnc_columns=True)
  return config.agent_config


def learner_config(config, schedule):
  """`config.learner_config` with one EWC slot per distinct task (and,
  for 'pnc', the frames of a visit).

  Args:
    config: the run's `clear.runtime.run_config.RunConfig`.
    schedule: its `clear.continual.schedule.TaskSchedule`, or None for a
      single env.

  Raises:
    CheckpointError: the logdir holds a run of another method (also 'none'
      against one, which the identity check alone would let through).
    ValueError: a method without a task sequence.
  """
  lc = config.learner_config
  method = method_of(lc)
  saved = checkpoint_lib.read_run_identity(config.logdir)
  recorded = (saved or {}).get('continual_method', 'none')
  if saved is not None and recorded != method:
    raise checkpoint_lib.CheckpointError(
        f'The logdir {config.logdir} holds a run made with continual_method='
        f'{recorded!r}, not {method!r}. Use a new --logdir or the original '
        'flags.')
  if method == 'none':
    return lc
  if schedule is None:
    raise ValueError(f'continual_method={method!r} needs a task sequence '
                     '(a comma-separated env).')
  lc = lc._replace(ewc_num_tasks=len(schedule.unique_task_names))
  if method == 'pnc':
    lc = lc._replace(pnc_frames_per_task=schedule.frames_per_task)
  return lc
