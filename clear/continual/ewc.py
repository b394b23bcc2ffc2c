"""Elastic weight consolidation: the diagonal Fisher, the penalty, the anchors.

EWC (Kirkpatrick et al. 2017, arXiv 1612.00796) keeps, for every task
already trained, the weights theta*_k it ended with (its anchor) and the
diagonal F_k of the Fisher information of its loss there, and adds

  penalty = lambda / 2 * sum_k sum_i F_k,i (theta_i - theta*_k,i)^2

to the loss of whatever is trained next. Online EWC (Schwarz et al. 2018,
Progress & Compress, arXiv 1805.06370) keeps one anchor, the latest, and one
running Fisher F <- gamma F + F_new.

The Fisher here is the empirical one of whole batches, as in CORA's IMPALA
version (Powers et al. 2022): the mean over M batches of the squared
gradient of each batch's loss,

  F_i = 1/M sum_m (d loss_m / d theta_i)^2.

The sum over K anchors costs K passes over the weights on every update;
`merge_anchors` folds it, once per task boundary, into one quadratic with
the same value and gradient,

  sum_k F_k (theta - theta*_k)^2 = A (theta - m)^2 + r,
  A = sum_k F_k,  m = sum_k F_k theta*_k / A,  r = sum_k F_k (theta*_k - m)^2,

so the penalty costs one pass whatever the number of tasks
(`merged_penalty`).

Everything works on any list of variables (the whole agent for EWC; a part
of a network for a method that consolidates only that part), and is pure
maths except `EwcState`, the `tf.Module` that holds anchors and Fishers as
non-trainable variables so `tf.train.Checkpoint` saves them.
"""

import collections
import math
from typing import Iterable, List, Sequence, Tuple

import tensorflow as tf

EwcPenalty = collections.namedtuple('EwcPenalty', ['total', 'per_task'])
EwcPenalty.__doc__ = """The pieces of `ewc_penalty`.

Attributes:
  total: float32 scalar, lambda / 2 * sum of `per_task`.
  per_task: float32 `[K]`, sum_i F_k,i (theta_i - theta*_k,i)^2 for each of
    the K anchors (unweighted).
"""

MergedAnchors = collections.namedtuple(
    'MergedAnchors', ['precision', 'center', 'residual'])
MergedAnchors.__doc__ = """K anchors folded into one quadratic
(`merge_anchors`).

Attributes:
  precision: N tensors shaped like the variables, A = sum_k F_k.
  center: N tensors, m = sum_k F_k theta*_k / A (0 where A is 0).
  residual: float64 scalar, r = sum_k sum_i F_k,i (theta*_k,i - m_i)^2,
    the part of the penalty no weights can remove (0 for one anchor).
"""

FisherSummary = collections.namedtuple(
    'FisherSummary', ['mean', 'max', 'num_batches'])
FisherSummary.__doc__ = """A few numbers that describe a diagonal Fisher.

Attributes:
  mean: mean of all its entries (over every variable's elements).
  max: its largest entry.
  num_batches: the batches it was estimated from.
"""


def _check_same_shapes(fn_name, what, tensors, reference):
  if len(tensors) != len(reference):
    raise ValueError(f'{fn_name}: {what} has {len(tensors)} tensors, '
                     f'expected {len(reference)} (one per variable).')
  for i, (tensor, ref) in enumerate(zip(tensors, reference)):
    if not tensor.shape.is_compatible_with(ref.shape):
      raise ValueError(f'{fn_name}: {what}[{i}] has shape {tensor.shape}, '
                       f'expected {ref.shape}.')


def fisher_diagonal(gradients: Iterable[Sequence[tf.Tensor]]
                    ) -> List[tf.Tensor]:
  """The diagonal empirical Fisher from per-batch gradients.

  N is the number of variables, M the number of batches. Only a running sum
  of squares is held, so `gradients` may be a generator that computes each
  batch's gradients when asked (M full gradient lists never sit in memory
  together).

  Args:
    gradients: M lists of N float tensors, batch m's gradient of its loss
      with respect to each variable (shapes of the variables).

  Returns:
    N float tensors, 1/M sum_m g_m^2.

  Raises:
    ValueError: no batch, or lists that differ in length or shapes.
  """
  name = 'fisher_diagonal'
  total, count = None, 0
  for grads in gradients:
    grads = [tf.convert_to_tensor(g) for g in grads]
    if total is None:
      if not grads:
        raise ValueError(f'{name}: a batch has no gradients.')
      total = [tf.square(g) for g in grads]
    else:
      _check_same_shapes(name, f'batch {count} gradients', grads, total)
      total = [t + tf.square(g) for t, g in zip(total, grads)]
    count += 1
  if not count:
    raise ValueError(f'{name}: at least one batch of gradients is needed.')
  return [t / float(count) for t in total]


