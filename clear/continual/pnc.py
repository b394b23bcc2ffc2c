"""Progress & Compress: the phases of a visit and the distillation loss.

Progress & Compress (Schwarz et al. 2018, arXiv 1805.06370) trains two
columns (`agents.pnc`): an active column that learns the task at hand, with
lateral connections from a knowledge base, and the knowledge base, which
keeps what every task taught. Each visit of a task has two phases:

  progress: the active column learns the task by IMPALA (its loss alone;
    the knowledge base is frozen and only feeds the laterals);
  compress: the active column is frozen and the knowledge base learns to
    act like it, minimising

      sum_{t, b} KL(pi_AC(.|x_t) || pi_KB(.|x_t))
        + lambda / 2 * sum_i F_i (theta^KB_i - theta*_i)^2,

    the KL (`distillation_loss`) on the states the active column visits,
    plus online EWC (`clear.continual.ewc`) on the knowledge base's
    weights: theta* are its weights at the end of the previous visit's
    compress phase, F its running Fisher, F <- gamma F + F_new at each task
    switch.

The active column acts in both phases (it collects the data, so the KL is
taken on its own state distribution); evaluation plays the knowledge base.
At each task switch the knowledge base's Fisher is added to the running one,
its weights become the anchor, and the active column is re-initialised (by
default) for the next task.

The paper gives no split of a visit between the phases; its authors told
the CORA authors (Powers et al. 2022, whose implementation this follows)
that progress took the first half of each task, compress the rest. Here
the phases split each period of the method's clock (a visit under given
task boundaries, an interval under hidden ones), and the phase of an
update is a pure function of the frames trained before it (`phase_at`), so
a resumed run is in the phase it was in.

The learner and the policy that run these are `clear.algorithms.pnc`.
"""

import collections
import math

import tensorflow as tf

PHASES = ('progress', 'compress')
PROGRESS, COMPRESS = range(2)

DistillationLoss = collections.namedtuple('DistillationLoss',
                                          ['total', 'per_step'])
DistillationLoss.__doc__ = """The pieces of `distillation_loss`.

Attributes:
  total: float32 scalar, `per_step` summed over time and batch.
  per_step: float32 `[T, B]`, KL(teacher || student) summed over the heads.
"""


def compress_start(length: int, progress_fraction: float) -> int:
  """The first frame offset within a period of `length` frames that is in
  the compress phase, ceil(progress_fraction * length).

  Raises:
    ValueError: length < 1, or a fraction outside (0, 1).
  """
  if length < 1:
    raise ValueError(f'compress_start: length must be >= 1, got {length}.')
  if not 0.0 < progress_fraction < 1.0:
    raise ValueError('compress_start: progress_fraction must be in (0, 1), '
                     f'got {progress_fraction}.')
  return math.ceil(progress_fraction * length)


def phase_at(frames: int, period, progress_fraction: float) -> int:
  """The phase (`PROGRESS` or `COMPRESS`) of the update that starts after
  `frames` frames, in `period` (a `clear.continual.clock.Period` holding
  them): progress while the frames into the period, frames - start, are
  below `compress_start` of its length, compress after.

  Raises:
    ValueError: frames before the period, or as `compress_start`.
  """
  if frames < period.start:
    raise ValueError(f'phase_at: frames {frames} are before the period '
                     f'{period}.')
  start = compress_start(period.end - period.start, progress_fraction)
  return PROGRESS if frames - period.start < start else COMPRESS


def distillation_loss(student_logits, teacher_logits) -> DistillationLoss:
  """KL(teacher || student) summed over heads, time and batch.

  T is time, B is batch, A_i the choices of head i. Per step,

    KL = sum_i sum_a p_i(a) (log p_i(a) - log q_i(a)),

  p the teacher's softmax (the active column in P&C), q the student's (the
  knowledge base). Gradients reach the student's logits only. Choices
  masked in both (logits at `agents.MASKED_LOGIT`, -1e9, as the agent
  masks unavailable actions) add exactly 0, and so does their gradient.

  Args:
    student_logits: dict name -> float32 `[T, B, A_i]`.
    teacher_logits: dict name -> float32 `[T, B, A_i]`, the same keys.

  Returns:
    `DistillationLoss`.

  Raises:
    ValueError: other keys, no head, a rank other than 3, or shapes that
      differ.
  """
  name = 'distillation_loss'
  if set(student_logits) != set(teacher_logits) or not student_logits:
    raise ValueError(f'{name}: student_logits and teacher_logits need the '
                     'same, non-empty, heads; got '
                     f'{sorted(student_logits)} and {sorted(teacher_logits)}.')
  per_step = []
  for key in sorted(student_logits):
    student = tf.convert_to_tensor(student_logits[key])
    teacher = tf.stop_gradient(tf.convert_to_tensor(teacher_logits[key]))
    for arg, tensor in (('student_logits', student),
                        ('teacher_logits', teacher)):
      if tensor.shape.rank != 3:
        raise ValueError(f'{name}: {arg}[{key!r}] must have rank 3 '
                         f'[T, B, A], got shape {tensor.shape}.')
    if not student.shape.is_compatible_with(teacher.shape):
      raise ValueError(f'{name}: head {key!r} has student shape '
                       f'{student.shape} and teacher shape {teacher.shape}.')
    teacher_log_probs = tf.nn.log_softmax(teacher)
    student_log_probs = tf.nn.log_softmax(student)
    per_step.append(tf.reduce_sum(
        tf.exp(teacher_log_probs) * (teacher_log_probs - student_log_probs),
        axis=-1))
  per_step = tf.add_n(per_step)
  return DistillationLoss(total=tf.reduce_sum(per_step), per_step=per_step)
