"""Tests of the training run: phases, replay split, resume, test mode."""

import glob
import json
import multiprocessing
import os
import time

import numpy as np
import psutil
import pytest
import tensorflow as tf

from clear import checkpoint as checkpoint_lib
from clear import plot
from clear import snapshot
from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import learner as learner_lib
from clear.runtime import evaluation
from clear.runtime import final_replay
from clear.runtime import progress
from clear.runtime import run_config
from clear.runtime import run_loop
from tests.event_files import scalar_series
from tests.event_files import tags


def make_config(logdir, **kwargs):
  learner_kwargs = {k: kwargs.pop(k) for k in list(kwargs)
                    if k in learner_lib.LearnerConfig._fields}
  learner_config = learner_lib.LearnerConfig(
      **{'batch_size': 4, 'num_replay': 2, 'unroll_length': 5,
         'total_environment_frames': 5000, **learner_kwargs})
  return run_config.RunConfig(
      **{'env_name': 'gym:CartPole-v1', 'env_options': {},
         'algorithm': 'impala',
         'agent_config': policy_lib.AgentConfig('mlp', 8),
         'learner_config': learner_config, 'logdir': str(logdir),
         'num_actors': 1, 'envs_per_actor': 4, 'log_interval_s': 0.0,
         'checkpoint_interval_s': 3600.0, **kwargs})


def saved_variables(logdir):
  path = tf.train.latest_checkpoint(os.path.join(str(logdir), 'checkpoints'))
  reader = tf.train.load_checkpoint(path)
  return {name: reader.get_tensor(name)
          for name in reader.get_variable_to_shape_map()}


def phase_of(logdir):
  return int(saved_variables(logdir)['phase/.ATTRIBUTES/VARIABLE_VALUE'])


def test_phases_run_in_order_and_resume_where_they_stopped(tmp_path):
  config = make_config(tmp_path, replay_prefill_unrolls=12,
                       num_critic_pretrain_frames=200)
  first = run_loop.train(config, max_updates=3)
  # 12 prefill unrolls (60 frames) + 3 critic updates of 2 fresh unrolls.
  assert first.phase == 'critic'
  assert first.num_env_frames == 12 * 5 + 3 * 2 * 5
  assert first.num_updates == 3
  assert phase_of(tmp_path) == run_loop.CRITIC
  second = run_loop.train(config, max_updates=30)
  assert second.num_updates == 33
  assert second.phase == 'main'
  assert second.num_env_frames > first.num_env_frames
  assert phase_of(tmp_path) == run_loop.MAIN
  # Critic pretraining and main-phase summaries reached TensorBoard.
  assert {'critic_pretrain/loss/baseline', 'loss/policy_cloning',
          'runtime/policy_lag', 'replay/size',
          'episode/gym:CartPole-v1/return'} <= tags(tmp_path)


@pytest.mark.parametrize('optimizer', ['adam', 'rmsprop'])
def test_resume_restores_weights_and_optimizer_slots(tmp_path, optimizer):
  config = make_config(tmp_path, optimizer=optimizer, backend='inline')
  run_loop.train(config, max_updates=2)
  saved = saved_variables(tmp_path)
  run = run_loop._Run(config)
  assert run.restored
  learner = run.policy.learner
  assert run.frames == saved['num_env_frames/.ATTRIBUTES/VARIABLE_VALUE']
  assert learner.num_updates.numpy() == 2
  # Weights: the restored agent differs from a fresh one of the same seed.
  fresh = registry.make_policy('impala', run.policy.spec,
                                 config.agent_config, seed=config.seed)
  assert any(np.any(a != b) for a, b in zip(fresh.get_weights(),
                                             run.policy.get_weights()))
  checkpoint_lib.restore_part(os.path.join(str(tmp_path), 'checkpoints'),
                              {'agent': fresh.agent})
  for a, b in zip(fresh.get_weights(), run.policy.get_weights()):
    np.testing.assert_array_equal(a, b)
  # Optimizer slots are created after the restore, when the run builds its
  # update graph, and restored when they appear; then zero gradients leave
  # Adam's m = beta1 * m_saved and RMSProp's mean square ms = decay *
  # ms_saved (not decay * 1, its initial value).
  slots, decay = (('m', 0.9) if optimizer == 'adam' else ('ms', 0.99))
  assert not getattr(learner.optimizer, slots)
  lc = config.learner_config
  run.policy.trace(policy_lib.example_batch(run.policy, lc.unroll_length,
                                            lc.batch_size))
  saved_slots = [saved[f'optimizer/{slots}/{i}/.ATTRIBUTES/VARIABLE_VALUE']
                 for i in range(len(getattr(learner.optimizer, slots)))]
  for slot, saved_slot in zip(getattr(learner.optimizer, slots), saved_slots):
    assert np.any(np.abs(saved_slot - 1) > 1e-3)
    np.testing.assert_array_equal(slot.numpy(), saved_slot)
  variables = run.policy.agent.trainable_variables
  learner.optimizer.apply([tf.zeros_like(v) for v in variables], variables)
  for slot, saved_slot in zip(getattr(learner.optimizer, slots), saved_slots):
    np.testing.assert_allclose(slot.numpy(), decay * saved_slot, rtol=1e-6)
  if optimizer == 'adam':
    assert learner.optimizer.step.numpy() == 1 + saved[
        'optimizer/step/.ATTRIBUTES/VARIABLE_VALUE']


