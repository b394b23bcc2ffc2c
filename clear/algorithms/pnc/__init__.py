"""Progress & Compress (`--continual_method=pnc`) over IMPALA: `learner`
(the progress and compress updates, the knowledge base's online EWC) and
`policy` (the two columns behind the `Policy` interface). The pure maths is
`clear.continual.pnc`, the two-column agent `agents.pnc`.
"""