def online_fisher(previous: Sequence[tf.Tensor], new: Sequence[tf.Tensor],
                  gamma: float) -> List[tf.Tensor]:
  """Online EWC's running Fisher, gamma * previous + new (per variable).

  Raises:
    ValueError: gamma outside (0, 1], or lists that differ.
  """
  name = 'online_fisher'
  if not 0.0 < gamma <= 1.0:
    raise ValueError(f'{name}: gamma must be in (0, 1], got {gamma}.')
  previous = [tf.convert_to_tensor(p) for p in previous]
  new = [tf.convert_to_tensor(n) for n in new]
  _check_same_shapes(name, 'new', new, previous)
  return [gamma * p + n for p, n in zip(previous, new)]


def ewc_penalty(variables: Sequence[tf.Tensor],
                anchors: Sequence[Sequence[tf.Tensor]],
                fishers: Sequence[Sequence[tf.Tensor]],
                lam: float) -> EwcPenalty:
  """lambda / 2 * sum_k sum_i F_k,i (theta_i - theta*_k,i)^2.

  N is the number of variables, K the number of anchors. The gradient with
  respect to theta_i is lambda * sum_k F_k,i (theta_i - theta*_k,i); none
  reaches the anchors or the Fishers. An anchor whose Fisher is all zeros
  (not set yet) adds exactly 0.

  Args:
    variables: N float tensors (or variables), theta.
    anchors: K lists of N tensors shaped like `variables`, theta*_k.
    fishers: K lists of N tensors shaped like `variables`, F_k (>= 0).
    lam: lambda, python float or float32 scalar.

  Returns:
    `EwcPenalty`.

  Raises:
    ValueError: no anchor, or lists that differ in length or shapes.
  """
  name = 'ewc_penalty'
  variables = [tf.convert_to_tensor(v) for v in variables]
  if len(anchors) != len(fishers) or not anchors:
    raise ValueError(f'{name}: needs as many anchors as Fishers, at least '
                     f'one; got {len(anchors)} and {len(fishers)}.')
  per_task = []
  for k, (anchor, fisher) in enumerate(zip(anchors, fishers)):
    anchor = [tf.stop_gradient(tf.convert_to_tensor(a)) for a in anchor]
    fisher = [tf.stop_gradient(tf.convert_to_tensor(f)) for f in fisher]
    _check_same_shapes(name, f'anchors[{k}]', anchor, variables)
    _check_same_shapes(name, f'fishers[{k}]', fisher, variables)
    per_task.append(tf.add_n([
        tf.reduce_sum(f * tf.square(v - a))
        for v, a, f in zip(variables, anchor, fisher)]))
  per_task = tf.stack(per_task)
  total = tf.cast(lam, per_task.dtype) / 2.0 * tf.reduce_sum(per_task)
  return EwcPenalty(total=total, per_task=per_task)


def merge_anchors(anchors: Sequence[Sequence[tf.Tensor]],
                  fishers: Sequence[Sequence[tf.Tensor]]) -> MergedAnchors:
  """Folds K anchors and Fishers into `MergedAnchors` (see the module doc).

  Computed in float64 and cast back to the variables' dtype: with a single
  anchor (or where only one Fisher is nonzero) the center is that anchor
  bit for bit and the residual exactly 0, so the penalty is exactly 0 there.

  Args:
    anchors: K lists of N tensors, theta*_k.
    fishers: K lists of N tensors shaped alike, F_k (>= 0).

  Raises:
    ValueError: no anchor, or lists that differ in length or shapes.
  """
  name = 'merge_anchors'
  if len(anchors) != len(fishers) or not anchors:
    raise ValueError(f'{name}: needs as many anchors as Fishers, at least '
                     f'one; got {len(anchors)} and {len(fishers)}.')
  reference = [tf.convert_to_tensor(a) for a in anchors[0]]
  for k in range(len(anchors)):
    _check_same_shapes(name, f'anchors[{k}]',
                       [tf.convert_to_tensor(a) for a in anchors[k]],
                       reference)
    _check_same_shapes(name, f'fishers[{k}]',
                       [tf.convert_to_tensor(f) for f in fishers[k]],
                       reference)
  precision, center = [], []
  residual = tf.constant(0.0, tf.float64)
  for i, ref in enumerate(reference):
    stack = lambda tensors, i=i: tf.stack(
        [tf.cast(t[i], tf.float64) for t in tensors])
    anchor, fisher = stack(anchors), stack(fishers)  # [K, ...]
    total = tf.reduce_sum(fisher, 0)
    mean = tf.math.divide_no_nan(tf.reduce_sum(fisher * anchor, 0), total)
    residual += tf.reduce_sum(fisher * tf.square(anchor - mean[None]))
    precision.append(tf.cast(total, ref.dtype))
    center.append(tf.cast(mean, ref.dtype))
  return MergedAnchors(precision, center, residual)


