"""What the off-policy learners (SAC, DDPG) share: `config` fields,
`networks` (critic ensembles, action layouts, target networks), `segments`
(replayed transitions), `losses` (Q targets, critic loss, priorities) and
`policy` (the runtime side: own replay, learning_starts, counters).
"""
