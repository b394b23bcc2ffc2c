"""Task sequences for continual learning: several games behind one spec.

A sequence name joins `envs.make` names with commas, e.g.
`atari:Pong,atari:Breakout,atari:SpaceInvaders`,
`gym:CartPole-v1,gym:Acrobot-v1` or `minatar:Breakout,minatar:Freeway`
(a name may repeat). All tasks belong to
one family. `make(name, num_envs, seed, task=i, **options)` builds the
active task `i` (the family's own envs, options passed on unchanged) behind
the *union spec* of the whole sequence, so that one agent can be trained on
every task in turn without changing shape:

  * observations: the same keys in every task; entries of one rank whose
    last axis alone differs are zero-padded at the end of that axis to the
    largest size (gym: `vector` `[max D]`; MinAtar: `board`
    `[10, 10, max C]`, so a game's channels come first and the rest stay
    0); other entries must agree (Atari: `frame` `[84, 84, k]`);
  * actions: the `action` head is a `DiscreteSpec` over the union of the
    tasks' action sets with `mask_key='action_mask'`, and the observation
    gains `action_mask`: float32 `[num_union_actions]`, 1 where the active
    task has the action, else 0 (a number like sc2's `available_actions`,
    as `agents.heads.mask_logits` and the torsos read masks). Atari: the
    union of the games' action sets (the minimal ones unless
    `full_action_space`) in ALE action ids, ascending, each mapped back to
    the game's own index; gym (Discrete spaces only):
    `range(max n)`, with actions `>= n` masked for a task of `n` actions;
    a task env with an `action_ids` attribute (MinAtar) names its actions'
    ids itself (MinAtar's full set: the same 6 in every game, nothing
    masked; minimal sets: their union).
    Every other head (a dynamic `step_mul`) must agree across tasks. An
    unavailable (masked) union action is an error: agents mask them;
  * sc2: every map has the same spec for given options (its `function`
    head is already masked by `available_actions`), so the active map's
    spec is used as it is, with the sequence as its name, and only the
    active map is launched.

The spec's name is the sequence name; `MultiTaskBatchedEnv` (what `make`
returns) adds `task`, `task_name`, `task_names` and `num_tasks`. Snapshots
(`get_state` / `set_state`) delegate to the active task's env and record
the task index, so a state only restores into the same task.
"""

import collections
import numbers
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from clear import types
from envs import batched
from envs import registry
from envs import single

MASK_KEY = 'action_mask'
ACTION_KEY = 'action'
SEPARATOR = registry.SEQUENCE_SEPARATOR

# Families with a task-independent spec: only the active task is built.
_SHARED_SPEC_FAMILIES = ('sc2',)


def is_sequence(name: str) -> bool:
  """Whether `name` lists several tasks (contains a comma)."""
  return SEPARATOR in name


def held_from_the_start(name: str) -> bool:
  """Whether an actor playing sequence `name` builds every task's envs
  when it starts: yes for in-process envs (Atari, MinAtar, gym), so that a
  first visit costs no start-up; no for sc2, whose envs are game processes
  of their own."""
  family, _, _ = registry.parse_name(split_sequence(name)[0])
  return family not in _SHARED_SPEC_FAMILIES


def split_sequence(name: str) -> List[str]:
  """'gym:CartPole-v1, gym:Acrobot-v1' -> ['gym:CartPole-v1', ...].

  A name without commas is a sequence of one task. Surrounding spaces are
  dropped; names may repeat.

  Raises:
    ValueError: an empty entry (e.g. a trailing comma).
  """
  names = [part.strip() for part in name.split(SEPARATOR)]
  if not all(names):
    raise ValueError(f'Task sequence {name!r} has an empty entry; expected '
                     f'names joined by {SEPARATOR!r}, e.g. '
                     f'"atari:Pong,atari:Breakout".')
  return names


def check_sequence(name: str) -> str:
  """Checks every name of a sequence; returns their common family.

  Raises:
    ValueError: (one, naming the sequence) an empty entry, an unknown
      family or game, or tasks of different families.
  """
  names = split_sequence(name)
  families = []
  for i, task_name in enumerate(names):
    try:
      family, game, module = registry.parse_name(task_name)
      module.check_game(game)
    except ValueError as e:
      raise ValueError(f'Task sequence {name!r}, task {i} ({task_name!r}): '
                       f'{e}') from None
    families.append(family)
  if len(set(families)) > 1:
    raise ValueError(f'Task sequence {name!r} mixes environment families '
                     f'{sorted(set(families))}; all tasks must be of one '
                     f'family (all atari, all gym, all minatar or all '
                     f'sc2).')
  return families[0]


