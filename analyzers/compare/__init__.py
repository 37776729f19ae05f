"""Comparisons of runs of one trace: A/B differences with bootstrap intervals, the samples
they resample, trace identity, and sweeps against offered load.
"""
