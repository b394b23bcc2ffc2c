"""Reading what runs wrote: scalar summaries from event files (`events`),
and the curves, summaries and figures `python -m clear.plot` makes of them.
No TensorFlow: event files are parsed here.
"""
