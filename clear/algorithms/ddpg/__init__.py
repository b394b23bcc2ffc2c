"""Deep Deterministic Policy Gradient (Lillicrap et al. 2016), and TD3 with
its options: `policy` (config, loss, networks and learner), over
`clear.algorithms.off_policy`.
"""