class TaskLayout(NamedTuple):
  """How one task's env maps onto the union spec.

  Attributes:
    name: the task's env name, e.g. 'atari:Pong'.
    action_map: int64 `[U]`: union action -> the task's own action index,
      -1 where the task lacks the action; None when the spec has no
      `action` head to merge (sc2).
    action_mask: bool `[U]`, `action_map >= 0`; None like `action_map`.
    sizes: dict observation key -> the task's own size of the last axis,
      for the entries that are zero-padded (along it) in the union.
  """
  name: str
  action_map: Optional[np.ndarray]
  action_mask: Optional[np.ndarray]
  sizes: Dict[str, int]


def union_spec(name: str, task_names: Sequence[str],
               specs: Sequence[types.EnvSpec],
               action_ids: Sequence[Optional[Sequence[int]]]):
  """The union spec of a sequence and each task's layout in it.

  Args:
    name: the sequence name (the union spec's name).
    task_names: the N tasks' names.
    specs: their N `EnvSpec`s.
    action_ids: per task, the id of each of its own actions in a space
      shared by the family (ALE action ids; `range(n)` for gym), or None
      for every task when the `action` head is not merged (sc2).

  Returns:
    (`EnvSpec`, list of N `TaskLayout`s).

  Raises:
    ValueError: the specs cannot be merged (different observation keys,
      dtypes or shapes other than rank-1 sizes, a continuous `action` head,
      other action heads that differ, an existing `action_mask` entry).
  """
  def fail(message):
    raise ValueError(f'Task sequence {name!r}: {message}')

  first = specs[0]
  observation_spec = collections.OrderedDict()
  padded = set()
  for key, spec in first.observation_spec.items():
    shapes = set()
    for task_name, task_spec in zip(task_names, specs):
      other = task_spec.observation_spec.get(key)
      if other is None or list(task_spec.observation_spec) != list(
          first.observation_spec):
        fail(f'the tasks have different observation entries '
             f'({list(first.observation_spec)} in {task_names[0]!r}, '
             f'{list(task_spec.observation_spec)} in {task_name!r}).')
      if np.dtype(other.dtype) != np.dtype(spec.dtype):
        fail(f'observation {key!r} is {np.dtype(spec.dtype)} in '
             f'{task_names[0]!r} but {np.dtype(other.dtype)} in '
             f'{task_name!r}.')
      shapes.add(tuple(other.shape))
    if len(shapes) == 1:
      observation_spec[key] = spec
    elif len({s[:-1] for s in shapes}) == 1 and all(s for s in shapes):
      lead = next(iter(shapes))[:-1]
      observation_spec[key] = types.ArraySpec(
          lead + (max(s[-1] for s in shapes),), spec.dtype)
      padded.add(key)
    else:
      fail(f'observation {key!r} has shapes {sorted(shapes)}; only entries '
           f'that differ in their last axis alone can be padded.')

  action_spec = collections.OrderedDict()
  for key, head in first.action_spec.items():
    heads = [s.action_spec.get(key) for s in specs]
    if any(list(s.action_spec) != list(first.action_spec) for s in specs):
      fail(f'the tasks have different action heads: '
           f'{[list(s.action_spec) for s in specs]}.')
    if key == ACTION_KEY and action_ids[0] is not None:
      for task_name, task_head in zip(task_names, heads):
        if not isinstance(task_head, types.DiscreteSpec):
          fail(f'{task_name!r} has a {type(task_head).__name__} action '
               f'head; task sequences need discrete actions.')
        if task_head.spatial is not None or task_head.mask_key is not None:
          fail(f'{task_name!r}: the {key!r} head must be a plain discrete '
               f'head to be merged, got {task_head}.')
      continue  # Built below, from the union of the action ids.
    if any(h != head for h in heads):
      fail(f'action head {key!r} differs between tasks: {heads}.')
    action_spec[key] = head

  union = None
  if ACTION_KEY in first.action_spec and action_ids[0] is not None:
    if MASK_KEY in observation_spec:
      fail(f'the tasks already have an observation named {MASK_KEY!r}.')
    union = sorted(set().union(*[set(ids) for ids in action_ids]))
    observation_spec[MASK_KEY] = types.ArraySpec((len(union),), np.float32)
    merged = collections.OrderedDict()
    for key, head in first.action_spec.items():
      merged[key] = (types.DiscreteSpec(len(union), mask_key=MASK_KEY)
                     if key == ACTION_KEY else action_spec[key])
    action_spec = merged

  layouts = []
  for task_name, task_spec, ids in zip(task_names, specs, action_ids):
    action_map = action_mask = None
    if union is not None:
      own = {action_id: k for k, action_id in enumerate(ids)}
      action_map = np.array([own.get(a, -1) for a in union], np.int64)
      action_mask = action_map >= 0
    sizes = {key: int(task_spec.observation_spec[key].shape[-1])
             for key in padded}
    layouts.append(TaskLayout(task_name, action_map, action_mask, sizes))
  # A frame stack stays one when every task stacks it and none is padded.
  stacked = tuple(key for key in first.stacked_frames if key not in padded and
                  all(key in s.stacked_frames for s in specs))
  return types.EnvSpec(observation_spec, action_spec, name,
                       stacked), layouts


