"""Reading what runs wrote: scalar summaries from event files (`events`),
which `python -m clear.plot` (clear/plot.py) turns into curves, tables and
figures. No TensorFlow: event files are parsed here.
"""
