"""Reference runs (other libraries) for the README's speed comparison.

Each run trains one algorithm of a reference library with that library's
well-known tuned hyperparameters and a fixed seed, on one torch thread, and
stops as soon as the mean return of the last 100 finished *training* episodes
first reaches the target (the same criterion as benchmarks/train.py: the
window must hold 100 episodes), or at the frame cap. Frames are environment
steps summed over all vectorised envs. Wall time is measured from just before
the model/algorithm is built (imports excluded); the time since process start
is recorded as well.

Usage (inside the reference venv named in README.md beside this file):

  OMP_NUM_THREADS=1 python results/reference/run_reference.py --run=sac_pendulum

The result is merged into reference.json beside this script (keyed by run).
"""

import argparse
import collections
import json
import os
import platform
import sys
import time

PROCESS_START = time.perf_counter()
os.environ.setdefault('OMP_NUM_THREADS', '1')
os.environ.setdefault('MKL_NUM_THREADS', '1')

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, 'reference.json')
SEED = 0
WINDOW = 100
MAX_FRAMES = None  # --max_frames: smoke tests only (overrides the caps)


def capped(cap):
  return min(cap, MAX_FRAMES) if MAX_FRAMES else cap


class Tracker:
  """Training-episode returns; detects the first full-window crossing."""

  def __init__(self, target, short_window=None, curve_every=2000):
    self.target = target
    self.window = collections.deque(maxlen=WINDOW)
    self.short_window = (collections.deque(maxlen=short_window)
                         if short_window else None)
    self.episodes = 0
    self.t0 = None
    self.hit = None          # (frames, wall) of the first crossing
    self.short_hit = None    # same, for the short window
    self.curve = []          # (frames, wall, cpu, mean of last <=100 eps)
    self.curve_every = curve_every
    self._next_curve = curve_every

  def start(self):
    self.t0 = time.perf_counter()
    self.c0 = time.process_time()

  def wall(self):
    return time.perf_counter() - self.t0

  def cpu(self):
    return time.process_time() - self.c0

  def mean(self):
    return float(np.mean(self.window)) if self.window else float('nan')

  def add(self, episode_return, frames):
    self.episodes += 1
    self.window.append(float(episode_return))
    if self.short_window is not None:
      self.short_window.append(float(episode_return))
      if (self.short_hit is None and
          len(self.short_window) == self.short_window.maxlen and
          np.mean(self.short_window) >= self.target):
        self.short_hit = (int(frames), self.wall(), self.cpu())

  def check(self, frames):
    """True once the 100-episode mean has reached the target."""
    while frames >= self._next_curve:
      self.curve.append((int(frames), round(self.wall(), 2),
                         round(self.cpu(), 2), round(self.mean(), 2)))
      print('frames %d wall %.1fs cpu %.1fs mean100 %.2f (%d episodes)' % (
          self.curve[-1] + (len(self.window),)), file=sys.stderr, flush=True)
      self._next_curve += self.curve_every
    if (self.hit is None and len(self.window) == WINDOW and
        self.mean() >= self.target):
      self.hit = (int(frames), self.wall(), self.cpu())
    return self.hit is not None


