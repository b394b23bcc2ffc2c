"""Gymnasium environments (classic control and other flat-vector tasks).

Observation: `{'vector': float32 [D]}` (a Box flattened, or a Discrete
one-hot). Action: `'action'`, a `DiscreteSpec` for a Discrete space or a
`ContinuousSpec` for a Box (actions are clipped to the Box bounds).
Gymnasium's time limit (`TimeLimit`) ends episodes as truncated. With a
step multiplier the action is repeated, summing rewards and stopping at
episode end (fixed default: 1 frame per step).

Classic-control and toy-text envs keep their whole state in plain
attributes (numbers, arrays, a numpy Generator) of the env and its
wrappers; `get_state` captures those, so a resumed run continues the same
episodes. Other families (Box2D, MuJoCo) hold state in native objects and
raise `SnapshotUnsupported`.
"""

import collections
import difflib

import gymnasium
import numpy as np

from clear import snapshot
from clear import types
from envs import single
from envs import step_mul as step_mul_lib

DEFAULT_OPTIONS = {
    'max_episode_steps': None,  # None: the registered TimeLimit.
    'fixed_step_mul': True,
    'step_mul': 1,
    'max_step_mul': 4,
}

# Env modules whose state lives entirely in plain Python/numpy attributes.
SNAPSHOT_MODULES = ('gymnasium.envs.classic_control', 'gymnasium.envs.toy_text')


def _encode_attribute(value):
  """A JSON form of a plain attribute value, or None to leave it out."""
  if isinstance(value, np.random.Generator):
    return {'generator': value.bit_generator.state}
  if isinstance(value, np.ndarray) and value.dtype.kind in 'biuf':
    return {'array': value.tolist(), 'dtype': value.dtype.str}
  if isinstance(value, np.generic):
    value = value.item()
  if value is None or isinstance(value, (bool, int, float, str)):
    return {'value': value}
  if isinstance(value, tuple) and all(
      isinstance(x, (bool, int, float)) for x in value):
    return {'tuple': list(value)}
  return None


def _decode_attribute(encoded):
  if 'generator' in encoded:
    state = encoded['generator']
    generator = np.random.Generator(getattr(np.random,
                                            state['bit_generator'])())
    generator.bit_generator.state = state
    return generator
  if 'array' in encoded:
    return np.asarray(encoded['array'], np.dtype(encoded['dtype']))
  if 'tuple' in encoded:
    return tuple(encoded['tuple'])
  return encoded['value']


def check_game(env_id: str):
  """Raises ValueError with close names if gymnasium does not know env_id."""
  if env_id in gymnasium.registry:
    return
  names = sorted(gymnasium.registry)
  close = difflib.get_close_matches(env_id, names, n=5, cutoff=0.5)
  hint = f' Did you mean {close}?' if close else ''
  raise ValueError(f'Unknown gymnasium environment {env_id!r}.{hint}')


class GymEnv(single.SingleEnv):
  """One gymnasium environment; see the module docstring."""

  def __init__(self, env_id: str, seed: int = 0, **options):
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
      raise ValueError(f'Unknown gym options {unknown}; valid: '
                       f'{sorted(DEFAULT_OPTIONS)}.')
    o = {**DEFAULT_OPTIONS, **options}
    check_game(env_id)
    self._step_mul = step_mul_lib.StepMul.from_options(o)
    kwargs = {}
    if o['max_episode_steps'] is not None:
      kwargs['max_episode_steps'] = int(o['max_episode_steps'])
    self._env = gymnasium.make(env_id, **kwargs)
    self._seed = int(seed)
    self._seeded = False

    obs_space = self._env.observation_space
    if isinstance(obs_space, gymnasium.spaces.Box):
      self._encode = lambda x: np.asarray(x, np.float32).reshape(-1)
      size = int(np.prod(obs_space.shape))
    elif isinstance(obs_space, gymnasium.spaces.Discrete):
      size = int(obs_space.n)
      eye = np.eye(size, dtype=np.float32)
      self._encode = lambda x: eye[int(x) - int(obs_space.start)]
    else:
      raise ValueError(f'{env_id}: unsupported observation space {obs_space}.')

    action_space = self._env.action_space
    if isinstance(action_space, gymnasium.spaces.Discrete):
      head = types.DiscreteSpec(int(action_space.n))
      start = int(action_space.start)
      self._decode = lambda a: int(a) + start
    elif isinstance(action_space, gymnasium.spaces.Box):
      low, high = action_space.low, action_space.high
      head = types.ContinuousSpec(tuple(action_space.shape),
                                  float(np.min(low)), float(np.max(high)))
      self._decode = lambda a: np.clip(
          np.asarray(a, action_space.dtype).reshape(action_space.shape),
          low, high)
    else:
      raise ValueError(f'{env_id}: unsupported action space {action_space}.')

    self._spec = types.EnvSpec(
        observation_spec=collections.OrderedDict(
            vector=types.ArraySpec((size,), np.float32)),
        action_spec=self._step_mul.extend_action_spec(
            collections.OrderedDict(action=head)),
        name=f'gym:{env_id}')

  @property
  def spec(self) -> types.EnvSpec:
    return self._spec

  def reset(self) -> dict:
    seed = None if self._seeded else self._seed
    self._seeded = True
    observation, _ = self._env.reset(seed=seed)
    return {'vector': self._encode(observation)}

  def step(self, action: dict) -> single.Transition:
    env_action = self._decode(action['action'])

    def step_once():
      observation, reward, terminated, truncated, _ = self._env.step(
          env_action)
      return observation, float(reward), bool(terminated), bool(truncated)

    observation, reward, terminated, truncated, frames = step_mul_lib.repeat(
        step_once, self._step_mul.repeats(action))
    return single.Transition(
        observation={'vector': self._encode(observation)}, reward=reward,
        terminated=terminated, truncated=truncated and not terminated,
        frames=frames)

  def _layers(self):
    """The wrappers from the outside in, then the unwrapped env."""
    layer = self._env
    while isinstance(layer, gymnasium.Wrapper):
      yield layer
      layer = layer.env
    yield layer

  def _snapshots_supported(self) -> bool:
    return type(self._env.unwrapped).__module__.startswith(SNAPSHOT_MODULES)

  def get_state(self):
    if not self._snapshots_supported():
      return super().get_state()
    layers = []
    for layer in self._layers():
      encoded = {name: _encode_attribute(value)
                 for name, value in vars(layer).items()}
      layers.append({k: v for k, v in encoded.items() if v is not None})
    # The seed of the first reset too: an env built on a resume (one held
    # for a task not visited yet) is built with another.
    return {'layers': snapshot.to_json_array(layers),
            'seeded': np.array(self._seeded), 'seed': np.array(self._seed)}

  def set_state(self, state):
    if not self._snapshots_supported():
      super().set_state(state)
    layers = snapshot.from_json_array(state['layers'])
    targets = list(self._layers())
    if len(layers) != len(targets):
      raise ValueError(f'{self._spec.name}: the saved state has '
                       f'{len(layers)} wrapper layers, this env '
                       f'{len(targets)}.')
    for layer, attributes in zip(targets, layers):
      for name, encoded in attributes.items():
        setattr(layer, name, _decode_attribute(encoded))
    self._seeded = bool(state['seeded'])
    if 'seed' in state:  # States saved before it was kept lack it.
      self._seed = int(state['seed'])

  def close(self):
    self._env.close()


def make(env_id: str, seed: int = 0, **options) -> GymEnv:
  return GymEnv(env_id, seed, **options)
