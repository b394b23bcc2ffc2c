"""Devices: actor processes never see a GPU; the learner's device by name."""

import os
import subprocess
import sys
import time

import pytest
import tensorflow as tf

from clear.algorithms import policy as policy_lib
from clear.algorithms import registry
from clear.algorithms.impala import learner as learner_lib
from clear.runtime import actor_worker
from clear.runtime import devices
from clear.runtime import local_actors
from clear.runtime import run_config
from clear.runtime import run_loop
import envs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def process_environment(pid):
  with open(f'/proc/{pid}/environ', 'rb') as f:
    entries = f.read().split(b'\0')
  return dict(e.decode().split('=', 1) for e in entries if b'=' in e)


@pytest.mark.skipif(not os.path.exists('/proc/self/environ'),
                    reason='needs /proc')
def test_local_actor_processes_start_without_gpus(monkeypatch):
  monkeypatch.setenv(devices.CUDA_VISIBLE_DEVICES, '0,1')
  config = actor_worker.ActorPoolConfig(
      'gym:CartPole-v1', {}, 2, 'impala', policy_lib.AgentConfig('mlp', 4),
      5, num_actors=2)
  env = envs.make('gym:CartPole-v1', num_envs=1)
  policy = registry.make_policy('impala', env.spec, config.agent_config)
  env.close()
  weights = policy.get_weights()
  pool = local_actors.LocalActorPool(config, [w.shape for w in weights])
  try:
    # The learner's own environment is left as it was.
    assert os.environ[devices.CUDA_VISIBLE_DEVICES] == '0,1'
    pool.publish(weights, 0)
    deadline = time.time() + 120
    while pool.get(timeout=1.0) is None:  # They act, on the CPU.
      assert time.time() < deadline
    # What each actor's interpreter was started with (read once it runs:
    # /proc shows the environment a process was exec'd with).
    for pid in pool.pids:
      assert process_environment(pid)[devices.CUDA_VISIBLE_DEVICES] == ''
  finally:
    pool.close()


def test_hide_accelerators_in_a_fresh_process():
  # A process told it has GPU 0 ends up with none visible to TensorFlow.
  code = ('from clear.runtime import devices; devices.hide_accelerators(); '
          'import os, tensorflow as tf; '
          'print(repr(os.environ["CUDA_VISIBLE_DEVICES"]), '
          'tf.config.get_visible_devices("GPU"), '
          '[d.device_type for d in tf.config.get_visible_devices()])')
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='3',
             CUDA_VISIBLE_DEVICES='0')
  result = subprocess.run([sys.executable, '-c', code], env=env,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  assert result.stdout.split() == ["''", '[]', "['CPU']"]


def test_children_see_no_gpu_restores_the_environment(monkeypatch):
  monkeypatch.delenv(devices.CUDA_VISIBLE_DEVICES, raising=False)
  with devices.children_see_no_gpu():
    assert os.environ[devices.CUDA_VISIBLE_DEVICES] == ''
  assert devices.CUDA_VISIBLE_DEVICES not in os.environ
  monkeypatch.setenv(devices.CUDA_VISIBLE_DEVICES, '3')
  with pytest.raises(KeyError):
    with devices.children_see_no_gpu():
      raise KeyError('an error while starting')
  assert os.environ[devices.CUDA_VISIBLE_DEVICES] == '3'


def test_learner_device_names():
  has_gpu = bool(tf.config.list_physical_devices('GPU'))
  assert devices.learner_device('auto') == ('/GPU:0' if has_gpu
                                            else '/CPU:0')
  assert devices.learner_device('cpu') == '/CPU:0'
  assert devices.learner_device('/cpu:0') == '/CPU:0'
  assert devices.learner_device('/device:CPU:0') == '/CPU:0'
  with pytest.raises(ValueError, match=r'--learner_device=/TPU:7: '
                     r'TensorFlow has no such device \(it sees '):
    devices.learner_device('/TPU:7')
  if not has_gpu:
    with pytest.raises(ValueError, match='No GPU is visible: the default '
                       'install is tensorflow-cpu'):
      devices.learner_device('gpu')


def test_a_run_checks_its_learner_device_before_writing_anything(tmp_path):
  config = run_config.RunConfig(
      env_name='gym:CartPole-v1', env_options={}, algorithm='impala',
      agent_config=policy_lib.AgentConfig('mlp', 4),
      learner_config=learner_lib.LearnerConfig(
          batch_size=2, num_replay=0, unroll_length=5,
          total_environment_frames=1000),
      logdir=str(tmp_path / 'run'), envs_per_actor=2, backend='inline',
      learner_device='/TPU:7')
  with pytest.raises(ValueError, match='--learner_device=/TPU:7'):
    run_loop.train(config, max_updates=1)
  assert not os.path.exists(tmp_path / 'run')
  config = config._replace(learner_device='cpu')
  result = run_loop.train(config, max_updates=1)
  assert result.num_updates == 1