def result(tracker, *, algorithm, library, library_version, env, target,
           total_frames, hyperparameters, note, extra=None):
  total_wall = tracker.wall()
  total_cpu = tracker.cpu()
  out = {
      'algorithm': algorithm,
      'library': library,
      'library_version': library_version,
      'torch_version': torch.__version__,
      'env': env,
      'target': target,
      'criterion': (f'mean return of the last {WINDOW} finished training '
                    f'episodes >= target (window must be full)'),
      'reached': tracker.hit is not None,
      'frames_to_target': tracker.hit[0] if tracker.hit else None,
      'wall_time_s_to_target': (round(tracker.hit[1], 2)
                                if tracker.hit else None),
      'cpu_time_s_to_target': (round(tracker.hit[2], 2)
                               if tracker.hit else None),
      'final_mean_return': round(tracker.mean(), 2),
      'final_window_episodes': len(tracker.window),
      'episodes': tracker.episodes,
      'total_frames': int(total_frames),
      'total_wall_time_s': round(total_wall, 2),
      'total_wall_time_s_incl_imports': round(
          time.perf_counter() - PROCESS_START, 2),
      'total_cpu_time_s': round(total_cpu, 2),
      'wall_time_s_per_1000_frames': round(1000 * total_wall / total_frames,
                                           3),
      'cpu_time_s_per_1000_frames': round(1000 * total_cpu / total_frames,
                                          3),
      'hyperparameters': hyperparameters,
      'seed': SEED,
      'torch_num_threads': torch.get_num_threads(),
      'curve_frames_wall_cpu_mean100': tracker.curve,
      'note': note,
  }
  if tracker.short_window is not None:
    n = tracker.short_window.maxlen
    out[f'frames_to_target_last{n}'] = (tracker.short_hit[0]
                                        if tracker.short_hit else None)
    out[f'wall_time_s_to_target_last{n}'] = (round(tracker.short_hit[1], 2)
                                             if tracker.short_hit else None)
    out[f'cpu_time_s_to_target_last{n}'] = (round(tracker.short_hit[2], 2)
                                            if tracker.short_hit else None)
  if extra:
    out.update(extra)
  return out


# --------------------------------------------------------------------------
# Stable-Baselines3 runs.


def _sb3_callback(tracker, check_each_step):
  from stable_baselines3.common.callbacks import BaseCallback

  class StopAtTarget(BaseCallback):

    def _on_step(self):
      for info in self.locals['infos']:
        if 'episode' in info:
          tracker.add(info['episode']['r'], self.num_timesteps)
      if check_each_step:
        return not tracker.check(self.num_timesteps)
      return True

    def _on_rollout_end(self):
      # PPO: stop at the first rollout end where the target is reached.
      if not check_each_step and tracker.check(self.num_timesteps):
        self.model._stop_after_rollout = True

  return StopAtTarget()


def _sb3_version():
  import stable_baselines3
  return stable_baselines3.__version__


def run_ppo_cartpole():
  from stable_baselines3 import PPO
  from stable_baselines3.common.callbacks import BaseCallback
  from stable_baselines3.common.env_util import make_vec_env

  target, cap = 475.0, capped(300_000)
  zoo_n_timesteps = 100_000
  tracker = Tracker(target)
  tracker.start()
  env = make_vec_env('CartPole-v1', n_envs=8, seed=SEED)

  # rl-baselines3-zoo 2.9.2 hyperparams/ppo.yml, CartPole-v1. The zoo's
  # 'lin_' schedules decay linearly to 0 over its n_timesteps (1e5 frames);
  # we keep exactly that decay (in frames) although the run is capped at 3e5,
  # so past 1e5 frames the learning rate and clip range are 0.
  def lin(start):
    def schedule(progress_remaining):
      frames = (1 - progress_remaining) * cap
      return start * max(1 - frames / zoo_n_timesteps, 0.0)
    return schedule

  hp = dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate='lin_0.001',
            clip_range='lin_0.2', policy='MlpPolicy',
            zoo_n_timesteps=zoo_n_timesteps)
  model = PPO('MlpPolicy', env, n_steps=32, batch_size=256, gae_lambda=0.8,
              gamma=0.98, n_epochs=20, ent_coef=0.0,
              learning_rate=lin(0.001), clip_range=lin(0.2), seed=SEED,
              device='cpu', verbose=0)
  model._stop_after_rollout = False

  class StopAfterRollout(BaseCallback):

    def _on_step(self):
      return not self.model._stop_after_rollout

  from stable_baselines3.common.callbacks import CallbackList
  cb = CallbackList([_sb3_callback(tracker, check_each_step=False),
                     StopAfterRollout()])
  model.learn(total_timesteps=cap, callback=cb)
  frames = tracker.hit[0] if tracker.hit else model.num_timesteps
  return result(
      tracker, algorithm='PPO (not PPG: SB3 has no PPG)',
      library='stable-baselines3', library_version=_sb3_version(),
      env='CartPole-v1 (gymnasium)', target=target, total_frames=frames,
      hyperparameters=hp,
      note=('rl-baselines3-zoo tuned PPO CartPole-v1 hyperparameters; the '
            'target is checked after each rollout (8 envs x 32 steps = 256 '
            'frames), and training stops at the first rollout end where it '
            'holds. Linear schedules decay over the zoo budget of 1e5 frames '
            '(as in the zoo); run capped at 3e5 frames.'))


