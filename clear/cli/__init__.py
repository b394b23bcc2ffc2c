"""The command line of `python -m clear.train`: help grouped by purpose and
flag errors as one message (`flag_help`).
"""