def test_dynamic_step_multipliers_count_the_frames_they_ran(tmp_path,
                                                           caplog):
  # 3 updates x 2 fresh unrolls x 5 steps, each step running 1 to 4 frames:
  # a count of exactly 30 would mean the multipliers were never applied.
  config = make_config(tmp_path, backend='inline', fixed_step_mul=False,
                       env_options={'fixed_step_mul': False,
                                    'max_step_mul': 4})
  with caplog.at_level('INFO'):
    result = run_loop.train(config, max_updates=3)
  assert 30 < result.num_env_frames <= 30 * 4
  replay_lines = [r.getMessage() for r in caplog.records
                  if r.getMessage().startswith('replay:')]
  assert replay_lines and all('agent steps' in line for line in replay_lines)


def latest_run_state(logdir):
  states = glob.glob(os.path.join(str(logdir), 'checkpoints', 'state-*',
                                  'run.npz'))
  latest = max(states, key=lambda p: int(p.split('state-')[1].split('/')[0]))
  return snapshot.load(latest)


def test_run_time_adds_up_over_resumes_without_the_downtime(tmp_path):
  config = make_config(tmp_path, backend='inline')
  first = run_loop.train(config, max_updates=2)
  run_time_1 = float(latest_run_state(tmp_path)['run_time_s'])
  assert 0 < run_time_1 <= first.wall_time_s
  time.sleep(2.0)  # Downtime, which must not count.
  second = run_loop.train(config, max_updates=2)
  run_time_2 = float(latest_run_state(tmp_path)['run_time_s'])
  assert 0 < run_time_2 - run_time_1 <= second.wall_time_s
  series = plot.read_scalars(str(tmp_path))[plot.RUN_TIME_TAG]
  assert np.all(np.diff(series.values) >= 0)
  assert series.values[0] <= run_time_1 < series.values[-1] <= run_time_2


def test_logdir_of_another_network_is_rejected(tmp_path):
  run_loop.train(make_config(tmp_path, backend='inline'), max_updates=1)
  other = make_config(tmp_path, backend='inline',
                      agent_config=policy_lib.AgentConfig('mlp', 16))
  with pytest.raises(checkpoint_lib.CheckpointError, match='core_size'):
    run_loop.train(other, max_updates=1)


def test_init_from_loads_only_the_part_asked_for(tmp_path):
  # A critic-pretraining run, then a new run that takes only its critic.
  pretrain = make_config(tmp_path / 'pretrain', num_replay=0, seed=1,
                         backend='inline',
                         agent_config=policy_lib.AgentConfig('mlp', 8, True),
                         num_critic_pretrain_frames=10**6)
  run_loop.train(pretrain, max_updates=2)
  source = run_loop._Run(pretrain).policy.agent
  main = pretrain._replace(logdir=str(tmp_path / 'main'), seed=2,
                           num_critic_pretrain_frames=0,
                           init_from=str(tmp_path / 'pretrain'),
                           init_scope='critic')
  agent = run_loop._Run(main).policy.agent
  fresh = registry.make_policy('impala', run_config.env_spec(main),
                                 main.agent_config, seed=2).agent
  for target, expected in zip(agent.critic_variables,
                              source.critic_variables):
    np.testing.assert_array_equal(target.numpy(), expected.numpy())
  for target, expected in zip(agent.policy_variables,
                              fresh.policy_variables):
    np.testing.assert_array_equal(target.numpy(), expected.numpy())
  # Once the new run has a checkpoint of its own, it resumes that instead.
  run_loop.train(main, max_updates=1)
  resumed = run_loop._Run(main).policy.agent
  assert any(np.any(a.numpy() != b.numpy()) for a, b in zip(
      resumed.critic_variables, source.critic_variables))
  # Another network fails with one clear message, before any update.
  other = main._replace(logdir=str(tmp_path / 'other'),
                        agent_config=policy_lib.AgentConfig('mlp', 16, True))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match='different network'):
    run_loop._Run(other)