def run_sac_pendulum():
  from stable_baselines3 import SAC
  from stable_baselines3.common.env_util import make_vec_env

  target, cap = -250.0, capped(40_000)
  tracker = Tracker(target, short_window=20)
  tracker.start()
  env = make_vec_env('Pendulum-v1', n_envs=1, seed=SEED)
  # rl-baselines3-zoo 2.9.2 hyperparams/sac.yml, Pendulum-v1: only
  # learning_rate=1e-3 (n_timesteps 20000); everything else SB3 defaults.
  model = SAC('MlpPolicy', env, learning_rate=1e-3, seed=SEED, device='cpu',
              verbose=0)
  hp = dict(policy='MlpPolicy', learning_rate=1e-3, zoo_n_timesteps=20000,
            defaults=dict(buffer_size=model.buffer_size,
                          learning_starts=model.learning_starts,
                          batch_size=model.batch_size, tau=model.tau,
                          gamma=model.gamma, train_freq=1, gradient_steps=1,
                          ent_coef='auto', net_arch='[256, 256]'))
  model.learn(total_timesteps=cap,
              callback=_sb3_callback(tracker, check_each_step=True))
  return result(
      tracker, algorithm='SAC (continuous)', library='stable-baselines3',
      library_version=_sb3_version(), env='Pendulum-v1 (gymnasium)',
      target=target, total_frames=model.num_timesteps, hyperparameters=hp,
      note=('Pendulum episodes are 200 frames, so the 100-episode window '
            'needs >= 20000 frames and still holds early episodes for a '
            'while; the frames/time at which the last-20-episode mean first '
            'reached the target are given too (*_last20). Checked at every '
            'env step; stops at the first step where the 100-episode mean '
            'holds.'))


def run_ddpg_pendulum():
  from stable_baselines3 import DDPG
  from stable_baselines3.common.env_util import make_vec_env
  from stable_baselines3.common.noise import NormalActionNoise

  target, cap = -300.0, capped(60_000)
  tracker = Tracker(target, short_window=20)
  tracker.start()
  env = make_vec_env('Pendulum-v1', n_envs=1, seed=SEED)
  n_actions = env.action_space.shape[0]
  # rl-baselines3-zoo 2.9.2 hyperparams/ddpg.yml, Pendulum-v1.
  model = DDPG('MlpPolicy', env, gamma=0.98, buffer_size=200_000,
               learning_starts=10_000,
               action_noise=NormalActionNoise(np.zeros(n_actions),
                                              0.1 * np.ones(n_actions)),
               gradient_steps=1, train_freq=1, learning_rate=1e-3,
               policy_kwargs=dict(net_arch=[400, 300]), seed=SEED,
               device='cpu', verbose=0)
  hp = dict(policy='MlpPolicy', gamma=0.98, buffer_size=200_000,
            learning_starts=10_000, noise_type='normal', noise_std=0.1,
            gradient_steps=1, train_freq=1, learning_rate=1e-3,
            net_arch=[400, 300], zoo_n_timesteps=20000,
            defaults=dict(batch_size=model.batch_size, tau=model.tau))
  model.learn(total_timesteps=cap,
              callback=_sb3_callback(tracker, check_each_step=True))
  return result(
      tracker, algorithm='DDPG', library='stable-baselines3',
      library_version=_sb3_version(), env='Pendulum-v1 (gymnasium)',
      target=target, total_frames=model.num_timesteps, hyperparameters=hp,
      note=('The first 10000 frames are uniform-random (learning_starts), '
            'and the 100-episode window needs 20000 frames; the last-20 '
            'crossing is given too (*_last20). Checked at every env step.'))


