"""Continual learning: task sequences, their metrics, and the methods against
forgetting.
"""