def _write_results(logdir, index):
  evaluation.write_test_results(logdir, {'env': 'x', 'num_episodes': index})


def test_test_results_are_kept_beside_the_earlier_ones(tmp_path):
  logdir = str(tmp_path)
  with open(os.path.join(logdir, 'test_results.json'), 'w') as f:
    json.dump({'env': 'x', 'num_episodes': -1}, f)  # A single summary.
  # Twelve test runs from four processes at once: none is lost.
  ctx = multiprocessing.get_context('spawn')
  with ctx.Pool(4) as pool:
    pool.starmap(_write_results, [(logdir, i) for i in range(12)])
  runs = evaluation.read_test_results(logdir)
  assert runs[0] == {'env': 'x', 'num_episodes': -1}
  assert sorted(r['num_episodes'] for r in runs[1:]) == list(range(12))
  assert all(r['time'] for r in runs[1:])
  assert os.listdir(logdir) == ['test_results.json']  # No leftovers.
  with open(os.path.join(logdir, 'test_results.json'), 'w') as f:
    f.write('[1, 2]')
  with pytest.raises(ValueError, match='holds no test runs'):
    evaluation.write_test_results(logdir, {'env': 'x'})
  with open(os.path.join(logdir, 'test_results.json')) as f:
    assert f.read() == '[1, 2]'  # Left as it was.


def test_evaluate_writes_the_summary_json(tmp_path):
  config = make_config(tmp_path, backend='inline')
  run_loop.train(config, max_updates=2)
  summary = evaluation.evaluate(config, num_episodes=5)
  assert not os.path.exists(os.path.join(str(tmp_path), 'test_results.json'))
  path = evaluation.write_test_results(config.logdir, summary)
  assert path == os.path.join(str(tmp_path), 'test_results.json')
  with open(path) as f:
    [written] = json.load(f)['runs']
  assert written['num_episodes'] == 5 and written['time']
  returns = np.asarray(written['returns'])
  assert len(returns) == 5
  np.testing.assert_allclose(written['mean'], returns.mean())
  np.testing.assert_allclose(written['median'], np.median(returns))
  assert written['min'] == returns.min() and written['max'] == returns.max()
  low, high = written['ci95']
  assert low <= written['mean'] <= high
  assert summary['mean'] == written['mean']


def test_evaluate_without_a_checkpoint_fails_clearly(tmp_path):
  with pytest.raises(checkpoint_lib.CheckpointError, match='train first'):
    evaluation.evaluate(make_config(tmp_path), num_episodes=2)


def test_summaries_are_stepped_by_env_frames_and_every_run_logs_progress(
    tmp_path, caplog):
  # Batches of 2 replayed + 2 fresh unrolls of 5 frames: the first fresh
  # unroll only seeds the replay (5 frames), then each update adds 10. The
  # log interval is never reached, so only the end of the run logs.
  config = make_config(tmp_path, backend='inline', log_interval_s=3600.0)
  with caplog.at_level('INFO'):
    result = run_loop.train(config, max_updates=3)
  assert result.num_env_frames == 35
  lines = [r.getMessage() for r in caplog.records
           if r.getMessage().startswith('[main] frames ')]
  assert len(lines) == 1 and lines[0].startswith('[main] frames 35/5,000 ')
  assert [step for step, _ in scalar_series(tmp_path, 'loss/total')] == [
      15, 25, 35]
  assert scalar_series(tmp_path, 'runtime/num_updates') == [(35, 3.0)]
  for tag in ('runtime/env_frames_per_s', 'runtime/run_time_s',
              'replay/size', 'replay/bytes', 'grad_norm',
              'runtime/memory_pss_mb', 'runtime/memory_peak_pss_mb'):
    assert scalar_series(tmp_path, tag)[-1][0] == 35, tag
  # The memory of the run's process (inline: one), with TensorFlow loaded,
  # measured once at its end (its one progress line), said once.
  readings = scalar_series(tmp_path, 'runtime/memory_pss_mb')
  assert [step for step, _ in readings] == [35]
  assert all(100 < mb < 20_000 for _, mb in readings)
  assert result.peak_memory_mb == pytest.approx(max(mb for _, mb in readings))
  assert sum(r.getMessage().startswith('memory: ')
             for r in caplog.records) == 1
  assert any(r.getMessage().startswith(f'Logdir {tmp_path};')
             for r in caplog.records)
  # clear.plot reads the curves against frames, also over a resume.
  run_loop.train(config, max_updates=2)
  scalars = plot.read_scalars(str(tmp_path))
  np.testing.assert_array_equal(scalars['loss/total'].steps,
                                [15, 25, 35, 45, 55])
  returns = plot.curves(scalars, 'episode/')['gym:CartPole-v1']
  assert len(returns.steps) and returns.steps[-1] <= 55
  assert np.all(np.diff(returns.steps) >= 0)