# --------------------------------------------------------------------------
# Tianshou: discrete SAC.


def run_dsac_cartpole():
  import gymnasium as gym
  import tianshou
  from tianshou.algorithm.modelfree.discrete_sac import (DiscreteSAC,
                                                         DiscreteSACPolicy)
  from tianshou.algorithm.optim import AdamOptimizerFactory
  from tianshou.data import Collector, CollectStats, VectorReplayBuffer
  from tianshou.env import DummyVectorEnv
  from tianshou.utils.net.common import Net
  from tianshou.utils.net.discrete import DiscreteActor, DiscreteCritic
  from tianshou.utils.torch_utils import policy_within_training_step

  target, cap = 200.0, capped(100_000)
  # Hyperparameters of tianshou's own test/discrete/test_discrete_sac.py
  # (its CartPole-v1 example; fixed alpha, "better not to use auto alpha in
  # CartPole").
  hp = dict(buffer_size=20000, actor_lr=1e-4, critic_lr=1e-3, gamma=0.95,
            tau=0.005, alpha=0.05, auto_alpha=False, step_per_collect=10,
            update_per_step=0.1, batch_size=64, hidden_sizes=[64, 64],
            training_num=10, n_step=3)
  tracker = Tracker(target)
  tracker.start()
  np.random.seed(SEED)
  torch.manual_seed(SEED)
  env = gym.make('CartPole-v1')
  train_envs = DummyVectorEnv([lambda: gym.make('CartPole-v1')
                               for _ in range(hp['training_num'])])
  train_envs.seed(SEED)
  state_shape = env.observation_space.shape
  n_actions = int(env.action_space.n)
  actor = DiscreteActor(
      preprocess_net=Net(state_shape=state_shape,
                         hidden_sizes=hp['hidden_sizes']),
      action_shape=n_actions, softmax_output=False)
  critic1 = DiscreteCritic(
      preprocess_net=Net(state_shape=state_shape,
                         hidden_sizes=hp['hidden_sizes']),
      last_size=n_actions)
  critic2 = DiscreteCritic(
      preprocess_net=Net(state_shape=state_shape,
                         hidden_sizes=hp['hidden_sizes']),
      last_size=n_actions)
  policy = DiscreteSACPolicy(actor=actor, action_space=env.action_space)
  algorithm = DiscreteSAC(
      policy=policy, policy_optim=AdamOptimizerFactory(lr=hp['actor_lr']),
      critic=critic1, critic_optim=AdamOptimizerFactory(lr=hp['critic_lr']),
      critic2=critic2, critic2_optim=AdamOptimizerFactory(lr=hp['critic_lr']),
      tau=hp['tau'], gamma=hp['gamma'], alpha=hp['alpha'],
      n_step_return_horizon=hp['n_step'])
  collector = Collector[CollectStats](
      algorithm, train_envs,
      VectorReplayBuffer(hp['buffer_size'], len(train_envs)))
  collector.reset()
  frames = 0
  # The loop of tianshou's OffPolicyTrainer training step, without its test
  # episodes: collect step_per_collect frames, then
  # round(update_per_step * frames) gradient steps of batch_size.
  while frames < cap:
    with policy_within_training_step(algorithm.policy):
      stats = collector.collect(n_step=hp['step_per_collect'])
      frames += stats.n_collected_steps
      for r in stats.returns:
        tracker.add(r, frames)
      if tracker.check(frames):
        break
      for _ in range(round(hp['update_per_step'] * stats.n_collected_steps)):
        algorithm.update(sample_size=hp['batch_size'],
                         buffer=collector.buffer)
  best = max((m for _, _, _, m in tracker.curve), default=float('nan'))
  return result(
      tracker, algorithm='SAC (discrete)', library='tianshou',
      library_version=tianshou.__version__, env='CartPole-v1 (gymnasium)',
      target=target, total_frames=frames, hyperparameters=hp,
      note=('Tianshou\'s CartPole discrete-SAC test hyperparameters (its '
            'own goal there is 170 on 100 test episodes). Here the '
            'criterion is the 100-training-episode mean, checked after each '
            'collect of 10 frames; the trainer\'s periodic test episodes are '
            'not run (they do not count as training frames). Seed 0 instead '
            'of the test\'s 1.'),
      extra={'best_curve_mean100': best})


