"""The maths of learning: pure functions over time-major `[T, B, ...]` tensors.

V-trace (`vtrace`), the value estimators every algorithm picks from
(`value_estimators`), the IMPALA-CLEAR loss and its reward and return helpers
(`losses`), and what a learner step is checked and guarded with (`guards`).
Nothing here holds state or reads a flag; modules import only `clear.types`
and each other.
"""
