"""Comparisons of runs of one trace: A/B differences with bootstrap intervals, the samples
they resample, trace identity, sweeps against offered load, and the verdict a comparison
declares or withholds (and an offline verdict confirmed by measured checks).

Polars over run files; must not import ``loadgen``, ``reports`` or httpx.
"""

__all__ = [
    "bootstrap",
    "confirm",
    "crossover",
    "identity",
    "runs",
    "samples",
    "sweep",
    "verdict",
]