# --------------------------------------------------------------------------
# DI-engine: PPG.


def run_ppg_cartpole():
  import logging
  import tempfile
  from copy import deepcopy

  import ding
  import gym  # DI-engine 0.5.3 pins gym==0.25.1
  from dizoo.classic_control.cartpole.config.cartpole_ppg_config import (
      cartpole_ppg_config)
  from ding.config import compile_config
  from ding.envs import BaseEnvManager, DingEnvWrapper
  from ding.model import PPG
  from ding.policy import PPGOffPolicy
  from ding.utils import set_pkg_seed
  from ding.worker import (AdvancedReplayBuffer, BaseLearner,
                           InteractionSerialEvaluator, SampleSerialCollector)
  from easydict import EasyDict
  from tensorboardX import SummaryWriter

  logging.disable(logging.WARNING)
  target, cap = 475.0, capped(300_000)
  tracker = Tracker(target)
  counter = {'frames': 0}

  class Record(gym.Wrapper):
    """Counts collector frames and records finished training episodes."""

    def reset(self, **kwargs):
      self._ret = 0.0
      return self.env.reset(**kwargs)

    def step(self, action):
      out = self.env.step(action)
      counter['frames'] += 1
      self._ret += float(out[1])
      if out[2]:
        tracker.add(self._ret, counter['frames'])
      return out

  def env_fn():
    return DingEnvWrapper(Record(gym.make('CartPole-v1')),
                          EasyDict(env_wrapper='default'))

  workdir = tempfile.mkdtemp(prefix='ding_ppg_')
  os.chdir(workdir)
  cfg = deepcopy(cartpole_ppg_config)
  cfg.exp_name = os.path.join(workdir, 'cartpole_ppg_seed0')
  tracker.start()
  cfg = compile_config(
      cfg, BaseEnvManager, PPGOffPolicy, BaseLearner, SampleSerialCollector,
      InteractionSerialEvaluator,
      {'policy': AdvancedReplayBuffer, 'value': AdvancedReplayBuffer},
      save_cfg=False)
  collector_env = BaseEnvManager(
      env_fn=[env_fn for _ in range(cfg.env.collector_env_num)],
      cfg=cfg.env.manager)
  collector_env.seed(SEED)
  set_pkg_seed(SEED, use_cuda=False)
  model = PPG(**cfg.policy.model)
  policy = PPGOffPolicy(cfg.policy, model=model)
  tb_logger = SummaryWriter(os.path.join(workdir, 'log'))
  learner = BaseLearner(cfg.policy.learn.learner, policy.learn_mode,
                        tb_logger, exp_name=cfg.exp_name)
  collector = SampleSerialCollector(cfg.policy.collect.collector,
                                    collector_env, policy.collect_mode,
                                    tb_logger, exp_name=cfg.exp_name)
  policy_buffer = AdvancedReplayBuffer(
      cfg.policy.other.replay_buffer.policy, tb_logger,
      exp_name=cfg.exp_name, instance_name='policy_buffer')
  value_buffer = AdvancedReplayBuffer(
      cfg.policy.other.replay_buffer.value, tb_logger,
      exp_name=cfg.exp_name, instance_name='value_buffer')
  # The loop of dizoo/classic_control/cartpole/entry/cartpole_ppg_main.py,
  # without the evaluator (its episodes are not training frames).
  while counter['frames'] < cap:
    new_data = collector.collect(train_iter=learner.train_iter)
    if tracker.check(counter['frames']):
      break
    policy_buffer.push(new_data, cur_collector_envstep=collector.envstep)
    value_buffer.push(deepcopy(new_data),
                      cur_collector_envstep=collector.envstep)
    for _ in range(cfg.policy.learn.update_per_collect):
      batch_size = learner.policy.get_attribute('batch_size')
      policy_data = policy_buffer.sample(batch_size['policy'],
                                         learner.train_iter)
      value_data = value_buffer.sample(batch_size['value'],
                                       learner.train_iter)
      if policy_data is not None and value_data is not None:
        learner.train({'policy': policy_data, 'value': value_data},
                      collector.envstep)
    policy_buffer.clear()
    value_buffer.clear()
  collector_env.close()
  c = cfg.policy
  hp = dict(policy_type='ppg_offpolicy', collector_env_num=8,
            n_sample=c.collect.n_sample,
            discount_factor=c.collect.discount_factor,
            gae_lambda=c.collect.gae_lambda,
            update_per_collect=c.learn.update_per_collect,
            batch_size=c.learn.batch_size,
            learning_rate=c.learn.learning_rate,
            value_weight=c.learn.value_weight,
            entropy_weight=c.learn.entropy_weight,
            clip_ratio=c.learn.clip_ratio, aux_freq=c.learn.aux_freq,
            aux_train_epoch=c.learn.aux_train_epoch,
            encoder_hidden_size_list=[64, 64, 128],
            replay_buffer=dict(policy=dict(size=100, max_use=10),
                               value=dict(size=1000, max_use=100)))
  best = max((m for _, _, _, m in tracker.curve), default=float('nan'))
  return result(
      tracker, algorithm='PPG (DI-engine ppg_offpolicy)', library='DI-engine',
      library_version=ding.__version__, env='CartPole-v1 (gym 0.25.1)',
      target=target, total_frames=counter['frames'], hyperparameters=hp,
      note=('DI-engine\'s own dizoo cartpole_ppg_config (written for '
            'CartPole-v0, 200-step episodes, stop value 195) run on '
            'CartPole-v1 (500 steps); DI-engine\'s CartPole PPG is its '
            'ppg_offpolicy policy. Loop of its cartpole_ppg_main entry '
            'without the evaluator. Target checked after each collect of '
            '128 frames. torch 2.13.0 was forced into the venv with '
            '--no-deps (pip had resolved DI-engine to torch 2.12.1).'),
      extra={'best_curve_mean100': best})


