"""Pure functions of run files (Polars, lazily, one ``collect()`` at the edge) and the budget
model (pure Python, :mod:`analyzers.budget`).

Imports ``traces`` and nothing else of ours: never ``loadgen`` (the replay engine),
``reports``, httpx, click or rich.
"""

__all__ = [
    "analysis",
    "budget",
    "cache",
    "calibration_points",
    "calibration_pool",
    "chunk_sums",
    "compare",
    "decompose",
    "errors",
    "exprs",
    "frames",
    "frontend_share",
    "goodput",
    "metrics",
    "request_frame",
    "server_metrics",
    "slo",
    "throughput",
    "timeseries",
    "validity",
]
