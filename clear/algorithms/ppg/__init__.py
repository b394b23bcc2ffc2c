"""Phasic Policy Gradient (Cobbe et al. 2020): `config`, `networks`,
`losses` (pure functions) and `policy` (the two phases of training).
"""