class MultiTaskEnv(single.SingleEnv):
  """One task's env seen through the union spec of its sequence.

  Args:
    env: the task's own `SingleEnv`.
    spec: the union spec (from `union_spec`).
    layout: the task's `TaskLayout`.
    task: the task's index in the sequence.
  """

  def __init__(self, env: single.SingleEnv, spec: types.EnvSpec,
               layout: TaskLayout, task: int):
    self._env = env
    self._spec = spec
    self._layout = layout
    self._task = int(task)
    # Padded entries: zeros past the task's own size, written in place.
    self._buffers = {key: np.zeros(spec.observation_spec[key].shape,
                                   spec.observation_spec[key].dtype)
                     for key in layout.sizes}
    self._mask = (None if layout.action_mask is None else
                  layout.action_mask.astype(np.float32))

  @property
  def spec(self) -> types.EnvSpec:
    return self._spec

  @property
  def env(self) -> single.SingleEnv:
    """The active task's own env."""
    return self._env

  @property
  def layout(self) -> TaskLayout:
    return self._layout

  @property
  def task(self) -> int:
    return self._task

  @property
  def task_name(self) -> str:
    return self._layout.name

  @property
  def num_restarts(self) -> int:
    """Crash relaunches of the task's env (see `envs.recovery`)."""
    return int(getattr(self._env, 'num_restarts', 0))

  def reset(self) -> dict:
    return self._observe(self._env.reset())

  def step(self, action: dict) -> single.Transition:
    action = dict(action)
    if self._layout.action_map is not None:
      union_action = int(action[ACTION_KEY])
      own = (self._layout.action_map[union_action]
             if 0 <= union_action < len(self._layout.action_map) else -1)
      if own < 0:
        raise ValueError(
            f'{self._layout.name}: union action {union_action} is not '
            f'available in this task (available: '
            f'{np.flatnonzero(self._layout.action_mask).tolist()}); agents '
            f'must honour the {MASK_KEY!r} observation.')
      action[ACTION_KEY] = int(own)
    transition = self._env.step(action)
    return transition._replace(observation=self._observe(
        transition.observation))

  def _observe(self, observation: dict) -> dict:
    out = {}
    for key in self._spec.observation_spec:
      if key == MASK_KEY and self._mask is not None:
        out[key] = self._mask
      elif key in self._buffers:
        self._buffers[key][..., :self._layout.sizes[key]] = observation[key]
        out[key] = self._buffers[key]
      else:
        out[key] = observation[key]
    return out

  def get_state(self) -> Dict[str, np.ndarray]:
    """The task env's state (see `SingleEnv.get_state`) and the task index.

    Raises:
      SnapshotUnsupported: the task's env cannot save its state.
    """
    state = self._env.get_state()
    return {'task': np.array(self._task, np.int64),
            **{f'task_env/{k}': v for k, v in state.items()}}

  def set_state(self, state: Dict[str, np.ndarray]):
    saved = int(state['task'])
    if saved != self._task:
      raise ValueError(f'{self._spec.name}: the saved state is of task '
                       f'{saved}, this env runs task {self._task} '
                       f'({self._layout.name}).')
    prefix = 'task_env/'
    self._env.set_state({k[len(prefix):]: v for k, v in state.items()
                         if k.startswith(prefix)})

  def close(self):
    self._env.close()


