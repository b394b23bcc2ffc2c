"""A study on a Ray cluster (`ray.cluster_utils`: real nodes on this host)
that loses the worker node one of its runs is on: the run starts again on
the other node, resumes from its last checkpoint, and every run finishes
once."""

import os
import subprocess
import time

import psutil
import pytest

from tests import study_files

ray = pytest.importorskip('ray')
from ray import cluster_utils  # noqa: E402  # pylint: disable=g-import-not-at-top

NODE = dict(num_cpus=1, object_store_memory=200 * 1024 * 1024)


def node_running(cluster, label):
  """The worker node whose processes include `label`'s clear.train."""
  for node in cluster.worker_nodes:
    raylet = node.all_processes['raylet'][0].process.pid
    for child in psutil.Process(raylet).children(recursive=True):
      try:
        if any(f'/{label}' in arg for arg in child.cmdline()):
          return node
      except psutil.Error:
        pass
  return None


@pytest.mark.slow  # About two minutes on 2 cores.
def test_a_study_loses_a_node_and_every_run_finishes_once(tmp_path):
  cluster = cluster_utils.Cluster(
      initialize_head=True,
      head_node_args=dict(num_cpus=0, object_store_memory=200 * 1024 * 1024))
  process = None
  try:
    for _ in range(2):
      cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    path = study_files.write_study(tmp_path, study_files.study_text(
        4000, {'a': ['--replay_proportion=0', '--checkpoint_interval_s=2']},
        seeds='[0, 1]'))
    env = dict(os.environ, PYTHONPATH=study_files.ROOT,
               TF_CPP_MIN_LOG_LEVEL='2')
    process = subprocess.Popen(
        study_files.study_command('run', path,
                                 f'--ray_address={cluster.address}'),
        cwd=str(tmp_path), env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    checkpoint = tmp_path / 'runs' / 'a_s1' / 'checkpoints' / 'checkpoint'
    deadline = time.time() + 300
    while not checkpoint.exists() and time.time() < deadline:
      assert process.poll() is None, process.stdout.read()
      time.sleep(0.5)
    assert checkpoint.exists(), process.stdout.read()
    lost = node_running(cluster, 'a_s1')
    assert lost is not None
    cluster.remove_node(lost, allow_graceful=False)
    output, _ = process.communicate(timeout=600)
  finally:
    if process is not None and process.poll() is None:
      process.kill()
    cluster.shutdown()
  assert process.returncode == 0, output
  assert 'Every run finished.' in output
  for label, starts in (('a_s0', 1), ('a_s1', 2)):
    log = study_files.log_text(tmp_path, label)
    assert log.count(f'=== clear.study: {label} starts') == starts, log
    assert (tmp_path / 'kept' / label / 'run.json').exists()
  second = study_files.log_text(tmp_path, 'a_s1').split(
      '=== clear.study: a_s1 starts')[2]
  assert 'Resuming at' in second
