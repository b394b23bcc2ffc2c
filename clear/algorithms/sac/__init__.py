"""Soft Actor-Critic (Haarnoja et al. 2018): `losses` (pure functions) and
`policy` (config, networks and learner), over `clear.algorithms.off_policy`.
"""