def test_inline_runs_with_one_seed_are_identical(tmp_path):
  config = make_config(tmp_path / 'a', backend='inline', seed=3)
  run_loop.train(config, max_updates=6)
  run_loop.train(config._replace(logdir=str(tmp_path / 'b')), max_updates=6)
  first = scalar_series(tmp_path / 'a', 'loss/total')
  second = scalar_series(tmp_path / 'b', 'loss/total')
  assert len(first) == 6
  assert first == second
  other = config._replace(logdir=str(tmp_path / 'c'), seed=4)
  run_loop.train(other, max_updates=6)
  assert scalar_series(tmp_path / 'c', 'loss/total') != first


def test_replay_contents_survive_resume(tmp_path):
  config = make_config(tmp_path, backend='inline')
  run_loop.train(config, max_updates=4)
  checkpoints = os.path.join(str(tmp_path), 'checkpoints')
  state_dirs = sorted(glob.glob(os.path.join(checkpoints, 'state-*')))
  assert [os.path.basename(d) for d in state_dirs] == ['state-1']
  replay_dir = os.path.join(state_dirs[0], 'replay')
  with open(os.path.join(replay_dir, 'replay.json')) as f:
    saved = json.load(f)
  run = run_loop._Run(config)
  assert len(run.buffer) == saved['size'] > 0
  assert run.buffer.num_seen == saved['num_seen']
  saved_first = np.load(os.path.join(replay_dir, 'contents_000.npy'),
                        allow_pickle=False)
  np.testing.assert_array_equal(run.buffer._leaves[0][:len(run.buffer)],
                                saved_first)
  # A second run saves state-2 with checkpoint 2; old folders are pruned
  # along with their checkpoints (3 kept).
  for _ in range(3):
    run_loop.train(config, max_updates=1)
  names = sorted(os.path.basename(d) for d in
                 glob.glob(os.path.join(checkpoints, 'state-*')))
  assert names == ['state-2', 'state-3', 'state-4']


def test_a_full_disk_while_checkpointing_is_one_error_and_loses_nothing(
    tmp_path, monkeypatch):
  config = make_config(tmp_path, backend='inline')
  run_loop.train(config, max_updates=2)
  checkpoints = os.path.join(str(tmp_path), 'checkpoints')
  run = run_loop._Run(config)
  frames = run.frames

  def fake_full_disk_save(path, arrays):
    del arrays
    with open(path, 'wb') as f:  # A partial file, as a full disk leaves.
      f.write(b'partial')
    raise OSError(28, 'No space left on device')

  monkeypatch.setattr(snapshot, 'save', fake_full_disk_save)
  with pytest.raises(OSError) as raised:
    run.save()
  assert str(raised.value) == (
      f'Could not write checkpoint 2 ({os.path.join(checkpoints, "state-2")})'
      ': no space left on the device. Nothing of it was kept, and ckpt-1 '
      'with its state is intact: free space and rerun the same command to '
      'resume from there.')
  # The half-written state is gone (its space freed), checkpoint 1 is still
  # the latest, and a resume restores it with its replay.
  assert sorted(os.listdir(checkpoints)) == [
      'checkpoint', 'ckpt-1.data-00000-of-00001', 'ckpt-1.index', 'state-1']
  monkeypatch.undo()
  resumed = run_loop._Run(config)
  assert resumed.frames == frames > 0
  assert len(resumed.buffer) == len(run.buffer) > 0


