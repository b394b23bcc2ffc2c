"""Batches of random numbers shaped like a policy's CartPole unrolls, for
learner tests (EWC, Progress & Compress)."""

import numpy as np

from clear import types
from clear.algorithms import policy as policy_lib

# The spec of gym's CartPole-v1, whose unrolls `random_batch` imitates.
CARTPOLE_SPEC = types.EnvSpec(
    observation_spec={'vector': types.ArraySpec((4,), np.float32)},
    action_spec={'action': types.DiscreteSpec(2)}, name='gym:CartPole-v1')


def random_batch(policy, seed, t=5, b=4):
  """A batch of `[t + 1, b]` CartPole-shaped unrolls of random numbers."""
  rng = np.random.RandomState(seed)
  batch = policy_lib.example_batch(policy, t, b)
  env, agent = batch.env_outputs, batch.agent_outputs
  done = rng.rand(t + 1, b) < 0.15
  return batch._replace(
      env_outputs=env._replace(
          reward=rng.randn(t + 1, b).astype(np.float32), done=done,
          truncated=done & (rng.rand(t + 1, b) < 0.3),
          observation={'vector': rng.randn(t + 1, b, 4).astype(np.float32)}),
      agent_outputs=agent._replace(
          action={'action': rng.randint(2, size=(t + 1, b)).astype(
              np.int32)},
          logits={'action': rng.randn(t + 1, b, 2).astype(np.float32)},
          baseline=rng.randn(t + 1, b).astype(np.float32)))
