"""IMPALA with CLEAR replay (V-trace, policy and value cloning).

`learner` holds the train step and the critic-pretraining step; the loss
itself is `clear.ops.losses`, the agent `agents`.
"""