def test_missing_replay_needs_an_explicit_flag(tmp_path):
  config = make_config(tmp_path, backend='inline')
  run_loop.train(config, max_updates=2)
  for path in glob.glob(os.path.join(str(tmp_path), 'checkpoints',
                                     'state-*')):
    os.remove(os.path.join(path, 'replay', 'replay.json'))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match='allow_empty_replay_on_resume'):
    run_loop._Run(config)
  run = run_loop._Run(config._replace(allow_empty_replay_on_resume=True))
  assert len(run.buffer) == 0


def test_a_finished_run_drops_its_replay_only_when_asked(tmp_path):
  config = make_config(tmp_path, backend='inline', keep_final_replay=False,
                       total_environment_frames=400)
  checkpoints = os.path.join(str(tmp_path), 'checkpoints')
  state = lambda n, *name: os.path.join(checkpoints, f'state-{n}', *name)
  run_loop.train(config, max_updates=2)  # Stopped early: replay kept.
  assert os.path.isfile(state(1, 'replay', 'replay.json'))
  assert not os.path.exists(state(1, final_replay.REPLAY_DROPPED))
  result = run_loop.train(config)
  assert result.num_env_frames >= 400
  for number in (1, 2):  # The final checkpoint and the one before it.
    assert not os.path.exists(state(number, 'replay'))
    assert os.path.isfile(state(number, 'run.npz'))
    with open(state(number, final_replay.REPLAY_DROPPED)) as f:
      assert json.load(f) == {'frames': result.num_env_frames}
  # The finished run restores (for test mode, or a rerun of its command).
  assert len(run_loop._Run(config).buffer) == 0
  assert run_loop.train(config).num_updates == result.num_updates
  assert sorted(os.listdir(checkpoints)) == sorted(
      ['checkpoint', 'state-1', 'state-2'] +
      [f for f in os.listdir(checkpoints) if f.startswith('ckpt-')])
  # Training it further needs an empty replay, asked for.
  longer = config._replace(learner_config=config.learner_config._replace(
      total_environment_frames=800))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match='keep_final_replay=false.*allow_empty_replay'):
    run_loop._Run(longer)
  longer = longer._replace(allow_empty_replay_on_resume=True)
  run_loop.train(longer, max_updates=2)
  assert os.path.isfile(state(3, 'replay', 'replay.json'))


@pytest.mark.parametrize('env_name,core_size', [('gym:CartPole-v1', 8),
                                                ('gym:CartPole-v1', 0),
                                                ('atari:Pong', 16)])
def test_a_resumed_inline_run_matches_an_uninterrupted_one(tmp_path,
                                                           env_name,
                                                           core_size):
  # 4 envs x 1 actor give 4 unrolls per collect and a batch takes 3 (1
  # replayed + 2 fresh): stops leave unconsumed unrolls and running
  # episodes behind, which the resumed run must continue exactly. Core
  # size 0 is a feed-forward agent, whose state (and replayed state) is {}.
  kwargs = dict(backend='inline', seed=5, batch_size=3, num_replay=1,
                env_name=env_name,
                agent_config=policy_lib.AgentConfig('auto', core_size))
  if env_name.startswith('atari'):
    kwargs.update(env_options={'noop_max': 5, 'repeat_action_probability':
                               0.25}, unroll_length=3, envs_per_actor=2,
                  batch_size=2)
  whole = make_config(tmp_path / 'whole', **kwargs)
  run_loop.train(whole, max_updates=9)
  parts = whole._replace(logdir=str(tmp_path / 'parts'))
  for _ in range(3):
    run_loop.train(parts, max_updates=3)
  expected = scalar_series(tmp_path / 'whole', 'loss/total')
  assert len(expected) == 9
  assert scalar_series(tmp_path / 'parts', 'loss/total') == expected
  state = lambda logdir: {k: v for k, v in saved_variables(logdir).items()
                          if 'optimizer' in k or k.startswith('agent/')}
  whole_state, parts_state = state(tmp_path / 'whole'), state(
      tmp_path / 'parts')
  assert whole_state.keys() == parts_state.keys()
  for name, value in whole_state.items():
    np.testing.assert_array_equal(parts_state[name], value, err_msg=name)
  # Episode statistics continue too.
  assert run_loop._Run(parts).episodes.total == run_loop._Run(
      whole).episodes.total


