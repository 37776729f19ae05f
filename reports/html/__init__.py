"""The self-contained HTML report: the page and its sections for one run, and for
comparisons and sweeps.

Imports ``reports``, ``analyzers`` and ``traces``; never ``loadgen``, httpx or click.
"""

__all__ = [
    "report",
    "run",
]
