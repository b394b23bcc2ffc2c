"""The command line of `python -m clear.train`, apart from its main.

`flags` defines the flags in groups (`flag_help` prints them by group and
turns a flag error into one message); `defaults` holds the env-family
defaults; `validation` checks the flags, `configs` makes the run's configs
from them, `run_json` takes what a run's run.json decides (the network of
a run to test, the settings a resume keeps); `signals` is what SIGTERM and
SIGINT do. `clear/train.py` is the binary's main.
"""