def test_non_finite_updates_are_skipped_or_stop_the_run(tmp_path):
  # A NaN reward scale poisons every loss: updates are skipped and counted,
  # and the weights never change.
  config = make_config(tmp_path / 'skip', backend='inline', num_replay=0,
                       reward_scaling=float('nan'))
  result = run_loop.train(config, max_updates=3)
  assert result.num_updates == 0
  saved = saved_variables(tmp_path / 'skip')
  assert saved['num_skipped_steps/.ATTRIBUTES/VARIABLE_VALUE'] == 3
  assert saved['num_steps/.ATTRIBUTES/VARIABLE_VALUE'] == 0
  assert all(np.all(np.isfinite(v)) for k, v in saved.items()
             if k.startswith('agent/') and np.asarray(v).dtype.kind == 'f')
  # With stop_on_nonfinite the run stops at the first one, still leaving a
  # readable checkpoint of the last finite model.
  stopping = config._replace(logdir=str(tmp_path / 'stop'),
                             stop_on_nonfinite=True)
  with pytest.raises(run_loop.NonFiniteUpdate, match='stop_on_nonfinite'):
    run_loop.train(stopping, max_updates=3)
  saved = saved_variables(tmp_path / 'stop')
  assert saved['num_skipped_steps/.ATTRIBUTES/VARIABLE_VALUE'] == 1


def test_a_task_sequence_switches_tasks_evaluates_and_writes_metrics(
    tmp_path):
  # CartPole (4 observations, 2 actions) then Acrobot (6, 3): one agent
  # over the union, 4 unrolls of 10 steps = 40 frames per update.
  config = make_config(tmp_path, backend='inline', num_replay=0,
                       batch_size=4, unroll_length=10,
                       env_name='gym:CartPole-v1,gym:Acrobot-v1',
                       frames_per_task=120, num_task_cycles=1,
                       total_environment_frames=240, eval_episodes=2,
                       eval_max_steps=20)
  result = run_loop.train(config, max_updates=4)  # Stops inside task 2.
  assert 120 <= result.num_env_frames < 240
  with open(os.path.join(str(tmp_path), 'tasks.json')) as f:
    assert json.load(f)['tasks'] == ['gym:CartPole-v1', 'gym:Acrobot-v1']
  result = run_loop.train(config)  # Resumes in task 2 and finishes.
  assert result.num_env_frames >= 240
  # Training episodes are tagged by the task that produced them...
  assert scalar_series(tmp_path, 'episode/gym:CartPole-v1/return')
  # ...and every task was evaluated at the start, at the switch and at the
  # end (the history survived the resume).
  for task in ('gym:CartPole-v1', 'gym:Acrobot-v1'):
    steps = [step for step, _ in scalar_series(tmp_path,
                                               f'eval/{task}/return')]
    assert steps[0] == 0 and len(steps) == 3, steps
    assert steps[1] == 120 and steps[2] == 240
    # Each evaluation logs its noise beside its mean: Acrobot's 2 episodes
    # are both cut after 20 steps at -20, so its interval is 0 wide.
    noise = scalar_series(tmp_path, f'eval/{task}/return_ci95')
    assert [step for step, _ in noise] == steps
    assert all(value >= 0 for _, value in noise)
    if task == 'gym:Acrobot-v1':
      assert [value for _, value in noise] == [0.0] * 3
  with open(os.path.join(str(tmp_path), 'continual_metrics.json')) as f:
    metrics = json.load(f)
  cartpole = metrics['per_task']['gym:CartPole-v1']
  # The final eval is the last one; forgetting is best minus final.
  final = scalar_series(tmp_path, 'eval/gym:CartPole-v1/return')[-1][1]
  assert cartpole['final_return'] == pytest.approx(final)
  assert cartpole['forgetting_from_best'] == pytest.approx(
      cartpole['best_return'] - cartpole['final_return'])
  # CORA's isolated forgetting of CartPole while Acrobot trains: its return
  # at the switch minus at the end, over its largest |return|.
  evals = [v for _, v in scalar_series(tmp_path,
                                       'eval/gym:CartPole-v1/return')]
  assert cartpole['cora_isolated_forgetting_by_segment'] == {
      '1': pytest.approx((evals[1] - evals[2]) / max(map(abs, evals)))}
  assert metrics['cora_isolated_forgetting'] == pytest.approx(
      (evals[1] - evals[2]) / max(map(abs, evals)))


