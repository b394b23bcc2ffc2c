"""Replay storage: the CLEAR replay buffer and its frame store.

`buffer` keeps whole unrolls (reservoir or FIFO, uniform or prioritized
sampling, in memory or memmapped) and assembles the learner's mixed batches;
`frame_store` keeps each distinct frame of a frame-stacked unroll once.
Numpy only: no TensorFlow, nothing of the algorithms.
"""