def merged_penalty(variables: Sequence[tf.Tensor], merged: MergedAnchors,
                   lam) -> tf.Tensor:
  """lambda / 2 * (sum_i A_i (theta_i - m_i)^2 + r): `ewc_penalty`'s total
  for the anchors `merged` folds, at the cost of one anchor.

  Its gradient with respect to theta_i is lambda * A_i (theta_i - m_i) =
  lambda * sum_k F_k,i (theta_i - theta*_k,i); none reaches `merged`.

  Args:
    variables: N float tensors (or variables), theta.
    merged: `MergedAnchors` (tensors or variables) shaped like them.
    lam: lambda, python float or float32 scalar.

  Returns:
    float32 scalar.

  Raises:
    ValueError: lists that differ in length or shapes.
  """
  name = 'merged_penalty'
  variables = [tf.convert_to_tensor(v) for v in variables]
  precision = [tf.stop_gradient(tf.convert_to_tensor(p))
               for p in merged.precision]
  center = [tf.stop_gradient(tf.convert_to_tensor(c)) for c in merged.center]
  _check_same_shapes(name, 'precision', precision, variables)
  _check_same_shapes(name, 'center', center, variables)
  quadratic = tf.add_n([tf.reduce_sum(p * tf.square(v - c))
                        for v, c, p in zip(variables, center, precision)])
  residual = tf.cast(tf.stop_gradient(merged.residual), quadratic.dtype)
  return tf.cast(lam, quadratic.dtype) / 2.0 * (quadratic + residual)


def summarize_fisher(fisher: Sequence[tf.Tensor],
                     num_batches: int) -> FisherSummary:
  """Mean and largest entry of a diagonal Fisher (all its variables)."""
  flat = tf.concat([tf.reshape(tf.cast(f, tf.float64), [-1])
                    for f in fisher], 0)
  return FisherSummary(mean=float(tf.reduce_mean(flat)),
                       max=float(tf.reduce_max(flat)),
                       num_batches=int(num_batches))


def fisher_from_batches(gradients_fn, batches) -> Tuple[List[tf.Tensor],
                                                       FisherSummary]:
  """The diagonal Fisher over M batches, and its summary.

  Args:
    gradients_fn: batch -> N gradient tensors (called once per batch, as
      the batch is drawn).
    batches: an iterable of M batches (a generator is fine).

  Returns:
    (N tensors, 1/M sum_m g_m^2; its `FisherSummary` with M batches).
  """
  count = [0]

  def gradients():
    for batch in batches:
      count[0] += 1
      yield gradients_fn(batch)

  diagonal = fisher_diagonal(gradients())
  return diagonal, summarize_fisher(diagonal, count[0])


def fisher_buffer_unrolls(frames: int, unroll_length: int,
                          frames_per_step: int = 1) -> int:
  """Unrolls that hold at least `frames` frames (steps of
  `frames_per_step` frames each, `unroll_length` steps an unroll)."""
  if frames < 1 or unroll_length < 1 or frames_per_step < 1:
    raise ValueError('fisher_buffer_unrolls: frames, unroll_length and '
                     f'frames_per_step must be >= 1, got {frames}, '
                     f'{unroll_length} and {frames_per_step}.')
  return max(1, math.ceil(frames / (unroll_length * frames_per_step)))