def test_evaluations_unfinished_at_a_stop_are_played_when_it_resumes(
    tmp_path):
  whole = make_config(tmp_path / 'whole', backend='inline', num_replay=0,
                      batch_size=4, unroll_length=10,
                      env_name='gym:CartPole-v1,gym:Acrobot-v1',
                      frames_per_task=120, total_environment_frames=240,
                      eval_episodes=4, eval_max_steps=50, evaluator='learner')
  run_loop.train(whole)
  parts = whole._replace(logdir=str(tmp_path / 'parts'), evaluator='process')
  calls, earlier = [], {child.pid for child in psutil.Process().children()}

  def evaluator():
    """The one process an inline run spawns."""
    found = []
    for child in psutil.Process().children():
      try:
        if (child.pid not in earlier and
            'spawn_main' in ' '.join(child.cmdline())):
          found.append(child)
      except psutil.Error:
        pass  # Gone, or a zombie of another test.
    process, = found
    return process

  def stop_requested():
    # Called once before tracing and once a step of the loop. At the loop's
    # first step the evaluation at 0 frames has been asked for: its process
    # is held, then let go as the run stops, 4 steps on, when nothing reads
    # what it finishes.
    calls.append(None)
    if len(calls) == 2:
      evaluator().suspend()
    elif len(calls) == 6:
      evaluator().resume()
      return True
    return False

  frames = run_loop.train(parts, stop_requested=stop_requested).num_env_frames
  assert 0 < frames < 120 and len(calls) == 6
  pending = os.path.join(parts.logdir, evaluation.PENDING_EVALUATIONS_FILE)
  assert os.path.exists(pending)
  assert not scalar_series(parts.logdir, 'eval/mean_return')
  # Resumed past 0 frames, the run plays the evaluation at 0 first, with
  # the weights it had then: every evaluation is the uninterrupted run's.
  assert run_loop.train(parts).num_env_frames == 240
  for task in ('gym:CartPole-v1', 'gym:Acrobot-v1'):
    expected = scalar_series(whole.logdir, f'eval/{task}/return')
    assert [step for step, _ in expected] == [0, 120, 240]
    assert scalar_series(parts.logdir, f'eval/{task}/return') == expected
  assert not os.path.exists(pending)


@pytest.mark.parametrize('eval_interval,kept', [(120, [0, 120]),
                                                (240, [0, 240])])
def test_a_stop_while_the_learner_waits_on_a_held_evaluator_keeps_every_one(
    tmp_path, eval_interval, kept):
  # Evaluations at 0 and 240 frames (the final one), or at 0, 120 and 240.
  # The evaluation process is held from the start, so the learner ends up
  # waiting on it: for all of them after asking for the final one, or, with
  # two already pending, for a slot to ask for it in. A stop must end that
  # wait; the resumed run, complete, plays what was kept and asks for what
  # was not, and every evaluation is then the uninterrupted run's.
  whole = make_config(tmp_path / 'whole', backend='inline', num_replay=0,
                      batch_size=4, unroll_length=10,
                      total_environment_frames=240,
                      eval_interval_frames=eval_interval, eval_episodes=4,
                      eval_max_steps=50, evaluator='learner')
  calls = []
  run_loop.train(whole, stop_requested=lambda: calls.append(None) or False)
  steps = len(calls)  # Before tracing, then one a step of the loop.
  parts = whole._replace(logdir=str(tmp_path / 'parts'), evaluator='process')
  calls, earlier = [], {child.pid for child in psutil.Process().children()}

  def stop_requested():
    calls.append(None)
    if len(calls) == 2:  # The evaluation at 0 frames has been asked for.
      found = [child for child in psutil.Process().children()
               if child.pid not in earlier and
               'spawn_main' in ' '.join(child.cmdline())]
      evaluator, = found
      evaluator.suspend()
    # Past the loop's steps, only a wait asks.
    return len(calls) > steps

  result = run_loop.train(parts, stop_requested=stop_requested)
  assert result.num_env_frames == 240 and result.stopped_early
  assert len(calls) == steps + 1
  pending = os.path.join(parts.logdir, evaluation.PENDING_EVALUATIONS_FILE)
  assert [frames for frames, _ in evaluation.read_pending_evaluations(
      pending, after=None, until=240)] == kept
  assert not scalar_series(parts.logdir, 'eval/mean_return')
  # Its wait polled the held process for a second before asking.
  (step, waited), = scalar_series(parts.logdir, 'runtime/eval_wait_s')
  assert step == 240 and waited >= 1.0
  assert not scalar_series(whole.logdir, 'runtime/eval_wait_s')
  assert run_loop.train(parts).num_env_frames == 240
  expected = scalar_series(whole.logdir, 'eval/gym:CartPole-v1/return')
  assert [step for step, _ in expected] == list(range(0, 241, eval_interval))
  assert scalar_series(parts.logdir, 'eval/gym:CartPole-v1/return') == expected
  assert not os.path.exists(pending)


