"""The algorithms: the interface the runtime calls, and one package each.

`policy` holds `Policy`, the only thing the runtime (actors, the run loop,
checkpoints) knows of an algorithm, and `AgentConfig`; `registry` maps each
`--algorithm` name to its policy class and config. Each algorithm's package
has a `policy.py` that implements `Policy`, beside its config, networks and
losses: `impala` (IMPALA with CLEAR replay), `ppg`, and `sac` and `ddpg`
over what they share in `off_policy`.
"""