class EwcState(tf.Module):
  """The anchors and Fishers of EWC or online EWC over a list of variables.

  EWC keeps one slot per task (`num_slots` tasks); ending a task writes its
  slot, overwriting what an earlier visit of the same task left there.
  Online EWC keeps one slot (`online`): ending any task sets its anchor and
  merges the new Fisher into the running one (`online_fisher`). Slots start
  with zero Fishers, so they add nothing to the penalty until written.

  The penalty itself reads `merged`, the slots folded by `merge_anchors`
  at every `consolidate`, so it costs one pass over the weights however
  many tasks there are.

  Attributes:
    online: whether this is online EWC.
    anchors, fishers: `num_slots` lists of non-trainable variables shaped
      like the variables given.
    merged: `MergedAnchors` of non-trainable variables (precision and
      center shaped like the variables, a float64 residual).
    filled: int32 `[num_slots]`, 1 for a slot that holds an anchor.
    num_boundaries: int64, the task boundaries consolidated so far (the run
      loop's segment index at the last one), so a resumed run neither
      repeats nor skips one.
  """

  def __init__(self, variables: Sequence[tf.Variable], num_slots: int,
               online: bool = False, name: str = 'ewc'):
    super().__init__(name=name)
    if online:
      num_slots = 1
    if num_slots < 1:
      raise ValueError(f'EwcState: num_slots must be >= 1, got {num_slots}.')
    if not variables:
      raise ValueError('EwcState: no variables to consolidate.')
    self.online = bool(online)
    self._shapes = [v.shape for v in variables]

    def zeros(kind, k):
      return [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                          name=f'{kind}_{k}_{i}')
              for i, v in enumerate(variables)]

    self.anchors = [zeros('anchor', k) for k in range(num_slots)]
    self.fishers = [zeros('fisher', k) for k in range(num_slots)]
    self.merged = MergedAnchors(
        zeros('precision', 0), zeros('center', 0),
        tf.Variable(0.0, dtype=tf.float64, trainable=False, name='residual'))
    self.filled = tf.Variable(tf.zeros([num_slots], tf.int32),
                              trainable=False, name='filled')
    self.num_boundaries = tf.Variable(0, dtype=tf.int64, trainable=False,
                                      name='num_boundaries')

  @property
  def num_slots(self) -> int:
    return len(self.anchors)

  @property
  def num_anchors(self) -> int:
    """Slots that hold an anchor (`accumulate` keeps the latest in slot
    0)."""
    return int(tf.reduce_sum(self.filled))

  def penalty(self, variables: Sequence[tf.Tensor], lam) -> tf.Tensor:
    """`ewc_penalty`'s total for `variables` (in the order given at
    construction), computed by `merged_penalty`."""
    return merged_penalty(variables, self.merged, lam)

  def consolidate(self, slot: int, values: Sequence[tf.Tensor],
                  fisher: Sequence[tf.Tensor], gamma: float = 1.0):
    """Makes `values` the anchor of `slot` and records `fisher` for it.

    EWC overwrites the slot's Fisher; online EWC (slot 0) sets it to
    gamma * old + `fisher`.

    Raises:
      ValueError: a slot out of range, or lists that differ.
    """
    if not 0 <= slot < self.num_slots:
      raise ValueError(f'EwcState.consolidate: slot {slot} is outside '
                       f'[0, {self.num_slots}).')
    values = [tf.convert_to_tensor(v) for v in values]
    fisher = [tf.convert_to_tensor(f) for f in fisher]
    _check_same_shapes('EwcState.consolidate', 'values', values,
                       self.anchors[slot])
    _check_same_shapes('EwcState.consolidate', 'fisher', fisher,
                       self.anchors[slot])
    if self.online:
      fisher = online_fisher(self.fishers[slot], fisher, gamma)
    for variable, value in zip(self.anchors[slot], values):
      variable.assign(value)
    for variable, value in zip(self.fishers[slot], fisher):
      variable.assign(value)
    self.filled.scatter_nd_update([[slot]], [1])
    merged = merge_anchors(self.anchors, self.fishers)
    for variables, values in ((self.merged.precision, merged.precision),
                              (self.merged.center, merged.center)):
      for variable, value in zip(variables, values):
        variable.assign(value)
    self.merged.residual.assign(merged.residual)

  def accumulate(self, values: Sequence[tf.Tensor],
                 fisher: Sequence[tf.Tensor]):
    """Adds an anchor `values` with Fisher `fisher` to the penalty, beside
    every one added before (EWC without task identities: each period is a
    task of its own).

    Only the merged quadratic grows: A <- A + F, the center and residual
    by `merge_anchors` of the old center (precision A) and the new anchor,
    plus the old residual; slot 0 holds the latest anchor and Fisher.

    Raises:
      ValueError: online EWC, or lists that differ.
    """
    if self.online:
      raise ValueError('EwcState.accumulate: online EWC merges through '
                       'consolidate.')
    values = [tf.convert_to_tensor(v) for v in values]
    fisher = [tf.convert_to_tensor(f) for f in fisher]
    _check_same_shapes('EwcState.accumulate', 'values', values,
                       self.anchors[0])
    _check_same_shapes('EwcState.accumulate', 'fisher', fisher,
                       self.anchors[0])
    merged = merge_anchors([self.merged.center, values],
                           [self.merged.precision, fisher])
    for variable, value in zip(self.anchors[0], values):
      variable.assign(value)
    for variable, value in zip(self.fishers[0], fisher):
      variable.assign(value)
    self.filled.scatter_nd_update([[0]], [1])
    for variables, new in ((self.merged.precision, merged.precision),
                           (self.merged.center, merged.center)):
      for variable, value in zip(variables, new):
        variable.assign(value)
    self.merged.residual.assign(self.merged.residual + merged.residual)