PARTIAL_META = {
    'ppo_cartpole': ('PPO (not PPG: SB3 has no PPG)', 'stable-baselines3',
                     'CartPole-v1 (gymnasium)', 475.0, 300_000),
    'sac_pendulum': ('SAC (continuous)', 'stable-baselines3',
                     'Pendulum-v1 (gymnasium)', -250.0, 40_000),
    'ddpg_pendulum': ('DDPG', 'stable-baselines3', 'Pendulum-v1 (gymnasium)',
                      -300.0, 60_000),
    'dsac_cartpole': ('SAC (discrete)', 'tianshou',
                      'CartPole-v1 (gymnasium)', 200.0, 100_000),
    'ppg_cartpole': ('PPG (DI-engine ppg_offpolicy)', 'DI-engine',
                     'CartPole-v1 (gym 0.25.1)', 475.0, 300_000),
}


def partial_from_log(run_name, log_path, library_version, reason):
  """Entry for a run that was stopped before its target or cap.

  Built from the progress lines the run prints every 2000 frames
  ('frames F wall W cpu C mean100 M (N episodes)'). A run that reaches its
  target stops and writes its own entry, so a stopped run had not reached it.
  """
  import re
  algorithm, library, env, target, cap = PARTIAL_META[run_name]
  pat = re.compile(r'frames (\d+) wall ([\d.]+)s cpu ([\d.]+)s '
                   r'mean100 ([-\d.na]+) \((\d+) episodes\)')
  curve = []
  with open(log_path) as f:
    for line in f:
      m = pat.search(line)
      if m:
        curve.append((int(m[1]), float(m[2]), float(m[3]), float(m[4]),
                      int(m[5])))
  frames, wall, cpu, mean, episodes = curve[-1]
  return {
      'algorithm': algorithm, 'library': library,
      'library_version': library_version, 'torch_version': torch.__version__,
      'env': env, 'target': target,
      'criterion': (f'mean return of the last {WINDOW} finished training '
                    f'episodes >= target (window must be full)'),
      'reached': False, 'incomplete': True,
      'frames_to_target': None, 'wall_time_s_to_target': None,
      'cpu_time_s_to_target': None,
      'final_mean_return': mean, 'final_window_episodes': episodes,
      'episodes': None, 'total_frames': frames, 'frame_cap': cap,
      'total_wall_time_s': wall, 'total_cpu_time_s': cpu,
      'wall_time_s_per_1000_frames': round(1000 * wall / frames, 3),
      'cpu_time_s_per_1000_frames': round(1000 * cpu / frames, 3),
      'hyperparameters': 'as in run_reference.py',
      'seed': SEED, 'torch_num_threads': 1,
      'curve_frames_wall_cpu_mean100': [c[:4] for c in curve],
      'note': ('INCOMPLETE: stopped at the last progress line before the '
               'frame cap, target not reached by then. ' + reason),
  }


