"""Small studies of CartPole -> Acrobot runs for the clear.study tests:
their files, the command and what the runs leave."""

import hashlib
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEQUENCE = 'gym:CartPole-v1,gym:Acrobot-v1'
FAST = ['--num_task_cycles=1', '--eval_episodes=2', '--eval_max_steps=20',
        '--num_actors=1', '--envs_per_actor=8', '--log_interval_s=1']


def write_study(folder, text):
  path = os.path.join(str(folder), 'study.toml')
  with open(path, 'w') as f:
    f.write(text)
  return path


def study_text(frames_per_task, methods, seeds='[0, 1]', extra=''):
  lines = ['root = "runs"', 'keep = "kept"', f'seeds = {seeds}',
           'flags = ' + json.dumps([f'--env={SEQUENCE}',
                                    f'--frames_per_task={frames_per_task}',
                                    *FAST]), extra]
  for key, flags in methods.items():
    lines += [f'[methods.{key}]', 'flags = ' + json.dumps(flags)]
  return '\n'.join(lines) + '\n'


def study_command(*args):
  return [sys.executable, '-m', 'clear.study', *args]


def run_study(folder, *args, timeout=600):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL='2')
  return subprocess.run(study_command(*args), cwd=str(folder), env=env,
                        timeout=timeout, capture_output=True, text=True)


def tree_digest(folder):
  """{relative path: sha256} of every file under `folder`."""
  digests = {}
  for directory, _, files in os.walk(folder):
    for name in files:
      path = os.path.join(directory, name)
      with open(path, 'rb') as f:
        digests[os.path.relpath(path, folder)] = hashlib.sha256(
            f.read()).hexdigest()
  return digests


def log_text(folder, label):
  with open(os.path.join(str(folder), 'runs', '.study',
                         f'{label}.log')) as f:
    return f.read()


