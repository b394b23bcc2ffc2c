"""clear: IMPALA with CLEAR replay, plus PPG and SAC ports, in TF2 / Sonnet 2.

Modules are imported by their full path (`from clear.ops import vtrace`);
this package file stays light so that `envs` and `agents` can use
`clear.types` cheaply.
"""

__version__ = '0.1.0'