RUNS = {
    'ppo_cartpole': run_ppo_cartpole,
    'sac_pendulum': run_sac_pendulum,
    'ddpg_pendulum': run_ddpg_pendulum,
    'dsac_cartpole': run_dsac_cartpole,
    'ppg_cartpole': run_ppg_cartpole,
}


def machine():
  return {
      'cpu_cores': os.cpu_count(),
      'cpu_model': _cpu_model(),
      'note': ('2 cores shared with other agents\' concurrent jobs (load '
               'average 5-9 during these runs, see loadavg_* per run); each '
               'run single-process with torch.set_num_threads(1), '
               'OMP_NUM_THREADS=1. Wall times are inflated by that '
               'contention; cpu_time_* (process CPU time) is the more '
               'comparable figure.'),
      'python': platform.python_version(),
      'platform': platform.platform(),
  }


def _cpu_model():
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor()


def merge(run_name, entry):
  data = {'machine': machine(), 'runs': []}
  if os.path.exists(RESULTS):
    with open(RESULTS) as f:
      data = json.load(f)
    data['machine'] = machine()
  entry = dict(run=run_name, **entry)
  data['runs'] = [r for r in data['runs'] if r.get('run') != run_name]
  data['runs'].append(entry)
  order = list(RUNS)
  data['runs'].sort(key=lambda r: order.index(r['run'])
                    if r.get('run') in order else len(order))
  with open(RESULTS, 'w') as f:
    json.dump(data, f, indent=1)
    f.write('\n')


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument('--run', required=True, choices=sorted(RUNS))
  parser.add_argument('--no-save', action='store_true')
  parser.add_argument('--partial_log', default=None,
                      help='record a run stopped early from its progress log')
  parser.add_argument('--partial_reason', default='')
  parser.add_argument('--max_frames', type=int, default=None,
                      help='smoke test: lower frame cap, implies --no-save')
  args = parser.parse_args()
  global MAX_FRAMES
  MAX_FRAMES = args.max_frames
  if MAX_FRAMES:
    args.no_save = True
  if args.partial_log:
    version = {'stable-baselines3': 'stable_baselines3', 'tianshou':
               'tianshou', 'DI-engine': 'ding'}[PARTIAL_META[args.run][1]]
    entry = partial_from_log(args.run, args.partial_log,
                             __import__(version).__version__,
                             args.partial_reason)
    merge(args.run, entry)
    return
  load_start = os.getloadavg()
  entry = RUNS[args.run]()
  entry['loadavg_1_5_15_at_start'] = [round(x, 2) for x in load_start]
  entry['loadavg_1_5_15_at_end'] = [round(x, 2) for x in os.getloadavg()]
  print(json.dumps({k: v for k, v in entry.items()
                    if k != 'curve_frames_wall_cpu_mean100'}, indent=1))
  if not args.no_save:
    merge(args.run, entry)


if __name__ == '__main__':
  sys.exit(main())