def test_a_random_length_sequence_resumed_mid_segment_continues_exactly(
    tmp_path):
  # Seed 2 draws segments of 150 and 90 frames around 120; an update is 40
  # frames, so the switch comes at 160 (at 120 with equal lengths). The
  # parts stop at 40 and at 120, inside the first segment, where an equal
  # schedule would switch: each resume rebuilds the same lengths from the
  # config and goes on as the whole run did, through the switch. (MinAtar:
  # its envs' snapshots hold their whole random state.)
  tasks = ('minatar:Breakout', 'minatar:Asterix')
  whole = make_config(tmp_path / 'whole', backend='inline', seed=2,
                      num_replay=0, batch_size=4, unroll_length=10,
                      env_name=','.join(tasks),
                      agent_config=policy_lib.AgentConfig('minatar', 8),
                      frames_per_task=120, segment_lengths='random',
                      total_environment_frames=240, eval_episodes=1,
                      eval_max_steps=10)
  assert run_config.task_schedule(whole).segment_frames == (150, 90)
  run_loop.train(whole)
  parts = whole._replace(logdir=str(tmp_path / 'parts'))
  assert run_loop.train(parts, max_updates=1).num_env_frames == 40
  assert run_loop.train(parts, max_updates=2).num_env_frames == 120
  assert run_loop.train(parts).num_env_frames == 240
  for logdir in ('whole', 'parts'):
    for task in tasks:
      steps = [step for step, _ in scalar_series(tmp_path / logdir,
                                                 f'eval/{task}/return')]
      assert steps == [0, 160, 240], (logdir, task, steps)
  expected = scalar_series(tmp_path / 'whole', 'loss/total')
  assert len(expected) == 6
  assert scalar_series(tmp_path / 'parts', 'loss/total') == expected
  with open(os.path.join(str(tmp_path / 'parts'), 'tasks.json')) as f:
    recorded = json.load(f)
  assert (recorded['segment_lengths'], recorded['seed'],
          recorded['segment_frames']) == ('random', 2, [150, 90])
  # Resuming with equal lengths is refused before anything is written.
  before = sorted(os.listdir(str(tmp_path / 'parts')))
  with pytest.raises(checkpoint_lib.CheckpointError,
                     match="made with segment_lengths='random', not 'equal'"):
    run_loop.train(parts._replace(
        segment_lengths='equal', learner_config=parts.learner_config._replace(
            total_environment_frames=480), frames_per_task=240))
  assert sorted(os.listdir(str(tmp_path / 'parts'))) == before


def test_a_task_sequence_must_cover_the_total_frames(tmp_path):
  config = make_config(tmp_path, env_name='gym:CartPole-v1,gym:Acrobot-v1',
                       frames_per_task=100, total_environment_frames=150)
  with pytest.raises(ValueError, match='frames_per_task x tasks x cycles'):
    run_loop._Run(config)


def test_the_progress_line_of_a_run_past_its_total_has_nothing_left():
  # The last update may overshoot the frame count by part of a batch.
  line = progress.progress_line('main', 15_000_020, 15_000_000, 50.0, 1.0,
                                54.5, 100, 4.0)
  assert line == ('[main] frames 15,000,020/15,000,000 (100.0%) | 50 env fps '
                  '| 1.0 updates/s | lag 4.0 | return 54.5 (last 100) | ETA '
                  '0m00s')
  assert progress.progress_line('main', 0, 7_200, 2.0, 1.0, float('nan'), 0,
                                0.0).endswith('return n/a (last 0) | ETA 1h00m')