class MultiTaskBatchedEnv(batched.BatchedEnv):
  """A `BatchedEnv` of one task of a sequence, with the sequence's spec.

  Args:
    envs: `MultiTaskEnv`s of the active task.
    name: the sequence name.
    task_names: the names of the sequence, in order (may repeat).
    task: the active task's index.
  """

  def __init__(self, envs: Sequence[MultiTaskEnv], name: str,
               task_names: Sequence[str], task: int):
    super().__init__(envs, name=name)
    self._task_names = tuple(task_names)
    self._task = int(task)

  @property
  def task(self) -> int:
    """Index of the active task in `task_names`."""
    return self._task

  @property
  def task_name(self) -> str:
    return self._task_names[self._task]

  @property
  def task_names(self) -> tuple:
    return self._task_names

  @property
  def num_tasks(self) -> int:
    return len(self._task_names)


def _action_ids(family: str, env, spec: types.EnvSpec,
                options: dict) -> Optional[List[int]]:
  """The ids of the env's own actions in the family's shared action space."""
  if family in _SHARED_SPEC_FAMILIES or ACTION_KEY not in spec.action_spec:
    return None
  head = spec.action_spec[ACTION_KEY]
  if not isinstance(head, types.DiscreteSpec):
    raise ValueError(f'{spec.name} has a {type(head).__name__} action head; '
                     f'task sequences need discrete actions (their union '
                     f'is masked per task).')
  if family == 'atari':
    ale = env.ale
    actions = (ale.getLegalActionSet() if options.get('full_action_space')
               else ale.getMinimalActionSet())
    ids = [int(a.value) for a in actions]
    if len(ids) != head.num_values:
      raise ValueError(f'{spec.name}: {len(ids)} ALE actions but an action '
                       f'head of {head.num_values}.')
    return ids
  own_ids = getattr(env, 'action_ids', None)
  if own_ids is not None:
    ids = [int(i) for i in own_ids]
    if len(ids) != head.num_values:
      raise ValueError(f'{spec.name}: {len(ids)} action ids but an action '
                       f'head of {head.num_values}.')
    return ids
  return list(range(head.num_values))


def make(name: str, num_envs: int = 1, seed: int = 0, task: int = 0,
         **options) -> MultiTaskBatchedEnv:
  """Builds task `task` of the sequence `name` behind the union spec.

  Args:
    name: task names joined by commas (see the module docstring).
    num_envs: batch size B.
    seed: seed of the first environment (as in `envs.make`).
    task: index of the active task in the sequence.
    **options: the family's options, passed to every task.

  Returns:
    A `MultiTaskBatchedEnv` of `num_envs` envs of the active task.

  Raises:
    ValueError: a bad sequence (see `check_sequence`), task index, option
      or a spec that cannot be merged (see `union_spec`).
  """
  family = check_sequence(name)
  names = split_sequence(name)
  if (isinstance(task, bool) or not isinstance(task, numbers.Integral) or
      not 0 <= task < len(names)):
    raise ValueError(f'Task sequence {name!r}: task must be an int in '
                     f'[0, {len(names)}), got {task!r}.')
  task = int(task)
  active = registry.make(names[task], num_envs, seed, **options)
  try:
    built = {names[task]: (active.spec, active.envs[0])}
    throwaway = []
    try:
      for task_name in names:
        if task_name in built:
          continue
        if family in _SHARED_SPEC_FAMILIES:
          built[task_name] = (active.spec._replace(name=task_name), None)
        else:
          env = registry.make(task_name, 1, seed, **options)
          throwaway.append(env)
          built[task_name] = (env.spec, env.envs[0])
      specs = [built[n][0] for n in names]
      ids = [_action_ids(family, built[n][1], built[n][0], options)
             for n in names]
    finally:
      for env in throwaway:
        env.close()
    spec, layouts = union_spec(name, names, specs, ids)
    envs = [MultiTaskEnv(env, spec, layouts[task], task)
            for env in active.envs]
  except BaseException:
    active.close()
    raise
  return MultiTaskBatchedEnv(envs, name=name, task_names=names, task=task)
