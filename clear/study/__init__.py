"""Studies: methods x seeds of `clear.train` runs as one command
(`python -m clear.study`; docs/studies.md)."""
