"""The runtime: everything that runs an algorithm, the same for every one.

Actors step environments with a policy and cut unrolls (`actor`), many of
them locally or on Ray (`actor_pool`, `devices`); the run loop feeds their
unrolls through replay to the learner, checkpoints and resumes
(`run_loop`); around it, the logdir's lock (`run_lock`), the replay's
memory check (`resources`), progress lines (`progress`) and episode
recordings (`record`).
"""
